//! How a log axis maps values and labels them: powers of ten as numbers,
//! powers of two as sizes or counts.

use std::ops::Range;

/// How an axis maps values: both log axes are drawn in log space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogAxis {
    /// Powers of ten, labelled as numbers.
    Decimal,
    /// Powers of two, labelled as sizes ("4 KiB", "1 MiB").
    Bytes,
    /// Powers of two, labelled as counts ("1", "8", "32").
    Count,
}

impl LogAxis {
    pub(super) fn to_axis(self, value: f64) -> f64 {
        match self {
            LogAxis::Decimal => value.log10(),
            LogAxis::Bytes | LogAxis::Count => value.log2(),
        }
    }

    pub(super) fn label(self, position: f64) -> String {
        match self {
            LogAxis::Decimal => number_label(10f64.powf(position)),
            LogAxis::Count => number_label(2f64.powf(position).round()),
            LogAxis::Bytes => {
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
        }
    }

    /// The axis range covering `values` in log space, widened to whole
    /// steps, and how many labels put one at every step.
    pub(super) fn range(self, values: impl Iterator<Item = f64>) -> (Range<f64>, usize) {
        let (low, high) = values
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| self.to_axis(v))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (low, high) = if low.is_finite() { (low.floor(), high.ceil()) } else { (0.0, 1.0) };
        let high = if high <= low { low + 1.0 } else { high };
        let span = (high - low) as usize;
        // One label a step up to 12 steps, then every second step.
        let labels = if span <= 12 { span + 1 } else { span / 2 + 1 };
        (low..high, labels)
    }
}

/// A number as people write it on an axis: "0.01", "2.5", "300", "1e+06".
pub(super) fn number_label(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&magnitude) {
        format!("{value:.0e}")
    } else if magnitude >= 10.0 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_read_as_people_write_them() {
        assert_eq!(LogAxis::Bytes.label(14.0), "16 KiB");
        assert_eq!(LogAxis::Bytes.label(27.0), "128 MiB");
        assert_eq!(LogAxis::Decimal.label(-2.0), "0.01");
        assert_eq!(LogAxis::Decimal.label(2.0), "100");
        assert_eq!(LogAxis::Decimal.range([0.02, 350.0].into_iter()), (-2.0..3.0, 6));
    }
}
