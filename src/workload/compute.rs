//! The roofline compute model of one kernel on one GPU: its floor, plus its
//! arithmetic at the GPU's achieved matrix rate and its memory traffic at
//! the achieved HBM rate (or the L2 cache's, for a working set that fits
//! there; a row's bytes at one thread block's rate, for kernels giving each
//! row a block), blended where the two bounds meet (so a matrix product with
//! few rows is bandwidth-bound, one with many rows compute-bound, with a
//! smooth curve between them). A measured kernel has its own rates and
//! floor (by kind and library). Inside a whole forward the matrix rate is
//! the GPU's sustained one. And how a caller's launches space kernels out: a
//! gap inside a CUDA graph, the host's launch cost when eager. Knows nothing
//! of links, collectives or LLM layers.

use crate::config::hardware::{GpuModel, HardwareModel, KernelEfficiency, Library};
use crate::stack::Stack;
use crate::units::Time;
use crate::workload::flash::{Blocks, DecodeLaunch};

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

/// How fast the GPU's clock runs the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// A kernel timed alone in short bursts, as kernels are measured.
    Burst,
    /// Inside a whole forward pass: matrix work at the sustained fraction of
    /// the matrix rate (`compute.sustained`).
    Sustained,
}

/// One kernel on one GPU: its floating-point work and memory traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// What it does in the pass (`final_norm`, `kv_write_v`).
    pub name: &'static str,
    /// The kernel that runs (`rms_norm`, `kv_write_k`): the key of its own
    /// measured rates, if it has any.
    pub kind: &'static str,
    /// Whose implementation runs it.
    pub library: Library,
    pub class: KernelClass,
    pub flops: f64,
    pub bytes: f64,
    /// Bytes one row moves, for a kernel that gives each row its own thread
    /// block (norms); zero otherwise.
    pub row_bytes: f64,
    /// Floating-point work of the kernel's longest thread block, for a
    /// kernel whose blocks differ (causal attention); zero otherwise.
    pub tail_flops: f64,
    /// FlashAttention's launch over decodes alone, for a kernel priced as
    /// waves of its thread blocks where the GPU's SM count is known.
    pub decode: Option<DecodeLaunch>,
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
    fn new(name: &'static str, class: KernelClass, flops: f64, bytes: f64) -> Kernel {
        Kernel { name, kind: name, library: Library::Fused, class, flops, bytes, row_bytes: 0.0, tail_flops: 0.0, decode: None }
    }

    /// A product of (m x k) by (k x n) in elements of `element` bytes: it
    /// reads both operands once and writes the result once.
    pub fn gemm(name: &'static str, m: f64, k: f64, n: f64, element: f64) -> Kernel {
        Kernel::new(name, KernelClass::Matmul, 2.0 * m * k * n, (m * k + k * n + m * n) * element)
    }

    /// Fused attention doing `flops` over `bytes` of Q, K, V and O.
    pub fn attention(flops: f64, bytes: f64) -> Kernel {
        Kernel::new("attention", KernelClass::Attention, flops, bytes)
    }

    /// A kernel that only moves `bytes` through memory.
    pub fn elementwise(name: &'static str, bytes: f64) -> Kernel {
        Kernel::new(name, KernelClass::Elementwise, 0.0, bytes)
    }

    /// The same kernel run as `kind` by `library`.
    pub fn run_as(self, kind: &'static str, library: Library) -> Kernel {
        Kernel { kind, library, ..self }
    }

    /// The same kernel giving each row of `row_bytes` its own thread block.
    pub fn by_rows(self, row_bytes: f64) -> Kernel {
        Kernel { row_bytes, ..self }
    }

    /// The same kernel with a longest thread block of `tail_flops`.
    pub fn with_tail(self, tail_flops: f64) -> Kernel {
        Kernel { tail_flops, ..self }
    }

    /// The same kernel launched as FlashAttention launches decodes alone.
    pub fn decoding(self, launch: DecodeLaunch) -> Kernel {
        Kernel { decode: Some(launch), ..self }
    }

    /// The library's blocks of a decode launch on `gpu`, and the GPU's SMs,
    /// where their count is known.
    fn blocks(&self, gpu: &GpuModel) -> Option<(Blocks, f64)> {
        let sms = gpu.sms?;
        Some((self.decode?.blocks(u64::from(sms)), f64::from(sms)))
    }

    /// The kernel's own measured rates on `gpu`, if it has any: those of the
    /// kernel the library chooses, for a decode launch.
    pub fn own<'g>(&self, gpu: &'g GpuModel) -> Option<&'g KernelEfficiency> {
        self.own_with_blocks(gpu).0
    }

    /// Its own rates, and its decode launch's blocks where it has one: the
    /// library's choice made once for both.
    fn own_with_blocks<'g>(&self, gpu: &'g GpuModel) -> (Option<&'g KernelEfficiency>, Option<(Blocks, f64)>) {
        let blocks = self.blocks(gpu);
        let kind = blocks.map_or(self.kind, |(blocks, _)| blocks.kernel.kind());
        (gpu.compute.kernels(self.library).get(kind), blocks)
    }

    /// The parts of this kernel's time on `gpu` at `clock`.
    pub fn roofline(&self, gpu: &GpuModel, clock: Clock) -> Roofline {
        let c = &gpu.compute;
        let (compute_fraction, class_memory, class_floor) = match self.class {
            KernelClass::Matmul => (c.matmul, c.matmul_memory, c.matmul_floor),
            KernelClass::Attention => (c.attention, c.attention_memory, c.attention_floor),
            KernelClass::Elementwise => (1.0, c.elementwise, c.elementwise_floor),
        };
        let (own, blocks) = self.own_with_blocks(gpu);
        let compute_fraction = own.and_then(|o| o.compute).unwrap_or(compute_fraction);
        let memory_fraction = own.and_then(|o| o.memory).unwrap_or(class_memory);
        let floor = own.and_then(|o| o.floor).unwrap_or(class_floor);
        let sustained = match clock {
            Clock::Burst => 1.0,
            Clock::Sustained => c.sustained,
        };
        // The longest block ends after the rest: it runs at one block's
        // share of the kernel's rate (Graham's bound on a list schedule).
        let tail = own.and_then(|o| o.blocks_at_once).map_or(0.0, |blocks| self.tail_flops * blocks);
        let compute_s = (self.flops + tail) / (gpu.bf16_tflops * 1e12 * compute_fraction * sustained);
        let in_l2 = gpu.l2_cache.is_some_and(|l2| self.bytes <= l2.0 as f64);
        let fraction = match own.and_then(|o| o.l2) {
            Some(l2) if in_l2 => l2,
            _ => memory_fraction,
        };
        let streaming_s = self.bytes / (gpu.memory_bandwidth.bytes_per_sec() * fraction);
        let row_rate = own.and_then(|o| o.row_rate).unwrap_or(c.row_rate);
        let row_s = self.row_bytes / row_rate.bytes_per_sec();
        // In waves of blocks, each slot streaming at one block's rate.
        let waves_s = match (blocks, own.and_then(|o| o.block_rate)) {
            (Some((blocks, sms)), Some(rate)) => {
                let slots = sms * own.and_then(|o| o.blocks_per_sm).unwrap_or(1.0);
                Some(blocks.bytes_a_slot(slots) / rate.bytes_per_sec())
            }
            _ => None,
        };
        let memory_s = waves_s.unwrap_or(streaming_s).max(row_s);
        Roofline { compute_s, memory_s, blended_s: blend(compute_s, memory_s, c.blend), floor }
    }

    /// Time on `gpu`, from the kernel's start to its end on the GPU.
    pub fn time(&self, gpu: &GpuModel, clock: Clock) -> Time {
        let roofline = self.roofline(gpu, clock);
        roofline.floor + Time::from_us_f64(roofline.blended_s * 1e6)
    }

    /// Fraction of the GPU's bf16 matrix rate this kernel achieves alone.
    pub fn compute_efficiency(&self, gpu: &GpuModel) -> f64 {
        self.flops / (gpu.bf16_tflops * 1e12 * self.time(gpu, Clock::Burst).as_secs())
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
    /// launch (a kernel's, or a collective call's), and a kernel starts once
    /// it is launched and the GPU is free, then takes `gap` more (the
    /// stream's own gap between queued kernels, longer than a graph's). What
    /// a caller adds to a collective on the GPU's timeline is its
    /// `collective_call`, inside the collective, in either regime.
    Eager { host: Time, gap: Time },
}

impl Launch {
    /// The regime of `stack` with its costs from the model's `[stack.*]`.
    pub fn of(model: &HardwareModel, stack: Stack) -> Result<Launch, String> {
        let costs = model.stack(stack)?;
        Ok(if stack.in_graph() {
            Launch::Graph { gap: costs.kernel_launch }
        } else {
            Launch::Eager { host: costs.kernel_launch, gap: costs.kernel_gap }
        })
    }

    /// The GPU time a kernel taking `kernel` occupies in a pass: the kernel
    /// and the gap before it.
    pub fn on_gpu(self, kernel: Time) -> Time {
        match self {
            Launch::Graph { gap } | Launch::Eager { gap, .. } => gap + kernel,
        }
    }

    /// Time per kernel of a kernel taking `kernel` on the GPU issued back to
    /// back many times, as kernels are timed: in a graph the gap and the
    /// kernel; eager the longer of the launch and the kernel with its gap
    /// (the host runs ahead of long kernels, short ones wait for it).
    pub fn repeated(self, kernel: Time) -> Time {
        match self {
            Launch::Graph { .. } => self.on_gpu(kernel),
            Launch::Eager { host, .. } => host.max(self.on_gpu(kernel)),
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
        let decode = Kernel::gemm("gemm_down", 1.0, 14336.0, 8192.0, 2.0).roofline(&gpu, Clock::Burst);
        assert!(decode.memory_s > 100.0 * decode.compute_s, "{decode:?}");
        let prefill = Kernel::gemm("gemm_down", 8192.0, 14336.0, 8192.0, 2.0).roofline(&gpu, Clock::Burst);
        assert!(prefill.compute_s > 10.0 * prefill.memory_s, "{prefill:?}");
        // Far from the ridge the blend is the larger bound.
        assert!((decode.blended_s / decode.memory_s - 1.0).abs() < 1e-6);
        // At the ridge it is more than either.
        let ridge = Kernel::gemm("g", 200.0, 8192.0, 8192.0, 2.0).roofline(&gpu, Clock::Burst);
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
        assert_eq!(nothing.time(&gpu, Clock::Burst), gpu.compute.elementwise_floor);
        assert_eq!(blend(0.0, 0.0, 3.0), 0.0);
        assert!((blend(1e-300, 2e-300, 3.0) / 2e-300 - 1.0) < 0.05);
    }

    #[test]
    fn a_measured_kernel_takes_its_own_rates_in_l2_and_by_rows() {
        let mut gpu = h200();
        let own = KernelEfficiency { memory: Some(0.5), floor: Some(Time::from_us(1)), l2: Some(2.0), ..Default::default() };
        gpu.compute.aten.insert("rms_norm".into(), own);
        let hbm = gpu.memory_bandwidth.bytes_per_sec();
        // 1 GB does not fit in the 50 MB L2: half the HBM rate.
        let large = Kernel::elementwise("final_norm", 1e9).run_as("rms_norm", Library::Aten);
        assert_eq!(large.time(&gpu, Clock::Burst), Time::from_us(1) + Time::from_us_f64(1e9 / (0.5 * hbm) * 1e6));
        // 10 MB does: twice the HBM bandwidth.
        let small = Kernel { bytes: 1e7, ..large.clone() };
        assert_eq!(small.time(&gpu, Clock::Burst), Time::from_us(1) + Time::from_us_f64(1e7 / (2.0 * hbm) * 1e6));
        // The same kernel from the fused library has the class's rates.
        let fused = Kernel::elementwise("rms_norm", 1e9);
        assert!(fused.time(&gpu, Clock::Burst) < large.time(&gpu, Clock::Burst));
        // One row of 32 KiB at 20 GB/s: 1.6 us, more than its 32 KiB of traffic.
        let row = Kernel::elementwise("rms_norm", 32768.0).by_rows(32768.0);
        let expected = gpu.compute.elementwise_floor + Time::from_us_f64(32768.0 / gpu.compute.row_rate.bytes_per_sec() * 1e6);
        assert_eq!(row.time(&gpu, Clock::Burst), expected);
    }

    #[test]
    fn a_kernels_longest_block_runs_at_one_blocks_share_after_the_rest() {
        let mut gpu = h200();
        let own = KernelEfficiency { compute: Some(0.25), blocks_at_once: Some(100.0), ..Default::default() };
        gpu.compute.aten.insert("flash_varlen".into(), own);
        let rate = gpu.bf16_tflops * 1e12 * 0.25;
        let causal = Kernel::attention(1e10, 0.0).with_tail(1e7).run_as("flash_varlen", Library::Aten);
        let roofline = causal.roofline(&gpu, Clock::Burst);
        assert!((roofline.compute_s - (1e10 + 100.0 * 1e7) / rate).abs() < 1e-15, "{roofline:?}");
        // Without its own entry the class prices the FLOPs alone.
        let dense = Kernel::attention(1e10, 0.0).with_tail(1e7);
        let class = dense.roofline(&gpu, Clock::Burst).compute_s;
        assert!((class - 1e10 / (gpu.bf16_tflops * 1e12 * gpu.compute.attention)).abs() < 1e-15);
    }

    #[test]
    fn a_sustained_clock_slows_matrix_work_only() {
        let mut gpu = h200();
        gpu.compute.sustained = 0.8;
        let prefill = Kernel::gemm("gemm_down", 8192.0, 14336.0, 8192.0, 2.0);
        let (burst, sustained) = (prefill.roofline(&gpu, Clock::Burst), prefill.roofline(&gpu, Clock::Sustained));
        assert!((sustained.compute_s / burst.compute_s - 1.25).abs() < 1e-9, "{burst:?} {sustained:?}");
        let norm = Kernel::elementwise("rms_norm", 1e8);
        assert_eq!(norm.time(&gpu, Clock::Burst), norm.time(&gpu, Clock::Sustained));
    }

    #[test]
    fn graphs_add_a_gap_and_eager_launches_bound_short_kernels() {
        let model = HardwareModel::base();
        let graph = Launch::of(&model, Stack::NcclGraph).unwrap();
        let eager = Launch::of(&model, Stack::TorchEager).unwrap();
        let gap = model.stack(Stack::NcclGraph).unwrap().kernel_launch;
        let host = model.stack(Stack::TorchEager).unwrap().kernel_launch;
        assert_eq!(graph.repeated(Time::from_us(2)), gap + Time::from_us(2));
        let stream_gap = model.stack(Stack::TorchEager).unwrap().kernel_gap;
        assert_eq!(eager.repeated(Time::from_us(1)), host);
        assert_eq!(eager.repeated(Time::from_us(1000)), stream_gap + Time::from_us(1000));
    }

    #[test]
    fn a_kernel_launched_eagerly_never_takes_less_of_the_gpu_than_in_a_graph() {
        let shipped = crate::config::hardware::ModelSource::Shipped;
        let model = HardwareModel::load(&[shipped("h200-forward")]).unwrap();
        let graph = Launch::of(&model, Stack::NcclGraph).unwrap();
        for stack in crate::stack::STACKS.iter().filter(|s| !s.in_graph()) {
            let eager = Launch::of(&model, *stack).unwrap();
            for us in [1, 10, 1000] {
                assert!(eager.on_gpu(Time::from_us(us)) >= graph.on_gpu(Time::from_us(us)), "{stack}");
            }
        }
    }
}
