//! LLM model files (`models/llm/*.toml`): the shapes tensor parallelism and
//! the roofline need. A user adds a model by dropping a file beside them.

use std::path::{Path, PathBuf};

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
    fn an_unknown_model_lists_the_known_ones() {
        let error = LlmModel::load("llama-9").unwrap_err().to_string();
        assert!(error.contains("llama-3.1-70b"), "{error}");
    }
}
