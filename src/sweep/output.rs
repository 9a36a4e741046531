//! A sweep's files and shards: `sweep.json` (what the sweep is: its
//! fingerprint, points, shard, columns, goal and plots), `results.jsonl` and
//! `results.csv` (every row ending with the fingerprint), written as one set;
//! merging the shards of one sweep back into one result (each shard exactly
//! once, its rows all of its manifest's sweep, rows in point order), ranking
//! the points that meet the goal, and the summary a run prints. Draws
//! through `figures`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::axes::Shard;
use super::figures::RawPlot;
use super::goal::{Goal, RawGoal};
use super::{LABEL, Sweep};
use crate::report::{self, Format, Record};

pub const MANIFEST: &str = "sweep.json";
pub const ROWS: &str = "results.jsonl";
pub const TABLE: &str = "results.csv";

/// What a sweep's output folder holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub icsim: String,
    pub sweep: PathBuf,
    pub description: String,
    pub fingerprint: String,
    /// Points of the whole sweep.
    pub points: usize,
    /// The slice these rows are (1/1: the whole sweep).
    pub shard: Shard,
    pub columns: Vec<String>,
    pub goal: RawGoal,
    pub plots: Vec<RawPlot>,
    pub output_dir: PathBuf,
}

impl Manifest {
    pub fn of(sweep: &Sweep, shard: Shard) -> Manifest {
        Manifest {
            icsim: env!("CARGO_PKG_VERSION").into(),
            sweep: sweep.path.clone(),
            description: sweep.description.clone(),
            fingerprint: sweep.fingerprint.clone(),
            points: sweep.len(),
            shard,
            columns: sweep.columns.clone(),
            goal: sweep.goal.raw.clone(),
            plots: sweep.plots.clone(),
            output_dir: sweep.output_dir.clone(),
        }
    }

    pub fn goal(&self) -> Result<Goal, String> {
        Goal::new(&self.goal, &self.sweep).map_err(|e| e.to_string())
    }
}

/// FNV-1a (64 bits) over `parts`, as hex: the same on every machine and
/// every Rust version, unlike the standard library's hasher.
pub fn fingerprint(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

/// Adds `rank` to every row of a whole sweep: 1 for the best point that
/// meets the goal, then 2, ...; empty for the rest.
pub fn rank(goal: &Goal, rows: &mut [Record]) {
    let ranking = goal.ranking(rows);
    for row in rows.iter_mut() {
        row.insert("rank".into(), Value::Null);
    }
    for (place, &index) in ranking.iter().enumerate() {
        rows[index].insert("rank".into(), json!(place + 1));
    }
}

/// The column that says which sweep a row belongs to: its fingerprint,
/// last in every row of results.jsonl and results.csv.
pub const FINGERPRINT: &str = "fingerprint";

/// Writes the manifest, the rows as JSON Lines and as CSV, each row ending
/// with the sweep's fingerprint, and with `plots` the manifest's plots, into
/// `dir` (creating it) as one set (see `report::files`): a run killed midway
/// leaves the previous set or this one.
pub fn write(dir: &Path, manifest: &Manifest, rows: &[Record], plots: bool) -> Result<Vec<PathBuf>, String> {
    let rows: Vec<Record> = rows
        .iter()
        .map(|row| {
            let mut row = row.clone();
            row.shift_remove(FINGERPRINT);
            row.insert(FINGERPRINT.into(), Value::String(manifest.fingerprint.clone()));
            row
        })
        .collect();
    let lines: String = rows.iter().map(|row| serde_json::to_string(row).expect("rows are plain JSON") + "\n").collect();
    let files = [
        (MANIFEST, serde_json::to_string_pretty(manifest).expect("a manifest is plain JSON") + "\n"),
        (ROWS, lines),
        (TABLE, report::render(&rows, Format::Csv)),
    ];
    let cannot = |e: std::io::Error| format!("cannot write the results in {}: {e}", dir.display());
    report::files::write_set(
        dir,
        |set| {
            let mut written = Vec::new();
            for (name, text) in files {
                written.push(set.write(name, text).map_err(cannot)?);
            }
            if plots {
                written.extend(super::figures::write_plots(set.staging(), manifest, &rows)?);
            }
            Ok(written)
        },
        cannot,
    )
}

fn read_manifest(dir: &Path) -> Result<Manifest, String> {
    report::files::recover(dir).map_err(|e| format!("cannot finish what a killed run left in {}: {e}", dir.display()))?;
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e} (is {} a sweep's output folder?)", path.display(), dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not a sweep manifest: {e}", path.display()))
}

fn read_rows(dir: &Path) -> Result<Vec<Record>, String> {
    let path = dir.join(ROWS);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(row)) => Ok(row),
            _ => Err(format!("{}: line {} is not a JSON object", path.display(), n + 1)),
        })
        .collect()
}

/// Refuses a shard whose results.jsonl or results.csv holds a row that is
/// not of the sweep its manifest names (a run of another sweep killed
/// midway, a file copied in), naming the file, the line and the two
/// fingerprints.
fn belongs(dir: &Path, manifest: &Manifest) -> Result<(), String> {
    let expected = &manifest.fingerprint;
    let refuse = |name: &str, line: usize, found: &str| {
        Err(format!(
            "{}: line {line} belongs to sweep {found}, not to {} ({expected}) that {} names: rerun this shard",
            dir.join(name).display(),
            manifest.sweep.display(),
            dir.join(MANIFEST).display()
        ))
    };
    for (n, row) in read_rows(dir)?.iter().enumerate() {
        let found = row.get(FINGERPRINT).and_then(Value::as_str).unwrap_or("(no fingerprint)");
        if found != expected {
            return refuse(ROWS, n + 1, found);
        }
    }
    let path = dir.join(TABLE);
    let table = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    for (n, line) in table.lines().enumerate() {
        let last = line.rsplit(',').next().unwrap_or_default();
        let wanted = if n == 0 { FINGERPRINT } else { expected.as_str() };
        if last != wanted {
            return refuse(TABLE, n + 1, if n == 0 { "(no fingerprint column)" } else { last });
        }
    }
    Ok(())
}

fn point_of(row: &Record) -> Option<usize> {
    row.get("point").and_then(Value::as_u64).map(|p| p as usize)
}

/// Joins the shards in `dirs` (every shard of one sweep, each once) into
/// the whole sweep's manifest and rows, in point order.
pub fn merge(dirs: &[PathBuf]) -> Result<(Manifest, Vec<Record>), String> {
    let first = dirs.first().ok_or("name the shards' output folders")?;
    let mut manifest = read_manifest(first)?;
    let count = manifest.shard.count;
    let mut seen: BTreeMap<usize, &PathBuf> = BTreeMap::new();
    let mut rows: Vec<Record> = Vec::with_capacity(manifest.points);
    for dir in dirs {
        let shard = read_manifest(dir)?;
        if shard.fingerprint != manifest.fingerprint || shard.shard.count != count {
            return Err(format!(
                "{} holds shard {} of sweep {} ({}), {} holds shard {} of {} ({}): merge the shards of one sweep",
                first.display(),
                manifest.shard,
                manifest.sweep.display(),
                manifest.fingerprint,
                dir.display(),
                shard.shard,
                shard.sweep.display(),
                shard.fingerprint
            ));
        }
        if let Some(other) = seen.insert(shard.shard.index, dir) {
            return Err(format!("shard {} is given twice: {} and {}", shard.shard, other.display(), dir.display()));
        }
        belongs(dir, &shard)?;
        for row in read_rows(dir)? {
            match point_of(&row) {
                Some(point) if shard.shard.contains(point) && point < manifest.points => rows.push(row),
                _ => {
                    return Err(format!(
                        "{}: a row that is not of shard {}: {}",
                        dir.join(ROWS).display(),
                        shard.shard,
                        Value::Object(row)
                    ));
                }
            }
        }
    }
    let missing: Vec<String> = (1..=count).filter(|i| !seen.contains_key(i)).map(|i| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        return Err(format!("missing shards {}: run them with --shard I/{count} and name their folders", missing.join(", ")));
    }
    rows.sort_by_key(|row| point_of(row).unwrap_or(usize::MAX));
    if let Some(pair) = rows.windows(2).find(|pair| point_of(&pair[0]) == point_of(&pair[1])) {
        return Err(format!("point {} appears twice", point_of(&pair[0]).unwrap_or_default()));
    }
    if rows.len() != manifest.points {
        return Err(format!("{} of the sweep's {} points have rows: a shard's results.jsonl is incomplete", rows.len(), manifest.points));
    }
    manifest.shard = Shard::WHOLE;
    Ok((manifest, rows))
}

/// What a run or a merge prints: the points that cannot run, grouped by
/// reason, and the best points that meet the goal.
pub fn summary(manifest: &Manifest, rows: &[Record], goal: &Goal) -> String {
    let mut text = String::new();
    let failed: Vec<&Record> = rows.iter().filter(|r| r.get("error").is_some_and(|e| !e.is_null())).collect();
    text += &format!("{} points: {} ran, {} cannot run\n", rows.len(), rows.len() - failed.len(), failed.len());
    if !failed.is_empty() {
        let mut reasons: Vec<(String, Vec<usize>)> = Vec::new();
        for row in &failed {
            let reason = report::cell(&row["error"]);
            let point = point_of(row).unwrap_or_default();
            match reasons.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, points)) => points.push(point),
                None => reasons.push((reason, vec![point])),
            }
        }
        text += "\ncannot run (the error column of results.csv says why for each):\n";
        for (reason, points) in &reasons {
            let shown: Vec<String> = points.iter().take(8).map(usize::to_string).collect();
            let more = if points.len() > 8 { format!(", ... ({} in all)", points.len()) } else { String::new() };
            text += &format!("  point {}{more}: {reason}\n", shown.join(", "));
        }
    }
    let ranked: Vec<&Record> = goal.ranking(rows).into_iter().map(|i| &rows[i]).collect();
    text += &format!("\ngoal: {}: {} of {} points meet it\n", goal.describe(), ranked.len(), rows.len() - failed.len());
    if ranked.is_empty() {
        return text;
    }
    let mut fields: Vec<String> = vec!["rank".into(), "point".into(), LABEL.into()];
    fields.extend(manifest.columns.iter().skip(1).cloned());
    let serving = ranked[0].contains_key("rate_per_usd_hour");
    let metrics: &[&str] = if serving {
        &["ttft_p99_ms", "tpot_p50_ms", "requests_per_s", "usd_per_hour", "rate_per_usd_hour"]
    } else {
        &["ttft_ms", "total_ms", "comm_share", "tokens_per_s_per_gpu", "usd_per_million_tokens", "joules_per_token"]
    };
    let wanted =
        metrics.iter().map(|m| m.to_string()).chain(goal.constraints.iter().map(|c| c.metric.clone())).chain([goal.objective.clone()]);
    for metric in wanted {
        if !fields.contains(&metric) {
            fields.push(metric);
        }
    }
    let table: Vec<Record> = ranked
        .iter()
        .take(goal.top)
        .enumerate()
        .map(|(place, row)| {
            let mut line = Record::new();
            for field in &fields {
                let value = if field == "rank" { json!(place + 1) } else { row.get(field).cloned().unwrap_or(Value::Null) };
                line.insert(field.clone(), value);
            }
            line
        })
        .collect();
    text += &report::render(&table, Format::Table);
    if manifest.columns.iter().any(|c| c == super::serving::RATE) {
        text += &knees(manifest, rows);
    }
    text
}

/// A serving sweep's rate grid read per configuration (every column but
/// the rate): the knee, the last rate of its leading run of points that
/// meet the goal, and what it takes per $ an hour.
fn knees(manifest: &Manifest, rows: &[Record]) -> String {
    let rate = super::serving::RATE;
    let columns: Vec<&String> = manifest.columns.iter().filter(|c| *c != rate).collect();
    let mut configurations: Vec<(Vec<Value>, Vec<&Record>)> = Vec::new();
    for row in rows {
        let key: Vec<Value> = columns.iter().map(|c| row.get(*c).cloned().unwrap_or(Value::Null)).collect();
        match configurations.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(row),
            None => configurations.push((key, vec![row])),
        }
    }
    let table: Vec<Record> = configurations
        .into_iter()
        .map(|(key, mut members)| {
            members.sort_by(|a, b| cell_number(a, rate).total_cmp(&cell_number(b, rate)));
            let knee = crate::serve::load::knee(members.iter().map(|r| r.get("meets_goal") == Some(&Value::Bool(true))));
            let mut line: Record = columns.iter().map(|c| c.to_string()).zip(key).collect();
            let at = knee.map(|i| members[i]);
            line.insert("knee_rate".into(), at.and_then(|r| r.get(rate).cloned()).unwrap_or(Value::Null));
            for metric in ["ttft_p99_ms", "tpot_p50_ms", "usd_per_hour", "rate_per_usd_hour"] {
                line.insert(metric.into(), at.and_then(|r| r.get(metric).cloned()).unwrap_or(Value::Null));
            }
            line
        })
        .collect();
    format!(
        "\nknee per configuration (the highest rate of the grid meeting the goal, every lower rate meeting it too):\n{}",
        report::render(&table, Format::Table)
    )
}

fn cell_number(row: &Record, column: &str) -> f64 {
    row.get(column).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_fnv_1a() {
        // FNV-1a of "a" then the separator byte, computed by hand from the
        // published offset basis and prime.
        let mut hash: u64 = 0xcbf29ce484222325;
        for byte in [b'a', 0xff] {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x100000001b3);
        }
        assert_eq!(fingerprint(&["a"]), format!("{hash:016x}"));
        assert_ne!(fingerprint(&["ab", "c"]), fingerprint(&["a", "bc"]), "parts are kept apart");
    }
}
