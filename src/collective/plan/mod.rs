//! A collective resolved against a topology: its connections, the algorithm
//! and protocol NCCL's tuner picks (or the user forced), the channels the
//! call runs on and how its data is dealt over them, what each channel's
//! steps move at, and the latencies each part of the call pays; then the
//! tasks that simulate it (src/collective/plan/streams.rs).

mod streams;

use crate::config::hardware::HardwareModel;
use crate::network::{LinkId, Path};
use crate::topology::{Medium, NodeKind, Topology};
use crate::transport::{self, Connection, Mode, PathClass, TransportError};
use crate::units::Bytes;

use super::nccl::{self, CallShape, RingGraph};
use super::{Algorithm, Choice, CollectiveError, Op, PROTOCOLS, Protocol, Request, layout};

pub use streams::{Body, Expansion};

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
    /// Thread blocks NCCL gives NVLS on this GPU's architecture.
    nvls_channels: u32,
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
            nvls_channels: arch.nvls_channels,
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
        if let Some(note) = plan.forced_channels_note() {
            plan.note = Some(plan.note.take().map_or(note.clone(), |earlier| format!("{earlier}; {note}")));
        }
        Ok(plan)
    }

    /// What became of a forced channel count, where the call does not run
    /// that many: NCCL drops channels from a call too small to give each
    /// its threshold of bytes (enqueue.cc, as without a forced count);
    /// NVLS keeps its own channels (NCCL_NVLS_NCHANNELS, not the ring and
    /// tree's NCCL_MIN/MAX_NCHANNELS); the direct kernels are not NCCL's.
    fn forced_channels_note(&self) -> Option<String> {
        let forced = self.request.channels?;
        if self.nccl_shortcut().is_some() || self.channels == forced {
            return None;
        }
        Some(match self.algorithm {
            Algorithm::Ring | Algorithm::Tree => {
                format!("{} of the {forced} channels forced: NCCL drops channels from a call this small", self.channels)
            }
            Algorithm::Nvls => format!("nvls runs its own {} channels; --channels sets ring's and tree's", self.channels),
            Algorithm::OneShot | Algorithm::TwoShot => format!("{} is one kernel outside NCCL: --channels does not apply", self.algorithm),
        })
    }

    /// What NCCL does instead of a collective, if it does: an empty call is
    /// dropped, and one rank's call is a copy on its GPU (enqueue.cc
    /// taskAppend, ncclLaunchOneRank).
    pub fn nccl_shortcut(&self) -> Option<&'static str> {
        if self.request.bytes.0 == 0 {
            Some("empty: NCCL drops the call")
        } else if self.request.ranks.len() < 2 {
            Some("one rank: NCCL copies the buffer on the GPU")
        } else {
            None
        }
    }

    /// Why `algorithm` cannot run this request, if it cannot.
    fn unavailable(&self, topo: &Topology, model: &HardwareModel, algorithm: Algorithm) -> Option<String> {
        let op = self.request.op;
        let needs_allreduce = |name: &str| {
            (op != Op::AllReduce).then(|| match (name, op) {
                ("nvls", Op::AllGather | Op::ReduceScatter) => format!(
                    "icsim models nvls for allreduce only (NCCL also runs {op} over NVLS on one node of up to 32 ranks; not modelled): use ring"
                ),
                _ => format!("{name} runs allreduce only; NCCL runs {op} as a ring"),
            })
        };
        let reason = match algorithm {
            Algorithm::Ring => None,
            Algorithm::Tree => needs_allreduce("tree"),
            Algorithm::Nvls => needs_allreduce("nvls")
                .or_else(|| {
                    let on_switch = self.transport == Mode::Nvswitch.to_string();
                    (!(topo.policy.nvls && on_switch)).then(|| {
                        format!(
                            "nvls needs GPUs on an NVSwitch that reduces in the switch (topology {} over {})",
                            topo.name, self.transport
                        )
                    })
                })
                .or_else(|| {
                    (!self.request.element.switch_reducible()).then(|| "nvls cannot reduce 8-bit elements in the switch".to_string())
                }),
            Algorithm::OneShot | Algorithm::TwoShot => needs_allreduce(&algorithm.to_string())
                .or_else(|| {
                    let ranks = self.request.ranks.len();
                    (ranks > model.direct.max_ranks as usize).then(|| {
                        format!(
                            "{algorithm} runs on at most {} GPUs (the custom allreduce kernels of vLLM and TensorRT-LLM serve one NVLink node), not {ranks}: use ring, tree or nvls (NCCL)",
                            model.direct.max_ranks
                        )
                    })
                })
                .or_else(|| {
                    (self.request.bytes > model.direct.max_bytes).then(|| {
                        format!("{algorithm} takes at most {} (its staging buffer); larger messages go to NCCL", model.direct.max_bytes)
                    })
                })
                .or_else(|| self.direct_reads(topo).err()),
        };
        reason.or_else(|| self.protocol_unsupported(algorithm))
    }

    /// Why `algorithm` cannot run the protocol the user forced, if it
    /// cannot: NCCL's NVLS kernels run Simple only (tuning.cc gives NVLS no
    /// LL or LL128 bandwidth), and the direct kernels are no NCCL protocol
    /// at all (plain loads and stores, reported as simple).
    fn protocol_unsupported(&self, algorithm: Algorithm) -> Option<String> {
        let Choice::Fixed(forced) = self.request.protocol else { return None };
        let only_simple = match algorithm {
            Algorithm::Ring | Algorithm::Tree => return None,
            Algorithm::Nvls => "NCCL's NVLS kernels run the simple protocol only",
            Algorithm::OneShot | Algorithm::TwoShot => "its kernel uses plain loads and stores, no NCCL protocol (reported as simple)",
        };
        (forced != Protocol::Simple).then(|| {
            format!("{algorithm} cannot run {forced}: {only_simple}; ring and tree run simple, ll and ll128 (use --proto simple or auto)")
        })
    }

    /// Protocols an algorithm can run with over this plan's paths: as NCCL
    /// enables them by default, or the one the user forced, which NCCL runs
    /// even where it would not pick it (LL128 off NVLink).
    fn protocols_for(&self, model: &HardwareModel, algorithm: Algorithm) -> Vec<Protocol> {
        match algorithm {
            // NVLS runs Simple only; direct kernels use plain loads, reported
            // as simple (another protocol forced is refused by `unavailable`).
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
        if let Some(shortcut) = self.nccl_shortcut() {
            // NCCL takes these before choosing anything (enqueue.cc
            // taskAppend); with one rank its cost table holds ring/Simple
            // only (updateCollCostTable).
            (self.algorithm, self.protocol, self.nccl_estimate_us) = (Algorithm::Ring, Protocol::Simple, Some(0.0));
            self.note = Some(shortcut.to_string());
            return Ok(());
        }
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
                let candidate = nccl::Candidate { class: self.class, op: self.request.op, algorithm, protocol, ranks: n };
                let estimate = nccl::predicted_us(model, arch, &self.nccl, &candidate, self.request.bytes.0);
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
    fn comm_channels(&self) -> u32 {
        match self.algorithm {
            Algorithm::Nvls => self.nvls_channels,
            _ => self.request.channels.unwrap_or(self.nccl.runtime_channels),
        }
    }

    /// The data each channel handles, as NCCL deals it out.
    fn deal_channels(&self, model: &HardwareModel) -> Vec<Bytes> {
        let n = self.request.ranks.len() as u32;
        if self.nccl_shortcut().is_some() {
            return vec![self.request.bytes];
        }
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
                nccl::channel_split(&call, self.comm_channels()).into_iter().map(Bytes).collect()
            }
        }
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
