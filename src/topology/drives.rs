//! NVMe drives in a topology: where they sit (on the GPUs' PCIe switches or
//! on the CPUs' root ports), the rates of a drive's link (its vendor's read
//! figure up, its write figure down), the drive layouts of the presets with
//! their sources, and a topology's drives replaced by another layout. Knows
//! nothing of storage paths or workloads.

use std::fmt;
use std::str::FromStr;

use petgraph::visit::EdgeRef;

use super::{LinkKind, NodeId, NodeKind, Topology, TopologyError};
use crate::config::hardware::HardwareModel;
use crate::network::LinkId;
use crate::units::{Bandwidth, Time};

/// Where a layout's drives hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Placement {
    /// On the PCIe switches that carry GPUs, spread over them in order (HGX
    /// boards: drives beside two GPUs and their NICs).
    Switch,
    /// On the CPU sockets' root ports, spread over the sockets.
    RootPort,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Switch => "switch",
            Placement::RootPort => "root-port",
        })
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "switch" => Ok(Placement::Switch),
            "root-port" => Ok(Placement::RootPort),
            other => Err(format!(
                "unknown placement {other:?}: use \"switch\" (on the GPUs' PCIe switches) or \"root-port\" (on the CPUs' root ports)"
            )),
        }
    }
}

/// The drive class of a topology that names none.
pub const DEFAULT_DRIVE: &str = "gen4";

/// Drives to put on a topology: how many, of which class, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveLayout {
    pub count: u32,
    /// A key of the hardware model's `[nvme]`.
    pub drive: String,
    pub placement: Placement,
}

/// The drives a preset board ships with.
pub fn preset_drives(name: &str) -> Option<DriveLayout> {
    let layout = |count, drive: &str, placement| Some(DriveLayout { count, drive: drive.to_string(), placement });
    match name {
        // NVIDIA DGX A100, DGX H100 and DGX B200 user guides: eight 3.84 TB
        // U.2 NVMe data drives; the DGX A100 block diagram hangs them on the
        // four PCIe switches that carry the GPUs and NICs, two a switch.
        // Gen4 is assumed for all (U.2 data-centre drives of their time).
        "hgx-h100" | "hgx-h200" | "hgx-h20" | "hgx-a100" | "hgx-b200" | "h20-nvlink-mesh" => layout(8, "gen4", Placement::Switch),
        // Assumed: 8-GPU PCIe servers give their switches to the GPUs and
        // wire their NVMe bays to the CPUs; two drives a socket.
        "pcie-gen3-8gpu" | "pcie-gen4-8gpu" => layout(4, "gen4", Placement::RootPort),
        "pcie-gen5-8gpu" => layout(4, "gen5", Placement::RootPort),
        _ => None,
    }
}

/// The link of a drive of class `drive` on a port of `port_generation`:
/// (rate up, as the drive reads; rate down, as it writes; latency; the
/// generation the link runs at). On a slower port the drive keeps the same
/// share of the port's raw rate as of its own.
pub fn drive_link_rates(model: &HardwareModel, drive: &str, port_generation: &str) -> Result<(Bandwidth, Bandwidth, Time, String), String> {
    let spec = model.drive(drive)?;
    let own = model.pcie(&spec.pcie_generation)?;
    let port = model.pcie(port_generation)?;
    let (generation, link) = if port.lane_rate < own.lane_rate { (port_generation, port) } else { (spec.pcie_generation.as_str(), own) };
    let share = link.lane_rate.bytes_per_sec() / own.lane_rate.bytes_per_sec();
    Ok((spec.read.scaled(share), spec.write.scaled(share), link.hop_latency, generation.to_string()))
}

impl Topology {
    /// The NVMe drives, in node order.
    pub fn drives(&self) -> Vec<NodeId> {
        self.nodes_of(NodeKind::Nvme).collect()
    }

    /// The drive class of an NVMe node.
    pub fn drive_model(&self, drive: NodeId) -> Option<&str> {
        self.drive_models.iter().find(|(node, _)| *node == drive).map(|(_, key)| key.as_str())
    }

    /// The layout of this topology's drives: how many, the first one's class
    /// and where it hangs. A topology without drives gets Gen4 drives on the
    /// GPUs' switches, or on the root ports where it has no such switch.
    pub fn drive_layout(&self) -> DriveLayout {
        let drives = self.drives();
        let port = |drive: NodeId| self.graph.neighbors(drive.graph_index()).next().map(|n| self.node(NodeId(n.index() as u32)).kind);
        let placement = match drives.first().and_then(|&d| port(d)) {
            Some(NodeKind::CpuSocket) => Placement::RootPort,
            Some(_) => Placement::Switch,
            None if self.gpu_switches().is_empty() => Placement::RootPort,
            None => Placement::Switch,
        };
        let drive = drives.first().and_then(|&d| self.drive_model(d)).unwrap_or(DEFAULT_DRIVE).to_string();
        DriveLayout { count: drives.len() as u32, drive, placement }
    }

    /// PCIe switches with a GPU directly on them.
    fn gpu_switches(&self) -> Vec<NodeId> {
        self.nodes_of(NodeKind::PcieSwitch).filter(|&switch| self.gpus.iter().any(|&g| self.link_between(g, switch).is_some())).collect()
    }

    /// Adds drive `name` of class `drive` on `port` (a PCIe switch or a CPU
    /// socket), its link's rates taken from the model.
    pub fn add_drive(&mut self, name: &str, drive: &str, port: NodeId, model: &HardwareModel) -> Result<NodeId, String> {
        let port_node = self.node(port).clone();
        if !matches!(port_node.kind, NodeKind::PcieSwitch | NodeKind::CpuSocket) {
            return Err(format!("drive {name} must hang on a PCIe switch or a CPU, not on {} ({})", port_node.name, port_node.kind));
        }
        // A port's generation is its links'; a CPU with none yet runs the
        // GPUs' generation.
        let port_generation = match self.port_generation(port) {
            Some(generation) => generation,
            None => model.gpu(&self.gpu_model)?.pcie_generation.clone(),
        };
        let (read, write, latency, generation) = drive_link_rates(model, drive, &port_generation)?;
        let lanes = model.drive(drive)?.lanes;
        let node = self.add_node(name, NodeKind::Nvme, port_node.socket);
        self.connect_drive(node, port, drive, LinkKind::Pcie { generation, lanes }, (read, write), latency);
        Ok(node)
    }

    /// Joins `drive` to `port` by a link carrying `up` from the drive and
    /// `down` into it, per direction.
    pub(super) fn connect_drive(
        &mut self,
        drive: NodeId,
        port: NodeId,
        class: &str,
        kind: LinkKind,
        (up, down): (Bandwidth, Bandwidth),
        latency: Time,
    ) {
        let forward = self.push_link(drive, port, kind.clone(), up, latency);
        let backward = self.push_link(port, drive, kind, down, latency);
        self.graph.add_edge(drive.graph_index(), port.graph_index(), forward);
        self.graph.add_edge(port.graph_index(), drive.graph_index(), backward);
        self.drive_models.push((drive, class.to_string()));
    }

    /// The PCIe generation of a switch's or CPU's links (its fastest).
    fn port_generation(&self, port: NodeId) -> Option<String> {
        self.graph
            .edges(port.graph_index())
            .filter_map(|e| match &self.links[e.weight().index()].kind {
                LinkKind::Pcie { generation, .. } if self.node(NodeId(e.target().index() as u32)).kind != NodeKind::Nvme => {
                    Some(generation.clone())
                }
                _ => None,
            })
            .max()
    }

    /// This topology with its drives replaced by `layout`.
    pub fn with_drives(&self, layout: &DriveLayout, model: &HardwareModel) -> Result<Topology, TopologyError> {
        let mut topo = self.without_drives();
        topo.attach_drives(layout, model)?;
        Ok(topo)
    }

    /// Adds `layout`'s drives, spread in order over its ports.
    pub(super) fn attach_drives(&mut self, layout: &DriveLayout, model: &HardwareModel) -> Result<(), TopologyError> {
        let ports: Vec<NodeId> = match layout.placement {
            Placement::Switch => self.gpu_switches(),
            Placement::RootPort => self.nodes_of(NodeKind::CpuSocket).collect(),
        };
        if ports.is_empty() && layout.count > 0 {
            let (missing, other) = match layout.placement {
                Placement::Switch => ("PCIe switch under a GPU", Placement::RootPort),
                Placement::RootPort => ("CPU socket", Placement::Switch),
            };
            return Err(TopologyError::Invalid(format!("{} has no {missing} for drives: use placement {other}", self.name)));
        }
        let first = self.drives().len();
        for i in 0..layout.count as usize {
            self.add_drive(&format!("nvme{}", first + i), &layout.drive, ports[i % ports.len()], model).map_err(TopologyError::Invalid)?;
        }
        Ok(())
    }

    /// A direct link from `a` to `b`, if any.
    fn link_between(&self, a: NodeId, b: NodeId) -> Option<LinkId> {
        self.graph.edges_connecting(a.graph_index(), b.graph_index()).next().map(|e| *e.weight())
    }

    /// The same topology without its NVMe drives (other ids keep their order).
    fn without_drives(&self) -> Topology {
        let mut topo = Topology::new(&self.name, &self.gpu_model, &self.host, self.policy.clone());
        topo.description = self.description.clone();
        let mut nodes: Vec<Option<NodeId>> = Vec::new();
        for (_, node) in self.nodes() {
            nodes.push((node.kind != NodeKind::Nvme).then(|| topo.add_node(&node.name, node.kind, node.socket)));
        }
        let mut links: Vec<Option<LinkId>> = Vec::new();
        for link in &self.links {
            links.push(match (nodes[link.from.0 as usize], nodes[link.to.0 as usize]) {
                (Some(from), Some(to)) => Some(topo.push_link(from, to, link.kind.clone(), link.bandwidth, link.latency)),
                _ => None,
            });
        }
        for edge in self.graph.edge_references() {
            let ends = (nodes[edge.source().index()], nodes[edge.target().index()]);
            if let ((Some(from), Some(to)), Some(link)) = (ends, links[edge.weight().index()]) {
                topo.graph.add_edge(from.graph_index(), to.graph_index(), link);
            }
        }
        topo
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    #[test]
    fn hgx_boards_carry_two_gen4_drives_a_switch_at_the_vendors_rates() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let drives = topo.drives();
        assert_eq!(drives.len(), 8);
        let first = topo.path(drives[0], topo.gpus()[0], crate::topology::Medium::Pcie).unwrap();
        assert_eq!(first.links.len(), 2, "drive -> switch -> GPU");
        assert_eq!(topo.link(first.links[0]).bandwidth, Bandwidth::from_gbps_f64(7.4), "a drive reads at its vendor's figure");
        let down = topo.link(first.links[0]);
        assert_eq!(topo.drive_model(down.from), Some("gen4"));
    }

    #[test]
    fn a_drive_on_an_older_port_keeps_its_share_of_the_raw_rate() {
        let model = HardwareModel::base();
        let (read, write, _, generation) = drive_link_rates(&model, "gen5", "gen4").unwrap();
        assert_eq!(generation, "gen4");
        assert_eq!(read, Bandwidth::from_gbps_f64(14.5).scaled(1.969 / 3.938));
        assert_eq!(write, Bandwidth::from_gbps_f64(10.0).scaled(0.5));
        let (read, _, _, generation) = drive_link_rates(&model, "gen4", "gen5").unwrap();
        assert_eq!((read, generation.as_str()), (Bandwidth::from_gbps_f64(7.4), "gen4"), "a faster port does not speed a drive");
    }

    #[test]
    fn a_layout_replaces_the_drives_and_keeps_everything_else() {
        let model = HardwareModel::base();
        let topo = preset("pcie-gen4-8gpu", &PresetOptions::default(), &model).unwrap();
        let layout = DriveLayout { count: 6, drive: "gen5".into(), placement: Placement::Switch };
        let with = topo.with_drives(&layout, &model).unwrap();
        assert_eq!(with.drives().len(), 6);
        assert_eq!(with.gpus(), topo.gpus(), "GPU ids do not move");
        assert!(with.drives().iter().all(|&d| with.drive_model(d) == Some("gen5")));
        let switch =
            |d: NodeId| with.node(with.link(with.path(d, with.gpus()[0], crate::topology::Medium::Pcie).unwrap().links[0]).to).name.clone();
        let ports: Vec<String> = with.drives().into_iter().map(switch).collect();
        assert_eq!(ports, ["pcie-sw0", "pcie-sw1", "pcie-sw2", "pcie-sw3", "pcie-sw0", "pcie-sw1"]);
        let relations = |t: &Topology| {
            t.gpus().iter().map(|&a| t.gpus().iter().map(|&b| t.relation(a, b).to_string()).collect::<Vec<_>>()).collect::<Vec<_>>()
        };
        assert_eq!(relations(&with), relations(&topo));
        let none = with.with_drives(&DriveLayout { count: 0, ..layout }, &model).unwrap();
        assert!(none.drives().is_empty() && none.links().len() == topo.links().len() - 2 * topo.drives().len());
    }

    #[test]
    fn placement_names_say_what_is_allowed() {
        assert_eq!("root-port".parse::<Placement>(), Ok(Placement::RootPort));
        let error = "cpu".parse::<Placement>().unwrap_err();
        assert!(error.contains("switch") && error.contains("root-port"), "{error}");
    }
}
