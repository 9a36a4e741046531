//! Collectives as task graphs: allreduce (ring, tree, NVLS, one-shot,
//! two-shot), reduce-scatter, all-gather and broadcast; NCCL's protocols
//! (Simple, LL, LL128) and channels; and the choice of algorithm and protocol
//! as NCCL's tuner makes it. Knows nothing of LLMs.

mod direct;
mod layout;
pub mod nccl;
mod nvls;
mod ring;
mod tree;

use std::fmt;
use std::str::FromStr;

use crate::config::hardware::{HardwareModel, PathCost, Protocol as ProtocolModel};
use crate::engine::{self, TaskGraph, TaskId};
use crate::network::{LinkUsage, Path};
use crate::topology::{Medium, NodeId, NodeKind, Topology};
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
    /// `connections[r][i]`: ring r, from position i to position i+1. Rings
    /// are link-disjoint where the links are direct (a mesh).
    connections: Vec<Vec<Connection>>,
    pub class: PathClass,
    pub nccl: RingGraph,
    /// Channels this call uses.
    pub channels: u32,
    /// What the ring connections really use ("nvswitch", "p2p+shm", ...).
    pub transport: String,
    /// NCCL's closed-form time for the chosen algorithm and protocol, µs
    /// (none for algorithms NCCL does not have).
    pub nccl_estimate_us: Option<f64>,
    /// Largest message the direct (one-shot, two-shot) kernels take.
    max_direct_bytes: Bytes,
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
    pub nccl_estimate_us: Option<f64>,
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

/// Algorithms NCCL's tuner chooses among when left to auto. One-shot and
/// two-shot are not NCCL's: they run only when asked for.
const NCCL_ALGORITHMS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Nvls];

impl Plan {
    /// Resolves `request` on `topo`: connections in the requested mode, ring
    /// layout, NCCL's channel count, and (if left to auto) the algorithm and
    /// protocol NCCL's cost model picks.
    pub fn new(topo: &Topology, model: &HardwareModel, request: Request) -> Result<Plan, CollectiveError> {
        Plan::with_ring_limit(topo, model, request, usize::MAX)
    }

    /// Like [`Plan::new`], with at most `max_rings` rings laid over direct
    /// links (1: a single ring, as a naive layout would use).
    pub fn with_ring_limit(topo: &Topology, model: &HardwareModel, request: Request, max_rings: usize) -> Result<Plan, CollectiveError> {
        let n = request.ranks.len();
        if n == 0 {
            return Err(CollectiveError::Unsupported("a collective needs at least one GPU".into()));
        }
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;

        // Lay rings (link-disjoint over direct links on a mesh), and check
        // the mode with every pair they need.
        let direct = |a: usize, b: usize| topo.path(request.ranks[a], request.ranks[b], Medium::NvLinkDirect).is_some();
        let direct_only =
            n > 1 && (request.mode == Mode::Nvlink || (request.mode == Mode::Auto && !topo.has(NodeKind::NvSwitch) && direct(0, 1)));
        let mut rings = if direct_only { layout::disjoint_rings(n, direct, (n - 1).min(max_rings.max(1))) } else { vec![(0..n).collect()] };
        if rings.is_empty() && request.mode == Mode::Auto {
            // Direct links do not close a ring: one ring in rank order, each
            // pair over whatever auto picks for it.
            rings = vec![(0..n).collect()];
        }
        if rings.is_empty() {
            return Err(TransportError::Unavailable {
                mode: Mode::Nvlink,
                topology: topo.name.clone(),
                reason: "the GPUs' direct NVLinks do not close a ring".into(),
            }
            .into());
        }
        let mut connections = Vec::new();
        for ring in &rings {
            let mut hops = Vec::new();
            for i in 0..n {
                if n == 1 {
                    break;
                }
                let (a, b) = (request.ranks[ring[i]], request.ranks[ring[(i + 1) % n]]);
                hops.push(transport::connect_with_fallback(topo, a, b, request.mode)?.0);
            }
            connections.push(hops);
        }
        let class = worst_class(connections.iter().flatten().map(Connection::class));
        let mut modes: Vec<Mode> = connections.iter().flatten().map(|c| c.mode(topo)).collect();
        // The mode asked for first, then what pairs fell back to: "p2p+shm".
        modes.sort_by_key(|&m| (m != request.mode, m));
        modes.dedup();
        let transport =
            if modes.is_empty() { request.mode.to_string() } else { modes.iter().map(Mode::to_string).collect::<Vec<_>>().join("+") };

        // NCCL's ring graph for this layout.
        let (mut hop_gbps, mut gpu_gbps) = (f64::INFINITY, 0.0f64);
        for connection in connections.iter().flatten() {
            let (hop, own) = nccl::connection_gbps(topo, model, connection).map_err(CollectiveError::Model)?;
            hop_gbps = hop_gbps.min(hop);
            gpu_gbps = gpu_gbps.max(own);
        }
        if !hop_gbps.is_finite() {
            (hop_gbps, gpu_gbps) = (1.0, 1.0);
        }
        let nccl = nccl::ring_search(gpu.arch, arch, model.nccl.max_channels, gpu_gbps, hop_gbps, rings.len() as u32);

        let mut plan = Plan {
            algorithm: Algorithm::Ring,
            protocol: Protocol::Simple,
            connections,
            class,
            nccl,
            channels: 1,
            transport,
            nccl_estimate_us: None,
            max_direct_bytes: model.direct.max_bytes,
            request,
        };
        plan.choose(topo, model)?;
        plan.channels = plan.channels_used(model);
        Ok(plan)
    }

    /// Why `algorithm` cannot run this request, if it cannot.
    fn unavailable(&self, topo: &Topology, algorithm: Algorithm) -> Option<String> {
        let op = self.request.op;
        let needs_allreduce = |name: &str| (op != Op::AllReduce).then(|| format!("{name} is an allreduce algorithm; {op} runs as a ring"));
        match algorithm {
            Algorithm::Ring => None,
            Algorithm::Tree => needs_allreduce("tree"),
            Algorithm::Nvls => needs_allreduce("nvls").or_else(|| {
                let on_switch = self.transport == Mode::Nvswitch.to_string();
                (!(topo.policy.nvls && on_switch)).then(|| {
                    format!("nvls needs GPUs on an NVSwitch that reduces in the switch (topology {} over {})", topo.name, self.transport)
                })
            }),
            Algorithm::OneShot | Algorithm::TwoShot => needs_allreduce(&algorithm.to_string())
                .or_else(|| {
                    (self.request.bytes > self.max_direct_bytes).then(|| {
                        format!("{algorithm} takes at most {} (its staging buffer); larger messages go to NCCL", self.max_direct_bytes)
                    })
                })
                .or_else(|| self.direct_reads(topo).err()),
        }
    }

    /// Protocols an algorithm can run with over this plan's paths.
    fn protocols_for(&self, model: &HardwareModel, algorithm: Algorithm) -> Vec<Protocol> {
        let candidates: Vec<Protocol> = match self.request.protocol {
            Choice::Fixed(p) => vec![p],
            Choice::Auto => PROTOCOLS.to_vec(),
        };
        candidates
            .into_iter()
            .filter(|p| match algorithm {
                // NVLS runs Simple only; direct kernels use plain loads, reported as simple.
                Algorithm::Nvls | Algorithm::OneShot | Algorithm::TwoShot => *p == Protocol::Simple,
                _ => !(p.model(model).needs_nvlink && self.class != PathClass::Nvlink),
            })
            .collect()
    }

    /// Fixes the algorithm and protocol: as asked, or as NCCL's tuner would.
    fn choose(&mut self, topo: &Topology, model: &HardwareModel) -> Result<(), CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
        let n = self.request.ranks.len() as u32;
        let algorithms: Vec<Algorithm> = match self.request.algorithm {
            Choice::Fixed(a) => {
                if let Some(reason) = self.unavailable(topo, a) {
                    return Err(CollectiveError::Unsupported(reason));
                }
                vec![a]
            }
            Choice::Auto => NCCL_ALGORITHMS.into_iter().filter(|&a| self.unavailable(topo, a).is_none()).collect(),
        };
        let mut best: Option<(Option<f64>, Algorithm, Protocol)> = None;
        for &algorithm in &algorithms {
            for protocol in self.protocols_for(model, algorithm) {
                let estimate =
                    nccl::predicted_us(model, arch, &self.nccl, self.class, self.request.op, algorithm, protocol, n, self.request.bytes.0);
                let direct = matches!(algorithm, Algorithm::OneShot | Algorithm::TwoShot);
                if estimate.is_none() && !direct {
                    continue;
                }
                let better = match (&best, estimate) {
                    (None, _) => true,
                    (Some((Some(t), _, _)), Some(e)) => e < *t,
                    _ => false,
                };
                if better {
                    best = Some((estimate, algorithm, protocol));
                }
            }
        }
        let (estimate, algorithm, protocol) = best.ok_or_else(|| {
            CollectiveError::Unsupported(format!(
                "no algorithm and protocol among those asked can run {} over {} paths (LL128 needs NVLink; NVLS needs an NVSwitch with in-switch reduction)",
                self.request.op, self.transport
            ))
        })?;
        self.algorithm = algorithm;
        self.protocol = protocol;
        self.nccl_estimate_us = estimate;
        Ok(())
    }

    /// Channels the call really uses: NCCL drops channels while each would
    /// get less than its threshold, and spreads small calls over few.
    fn channels_used(&self, model: &HardwareModel) -> u32 {
        let bytes = self.request.bytes.0;
        match self.algorithm {
            Algorithm::OneShot | Algorithm::TwoShot => return 1,
            Algorithm::Nvls => return bytes.div_ceil(model.nvls.chunk.0).clamp(1, u64::from(model.nvls.channels)) as u32,
            Algorithm::Ring | Algorithm::Tree => {}
        }
        let protocol = self.protocol.model(model);
        let n = self.request.ranks.len() as u64;
        let threshold = if self.protocol == Protocol::Ll { protocol.channel_threshold.0 * n } else { protocol.channel_threshold.0 };
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

    /// Rate of one channel on the wire. A channel is one thread block: what
    /// it can move is a property of the GPU and of the kind of path, not of
    /// the topology. It is NCCL's modelled bus bandwidth for the algorithm
    /// and protocol on the GPU's own links (all its NVLinks, or its PCIe
    /// link), spread over the channels NCCL runs there, scaled by the
    /// calibrated channel efficiency, in wire bytes.
    pub fn channel_cap(&self, topo: &Topology, model: &HardwareModel) -> Result<Bandwidth, CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
        let own_gbps = nccl::own_gbps(model, gpu, self.class).map_err(CollectiveError::Model)?;
        let own = nccl::ring_search(gpu.arch, arch, model.nccl.max_channels, own_gbps, own_gbps, 1);
        let bus = nccl::bus_gbps(model, arch, &own, self.algorithm, self.protocol, self.request.ranks.len() as u32);
        let per_channel = bus / f64::from(own.runtime_channels);
        let protocol = self.protocol.model(model);
        Ok(Bandwidth::from_gbps_f64(per_channel * self.costs(model).channel_efficiency * protocol.wire_factor))
    }

    /// Every rank's read paths from each of its peers, for the direct
    /// algorithms: they need peer access (not a staged path).
    fn direct_reads(&self, topo: &Topology) -> Result<Vec<Vec<Path>>, String> {
        let ranks = &self.request.ranks;
        ranks
            .iter()
            .map(|&reader| {
                ranks
                    .iter()
                    .filter(|&&peer| peer != reader)
                    .map(|&peer| match transport::connect(topo, peer, reader, self.request.mode) {
                        Ok(Connection::Direct { path, .. }) => Ok(path),
                        Ok(Connection::Staged { .. }) | Err(_) => Err(format!(
                            "{} needs every GPU to read its peers directly; {} cannot reach {} that way over {}",
                            self.request.algorithm_label(),
                            topo.node(reader).name,
                            topo.node(peer).name,
                            self.request.mode
                        )),
                    })
                    .collect()
            })
            .collect()
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
        let n = self.request.ranks.len();
        let base = match self.algorithm {
            Algorithm::Nvls => model.nvls.latency,
            Algorithm::OneShot | Algorithm::TwoShot => model.direct.launch_latency,
            Algorithm::Ring | Algorithm::Tree => self.costs(model).base_latency,
        };
        let start = graph.delay(base, after);
        if n < 2 || self.request.bytes.0 == 0 {
            return Ok(start);
        }
        let costs = self.costs(model);
        let protocol = self.protocol.model(model);
        // NCCL's SHM transport is SM-driven: the reader follows the writer.
        let rules = PipeRules { latency: costs.step_latency, overhead: costs.slice_overhead, streaming: true };
        let pipe = |connection: &Connection| Pipe::new(connection.clone(), rules, model);
        let ends = match self.algorithm {
            Algorithm::Ring => {
                let mut pipes: Vec<Vec<Pipe>> =
                    (0..self.channels as usize).map(|c| self.connections[c % self.connections.len()].iter().map(pipe).collect()).collect();
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
                    ring::broadcast(&mut plan, graph, start)
                } else {
                    ring::build(&mut plan, graph, start)
                }
            }
            Algorithm::Tree => {
                let mut channels = Vec::new();
                for c in 0..self.channels as usize {
                    let parent = tree::parents(n, c % 2);
                    let mut up = Vec::new();
                    let mut down = Vec::new();
                    for (i, p) in parent.iter().enumerate() {
                        match p {
                            Some(p) => {
                                let (child, parent) = (self.request.ranks[i], self.request.ranks[*p]);
                                up.push(Some(pipe(&transport::connect_with_fallback(topo, child, parent, self.request.mode)?.0)));
                                down.push(Some(pipe(&transport::connect_with_fallback(topo, parent, child, self.request.mode)?.0)));
                            }
                            None => {
                                up.push(None);
                                down.push(None);
                            }
                        }
                    }
                    channels.push(tree::TreePipes { parent, up, down });
                }
                let mut plan = tree::TreePlan {
                    bytes: self.request.bytes,
                    channels: &mut channels,
                    chunk: Bytes(protocol.chunk.0.div_ceil(u64::from(protocol.slices_per_chunk))),
                    wire_factor: protocol.wire_factor,
                    channel_cap: self.channel_cap(topo, model)?,
                };
                tree::build(&mut plan, graph, start)
            }
            Algorithm::Nvls => {
                let switch_path = |from, to| {
                    topo.path(from, to, Medium::NvSwitch)
                        .ok_or_else(|| CollectiveError::Unsupported("nvls needs every GPU on the NVSwitch".into()))
                };
                let switch = topo
                    .nodes_of(NodeKind::NvSwitch)
                    .next()
                    .ok_or_else(|| CollectiveError::Unsupported("nvls needs an NVSwitch".into()))?;
                let up = self.request.ranks.iter().map(|&g| switch_path(g, switch)).collect::<Result<Vec<_>, _>>()?;
                let down = self.request.ranks.iter().map(|&g| switch_path(switch, g)).collect::<Result<Vec<_>, _>>()?;
                let port = topo.nvlink_bandwidth(self.request.ranks[0]);
                let plan = nvls::NvlsPlan {
                    bytes: self.request.bytes,
                    up,
                    down,
                    channels: self.channels,
                    chunk: model.nvls.chunk,
                    channel_cap: port.scaled(model.nvls.efficiency / f64::from(model.nvls.channels)),
                };
                nvls::build(&plan, graph, start)
            }
            Algorithm::OneShot | Algorithm::TwoShot => {
                let plan = direct::DirectPlan {
                    bytes: self.request.bytes,
                    reads: self.direct_reads(topo).map_err(CollectiveError::Unsupported)?,
                    wire_factor: 1.0 / model.direct.efficiency,
                    barrier: model.direct.barrier_latency,
                    two_shot: self.algorithm == Algorithm::TwoShot,
                };
                vec![direct::build(&plan, graph, start)]
            }
        };
        Ok(graph.join(&ends))
    }
}

impl Request {
    fn algorithm_label(&self) -> String {
        match self.algorithm {
            Choice::Auto => "this algorithm".to_string(),
            Choice::Fixed(a) => a.to_string(),
        }
    }
}

/// How an algorithm left to auto is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Selection {
    /// NCCL's tuner, among NCCL's algorithms (ring, tree, NVLS).
    #[default]
    Nccl,
    /// The fastest in simulation among NCCL's choice and the one-shot and
    /// two-shot kernels that inference engines use for small messages.
    Fastest,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Selection::Nccl => "nccl",
            Selection::Fastest => "fastest",
        })
    }
}

impl FromStr for Selection {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "nccl" => Ok(Selection::Nccl),
            "fastest" => Ok(Selection::Fastest),
            other => Err(format!(
                "unknown allreduce selection {other:?}: use nccl (NCCL's tuner) or fastest (NCCL or the one-shot/two-shot kernels, whichever is faster)"
            )),
        }
    }
}

/// Plans `request` as `selection` says and simulates it alone on an idle
/// network. Under `Fastest`, an algorithm left to auto is whichever of
/// NCCL's choice, one-shot and two-shot finishes first (NCCL's choice on a
/// tie); a fixed algorithm is kept.
pub fn plan_and_simulate(
    topo: &Topology,
    model: &HardwareModel,
    request: Request,
    selection: Selection,
) -> Result<(Plan, Outcome), CollectiveError> {
    let nccl = Plan::new(topo, model, request.clone())?;
    let mut best = (simulate_plan(topo, model, &nccl)?, nccl);
    if selection == Selection::Fastest && request.algorithm == Choice::Auto {
        for algorithm in [Algorithm::OneShot, Algorithm::TwoShot] {
            let Ok(plan) = Plan::new(topo, model, Request { algorithm: Choice::Fixed(algorithm), ..request.clone() }) else { continue };
            let outcome = simulate_plan(topo, model, &plan)?;
            if outcome.time < best.0.time {
                best = (outcome, plan);
            }
        }
    }
    Ok((best.1, best.0))
}

/// Runs of equal winners: (label, first size, last size) for each stretch of
/// consecutive sizes where the same algorithm is fastest.
pub fn crossovers(winners: &[(Bytes, String)]) -> Vec<(String, Bytes, Bytes)> {
    let mut runs: Vec<(String, Bytes, Bytes)> = Vec::new();
    for (bytes, label) in winners {
        match runs.last_mut() {
            Some((last, _, to)) if last == label => *to = *bytes,
            _ => runs.push((label.clone(), *bytes, *bytes)),
        }
    }
    runs
}

/// Simulates one collective alone on an idle network, with the algorithm
/// NCCL's tuner would choose where it is left to auto.
pub fn simulate(topo: &Topology, model: &HardwareModel, request: Request) -> Result<Outcome, CollectiveError> {
    plan_and_simulate(topo, model, request, Selection::Nccl).map(|(_, outcome)| outcome)
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
        nccl_estimate_us: plan.nccl_estimate_us,
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
