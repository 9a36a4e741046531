//! Workloads as task graphs: tensor-parallel LLM inference (prefill and
//! decode of one query) over a roofline compute model, and storage traffic.
//! Knows nothing of link internals: it asks the collective layer for
//! allreduces.

pub mod compute;

use crate::calibrate::schema::Measurement;
use crate::config::hardware::HardwareModel;
use crate::config::llm::LlmModel;
use crate::units::Time;

/// The GPU model key that a measured GPU name ("NVIDIA H200") stands for:
/// the longest key the name contains.
pub fn gpu_key(model: &HardwareModel, measured_name: &str) -> Option<String> {
    let name = measured_name.to_lowercase();
    model.gpu.keys().filter(|key| name.contains(key.as_str())).max_by_key(|key| key.len()).cloned()
}

/// Predicted time of a measured `kernel` (one layer's kernel at TP).
pub fn predict_kernel(model: &HardwareModel, m: &Measurement) -> Result<Time, String> {
    let kernel = m.kernel.as_deref().ok_or("a kernel measurement without `kernel`")?;
    let gpu_name = m.gpu.as_deref().ok_or("a kernel measurement without `gpu`")?;
    let key = gpu_key(model, gpu_name).ok_or_else(|| format!("GPU {gpu_name:?} is not in the hardware model"))?;
    let gpu = model.gpu(&key)?;
    let llm = LlmModel::load(m.model.as_deref().unwrap_or("llama-3.1-70b")).map_err(|e| e.to_string())?;
    let tokens = m.tokens.ok_or("a kernel measurement without `tokens`")?;
    let tp = u64::from(m.tp.unwrap_or(1));
    compute::layer_kernels(&llm, tp, 1, tokens, 0)
        .into_iter()
        .find(|k| k.name == kernel)
        .map(|k| k.time(gpu))
        .ok_or_else(|| format!("kernel {kernel:?}"))
}
