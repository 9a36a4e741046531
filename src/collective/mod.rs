//! Collectives as task graphs: allreduce (ring, tree, NVLS, one-shot,
//! two-shot), reduce-scatter, all-gather and broadcast; NCCL's protocols
//! (Simple, LL, LL128) and channels; and the choice of algorithm and protocol
//! as NCCL's tuner makes it. Knows nothing of LLMs.

mod layout;
pub mod nccl;
mod ring;

use std::fmt;
use std::str::FromStr;

use crate::config::hardware::{HardwareModel, PathCost, Protocol as ProtocolModel};
use crate::engine::{self, TaskGraph, TaskId};
use crate::network::{LinkUsage, Path};
use crate::topology::{NodeId, Topology};
use crate::transport::{self, Connection, Mode, PathClass, Pipe, PipeRules, TransportError};
use crate::units::{Bandwidth, Bytes, Time};

pub use nccl::RingGraph;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

impl Op {
    /// nccl-tests' factor from algorithm to bus bandwidth.
    pub fn bus_factor(self, ranks: u32) -> f64 {
        let n = f64::from(ranks);
        match self {
            Op::AllReduce => 2.0 * (n - 1.0) / n,
            Op::AllGather | Op::ReduceScatter => (n - 1.0) / n,
            Op::Broadcast => 1.0,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::AllReduce => "allreduce",
            Op::AllGather => "allgather",
            Op::ReduceScatter => "reducescatter",
            Op::Broadcast => "broadcast",
        })
    }
}

impl FromStr for Op {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "allreduce" => Ok(Op::AllReduce),
            "allgather" => Ok(Op::AllGather),
            "reducescatter" => Ok(Op::ReduceScatter),
            "broadcast" => Ok(Op::Broadcast),
            other => Err(format!("unknown collective {other:?}: use allreduce, allgather, reducescatter or broadcast")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    Ring,
    Tree,
    Nvls,
    OneShot,
    TwoShot,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Nvls => "nvls",
            Algorithm::OneShot => "oneshot",
            Algorithm::TwoShot => "twoshot",
        })
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ring" => Ok(Algorithm::Ring),
            "tree" => Ok(Algorithm::Tree),
            "nvls" => Ok(Algorithm::Nvls),
            "oneshot" => Ok(Algorithm::OneShot),
            "twoshot" => Ok(Algorithm::TwoShot),
            other => Err(format!("unknown algorithm {other:?}: use auto, ring, tree, nvls, oneshot or twoshot")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Ll,
    Ll128,
    Simple,
}

pub const PROTOCOLS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Ll => "ll",
            Protocol::Ll128 => "ll128",
            Protocol::Simple => "simple",
        })
    }
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ll" => Ok(Protocol::Ll),
            "ll128" => Ok(Protocol::Ll128),
            "simple" => Ok(Protocol::Simple),
            other => Err(format!("unknown protocol {other:?}: use auto, simple, ll or ll128")),
        }
    }
}

impl Protocol {
    pub fn model(self, model: &HardwareModel) -> &ProtocolModel {
        match self {
            Protocol::Ll => &model.protocol.ll,
            Protocol::Ll128 => &model.protocol.ll128,
            Protocol::Simple => &model.protocol.simple,
        }
    }
}

/// A user's choice: fixed, or left to the tuner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice<T> {
    Auto,
    Fixed(T),
}

impl<T: FromStr<Err = String>> FromStr for Choice<T> {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "auto" { Ok(Choice::Auto) } else { text.parse().map(Choice::Fixed) }
    }
}

/// One collective call to simulate.
#[derive(Debug, Clone)]
pub struct Request {
    pub op: Op,
    /// Buffer size as nccl-tests counts it (allreduce: the buffer; all-gather
    /// and reduce-scatter: the full buffer of all ranks).
    pub bytes: Bytes,
    /// The GPUs taking part, in rank order.
    pub ranks: Vec<NodeId>,
    pub mode: Mode,
    pub algorithm: Choice<Algorithm>,
    pub protocol: Choice<Protocol>,
}

/// Why a collective cannot run as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CollectiveError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("{0}")]
    Unsupported(String),
    #[error("hardware model: {0}")]
    Model(String),
}

/// A collective resolved against a topology: connections, channels, and the
/// chosen algorithm and protocol.
#[derive(Debug, Clone)]
pub struct Plan {
    pub request: Request,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    /// Ring orders (rank positions), link-disjoint where the links are direct.
    rings: Vec<Vec<usize>>,
    /// `connections[r][i]`: ring r, from position i to position i+1.
    connections: Vec<Vec<Connection>>,
    pub class: PathClass,
    pub nccl: RingGraph,
    /// Channels this call uses.
    pub channels: u32,
    /// What the ring connections really use ("nvswitch", "p2p+shm", ...).
    pub transport: String,
    /// NCCL's closed-form time for the chosen algorithm and protocol, µs.
    pub nccl_estimate_us: Option<f64>,
}

/// The result of simulating one collective.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub op: Op,
    pub bytes: Bytes,
    pub ranks: u32,
    pub time: Time,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    pub transport: String,
    pub channels: u32,
    /// What every link carried, indexed by link.
    pub usage: Vec<LinkUsage>,
    pub events: u64,
}

impl Outcome {
    pub fn algbw_gbps(&self) -> f64 {
        if self.time.0 == 0 { 0.0 } else { self.bytes.0 as f64 / self.time.as_secs() / 1e9 }
    }
    pub fn busbw_gbps(&self) -> f64 {
        self.algbw_gbps() * self.op.bus_factor(self.ranks)
    }
}

/// The link that was busiest relative to its capacity over `time`.
pub fn busiest_link(topo: &Topology, usage: &[LinkUsage], time: Time) -> Option<(crate::network::LinkId, f64)> {
    if time.0 == 0 {
        return None;
    }
    usage
        .iter()
        .enumerate()
        .filter(|(_, u)| u.bytes.0 > 0)
        .map(|(i, u)| {
            let id = crate::network::LinkId(i as u32);
            let capacity = topo.link(id).bandwidth.bytes_per_sec() * time.as_secs();
            (id, u.bytes.0 as f64 / capacity)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
}

fn worst_class(classes: impl Iterator<Item = PathClass>) -> PathClass {
    classes.max().unwrap_or(PathClass::Nvlink)
}

impl Plan {
    /// Resolves `request` on `topo`: connections in the requested mode, ring
    /// layout, NCCL's channel count, and (if left to auto) the algorithm and
    /// protocol NCCL's cost model picks.
    pub fn new(topo: &Topology, model: &HardwareModel, request: Request) -> Result<Plan, CollectiveError> {
        let n = request.ranks.len();
        if n == 0 {
            return Err(CollectiveError::Unsupported("a collective needs at least one GPU".into()));
        }
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;

        // Check the mode with every pair the ring needs, and lay rings.
        let direct_only = request.mode == Mode::Nvlink
            || (request.mode == Mode::Auto && !topo.has(crate::topology::NodeKind::NvSwitch) && n > 1 && {
                let (a, b) = (request.ranks[0], request.ranks[1]);
                topo.path(a, b, crate::topology::Medium::NvLinkDirect).is_some()
            });
        let rings = if direct_only {
            let linked =
                |a: usize, b: usize| topo.path(request.ranks[a], request.ranks[b], crate::topology::Medium::NvLinkDirect).is_some();
            let rings = layout::disjoint_rings(n, linked, n.saturating_sub(1).max(1));
            if rings.is_empty() {
                return Err(TransportError::Unavailable {
                    mode: Mode::Nvlink,
                    topology: topo.name.clone(),
                    reason: "the GPUs' direct NVLinks do not close a ring".into(),
                }
                .into());
            }
            rings
        } else {
            vec![(0..n).collect()]
        };
        let mut fell_back = false;
        let mut connections = Vec::new();
        for ring in &rings {
            let mut hops = Vec::new();
            for i in 0..n {
                let (a, b) = (request.ranks[ring[i]], request.ranks[ring[(i + 1) % n]]);
                if n == 1 {
                    break;
                }
                let (connection, fallback) = transport::connect_with_fallback(topo, a, b, request.mode)?;
                fell_back |= fallback;
                hops.push(connection);
            }
            connections.push(hops);
        }
        let class = worst_class(connections.iter().flatten().map(Connection::class));
        let mut modes: Vec<Mode> = connections.iter().flatten().map(|c| c.mode(topo)).collect();
        modes.sort();
        modes.dedup();
        let transport =
            if modes.is_empty() { request.mode.to_string() } else { modes.iter().map(Mode::to_string).collect::<Vec<_>>().join("+") };
        let _ = fell_back;

        // NCCL's ring graph for this layout.
        let mut hop_gbps = f64::INFINITY;
        let mut gpu_gbps: f64 = 0.0;
        for connection in connections.iter().flatten() {
            let (hop, own) = nccl::connection_gbps(topo, model, connection).map_err(CollectiveError::Model)?;
            hop_gbps = hop_gbps.min(hop);
            gpu_gbps = gpu_gbps.max(own);
        }
        if connections.iter().flatten().next().is_none() {
            hop_gbps = 1.0;
            gpu_gbps = 1.0;
        }
        let ring_graph = nccl::ring_search(gpu.arch, arch, model.nccl.max_channels, gpu_gbps, hop_gbps, rings.len() as u32);

        let mut plan = Plan {
            algorithm: Algorithm::Ring,
            protocol: Protocol::Simple,
            rings,
            connections,
            class,
            nccl: ring_graph,
            channels: 1,
            transport,
            nccl_estimate_us: None,
            request,
        };
        plan.choose(topo, model)?;
        plan.channels = plan.channels_used(model);
        Ok(plan)
    }

    /// Fixes the algorithm and protocol: as asked, or as NCCL's tuner would.
    fn choose(&mut self, topo: &Topology, model: &HardwareModel) -> Result<(), CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
        let n = self.request.ranks.len() as u32;
        let algorithms: Vec<Algorithm> = match self.request.algorithm {
            Choice::Fixed(a) => vec![a],
            Choice::Auto => vec![Algorithm::Ring],
        };
        let protocols: Vec<Protocol> = match self.request.protocol {
            Choice::Fixed(p) => vec![p],
            Choice::Auto => PROTOCOLS.to_vec(),
        };
        for &algorithm in &algorithms {
            if algorithm != Algorithm::Ring {
                return Err(CollectiveError::Unsupported(format!("algorithm {algorithm} is not available here: use ring")));
            }
        }
        let mut best: Option<(f64, Algorithm, Protocol)> = None;
        for &algorithm in &algorithms {
            for &protocol in &protocols {
                if protocol.model(model).needs_nvlink && self.class != PathClass::Nvlink {
                    continue;
                }
                let estimate =
                    nccl::predicted_us(model, arch, &self.nccl, self.class, self.request.op, algorithm, protocol, n, self.request.bytes.0);
                let Some(estimate) = estimate else { continue };
                if best.is_none_or(|(t, _, _)| estimate < t) {
                    best = Some((estimate, algorithm, protocol));
                }
            }
        }
        let (estimate, algorithm, protocol) = best.ok_or_else(|| {
            CollectiveError::Unsupported(format!(
                "no algorithm and protocol among those asked ({:?} / {:?}) can run {} over {} paths",
                self.request.algorithm, self.request.protocol, self.request.op, self.transport
            ))
        })?;
        self.algorithm = algorithm;
        self.protocol = protocol;
        self.nccl_estimate_us = Some(estimate);
        Ok(())
    }

    /// Channels the call really uses: NCCL drops channels while each would
    /// get less than its threshold, and spreads small calls over few.
    fn channels_used(&self, model: &HardwareModel) -> u32 {
        let protocol = self.protocol.model(model);
        let n = self.request.ranks.len() as u64;
        let threshold = if self.protocol == Protocol::Ll { protocol.channel_threshold.0 * n } else { protocol.channel_threshold.0 };
        let bytes = self.request.bytes.0;
        let mut channels = u64::from(self.nccl.runtime_channels);
        while channels > 1 && bytes < channels * threshold {
            channels -= 1;
        }
        // Continuous byte distribution: at least 16 KiB of traffic a channel.
        let traffic = bytes * if self.protocol == Protocol::Ll { 8 } else { 2 };
        channels.min(traffic.div_ceil(16 << 10).max(1)) as u32
    }

    fn costs<'m>(&self, model: &'m HardwareModel) -> &'m PathCost {
        let protocol = self.protocol.model(model);
        match self.class {
            PathClass::Nvlink => &protocol.nvlink,
            PathClass::Pcie => &protocol.pcie,
            PathClass::Shm => &protocol.shm,
        }
    }

    /// Rate of one channel on the wire: NCCL's modelled bus bandwidth for the
    /// protocol spread over its channels, scaled by the calibrated channel
    /// efficiency, in wire bytes.
    pub fn channel_cap(&self, topo: &Topology, model: &HardwareModel) -> Result<Bandwidth, CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
        let bus = nccl::bus_gbps(model, arch, &self.nccl, Algorithm::Ring, self.protocol, self.request.ranks.len() as u32);
        let per_channel = bus / f64::from(self.nccl.runtime_channels);
        let protocol = self.protocol.model(model);
        Ok(Bandwidth::from_gbps_f64(per_channel * self.costs(model).channel_efficiency * protocol.wire_factor))
    }

    /// Adds the collective to `graph` after `after`; returns the task that
    /// finishes when the collective has.
    pub fn build(
        &self,
        topo: &Topology,
        model: &HardwareModel,
        graph: &mut TaskGraph<Path>,
        after: &[TaskId],
    ) -> Result<TaskId, CollectiveError> {
        let costs = self.costs(model);
        let start = graph.delay(costs.base_latency, after);
        let n = self.request.ranks.len();
        if n < 2 || self.request.bytes.0 == 0 {
            return Ok(start);
        }
        let protocol = self.protocol.model(model);
        // NCCL's SHM transport is SM-driven: the reader follows the writer.
        let rules = PipeRules { latency: costs.step_latency, overhead: costs.slice_overhead, streaming: true };
        let mut pipes: Vec<Vec<Pipe>> = (0..self.channels as usize)
            .map(|c| {
                self.connections[c % self.connections.len()].iter().map(|connection| Pipe::new(connection.clone(), rules, model)).collect()
            })
            .collect();
        let mut plan = ring::RingPlan {
            op: self.request.op,
            bytes: self.request.bytes,
            ranks: n,
            pipes: &mut pipes,
            chunk: protocol.chunk,
            slices_per_chunk: protocol.slices_per_chunk,
            min_slice: protocol.min_slice,
            wire_factor: protocol.wire_factor,
            channel_cap: self.channel_cap(topo, model)?,
        };
        if self.request.op == Op::Broadcast {
            return Err(CollectiveError::Unsupported("broadcast is not available here".into()));
        }
        let ends = ring::build(&mut plan, graph, start);
        let _ = &self.rings;
        Ok(graph.join(&ends))
    }
}

/// Simulates one collective alone on an idle network.
pub fn simulate(topo: &Topology, model: &HardwareModel, request: Request) -> Result<Outcome, CollectiveError> {
    let plan = Plan::new(topo, model, request)?;
    simulate_plan(topo, model, &plan)
}

/// Simulates a resolved plan alone on an idle network.
pub fn simulate_plan(topo: &Topology, model: &HardwareModel, plan: &Plan) -> Result<Outcome, CollectiveError> {
    let mut graph = TaskGraph::new();
    plan.build(topo, model, &mut graph, &[])?;
    let mut network = topo.network();
    let schedule = engine::run(&graph, &mut network);
    Ok(Outcome {
        op: plan.request.op,
        bytes: plan.request.bytes,
        ranks: plan.request.ranks.len() as u32,
        time: schedule.makespan(),
        algorithm: plan.algorithm,
        protocol: plan.protocol,
        transport: plan.transport.clone(),
        channels: plan.channels,
        usage: network.usage(),
        events: schedule.events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    fn request(topo: &Topology, gpus: usize, bytes: Bytes, mode: Mode, protocol: Choice<Protocol>) -> Request {
        Request { op: Op::AllReduce, bytes, ranks: topo.gpus()[..gpus].to_vec(), mode, algorithm: Choice::Fixed(Algorithm::Ring), protocol }
    }

    #[test]
    fn ring_allreduce_moves_two_n_minus_one_over_n_of_the_buffer_through_every_gpu() {
        let model = HardwareModel::base();
        for gpus in [2usize, 4, 8] {
            let topo = preset("hgx-h200", &PresetOptions { gpus: Some(gpus as u32), gpu: None }, &model).unwrap();
            let bytes = Bytes::mib(96);
            let outcome = simulate(&topo, &model, request(&topo, gpus, bytes, Mode::Nvswitch, Choice::Fixed(Protocol::Simple))).unwrap();
            let expected = Bytes(bytes.0 * 2 * (gpus as u64 - 1) / gpus as u64);
            for &gpu in &topo.gpus()[..gpus] {
                let out: Bytes = topo.links().iter().enumerate().filter(|(_, l)| l.from == gpu).map(|(i, _)| outcome.usage[i].bytes).sum();
                let into: Bytes = topo.links().iter().enumerate().filter(|(_, l)| l.to == gpu).map(|(i, _)| outcome.usage[i].bytes).sum();
                assert_eq!(out, expected, "{gpus} GPUs: out of {}", topo.node(gpu).name);
                assert_eq!(into, expected, "{gpus} GPUs: into {}", topo.node(gpu).name);
            }
        }
    }

    #[test]
    fn the_same_request_gives_the_same_outcome_bit_for_bit() {
        let model = HardwareModel::base();
        let topo = preset("h20-nvlink-mesh", &PresetOptions::default(), &model).unwrap();
        let run = || simulate(&topo, &model, request(&topo, 8, Bytes::mib(64), Mode::Nvlink, Choice::Auto)).unwrap();
        let (a, b) = (run(), run());
        assert_eq!(a.time, b.time);
        assert_eq!(a.usage, b.usage);
        assert_eq!(a.events, b.events);
    }
}
