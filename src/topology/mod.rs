//! The server as a graph (petgraph): GPUs, PCIe switches, CPU sockets, host
//! memory, NVSwitches and NVMe drives joined by directed links, each with its
//! bandwidth per direction and latency; paths between nodes over each kind of
//! medium; presets, topology files and the importers of real machines'
//! topologies. Knows nothing of collectives.

mod drives;
mod edit;
mod error;
pub(crate) mod file;
pub mod import;
pub mod plausible;
mod presets;
mod rates;
mod resolve;
mod show;

use std::collections::VecDeque;
use std::fmt;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

pub use drives::{DriveLayout, Placement, drive_link_rates, preset_drives};
pub use edit::{Edit, Unchanged, resolve_edited};
pub use error::{PresetOption, TopologyError};
pub use file::{build as build_from_file, load_file};
pub use presets::{PRESET_MODELS, PRESETS, PresetOptions, preset};
pub(crate) use rates::LinkRates;
pub use resolve::{Blueprint, ResolveError, TopologySpec, blueprint, model_source, model_sources, resolve};
pub use show::{TopologyView, describe};

use crate::network::{LinkId, Network, Path};
use crate::units::{Bandwidth, Time};

/// Most GPUs a topology may hold: one server or NVLink domain. NVLink 5
/// joins at most 576 GPUs in one domain (NVIDIA, GB200 NVL576); 4,096
/// leaves room for successors while keeping a simulation's memory bounded.
pub const MAX_GPUS: usize = 4096;
pub const MAX_GPUS_REASON: &str = "one server or NVLink domain: NVLink 5 joins at most 576 GPUs";

/// Sockets (NUMA nodes) are numbered below this: a topology has at most
/// one socket a GPU (a GB200 superchip has one Grace for two).
pub const MAX_SOCKETS: u32 = MAX_GPUS as u32;

/// Index of a node in its topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    fn graph_index(self) -> NodeIndex {
        NodeIndex::new(self.0 as usize)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    Gpu,
    PcieSwitch,
    /// A CPU socket and its PCIe root complex.
    CpuSocket,
    /// The DRAM of one socket.
    HostMemory,
    /// The NVSwitch fabric of a board (its chips act as one non-blocking switch).
    NvSwitch,
    Nvme,
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeKind::Gpu => "GPU",
            NodeKind::PcieSwitch => "PCIe switch",
            NodeKind::CpuSocket => "CPU socket",
            NodeKind::HostMemory => "host memory",
            NodeKind::NvSwitch => "NVSwitch",
            NodeKind::Nvme => "NVMe drive",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// The CPU socket (NUMA node) this part belongs to.
    pub socket: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    Pcie {
        generation: String,
        lanes: u32,
    },
    NvLink {
        generation: String,
        links: u32,
    },
    /// UPI / Infinity Fabric between sockets.
    SocketLink,
    /// A socket's memory channels; reads and writes share this one capacity.
    MemoryBus {
        channels: u32,
    },
}

impl fmt::Display for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkKind::Pcie { generation, lanes } => write!(f, "PCIe {generation} x{lanes}"),
            LinkKind::NvLink { generation, links } => write!(f, "NVLink {generation} x{links}"),
            LinkKind::SocketLink => f.write_str("socket link"),
            LinkKind::MemoryBus { channels } => {
                write!(f, "memory bus, {channels} channels, read+write shared")
            }
        }
    }
}

/// One capacity of the network: a direction of a cable, or a shared bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub from: NodeId,
    pub to: NodeId,
    pub kind: LinkKind,
    /// Effective bandwidth, per direction (for a memory bus: in total).
    pub bandwidth: Bandwidth,
    pub latency: Time,
}

/// Platform rules that decide which transports may be used.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub p2p_across_sockets: bool,
    /// Peer-to-peer through a root complex runs at this fraction of the path.
    pub root_complex_p2p_factor: f64,
    /// NVSwitches reduce in the switch (NVLS).
    pub nvls: bool,
}

/// A server: its parts and links, and the rules of its platform.
#[derive(Debug, Clone)]
pub struct Topology {
    pub name: String,
    pub description: String,
    /// GPU model key in the hardware model.
    pub gpu_model: String,
    /// Host platform key in the hardware model.
    pub host: String,
    pub policy: Policy,
    graph: DiGraph<Node, LinkId>,
    links: Vec<Link>,
    gpus: Vec<NodeId>,
    /// The drive class (a key of the model's `[nvme]`) of each NVMe node.
    drive_models: Vec<(NodeId, String)>,
}

/// What kind of path a transfer may take between two nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Medium {
    /// GPU -> NVSwitch -> GPU.
    NvSwitch,
    /// A direct NVLink between the two GPUs.
    NvLinkDirect,
    /// PCIe switches, root complexes and socket links; no memory, no GPU in between.
    Pcie,
}

/// How two GPUs relate, in the words of `nvidia-smi topo -m`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    SelfGpu,
    NvLink(u32),
    /// Through at most one PCIe switch.
    Pix,
    /// Through several PCIe switches, no host bridge.
    Pxb,
    /// Through a CPU's host bridge.
    Phb,
    /// Across the link between sockets.
    Sys,
}

/// Why two PCIe devices may not DMA to each other directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pDenied {
    /// No PCIe path joins them.
    NoPath,
    /// The path crosses sockets and the platform refuses peer-to-peer there.
    AcrossSockets,
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Relation::SelfGpu => f.write_str("X"),
            Relation::NvLink(n) => write!(f, "NV{n}"),
            Relation::Pix => f.write_str("PIX"),
            Relation::Pxb => f.write_str("PXB"),
            Relation::Phb => f.write_str("PHB"),
            Relation::Sys => f.write_str("SYS"),
        }
    }
}

impl Topology {
    /// The rate of its slowest link (what bounds a run that outlasts the
    /// clock), or zero without links.
    pub fn slowest_link_rate(&self) -> crate::units::Bandwidth {
        self.links().iter().map(|l| l.bandwidth).min().unwrap_or(crate::units::Bandwidth(0))
    }

    pub fn new(name: impl Into<String>, gpu_model: impl Into<String>, host: impl Into<String>, policy: Policy) -> Topology {
        Topology {
            name: name.into(),
            description: String::new(),
            gpu_model: gpu_model.into(),
            host: host.into(),
            policy,
            graph: DiGraph::new(),
            links: Vec::new(),
            gpus: Vec::new(),
            drive_models: Vec::new(),
        }
    }

    pub fn add_node(&mut self, name: impl Into<String>, kind: NodeKind, socket: u32) -> NodeId {
        let index = self.graph.add_node(Node { name: name.into(), kind, socket });
        let id = NodeId(index.index() as u32);
        if kind == NodeKind::Gpu {
            self.gpus.push(id);
        }
        id
    }

    fn push_link(&mut self, from: NodeId, to: NodeId, kind: LinkKind, bandwidth: Bandwidth, latency: Time) -> LinkId {
        assert!(bandwidth.0 > 0, "link {} -> {} needs a bandwidth", self.node(from).name, self.node(to).name);
        let id = LinkId(self.links.len() as u32);
        self.links.push(Link { from, to, kind, bandwidth, latency });
        id
    }

    /// A full-duplex cable: two links, one per direction, each `bandwidth`.
    pub fn connect(&mut self, a: NodeId, b: NodeId, kind: LinkKind, bandwidth: Bandwidth, latency: Time) -> (LinkId, LinkId) {
        let forward = self.push_link(a, b, kind.clone(), bandwidth, latency);
        let backward = self.push_link(b, a, kind, bandwidth, latency);
        self.graph.add_edge(a.graph_index(), b.graph_index(), forward);
        self.graph.add_edge(b.graph_index(), a.graph_index(), backward);
        (forward, backward)
    }

    /// A half-duplex resource crossed both ways (a memory bus): one capacity.
    pub fn connect_shared(&mut self, a: NodeId, b: NodeId, kind: LinkKind, bandwidth: Bandwidth, latency: Time) -> LinkId {
        let link = self.push_link(a, b, kind, bandwidth, latency);
        self.graph.add_edge(a.graph_index(), b.graph_index(), link);
        self.graph.add_edge(b.graph_index(), a.graph_index(), link);
        link
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.graph[id.graph_index()]
    }

    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.graph.node_indices().map(|i| (NodeId(i.index() as u32), &self.graph[i]))
    }

    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id.index()]
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The GPUs, in index order (GPU 0 first).
    pub fn gpus(&self) -> &[NodeId] {
        &self.gpus
    }

    pub fn gpu(&self, index: usize) -> Result<NodeId, TopologyError> {
        self.gpus
            .get(index)
            .copied()
            .ok_or_else(|| TopologyError::Invalid(format!("{} has {} GPUs; GPU {index} does not exist", self.name, self.gpus.len())))
    }

    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.nodes().find(|(_, n)| n.name == name).map(|(id, _)| id)
    }

    pub fn nodes_of(&self, kind: NodeKind) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes().filter(move |(_, n)| n.kind == kind).map(|(id, _)| id)
    }

    pub fn has(&self, kind: NodeKind) -> bool {
        self.nodes_of(kind).next().is_some()
    }

    /// A fresh flow network with one capacity per link of this topology.
    pub fn network(&self) -> Network {
        Network::new(self.links.iter().map(|l| l.bandwidth))
    }

    /// A readable name for a link: "GPU0 -> nvswitch (NVLink gen4 x18)".
    pub fn link_label(&self, id: LinkId) -> String {
        let link = self.link(id);
        let (from, to) = (&self.node(link.from).name, &self.node(link.to).name);
        match link.kind {
            LinkKind::MemoryBus { .. } => format!("{from} <-> {to} ({})", link.kind),
            _ => format!("{from} -> {to} ({})", link.kind),
        }
    }

    /// The socket's host memory node.
    pub fn host_memory(&self, socket: u32) -> Result<NodeId, TopologyError> {
        self.nodes_of(NodeKind::HostMemory)
            .find(|&m| self.node(m).socket == socket)
            .ok_or_else(|| TopologyError::NoPath(format!("{} has no host memory on socket {socket}", self.name)))
    }

    /// Shortest path (fewest links) from `from` to `to` over `medium`, or None.
    pub fn path(&self, from: NodeId, to: NodeId, medium: Medium) -> Option<Path> {
        let direct_nvlink = || {
            self.graph
                .edges_connecting(from.graph_index(), to.graph_index())
                .find(|e| matches!(self.links[e.weight().index()].kind, LinkKind::NvLink { .. }))
                .map(|e| self.path_of(vec![*e.weight()]))
        };
        if medium == Medium::NvLinkDirect {
            return direct_nvlink();
        }
        // Into or out of a switch: its own link, found without a search.
        let at_switch = [from, to].iter().any(|&n| self.node(n).kind == NodeKind::NvSwitch);
        if medium == Medium::NvSwitch
            && at_switch
            && let Some(path) = direct_nvlink()
        {
            return Some(path);
        }
        let links = self.breadth_first(from, to, |link, via| match medium {
            Medium::NvSwitch => matches!(link.kind, LinkKind::NvLink { .. }) && via.is_none_or(|n| n.kind == NodeKind::NvSwitch),
            Medium::Pcie => {
                matches!(link.kind, LinkKind::Pcie { .. } | LinkKind::SocketLink)
                    && via.is_none_or(|n| matches!(n.kind, NodeKind::PcieSwitch | NodeKind::CpuSocket))
            }
            Medium::NvLinkDirect => unreachable!("handled above"),
        })?;
        Some(self.path_of(links))
    }

    /// Path from a device over PCIe into host memory (`reverse`: out of it).
    pub fn memory_path(&self, device: NodeId, memory: NodeId, reverse: bool) -> Option<Path> {
        let (from, to) = if reverse { (memory, device) } else { (device, memory) };
        let links = self.breadth_first(from, to, |link, via| {
            matches!(link.kind, LinkKind::Pcie { .. } | LinkKind::SocketLink | LinkKind::MemoryBus { .. })
                && via.is_none_or(|n| matches!(n.kind, NodeKind::PcieSwitch | NodeKind::CpuSocket))
        })?;
        Some(self.path_of(links))
    }

    pub fn path_of(&self, links: Vec<LinkId>) -> Path {
        let latency = links.iter().map(|&l| self.links[l.index()].latency).fold(Time::ZERO, |a, b| a + b);
        Path::new(links, latency)
    }

    /// Breadth-first search over links that `allowed(link, via)` accepts,
    /// where `via` is the node the link leads into unless it is the target.
    /// Neighbours are visited in insertion order: the same graph always gives
    /// the same path.
    fn breadth_first(&self, from: NodeId, to: NodeId, allowed: impl Fn(&Link, Option<&Node>) -> bool) -> Option<Vec<LinkId>> {
        if from == to {
            return Some(Vec::new());
        }
        let n = self.graph.node_count();
        let mut came_by: Vec<Option<LinkId>> = vec![None; n];
        let mut seen = vec![false; n];
        seen[from.0 as usize] = true;
        let mut queue = VecDeque::from([from]);
        while let Some(node) = queue.pop_front() {
            let mut edges: Vec<_> = self.graph.edges(node.graph_index()).collect();
            edges.sort_by_key(|e| e.id());
            for edge in edges {
                let next = NodeId(edge.target().index() as u32);
                if seen[next.0 as usize] {
                    continue;
                }
                let link = &self.links[edge.weight().index()];
                let via = (next != to).then(|| self.node(next));
                if !allowed(link, via) {
                    continue;
                }
                seen[next.0 as usize] = true;
                came_by[next.0 as usize] = Some(*edge.weight());
                if next == to {
                    let mut links = Vec::new();
                    let mut at = to;
                    while at != from {
                        let link = came_by[at.0 as usize].expect("every reached node has a predecessor");
                        links.push(link);
                        let l = &self.links[link.index()];
                        // A shared link is stored once, from one end: step to
                        // whichever end we did not arrive at.
                        at = if l.to == at { l.from } else { l.to };
                    }
                    links.reverse();
                    return Some(links);
                }
                queue.push_back(next);
            }
        }
        None
    }

    /// How two GPUs are connected, as `nvidia-smi topo -m` would say.
    pub fn relation(&self, a: NodeId, b: NodeId) -> Relation {
        if a == b {
            return Relation::SelfGpu;
        }
        let nvlinks = |path: &Path| {
            path.links
                .iter()
                .map(|l| match self.link(*l).kind {
                    LinkKind::NvLink { links, .. } => links,
                    _ => 0,
                })
                .min()
                .unwrap_or(0)
        };
        if let Some(path) = self.path(a, b, Medium::NvLinkDirect).or_else(|| self.path(a, b, Medium::NvSwitch)) {
            return Relation::NvLink(nvlinks(&path));
        }
        self.pcie_relation(a, b)
    }

    /// How two GPUs are connected over PCIe alone, whatever NVLink joins
    /// them: PIX, PXB, PHB or SYS (across sockets, or no PCIe path). The
    /// platform's peer-to-peer rules follow this path.
    pub fn pcie_relation(&self, a: NodeId, b: NodeId) -> Relation {
        if a == b {
            return Relation::SelfGpu;
        }
        match self.path(a, b, Medium::Pcie) {
            Some(path) => self.pcie_path_relation(&path),
            None => Relation::Sys,
        }
    }

    /// The platform's rule for one peer-to-peer DMA between PCIe devices
    /// (GPU to GPU, drive to GPU): the PCIe path from `from` to `to`,
    /// refused where its relation is SYS (across sockets) and the platform
    /// forbids that, and the rate cap a root complex puts on it where it
    /// passes through one (PHB).
    pub fn peer_to_peer(&self, from: NodeId, to: NodeId) -> Result<(Path, Option<Bandwidth>), P2pDenied> {
        let path = self.path(from, to, Medium::Pcie).ok_or(P2pDenied::NoPath)?;
        if self.pcie_path_relation(&path) == Relation::Sys && !self.policy.p2p_across_sockets {
            return Err(P2pDenied::AcrossSockets);
        }
        let rate_cap =
            self.path_crosses(&path, NodeKind::CpuSocket).then(|| self.bottleneck(&path).scaled(self.policy.root_complex_p2p_factor));
        Ok((path, rate_cap))
    }

    /// The PCIe relation a path between two devices gives them.
    fn pcie_path_relation(&self, path: &Path) -> Relation {
        let crosses_sockets = path.links.iter().any(|l| self.link(*l).kind == LinkKind::SocketLink);
        let through_cpu = self.path_crosses(path, NodeKind::CpuSocket);
        let switches = path.links.iter().filter(|l| self.node(self.link(**l).to).kind == NodeKind::PcieSwitch).count();
        if crosses_sockets {
            Relation::Sys
        } else if through_cpu {
            Relation::Phb
        } else if switches <= 1 {
            Relation::Pix
        } else {
            Relation::Pxb
        }
    }

    /// Whether `path` passes through a node of `kind` (not at its ends).
    pub fn path_crosses(&self, path: &Path, kind: NodeKind) -> bool {
        let n = path.links.len();
        path.links.iter().take(n.saturating_sub(1)).any(|l| self.node(self.link(*l).to).kind == kind)
    }

    /// The narrowest link of a path.
    pub fn bottleneck(&self, path: &Path) -> Bandwidth {
        path.links.iter().map(|l| self.link(*l).bandwidth).min().unwrap_or(Bandwidth(u64::MAX))
    }

    /// Total NVLink bandwidth out of a GPU, per direction.
    pub fn nvlink_bandwidth(&self, gpu: NodeId) -> Bandwidth {
        Bandwidth(
            self.graph
                .edges(gpu.graph_index())
                .map(|e| &self.links[e.weight().index()])
                .filter(|l| matches!(l.kind, LinkKind::NvLink { .. }))
                .map(|l| l.bandwidth.0)
                .sum(),
        )
    }

    /// Checks a built topology: GPUs exist, every link has a bandwidth, and
    /// every GPU reaches host memory.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.gpus.is_empty() {
            return Err(TopologyError::Invalid(format!("{} has no GPU", self.name)));
        }
        for &gpu in &self.gpus {
            let socket = self.node(gpu).socket;
            let memory = self.host_memory(socket).map_err(|e| TopologyError::Invalid(e.to_string()))?;
            if self.memory_path(gpu, memory, false).is_none() {
                return Err(TopologyError::Invalid(format!(
                    "{}: {} has no PCIe path to the host memory of socket {socket}",
                    self.name,
                    self.node(gpu).name
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hardware::HardwareModel;

    fn hgx(gpus: u32) -> Topology {
        preset("hgx-h200", &PresetOptions { gpus: Some(gpus), gpu: None, host: None }, &HardwareModel::base()).unwrap()
    }

    #[test]
    fn hgx_gpus_reach_each_other_through_the_switch() {
        let topo = hgx(8);
        let (a, b) = (topo.gpus()[0], topo.gpus()[5]);
        let path = topo.path(a, b, Medium::NvSwitch).expect("NVSwitch path");
        assert_eq!(path.links.len(), 2);
        assert_eq!(topo.relation(a, b), Relation::NvLink(18));
        assert!(topo.path(a, b, Medium::NvLinkDirect).is_none());
    }

    #[test]
    fn pcie_relations_follow_the_tree() {
        let topo = preset("pcie-gen4-8gpu", &PresetOptions::default(), &HardwareModel::base()).unwrap();
        let g = topo.gpus().to_vec();
        assert_eq!(topo.relation(g[0], g[1]), Relation::Pix);
        assert_eq!(topo.relation(g[0], g[2]), Relation::Phb);
        assert_eq!(topo.relation(g[0], g[7]), Relation::Sys);
    }

    #[test]
    fn drives_and_gpus_follow_one_peer_to_peer_rule() {
        // hgx-h200 is Intel: nothing peer-to-peer across sockets.
        let topo = preset("hgx-h200", &PresetOptions::default(), &HardwareModel::base()).unwrap();
        let (gpu, far_gpu, far_drive) = (topo.gpus()[0], topo.gpus()[7], topo.drives()[7]);
        assert_eq!(topo.node(far_drive).socket, topo.node(far_gpu).socket);
        assert_eq!(topo.peer_to_peer(gpu, far_gpu).unwrap_err(), P2pDenied::AcrossSockets);
        assert_eq!(topo.peer_to_peer(far_drive, gpu).unwrap_err(), P2pDenied::AcrossSockets);
        let (_, cap) = topo.peer_to_peer(topo.drives()[0], gpu).unwrap();
        assert_eq!(cap, None, "under one switch, no root complex to slow it");
    }

    #[test]
    fn host_memory_paths_share_the_memory_bus_both_ways() {
        let topo = hgx(2);
        let gpu = topo.gpus()[0];
        let memory = topo.host_memory(0).unwrap();
        let write = topo.memory_path(gpu, memory, false).unwrap();
        let read = topo.memory_path(gpu, memory, true).unwrap();
        assert_eq!(write.links.last(), read.links.first(), "one capacity for reads and writes");
    }
}
