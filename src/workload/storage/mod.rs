//! Storage workloads as task graphs: loading an LLM's weights (each GPU its
//! tensor-parallel shard, or every GPU the whole model) from NVMe drives,
//! writing a checkpoint and restoring it, and writing the prompt's KV cache
//! out (to host memory or drives) while decode runs. Each GPU's I/O is one
//! storage stream (`crate::storage`); a job adds its streams to any task
//! graph, so that storage shares links with collectives in one simulation.
//! Knows nothing of link internals beyond naming what limited a run.

mod contention;
pub mod experiment;
pub mod spec;

use std::fmt;
use std::str::FromStr;

pub use contention::{Contention, contend};

use crate::collective;
use crate::config::hardware::HardwareModel;
use crate::config::llm::LlmModel;
use crate::engine::{self, TaskGraph, TaskId};
use crate::network::Path;
use crate::storage::{self, Direction, Limit, StorageError, StoragePath, Stream, Target};
use crate::topology::{Medium, NodeId, NodeKind, Topology};
use crate::units::{Bytes, Time};

/// What each GPU of a load reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoadKind {
    /// Its tensor-parallel shard: 1/TP of every sharded tensor.
    Shard,
    /// The whole model (every GPU a full copy).
    Whole,
}

/// Which drives a GPU's files are striped over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArrayKind {
    /// One RAID-0 of every drive of the server.
    Array,
    /// A RAID-0 of the drives nearest the GPU: on its PCIe switch, else on
    /// its socket, else all of them.
    Local,
}

/// Where a KV cache is offloaded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OffloadTarget {
    /// Pinned host memory on the GPU's socket.
    Host,
    /// The drives, by each storage path.
    Drives,
}

/// Parses one of `names` into its value, saying what is allowed otherwise.
fn parse_named<T: Copy>(text: &str, what: &str, names: &[(&str, T, &str)]) -> Result<T, String> {
    names.iter().find(|(name, _, _)| *name == text).map(|(_, value, _)| *value).ok_or_else(|| {
        let allowed: Vec<String> = names.iter().map(|(name, _, meaning)| format!("{name} ({meaning})")).collect();
        format!("unknown {what} {text:?}: use {}", allowed.join(", "))
    })
}

impl FromStr for LoadKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_named(
            text,
            "load",
            &[("shard", LoadKind::Shard, "each GPU its TP shard"), ("whole", LoadKind::Whole, "every GPU the whole model")],
        )
    }
}

impl FromStr for ArrayKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_named(
            text,
            "array",
            &[("array", ArrayKind::Array, "one RAID-0 of every drive"), ("local", ArrayKind::Local, "each GPU the drives nearest it")],
        )
    }
}

impl FromStr for OffloadTarget {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_named(
            text,
            "KV offload target",
            &[("host", OffloadTarget::Host, "pinned host memory"), ("drive", OffloadTarget::Drives, "the NVMe drives")],
        )
    }
}

impl fmt::Display for LoadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if *self == LoadKind::Shard { "shard" } else { "whole" })
    }
}

/// Bytes of every parameter of `llm`: per layer the attention projections
/// (q and o of hidden x hidden, k and v of hidden x KV width), the MLP's
/// three hidden x FFN matrices and two norms; the embedding and the output
/// head (vocab x hidden each) and the final norm.
pub fn weight_bytes(llm: &LlmModel) -> Bytes {
    let (sharded, replicated) = parameters(llm);
    Bytes((sharded + replicated) * llm.dtype_bytes)
}

/// Bytes of one GPU's shard at TP=`tp`: 1/tp of every sharded matrix
/// (Megatron style; the embedding and head split by vocabulary) and all
/// the norms, which every GPU keeps.
pub fn shard_bytes(llm: &LlmModel, tp: u64) -> Bytes {
    let (sharded, replicated) = parameters(llm);
    Bytes((sharded.div_ceil(tp) + replicated) * llm.dtype_bytes)
}

/// (sharded, replicated) parameter counts.
fn parameters(llm: &LlmModel) -> (u64, u64) {
    let kv_width = llm.kv_heads * llm.head_dim();
    let attention = 2 * llm.hidden * llm.hidden + 2 * llm.hidden * kv_width;
    let mlp = 3 * llm.hidden * llm.ffn;
    let sharded = llm.layers * (attention + mlp) + 2 * llm.vocab * llm.hidden;
    let replicated = (2 * llm.layers + 1) * llm.hidden;
    (sharded, replicated)
}

/// Bytes of the KV cache one GPU holds for `tokens` tokens of `batch`
/// sequences at TP=`tp`: keys and values of its KV heads (replicated when
/// TP exceeds their number) in every layer.
pub fn kv_bytes_per_gpu(llm: &LlmModel, tp: u64, tokens: u64, batch: u64) -> Bytes {
    let heads = llm.kv_heads.div_ceil(tp).max(1);
    Bytes(2 * llm.layers * heads * llm.head_dim() * llm.dtype_bytes * tokens * batch)
}

/// The drives `gpu` stripes its files over.
pub fn drives_for(topo: &Topology, gpu: NodeId, array: ArrayKind) -> Vec<NodeId> {
    let all = topo.drives();
    if array == ArrayKind::Array {
        return all;
    }
    // Drives on the GPU's own switch: a PCIe path of two links.
    let same_switch: Vec<NodeId> = all
        .iter()
        .copied()
        .filter(|&d| topo.path(d, gpu, Medium::Pcie).is_some_and(|p| p.links.len() == 2 && topo.path_crosses(&p, NodeKind::PcieSwitch)))
        .collect();
    if !same_switch.is_empty() {
        return same_switch;
    }
    let socket = topo.node(gpu).socket;
    let same_socket: Vec<NodeId> = all.iter().copied().filter(|&d| topo.node(d).socket == socket).collect();
    if same_socket.is_empty() { all } else { same_socket }
}

/// A storage job: every listed GPU moves `bytes` one way on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub gpus: Vec<NodeId>,
    pub bytes: Bytes,
    pub direction: Direction,
    pub path: StoragePath,
    /// Drives (by array) or host memory.
    pub target: JobTarget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobTarget {
    /// A RAID-0 of the drives the array names.
    Drives(ArrayKind),
    /// Whole files on the drives the array names, in turn (no RAID).
    Files(ArrayKind),
    HostMemory,
}

/// How files lie on several drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Striping {
    /// RAID-0: every file striped over all its drives.
    Raid0,
    /// Each file whole on one drive, files in turn over the drives.
    Files,
}

impl FromStr for Striping {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_named(
            text,
            "striping",
            &[("raid0", Striping::Raid0, "files striped over the drives"), ("files", Striping::Files, "whole files on the drives in turn")],
        )
    }
}

impl JobTarget {
    /// The drives of `array` laid out as `striping` says.
    pub fn drives(array: ArrayKind, striping: Striping) -> JobTarget {
        match striping {
            Striping::Raid0 => JobTarget::Drives(array),
            Striping::Files => JobTarget::Files(array),
        }
    }
}

impl Job {
    /// Loading `llm`'s weights onto the first `tp` GPUs from `drives`.
    pub fn load(topo: &Topology, llm: &LlmModel, tp: u32, kind: LoadKind, path: StoragePath, drives: JobTarget) -> Job {
        let bytes = match kind {
            LoadKind::Shard => shard_bytes(llm, u64::from(tp)),
            LoadKind::Whole => weight_bytes(llm),
        };
        Job { gpus: topo.gpus()[..tp as usize].to_vec(), bytes, direction: Direction::Read, path, target: drives }
    }

    /// Writing every GPU's shard of `llm`'s weights (a checkpoint).
    pub fn checkpoint(topo: &Topology, llm: &LlmModel, tp: u32, path: StoragePath, drives: JobTarget) -> Job {
        Job { direction: Direction::Write, ..Job::load(topo, llm, tp, LoadKind::Shard, path, drives) }
    }

    /// Reading a checkpoint back: the same bytes as a shard load.
    pub fn restore(topo: &Topology, llm: &LlmModel, tp: u32, path: StoragePath, drives: JobTarget) -> Job {
        Job::load(topo, llm, tp, LoadKind::Shard, path, drives)
    }

    /// Every GPU's streams.
    fn streams(&self, topo: &Topology, model: &HardwareModel) -> Vec<Stream> {
        // Stream i starts i I/Os in: on a RAID-0 a whole I/O's stripe units,
        // with whole files the next drive.
        let units_per_io = match self.target {
            JobTarget::Files(_) => 1,
            _ => (model.storage.gds_io.0 / model.storage.raid_chunk.0).max(1),
        };
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, &gpu)| Stream {
                gpu,
                target: match self.target {
                    JobTarget::Drives(array) => Target::Drives(drives_for(topo, gpu, array)),
                    JobTarget::Files(array) => Target::Files(drives_for(topo, gpu, array)),
                    JobTarget::HostMemory => Target::HostMemory,
                },
                bytes: self.bytes,
                direction: self.direction,
                path: self.path,
                first_unit: i as u64 * units_per_io,
            })
            .collect()
    }
}

/// What a job added to a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTasks {
    pub end: TaskId,
    pub cpu: Time,
    pub host_memory: Bytes,
    pub ios: u64,
    pub fell_back: bool,
}

/// Adds `job` to `graph` after `after`.
pub fn add_job(
    graph: &mut TaskGraph<Path>,
    topo: &Topology,
    model: &HardwareModel,
    job: &Job,
    after: &[TaskId],
) -> Result<JobTasks, StorageError> {
    if job.target != JobTarget::HostMemory && topo.drives().is_empty() {
        return Err(StorageError::Invalid(format!("{} has no NVMe drive: give it drives ([storage] drives = N)", topo.name)));
    }
    let mut ends = Vec::new();
    let mut tasks = JobTasks { end: TaskId(0), cpu: Time::ZERO, host_memory: Bytes(0), ios: 0, fell_back: false };
    // The GPUs' loaders do not start on the same microsecond: stream i of n
    // starts i/n of a drive's latency after the first. (Started together,
    // fair sharing would keep identical streams in lockstep for ever, their
    // copies and reads always colliding.)
    let latency =
        topo.drives().first().and_then(|&d| topo.drive_model(d)).and_then(|k| model.drive(k).ok()).map_or(Time::ZERO, |d| d.read_latency);
    let streams = job.streams(topo, model);
    check_io_count(&streams, model)?;
    let n = streams.len() as u64;
    for (i, stream) in streams.iter().enumerate() {
        let phase = Time(latency.0 * i as u64 / n.max(1));
        let start = if phase == Time::ZERO { after.to_vec() } else { vec![graph.delay(phase, after)] };
        let added = storage::add_stream(graph, topo, model, stream, &start)?;
        ends.push(added.end);
        tasks.cpu += added.cpu;
        tasks.host_memory += added.host_memory;
        tasks.ios += added.ios;
        tasks.fell_back |= added.fell_back;
    }
    tasks.end = graph.join(&ends);
    Ok(tasks)
}

/// Most I/Os one job may add to a simulation: each is a few tasks and flows
/// of about 1 KB together, so a job holds at most about 1 GB. The shipped
/// sizes cut the largest load, 405B's 812 GB at 1 MiB, into 0.8 million.
pub const MOST_IOS: u64 = 1_000_000;

/// Refuses a job of more than [`MOST_IOS`] I/Os, saying which I/O size to
/// raise (counted at the smallest I/O its path may take).
fn check_io_count(streams: &[Stream], model: &HardwareModel) -> Result<(), StorageError> {
    let costs = &model.storage;
    let io_of = |stream: &Stream| if stream.path == StoragePath::Gds { costs.gds_io.min(costs.bounce_io) } else { costs.bounce_io };
    let ios: u64 = streams.iter().map(|s| s.bytes.0.div_ceil(io_of(s).0)).sum();
    if ios <= MOST_IOS {
        return Ok(());
    }
    let bytes: u64 = streams.iter().map(|s| s.bytes.0).sum();
    let (key, now) = if costs.bounce_io <= costs.gds_io { ("bounce_io", costs.bounce_io) } else { ("gds_io", costs.gds_io) };
    let least = Bytes(bytes.div_ceil(MOST_IOS).next_power_of_two());
    Err(StorageError::Invalid(format!(
        "{:.1} GB over {} GPUs cut into {ios} I/Os: more than one simulation holds ({MOST_IOS}, about 1 GB of memory); raise storage.{key} in the hardware model (now {now}) to at least {least}",
        bytes as f64 / 1e9,
        streams.len(),
    )))
}

/// A job simulated alone on an idle server.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    pub time: Time,
    /// Bytes all GPUs moved.
    pub bytes: Bytes,
    /// "gds", "bounce", or "gds+bounce" where some drives fell back.
    pub transport: String,
    /// CPU cores busy on average (CPU time over the job's time).
    pub cpu_cores: f64,
    /// Host memory traffic, GB/s on average.
    pub host_memory_gbps: f64,
    /// The busiest link for its capacity, its kind and that fraction.
    pub limit: Option<(String, Limit, f64)>,
}

impl JobRun {
    /// All GPUs' bytes over the time, GB/s.
    pub fn gbps(&self) -> f64 {
        rate_gbps(self.bytes, self.time)
    }
}

fn rate_gbps(bytes: Bytes, time: Time) -> f64 {
    if time.0 == 0 { 0.0 } else { bytes.as_f64() / time.as_secs() / 1e9 }
}

/// What a link's kind is called in a report when it is what limits a run;
/// below `BOUND` of its capacity no link is, and the I/Os in flight are.
pub const BOUND: f64 = 0.9;

/// Simulates `job` alone.
pub fn simulate(topo: &Topology, model: &HardwareModel, job: &Job) -> Result<JobRun, StorageError> {
    let mut graph = TaskGraph::new();
    let tasks = add_job(&mut graph, topo, model, job, &[])?;
    let mut network = topo.network();
    let schedule = engine::run(&graph, &mut network);
    let time = schedule.end[tasks.end.index()];
    let usage = network.usage();
    let limit =
        collective::busiest_link(topo, &usage, time).map(|(link, util)| (topo.link_label(link), storage::limit_of(topo, link), util));
    let transport = match (job.target, job.path, tasks.fell_back) {
        (JobTarget::HostMemory, ..) => "host copy".to_string(),
        (_, StoragePath::Gds, true) => "gds+bounce".to_string(),
        (_, path, _) => path.to_string(),
    };
    Ok(JobRun {
        time,
        bytes: job.bytes * job.gpus.len() as u64,
        transport,
        cpu_cores: if time.0 == 0 { 0.0 } else { tasks.cpu.as_secs() / time.as_secs() },
        host_memory_gbps: rate_gbps(tasks.host_memory, time),
        limit,
    })
}

impl JobRun {
    /// What limited the run: the busiest link's kind, or the I/Os in flight
    /// when no link was near full.
    pub fn bound_by(&self) -> String {
        match &self.limit {
            Some((_, limit, util)) if *util >= BOUND => limit.to_string(),
            _ => "I/Os in flight".to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
