//! Every file icsim reads: serde types (raw, `deny_unknown_fields`) and their
//! validation into models, with errors that name the file, the key and what
//! is allowed. Nothing here simulates.

pub mod compute;
mod cta;
pub mod dotted;
pub mod experiment;
pub mod hardware;
mod hardware_checks;
pub mod llm;
mod nccl_model;
mod parts;
pub mod protocol;
pub mod storage;
pub mod topology;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A problem with an input file: which file, which key, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The I/O error is part of the message, not a separate cause, so that
    // it is printed once.
    #[error("cannot read {}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    #[error("{}: key `{key}`: {message}", path.display())]
    Invalid { path: PathBuf, key: String, message: String },
    /// A name (of an LLM, a hardware model) that is neither shipped nor a
    /// file; whoever read the name says where it was written.
    #[error("unknown {what} {name:?}: use one of {} or {otherwise}", known.join(", "))]
    UnknownName { what: &'static str, name: String, known: Vec<String>, otherwise: String },
    /// A name that is a folder where a file or a shipped name is expected;
    /// whoever read the name says where it was written.
    #[error(
        "{} is a directory, not {what}: give {what} .toml file{} or a shipped name ({})",
        path.display(),
        example.as_ref().map(|e| format!(" (such as {})", e.display())).unwrap_or_default(),
        known.join(", ")
    )]
    Directory { what: &'static str, path: PathBuf, example: Option<PathBuf>, known: Vec<String> },
}

impl ConfigError {
    pub fn invalid(path: impl Into<PathBuf>, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: path.into(), key: key.into(), message: message.into() }
    }

    /// Refuses `path`, given as `what` ("an LLM": a file, or one of the
    /// shipped names `known`), if it is a folder; gives an example of a
    /// `.toml` file in it.
    pub fn if_directory(path: &Path, what: &'static str, known: &[String]) -> ConfigResult<()> {
        if !path.is_dir() {
            return Ok(());
        }
        let tomls = std::fs::read_dir(path).into_iter().flatten().flatten().map(|entry| entry.path());
        let example = tomls.filter(|file| file.extension().is_some_and(|e| e == "toml")).min();
        Err(ConfigError::Directory { what, path: path.to_path_buf(), example, known: known.to_vec() })
    }

    /// The file this error is about, where it names one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigError::Io { path, .. } | ConfigError::Syntax { path, .. } | ConfigError::Invalid { path, .. } => Some(path),
            ConfigError::Directory { path, .. } => Some(path),
            ConfigError::UnknownName { .. } => None,
        }
    }

    /// Whether this error is a name that names nothing usable (unknown, or
    /// a folder): its reader's caller says where the name was written.
    pub fn is_misnamed(&self) -> bool {
        matches!(self, ConfigError::UnknownName { .. } | ConfigError::Directory { .. })
    }
}

pub type ConfigResult<T> = Result<T, ConfigError>;

/// Largest input file icsim reads: 64 MiB, a hundred times a 4,096-GPU
/// topology file; more is not an input (`/dev/zero`, a disk image).
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Reads a whole file of at most [`MAX_INPUT_BYTES`], naming it in the error.
pub fn read_text(path: &Path) -> ConfigResult<String> {
    use std::io::Read;
    let io = |error| ConfigError::Io { path: path.to_path_buf(), error };
    let mut text = String::new();
    std::fs::File::open(path).map_err(io)?.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(ConfigError::Syntax {
            path: path.to_path_buf(),
            message: format!("more than {} MiB: not an icsim input", MAX_INPUT_BYTES >> 20),
        });
    }
    Ok(text)
}

/// Parses TOML text into a raw config type; serde's message (which names the
/// unknown or missing key and, for a typo, the keys it expected) is kept.
pub fn parse_toml<T: DeserializeOwned>(path: &Path, text: &str) -> ConfigResult<T> {
    toml::from_str(text).map_err(|error| ConfigError::Syntax { path: path.to_path_buf(), message: one_line(&error.to_string()) })
}

/// Folds toml's multi-line error (with its source excerpt) into one line.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let excerpt_free: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with('|') && !l.chars().next().is_some_and(|c| c.is_ascii_digit() && l.contains('|')))
        .collect();
    excerpt_free.join("; ")
}

/// The one rule for whether a name a user wrote for a topology, an LLM or
/// a hardware model is a file rather than a shipped name: it ends in an
/// extension icsim reads (`.toml`, the `.txt` of `nvidia-smi topo -m`, the
/// `.xml` of NCCL's dump), has a folder in it, or is a file at `path` (the
/// name resolved from where it was written).
pub fn names_a_file(name: &str, path: &Path) -> bool {
    [".toml", ".txt", ".xml"].iter().any(|extension| name.ends_with(extension)) || name.contains('/') || path.is_file()
}

/// A path written in a file, resolved from that file's folder `base`: an
/// absolute path as it is, a relative one joined to `base` with `.` and
/// `..` folded away where they can be ("configs/../results" is "results").
pub fn relative_to(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let mut out = PathBuf::new();
    for part in base.join(path).components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if matches!(out.components().next_back(), Some(std::path::Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Merges `overlay` into `base`: tables merge key by key, anything else in
/// the overlay replaces the base value.
pub fn merge_tables(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(existing)), toml::Value::Table(incoming)) => merge_tables(existing, incoming),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Checks that a number lies in `range`, naming the key otherwise.
pub fn check_range(path: &Path, key: &str, value: f64, range: std::ops::RangeInclusive<f64>) -> ConfigResult<()> {
    if value.is_finite() && range.contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::invalid(path, key, format!("{} is out of range: allowed {} to {}", number(value), range.start(), range.end())))
    }
}

/// A number as a person writes it: `1e-300`, not three hundred digits.
pub fn number(value: f64) -> String {
    let size = value.abs();
    if size != 0.0 && !(1e-4..1e15).contains(&size) { format!("{value:e}") } else { value.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_resolved_from_the_file_that_names_them() {
        assert_eq!(relative_to(Path::new("configs"), Path::new("../results/x")), PathBuf::from("results/x"));
        assert_eq!(relative_to(Path::new("configs"), Path::new("topologies/a.toml")), PathBuf::from("configs/topologies/a.toml"));
        assert_eq!(relative_to(Path::new(""), Path::new("./a.toml")), PathBuf::from("a.toml"));
        assert_eq!(relative_to(Path::new("configs"), Path::new("/abs/a.toml")), PathBuf::from("/abs/a.toml"));
        assert_eq!(relative_to(Path::new("."), Path::new("../../x")), PathBuf::from("../../x"));
    }

    #[test]
    fn overlays_merge_deeply() {
        let mut base: toml::Table = "[a]\nx = 1\ny = 2\n[b]\nz = 3".parse().unwrap();
        let overlay: toml::Table = "[a]\ny = 20\n".parse().unwrap();
        merge_tables(&mut base, overlay);
        assert_eq!(base["a"]["x"].as_integer(), Some(1));
        assert_eq!(base["a"]["y"].as_integer(), Some(20));
        assert_eq!(base["b"]["z"].as_integer(), Some(3));
    }

    #[test]
    fn syntax_errors_fit_on_one_line_and_name_the_key() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Raw {
            gpus: u32,
        }
        let error = parse_toml::<Raw>(Path::new("x.toml"), "gpuz = 3").unwrap_err().to_string();
        assert!(error.starts_with("x.toml:") && error.contains("gpuz") && error.contains("gpus"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
