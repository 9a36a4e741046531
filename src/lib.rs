//! icsim: a discrete-event simulator of the interconnect inside a GPU server.
//! The modules follow the data flow: units and config at the edge, a topology
//! graph, an engine that executes task graphs over a flow network, transports
//! and collectives that generate those task graphs, and reports.

// A mode's record is one `json!` object of some sixty fields.
#![recursion_limit = "256"]

pub mod calibrate;
pub mod collective;
pub mod config;
pub mod engine;
pub mod network;
pub mod report;
pub mod serve;
pub mod stack;
pub mod storage;
pub mod sweep;
pub mod topology;
pub mod transport;
pub mod units;
pub mod workload;

/// Any error the library reports to a user: what the CLI and sweeps, which
/// call every layer, join; each layer below has its own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Topology(#[from] topology::TopologyError),
    #[error(transparent)]
    Resolve(#[from] topology::ResolveError),
    #[error(transparent)]
    Collective(#[from] collective::CollectiveError),
    #[error(transparent)]
    Transport(#[from] transport::TransportError),
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error(transparent)]
    Run(#[from] workload::experiment::RunError),
}

/// The position of the first item of `items` that repeats an earlier one:
/// how every list a user writes (sizes, algorithms, plot names, a row's
/// keys) finds the item it names twice, in O(n log n) for hostile lengths.
pub fn first_repeat<T: Ord>(items: &[T]) -> Option<usize> {
    let mut seen = std::collections::BTreeSet::new();
    items.iter().position(|item| !seen.insert(item))
}
