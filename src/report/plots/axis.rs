//! Where an axis starts and ends, where its ticks go and how they read:
//! linear axes tick at decimal 1-2-5 steps, decimal log axes at decades
//! (with 2 and 5 between over a short range), size and count axes at powers
//! of two; categories at whole positions. Labels are plain decimal numbers,
//! the unit belongs in the axis title.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;

/// How a log axis maps values: all are drawn in log space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogAxis {
    /// Powers of ten, labelled as numbers.
    Decimal,
    /// Powers of two, labelled as sizes ("4 KiB", "1 MiB").
    Bytes,
    /// Powers of two, labelled as counts ("1", "8", "32").
    Count,
}

/// How an axis maps values to positions.
#[derive(Debug, Clone, PartialEq)]
enum Scale {
    Linear,
    Log(LogAxis),
    /// Named values at 0, 1, 2, ...
    Categories(Vec<String>),
}

/// An axis: its range and its ticks, both in axis space (log space for log
/// axes), and how a position reads.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Axis {
    scale: Scale,
    pub range: Range<f64>,
    pub ticks: Vec<f64>,
}

/// Ticks a linear or decimal log axis aims at, at most.
const MOST_TICKS: f64 = 8.0;

/// The smallest and largest of `values` that `keep` accepts, if any.
fn extent(values: impl Iterator<Item = f64>, keep: impl Fn(f64) -> bool) -> Option<(f64, f64)> {
    let (low, high) =
        values.filter(|v| v.is_finite() && keep(*v)).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    low.is_finite().then_some((low, high))
}

/// The decimal 1-2-5 step (..., 0.5, 1, 2, 5, 10, 20, ...) that cuts
/// `span` into at most `MOST_TICKS` pieces.
pub(super) fn step_125(span: f64) -> f64 {
    let raw = (span / MOST_TICKS).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|step| *step >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * magnitude)
}

/// The multiples of `step` within `range` (with a little slack at its ends).
pub(super) fn multiples(step: f64, range: &Range<f64>) -> Vec<f64> {
    let slack = step * 1e-9;
    let first = ((range.start - slack) / step).ceil() as i64;
    let last = ((range.end + slack) / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Positions (log10) of the decimal ticks over whole decades `low..high`:
/// with 2 and 5 between every decade when `fine`, else every decade (every
/// second one beyond twelve).
pub(super) fn decade_ticks(low: i32, high: i32, fine: bool) -> Vec<f64> {
    let span = high - low;
    if fine {
        let mantissas = [1.0f64, 2.0, 5.0];
        (low..high).flat_map(|d| mantissas.map(|m| f64::from(d) + m.log10())).chain([f64::from(high)]).collect()
    } else {
        let every = if span <= 12 { 1 } else { 2 };
        (low..=high).step_by(every).map(f64::from).collect()
    }
}

impl Axis {
    /// A linear axis from zero (or below, for negative values) to a little
    /// above the largest value, ticked at a 1-2-5 step.
    pub fn linear(values: impl Iterator<Item = f64>) -> Axis {
        let (low, high) = extent(values, |_| true).unwrap_or((0.0, 1.0));
        let low = low.min(0.0);
        let high = if high <= low { low + 1.0 } else { high + (high - low) * 0.05 };
        let range = low..high;
        Axis { scale: Scale::Linear, ticks: multiples(step_125(high - low), &range), range }
    }

    /// A log axis over the positive `values`: decimal ones at decades, or
    /// at 1-2-5 ticks where the values span at most two decades (the range
    /// then trimmed to the ticks either side of them); size
    /// and count ones at every power of two (every second beyond twelve).
    pub fn log(kind: LogAxis, values: impl Iterator<Item = f64>) -> Axis {
        let to_axis = |v: f64| if kind == LogAxis::Decimal { v.log10() } else { v.log2() };
        let (low, high) = extent(values, |v| v > 0.0).map_or((0.0, 1.0), |(lo, hi)| (to_axis(lo), to_axis(hi)));
        let (start, end) = (low.floor() as i32, high.ceil() as i32);
        let end = if end <= start { start + 1 } else { end };
        let scale = Scale::Log(kind);
        if kind != LogAxis::Decimal {
            let every = if end - start <= 12 { 1 } else { 2 };
            let ticks = (start..=end).step_by(every).map(f64::from).collect();
            return Axis { scale, range: f64::from(start)..f64::from(end), ticks };
        }
        let fine = high - low <= 2.0;
        let ticks = decade_ticks(start, end, fine);
        if !fine {
            return Axis { scale, range: f64::from(start)..f64::from(end), ticks };
        }
        // A short range ends at the ticks either side of the values.
        let slack = 1e-9;
        let first = ticks.iter().copied().rev().find(|t| *t <= low + slack).unwrap_or(f64::from(start));
        let last = ticks.iter().copied().find(|t| *t >= high - slack).unwrap_or(f64::from(end));
        let last = if last <= first { first + 1.0 } else { last };
        let ticks = ticks.into_iter().filter(|t| (first - slack..=last + slack).contains(t)).collect();
        Axis { scale, range: first..last, ticks }
    }

    /// A decimal log axis when `log`, a linear one otherwise.
    pub fn new(log: bool, values: impl Iterator<Item = f64>) -> Axis {
        if log { Axis::log(LogAxis::Decimal, values) } else { Axis::linear(values) }
    }

    /// `names` at 0, 1, 2, ..., each with half a step either side.
    pub fn categories(names: &[String]) -> Axis {
        let n = names.len();
        Axis { scale: Scale::Categories(names.to_vec()), range: -0.5..(n as f64 - 0.5), ticks: (0..n).map(|i| i as f64).collect() }
    }

    /// The axis with `steps` more ticks' worth of room on the right (room
    /// for labels beside the last points), ticks at whole steps.
    pub fn widened(mut self, steps: usize) -> Axis {
        let step = self.ticks.windows(2).map(|w| w[1] - w[0]).fold(f64::INFINITY, f64::min);
        let step = if step.is_finite() { step } else { 1.0 };
        let end = self.ticks.last().copied().unwrap_or(self.range.end);
        for k in 1..=steps {
            self.ticks.push(end + step * k as f64);
        }
        self.range.end = self.range.end.max(end + step * steps as f64);
        self
    }

    /// Where `value` sits on the axis.
    pub fn at(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Log(LogAxis::Decimal) => value.log10(),
            Scale::Log(_) => value.log2(),
            Scale::Linear | Scale::Categories(_) => value,
        }
    }

    /// What a position on the axis reads.
    pub fn label(&self, position: f64) -> String {
        match &self.scale {
            Scale::Linear => number_label(position),
            Scale::Log(LogAxis::Decimal) => number_label(round_sig(10f64.powf(position))),
            Scale::Log(LogAxis::Count) => number_label(2f64.powf(position).round()),
            Scale::Log(LogAxis::Bytes) => {
                let bytes = 2f64.powf(position).round();
                const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
                let mut value = bytes;
                let mut unit = 0;
                while value >= 1024.0 && unit < UNITS.len() - 1 {
                    value /= 1024.0;
                    unit += 1;
                }
                format!("{} {}", number_label(value), UNITS[unit])
            }
            Scale::Categories(names) => {
                let index = position.round();
                if (position - index).abs() < 1e-6 && index >= 0.0 {
                    names.get(index as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
        }
    }
}

/// An axis as plotters draws it: its range, with grid lines and tick
/// labels at the axis's ticks only (labels read through `Axis::label`).
pub(super) struct Ticked {
    range: RangedCoordf64,
    ticks: Vec<f64>,
}

impl From<&Axis> for Ticked {
    fn from(axis: &Axis) -> Ticked {
        Ticked { range: axis.range.clone().into(), ticks: axis.ticks.clone() }
    }
}

impl Ranged for Ticked {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> Range<f64> {
        self.range.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }
}

/// `value` rounded to six significant digits (undoes the error of 10^log10).
pub(super) fn round_sig(value: f64) -> f64 {
    if value == 0.0 || !value.is_finite() {
        return value;
    }
    let scale = 10f64.powi(5 - value.abs().log10().floor() as i32);
    (value * scale).round() / scale
}

/// A number as people write it on an axis, in plain decimals: "0.0002",
/// "0.01", "2.5", "300", "1000000".
pub(super) fn number_label(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        return "0".into();
    }
    if magnitude >= 10.0 {
        return format!("{value:.0}");
    }
    // Three decimals, or as many as three significant digits need below 0.001.
    let decimals = if magnitude >= 1e-3 { 3 } else { (2 - magnitude.log10().floor() as i32).clamp(3, 15) as usize };
    let text = format!("{value:.decimals$}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(axis: &Axis) -> Vec<String> {
        axis.ticks.iter().map(|t| axis.label(*t)).collect()
    }

    #[test]
    fn steps_are_decimal_1_2_5() {
        assert_eq!(step_125(80.0), 10.0);
        assert_eq!(step_125(81.0), 20.0);
        assert_eq!(step_125(300.0), 50.0);
        assert_eq!(step_125(3.3), 0.5);
        assert!((step_125(1.2) - 0.2).abs() < 1e-12);
        assert_eq!(step_125(12_000.0), 2000.0);
        // A time axis of a 7.3 ms layer ticks every ms, not at powers of two.
        assert_eq!(labels(&Axis::linear([0.0, 7.3].into_iter())), ["0", "1", "2", "3", "4", "5", "6", "7"]);
        assert_eq!(labels(&Axis::linear([0.05, 0.42].into_iter())), ["0", "0.1", "0.2", "0.3", "0.4"]);
    }

    #[test]
    fn decimal_log_axes_tick_at_decades_with_2_and_5_over_a_short_range() {
        // Four decades: every decade, whole decades at the ends.
        let wide = Axis::log(LogAxis::Decimal, [10.0, 15_000.0].into_iter());
        assert_eq!((wide.range.clone(), labels(&wide)), (1.0..5.0, ["10", "100", "1000", "10000", "100000"].map(String::from).to_vec()));
        // Under two decades: 1-2-5, trimmed to the ticks around the values.
        let short = Axis::log(LogAxis::Decimal, [9.8, 160.0].into_iter());
        assert_eq!(labels(&short), ["5", "10", "20", "50", "100", "200"]);
        assert!((short.range.start - 5f64.log10()).abs() < 1e-12 && (short.range.end - 200f64.log10()).abs() < 1e-12);
        let small = Axis::log(LogAxis::Decimal, [0.12, 0.4].into_iter());
        assert_eq!(labels(&small), ["0.1", "0.2", "0.5"]);
        // Beyond twelve decades, every second.
        assert_eq!(decade_ticks(0, 14, false).len(), 8);
        assert_eq!(
            decade_ticks(-1, 1, true).iter().map(|t| number_label(round_sig(10f64.powf(*t)))).collect::<Vec<_>>(),
            ["0.1", "0.2", "0.5", "1", "2", "5", "10"]
        );
    }

    #[test]
    fn size_and_count_axes_tick_at_powers_of_two() {
        let sizes = Axis::log(LogAxis::Bytes, [16384.0, 1e8].into_iter());
        assert_eq!(sizes.label(14.0), "16 KiB");
        assert_eq!(sizes.label(27.0), "128 MiB");
        assert_eq!(sizes.ticks.first(), Some(&14.0));
        let drives = Axis::log(LogAxis::Count, [1.0, 32.0].into_iter()).widened(1);
        assert_eq!(labels(&drives), ["1", "2", "4", "8", "16", "32", "64"]);
    }

    #[test]
    fn numbers_read_in_plain_decimals() {
        assert_eq!(number_label(0.01), "0.01");
        assert_eq!(number_label(2.5), "2.5");
        assert_eq!(number_label(1e6), "1000000");
        assert_eq!(number_label(0.0002), "0.0002");
        assert_eq!(number_label(0.000123), "0.000123");
        assert_eq!(number_label(-40.0), "-40");
    }
}
