//! Axes and points: an axis's values (a list, or a range by a step or a
//! factor), listed points, their cross product in a fixed order, and the
//! slice of the points a shard runs. Knows keys only through `change`.

use serde::{Deserialize, Serialize};

use super::change::{Change, Key, Kind, Origin};
use crate::config::{ConfigError, ConfigResult};
use crate::units::Bandwidth;

/// Most points a sweep may have.
pub const MAX_POINTS: usize = 10_000_000;

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

impl RawAxis {
    /// Checks the axis written as `axis[index]` in `origin.path`.
    pub fn validate(&self, index: usize, origin: Origin) -> ConfigResult<Axis> {
        let at = |field: &str| format!("axis[{index}].{field}");
        let invalid = |field: &str, message: String| ConfigError::invalid(origin.path, at(field), message);
        let key = Key::parse(&self.key).map_err(|message| invalid("key", message))?;
        let range = self.from.is_some() || self.to.is_some() || self.step.is_some() || self.times.is_some();
        let written: Vec<toml::Value> = match (&self.values, range) {
            (Some(_), true) => {
                return Err(invalid("values", "give either values = [...] or a range (from, to, step or times), not both".into()));
            }
            (None, false) => {
                return Err(invalid(
                    "values",
                    format!("axis {} has no values: give values = [...] or from, to and step or times", self.key),
                ));
            }
            (Some(values), false) => values.clone(),
            (None, true) => self.range(&key).map_err(|(field, message)| invalid(field, message))?,
        };
        if written.is_empty() {
            return Err(invalid("values", format!("axis {} is empty: give at least one value", self.key)));
        }
        let changes = written
            .iter()
            .enumerate()
            .map(|(i, value)| Change::new(key.clone(), value, Origin { at: &at(&format!("values[{i}]")), ..origin }))
            .collect::<ConfigResult<Vec<Change>>>()?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, change) in changes.iter().enumerate() {
            if !seen.insert(change.shown.to_string()) {
                return Err(invalid(&format!("values[{i}]"), format!("{} appears twice on axis {}", change.describe(), self.key)));
            }
        }
        Ok(Axis { key, changes })
    }

    /// The values of a range, as TOML values of the key's kind; errors
    /// name the field.
    fn range(&self, key: &Key) -> Result<Vec<toml::Value>, (&'static str, String)> {
        let (Some(from), Some(to)) = (&self.from, &self.to) else {
            return Err(("from", "a range needs both from and to".into()));
        };
        let by = match (&self.step, self.times) {
            (Some(_), Some(_)) => return Err(("step", "give step or times, not both".into())),
            (None, None) => return Err(("step", "a range needs step (added) or times (multiplied)".into())),
            (step, times) => (step, times),
        };
        match key.kind() {
            Kind::Count { .. } => {
                let integer = |field: &'static str, value: &toml::Value| {
                    value
                        .as_integer()
                        .filter(|&i| i >= 0)
                        .ok_or((field, format!("{value} is not allowed: {} takes whole numbers", key.name())))
                };
                let (from, to) = (integer("from", from)?, integer("to", to)?);
                let next: Box<dyn Fn(i64) -> Option<i64>> = match by {
                    (Some(step), None) => {
                        let step = integer("step", step)?;
                        if step == 0 {
                            return Err(("step", "step must be above zero".into()));
                        }
                        Box::new(move |v| v.checked_add(step))
                    }
                    (None, Some(times)) if times.fract() == 0.0 && times >= 2.0 => Box::new(move |v| v.checked_mul(times as i64)),
                    _ => return Err(("times", format!("times must be a whole number of 2 or more for {}", key.name()))),
                };
                if from == 0 && by.1.is_some() {
                    return Err(("from", "a range multiplied at each step must start above zero".into()));
                }
                let values = steps(from, to, next, "from", "to")?;
                Ok(values.into_iter().map(toml::Value::Integer).collect())
            }
            Kind::Bandwidth => {
                let rate = |field: &'static str, value: &toml::Value| {
                    value
                        .as_str()
                        .and_then(|s| s.parse::<Bandwidth>().ok())
                        .filter(|b| b.0 > 0)
                        .ok_or((field, format!("{value} is not allowed: {} takes bandwidths above zero, as \"25GB/s\"", key.name())))
                };
                let (from, to) = (rate("from", from)?.0, rate("to", to)?.0);
                let next: Box<dyn Fn(u64) -> Option<u64>> = match by {
                    (Some(step), None) => {
                        let step = rate("step", step)?.0;
                        Box::new(move |v| v.checked_add(step))
                    }
                    (None, Some(times)) if times > 1.0 && times.is_finite() => Box::new(move |v| Some((v as f64 * times).round() as u64)),
                    _ => return Err(("times", "times must be above 1".into())),
                };
                let values = steps(from, to, next, "from", "to")?;
                Ok(values.into_iter().map(|v| toml::Value::String(Bandwidth(v).to_string())).collect())
            }
            Kind::Text | Kind::Any => {
                Err(("from", format!("ranges (from, to, step or times) apply to {RANGE_KEYS}; {} takes values = [...]", key.name())))
            }
        }
    }
}

/// `from`, then `next` of it, ... while not above `to`.
fn steps<T: Copy + PartialOrd + std::fmt::Display>(
    from: T,
    to: T,
    next: impl Fn(T) -> Option<T>,
    from_field: &'static str,
    to_field: &'static str,
) -> Result<Vec<T>, (&'static str, String)> {
    if from > to {
        return Err((from_field, format!("empty range: from {from} is above to {to}")));
    }
    let mut values = vec![from];
    while let Some(value) = next(*values.last().expect("starts with from")).filter(|&v| v <= to) {
        values.push(value);
        if values.len() > MAX_POINTS {
            return Err((to_field, format!("the range has more than {MAX_POINTS} values")));
        }
    }
    Ok(values)
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
