//! Workloads as task graphs: tensor-parallel LLM inference (prefill and
//! decode of one query, every kernel of the forward on every GPU) over a
//! roofline compute model, storage (weight loads, checkpoints, KV-cache
//! offload), and experiments that replay a query under several transport
//! modes. Knows nothing of link internals: it asks the collective layer for
//! allreduces. Knows nothing of measurements either: calibration turns a
//! measured kernel into a [`compute::Kernel`] and asks it.

pub mod cache;
pub mod compute;
pub mod experiment;
pub mod flash;
pub mod forward;
pub mod layer;
pub mod replay;
pub mod storage;
pub mod tp;

use crate::config::hardware::HardwareModel;

/// The GPU model key that a measured GPU name ("NVIDIA H200") stands for:
/// the longest key the name contains.
pub fn gpu_key(model: &HardwareModel, measured_name: &str) -> Option<String> {
    let name = measured_name.to_lowercase();
    model.gpu.keys().filter(|key| name.contains(key.as_str())).max_by_key(|key| key.len()).cloned()
}
