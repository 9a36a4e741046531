//! The fidelity report: every measured point beside its prediction and the
//! error, then the median, 90th percentile and largest absolute error of
//! each series (a transport, a copy path, a kernel), over all sizes and per
//! size band, beside a second model's where one is given.

use rayon::prelude::*;
use serde::Serialize;

use super::predict::{PredictError, Prediction, predict};
use super::schema::{LLM_FORWARD, Measurement};
use crate::config::hardware::HardwareModel;
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

/// Where a size falls: latency sets the time of small messages, bandwidth
/// that of large ones, and both matter in between. The edges are where
/// NCCL's tuner moves off LL (about 64 KiB on NVLink) and where a 2-GPU
/// H200 allreduce reaches nine tenths of its bus bandwidth (16 MiB, the
/// shared measurements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Band {
    All,
    Small,
    Medium,
    Large,
}

impl Band {
    pub const MEDIUM_FROM: u64 = 64 << 10;
    pub const LARGE_FROM: u64 = 16 << 20;
    pub const SIZED: [Band; 3] = [Band::Small, Band::Medium, Band::Large];

    pub fn of(bytes: u64) -> Band {
        match bytes {
            b if b < Self::MEDIUM_FROM => Band::Small,
            b if b < Self::LARGE_FROM => Band::Medium,
            _ => Band::Large,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Band::All => "all sizes",
            Band::Small => "< 64 KiB",
            Band::Medium => "64 KiB - 16 MiB",
            Band::Large => ">= 16 MiB",
        }
    }

    /// Whether a row of `bytes` belongs to this band.
    pub fn holds(self, bytes: u64) -> bool {
        self == Band::All || Band::of(bytes) == self
    }
}

/// Statistics of absolute errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    pub points: usize,
    pub median_abs: f64,
    pub p90_abs: f64,
    pub max_abs: f64,
}

impl ErrorStats {
    /// Of the given errors (signed or not); `None` when there are none.
    pub fn of(errors: impl Iterator<Item = f64>) -> Option<ErrorStats> {
        let mut errors: Vec<f64> = errors.map(f64::abs).collect();
        errors.sort_by(f64::total_cmp);
        let max_abs = *errors.last()?;
        Some(ErrorStats { points: errors.len(), median_abs: median(&errors), p90_abs: quantile(&errors, 0.9), max_abs })
    }
}

/// Error statistics of one series in one size band, and of a second model
/// (the one before a refit) over the same points where it was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub series: String,
    pub band: Band,
    pub errors: ErrorStats,
    pub before: Option<ErrorStats>,
}

/// What a row measured, in a few words: its size, or for compute its LLM,
/// TP degree and shape (`70b TP=2 8192 x1`, decode `kv 8192 x16`).
fn label(m: &Measurement) -> String {
    let model = m.model.as_deref().map(|name| name.trim_start_matches("llama-3.1-")).unwrap_or("70b");
    let tp = m.tp.unwrap_or(1);
    let batch = m.batch.unwrap_or(1);
    match (m.op.as_str(), m.m, m.kv_len.filter(|&kv| kv > 0)) {
        ("kernel", Some(rows), _) => format!("{model} TP={tp} m={rows}"),
        ("kernel" | LLM_FORWARD, _, Some(kv)) => format!("{model} TP={tp} kv {kv} x{batch}"),
        ("kernel" | LLM_FORWARD, _, None) => format!("{model} TP={tp} {} x{batch}", m.tokens.unwrap_or(0)),
        _ => crate::units::Bytes(m.bytes).to_string(),
    }
}

/// A measurement the model cannot predict although it covers its kind
/// (ranks beyond the topology, sizes that disagree with the LLM, ...).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("measurement {} ({series}): {error}", index + 1)]
pub struct RowError {
    /// Its position among the measurements, from 0.
    pub index: usize,
    pub series: String,
    pub error: PredictError,
}

/// Predicts every measurement (in parallel, results in input order).
/// A row the model does not model, or that ran on more GPUs than the
/// topology has, is listed with the reason; one it should predict but
/// cannot is an error naming the row, and so is the first of a file none of
/// whose rows the topology can run.
pub fn compare(topo: &Topology, model: &HardwareModel, measurements: &[Measurement]) -> Result<Vec<Row>, RowError> {
    let predictions: Vec<Result<Prediction, PredictError>> = measurements.par_iter().map(|m| predict(topo, model, m)).collect();
    let row_error = |index: usize, error: &PredictError| RowError { index, series: measurements[index].series(), error: error.clone() };
    let elsewhere = predictions.iter().enumerate().find_map(|(index, p)| match p {
        Err(error @ PredictError::Elsewhere(_)) => Some((index, error)),
        _ => None,
    });
    if let Some((index, error)) = elsewhere
        && predictions.iter().all(Result::is_err)
    {
        return Err(row_error(index, error));
    }
    measurements
        .iter()
        .zip(predictions)
        .enumerate()
        .map(|(index, (m, prediction))| {
            let (predicted_us, note) = match prediction {
                Ok(p) => (Some(p.time.as_us()), p.detail),
                Err(error @ (PredictError::NotModelled(_) | PredictError::Elsewhere(_))) => (None, error.to_string()),
                Err(error) => return Err(row_error(index, &error)),
            };
            Ok(Row {
                series: m.series(),
                bytes: m.bytes,
                label: label(m),
                measured_us: m.time_us,
                error: predicted_us.map(|p| p / m.time_us - 1.0),
                predicted_us,
                note,
            })
        })
        .collect()
}

/// Rows without a prediction and why, one per distinct series and reason.
pub fn unpredicted(rows: &[Row]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for row in rows.iter().filter(|r| r.predicted_us.is_none()) {
        let entry = (row.series.clone(), row.note.clone());
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
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

/// Error statistics of rows that have a prediction, by series (in order of
/// first appearance): over all sizes, then per size band where a series
/// spans more than one. Only rows that `keep` accepts count. `before` holds
/// the same measurements predicted by a second model, row for row.
pub fn summarize(rows: &[Row], before: Option<&[Row]>, keep: impl Fn(&Row) -> bool) -> Vec<Summary> {
    if let Some(before) = before {
        assert_eq!(before.len(), rows.len(), "both models predict the same measurements");
    }
    let mut series: Vec<&str> = Vec::new();
    for row in rows {
        if !series.contains(&row.series.as_str()) {
            series.push(&row.series);
        }
    }
    let stats = |rows: &[Row], name: &str, band: Band| {
        ErrorStats::of(rows.iter().filter(|r| r.series == name && band.holds(r.bytes) && keep(r)).filter_map(|r| r.error))
    };
    let mut out = Vec::new();
    for name in series {
        let Some(all) = stats(rows, name, Band::All) else { continue };
        let bands: Vec<(Band, ErrorStats)> = Band::SIZED.into_iter().filter_map(|band| Some((band, stats(rows, name, band)?))).collect();
        // Unsized rows (kernels) all fall in one band, so they get no band rows.
        let shown = if bands.len() > 1 { bands } else { Vec::new() };
        for (band, errors) in [(Band::All, all)].into_iter().chain(shown) {
            out.push(Summary { series: name.to_string(), band, errors, before: before.and_then(|b| stats(b, name, band)) });
        }
    }
    out
}

/// A row as `calibrate validate` writes it (JSON keys, CSV columns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowLine<'a> {
    pub series: &'a str,
    pub size: &'a str,
    pub bytes: u64,
    pub measured_us: f64,
    pub predicted_us: Option<f64>,
    pub error_pct: Option<f64>,
    pub model: &'a str,
}

impl Row {
    pub fn line(&self) -> RowLine<'_> {
        RowLine {
            series: &self.series,
            size: &self.label,
            bytes: self.bytes,
            measured_us: self.measured_us,
            predicted_us: self.predicted_us,
            error_pct: self.error.map(|e| e * 100.0),
            model: &self.note,
        }
    }
}

/// A summary as `calibrate validate` writes it, errors in percent to a
/// tenth; the second model's columns only beside one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryLine<'a> {
    pub series: &'a str,
    pub sizes: &'static str,
    pub points: usize,
    pub median_abs_error_pct: f64,
    pub p90_abs_error_pct: f64,
    pub max_abs_error_pct: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_median_abs_error_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_max_abs_error_pct: Option<f64>,
}

impl Summary {
    pub fn line(&self) -> SummaryLine<'_> {
        let percent = |x: f64| (x * 1000.0).round() / 10.0;
        SummaryLine {
            series: &self.series,
            sizes: self.band.label(),
            points: self.errors.points,
            median_abs_error_pct: percent(self.errors.median_abs),
            p90_abs_error_pct: percent(self.errors.p90_abs),
            max_abs_error_pct: percent(self.errors.max_abs),
            before_median_abs_error_pct: self.before.map(|b| percent(b.median_abs)),
            before_max_abs_error_pct: self.before.map(|b| percent(b.max_abs)),
        }
    }
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

    fn row(series: &str, bytes: u64, error: f64) -> Row {
        Row {
            series: series.into(),
            bytes,
            label: String::new(),
            measured_us: 1.0,
            predicted_us: Some(1.0 + error),
            error: Some(error),
            note: String::new(),
        }
    }

    #[test]
    fn sizes_fall_in_three_bands() {
        assert_eq!(Band::of(8), Band::Small);
        assert_eq!(Band::of((64 << 10) - 1), Band::Small);
        assert_eq!(Band::of(64 << 10), Band::Medium);
        assert_eq!(Band::of(16 << 20), Band::Large);
        assert!(Band::All.holds(1) && Band::Large.holds(1 << 30) && !Band::Large.holds(1));
    }

    #[test]
    fn summaries_split_series_by_band_and_set_a_second_model_beside() {
        let after = vec![row("a", 8, 0.01), row("a", 1 << 20, -0.02), row("a", 1 << 30, 0.04), row("k", 0, 0.1), row("a", 16, -0.03)];
        let before: Vec<Row> = after.iter().map(|r| row(&r.series, r.bytes, r.error.unwrap() * 10.0)).collect();
        let summary = summarize(&after, Some(&before), |_| true);
        let bands: Vec<(&str, Band, usize)> = summary.iter().map(|s| (s.series.as_str(), s.band, s.errors.points)).collect();
        assert_eq!(
            bands,
            vec![("a", Band::All, 4), ("a", Band::Small, 2), ("a", Band::Medium, 1), ("a", Band::Large, 1), ("k", Band::All, 1)]
        );
        assert_eq!(summary[1].errors.max_abs, 0.03);
        assert!((summary[1].before.unwrap().max_abs - 0.3).abs() < 1e-12);
        // A series within one band gets no band rows; `keep` drops rows.
        let kept = summarize(&after, None, |r| r.bytes >= 1 << 20);
        assert_eq!(kept.iter().map(|s| (s.band, s.errors.points, s.before)).collect::<Vec<_>>()[0], (Band::All, 2, None));
    }
}
