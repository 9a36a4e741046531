//! The query as task graphs executed by the engine on every GPU of the
//! tensor-parallel group. Each GPU runs its pass as a chain of kernel tasks
//! (spaced as its caller launches them: a gap inside a CUDA graph, or gated
//! by a chain of host launch tasks when eager) and the group's collectives
//! join the chains. A collective enters a graph either as its own transfers
//! (`Collectives::Embedded`, the plan of the collective layer, generated
//! while the graph runs; `Collectives::Inline`, every channel's tasks
//! written into the graph, for timelines of its transfers) or as one
//! task of the time it takes alone on an idle network
//! (`Collectives::Cached`): the two give the same schedule when nothing
//! else uses the network, which the tests check to the picosecond.
//!
//! A pass is cut into segments (its prologue, each decoder layer, its
//! epilogue) that run on the engine one after another, each from the clocks
//! the previous one left. A segment is simulated again only when it differs
//! from the last one simulated: same work from the same clocks (up to a
//! shift in time) gives the same schedule shifted, and with eager launches a
//! segment where no kernel waited for its launch gives the same schedule
//! from any clocks whose hosts are further ahead. The tests check that a
//! query replayed so ends, pass by pass, exactly where one task graph of the
//! whole query does.

use std::collections::BTreeMap;

use crate::collective::{CollectiveError, Expansion, Op, Request, Selection};
use crate::config::hardware::{GpuModel, HardwareModel};
use crate::engine::{self, Fabric, Schedule, TaskGraph, TaskId};
use crate::network::Path;
use crate::stack::Stack;
use crate::topology::{NodeId, Topology};
use crate::transport::Mode;
use crate::units::{Bandwidth, Bytes, Time};

use super::cache::CollectiveCache;
use super::compute::{Clock, Launch};
use super::forward::{PassProgram, Step};

/// How collectives enter a task graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collectives {
    /// One task lasting the collective's time alone on an idle network.
    Cached,
    /// The collective's own transfers, sharing the network with the rest.
    Embedded,
    /// As `Embedded`, every task of every channel written into the graph.
    Inline,
}

/// When each GPU of the group is free, and when its host can launch next
/// (eager launches only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clocks {
    pub gpu: Vec<Time>,
    pub host: Vec<Time>,
}

impl Clocks {
    /// Every GPU (and host, when `eager`) at `at`.
    pub fn synchronized(ranks: usize, at: Time, eager: bool) -> Clocks {
        Clocks { gpu: vec![at; ranks], host: if eager { vec![at; ranks] } else { Vec::new() } }
    }

    /// When the last GPU is free.
    pub fn latest(&self) -> Time {
        self.gpu.iter().copied().max().unwrap_or(Time::ZERO)
    }

    fn earliest(&self) -> Time {
        self.gpu.iter().chain(&self.host).copied().min().unwrap_or(Time::ZERO)
    }

    /// Offsets from the first GPU to be free, in signed picoseconds.
    fn relative(&self) -> (Vec<i128>, Vec<i128>) {
        let origin = i128::from(self.gpu.iter().copied().min().unwrap_or(Time::ZERO).0);
        let offsets = |clock: &[Time]| clock.iter().map(|t| i128::from(t.0) - origin).collect();
        (offsets(&self.gpu), offsets(&self.host))
    }
}

/// One step of a pass, with its time worked out.
#[derive(Debug, Clone)]
enum Work {
    /// A kernel taking `time` on the GPU (a graph's gap included).
    Kernel {
        time: Time,
    },
    Collective {
        request: Request,
    },
}

/// What makes two segments the same work.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum WorkKey {
    Kernel(Time),
    Collective(Op, Bytes),
}

/// A segment of a pass, ready to run.
#[derive(Debug, Clone)]
pub struct Segment {
    work: Vec<Work>,
    key: Vec<WorkKey>,
    /// Host time spent launching its kernels and collectives (eager).
    host_cost: Time,
}

impl Segment {
    fn is_empty(&self) -> bool {
        self.work.is_empty()
    }
}

/// A pass, ready to run, and where its time goes on each GPU.
#[derive(Debug, Clone)]
pub struct PreparedPass {
    pub prologue: Segment,
    pub layer: Segment,
    pub layers: u64,
    pub epilogue: Segment,
    /// GPU time in kernels over the pass (gaps of a graph included).
    pub compute: Time,
    /// Time in collectives over the pass, each as long as alone.
    pub comm: Time,
}

/// The task ids one segment built into a graph.
#[derive(Debug, Clone, Default)]
pub struct SegmentTasks {
    /// Per step: the kernel's task on each rank, or the collective's first
    /// and last task.
    pub steps: Vec<StepTasks>,
    pub gpu_end: Vec<TaskId>,
    pub host_end: Vec<TaskId>,
    /// Tasks that may have waited for their launch: (the task, the GPU
    /// tasks before it). One that started after all of those waited.
    launch_gated: Vec<(TaskId, Vec<TaskId>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepTasks {
    Kernels(Vec<TaskId>),
    Collective { first: TaskId, end: TaskId },
}

/// The last simulated run of a segment: its clocks before and after,
/// relative to its first free GPU.
#[derive(Debug, Clone)]
struct LastRun {
    gpu_start: Vec<i128>,
    host_start: Vec<i128>,
    gpu_end: Vec<i128>,
    /// Whether a kernel or collective waited for its launch.
    waited_for_host: bool,
}

impl LastRun {
    /// The clocks after the segment run from `start`, if this run tells.
    fn apply(&self, start: &Clocks, host_cost: Time) -> Option<Clocks> {
        let (gpu, host) = start.relative();
        let hosts_fit =
            host == self.host_start || (!self.waited_for_host && host.iter().zip(&self.host_start).all(|(now, then)| now <= then));
        if gpu != self.gpu_start || !hosts_fit {
            return None;
        }
        let origin = i128::from(start.gpu.iter().copied().min().unwrap_or(Time::ZERO).0);
        // Past the clock's end a time stays at the end, as Time's sums do.
        let gpu = self.gpu_end.iter().map(|offset| Time(u64::try_from(origin + offset).unwrap_or(u64::MAX))).collect();
        Some(Clocks { gpu, host: start.host.iter().map(|&h| h + host_cost).collect() })
    }
}

/// Segments simulated so far, the last run of each distinct one.
#[derive(Debug, Default)]
pub struct Memo {
    runs: BTreeMap<Vec<WorkKey>, LastRun>,
    /// Segments run on the engine, and segments reused.
    pub simulated: u64,
    pub reused: u64,
}

/// A fabric for graphs without transfers (collectives cached).
struct NoTransfers;

impl Fabric<Path> for NoTransfers {
    fn start(&mut self, _: Time, _: TaskId, _: &Path, _: Bytes, _: Option<Bandwidth>, _: u32) {
        unreachable!("a graph with cached collectives has no transfers");
    }
    fn next_event_time(&mut self) -> Option<Time> {
        None
    }
    fn advance(&mut self, _: Time, _: &mut Vec<TaskId>) -> u64 {
        0
    }
}

/// Runs passes of one group of GPUs.
#[derive(Debug, Clone)]
pub struct Replayer<'a> {
    pub topo: &'a Topology,
    pub model: &'a HardwareModel,
    pub gpu: &'a GpuModel,
    pub ranks: &'a [NodeId],
    pub mode: Mode,
    pub selection: Selection,
    /// Who issues the collectives: its per-call cost is added to each.
    pub stack: Stack,
    /// NCCL's channel count where forced.
    pub channels: Option<u32>,
    pub launch: Launch,
}

impl Replayer<'_> {
    fn eager(&self) -> bool {
        matches!(self.launch, Launch::Eager { .. })
    }

    /// The collective `op` of `bytes` over the group, from this caller (its
    /// `collective_call` is inside the collective, on the GPUs' timeline).
    pub fn request(&self, op: Op, bytes: Bytes) -> Request {
        Request { stack: self.stack, channels: self.channels, ..Request::new(op, bytes, self.ranks.to_vec(), self.mode) }
    }

    /// The GPU time of a kernel step as it runs in a pass.
    pub fn kernel_time(&self, kernel: &super::compute::Kernel) -> Time {
        self.launch.on_gpu(kernel.time(self.gpu, Clock::Sustained))
    }

    fn segment(&self, steps: &[Step], cache: &mut CollectiveCache, counted: u64) -> Result<(Segment, Time, Time), CollectiveError> {
        let mut work = Vec::with_capacity(steps.len());
        let mut key = Vec::with_capacity(steps.len());
        let (mut compute, mut comm) = (Time::ZERO, Time::ZERO);
        let launches = steps.len() as u64;
        for step in steps {
            match step {
                Step::Kernel { kernel, .. } => {
                    let time = self.kernel_time(kernel);
                    compute += time;
                    key.push(WorkKey::Kernel(time));
                    work.push(Work::Kernel { time });
                }
                Step::Collective { op, bytes, .. } => {
                    let request = self.request(*op, *bytes);
                    comm += cache.outcome(request.clone(), self.selection, counted)?.time;
                    key.push(WorkKey::Collective(*op, *bytes));
                    work.push(Work::Collective { request });
                }
            }
        }
        let host_cost = match self.launch {
            Launch::Eager { host, .. } => host * launches,
            Launch::Graph { .. } => Time::ZERO,
        };
        Ok((Segment { work, key, host_cost }, compute * counted, comm * counted))
    }

    /// Works out the steps' times and counts the pass's collectives in `cache`.
    pub fn prepare(&self, program: &PassProgram, cache: &mut CollectiveCache) -> Result<PreparedPass, CollectiveError> {
        let (prologue, c1, m1) = self.segment(&program.prologue, cache, 1)?;
        let (layer, c2, m2) = self.segment(&program.layer, cache, program.layers)?;
        let (epilogue, c3, m3) = self.segment(&program.epilogue, cache, 1)?;
        Ok(PreparedPass { prologue, layer, layers: program.layers, epilogue, compute: c1 + c2 + c3, comm: m1 + m2 + m3 })
    }

    /// Builds `segment` into `graph` after the tasks each rank's GPU (and
    /// host, when eager) waits for.
    pub fn build(
        &self,
        graph: &mut TaskGraph<Path>,
        segment: &Segment,
        gpu_after: Vec<TaskId>,
        host_after: Vec<TaskId>,
        collectives: Collectives,
        cache: &mut CollectiveCache,
    ) -> Result<SegmentTasks, CollectiveError> {
        let mut gpu = gpu_after;
        let mut host = host_after;
        let mut tasks = SegmentTasks::default();
        for work in &segment.work {
            match work {
                Work::Kernel { time } => {
                    let mut ranks = Vec::with_capacity(gpu.len());
                    for r in 0..gpu.len() {
                        let task = match self.launch {
                            Launch::Graph { .. } => graph.delay(*time, &[gpu[r]]),
                            Launch::Eager { host: cost, .. } => {
                                host[r] = graph.delay(cost, &[host[r]]);
                                let task = graph.delay(*time, &[host[r], gpu[r]]);
                                tasks.launch_gated.push((task, vec![gpu[r]]));
                                task
                            }
                        };
                        gpu[r] = task;
                        ranks.push(task);
                    }
                    tasks.steps.push(StepTasks::Kernels(ranks));
                }
                Work::Collective { request } => {
                    // Each rank's host launches the call: host time, one
                    // launch (what the caller adds on the GPUs is the
                    // collective's own `collective_call`, counted there).
                    if let Launch::Eager { host: cost, .. } = self.launch {
                        host.iter_mut().for_each(|h| *h = graph.delay(cost, &[*h]));
                    }
                    let after: Vec<TaskId> = gpu.iter().chain(&host).copied().collect();
                    let first = TaskId(graph.len() as u32);
                    let end = match collectives {
                        Collectives::Cached => {
                            let time = cache.outcome(request.clone(), self.selection, 0)?.time;
                            graph.delay(time, &after)
                        }
                        Collectives::Embedded | Collectives::Inline => {
                            let plan = cache.plan(request.clone(), self.selection)?.clone();
                            let expansion = if collectives == Collectives::Inline { Expansion::Inline } else { Expansion::Streamed };
                            plan.build(self.topo, self.model, graph, &after, expansion)?
                        }
                    };
                    if self.eager() {
                        tasks.launch_gated.push((first, gpu.clone()));
                    }
                    gpu.iter_mut().for_each(|g| *g = end);
                    tasks.steps.push(StepTasks::Collective { first, end });
                }
            }
        }
        tasks.gpu_end = gpu;
        tasks.host_end = host;
        Ok(tasks)
    }

    /// Root tasks that hold each clock back to its time after `origin`.
    fn roots(graph: &mut TaskGraph<Path>, clock: &[Time], origin: Time) -> Vec<TaskId> {
        clock.iter().map(|&t| graph.delay(t - origin, &[])).collect()
    }

    /// Runs `graph` on the engine: on the network when it has transfers.
    fn execute(&self, graph: &TaskGraph<Path>, collectives: Collectives) -> Schedule {
        match collectives {
            Collectives::Cached => engine::run(graph, &mut NoTransfers),
            Collectives::Embedded | Collectives::Inline => engine::run(graph, &mut self.topo.network()),
        }
    }

    /// Simulates `segment` from `start` on the engine.
    fn simulate(&self, segment: &Segment, start: &Clocks, cache: &mut CollectiveCache) -> Result<(Clocks, bool), CollectiveError> {
        let origin = start.earliest();
        let mut graph = TaskGraph::new();
        let gpu = Self::roots(&mut graph, &start.gpu, origin);
        let host = Self::roots(&mut graph, &start.host, origin);
        let tasks = self.build(&mut graph, segment, gpu, host, Collectives::Cached, cache)?;
        let schedule = self.execute(&graph, Collectives::Cached);
        let at = |task: &TaskId| origin + schedule.end[task.index()];
        let waited = tasks.launch_gated.iter().any(|(task, before)| {
            let ready = before.iter().map(|t| schedule.end[t.index()]).max().unwrap_or(Time::ZERO);
            schedule.start[task.index()] > ready
        });
        Ok((Clocks { gpu: tasks.gpu_end.iter().map(at).collect(), host: tasks.host_end.iter().map(at).collect() }, waited))
    }

    /// The clocks after `segment` from `start`: reused from its last run
    /// where that is exact, else simulated.
    fn advance(&self, segment: &Segment, start: Clocks, memo: &mut Memo, cache: &mut CollectiveCache) -> Result<Clocks, CollectiveError> {
        if segment.is_empty() {
            return Ok(start);
        }
        if let Some(end) = memo.runs.get(&segment.key).and_then(|run| run.apply(&start, segment.host_cost)) {
            memo.reused += 1;
            return Ok(end);
        }
        let (end, waited_for_host) = self.simulate(segment, &start, cache)?;
        let (gpu_start, host_start) = start.relative();
        let origin = i128::from(start.gpu.iter().copied().min().unwrap_or(Time::ZERO).0);
        let gpu_end = end.gpu.iter().map(|t| i128::from(t.0) - origin).collect();
        memo.runs.insert(segment.key.clone(), LastRun { gpu_start, host_start, gpu_end, waited_for_host });
        memo.simulated += 1;
        Ok(end)
    }

    /// Runs one pass from clocks synchronized at `at` (the host waited for
    /// the previous pass's result); returns when its last GPU is done.
    pub fn run_pass(&self, pass: &PreparedPass, at: Time, memo: &mut Memo, cache: &mut CollectiveCache) -> Result<Time, CollectiveError> {
        let mut clocks = Clocks::synchronized(self.ranks.len(), at, self.eager());
        clocks = self.advance(&pass.prologue, clocks, memo, cache)?;
        for _ in 0..pass.layers {
            clocks = self.advance(&pass.layer, clocks, memo, cache)?;
        }
        clocks = self.advance(&pass.epilogue, clocks, memo, cache)?;
        Ok(clocks.latest())
    }

    /// The passes as one task graph, every layer of every pass built out,
    /// each pass starting when the last GPU finished the one before. Returns
    /// when each pass ends. The reference the segment replay is tested
    /// against; also the shape a query takes beside other work.
    pub fn run_whole(
        &self,
        passes: &[PreparedPass],
        collectives: Collectives,
        cache: &mut CollectiveCache,
    ) -> Result<Vec<Time>, CollectiveError> {
        let mut graph = TaskGraph::new();
        let ranks = self.ranks.len();
        let mut sync = graph.join(&[]);
        let mut ends = Vec::new();
        for pass in passes {
            let mut gpu = vec![sync; ranks];
            let mut host = if self.eager() { vec![sync; ranks] } else { Vec::new() };
            let layers = std::iter::repeat_n(&pass.layer, pass.layers as usize);
            for segment in std::iter::once(&pass.prologue).chain(layers).chain([&pass.epilogue]) {
                let tasks = self.build(&mut graph, segment, gpu, host, collectives, cache)?;
                (gpu, host) = (tasks.gpu_end, tasks.host_end);
            }
            sync = graph.join(&gpu);
            ends.push(sync);
        }
        let schedule = self.execute(&graph, collectives);
        Ok(ends.iter().map(|t| schedule.end[t.index()]).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Selection;
    use crate::config::llm::{LlmModel, Scope};
    use crate::topology::{PresetOptions, preset};
    use crate::workload::tp::{Pass, Query, TensorParallel};

    /// A model with Llama-3.1-70B's layer shapes and only `layers` layers.
    fn short_llama(layers: u64) -> LlmModel {
        LlmModel { layers, ..LlmModel::load("llama-3.1-70b").unwrap() }
    }

    /// The query as one task graph, every collective's transfers built in.
    fn whole_graph_ends(setup: &TensorParallel, query: &Query, topo: &Topology, model: &HardwareModel) -> Vec<Time> {
        let replayer = setup.replayer();
        let mut cache = CollectiveCache::new(topo, model);
        let passes: Vec<PreparedPass> =
            query.passes().map(|pass| replayer.prepare(&setup.program(query, pass), &mut cache).unwrap()).collect();
        replayer.run_whole(&passes, Collectives::Embedded, &mut cache).unwrap()
    }

    #[test]
    fn reusing_segments_gives_the_whole_query_graph_to_the_picosecond() {
        let model = HardwareModel::base();
        let h20 = PresetOptions { gpus: None, gpu: Some("h20".into()), host: None };
        let boards = [
            (preset("hgx-h20", &PresetOptions::default(), &model).unwrap(), Mode::Nvswitch),
            (preset("h20-nvlink-mesh", &PresetOptions::default(), &model).unwrap(), Mode::Nvlink),
            (preset("pcie-gen4-8gpu", &h20, &model).unwrap(), Mode::Shm),
        ];
        let llm = short_llama(3);
        // Prefill kernels far longer than a launch (the host runs ahead),
        // decode kernels near it (the GPU waits for launches when eager).
        let query = Query { prompt: 512, output: 3, batch: 2 };
        let mut reused = 0;
        for (topo, mode) in &boards {
            for (tp, stack, scope, fusion, selection) in [
                (8, Stack::NcclGraph, Scope::Full, "vllm", Selection::Fastest),
                (2, Stack::TorchEager, Scope::Full, "torch", Selection::Nccl),
                (4, Stack::TorchGraph, Scope::Layers, "torch", Selection::Nccl),
                (1, Stack::Eager, Scope::Full, "vllm", Selection::Nccl),
            ] {
                let setup = TensorParallel::new(topo, &model, &llm, tp, *mode)
                    .unwrap()
                    .with_selection(selection)
                    .with_forward(stack, scope, fusion)
                    .unwrap();
                let replay = setup.replay(&query, &mut CollectiveCache::new(topo, &model)).unwrap();
                let whole = whole_graph_ends(&setup, &query, topo, &model);
                assert_eq!(replay.pass_ends, whole, "{mode} on {}, TP={tp}, {stack}, {scope}, {fusion}", topo.name);
                reused += replay.segments_reused;
            }
        }
        assert!(reused > 0, "identical layers were reused");
    }

    #[test]
    fn a_layer_repeats_from_where_the_last_one_left_its_clocks() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h20", &PresetOptions::default(), &model).unwrap();
        let llm = short_llama(80);
        let query = Query { prompt: 2048, output: 2, batch: 1 };
        for stack in [Stack::NcclGraph, Stack::TorchEager] {
            let setup =
                TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap().with_forward(stack, Scope::Full, "vllm").unwrap();
            let replay = setup.replay(&query, &mut CollectiveCache::new(&topo, &model)).unwrap();
            // Three passes of 80 layers, a prologue and an epilogue each.
            // Simulated: the prefill's three segments, the first decode
            // step's three, and the second step's first layer (its attention
            // reads one more position; its prologue and epilogue are the
            // first step's). Every other layer repeats the one before it:
            // eager too, where the hosts run ahead of the prefill's long
            // kernels and keep pace with a decode step's.
            assert_eq!(replay.segments_simulated + replay.segments_reused, 3 * 82, "{stack}");
            assert_eq!(replay.segments_simulated, 7, "{stack}");
        }
    }

    #[test]
    fn an_eager_caller_pays_a_launch_on_the_host_and_its_call_cost_on_the_gpu_once() {
        let mut model = HardwareModel::base();
        let topo = preset("hgx-h20", &PresetOptions::default(), &model).unwrap();
        let llm = short_llama(4);
        let prefill = |model: &HardwareModel, stack: Stack| {
            let query = Query { prompt: 4096, output: 0, batch: 1 };
            let setup =
                TensorParallel::new(&topo, model, &llm, 8, Mode::Nvswitch).unwrap().with_forward(stack, Scope::Layers, "torch").unwrap();
            setup.simulate_pass(&query, Pass::Prefill, &mut CollectiveCache::new(&topo, model)).unwrap().total()
        };
        let set = |model: &mut HardwareModel, call_us: u64, launch_us: u64| {
            let costs = model.stack.get_mut("torch-eager").unwrap();
            (costs.collective_call, costs.kernel_launch) = (Time::from_us(call_us), Time::from_us(launch_us));
        };
        // (4 layers of 11 kernels and 2 allreduces: 52 launches a pass.)
        set(&mut model, 10, 5);
        let base = prefill(&model, Stack::TorchEager);
        // The prefill's kernels outlast their launches: the hosts run ahead,
        // and 45 us more a launch delays the pass by the first few launches
        // only, not by each of its 52.
        set(&mut model, 10, 50);
        let later = prefill(&model, Stack::TorchEager) - base;
        assert!(later <= Time::from_us(2 * 45), "{later:?}");
        // The caller's cost on the GPU shows in each of the 8 allreduces (2 a
        // layer), once.
        set(&mut model, 110, 5);
        assert_eq!(prefill(&model, Stack::TorchEager), base + Time::from_us(8 * 100));
    }

    #[test]
    fn eager_launches_leave_the_gpu_waiting_on_short_kernels_only() {
        let model = HardwareModel::base();
        let topo = preset("hgx-h20", &PresetOptions::default(), &model).unwrap();
        let host = model.stack(Stack::TorchEager).unwrap().kernel_launch;
        let run = |llm, tp, stack| {
            let query = Query { prompt: 4096, output: 4, batch: 1 };
            let setup = TensorParallel::new(&topo, &model, llm, tp, Mode::Nvswitch).unwrap();
            setup.with_forward(stack, Scope::Full, "torch").unwrap().replay(&query, &mut CollectiveCache::new(&topo, &model)).unwrap()
        };
        let eager = |llm, tp| run(llm, tp, Stack::TorchEager);
        // The prefill's kernels outlast their launches: only the first waits.
        let seventy = short_llama(4);
        let replay = eager(&seventy, 8);
        assert!(replay.prefill.launch_wait <= host, "{:?}", replay.prefill);
        // A small model's decode kernels on one GPU, with the stream's gap
        // before each, are often shorter than a launch: those wait, and the
        // pass is longer than from a CUDA graph, never shorter.
        let small = LlmModel { hidden: 1024, heads: 8, kv_heads: 8, ffn: 4096, layers: 4, ..LlmModel::load("llama-3.1-8b").unwrap() };
        let replay = eager(&small, 1);
        assert!(replay.decode.launch_wait > Time::from_us(20), "{:?}", replay.decode);
        let graph = run(&small, 1, Stack::TorchGraph);
        assert!(replay.decode.total() > graph.decode.total() + replay.decode.launch_wait, "{:?} {:?}", replay.decode, graph.decode);
        assert!(replay.prefill.total() > graph.prefill.total(), "{:?} {:?}", replay.prefill, graph.prefill);
    }
}
