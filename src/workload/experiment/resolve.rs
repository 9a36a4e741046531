//! An experiment file's data resolved into runs: the LLM loaded, the query
//! checked against its context and the GPUs' memory, every mode's topology
//! built with its hardware model, TP degrees that fit them, and the
//! `[storage]` section resolved. Errors name the file (or the command
//! line), the key and what is allowed. Simulates nothing; whether a
//! transport can serve a topology is checked when a mode is set up
//! ([`super::prepare`]).

use std::path::{Path, PathBuf};

use crate::collective::Selection;
use crate::config::experiment::{MAX_CHANNELS, RawExperiment, RawMode, RawQuery, Source};
use crate::config::hardware::HardwareModel;
use crate::config::llm::{Fusion, LlmModel, Scope};
use crate::config::{ConfigError, ConfigResult, parse_toml, read_text, relative_to};
use crate::stack::Stack;
use crate::topology::{self, Edit, PresetOption, PresetOptions, ResolveError, Topology, TopologySpec};
use crate::transport::Mode;
use crate::workload::storage::shard_bytes;
use crate::workload::storage::spec::{StorageSpec, check_fits};
use crate::workload::tp::{self, Query};

/// One mode of a validated experiment, on its built topology.
#[derive(Debug, Clone)]
pub struct ModeRun {
    pub label: String,
    pub mode: Mode,
    pub topology: Topology,
    pub hardware: HardwareModel,
    pub tp: u32,
    /// How allreduce algorithms are chosen.
    pub selection: Selection,
    /// Who issues the collectives and kernels.
    pub stack: Stack,
    /// NCCL's channel count where forced.
    pub channels: Option<u32>,
    /// Which kernels of the forward run.
    pub scope: Scope,
    /// The name of the LLM file's fusion the kernels run as.
    pub fusion: String,
    /// Position in the file's `[[mode]]` list, for messages.
    pub index: usize,
}

/// A validated experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub source: Source,
    pub description: String,
    pub llm: LlmModel,
    pub query: Query,
    pub output_dir: Option<PathBuf>,
    pub modes: Vec<ModeRun>,
    pub storage: Option<StorageSpec>,
}

impl Experiment {
    /// Reads and validates an experiment file.
    pub fn load(path: &Path) -> ConfigResult<Experiment> {
        Experiment::parse(path, &read_text(path)?)
    }

    /// Validates experiment text that was read from `path`.
    pub fn parse(path: &Path, text: &str) -> ConfigResult<Experiment> {
        Experiment::parse_edited(path, text, |_| {}, &topology::Unchanged)
    }

    /// [`Experiment::parse`] with what-if changes: `change` to the file as
    /// read, `edit` to every mode's hardware model and topology.
    pub fn parse_edited(path: &Path, text: &str, change: impl FnOnce(&mut RawExperiment), edit: &dyn Edit) -> ConfigResult<Experiment> {
        let mut raw: RawExperiment = parse_toml(path, text)?;
        change(&mut raw);
        let default_output = PathBuf::from("results").join(path.file_stem().unwrap_or_default());
        let mut experiment = Experiment::resolve_edited(raw, Source::File(path.to_path_buf()), edit)?;
        experiment.output_dir.get_or_insert(default_output);
        Ok(experiment)
    }

    /// Validates a raw experiment (from a file or from flags).
    pub fn resolve(raw: RawExperiment, source: Source) -> ConfigResult<Experiment> {
        Experiment::resolve_edited(raw, source, &topology::Unchanged)
    }

    /// [`Experiment::resolve`] with a what-if change to every mode's
    /// hardware model and topology.
    pub fn resolve_edited(raw: RawExperiment, source: Source, edit: &dyn Edit) -> ConfigResult<Experiment> {
        let model_name = source.file_or_name(&raw.model);
        let llm = LlmModel::load(&model_name).map_err(|error| match error {
            // The model file's own errors name it; one that cannot be read is the experiment's key.
            unknown if unknown.is_misnamed() || matches!(unknown, ConfigError::Io { .. }) => {
                source.invalid(None, "model", unknown.to_string())
            }
            other => other,
        })?;
        let query = Query { prompt: raw.query.prompt, output: raw.query.output, batch: raw.query.batch };
        for (name, value) in [("query.prompt", query.prompt), ("query.batch", query.batch)] {
            if value == 0 {
                return Err(source.invalid(None, name, "must be a positive number of tokens or sequences"));
            }
        }
        let tokens = query.prompt.saturating_add(query.output);
        if tokens > llm.context_length {
            let name = if query.prompt > llm.context_length { "query.prompt" } else { "query.output" };
            return Err(source.invalid(
                None,
                name,
                format!(
                    "{} prompt + {} output tokens is more than {}'s context of {} tokens (context_length in its model file)",
                    query.prompt, query.output, llm.name, llm.context_length
                ),
            ));
        }
        if raw.modes.is_empty() {
            return Err(source.invalid(
                None,
                "mode",
                "no transport mode to compare: add one or more [[mode]] tables with transport = \"nvswitch\", \"nvlink\", \"p2p\", \"shm\" or \"auto\"",
            ));
        }
        let mut modes: Vec<ModeRun> = Vec::new();
        for (index, raw_mode) in raw.modes.iter().enumerate() {
            let run = resolve_mode(&raw, raw_mode, index, &llm, &source, edit)?;
            if let Some(other) = modes.iter().find(|m| m.label == run.label) {
                return Err(source.invalid(
                    Some(index),
                    "label",
                    format!(
                        "label {:?} is already used by mode[{}]; give each mode a unique `label` (for example \"{}-{}\")",
                        run.label, other.index, run.mode, run.topology.name
                    ),
                ));
            }
            modes.push(run);
        }
        let storage = raw.storage.as_ref().map(|s| StorageSpec::resolve(s, &source)).transpose()?;
        if let Some(spec) = &storage {
            if spec.kv_offload.is_some() && query.output == 0 {
                return Err(source.invalid(
                    None,
                    "storage.kv_offload",
                    "the KV cache is written out while decode runs: set query.output to 1 or more",
                ));
            }
            for run in &mut modes {
                run.topology = spec.layout.apply(&run.topology, &run.hardware).map_err(|(key, message)| {
                    source.invalid(None, key, format!("mode[{}] on {}: {message}", run.index, run.topology.name))
                })?;
                check_fits(spec, &llm, run).map_err(|(key, message)| source.invalid(None, key, message))?;
            }
        }
        if raw.output_dir.as_ref().is_some_and(|dir| dir.as_os_str().is_empty()) {
            return Err(source.invalid(
                None,
                "output_dir",
                "is empty: name the folder for results, or leave the key out for results/<file name>",
            ));
        }
        let output_dir = raw.output_dir.as_deref().map(|dir| relative_to(&source.base_dir(), dir));
        Ok(Experiment { source, description: raw.description, llm, query, output_dir, modes, storage })
    }
}

fn resolve_mode(
    raw: &RawExperiment,
    mode: &RawMode,
    index: usize,
    llm: &LlmModel,
    source: &Source,
    edit: &dyn Edit,
) -> ConfigResult<ModeRun> {
    // A key this mode overrides is named as the mode's; otherwise as the
    // experiment's default.
    let owner = |overridden: bool| overridden.then_some(index);
    if mode.label.as_ref().is_some_and(|label| label.trim().is_empty()) {
        return Err(source.invalid(
            Some(index),
            "label",
            "is empty: name the mode's row, or leave the key out to name it by its transport",
        ));
    }
    let transport: Mode = mode.transport.parse().map_err(|message: String| source.invalid(Some(index), "transport", message))?;
    let (keys, set) = mode.over(raw);
    let unset =
        |name: &str, what: &str| source.invalid(Some(index), name, format!("is not set: give {what} in the experiment or in this mode"));
    let topology_name = keys.topology.ok_or_else(|| unset("topology", "a preset or a topology file"))?;
    let tp = keys.tp.ok_or_else(|| unset("tp", "the tensor-parallel degree"))?;
    let (gpus, gpu, host) = (keys.gpus, keys.gpu, keys.host);
    let models = keys.models.unwrap_or_default();
    let selection: Selection = match &keys.allreduce {
        Some(text) => text.parse().map_err(|message: String| source.invalid(owner(set.allreduce), "allreduce", message))?,
        None => Selection::Fastest,
    };
    let stack: Stack = match &keys.stack {
        Some(text) => text.parse().map_err(|message: String| source.invalid(owner(set.stack), "stack", message))?,
        None => Stack::default(),
    };
    let scope: Scope = match &keys.scope {
        Some(text) => text.parse().map_err(|message: String| source.invalid(owner(set.scope), "scope", message))?,
        None => Scope::default(),
    };
    let fusion = keys.fusion.unwrap_or_else(|| Fusion::DEFAULT.to_string());
    llm.fusion(&fusion).map_err(|message| source.invalid(owner(set.fusion), "fusion", message))?;
    let channels = keys.channels;
    if let Some(count) = channels
        && !(1..=MAX_CHANNELS).contains(&count)
    {
        return Err(source.invalid(
            owner(set.channels),
            "channels",
            format!("{count} channels: NCCL runs 1 to {MAX_CHANNELS} (NCCL_MAX_NCHANNELS)"),
        ));
    }

    // Files named in the experiment are read relative to its folder.
    let name = source.file_or_name(&topology_name);
    let models: Vec<String> = models.iter().map(|m| source.file_or_name(m)).collect();
    let spec = TopologySpec { name, options: PresetOptions { gpus, gpu: gpu.clone(), host: host.clone() }, models: models.clone() };
    let (topology, hardware) = topology::resolve_edited(&spec, edit).map_err(|error| {
        let key = match &error {
            // A misnamed overlay, or one whose file is at fault, is the experiment's `models`.
            ResolveError::Config(overlay)
                if overlay.is_misnamed() || overlay.path().is_some_and(|path| models.iter().any(|m| Path::new(m) == path)) =>
            {
                source.key(owner(set.models), "models")
            }
            _ => match error.option() {
                Some(PresetOption::Gpus) => source.key(owner(set.gpus), "gpus"),
                Some(PresetOption::Gpu) => source.key(owner(set.gpu), "gpu"),
                Some(PresetOption::Host) => source.key(owner(set.host), "host"),
                None => source.key(owner(set.topology), "topology"),
            },
        };
        ConfigError::invalid(source.path(), key, error.to_string())
    })?;

    tp::check_degree(llm, tp, &topology).map_err(|error| source.invalid(owner(set.tp), "tp", error.to_string()))?;
    let allowed = tp::allowed_degrees(llm, topology.gpus().len() as u32);
    check_weights(llm, tp, &allowed, &topology, &hardware).map_err(|message| source.invalid(owner(set.tp), "tp", message))?;
    check_kv_cache(&raw.query, llm, tp, &topology, &hardware).map_err(|message| source.invalid(None, "query.batch", message))?;
    Ok(ModeRun {
        label: mode.label.clone().unwrap_or_else(|| transport.to_string()),
        mode: transport,
        topology,
        hardware,
        tp,
        selection,
        stack,
        channels,
        scope,
        fusion,
        index,
    })
}

/// One GPU's shard of the weights must fit in its memory, with room left.
/// `allowed` are the TP degrees the topology can run the model at.
fn check_weights(llm: &LlmModel, tp: u32, allowed: &[u32], topology: &Topology, hardware: &HardwareModel) -> Result<(), String> {
    let gpu = hardware.gpu(&topology.gpu_model)?;
    let fits = |tp: u32| shard_bytes(llm, u64::from(tp)) < gpu.memory;
    let weights = shard_bytes(llm, u64::from(tp));
    if fits(tp) {
        return Ok(());
    }
    let advice = allowed.iter().find(|&&t| fits(t)).map_or_else(
        || format!("no TP that {} allows holds them: use a topology with more GPUs", topology.name),
        |t| format!("use a TP of at least {t}"),
    );
    Err(format!(
        "{}'s weights take {:.1} GB on each GPU at TP={tp}, more than a {} holds ({:.1} GB); {advice}",
        llm.name,
        weights.as_f64() / 1e9,
        gpu.name,
        gpu.memory.as_f64() / 1e9
    ))
}

/// The KV cache of the query's sequences must fit in the memory each GPU
/// has left beside its shard of the weights (activations and the
/// framework's workspace are not counted: a loose bound that keeps batches
/// physical).
fn check_kv_cache(query: &RawQuery, llm: &LlmModel, tp: u32, topology: &Topology, hardware: &HardwareModel) -> Result<(), String> {
    let gpu = hardware.gpu(&topology.gpu_model)?;
    let left = u128::from(gpu.memory.0.saturating_sub(shard_bytes(llm, u64::from(tp)).0));
    let tokens = query.prompt.saturating_add(query.output);
    let needed = llm.kv_cache_bytes_per_gpu(tokens, query.batch, tp);
    if needed <= left {
        return Ok(());
    }
    let per_sequence = llm.kv_cache_bytes_per_gpu(tokens, 1, tp).max(1);
    Err(format!(
        "{} sequences of {tokens} tokens need {:.1} GB of KV cache on each GPU at TP={tp}, more than a {} has left beside its weights ({:.1} of {:.1} GB); at most {} fit",
        query.batch,
        needed as f64 / 1e9,
        gpu.name,
        left as f64 / 1e9,
        gpu.memory.as_f64() / 1e9,
        left / per_sequence
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
model = "llama-3.1-70b"
tp = 8
topology = "hgx-h20"
[query]
prompt = 8192
output = 256
[[mode]]
transport = "nvswitch"
[[mode]]
transport = "p2p"
topology = "pcie-gen4-8gpu"
gpu = "h20"
"#;

    fn error_of(text: &str) -> String {
        Experiment::parse(Path::new("exp.toml"), text).unwrap_err().to_string()
    }

    #[test]
    fn a_mode_overrides_only_what_it_names() {
        let experiment = Experiment::parse(Path::new("configs/exp.toml"), GOOD).unwrap();
        assert_eq!(experiment.query, Query { prompt: 8192, output: 256, batch: 1 });
        assert_eq!(experiment.output_dir, Some(PathBuf::from("results/exp")), "the default is under the current folder");
        let written =
            Experiment::parse(Path::new("configs/exp.toml"), &GOOD.replace("tp = 8", "tp = 8\noutput_dir = \"../out/x\"")).unwrap();
        assert_eq!(written.output_dir, Some(PathBuf::from("out/x")), "a written one is relative to the file");
        let [nvswitch, p2p] = &experiment.modes[..] else { panic!("two modes") };
        assert_eq!((nvswitch.label.as_str(), nvswitch.topology.name.as_str(), nvswitch.tp), ("nvswitch", "hgx-h20", 8));
        assert_eq!((p2p.mode, p2p.topology.name.as_str(), p2p.topology.gpu_model.as_str()), (Mode::P2p, "pcie-gen4-8gpu", "h20"));
    }

    #[test]
    fn a_typo_names_the_key_and_the_expected_ones() {
        let error = error_of(&GOOD.replace("prompt =", "promt ="));
        assert!(error.starts_with("exp.toml:") && error.contains("promt") && error.contains("prompt"), "{error}");
    }

    #[test]
    fn tp_larger_than_the_gpus_lists_the_allowed_degrees() {
        let error = error_of(&GOOD.replace("tp = 8", "tp = 16"));
        assert!(error.contains("key `tp`") && error.contains("allowed: 1, 2, 4, 8"), "{error}");
        let error = error_of(&GOOD.replace("gpu = \"h20\"", "gpu = \"h20\"\ngpus = 4"));
        assert!(error.contains("key `tp`") && error.contains("4 GPUs") && error.contains("allowed: 1, 2, 4"), "{error}");
        let error = error_of(&GOOD.replace("gpu = \"h20\"", "gpu = \"h20\"\ntp = 3"));
        assert!(error.contains("key `mode[1].tp`") && error.contains("TP=3"), "{error}");
    }

    #[test]
    fn unknown_models_transports_and_topologies_say_what_is_allowed() {
        let error = error_of(&GOOD.replace("llama-3.1-70b", "llama-9b"));
        assert!(error.contains("key `model`") && error.contains("llama-3.1-8b"), "{error}");
        let error = error_of(&GOOD.replace("\"p2p\"", "\"pcie\""));
        assert!(error.contains("key `mode[1].transport`") && error.contains("nvswitch"), "{error}");
        let error = error_of(&GOOD.replace("\"pcie-gen4-8gpu\"", "\"pcie-gen9\""));
        assert!(error.contains("key `mode[1].topology`") && error.contains("pcie-gen4-8gpu"), "{error}");
        let error = error_of(&GOOD.replace("tp = 8", "tp = 8\nmodels = [\"h200x9\"]"));
        assert!(error.contains("key `models`") && error.contains("h200-fit"), "{error}");
    }

    #[test]
    fn queries_and_weights_must_fit_the_context_and_the_gpus_memory() {
        let error = error_of(&GOOD.replace("prompt = 8192", "prompt = 10000000"));
        assert!(error.contains("key `query.prompt`") && error.contains("131072"), "{error}");
        let error = error_of(&GOOD.replace("output = 256", "output = 100000000"));
        assert!(error.contains("key `query.output`") && error.contains("context"), "{error}");
        let error = error_of(&GOOD.replace("output = 256", "output = 256\nbatch = 2147483648"));
        assert!(error.contains("key `query.batch`") && error.contains("KV cache") && error.contains("(78.4 of 96.0 GB)"), "{error}");
        // Llama-3.1-70B at TP=8: 17,640,734,720 B of weights a GPU (an eighth of
        // every matrix and all norms) leave 78,359,265,280 B of the H20's 96 GB;
        // one KV head a GPU is 40 KiB a token, so 226 sequences of 8448 tokens fit.
        assert!(error.contains("at most 226 fit"), "{error}");
        let error = error_of(&GOOD.replace("tp = 8", "tp = 1"));
        assert!(error.contains("key `tp`") && error.contains("141.1 GB") && error.contains("at least 2"), "{error}");
    }

    #[test]
    fn scope_and_fusion_are_read_and_checked_against_the_model() {
        let experiment =
            Experiment::parse(Path::new("e.toml"), &GOOD.replace("tp = 8\n", "tp = 8\nscope = \"layers\"\nfusion = \"torch\"\n")).unwrap();
        assert!(experiment.modes.iter().all(|m| m.scope == Scope::Layers && m.fusion == "torch"));
        let defaults = Experiment::parse(Path::new("e.toml"), GOOD).unwrap();
        assert!(defaults.modes.iter().all(|m| m.scope == Scope::Full && m.fusion == "vllm"));
        let error = error_of(&GOOD.replace("tp = 8\n", "tp = 8\nscope = \"everything\"\n"));
        assert!(error.contains("key `scope`") && error.contains("layers"), "{error}");
        let error = error_of(&GOOD.replace("gpu = \"h20\"", "gpu = \"h20\"\nfusion = \"sglang\""));
        assert!(error.contains("key `mode[1].fusion`") && error.contains("torch, torch-varlen, vllm"), "{error}");
    }

    #[test]
    fn a_topology_error_names_the_key_its_data_is_about() {
        let error = error_of(&GOOD.replace("gpu = \"h20\"", "gpu = \"h20\"\ngpus = 9"));
        assert!(error.contains("key `mode[1].gpus`") && error.contains("--gpus must be 1 to 8"), "{error}");
        let error = error_of(&GOOD.replace("gpu = \"h20\"", "gpu = \"h21\""));
        assert!(error.contains("key `mode[1].gpu`") && error.contains("unknown GPU model \"h21\""), "{error}");
        let error = error_of(&GOOD.replace("tp = 8", "tp = 8\nhost = \"epyc-9\""));
        assert!(error.contains("key `host`") && error.contains("unknown host platform"), "{error}");
        // An overlay file that cannot be read is the `models` key's, not the topology's.
        let error = error_of(&GOOD.replace("tp = 8", "tp = 8\nmodels = [\"missing.toml\"]"));
        assert!(error.contains("key `models`") && error.contains("cannot read missing.toml"), "{error}");
    }

    #[test]
    fn a_captured_topology_is_read_beside_the_experiment() {
        let text = GOOD.replace("tp = 8\ntopology = \"hgx-h20\"", "tp = 2\ntopology = \"nvidia-smi-topo-h200x2.txt\"");
        let experiment = Experiment::parse(Path::new("tests/data/exp.toml"), &text.replace("gpu = \"h20\"", "")).unwrap();
        let topology = &experiment.modes[0].topology;
        assert_eq!((topology.name.as_str(), topology.gpus().len()), ("nvidia-smi-topo-h200x2", 2));
        // The GPU the capture is read as is the `gpu` key's.
        let named_gpu = text.replace("tp = 2\n", "tp = 2\ngpu = \"h21\"\n");
        let error = Experiment::parse(Path::new("tests/data/exp.toml"), &named_gpu).unwrap_err().to_string();
        assert!(error.contains("key `gpu`") && error.contains("unknown GPU model \"h21\""), "{error}");
        // Named from the current folder, where it is not.
        let error = error_of(&text);
        assert!(error.contains("key `topology`") && error.contains("cannot read nvidia-smi-topo-h200x2.txt"), "{error}");
    }

    #[test]
    fn labels_must_be_unique() {
        let error = error_of(&GOOD.replace("\"p2p\"", "\"nvswitch\""));
        assert!(error.contains("mode[1].label") && error.contains("unique"), "{error}");
    }
}
