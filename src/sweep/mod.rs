//! What-if capacity planning: `icsim sweep` and `icsim diff`. Owns the sweep
//! file (`configs/sweeps/*.toml`: a base experiment, axes or listed points,
//! a goal, a cost table, plots), the vocabulary of changes by key shared
//! with `icsim diff --set`, running points in parallel, goals and cost,
//! shards and their merge, and comparing two runs. Runs experiments only
//! through `workload::experiment` and changes hardware only through
//! `topology::Edit`; it must not change how anything is simulated.

pub mod axes;
pub mod change;
pub mod cost;
pub mod diff;
pub mod figures;
pub mod goal;
pub mod output;
pub mod row;
pub mod run;
pub mod serving;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::experiment::{RawExperiment, Source};
use crate::config::{ConfigError, ConfigResult, parse_toml, read_text};
use axes::{Axis, RawAxis};
use change::{Change, Key, Origin};
use cost::{CostModel, RawCost};
use figures::RawPlot;
use goal::{Goal, RawGoal};

/// The sweep file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSweep {
    #[serde(default)]
    pub description: String,
    /// The base experiment file (relative to the sweep file).
    pub experiment: Option<String>,
    /// Or the base experiment written here, with an experiment file's keys.
    pub base: Option<RawExperiment>,
    /// Where results and plots go (default `results/sweeps/<file stem>`).
    pub output_dir: Option<PathBuf>,
    #[serde(rename = "axis", default)]
    pub axes: Vec<RawAxis>,
    /// Listed points, each a table of changes; crossed with the axes.
    #[serde(rename = "point", default)]
    pub points: Vec<toml::Table>,
    pub goal: Option<RawGoal>,
    pub cost: Option<RawCost>,
    #[serde(rename = "plot", default)]
    pub plots: Vec<RawPlot>,
    /// A service to serve at each point instead of the base's query.
    pub serve: Option<serving::RawService>,
}

/// One point: a mode of the base experiment and the changes made to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Position among all of the sweep's points.
    pub index: usize,
    /// The base experiment's mode.
    pub mode: usize,
    pub label: String,
    pub changes: Vec<Change>,
}

/// A validated sweep. Its points are made on demand from the axes (a large
/// sweep is not held in memory).
#[derive(Debug, Clone)]
pub struct Sweep {
    pub path: PathBuf,
    pub description: String,
    pub base: RawExperiment,
    pub base_source: Source,
    pub output_dir: PathBuf,
    listed: Vec<Vec<Change>>,
    axes: Vec<Axis>,
    /// The columns that say what each point is: `label` (the base mode),
    /// then the axes' and listed points' keys.
    pub columns: Vec<String>,
    /// The `[goal]`, or no constraint and the cheapest first.
    pub goal: Goal,
    pub cost: CostModel,
    pub plots: Vec<RawPlot>,
    /// The service each point serves (a `[serve]` table), or none: each
    /// point replays the base's query.
    pub service: Option<serving::Service>,
    /// Identifies the sweep across shards: its file, its base experiment
    /// and the icsim version.
    pub fingerprint: String,
}

/// The implicit column of the base experiment's modes.
pub const LABEL: &str = "label";

impl Sweep {
    pub fn load(path: &Path) -> ConfigResult<Sweep> {
        Sweep::parse(path, &read_text(path)?)
    }

    /// Validates sweep text read from `path`.
    pub fn parse(path: &Path, text: &str) -> ConfigResult<Sweep> {
        let raw: RawSweep = parse_toml(path, text)?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let (base, base_source, base_text) = base_of(&raw, path, &base_dir)?;
        if base.modes.is_empty() {
            return Err(ConfigError::invalid(base_source.path(), "mode", "the base experiment needs one or more [[mode]] tables"));
        }
        let origin = Origin { path, at: "axis", base_dir: &base_dir };
        // Counted, not made: a sweep too large is refused before its values exist.
        let counted = raw.axes.iter().enumerate().map(|(i, axis)| axis.count(i, origin)).collect::<ConfigResult<Vec<(Key, usize)>>>()?;
        let listed =
            raw.points.iter().enumerate().map(|(i, table)| listed_point(i, table, path, &base_dir)).collect::<ConfigResult<Vec<_>>>()?;
        let columns = columns_of(path, &counted, &listed)?;
        let sets_transport =
            counted.iter().any(|(key, _)| *key == Key::Transport) || listed.iter().flatten().any(|c| c.key == Key::Transport);
        if sets_transport && base.modes.len() > 1 {
            return Err(ConfigError::invalid(
                base_source.path(),
                "mode",
                format!(
                    "the sweep sets every mode's transport, and the base experiment has {} modes: the points would repeat; give the base one [[mode]]",
                    base.modes.len()
                ),
            ));
        }
        if raw.output_dir.as_ref().is_some_and(|dir| dir.as_os_str().is_empty()) {
            return Err(ConfigError::invalid(
                path,
                "output_dir",
                "is empty: name the folder for results, or leave the key out for results/sweeps/<file name>",
            ));
        }
        let service = raw.serve.as_ref().map(|serve| serving::Service::new(serve, path)).transpose()?;
        let keys: Vec<(String, Key)> = counted
            .iter()
            .enumerate()
            .map(|(i, (key, _))| (format!("axis[{i}].key"), key.clone()))
            .chain(
                listed
                    .iter()
                    .enumerate()
                    .flat_map(|(i, changes)| changes.iter().map(move |c| (format!("point[{i}].{}", c.key.name()), c.key.clone()))),
            )
            .collect();
        serving::check_keys(service.as_ref(), &keys, path)?;
        let mut raw_goal = raw.goal.clone().unwrap_or_default();
        if let Some(service) = &service
            && raw_goal.minimize.is_none()
            && raw_goal.maximize.is_none()
        {
            let (metric, maximize) = serving::default_objective(service, &keys);
            if maximize { raw_goal.maximize = Some(metric.into()) } else { raw_goal.minimize = Some(metric.into()) }
        }
        let goal = Goal::new(&raw_goal, path)?;
        let cost = CostModel::load(raw.cost.as_ref(), path, "cost.")?;
        check_point_count(path, base.modes.len().saturating_mul(listed.len().max(1)), &counted)?;
        let axes = raw.axes.iter().enumerate().map(|(i, axis)| axis.validate(i, origin)).collect::<ConfigResult<Vec<Axis>>>()?;
        let mut sweep = Sweep {
            path: path.to_path_buf(),
            description: raw.description.clone(),
            base,
            base_source,
            output_dir: raw
                .output_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("results/sweeps").join(path.file_stem().unwrap_or_default())),
            listed,
            axes,
            columns,
            goal,
            cost,
            plots: Vec::new(),
            service,
            fingerprint: output::fingerprint(&[env!("CARGO_PKG_VERSION"), text, &base_text]),
        };
        let values = sweep.column_values();
        for (i, plot) in raw.plots.iter().enumerate() {
            plot.validate(i, &values).map_err(|(field, message)| ConfigError::invalid(path, format!("plot[{i}]{field}"), message))?;
        }
        let names: Vec<String> = raw.plots.iter().enumerate().map(|(i, plot)| plot.file_name(i)).collect();
        if let Some(twice) = crate::first_repeat(&names) {
            let first = names.iter().position(|name| *name == names[twice]).unwrap_or_default();
            return Err(ConfigError::invalid(
                path,
                format!("plot[{twice}].name"),
                format!(
                    "{:?} is plot[{first}]'s file name too, and one would overwrite the other: give each plot its own name",
                    names[twice]
                ),
            ));
        }
        sweep.plots = raw.plots;
        Ok(sweep)
    }

    /// How many points the sweep has.
    pub fn len(&self) -> usize {
        // Saturating: a product past MAX_POINTS is refused when the file is read.
        self.base.modes.len().saturating_mul(self.listed.len().max(1)).saturating_mul(axes::combinations(&self.axes))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `index`-th point: modes outermost, then listed points, then the
    /// axes' cross product (the last axis fastest).
    pub fn point(&self, index: usize) -> Point {
        let combinations = axes::combinations(&self.axes);
        let listed = self.listed.len().max(1);
        let mode = index / (listed * combinations);
        let listed_index = index / combinations % listed;
        let mut changes: Vec<Change> = self.listed.get(listed_index).cloned().unwrap_or_default();
        changes.extend(axes::combination(&self.axes, index % combinations).into_iter().cloned());
        let raw_mode = &self.base.modes[mode];
        // A mode named only by its transport is named by the one the point sets.
        let transport = changes.iter().rev().find_map(|c| match (&c.key, &c.value) {
            (Key::Transport, change::Value::Text(text)) => Some(text.clone()),
            _ => None,
        });
        let label = raw_mode.label.clone().or(transport).unwrap_or_else(|| raw_mode.transport.clone());
        Point { index, mode, label, changes }
    }

    /// Every column's values, in order of first appearance.
    pub fn column_values(&self) -> BTreeMap<String, Vec<serde_json::Value>> {
        let mut values: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
        let mut seen: std::collections::BTreeSet<(String, String)> = std::collections::BTreeSet::new();
        let mut add = |column: String, value: serde_json::Value| {
            if seen.insert((column.clone(), value.to_string())) {
                values.entry(column).or_default().push(value);
            }
        };
        let changes = || self.axes.iter().flat_map(|a| &a.changes).chain(self.listed.iter().flatten());
        for mode in &self.base.modes {
            add(LABEL.to_string(), mode.label.clone().unwrap_or_else(|| mode.transport.clone()).into());
            if mode.label.is_none() {
                changes().filter(|c| c.key == Key::Transport).for_each(|c| add(LABEL.to_string(), c.shown.clone()));
            }
        }
        for change in changes() {
            add(change.key.name(), change.shown.clone());
        }
        values
    }
}

/// The base experiment of a sweep file read from `path`: the file it names
/// or its `[base]` table, with where it came from and the file's text.
fn base_of(raw: &RawSweep, path: &Path, base_dir: &Path) -> ConfigResult<(RawExperiment, Source, String)> {
    match (&raw.experiment, &raw.base) {
        (Some(file), None) => {
            let file = base_dir.join(file);
            let text = read_text(&file).map_err(|error| ConfigError::invalid(path, "experiment", error.to_string()))?;
            Ok((parse_toml::<RawExperiment>(&file, &text)?, Source::File(file), text))
        }
        (None, Some(base)) => Ok((base.clone(), Source::File(path.to_path_buf()), String::new())),
        _ => Err(ConfigError::invalid(
            path,
            "experiment",
            "name the base experiment once: experiment = \"FILE\" or a [base] table with an experiment's keys",
        )),
    }
}

/// A sweep's columns: the label, each axis's key, then each key a listed
/// point sets; an axis named twice, or a key both an axis and listed, is refused.
fn columns_of(path: &Path, counted: &[(Key, usize)], listed: &[Vec<Change>]) -> ConfigResult<Vec<String>> {
    let mut columns = vec![LABEL.to_string()];
    for (at, key) in counted.iter().enumerate().map(|(i, (key, _))| (format!("axis[{i}].key"), key)) {
        if columns.contains(&key.name()) {
            return Err(ConfigError::invalid(path, at, format!("{} is already an axis", key.name())));
        }
        columns.push(key.name());
    }
    for (i, changes) in listed.iter().enumerate() {
        for change in changes {
            let name = change.key.name();
            if counted.iter().any(|(key, _)| *key == change.key) {
                return Err(ConfigError::invalid(
                    path,
                    format!("point[{i}].{name}"),
                    format!("{name} is also an axis: set it in one place"),
                ));
            }
            if !columns.contains(&name) {
                columns.push(name);
            }
        }
    }
    Ok(columns)
}

/// Refuses a sweep of more than `axes::MAX_POINTS` points: `points` from
/// its modes and listed points, times each axis's count in turn (the first
/// that goes over is named).
fn check_point_count(path: &Path, mut points: usize, counted: &[(Key, usize)]) -> ConfigResult<()> {
    if points > axes::MAX_POINTS {
        return Err(ConfigError::invalid(path, "point", format!("{points} points: at most {} a sweep", axes::MAX_POINTS)));
    }
    for (i, (key, count)) in counted.iter().enumerate() {
        points = points.saturating_mul(*count);
        if points > axes::MAX_POINTS {
            return Err(ConfigError::invalid(
                path,
                format!("axis[{i}]"),
                format!(
                    "{count} values of {} bring the sweep to {} points: at most {} a sweep (split it into several sweep files)",
                    key.name(),
                    points,
                    axes::MAX_POINTS
                ),
            ));
        }
    }
    Ok(())
}

/// The changes of `[[point]]` number `index`; nested tables are dotted keys
/// (`query = { prompt = 4096 }` is `query.prompt`).
fn listed_point(index: usize, table: &toml::Table, path: &Path, base_dir: &Path) -> ConfigResult<Vec<Change>> {
    let mut flat: Vec<(String, &toml::Value)> = Vec::new();
    flatten("", table, &mut flat);
    if flat.is_empty() {
        return Err(ConfigError::invalid(path, format!("point[{index}]"), "an empty point: give it one or more changes (tp = 4, ...)"));
    }
    flat.into_iter()
        .map(|(name, value)| {
            let at = format!("point[{index}].{name}");
            let key = Key::parse(&name).map_err(|message| ConfigError::invalid(path, &at, message))?;
            Change::new(key, value, Origin { path, at: &at, base_dir })
        })
        .collect()
}

fn flatten<'t>(prefix: &str, table: &'t toml::Table, into: &mut Vec<(String, &'t toml::Value)>) {
    for (key, value) in table {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            toml::Value::Table(inner) => flatten(&name, inner, into),
            value => into.push((name, value)),
        }
    }
}

#[cfg(test)]
mod tests;
