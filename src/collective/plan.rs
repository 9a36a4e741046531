//! A collective resolved against a topology: its connections, the algorithm
//! and protocol NCCL's tuner picks (or the user forced), the channels the
//! call runs on and how its data is dealt over them, what each channel's
//! steps move at, and the latencies each part of the call pays; then the
//! task graph that simulates it.

use crate::config::hardware::{CtaRates, HardwareModel, PathCost};
use crate::engine::{TaskGraph, TaskId};
use crate::network::{LinkId, Path};
use crate::topology::{LinkKind, Medium, NodeKind, Topology};
use crate::transport::{self, Connection, Mode, PathClass, Pipe, PipeRules, TransportError};
use crate::units::{Bandwidth, Bytes, Time};

use super::nccl::{self, CallShape, RingGraph};
use super::rate::{self, Primitive};
use super::{Algorithm, Choice, CollectiveError, Op, PROTOCOLS, Protocol, Request, direct, layout, nvls, ring, tree};

/// Algorithms NCCL's tuner chooses among, in NCCL's order (ties go to the
/// first). One-shot and two-shot are not NCCL's: they run only when asked.
const NCCL_ALGORITHMS: [Algorithm; 3] = [Algorithm::Tree, Algorithm::Ring, Algorithm::Nvls];

/// A collective resolved against a topology.
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
    /// Data bytes each channel handles.
    channel_bytes: Vec<Bytes>,
    /// What the ring connections really use ("nvswitch", "shm+p2p", ...).
    pub transport: String,
    /// NCCL's closed-form time for the chosen algorithm and protocol, µs
    /// (none for algorithms NCCL does not have).
    pub nccl_estimate_us: Option<f64>,
    /// What NCCL does differently from what was asked, if anything.
    pub note: Option<String>,
}

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
        let connections = ring_connections(topo, &request, max_rings)?;
        let class = connections.iter().flatten().map(Connection::class).max().unwrap_or(PathClass::Nvlink);
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
        let graph = nccl::ring_search(gpu.arch, arch, model.nccl.max_channels, gpu_gbps, hop_gbps, connections.len() as u32);

        let mut plan = Plan {
            algorithm: Algorithm::Ring,
            protocol: Protocol::Simple,
            connections,
            class,
            nccl: graph,
            channels: 1,
            channel_bytes: vec![request.bytes],
            transport,
            nccl_estimate_us: None,
            note: None,
            request,
        };
        plan.choose(topo, model)?;
        plan.channel_bytes = plan.deal_channels(model);
        plan.channels = plan.channel_bytes.len() as u32;
        Ok(plan)
    }

    /// Why `algorithm` cannot run this request, if it cannot.
    fn unavailable(&self, topo: &Topology, model: &HardwareModel, algorithm: Algorithm) -> Option<String> {
        let op = self.request.op;
        let needs_allreduce = |name: &str| {
            (op != Op::AllReduce).then(|| format!("{name} is an allreduce algorithm; NCCL runs {op} only as a ring (or NVLS)"))
        };
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
                    (self.request.bytes > model.direct.max_bytes).then(|| {
                        format!("{algorithm} takes at most {} (its staging buffer); larger messages go to NCCL", model.direct.max_bytes)
                    })
                })
                .or_else(|| self.direct_reads(topo).err()),
        }
    }

    /// Protocols an algorithm can run with over this plan's paths: as NCCL
    /// enables them by default, or the one the user forced, which NCCL runs
    /// even where it would not pick it (LL128 off NVLink).
    fn protocols_for(&self, model: &HardwareModel, algorithm: Algorithm) -> Vec<Protocol> {
        match algorithm {
            // NVLS runs Simple only; direct kernels use plain loads, reported as simple.
            Algorithm::Nvls | Algorithm::OneShot | Algorithm::TwoShot => vec![Protocol::Simple],
            Algorithm::Ring | Algorithm::Tree => match self.request.protocol {
                Choice::Fixed(p) => vec![p],
                Choice::Auto => {
                    PROTOCOLS.into_iter().filter(|p| !(p.model(model).needs_nvlink && self.class != PathClass::Nvlink)).collect()
                }
            },
        }
    }

    /// Fixes the algorithm and protocol: as asked, or as NCCL's tuner would.
    fn choose(&mut self, topo: &Topology, model: &HardwareModel) -> Result<(), CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
        let n = self.request.ranks.len() as u32;
        let algorithms: Vec<Algorithm> = match self.request.algorithm {
            Choice::Fixed(a) => {
                if let Some(reason) = self.unavailable(topo, model, a) {
                    return Err(CollectiveError::Unsupported(reason));
                }
                vec![a]
            }
            Choice::Auto => NCCL_ALGORITHMS.into_iter().filter(|&a| self.unavailable(topo, model, a).is_none()).collect(),
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
                "no algorithm and protocol among those asked can run {} over {} paths (NVLS needs an NVSwitch with in-switch reduction)",
                self.request.op, self.transport
            ))
        })?;
        self.algorithm = algorithm;
        self.protocol = protocol;
        self.nccl_estimate_us = estimate;
        let forced_off_nvlink = protocol.model(model).needs_nvlink && self.class != PathClass::Nvlink;
        let forced_proto_picked_tree =
            self.request.algorithm == Choice::Auto && self.request.protocol != Choice::Auto && algorithm == Algorithm::Tree;
        self.note = match (forced_off_nvlink, forced_proto_picked_tree) {
            (true, _) => Some(format!("{protocol} forced: NCCL runs it over {} only when asked", self.transport)),
            (false, true) => Some(format!("with {protocol} forced NCCL's tuner picks tree here")),
            _ => None,
        };
        Ok(())
    }

    /// NCCL's channel count for this layout, or the forced one.
    fn comm_channels(&self, model: &HardwareModel) -> u32 {
        match self.algorithm {
            Algorithm::Nvls => model.nvls.channels,
            _ => self.request.channels.unwrap_or(self.nccl.runtime_channels),
        }
    }

    /// The data each channel handles, as NCCL deals it out.
    fn deal_channels(&self, model: &HardwareModel) -> Vec<Bytes> {
        let n = self.request.ranks.len() as u32;
        match self.algorithm {
            Algorithm::OneShot | Algorithm::TwoShot => vec![self.request.bytes],
            Algorithm::Ring | Algorithm::Tree | Algorithm::Nvls => {
                let protocol = self.protocol.model(model);
                let ring_ll = self.algorithm == Algorithm::Ring && self.protocol == Protocol::Ll;
                let threshold = match self.algorithm {
                    Algorithm::Nvls => 0,
                    _ => protocol.channel_threshold.0 * if ring_ll { u64::from(n) } else { 1 },
                };
                let call = CallShape { op: self.request.op, protocol: self.protocol, ranks: n, bytes: self.request.bytes.0, threshold };
                nccl::channel_split(&call, self.comm_channels(model)).into_iter().map(Bytes).collect()
            }
        }
    }

    fn costs<'m>(&self, model: &'m HardwareModel) -> &'m PathCost {
        let protocol = self.protocol.model(model);
        match self.class {
            PathClass::Nvlink => &protocol.nvlink,
            PathClass::Pcie => &protocol.pcie,
            PathClass::Shm => &protocol.shm,
        }
    }

    /// The thread-block rates of this plan's GPU and protocol, and the
    /// path's own per-channel limit.
    fn channel_physics(&self, topo: &Topology, model: &HardwareModel) -> Result<(CtaRates, Option<f64>), CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let cta = model.gpu_cta_rates(gpu, self.protocol).map_err(CollectiveError::Model)?;
        Ok((cta, self.costs(model).channel_rate.map(Bandwidth::bytes_per_sec)))
    }

    /// How much every channel slows when this call's channels share links
    /// (the contention knee of src/collective/rate.rs): `flows` lists each
    /// channel's connections with the wire rate it would push alone.
    fn contention(&self, topo: &Topology, model: &HardwareModel, flows: &[(&Connection, f64)]) -> f64 {
        let mut demand = vec![0.0f64; topo.links().len()];
        let mut capacity: Vec<f64> = topo.links().iter().map(|l| l.bandwidth.bytes_per_sec()).collect();
        for &(connection, wire_rate) in flows {
            let (paths, read): (Vec<&Path>, Option<&Path>) = match connection {
                Connection::Direct { path, .. } => (vec![path], None),
                Connection::Staged { write, read } => (vec![write, read], Some(read)),
            };
            for path in paths {
                for link in path.links.iter() {
                    demand[link.index()] += wire_rate;
                }
            }
            // GPU threads reading host memory get less of the link into
            // the GPU than a DMA engine does.
            if let Some(&last) = read.and_then(|r| r.links.last())
                && let LinkKind::Pcie { generation, .. } = &topo.link(last).kind
                && let Ok(pcie) = model.pcie(generation)
            {
                capacity[last.index()] = topo.link(last).bandwidth.bytes_per_sec() * pcie.host_read_efficiency;
            }
        }
        demand
            .iter()
            .zip(&capacity)
            .filter(|(d, _)| **d > 0.0)
            .map(|(d, c)| rate::contention_factor(*d, *c, model.contention.sharpness))
            .fold(1.0, f64::min)
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

    /// The fixed latency a call pays before its first step: the caller's
    /// cost, then the kernel's start with the protocol's set-up.
    fn start_latency(&self, model: &HardwareModel) -> Result<Time, CollectiveError> {
        let caller = model.stack(self.request.stack).map_err(CollectiveError::Model)?.collective_call;
        let kernel = match self.algorithm {
            Algorithm::Nvls => model.nvls.latency,
            Algorithm::OneShot | Algorithm::TwoShot => model.direct.launch_latency,
            Algorithm::Ring | Algorithm::Tree => self.costs(model).base_latency,
        };
        Ok(caller + kernel)
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
        let start = graph.delay(self.start_latency(model)?, after);
        if n < 2 || self.request.bytes.0 == 0 {
            return Ok(start);
        }
        let protocol = self.protocol.model(model);
        // NCCL's transports are SM-driven: through host memory the reader
        // follows the writer, and a step pays the protocol's step cost on
        // top of the links' hop latency.
        let costs = self.costs(model);
        let rules = PipeRules { latency: costs.step_latency, overhead: costs.slice_overhead, streaming: true };
        let pipe = |connection: &Connection| Pipe::new(connection.clone(), rules, model);
        let ends = match self.algorithm {
            Algorithm::Ring => {
                let (cta, path_rate) = self.channel_physics(topo, model)?;
                let op = self.request.op;
                let ring_of = |c: usize| &self.connections[c % self.connections.len()];
                let alone = rate::ring_channel_rate(op, n, &cta, path_rate) * protocol.wire_factor;
                let flows: Vec<(&Connection, f64)> =
                    (0..self.channel_bytes.len()).flat_map(|c| ring_of(c).iter().map(move |k| (k, alone))).collect();
                let slowdown = self.contention(topo, model, &flows);
                let rates = ring::StepRates {
                    send: Bandwidth::from_bytes_per_sec_f64(alone * slowdown),
                    steps: rate::ring_sends(op, n),
                    receive: Bandwidth::from_bytes_per_sec_f64(rate::ring_final(op).rate(&cta) * slowdown),
                };
                let mut pipes: Vec<Vec<Pipe>> = (0..self.channel_bytes.len()).map(|c| ring_of(c).iter().map(pipe).collect()).collect();
                let mut plan = ring::RingPlan {
                    op,
                    ranks: n,
                    channel_bytes: self.channel_bytes.clone(),
                    pipes: &mut pipes,
                    chunk: protocol.chunk,
                    slices_per_chunk: protocol.slices_per_chunk,
                    min_slice: protocol.min_slice,
                    wire_factor: protocol.wire_factor,
                    rates,
                };
                if op == Op::Broadcast { ring::broadcast(&mut plan, graph, start) } else { ring::build(&mut plan, graph, start) }
            }
            Algorithm::Tree => self.build_tree(topo, model, graph, start, &pipe)?,
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
                let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
                let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
                let efficiency = arch.nvls_efficiency * model.nvls.efficiency_vs_nccl;
                let plan = nvls::NvlsPlan {
                    channel_bytes: self.channel_bytes.clone(),
                    up,
                    down,
                    chunk: nvls::chunk(model.nvls.chunk, self.request.bytes, self.channel_bytes.len(), n),
                    channel_cap: port.scaled(efficiency / f64::from(model.nvls.channels)),
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

    /// The tree (a chain inside one node) with its channels' connections
    /// and rates.
    fn build_tree(
        &self,
        topo: &Topology,
        model: &HardwareModel,
        graph: &mut TaskGraph<Path>,
        start: TaskId,
        pipe: &dyn Fn(&Connection) -> Pipe,
    ) -> Result<Vec<TaskId>, CollectiveError> {
        let n = self.request.ranks.len();
        let protocol = self.protocol.model(model);
        let (cta, path_rate) = self.channel_physics(topo, model)?;
        let mut connections: Vec<(Vec<Connection>, Vec<Connection>)> = Vec::new();
        for c in 0..self.channel_bytes.len() {
            let order = tree::chain(n, c);
            let (mut up, mut down) = (Vec::new(), Vec::new());
            for k in 0..n - 1 {
                let (root_side, far_side) = (self.request.ranks[order[k]], self.request.ranks[order[k + 1]]);
                up.push(transport::connect_with_fallback(topo, far_side, root_side, self.request.mode)?.0);
                down.push(transport::connect_with_fallback(topo, root_side, far_side, self.request.mode)?.0);
            }
            connections.push((up, down));
        }
        let alone = rate::chain_channel_rate(n, &cta, path_rate) * protocol.wire_factor;
        let flows: Vec<(&Connection, f64)> = connections.iter().flat_map(|(up, down)| up.iter().chain(down).map(|k| (k, alone))).collect();
        let slowdown = self.contention(topo, model, &flows);
        let rates = tree::ChainRates {
            send: Bandwidth::from_bytes_per_sec_f64(alone * slowdown),
            receive: Bandwidth::from_bytes_per_sec_f64(Primitive::Recv.rate(&cta) * slowdown),
        };
        let mut channels: Vec<tree::ChainPipes> = connections
            .iter()
            .map(|(up, down)| tree::ChainPipes { up: up.iter().map(pipe).collect(), down: down.iter().map(pipe).collect() })
            .collect();
        let mut plan = tree::TreePlan {
            channel_bytes: self.channel_bytes.clone(),
            channels: &mut channels,
            chunk: nccl::tree_chunk(protocol.tree_chunk, self.protocol, self.request.bytes, self.channel_bytes.len(), n),
            wire_factor: protocol.wire_factor,
            rates,
        };
        Ok(tree::build(&mut plan, graph, start))
    }

    /// The links this plan's rings cross, for tests and reports.
    pub fn ring_links(&self) -> Vec<LinkId> {
        let mut links: Vec<LinkId> = self
            .connections
            .iter()
            .flatten()
            .flat_map(|c| match c {
                Connection::Direct { path, .. } => path.links.to_vec(),
                Connection::Staged { write, read } => write.links.iter().chain(read.links.iter()).copied().collect(),
            })
            .collect();
        links.sort();
        links.dedup();
        links
    }
}

/// Lays rings (link-disjoint over direct links on a mesh) and connects
/// every hop in the requested mode.
fn ring_connections(topo: &Topology, request: &Request, max_rings: usize) -> Result<Vec<Vec<Connection>>, CollectiveError> {
    let n = request.ranks.len();
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
    Ok(connections)
}
