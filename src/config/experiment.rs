//! The experiment file (`configs/*.toml`): one LLM query, a tensor-parallel
//! degree, and the transport modes to compare, each on its topology. Plain
//! serde data (`deny_unknown_fields`) and where it came from ([`Source`], to
//! name keys as the user wrote them); the workload resolves it into runs
//! (`workload::experiment::Experiment`: topologies built, TP degrees that
//! fit them). Builds and simulates nothing.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

/// The keys an experiment sets for every mode and a `[[mode]]` may set for
/// itself, listed once: `mode_keys!` declares each in both file structs
/// (so serde still names a mistyped or unknown key where it was written)
/// and in [`ModeKeys`], and [`RawMode::over`] merges them by one rule.
macro_rules! mode_keys {
    ($($(#[$doc:meta])* $key:ident: $type:ty,)*) => {
        /// The experiment file as written.
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawExperiment {
            #[serde(default)]
            pub description: String,
            /// A shipped LLM (`llama-3.1-70b`) or a model file.
            pub model: String,
            /// Where results and plots go, relative to the experiment file (default
            /// `results/<file stem>` under the current folder).
            pub output_dir: Option<PathBuf>,
            pub query: RawQuery,
            #[serde(rename = "mode", default)]
            pub modes: Vec<RawMode>,
            /// Drives, a weight load before the query, storage traffic during it.
            pub storage: Option<super::storage::RawStorage>,
            $($(#[$doc])* pub $key: Option<$type>,)*
        }

        /// One transport mode to compare; every other key overrides the
        /// experiment's for this mode only.
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawMode {
            pub transport: String,
            /// The row's name in tables and legends (default: the transport).
            pub label: Option<String>,
            $($(#[$doc])* pub $key: Option<$type>,)*
        }

        /// A mode's keys: its own where it sets them, else the experiment's.
        #[derive(Debug, Clone, Default)]
        pub struct ModeKeys {
            $(pub $key: Option<$type>,)*
        }

        /// Which of [`ModeKeys`] the mode set itself: an error names such a
        /// key as the mode's (`mode[1].tp`), any other as the experiment's.
        #[derive(Debug, Clone, Copy, Default)]
        pub struct SetByMode {
            $(pub $key: bool,)*
        }

        impl RawMode {
            /// This mode's keys over the experiment's.
            pub fn over(&self, experiment: &RawExperiment) -> (ModeKeys, SetByMode) {
                let keys = ModeKeys { $($key: self.$key.clone().or_else(|| experiment.$key.clone()),)* };
                (keys, SetByMode { $($key: self.$key.is_some(),)* })
            }
        }
    };
}

mode_keys! {
    /// Tensor-parallel degree: GPUs that share every layer (in the
    /// experiment, or in every mode).
    tp: u32,
    /// A preset or a topology file (relative to the experiment file; in the
    /// experiment, or in every mode).
    topology: String,
    /// Use the first N GPUs of the topology.
    gpus: u32,
    /// GPU model for the pcie-* presets.
    gpu: String,
    /// Host platform for the presets.
    host: String,
    /// Hardware model overlays (shipped names or files), applied last.
    models: Vec<String>,
    /// How allreduce algorithms are chosen: "nccl" (NCCL's tuner) or
    /// "fastest" (NCCL or the one-shot/two-shot kernels of inference engines,
    /// whichever is faster; the default).
    allreduce: String,
    /// Who issues the collectives and kernels: "nccl-graph" (the default),
    /// "torch-graph", "torch-eager" or "eager".
    stack: String,
    /// NCCL's channel count, forced as NCCL_MIN_NCHANNELS =
    /// NCCL_MAX_NCHANNELS would (default: NCCL's own choice).
    channels: u32,
    /// Which kernels run: "full" (the whole model, the default) or "layers"
    /// (the decoder layers as the shared torch forward ran them).
    scope: String,
    /// Which of the LLM file's fusions the kernels run as (default "vllm").
    fusion: String,
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

    #[test]
    fn a_modes_own_key_wins_and_the_experiment_fills_the_rest() {
        let experiment: RawExperiment = toml::from_str(
            "model = \"m\"\ntp = 8\nstack = \"eager\"\n[query]\nprompt = 1\noutput = 1\n[[mode]]\ntransport = \"shm\"\ntp = 4\ntopology = \"t\"\n",
        )
        .unwrap();
        let (keys, set) = experiment.modes[0].over(&experiment);
        assert_eq!((keys.tp, keys.topology.as_deref(), keys.stack.as_deref(), keys.gpus), (Some(4), Some("t"), Some("eager"), None));
        assert!(set.tp && set.topology && !set.stack && !set.gpus);
    }
}
