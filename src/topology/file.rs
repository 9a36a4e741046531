//! Builds a topology from a topology file, filling link bandwidths the file
//! leaves out from the hardware model, and checking names and kinds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{LinkKind, LinkRates, MAX_GPUS, MAX_GPUS_REASON, MAX_SOCKETS, NodeId, NodeKind, Policy, Topology, drive_link_rates};
use crate::config::hardware::{GpuModel, HardwareModel, HostPlatform, PcieSwitchChip};
use crate::config::topology::{LinkFile, LinkKindFile, NodeKindFile, TopologyFile};
use crate::config::{ConfigError, ConfigResult, parse_toml, read_text};
use crate::units::{Bandwidth, Time};

/// PCIe link widths (PCI Express Base Specification: x1, x2, x4, x8, x12,
/// x16, x32).
pub const PCIE_WIDTHS: [u32; 7] = [1, 2, 4, 8, 12, 16, 32];

fn link_kind_name(kind: LinkKindFile) -> &'static str {
    match kind {
        LinkKindFile::Pcie => "pcie",
        LinkKindFile::Nvlink => "nvlink",
        LinkKindFile::Socket => "socket",
        LinkKindFile::Memory => "memory",
    }
}

/// Reads and builds the topology file at `path` with `model`.
pub fn load_file(path: &Path, model: &HardwareModel) -> ConfigResult<Topology> {
    let raw: TopologyFile = parse_toml(path, &read_text(path)?)?;
    build(path, &raw, model)
}

/// Builds a topology file read from `path` (which errors name) with `model`.
pub fn build(path: &Path, raw: &TopologyFile, model: &HardwareModel) -> ConfigResult<Topology> {
    let invalid = |key: &str, message: String| ConfigError::invalid(path, key, message);
    let gpu_model = model.gpu(&raw.gpu).map_err(|m| invalid("gpu", m))?;
    let host = model.host(&raw.host).map_err(|m| invalid("host", m))?;
    // In-switch reduction needs an NVSwitch, and an architecture that has it.
    let has_nvswitch = raw.nodes.iter().any(|n| n.kind == NodeKindFile::Nvswitch);
    let arch_nvls = has_nvswitch && model.nccl_arch(gpu_model.arch).map(|a| a.nvls_efficiency > 0.0).unwrap_or(false);
    let policy = Policy {
        p2p_across_sockets: raw.policy.p2p_across_sockets.unwrap_or(host.p2p_across_sockets),
        root_complex_p2p_factor: host.root_complex_p2p_factor,
        nvls: raw.policy.nvls.unwrap_or(arch_nvls),
    };
    let mut topo = Topology::new(&raw.name, &raw.gpu, &raw.host, policy);
    topo.description = raw.description.clone();

    let gpu_count = raw.nodes.iter().filter(|n| n.kind == NodeKindFile::Gpu).count();
    if gpu_count > MAX_GPUS {
        return Err(invalid("node", format!("{gpu_count} GPUs: a topology holds at most {MAX_GPUS} ({MAX_GPUS_REASON})")));
    }
    let mut build = Build {
        path,
        raw,
        model,
        gpu_model,
        host,
        topo,
        by_name: BTreeMap::new(),
        chips: BTreeMap::new(),
        lanes_used: BTreeMap::new(),
        joined: BTreeMap::new(),
        ports_used: BTreeMap::new(),
        linked: BTreeSet::new(),
        pcie_trees: Trees::new(raw.nodes.len()),
    };
    build.add_nodes()?;
    build.read_chips()?;
    for (i, link) in raw.links.iter().enumerate() {
        build.add_link(i, link)?;
    }
    build.check_nodes()?;
    build.topo.validate().map_err(|e| invalid("node", e.to_string()))?;
    Ok(build.topo)
}

/// A topology file being built: the topology so far, and what the checks
/// of later links need of the earlier ones.
struct Build<'a> {
    path: &'a Path,
    raw: &'a TopologyFile,
    model: &'a HardwareModel,
    gpu_model: &'a GpuModel,
    host: &'a HostPlatform,
    topo: Topology,
    by_name: BTreeMap<&'a str, NodeId>,
    /// Switch chips, by node: checked before any link takes their defaults.
    chips: BTreeMap<NodeId, &'a PcieSwitchChip>,
    /// Lanes used at each chip (a package's logical switches together),
    /// and the node that names it.
    lanes_used: BTreeMap<String, (u32, usize)>,
    /// Each pair of nodes is joined by at most one link of a kind: (ends in
    /// order, kind) -> the link's index.
    joined: BTreeMap<(NodeId, NodeId, &'static str), usize>,
    /// NVLink ports each GPU uses so far.
    ports_used: BTreeMap<NodeId, u64>,
    /// Nodes some link joins, and the PCIe trees so far.
    linked: BTreeSet<NodeId>,
    pcie_trees: Trees,
}

/// A link's kind, and the rate and latency it has unless the file says.
type KindAndDefaults = (LinkKind, (Bandwidth, Time));

impl<'a> Build<'a> {
    fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::invalid(self.path, key, message)
    }

    /// Every node, named once, on a socket in range.
    fn add_nodes(&mut self) -> ConfigResult<()> {
        for (i, node) in self.raw.nodes.iter().enumerate() {
            let kind = match node.kind {
                NodeKindFile::Gpu => NodeKind::Gpu,
                NodeKindFile::PcieSwitch => NodeKind::PcieSwitch,
                NodeKindFile::Cpu => NodeKind::CpuSocket,
                NodeKindFile::Memory => NodeKind::HostMemory,
                NodeKindFile::Nvswitch => NodeKind::NvSwitch,
                NodeKindFile::Nvme => NodeKind::Nvme,
            };
            if node.name.trim().is_empty() {
                return Err(self.invalid(&format!("node[{i}].name"), "is empty: name each node (GPU0, cpu0, pcie-sw0, ...)".into()));
            }
            if node.socket >= MAX_SOCKETS {
                return Err(self.invalid(
                    &format!("node[{i}].socket"),
                    format!("{} is out of range: allowed 0 to {} (at most one socket a GPU)", node.socket, MAX_SOCKETS - 1),
                ));
            }
            let id = self.topo.add_node(&node.name, kind, node.socket);
            if self.by_name.insert(node.name.as_str(), id).is_some() {
                return Err(self.invalid(&format!("node[{i}].name"), format!("{:?} is used twice; node names must be unique", node.name)));
            }
        }
        Ok(())
    }

    /// The switch chips the pcie-switch nodes name.
    fn read_chips(&mut self) -> ConfigResult<()> {
        for (i, node) in self.raw.nodes.iter().enumerate() {
            if node.kind != NodeKindFile::PcieSwitch && (node.chip.is_some() || node.package.is_some()) {
                return Err(self.invalid(&format!("node[{i}]"), "only a pcie-switch node has a chip and a package".into()));
            }
            if node.package.is_some() && node.chip.is_none() {
                return Err(self.invalid(
                    &format!("node[{i}].package"),
                    "a package is a chip split into logical switches: name its `chip` too".into(),
                ));
            }
            if let Some(chip) = &node.chip {
                let chip = self.model.pcie_switch(chip).map_err(|m| self.invalid(&format!("node[{i}].chip"), m))?;
                self.chips.insert(NodeId(i as u32), chip);
            }
        }
        Ok(())
    }

    /// Link `i` of the file, checked against the links before it.
    fn add_link(&mut self, i: usize, link: &LinkFile) -> ConfigResult<()> {
        let key = |field: &str| format!("link[{i}].{field}");
        let end = |name: &str, field: &str| {
            self.by_name.get(name).copied().ok_or_else(|| {
                self.invalid(
                    &key(field),
                    format!("no node named {name:?}; nodes are: {}", self.by_name.keys().copied().collect::<Vec<_>>().join(", ")),
                )
            })
        };
        let (from, to) = (end(&link.from, "from")?, end(&link.to, "to")?);
        if from == to {
            return Err(self.invalid(&key("to"), format!("{:?} at both ends: a link joins two different nodes", link.from)));
        }
        self.linked.extend([from, to]);
        let kind_name = link_kind_name(link.kind);
        if let Some(first) = self.joined.insert((from.min(to), from.max(to), kind_name), i) {
            return Err(self.invalid(
                &key("to"),
                format!(
                    "{} and {} are already joined by link[{first}] ({kind_name}): one link a pair, with its width in `lanes` (PCIe) or `links` (NVLink)",
                    link.from, link.to
                ),
            ));
        }
        let kinds = (self.topo.node(from).kind, self.topo.node(to).kind);
        let (kind, default_rate) = match link.kind {
            LinkKindFile::Pcie => self.pcie(i, link, (from, to))?,
            LinkKindFile::Nvlink => self.nvlink(i, link, (from, to))?,
            LinkKindFile::Socket => {
                if kinds != (NodeKind::CpuSocket, NodeKind::CpuSocket) {
                    return Err(self.invalid(&key("kind"), "a socket link joins two cpu nodes".into()));
                }
                (LinkKind::SocketLink, (self.host.socket_link(), self.host.socket_link_latency))
            }
            LinkKindFile::Memory => {
                if kinds != (NodeKind::CpuSocket, NodeKind::HostMemory) {
                    return Err(self.invalid(&key("kind"), "a memory link goes from a cpu node to a memory node".into()));
                }
                let (rate, channels) = LinkRates { model: self.model }.memory(&self.raw.host).map_err(|m| self.invalid("host", m))?;
                (LinkKind::MemoryBus { channels }, (rate, Time::ZERO))
            }
        };
        let bandwidth = link.bandwidth.unwrap_or(default_rate.0);
        if bandwidth.0 == 0 {
            return Err(self.invalid(&key("bandwidth"), "must be more than zero".into()));
        }
        let latency = link.latency.unwrap_or(default_rate.1);
        // A drive hangs on one port, which is checked below.
        if matches!(kind, LinkKind::Pcie { .. }) && drive_end(&self.topo, from, to).is_none() && !self.pcie_trees.join(from, to) {
            return Err(self.invalid(
                &key("to"),
                format!(
                    "{} and {} are already joined through other PCIe links, so this one closes a loop: PCIe is a tree (each part hangs from one parent); leave it out",
                    link.from, link.to
                ),
            ));
        }
        if let Some((drive, port)) = drive_end(&self.topo, from, to) {
            return self.attach_drive(i, link, (drive, port), kind);
        }
        if matches!(kind, LinkKind::MemoryBus { .. }) {
            self.topo.connect_shared(from, to, kind, bandwidth, latency);
        } else {
            self.topo.connect(from, to, kind, bandwidth, latency);
        }
        Ok(())
    }

    /// A PCIe link `i` between `ends`: its generation (the file's, a chip's
    /// at either end, or the GPU's), its width, the lanes it takes of a
    /// switch chip, its rate and a hop's latency.
    fn pcie(&mut self, i: usize, link: &LinkFile, (from, to): (NodeId, NodeId)) -> ConfigResult<KindAndDefaults> {
        let key = |field: &str| format!("link[{i}].{field}");
        let chip = self.chips.get(&from).or_else(|| self.chips.get(&to)).copied();
        let generation = link
            .generation
            .clone()
            .or_else(|| chip.map(|c| c.generation.clone()))
            .unwrap_or_else(|| self.gpu_model.pcie_generation.clone());
        let lanes = link.lanes.unwrap_or(16);
        if !PCIE_WIDTHS.contains(&lanes) {
            return Err(self.invalid(&key("lanes"), format!("x{lanes} is no PCIe link width: use 1, 2, 4, 8, 12, 16 or 32")));
        }
        for switch in [from, to].into_iter().filter(|n| self.chips.contains_key(n)) {
            let node = &self.raw.nodes[switch.0 as usize];
            let chip = self.chips[&switch];
            let package = node.package.clone().unwrap_or_else(|| node.name.clone());
            let used = self.lanes_used.entry(package.clone()).or_insert((0, switch.0 as usize));
            used.0 += lanes;
            let used = used.0;
            if used > chip.lanes {
                return Err(self.invalid(
                    &key("lanes"),
                    format!(
                        "{package} ({}) has {} lanes, and its links take {used} with this one: narrow a link or add a switch",
                        node.chip.as_deref().unwrap_or_default(),
                        chip.lanes,
                    ),
                ));
            }
        }
        let (rate, hop) = LinkRates { model: self.model }.pcie(&generation, lanes).map_err(|m| self.invalid(&key("generation"), m))?;
        Ok((LinkKind::Pcie { generation, lanes }, (rate, chip.map_or(hop, |c| c.hop_latency))))
    }

    /// An NVLink bond `i` between `ends`: a GPU at one end at least, and
    /// no more links than each GPU end has ports left.
    fn nvlink(&mut self, i: usize, link: &LinkFile, (from, to): (NodeId, NodeId)) -> ConfigResult<KindAndDefaults> {
        let key = |field: &str| format!("link[{i}].{field}");
        let generation = link.generation.clone().unwrap_or_else(|| self.gpu_model.nvlink_generation.clone());
        let links = link.links.unwrap_or(self.gpu_model.nvlink_links);
        let gpu = |n: NodeId| self.topo.node(n).kind == NodeKind::Gpu;
        if !gpu(from) && !gpu(to) {
            return Err(self.invalid(&key("kind"), "an NVLink must have a GPU at one end at least".into()));
        }
        let ports = u64::from(self.gpu_model.nvlink_links);
        for end in [from, to].into_iter().filter(|&n| self.topo.node(n).kind == NodeKind::Gpu) {
            let used = self.ports_used.entry(end).or_insert(0);
            *used += u64::from(links);
            let used = *used;
            if links == 0 || used > ports {
                return Err(self.invalid(
                    &key("links"),
                    format!(
                        "{links} links: {} has {ports} NVLink ports ({}), {} of them used by its links so far; a bond takes 1 to the ports left",
                        self.topo.node(end).name,
                        self.raw.gpu,
                        used - u64::from(links)
                    ),
                ));
            }
        }
        let rate = LinkRates { model: self.model }.nvlink(&generation, links).map_err(|m| self.invalid(&key("generation"), m))?;
        Ok((LinkKind::NvLink { generation, links }, rate))
    }

    /// Link `i`, of `kind`, hangs `drive` on `port`: a PCIe link to a switch
    /// or a CPU, the drive's only one, at its class's rates.
    fn attach_drive(&mut self, i: usize, link: &LinkFile, (drive, port): (NodeId, NodeId), kind: LinkKind) -> ConfigResult<()> {
        let key = |field: &str| format!("link[{i}].{field}");
        let node = &self.raw.nodes[drive.0 as usize];
        let LinkKind::Pcie { generation, lanes } = kind else {
            return Err(self.invalid(&key("kind"), format!("drive {} needs a pcie link", node.name)));
        };
        if !matches!(self.topo.node(port).kind, NodeKind::PcieSwitch | NodeKind::CpuSocket) {
            return Err(self.invalid(&key("to"), format!("drive {} must hang on a pcie-switch or a cpu node", node.name)));
        }
        if self.topo.drive_model(drive).is_some() {
            return Err(self.invalid(&key("from"), format!("drive {} has a second link; a drive hangs on one port", node.name)));
        }
        let class = node.drive.clone().unwrap_or_else(|| generation.clone());
        let drive_key = if node.drive.is_some() { format!("node[{}].drive", drive.0) } else { key("generation") };
        let (read, write, drive_latency, _) = drive_link_rates(self.model, &class, &generation).map_err(|m| self.invalid(&drive_key, m))?;
        let rates = link.bandwidth.map_or((read, write), |b| (b, b));
        self.topo.connect_drive(drive, port, &class, LinkKind::Pcie { generation, lanes }, rates, link.latency.unwrap_or(drive_latency));
        Ok(())
    }

    /// Every drive hangs on a port, every NVSwitch has links, and only
    /// drives have a drive class.
    fn check_nodes(&self) -> ConfigResult<()> {
        for (i, node) in self.raw.nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            if node.kind == NodeKindFile::Nvme && self.topo.drive_model(id).is_none() {
                return Err(
                    self.invalid(&format!("node[{i}]"), format!("drive {} has no pcie link to a pcie-switch or cpu node", node.name))
                );
            }
            if node.kind == NodeKindFile::Nvswitch && !self.linked.contains(&id) {
                return Err(self.invalid(
                    &format!("node[{i}]"),
                    format!("NVSwitch {} has no links: join GPUs to it with nvlink links, or leave it out", node.name),
                ));
            }
            if node.drive.is_some() && node.kind != NodeKindFile::Nvme {
                return Err(self.invalid(&format!("node[{i}].drive"), "only an nvme node has a drive class".into()));
            }
        }
        Ok(())
    }
}

/// Which nodes links have joined so far, as disjoint sets (union-find with
/// path halving): a link between two nodes of one set closes a loop.
struct Trees {
    parent: Vec<usize>,
}

impl Trees {
    fn new(nodes: usize) -> Trees {
        Trees { parent: (0..nodes).collect() }
    }

    fn root(&mut self, mut node: usize) -> usize {
        while self.parent[node] != node {
            self.parent[node] = self.parent[self.parent[node]];
            node = self.parent[node];
        }
        node
    }

    /// Joins the sets of `a` and `b`; false if they were one already.
    fn join(&mut self, a: NodeId, b: NodeId) -> bool {
        let (a, b) = (self.root(a.0 as usize), self.root(b.0 as usize));
        self.parent[a] = b;
        a != b
    }
}

/// If one end of a link is an NVMe drive: (the drive, the other end).
fn drive_end(topo: &Topology, from: NodeId, to: NodeId) -> Option<(NodeId, NodeId)> {
    match (topo.node(from).kind, topo.node(to).kind) {
        (NodeKind::Nvme, _) => Some((from, to)),
        (_, NodeKind::Nvme) => Some((to, from)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_switch_chip_lends_its_generation_and_latency_and_bounds_its_lanes() {
        // `gpus` H100s (Gen5) under one PEX88096 (Gen4, 96 lanes), its x16
        // uplink to the socket.
        let board = |gpus: usize| {
            let mut text = String::from("name = \"t\"\ngpu = \"h100\"\nhost = \"spr-2s\"\n");
            text += "[[node]]\nname = \"cpu0\"\nkind = \"cpu\"\n[[node]]\nname = \"sw0\"\nkind = \"pcie-switch\"\nchip = \"pex88096\"\n";
            text += "[[node]]\nname = \"mem0\"\nkind = \"memory\"\n[[link]]\nfrom = \"cpu0\"\nto = \"mem0\"\nkind = \"memory\"\n";
            text += "[[link]]\nfrom = \"sw0\"\nto = \"cpu0\"\nkind = \"pcie\"\n";
            for g in 0..gpus {
                text +=
                    &format!("[[node]]\nname = \"GPU{g}\"\nkind = \"gpu\"\n[[link]]\nfrom = \"GPU{g}\"\nto = \"sw0\"\nkind = \"pcie\"\n");
            }
            text
        };
        let raw: TopologyFile = parse_toml(Path::new("t.toml"), &board(5)).unwrap();
        let topo = build(Path::new("t.toml"), &raw, &HardwareModel::base()).unwrap_or_else(|e| panic!("{e}"));
        let link = topo.links().iter().find(|l| l.from == topo.gpus()[0]).unwrap();
        assert_eq!(link.kind, LinkKind::Pcie { generation: "gen4".into(), lanes: 16 }, "the chip's generation, not the GPU's");
        assert_eq!(link.latency, "0.105us".parse().unwrap(), "the chip's port-to-port latency");
        // Six x16 links fill its 96 lanes; a seventh is refused by key.
        let error = error_of(&board(6));
        assert!(error.contains("key `link[7].lanes`") && error.contains("sw0 (pex88096) has 96 lanes") && error.contains("112"), "{error}");
    }
    use super::*;

    /// Two H100 under one socket, with `links` appended.
    fn two_gpus(links: &str) -> String {
        let mut text = String::from("name = \"t\"\ngpu = \"h100\"\nhost = \"spr-2s\"\n");
        for (name, kind) in [("cpu0", "cpu"), ("mem0", "memory"), ("GPU0", "gpu"), ("GPU1", "gpu")] {
            text += &format!("[[node]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
        }
        for (from, to, kind) in [("cpu0", "mem0", "memory"), ("GPU0", "cpu0", "pcie"), ("GPU1", "cpu0", "pcie")] {
            text += &format!("[[link]]\nfrom = \"{from}\"\nto = \"{to}\"\nkind = \"{kind}\"\n");
        }
        text + links
    }

    fn error_of(text: &str) -> String {
        let raw: TopologyFile = parse_toml(Path::new("t.toml"), text).unwrap();
        build(Path::new("t.toml"), &raw, &HardwareModel::base()).unwrap_err().to_string()
    }

    const NVLINK: &str = "[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"nvlink\"\n";

    #[test]
    fn a_good_file_builds() {
        let raw: TopologyFile = parse_toml(Path::new("t.toml"), &two_gpus(&format!("{NVLINK}links = 4\n"))).unwrap();
        let topo = build(Path::new("t.toml"), &raw, &HardwareModel::base()).unwrap();
        assert_eq!(topo.gpus().len(), 2);
    }

    #[test]
    fn self_loops_and_second_links_between_a_pair_are_refused() {
        let error = error_of(&two_gpus("[[link]]\nfrom = \"GPU0\"\nto = \"GPU0\"\nkind = \"nvlink\"\n"));
        assert!(error.contains("key `link[3].to`") && error.contains("both ends"), "{error}");
        let error = error_of(&two_gpus(&format!(
            "{NVLINK}links = 2\n{}links = 2\n",
            NVLINK.replace("\"GPU0\"\nto = \"GPU1\"", "\"GPU1\"\nto = \"GPU0\"")
        )));
        assert!(error.contains("key `link[4].to`") && error.contains("already joined by link[3]"), "{error}");
    }

    #[test]
    fn empty_names_far_sockets_lone_switches_and_pcie_loops_are_refused_by_key() {
        let error = error_of(&two_gpus("").replacen("name = \"GPU1\"", "name = \"\"", 1));
        assert!(error.contains("key `node[3].name`") && error.contains("empty"), "{error}");
        let error = error_of(&two_gpus("").replacen("kind = \"gpu\"", "kind = \"gpu\"\nsocket = 4000000000", 1));
        assert!(error.contains("key `node[2].socket`") && error.contains("4095"), "{error}");
        let error = error_of(&two_gpus("[[node]]\nname = \"nvswitch\"\nkind = \"nvswitch\"\n"));
        assert!(error.contains("key `node[4]`") && error.contains("no links"), "{error}");
        let error = error_of(&two_gpus("[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"pcie\"\n"));
        assert!(error.contains("key `link[3].to`") && error.contains("loop"), "{error}");
    }

    #[test]
    fn widths_and_bonds_must_exist_on_real_hardware() {
        let error = error_of(&two_gpus("[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"pcie\"\nlanes = 3\n"));
        assert!(error.contains("key `link[3].lanes`") && error.contains("x3") && error.contains("16"), "{error}");
        let error = error_of(&two_gpus(&format!("{NVLINK}links = 4000000000\n")));
        assert!(error.contains("key `link[3].links`") && error.contains("18 NVLink ports"), "{error}");
        let error = error_of(&two_gpus(&format!("{NVLINK}links = 0\n")));
        assert!(error.contains("key `link[3].links`"), "{error}");
    }
}
