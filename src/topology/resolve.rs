//! What a user names as a topology (a preset with options, or a file in any
//! of the formats icsim reads) resolved into a built topology and the
//! hardware model it uses, with the user's overlays. Builds nothing itself:
//! presets, files and importers do.

use std::path::Path;

use super::import::ImportError;
use super::presets::PresetOptions;
use super::{PRESET_MODELS, PresetOption, Topology, TopologyError, build_from_file, import, preset};
use crate::config::hardware::{self, HardwareModel, ModelSource};
use crate::config::topology::TopologyFile;
use crate::config::{ConfigError, names_a_file, parse_toml, read_text};

/// Why what a user named as a topology could not be built: a file or an
/// overlay that cannot be read, an import that fails, or a topology that
/// cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

impl ResolveError {
    /// The preset option ([`TopologySpec::options`]) this error is about,
    /// if it is about one: its caller names its own flag or key for it.
    pub fn option(&self) -> Option<PresetOption> {
        match self {
            ResolveError::Topology(TopologyError::Option { option, .. })
            | ResolveError::Import(ImportError::UnknownPart { option, .. }) => Some(*option),
            _ => None,
        }
    }
}

/// What a user names as a topology: a preset with options, or a file.
#[derive(Debug, Clone, Default)]
pub struct TopologySpec {
    /// A preset name or the path of a topology file.
    pub name: String,
    pub options: PresetOptions,
    /// Extra hardware model overlays (shipped names or files), applied last.
    pub models: Vec<String>,
}

/// A model overlay named in a file or on the command line: a shipped model
/// by name, or a file (relative to `base_dir` if not absolute). A name that
/// is neither shipped nor a `.toml` path nor an existing file is refused,
/// listing the shipped ones, and so is a folder.
pub fn model_source(name: &str, base_dir: &Path) -> Result<ModelSource, ConfigError> {
    let path = crate::config::relative_to(base_dir, Path::new(name));
    let a_file = names_a_file(name, &path);
    if let Some(source) = hardware::shipped(name).filter(|_| !a_file) {
        return Ok(source);
    }
    let known: Vec<String> = hardware::shipped_names().map(String::from).collect();
    ConfigError::if_directory(&path, "a hardware model", &known)?;
    if a_file {
        Ok(ModelSource::File(path))
    } else {
        Err(ConfigError::UnknownName { what: "hardware model", name: name.to_string(), known, otherwise: "a model .toml file".into() })
    }
}

/// Every overlay of `names`, or the first unknown one.
pub fn model_sources(names: &[String], base_dir: &Path) -> Result<Vec<ModelSource>, ConfigError> {
    names.iter().map(|name| model_source(name, base_dir)).collect()
}

/// What a topology is built from, kept so that it can be built again under
/// another hardware model (a fit changes link rates and hop latencies).
#[derive(Debug, Clone)]
pub enum Blueprint {
    Preset { name: String, options: PresetOptions },
    File { path: std::path::PathBuf, raw: TopologyFile },
}

impl Blueprint {
    /// The topology under `model`.
    pub fn build(&self, model: &HardwareModel) -> Result<Topology, ResolveError> {
        match self {
            Blueprint::Preset { name, options } => Ok(preset(name, options, model)?),
            Blueprint::File { path, raw } => Ok(build_from_file(path, raw, model)?),
        }
    }
}

/// Builds the topology a user named, with the hardware model it uses
/// (the base, the preset's or file's calibrated overlays, then the user's).
/// A file is a TOML topology file, or, told by its content, the output of
/// `nvidia-smi topo -m` or NCCL's topology dump, imported first (with
/// `options.gpu` as the GPU model where given). An unknown overlay among
/// the user's (or a folder) is a [`ConfigError`] that
/// [`ConfigError::is_misnamed`], for the caller to name where it was
/// written; one in a topology file names the file.
pub fn resolve(spec: &TopologySpec) -> Result<(Topology, HardwareModel), ResolveError> {
    super::resolve_edited(spec, &super::Unchanged)
}

/// What [`resolve`] builds from, and the hardware model.
pub fn blueprint(spec: &TopologySpec) -> Result<(Blueprint, HardwareModel), ResolveError> {
    blueprint_with(spec, None)
}

/// [`blueprint`] with `last` as the last model overlay (a what-if change).
pub(super) fn blueprint_with(spec: &TopologySpec, last: Option<ModelSource>) -> Result<(Blueprint, HardwareModel), ResolveError> {
    let here = Path::new(".");
    let mut user = model_sources(&spec.models, here)?;
    user.extend(last);
    let path = Path::new(&spec.name);
    if names_a_file(&spec.name, path) {
        let text = read_text(path)?;
        let (raw, model) = match import::Format::detect(&text) {
            Some(format) => {
                // An imported file names no overlays: the base and the user's.
                let model = HardwareModel::load(&user)?;
                let options = import::ImportOptions { gpu: spec.options.gpu.clone(), host: spec.options.host.clone() };
                (import::parse(path, &text, format, &options, &model)?, model)
            }
            None => {
                let raw: TopologyFile = parse_toml(path, &text).map_err(|error| not_a_topology(path, &text, error))?;
                let base_dir = path.parent().unwrap_or(here);
                let mut overlays =
                    model_sources(&raw.models, base_dir).map_err(|unknown| ConfigError::invalid(path, "models", unknown.to_string()))?;
                overlays.extend(user);
                let model = HardwareModel::load(&overlays)?;
                (raw, model)
            }
        };
        let blueprint = Blueprint::File { path: path.to_path_buf(), raw };
        let topology = blueprint.build(&model)?;
        if let Some(gpus) = spec.options.gpus
            && (gpus as usize > topology.gpus().len() || gpus == 0)
        {
            return Err(PresetOption::Gpus
                .error(format!("{} has {} GPUs; --gpus must be 1 to {}", spec.name, topology.gpus().len(), topology.gpus().len()))
                .into());
        }
        return Ok((blueprint, model));
    }
    let mut overlays: Vec<ModelSource> = PRESET_MODELS
        .iter()
        .map(|name| hardware::shipped(name).unwrap_or_else(|| panic!("preset {} names model {name}, which is not shipped", spec.name)))
        .collect();
    overlays.extend(user);
    let model = HardwareModel::load(&overlays)?;
    let blueprint = Blueprint::Preset { name: spec.name.clone(), options: spec.options.clone() };
    blueprint.build(&model)?;
    Ok((blueprint, model))
}

/// What a file given as a topology that is neither an importable format nor
/// TOML is said to be: a `.toml` file keeps TOML's own message; any other
/// (a mangled `nvidia-smi topo -m` capture, an XML file) lists the three
/// formats a topology may be in.
fn not_a_topology(path: &Path, text: &str, toml_error: ConfigError) -> ConfigError {
    let written_as_toml = path.extension().is_some_and(|e| e == "toml");
    if written_as_toml {
        return toml_error;
    }
    let toml_message = match &toml_error {
        ConfigError::Syntax { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let first_line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let shown: String = first_line.chars().take(60).collect();
    ConfigError::Syntax {
        path: path.to_path_buf(),
        message: format!(
            "not a topology: expected a topology TOML file (here: {toml_message}), the output of `nvidia-smi topo -m` (a header row \
             starting with GPU0, then one row a GPU) or NCCL's topology dump (XML with a <system> root); it starts with {shown:?}"
        ),
    }
}
