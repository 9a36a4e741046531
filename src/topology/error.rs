//! Why a topology cannot be built or a path used, with the preset option an
//! error is about as data, for the caller to name its own flag or key.

/// Why a path could not be found or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("{0}")]
    NoPath(String),
    #[error("{0}")]
    Invalid(String),
    /// What a preset option asks for cannot be built (a GPU count the board
    /// does not have, a GPU or host the hardware model does not know);
    /// `option` says which, for the caller to name its own flag or key.
    #[error("{message}")]
    Option { option: PresetOption, message: String },
}

/// The options a user sets on a preset or an import ([`PresetOptions`]),
/// as data that an error can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresetOption {
    Gpus,
    Gpu,
    Host,
}

impl PresetOption {
    /// Its name as an experiment key (`gpus`) and, after `--`, a flag.
    pub fn key(self) -> &'static str {
        match self {
            PresetOption::Gpus => "gpus",
            PresetOption::Gpu => "gpu",
            PresetOption::Host => "host",
        }
    }

    /// An error about this option saying `message`.
    pub fn error(self, message: impl Into<String>) -> TopologyError {
        TopologyError::Option { option: self, message: message.into() }
    }
}
