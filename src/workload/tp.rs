//! Tensor parallelism of one LLM query, Megatron style: every decoder layer
//! runs its attention block, an allreduce of the block's output (tokens x
//! hidden elements), its MLP block and a second allreduce, on TP GPUs in
//! lockstep; a full forward also looks up the embedding (vocabulary-parallel,
//! an allreduce) and gathers the logits. The kernels of a pass are
//! `forward`'s, each a roofline (`compute`) launched as the caller (`stack`)
//! launches them; allreduces come from the collective layer with the
//! algorithm and protocol its tuner picks (`Choice::Auto`), so a better
//! collective speeds the replay without a change here. Knows nothing of link
//! internals.
//!
//! A query is one prefill over the prompt, then `output` decode steps of one
//! token each (so 8192 + 256 tokens cross every layer, as the seed article
//! counts). Every pass runs on the engine on every GPU (`replay`), and each
//! distinct collective is simulated once alone on an idle network and
//! reused ([`CollectiveCache`]): a decode step's allreduce repeats tens of
//! thousands of times.

use crate::collective::{CollectiveError, Op, Plan, Request, Selection};
use crate::config::hardware::{GpuModel, HardwareModel};
use crate::config::llm::{AttentionKernel, Fusion, LlmModel, Scope};
use crate::network::LinkId;
use crate::stack::Stack;
use crate::topology::{LinkKind, NodeId, Topology};
use crate::transport::{self, Connection, Mode};
use crate::units::{Bandwidth, Bytes, Time};

pub use super::cache::CollectiveCache;
use super::compute::Launch;
use super::forward::{self, Block, PassProgram, PassTokens, Shape, Step};
use super::layer::{self, LayerCompute, LayerRun};
use super::replay::{Memo, Replayer};

mod results;

pub use results::{AllreduceUse, PassTotals, QueryReplay};

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
        std::iter::once(Pass::Prefill).chain((0..self.output).map(|step| Pass::Decode { step }))
    }
}

/// Whether TP=`tp` splits `llm`: it divides its attention heads and its FFN
/// width (KV heads are replicated when fewer).
pub fn splits(llm: &LlmModel, tp: u64) -> bool {
    tp > 0 && llm.heads.is_multiple_of(tp) && llm.ffn.is_multiple_of(tp)
}

/// TP degrees that can split `llm` over at most `gpus` GPUs.
pub fn allowed_degrees(llm: &LlmModel, gpus: u32) -> Vec<u32> {
    (1..=gpus).filter(|&tp| splits(llm, u64::from(tp))).collect()
}

/// The one check of a TP degree: `tp` must be one of
/// [`allowed_degrees`] of `llm` on `topology`'s GPUs.
pub fn check_degree(llm: &LlmModel, tp: u32, topology: &Topology) -> Result<(), TpError> {
    let gpus = topology.gpus().len() as u32;
    let allowed = allowed_degrees(llm, gpus);
    if allowed.contains(&tp) {
        return Ok(());
    }
    let list: Vec<String> = allowed.iter().map(u32::to_string).collect();
    Err(TpError::Degree {
        tp,
        model: llm.name.clone(),
        heads: llm.heads,
        ffn: llm.ffn,
        gpus,
        topology: topology.name.clone(),
        allowed: list.join(", "),
    })
}

/// Why a tensor-parallel setup cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TpError {
    #[error(
        "TP={tp} cannot run {model} on the {gpus} GPUs of {topology}: TP must divide its {heads} heads and {ffn} FFN columns and fit the GPUs; allowed: {allowed}"
    )]
    Degree { tp: u32, model: String, heads: u64, ffn: u64, gpus: u32, topology: String, allowed: String },
    #[error("hardware model: {0}")]
    Model(String),
    /// The fusion or the stack named is not in the model files.
    #[error("{0}")]
    Forward(String),
    #[error(transparent)]
    Collective(#[from] CollectiveError),
}

/// A query's tensor parallelism on one topology in one transport mode: the
/// first `tp` GPUs (or those [`TensorParallel::on_gpus`] names) share every
/// layer.
#[derive(Debug, Clone)]
pub struct TensorParallel<'a> {
    topo: &'a Topology,
    model: &'a HardwareModel,
    llm: &'a LlmModel,
    gpu: &'a GpuModel,
    ranks: Vec<NodeId>,
    mode: Mode,
    selection: Selection,
    stack: Stack,
    /// NCCL's channel count where forced.
    channels: Option<u32>,
    scope: Scope,
    fusion: Fusion,
    launch: Launch,
    /// Whether the collectives run (a forward timed without them: off).
    communicate: bool,
}

impl<'a> TensorParallel<'a> {
    /// Checks the degree and that `mode` can connect the GPUs (resolving an
    /// allreduce plan, which simulates nothing). The forward is the whole
    /// model with the LLM's default fusion, launched by the default stack.
    pub fn new(topo: &'a Topology, model: &'a HardwareModel, llm: &'a LlmModel, tp: u32, mode: Mode) -> Result<Self, TpError> {
        check_degree(llm, tp, topo)?;
        let gpu = model.gpu(&topo.gpu_model).map_err(TpError::Model)?;
        let fusion = llm
            .fusion
            .get(Fusion::DEFAULT)
            .or_else(|| llm.fusion.values().next())
            .cloned()
            .unwrap_or_else(|| Fusion::builtin()[Fusion::DEFAULT].clone());
        let stack = Stack::default();
        let launch = Launch::of(model, stack).map_err(TpError::Model)?;
        let setup = TensorParallel {
            topo,
            model,
            llm,
            gpu,
            ranks: topo.gpus()[..tp as usize].to_vec(),
            mode,
            selection: Selection::Nccl,
            stack,
            channels: None,
            scope: Scope::Full,
            fusion,
            launch,
            communicate: true,
        };
        setup.check_plan()?;
        Ok(setup)
    }

    /// Resolves an allreduce plan over the ranks (simulating nothing): that
    /// the mode connects them.
    fn check_plan(&self) -> Result<(), TpError> {
        if let Some(request) = self.allreduce(self.llm.allreduce_bytes(1)) {
            Plan::new(self.topo, self.model, request)?;
        }
        Ok(())
    }

    /// Runs on `ranks` (GPUs of the topology, in rank order) instead of the
    /// first TP GPUs: one group of a server split in two. Their number must
    /// be a degree the model splits over, and the mode must connect them.
    pub fn on_gpus(mut self, ranks: Vec<NodeId>) -> Result<Self, TpError> {
        check_degree(self.llm, ranks.len() as u32, self.topo)?;
        assert!(ranks.iter().all(|r| self.topo.gpus().contains(r)), "a group's ranks are GPUs of its topology");
        self.ranks = ranks;
        self.check_plan()?;
        Ok(self)
    }

    /// Chooses allreduce algorithms as `selection` says (default: NCCL's tuner).
    pub fn with_selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// Runs the forward as `stack` launches it, over `scope`, with the LLM's
    /// fusion called `fusion`.
    pub fn with_forward(mut self, stack: Stack, scope: Scope, fusion: &str) -> Result<Self, TpError> {
        self.fusion = self.llm.fusion(fusion).map_err(TpError::Forward)?.clone();
        self.scope = scope;
        self.with_stack(stack)
    }

    /// The same forward launched as `stack` launches it.
    pub fn with_stack(mut self, stack: Stack) -> Result<Self, TpError> {
        self.launch = Launch::of(self.model, stack).map_err(TpError::Forward)?;
        self.stack = stack;
        Ok(self)
    }

    /// Forces NCCL's channel count for every collective (None: NCCL's own).
    pub fn with_channels(mut self, channels: Option<u32>) -> Self {
        self.channels = channels;
        self
    }

    /// Leaves the collectives out, as a forward timed without them.
    pub fn without_collectives(mut self) -> Self {
        self.communicate = false;
        self
    }

    pub fn selection(&self) -> Selection {
        self.selection
    }

    pub fn stack(&self) -> Stack {
        self.stack
    }

    /// What replaying `program` from its CUDA graph waits, once a serving
    /// engine has built its inputs: the stack's `graph_launch` for each of
    /// its kernels; nothing for a stack launching from the host.
    pub fn graph_launch(&self, program: &PassProgram) -> Result<Time, String> {
        if !self.stack.in_graph() {
            return Ok(Time::ZERO);
        }
        let kernels: u64 = program.counted().filter(|(step, _)| matches!(step, Step::Kernel { .. })).map(|(_, count)| count).sum();
        Ok(Time(self.model.stack(self.stack)?.graph_launch.0 * kernels))
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    pub fn tp(&self) -> u64 {
        self.ranks.len() as u64
    }

    /// The tokens of `pass` on each GPU.
    pub fn shape(&self, query: &Query, pass: Pass) -> Shape {
        let (tokens, context) = query.shape(pass);
        Shape { tp: self.tp(), batch: query.batch, tokens, context }
    }

    /// The kernels and collectives of `pass`.
    pub fn program(&self, query: &Query, pass: Pass) -> PassProgram {
        self.program_of(self.shape(query, pass).into())
    }

    /// What of `tokens` this forward's kernels depend on: the attention's
    /// longest block only where the fusion's attention prices it, and its
    /// key limit only over decodes alone (where it decides the splits).
    pub fn priced(&self, tokens: PassTokens) -> PassTokens {
        match self.fusion.attention {
            AttentionKernel::FlashVarlen if tokens.rows == tokens.sequences => tokens,
            AttentionKernel::FlashVarlen => PassTokens { key_limit: 0, ..tokens },
            AttentionKernel::Dense => PassTokens { tail_pairs: 0, key_limit: 0, ..tokens },
        }
    }

    /// The kernels and collectives of a pass of `tokens`.
    pub fn program_of(&self, tokens: PassTokens) -> PassProgram {
        let mut program = forward::pass_program(self.llm, &self.fusion, self.scope, tokens);
        if !self.communicate {
            for steps in [&mut program.prologue, &mut program.layer, &mut program.epilogue] {
                steps.retain(|step| matches!(step, Step::Kernel { .. }));
            }
        }
        program
    }

    /// One pass replayed alone from idle, on every GPU.
    pub fn simulate_pass(&self, query: &Query, pass: Pass, cache: &mut CollectiveCache) -> Result<PassTotals, CollectiveError> {
        self.simulate_program(&self.program(query, pass), &mut Memo::default(), cache)
    }

    /// A pass of `program` replayed alone from idle, on every GPU; segments
    /// already in `memo` (from earlier passes) are reused.
    pub fn simulate_program(
        &self,
        program: &PassProgram,
        memo: &mut Memo,
        cache: &mut CollectiveCache,
    ) -> Result<PassTotals, CollectiveError> {
        let replayer = self.replayer();
        let prepared = replayer.prepare(program, cache)?;
        let end = replayer.run_pass(&prepared, Time::ZERO, memo, cache)?;
        let mut totals = PassTotals::default();
        totals.add(end, prepared.compute, prepared.comm);
        Ok(totals)
    }

    /// What runs the passes of this group on the engine.
    pub fn replayer(&self) -> Replayer<'_> {
        Replayer {
            topo: self.topo,
            model: self.model,
            gpu: self.gpu,
            ranks: &self.ranks,
            mode: self.mode,
            selection: self.selection,
            stack: self.stack,
            channels: self.channels,
            launch: self.launch,
        }
    }

    /// Kernel time of each block of one layer in `pass`, on one GPU.
    pub fn layer_compute(&self, query: &Query, pass: Pass) -> LayerCompute {
        layer::layer_compute(&self.replayer(), &self.program(query, pass))
    }

    /// Bytes of each allreduce in `pass`: the block's output, tokens x hidden.
    pub fn allreduce_bytes(&self, query: &Query, pass: Pass) -> Bytes {
        let (tokens, _) = query.shape(pass);
        self.llm.allreduce_bytes(query.batch * tokens)
    }

    /// The allreduce of `bytes` over the TP group (none at TP=1).
    pub fn allreduce(&self, bytes: Bytes) -> Option<Request> {
        (self.ranks.len() > 1).then(|| self.replayer().request(Op::AllReduce, bytes))
    }

    /// Payload each GPU sends for one collective of `bytes`, as a ring moves
    /// it: 2(n-1)/n of an allreduce's buffer, (n-1)/n of a gather's
    /// (rounded down to a byte).
    pub fn bytes_sent_per_gpu(&self, op: Op, bytes: Bytes) -> Bytes {
        let n = self.ranks.len() as u128;
        let passes = if op == Op::AllReduce { 2 } else { 1 };
        Bytes(u64::try_from(u128::from(bytes.0) * passes * (n - 1) / n).expect("less than the buffer twice over"))
    }

    /// Replays the whole query on the engine, pass after pass (collectives
    /// from `cache`, which counts them: give it a fresh cache, the replay's
    /// link usage is the cache's total).
    pub fn replay(&self, query: &Query, cache: &mut CollectiveCache) -> Result<QueryReplay, CollectiveError> {
        let own_links = self.own_links()?;
        let replayer = self.replayer();
        let mut memo = Memo::default();
        let mut replay = QueryReplay::default();
        let mut at = Time::ZERO;
        for pass in query.passes() {
            let program = self.program(query, pass);
            let prepared = replayer.prepare(&program, cache)?;
            let end = replayer.run_pass(&prepared, at, &mut memo, cache)?;
            let (totals, allreduce) = match pass {
                Pass::Prefill => (&mut replay.prefill, &mut replay.prefill_allreduce),
                Pass::Decode { .. } => (&mut replay.decode, &mut replay.decode_allreduce),
            };
            totals.add(end - at, prepared.compute, prepared.comm);
            replay.pass_ends.push(end);
            at = end;
            for (step, calls) in program.counted() {
                let Step::Collective { op, bytes, block } = step else { continue };
                let request = replayer.request(*op, *bytes);
                let outcome = cache.outcome(request, self.selection, 0)?;
                let slot = if *op == Op::AllReduce && *block != Block::Logits {
                    allreduce.get_or_insert_with(|| AllreduceUse::of(outcome, self.topo, &own_links))
                } else {
                    let index = match replay.gathers.iter().position(|g| g.bytes == *bytes) {
                        Some(index) => index,
                        None => {
                            replay.gathers.push(AllreduceUse::of(outcome, self.topo, &own_links));
                            replay.gathers.len() - 1
                        }
                    };
                    &mut replay.gathers[index]
                };
                assert_eq!(slot.bytes, *bytes, "every pass of a kind has allreduces of one size");
                slot.calls += calls;
                replay.tp_bytes_per_gpu += self.bytes_sent_per_gpu(*op, *bytes) * calls;
            }
        }
        replay.segments_simulated = memo.simulated;
        replay.segments_reused = memo.reused;
        replay.link_usage = cache.link_usage();
        Ok(replay)
    }

    /// Simulates one decoder layer of `pass` as one task graph on an idle
    /// network: every GPU's kernels, the collectives' own transfers.
    pub fn simulate_layer(&self, query: &Query, pass: Pass) -> Result<LayerRun, CollectiveError> {
        layer::simulate_layer(&self.replayer(), &self.program(query, pass))
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    pub(crate) fn llama_70b() -> LlmModel {
        LlmModel::load("llama-3.1-70b").unwrap()
    }

    /// The base model, Llama-3.1-70B and the 8-GPU HGX H20 board.
    pub(crate) fn seventy_b_on_the_h20_board() -> (HardwareModel, LlmModel, Topology) {
        let model = HardwareModel::base();
        let topo = preset("hgx-h20", &PresetOptions::default(), &model).unwrap();
        (model, llama_70b(), topo)
    }

    /// The four setups of the default experiment.
    pub(crate) fn default_setups(model: &HardwareModel) -> Vec<(Topology, Mode)> {
        let h20 = || PresetOptions { gpus: None, gpu: Some("h20".into()), host: None };
        vec![
            (preset("hgx-h20", &PresetOptions::default(), model).unwrap(), Mode::Nvswitch),
            (preset("h20-nvlink-mesh", &PresetOptions::default(), model).unwrap(), Mode::Nvlink),
            (preset("pcie-gen4-8gpu", &h20(), model).unwrap(), Mode::P2p),
            (preset("pcie-gen4-8gpu", &h20(), model).unwrap(), Mode::Shm),
        ]
    }

    #[test]
    fn the_replay_adds_up_the_passes_and_counts_every_collective() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let query = Query { prompt: 1024, output: 8, batch: 2 };
        let tp = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap();
        let mut cache = CollectiveCache::new(&topo, &model);
        let replay = tp.replay(&query, &mut cache).unwrap();
        assert_eq!(cache.simulations(), 3, "prefill and decode allreduces, one size of logits gather");
        let prefill = replay.prefill_allreduce.as_ref().unwrap();
        let decode = replay.decode_allreduce.as_ref().unwrap();
        // Two a layer and the embedding's, per pass.
        assert_eq!((prefill.bytes, prefill.calls), (Bytes(2 * 1024 * 8192 * 2), 161));
        assert_eq!((decode.bytes, decode.calls), (Bytes(2 * 8192 * 2), 8 * 161));
        assert_eq!(replay.gathers.iter().map(|g| g.calls).sum::<u64>(), 9, "one gather of the logits a pass");
        let gathers = replay.gathers.iter().fold(Time::ZERO, |sum, g| sum + g.time * g.calls);
        assert_eq!(replay.comm(), prefill.time * 161 + decode.time * (8 * 161) + gathers);
        // In a graph nothing waits for launches: a pass is its kernels and collectives.
        assert_eq!(replay.launch_wait(), Time::ZERO);
        let first = tp.program(&query, Pass::Prefill);
        let replayer = tp.replayer();
        let kernels = first.counted().fold(Time::ZERO, |sum, (step, n)| match step {
            Step::Kernel { kernel, .. } => sum + replayer.kernel_time(kernel) * n,
            Step::Collective { .. } => sum,
        });
        assert_eq!(replay.prefill.compute, kernels);
        assert_eq!(replay.total(), replay.ttft() + replay.decode.total());
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
    fn seventy_b_layers_send_about_38_8_gb_a_gpu_at_tp8_and_22_at_tp2() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let query = Query { prompt: 8192, output: 256, batch: 1 };
        for (tp, expected_gb) in [(8, 38.76), (2, 22.15)] {
            let setup = TensorParallel::new(&topo, &model, &llm, tp, Mode::Nvswitch).unwrap();
            let layers = setup.clone().with_forward(Stack::NcclGraph, Scope::Layers, "vllm").unwrap();
            let replay = layers.replay(&query, &mut CollectiveCache::new(&topo, &model)).unwrap();
            let gb = replay.tp_bytes_per_gpu.as_f64() / 1e9;
            assert!((gb - expected_gb).abs() < 0.01, "TP={tp}: {gb} GB");
            // The whole model adds the embedding's allreduce and the logits' gather.
            let full = setup.replay(&query, &mut CollectiveCache::new(&topo, &model)).unwrap();
            assert!(full.tp_bytes_per_gpu > replay.tp_bytes_per_gpu);
        }
    }

    #[test]
    fn tp1_has_no_collectives() {
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
    fn only_a_varlen_attention_prices_its_longest_block() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        let setup = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap();
        let mut tokens = PassTokens::empty(8);
        tokens.add(1024, 0);
        let forward = |fusion: &str| setup.clone().with_forward(Stack::TorchEager, Scope::Full, fusion).unwrap();
        assert_eq!(forward("torch-varlen").priced(tokens), PassTokens { key_limit: 0, ..tokens }, "a prompt's keys decide no split");
        assert_eq!(forward("vllm").priced(tokens), PassTokens { tail_pairs: 0, key_limit: 0, ..tokens });
        let mut decodes = PassTokens::empty(8);
        (0..4).for_each(|_| decodes.add(1, 500));
        assert_eq!(forward("torch-varlen").priced(decodes), decodes, "decodes alone: the key limit decides the splits");
    }

    #[test]
    fn bad_degrees_fusions_and_missing_transports_are_refused() {
        let (model, llm, topo) = seventy_b_on_the_h20_board();
        assert_eq!(allowed_degrees(&llm, 8), vec![1, 2, 4, 8]);
        let error = TensorParallel::new(&topo, &model, &llm, 3, Mode::Nvswitch).unwrap_err();
        assert!(matches!(error, TpError::Degree { tp: 3, .. }), "{error}");
        let error = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvlink).unwrap_err().to_string();
        assert!(error.contains("transport nvlink is not available on topology hgx-h20"), "{error}");
        let setup = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch).unwrap();
        let error = setup.with_forward(Stack::TorchEager, Scope::Full, "tensorrt").unwrap_err().to_string();
        assert!(error.contains("[fusion.tensorrt]"), "{error}");
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
        use crate::workload::layer::{Activity, Span};
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
