//! NCCL's protocols (Simple, LL, LL128) by name: the keys the hardware
//! model's `[protocol.*]` and `[cta.*]` tables are written under. A plain
//! name, here so that the model files can be read and checked without the
//! collective layer; what a protocol does on the wire is `collective`'s.

use std::fmt;
use std::str::FromStr;

use super::hardware::{HardwareModel, Protocol as ProtocolModel};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Ll,
    Ll128,
    Simple,
}

pub const PROTOCOLS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Ll => "ll",
            Protocol::Ll128 => "ll128",
            Protocol::Simple => "simple",
        })
    }
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ll" => Ok(Protocol::Ll),
            "ll128" => Ok(Protocol::Ll128),
            "simple" => Ok(Protocol::Simple),
            other => Err(format!("unknown protocol {other:?}: use auto, simple, ll or ll128")),
        }
    }
}

impl Protocol {
    pub fn model(self, model: &HardwareModel) -> &ProtocolModel {
        match self {
            Protocol::Ll => &model.protocol.ll,
            Protocol::Ll128 => &model.protocol.ll128,
            Protocol::Simple => &model.protocol.simple,
        }
    }
}
