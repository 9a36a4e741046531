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

use super::compute::Library;
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
    /// Most tokens a sequence may hold, prompt and output together.
    pub context_length: u64,
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
    /// How the rotary embedding runs when it is not fused with the cache
    /// write: one kernel (the default), or PyTorch's operators.
    #[serde(default)]
    pub rotary: Rotary,
    /// K and V written into the cache by one kernel (vLLM's
    /// reshape_and_cache); otherwise one copy kernel each.
    pub kv_write_one_kernel: bool,
    /// Whose kernels run the norms, adds, activations and copies: the
    /// engine's own fused kernels (`fused`, the default) or PyTorch's eager
    /// operators (`aten`); their measured rates are the hardware model's.
    #[serde(default)]
    pub kernels: Library,
    /// Which attention kernel runs: `dense` (the GPU's attention rates, as
    /// measured of PyTorch's SDPA over a batch of equal sequences) or
    /// `flash-varlen` (FlashAttention-2's kernel over every sequence of a
    /// continuously batched iteration, with the rates the hardware model
    /// gives `flash_varlen` of the fusion's library).
    #[serde(default)]
    pub attention: AttentionKernel,
}

/// How a framework applies the rotary embedding to Q and K.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rotary {
    /// One kernel rotates Q and K in place (vLLM's rotary_embedding).
    #[default]
    OneKernel,
    /// `x * cos + roll(x, head_dim / 2) * sin` over Q and K together, as
    /// PyTorch's operators run it: a multiply, a roll and an addcmul
    /// kernel (tools/serve_engine.py, `Model.rotary`).
    RollAddcmul,
}

/// The attention kernel a fusion runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionKernel {
    #[default]
    Dense,
    FlashVarlen,
}

impl Fusion {
    /// The name experiments use when they name none.
    pub const DEFAULT: &'static str = "vllm";

    /// The fusions of a model file that lists none: vLLM's kernels,
    /// PyTorch's one-op-at-a-time kernels, and those with a varlen
    /// attention kernel.
    pub fn builtin() -> BTreeMap<String, Fusion> {
        let vllm = Fusion {
            description: "vLLM: fused add+RMSNorm, SiLU-and-mul, one KV-cache write kernel; rotary apart".into(),
            add_norm: true,
            silu_mul: true,
            rope_kv_write: false,
            rotary: Rotary::OneKernel,
            kv_write_one_kernel: true,
            kernels: Library::Fused,
            attention: AttentionKernel::Dense,
        };
        let torch = Fusion {
            description: "PyTorch eager ops: every add, norm, activation and copy its own kernel".into(),
            add_norm: false,
            silu_mul: false,
            rope_kv_write: false,
            rotary: Rotary::OneKernel,
            kv_write_one_kernel: false,
            kernels: Library::Aten,
            attention: AttentionKernel::Dense,
        };
        let torch_varlen = Fusion {
            description: "PyTorch eager ops as `torch`, rotary as x * cos + roll(x) * sin, with FlashAttention-2's varlen kernel over every sequence of an iteration (a continuously batched engine: tools/serve_engine.py)".into(),
            attention: AttentionKernel::FlashVarlen,
            rotary: Rotary::RollAddcmul,
            ..torch.clone()
        };
        BTreeMap::from([("vllm".to_string(), vllm), ("torch".to_string(), torch), ("torch-varlen".to_string(), torch_varlen)])
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

/// Largest shape a model file may give (`hidden`, `heads`, `kv_heads`,
/// `ffn`, `vocab`): 2^20, over 30 times the widest published dense models
/// (Llama 3.1 405B: hidden 16,384, FFN 53,248). A bound keeps byte counts
/// (tokens x hidden x bytes) far from overflowing.
pub const MAX_DIMENSION: u64 = 1 << 20;
/// Most layers a model file may give: 2^12, over 30 times Llama 3.1 405B's 126.
pub const MAX_LAYERS: u64 = 1 << 12;
/// Longest context a model file may give: 2^24 tokens, over the longest
/// published (10M, Llama 4 Scout).
pub const MAX_CONTEXT: u64 = 1 << 24;
/// Element widths a model may use: fp8, bf16/fp16, fp32, fp64.
pub const DTYPE_WIDTHS: [u64; 4] = [1, 2, 4, 8];

impl LlmModel {
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// Bytes of one tensor-parallel allreduce over `tokens` tokens: a
    /// block's output, tokens x hidden activations.
    pub fn allreduce_bytes(&self, tokens: u64) -> crate::units::Bytes {
        crate::units::Bytes(tokens * self.hidden * self.dtype_bytes)
    }

    /// Bytes of KV cache one GPU holds for `batch` sequences of `tokens`
    /// tokens at TP=`tp`: keys and values of every layer for its share of
    /// the KV heads (one head where TP exceeds their number: replicated).
    pub fn kv_cache_bytes_per_gpu(&self, tokens: u64, batch: u64, tp: u32) -> u128 {
        let heads_per_gpu = self.kv_heads.div_ceil(u64::from(tp.max(1)));
        let per_token = 2 * u128::from(self.layers) * u128::from(heads_per_gpu * self.head_dim()) * u128::from(self.dtype_bytes);
        per_token * u128::from(tokens) * u128::from(batch)
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
        let known: Vec<String> = SHIPPED.iter().map(|(s, _)| s.to_string()).collect();
        ConfigError::if_directory(as_path, "an LLM", &known)?;
        let (path, text) = if super::names_a_file(name, as_path) {
            (as_path.to_path_buf(), read_text(as_path)?)
        } else if local.is_file() {
            let text = read_text(&local)?;
            (local, text)
        } else if let Some((stem, text)) = SHIPPED.iter().find(|(stem, _)| *stem == name) {
            (PathBuf::from(format!("models/llm/{stem}.toml")), text.to_string())
        } else {
            return Err(ConfigError::UnknownName { what: "LLM", name: name.to_string(), known, otherwise: "a model .toml file".into() });
        };
        LlmModel::parse(&path, &text)
    }

    /// Reads and checks a model file's text, read from `path` (which errors name).
    pub fn parse(path: &Path, text: &str) -> ConfigResult<LlmModel> {
        let model: LlmModel = parse_toml(path, text)?;
        model.validate(path)?;
        Ok(model)
    }

    fn validate(&self, path: &Path) -> ConfigResult<()> {
        for (key, value, most, why) in [
            ("hidden", self.hidden, MAX_DIMENSION, "2^20"),
            ("layers", self.layers, MAX_LAYERS, "2^12"),
            ("heads", self.heads, MAX_DIMENSION, "2^20"),
            ("kv_heads", self.kv_heads, MAX_DIMENSION, "2^20"),
            ("ffn", self.ffn, MAX_DIMENSION, "2^20"),
            ("vocab", self.vocab, MAX_DIMENSION, "2^20"),
            ("context_length", self.context_length, MAX_CONTEXT, "2^24 tokens"),
        ] {
            if !(1..=most).contains(&value) {
                return Err(ConfigError::invalid(
                    path,
                    key,
                    format!("{value} is out of range: allowed 1 to {most} ({why}, far beyond any published model)"),
                ));
            }
        }
        if !DTYPE_WIDTHS.contains(&self.dtype_bytes) {
            return Err(ConfigError::invalid(
                path,
                "dtype_bytes",
                format!("{} bytes is no element type: use 1 (fp8), 2 (bf16, fp16), 4 (fp32) or 8 (fp64)", self.dtype_bytes),
            ));
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
        assert!(error.contains("[fusion.tensorrt]") && error.contains("torch, torch-varlen, vllm"), "{error}");
        assert_eq!("layers".parse::<Scope>().unwrap(), Scope::Layers);
        assert!("all".parse::<Scope>().unwrap_err().contains("layers"));
    }

    #[test]
    fn an_unknown_model_lists_the_known_ones() {
        let error = LlmModel::load("llama-9").unwrap_err().to_string();
        assert!(error.contains("llama-3.1-70b"), "{error}");
    }

    #[test]
    fn shapes_out_of_range_name_the_file_and_the_key() {
        let dir = std::env::temp_dir().join(format!("icsim-llm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("odd.toml");
        let shipped = SHIPPED[0].1;
        for (from, to, key) in [
            ("heads = 32", "heads = 0", "heads"),
            ("hidden = 4096", "hidden = 4611686018427387904", "hidden"),
            ("dtype_bytes = 2", "dtype_bytes = 3", "dtype_bytes"),
            ("context_length = 131072", "context_length = 0", "context_length"),
        ] {
            std::fs::write(&file, shipped.replace(from, to)).unwrap();
            let error = LlmModel::load(file.to_str().unwrap()).unwrap_err().to_string();
            assert!(error.contains("odd.toml") && error.contains(&format!("key `{key}`")), "{error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
