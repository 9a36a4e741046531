//! Targets: `[goal]` constraints on a point's metrics (`ttft_ms <= 500`)
//! and an objective to rank the points that meet them by (default: the
//! cheapest per generated token). Also the names of the metrics a goal or a
//! plot may use. Reads rows; computes no metric.

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, ConfigResult};
use crate::report::Record;

/// The numeric columns of a sweep's rows that goals and plots may name,
/// with what they are (for axis titles).
pub const METRICS: &[(&str, &str)] = &[
    ("ttft_ms", "time to first token (ms)"),
    ("total_ms", "time per query (ms)"),
    ("compute_ms", "compute per query (ms)"),
    ("comm_ms", "communication per query (ms)"),
    ("prefill_comm_ms", "prefill communication (ms)"),
    ("decode_comm_ms", "decode communication (ms)"),
    ("comm_share", "communication share of the query"),
    ("prefill_comm_share", "communication share of the time to first token"),
    ("tokens_per_s", "generated tokens/s of the TP group"),
    ("tokens_per_s_per_gpu", "generated tokens/s per GPU"),
    ("usd_per_gpu_hour", "$ per GPU-hour"),
    ("usd_per_hour", "$ per hour of the TP group"),
    ("usd_per_million_tokens", "$ per million generated tokens"),
    ("watts", "power of the TP group (W)"),
    ("joules_per_token", "energy per generated token (J)"),
    ("busiest_link_util", "use of the busiest link"),
    ("prefill_busbw_gbps", "prefill allreduce bus bandwidth (GB/s)"),
    ("decode_busbw_gbps", "decode allreduce bus bandwidth (GB/s)"),
    ("prefill_allreduce_us", "one prefill allreduce (us)"),
    ("decode_allreduce_us", "one decode allreduce (us)"),
    ("tp_gb_per_gpu", "TP traffic per GPU (GB)"),
];

/// The numeric columns a service's rows have beyond `comm_share` and the
/// prices (sweeps with a `[serve]` table), at the point's offered rate.
pub const SERVICE_METRICS: &[(&str, &str)] = &[
    ("rate", "offered load (requests/s)"),
    ("ttft_p50_ms", "p50 time to first token (ms)"),
    ("ttft_p90_ms", "p90 time to first token (ms)"),
    ("ttft_p99_ms", "p99 time to first token (ms)"),
    ("tpot_p50_ms", "p50 time per output token (ms)"),
    ("tpot_p90_ms", "p90 time per output token (ms)"),
    ("tpot_p99_ms", "p99 time per output token (ms)"),
    ("e2e_p50_ms", "p50 end-to-end latency (ms)"),
    ("e2e_p90_ms", "p90 end-to-end latency (ms)"),
    ("e2e_p99_ms", "p99 end-to-end latency (ms)"),
    ("requests_per_s", "requests served a second"),
    ("output_tokens_per_s", "output tokens served a second"),
    ("goodput_requests_per_s", "requests a second meeting the objectives"),
    ("preemptions", "preemptions"),
    ("usd_per_million_output_tokens", "$ per million output tokens"),
    ("rate_per_usd_hour", "requests/s offered per $ an hour of the TP group"),
];

/// What a metric is, for axis titles; the name itself if unknown.
pub fn describe(metric: &str) -> String {
    METRICS.iter().chain(SERVICE_METRICS).find(|(name, _)| *name == metric).map_or_else(|| metric.to_string(), |(_, what)| what.to_string())
}

/// Checks a metric name, listing the allowed ones otherwise.
pub fn check_metric(name: &str) -> Result<(), String> {
    if METRICS.iter().chain(SERVICE_METRICS).any(|(metric, _)| *metric == name) {
        Ok(())
    } else {
        let names: Vec<&str> = METRICS.iter().chain(SERVICE_METRICS).map(|(metric, _)| *metric).collect();
        Err(format!("unknown metric {name:?}; metrics: {}", names.join(", ")))
    }
}

/// A metric of a row, where it has one.
pub fn value(row: &Record, metric: &str) -> Option<f64> {
    row.get(metric).and_then(serde_json::Value::as_f64)
}

/// `[goal]` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawGoal {
    /// Constraints, each `METRIC OP NUMBER` with OP one of <=, <, >=, >, ==.
    #[serde(default)]
    pub require: Vec<String>,
    pub minimize: Option<String>,
    pub maximize: Option<String>,
    /// How many of the best points the report lists (default 10).
    pub top: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    AtMost,
    Below,
    AtLeast,
    Above,
    Equal,
}

/// Comparison operators as written, longest first so that `<=` is not read
/// as `<`.
const OPERATORS: [(&str, Comparison); 5] = [
    ("<=", Comparison::AtMost),
    (">=", Comparison::AtLeast),
    ("==", Comparison::Equal),
    ("<", Comparison::Below),
    (">", Comparison::Above),
];

/// One constraint: `metric op bound`.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub metric: String,
    comparison: Comparison,
    pub bound: f64,
}

impl Constraint {
    pub fn parse(text: &str) -> Result<Constraint, String> {
        let usage = "write METRIC OP NUMBER, OP one of <=, <, >=, >, == (e.g. \"ttft_ms <= 500\")";
        let text = text.trim();
        let split = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
        let (metric, rest) = (&text[..split], text[split..].trim_start());
        if metric.is_empty() {
            return Err(format!("{text:?} does not start with a metric; {usage}"));
        }
        check_metric(metric).map_err(|message| format!("{text:?}: {message}"))?;
        let (operator, comparison) = OPERATORS
            .iter()
            .find(|(operator, _)| rest.starts_with(operator))
            .ok_or_else(|| format!("{text:?}: no comparison after {metric}; {usage}"))?;
        let number = rest[operator.len()..].trim();
        let bound =
            number.parse::<f64>().ok().filter(|b| b.is_finite()).ok_or_else(|| format!("{text:?}: {number:?} is not a number; {usage}"))?;
        Ok(Constraint { metric: metric.to_string(), comparison: *comparison, bound })
    }

    /// Whether `row` meets the constraint (a row without the metric does not).
    pub fn holds(&self, row: &Record) -> bool {
        value(row, &self.metric).is_some_and(|v| match self.comparison {
            Comparison::AtMost => v <= self.bound,
            Comparison::Below => v < self.bound,
            Comparison::AtLeast => v >= self.bound,
            Comparison::Above => v > self.bound,
            Comparison::Equal => v == self.bound,
        })
    }
}

/// A validated goal.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub raw: RawGoal,
    pub constraints: Vec<Constraint>,
    pub objective: String,
    pub maximize: bool,
    pub top: usize,
}

impl Goal {
    /// Checks `raw`, written in `path` under `[goal]`.
    pub fn new(raw: &RawGoal, path: &std::path::Path) -> ConfigResult<Goal> {
        let constraints = raw
            .require
            .iter()
            .enumerate()
            .map(|(i, text)| Constraint::parse(text).map_err(|message| ConfigError::invalid(path, format!("goal.require[{i}]"), message)))
            .collect::<ConfigResult<Vec<_>>>()?;
        let (objective, maximize) = match (&raw.minimize, &raw.maximize) {
            (Some(_), Some(_)) => return Err(ConfigError::invalid(path, "goal.maximize", "give minimize or maximize, not both")),
            (Some(metric), None) => (metric.clone(), false),
            (None, Some(metric)) => (metric.clone(), true),
            (None, None) => ("usd_per_million_tokens".to_string(), false),
        };
        let key = if maximize { "goal.maximize" } else { "goal.minimize" };
        check_metric(&objective).map_err(|message| ConfigError::invalid(path, key, message))?;
        Ok(Goal { raw: raw.clone(), constraints, objective, maximize, top: raw.top.unwrap_or(10) })
    }

    /// Whether a row meets every constraint; None for a point that did not run.
    pub fn meets(&self, row: &Record) -> Option<bool> {
        row.get("error").is_none_or(serde_json::Value::is_null).then(|| self.constraints.iter().all(|c| c.holds(row)))
    }

    /// Ranks the rows that meet the goal by the objective, best first (ties
    /// in point order): returns their positions in `rows`.
    pub fn ranking(&self, rows: &[Record]) -> Vec<usize> {
        let mut ranked: Vec<(usize, f64)> = rows
            .iter()
            .enumerate()
            .filter(|(_, row)| self.meets(row) == Some(true))
            .filter_map(|(i, row)| value(row, &self.objective).map(|v| (i, v)))
            .collect();
        ranked.sort_by(|a, b| {
            let order = if self.maximize { b.1.total_cmp(&a.1) } else { a.1.total_cmp(&b.1) };
            order.then(a.0.cmp(&b.0))
        });
        ranked.into_iter().map(|(i, _)| i).collect()
    }

    /// The goal in words: "ttft_ms <= 500, comm_share <= 0.1; cheapest by usd_per_million_tokens".
    pub fn describe(&self) -> String {
        let constraints = if self.raw.require.is_empty() { "no constraint".to_string() } else { self.raw.require.join(", ") };
        format!("{constraints}; {} {}", if self.maximize { "highest" } else { "lowest" }, self.objective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn row(ttft: f64, usd: f64) -> Record {
        json!({ "error": null, "ttft_ms": ttft, "usd_per_million_tokens": usd }).as_object().unwrap().clone()
    }

    #[test]
    fn constraints_read_every_operator() {
        let r = row(400.0, 2.0);
        for (text, holds) in [
            ("ttft_ms <= 400", true),
            ("ttft_ms<400", false),
            ("ttft_ms >= 400", true),
            ("ttft_ms > 399.5", true),
            ("ttft_ms == 400", true),
        ] {
            assert_eq!(Constraint::parse(text).unwrap().holds(&r), holds, "{text}");
        }
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        assert!(Constraint::parse("ttft_ms = 500").unwrap_err().contains("OP one of"));
        assert!(Constraint::parse("ttft_ms => 500").unwrap_err().contains("no comparison"));
        assert!(Constraint::parse("ttft <= 500").unwrap_err().contains("tokens_per_s_per_gpu"));
        assert!(Constraint::parse("ttft_ms <= fast").unwrap_err().contains("not a number"));
        let raw = RawGoal { require: vec!["ttft_ms <= 1".into(), "latency < 2".into()], ..RawGoal::default() };
        let error = Goal::new(&raw, Path::new("s.toml")).unwrap_err().to_string();
        assert!(error.contains("s.toml: key `goal.require[1]`") && error.contains("\"latency\""), "{error}");
    }

    #[test]
    fn the_ranking_keeps_points_that_meet_the_goal_cheapest_first() {
        let raw = RawGoal { require: vec!["ttft_ms <= 500".into()], ..RawGoal::default() };
        let goal = Goal::new(&raw, Path::new("s.toml")).unwrap();
        let mut failed = row(1.0, 0.1);
        failed.insert("error".into(), json!("cannot run"));
        let rows = vec![row(450.0, 3.0), row(600.0, 1.0), row(100.0, 2.0), failed, row(300.0, 2.0)];
        assert_eq!(goal.ranking(&rows), [2, 4, 0]);
        assert_eq!(goal.meets(&rows[3]), None);
    }
}
