//! A sweep's `[[plot]]` tables: checked against the sweep's columns and
//! metrics, then filled from its rows: a metric against one axis with one
//! line per value of another (and any published reference series), a
//! heatmap over two axes, the Pareto front of two metrics. Each is written
//! as PNG and SVG through `report::plots`. Computes no metric.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::change::{key_words, short_words};
use super::goal::{Measured, Metric};
use super::output::Manifest;
use super::row::SweepRow;
use crate::report::cell;
use crate::report::plots::{self, Bound, Curve, Curves, Heatmap, Mark, Pareto, XScale};
use crate::units::Bandwidth;

/// One `[[plot]]` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawPlot {
    /// lines, heatmap or pareto.
    pub kind: String,
    /// File name without extension (default `<kind>-<number>`).
    pub name: Option<String>,
    pub title: Option<String>,
    /// lines, heatmap: a column (an axis key or `label`); pareto: a metric.
    pub x: Option<String>,
    /// lines, pareto: a metric; heatmap: a column.
    pub y: Option<String>,
    /// lines: one line per value of this column.
    pub series: Option<String>,
    /// heatmap: the metric in the cells.
    pub metric: Option<String>,
    /// Only the points whose columns have these values.
    #[serde(rename = "where", default)]
    pub filter: BTreeMap<String, Value>,
    #[serde(default)]
    pub log_x: bool,
    #[serde(default)]
    pub log_y: bool,
    /// lines: published figures drawn beside the sweep's.
    #[serde(rename = "reference", default)]
    pub references: Vec<RawReference>,
}

/// A published series, with where it comes from.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawReference {
    pub name: String,
    pub source: String,
    /// (x, y) pairs in the plot's units.
    pub points: Vec<[f64; 2]>,
    /// The value of the plot's series column whose line this is compared
    /// with (drawn in its colour).
    pub like: Option<String>,
}

const KINDS: &str = "lines, heatmap or pareto";

impl RawPlot {
    /// The file name (without extension) of the plot at `index`: its
    /// `name`, or `<kind>-<index>`.
    pub fn file_name(&self, index: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("{}-{index}", self.kind))
    }

    /// Checks the plot against the sweep's `columns` (with their values);
    /// errors name the field (`.x`) and what is allowed.
    pub fn validate(&self, index: usize, columns: &BTreeMap<String, Vec<Value>>) -> Result<(), (String, String)> {
        let column = |field: &str, name: &Option<String>| -> Result<String, (String, String)> {
            let listed: Vec<&str> = columns.keys().map(String::as_str).collect();
            match name {
                Some(name) if columns.contains_key(name) => Ok(name.clone()),
                Some(name) => Err((format!(".{field}"), format!("{name:?} is not a column of this sweep; columns: {}", listed.join(", ")))),
                None => Err((format!(".{field}"), format!("a {} plot needs {field} (a column: {})", self.kind, listed.join(", ")))),
            }
        };
        let metric = |field: &str, name: &Option<String>, default: Option<&str>| -> Result<String, (String, String)> {
            let name = name
                .clone()
                .or(default.map(String::from))
                .ok_or((format!(".{field}"), format!("a {} plot needs {field} (a metric)", self.kind)))?;
            Metric::from_str(&name).map_err(|message| (format!(".{field}"), message))?;
            Ok(name)
        };
        if let Some(name) = &self.name
            && (name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err((".name".into(), format!("{name:?}: a file name of letters, digits, - and _")));
        }
        for (key, value) in &self.filter {
            let values = columns.get(key).ok_or_else(|| (".where".to_string(), format!("{key:?} is not a column of this sweep")))?;
            if !values.contains(value) {
                let shown: Vec<String> = values.iter().map(Value::to_string).collect();
                return Err((".where".into(), format!("{key} = {value} is not one of its values: {}", shown.join(", "))));
            }
        }
        if self.kind != "lines" && !self.references.is_empty() {
            return Err((".reference".into(), "reference series go on lines plots".into()));
        }
        match self.kind.as_str() {
            "lines" => {
                let x = column("x", &self.x)?;
                metric("y", &self.y, None)?;
                if let Some(series) = &self.series
                    && column("series", &self.series)? == x
                {
                    return Err((".series".into(), format!("{series} is already the x axis")));
                }
                for (i, reference) in self.references.iter().enumerate() {
                    if reference.points.is_empty() {
                        return Err((format!(".reference[{i}].points"), "a reference series needs points".into()));
                    }
                    let values = self.series.as_ref().and_then(|s| columns.get(s)).map(|v| v.iter().map(cell).collect::<Vec<_>>());
                    if let Some(like) = &reference.like
                        && !values.as_ref().is_some_and(|v| v.contains(like))
                    {
                        let allowed = values.map_or("a plot with series".to_string(), |v| v.join(", "));
                        return Err((
                            format!(".reference[{i}].like"),
                            format!("{like:?} is not a value of the series column; allowed: {allowed}"),
                        ));
                    }
                }
            }
            "heatmap" => {
                let (x, y) = (column("x", &self.x)?, column("y", &self.y)?);
                metric("metric", &self.metric, None)?;
                if x == y {
                    return Err((".y".into(), format!("{y} is already the x axis")));
                }
                if let Some((free, values)) =
                    columns.iter().find(|(name, values)| ![&x, &y].contains(name) && values.len() > 1 && !self.filter.contains_key(*name))
                {
                    return Err((
                        ".where".into(),
                        format!(
                            "plot {index} leaves {free} free ({} values): fix it, e.g. where = {{ {free} = {} }}",
                            values.len(),
                            values[0]
                        ),
                    ));
                }
            }
            "pareto" => {
                metric("x", &self.x, Some("total_ms"))?;
                metric("y", &self.y, Some("usd_per_million_tokens"))?;
            }
            other => return Err((".kind".into(), format!("unknown plot kind {other:?}: use {KINDS}"))),
        }
        Ok(())
    }
}

/// Draws every plot of `manifest` from `rows` into `dir`, as PNG and SVG.
pub fn write_plots(dir: &Path, manifest: &Manifest, rows: &[SweepRow]) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    for (index, plot) in manifest.plots.iter().enumerate() {
        let name = plot.file_name(index);
        let chosen: Vec<&SweepRow> = rows
            .iter()
            .filter(|row| row.ran())
            .filter(|row| plot.filter.iter().all(|(key, value)| row.column(key).as_ref() == Some(value)))
            .collect();
        let fixed: Vec<String> = plot.filter.iter().map(|(k, v)| value_named(k, v)).collect();
        let context = if fixed.is_empty() { String::new() } else { format!(" ({})", fixed.join(", ")) };
        for extension in ["png", "svg"] {
            let path = dir.join(format!("{name}.{extension}"));
            let drawn = match plot.kind.as_str() {
                "lines" => plots::curves(&lines(plot, manifest, &chosen, &context), &path),
                "heatmap" => plots::heatmap(&heatmap(plot, &chosen, &context), &path),
                _ => plots::pareto(&pareto(plot, manifest, &chosen, &context), &path),
            };
            drawn.map_err(|e| e.to_string())?;
            written.push(path);
        }
    }
    Ok(written)
}

/// A column's value as a number: numbers as they are, bandwidths in GB/s.
fn numeric(value: &Value) -> Option<f64> {
    value.as_f64().or_else(|| value.as_str().and_then(|s| s.parse::<Bandwidth>().ok()).map(Bandwidth::as_gbps))
}

/// Columns that tell `rows` apart beyond `first`: the other columns (not
/// `taken`) in order, each kept only if it splits the rows further.
fn distinguishing(manifest: &Manifest, rows: &[&SweepRow], first: &[String], taken: &[&str]) -> Vec<String> {
    let groups = |columns: &[String]| {
        let mut seen: Vec<Vec<Option<Value>>> = Vec::new();
        for row in rows {
            let key: Vec<Option<Value>> = columns.iter().map(|c| row.column(c)).collect();
            if !seen.contains(&key) {
                seen.push(key);
            }
        }
        seen.len()
    };
    let mut chosen = first.to_vec();
    for column in &manifest.columns {
        if taken.contains(&column.as_str()) || chosen.contains(column) {
            continue;
        }
        let before = groups(&chosen);
        chosen.push(column.clone());
        if groups(&chosen) == before {
            chosen.pop();
        }
    }
    chosen
}

/// "TP=2, shm": a row's values of `columns`, each as `value_named` writes it.
fn name_of(row: &SweepRow, columns: &[String]) -> String {
    columns.iter().map(|c| value_named(c, &row.column(c).unwrap_or(Value::Null))).collect::<Vec<_>>().join(", ")
}

/// A column's value for names and titles: the mode's label alone ("shm"),
/// any other after its key in a few words ("TP=2", "batch=8").
fn value_named(column: &str, value: &Value) -> String {
    let shown = if value.is_null() { "-".to_string() } else { cell(value) };
    if column == super::LABEL { shown } else { format!("{}={shown}", short_words(column)) }
}

fn lines(plot: &RawPlot, manifest: &Manifest, rows: &[&SweepRow], context: &str) -> Curves {
    let x = plot.x.clone().unwrap_or_default();
    let y = plot.y.clone().unwrap_or_default();
    let metric = plotted(&y);
    let series_column: Vec<String> = plot.series.iter().cloned().collect();
    let split = distinguishing(manifest, rows, &series_column, &[&x]);
    let values: Vec<Value> = rows.iter().filter_map(|row| row.column(&x)).collect();
    let numbers = values.iter().all(|v| numeric(v).is_some());
    let bandwidth = numbers && values.iter().any(|v| v.is_string());
    let mut categories: Vec<String> = Vec::new();
    for value in &values {
        if !numbers && !categories.contains(&cell(value)) {
            categories.push(cell(value));
        }
    }
    let position =
        |value: &Value| if numbers { numeric(value) } else { categories.iter().position(|c| *c == cell(value)).map(|i| i as f64) };
    let mut series: Vec<Curve> = Vec::new();
    // The series column's value of each line, for references to match.
    let mut values: Vec<String> = Vec::new();
    // Each line's points with whether they meet the goal.
    let mut meets: Vec<Vec<(f64, f64, bool)>> = Vec::new();
    for row in rows {
        let (Some(px), Some(py)) = (row.column(&x).as_ref().and_then(position), metric.and_then(|m| row.metric(m))) else { continue };
        let name = if split.is_empty() { key_words(&y) } else { name_of(row, &split) };
        // Beside published figures, say which lines are simulated.
        let name = if plot.references.is_empty() { name } else { format!("icsim, {name}") };
        let met = row.meets_goal == Some(true);
        match series.iter().position(|s| s.name == name) {
            Some(index) => {
                series[index].points.push((px, py));
                meets[index].push((px, py, met));
            }
            None => {
                values.push(plot.series.as_ref().and_then(|s| row.column(s)).map_or(String::new(), |v| cell(&v)));
                series.push(Curve { name, points: vec![(px, py)], reference: false, colour: series.len() });
                meets.push(vec![(px, py, met)]);
            }
        }
    }
    let along_load = super::serving::load_axis(std::slice::from_ref(&x)).is_some();
    let (bounds, marks) = if along_load { knees(plot, manifest, &series, &mut meets) } else { (Vec::new(), Vec::new()) };
    let mut spare = series.len();
    for reference in &plot.references {
        let points = reference.points.iter().map(|p| (p[0], p[1])).collect();
        let colour = reference.like.as_ref().and_then(|like| values.iter().position(|v| v == like)).unwrap_or_else(|| {
            spare += 1;
            spare - 1
        });
        series.push(Curve { name: format!("{} ({})", reference.name, reference.source), points, reference: true, colour });
    }
    let scale = match (numbers, plot.log_x) {
        (false, _) => XScale::Categories(categories),
        (true, true) => XScale::Log,
        (true, false) => XScale::Linear,
    };
    Curves {
        title: plot.title.clone().unwrap_or_else(|| format!("{} against {}{context}", key_words(&y), key_words(&x))),
        x_label: if bandwidth { format!("{}, GB/s", key_words(&x)) } else { key_words(&x) },
        y_label: key_words(&y),
        x: scale,
        log_y: plot.log_y,
        series,
        bounds,
        marks,
        marks_label: format!("knee: {} meeting the goal", super::serving::knee_words(&x).0),
    }
}

/// Against a service's rate or clients' cap: the goal's bounds on the
/// plotted metric as lines, and each line's knee (the last point of its
/// leading run meeting the goal, `serve::load::knee`) ringed in its colour.
fn knees(plot: &RawPlot, manifest: &Manifest, series: &[Curve], meets: &mut [Vec<(f64, f64, bool)>]) -> (Vec<Bound>, Vec<Mark>) {
    let y = plot.y.clone().unwrap_or_default();
    let bounds = match manifest.goal() {
        Ok(goal) => goal
            .constraints
            .iter()
            .zip(&goal.raw.require)
            .filter(|(c, _)| c.metric.name() == y)
            .map(|(c, text)| (c.bound, format!("goal: {text}"), 7))
            .collect(),
        Err(_) => Vec::new(),
    };
    let marks = series
        .iter()
        .zip(meets.iter_mut())
        .filter_map(|(curve, points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let at = crate::serve::load::knee(points.iter().map(|p| p.2))?;
            Some((points[at].0, points[at].1, curve.colour))
        })
        .collect();
    (bounds, marks)
}

fn heatmap(plot: &RawPlot, rows: &[&SweepRow], context: &str) -> Heatmap {
    let (x, y, metric) = (plot.x.clone().unwrap_or_default(), plot.y.clone().unwrap_or_default(), plot.metric.clone().unwrap_or_default());
    let ticks = |column: &str| {
        let mut ticks: Vec<String> = Vec::new();
        for row in rows {
            let tick = row.column(column).map_or("-".into(), |v| cell(&v));
            if !ticks.contains(&tick) {
                ticks.push(tick);
            }
        }
        ticks
    };
    let (x_ticks, y_ticks) = (ticks(&x), ticks(&y));
    let index = |ticks: &[String], row: &SweepRow, column: &str| {
        ticks.iter().position(|t| *t == row.column(column).map_or("-".into(), |v| cell(&v)))
    };
    let shown = plotted(&metric);
    let cells = rows.iter().filter_map(|row| Some((index(&x_ticks, row, &x)?, index(&y_ticks, row, &y)?, row.metric(shown?)?))).collect();
    Heatmap {
        title: plot
            .title
            .clone()
            .unwrap_or_else(|| format!("{} over {} and {}{context}", key_words(&metric), key_words(&x), key_words(&y))),
        x_label: key_words(&x),
        y_label: key_words(&y),
        x_ticks,
        y_ticks,
        cells,
        value_label: key_words(&metric),
    }
}

/// The metric a checked plot names (None only for a plot read from a
/// manifest that names none).
fn plotted(name: &str) -> Option<Metric> {
    name.parse().ok()
}

/// The points no other point beats on both metrics (lower is better), in
/// order of the first.
pub fn front(points: &[(f64, f64, usize)]) -> Vec<(f64, f64, usize)> {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut front: Vec<(f64, f64, usize)> = Vec::new();
    for point in sorted {
        if front.last().is_none_or(|last| point.1 < last.1) {
            front.push(point);
        }
    }
    front
}

fn pareto(plot: &RawPlot, manifest: &Manifest, rows: &[&SweepRow], context: &str) -> Pareto {
    let x = plot.x.clone().unwrap_or_else(|| Metric::TotalMs.name().into());
    let y = plot.y.clone().unwrap_or_else(|| Metric::UsdPerMillionTokens.name().into());
    let (mx, my) = (plotted(&x), plotted(&y));
    let measured: Vec<(f64, f64, usize)> =
        rows.iter().enumerate().filter_map(|(i, row)| Some((row.metric(mx?)?, row.metric(my?)?, i))).collect();
    let points = measured.iter().map(|&(px, py, i)| (px, py, rows[i].meets_goal == Some(true))).collect();
    let named = distinguishing(manifest, rows, &[], &[]);
    let edge = front(&measured);
    Pareto {
        title: plot.title.clone().unwrap_or_else(|| format!("{} against {}{context}", key_words(&y), key_words(&x))),
        x_label: key_words(&x),
        y_label: key_words(&y),
        log_x: plot.log_x,
        log_y: plot.log_y,
        points,
        front: edge.iter().map(|&(px, py, i)| (px, py, name_of(rows[i], &named))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_front_keeps_what_nothing_beats_on_both() {
        let points = [(1.0, 9.0, 0), (2.0, 5.0, 1), (3.0, 6.0, 2), (4.0, 1.0, 3), (2.0, 7.0, 4)];
        let kept: Vec<usize> = front(&points).iter().map(|p| p.2).collect();
        assert_eq!(kept, [0, 1, 3]);
    }

    #[test]
    fn plots_name_the_field_and_the_columns() {
        let columns: BTreeMap<String, Vec<Value>> =
            [("label".to_string(), vec![json!("shm"), json!("p2p")]), ("tp".to_string(), vec![json!(2), json!(4)])].into();
        let plot = |text: &str| toml::from_str::<RawPlot>(text).unwrap().validate(0, &columns);
        assert!(plot("kind = \"lines\"\nx = \"tp\"\ny = \"ttft_ms\"\nseries = \"label\"").is_ok());
        let (field, message) = plot("kind = \"lines\"\nx = \"batch\"\ny = \"ttft_ms\"").unwrap_err();
        assert!(field == ".x" && message.contains("label, tp"), "{message}");
        let (field, message) = plot("kind = \"lines\"\nx = \"tp\"\ny = \"latency\"").unwrap_err();
        assert!(field == ".y" && message.contains("ttft_ms"), "{message}");
        let (field, message) = plot("kind = \"heatmap\"\nx = \"tp\"\ny = \"label\"").unwrap_err();
        assert!(field == ".metric", "{message}");
        let (field, message) = plot("kind = \"bars\"").unwrap_err();
        assert!(field == ".kind" && message.contains("pareto"), "{message}");
        let (field, message) = plot("kind = \"pareto\"\nwhere = { tp = 3 }").unwrap_err();
        assert!(field == ".where" && message.contains("2, 4"), "{message}");
    }
}
