//! The experiment file (`configs/*.toml`): one LLM query, a tensor-parallel
//! degree, and the transport modes to compare, each on its topology. Plain
//! serde data (`deny_unknown_fields`) and where it came from ([`Source`], to
//! name keys as the user wrote them); the workload resolves it into runs
//! (`workload::experiment::Experiment`: topologies built, TP degrees that
//! fit them). Builds and simulates nothing.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

/// The experiment file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExperiment {
    #[serde(default)]
    pub description: String,
    /// A shipped LLM (`llama-3.1-70b`) or a model file.
    pub model: String,
    /// Tensor-parallel degree: GPUs that share every layer.
    pub tp: u32,
    /// Where results and plots go, relative to the experiment file (default
    /// `results/<file stem>` under the current folder).
    pub output_dir: Option<PathBuf>,
    /// A preset or a topology file (relative to the experiment file).
    pub topology: String,
    /// Use the first N GPUs of the topology.
    pub gpus: Option<u32>,
    /// GPU model for the pcie-* presets.
    pub gpu: Option<String>,
    /// Host platform for the presets.
    pub host: Option<String>,
    /// Hardware model overlays (shipped names or files), applied last.
    #[serde(default)]
    pub models: Vec<String>,
    /// How allreduce algorithms are chosen: "nccl" (NCCL's tuner) or
    /// "fastest" (NCCL or the one-shot/two-shot kernels of inference engines,
    /// whichever is faster; the default).
    pub allreduce: Option<String>,
    /// Who issues the collectives and kernels: "nccl-graph" (the default),
    /// "torch-graph", "torch-eager" or "eager".
    pub stack: Option<String>,
    /// NCCL's channel count, forced as NCCL_MIN_NCHANNELS =
    /// NCCL_MAX_NCHANNELS would (default: NCCL's own choice).
    pub channels: Option<u32>,
    /// Which kernels run: "full" (the whole model, the default) or "layers"
    /// (the decoder layers as the shared torch forward ran them).
    pub scope: Option<String>,
    /// Which of the LLM file's fusions the kernels run as (default "vllm").
    pub fusion: Option<String>,
    pub query: RawQuery,
    #[serde(rename = "mode", default)]
    pub modes: Vec<RawMode>,
    /// Drives, a weight load before the query, storage traffic during it.
    pub storage: Option<super::storage::RawStorage>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuery {
    pub prompt: u64,
    pub output: u64,
    #[serde(default = "one")]
    pub batch: u64,
}

fn one() -> u64 {
    1
}

/// One transport mode to compare; every other key overrides the
/// experiment's default for this mode only.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMode {
    pub transport: String,
    /// The row's name in tables and legends (default: the transport).
    pub label: Option<String>,
    pub topology: Option<String>,
    pub gpus: Option<u32>,
    pub gpu: Option<String>,
    pub host: Option<String>,
    pub models: Option<Vec<String>>,
    pub tp: Option<u32>,
    pub allreduce: Option<String>,
    pub stack: Option<String>,
    pub channels: Option<u32>,
    pub scope: Option<String>,
    pub fusion: Option<String>,
}

/// Most channels NCCL runs a collective on (MAXCHANNELS).
pub const MAX_CHANNELS: u32 = 64;

/// Where an experiment came from, to name keys the way the user wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    /// `icsim llm` flags: keys are named as flags (`--tp`).
    CommandLine,
}

impl Source {
    /// What error messages name as the file.
    pub fn path(&self) -> PathBuf {
        match self {
            Source::File(path) => path.clone(),
            Source::CommandLine => PathBuf::from("command line"),
        }
    }

    /// A key as the user wrote it: `mode[2].tp` or `query.prompt` in a
    /// file, `--tp` or `--prompt` on the command line.
    pub fn key(&self, mode: Option<usize>, name: &str) -> String {
        match (self, mode) {
            (Source::File(_), Some(index)) => format!("mode[{index}].{name}"),
            (Source::File(_), None) => name.to_string(),
            // Overlays are `models` in a file and `--hardware` on the command line.
            (Source::CommandLine, _) if name == "models" => "--hardware".into(),
            // `[storage]` is reached on the command line by `--set storage.<key>`.
            (Source::CommandLine, _) if name.starts_with("storage") => format!("--set {name}"),
            (Source::CommandLine, _) => format!("--{}", name.trim_start_matches("query.")),
        }
    }

    /// Relative topology files are read beside the experiment file.
    pub fn base_dir(&self) -> PathBuf {
        match self {
            Source::File(path) => path.parent().map(Path::to_path_buf).unwrap_or_default(),
            Source::CommandLine => PathBuf::new(),
        }
    }

    /// A name written in the experiment (a model, a topology, an
    /// overlay): a file ([`super::names_a_file`]) as its path from the
    /// experiment's folder, anything else as written.
    pub fn file_or_name(&self, name: &str) -> String {
        let path = super::relative_to(&self.base_dir(), Path::new(name));
        if super::names_a_file(name, &path) { path.display().to_string() } else { name.to_string() }
    }

    pub fn invalid(&self, mode: Option<usize>, name: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.path(), self.key(mode, name), message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_keys_are_flags() {
        assert_eq!(Source::CommandLine.key(Some(0), "tp"), "--tp");
        assert_eq!(Source::CommandLine.key(None, "query.prompt"), "--prompt");
        assert_eq!(Source::File("x.toml".into()).key(Some(2), "gpu"), "mode[2].gpu");
    }
}
