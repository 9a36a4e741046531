//! The server as a graph (petgraph): GPUs, PCIe switches, CPU sockets, host
//! memory, NVSwitches and NVMe drives joined by directed links, each with its
//! bandwidth per direction and latency; paths between nodes over each kind of
//! medium; presets, topology files and the importers of real machines'
//! topologies. Knows nothing of collectives.

mod drives;
mod file;
pub mod import;
mod presets;
mod show;

use std::collections::VecDeque;
use std::fmt;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

pub use drives::{DriveLayout, Placement, drive_link_rates, preset_drives};
pub use file::{build as build_from_file, load_file};
pub use presets::{PRESETS, PresetOptions, preset, preset_models};
pub use show::describe;

use crate::config::hardware::{self, HardwareModel, ModelSource};
use crate::config::topology::TopologyFile;
use crate::config::{parse_toml, read_text};
use crate::network::{LinkId, Network, Path};
use crate::units::{Bandwidth, Time};

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

/// Why a path could not be found or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("{0}")]
    NoPath(String),
    #[error("{0}")]
    Invalid(String),
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
        if medium == Medium::NvLinkDirect {
            let edge = self
                .graph
                .edges_connecting(from.graph_index(), to.graph_index())
                .find(|e| matches!(self.links[e.weight().index()].kind, LinkKind::NvLink { .. }))?;
            return Some(self.path_of(vec![*edge.weight()]));
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
        let Some(path) = self.path(a, b, Medium::Pcie) else {
            return Relation::Sys;
        };
        let crosses_sockets = path.links.iter().any(|l| self.link(*l).kind == LinkKind::SocketLink);
        let through_cpu = self.path_crosses(&path, NodeKind::CpuSocket);
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

/// What a user names as a topology: a preset with options, or a file.
#[derive(Debug, Clone, Default)]
pub struct TopologySpec {
    /// A preset name or the path of a topology file.
    pub name: String,
    pub options: PresetOptions,
    /// Extra hardware model overlays (shipped names or files), applied last.
    pub models: Vec<String>,
}

/// A model overlay named in a file or on the command line: a shipped model
/// by name, or a file (relative to `base_dir` if not absolute).
pub fn model_source(name: &str, base_dir: &std::path::Path) -> ModelSource {
    match hardware::shipped(name) {
        Some(source) if !name.ends_with(".toml") => source,
        _ => {
            let path = std::path::Path::new(name);
            ModelSource::File(if path.is_absolute() { path.to_path_buf() } else { base_dir.join(path) })
        }
    }
}

/// What a topology is built from, kept so that it can be built again under
/// another hardware model (a fit changes link rates and hop latencies).
#[derive(Debug, Clone)]
pub enum Blueprint {
    Preset { name: String, options: PresetOptions },
    File { path: std::path::PathBuf, raw: TopologyFile },
}

impl Blueprint {
    /// The topology under `model`.
    pub fn build(&self, model: &HardwareModel) -> Result<Topology, crate::Error> {
        match self {
            Blueprint::Preset { name, options } => Ok(preset(name, options, model)?),
            Blueprint::File { path, raw } => Ok(build_from_file(path, raw, model)?),
        }
    }
}

/// Builds the topology a user named, with the hardware model it uses
/// (the base, the preset's or file's calibrated overlays, then the user's).
/// A file is a TOML topology file, or, told by its content, the output of
/// `nvidia-smi topo -m` or NCCL's topology dump, imported first (with
/// `options.gpu` as the GPU model where given).
pub fn resolve(spec: &TopologySpec) -> Result<(Topology, HardwareModel), crate::Error> {
    let (blueprint, model) = blueprint(spec)?;
    Ok((blueprint.build(&model)?, model))
}

/// What [`resolve`] builds from, and the hardware model.
pub fn blueprint(spec: &TopologySpec) -> Result<(Blueprint, HardwareModel), crate::Error> {
    let here = std::path::Path::new(".");
    let user: Vec<ModelSource> = spec.models.iter().map(|m| model_source(m, here)).collect();
    let path = std::path::Path::new(&spec.name);
    let looks_like_file = [".toml", ".txt", ".xml"].iter().any(|ext| spec.name.ends_with(ext)) || spec.name.contains('/') || path.is_file();
    if looks_like_file {
        let text = read_text(path)?;
        let (raw, model) = match import::Format::detect(&text) {
            Some(format) => {
                // An imported file names no overlays: the base and the user's.
                let model = HardwareModel::load(&user)?;
                let options = import::ImportOptions { gpu: spec.options.gpu.clone(), host: None };
                (import::parse(path, &text, format, &options, &model)?, model)
            }
            None => {
                let raw: TopologyFile = parse_toml(path, &text)?;
                let base_dir = path.parent().unwrap_or(here);
                let mut overlays: Vec<ModelSource> = raw.models.iter().map(|m| model_source(m, base_dir)).collect();
                overlays.extend(user);
                let model = HardwareModel::load(&overlays)?;
                (raw, model)
            }
        };
        let blueprint = Blueprint::File { path: path.to_path_buf(), raw };
        let topology = blueprint.build(&model)?;
        if let Some(gpus) = spec.options.gpus
            && (gpus as usize > topology.gpus().len() || gpus == 0)
        {
            return Err(TopologyError::Invalid(format!(
                "{} has {} GPUs; --gpus must be 1 to {}",
                spec.name,
                topology.gpus().len(),
                topology.gpus().len()
            ))
            .into());
        }
        return Ok((blueprint, model));
    }
    let mut overlays: Vec<ModelSource> = preset_models(&spec.name)
        .iter()
        .map(|name| hardware::shipped(name).unwrap_or_else(|| panic!("preset {} names model {name}, which is not shipped", spec.name)))
        .collect();
    overlays.extend(user);
    let model = HardwareModel::load(&overlays)?;
    let blueprint = Blueprint::Preset { name: spec.name.clone(), options: spec.options.clone() };
    blueprint.build(&model)?;
    Ok((blueprint, model))
}

/// Builds the link bandwidths of a preset or file from the hardware model.
pub(crate) struct LinkRates<'m> {
    pub model: &'m HardwareModel,
}

impl LinkRates<'_> {
    pub fn pcie(&self, generation: &str, lanes: u32) -> Result<(Bandwidth, Time), String> {
        let g = self.model.pcie(generation)?;
        Ok((g.lane_rate.scaled(f64::from(lanes) * g.efficiency), g.hop_latency))
    }

    pub fn nvlink(&self, generation: &str, links: u32) -> Result<(Bandwidth, Time), String> {
        let g = self.model.nvlink(generation)?;
        Ok((g.link_rate.scaled(f64::from(links) * g.efficiency), g.hop_latency))
    }

    pub fn memory(&self, host: &str) -> Result<(Bandwidth, u32), String> {
        let h = self.model.host(host)?;
        Ok((h.memory_channel_rate.scaled(f64::from(h.memory_channels) * h.memory_efficiency), h.memory_channels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hgx(gpus: u32) -> Topology {
        preset("hgx-h200", &PresetOptions { gpus: Some(gpus), gpu: None }, &HardwareModel::base()).unwrap()
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
    fn host_memory_paths_share_the_memory_bus_both_ways() {
        let topo = hgx(2);
        let gpu = topo.gpus()[0];
        let memory = topo.host_memory(0).unwrap();
        let write = topo.memory_path(gpu, memory, false).unwrap();
        let read = topo.memory_path(gpu, memory, true).unwrap();
        assert_eq!(write.links.last(), read.links.first(), "one capacity for reads and writes");
    }
}
