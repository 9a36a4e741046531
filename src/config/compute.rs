//! The compute part of a GPU's entry in the hardware model
//! (`[gpu.NAME.compute]`): how close each kind of kernel comes to the
//! roofline, the fraction of the matrix rate kept inside a whole forward,
//! and the measured kernels that have their own achieved rates and floors
//! (`[gpu.NAME.compute.kernel.KIND]` for the inference engines' fused
//! kernels, `[gpu.NAME.compute.aten.KIND]` for PyTorch's eager operators).
//! Plain data, its validation, and how a GPU's table is completed from
//! the GPU of its die (`compute_like`) or the base file's prior; the
//! roofline itself is `workload::compute`'s.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ConfigResult, check_range, merge_tables};
use crate::units::{Bandwidth, Time};

/// Whose implementation runs a forward's elementwise kernels: its achieved
/// rates are that library's (`[gpu.NAME.compute.kernel]` or `.aten`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Library {
    /// An inference engine's own vectorized kernels (vLLM's layernorm and
    /// activation kernels; the runner's NVRTC kernels stand for them).
    #[default]
    Fused,
    /// PyTorch's eager ATen operators, one kernel an op, reading the views
    /// the model code leaves (SiLU and the product read the gate and up
    /// halves of one projection's output through strided views).
    Aten,
}

impl Library {
    pub fn name(self) -> &'static str {
        match self {
            Library::Fused => "fused",
            Library::Aten => "aten",
        }
    }

    /// Its table under `[gpu.NAME.compute]`.
    pub fn table(self) -> &'static str {
        match self {
            Library::Fused => "kernel",
            Library::Aten => "aten",
        }
    }
}

/// A measured kernel's own achieved rates, in place of its class's (each
/// field optional: what is absent is the class's).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KernelEfficiency {
    /// Achieved fraction of the GPU's `bf16_tflops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<f64>,
    /// Thread blocks the kernel keeps at work at once, in effect: the
    /// kernel's longest block (its `tail_flops`) runs at this share of the
    /// kernel's rate, after the rest of its work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks_at_once: Option<f64>,
    /// Achieved fraction of the GPU's `memory_bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<f64>,
    /// Fixed time on the GPU (ramp-up and drain of one launch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<Time>,
    /// Achieved rate, as a fraction of the GPU's `memory_bandwidth` (above
    /// 1: faster than HBM), at which the kernel streams a working set that
    /// fits in the GPU's L2 cache (`l2_cache`); absent: its HBM rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<f64>,
    /// What one thread block streams, for a kernel giving each row its own
    /// block (norms): with few rows, a row's bytes at this rate bound it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_rate: Option<Bandwidth>,
    /// What one thread block streams while a full wave of them runs, for a
    /// kernel priced as waves of blocks over the SMs (FlashAttention over
    /// decodes alone): each wave lasts its longest block's bytes at this rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_rate: Option<Bandwidth>,
    /// Thread blocks of the kernel an SM runs at once: a wave's size is this
    /// times the GPU's `sms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks_per_sm: Option<f64>,
}

/// How close real kernels come to the roofline, per kind of kernel; fitted
/// where measured (`icsim calibrate fit` on `op: kernel` rows). A kernel
/// takes its floor plus its arithmetic at `bf16_tflops` x the compute
/// fraction and its traffic at `memory_bandwidth` x the memory fraction,
/// blended (see `blend`); the launch regime (a gap in a graph, a host cost
/// when eager) is the caller's, in `[stack.*]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeEfficiency {
    /// Achieved fraction of `bf16_tflops` by matrix products with many rows
    /// (compute-bound: prefill).
    pub matmul: f64,
    /// Achieved fraction of `memory_bandwidth` by matrix products with few
    /// rows (bandwidth-bound: a decode step streams the weights).
    pub matmul_memory: f64,
    /// Fixed time of one matrix product on the GPU (ramp-up and drain).
    pub matmul_floor: Time,
    /// Achieved fraction of `bf16_tflops` by fused attention with many
    /// queries (prefill).
    pub attention: f64,
    /// Achieved fraction of `memory_bandwidth` by attention reading the KV
    /// cache for few queries (decode).
    pub attention_memory: f64,
    pub attention_floor: Time,
    /// Achieved fraction of `memory_bandwidth` by elementwise and
    /// normalization kernels (norms, residual adds, activations, rotary,
    /// KV-cache writes, embedding lookups, sampling) without their own entry.
    pub elementwise: f64,
    pub elementwise_floor: Time,
    /// What one thread block streams, for kernels giving each row its own
    /// block (norms) without their own entry.
    pub row_rate: Bandwidth,
    /// Achieved fraction of `memory_bandwidth` by a copy within the GPU.
    pub memory: f64,
    /// How sharply the compute and memory bounds meet: a kernel's roofline
    /// time is (compute^p + memory^p)^(1/p) for p = `blend` (1: the sum of
    /// the two; large: the longer of them, the plain roofline).
    pub blend: f64,
    /// Fraction of the matrix rate that matrix products and attention keep
    /// inside a whole forward pass, against the short bursts of one kernel
    /// that `matmul` and `attention` are fitted to (a power-limited clock
    /// over a long pass on a model's operands).
    pub sustained: f64,
    /// Measured fused kernels with their own rates, by kind (`rms_norm`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kernel: BTreeMap<String, KernelEfficiency>,
    /// Measured PyTorch (ATen) kernels with their own rates, by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aten: BTreeMap<String, KernelEfficiency>,
}

impl ComputeEfficiency {
    /// The measured kernels of `library`.
    pub fn kernels(&self, library: Library) -> &BTreeMap<String, KernelEfficiency> {
        match library {
            Library::Fused => &self.kernel,
            Library::Aten => &self.aten,
        }
    }

    /// The measured kernels of `library`, to change.
    pub fn kernels_mut(&mut self, library: Library) -> &mut BTreeMap<String, KernelEfficiency> {
        match library {
            Library::Fused => &mut self.kernel,
            Library::Aten => &mut self.aten,
        }
    }

    /// Checks every fraction and rate; `prefix` is the table's key
    /// (`gpu.h200.compute`).
    pub fn validate(&self, path: &Path, prefix: &str) -> ConfigResult<()> {
        let key = |field: &str| format!("{prefix}.{field}");
        for (field, value) in [
            ("matmul", self.matmul),
            ("matmul_memory", self.matmul_memory),
            ("attention", self.attention),
            ("attention_memory", self.attention_memory),
            ("elementwise", self.elementwise),
            ("memory", self.memory),
            ("sustained", self.sustained),
        ] {
            check_range(path, &key(field), value, 0.01..=1.0)?;
        }
        check_range(path, &key("blend"), self.blend, 1.0..=64.0)?;
        if self.row_rate.0 == 0 {
            return Err(ConfigError::invalid(path, key("row_rate"), "must be positive"));
        }
        for library in [Library::Fused, Library::Aten] {
            for (kind, own) in self.kernels(library) {
                let key = |field: &str| format!("{prefix}.{}.{kind}.{field}", library.table());
                if let Some(memory) = own.memory {
                    check_range(path, &key("memory"), memory, 0.01..=1.0)?;
                }
                if let Some(compute) = own.compute {
                    check_range(path, &key("compute"), compute, 0.01..=1.0)?;
                }
                if let Some(blocks) = own.blocks_at_once {
                    check_range(path, &key("blocks_at_once"), blocks, 1.0..=1e6)?;
                }
                if let Some(l2) = own.l2 {
                    check_range(path, &key("l2"), l2, 0.01..=10.0)?;
                }
                for (field, rate) in [("row_rate", own.row_rate), ("block_rate", own.block_rate)] {
                    if rate.is_some_and(|rate| rate.0 == 0) {
                        return Err(ConfigError::invalid(path, key(field), "must be positive"));
                    }
                }
                if let Some(blocks) = own.blocks_per_sm {
                    check_range(path, &key("blocks_per_sm"), blocks, 1.0..=64.0)?;
                }
            }
        }
        Ok(())
    }
}

/// The compute table of the GPU `name` names in one layer's `table`.
pub(super) fn prior_compute(table: &toml::Table, name: &toml::Value) -> Result<toml::Table, String> {
    let name = name.as_str().ok_or_else(|| format!("expected a GPU's name, found {}", name.type_str()))?;
    match table.get("gpu").and_then(|g| g.get(name)).and_then(|g| g.get("compute")) {
        Some(toml::Value::Table(compute)) => Ok(compute.clone()),
        _ => Err(format!("no [gpu.{name}.compute] in the same file")),
    }
}

/// Gives every GPU of the merged model its whole compute table: a GPU's
/// own `compute` keys over those of the GPU it names in `compute_like`
/// (same die: same kernels, clocks and power behaviour, unless a
/// measurement of its own says otherwise), or over `compute_prior` where it
/// names none (the base file's `compute_prior`: its own table of one GPU,
/// before any fit). Done after every overlay is merged, so that what a fit
/// measures on one GPU reaches the GPUs of its die.
pub(super) fn resolve_compute(merged: &mut toml::Table, prior: toml::Table, path: &Path) -> ConfigResult<()> {
    let Some(toml::Value::Table(gpus)) = merged.get("gpu") else { return Ok(()) };
    let own = |name: &str| -> toml::Table {
        match gpus.get(name).and_then(|g| g.get("compute")) {
            Some(toml::Value::Table(compute)) => compute.clone(),
            _ => toml::Table::new(),
        }
    };
    let mut resolved = BTreeMap::new();
    for name in gpus.keys() {
        // Follow the chain of `compute_like` to its end, refusing loops.
        let mut chain = vec![name.clone()];
        let mut at = name.clone();
        while let Some(like) = gpus.get(&at).and_then(|g| g.get("compute_like")) {
            let key = format!("gpu.{at}.compute_like");
            let Some(like) = like.as_str() else {
                return Err(ConfigError::invalid(path, key, format!("expected a GPU's name, found {}", like.type_str())));
            };
            if !gpus.contains_key(like) {
                let known: Vec<&str> = gpus.keys().map(String::as_str).collect();
                return Err(ConfigError::invalid(path, key, format!("unknown GPU model {like:?}; known: {}", known.join(", "))));
            }
            if chain.iter().any(|seen| seen == like) {
                return Err(ConfigError::invalid(
                    path,
                    key,
                    format!("{like:?} leads back to {name:?}: a GPU's compute cannot be like itself"),
                ));
            }
            at = like.to_string();
            chain.push(at.clone());
        }
        let mut compute = prior.clone();
        for link in chain.iter().rev() {
            merge_tables(&mut compute, own(link));
        }
        resolved.insert(name.clone(), compute);
    }
    if let Some(toml::Value::Table(gpus)) = merged.get_mut("gpu") {
        for (name, compute) in resolved {
            if let Some(toml::Value::Table(gpu)) = gpus.get_mut(&name) {
                gpu.insert("compute".into(), toml::Value::Table(compute));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    use crate::config::hardware::{ModelSource, shipped};

    #[test]
    fn gpus_of_one_die_share_the_measured_compute_and_loops_are_refused() {
        let fitted = HardwareModel::load(&[shipped("h200-compute").unwrap(), shipped("h200-forward").unwrap()]).unwrap();
        let (h200, h100) = (&fitted.gpu["h200"].compute, &fitted.gpu["h100"].compute);
        assert_eq!((h100.matmul, h100.sustained), (h200.matmul, h200.sustained), "the H100 is the H200's die");
        assert_eq!(h200.sustained, 0.875, "the profiled forward's clock");
        // Another die takes the base file's H200 table, before any fit.
        assert_eq!(fitted.gpu["b200"].compute.sustained, 1.0);
        let looped = ModelSource::Text { label: "loop.toml".into(), text: "[gpu.h200]\ncompute_like = \"h100\"\n".into() };
        let error = HardwareModel::load(&[looped]).unwrap_err().to_string();
        assert!(error.contains("gpu.h200.compute_like") && error.contains("cannot be like itself"), "{error}");
    }
    use super::*;
    use crate::config::hardware::HardwareModel;

    #[test]
    fn measured_kernels_are_read_by_library_and_bad_values_named() {
        let mut compute = HardwareModel::base().gpu["h200"].compute.clone();
        compute.aten.insert("rms_norm".into(), KernelEfficiency { memory: Some(0.5), ..Default::default() });
        assert_eq!(compute.kernels(Library::Aten)["rms_norm"].memory, Some(0.5));
        assert!(!compute.kernels(Library::Fused).contains_key("rms_norm") || compute.kernel["rms_norm"].memory != Some(0.5));
        compute.validate(Path::new("m.toml"), "gpu.h200.compute").unwrap();
        compute.aten.insert("silu".into(), KernelEfficiency { l2: Some(20.0), ..Default::default() });
        let error = compute.validate(Path::new("m.toml"), "gpu.h200.compute").unwrap_err().to_string();
        assert!(error.contains("gpu.h200.compute.aten.silu.l2") && error.contains("0.01 to 10"), "{error}");
    }
}
