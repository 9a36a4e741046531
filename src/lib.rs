//! icsim: a discrete-event simulator of the interconnect inside a GPU server.
//! The modules follow the data flow: units and config at the edge, a topology
//! graph, an engine that executes task graphs over a flow network, transports
//! and collectives that generate those task graphs, and reports. The core
//! they stand on (units, the engine, the flow network) is the icsim-core
//! crate, re-exported here under its old paths, so that nothing in it can
//! reach up into the model. The GPU runner's FFI is the icsim-gpu crate,
//! the only one allowed unsafe code.

#![forbid(unsafe_code)]
// A mode's record is one `json!` object of some sixty fields.
#![recursion_limit = "256"]

pub mod calibrate;
pub mod collective;
pub mod config;
pub mod report;
pub mod serve;
pub mod stack;
pub mod storage;
pub mod sweep;
pub mod topology;
pub mod transport;
pub mod workload;

pub use icsim_core::{engine, first_repeat, network, units};

/// An error of a whole experiment, from its file to its result: what a
/// sweep or a diff records for a point that cannot run. Each layer has its
/// own error type, with the key it is about as data; the CLI joins them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The experiment (with its changes) does not resolve.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// It resolves, and cannot run or runs to no result.
    #[error(transparent)]
    Run(#[from] workload::experiment::RunError),
}
