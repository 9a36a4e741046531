//! The roofline compute model: a kernel takes the longer of its arithmetic
//! at the GPU's achieved matrix rate and its memory traffic at the achieved
//! HBM bandwidth, plus a launch overhead. The kernels of one decoder layer
//! under tensor parallelism, for prefill and for one decode step, each tagged
//! with the block (attention or MLP) whose allreduce follows it. Knows
//! nothing of links or collectives.

use crate::config::hardware::GpuModel;
use crate::config::llm::LlmModel;
use crate::units::Time;

/// Which achieved rate bounds a kernel's arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelClass {
    Matmul,
    Attention,
}

/// The two halves of a Megatron decoder layer; each ends in an allreduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// QKV projection, attention, output projection.
    Attention,
    /// Gate/up projection, activation, down projection.
    Mlp,
}

/// One kernel on one GPU: its floating-point work and memory traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: &'static str,
    pub class: KernelClass,
    pub block: Block,
    pub flops: f64,
    pub bytes: f64,
}

impl Kernel {
    /// Roofline time on `gpu`.
    pub fn time(&self, gpu: &GpuModel) -> Time {
        let efficiency = match self.class {
            KernelClass::Matmul => gpu.compute.matmul,
            KernelClass::Attention => gpu.compute.attention,
        };
        let compute_s = self.flops / (gpu.bf16_tflops * 1e12 * efficiency);
        let memory_s = self.bytes / (gpu.memory_bandwidth.bytes_per_sec() * gpu.compute.memory);
        gpu.compute.kernel_overhead + Time::from_us_f64(compute_s.max(memory_s) * 1e6)
    }
}

/// Heads of each kind one GPU holds at tensor parallelism `tp` (KV heads
/// are replicated when there are fewer than GPUs).
fn heads_per_gpu(llm: &LlmModel, tp: u64) -> (f64, f64) {
    let q = llm.heads as f64 / tp as f64;
    let kv = (llm.kv_heads as f64 / tp as f64).max(1.0);
    (q, kv)
}

/// A matrix product of (m x k) by (k x n) in the model's element type.
fn matmul(name: &'static str, block: Block, llm: &LlmModel, m: f64, k: f64, n: f64) -> Kernel {
    let element = llm.dtype_bytes as f64;
    Kernel { name, class: KernelClass::Matmul, block, flops: 2.0 * m * k * n, bytes: (m * k + k * n + m * n) * element }
}

/// The kernels of one decoder layer on one GPU for `tokens` new tokens of
/// each of `batch` sequences that already hold `context` tokens: prefill is
/// `tokens` = prompt, `context` = 0; a decode step is `tokens` = 1.
pub fn layer_kernels(llm: &LlmModel, tp: u64, batch: u64, tokens: u64, context: u64) -> Vec<Kernel> {
    let (q_heads, kv_heads) = heads_per_gpu(llm, tp);
    let head_dim = llm.head_dim() as f64;
    let hidden = llm.hidden as f64;
    let ffn = llm.ffn as f64 / tp as f64;
    let element = llm.dtype_bytes as f64;
    let rows = (batch * tokens) as f64;
    let (new, old) = (tokens as f64, context as f64);
    // Causal attention: each new token attends to the context and to the new
    // tokens before it (half of the new-by-new square).
    let pairs = batch as f64 * (new * old + new * (new + 1.0) / 2.0);
    let attention = Kernel {
        name: "attention_causal",
        class: KernelClass::Attention,
        block: Block::Attention,
        flops: 4.0 * pairs * head_dim * q_heads,
        // Q and O of the new tokens, K and V of every token attended to.
        bytes: element * head_dim * batch as f64 * (2.0 * new * q_heads + 2.0 * (old + new) * kv_heads),
    };
    vec![
        matmul("gemm_qkv", Block::Attention, llm, rows, hidden, (q_heads + 2.0 * kv_heads) * head_dim),
        attention,
        matmul("gemm_o", Block::Attention, llm, rows, q_heads * head_dim, hidden),
        matmul("gemm_gate_up", Block::Mlp, llm, rows, hidden, 2.0 * ffn),
        matmul("gemm_down", Block::Mlp, llm, rows, ffn, hidden),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seventy_b_prefill_shapes_match_the_measured_kernels() {
        // shared/calibration: gemm_qkv is 8192x8192 by 8192x5120 at TP=2.
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let kernels = layer_kernels(&llm, 2, 1, 8192, 0);
        let qkv = &kernels[0];
        assert_eq!(qkv.flops, 2.0 * 8192.0 * 8192.0 * 5120.0);
        let down = kernels.iter().find(|k| k.name == "gemm_down").unwrap();
        assert_eq!(down.flops, 2.0 * 8192.0 * 14336.0 * 8192.0);
        let attention = &kernels[1];
        let causal_pairs = 8192.0 * 8193.0 / 2.0;
        assert_eq!(attention.flops, 4.0 * causal_pairs * 128.0 * 32.0);
    }

    #[test]
    fn decode_reads_the_weights_once() {
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let kernels = layer_kernels(&llm, 8, 1, 1, 8192);
        let weights: f64 = kernels.iter().filter(|k| k.class == KernelClass::Matmul).map(|k| k.bytes).sum();
        // 70B over 80 layers at TP=8: about 0.86 G parameters a layer / 8, 2 bytes each.
        let per_layer = 2.0 * (8192.0 * 10240.0 + 8192.0 * 8192.0 + 3.0 * 8192.0 * 28672.0) / 8.0;
        assert!((weights / per_layer - 1.0).abs() < 0.01, "{weights} vs {per_layer}");
    }
}
