//! Collectives as task graphs: allreduce (ring, tree, NVLS, one-shot,
//! two-shot), reduce-scatter, all-gather and broadcast; NCCL's protocols
//! (Simple, LL, LL128) and channels; and the choice of algorithm and protocol
//! as NCCL's tuner makes it. Knows nothing of LLMs.
//!
//! Time comes from physics, never from NCCL's closed-form model (kept as a
//! reference column): a channel moves what its thread block's primitives
//! can (src/collective/rate.rs), links bind through the flow network, and
//! latency is a sum of named parts each counted once: the caller's cost per
//! call (its [`Stack`]), the kernel's start with the protocol's set-up
//! (`base_latency`), and per step the protocol's flags and fences
//! (`step_latency`) plus the hop latency of the links the step crosses;
//! an allreduce with empty chunks overlaps the next call of a stream by
//! part of the steps its ranks sit out (`waits`).

mod chunk_lanes;
mod direct;
mod element;
mod layout;
pub mod nccl;
mod nvls;
mod plan;
pub mod rate;
mod ring;
mod symmetry;
mod tree;
mod waits;

use std::fmt;
use std::str::FromStr;

use crate::config::hardware::HardwareModel;
use crate::engine::{self, TaskGraph};
use crate::network::LinkUsage;
use crate::stack::Stack;
use crate::topology::{NodeId, Topology};
use crate::transport::{Mode, TransportError};
use crate::units::{Bandwidth, Bytes, Time};

pub use crate::config::protocol::{PROTOCOLS, Protocol};
pub use element::{DataType, Element};
pub use nccl::RingGraph;
pub use plan::{Body, Expansion, Plan};
pub use symmetry::Symmetry;
pub use waits::{carrying_chunks, overlapped_steps};

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

/// A user's choice: fixed, or left to the tuner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
    /// Who issues the call: its per-call cost is the stack's.
    pub stack: Stack,
    /// NCCL's channel count, forced (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS).
    pub channels: Option<u32>,
    /// What the elements cost to reduce, in the switch and in a thread block.
    pub element: Element,
}

impl Request {
    /// A call with everything else left to NCCL, from raw NCCL in a graph.
    pub fn new(op: Op, bytes: Bytes, ranks: Vec<NodeId>, mode: Mode) -> Request {
        Request {
            op,
            bytes,
            ranks,
            mode,
            algorithm: Choice::Auto,
            protocol: Choice::Auto,
            stack: Stack::NcclGraph,
            channels: None,
            element: Element::Wide,
        }
    }

    fn algorithm_label(&self) -> String {
        match self.algorithm {
            Choice::Auto => "this algorithm".to_string(),
            Choice::Fixed(a) => a.to_string(),
        }
    }
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
    /// The call ran to the end of the simulated clock: a result nobody may
    /// rank or compare (sweeps and diffs get it as a point's error).
    #[error(
        "{op} of {bytes} on {topology} takes longer than the simulated clock's range ({end}, about 213 days); its slowest link runs at {slowest}",
        end = Time::END
    )]
    BeyondClock { op: Op, bytes: Bytes, topology: String, slowest: Bandwidth },
    /// The call needs more events than one collective may take
    /// ([`MOST_EVENTS`]): stopped, rather than left running for minutes.
    #[error(
        "{op} of {bytes} on {topology} ({ranks} GPUs) needs more than {limit} million simulated events, icsim's bound on one collective (about half a minute of one core); stopped at {at} of simulated time: give fewer GPUs or fewer bytes",
        limit = MOST_EVENTS / 1_000_000
    )]
    TooManyEvents { op: Op, bytes: Bytes, topology: String, ranks: usize, at: Time },
}

/// The most events one collective's simulation may handle. A run's cost
/// is its events, at 60-140 ns each on this project's machine idle (a
/// 1 MiB ring on 4,096 GPUs under PCIe switches: 134 M events, 11 s; a
/// 16 GiB tree on 4,096 NVSwitch GPUs: 84 M, 8 s; docs/performance.md),
/// so a collective within the bound takes at most about half a minute;
/// past it the simulation stops and says so. Calls of a few hundred GPUs
/// or fewer stay far inside it (a 4 GiB allreduce on 8 PCIe GPUs: 0.14 M
/// events).
pub const MOST_EVENTS: u64 = 150_000_000;

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
    /// What NCCL does differently from what was asked, if anything.
    pub note: Option<String>,
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

/// Simulates a resolved plan alone on an idle network, identical channels
/// and ranks simulated once.
pub fn simulate_plan(topo: &Topology, model: &HardwareModel, plan: &Plan) -> Result<Outcome, CollectiveError> {
    simulate_plan_with(topo, model, plan, Symmetry::ChannelsAndRanks)
}

/// Simulates a resolved plan alone on an idle network, using as much of
/// its symmetry as `symmetry` allows (`Symmetry::None`: every channel and
/// rank, the reference the others are tested against).
pub fn simulate_plan_with(topo: &Topology, model: &HardwareModel, plan: &Plan, symmetry: Symmetry) -> Result<Outcome, CollectiveError> {
    simulate_within(topo, model, plan, symmetry, MOST_EVENTS)
}

/// [`simulate_plan_with`], stopped past `most_events` events.
fn simulate_within(
    topo: &Topology,
    model: &HardwareModel,
    plan: &Plan,
    symmetry: Symmetry,
    most_events: u64,
) -> Result<Outcome, CollectiveError> {
    let mut graph = TaskGraph::new();
    let (_, mirrored) = plan.build_alone(topo, model, &mut graph, symmetry)?;
    let mut network = topo.network();
    let (op, bytes) = (plan.request.op, plan.request.bytes);
    let schedule = engine::run_within(&graph, &mut network, most_events).map_err(|stopped| CollectiveError::TooManyEvents {
        op,
        bytes,
        topology: topo.name.clone(),
        ranks: plan.request.ranks.len(),
        at: stopped.at,
    })?;
    if schedule.makespan().is_end() {
        return Err(CollectiveError::BeyondClock { op, bytes, topology: topo.name.clone(), slowest: topo.slowest_link_rate() });
    }
    let mut usage = network.usage();
    for (simulated, mirror) in mirrored {
        usage[mirror.index()] = usage[simulated.index()];
    }
    Ok(Outcome {
        op,
        bytes,
        ranks: plan.request.ranks.len() as u32,
        time: schedule.makespan(),
        algorithm: plan.algorithm,
        protocol: plan.protocol,
        transport: plan.transport.clone(),
        channels: plan.channels,
        nccl_estimate_us: plan.nccl_estimate_us,
        note: plan.note.clone(),
        usage,
        events: schedule.events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    fn request(topo: &Topology, gpus: usize, bytes: Bytes, mode: Mode, protocol: Choice<Protocol>) -> Request {
        Request {
            algorithm: Choice::Fixed(Algorithm::Ring),
            protocol,
            ..Request::new(Op::AllReduce, bytes, topo.gpus()[..gpus].to_vec(), mode)
        }
    }

    #[test]
    fn nccl_drops_an_empty_call_and_copies_one_ranks_buffer_on_its_gpu() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let stack = model.stack(Stack::Eager).unwrap();
        let gpu = model.gpu(&topo.gpu_model).unwrap();
        // Asked for NVLS, as a user might: NCCL never gets as far as choosing.
        let asked = |gpus: usize, bytes: Bytes| Request {
            algorithm: Choice::Fixed(Algorithm::Nvls),
            stack: Stack::Eager,
            ..Request::new(Op::AllReduce, bytes, topo.gpus()[..gpus].to_vec(), Mode::Auto)
        };
        let empty = simulate(&topo, &model, asked(8, Bytes(0))).unwrap();
        assert_eq!(empty.time, Time::ZERO, "NCCL returns at once: no kernel, so no caller's cost on the GPU");
        assert!(empty.usage.iter().all(|u| u.bytes == Bytes(0)));
        let bytes = Bytes::mib(64);
        let alone = simulate(&topo, &model, asked(1, bytes)).unwrap();
        // Read once and written once at the GPU's memory rate, by hand.
        let copy = Time::from_us_f64(2e6 * bytes.0 as f64 / (gpu.memory_bandwidth.bytes_per_sec() * gpu.compute.memory));
        let expected = stack.copy_launch + copy;
        assert!(alone.time.0.abs_diff(expected.0) <= 1, "{} against {expected}", alone.time);
        assert_eq!((alone.algorithm, alone.protocol, alone.channels), (Algorithm::Ring, Protocol::Simple, 1));
        assert!(alone.usage.iter().all(|u| u.bytes == Bytes(0)), "no link carries one rank's copy");
    }

    #[test]
    fn ring_allreduce_moves_two_n_minus_one_over_n_of_the_buffer_through_every_gpu() {
        let model = HardwareModel::base();
        for gpus in [2usize, 4, 8] {
            let topo = preset("hgx-h200", &PresetOptions { gpus: Some(gpus as u32), gpu: None, host: None }, &model).unwrap();
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
    fn a_call_past_its_bound_on_events_stops_with_an_error_that_names_it() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let plan = Plan::new(&topo, &model, request(&topo, 8, Bytes::mib(96), Mode::Nvswitch, Choice::Fixed(Protocol::Simple))).unwrap();
        let whole = simulate_within(&topo, &model, &plan, Symmetry::Channels, MOST_EVENTS).unwrap();
        assert_eq!(simulate_within(&topo, &model, &plan, Symmetry::Channels, whole.events).unwrap().time, whole.time);
        let stopped = simulate_within(&topo, &model, &plan, Symmetry::Channels, whole.events / 2).unwrap_err();
        let CollectiveError::TooManyEvents { ranks: 8, at, .. } = &stopped else { panic!("{stopped:?}") };
        assert!(*at > Time::ZERO && *at < whole.time, "{stopped}");
        assert!(
            stopped.to_string().starts_with("allreduce of 96MiB on hgx-h200 (8 GPUs) needs more than 150 million simulated events"),
            "{stopped}"
        );
    }

    #[test]
    fn one_shot_and_two_shot_run_on_one_nvlink_node_only() {
        let model = HardwareModel::base();
        let topo = preset("nvlink-fabric", &PresetOptions { gpus: Some(16), gpu: None, host: None }, &model).unwrap();
        let call = |ranks: usize, algorithm| Request {
            algorithm,
            ..Request::new(Op::AllReduce, Bytes::kib(16), topo.gpus()[..ranks].to_vec(), Mode::Auto)
        };
        for algorithm in [Algorithm::OneShot, Algorithm::TwoShot] {
            assert!(Plan::new(&topo, &model, call(8, Choice::Fixed(algorithm))).is_ok(), "{algorithm} on 8 GPUs");
            let error = Plan::new(&topo, &model, call(16, Choice::Fixed(algorithm))).unwrap_err().to_string();
            assert!(error.contains("at most 8 GPUs") && error.contains("ring, tree or nvls"), "{error}");
        }
        // Left to the fastest, 16 ranks get NCCL's choice.
        let (plan, _) = plan_and_simulate(&topo, &model, call(16, Choice::Auto), Selection::Fastest).unwrap();
        assert!(matches!(plan.algorithm, Algorithm::Ring | Algorithm::Tree | Algorithm::Nvls), "{}", plan.algorithm);
    }

    #[test]
    fn a_protocol_an_algorithm_cannot_run_is_refused_when_forced_and_never_chosen() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let call = |algorithm, protocol| Request {
            algorithm,
            protocol: Choice::Fixed(protocol),
            ..Request::new(Op::AllReduce, Bytes::gib(1), topo.gpus().to_vec(), Mode::Auto)
        };
        for (algorithm, protocol) in
            [(Algorithm::Nvls, Protocol::Ll), (Algorithm::Nvls, Protocol::Ll128), (Algorithm::OneShot, Protocol::Ll128)]
        {
            let error = Plan::new(&topo, &model, Request { bytes: Bytes::mib(1), ..call(Choice::Fixed(algorithm), protocol) });
            let error = error.unwrap_err().to_string();
            assert!(error.contains(&format!("{algorithm} cannot run {protocol}")) && error.contains("simple"), "{error}");
        }
        // NVLS would win at 1 GiB; with LL forced NCCL has no NVLS to pick.
        let plan = Plan::new(&topo, &model, call(Choice::Auto, Protocol::Ll)).unwrap();
        assert_eq!((plan.algorithm, plan.protocol), (Algorithm::Ring, Protocol::Ll));
    }

    #[test]
    fn a_forced_channel_count_the_call_does_not_run_is_noted() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let call = |algorithm, bytes, channels| Request {
            algorithm: Choice::Fixed(algorithm),
            protocol: Choice::Fixed(Protocol::Simple),
            channels: Some(channels),
            ..Request::new(Op::AllReduce, bytes, topo.gpus().to_vec(), Mode::Auto)
        };
        let small = Plan::new(&topo, &model, call(Algorithm::Ring, Bytes::kib(256), 64)).unwrap();
        assert!(small.channels < 64);
        assert_eq!(
            small.note.unwrap(),
            format!("{} of the 64 channels forced: NCCL drops channels from a call this small", small.channels)
        );
        let large = Plan::new(&topo, &model, call(Algorithm::Ring, Bytes::gib(1), 64)).unwrap();
        assert_eq!((large.channels, large.note), (64, None));
        let nvls = Plan::new(&topo, &model, call(Algorithm::Nvls, Bytes::gib(1), 4)).unwrap();
        assert!(nvls.note.unwrap().contains("nvls runs its own 16 channels"));
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
