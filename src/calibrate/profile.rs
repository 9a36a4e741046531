//! A profiled forward (`op: kernel_trace` rows: each CUDA kernel of one
//! pass, its launches a layer and its mean time, as `tools/torch_forward.py
//! forward --profile` writes them) beside the model's kernels of the same
//! pass: which kernel of the model each CUDA kernel is, told by its name,
//! and for each kind the launches and the GPU time a layer on both sides.
//! Reads measurements and the workload's pass program; changes nothing.

use crate::config::hardware::HardwareModel;
use crate::config::llm::{LlmModel, Scope};
use crate::workload::compute::{Clock, Kernel, KernelClass};
use crate::workload::forward::{Shape, Step, pass_program};
use crate::workload::gpu_key;

use super::predict::PredictError;
use super::schema::{KERNEL_TRACE, Measurement};

/// Parts of CUDA kernel names (lower case) and the kind of the model's
/// kernel they belong to. A matrix product's split-K reduction and a
/// decode attention's reduction are launches of the product and of the
/// attention the runner times whole. Attention is told before the
/// products: FlashAttention's kernels name CUTLASS's types.
const KINDS: &[(&[&str], &str)] = &[
    (&["memset"], "memset"),
    (&["sdpa", "flash", "fmha", "lean_reduction"], "attention"),
    (&["splitkreduce", "nvjet", "gemm", "cutlass", "xmma"], "matmul"),
    (&["layer_norm", "rms_norm"], "rms_norm"),
    (&["functor_add", "addfunctor"], "residual_add"),
    (&["silu"], "silu"),
    // A multiply's ATen kernel (a name cut short ends at its
    // BinaryFunctor); addcmul is the same strided kernel with a third
    // operand (the rotary of the `torch-varlen` fusion).
    (&["mulfunctor", "binaryfunctor", "addcmul"], "mul"),
    (&["roll_cuda"], "roll"),
    (&["copy"], "kv_write_k"),
];

/// The kind of the model's kernel a CUDA kernel called `name` is
/// (`matmul`, `attention` or an elementwise kernel's kind), if any.
pub fn kind_of(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    KINDS.iter().find(|(parts, _)| parts.iter().any(|part| name.contains(part))).map(|(_, kind)| *kind)
}

/// The kind a kernel of the model is counted as beside a profile.
pub fn model_kind(kernel: &Kernel) -> &'static str {
    match (kernel.class, kernel.kind) {
        (KernelClass::Matmul, _) => "matmul",
        (KernelClass::Attention, _) => "attention",
        // ATen's copies, counted together as the profile's names allow
        // (`copy` above): into the cache by index, and of a strided Q.
        (KernelClass::Elementwise, "kv_index_copy" | "q_copy") => "kv_write_k",
        // ATen's multiplies: the rotary's broadcast multiply and addcmul.
        (KernelClass::Elementwise, "rotary_mul" | "addcmul") => "mul",
        (KernelClass::Elementwise, kind) => kind,
    }
}

/// One kind of kernel of one profiled pass, a layer's worth on each side.
#[derive(Debug, Clone, PartialEq)]
pub struct KindRow {
    pub phase: String,
    pub kind: String,
    /// CUDA launches a layer in the profile.
    pub launches: f64,
    /// The profile's GPU time a layer, us.
    pub measured_us: f64,
    /// The model's kernels of this kind a layer.
    pub kernels: usize,
    /// The model's GPU time a layer (no launch gaps), us.
    pub predicted_us: f64,
}

impl KindRow {
    pub fn error(&self) -> Option<f64> {
        (self.measured_us > 0.0 && self.predicted_us > 0.0).then(|| self.predicted_us / self.measured_us - 1.0)
    }
}

/// Whether two trace rows profiled the same pass: phase, LLM and shape.
fn same_pass(a: &Measurement, b: &Measurement) -> bool {
    (&a.phase, &a.model, a.tp, a.tokens, a.batch, a.kv_len) == (&b.phase, &b.model, b.tp, b.tokens, b.batch, b.kv_len)
}

/// Every kind of kernel of every pass the `kernel_trace` rows of
/// `measurements` profiled, beside the model's kernels of the same layer
/// (the row's LLM, TP, shape, fusion and scope; kernels at the sustained
/// clock of a forward), in the order the profile lists them.
pub fn compare(model: &HardwareModel, measurements: &[Measurement]) -> Result<Vec<KindRow>, PredictError> {
    let traces: Vec<&Measurement> = measurements.iter().filter(|m| m.op == KERNEL_TRACE).collect();
    let mut passes: Vec<Vec<&Measurement>> = Vec::new();
    for trace in traces {
        match passes.iter_mut().find(|rows| same_pass(rows[0], trace)) {
            Some(rows) => rows.push(trace),
            None => passes.push(vec![trace]),
        }
    }
    let mut out = Vec::new();
    for rows in passes {
        let first = rows[0];
        let failed = |e: String| PredictError::Failed(e);
        let llm = LlmModel::load(first.model.as_deref().unwrap_or("llama-3.1-70b")).map_err(|e| failed(e.to_string()))?;
        let fusion = llm.fusion(first.fusion.as_deref().unwrap_or("torch")).map_err(|e| failed(e.to_string()))?;
        let gpu_name = first.gpu.as_deref().ok_or_else(|| failed("a kernel_trace row without `gpu`".into()))?;
        let key = gpu_key(model, gpu_name).ok_or_else(|| PredictError::NotModelled(format!("GPU {gpu_name:?}")))?;
        let gpu = model.gpu(&key).map_err(failed)?;
        let shape = Shape {
            tp: u64::from(first.tp.unwrap_or(1)),
            batch: first.batch.unwrap_or(1).max(1),
            tokens: first.tokens.unwrap_or(1).max(1),
            context: first.kv_len.unwrap_or(0),
        };
        let program = pass_program(&llm, fusion, first.scope.unwrap_or(Scope::Layers), shape);
        let phase = first.phase.clone().unwrap_or_default();
        let mut kinds: Vec<KindRow> = Vec::new();
        let mut row_of = |kind: &str| -> usize {
            match kinds.iter().position(|r| r.kind == kind) {
                Some(index) => index,
                None => {
                    let row = KindRow {
                        phase: phase.clone(),
                        kind: kind.to_string(),
                        launches: 0.0,
                        measured_us: 0.0,
                        kernels: 0,
                        predicted_us: 0.0,
                    };
                    kinds.push(row);
                    kinds.len() - 1
                }
            }
        };
        let mut indices = Vec::new();
        for trace in &rows {
            let name = trace.kernel.as_deref().unwrap_or("");
            let kind = kind_of(name).unwrap_or("other");
            let calls = trace.calls_per_layer.unwrap_or(1.0);
            indices.push((row_of(kind), calls, trace.time_us));
        }
        let mut predicted = Vec::new();
        for kernel in program.layer.iter().filter_map(|step| match step {
            Step::Kernel { kernel, .. } => Some(kernel),
            Step::Collective { .. } => None,
        }) {
            predicted.push((row_of(model_kind(kernel)), kernel.time(gpu, Clock::Sustained).as_us()));
        }
        for (index, calls, time_us) in indices {
            kinds[index].launches += calls;
            kinds[index].measured_us += calls * time_us;
        }
        for (index, time_us) in predicted {
            kinds[index].kernels += 1;
            kinds[index].predicted_us += time_us;
        }
        out.extend(kinds);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_kernel_names_are_told_apart() {
        for (name, kind) in [
            ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", Some("matmul")),
            ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", Some("matmul")),
            ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", Some("attention")),
            ("void cudnn::fusion::lean_reduction_kernel<false, false, false>", Some("attention")),
            ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>", Some("rms_norm")),
            ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>", Some("residual_add")),
            ("void at::native::elementwise_kernel<128, 4, silu_kernel>", Some("silu")),
            ("at::native::BinaryFunctor<c10::BFloat16, at::native::binary_internal::MulFunctor<float>>", Some("mul")),
            ("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>", Some("kv_write_k")),
            ("void at::native::elementwise_kernel<128, 4, addcmul_cuda_kernel(at::TensorIteratorBase&)>", Some("mul")),
            ("void at::native::roll_cuda_kernel<c10::BFloat16>(c10::BFloat16 const*)", Some("roll")),
            (
                "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t>>",
                Some("attention"),
            ),
            ("void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<BinaryFunctor<c10::BFloat16, ", Some("mul")),
            ("Memset (Device)", Some("memset")),
            ("some_other_kernel", None),
        ] {
            assert_eq!(kind_of(name), kind, "{name}");
        }
    }

    #[test]
    fn a_trace_is_set_beside_the_layer_of_its_pass() {
        let trace = |kernel: &str, calls: f64, time_us: f64| Measurement {
            op: KERNEL_TRACE.into(),
            kernel: Some(kernel.into()),
            model: Some("llama-3.1-8b".into()),
            gpu: Some("NVIDIA H200".into()),
            tp: Some(1),
            tokens: Some(1),
            batch: Some(1),
            kv_len: Some(1024),
            phase: Some("decode_step".into()),
            fusion: Some("torch".into()),
            scope: Some(Scope::Layers),
            calls_per_layer: Some(calls),
            time_us,
            ..Default::default()
        };
        let rows = [
            trace("nvjet_a", 3.0, 20.0),
            trace("nvjet_b", 1.0, 40.0),
            trace("CUDAFunctor_add", 2.0, 1.5),
            trace("Memset (Device)", 1.0, 1.0),
        ];
        let compared = compare(&HardwareModel::base(), &rows).unwrap();
        let matmul = compared.iter().find(|r| r.kind == "matmul").unwrap();
        assert_eq!((matmul.launches, matmul.measured_us, matmul.kernels), (4.0, 100.0, 4));
        let add = compared.iter().find(|r| r.kind == "residual_add").unwrap();
        assert_eq!((add.launches, add.kernels), (2.0, 2));
        let memset = compared.iter().find(|r| r.kind == "memset").unwrap();
        assert_eq!((memset.kernels, memset.predicted_us, memset.error()), (0, 0.0, None));
        let norm = compared.iter().find(|r| r.kind == "rms_norm").unwrap();
        assert_eq!((norm.launches, norm.kernels), (0.0, 2), "the model's kernels the profile lacks are listed too");
    }
}
