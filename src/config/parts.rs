//! The parts a server is built of besides its GPUs, as the hardware model
//! describes them: host platforms (sockets, the links between them, their
//! memory and PCIe lanes) and PCIe switch chips. Plain data with the
//! capacities that follow from it; the topology module joins them.

use serde::{Deserialize, Serialize};

use crate::units::{Bandwidth, Time};

/// A server platform: CPU sockets, their interconnect and memory.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostPlatform {
    pub description: String,
    /// "intel", "amd" or "nvidia" (Grace): NCCL charges peer-to-peer
    /// traffic through an Intel root complex extra.
    pub vendor: String,
    /// Links joining two sockets (UPI, xGMI, NVLink-C2C); 0 on a platform
    /// of one socket.
    pub socket_links: u32,
    /// Lanes of one such link.
    pub socket_link_lanes: u32,
    /// What one lane carries each way, raw.
    pub socket_link_lane_rate: Bandwidth,
    /// The share of the raw rate one direction carries.
    pub socket_link_efficiency: f64,
    pub socket_link_latency: Time,
    pub memory_channels: u32,
    pub memory_channel_rate: Bandwidth,
    /// Fraction of peak memory bandwidth a streaming copy reaches.
    pub memory_efficiency: f64,
    /// Peer-to-peer DMA through the root complex runs at this fraction of
    /// the narrowest link.
    pub root_complex_p2p_factor: f64,
    /// PCIe lanes of one socket: its root ports, x16 each, bound what a
    /// preset hangs on it directly.
    pub pcie_lanes: u32,
    /// The generation of those lanes.
    pub pcie_generation: String,
    /// Whether the platform lets PCIe peer-to-peer cross sockets.
    pub p2p_across_sockets: bool,
    /// NCCL's model of the socket link, GB/s.
    pub nccl_socket_gbps: f64,
}

/// A PCIe switch chip: its lanes (shared by the logical switches it may be
/// split into) and what crossing it takes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PcieSwitchChip {
    pub description: String,
    /// The generation of its ports (`gen4`, `gen5`).
    pub generation: String,
    pub lanes: u32,
    /// Port to port, cut-through.
    pub hop_latency: Time,
}

impl HostPlatform {
    /// What the links between two sockets carry each way together: links x
    /// lanes x the lane rate x the efficiency (nothing on one socket).
    pub fn socket_link(&self) -> Bandwidth {
        self.socket_link_lane_rate.scaled(f64::from(self.socket_links) * f64::from(self.socket_link_lanes) * self.socket_link_efficiency)
    }

    /// The sockets a server of this platform has: two, or one where no
    /// link joins sockets.
    pub fn sockets(&self) -> u32 {
        if self.socket_links == 0 { 1 } else { 2 }
    }

    /// The x16 root ports of one socket.
    pub fn root_ports(&self) -> u32 {
        self.pcie_lanes / 16
    }
}
