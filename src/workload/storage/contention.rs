//! Storage traffic against other work (a collective, decode steps) in one
//! task graph: each simulated alone, then both together from the same
//! instant, sharing links through the flow network. Says how much each
//! slowed down and which link they fought over: of the links both use, the
//! one whose demand (both sides' rates alone) is largest for its capacity.

use crate::config::hardware::HardwareModel;
use crate::engine::{self, TaskGraph, TaskId};
use crate::network::{LinkId, LinkUsage, Path};
use crate::storage::{self, Limit};
use crate::topology::Topology;
use crate::units::{Bandwidth, Time};

use super::{Job, add_job};

/// A link both sides used.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedLink {
    pub link: LinkId,
    pub label: String,
    pub kind: Limit,
    pub capacity: Bandwidth,
    /// Each side's average rate on it when alone, bytes per second.
    pub other_rate: f64,
    pub storage_rate: f64,
}

impl SharedLink {
    /// Both sides' rates alone over the capacity: above 1 they cannot both
    /// have what they had alone.
    pub fn demand(&self) -> f64 {
        (self.other_rate + self.storage_rate) / self.capacity.bytes_per_sec()
    }
}

/// The two sides alone and together.
#[derive(Debug, Clone, PartialEq)]
pub struct Contention {
    pub other_alone: Time,
    pub other_with: Time,
    pub storage_alone: Time,
    pub storage_with: Time,
    /// The link they fought over, if they shared any.
    pub shared: Option<SharedLink>,
}

impl Contention {
    /// How much longer the other work took with storage running: 0.25 is 25%.
    pub fn other_slowdown(&self) -> f64 {
        ratio(self.other_with, self.other_alone) - 1.0
    }

    /// How much longer storage took with the other work running.
    pub fn storage_slowdown(&self) -> f64 {
        ratio(self.storage_with, self.storage_alone) - 1.0
    }
}

fn ratio(a: Time, b: Time) -> f64 {
    if b.0 == 0 { 1.0 } else { a.0 as f64 / b.0 as f64 }
}

/// Runs `job` and the work `other` adds to a graph (returning its last
/// task), alone and together.
pub fn contend<E: From<storage::StorageError>>(
    topo: &Topology,
    model: &HardwareModel,
    job: &Job,
    other: impl Fn(&mut TaskGraph<Path>) -> Result<TaskId, E>,
) -> Result<Contention, E> {
    let run = |graph: &TaskGraph<Path>, ends: &[TaskId]| {
        let mut network = topo.network();
        let schedule = engine::run(graph, &mut network);
        (ends.iter().map(|t| schedule.end[t.index()]).collect::<Vec<Time>>(), network.usage())
    };
    let mut alone = TaskGraph::new();
    let end = other(&mut alone)?;
    let (other_alone, other_usage) = run(&alone, &[end]);
    let mut alone = TaskGraph::new();
    let end = add_job(&mut alone, topo, model, job, &[])?.end;
    let (storage_alone, storage_usage) = run(&alone, &[end]);
    let mut together = TaskGraph::new();
    let other_end = other(&mut together)?;
    let storage_end = add_job(&mut together, topo, model, job, &[])?.end;
    let (with, _) = run(&together, &[other_end, storage_end]);
    Ok(Contention {
        other_alone: other_alone[0],
        other_with: with[0],
        storage_alone: storage_alone[0],
        storage_with: with[1],
        shared: shared_link(topo, (&other_usage, other_alone[0]), (&storage_usage, storage_alone[0])),
    })
}

/// Of the links both sides used, the one in most demand.
fn shared_link(
    topo: &Topology,
    (other, other_time): (&[LinkUsage], Time),
    (storage, storage_time): (&[LinkUsage], Time),
) -> Option<SharedLink> {
    let rate = |usage: &LinkUsage, time: Time| if time.0 == 0 { 0.0 } else { usage.bytes.as_f64() / time.as_secs() };
    (0..topo.links().len())
        .filter(|&i| other[i].bytes.0 > 0 && storage[i].bytes.0 > 0)
        .map(|i| {
            let link = LinkId(i as u32);
            SharedLink {
                link,
                label: topo.link_label(link),
                kind: storage::limit_of(topo, link),
                capacity: topo.link(link).bandwidth,
                other_rate: rate(&other[i], other_time),
                storage_rate: rate(&storage[i], storage_time),
            }
        })
        .max_by(|a, b| a.demand().total_cmp(&b.demand()).then(b.link.cmp(&a.link)))
}
