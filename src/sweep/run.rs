//! Running a sweep's points: each point's experiment is the base's mode with
//! the point's changes, resolved and replayed; points run in parallel with
//! rayon (`jobs` threads, or all cores), each alone, and rows come back in
//! point order whatever the thread count. A point that cannot run is a row
//! with its reason. Rows (`row::SweepRow`) carry the experiment's typed
//! results (its storage results where the base has `[storage]`) and what
//! the sweep adds: throughput, cost and energy (`Economics`) and whether
//! the goal is met.

use rayon::prelude::*;
use serde_json::Value;

use super::change::{self, Change};
use super::cost::{Bill, Economics};
use super::row::{Outcome, SweepRow};
use super::{Point, Sweep, axes::Shard};
use crate::config::ConfigError;
use crate::config::experiment::{RawExperiment, Source};
use crate::report::experiment::{ModeRow, StorageRow};
use crate::workload::experiment::{self, Experiment, ExperimentResult, RunError, RunOptions};

/// The base experiment `base` (read from `source`) with `changes`, named
/// as made in `path` in messages.
pub fn resolve(base: &RawExperiment, source: &Source, changes: &[&Change], path: &std::path::Path) -> Result<Experiment, ConfigError> {
    let mut raw = base.clone();
    change::apply(changes, &mut raw);
    Experiment::resolve_edited(raw, source.clone(), &change::edit(changes, path))
}

/// Replays every mode of `experiment` (no size sweep, no timeline).
pub fn replay(experiment: &Experiment) -> Result<ExperimentResult, crate::Error> {
    Ok(experiment::run(experiment, &RunOptions::replay_only(), &|| {})?)
}

/// Why something could not run, without the file and key of the base
/// experiment (the point's own columns say what was asked).
pub fn reason(error: &crate::Error) -> String {
    match error {
        crate::Error::Config(ConfigError::Invalid { message, .. })
        | crate::Error::Run(RunError::Config(ConfigError::Invalid { message, .. })) => message.clone(),
        other => other.to_string(),
    }
}

/// The points of `shard`, in order.
pub fn shard_points(sweep: &Sweep, shard: Shard) -> Vec<usize> {
    (0..sweep.len()).filter(|&p| shard.contains(p)).collect()
}

/// Runs `points` of `sweep` on `jobs` threads (all cores if None), calling
/// `progress` after each; rows in the order of `points`.
pub fn run(sweep: &Sweep, points: &[usize], jobs: Option<usize>, progress: &(dyn Fn() + Sync)) -> Result<Vec<SweepRow>, String> {
    let work = || {
        points
            .par_iter()
            .map(|&index| {
                let row = row(sweep, &sweep.point(index));
                progress();
                row
            })
            .collect()
    };
    match jobs {
        None => Ok(work()),
        Some(threads) => {
            let pool =
                rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| format!("cannot start {threads} threads: {e}"))?;
            Ok(pool.install(work))
        }
    }
}

/// One point's row.
pub fn row(sweep: &Sweep, point: &Point) -> SweepRow {
    let columns = sweep.columns[1..]
        .iter()
        .map(|column| {
            let value = point.changes.iter().rev().find(|c| &c.key.name() == column).map_or(Value::Null, |c| c.shown.clone());
            (column.clone(), value)
        })
        .collect();
    let mut base = sweep.base.clone();
    base.modes = vec![base.modes[point.mode].clone()];
    let changes: Vec<&Change> = point.changes.iter().collect();
    let resolved = resolve(&base, &sweep.base_source, &changes, &sweep.path).map_err(crate::Error::from);
    let outcome = match (&sweep.service, resolved) {
        (Some(service), Ok(experiment)) => super::serving::serve(&experiment, service, &changes, &sweep.cost),
        (_, resolved) => resolved
            .and_then(|experiment| replay(&experiment).map(|result| (experiment, result)))
            .map_err(|e| reason(&e))
            .map(|(experiment, result)| {
                let mode = ModeRow::of(&result.modes[0], &result.model, &result.query);
                let economics = Economics::of(&mode, &Bill::of(&experiment.modes[0].topology), &sweep.cost);
                let storage = result
                    .storage
                    .first()
                    .map(|storage| StorageRow::of(storage, result.modes[0].replay.ttft()).fields())
                    .unwrap_or_default();
                Outcome::Query { mode: Box::new(mode), economics, storage }
            }),
    };
    let (error, outcome) = match outcome {
        Ok(outcome) => (None, Some(outcome)),
        Err(reason) => (Some(reason), None),
    };
    let mut row = SweepRow { point: point.index, label: point.label.clone(), columns, error, outcome, meets_goal: None, rank: None };
    row.meets_goal = sweep.goal.meets(&row);
    row
}
