//! The discrete-event engine: a task graph (transfers, delays, joins with
//! dependencies) executed against a clock. Events are ordered by time, then by
//! the order they were scheduled in (a sequence number), so a run is the same
//! bit for bit every time. The engine knows nothing of GPUs or links: a
//! transfer is handed to a [`Fabric`], which says when it is finished.
//!
//! A graph may hold *streams*: parts whose tasks are generated while the
//! graph runs, batch by batch, as their predecessors finish (a collective's
//! steps and chunks), so that memory stays flat in the number of chunks.
//! Tasks that become ready at one instant start in the order they would
//! have had in a graph built whole beforehand, so a stream runs exactly as
//! its tasks written out in full would (`TaskGraph::inline`).

mod executor;
mod graph;
mod queue;

use std::fmt;

use crate::units::{Bandwidth, Bytes, Time};

pub use executor::{Stopped, run, run_within};
pub use graph::{Builder, Generator, Stream, TaskGraph, TaskRef};
pub use queue::EventQueue;

/// Index of a task in its [`TaskGraph`]; to a [`Fabric`], the handle of a
/// transfer in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

impl TaskId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a task does once all the tasks it depends on have finished.
pub enum Work<R> {
    /// Move `bytes` along `route`; the fabric decides how long it takes.
    /// `rate_cap` bounds this transfer's own rate (a copy engine or a single
    /// thread block that cannot drive a link at full speed). The transfer
    /// stands for `copies` identical transfers on the same route, started
    /// and finished together (identical channels simulated once).
    Transfer { route: R, bytes: Bytes, rate_cap: Option<Bandwidth>, copies: u32 },
    /// Occupy nothing for a fixed time (a kernel, a synchronisation).
    Delay(Time),
    /// Finish as soon as its dependencies have: a barrier.
    Join,
    /// Generate tasks while running; finish when the last of them has. Only
    /// in a [`TaskGraph`]: a stream's generator cannot add another stream.
    Stream(Box<dyn Stream<R>>),
}

impl<R: fmt::Debug> fmt::Debug for Work<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Work::Transfer { route, bytes, rate_cap, copies } => f
                .debug_struct("Transfer")
                .field("route", route)
                .field("bytes", bytes)
                .field("rate_cap", rate_cap)
                .field("copies", copies)
                .finish(),
            Work::Delay(time) => f.debug_tuple("Delay").field(time).finish(),
            Work::Join => f.write_str("Join"),
            Work::Stream(stream) => f.debug_tuple("Stream").field(stream).finish(),
        }
    }
}

/// What moves the bytes of transfers: the network model, or a test double.
pub trait Fabric<R> {
    /// Begins `transfer` at `now`: `copies` identical transfers of `bytes`
    /// each, each held to `rate_cap`.
    fn start(&mut self, now: Time, transfer: TaskId, route: &R, bytes: Bytes, rate_cap: Option<Bandwidth>, copies: u32);
    /// When the fabric next changes state (a transfer finishes or a rate
    /// changes), if anything is in flight.
    fn next_event_time(&mut self) -> Option<Time>;
    /// Processes the fabric's events at `now` (which is `next_event_time`),
    /// appending transfers that finished; returns how many events it handled.
    fn advance(&mut self, now: Time, finished: &mut Vec<TaskId>) -> u64;
}

/// When each task of the graph started and finished (a stream as a whole:
/// the tasks it generated are not kept), and how much work the run was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub start: Vec<Time>,
    pub end: Vec<Time>,
    /// Events handled: task completions of the engine (a stream's own
    /// included, as the join of its tasks) plus the fabric's own.
    pub events: u64,
    /// Most tasks alive at once (waiting, running or finished within the
    /// current instant), streams' generated tasks included.
    pub peak_tasks: usize,
}

impl Schedule {
    /// The time the last task finished.
    pub fn makespan(&self) -> Time {
        self.end.iter().copied().max().unwrap_or(Time::ZERO)
    }
    pub fn span(&self, task: TaskId) -> (Time, Time) {
        (self.start[task.index()], self.end[task.index()])
    }
}

#[cfg(test)]
mod tests;
