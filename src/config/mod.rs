//! Every file icsim reads: serde types (raw, `deny_unknown_fields`) and their
//! validation into models, with errors that name the file, the key and what
//! is allowed. Nothing here simulates.

pub mod experiment;
pub mod hardware;
pub mod llm;
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
}

impl ConfigError {
    pub fn invalid(path: impl Into<PathBuf>, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: path.into(), key: key.into(), message: message.into() }
    }
}

pub type ConfigResult<T> = Result<T, ConfigError>;

/// Reads a whole file, naming it in the error.
pub fn read_text(path: &Path) -> ConfigResult<String> {
    std::fs::read_to_string(path).map_err(|error| ConfigError::Io { path: path.to_path_buf(), error })
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
        Err(ConfigError::invalid(path, key, format!("{value} is out of range: allowed {} to {}", range.start(), range.end())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
