//! The fidelity report: every measured point beside its prediction and the
//! error, then the median, 90th percentile and largest absolute error of
//! each series (a transport, a copy path, a kernel).

use rayon::prelude::*;
use serde_json::json;

use super::predict::{PredictError, predict};
use super::schema::Measurement;
use crate::config::hardware::HardwareModel;
use crate::report::Record;
use crate::topology::Topology;

/// One measured point and what the model says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub series: String,
    pub bytes: u64,
    pub label: String,
    pub measured_us: f64,
    pub predicted_us: Option<f64>,
    /// predicted / measured - 1.
    pub error: Option<f64>,
    /// What the model chose ("ring/ll"), or why there is no prediction.
    pub note: String,
}

/// Error statistics of one series.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub series: String,
    pub points: usize,
    pub median_abs: f64,
    pub p90_abs: f64,
    pub max_abs: f64,
}

/// Predicts every measurement (in parallel, results in input order).
pub fn compare(topo: &Topology, model: &HardwareModel, measurements: &[Measurement]) -> Result<Vec<Row>, PredictError> {
    measurements
        .par_iter()
        .map(|m| {
            let label = match m.op.as_str() {
                "kernel" => format!("{} tokens, TP={}", m.tokens.unwrap_or(0), m.tp.unwrap_or(1)),
                _ => crate::units::Bytes(m.bytes).to_string(),
            };
            let (predicted_us, note) = match predict(topo, model, m) {
                Ok(p) => (Some(p.time.as_us()), p.detail),
                Err(PredictError::NotModelled(why)) => (None, format!("not modelled: {why}")),
                Err(error) => return Err(error),
            };
            Ok(Row {
                series: m.series(),
                bytes: m.bytes,
                label,
                measured_us: m.time_us,
                error: predicted_us.map(|p| p / m.time_us - 1.0),
                predicted_us,
                note,
            })
        })
        .collect()
}

/// The value at quantile `q` (nearest rank) of sorted `values`.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Statistics of the absolute errors of rows that have a prediction,
/// grouped by series (in order of first appearance), keeping only rows
/// that `keep` accepts.
pub fn summarize(rows: &[Row], keep: impl Fn(&Row) -> bool) -> Vec<Summary> {
    let mut series: Vec<String> = Vec::new();
    for row in rows {
        if !series.contains(&row.series) {
            series.push(row.series.clone());
        }
    }
    series
        .into_iter()
        .filter_map(|name| {
            let mut errors: Vec<f64> = rows.iter().filter(|r| r.series == name && keep(r)).filter_map(|r| r.error.map(f64::abs)).collect();
            if errors.is_empty() {
                return None;
            }
            errors.sort_by(f64::total_cmp);
            Some(Summary {
                series: name,
                points: errors.len(),
                median_abs: median(&errors),
                p90_abs: quantile(&errors, 0.9),
                max_abs: *errors.last().expect("not empty"),
            })
        })
        .collect()
}

pub fn row_records(rows: &[Row]) -> Vec<Record> {
    rows.iter()
        .map(|r| {
            json!({
                "series": r.series,
                "size": r.label,
                "bytes": r.bytes,
                "measured_us": r.measured_us,
                "predicted_us": r.predicted_us,
                "error_pct": r.error.map(|e| e * 100.0),
                "model": r.note,
            })
            .as_object()
            .cloned()
            .expect("object")
        })
        .collect()
}

pub fn summary_records(summaries: &[Summary]) -> Vec<Record> {
    summaries
        .iter()
        .map(|s| {
            json!({
                "series": s.series,
                "points": s.points,
                "median_abs_error_pct": s.median_abs * 100.0,
                "p90_abs_error_pct": s.p90_abs * 100.0,
                "max_abs_error_pct": s.max_abs * 100.0,
            })
            .as_object()
            .cloned()
            .expect("object")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let sorted: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&sorted, 0.9), 9.0);
        assert_eq!(quantile(&sorted, 1.0), 10.0);
    }
}
