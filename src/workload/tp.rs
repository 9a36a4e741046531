//! Tensor parallelism of one LLM query, Megatron style: every decoder layer
//! runs its attention block, an allreduce of the block's output (tokens x
//! hidden elements), its MLP block and a second allreduce, on TP GPUs in
//! lockstep. Compute times come from the roofline (`compute`), allreduces
//! from the collective layer with the algorithm and protocol its tuner picks
//! (`Choice::Auto`), so a better collective speeds the replay without a
//! change here. Knows nothing of link internals.
//!
//! A query is one prefill over the prompt, then `output` decode steps of one
//! token each (so 8192 + 256 tokens cross every layer, as the seed article
//! counts). Within a layer compute and communication serialize, and every
//! GPU does the same work, so a pass takes `layers x (attention, allreduce,
//! MLP, allreduce)` added up. Each distinct allreduce is therefore simulated once,
//! alone on an idle network, and reused ([`CollectiveCache`]): a decode
//! step's allreduce repeats tens of thousands of times. The tests check that
//! this gives, to the picosecond, what simulating a layer as one task graph
//! (compute delays on every GPU and the embedded collectives) gives.

use std::collections::BTreeMap;
use std::iter;

use crate::collective::{self, Algorithm, Choice, CollectiveError, Op, Outcome, Plan, Protocol, Request, Selection};
use crate::config::hardware::{GpuModel, HardwareModel};
use crate::config::llm::LlmModel;
use crate::engine::{self, TaskGraph, TaskId, Work};
use crate::network::{LinkId, LinkUsage, Path};
use crate::topology::{LinkKind, NodeId, Topology};
use crate::transport::{self, Connection, Mode};
use crate::units::{Bandwidth, Bytes, Time};

use super::compute::{self, Block};

/// One query: a prompt of `prompt` tokens, `output` generated tokens, for
/// each of `batch` sequences processed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub prompt: u64,
    pub output: u64,
    pub batch: u64,
}

/// One forward pass of the query through every layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The whole prompt at once; its last position yields the first token.
    Prefill,
    /// One token per sequence, with `step` tokens generated before it.
    Decode { step: u64 },
}

impl Query {
    /// New tokens per sequence the pass pushes through a layer, and tokens
    /// already in the KV cache.
    pub fn shape(&self, pass: Pass) -> (u64, u64) {
        match pass {
            Pass::Prefill => (self.prompt, 0),
            Pass::Decode { step } => (1, self.prompt + step),
        }
    }

    /// The prefill, then every decode step.
    pub fn passes(&self) -> impl Iterator<Item = Pass> {
        iter::once(Pass::Prefill).chain((0..self.output).map(|step| Pass::Decode { step }))
    }
}

/// TP degrees that can split `llm` over at most `gpus` GPUs: they divide its
/// attention heads and its FFN width (KV heads are replicated when fewer).
pub fn allowed_degrees(llm: &LlmModel, gpus: u32) -> Vec<u32> {
    (1..=gpus).filter(|&tp| llm.heads.is_multiple_of(u64::from(tp)) && llm.ffn.is_multiple_of(u64::from(tp))).collect()
}

/// Why a tensor-parallel setup cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TpError {
    #[error("TP={tp} cannot split {model} over {gpus} GPUs; allowed: {allowed:?}")]
    Degree { tp: u32, model: String, gpus: usize, allowed: Vec<u32> },
    #[error("hardware model: {0}")]
    Model(String),
    #[error(transparent)]
    Collective(#[from] CollectiveError),
}

/// Compute time of one layer's two blocks on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerCompute {
    pub attention: Time,
    pub mlp: Time,
}

/// A query's tensor parallelism on one topology in one transport mode: the
/// first `tp` GPUs share every layer.
#[derive(Debug, Clone)]
pub struct TensorParallel<'a> {
    topo: &'a Topology,
    model: &'a HardwareModel,
    llm: &'a LlmModel,
    gpu: &'a GpuModel,
    ranks: Vec<NodeId>,
    mode: Mode,
    selection: Selection,
}

impl<'a> TensorParallel<'a> {
    /// Checks the degree and that `mode` can connect the GPUs (resolving an
    /// allreduce plan, which simulates nothing).
    pub fn new(topo: &'a Topology, model: &'a HardwareModel, llm: &'a LlmModel, tp: u32, mode: Mode) -> Result<Self, TpError> {
        let gpus = topo.gpus().len();
        let allowed = allowed_degrees(llm, gpus as u32);
        if !allowed.contains(&tp) {
            return Err(TpError::Degree { tp, model: llm.name.clone(), gpus, allowed });
        }
        let gpu = model.gpu(&topo.gpu_model).map_err(TpError::Model)?;
        let setup = TensorParallel { topo, model, llm, gpu, ranks: topo.gpus()[..tp as usize].to_vec(), mode, selection: Selection::Nccl };
        if let Some(request) = setup.allreduce(llm.allreduce_bytes(1)) {
            Plan::new(topo, model, request)?;
        }
        Ok(setup)
    }

    /// Chooses allreduce algorithms as `selection` says (default: NCCL's tuner).
    pub fn with_selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    pub fn selection(&self) -> Selection {
        self.selection
    }

    pub fn tp(&self) -> u64 {
        self.ranks.len() as u64
    }

    /// Roofline time of each block of one layer in `pass`, on one GPU.
    pub fn layer_compute(&self, query: &Query, pass: Pass) -> LayerCompute {
        let (tokens, context) = query.shape(pass);
        let mut time = LayerCompute::default();
        for kernel in compute::layer_kernels(self.llm, self.tp(), query.batch, tokens, context) {
            match kernel.block {
                Block::Attention => time.attention += kernel.time(self.gpu),
                Block::Mlp => time.mlp += kernel.time(self.gpu),
            }
        }
        time
    }

    /// Bytes of each allreduce in `pass`: the block's output, tokens x hidden.
    pub fn allreduce_bytes(&self, query: &Query, pass: Pass) -> Bytes {
        let (tokens, _) = query.shape(pass);
        self.llm.allreduce_bytes(query.batch * tokens)
    }

    /// The allreduce of `bytes` over the TP group (none at TP=1).
    pub fn allreduce(&self, bytes: Bytes) -> Option<Request> {
        (self.ranks.len() > 1).then(|| Request::new(Op::AllReduce, bytes, self.ranks.clone(), self.mode))
    }

    /// Payload each GPU sends for one allreduce of `bytes`, as a ring moves
    /// it: 2(n-1)/n of the buffer (rounded down to a byte).
    pub fn bytes_sent_per_gpu(&self, bytes: Bytes) -> Bytes {
        let n = self.ranks.len() as u128;
        Bytes(u64::try_from(u128::from(bytes.0) * 2 * (n - 1) / n).expect("less than the buffer twice over"))
    }

    /// Replays the whole query: every pass, its compute and its allreduces
    /// (from `cache`, which counts them: give it a fresh cache, the replay's
    /// link usage is the cache's total).
    pub fn replay(&self, query: &Query, cache: &mut CollectiveCache) -> Result<QueryReplay, CollectiveError> {
        let layers = self.llm.layers;
        let own_links = self.own_links()?;
        let mut replay = QueryReplay::default();
        for pass in query.passes() {
            let compute = self.layer_compute(query, pass);
            let bytes = self.allreduce_bytes(query, pass);
            let (totals, use_slot) = match pass {
                Pass::Prefill => (&mut replay.prefill, &mut replay.prefill_allreduce),
                Pass::Decode { .. } => (&mut replay.decode, &mut replay.decode_allreduce),
            };
            totals.compute += (compute.attention + compute.mlp) * layers;
            if let Some(request) = self.allreduce(bytes) {
                let calls = self.llm.allreduces_per_pass();
                let outcome = cache.outcome(request, self.selection, calls)?;
                totals.comm += outcome.time * calls;
                let entry = use_slot.get_or_insert_with(|| AllreduceUse::of(outcome, self.topo, &own_links));
                assert_eq!(entry.bytes, bytes, "every pass of a kind has allreduces of one size");
                entry.calls += calls;
                replay.tp_bytes_per_gpu += self.bytes_sent_per_gpu(bytes) * calls;
            }
        }
        replay.link_usage = cache.link_usage();
        Ok(replay)
    }

    /// Simulates one decoder layer of `pass` as one task graph on an idle
    /// network: compute on every GPU, the collectives embedded after it.
    pub fn simulate_layer(&self, query: &Query, pass: Pass) -> Result<LayerRun, CollectiveError> {
        let compute = self.layer_compute(query, pass);
        let plan = self
            .allreduce(self.allreduce_bytes(query, pass))
            .map(|r| collective::plan_and_simulate(self.topo, self.model, r, self.selection).map(|(plan, _)| plan))
            .transpose()?;
        let mut graph: TaskGraph<Path> = TaskGraph::new();
        let mut blocks = Vec::new();
        let mut collectives = Vec::new();
        let mut after: Vec<TaskId> = Vec::new();
        for (kind, time) in [(Activity::Attention, compute.attention), (Activity::Mlp, compute.mlp)] {
            let tasks: Vec<TaskId> = self.ranks.iter().map(|_| graph.delay(time, &after)).collect();
            blocks.push((kind, tasks.clone()));
            after = tasks;
            if let Some(plan) = &plan {
                let first = TaskId(graph.len() as u32);
                let end = plan.build(self.topo, self.model, &mut graph, &after)?;
                collectives.push((first, end));
                after = vec![end];
            }
        }
        let schedule = engine::run(&graph, &mut self.topo.network());
        let mut lanes: Vec<GpuLane> =
            self.ranks.iter().map(|&gpu| GpuLane { gpu: self.topo.node(gpu).name.clone(), spans: Vec::new() }).collect();
        for (kind, tasks) in &blocks {
            for (lane, &task) in lanes.iter_mut().zip(tasks) {
                let (start, end) = schedule.span(task);
                lane.spans.push(Span { activity: *kind, start, end });
            }
        }
        for &(first, end) in &collectives {
            let window = (schedule.start[first.index()], schedule.end[end.index()]);
            for (lane, &gpu) in lanes.iter_mut().zip(&self.ranks) {
                lane.spans.push(Span { activity: Activity::Allreduce, start: window.0, end: window.1 });
                let sending = (first.0..=end.0).map(TaskId).filter(|&task| match graph.work(task) {
                    Work::Transfer { route, .. } => route.links.first().is_some_and(|&l| self.topo.link(l).from == gpu),
                    _ => false,
                });
                let intervals = merge(sending.map(|task| schedule.span(task)).collect());
                lane.spans.extend(intervals.into_iter().map(|(start, end)| Span { activity: Activity::Sending, start, end }));
            }
        }
        Ok(LayerRun { makespan: schedule.makespan(), compute, lanes })
    }

    /// The first link of the connection from GPU 0 to GPU 1 in this mode.
    fn first_link(&self) -> Result<Option<LinkId>, CollectiveError> {
        let [a, b, ..] = self.ranks[..] else { return Ok(None) };
        let (connection, _) = transport::connect_with_fallback(self.topo, a, b, self.mode)?;
        let path = match &connection {
            Connection::Direct { path, .. } => path,
            Connection::Staged { write, .. } => write,
        };
        Ok(path.links.first().copied())
    }

    /// The links leaving the TP group's GPUs that are of the kind this mode
    /// leaves a GPU on (NVLink or PCIe): the capacity its allreduces could use.
    fn own_links(&self) -> Result<Vec<LinkId>, CollectiveError> {
        let Some(first) = self.first_link()? else { return Ok(Vec::new()) };
        let kind = std::mem::discriminant(&self.topo.link(first).kind);
        Ok((0..self.topo.links().len() as u32)
            .map(LinkId)
            .filter(|&id| {
                let link = self.topo.link(id);
                self.ranks.contains(&link.from) && std::mem::discriminant(&link.kind) == kind
            })
            .collect())
    }

    /// The link a GPU's traffic leaves on in this mode (GPU 0 to GPU 1), and
    /// its raw rate per direction: the effective rate the topology gives it
    /// over the efficiency of its generation in the hardware model. Vendors
    /// double this figure into their "bidirectional" headlines.
    pub fn headline_link(&self) -> Result<Option<(LinkId, Bandwidth)>, TpError> {
        let Some(first) = self.first_link()? else { return Ok(None) };
        let link = self.topo.link(first);
        let efficiency = match &link.kind {
            LinkKind::Pcie { generation, .. } => self.model.pcie(generation).map_err(TpError::Model)?.efficiency,
            LinkKind::NvLink { generation, .. } => self.model.nvlink(generation).map_err(TpError::Model)?.efficiency,
            LinkKind::SocketLink | LinkKind::MemoryBus { .. } => 1.0,
        };
        Ok(Some((first, link.bandwidth.scaled(1.0 / efficiency))))
    }
}

/// Sorts intervals and merges those that overlap or touch.
fn merge(mut intervals: Vec<(Time, Time)>) -> Vec<(Time, Time)> {
    intervals.sort();
    let mut merged: Vec<(Time, Time)> = Vec::new();
    for (start, end) in intervals {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Compute and communication time of one kind of pass over the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassTotals {
    pub compute: Time,
    pub comm: Time,
}

/// One allreduce size of the query: how often it runs and what the
/// collective layer made of it.
#[derive(Debug, Clone, PartialEq)]
pub struct AllreduceUse {
    pub bytes: Bytes,
    pub calls: u64,
    /// Time of one call.
    pub time: Time,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    /// What the connections really use ("nvswitch", "p2p+shm").
    pub transport: String,
    pub channels: u32,
    pub busbw_gbps: f64,
    /// How busy the GPUs' own links of the mode's kind were during one
    /// call: bytes they carried over their capacity times the call's time.
    pub gpu_link_util: f64,
}

impl AllreduceUse {
    fn of(outcome: &Outcome, topo: &Topology, own_links: &[LinkId]) -> AllreduceUse {
        let carried: f64 = own_links.iter().map(|l| outcome.usage[l.index()].bytes.as_f64()).sum();
        let capacity: f64 = own_links.iter().map(|&l| topo.link(l).bandwidth.bytes_per_sec() * outcome.time.as_secs()).sum();
        AllreduceUse {
            bytes: outcome.bytes,
            calls: 0,
            time: outcome.time,
            algorithm: outcome.algorithm,
            protocol: outcome.protocol,
            transport: outcome.transport.clone(),
            channels: outcome.channels,
            busbw_gbps: outcome.busbw_gbps(),
            gpu_link_util: if capacity > 0.0 { carried / capacity } else { 0.0 },
        }
    }
}

/// Where one query's time went, on every GPU of the TP group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryReplay {
    pub prefill: PassTotals,
    pub decode: PassTotals,
    pub prefill_allreduce: Option<AllreduceUse>,
    pub decode_allreduce: Option<AllreduceUse>,
    /// Payload each GPU sends for TP over the query: 2(n-1)/n of every
    /// allreduce.
    pub tp_bytes_per_gpu: Bytes,
    /// What every link carried over all the query's allreduces.
    pub link_usage: Vec<LinkUsage>,
}

impl QueryReplay {
    pub fn compute(&self) -> Time {
        self.prefill.compute + self.decode.compute
    }
    pub fn comm(&self) -> Time {
        self.prefill.comm + self.decode.comm
    }
    /// Time to first token: the prefill, compute and communication (its last
    /// position's logits give the first token).
    pub fn ttft(&self) -> Time {
        self.prefill.compute + self.prefill.comm
    }
    pub fn total(&self) -> Time {
        self.compute() + self.comm()
    }
    pub fn comm_share(&self) -> f64 {
        let total = self.total();
        if total.0 == 0 { 0.0 } else { self.comm().0 as f64 / total.0 as f64 }
    }
}

/// What a GPU does at a moment of a simulated layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Activity {
    Attention,
    Mlp,
    /// Inside an allreduce call (waiting, reducing or sending).
    Allreduce,
    /// At least one of its transfers of the allreduce is in flight.
    Sending,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub activity: Activity,
    pub start: Time,
    pub end: Time,
}

/// One GPU's activities over a simulated layer.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuLane {
    pub gpu: String,
    pub spans: Vec<Span>,
}

/// One decoder layer simulated as one task graph.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRun {
    pub makespan: Time,
    pub compute: LayerCompute,
    pub lanes: Vec<GpuLane>,
}

/// Ordered key of a collective request (a `BTreeMap` key: iteration is
/// deterministic).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RequestKey {
    op: Op,
    bytes: Bytes,
    ranks: Vec<NodeId>,
    mode: Mode,
    algorithm: Option<Algorithm>,
    protocol: Option<Protocol>,
    selection: Selection,
}

impl RequestKey {
    fn of(request: &Request, selection: Selection) -> RequestKey {
        fn fixed<T>(choice: Choice<T>) -> Option<T> {
            match choice {
                Choice::Auto => None,
                Choice::Fixed(value) => Some(value),
            }
        }
        RequestKey {
            op: request.op,
            bytes: request.bytes,
            ranks: request.ranks.clone(),
            mode: request.mode,
            algorithm: fixed(request.algorithm),
            protocol: fixed(request.protocol),
            selection,
        }
    }
}

/// Outcomes of collectives simulated alone on an idle network, one per
/// distinct request, with how many calls of each a workload made.
#[derive(Debug)]
pub struct CollectiveCache<'a> {
    topo: &'a Topology,
    model: &'a HardwareModel,
    entries: BTreeMap<RequestKey, (Outcome, u64)>,
}

impl<'a> CollectiveCache<'a> {
    pub fn new(topo: &'a Topology, model: &'a HardwareModel) -> Self {
        CollectiveCache { topo, model, entries: BTreeMap::new() }
    }

    /// The outcome of `request` (its algorithm chosen as `selection` says),
    /// simulated the first time it is asked for; counts `calls` calls of it.
    pub fn outcome(&mut self, request: Request, selection: Selection, calls: u64) -> Result<&Outcome, CollectiveError> {
        let key = RequestKey::of(&request, selection);
        if !self.entries.contains_key(&key) {
            let (_, outcome) = collective::plan_and_simulate(self.topo, self.model, request, selection)?;
            self.entries.insert(key.clone(), (outcome, 0));
        }
        let (outcome, counted) = self.entries.get_mut(&key).expect("inserted above");
        *counted += calls;
        Ok(outcome)
    }

    /// How many distinct collectives were simulated.
    pub fn simulations(&self) -> usize {
        self.entries.len()
    }

    /// What every link carried over all counted calls.
    pub fn link_usage(&self) -> Vec<LinkUsage> {
        let mut total = vec![LinkUsage::default(); self.topo.links().len()];
        for (outcome, calls) in self.entries.values() {
            for (sum, usage) in total.iter_mut().zip(&outcome.usage) {
                sum.bytes += usage.bytes * *calls;
                sum.busy += usage.busy * *calls;
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    fn llama_70b() -> LlmModel {
        LlmModel::load("llama-3.1-70b").unwrap()
    }

    /// The base model, Llama-3.1-70B and the 8-GPU HGX H20 board.
    fn seventy_b_on_the_h20_board() -> (HardwareModel, LlmModel, Topology) {
        let model = HardwareModel::base();
        let topo = preset("hgx-h20", &PresetOptions::default(), &model).unwrap();
        (model, llama_70b(), topo)
    }

    /// The four setups of the default experiment.
    fn default_setups(model: &HardwareModel) -> Vec<(Topology, Mode)> {
        let h20 = || PresetOptions { gpus: None, gpu: Some("h20".into()) };
        vec![
            (preset("hgx-h20", &PresetOptions::default(), model).unwrap(), Mode::Nvswitch),
            (preset("h20-nvlink-mesh", &PresetOptions::default(), model).unwrap(), Mode::Nvlink),
            (preset("pcie-gen4-8gpu", &h20(), model).unwrap(), Mode::P2p),
            (preset("pcie-gen4-8gpu", &h20(), model).unwrap(), Mode::Shm),
        ]
    }

    #[test]
    fn the_cache_gives_what_simulating_a_whole_layer_gives() {
        let model = HardwareModel::base();
        let llm = llama_70b();
        let query = Query { prompt: 2048, output: 4, batch: 1 };
        for (topo, mode) in default_setups(&model) {
            let tp = TensorParallel::new(&topo, &model, &llm, 8, mode).unwrap();
            let mut cache = CollectiveCache::new(&topo, &model);
            for pass in [Pass::Prefill, Pass::Decode { step: 3 }] {
                let layer = tp.simulate_layer(&query, pass).unwrap();
                let compute = tp.layer_compute(&query, pass);
                let request = tp.allreduce(tp.allreduce_bytes(&query, pass)).unwrap();
                let allreduce = cache.outcome(request, tp.selection(), 2).unwrap().time;
                let cached = compute.attention + allreduce + compute.mlp + allreduce;
                assert_eq!(layer.makespan, cached, "{mode} on {}, {pass:?}", topo.name);
            }
        }
    }

    #[test]
    fn the_replay_adds_up_the_passes() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let query = Query { prompt: 1024, output: 8, batch: 2 };
        let tp = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap();
        let mut cache = CollectiveCache::new(&topo, &model);
        let replay = tp.replay(&query, &mut cache).unwrap();
        assert_eq!(cache.simulations(), 2, "one prefill size, one decode size");
        let prefill = replay.prefill_allreduce.as_ref().unwrap();
        let decode = replay.decode_allreduce.as_ref().unwrap();
        assert_eq!((prefill.bytes, prefill.calls), (Bytes(2 * 1024 * 8192 * 2), 160));
        assert_eq!((decode.bytes, decode.calls), (Bytes(2 * 8192 * 2), 8 * 160));
        assert_eq!(replay.prefill.comm, prefill.time * 160);
        assert_eq!(replay.decode.comm, decode.time * (8 * 160));
        let first = tp.layer_compute(&query, Pass::Prefill);
        assert_eq!(replay.prefill.compute, (first.attention + first.mlp) * 80);
        assert_eq!(replay.ttft(), replay.prefill.compute + replay.prefill.comm);
        assert_eq!(replay.total(), replay.ttft() + replay.decode.compute + replay.decode.comm);
        // Link usage is the simulated outcomes times their calls.
        let out_of_gpu0: Bytes =
            topo.links().iter().zip(&replay.link_usage).filter(|(link, _)| link.from == topo.gpus()[0]).map(|(_, usage)| usage.bytes).sum();
        assert!(out_of_gpu0.0 > 0);
    }

    #[test]
    fn decode_steps_read_a_growing_kv_cache() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let tp = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap();
        let query = Query { prompt: 8192, output: 256, batch: 1 };
        let first = tp.layer_compute(&query, Pass::Decode { step: 0 });
        let last = tp.layer_compute(&query, Pass::Decode { step: 255 });
        assert!(last.attention > first.attention && last.mlp == first.mlp, "{first:?} {last:?}");
        assert_eq!(query.passes().count(), 257);
    }

    #[test]
    fn seventy_b_sends_about_38_8_gb_a_gpu_at_tp8_and_22_at_tp2() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let query = Query { prompt: 8192, output: 256, batch: 1 };
        for (tp, expected_gb) in [(8, 38.76), (2, 22.15)] {
            let setup = TensorParallel::new(&topo, &model, &llm, tp, Mode::Nvswitch).unwrap();
            let replay = setup.replay(&query, &mut CollectiveCache::new(&topo, &model)).unwrap();
            let gb = replay.tp_bytes_per_gpu.as_f64() / 1e9;
            assert!((gb - expected_gb).abs() < 0.01, "TP={tp}: {gb} GB");
        }
    }

    #[test]
    fn tp1_has_no_allreduce() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let setup = TensorParallel::new(&topo, &model, &llm, 1, Mode::Nvswitch).unwrap();
        let query = Query { prompt: 128, output: 2, batch: 1 };
        let replay = setup.replay(&query, &mut CollectiveCache::new(&topo, &model)).unwrap();
        assert_eq!((replay.comm(), replay.tp_bytes_per_gpu), (Time::ZERO, Bytes::ZERO));
        assert_eq!(setup.simulate_layer(&query, Pass::Prefill).unwrap().makespan, {
            let c = setup.layer_compute(&query, Pass::Prefill);
            c.attention + c.mlp
        });
    }

    #[test]
    fn bad_degrees_and_missing_transports_are_refused() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        assert_eq!(allowed_degrees(&llm, 8), vec![1, 2, 4, 8]);
        let error = TensorParallel::new(&topo, &model, &llm, 3, Mode::Nvswitch).unwrap_err();
        assert!(matches!(error, TpError::Degree { tp: 3, .. }), "{error}");
        let error = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvlink).unwrap_err().to_string();
        assert!(error.contains("transport nvlink is not available on topology hgx-h20"), "{error}");
    }

    #[test]
    fn headline_links_are_the_vendors_per_direction_figures() {
        let model = HardwareModel::base();
        let llm = llama_70b();
        let expected_gbps = [450.0, 64.0, 31.5, 31.5];
        for ((topo, mode), expected) in default_setups(&model).iter().zip(expected_gbps) {
            let setup = TensorParallel::new(topo, &model, &llm, 8, *mode).unwrap();
            let (_, rate) = setup.headline_link().unwrap().unwrap();
            assert!((rate.as_gbps() - expected).abs() < 0.01, "{mode}: {rate}");
        }
    }

    #[test]
    fn a_layer_timeline_shows_every_gpu_sending_inside_its_allreduces() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let setup = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap();
        let layer = setup.simulate_layer(&Query { prompt: 512, output: 1, batch: 1 }, Pass::Prefill).unwrap();
        assert_eq!(layer.lanes.len(), 8);
        for lane in &layer.lanes {
            let of = |kind| lane.spans.iter().filter(move |s| s.activity == kind);
            assert_eq!(of(Activity::Attention).count(), 1);
            assert_eq!(of(Activity::Allreduce).count(), 2);
            let windows: Vec<&Span> = of(Activity::Allreduce).collect();
            for sending in of(Activity::Sending) {
                assert!(windows.iter().any(|w| w.start <= sending.start && sending.end <= w.end), "{lane:?}");
            }
            assert!(of(Activity::Sending).count() > 0, "{} sends", lane.gpu);
        }
    }
}
