//! Axes and points: an axis's values (a list, or a range by a step or a
//! factor), listed points, their cross product in a fixed order, and the
//! slice of the points a shard runs. Knows keys only through `change`.

use serde::{Deserialize, Serialize};

use super::change::{Change, Key, Kind, Origin};
use crate::config::{ConfigError, ConfigResult};
use crate::units::Bandwidth;

/// Most points a sweep may have: a hundred times docs/guide.md's 10,000-point
/// sweep, and a bound on the time and memory a sweep file takes to check.
pub const MAX_POINTS: usize = 1_000_000;

/// One `[[axis]]` as written: a key and either `values` or a range.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAxis {
    pub key: String,
    pub values: Option<Vec<toml::Value>>,
    pub from: Option<toml::Value>,
    pub to: Option<toml::Value>,
    /// Added at each step.
    pub step: Option<toml::Value>,
    /// Multiplied at each step.
    pub times: Option<f64>,
}

/// A validated axis: its key and its changes, in order.
#[derive(Debug, Clone)]
pub struct Axis {
    pub key: Key,
    pub changes: Vec<Change>,
}

const RANGE_KEYS: &str = "integer keys (tp, gpus, channels, query.prompt, query.output, query.batch, topology.nvlink_links) and bandwidth keys (topology.nvlink_bandwidth, topology.host_memory_bandwidth)";

/// An axis's values as written: listed, or a range made one at a time.
enum Written<'a> {
    Listed(&'a [toml::Value]),
    Range(Steps),
}

impl RawAxis {
    /// The key of the axis written as `axis[index]` and how many values it
    /// has, counted without making them (a range of more than
    /// [`MAX_POINTS`] values is refused).
    pub fn count(&self, index: usize, origin: Origin) -> ConfigResult<(Key, usize)> {
        let (key, written) = self.written(index, origin)?;
        let count = match written {
            Written::Listed(values) => values.len(),
            Written::Range(steps) => steps.count().map_err(|(field, message)| invalid(index, origin, field, message))?,
        };
        Ok((key, count))
    }

    /// Checks the axis written as `axis[index]` in `origin.path` and makes
    /// its changes; call [`RawAxis::count`] first to bound their number.
    pub fn validate(&self, index: usize, origin: Origin) -> ConfigResult<Axis> {
        let at = |field: &str| format!("axis[{index}].{field}");
        let (key, written) = self.written(index, origin)?;
        let values: Vec<toml::Value> = match written {
            Written::Listed(values) => values.to_vec(),
            Written::Range(steps) => {
                steps.count().map_err(|(field, message)| invalid(index, origin, field, message))?;
                steps.values()
            }
        };
        if values.is_empty() {
            return Err(invalid(index, origin, "values", format!("axis {} is empty: give at least one value", self.key)));
        }
        let changes = values
            .iter()
            .enumerate()
            .map(|(i, value)| Change::new(key.clone(), value, Origin { at: &at(&format!("values[{i}]")), ..origin }))
            .collect::<ConfigResult<Vec<Change>>>()?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, change) in changes.iter().enumerate() {
            if !seen.insert(change.shown.to_string()) {
                let message = format!("{} appears twice on axis {}", change.describe(), self.key);
                return Err(invalid(index, origin, &format!("values[{i}]"), message));
            }
        }
        Ok(Axis { key, changes })
    }

    /// The key and how the values are written: listed, or a range.
    fn written(&self, index: usize, origin: Origin) -> ConfigResult<(Key, Written<'_>)> {
        let key = Key::parse(&self.key).map_err(|message| invalid(index, origin, "key", message))?;
        let range = self.from.is_some() || self.to.is_some() || self.step.is_some() || self.times.is_some();
        let written = match (&self.values, range) {
            (Some(_), true) => {
                let message = "give either values = [...] or a range (from, to, step or times), not both";
                return Err(invalid(index, origin, "values", message.into()));
            }
            (None, false) => {
                let message = format!("axis {} has no values: give values = [...] or from, to and step or times", self.key);
                return Err(invalid(index, origin, "values", message));
            }
            (Some(values), false) => Written::Listed(values),
            (None, true) => Written::Range(self.range(&key).map_err(|(field, message)| invalid(index, origin, field, message))?),
        };
        Ok((key, written))
    }

    /// The steps of a range, of the key's kind; errors name the field.
    fn range(&self, key: &Key) -> Result<Steps, (&'static str, String)> {
        let (Some(from), Some(to)) = (&self.from, &self.to) else {
            return Err(("from", "a range needs both from and to".into()));
        };
        let by = match (&self.step, self.times) {
            (Some(_), Some(_)) => return Err(("step", "give step or times, not both".into())),
            (None, None) => return Err(("step", "a range needs step (added) or times (multiplied)".into())),
            (step, times) => (step, times),
        };
        let (from, to, by, value): (u64, u64, By, fn(u64) -> toml::Value) = match key.kind() {
            Kind::Count { .. } => {
                let integer = |field: &'static str, value: &toml::Value| {
                    value
                        .as_integer()
                        .and_then(|i| u64::try_from(i).ok())
                        .ok_or((field, format!("{value} is not allowed: {} takes whole numbers", key.name())))
                };
                let by = match by {
                    (Some(step), None) => By::Adding(integer("step", step)?),
                    (None, Some(times)) if times.fract() == 0.0 && times >= 2.0 => By::Multiplying(times),
                    _ => return Err(("times", format!("times must be a whole number of 2 or more for {}", key.name()))),
                };
                (integer("from", from)?, integer("to", to)?, by, |v| toml::Value::Integer(v as i64))
            }
            Kind::Bandwidth => {
                let rate = |field: &'static str, value: &toml::Value| {
                    value
                        .as_str()
                        .and_then(|s| s.parse::<Bandwidth>().ok())
                        .filter(|b| b.0 > 0)
                        .ok_or((field, format!("{value} is not allowed: {} takes bandwidths above zero, as \"25GB/s\"", key.name())))
                };
                let by = match by {
                    (Some(step), None) => By::Adding(rate("step", step)?.0),
                    (None, Some(times)) if times > 1.0 && times.is_finite() => By::Multiplying(times),
                    _ => return Err(("times", "times must be above 1".into())),
                };
                (rate("from", from)?.0, rate("to", to)?.0, by, |v| toml::Value::String(Bandwidth(v).to_string()))
            }
            Kind::Text | Kind::Positive | Kind::Any | Kind::Storage => {
                return Err((
                    "from",
                    format!("ranges (from, to, step or times) apply to {RANGE_KEYS}; {} takes values = [...]", key.name()),
                ));
            }
        };
        match by {
            By::Adding(0) => return Err(("step", "step must be above zero".into())),
            By::Multiplying(_) if from == 0 => return Err(("from", "a range multiplied at each step must start above zero".into())),
            _ => {}
        }
        if from > to {
            return Err(("from", format!("empty range: from {} is above to {}", value(from), value(to))));
        }
        Ok(Steps { from, to, by, value })
    }
}

fn invalid(index: usize, origin: Origin, field: &str, message: String) -> ConfigError {
    ConfigError::invalid(origin.path, format!("axis[{index}].{field}"), message)
}

/// How a range goes from one value to the next.
#[derive(Clone, Copy)]
enum By {
    Adding(u64),
    /// Multiplying, rounded to a whole number (of bytes per second, or of a count).
    Multiplying(f64),
}

/// A range: `from`, then the next of it, ... while not above `to`, each
/// shown as `value` gives it.
struct Steps {
    from: u64,
    to: u64,
    by: By,
    value: fn(u64) -> toml::Value,
}

impl Steps {
    fn next(&self, value: u64) -> Option<u64> {
        let next = match self.by {
            By::Adding(step) => value.checked_add(step)?,
            By::Multiplying(times) => Some((value as f64 * times).round()).filter(|v| *v < u64::MAX as f64)? as u64,
        };
        (next <= self.to).then_some(next)
    }

    /// How many values the range has, without making them: worked out for a
    /// step, counted (at most [`MAX_POINTS`] + 1 steps) for a factor.
    fn count(&self) -> Result<usize, (&'static str, String)> {
        let too_many = |count: String| Err(("to", format!("the range has {count} values: at most {MAX_POINTS} points a sweep")));
        if let By::Adding(step) = self.by {
            let count = (self.to - self.from) / step + 1;
            return if count > MAX_POINTS as u64 { too_many(count.to_string()) } else { Ok(count as usize) };
        }
        let (mut count, mut value) = (1, self.from);
        while let Some(next) = self.next(value) {
            if next == value {
                let shown = (self.value)(value);
                return Err(("times", format!("times is too close to 1: {shown} times it is {shown} again")));
            }
            count += 1;
            if count > MAX_POINTS {
                return too_many(format!("more than {MAX_POINTS}"));
            }
            value = next;
        }
        Ok(count)
    }

    fn values(&self) -> Vec<toml::Value> {
        std::iter::successors(Some(self.from), |&v| self.next(v)).map(self.value).collect()
    }
}

/// Combinations of the cross product of `axes`.
pub fn combinations(axes: &[Axis]) -> usize {
    axes.iter().fold(1usize, |product, a| product.saturating_mul(a.changes.len()))
}

/// The `number`-th combination of the cross product of `axes` (the last
/// axis varies fastest): one change of each axis.
pub fn combination(axes: &[Axis], mut number: usize) -> Vec<&Change> {
    let mut picks: Vec<&Change> = axes
        .iter()
        .rev()
        .map(|axis| {
            let change = &axis.changes[number % axis.changes.len()];
            number /= axis.changes.len();
            change
        })
        .collect();
    picks.reverse();
    picks
}

/// The `index`-th of `count` slices of a sweep's points: point `p` belongs
/// to slice `p mod count + 1`, so that slices of a sweep whose costly
/// points cluster still take about as long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 1, count: 1 };

    pub fn contains(&self, point: usize) -> bool {
        point % self.count + 1 == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Shard, String> {
        let usage = "write I/N: the I-th of N slices, I from 1 to N (a Slurm array task id with --array=1-N)";
        let (index, count) = text.split_once('/').ok_or_else(|| format!("{text:?}: {usage}"))?;
        let (index, count) = match (index.trim().parse::<usize>(), count.trim().parse::<usize>()) {
            (Ok(index), Ok(count)) => (index, count),
            _ => return Err(format!("{text:?}: {usage}")),
        };
        if count == 0 || index == 0 || index > count {
            return Err(format!("{text:?}: I must be 1 to N and N at least 1; {usage}"));
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn origin() -> Origin<'static> {
        Origin { path: Path::new("s.toml"), at: "axis[0]", base_dir: Path::new(".") }
    }

    fn axis(text: &str) -> ConfigResult<Axis> {
        let raw: RawAxis = toml::from_str(text).unwrap();
        raw.validate(0, origin())
    }

    fn shown(axis: &Axis) -> Vec<String> {
        axis.changes.iter().map(|c| c.shown.to_string()).collect()
    }

    #[test]
    fn ranges_step_or_multiply_up_to_their_end() {
        assert_eq!(shown(&axis("key = \"query.prompt\"\nfrom = 1024\nto = 5000\ntimes = 2").unwrap()), ["1024", "2048", "4096"]);
        assert_eq!(shown(&axis("key = \"query.batch\"\nfrom = 1\nto = 7\nstep = 3").unwrap()), ["1", "4", "7"]);
        let rates = axis("key = \"topology.nvlink_bandwidth\"\nfrom = \"12.5GB/s\"\nto = \"100GB/s\"\ntimes = 2").unwrap();
        assert_eq!(shown(&rates), ["\"12.5GB/s\"", "\"25GB/s\"", "\"50GB/s\"", "\"100GB/s\""]);
    }

    #[test]
    fn bad_axes_name_the_field_and_what_is_allowed() {
        let error = axis("key = \"query.prompt\"\nfrom = 64\nto = 8\nstep = 8").unwrap_err().to_string();
        assert!(error.contains("s.toml: key `axis[0].from`") && error.contains("empty range"), "{error}");
        let error = axis("key = \"tp\"\nvalues = []").unwrap_err().to_string();
        assert!(error.contains("axis[0].values") && error.contains("empty"), "{error}");
        let error = axis("key = \"nvlink_bw\"\nvalues = [1]").unwrap_err().to_string();
        assert!(error.contains("axis[0].key") && error.contains("topology.nvlink_bandwidth"), "{error}");
        let error = axis("key = \"transport\"\nfrom = 1\nto = 2\nstep = 1").unwrap_err().to_string();
        assert!(error.contains("values = [...]"), "{error}");
        let error = axis("key = \"tp\"\nvalues = [2, 0]").unwrap_err().to_string();
        assert!(error.contains("axis[0].values[1]") && error.contains("from 1"), "{error}");
        let error = axis("key = \"tp\"\nvalues = [2, 2]").unwrap_err().to_string();
        assert!(error.contains("twice"), "{error}");
    }

    #[test]
    fn the_cross_product_varies_the_last_axis_fastest() {
        let axes = [axis("key = \"tp\"\nvalues = [2, 4]").unwrap(), axis("key = \"query.batch\"\nvalues = [1, 2, 3]").unwrap()];
        assert_eq!(combinations(&axes), 6);
        let points: Vec<String> =
            (0..6).map(|number| combination(&axes, number).iter().map(|c| c.describe()).collect::<Vec<_>>().join(" ")).collect();
        assert_eq!(points[..4], ["tp=2 query.batch=1", "tp=2 query.batch=2", "tp=2 query.batch=3", "tp=4 query.batch=1"]);
    }

    #[test]
    fn shards_split_the_points_once_each() {
        let shards: Vec<Shard> = (1..=4).map(|i| format!("{i}/4").parse().unwrap()).collect();
        for point in 0..23 {
            assert_eq!(shards.iter().filter(|s| s.contains(point)).count(), 1);
        }
        for bad in ["0/4", "5/4", "1/0", "x/2", "3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
