//! Runs an experiment: the query replayed under every mode, a sweep of the
//! allreduce over message sizes per mode (its bus bandwidth), and one prefill
//! layer of the modes fastest and slowest to the first token, simulated as a
//! task graph (for timelines). Modes and sizes are independent runs, spread
//! over threads with results kept in input order. The results are data:
//! `report` turns them into records for tables; nothing here draws.

mod resolve;

use rayon::prelude::*;

pub use resolve::{Experiment, ModeRun};

use crate::collective::{self, Algorithm, CollectiveError, Protocol};
use crate::config::ConfigError;
use crate::storage::StorageError;
use crate::topology::TopologyError;
use crate::transport::{FIXED_MODES, Mode, TransportError};
use crate::units::{Bandwidth, Bytes, Time};

use super::layer::LayerRun;
use super::tp::{CollectiveCache, Pass, Query, QueryReplay, TensorParallel, TpError};

/// Why a resolved experiment could not run, or ran to no result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A mode or a storage job the topology cannot serve, named by its key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A query ran to the end of the simulated clock: no result to rank.
    #[error(
        "{what} on {topology} takes longer than the simulated clock's range ({end}, about 213 days); its slowest link runs at {slowest}",
        end = Time::END
    )]
    BeyondClock { what: String, topology: String, slowest: Bandwidth },
}

/// What to compute besides the replay.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Allreduce sizes to simulate per mode for the bus bandwidth curve.
    pub sweep: Vec<Bytes>,
    /// Simulate a prefill layer of the fastest and slowest modes.
    pub timelines: bool,
}

impl RunOptions {
    /// Sizes from 1 KiB to 1 GiB, doubling: from latency-bound to
    /// bandwidth-bound on every transport.
    pub fn full() -> RunOptions {
        RunOptions { sweep: (10..=30).map(|power| Bytes(1 << power)).collect(), timelines: true }
    }

    /// The replay alone.
    pub fn replay_only() -> RunOptions {
        RunOptions { sweep: Vec::new(), timelines: false }
    }
}

/// One allreduce of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    pub bytes: Bytes,
    pub time: Time,
    pub busbw_gbps: f64,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
}

/// One mode's results.
#[derive(Debug, Clone)]
pub struct ModeResult {
    pub label: String,
    pub mode: Mode,
    pub topology: String,
    pub gpu_model: String,
    /// The host platform's key.
    pub host: String,
    pub gpus: usize,
    pub tp: u32,
    /// How the forward ran: its caller, which kernels, which fusion.
    pub stack: crate::stack::Stack,
    pub scope: crate::config::llm::Scope,
    pub fusion: String,
    pub replay: QueryReplay,
    /// The link with the most bytes for its capacity over the query's
    /// communication time, and that fraction.
    pub busiest_link: Option<(String, f64)>,
    /// Raw rate per direction of the link a GPU's traffic leaves on.
    pub headline: Option<Bandwidth>,
    pub sweep: Vec<SweepPoint>,
}

/// A prefill layer of one mode, simulated as one task graph.
#[derive(Debug, Clone)]
pub struct LayerTimeline {
    pub label: String,
    pub layer: LayerRun,
}

#[derive(Debug, Clone)]
pub struct ExperimentResult {
    pub model: String,
    pub query: Query,
    pub modes: Vec<ModeResult>,
    /// A prefill layer of the mode with the shortest time to first token,
    /// then of the one with the longest (one if they are the same).
    pub timelines: Vec<LayerTimeline>,
    /// Each mode's storage results, where the experiment has `[storage]`.
    pub storage: Vec<super::storage::experiment::StorageRun>,
}

/// Units of work `run` reports progress in.
pub fn steps(experiment: &Experiment, options: &RunOptions) -> u64 {
    let modes = experiment.modes.len() as u64;
    modes * (1 + options.sweep.len() as u64) + if options.timelines { 2 } else { 0 } + super::storage::experiment::steps(experiment)
}

/// Sets every mode up, refusing what its topology cannot do before anything
/// is simulated.
pub fn prepare(experiment: &Experiment) -> Result<Vec<TensorParallel<'_>>, ConfigError> {
    experiment.modes.iter().map(|run| prepare_mode(experiment, run)).collect()
}

/// Sets one mode up; the error names the key to change and what the
/// topology offers.
pub fn prepare_mode<'e>(experiment: &'e Experiment, run: &'e ModeRun) -> Result<TensorParallel<'e>, ConfigError> {
    let source = &experiment.source;
    let setup = TensorParallel::new(&run.topology, &run.hardware, &experiment.llm, run.tp, run.mode).map_err(|error| match error {
        TpError::Collective(collective::CollectiveError::Transport(_)) => {
            let offered: Vec<String> = FIXED_MODES
                .into_iter()
                .chain([Mode::Auto])
                .filter(|&mode| TensorParallel::new(&run.topology, &run.hardware, &experiment.llm, run.tp, mode).is_ok())
                .map(|mode| mode.to_string())
                .collect();
            source.invalid(Some(run.index), "transport", format!("{error}; allowed on {}: {}", run.topology.name, offered.join(", ")))
        }
        TpError::Degree { .. } => source.invalid(Some(run.index), "tp", error.to_string()),
        TpError::Forward(message) => source.invalid(Some(run.index), "fusion", message),
        other => source.invalid(Some(run.index), "topology", other.to_string()),
    })?;
    let setup = setup.with_selection(run.selection).with_channels(run.channels);
    setup.with_forward(run.stack, run.scope, &run.fusion).map_err(|error| source.invalid(Some(run.index), "stack", error.to_string()))
}

enum Job {
    Replay(usize),
    Sweep(usize, Bytes),
}

enum Done {
    Replay(Box<QueryReplay>),
    Sweep(SweepPoint),
}

/// Runs `experiment`, calling `progress` once per finished step.
pub fn run(experiment: &Experiment, options: &RunOptions, progress: &(dyn Fn() + Sync)) -> Result<ExperimentResult, RunError> {
    let setups = prepare(experiment)?;
    let query = experiment.query;
    let mut jobs = Vec::new();
    for index in 0..setups.len() {
        jobs.push(Job::Replay(index));
        jobs.extend(options.sweep.iter().map(|&bytes| Job::Sweep(index, bytes)));
    }
    let done: Vec<Done> = jobs
        .par_iter()
        .map(|job| {
            let result = match *job {
                Job::Replay(index) => {
                    let run = &experiment.modes[index];
                    let mut cache = CollectiveCache::new(&run.topology, &run.hardware);
                    setups[index].replay(&query, &mut cache).map(|r| Done::Replay(Box::new(r))).map_err(RunError::from)
                }
                Job::Sweep(index, bytes) => sweep_point(experiment, &setups[index], index, bytes).map(Done::Sweep),
            };
            progress();
            result
        })
        .collect::<Result<_, _>>()?;

    let mut modes: Vec<ModeResult> = Vec::new();
    for (job, done) in jobs.iter().zip(done) {
        match (job, done) {
            (&Job::Replay(index), Done::Replay(replay)) => modes.push(mode_result(experiment, &setups[index], index, *replay)?),
            (&Job::Sweep(index, _), Done::Sweep(point)) => modes[index].sweep.push(point),
            _ => unreachable!("each job gives its own kind of result"),
        }
    }

    let mut timelines = Vec::new();
    if options.timelines {
        // The layer shown is a prefill layer: modes are ranked by the prefill.
        let by_ttft = |a: &&ModeResult, b: &&ModeResult| a.replay.ttft().cmp(&b.replay.ttft());
        let fastest = modes.iter().min_by(by_ttft).map(|m| m.label.clone());
        let slowest = modes.iter().max_by(by_ttft).map(|m| m.label.clone());
        let mut labels: Vec<String> = fastest.into_iter().chain(slowest).collect();
        labels.dedup();
        timelines = labels
            .par_iter()
            .map(|label| {
                let index = experiment.modes.iter().position(|m| &m.label == label).expect("labels come from the modes");
                let layer = setups[index].simulate_layer(&query, Pass::Prefill);
                progress();
                layer.map(|layer| LayerTimeline { label: label.clone(), layer })
            })
            .collect::<Result<_, _>>()?;
    }
    let storage = super::storage::experiment::run(experiment, &setups, progress)?;
    Ok(ExperimentResult { model: experiment.llm.name.clone(), query, modes, timelines, storage })
}

fn sweep_point(experiment: &Experiment, setup: &TensorParallel, index: usize, bytes: Bytes) -> Result<SweepPoint, RunError> {
    let run = &experiment.modes[index];
    let Some(request) = setup.allreduce(bytes) else {
        return Ok(SweepPoint { bytes, time: Time::ZERO, busbw_gbps: 0.0, algorithm: Algorithm::Ring, protocol: Protocol::Simple });
    };
    let (_, outcome) = collective::plan_and_simulate(&run.topology, &run.hardware, request, setup.selection())?;
    Ok(SweepPoint { bytes, time: outcome.time, busbw_gbps: outcome.busbw_gbps(), algorithm: outcome.algorithm, protocol: outcome.protocol })
}

fn mode_result(experiment: &Experiment, setup: &TensorParallel, index: usize, replay: QueryReplay) -> Result<ModeResult, RunError> {
    let run = &experiment.modes[index];
    if replay.total().is_end() {
        return Err(RunError::BeyondClock {
            what: format!("the query under {}", run.label),
            topology: run.topology.name.clone(),
            slowest: run.topology.slowest_link_rate(),
        });
    }
    let busiest_link = collective::busiest_link(&run.topology, &replay.link_usage, replay.comm())
        .map(|(link, util)| (run.topology.link_label(link), util));
    let headline =
        setup.headline_link().map_err(|e| experiment.source.invalid(Some(index), "transport", e.to_string()))?.map(|(_, rate)| rate);
    Ok(ModeResult {
        label: run.label.clone(),
        mode: run.mode,
        topology: run.topology.name.clone(),
        gpu_model: run.topology.gpu_model.clone(),
        host: run.topology.host.clone(),
        gpus: run.topology.gpus().len(),
        tp: run.tp,
        stack: run.stack,
        scope: run.scope,
        fusion: run.fusion.clone(),
        replay,
        busiest_link,
        headline,
        sweep: Vec::new(),
    })
}

impl ModeResult {
    /// Communication time "bytes / headline bandwidth", as vendors count it:
    /// the bytes each GPU sends over the link's rate per direction times
    /// `directions` (2 for the "bidirectional" headline).
    pub fn naive_comm(&self, directions: u64) -> Option<Time> {
        self.headline.map(|rate| self.replay.tp_bytes_per_gpu / Bandwidth(rate.0 * directions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const EXPERIMENT: &str = r#"
model = "llama-3.1-8b"
tp = 4
topology = "hgx-h20"
gpus = 4
[query]
prompt = 512
output = 4
[[mode]]
transport = "nvswitch"
[[mode]]
transport = "shm"
"#;

    #[test]
    fn results_come_in_mode_order_with_a_sweep_and_two_timelines() {
        let experiment = Experiment::parse(Path::new("t.toml"), EXPERIMENT).unwrap();
        let options = RunOptions { sweep: vec![Bytes::kib(4), Bytes::mib(4)], timelines: true };
        let ticks = std::sync::atomic::AtomicU64::new(0);
        let result = run(&experiment, &options, &|| {
            ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(ticks.into_inner(), steps(&experiment, &options));
        let labels: Vec<&str> = result.modes.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(labels, ["nvswitch", "shm"]);
        assert!(result.modes.iter().all(|m| m.sweep.len() == 2 && m.sweep[0].bytes == Bytes::kib(4)));
        let timelines: Vec<&str> = result.timelines.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(timelines, ["nvswitch", "shm"], "fastest, then slowest");
    }

    #[test]
    fn a_transport_the_topology_lacks_names_the_key_and_the_offered_ones() {
        let text = EXPERIMENT.replace("\"shm\"", "\"nvlink\"");
        let experiment = Experiment::parse(Path::new("t.toml"), &text).unwrap();
        let error = prepare(&experiment).unwrap_err().to_string();
        assert!(error.contains("t.toml: key `mode[1].transport`") && error.contains("allowed on hgx-h20: nvswitch"), "{error}");
    }
}
