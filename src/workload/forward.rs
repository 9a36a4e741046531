//! What one forward pass of an LLM runs on each GPU under tensor
//! parallelism, in order: per step the embedding lookup, then every decoder
//! layer (norms, QKV projection, rotary, KV-cache write, attention, output
//! projection, residual adds, gate/up projection, activation, down
//! projection, and the allreduce after each block), then the final norm, the
//! LM head, the gather of the logits and sampling. Which kernels run as one
//! (and how a rotary kept apart runs, and the copies a varlen attention's
//! entry point makes) is the LLM file's fusion; which kernels run at all
//! is the scope. Each kernel is a roofline (`compute`); the collectives are
//! named here and simulated by the collective layer. Knows nothing of
//! links or time.

use crate::collective::Op;
use crate::config::hardware::Library;
use crate::config::llm::{AttentionKernel, Fusion, LlmModel, Rotary, Scope};
use crate::units::Bytes;

use super::compute::Kernel;
use super::flash::DecodeLaunch;

/// The tokens a pass pushes through the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Sequences processed together.
    pub batch: u64,
    /// New tokens of each sequence (the prompt at prefill, 1 at decode).
    pub tokens: u64,
    /// Tokens of each sequence already in the KV cache (0 at prefill).
    pub context: u64,
}

impl Shape {
    /// Rows of the activations: every new token of every sequence.
    pub fn rows(&self) -> u64 {
        self.batch * self.tokens
    }
}

/// The tokens a pass pushes through the model whatever mix of prompt
/// chunks and decode steps it carries (a continuously batched iteration):
/// what its kernels and collectives depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PassTokens {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// New tokens of every sequence: the activations' rows.
    pub rows: u64,
    /// Sequences in the pass; each samples from its last position.
    pub sequences: u64,
    /// Query-key pairs attention scores, summed over the sequences: each new
    /// token with its sequence's cached tokens and, causally, with the new
    /// ones up to itself.
    pub attended: u64,
    /// Tokens already in the KV cache, summed over the sequences.
    pub cached: u64,
    /// Query-key pairs of the attention's longest thread block: the last
    /// [`ATTENTION_ROW_BLOCK`] new tokens of the sequence with the most.
    pub tail_pairs: u64,
    /// Keys the attention kernel is told a sequence may have (FlashAttention's
    /// `max_seqlen_k`), which decide how it splits decodes' keys: the longest
    /// sequence's, or more where an engine captured its decode graphs for
    /// longer ones.
    pub key_limit: u64,
}

/// New tokens one thread block of FlashAttention-2's forward kernel takes
/// for 128-wide heads (`Flash_fwd_kernel_traits<128, 128, 64, 4, ...>`: the
/// kernel the serving engine's profile names; its flash_fwd_launch_template.h).
pub const ATTENTION_ROW_BLOCK: u64 = 128;

impl PassTokens {
    /// No sequence yet, at TP=`tp`.
    pub fn empty(tp: u64) -> PassTokens {
        PassTokens { tp, rows: 0, sequences: 0, attended: 0, cached: 0, tail_pairs: 0, key_limit: 0 }
    }

    /// Adds a sequence with `tokens` new tokens after `context` cached ones.
    pub fn add(&mut self, tokens: u64, context: u64) {
        self.rows += tokens;
        self.sequences += 1;
        self.attended += tokens * context + tokens * (tokens + 1) / 2;
        self.cached += context;
        self.tail_pairs = self.tail_pairs.max(tokens.min(ATTENTION_ROW_BLOCK) * (context + tokens));
        self.key_limit = self.key_limit.max(context + tokens);
    }
}

impl From<Shape> for PassTokens {
    fn from(shape: Shape) -> PassTokens {
        let mut one = PassTokens::empty(shape.tp);
        one.add(shape.tokens, shape.context);
        PassTokens {
            tp: shape.tp,
            rows: one.rows * shape.batch,
            sequences: shape.batch,
            attended: one.attended * shape.batch,
            cached: one.cached * shape.batch,
            tail_pairs: one.tail_pairs,
            key_limit: one.key_limit,
        }
    }
}

/// What a kernel or collective belongs to: the collective that ends a block
/// carries its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Block {
    /// The vocabulary-parallel embedding lookup and its allreduce.
    Embedding,
    /// Norm, QKV projection, attention, output projection; an allreduce.
    Attention,
    /// Norm, gate/up projection, activation, down projection; an allreduce.
    Mlp,
    /// Final norm, LM head, the gather of the logits, sampling.
    Logits,
}

/// One thing every GPU of the group does.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Kernel {
        kernel: Kernel,
        block: Block,
    },
    /// A collective over the group (only at TP > 1).
    Collective {
        op: Op,
        bytes: Bytes,
        block: Block,
    },
}

impl Step {
    pub fn block(&self) -> Block {
        match self {
            Step::Kernel { block, .. } | Step::Collective { block, .. } => *block,
        }
    }
}

/// One pass: the prologue, `layers` times the layer, the epilogue.
#[derive(Debug, Clone, PartialEq)]
pub struct PassProgram {
    pub prologue: Vec<Step>,
    pub layer: Vec<Step>,
    pub layers: u64,
    pub epilogue: Vec<Step>,
}

impl PassProgram {
    /// How many times each step of the pass runs, in pass order.
    pub fn counted(&self) -> impl Iterator<Item = (&Step, u64)> {
        self.prologue
            .iter()
            .map(|s| (s, 1))
            .chain(self.layer.iter().map(move |s| (s, self.layers)))
            .chain(self.epilogue.iter().map(|s| (s, 1)))
    }

    /// Every kernel of the pass, each once.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.prologue.iter().chain(&self.layer).chain(&self.epilogue).filter_map(|step| match step {
            Step::Kernel { kernel, .. } => Some(kernel),
            Step::Collective { .. } => None,
        })
    }
}

/// The sizes one GPU works with, as floats for the byte counts.
struct Dims {
    element: f64,
    rows: f64,
    hidden: f64,
    q_heads: f64,
    kv_heads: f64,
    head_dim: f64,
    ffn: f64,
    sequences: f64,
    attended: f64,
    cached: f64,
    tail_pairs: f64,
    key_limit: u64,
    /// Whose kernels run the norms, adds, activations and copies.
    library: Library,
}

impl Dims {
    fn of(llm: &LlmModel, shape: PassTokens, library: Library) -> Dims {
        let (q_heads, kv_heads) = llm.heads_per_gpu(shape.tp);
        Dims {
            element: llm.dtype_bytes as f64,
            rows: shape.rows as f64,
            hidden: llm.hidden as f64,
            q_heads: q_heads as f64,
            kv_heads: kv_heads as f64,
            head_dim: llm.head_dim() as f64,
            ffn: (llm.ffn / shape.tp) as f64,
            sequences: shape.sequences as f64,
            attended: shape.attended as f64,
            cached: shape.cached as f64,
            tail_pairs: shape.tail_pairs as f64,
            key_limit: shape.key_limit,
            library,
        }
    }

    /// A kernel moving `bytes`, run as `kind` by the fusion's library.
    fn elementwise(&self, name: &'static str, kind: &'static str, bytes: f64) -> Kernel {
        Kernel::elementwise(name, bytes).run_as(kind, self.library)
    }

    /// Bytes of `count` activations of `width` elements for every row.
    fn rows_of(&self, width: f64, count: f64) -> f64 {
        self.element * self.rows * width * count
    }

    /// RMSNorm over every row, one thread block a row: reads the rows and
    /// the weight, writes the normalized rows.
    fn norm(&self, name: &'static str) -> Kernel {
        let row = self.element * self.hidden * 2.0;
        self.elementwise(name, "rms_norm", self.rows_of(self.hidden, 2.0) + self.element * self.hidden).by_rows(row)
    }

    /// The residual add inside the norm: reads the block's output and the
    /// residual, writes both back.
    fn add_norm(&self, name: &'static str) -> Kernel {
        let row = self.element * self.hidden * 4.0;
        self.elementwise(name, "add_rms_norm", self.rows_of(self.hidden, 4.0) + self.element * self.hidden).by_rows(row)
    }

    fn residual_add(&self) -> Kernel {
        self.elementwise("residual_add", "residual_add", self.rows_of(self.hidden, 3.0))
    }

    fn kv_width(&self) -> f64 {
        self.kv_heads * self.head_dim
    }

    fn rotary(&self, rotary: Rotary) -> Vec<Kernel> {
        let qk = (self.q_heads + self.kv_heads) * self.head_dim;
        let (qk_bytes, angle) = (self.rows_of(qk, 1.0), self.rows_of(self.head_dim, 1.0));
        match rotary {
            // Rotates Q and K in place, reading a cos/sin row per token.
            Rotary::OneKernel => vec![self.elementwise("rotary", "rotary", 2.0 * qk_bytes + angle)],
            // PyTorch's operators, each writing a new tensor of Q and K:
            // x * cos (the cos row broadcast over the heads), roll(x), and
            // addcmul(x * cos, rolled, sin): ATen's strided kernels (a
            // broadcast operand keeps them off the vectorized path), each
            // with its own measured rate (h200-forward.toml).
            Rotary::RollAddcmul => vec![
                self.elementwise("rotary_cos", "rotary_mul", 2.0 * qk_bytes + angle),
                self.elementwise("rotary_roll", "roll", 2.0 * qk_bytes),
                self.elementwise("rotary_addcmul", "addcmul", 3.0 * qk_bytes + angle),
            ],
        }
    }

    /// The copies FlashAttention-2's varlen entry point makes around its
    /// kernel (`mha_varlen_fwd` in its flash_api.cpp, which ATen carries as
    /// `_flash_attention_forward`). When every sequence brings one new token
    /// it swaps the query heads of a KV head into the sequence dimension
    /// (`seqlenq_ngroups_swapped`): Q is reshaped, transposed and reshaped
    /// before the kernel, and the output, the padded output and the padded
    /// Q the same way back after it, a copy each unless the batch is one
    /// sequence (then every reshape is a view). Beside a prompt chunk Q,
    /// a strided slice of the rotary's output, is copied once: seen in the
    /// engine's profile (a direct copy a layer in the prompt's and the
    /// chunk's iterations, h200-serve-1gpu/profile.jsonl), the line of
    /// ATen that makes it not pinned down. Each copy reads and writes Q's
    /// (or O's) rows, with ATen's copy kernel over a strided view (the one
    /// `q_copy` measures).
    fn flash_varlen_copies(&self) -> Vec<Kernel> {
        let swapped = self.rows == self.sequences && self.q_heads > self.kv_heads;
        let copies = if self.rows <= 1.0 {
            0
        } else if swapped {
            4
        } else {
            1
        };
        let bytes = self.rows_of(self.q_heads * self.head_dim, 2.0);
        ["attention_q_copy", "attention_o_copy", "attention_o_padded_copy", "attention_q_padded_copy"]
            .into_iter()
            .take(copies)
            .map(|name| self.elementwise(name, "q_copy", bytes))
            .collect()
    }

    /// K and V of the new tokens copied into the cache (read and written):
    /// beside a varlen attention by index into the sequences' slots
    /// (`index_copy_`, the kernel `kv_index_copy` measures), else into a
    /// slice (the copy kernel `kv_write_k` measures).
    fn kv_write(&self, one_kernel: bool, attention: AttentionKernel) -> Vec<Kernel> {
        if one_kernel {
            return vec![self.elementwise("kv_write", "kv_write", self.rows_of(self.kv_width(), 4.0))];
        }
        let copy = match attention {
            AttentionKernel::FlashVarlen => "kv_index_copy",
            AttentionKernel::Dense => "kv_write_k",
        };
        // The same copy kernel, once into each cache.
        vec![
            self.elementwise("kv_write_k", copy, self.rows_of(self.kv_width(), 2.0)),
            self.elementwise("kv_write_v", copy, self.rows_of(self.kv_width(), 2.0)),
        ]
    }

    fn rope_kv_write(&self) -> Kernel {
        // Q rotated in place; K rotated and V copied into the cache.
        let q = self.q_heads * self.head_dim;
        let bytes = self.rows_of(q, 2.0) + self.rows_of(self.kv_width(), 4.0) + self.rows_of(self.head_dim, 1.0);
        self.elementwise("rope_kv_write", "rope_kv_write", bytes)
    }

    fn attention(&self, kernel: AttentionKernel) -> Kernel {
        // One kernel over every sequence (varlen): each new token attends
        // to its context and, causally, to the new tokens up to itself.
        let flops = 4.0 * self.attended * self.head_dim * self.q_heads;
        // Q and O of the new tokens, K and V of every position attended to.
        // FlashAttention-2 packs the query heads that share a KV head into
        // one block only when every sequence brings one new token
        // (`seqlenq_ngroups_swapped` in its flash_api.cpp); beside a prompt
        // chunk each query head reads its sequence's cached K and V again.
        // Measured: 64 decodes of 1088 cached tokens took 115 us a layer of
        // Llama-3.1-8B alone and 556 us beside a 1024-token chunk
        // (models/hardware/measurements/h200-serve-1gpu/profile.jsonl).
        let cache_reads = match kernel {
            AttentionKernel::FlashVarlen if self.rows > self.sequences => self.q_heads,
            _ => self.kv_heads,
        };
        let bytes = self.element * self.head_dim * (2.0 * self.rows * (self.q_heads + self.kv_heads) + 2.0 * self.cached * cache_reads);
        match kernel {
            AttentionKernel::Dense => Kernel::attention(flops, bytes),
            // Decodes alone run FlashAttention's split-KV kernel, which
            // splits each sequence's keys over thread blocks; any prompt
            // rows make it run its forward kernel over every sequence, a
            // block a row block, whose causal row blocks differ: the one
            // with the most keys ends last.
            AttentionKernel::FlashVarlen if self.rows > self.sequences => {
                Kernel::attention(flops, bytes).with_tail(4.0 * self.tail_pairs * self.head_dim).run_as("flash_varlen", self.library)
            }
            AttentionKernel::FlashVarlen => {
                Kernel::attention(flops, bytes).decoding(self.decode_launch()).run_as("flash_varlen_splitkv", self.library)
            }
        }
    }

    /// FlashAttention's launch over decodes alone: each sequence reads its
    /// cached keys and its new one, the longest `tail_pairs` of them (a
    /// decode's one row against its keys), and the library divides
    /// `key_limit` keys among its splits.
    fn decode_launch(&self) -> DecodeLaunch {
        DecodeLaunch {
            units: (self.sequences * self.kv_heads) as u64,
            mean_keys: self.cached / self.sequences.max(1.0) + 1.0,
            longest_keys: self.tail_pairs as u64,
            key_limit: self.key_limit,
            key_bytes: 2.0 * self.head_dim * self.element,
        }
    }

    fn activation(&self, fused: bool) -> Vec<Kernel> {
        if fused {
            vec![self.elementwise("silu_mul", "silu_mul", self.rows_of(self.ffn, 3.0))]
        } else {
            vec![self.elementwise("silu", "silu", self.rows_of(self.ffn, 2.0)), self.elementwise("mul", "mul", self.rows_of(self.ffn, 3.0))]
        }
    }

    /// The projection `name` of `gemm_shapes` over every row.
    fn gemm(&self, shapes: &[(&'static str, u64, u64)], name: &str) -> Kernel {
        let &(name, k, n) = shapes.iter().find(|(n, _, _)| *n == name).expect("a projection of gemm_shapes");
        Kernel::gemm(name, self.rows, k as f64, n as f64, self.element)
    }
}

/// The weights one GPU multiplies by, as (name, k, n): its activations of k
/// columns times a k x n slice of the weight, for each projection of a
/// layer and the LM head.
pub fn gemm_shapes(llm: &LlmModel, tp: u64) -> [(&'static str, u64, u64); 5] {
    let (q_heads, kv_heads) = llm.heads_per_gpu(tp);
    let head_dim = llm.head_dim();
    let ffn = llm.ffn / tp;
    [
        ("gemm_qkv", llm.hidden, (q_heads + 2 * kv_heads) * head_dim),
        ("gemm_o", q_heads * head_dim, llm.hidden),
        ("gemm_gate_up", llm.hidden, 2 * ffn),
        ("gemm_down", ffn, llm.hidden),
        ("gemm_lm_head", llm.hidden, llm.vocab.div_ceil(tp)),
    ]
}

/// The kernels and collectives of one pass on each GPU.
pub fn pass_program(llm: &LlmModel, fusion: &Fusion, scope: Scope, shape: impl Into<PassTokens>) -> PassProgram {
    let shape: PassTokens = shape.into();
    let d = Dims::of(llm, shape, fusion.kernels);
    let shapes = gemm_shapes(llm, shape.tp);
    let full = scope == Scope::Full;
    let tensor_parallel = shape.tp > 1;
    let activations = Bytes(shape.rows * llm.hidden * llm.dtype_bytes);
    let kernel = |kernel: Kernel, block: Block| Step::Kernel { kernel, block };
    let allreduce = |block: Block| Step::Collective { op: Op::AllReduce, bytes: activations, block };

    let mut layer = Vec::new();
    let attention_norm = if fusion.add_norm { d.add_norm("add_rms_norm") } else { d.norm("rms_norm") };
    layer.push(kernel(attention_norm, Block::Attention));
    layer.push(kernel(d.gemm(&shapes, "gemm_qkv"), Block::Attention));
    // The shared forward skipped rotary, and wrote the cache only at decode.
    let writes_cache = full || shape.cached > 0;
    if full && fusion.rope_kv_write {
        layer.push(kernel(d.rope_kv_write(), Block::Attention));
    } else {
        if full {
            layer.extend(d.rotary(fusion.rotary).into_iter().map(|k| kernel(k, Block::Attention)));
        }
        if writes_cache {
            layer.extend(d.kv_write(fusion.kv_write_one_kernel, fusion.attention).into_iter().map(|k| kernel(k, Block::Attention)));
        }
    }
    let copies = if fusion.attention == AttentionKernel::FlashVarlen { d.flash_varlen_copies() } else { Vec::new() };
    // Q's copy goes before the kernel, the others after it.
    let (before, after) = copies.split_at(copies.len().min(1));
    layer.extend(before.iter().cloned().map(|k| kernel(k, Block::Attention)));
    layer.push(kernel(d.attention(fusion.attention), Block::Attention));
    layer.extend(after.iter().cloned().map(|k| kernel(k, Block::Attention)));
    layer.push(kernel(d.gemm(&shapes, "gemm_o"), Block::Attention));
    if tensor_parallel {
        layer.push(allreduce(Block::Attention));
    }
    if fusion.add_norm {
        layer.push(kernel(d.add_norm("add_rms_norm"), Block::Mlp));
    } else {
        layer.push(kernel(d.residual_add(), Block::Mlp));
        layer.push(kernel(d.norm("rms_norm"), Block::Mlp));
    }
    layer.push(kernel(d.gemm(&shapes, "gemm_gate_up"), Block::Mlp));
    layer.extend(d.activation(fusion.silu_mul).into_iter().map(|k| kernel(k, Block::Mlp)));
    layer.push(kernel(d.gemm(&shapes, "gemm_down"), Block::Mlp));
    if tensor_parallel {
        layer.push(allreduce(Block::Mlp));
    }
    if !fusion.add_norm {
        // With add+norm fused, this add runs in the next layer's first norm.
        layer.push(kernel(d.residual_add(), Block::Mlp));
    }

    let (mut prologue, mut epilogue) = (Vec::new(), Vec::new());
    if full {
        // Each GPU looks up the rows of its part of the vocabulary (zeros
        // elsewhere); the allreduce sums the parts.
        prologue.push(kernel(d.elementwise("embedding", "embedding", d.rows_of(d.hidden, 2.0)), Block::Embedding));
        if tensor_parallel {
            prologue.push(allreduce(Block::Embedding));
        }
        let final_norm = if fusion.add_norm { d.add_norm("final_norm") } else { d.norm("final_norm") };
        epilogue.push(kernel(final_norm, Block::Logits));
        // Logits only for each sequence's last position, over this GPU's
        // part of the vocabulary, gathered whole on every GPU.
        let &(_, k, n) = &shapes[4];
        epilogue.push(kernel(Kernel::gemm("gemm_lm_head", d.sequences, k as f64, n as f64, d.element), Block::Logits));
        if tensor_parallel {
            let gathered = Bytes(shape.sequences * llm.vocab.div_ceil(shape.tp) * shape.tp * llm.dtype_bytes);
            epilogue.push(Step::Collective { op: Op::AllGather, bytes: gathered, block: Block::Logits });
        }
        // Sampling reads the float logits and writes probabilities.
        let logits = 4.0 * d.sequences * llm.vocab as f64;
        epilogue.push(kernel(d.elementwise("sampling", "sampling", 2.0 * logits), Block::Logits));
    }
    PassProgram { prologue, layer, layers: llm.layers, epilogue }
}

/// The kernel called `name` in a full pass of `shape`, under any of the
/// model's fusions (vLLM's first), run by the engine's own (fused) library
/// as the runner's kernels are: how a measured kernel is found by name.
/// `attention_causal` is the shared measurements' name for attention.
pub fn named_kernel(llm: &LlmModel, shape: Shape, name: &str) -> Option<Kernel> {
    let name = if name == "attention_causal" { "attention" } else { name };
    let found = full_passes(llm, shape).into_iter().find_map(|pass| pass.kernels().find(|k| k.name == name).cloned());
    found.map(|k| {
        let kind = k.kind;
        k.run_as(kind, Library::Fused)
    })
}

/// The names [`named_kernel`] finds in a pass of `shape`, sorted.
pub fn kernel_names(llm: &LlmModel, shape: Shape) -> Vec<&'static str> {
    let names: std::collections::BTreeSet<&'static str> =
        full_passes(llm, shape).iter().flat_map(|pass| pass.kernels().map(|k| k.name).collect::<Vec<_>>()).collect();
    names.into_iter().collect()
}

/// A full pass of `shape` under each of the model's fusions, vLLM's first.
fn full_passes(llm: &LlmModel, shape: Shape) -> Vec<PassProgram> {
    let mut fusions: Vec<&Fusion> = llm.fusion.get(Fusion::DEFAULT).into_iter().collect();
    fusions.extend(llm.fusion.iter().filter(|(key, _)| key.as_str() != Fusion::DEFAULT).map(|(_, f)| f));
    fusions.into_iter().map(|fusion| pass_program(llm, fusion, Scope::Full, shape)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::compute::KernelClass;

    fn llama_70b() -> LlmModel {
        LlmModel::load("llama-3.1-70b").unwrap()
    }

    fn names(steps: &[Step]) -> Vec<&'static str> {
        steps
            .iter()
            .map(|s| match s {
                Step::Kernel { kernel, .. } => kernel.name,
                Step::Collective { op: Op::AllReduce, .. } => "allreduce",
                Step::Collective { .. } => "allgather",
            })
            .collect()
    }

    #[test]
    fn the_attentions_longest_block_is_the_last_row_block_with_the_most_keys() {
        let mut tokens = PassTokens::empty(1);
        tokens.add(1, 4000);
        assert_eq!(tokens.tail_pairs, 4001, "a decode's one row against its keys");
        tokens.add(1024, 0);
        assert_eq!(tokens.tail_pairs, 128 * 1024, "a prompt's last 128 rows against all its keys");
        tokens.add(100, 1000);
        assert_eq!(tokens.tail_pairs, 128 * 1024, "100 rows against 1100 keys are fewer pairs");
    }

    #[test]
    fn the_layers_scope_runs_what_the_shared_torch_forward_ran() {
        let llm = llama_70b();
        let torch = llm.fusion("torch").unwrap();
        let prefill = pass_program(&llm, torch, Scope::Layers, Shape { tp: 2, batch: 1, tokens: 8192, context: 0 });
        assert!(prefill.prologue.is_empty() && prefill.epilogue.is_empty());
        assert_eq!(
            names(&prefill.layer),
            [
                "rms_norm",
                "gemm_qkv",
                "attention",
                "gemm_o",
                "allreduce",
                "residual_add",
                "rms_norm",
                "gemm_gate_up",
                "silu",
                "mul",
                "gemm_down",
                "allreduce",
                "residual_add"
            ]
        );
        let decode = pass_program(&llm, torch, Scope::Layers, Shape { tp: 2, batch: 1, tokens: 1, context: 8321 });
        assert_eq!(names(&decode.layer)[2..5], ["kv_write_k", "kv_write_v", "attention"]);
        assert_eq!(decode.layers, 80);
    }

    #[test]
    fn a_full_vllm_pass_fuses_and_adds_the_step_kernels() {
        let llm = llama_70b();
        let vllm = llm.fusion("vllm").unwrap();
        let pass = pass_program(&llm, vllm, Scope::Full, Shape { tp: 8, batch: 4, tokens: 1, context: 100 });
        assert_eq!(names(&pass.prologue), ["embedding", "allreduce"]);
        assert_eq!(
            names(&pass.layer),
            [
                "add_rms_norm",
                "gemm_qkv",
                "rotary",
                "kv_write",
                "attention",
                "gemm_o",
                "allreduce",
                "add_rms_norm",
                "gemm_gate_up",
                "silu_mul",
                "gemm_down",
                "allreduce"
            ]
        );
        assert_eq!(names(&pass.epilogue), ["final_norm", "gemm_lm_head", "allgather", "sampling"]);
        // The logits of 4 sequences over 128256 entries (16032 a GPU), bf16.
        let Step::Collective { bytes, .. } = &pass.epilogue[2] else { panic!("a gather") };
        assert_eq!(*bytes, Bytes(4 * 16032 * 8 * 2));
        let at_tp1 = pass_program(&llm, vllm, Scope::Full, Shape { tp: 1, batch: 1, tokens: 1, context: 0 });
        assert!(at_tp1.counted().all(|(s, _)| matches!(s, Step::Kernel { .. })), "no collectives at TP=1");
    }

    #[test]
    fn seventy_b_prefill_shapes_match_the_measured_kernels() {
        // shared/calibration: gemm_qkv is 8192x8192 by 8192x5120 at TP=2.
        let llm = llama_70b();
        let shape = Shape { tp: 2, batch: 1, tokens: 8192, context: 0 };
        assert_eq!(named_kernel(&llm, shape, "gemm_qkv").unwrap().flops, 2.0 * 8192.0 * 8192.0 * 5120.0);
        assert_eq!(named_kernel(&llm, shape, "gemm_down").unwrap().flops, 2.0 * 8192.0 * 14336.0 * 8192.0);
        let attention = named_kernel(&llm, shape, "attention_causal").unwrap();
        assert_eq!(attention.flops, 4.0 * (8192.0 * 8193.0 / 2.0) * 128.0 * 32.0);
        assert!(named_kernel(&llm, shape, "silu").is_some(), "torch's kernels are found too");
        assert!(named_kernel(&llm, shape, "warp_specialized_gemm").is_none());
    }

    #[test]
    fn a_mixed_pass_attends_as_its_sequences_apart_and_multiplies_their_rows_together() {
        let llm = llama_70b();
        let vllm = llm.fusion("vllm").unwrap();
        let attention = |tokens: PassTokens| named_kernel_of(&llm, vllm, tokens, "attention");
        let gemm = |tokens: PassTokens| named_kernel_of(&llm, vllm, tokens, "gemm_qkv");
        // A 512-token chunk after 1024 cached prompt tokens, and 3 decodes.
        let chunk = Shape { tp: 8, batch: 1, tokens: 512, context: 1024 };
        let decodes = Shape { tp: 8, batch: 3, tokens: 1, context: 700 };
        let mut mixed = PassTokens::empty(8);
        mixed.add(512, 1024);
        (0..3).for_each(|_| mixed.add(1, 700));
        assert_eq!((mixed.rows, mixed.sequences), (515, 4));
        let (alone, together) = (attention(chunk.into()).flops + attention(decodes.into()).flops, attention(mixed).flops);
        assert_eq!(alone, together);
        assert_eq!(attention(chunk.into()).bytes + attention(decodes.into()).bytes, attention(mixed).bytes);
        // The projections see one matrix of every row.
        assert_eq!(gemm(mixed).flops, 2.0 * 515.0 * 8192.0 * 1280.0);
    }

    /// The kernel `name` of a full pass of `tokens` under `fusion`.
    fn named_kernel_of(llm: &LlmModel, fusion: &Fusion, tokens: PassTokens, name: &str) -> Kernel {
        pass_program(llm, fusion, Scope::Full, tokens).kernels().find(|k| k.name == name).cloned().unwrap()
    }

    #[test]
    fn the_varlen_engine_rotates_with_three_kernels_and_flash_attention_copies_q_and_o() {
        // tools/serve_engine.py's layer: rotary as mul, roll and addcmul;
        // FlashAttention-2's varlen entry point copying Q (and, with its
        // query heads swapped in at decode, O and the padded tensors).
        let llm = LlmModel::load("llama-3.1-8b").unwrap();
        let varlen = llm.fusion("torch-varlen").unwrap();
        let layer = |tokens: PassTokens| names(&pass_program(&llm, varlen, Scope::Full, tokens).layer);
        let decodes = |batch: u64| PassTokens::from(Shape { tp: 1, batch, tokens: 1, context: 1088 });
        let head = ["rms_norm", "gemm_qkv", "rotary_cos", "rotary_roll", "rotary_addcmul", "kv_write_k", "kv_write_v"];
        assert_eq!(layer(decodes(1))[..9], [&head[..], &["attention", "gemm_o"]].concat()[..], "one sequence: every reshape a view");
        let swapped = ["attention_q_copy", "attention", "attention_o_copy", "attention_o_padded_copy", "attention_q_padded_copy"];
        assert_eq!(layer(decodes(8))[7..12], swapped);
        let prompt = PassTokens::from(Shape { tp: 1, batch: 1, tokens: 1024, context: 0 });
        assert_eq!(layer(prompt)[7..10], ["attention_q_copy", "attention", "gemm_o"]);
        // 8 decodes: each copy reads and writes 8 rows of 32 heads of 128,
        // with ATen's copy kernel over a strided view; the rotary's multiply and addcmul at the
        // rates of ATen's strided multiply.
        let pass = pass_program(&llm, varlen, Scope::Full, decodes(8));
        let kernel = |name: &str| pass.kernels().find(|k| k.name == name).unwrap().clone();
        let copy = kernel("attention_o_copy");
        assert_eq!((copy.kind, copy.library, copy.bytes), ("q_copy", Library::Aten, 2.0 * 8.0 * 32.0 * 128.0 * 2.0));
        assert_eq!(kernel("kv_write_v").kind, "kv_index_copy", "the cache written by index");
        assert_eq!(
            (kernel("rotary_cos").kind, kernel("rotary_addcmul").kind, kernel("rotary_roll").kind),
            ("rotary_mul", "addcmul", "roll")
        );
        // Q and K of 40 heads: the multiply reads and writes them and reads cos.
        assert_eq!(kernel("rotary_cos").bytes, 2.0 * 8.0 * (2.0 * 40.0 * 128.0 + 128.0));
        // The other fusions keep one rotary kernel and no copies.
        let vllm = pass_program(&llm, llm.fusion("vllm").unwrap(), Scope::Full, decodes(8));
        assert_eq!(vllm.kernels().filter(|k| k.name.starts_with("rotary") || k.name.starts_with("attention_")).count(), 1);
    }

    #[test]
    fn decode_reads_the_weights_once() {
        let llm = llama_70b();
        let pass = pass_program(&llm, llm.fusion("vllm").unwrap(), Scope::Layers, Shape { tp: 8, batch: 1, tokens: 1, context: 8192 });
        let weights: f64 = pass.kernels().filter(|k| k.class == KernelClass::Matmul).map(|k| k.bytes).sum();
        // 70B over 80 layers at TP=8: about 0.86 G parameters a layer / 8, 2 bytes each.
        let per_layer = 2.0 * (8192.0 * 10240.0 + 8192.0 * 8192.0 + 3.0 * 8192.0 * 28672.0) / 8.0;
        assert!((weights / per_layer - 1.0).abs() < 0.01, "{weights} vs {per_layer}");
    }
}
