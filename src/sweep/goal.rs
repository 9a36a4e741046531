//! Targets: `[goal]` constraints on a point's metrics (`ttft_ms <= 500`)
//! and an objective to rank the points that meet them by (default: the
//! cheapest per generated token). Also the metrics a goal or a plot may
//! name (`Metric`), and how a row gives them (`Measured`). Computes no
//! metric.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, ConfigResult};

/// A numeric result of a sweep's point that goals, objectives and plots
/// may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    TtftMs,
    TotalMs,
    ComputeMs,
    CommMs,
    PrefillCommMs,
    DecodeCommMs,
    CommShare,
    PrefillCommShare,
    TokensPerS,
    TokensPerSPerGpu,
    UsdPerGpuHour,
    UsdPerHour,
    UsdPerMillionTokens,
    Watts,
    JoulesPerToken,
    BusiestLinkUtil,
    PrefillBusbwGbps,
    DecodeBusbwGbps,
    PrefillAllreduceUs,
    DecodeAllreduceUs,
    TpGbPerGpu,
    Rate,
    TtftP50Ms,
    TtftP90Ms,
    TtftP99Ms,
    TpotP50Ms,
    TpotP90Ms,
    TpotP99Ms,
    E2eP50Ms,
    E2eP90Ms,
    E2eP99Ms,
    RequestsPerS,
    OutputTokensPerS,
    GoodputRequestsPerS,
    Preemptions,
    UsdPerMillionOutputTokens,
    RatePerUsdHour,
}

/// A metric, its name (the column of a sweep's rows) and what it is (for
/// axis titles).
pub type Named = (Metric, &'static str, &'static str);

/// The metrics of a point that replays a query.
pub const METRICS: &[Named] = &[
    (Metric::TtftMs, "ttft_ms", "time to first token (ms)"),
    (Metric::TotalMs, "total_ms", "time per query (ms)"),
    (Metric::ComputeMs, "compute_ms", "compute per query (ms)"),
    (Metric::CommMs, "comm_ms", "communication per query (ms)"),
    (Metric::PrefillCommMs, "prefill_comm_ms", "prefill communication (ms)"),
    (Metric::DecodeCommMs, "decode_comm_ms", "decode communication (ms)"),
    (Metric::CommShare, "comm_share", "communication share of the query"),
    (Metric::PrefillCommShare, "prefill_comm_share", "communication share of the time to first token"),
    (Metric::TokensPerS, "tokens_per_s", "generated tokens/s of the TP group"),
    (Metric::TokensPerSPerGpu, "tokens_per_s_per_gpu", "generated tokens/s per GPU"),
    (Metric::UsdPerGpuHour, "usd_per_gpu_hour", "$ per GPU-hour"),
    (Metric::UsdPerHour, "usd_per_hour", "$ per hour of the TP group"),
    (Metric::UsdPerMillionTokens, "usd_per_million_tokens", "$ per million generated tokens"),
    (Metric::Watts, "watts", "power of the TP group (W)"),
    (Metric::JoulesPerToken, "joules_per_token", "energy per generated token (J)"),
    (Metric::BusiestLinkUtil, "busiest_link_util", "use of the busiest link"),
    (Metric::PrefillBusbwGbps, "prefill_busbw_gbps", "prefill allreduce bus bandwidth (GB/s)"),
    (Metric::DecodeBusbwGbps, "decode_busbw_gbps", "decode allreduce bus bandwidth (GB/s)"),
    (Metric::PrefillAllreduceUs, "prefill_allreduce_us", "one prefill allreduce (us)"),
    (Metric::DecodeAllreduceUs, "decode_allreduce_us", "one decode allreduce (us)"),
    (Metric::TpGbPerGpu, "tp_gb_per_gpu", "TP traffic per GPU (GB)"),
];

/// The metrics a service's points have beyond `comm_share` and the prices
/// (sweeps with a `[serve]` table), at the point's offered rate.
pub const SERVICE_METRICS: &[Named] = &[
    (Metric::Rate, "rate", "offered load (requests/s)"),
    (Metric::TtftP50Ms, "ttft_p50_ms", "p50 time to first token (ms)"),
    (Metric::TtftP90Ms, "ttft_p90_ms", "p90 time to first token (ms)"),
    (Metric::TtftP99Ms, "ttft_p99_ms", "p99 time to first token (ms)"),
    (Metric::TpotP50Ms, "tpot_p50_ms", "p50 time per output token (ms)"),
    (Metric::TpotP90Ms, "tpot_p90_ms", "p90 time per output token (ms)"),
    (Metric::TpotP99Ms, "tpot_p99_ms", "p99 time per output token (ms)"),
    (Metric::E2eP50Ms, "e2e_p50_ms", "p50 end-to-end latency (ms)"),
    (Metric::E2eP90Ms, "e2e_p90_ms", "p90 end-to-end latency (ms)"),
    (Metric::E2eP99Ms, "e2e_p99_ms", "p99 end-to-end latency (ms)"),
    (Metric::RequestsPerS, "requests_per_s", "requests served a second"),
    (Metric::OutputTokensPerS, "output_tokens_per_s", "output tokens served a second"),
    (Metric::GoodputRequestsPerS, "goodput_requests_per_s", "requests a second meeting the objectives"),
    (Metric::Preemptions, "preemptions", "preemptions"),
    (Metric::UsdPerMillionOutputTokens, "usd_per_million_output_tokens", "$ per million output tokens"),
    (Metric::RatePerUsdHour, "rate_per_usd_hour", "requests/s offered per $ an hour of the TP group"),
];

impl Metric {
    fn named(self) -> &'static Named {
        METRICS.iter().chain(SERVICE_METRICS).find(|(metric, _, _)| *metric == self).expect("every metric is listed")
    }

    /// Its name: the column of a sweep's rows.
    pub fn name(self) -> &'static str {
        self.named().1
    }

    /// What it is, for axis titles.
    pub fn describe(self) -> &'static str {
        self.named().2
    }
}

impl FromStr for Metric {
    type Err = String;
    /// A metric by name, listing the allowed ones otherwise.
    fn from_str(name: &str) -> Result<Metric, String> {
        match METRICS.iter().chain(SERVICE_METRICS).find(|(_, metric, _)| *metric == name) {
            Some((metric, _, _)) => Ok(*metric),
            None => {
                let names: Vec<&str> = METRICS.iter().chain(SERVICE_METRICS).map(|(_, metric, _)| *metric).collect();
                Err(format!("unknown metric {name:?}; metrics: {}", names.join(", ")))
            }
        }
    }
}

/// A metric is written by its name.
impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A result a goal can judge: whether it ran, and its metrics.
pub trait Measured {
    /// Whether the point ran (a point that cannot run meets no goal).
    fn ran(&self) -> bool;
    /// The metric's value, where the result has it.
    fn metric(&self, metric: Metric) -> Option<f64>;
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
    pub metric: Metric,
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
        let metric = Metric::from_str(metric).map_err(|message| format!("{text:?}: {message}"))?;
        let (operator, comparison) = OPERATORS
            .iter()
            .find(|(operator, _)| rest.starts_with(operator))
            .ok_or_else(|| format!("{text:?}: no comparison after {metric}; {usage}"))?;
        let number = rest[operator.len()..].trim();
        let bound =
            number.parse::<f64>().ok().filter(|b| b.is_finite()).ok_or_else(|| format!("{text:?}: {number:?} is not a number; {usage}"))?;
        Ok(Constraint { metric, comparison: *comparison, bound })
    }

    /// Whether `row` meets the constraint (a row without the metric does not).
    pub fn holds(&self, row: &impl Measured) -> bool {
        row.metric(self.metric).is_some_and(|v| match self.comparison {
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
    pub objective: Metric,
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
            (Some(metric), None) => (metric.as_str(), false),
            (None, Some(metric)) => (metric.as_str(), true),
            (None, None) => (Metric::UsdPerMillionTokens.name(), false),
        };
        let key = if maximize { "goal.maximize" } else { "goal.minimize" };
        let objective = Metric::from_str(objective).map_err(|message| ConfigError::invalid(path, key, message))?;
        Ok(Goal { raw: raw.clone(), constraints, objective, maximize, top: raw.top.unwrap_or(10) })
    }

    /// Whether a row meets every constraint; None for a point that did not run.
    pub fn meets(&self, row: &impl Measured) -> Option<bool> {
        row.ran().then(|| self.constraints.iter().all(|c| c.holds(row)))
    }

    /// Ranks the rows that meet the goal by the objective, best first (ties
    /// in point order): returns their positions in `rows`.
    pub fn ranking(&self, rows: &[impl Measured]) -> Vec<usize> {
        let mut ranked: Vec<(usize, f64)> = rows
            .iter()
            .enumerate()
            .filter(|(_, row)| self.meets(*row) == Some(true))
            .filter_map(|(i, row)| row.metric(self.objective).map(|v| (i, v)))
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
    use std::path::Path;

    /// A point's time to first token and price, or a point that cannot run.
    struct Row(Option<(f64, f64)>);

    impl Measured for Row {
        fn ran(&self) -> bool {
            self.0.is_some()
        }
        fn metric(&self, metric: Metric) -> Option<f64> {
            let (ttft, usd) = self.0?;
            match metric {
                Metric::TtftMs => Some(ttft),
                Metric::UsdPerMillionTokens => Some(usd),
                _ => None,
            }
        }
    }

    fn row(ttft: f64, usd: f64) -> Row {
        Row(Some((ttft, usd)))
    }

    #[test]
    fn metrics_read_back_by_their_names() {
        for (metric, name, _) in METRICS.iter().chain(SERVICE_METRICS) {
            assert_eq!(Metric::from_str(name), Ok(*metric));
            assert_eq!(metric.to_string(), *name);
        }
        assert!(Metric::from_str("tp").unwrap_err().contains("rate_per_usd_hour"));
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
        let failed = Row(None);
        let rows = vec![row(450.0, 3.0), row(600.0, 1.0), row(100.0, 2.0), failed, row(300.0, 2.0)];
        assert_eq!(goal.ranking(&rows), [2, 4, 0]);
        assert_eq!(goal.meets(&rows[3]), None);
    }
}
