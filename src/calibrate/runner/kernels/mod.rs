//! `icsim calibrate run --kernels`: times, on one GPU, the kernels of the
//! shipped LLMs' forward at their tensor-parallel shapes: bf16 matrix
//! products through cuBLAS (each projection and the LM head, for decode
//! batches and prefill token counts) and the memory-bound kernels (norms,
//! residual adds, activations, rotary, KV-cache writes, embedding lookups)
//! compiled by NVRTC from `kernels.cu`. Each point is a CUDA graph of
//! back-to-back calls replayed and timed with CUDA events (stack
//! `nccl-graph`: raw library calls in a graph), weights cycled over copies so
//! that every call reads them from HBM, as a forward's layers do. Rows are
//! `op: kernel` with their shape; the workload's forward names the kernels
//! and counts their bytes, so a row is predicted as the model would run it.

use icsim_gpu::cuda::{Device, DeviceBuffer, Driver, Stream};
use icsim_gpu::nvrtc::{Arg, Module};
use icsim_gpu::{GpuError, cublas};

use crate::calibrate::schema::Measurement;
use crate::config::hardware::HardwareModel;
use crate::config::llm::LlmModel;
use crate::stack::Stack;
use crate::units::{Bytes, Time};
use crate::workload::compute::{Clock, Kernel};
use crate::workload::forward::{self, Shape};

use super::RunnerError;

/// The runner's memory-bound kernels, compiled at run time.
const SOURCE: &str = include_str!("kernels.cu");

/// Prefill token counts and decode batches measured when none are given.
pub const DEFAULT_PREFILL: &str = "256,512,1024,2048,4096,8192,16384";
pub const DEFAULT_DECODE: &str = "1,2,4,8,16,32,64,128,256";
/// Row counts of the memory-bound kernels (few rows: their floor; many:
/// their bandwidth).
const ELEMENTWISE_ROWS: [u64; 5] = [1, 16, 256, 2048, 16384];
/// Weights read by consecutive calls span at least this much memory, well
/// over any GPU's L2 cache (50 MiB on an H100/H200).
const COLD_WEIGHTS: u64 = 256 << 20;
/// Most blocks a memory-bound kernel launches (its threads then stride over
/// the data): 16 for each of an H100/H200's 132 multiprocessors.
const GRID_LIMIT: u32 = 132 * 16;

/// What `--kernels` measures.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelOptions {
    /// LLMs whose kernels are measured (shipped names or files).
    pub llms: Vec<String>,
    /// Tensor-parallel degrees (those an LLM cannot split over are skipped).
    pub tps: Vec<u64>,
    /// Prefill token counts (one sequence) and decode batches (one token each).
    pub prefill: Vec<u64>,
    pub decode: Vec<u64>,
    /// About how long the timed part of one point takes.
    pub point_time: Time,
}

/// What one point runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    /// Y[m x n] = X[m x k] W[n x k]^T.
    Gemm {
        m: u64,
        n: u64,
        k: u64,
    },
    Norm {
        rows: u64,
        width: u64,
        add: bool,
    },
    /// `op` as kernels.cu's `elementwise`: 0 add, 1 multiply, 2 SiLU, 3
    /// SiLU-and-multiply; `b_stride` is the second operand's row stride.
    Elementwise {
        rows: u64,
        width: u64,
        op: i32,
        a_stride: u64,
        b_stride: u64,
    },
    Rotary {
        rows: u64,
        heads: u64,
        head_dim: u64,
        row_stride: u64,
    },
    CopyRows {
        rows: u64,
        width: u64,
        both: bool,
        row_stride: u64,
    },
    Embedding {
        rows: u64,
        width: u64,
        vocab: u64,
    },
}

/// One kernel to time, and the forward it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelPoint {
    pub name: &'static str,
    /// The LLM as `--kernel-llms` named it.
    pub model: String,
    pub shape: Shape,
    pub work: Work,
    /// The model's prediction, to plan repetitions.
    pub estimate: Time,
}

impl KernelPoint {
    /// Bytes of device memory the point's buffers take.
    fn footprint(&self) -> u64 {
        let e = 2;
        match self.work {
            Work::Gemm { m, n, k } => e * (m * k + m * n) + e * (n * k).max(COLD_WEIGHTS),
            Work::Norm { rows, width, .. } => e * (3 * rows * width + width),
            Work::Elementwise { rows, width, a_stride, b_stride, .. } => e * rows * (a_stride.max(b_stride) + width),
            Work::Rotary { rows, head_dim, row_stride, .. } => e * rows * (row_stride + head_dim),
            Work::CopyRows { rows, width, row_stride, .. } => e * rows * (row_stride + 2 * width),
            Work::Embedding { rows, width, vocab } => e * (vocab * width + rows * width) + 4 * rows,
        }
    }
}

/// Every point of `llms` at the asked degrees and sizes, with the model's
/// estimate of each; identical kernels (same work) are measured once.
pub fn plan(llms: &[(String, LlmModel)], options: &KernelOptions, model: &HardwareModel, gpu: &str) -> Result<Vec<KernelPoint>, String> {
    let gpu = model.gpu(gpu)?;
    let mut points: Vec<KernelPoint> = Vec::new();
    let mut add = |point: KernelPoint| {
        if !points.iter().any(|p| p.work == point.work) {
            points.push(point);
        }
    };
    for (label, llm) in llms {
        for &tp in options.tps.iter().filter(|&&tp| crate::workload::tp::splits(llm, tp)) {
            let shapes = forward::gemm_shapes(llm, tp);
            let decode = options.decode.iter().map(|&batch| Shape { tp, batch, tokens: 1, context: 0 });
            let prefill = options.prefill.iter().map(|&tokens| Shape { tp, batch: 1, tokens, context: 0 });
            for shape in decode.clone().chain(prefill.clone()) {
                for &(name, k, n) in &shapes {
                    // The LM head multiplies one row a sequence: decode batches only.
                    if name == "gemm_lm_head" && shape.tokens > 1 {
                        continue;
                    }
                    let m = if name == "gemm_lm_head" { shape.batch } else { shape.rows() };
                    let estimate = Kernel::gemm(name, m as f64, k as f64, n as f64, 2.0).time(gpu, Clock::Burst);
                    add(KernelPoint { name, model: label.clone(), shape, work: Work::Gemm { m, n, k }, estimate });
                }
            }
            for rows in ELEMENTWISE_ROWS {
                let shape = Shape { tp, batch: 1, tokens: rows, context: 0 };
                for (name, work) in elementwise_work(llm, tp, rows) {
                    let Some(kernel) = forward::named_kernel(llm, shape, name) else { continue };
                    add(KernelPoint { name, model: label.clone(), shape, work, estimate: kernel.time(gpu, Clock::Burst) });
                }
            }
        }
    }
    Ok(points)
}

/// The memory-bound kernels of a layer at TP `tp` over `rows` tokens.
fn elementwise_work(llm: &LlmModel, tp: u64, rows: u64) -> Vec<(&'static str, Work)> {
    let (q_heads, kv_heads) = llm.heads_per_gpu(tp);
    let head_dim = llm.head_dim();
    let (hidden, ffn) = (llm.hidden, llm.ffn / tp);
    let qkv = (q_heads + 2 * kv_heads) * head_dim;
    let kv = kv_heads * head_dim;
    vec![
        ("rms_norm", Work::Norm { rows, width: hidden, add: false }),
        ("add_rms_norm", Work::Norm { rows, width: hidden, add: true }),
        ("residual_add", Work::Elementwise { rows, width: hidden, op: 0, a_stride: hidden, b_stride: hidden }),
        ("silu", Work::Elementwise { rows, width: ffn, op: 2, a_stride: 2 * ffn, b_stride: 0 }),
        ("mul", Work::Elementwise { rows, width: ffn, op: 1, a_stride: ffn, b_stride: 2 * ffn }),
        ("silu_mul", Work::Elementwise { rows, width: ffn, op: 3, a_stride: 2 * ffn, b_stride: 2 * ffn }),
        ("rotary", Work::Rotary { rows, heads: q_heads + kv_heads, head_dim, row_stride: qkv }),
        ("kv_write", Work::CopyRows { rows, width: kv, both: true, row_stride: qkv }),
        ("kv_write_k", Work::CopyRows { rows, width: kv, both: false, row_stride: qkv }),
        ("embedding", Work::Embedding { rows, width: hidden, vocab: llm.vocab }),
    ]
}

/// How many calls a graph holds and how many times it is replayed for a
/// kernel of `estimate`: graphs of about a tenth of `point_time` (2 to 100
/// calls), replayed to fill `point_time` (1 to 20 times).
pub fn repetitions(estimate: Time, point_time: Time) -> (u32, u32) {
    let estimate = estimate.as_us().max(1.0);
    let calls = (point_time.as_us() / 10.0 / estimate).floor().clamp(2.0, 100.0);
    let replays = (point_time.as_us() / (calls * estimate)).floor().clamp(1.0, 20.0);
    (calls as u32, replays as u32)
}

/// Every buffer the points use, allocated once at the largest size needed.
struct Buffers {
    a: DeviceBuffer,
    b: DeviceBuffer,
    c: DeviceBuffer,
    weight: DeviceBuffer,
    ids: DeviceBuffer,
    workspace: DeviceBuffer,
}

/// What measuring needs on the GPU.
pub struct Bench {
    stream: Stream,
    cublas: cublas::Cublas,
    module: Module,
    buffers: Buffers,
}

impl Bench {
    /// Loads cuBLAS and NVRTC, compiles the kernels and allocates what the
    /// largest of `points` needs, filled with random values.
    pub fn new(device: &Device, points: &[KernelPoint]) -> Result<Bench, RunnerError> {
        let stream = device.stream()?;
        let cublas = cublas::Cublas::load()?;
        let module = Module::compile(SOURCE, device.compute_capability()?)?;
        let largest = |f: &dyn Fn(&Work) -> u64| points.iter().map(|p| f(&p.work)).max().unwrap_or(0).max(16);
        let e = 2;
        let a = largest(&|w| match *w {
            Work::Gemm { m, k, .. } => e * m * k,
            Work::Norm { rows, width, .. } | Work::Embedding { rows, width, .. } => e * rows * width,
            Work::Elementwise { rows, a_stride, b_stride, .. } => e * rows * a_stride.max(b_stride),
            Work::Rotary { rows, row_stride, .. } | Work::CopyRows { rows, row_stride, .. } => e * rows * row_stride,
        });
        let b = largest(&|w| match *w {
            Work::Norm { rows, width, .. } => e * rows * width,
            Work::Elementwise { rows, a_stride, b_stride, .. } => e * rows * a_stride.max(b_stride),
            Work::Rotary { rows, head_dim, .. } => e * rows * head_dim,
            Work::CopyRows { rows, width, .. } => e * rows * width,
            Work::Embedding { vocab, width, .. } => e * vocab * width,
            Work::Gemm { .. } => 0,
        });
        let c = largest(&|w| match *w {
            Work::Gemm { m, n, .. } => e * m * n,
            Work::Norm { rows, width, .. } | Work::Elementwise { rows, width, .. } | Work::Embedding { rows, width, .. } => {
                e * rows * width
            }
            Work::CopyRows { rows, width, .. } => e * rows * width,
            Work::Rotary { .. } => 0,
        });
        let weight = largest(&|w| match *w {
            Work::Gemm { n, k, .. } => (e * n * k).max(COLD_WEIGHTS),
            Work::Norm { width, .. } => e * width,
            _ => 0,
        });
        let rows = largest(&|w| match *w {
            Work::Embedding { rows, .. } => rows,
            _ => 0,
        });
        let size = |bytes: u64| {
            usize::try_from(bytes).map_err(|_| RunnerError::Usage(format!("{} does not fit this host's addresses", Bytes(bytes))))
        };
        let buffers = Buffers {
            a: device.alloc(size(a)?)?,
            b: device.alloc(size(b)?)?,
            c: device.alloc(size(c)?)?,
            weight: device.alloc(size(weight)?)?,
            ids: device.alloc(size(4 * rows)?)?,
            workspace: device.alloc(32 << 20)?,
        };
        let bench = Bench { stream, cublas, module, buffers };
        let fill = bench.module.function("fill_random")?;
        for (seed, buffer) in [&bench.buffers.a, &bench.buffers.b, &bench.buffers.c, &bench.buffers.weight].into_iter().enumerate() {
            let elements = (buffer.len() / 2) as u64;
            let args = [Arg::Pointer(buffer.range(0, 0).address()), Arg::Long(elements), Arg::Int(seed as i32 + 1), Arg::Float(0.05)];
            fill.launch(&bench.stream, GRID_LIMIT, 256, &args)?;
        }
        bench.cublas.bind(&bench.stream, bench.buffers.workspace.range(0, 32 << 20))?;
        bench.stream.synchronize()?;
        Ok(bench)
    }

    /// Queues call `index` of `point` (weights cycled over their copies).
    fn enqueue(&self, point: &KernelPoint, index: u64) -> Result<(), GpuError> {
        let b = &self.buffers;
        let stream = &self.stream;
        let at = |buffer: &DeviceBuffer, offset: u64| Arg::Pointer(buffer.range(0, 0).address() + offset);
        let int = |v: u64| Arg::Int(v as i32);
        let threads = 256;
        let grid = |vectors: u64| (vectors.div_ceil(threads).clamp(1, u64::from(GRID_LIMIT))) as u32;
        match point.work {
            Work::Gemm { m, n, k } => {
                let weight_bytes = 2 * n * k;
                let copies = (COLD_WEIGHTS / weight_bytes).max(1);
                let offset = (index % copies) * weight_bytes;
                let (m, n, k) = (m as usize, n as usize, k as usize);
                self.cublas.linear(b.a.range(0, 2 * m * k), b.weight.range(offset as usize, 2 * n * k), b.c.range(0, 2 * m * n), m, n, k)
            }
            Work::Norm { rows, width, add } => {
                let block = 256.min(width / 8).max(32).div_ceil(32) * 32;
                let eps = Arg::Float(1e-5);
                if add {
                    self.module.function("add_rms_norm")?.launch(
                        stream,
                        rows as u32,
                        block as u32,
                        &[at(&b.a, 0), at(&b.b, 0), at(&b.weight, 0), at(&b.c, 0), int(width), eps],
                    )
                } else {
                    self.module.function("rms_norm")?.launch(
                        stream,
                        rows as u32,
                        block as u32,
                        &[at(&b.a, 0), at(&b.weight, 0), at(&b.c, 0), int(width), eps],
                    )
                }
            }
            Work::Elementwise { rows, width, op, a_stride, b_stride } => {
                // Buffer a holds a gate/up output (gate, then up, in every
                // row); the product after SiLU reads SiLU's output from b.
                let (first, second) = match op {
                    0 | 2 => (at(&b.a, 0), at(&b.b, 0)),
                    1 => (at(&b.b, 0), at(&b.a, 2 * width)),
                    _ => (at(&b.a, 0), at(&b.a, 2 * width)),
                };
                let args = [first, int(a_stride), second, int(b_stride), at(&b.c, 0), int(rows), int(width), Arg::Int(op)];
                self.module.function("elementwise")?.launch(stream, grid(rows * width / 8), threads as u32, &args)
            }
            Work::Rotary { rows, heads, head_dim, row_stride } => {
                let args = [at(&b.a, 0), int(row_stride), at(&b.b, 0), int(rows), int(heads), int(head_dim)];
                self.module.function("rotary")?.launch(stream, grid(rows * heads * head_dim / 16), threads as u32, &args)
            }
            Work::CopyRows { rows, width, both, row_stride } => {
                // K follows Q in the QKV output, V follows K; the caches are b and c.
                let k_offset = 2 * (row_stride - 2 * width);
                let v = if both { at(&b.a, k_offset + 2 * width) } else { Arg::Pointer(0) };
                let v_cache = if both { at(&b.c, 0) } else { Arg::Pointer(0) };
                let args = [at(&b.a, k_offset), v, int(row_stride), at(&b.b, 0), v_cache, int(rows), int(width), Arg::Int(0)];
                self.module.function("copy_rows")?.launch(stream, grid(rows * width / 8), threads as u32, &args)
            }
            Work::Embedding { rows, width, .. } => {
                let args = [at(&b.ids, 0), at(&b.b, 0), at(&b.c, 0), int(rows), int(width)];
                self.module.function("embedding")?.launch(stream, grid(rows * width / 8), threads as u32, &args)
            }
        }
    }

    /// Times `point`: a graph of back-to-back calls replayed; the mean time
    /// of one call, the calls a graph held and the replays timed.
    pub fn measure(&self, point: &KernelPoint, point_time: Time) -> Result<(f64, u32, u32), RunnerError> {
        if let Work::Embedding { rows, vocab, .. } = point.work {
            let args = [Arg::Pointer(self.buffers.ids.range(0, 0).address()), Arg::Int(rows as i32), Arg::Int(vocab as i32)];
            self.module.function("fill_ids")?.launch(&self.stream, 64, 256, &args)?;
        }
        let (calls, replays) = repetitions(point.estimate, point_time);
        let graph = self.stream.capture(|| (0..u64::from(calls)).try_for_each(|i| self.enqueue(point, i)))?;
        graph.upload()?;
        graph.launch()?;
        self.stream.synchronize()?;
        let total_us = self.stream.time(|| (0..replays).try_for_each(|_| graph.launch()))?;
        Ok((total_us / f64::from(calls * replays), calls, replays))
    }

    /// What cuBLAS and NVRTC were, for the rows' `source`.
    pub fn libraries(&self) -> Result<String, RunnerError> {
        Ok(format!("cuBLAS {} ({}), kernels by {}", self.cublas.version()?, self.cublas.location, self.module.compiler))
    }
}

/// Measures what `kernels` asks on the first GPU, writing into `options.out`.
pub fn run(options: &super::RunOptions, kernels: &KernelOptions) -> Result<super::RunReport, RunnerError> {
    let llms: Vec<(String, LlmModel)> = kernels
        .llms
        .iter()
        .map(|name| LlmModel::load(name).map(|llm| (name.clone(), llm)).map_err(|e| RunnerError::Usage(format!("--kernel-llms: {e}"))))
        .collect::<Result<_, _>>()?;
    let driver = Driver::init()?;
    let devices = super::open_devices(&driver, 1)?;
    let probe = super::probe(&driver, &devices, None, options)?;
    let mut notices = Vec::new();
    let out = super::output::write_system_files(&options.out, &probe, &mut notices)?;
    let device = &devices[0];
    let gpu_name = device.name()?;
    let model = HardwareModel::base();
    let key = crate::workload::gpu_key(&model, &gpu_name).ok_or_else(|| {
        RunnerError::Usage(format!("GPU {gpu_name:?} has no model in models/hardware/base.toml to plan its kernels with"))
    })?;
    let mut points = plan(&llms, kernels, &model, &key).map_err(RunnerError::Usage)?;
    let (fitting, too_large): (Vec<KernelPoint>, Vec<KernelPoint>) = points.drain(..).partition(|p| p.footprint() <= probe.usable_memory);
    for point in &too_large {
        notices.push(format!(
            "{} of {} at TP={}: its buffers need {}, more than the GPU has free; skipped",
            point.name,
            point.model,
            point.shape.tp,
            Bytes(point.footprint())
        ));
    }
    let bench = Bench::new(device, &fitting)?;
    let source = format!("{} via icsim {} calibrate run --kernels", bench.libraries()?, env!("CARGO_PKG_VERSION"));
    let progress = super::progress::Progress::new(fitting.len() as u64);
    for notice in &notices {
        progress.notice(notice);
    }
    let mut file = super::output::MeasurementsFile::open(out.join("measurements.jsonl"), options.append)?;
    let mut failures = Vec::new();
    for point in &fitting {
        progress.start(&format!("{} {} TP={} rows={}", point.model, point.name, point.shape.tp, point.shape.rows()));
        match bench.measure(point, kernels.point_time) {
            Ok((time_us, calls, replays)) => {
                file.append(&[record(&probe.record.system, &gpu_name, &source, point, time_us, calls, replays)])?
            }
            Err(error) => {
                let message = format!("{} of {} at TP={}, {} rows: {error}", point.name, point.model, point.shape.tp, point.shape.rows());
                progress.warning(&message);
                failures.push(message);
            }
        }
        progress.advance(1);
    }
    progress.finish();
    if !failures.is_empty() {
        return Err(RunnerError::Failed { total: fitting.len(), failures, out });
    }
    Ok(super::RunReport { out, measurements: file.written })
}

/// A measured point as a schema-1 row.
pub fn record(system: &str, gpu: &str, source: &str, point: &KernelPoint, time_us: f64, calls: u32, replays: u32) -> Measurement {
    let gemm = match point.work {
        Work::Gemm { m, n, k } => Some((m, n, k)),
        _ => None,
    };
    Measurement {
        schema: 1,
        system: system.to_string(),
        op: "kernel".into(),
        kernel: Some(point.name.to_string()),
        model: Some(point.model.clone()),
        tp: Some(point.shape.tp as u32),
        tokens: Some(point.shape.tokens),
        batch: Some(point.shape.batch),
        m: gemm.map(|g| g.0),
        n: gemm.map(|g| g.1),
        k: gemm.map(|g| g.2),
        gpu: Some(gpu.to_string()),
        dtype: Some("bfloat16".into()),
        time_us: super::microseconds(time_us),
        stack: Some(Stack::NcclGraph),
        timing: Some(format!("CUDA graph of {calls} back-to-back calls, replayed {replays} times, CUDA events")),
        source: Some(source.to_string()),
        note: gemm
            .map(|(_, n, k)| format!("weights cycled over {} copies, read from HBM by every call", (COLD_WEIGHTS / (2 * n * k)).max(1))),
        ..Measurement::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles the runner's kernels for an H100/H200 where NVRTC is
    /// installed (pip's nvidia-cuda-nvrtc wheels; no GPU needed).
    #[test]
    fn the_kernels_compile_for_hopper_where_nvrtc_is_installed() {
        if icsim_gpu::libs::load("libnvrtc", &[], "NVRTC_LIB").is_err() {
            println!("no NVRTC here: the kernels are compiled on the GPU machine only");
            return;
        }
        let (cubin, compiler) = icsim_gpu::nvrtc::compile(SOURCE, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
        println!("{compiler}: {} bytes of cubin", cubin.len());
        assert!(cubin.starts_with(b"\x7fELF"), "a cubin is an ELF image");
    }

    fn options() -> KernelOptions {
        let list = |text: &str| text.split(',').map(|s| s.parse().unwrap()).collect();
        KernelOptions {
            llms: vec!["llama-3.1-8b".into(), "llama-3.1-70b".into(), "llama-3.1-405b".into()],
            tps: vec![1, 2, 4, 8],
            prefill: list(DEFAULT_PREFILL),
            decode: list(DEFAULT_DECODE),
            point_time: "25ms".parse().unwrap(),
        }
    }

    fn shipped_plan() -> Vec<KernelPoint> {
        let llms: Vec<(String, LlmModel)> = options().llms.iter().map(|name| (name.clone(), LlmModel::load(name).unwrap())).collect();
        plan(&llms, &options(), &HardwareModel::base(), "h200").unwrap()
    }

    #[test]
    fn the_default_grid_covers_every_projection_and_fits_in_five_minutes_of_gpu_time() {
        let points = shipped_plan();
        let gemms = points.iter().filter(|p| matches!(p.work, Work::Gemm { .. })).count();
        let others = points.len() - gemms;
        // Each point: a warm-up replay and the timed replays of its graph.
        let gpu_time: f64 = points
            .iter()
            .map(|p| {
                let (calls, replays) = repetitions(p.estimate, options().point_time);
                p.estimate.as_secs() * f64::from(calls * (replays + 1))
            })
            .sum();
        println!("{gemms} products, {others} memory-bound kernels, about {gpu_time:.0} s of GPU time");
        assert!(gemms > 500 && others > 300, "{gemms} {others}");
        assert!(gpu_time < 300.0, "{gpu_time} s");
        // docs/calibration.md quotes the grid's size and time, to the hundred points.
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/calibration.md")).unwrap();
        let quoted = format!("About {:.0} points, {gpu_time:.0} s of GPU time", (points.len() as f64 / 100.0).round() * 100.0);
        assert!(page.split_whitespace().collect::<Vec<_>>().join(" ").contains(&quoted), "docs/calibration.md should say `{quoted}`");
        // The largest buffers fit one H200 (141 GB) with room to spare.
        let largest = points.iter().map(KernelPoint::footprint).max().unwrap();
        assert!(largest < 40 << 30, "{}", Bytes(largest));
        // 70B's down projection at TP=2 for a prefill of 8192, as the shared file measured it.
        assert!(points.iter().any(|p| p.work == Work::Gemm { m: 8192, n: 8192, k: 14336 }));
    }

    #[test]
    fn every_point_is_a_kernel_the_model_predicts_by_its_row() {
        let model = HardwareModel::base();
        for point in shipped_plan() {
            let row = record("box", "NVIDIA H200", "test", &point, point.estimate.as_us(), 1, 1);
            let predicted = crate::calibrate::compute::predict_kernel(&model, &row).unwrap_or_else(|e| panic!("{point:?}: {e}"));
            let gap = model.stack(Stack::NcclGraph).unwrap().kernel_launch;
            assert_eq!(predicted.time, gap + point.estimate, "{point:?}");
        }
    }

    #[test]
    fn graphs_hold_more_calls_of_short_kernels_and_long_ones_run_once() {
        let budget: Time = "25ms".parse().unwrap();
        assert_eq!(repetitions(Time::from_us(3), budget), (100, 20));
        assert_eq!(repetitions(Time::from_us(100_000), budget), (2, 1));
        let (calls, replays) = repetitions(Time::from_us(100), budget);
        assert!((calls * replays) as f64 * 100.0 <= 25_000.0 && calls >= 2, "{calls} {replays}");
    }
}
