//! Storage: NVMe drives against GPU memory. Owns the two storage paths
//! (`gds`, a DMA between drive and GPU under the platform's peer-to-peer
//! rules; `bounce`, through a pinned buffer in host memory), how one GPU's
//! I/O is cut into pieces and spread over RAID-0 members as tasks of a task
//! graph, and naming the resource a storage transfer is limited by. Knows
//! nothing of collectives or LLMs, and does not change the engine or the
//! network: storage flows are ordinary flows on the topology's links.

mod path;
mod stream;

use std::fmt;

pub use path::{Direction, Route, STORAGE_PATHS, StoragePath, route};
pub use stream::{Stream, StreamTasks, Target, add_stream};

use crate::network::LinkId;
use crate::topology::{LinkKind, NodeKind, Topology};

/// Why storage I/O cannot run as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("{0}")]
    NoPath(String),
    #[error("{0}")]
    Invalid(String),
    #[error("hardware model: {0}")]
    Model(String),
}

/// The kind of resource a link is, in the words a report uses for what
/// limits a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// A drive's own link (its read or write rate).
    Drives,
    /// The PCIe link of a GPU.
    GpuLink,
    /// The link from a PCIe switch up to its CPU.
    SwitchUplink,
    /// Any other PCIe link (a switch under a switch).
    Pcie,
    /// A socket's memory bus.
    HostMemory,
    /// The link between sockets.
    SocketLink,
    Nvlink,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Drives => "drives",
            Limit::GpuLink => "GPU PCIe link",
            Limit::SwitchUplink => "switch uplink",
            Limit::Pcie => "PCIe link",
            Limit::HostMemory => "host memory",
            Limit::SocketLink => "socket link",
            Limit::Nvlink => "NVLink",
        })
    }
}

/// What kind of resource `link` is.
pub fn limit_of(topo: &Topology, link: LinkId) -> Limit {
    let link = topo.link(link);
    let kinds = [topo.node(link.from).kind, topo.node(link.to).kind];
    match link.kind {
        LinkKind::MemoryBus { .. } => Limit::HostMemory,
        LinkKind::SocketLink => Limit::SocketLink,
        LinkKind::NvLink { .. } => Limit::Nvlink,
        LinkKind::Pcie { .. } if kinds.contains(&NodeKind::Nvme) => Limit::Drives,
        LinkKind::Pcie { .. } if kinds.contains(&NodeKind::Gpu) => Limit::GpuLink,
        LinkKind::Pcie { .. } if kinds.contains(&NodeKind::PcieSwitch) && kinds.contains(&NodeKind::CpuSocket) => Limit::SwitchUplink,
        LinkKind::Pcie { .. } => Limit::Pcie,
    }
}
