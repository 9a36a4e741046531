//! The roofline compute model of one kernel on one GPU: its floor, plus its
//! arithmetic at the GPU's achieved matrix rate and its memory traffic at
//! the achieved HBM rate, blended where the two bounds meet (so a matrix
//! product with few rows is bandwidth-bound, one with many rows
//! compute-bound, with a smooth curve between them). And how a caller's
//! launches space kernels out: a gap inside a CUDA graph, the host's launch
//! cost when eager. Knows nothing of links, collectives or LLM layers.

use crate::config::hardware::{GpuModel, HardwareModel};
use crate::stack::Stack;
use crate::units::Time;

/// Which achieved rates and floor bound a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KernelClass {
    /// Matrix products (cuBLAS GEMMs).
    Matmul,
    /// Fused attention (FlashAttention at prefill, a KV-cache scan at decode).
    Attention,
    /// Elementwise and normalization kernels: memory traffic only.
    Elementwise,
}

impl KernelClass {
    pub const ALL: [KernelClass; 3] = [KernelClass::Matmul, KernelClass::Attention, KernelClass::Elementwise];

    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Matmul => "matmul",
            KernelClass::Attention => "attention",
            KernelClass::Elementwise => "elementwise",
        }
    }
}

/// One kernel on one GPU: its floating-point work and memory traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: &'static str,
    pub class: KernelClass,
    pub flops: f64,
    pub bytes: f64,
}

/// The parts of a kernel's time on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// Arithmetic at the achieved rate, seconds.
    pub compute_s: f64,
    /// Traffic at the achieved bandwidth, seconds.
    pub memory_s: f64,
    /// The two blended, seconds.
    pub blended_s: f64,
    pub floor: Time,
}

impl Kernel {
    /// A product of (m x k) by (k x n) in elements of `element` bytes: it
    /// reads both operands once and writes the result once.
    pub fn gemm(name: &'static str, m: f64, k: f64, n: f64, element: f64) -> Kernel {
        Kernel { name, class: KernelClass::Matmul, flops: 2.0 * m * k * n, bytes: (m * k + k * n + m * n) * element }
    }

    /// A kernel that only moves `bytes` through memory.
    pub fn elementwise(name: &'static str, bytes: f64) -> Kernel {
        Kernel { name, class: KernelClass::Elementwise, flops: 0.0, bytes }
    }

    /// The parts of this kernel's time on `gpu`.
    pub fn roofline(&self, gpu: &GpuModel) -> Roofline {
        let c = &gpu.compute;
        let (compute_fraction, memory_fraction, floor) = match self.class {
            KernelClass::Matmul => (c.matmul, c.matmul_memory, c.matmul_floor),
            KernelClass::Attention => (c.attention, c.attention_memory, c.attention_floor),
            KernelClass::Elementwise => (1.0, c.elementwise, c.elementwise_floor),
        };
        let compute_s = self.flops / (gpu.bf16_tflops * 1e12 * compute_fraction);
        let memory_s = self.bytes / (gpu.memory_bandwidth.bytes_per_sec() * memory_fraction);
        Roofline { compute_s, memory_s, blended_s: blend(compute_s, memory_s, c.blend), floor }
    }

    /// Time on `gpu`, from the kernel's start to its end on the GPU.
    pub fn time(&self, gpu: &GpuModel) -> Time {
        let roofline = self.roofline(gpu);
        roofline.floor + Time::from_us_f64(roofline.blended_s * 1e6)
    }

    /// Fraction of the GPU's bf16 matrix rate this kernel achieves.
    pub fn compute_efficiency(&self, gpu: &GpuModel) -> f64 {
        self.flops / (gpu.bf16_tflops * 1e12 * self.time(gpu).as_secs())
    }
}

/// (a^p + b^p)^(1/p), computed without overflow or underflow.
fn blend(a: f64, b: f64, p: f64) -> f64 {
    let larger = a.max(b);
    if larger <= 0.0 {
        return 0.0;
    }
    larger * ((a / larger).powf(p) + (b / larger).powf(p)).powf(1.0 / p)
}

/// How a caller's kernels follow each other on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// Replayed from a CUDA graph: each kernel starts `gap` after the one
    /// before it ends.
    Graph { gap: Time },
    /// Launched from the host one at a time: the host spends `host` on each
    /// launch, and a kernel starts once it is launched and the GPU is free.
    Eager { host: Time },
}

impl Launch {
    /// The regime of `stack` with its costs from the model's `[stack.*]`.
    pub fn of(model: &HardwareModel, stack: Stack) -> Result<Launch, String> {
        let cost = model.stack(stack)?.kernel_launch;
        Ok(if stack.in_graph() { Launch::Graph { gap: cost } } else { Launch::Eager { host: cost } })
    }

    /// Time per kernel of a kernel taking `kernel` on the GPU issued back to
    /// back many times, as kernels are timed: in a graph the gap and the
    /// kernel; eager the longer of the launch and the kernel (the host runs
    /// ahead of long kernels, short ones wait for it).
    pub fn repeated(self, kernel: Time) -> Time {
        match self {
            Launch::Graph { gap } => gap + kernel,
            Launch::Eager { host } => host.max(kernel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> GpuModel {
        HardwareModel::base().gpu["h200"].clone()
    }

    #[test]
    fn few_rows_are_bandwidth_bound_and_many_rows_compute_bound() {
        let gpu = h200();
        // Llama-3.1-70B's down projection at TP=2: 14336 x 8192 bf16 weights.
        let decode = Kernel::gemm("gemm_down", 1.0, 14336.0, 8192.0, 2.0).roofline(&gpu);
        assert!(decode.memory_s > 100.0 * decode.compute_s, "{decode:?}");
        let prefill = Kernel::gemm("gemm_down", 8192.0, 14336.0, 8192.0, 2.0).roofline(&gpu);
        assert!(prefill.compute_s > 10.0 * prefill.memory_s, "{prefill:?}");
        // Far from the ridge the blend is the larger bound.
        assert!((decode.blended_s / decode.memory_s - 1.0).abs() < 1e-6);
        // At the ridge it is more than either.
        let ridge = Kernel::gemm("g", 200.0, 8192.0, 8192.0, 2.0).roofline(&gpu);
        assert!(ridge.blended_s > ridge.compute_s.max(ridge.memory_s) * 1.1, "{ridge:?}");
    }

    #[test]
    fn efficiency_grows_with_rows_toward_the_compute_fraction() {
        let gpu = h200();
        let efficiencies: Vec<f64> = [1.0, 16.0, 256.0, 4096.0, 65536.0]
            .iter()
            .map(|&m| Kernel::gemm("g", m, 8192.0, 8192.0, 2.0).compute_efficiency(&gpu))
            .collect();
        assert!(efficiencies.windows(2).all(|w| w[0] < w[1]), "{efficiencies:?}");
        assert!((efficiencies[4] / gpu.compute.matmul - 1.0).abs() < 0.01, "{efficiencies:?}");
    }

    #[test]
    fn a_kernel_takes_at_least_its_floor_and_blend_is_safe_at_zero() {
        let gpu = h200();
        let nothing = Kernel::elementwise("empty", 0.0);
        assert_eq!(nothing.time(&gpu), gpu.compute.elementwise_floor);
        assert_eq!(blend(0.0, 0.0, 3.0), 0.0);
        assert!((blend(1e-300, 2e-300, 3.0) / 2e-300 - 1.0) < 0.05);
    }

    #[test]
    fn graphs_add_a_gap_and_eager_launches_bound_short_kernels() {
        let model = HardwareModel::base();
        let graph = Launch::of(&model, Stack::NcclGraph).unwrap();
        let eager = Launch::of(&model, Stack::TorchEager).unwrap();
        let gap = model.stack(Stack::NcclGraph).unwrap().kernel_launch;
        let host = model.stack(Stack::TorchEager).unwrap().kernel_launch;
        assert_eq!(graph.repeated(Time::from_us(2)), gap + Time::from_us(2));
        assert_eq!(eager.repeated(Time::from_us(1)), host);
        assert_eq!(eager.repeated(Time::from_us(1000)), Time::from_us(1000));
    }
}
