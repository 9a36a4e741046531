//! NCCL's own rules, re-derived from its sources (src/graph/search.cc,
//! tuning.cc, enqueue.cc of v2.28): how many channels its ring search finds
//! and at what per-channel bandwidth, its closed-form cost model (latency +
//! bytes / bandwidth) with which its tuner picks an algorithm and a
//! protocol, and how many channels one call then runs on. These rules only
//! choose; they never time anything (time comes from src/collective/rate.rs
//! and the flow network).

use crate::config::hardware::{GpuModel, HardwareModel, NcclArch, ProtocolTriple};
use crate::topology::{LinkKind, NodeKind, Topology};
use crate::transport::{Connection, PathClass};
use crate::units::Bytes;

use super::{Algorithm, Op, Protocol};

/// What NCCL's ring search settles on for one topology.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingGraph {
    /// Channels of the search graph (after NCCL duplicates them once).
    pub search_channels: u32,
    /// Bandwidth NCCL gives each search channel, GB/s.
    pub channel_gbps: f64,
    /// Channels NCCL runs (the search graph doubled again at set-up).
    pub runtime_channels: u32,
    /// The GPU's own bandwidth on this kind of path, GB/s.
    pub gpu_gbps: f64,
}

impl RingGraph {
    /// NCCL's bus bandwidth estimate for rings, GB/s.
    pub fn bus_gbps(&self) -> f64 {
        f64::from(self.search_channels) * self.channel_gbps
    }
}

/// NCCL's ring search: per-channel speeds from its list, fastest first, each
/// with as many channels as the GPU's links and the ring's narrowest hop
/// allow, keeping the largest total (a higher speed wins a tie) and not
/// going below half the best speed; then its channel duplication and its
/// doubling at set-up.
///
/// `gpu_gbps` is the GPU's own bandwidth in NCCL's units, `hop_gbps` the
/// narrowest hop of one ring, `parallel_rings` how many link-disjoint rings
/// the topology offers.
pub fn ring_search(arch_number: u32, arch: &NcclArch, max_channels: u32, gpu_gbps: f64, hop_gbps: f64, parallel_rings: u32) -> RingGraph {
    // Speeds are tried fastest first; the search stops going slower once a
    // speed is under half of the best solution's (NCCL: `next/best > 0.49`).
    let mut best: Option<(u32, f64)> = None;
    for &speed in arch.search_speeds.iter().filter(|&&s| s <= hop_gbps + 1e-9) {
        if best.is_some_and(|(_, best_speed)| speed / best_speed <= 0.49) {
            break;
        }
        let by_gpu = (gpu_gbps / speed + 1e-9).floor() as u32;
        let by_hops = (hop_gbps / speed + 1e-9).floor() as u32 * parallel_rings.max(1);
        let channels = by_gpu.min(by_hops).min(max_channels);
        if channels == 0 {
            continue;
        }
        let total = f64::from(channels) * speed;
        if best.is_none_or(|(c, s)| total > f64::from(c) * s + 1e-9) {
            best = Some((channels, speed));
        }
    }
    let (mut channels, mut speed) = best.unwrap_or((1, hop_gbps.min(gpu_gbps).max(0.1)));
    // ncclTopoDupChannels: not for slow channels, nor for Hopper+ channels
    // under 50 GB/s when there are already more than four.
    let keep = speed < 25.0 || (arch_number > 80 && speed < 50.0 && channels > 4);
    if !keep {
        channels *= 2;
        speed /= 2.0;
    }
    RingGraph { search_channels: channels, channel_gbps: speed, runtime_channels: (channels * 2).min(64), gpu_gbps }
}

/// What NCCL assumes a PCIe link of `generation` and `lanes` carries, GB/s.
fn pcie_gbps(model: &HardwareModel, generation: &str, lanes: u32) -> Result<f64, String> {
    Ok(model.pcie(generation)?.nccl_x16_gbps * f64::from(lanes) / 16.0)
}

/// The GPU's own bandwidth on a kind of path in NCCL's units, GB/s: all its
/// NVLinks, or its PCIe link.
pub fn own_gbps(model: &HardwareModel, gpu: &GpuModel, class: PathClass) -> Result<f64, String> {
    match class {
        PathClass::Nvlink => Ok(model.nccl_arch(gpu.arch)?.nvlink_gbps * f64::from(gpu.nvlink_links)),
        PathClass::Pcie | PathClass::Shm => pcie_gbps(model, &gpu.pcie_generation, gpu.pcie_lanes),
    }
}

/// NCCL's bandwidth for one connection of a ring, GB/s, and the GPU's own
/// bandwidth on that kind of path.
pub fn connection_gbps(topo: &Topology, model: &HardwareModel, connection: &Connection) -> Result<(f64, f64), String> {
    let gpu = model.gpu(&topo.gpu_model)?;
    let arch = model.nccl_arch(gpu.arch)?;
    let host = model.host(&topo.host)?;
    let own = own_gbps(model, gpu, connection.class())?;
    let pcie_path_gbps = |path: &crate::network::Path| -> Result<f64, String> {
        let mut bw = f64::INFINITY;
        for &l in path.links.iter() {
            let link = topo.link(l);
            bw = bw.min(match &link.kind {
                LinkKind::Pcie { generation, lanes } => pcie_gbps(model, generation, *lanes)?,
                LinkKind::SocketLink => host.nccl_socket_gbps,
                LinkKind::NvLink { links, .. } => arch.nvlink_gbps * f64::from(*links),
                LinkKind::MemoryBus { .. } => f64::INFINITY,
            });
        }
        // INTEL_P2P_OVERHEAD: PCIe through an Intel host bridge costs 1.2x.
        let crosses_socket = path.links.iter().any(|l| topo.link(*l).kind == LinkKind::SocketLink);
        if host.vendor == "intel" && topo.path_crosses(path, NodeKind::CpuSocket) && !crosses_socket {
            bw /= 1.2;
        }
        Ok(bw)
    };
    match connection {
        Connection::Direct { path, class: PathClass::Nvlink, .. } => {
            let links: u32 = path
                .links
                .iter()
                .map(|l| match topo.link(*l).kind {
                    LinkKind::NvLink { links, .. } => links,
                    _ => u32::MAX,
                })
                .min()
                .unwrap_or(0);
            Ok((arch.nvlink_gbps * f64::from(links), own))
        }
        Connection::Direct { path, .. } => Ok((pcie_path_gbps(path)?, own)),
        Connection::Staged { write, read } => {
            // NCCL routes the pair through the CPU: the narrower of the two halves.
            let bw = pcie_path_gbps(write)?.min(pcie_path_gbps(read)?);
            let through_cpu = if host.vendor == "intel" { bw.min(own / 1.2) } else { bw };
            Ok((through_cpu, own))
        }
    }
}

/// Which row of NCCL's hardware-latency table applies.
fn hop_triple(model: &HardwareModel, algorithm: Algorithm, class: PathClass) -> ProtocolTriple {
    let nccl = &model.nccl;
    match (algorithm, class) {
        (Algorithm::Tree, PathClass::Nvlink) => nccl.tree_nvlink_hop_us,
        (Algorithm::Tree, _) => nccl.tree_pcie_hop_us,
        (_, PathClass::Nvlink) => nccl.ring_nvlink_hop_us,
        _ => nccl.ring_pcie_hop_us,
    }
}

/// GPUs that head NVLS channels among `ranks`: every rank, up to NCCL's
/// NVLS arity; the others only push and pull.
pub fn nvls_heads(model: &HardwareModel, ranks: u32) -> u32 {
    ranks.min(model.nccl.max_nvls_heads)
}

/// NCCL's modelled bus bandwidth for one algorithm and protocol, GB/s (zero
/// where NCCL would not run it).
pub fn bus_gbps(model: &HardwareModel, arch: &NcclArch, ring: &RingGraph, algorithm: Algorithm, protocol: Protocol, ranks: u32) -> f64 {
    let nccl = &model.nccl;
    let bus = ring.bus_gbps();
    let channels = f64::from(ring.search_channels);
    match (algorithm, protocol) {
        (Algorithm::Ring, Protocol::Simple) => bus,
        (Algorithm::Ring, Protocol::Ll) => arch.ll_max_gbps.min(bus * 0.5),
        (Algorithm::Ring, Protocol::Ll128) => (bus * nccl.ll128_factor).min(channels * arch.ll128_channel_max_gbps),
        (Algorithm::Tree, p) => {
            // Inside one node the tree is a chain; between two ranks it has
            // one link, which NCCL's tree search charges in one direction
            // only and so finds twice the ring's speed (as its tuning table
            // on 2 H200 shows: 232.2 GB/s for Simple against 165.6 on 4).
            let graph = if ranks == 2 { 2.0 * bus } else { bus };
            let tree = (graph * nccl.tree_factor).min(channels * arch.tree_channel_max_gbps);
            match p {
                Protocol::Simple => tree,
                Protocol::Ll => (tree / 3.8).min(arch.ll_max_gbps),
                Protocol::Ll128 => (tree * 7.0 / 9.0).min(channels * arch.tree_ll128_channel_max_gbps),
            }
        }
        (Algorithm::Nvls, Protocol::Simple) => {
            // One search channel per head GPU, at most NCCL's NVLS arity of
            // them; the search charges the head's links twice and every
            // other GPU's once: (heads + 1) x speed must
            // fit the GPU. The inter bandwidth is then raised to at most
            // twice that, capped by the fastest search speed.
            let heads = f64::from(nvls_heads(model, ranks).max(2));
            let fastest = arch.search_speeds.first().copied().unwrap_or(0.0);
            let per_head = arch.search_speeds.iter().copied().find(|&s| s * (heads + 1.0) <= ring.gpu_gbps + 1e-9).unwrap_or(0.0);
            let intra = per_head * arch.nvls_efficiency * (heads - 1.0) / heads * 2.0;
            heads * intra.min((2.0 * per_head).min(fastest))
        }
        _ => 0.0,
    }
}

/// One candidate as NCCL's cost model weighs it: an algorithm and protocol
/// for an operation over `ranks` GPUs whose connections are of `class`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub class: PathClass,
    pub op: Op,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    pub ranks: u32,
}

/// NCCL's cost-model terms for one candidate: its latency (µs) and
/// bandwidth (GB/s of the buffer as nccl-tests counts it), as its tuning
/// table prints them; None where NCCL would not run it.
pub fn model_terms(model: &HardwareModel, arch: &NcclArch, ring: &RingGraph, candidate: &Candidate) -> Option<(f64, f64)> {
    let Candidate { class, op, algorithm, protocol, ranks } = *candidate;
    let nccl = &model.nccl;
    let n = f64::from(ranks);
    let bus = bus_gbps(model, arch, ring, algorithm, protocol, ranks);
    if ranks < 2 || bus <= 0.0 {
        return None;
    }
    let steps = match op {
        Op::AllReduce => 2.0 * (n - 1.0),
        Op::AllGather | Op::ReduceScatter => n - 1.0,
        Op::Broadcast => n,
    };
    let hop = hop_triple(model, algorithm, class).of(protocol);
    let latency = match algorithm {
        Algorithm::Ring => nccl.ring_base_us.of(protocol) + steps * hop,
        Algorithm::Tree if op == Op::AllReduce => nccl.tree_base_us.of(protocol) + 2.0 * (n - 1.0) * hop,
        Algorithm::Nvls if protocol == Protocol::Simple && op == Op::AllReduce => nccl.nvls_latency_us,
        _ => return None,
    };
    let algbw = match algorithm {
        Algorithm::Ring | Algorithm::Nvls => bus * n / steps,
        _ => bus * 0.5,
    };
    Some((latency, algbw))
}

/// NCCL's closed-form time of one collective of `bytes`, microseconds, or
/// None where NCCL would not use this candidate: latency plus bytes over
/// bandwidth, a tree's bandwidth corrected by size as NCCL does.
pub fn predicted_us(model: &HardwareModel, arch: &NcclArch, ring: &RingGraph, candidate: &Candidate, bytes: u64) -> Option<f64> {
    let Candidate { algorithm, protocol, ranks, .. } = *candidate;
    if ranks < 2 {
        return Some(0.0);
    }
    let (latency, mut algbw) = model_terms(model, arch, ring, candidate)?;
    if algorithm == Algorithm::Tree {
        let nccl = &model.nccl;
        let table = match protocol {
            Protocol::Ll => &nccl.tree_correction.ll,
            Protocol::Ll128 => &nccl.tree_correction.ll128,
            Protocol::Simple => &nccl.tree_correction.simple,
        };
        let index = (bytes >> 6).checked_ilog2().map(|i| i as usize);
        if let Some(factor) = index.and_then(|i| table.get(i)) {
            algbw *= factor;
        }
    }
    Some(latency + bytes as f64 / (1000.0 * algbw))
}

/// How NCCL spreads one call over its channels (enqueue.cc of v2.28):
/// `topoGetAlgoInfo` drops channels while each would get less than its
/// threads x per-thread threshold, then `scheduleCollTasksToPlan` deals the
/// data out in cells of 16 KiB of traffic, a few cells a channel. Returns the
/// data bytes each channel handles, in channel order: of the buffer for
/// all-reduce and broadcast, of one rank's part for all-gather and
/// reduce-scatter (each channel then handles that part of every rank's).
pub fn channel_split(call: &CallShape, comm_channels: u32) -> Vec<u64> {
    const MIN_TRAFFIC_PER_CHANNEL: u64 = 16 << 10;
    let n = u64::from(call.ranks.max(1));
    // Bytes as the tuner counts them: the whole buffer.
    let tuner_bytes = call.bytes;
    let data = match call.op {
        Op::AllGather | Op::ReduceScatter => call.bytes / n,
        Op::AllReduce | Op::Broadcast => call.bytes,
    };
    if data == 0 {
        return vec![0];
    }
    let comm_channels = u64::from(comm_channels.max(1));
    let mut channels = comm_channels;
    while channels > 1 && tuner_bytes < channels * call.threshold {
        channels -= 1;
    }
    let ll = if call.protocol == Protocol::Ll { 4 } else { 1 };
    let traffic_per_byte = ll
        * match call.op {
            Op::AllReduce => 2,
            Op::AllGather | Op::ReduceScatter => n,
            Op::Broadcast => 1,
        };
    let traffic = data * traffic_per_byte;
    let per_channel = MIN_TRAFFIC_PER_CHANNEL.max(traffic.max(MIN_TRAFFIC_PER_CHANNEL) / channels);
    let cell = MIN_TRAFFIC_PER_CHANNEL.div_ceil(traffic_per_byte).div_ceil(16) * 16;
    let cells = data.div_ceil(cell);
    let traffic_per_cell = cell * traffic_per_byte;
    let mut cells_per_channel = cells.min(per_channel.div_ceil(traffic_per_cell));
    let lo = if comm_channels == 1 { cells } else { cells.min(per_channel.div_ceil(traffic_per_cell)) };
    let mut mid = (cells - lo) / cells_per_channel;
    let mut hi = (cells - lo) % cells_per_channel;
    let used = u64::from(lo != 0) + mid + u64::from(hi != 0);
    if comm_channels < used {
        mid = comm_channels.saturating_sub(2);
        cells_per_channel = (cells - lo) / (mid + 1);
        hi = cells_per_channel + (cells - lo) % (mid + 1);
    }
    if hi == 0 && mid != 0 {
        hi = cells_per_channel;
        mid -= 1;
    }
    let mut split: Vec<u64> = std::iter::once(lo).chain(std::iter::repeat_n(cells_per_channel, mid as usize)).collect();
    if hi != 0 {
        split.push(hi);
    }
    // Cells are whole; the last channel gives back the padding.
    let mut bytes: Vec<u64> = split.iter().map(|c| c * cell).collect();
    let padding = cells * cell - data;
    if let Some(last) = bytes.last_mut() {
        *last -= padding.min(*last);
    }
    bytes.retain(|&b| b > 0);
    if bytes.is_empty() { vec![data] } else { bytes }
}

/// The chunk a tree moves per step (enqueue.cc, calcCollChunking): one
/// step's buffer, and for LL128 halved while the call is short for its
/// channels (one node: 1 + 0.1 x ranks steps of LL128 pipelining).
pub fn tree_chunk(step: Bytes, protocol: Protocol, bytes: Bytes, channels: usize, ranks: usize) -> Bytes {
    let mut chunk = step.0.max(1);
    if protocol == Protocol::Ll128 {
        let ppn = ranks.max(1) as f64;
        let steps = 1.0 + 0.1 * ppn;
        let per_channel_chunks = |chunk: u64| (bytes.0 / (channels.max(1) as u64 * chunk)) as f64;
        while per_channel_chunks(chunk) < steps * 64.0 / ppn && chunk > 131_072 {
            chunk /= 2;
        }
        while per_channel_chunks(chunk) < steps * 16.0 / ppn && chunk > 32_768 {
            chunk /= 2;
        }
    }
    Bytes(chunk)
}

/// One call as NCCL's channel rules see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallShape {
    pub op: Op,
    pub protocol: Protocol,
    pub ranks: u32,
    /// As nccl-tests counts it (all-gather, reduce-scatter: the whole buffer).
    pub bytes: u64,
    /// Threads x per-thread bytes below which a channel is dropped.
    pub threshold: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm90() -> (HardwareModel, NcclArch) {
        let model = HardwareModel::base();
        let arch = model.nccl_arch(90).unwrap().clone();
        (model, arch)
    }

    #[test]
    fn hopper_nvswitch_ring_is_twelve_channels_of_thirty_run_as_twenty_four() {
        // 18 NVLinks x 20.6 GB/s = 370.8 GB/s: 6 channels at 60, duplicated
        // to 12 at 30 (bus 360 GB/s), doubled at set-up to 24.
        let (_, arch) = sm90();
        let ring = ring_search(90, &arch, 32, 370.8, 370.8, 1);
        assert_eq!(ring, RingGraph { search_channels: 12, channel_gbps: 30.0, runtime_channels: 24, gpu_gbps: 370.8 });
        assert_eq!(ring.bus_gbps(), 360.0);
        // NVLS: 8 heads at 40 GB/s, 476 GB/s of bus bandwidth; 2 GPUs only 102.
        let (model, _) = sm90();
        assert!((bus_gbps(&model, &arch, &ring, Algorithm::Nvls, Protocol::Simple, 8) - 476.0).abs() < 0.01);
        assert!((bus_gbps(&model, &arch, &ring, Algorithm::Nvls, Protocol::Simple, 2) - 102.0).abs() < 0.01);
    }

    #[test]
    fn nvls_on_72_blackwell_gpus_runs_on_32_heads() {
        // NCCL_MAX_NVLS_ARITY heads, not one a GPU: 33 x 20 GB/s fits 18 x
        // 40.1, so 32 heads at 20 x 0.74 x 31/32 x 2 GB/s, 917.6 GB/s of bus
        // bandwidth. With 72 heads no search speed would fit (73 x 18 > 721.8).
        let model = HardwareModel::base();
        let arch = model.nccl_arch(100).unwrap().clone();
        let gpu_gbps = 18.0 * arch.nvlink_gbps;
        let ring = ring_search(100, &arch, 32, gpu_gbps, gpu_gbps, 1);
        let nvls = bus_gbps(&model, &arch, &ring, Algorithm::Nvls, Protocol::Simple, 72);
        assert!((nvls - 32.0 * 20.0 * 0.74 * 31.0 / 32.0 * 2.0).abs() < 0.01, "{nvls}");
    }

    #[test]
    fn a_bridged_pair_of_twelve_links_does_not_split_into_slow_channels() {
        // 12 x 20.6 GB/s: 4 channels at 60 (240), duplicated to 8 at 30;
        // slower speeds with more channels are under half of 60 and not tried.
        let (_, arch) = sm90();
        let ring = ring_search(90, &arch, 32, 370.8, 12.0 * 20.6, 1);
        assert_eq!((ring.search_channels, ring.channel_gbps, ring.runtime_channels), (8, 30.0, 16));
    }

    #[test]
    fn pcie_gen5_on_amd_is_two_channels_of_twenty_four() {
        let (_, arch) = sm90();
        let ring = ring_search(90, &arch, 32, 48.0, 48.0, 1);
        assert_eq!((ring.search_channels, ring.channel_gbps, ring.runtime_channels), (2, 24.0, 4));
    }

    #[test]
    fn pcie_gen5_through_an_intel_cpu_is_two_channels_of_twenty() {
        let (_, arch) = sm90();
        let ring = ring_search(90, &arch, 32, 48.0, 40.0, 1);
        assert_eq!(ring, RingGraph { search_channels: 2, channel_gbps: 20.0, runtime_channels: 4, gpu_gbps: 48.0 });
    }

    #[test]
    fn nccl_picks_ll_then_ll128_then_simple_by_size() {
        // NCCL's own crossovers on NVSwitch. Two ranks: LL below about 1.7 MB,
        // then Simple (LL128's latency never pays). Eight ranks: LL below
        // about 3.6 MB, LL128 to about 37 MB, then Simple.
        let (model, arch) = sm90();
        let ring = ring_search(90, &arch, 32, 370.8, 370.8, 1);
        let best = |ranks: u32, bytes: u64| {
            [Protocol::Ll, Protocol::Ll128, Protocol::Simple]
                .into_iter()
                .filter_map(|p| {
                    let candidate =
                        Candidate { class: PathClass::Nvlink, op: Op::AllReduce, algorithm: Algorithm::Ring, protocol: p, ranks };
                    predicted_us(&model, &arch, &ring, &candidate, bytes).map(|t| (t, p))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap()
                .1
        };
        assert_eq!(best(2, 1 << 20), Protocol::Ll);
        assert_eq!(best(2, 2 << 20), Protocol::Simple);
        assert_eq!(best(8, 2 << 20), Protocol::Ll);
        assert_eq!(best(8, 16 << 20), Protocol::Ll128);
        assert_eq!(best(8, 64 << 20), Protocol::Simple);
    }
}
