//! The storage part of an experiment (its `[storage]` section), for every
//! mode on its topology: the weights loaded before the query on each
//! storage path, a checkpoint written and restored, the load time against
//! the drive count (for the plot), and the prompt's KV cache written out
//! while decode runs, in one task graph with the decode steps' compute and
//! allreduces. Independent runs go over
//! threads, results in input order. The results are data: `report` turns
//! them into record fields.

use rayon::prelude::*;

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::storage::{Direction, StoragePath};
use crate::topology::Topology;
use crate::units::Bytes;
use crate::workload::cache::CollectiveCache;
use crate::workload::compute::Launch;
use crate::workload::experiment::{Experiment, ModeRun, RunError};
use crate::workload::replay::Collectives;
use crate::workload::tp::{Pass, Query, TensorParallel};

use super::spec::StorageSpec;
use super::{Contention, Job, JobRun, JobTarget, OffloadTarget, contend, kv_bytes_per_gpu, simulate};

/// Decode steps simulated at most while a KV cache is written out.
const MAX_DECODE_STEPS: u64 = 64;

/// One point of the load-time plot.
#[derive(Debug, Clone)]
pub struct LoadPoint {
    pub drives: u32,
    pub path: StoragePath,
    pub run: JobRun,
}

/// The prompt's KV cache written out while decode runs.
#[derive(Debug, Clone)]
pub struct Offload {
    /// "host", or the storage path to the drives.
    pub target: String,
    pub bytes_per_gpu: Bytes,
    /// Decode steps simulated with it.
    pub steps: u64,
    pub contention: Contention,
}

/// A whole-server storage operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// The weights, before the query.
    Load,
    /// Every GPU's shard written.
    Checkpoint,
    /// Every GPU's shard read back.
    Restore,
}

impl Operation {
    /// The operation's name, as record fields start with it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Load => "load",
            Operation::Checkpoint => "checkpoint",
            Operation::Restore => "restore",
        }
    }
}

/// One operation on one path, alone.
#[derive(Debug, Clone)]
pub struct Transfer {
    pub operation: Operation,
    pub path: StoragePath,
    pub run: JobRun,
}

/// The storage results of one mode.
#[derive(Debug, Clone)]
pub struct StorageRun {
    pub label: String,
    pub topology: String,
    pub drives: usize,
    pub drive: String,
    /// Bytes each GPU loads (0 without a load).
    pub bytes_per_gpu: Bytes,
    pub transfers: Vec<Transfer>,
    pub sweep: Vec<LoadPoint>,
    pub offloads: Vec<Offload>,
}

/// What there is to simulate for a mode.
enum Work {
    Once(Operation, StoragePath),
    Sweep(u32, StoragePath),
    Offload(Option<StoragePath>),
}

/// Independent runs, in result order.
fn work(spec: &StorageSpec) -> Vec<Work> {
    let mut work = Vec::new();
    if spec.load.is_some() {
        work.extend(spec.paths.iter().map(|&p| Work::Once(Operation::Load, p)));
    }
    if spec.checkpoint {
        for operation in [Operation::Checkpoint, Operation::Restore] {
            work.extend(spec.paths.iter().map(|&p| Work::Once(operation, p)));
        }
    }
    if spec.load.is_some() {
        for &drives in &spec.sweep {
            work.extend(spec.paths.iter().map(|&p| Work::Sweep(drives, p)));
        }
    }
    match spec.kv_offload {
        Some(OffloadTarget::Host) => work.push(Work::Offload(None)),
        Some(OffloadTarget::Drives) => work.extend(spec.paths.iter().map(|&p| Work::Offload(Some(p)))),
        None => {}
    }
    work
}

/// Units of progress `run` reports.
pub fn steps(experiment: &Experiment) -> u64 {
    experiment.storage.as_ref().map_or(0, |spec| (work(spec).len() * experiment.modes.len()) as u64)
}

enum Done {
    Once(Transfer),
    Sweep(LoadPoint),
    Offload(Offload),
}

/// Runs the storage part of every mode, calling `progress` once a run.
pub fn run(experiment: &Experiment, setups: &[TensorParallel], progress: &(dyn Fn() + Sync)) -> Result<Vec<StorageRun>, RunError> {
    let Some(spec) = &experiment.storage else { return Ok(Vec::new()) };
    let jobs: Vec<(usize, Work)> = (0..experiment.modes.len()).flat_map(|m| work(spec).into_iter().map(move |w| (m, w))).collect();
    let done: Vec<Done> =
        jobs.par_iter()
            .map(|(m, work)| {
                let (run, setup) = (&experiment.modes[*m], &setups[*m]);
                let result = match *work {
                    Work::Once(operation, path) => once(experiment, spec, run, &run.topology, (operation, path))
                        .map(|run| Done::Once(Transfer { operation, path, run })),
                    Work::Sweep(drives, path) => sweep_point(experiment, spec, run, drives, path).map(Done::Sweep),
                    Work::Offload(path) => offload(experiment, run, setup, path).map(Done::Offload),
                };
                progress();
                result
            })
            .collect::<Result<_, _>>()?;
    let mut runs: Vec<StorageRun> = experiment
        .modes
        .iter()
        .map(|run| {
            let layout = run.topology.drive_layout();
            StorageRun {
                label: run.label.clone(),
                topology: run.topology.name.clone(),
                drives: layout.count as usize,
                drive: layout.drive,
                bytes_per_gpu: spec
                    .load
                    .map_or(Bytes(0), |kind| Job::load(&run.topology, &experiment.llm, run.tp, kind, StoragePath::Gds, spec.drives).bytes),
                transfers: Vec::new(),
                sweep: Vec::new(),
                offloads: Vec::new(),
            }
        })
        .collect();
    for ((m, _), done) in jobs.iter().zip(done) {
        match done {
            Done::Once(transfer) => runs[*m].transfers.push(transfer),
            Done::Sweep(point) => runs[*m].sweep.push(point),
            Done::Offload(offload) => runs[*m].offloads.push(offload),
        }
    }
    Ok(runs)
}

/// `operation` on `path` alone on `topo`.
fn once(
    experiment: &Experiment,
    spec: &StorageSpec,
    run: &ModeRun,
    topo: &Topology,
    (operation, path): (Operation, StoragePath),
) -> Result<JobRun, RunError> {
    let llm = &experiment.llm;
    let job = match operation {
        Operation::Load => Job::load(topo, llm, run.tp, spec.load.unwrap_or(super::LoadKind::Shard), path, spec.drives),
        Operation::Checkpoint => Job::checkpoint(topo, llm, run.tp, path, spec.drives),
        Operation::Restore => Job::restore(topo, llm, run.tp, path, spec.drives),
    };
    simulate(topo, &run.hardware, &job).map_err(|e| experiment.source.invalid(Some(run.index), "storage", e.to_string()).into())
}

fn sweep_point(experiment: &Experiment, spec: &StorageSpec, run: &ModeRun, drives: u32, path: StoragePath) -> Result<LoadPoint, RunError> {
    let layout = crate::topology::DriveLayout { count: drives, ..run.topology.drive_layout() };
    let topo = run.topology.with_drives(&layout, &run.hardware)?;
    Ok(LoadPoint { drives, path, run: once(experiment, spec, run, &topo, (Operation::Load, path))? })
}

/// The prompt's KV cache written to host memory (`path` none) or to the
/// drives on `path`, from the first decode step on.
fn offload(experiment: &Experiment, run: &ModeRun, setup: &TensorParallel, path: Option<StoragePath>) -> Result<Offload, RunError> {
    let query = experiment.query;
    let bytes = kv_bytes_per_gpu(&experiment.llm, u64::from(run.tp), query.prompt, query.batch);
    let target = match (path, &experiment.storage) {
        (Some(_), Some(spec)) => spec.drives,
        _ => JobTarget::HostMemory,
    };
    let job = Job {
        gpus: run.topology.gpus()[..run.tp as usize].to_vec(),
        bytes,
        direction: Direction::Write,
        path: path.unwrap_or(StoragePath::Bounce),
        target,
    };
    let (topo, model) = (&run.topology, &run.hardware);
    // Enough decode steps to cover the write where the model allows.
    let named = |e: crate::storage::StorageError| experiment.source.invalid(Some(run.index), "storage.kv_offload", e.to_string());
    let alone = simulate(topo, model, &job).map_err(named)?.time;
    let decode = Decode { setup, query };
    let mut one_step = TaskGraph::new();
    decode.add(&mut one_step, 0..1)?;
    let step = crate::engine::run(&one_step, &mut topo.network()).makespan();
    let steps = (alone.0.div_ceil(step.0.max(1)) + 1).clamp(1, query.output.clamp(1, MAX_DECODE_STEPS));
    let contention = contend(topo, model, &job, |graph: &mut TaskGraph<Path>| decode.add(graph, 0..steps))?;
    Ok(Offload { target: path.map_or("host".to_string(), |p| p.to_string()), bytes_per_gpu: bytes, steps, contention })
}

/// Decode steps of a query on one mode, as the replay builds a query beside
/// other work: every kernel of the forward on every GPU of the TP group,
/// launched as the experiment's caller launches them, and the collectives'
/// own transfers on the network.
struct Decode<'a> {
    setup: &'a TensorParallel<'a>,
    query: Query,
}

impl Decode<'_> {
    /// Decode steps `steps` added to `graph`; returns their last task.
    fn add(&self, graph: &mut TaskGraph<Path>, steps: std::ops::Range<u64>) -> Result<TaskId, RunError> {
        let replayer = self.setup.replayer();
        let mut cache = CollectiveCache::new(replayer.topo, replayer.model);
        let ranks = replayer.ranks.len();
        let eager = matches!(replayer.launch, Launch::Eager { .. });
        let mut sync = graph.join(&[]);
        for step in steps {
            let pass = replayer.prepare(&self.setup.program(&self.query, Pass::Decode { step }), &mut cache)?;
            let (mut gpu, mut host) = (vec![sync; ranks], if eager { vec![sync; ranks] } else { Vec::new() });
            let layers = std::iter::repeat_n(&pass.layer, pass.layers as usize);
            for segment in std::iter::once(&pass.prologue).chain(layers).chain([&pass.epilogue]) {
                let tasks = replayer.build(graph, segment, gpu, host, Collectives::Embedded, &mut cache)?;
                (gpu, host) = (tasks.gpu_end, tasks.host_end);
            }
            sync = graph.join(&gpu);
        }
        Ok(sync)
    }
}
