//! Running a sweep's points: each point's experiment is the base's mode with
//! the point's changes, resolved and replayed; points run in parallel with
//! rayon (`jobs` threads, or all cores), each alone, and rows come back in
//! point order whatever the thread count. A point that cannot run is a row
//! with its reason. Rows carry the experiment's result fields and what the
//! sweep adds: throughput, cost, energy and whether the goal is met.

use rayon::prelude::*;
use serde_json::{Value, json};

use super::change::{self, Change};
use super::cost::{Bill, CostModel};
use super::{LABEL, Point, Sweep, axes::Shard};
use crate::config::ConfigError;
use crate::config::experiment::{RawExperiment, Source};
use crate::report::Record;
use crate::workload::experiment::{self, Experiment, ExperimentResult, RunOptions};

/// The base experiment `base` (read from `source`) with `changes`, named
/// as made in `path` in messages.
pub fn resolve(base: &RawExperiment, source: &Source, changes: &[&Change], path: &std::path::Path) -> Result<Experiment, ConfigError> {
    let mut raw = base.clone();
    change::apply(changes, &mut raw);
    Experiment::resolve_edited(raw, source.clone(), &change::edit(changes, path))
}

/// Replays every mode of `experiment` (no size sweep, no timeline).
pub fn replay(experiment: &Experiment) -> Result<ExperimentResult, crate::Error> {
    experiment::run(experiment, &RunOptions::replay_only(), &|| {})
}

/// Why something could not run, without the file and key of the base
/// experiment (the point's own columns say what was asked).
pub fn reason(error: &crate::Error) -> String {
    match error {
        crate::Error::Config(ConfigError::Invalid { message, .. }) => message.clone(),
        other => other.to_string(),
    }
}

/// The points of `shard`, in order.
pub fn shard_points(sweep: &Sweep, shard: Shard) -> Vec<usize> {
    (0..sweep.len()).filter(|&p| shard.contains(p)).collect()
}

/// Runs `points` of `sweep` on `jobs` threads (all cores if None), calling
/// `progress` after each; rows in the order of `points`.
pub fn run(sweep: &Sweep, points: &[usize], jobs: Option<usize>, progress: &(dyn Fn() + Sync)) -> Result<Vec<Record>, String> {
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
pub fn row(sweep: &Sweep, point: &Point) -> Record {
    let mut row = Record::new();
    row.insert("point".into(), json!(point.index));
    row.insert(LABEL.into(), json!(point.label));
    for column in &sweep.columns[1..] {
        let value = point.changes.iter().rev().find(|c| &c.key.name() == column).map_or(Value::Null, |c| c.shown.clone());
        row.insert(column.clone(), value);
    }
    row.insert("error".into(), Value::Null);
    let mut base = sweep.base.clone();
    base.modes = vec![base.modes[point.mode].clone()];
    let changes: Vec<&Change> = point.changes.iter().collect();
    let outcome = resolve(&base, &sweep.base_source, &changes, &sweep.path)
        .map_err(crate::Error::from)
        .and_then(|experiment| replay(&experiment).map(|result| (experiment, result)));
    match outcome {
        Err(error) => {
            row.insert("error".into(), json!(reason(&error)));
        }
        Ok((experiment, result)) => {
            for (name, value) in crate::report::experiment::mode_record(&result.modes[0], &result.model, &result.query) {
                match name.as_str() {
                    LABEL => {}
                    taken if row.contains_key(taken) => {
                        row.insert(format!("{taken}_used"), value);
                    }
                    _ => {
                        row.insert(name, value);
                    }
                }
            }
            let extra = derived(&row, &Bill::of(&experiment.modes[0].topology), &sweep.cost);
            row.extend(extra);
            row.insert("meets_goal".into(), json!(sweep.goal.meets(&row)));
        }
    }
    row
}

/// What a replay's record (its times, `tp`, `batch` and `output`) gives
/// under `cost` on a server of `bill`: the communication share of the time
/// to first token, generated tokens per second, $ and watts of the TP group,
/// $ per million and joules per generated token.
pub fn derived(record: &Record, bill: &Bill, cost: &CostModel) -> Record {
    let number = |name: &str| record.get(name).and_then(Value::as_f64).unwrap_or(0.0);
    let tp = ["tp", "tp_used"].iter().find_map(|name| record.get(*name).and_then(Value::as_u64)).unwrap_or(1) as u32;
    let tokens = number("batch") as u64 * number("output") as u64;
    let seconds = number("total_ms") / 1000.0;
    let rate = (seconds > 0.0).then(|| tokens as f64 / seconds);
    let mut out = Record::new();
    let ttft = number("ttft_ms");
    out.insert("prefill_comm_share".into(), json!((ttft > 0.0).then(|| number("prefill_comm_ms") / ttft)));
    out.insert("tokens_per_s".into(), json!(rate));
    out.insert("tokens_per_s_per_gpu".into(), json!(rate.map(|r| r / f64::from(tp))));
    match cost.per_gpu(bill) {
        Ok(per_gpu) => {
            let query = per_gpu.query(tp, tokens, seconds);
            out.insert("usd_per_gpu_hour".into(), json!(per_gpu.usd_per_hour));
            out.insert("usd_per_hour".into(), json!(query.usd_per_hour));
            out.insert("watts".into(), json!(query.watts));
            out.insert("usd_per_million_tokens".into(), json!(query.usd_per_million_tokens));
            out.insert("joules_per_token".into(), json!(query.joules_per_token));
            out.insert("cost_error".into(), Value::Null);
        }
        Err(message) => {
            for name in ["usd_per_gpu_hour", "usd_per_hour", "watts", "usd_per_million_tokens", "joules_per_token"] {
                out.insert(name.into(), Value::Null);
            }
            out.insert("cost_error".into(), json!(message));
        }
    }
    out
}
