//! What the model predicts for measured compute: an `op: kernel` row (one
//! kernel, by its matrix shape or by its name in an LLM's pass) and an
//! `op: llm_forward` row (a pass, or a whole query, of an LLM replayed on
//! the topology that stands for the measured machine). A measurement is
//! turned into the workload's own types (a `Kernel`, a query and forward
//! settings) before the workload is asked; no model is changed here.

use crate::collective::Selection;
use crate::config::hardware::HardwareModel;
use crate::config::llm::{LlmModel, Scope};
use crate::stack::Stack;
use crate::topology::Topology;
use crate::transport::Mode;
use crate::units::Time;
use crate::workload::compute::{Clock, Kernel, Launch};
use crate::workload::forward::{self, Shape};
use crate::workload::gpu_key;
use crate::workload::tp::{CollectiveCache, Pass, Query, TensorParallel};

use super::predict::{PredictError, Prediction};
use super::schema::Measurement;

/// The LLM a row names; rows without one are Llama-3.1-70B's (the shared
/// README says so of its kernels).
fn llm_of(m: &Measurement) -> Result<LlmModel, PredictError> {
    LlmModel::load(m.model.as_deref().unwrap_or("llama-3.1-70b")).map_err(|e| PredictError::Failed(e.to_string()))
}

/// A row's TP degree, checked against the LLM.
fn tp_of(m: &Measurement, llm: &LlmModel) -> Result<u64, PredictError> {
    let tp = u64::from(m.tp.unwrap_or(1));
    if !crate::workload::tp::splits(llm, tp) {
        return Err(PredictError::Failed(format!(
            "tp {tp}: {} splits over a TP degree that divides its {} heads and {} FFN columns",
            llm.name, llm.heads, llm.ffn
        )));
    }
    Ok(tp)
}

/// Bytes of one element of a row's `dtype` (bf16 when unsaid).
fn element_bytes(m: &Measurement) -> Result<f64, PredictError> {
    match m.dtype.as_deref().unwrap_or("bfloat16") {
        "bfloat16" | "bf16" | "float16" | "fp16" | "half" => Ok(2.0),
        "float32" | "fp32" | "float" => Ok(4.0),
        "fp8" | "int8" => Ok(1.0),
        other => Err(PredictError::NotModelled(format!("element type {other:?}"))),
    }
}

/// The kernel a `kernel` row measured: a matrix product of its `m`, `n`,
/// `k`, or the kernel its name stands for in its LLM's pass of `tokens` new
/// tokens (of `batch` sequences, after `kv_len` cached ones) at its TP.
pub fn measured_kernel(m: &Measurement) -> Result<Kernel, PredictError> {
    let name = m.kernel.as_deref().ok_or_else(|| PredictError::Failed("a kernel measurement without `kernel`".into()))?;
    if let (Some(rows), Some(n), Some(k)) = (m.m, m.n, m.k) {
        if rows == 0 || n == 0 || k == 0 {
            return Err(PredictError::Failed(format!("a matrix product of {rows} x {k} by {k} x {n}: every dimension must be at least 1")));
        }
        return Ok(Kernel::gemm("gemm", rows as f64, k as f64, n as f64, element_bytes(m)?));
    }
    let llm = llm_of(m)?;
    let tokens = m
        .tokens
        .filter(|&t| t > 0)
        .ok_or_else(|| PredictError::Failed("a kernel measurement needs `tokens` (at least 1), or `m`, `n` and `k`".into()))?;
    let batch = m.batch.unwrap_or(1).max(1);
    let shape = Shape { tp: tp_of(m, &llm)?, batch, tokens, context: m.kv_len.unwrap_or(0) };
    forward::named_kernel(&llm, shape, name).ok_or_else(|| {
        let known = forward::kernel_names(&llm, shape).join(", ");
        PredictError::NotModelled(format!(
            "kernel {name:?}: not a kernel of {}'s forward pass ({known}), nor a product with m, n and k",
            llm.name
        ))
    })
}

/// The hardware model's key for the GPU a row was measured on.
fn gpu_of<'m>(model: &'m HardwareModel, m: &Measurement) -> Result<&'m crate::config::hardware::GpuModel, PredictError> {
    let name = m.gpu.as_deref().ok_or_else(|| PredictError::Failed("a kernel measurement without `gpu`".into()))?;
    let key = gpu_key(model, name).ok_or_else(|| PredictError::NotModelled(format!("GPU {name:?} is not in the hardware model")))?;
    model.gpu(&key).map_err(PredictError::Failed)
}

/// Predicted time of a measured kernel, issued back to back as its stack
/// issues kernels (how kernels are timed).
pub fn predict_kernel(model: &HardwareModel, m: &Measurement) -> Result<Prediction, PredictError> {
    let kernel = measured_kernel(m)?;
    let gpu = gpu_of(model, m)?;
    let launch = Launch::of(model, m.stack()).map_err(PredictError::Failed)?;
    let roofline = kernel.roofline(gpu, Clock::Burst);
    let bound = if roofline.compute_s > roofline.memory_s { "compute" } else { "memory" };
    Ok(Prediction { time: launch.repeated(kernel.time(gpu, Clock::Burst)), detail: format!("{} {}-bound", kernel.class.name(), bound) })
}

/// What a forward row ran: its scope as written, else `layers` where its
/// `source` says the embedding or the LM head were left out.
fn scope_of(m: &Measurement) -> Scope {
    m.scope.unwrap_or_else(|| {
        let source = m.source.as_deref().unwrap_or("").to_ascii_lowercase();
        if source.contains("no embedding") || source.contains("no lm head") { Scope::Layers } else { Scope::Full }
    })
}

/// A forward row's fusion: as written, else PyTorch's for PyTorch stacks
/// and vLLM's otherwise.
fn fusion_of(m: &Measurement, stack: Stack) -> String {
    m.fusion.clone().unwrap_or_else(|| if matches!(stack, Stack::TorchGraph | Stack::TorchEager) { "torch" } else { "vllm" }.to_string())
}

/// Predicted time of a measured forward: the pass (or query) replayed with
/// the row's LLM, TP degree, transport (`none`: without collectives),
/// stack, scope and fusion, on the first `tp` GPUs of `topo`.
pub fn predict_forward(topo: &Topology, model: &HardwareModel, m: &Measurement) -> Result<Prediction, PredictError> {
    let failed = |e: String| PredictError::Failed(e);
    let llm = llm_of(m)?;
    let tp = tp_of(m, &llm)?;
    let transport = m.transport.as_deref().unwrap_or("auto");
    let communicate = transport != "none";
    let mode: Mode = if communicate { transport.parse().map_err(PredictError::NotModelled)? } else { Mode::Auto };
    let stack = m.stack();
    let scope = scope_of(m);
    let fusion = fusion_of(m, stack);
    let selection = if m.algo.as_deref() == Some("fastest") { Selection::Fastest } else { Selection::Nccl };
    let tp_u32 = u32::try_from(tp).map_err(|_| failed(format!("tp {tp} is not a GPU count")))?;
    let mut setup = TensorParallel::new(topo, model, &llm, tp_u32, mode)
        .map_err(|e| failed(e.to_string()))?
        .with_selection(selection)
        .with_forward(stack, scope, &fusion)
        .map_err(|e| failed(e.to_string()))?;
    if !communicate {
        setup = setup.without_collectives();
    }
    let batch = m.batch.unwrap_or(1).max(1);
    let phase = m.phase.as_deref().unwrap_or("");
    let mut cache = CollectiveCache::new(topo, model);
    let need = |value: Option<u64>, key: &str| {
        value.filter(|&v| v > 0).ok_or_else(|| failed(format!("an llm_forward {phase} row needs `{key}` (at least 1)")))
    };
    let time: Time = match phase {
        "prefill" => {
            let query = Query { prompt: need(m.tokens, "tokens")?, output: 0, batch };
            setup.simulate_pass(&query, Pass::Prefill, &mut cache).map_err(|e| failed(e.to_string()))?.total()
        }
        "decode_step" => {
            let query = Query { prompt: need(m.kv_len, "kv_len")?, output: 1, batch };
            setup.simulate_pass(&query, Pass::Decode { step: 0 }, &mut cache).map_err(|e| failed(e.to_string()))?.total()
        }
        "query" => {
            let query = Query { prompt: need(m.tokens, "tokens")?, output: m.output.unwrap_or(0), batch };
            setup.replay(&query, &mut cache).map_err(|e| failed(e.to_string()))?.total()
        }
        other => return Err(PredictError::Failed(format!("llm_forward phase {other:?}: use prefill, decode_step or query"))),
    };
    Ok(Prediction { time, detail: format!("{stack} {scope} {fusion}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hardware;
    use crate::topology::{PresetOptions, TopologySpec, resolve};

    fn read(path: &str) -> Vec<Measurement> {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        crate::calibrate::read_measurements(&file, &Default::default()).unwrap()
    }

    /// The five kernels of one Llama-3.1-70B layer at TP=2 measured on an
    /// H200 (a verbatim slice of the shared measurements in tests/data).
    #[test]
    fn the_calibrated_h200_reproduces_the_measured_kernels_within_10_percent() {
        let kernels: Vec<Measurement> = read("tests/data/h200x2-slice.jsonl").into_iter().filter(|m| m.op == "kernel").collect();
        assert_eq!(kernels.len(), 5);
        let model = HardwareModel::load(&[hardware::shipped("h200-fit").unwrap()]).unwrap();
        for measured in &kernels {
            let predicted = predict_kernel(&model, measured).unwrap().time.as_us();
            let error = predicted / measured.time_us - 1.0;
            println!(
                "{:<24} measured {:>8.1} us, predicted {predicted:>8.1} us ({:+.1}%)",
                measured.series(),
                measured.time_us,
                100.0 * error
            );
            assert!(error.abs() <= 0.10, "{}: {predicted:.1} us against {} us measured", measured.series(), measured.time_us);
        }
    }

    #[test]
    fn kernels_are_found_by_shape_or_name_and_bad_rows_say_why() {
        let gemm = Measurement {
            op: "kernel".into(),
            kernel: Some("gemm".into()),
            m: Some(8),
            n: Some(4096),
            k: Some(1024),
            ..Default::default()
        };
        assert_eq!(measured_kernel(&gemm).unwrap().flops, 2.0 * 8.0 * 4096.0 * 1024.0);
        let named = Measurement {
            kernel: Some("rms_norm".into()),
            tokens: Some(16),
            tp: Some(4),
            model: Some("llama-3.1-8b".into()),
            ..gemm.clone()
        };
        let named = Measurement { m: None, ..named };
        assert_eq!(measured_kernel(&named).unwrap().bytes, 2.0 * (2.0 * 16.0 * 4096.0 + 4096.0));
        // Issue 14's panic: TP 0 is an error, not a division by zero.
        let no_tp = Measurement { tp: Some(0), ..named.clone() };
        assert!(matches!(measured_kernel(&no_tp), Err(PredictError::Failed(e)) if e.contains("tp 0")));
        let unknown = Measurement { kernel: Some("fused_moe".into()), ..named };
        assert!(matches!(measured_kernel(&unknown), Err(PredictError::NotModelled(_))));
    }

    #[test]
    fn forward_rows_name_their_scope_and_fusion_or_have_them_read() {
        let shared = read("tests/data/h200x2-forward-slice.jsonl");
        assert!(shared.iter().all(|m| scope_of(m) == Scope::Layers), "the shared source says: no embedding, final norm or LM head");
        assert_eq!(fusion_of(&shared[0], shared[0].stack()), "torch");
        let spec =
            TopologySpec { name: "hgx-h200".into(), options: PresetOptions { gpus: Some(2), gpu: None, host: None }, models: vec![] };
        let (topo, model) = resolve(&spec).unwrap();
        let decode = shared.iter().find(|m| m.phase.as_deref() == Some("decode_step") && m.transport.as_deref() == Some("none")).unwrap();
        let predicted = predict_forward(&topo, &model, decode).unwrap();
        assert_eq!(predicted.detail, "torch-graph layers torch");
        let with_allreduce = Measurement { transport: Some("nvswitch".into()), ..decode.clone() };
        assert!(predict_forward(&topo, &model, &with_allreduce).unwrap().time > predicted.time);
        let bad_phase = Measurement { phase: Some("warmup".into()), ..decode.clone() };
        assert!(predict_forward(&topo, &model, &bad_phase).unwrap_err().to_string().contains("prefill, decode_step or query"));
    }
}
