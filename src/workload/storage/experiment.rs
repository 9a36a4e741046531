//! The storage part of an experiment (its `[storage]` section), for every
//! mode on its topology: the weights loaded before the query on each
//! storage path, the load time against the drive count (for the plot), and
//! the prompt's KV cache written out while decode runs, in one task graph
//! with the decode steps' compute and allreduces. Independent runs go over
//! threads, results in input order. Turns results into record fields.

use rayon::prelude::*;
use serde_json::json;

use crate::collective;
use crate::config::experiment::{Experiment, ModeRun};
use crate::config::storage::StorageSpec;
use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::report::Record;
use crate::storage::{Direction, StoragePath};
use crate::topology::Topology;
use crate::units::{Bytes, Time};
use crate::workload::tp::{Pass, Query, TensorParallel};

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

/// The storage results of one mode.
#[derive(Debug, Clone)]
pub struct StorageRun {
    pub label: String,
    pub topology: String,
    pub drives: usize,
    pub drive: String,
    pub bytes_per_gpu: Bytes,
    pub loads: Vec<(StoragePath, JobRun)>,
    pub sweep: Vec<LoadPoint>,
    pub offloads: Vec<Offload>,
}

/// What there is to simulate for a mode.
enum Work {
    Load(StoragePath),
    Sweep(u32, StoragePath),
    Offload(Option<StoragePath>),
}

/// Independent runs, in result order.
fn work(spec: &StorageSpec) -> Vec<Work> {
    let mut work = Vec::new();
    if spec.load.is_some() {
        work.extend(spec.paths.iter().map(|&p| Work::Load(p)));
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
    Load(StoragePath, JobRun),
    Sweep(LoadPoint),
    Offload(Offload),
}

/// Runs the storage part of every mode, calling `progress` once a run.
pub fn run(experiment: &Experiment, setups: &[TensorParallel], progress: &(dyn Fn() + Sync)) -> Result<Vec<StorageRun>, crate::Error> {
    let Some(spec) = &experiment.storage else { return Ok(Vec::new()) };
    let jobs: Vec<(usize, Work)> = (0..experiment.modes.len()).flat_map(|m| work(spec).into_iter().map(move |w| (m, w))).collect();
    let done: Vec<Done> = jobs
        .par_iter()
        .map(|(m, work)| {
            let (run, setup) = (&experiment.modes[*m], &setups[*m]);
            let result = match *work {
                Work::Load(path) => load(experiment, spec, run, &run.topology, path).map(|r| Done::Load(path, r)),
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
                    .map_or(Bytes(0), |kind| Job::load(&run.topology, &experiment.llm, run.tp, kind, StoragePath::Gds, spec.array).bytes),
                loads: Vec::new(),
                sweep: Vec::new(),
                offloads: Vec::new(),
            }
        })
        .collect();
    for ((m, _), done) in jobs.iter().zip(done) {
        match done {
            Done::Load(path, run) => runs[*m].loads.push((path, run)),
            Done::Sweep(point) => runs[*m].sweep.push(point),
            Done::Offload(offload) => runs[*m].offloads.push(offload),
        }
    }
    Ok(runs)
}

fn load(experiment: &Experiment, spec: &StorageSpec, run: &ModeRun, topo: &Topology, path: StoragePath) -> Result<JobRun, crate::Error> {
    let kind = spec.load.expect("loads are run only with a load");
    let job = Job::load(topo, &experiment.llm, run.tp, kind, path, spec.array);
    simulate(topo, &run.hardware, &job).map_err(|e| experiment.source.invalid(Some(run.index), "storage", e.to_string()).into())
}

fn sweep_point(
    experiment: &Experiment,
    spec: &StorageSpec,
    run: &ModeRun,
    drives: u32,
    path: StoragePath,
) -> Result<LoadPoint, crate::Error> {
    let layout = crate::topology::DriveLayout { count: drives, ..run.topology.drive_layout() };
    let topo = run.topology.with_drives(&layout, &run.hardware)?;
    Ok(LoadPoint { drives, path, run: load(experiment, spec, run, &topo, path)? })
}

/// The prompt's KV cache written to host memory (`path` none) or to the
/// drives on `path`, from the first decode step on.
fn offload(experiment: &Experiment, run: &ModeRun, setup: &TensorParallel, path: Option<StoragePath>) -> Result<Offload, crate::Error> {
    let query = experiment.query;
    let bytes = kv_bytes_per_gpu(&experiment.llm, u64::from(run.tp), query.prompt, query.batch);
    let target = match path {
        Some(_) => JobTarget::Drives(experiment.storage.as_ref().map_or(super::ArrayKind::Local, |s| s.array)),
        None => JobTarget::HostMemory,
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
    let alone = simulate(topo, model, &job)?.time;
    let decode = Decode { setup, query, run, layers: experiment.llm.layers };
    let mut one_step = TaskGraph::new();
    decode.add(&mut one_step, 0..1)?;
    let step = crate::engine::run(&one_step, &mut topo.network()).makespan();
    let steps = (alone.0.div_ceil(step.0.max(1)) + 1).clamp(1, query.output.clamp(1, MAX_DECODE_STEPS));
    let contention = contend(topo, model, &job, |graph: &mut TaskGraph<Path>| decode.add(graph, 0..steps))?;
    Ok(Offload { target: path.map_or("host".to_string(), |p| p.to_string()), bytes_per_gpu: bytes, steps, contention })
}

/// Decode steps of a query on one mode.
struct Decode<'a> {
    setup: &'a TensorParallel<'a>,
    query: Query,
    run: &'a ModeRun,
    layers: u64,
}

impl Decode<'_> {
    /// Every layer of the decode steps in `steps`: each block's compute on
    /// every GPU of the TP group, then its allreduce, as the replay charges
    /// them, but sharing the network with whatever else `graph` holds.
    fn add(&self, graph: &mut TaskGraph<Path>, steps: std::ops::Range<u64>) -> Result<TaskId, crate::Error> {
        let (topo, model) = (&self.run.topology, &self.run.hardware);
        let mut after: Vec<TaskId> = Vec::new();
        let mut plan = None;
        for step in steps {
            let pass = Pass::Decode { step };
            let compute = self.setup.layer_compute(&self.query, pass);
            if plan.is_none()
                && let Some(request) = self.setup.allreduce(self.setup.allreduce_bytes(&self.query, pass))
            {
                plan = Some(collective::plan_and_simulate(topo, model, request, self.setup.selection())?.0);
            }
            for _ in 0..self.layers {
                for block in [compute.attention, compute.mlp] {
                    let done: Vec<TaskId> = (0..self.setup.tp()).map(|_| graph.delay(block, &after)).collect();
                    after = match &plan {
                        Some(plan) => vec![plan.build(topo, model, graph, &done)?],
                        None => done,
                    };
                }
            }
        }
        Ok(graph.join(&after))
    }
}

/// Record fields of one mode's storage results (the names are part of the
/// `--format json` interface).
pub fn fields(run: &StorageRun, ttft: Time) -> Record {
    let mut record = Record::new();
    let mut put = |key: String, value: serde_json::Value| {
        record.insert(key, value);
    };
    put("drives".into(), json!(run.drives));
    put("drive".into(), json!(run.drive));
    if !run.loads.is_empty() {
        put("load_gb_per_gpu".into(), json!(run.bytes_per_gpu.as_f64() / 1e9));
    }
    for (path, load) in &run.loads {
        let p = path.to_string();
        put(format!("load_{p}_s"), json!(load.time.as_secs()));
        put(format!("load_{p}_then_ttft_s"), json!((load.time + ttft).as_secs()));
        put(format!("load_{p}_gbps"), json!(load.gbps()));
        put(format!("load_{p}_transport"), json!(load.transport));
        put(format!("load_{p}_bound"), json!(load.bound_by()));
        put(format!("load_{p}_busiest_link"), json!(load.limit.as_ref().map(|l| l.0.clone())));
        put(format!("load_{p}_busiest_link_util"), json!(load.limit.as_ref().map(|l| l.2)));
        put(format!("load_{p}_cpu_cores"), json!(load.cpu_cores));
        put(format!("load_{p}_host_memory_gbps"), json!(load.host_memory_gbps));
    }
    for offload in &run.offloads {
        let (t, c) = (&offload.target, &offload.contention);
        put("kv_offload_gb_per_gpu".into(), json!(offload.bytes_per_gpu.as_f64() / 1e9));
        put(format!("kv_{t}_ms"), json!(c.storage_with.as_ms()));
        put(format!("kv_{t}_alone_ms"), json!(c.storage_alone.as_ms()));
        put(format!("kv_{t}_decode_steps"), json!(offload.steps));
        put(format!("kv_{t}_decode_ms"), json!(c.other_with.as_ms()));
        put(format!("kv_{t}_decode_alone_ms"), json!(c.other_alone.as_ms()));
        put(format!("kv_{t}_decode_slowdown"), json!(c.other_slowdown()));
        put(format!("kv_{t}_offload_slowdown"), json!(c.storage_slowdown()));
        put(format!("kv_{t}_shared_link"), json!(c.shared.as_ref().map(|s| s.label.clone())));
    }
    record
}
