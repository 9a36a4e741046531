//! The topology file (`configs/topologies/*.toml`): nodes and links written
//! out by hand or by `icsim topo import`. Raw serde types only; the topology
//! module turns them into a graph and checks that they make sense.

use serde::{Deserialize, Serialize};

use crate::units::{Bandwidth, Time};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    pub name: String,
    /// GPU model key in the hardware model (`h200`, `a100`, ...).
    pub gpu: String,
    /// Host platform key in the hardware model (`spr-2s`, ...).
    pub host: String,
    /// Hardware model overlays (shipped names or file paths) to apply.
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub policy: PolicyFile,
    #[serde(rename = "node")]
    pub nodes: Vec<NodeFile>,
    #[serde(rename = "link", default)]
    pub links: Vec<LinkFile>,
}

/// Platform rules that override the host platform's defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    pub p2p_across_sockets: Option<bool>,
    /// Whether NVSwitches reduce in the switch (NVLS); defaults to the GPU
    /// architecture's support.
    pub nvls: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKindFile {
    Gpu,
    PcieSwitch,
    Cpu,
    Memory,
    Nvswitch,
    Nvme,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    pub name: String,
    pub kind: NodeKindFile,
    /// The CPU socket (NUMA node) the part hangs off.
    #[serde(default)]
    pub socket: u32,
    /// For an NVMe drive: its class, a key of the model's `[nvme]`
    /// (default: the generation of its PCIe link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive: Option<String>,
    /// For a PCIe switch: its chip, a key of the model's `[pcie_switch]`;
    /// its links default to the chip's generation and latency, and their
    /// lanes must fit the chip's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chip: Option<String>,
    /// For a PCIe switch that is one logical switch of a chip split into
    /// several: a name the chip's other logical switches share; their
    /// lanes together must fit it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKindFile {
    Pcie,
    Nvlink,
    Socket,
    Memory,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkFile {
    pub from: String,
    pub to: String,
    pub kind: LinkKindFile,
    /// PCIe or NVLink generation key (`gen5`, `gen4`); defaults to the GPU's.
    pub generation: Option<String>,
    /// PCIe lanes (default 16).
    pub lanes: Option<u32>,
    /// NVLink links bonded together (default: the GPU's count).
    pub links: Option<u32>,
    /// Effective bandwidth per direction; derived from the model if absent.
    pub bandwidth: Option<Bandwidth>,
    pub latency: Option<Time>,
}
