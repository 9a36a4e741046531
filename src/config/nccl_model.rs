//! NCCL's own cost model in the hardware model (`[nccl]`): its latency
//! tables, per-architecture bandwidth caps and channel counts, as NCCL's
//! tuner uses them to choose an algorithm and protocol. The tuner decides
//! with them; the simulation never times with them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Per-architecture constants of NCCL's tuning model (src/graph/tuning.cc,
/// search.cc, topo.h).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NcclArch {
    /// Bandwidth NCCL assumes per NVLink, GB/s.
    pub nvlink_gbps: f64,
    /// Per-channel speeds the ring search tries, GB/s, fastest first.
    pub search_speeds: Vec<f64>,
    /// Cap on LL bus bandwidth on one node, GB/s.
    pub ll_max_gbps: f64,
    /// Per-channel cap of LL128 rings, GB/s.
    pub ll128_channel_max_gbps: f64,
    /// Per-channel cap of LL128 trees, GB/s.
    pub tree_ll128_channel_max_gbps: f64,
    /// Per-channel cap of trees, GB/s.
    pub tree_channel_max_gbps: f64,
    /// Efficiency of NVLS reduction in the model (0 where there is none).
    pub nvls_efficiency: f64,
    /// Thread blocks (channels) an NVLS collective runs on one node.
    pub nvls_channels: u32,
}

/// NCCL's latency table (µs) for one algorithm: LL, LL128, Simple.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolTriple {
    pub ll: f64,
    pub ll128: f64,
    pub simple: f64,
}

impl ProtocolTriple {
    /// The figure for `protocol`.
    pub fn of(self, protocol: super::protocol::Protocol) -> f64 {
        use super::protocol::Protocol;
        match protocol {
            Protocol::Ll => self.ll,
            Protocol::Ll128 => self.ll128,
            Protocol::Simple => self.simple,
        }
    }
}

/// NCCL's cost model, used by the tuner to choose an algorithm and protocol
/// the way NCCL does.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NcclModel {
    pub ring_base_us: ProtocolTriple,
    pub tree_base_us: ProtocolTriple,
    pub ring_nvlink_hop_us: ProtocolTriple,
    pub tree_nvlink_hop_us: ProtocolTriple,
    pub ring_pcie_hop_us: ProtocolTriple,
    pub tree_pcie_hop_us: ProtocolTriple,
    pub nvls_latency_us: f64,
    pub ll128_factor: f64,
    pub tree_factor: f64,
    /// Tree allreduce bandwidth corrections by log2(bytes / 64), 23 each.
    pub tree_correction: TreeCorrection,
    pub max_channels: u32,
    /// Most GPUs that head NVLS channels (NCCL_MAX_NVLS_ARITY): on a larger
    /// NVLink domain only this many GPUs reduce, the others only push and pull.
    pub max_nvls_heads: u32,
    pub arch: BTreeMap<String, NcclArch>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TreeCorrection {
    pub ll: Vec<f64>,
    pub ll128: Vec<f64>,
    pub simple: Vec<f64>,
}
