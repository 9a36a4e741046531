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
use super::goal::{Goal, Measured, Metric, RawGoal};
use super::row::{Outcome, SweepRow};
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
pub fn rank(goal: &Goal, rows: &mut [SweepRow]) {
    let ranking = goal.ranking(rows);
    for row in rows.iter_mut() {
        row.rank = Some(None);
    }
    for (place, &index) in ranking.iter().enumerate() {
        rows[index].rank = Some(Some(place + 1));
    }
}

/// The column that says which sweep a row belongs to: its fingerprint,
/// last in every row of results.jsonl and results.csv.
pub const FINGERPRINT: &str = "fingerprint";

/// Writes the manifest, the rows as JSON Lines and as CSV, each row ending
/// with the sweep's fingerprint, and with `plots` the manifest's plots, into
/// `dir` (creating it) as one set (see `report::files`): a run killed midway
/// leaves the previous set or this one.
pub fn write(dir: &Path, manifest: &Manifest, rows: &[SweepRow], plots: bool) -> Result<Vec<PathBuf>, String> {
    let records: Vec<Record> = rows
        .iter()
        .map(|row| {
            let mut record = row.record();
            record.insert(FINGERPRINT.into(), Value::String(manifest.fingerprint.clone()));
            record
        })
        .collect();
    let lines: String = records.iter().map(|row| serde_json::to_string(row).expect("rows are plain JSON") + "\n").collect();
    let files = [
        (MANIFEST, serde_json::to_string_pretty(manifest).expect("a manifest is plain JSON") + "\n"),
        (ROWS, lines),
        (TABLE, report::render(&records, Format::Csv)),
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
                written.extend(super::figures::write_plots(set.staging(), manifest, rows)?);
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

/// The rows of results.jsonl in `dir` as written.
fn read_records(dir: &Path) -> Result<Vec<Record>, String> {
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
    for (n, row) in read_records(dir)?.iter().enumerate() {
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

/// The rows of results.jsonl in `dir`, of a sweep of `columns`.
fn read_rows(dir: &Path, columns: &[String]) -> Result<Vec<SweepRow>, String> {
    let path = dir.join(ROWS);
    read_records(dir)?
        .into_iter()
        .enumerate()
        .map(|(n, record)| SweepRow::read(record, columns).map_err(|e| format!("{}: line {}: {e}", path.display(), n + 1)))
        .collect()
}

/// Joins the shards in `dirs` (every shard of one sweep, each once) into
/// the whole sweep's manifest and rows, in point order.
pub fn merge(dirs: &[PathBuf]) -> Result<(Manifest, Vec<SweepRow>), String> {
    let first = dirs.first().ok_or("name the shards' output folders")?;
    let mut manifest = read_manifest(first)?;
    let count = manifest.shard.count;
    let mut seen: BTreeMap<usize, &PathBuf> = BTreeMap::new();
    let mut rows: Vec<SweepRow> = Vec::with_capacity(manifest.points);
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
        for row in read_rows(dir, &shard.columns)? {
            if !(shard.shard.contains(row.point) && row.point < manifest.points) {
                return Err(format!(
                    "{}: a row that is not of shard {}: {}",
                    dir.join(ROWS).display(),
                    shard.shard,
                    Value::Object(row.record())
                ));
            }
            rows.push(row);
        }
    }
    let missing: Vec<String> = (1..=count).filter(|i| !seen.contains_key(i)).map(|i| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        return Err(format!("missing shards {}: run them with --shard I/{count} and name their folders", missing.join(", ")));
    }
    rows.sort_by_key(|row| row.point);
    if let Some(pair) = rows.windows(2).find(|pair| pair[0].point == pair[1].point) {
        return Err(format!("point {} appears twice", pair[0].point));
    }
    if rows.len() != manifest.points {
        return Err(format!("{} of the sweep's {} points have rows: a shard's results.jsonl is incomplete", rows.len(), manifest.points));
    }
    manifest.shard = Shard::WHOLE;
    Ok((manifest, rows))
}

/// What a run or a merge prints: the points that cannot run, grouped by
/// reason, and the best points that meet the goal.
pub fn summary(manifest: &Manifest, rows: &[SweepRow], goal: &Goal) -> String {
    let mut text = String::new();
    let failed: Vec<(&String, usize)> = rows.iter().filter_map(|r| r.error.as_ref().map(|e| (e, r.point))).collect();
    text += &format!("{} points: {} ran, {} cannot run\n", rows.len(), rows.len() - failed.len(), failed.len());
    if !failed.is_empty() {
        let mut reasons: Vec<(String, Vec<usize>)> = Vec::new();
        for &(reason, point) in &failed {
            match reasons.iter_mut().find(|(r, _)| r == reason) {
                Some((_, points)) => points.push(point),
                None => reasons.push((reason.clone(), vec![point])),
            }
        }
        text += "\ncannot run (the error column of results.csv says why for each):\n";
        for (reason, points) in &reasons {
            let shown: Vec<String> = points.iter().take(8).map(usize::to_string).collect();
            let more = if points.len() > 8 { format!(", ... ({} in all)", points.len()) } else { String::new() };
            text += &format!("  point {}{more}: {reason}\n", shown.join(", "));
        }
    }
    let ranked: Vec<&SweepRow> = goal.ranking(rows).into_iter().map(|i| &rows[i]).collect();
    text += &format!("\ngoal: {}: {} of {} points meet it\n", goal.describe(), ranked.len(), rows.len() - failed.len());
    if ranked.is_empty() {
        return text;
    }
    let mut fields: Vec<String> = vec!["rank".into(), "point".into(), LABEL.into()];
    fields.extend(manifest.columns.iter().skip(1).cloned());
    let serving = matches!(ranked[0].outcome, Some(Outcome::Service { .. }));
    let metrics: &[Metric] = if serving {
        &[Metric::TtftP99Ms, Metric::TpotP50Ms, Metric::RequestsPerS, Metric::UsdPerHour, Metric::RatePerUsdHour]
    } else {
        &[Metric::TtftMs, Metric::TotalMs, Metric::CommShare, Metric::TokensPerSPerGpu, Metric::UsdPerMillionTokens, Metric::JoulesPerToken]
    };
    let wanted = metrics.iter().copied().chain(goal.constraints.iter().map(|c| c.metric)).chain([goal.objective]);
    for metric in wanted {
        // A column no ranked row has (a rate per dollar where no rate was
        // offered) says nothing.
        let empty = ranked.iter().all(|row| row.metric(metric).is_none());
        if !empty && !fields.iter().any(|f| f == metric.name()) {
            fields.push(metric.name().to_string());
        }
    }
    let table: Vec<Record> = ranked
        .iter()
        .take(goal.top)
        .enumerate()
        .map(|(place, row)| {
            let record = row.record();
            let mut line = Record::new();
            for field in &fields {
                let value = if field == "rank" { json!(place + 1) } else { record.get(field).cloned().unwrap_or(Value::Null) };
                line.insert(field.clone(), value);
            }
            line
        })
        .collect();
    text += &report::render(&table, Format::Table);
    if let Some(load) = super::serving::load_axis(&manifest.columns) {
        text += &knees(manifest, rows, load);
    }
    text
}

/// A serving sweep's grid of rates (or of client caps) read per
/// configuration (every other column): the knee, the last of its leading
/// run of points that meet the goal, and what it takes per $ an hour (or
/// what a token costs there).
fn knees(manifest: &Manifest, rows: &[SweepRow], load: &str) -> String {
    let columns: Vec<&String> = manifest.columns.iter().filter(|c| *c != load).collect();
    let mut configurations: Vec<(Vec<Value>, Vec<&SweepRow>)> = Vec::new();
    for row in rows {
        let key: Vec<Value> = columns.iter().map(|c| row.column(c).unwrap_or(Value::Null)).collect();
        match configurations.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(row),
            None => configurations.push((key, vec![row])),
        }
    }
    let table: Vec<Record> = configurations
        .into_iter()
        .map(|(key, mut members)| {
            let offered = |row: &SweepRow| row.column(load).and_then(|r| r.as_f64()).unwrap_or(f64::NAN);
            members.sort_by(|a, b| offered(a).total_cmp(&offered(b)));
            let knee = crate::serve::load::knee(members.iter().map(|r| r.meets_goal == Some(true)));
            let mut line: Record = columns.iter().map(|c| c.to_string()).zip(key).collect();
            let at = knee.map(|i| members[i].record());
            let name = format!("knee_{}", load.trim_start_matches("serve."));
            line.insert(name, at.as_ref().and_then(|r| r.get(load).cloned()).unwrap_or(Value::Null));
            let priced = if load == super::serving::RATE { Metric::RatePerUsdHour } else { Metric::UsdPerMillionOutputTokens };
            for metric in [Metric::TtftP99Ms, Metric::TpotP50Ms, Metric::UsdPerHour, priced] {
                line.insert(metric.name().into(), at.as_ref().and_then(|r| r.get(metric.name()).cloned()).unwrap_or(Value::Null));
            }
            line
        })
        .collect();
    let (knee, every) = super::serving::knee_words(load);
    format!(
        "\nknee per configuration ({knee} of the grid meeting the goal, {every} meeting it too):\n{}",
        report::render(&table, Format::Table)
    )
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
