//! LLM model files (`models/llm/*.toml`): the shapes tensor parallelism and
//! the roofline need, and which kernels a framework fuses (`[fusion.NAME]`).
//! A user adds a model by dropping a file beside them. Also the scope of a
//! forward (`layers` or `full`), a plain choice read from experiments and
//! measurements.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ConfigResult, parse_toml, read_text};

/// Models shipped inside the binary, by file stem.
const SHIPPED: &[(&str, &str)] = &[
    ("llama-3.1-8b", include_str!("../../models/llm/llama-3.1-8b.toml")),
    ("llama-3.1-70b", include_str!("../../models/llm/llama-3.1-70b.toml")),
    ("llama-3.1-405b", include_str!("../../models/llm/llama-3.1-405b.toml")),
];

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LlmModel {
    pub name: String,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    /// Bytes per parameter and activation element (bf16: 2).
    pub dtype_bytes: u64,
    /// Which kernels each framework fuses, by name (`vllm`, `torch`); a
    /// file without any gets [`Fusion::builtin`]'s.
    #[serde(default = "Fusion::builtin")]
    pub fusion: BTreeMap<String, Fusion>,
}

/// Which kernels of a decoder layer a framework runs as one: each `true`
/// merges kernels (fewer launches, less traffic through memory).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fusion {
    /// What runs this way, for people.
    #[serde(default)]
    pub description: String,
    /// The residual add runs inside the RMSNorm that follows it (vLLM's
    /// fused_add_rms_norm); otherwise an add kernel, then a norm kernel.
    pub add_norm: bool,
    /// SiLU and the product with the up projection in one kernel (vLLM's
    /// silu_and_mul); otherwise a SiLU kernel, then a multiply kernel.
    pub silu_mul: bool,
    /// Rotary embedding applied and K, V written into the cache by one
    /// kernel; otherwise a rotary kernel, then the cache write.
    pub rope_kv_write: bool,
    /// K and V written into the cache by one kernel (vLLM's
    /// reshape_and_cache); otherwise one copy kernel each.
    pub kv_write_one_kernel: bool,
}

impl Fusion {
    /// The name experiments use when they name none.
    pub const DEFAULT: &'static str = "vllm";

    /// The fusions of a model file that lists none: vLLM's kernels and
    /// PyTorch's one-op-at-a-time kernels.
    pub fn builtin() -> BTreeMap<String, Fusion> {
        let vllm = Fusion {
            description: "vLLM: fused add+RMSNorm, SiLU-and-mul, one KV-cache write kernel; rotary apart".into(),
            add_norm: true,
            silu_mul: true,
            rope_kv_write: false,
            kv_write_one_kernel: true,
        };
        let torch = Fusion {
            description: "PyTorch eager ops: every add, norm, activation and copy its own kernel".into(),
            add_norm: false,
            silu_mul: false,
            rope_kv_write: false,
            kv_write_one_kernel: false,
        };
        BTreeMap::from([("vllm".to_string(), vllm), ("torch".to_string(), torch)])
    }
}

/// Which kernels of a forward are replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The decoder layers only, as the shared torch forward ran them: norms,
    /// QKV, attention, O, residual adds, gate/up, activation, down, the
    /// KV-cache write of a decode step and the allreduces; no rotary, no
    /// embedding, final norm, LM head or sampling.
    Layers,
    /// The whole model: also rotary, the KV-cache write of the prefill, and
    /// per step the embedding, the final norm, the LM head and sampling.
    #[default]
    Full,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Layers => "layers",
            Scope::Full => "full",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "layers" => Ok(Scope::Layers),
            "full" => Ok(Scope::Full),
            other => Err(format!("unknown scope {other:?}: use layers (the decoder layers as the shared forward ran them) or full")),
        }
    }
}

impl LlmModel {
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// Bytes of one tensor-parallel allreduce over `tokens` tokens: a
    /// block's output, tokens x hidden activations.
    pub fn allreduce_bytes(&self, tokens: u64) -> crate::units::Bytes {
        crate::units::Bytes(tokens * self.hidden * self.dtype_bytes)
    }

    /// Allreduces of one pass through every layer under tensor parallelism:
    /// one after attention and one after the MLP, in each layer.
    pub fn allreduces_per_pass(&self) -> u64 {
        2 * self.layers
    }

    /// Finds a model: a file path, a file `models/llm/NAME.toml` under the
    /// current folder, or a shipped model.
    pub fn load(name: &str) -> ConfigResult<LlmModel> {
        let as_path = Path::new(name);
        let local = PathBuf::from("models/llm").join(format!("{name}.toml"));
        let (path, text) = if name.ends_with(".toml") || as_path.is_file() {
            (as_path.to_path_buf(), read_text(as_path)?)
        } else if local.is_file() {
            let text = read_text(&local)?;
            (local, text)
        } else if let Some((stem, text)) = SHIPPED.iter().find(|(stem, _)| *stem == name) {
            (PathBuf::from(format!("models/llm/{stem}.toml")), text.to_string())
        } else {
            let known: Vec<&str> = SHIPPED.iter().map(|(s, _)| *s).collect();
            return Err(ConfigError::invalid(
                "model",
                "model",
                format!("unknown model {name:?}: use one of {} or a path to a model .toml file", known.join(", ")),
            ));
        };
        let model: LlmModel = parse_toml(&path, &text)?;
        model.validate(&path)?;
        Ok(model)
    }

    fn validate(&self, path: &Path) -> ConfigResult<()> {
        for (key, value) in [
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn", self.ffn),
            ("dtype_bytes", self.dtype_bytes),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(path, key, "must be a positive integer"));
            }
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(ConfigError::invalid(path, "heads", format!("hidden {} must be a multiple of heads {}", self.hidden, self.heads)));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(ConfigError::invalid(
                path,
                "kv_heads",
                format!("heads {} must be a multiple of kv_heads {}", self.heads, self.kv_heads),
            ));
        }
        Ok(())
    }

    /// The fusion called `name`, or an error listing the model's.
    pub fn fusion(&self, name: &str) -> Result<&Fusion, String> {
        self.fusion.get(name).ok_or_else(|| {
            format!("model {} has no [fusion.{name}]; it has: {}", self.name, self.fusion.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    /// Heads of each kind one GPU holds at tensor parallelism `tp` (KV heads
    /// are replicated when there are fewer than GPUs).
    pub fn heads_per_gpu(&self, tp: u64) -> (u64, u64) {
        (self.heads / tp, (self.kv_heads / tp).max(1))
    }

    pub fn shipped_names() -> impl Iterator<Item = &'static str> {
        SHIPPED.iter().map(|(s, _)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_models_load() {
        for name in LlmModel::shipped_names() {
            let model = LlmModel::load(name).unwrap();
            assert_eq!(model.head_dim(), 128, "{name}");
        }
    }

    #[test]
    fn shipped_models_name_their_fusions_and_files_without_get_the_builtin_ones() {
        for name in LlmModel::shipped_names() {
            let model = LlmModel::load(name).unwrap();
            assert_eq!(model.fusion, Fusion::builtin(), "{name}");
        }
        let model = LlmModel::load("llama-3.1-8b").unwrap();
        let error = model.fusion("tensorrt").unwrap_err();
        assert!(error.contains("[fusion.tensorrt]") && error.contains("torch, vllm"), "{error}");
        assert_eq!("layers".parse::<Scope>().unwrap(), Scope::Layers);
        assert!("all".parse::<Scope>().unwrap_err().contains("layers"));
    }

    #[test]
    fn an_unknown_model_lists_the_known_ones() {
        let error = LlmModel::load("llama-9").unwrap_err().to_string();
        assert!(error.contains("llama-3.1-70b"), "{error}");
    }
}
