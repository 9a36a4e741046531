//! "What does this change buy me": one workload replayed before and after a
//! change (a second experiment, or changes by key), mode by mode: the time
//! saved per phase, the generated tokens per second gained, the cost and
//! energy per token, the busiest link before and after, and every link's
//! utilisation over the query's communication time on both sides; the
//! findings a typed `Comparison` (serialized as `--format json`).

use std::path::Path;

use serde::Serialize;

use super::change::Change;
use super::cost::{Bill, CostModel, Economics};
use super::goal::Metric;
use super::row::query_metric;
use super::run::{reason, replay, resolve};
use crate::config::experiment::{RawExperiment, Source};
use crate::config::{ConfigError, ConfigResult};
use crate::report::experiment::ModeRow;

/// One side of a comparison: a mode of an experiment, replayed.
#[derive(Debug, Clone)]
pub struct Side {
    pub label: String,
    /// The replay's row, its throughput and cost, and each link's use; or
    /// why the mode cannot run.
    pub outcome: Result<Replayed, String>,
    /// Its topology's links far outside shipped hardware, and why.
    pub unusual: Vec<String>,
}

/// A side's mode, replayed.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub mode: ModeRow,
    pub economics: Economics,
    pub links: Vec<LinkUse>,
}

/// How busy one link was: bytes over its capacity times the query's
/// communication time (what `busiest_link_util` reports for the busiest).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkUse {
    /// "GPU0 -> nvswitch": links are matched across the two sides by their ends.
    pub ends: String,
    /// "NVLink gen4 x18".
    pub kind: String,
    pub utilisation: f64,
}

/// An experiment to compare: its raw form, where it was read from, and the
/// changes made to it.
pub struct Subject<'a> {
    pub raw: &'a RawExperiment,
    pub source: &'a Source,
    pub changes: &'a [Change],
}

impl Subject<'_> {
    /// The label of mode `mode`.
    pub fn label(&self, mode: usize) -> String {
        let raw = &self.raw.modes[mode];
        raw.label.clone().unwrap_or_else(|| raw.transport.clone())
    }

    /// Replays mode `mode` alone.
    pub fn side(&self, mode: usize, cost: &CostModel) -> Side {
        let mut raw = self.raw.clone();
        raw.modes = vec![raw.modes[mode].clone()];
        let changes: Vec<&Change> = self.changes.iter().collect();
        let outcome = resolve(&raw, self.source, &changes, &self.source.path())
            .map_err(crate::Error::from)
            .and_then(|experiment| replay(&experiment).map(|result| (experiment, result)))
            .map_err(|error| reason(&error))
            .map(|(experiment, result)| {
                let (run, mode) = (&experiment.modes[0], &result.modes[0]);
                let unusual = crate::topology::plausible::unusual_links(&run.topology);
                let unusual = unusual.into_iter().map(|u| format!("{}: {}", run.topology.name, u.why)).collect();
                let row = ModeRow::of(mode, &result.model, &result.query);
                let economics = Economics::of(&row, &Bill::of(&run.topology), cost);
                let comm = mode.replay.comm();
                let links = run
                    .topology
                    .links()
                    .iter()
                    .zip(&mode.replay.link_usage)
                    .filter(|(_, usage)| usage.bytes.0 > 0 && comm.0 > 0)
                    .map(|(link, usage)| LinkUse {
                        ends: format!("{} -> {}", run.topology.node(link.from).name, run.topology.node(link.to).name),
                        kind: link.kind.to_string(),
                        utilisation: usage.bytes.as_f64() / (link.bandwidth.bytes_per_sec() * comm.as_secs()),
                    })
                    .collect();
                (Replayed { mode: row, economics, links }, unusual)
            });
        let (outcome, unusual) = match outcome {
            Ok((replayed, unusual)) => (Ok(replayed), unusual),
            Err(why) => (Err(why), Vec::new()),
        };
        Side { label: self.label(mode), outcome, unusual }
    }

    /// Which mode of `other` each of this subject's modes is compared with:
    /// the one mode of each, or the modes of the same label.
    pub fn pairs(&self, other: &Subject) -> Vec<(usize, Option<usize>)> {
        if self.raw.modes.len() == 1 && other.raw.modes.len() == 1 {
            return vec![(0, Some(0))];
        }
        (0..self.raw.modes.len()).map(|m| (m, (0..other.raw.modes.len()).find(|&o| other.label(o) == self.label(m)))).collect()
    }
}

/// Refuses to compare two experiments of different workloads (LLM or
/// query): the second's key is named.
pub fn check_same_workload(before: &RawExperiment, after: &RawExperiment, after_path: &Path) -> ConfigResult<()> {
    let differs = |key: &str, a: String, b: String| {
        (a != b).then(|| {
            ConfigError::invalid(
                after_path,
                key,
                format!("{b} differs from the first experiment's {a}: a diff replays one workload on both; make them equal, or change it with --set {key}=..."),
            )
        })
    };
    let (a, b) = (&before.query, &after.query);
    let found = differs("model", before.model.clone(), after.model.clone())
        .or_else(|| differs("query.prompt", a.prompt.to_string(), b.prompt.to_string()))
        .or_else(|| differs("query.output", a.output.to_string(), b.output.to_string()))
        .or_else(|| differs("query.batch", a.batch.to_string(), b.batch.to_string()));
    found.map_or(Ok(()), Err)
}

/// One comparison (the `--format json` interface): the two sides' labels,
/// the change, then what it buys or why a side cannot run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub before: String,
    pub after: String,
    pub change: String,
    #[serde(flatten)]
    pub outcome: Compared,
}

/// A comparison's findings: both sides ran, or why one cannot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Compared {
    Failed { before_error: Option<String>, after_error: Option<String> },
    Ran(Box<Gains>),
}

/// What the change buys, both sides having run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gains {
    pub mode_before: String,
    pub mode_after: String,
    pub topology_before: String,
    pub topology_after: String,
    pub transport_before: Option<String>,
    pub transport_after: Option<String>,
    pub gpu_before: String,
    pub gpu_after: String,
    pub phases: Vec<PhaseChange>,
    pub rates: Vec<RateChange>,
    pub bottleneck_before: Option<String>,
    pub bottleneck_before_util: Option<f64>,
    pub bottleneck_after: Option<String>,
    pub bottleneck_after_util: Option<f64>,
    /// Whether the busiest link's ends differ.
    pub bottleneck_moved: bool,
    /// Every link busy on either side: the two bottlenecks first, then the busiest.
    pub links: Vec<LinkChange>,
}

/// One phase's time before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseChange {
    pub phase: &'static str,
    pub before_ms: f64,
    pub after_ms: f64,
    pub saved_ms: f64,
    /// The time saved over the time before (None if there was none).
    pub saved_share: Option<f64>,
}

/// One per-token figure before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateChange {
    pub metric: Metric,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub change: Option<f64>,
}

/// One link's use on each side (None where the side does not use it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkChange {
    pub link: String,
    pub kind_before: Option<String>,
    pub util_before: Option<f64>,
    pub kind_after: Option<String>,
    pub util_after: Option<f64>,
}

/// A phase's time (ms) in a mode's row.
type PhaseTime = fn(&ModeRow) -> f64;

/// The phases a diff reports: a name and the phase's time.
const PHASES: [(&str, PhaseTime); 5] = [
    ("prefill (time to first token)", |r| r.ttft_ms),
    ("prefill communication", |r| r.prefill_comm_ms),
    ("decode", |r| r.decode_compute_ms + r.decode_comm_ms),
    ("decode communication", |r| r.decode_comm_ms),
    ("whole query", |r| r.total_ms),
];

/// Per-token figures compared (higher is better only for the first two).
const RATES: [Metric; 4] = [Metric::TokensPerS, Metric::TokensPerSPerGpu, Metric::UsdPerMillionTokens, Metric::JoulesPerToken];

/// Compares `before` with `after`, a change described as `change`.
pub fn compare(before: &Side, after: &Side, change: &str) -> Comparison {
    let outcome = match (&before.outcome, &after.outcome) {
        (Ok(a), Ok(b)) => Compared::Ran(Box::new(gains(a, b))),
        (a, b) => Compared::Failed { before_error: a.as_ref().err().cloned(), after_error: b.as_ref().err().cloned() },
    };
    Comparison { before: before.label.clone(), after: after.label.clone(), change: change.to_string(), outcome }
}

fn gains(a: &Replayed, b: &Replayed) -> Gains {
    let phases = PHASES
        .iter()
        .map(|&(phase, time)| {
            let (x, y) = (time(&a.mode), time(&b.mode));
            PhaseChange { phase, before_ms: x, after_ms: y, saved_ms: x - y, saved_share: (x > 0.0).then(|| (x - y) / x) }
        })
        .collect();
    let rates = RATES
        .iter()
        .map(|&metric| {
            let (x, y) = (query_metric(&a.mode, &a.economics, metric), query_metric(&b.mode, &b.economics, metric));
            RateChange { metric, before: x, after: y, change: x.zip(y).map(|(x, y)| y - x) }
        })
        .collect();
    let (a_link, b_link) = (&a.mode.busiest_link, &b.mode.busiest_link);
    let ends_of = |label: &Option<String>| label.as_ref().map(|l| l.split(" (").next().unwrap_or(l).to_string());
    let mut ends: Vec<&str> = Vec::new();
    for link in a.links.iter().chain(&b.links) {
        if !ends.contains(&link.ends.as_str()) {
            ends.push(&link.ends);
        }
    }
    let mut links: Vec<(&str, Option<&LinkUse>, Option<&LinkUse>)> =
        ends.iter().map(|&e| (e, a.links.iter().find(|l| l.ends == e), b.links.iter().find(|l| l.ends == e))).collect();
    let peak = |entry: &(&str, Option<&LinkUse>, Option<&LinkUse>)| {
        entry.1.map_or(0.0, |l| l.utilisation).max(entry.2.map_or(0.0, |l| l.utilisation))
    };
    // The two bottlenecks first, then the busiest.
    let bottlenecks = [ends_of(a_link), ends_of(b_link)];
    let rank = |entry: &(&str, Option<&LinkUse>, Option<&LinkUse>)| !bottlenecks.contains(&Some(entry.0.to_string()));
    links.sort_by(|p, q| rank(p).cmp(&rank(q)).then(peak(q).total_cmp(&peak(p))).then(p.0.cmp(q.0)));
    let links = links
        .iter()
        .map(|(ends, x, y)| LinkChange {
            link: ends.to_string(),
            kind_before: x.map(|l| l.kind.clone()),
            util_before: x.map(|l| l.utilisation),
            kind_after: y.map(|l| l.kind.clone()),
            util_after: y.map(|l| l.utilisation),
        })
        .collect();
    Gains {
        mode_before: a.mode.mode.clone(),
        mode_after: b.mode.mode.clone(),
        topology_before: a.mode.topology.clone(),
        topology_after: b.mode.topology.clone(),
        transport_before: a.mode.transport.clone(),
        transport_after: b.mode.transport.clone(),
        gpu_before: a.mode.gpu.clone(),
        gpu_after: b.mode.gpu.clone(),
        phases,
        rates,
        bottleneck_before: a_link.clone(),
        bottleneck_before_util: a.mode.busiest_link_util,
        bottleneck_after: b_link.clone(),
        bottleneck_after_util: b.mode.busiest_link_util,
        bottleneck_moved: ends_of(a_link) != ends_of(b_link),
        links,
    }
}
