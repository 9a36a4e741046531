//! The two ways a drive's bytes reach a GPU (and back): `gds`, one DMA
//! between the drive and GPU memory over the PCIe path under the platform's
//! peer-to-peer rules, and `bounce`, through a pinned buffer in host memory
//! on the GPU's socket (written once, read once). Where the platform refuses
//! peer-to-peer between a drive and a GPU, `gds` falls back to `bounce` for
//! that drive, as cuFile's compatibility mode does.

use std::fmt;
use std::str::FromStr;

use crate::network::Path;
use crate::topology::{NodeId, P2pDenied, Topology};
use crate::units::Bandwidth;

use super::StorageError;

/// A storage path, as a user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StoragePath {
    /// GPUDirect Storage: the drive DMAs straight into (or out of) GPU memory.
    Gds,
    /// Through a pinned bounce buffer in host memory.
    Bounce,
}

pub const STORAGE_PATHS: [StoragePath; 2] = [StoragePath::Gds, StoragePath::Bounce];

impl fmt::Display for StoragePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoragePath::Gds => "gds",
            StoragePath::Bounce => "bounce",
        })
    }
}

impl FromStr for StoragePath {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        STORAGE_PATHS.into_iter().find(|p| p.to_string() == text).ok_or_else(|| {
            format!(
                "unknown storage path {text:?}: use gds (drive <-> GPU memory by DMA) or bounce (through a pinned buffer in host memory)"
            )
        })
    }
}

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// From the drive into GPU memory (a load, a restore).
    Read,
    /// From GPU memory onto the drive (a checkpoint).
    Write,
}

/// How one drive's bytes reach one GPU.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// One DMA between drive and GPU.
    Direct {
        path: Path,
        /// Peer-to-peer through a root complex runs slower on some platforms.
        rate_cap: Option<Bandwidth>,
    },
    /// Staged in host memory: the drive's side, then the GPU's side (for a
    /// write, the GPU's side first).
    Bounce { drive_side: Path, gpu_side: Path },
}

/// The route of `drive`'s bytes to (Read) or from (Write) `gpu` on
/// `storage`, and whether `gds` fell back to `bounce`.
pub fn route(
    topo: &Topology,
    drive: NodeId,
    gpu: NodeId,
    storage: StoragePath,
    direction: Direction,
) -> Result<(Route, bool), StorageError> {
    let name = |n: NodeId| topo.node(n).name.clone();
    if storage == StoragePath::Gds {
        let (from, to) = if direction == Direction::Read { (drive, gpu) } else { (gpu, drive) };
        // The same peer-to-peer rule as between GPUs; refused across
        // sockets, the drive's bytes bounce.
        match topo.peer_to_peer(from, to) {
            Ok((path, rate_cap)) => return Ok((Route::Direct { path, rate_cap }, false)),
            Err(P2pDenied::NoPath) => {
                return Err(StorageError::NoPath(format!("no PCIe path between {} and {} on {}", name(drive), name(gpu), topo.name)));
            }
            Err(P2pDenied::AcrossSockets) => {}
        }
    }
    let memory = topo.host_memory(topo.node(gpu).socket).map_err(|e| StorageError::NoPath(e.to_string()))?;
    let reading = direction == Direction::Read;
    let to_memory = |device: NodeId, into: bool| {
        topo.memory_path(device, memory, !into)
            .ok_or_else(|| StorageError::NoPath(format!("{} cannot reach the host memory of {} on {}", name(device), name(gpu), topo.name)))
    };
    let route = Route::Bounce { drive_side: to_memory(drive, reading)?, gpu_side: to_memory(gpu, !reading)? };
    Ok((route, storage == StoragePath::Gds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hardware::HardwareModel;
    use crate::topology::{LinkKind, PresetOptions, preset};

    fn board(name: &str) -> Topology {
        preset(name, &PresetOptions::default(), &HardwareModel::base()).unwrap()
    }

    #[test]
    fn gds_under_one_switch_stays_under_it() {
        let topo = board("hgx-h200");
        let (found, fell_back) = route(&topo, topo.drives()[0], topo.gpus()[0], StoragePath::Gds, Direction::Read).unwrap();
        let Route::Direct { path, rate_cap } = found else { panic!("direct") };
        assert!(!fell_back && rate_cap.is_none());
        let names: Vec<String> = path.links.iter().map(|&l| topo.link_label(l)).collect();
        assert_eq!(names, ["nvme0 -> pcie-sw0 (PCIe gen4 x4)", "pcie-sw0 -> GPU0 (PCIe gen5 x16)"]);
    }

    #[test]
    fn gds_across_sockets_follows_the_platform() {
        // Intel: refused, so the drive's bytes bounce through host memory.
        let intel = board("hgx-h200");
        let remote = intel.drives()[2]; // on pcie-sw2, socket 1
        let (found, fell_back) = route(&intel, remote, intel.gpus()[0], StoragePath::Gds, Direction::Read).unwrap();
        assert!(fell_back && matches!(found, Route::Bounce { .. }));
        // AMD allows it, over the socket link and both root complexes.
        let amd = board("hgx-a100");
        let (found, fell_back) = route(&amd, amd.drives()[2], amd.gpus()[0], StoragePath::Gds, Direction::Read).unwrap();
        let Route::Direct { path, .. } = found else { panic!("direct on AMD") };
        assert!(!fell_back && path.links.iter().any(|&l| amd.link(l).kind == LinkKind::SocketLink));
    }

    #[test]
    fn gds_through_an_intel_root_complex_pays_its_factor() {
        let topo = board("pcie-gen5-8gpu");
        let drive = topo.drives()[0]; // on cpu0's root port
        let (found, _) = route(&topo, drive, topo.gpus()[0], StoragePath::Gds, Direction::Read).unwrap();
        let Route::Direct { path, rate_cap } = found else { panic!("direct") };
        assert_eq!(rate_cap, Some(topo.bottleneck(&path).scaled(0.833)));
    }

    #[test]
    fn bounce_writes_host_memory_on_the_gpus_socket_and_reads_it_back() {
        let topo = board("hgx-h200");
        let (found, _) = route(&topo, topo.drives()[0], topo.gpus()[0], StoragePath::Bounce, Direction::Read).unwrap();
        let Route::Bounce { drive_side, gpu_side } = found else { panic!("bounce") };
        let bus = |p: &Path, at: usize| matches!(topo.link(p.links[at]).kind, LinkKind::MemoryBus { .. });
        assert!(bus(&drive_side, drive_side.links.len() - 1) && bus(&gpu_side, 0), "into memory, then out of it");
        let (write, _) = route(&topo, topo.drives()[0], topo.gpus()[0], StoragePath::Bounce, Direction::Write).unwrap();
        let Route::Bounce { drive_side, gpu_side } = write else { panic!("bounce") };
        assert!(
            bus(&gpu_side, gpu_side.links.len() - 1) && bus(&drive_side, 0),
            "a checkpoint: from the GPU into memory, then to the drive"
        );
        assert!("dma".parse::<StoragePath>().unwrap_err().contains("gds"));
    }
}
