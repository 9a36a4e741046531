//! Workloads as task graphs: tensor-parallel LLM inference (prefill and
//! decode of one query) over a roofline compute model, storage (weight
//! loads, checkpoints, KV-cache offload), and experiments that replay a
//! query under several transport modes. Knows nothing of link
//! internals: it asks the collective layer for allreduces.

pub mod compute;
pub mod experiment;
pub mod storage;
pub mod tp;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hardware;

    /// The five kernels of one Llama-3.1-70B layer at TP=2 measured on an
    /// H200 (a verbatim slice of the shared measurements in tests/data).
    #[test]
    fn the_calibrated_h200_reproduces_the_measured_kernels_within_10_percent() {
        let slice = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200x2-slice.jsonl");
        let kernels: Vec<Measurement> =
            crate::calibrate::read_measurements(&slice, &Default::default()).unwrap().into_iter().filter(|m| m.op == "kernel").collect();
        assert_eq!(kernels.len(), 5);
        let model = HardwareModel::load(&[hardware::shipped("h200x2-nvswitch").unwrap()]).unwrap();
        for measured in &kernels {
            let predicted = predict_kernel(&model, measured).unwrap().as_us();
            let error = predicted / measured.time_us - 1.0;
            println!(
                "{:<18} measured {:>8.1} us, predicted {predicted:>8.1} us ({:+.1}%)",
                measured.series(),
                measured.time_us,
                100.0 * error
            );
            assert!(error.abs() <= 0.10, "{}: {predicted:.1} us against {} us measured", measured.series(), measured.time_us);
        }
    }
}
