//! A sweep point's row as typed results: the point (its index, its label,
//! its value of each changed key), why it cannot run or what it yields (a
//! replayed query's mode row, economics and storage columns, or a service
//! at one rate), whether it meets the goal and its rank. Goals, objectives
//! and plots read its metrics through `Measured`. A row becomes a record
//! (`report::Record`) only to be written, and is read back from one when
//! shards are merged. Computes no metric.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::LABEL;
use super::cost::Economics;
use super::goal::{Measured, Metric};
use crate::report::experiment::ModeRow;
use crate::report::{Record, record_of};
use crate::serve::load::LoadPoint;

/// One point's results.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepRow {
    pub point: usize,
    pub label: String,
    /// The point's value of each column after the label (a changed key,
    /// as written), null where the point keeps the base's.
    pub columns: Vec<(String, Value)>,
    /// Why the point cannot run.
    pub error: Option<String>,
    pub outcome: Option<Outcome>,
    /// None for a point that cannot run.
    pub meets_goal: Option<bool>,
    /// Set once the whole sweep is ranked: the point's place among those
    /// meeting the goal (1 the best), None for the others.
    pub rank: Option<Option<usize>>,
}

/// What a point that ran yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The base's query replayed: its mode's row, what it yields and costs,
    /// and its storage results as (column, value) in order (where the base
    /// has `[storage]`).
    Query { mode: Box<ModeRow>, economics: Economics, storage: Vec<(String, Value)> },
    /// A service at the point's offered rate, or all at once under its
    /// clients' cap.
    Service { setup: ServiceSetup, load: LoadPoint, cost_error: Option<String> },
}

/// What a service point ran on; the field names are columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceSetup {
    pub topology: String,
    pub gpu: String,
    pub transport: String,
    pub tp: u32,
    pub kv_blocks: u64,
    pub usd_per_gpu_hour: Option<f64>,
}

/// The field that a row's metrics are read back by, naming a service's row.
const SERVICE_FIELD: &str = "rate_per_usd_hour";

/// The suffix of a result's field named like one of the point's columns.
const USED: &str = "_used";

impl SweepRow {
    /// The value of one of the sweep's columns (`label` or a changed key).
    pub fn column(&self, name: &str) -> Option<Value> {
        if name == LABEL {
            return Some(Value::String(self.label.clone()));
        }
        self.columns.iter().find(|(column, _)| column == name).map(|(_, value)| value.clone())
    }

    /// The row as written: the point, its columns and error, the result's
    /// fields (one named like a column the point has kept as
    /// `<name>_used`), then `meets_goal` and `rank` where set.
    pub fn record(&self) -> Record {
        let mut row = Record::new();
        row.insert("point".into(), json!(self.point));
        row.insert(LABEL.into(), json!(self.label));
        row.extend(self.columns.iter().cloned());
        row.insert("error".into(), json!(self.error));
        match &self.outcome {
            None => {}
            Some(Outcome::Query { mode, economics, storage }) => {
                insert_used(&mut row, record_of(mode));
                row.extend(record_of(economics));
                insert_used(&mut row, storage.iter().cloned());
            }
            Some(Outcome::Service { setup, load, cost_error }) => {
                insert_used(&mut row, record_of(setup).into_iter().chain(record_of(load)));
                row.insert("cost_error".into(), json!(cost_error));
            }
        }
        if let Some(meets) = self.meets_goal {
            row.insert("meets_goal".into(), json!(meets));
        }
        if let Some(rank) = self.rank {
            row.insert("rank".into(), json!(rank));
        }
        row
    }

    /// A row as `record` writes it, of a sweep of `columns` (label first);
    /// other fields (a fingerprint) are left out.
    pub fn read(mut record: Record, columns: &[String]) -> Result<SweepRow, String> {
        fn typed<T: serde::de::DeserializeOwned>(name: &str, value: Value) -> Result<T, String> {
            serde_json::from_value(value).map_err(|e| format!("{name}: {e}"))
        }
        let mut take = |name: &str| record.shift_remove(name).unwrap_or(Value::Null);
        let point = typed("point", take("point"))?;
        let label: String = typed(LABEL, take(LABEL))?;
        let columns: Vec<(String, Value)> = columns.iter().skip(1).map(|c| (c.clone(), take(c))).collect();
        let error = typed("error", take("error"))?;
        let meets_goal = typed("meets_goal", take("meets_goal"))?;
        let rank = record.shift_remove("rank").map(|rank| typed("rank", rank)).transpose()?;
        record.shift_remove(super::output::FINGERPRINT);
        let taken = |name: &str| ["point", "error"].contains(&name) || columns.iter().any(|(c, _)| c == name);
        let mut fields: Record = record
            .into_iter()
            .map(|(name, value)| match name.strip_suffix(USED) {
                Some(field) if taken(field) => (field.to_string(), value),
                _ => (name, value),
            })
            .collect();
        let outcome = if fields.is_empty() {
            None
        } else if fields.contains_key(SERVICE_FIELD) {
            let cost_error = typed("cost_error", fields.shift_remove("cost_error").unwrap_or(Value::Null))?;
            let fields = Value::Object(fields);
            Some(Outcome::Service { setup: typed("service", fields.clone())?, load: typed("service", fields)?, cost_error })
        } else {
            let mut with_label = fields.clone();
            with_label.insert(LABEL.into(), Value::String(label.clone()));
            let mode: ModeRow = typed("result", Value::Object(with_label))?;
            let economics: Economics = typed("result", Value::Object(fields.clone()))?;
            let (mode_fields, economics_fields) = (record_of(&mode), record_of(&economics));
            let storage =
                fields.into_iter().filter(|(name, _)| !mode_fields.contains_key(name) && !economics_fields.contains_key(name)).collect();
            Some(Outcome::Query { mode: Box::new(mode), economics, storage })
        };
        Ok(SweepRow { point, label, columns, error, outcome, meets_goal, rank })
    }
}

/// Adds a result's fields to `row`; one named like a column the point
/// already has (an axis) is kept as `<name>_used`, and its label is the
/// point's.
fn insert_used(row: &mut Record, fields: impl IntoIterator<Item = (String, Value)>) {
    for (name, value) in fields {
        match name.as_str() {
            LABEL => {}
            taken if row.contains_key(taken) => {
                row.insert(format!("{taken}{USED}"), value);
            }
            _ => {
                row.insert(name, value);
            }
        }
    }
}

impl Measured for SweepRow {
    fn ran(&self) -> bool {
        self.error.is_none()
    }

    fn metric(&self, metric: Metric) -> Option<f64> {
        match self.outcome.as_ref()? {
            Outcome::Query { mode, economics, .. } => query_metric(mode, economics, metric),
            Outcome::Service { setup, load, .. } => service_metric(setup, load, metric),
        }
    }
}

/// A metric of a replayed query (its mode's row and economics); None for
/// a service's.
pub fn query_metric(mode: &ModeRow, economics: &Economics, metric: Metric) -> Option<f64> {
    use Metric::*;
    match metric {
        TtftMs => Some(mode.ttft_ms),
        TotalMs => Some(mode.total_ms),
        ComputeMs => Some(mode.compute_ms),
        CommMs => Some(mode.comm_ms),
        PrefillCommMs => Some(mode.prefill_comm_ms),
        DecodeCommMs => Some(mode.decode_comm_ms),
        CommShare => Some(mode.comm_share),
        PrefillCommShare => economics.prefill_comm_share,
        TokensPerS => economics.tokens_per_s,
        TokensPerSPerGpu => economics.tokens_per_s_per_gpu,
        UsdPerGpuHour => economics.usd_per_gpu_hour,
        UsdPerHour => economics.usd_per_hour,
        UsdPerMillionTokens => economics.usd_per_million_tokens,
        Watts => economics.watts,
        JoulesPerToken => economics.joules_per_token,
        BusiestLinkUtil => mode.busiest_link_util,
        PrefillBusbwGbps => mode.prefill_busbw_gbps,
        DecodeBusbwGbps => mode.decode_busbw_gbps,
        PrefillAllreduceUs => mode.prefill_allreduce_us,
        DecodeAllreduceUs => mode.decode_allreduce_us,
        TpGbPerGpu => Some(mode.tp_gb_per_gpu),
        Rate
        | TtftP50Ms
        | TtftP90Ms
        | TtftP99Ms
        | TpotP50Ms
        | TpotP90Ms
        | TpotP99Ms
        | E2eP50Ms
        | E2eP90Ms
        | E2eP99Ms
        | RequestsPerS
        | OutputTokensPerS
        | GoodputRequestsPerS
        | Preemptions
        | UsdPerMillionOutputTokens
        | RatePerUsdHour => None,
    }
}

/// A metric of a service at one rate; None for a query's alone.
fn service_metric(setup: &ServiceSetup, load: &LoadPoint, metric: Metric) -> Option<f64> {
    use Metric::*;
    match metric {
        Rate => load.rate,
        TtftP50Ms => Some(load.ttft_p50_ms),
        TtftP90Ms => Some(load.ttft_p90_ms),
        TtftP99Ms => Some(load.ttft_p99_ms),
        TpotP50Ms => load.tpot_p50_ms,
        TpotP90Ms => load.tpot_p90_ms,
        TpotP99Ms => load.tpot_p99_ms,
        E2eP50Ms => Some(load.e2e_p50_ms),
        E2eP90Ms => Some(load.e2e_p90_ms),
        E2eP99Ms => Some(load.e2e_p99_ms),
        RequestsPerS => Some(load.requests_per_s),
        OutputTokensPerS => Some(load.output_tokens_per_s),
        GoodputRequestsPerS => Some(load.goodput_requests_per_s),
        Preemptions => Some(load.preemptions as f64),
        UsdPerMillionOutputTokens => load.usd_per_million_output_tokens,
        RatePerUsdHour => load.rate_per_usd_hour,
        CommShare => Some(load.comm_share),
        UsdPerGpuHour => setup.usd_per_gpu_hour,
        UsdPerHour => load.usd_per_hour,
        TtftMs | TotalMs | ComputeMs | CommMs | PrefillCommMs | DecodeCommMs | PrefillCommShare | TokensPerS | TokensPerSPerGpu
        | UsdPerMillionTokens | Watts | JoulesPerToken | BusiestLinkUtil | PrefillBusbwGbps | DecodeBusbwGbps | PrefillAllreduceUs
        | DecodeAllreduceUs | TpGbPerGpu => None,
    }
}
