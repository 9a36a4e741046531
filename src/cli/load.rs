//! `icsim serve --rates R1,R2,...`: one service at several rates, each
//! served alone from its own requests on its own thread (rayon), reported
//! as latency against load with the knee marked: a table (or JSON or CSV),
//! and in --out the same as files with a plot of latency against load, the
//! objectives drawn and the knee ringed.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rayon::prelude::*;
use serde::Serialize;

use super::llm::emit;
use super::{BadInput, progress_bar};
use icsim::report::plots::{self, Bound, Curve, Curves, XScale};
use icsim::report::{self, Format, Record};
use icsim::serve::load::{self, Load, LoadError, LoadPoint, Server, Terms};
use icsim::serve::requests::Arrivals;
use icsim::serve::results::{Setup, Slo, SplitGroups};

use super::serve::split;
use icsim::sweep::cost::PerGpu;
use icsim::units::Time;

/// Most rates one command serves.
const MAX_RATES: usize = 64;

/// Where the results go: stdout's format and the --out folder.
pub struct Files<'a> {
    pub dir: Option<&'a Path>,
    pub format: Format,
}

/// One rate's row.
#[derive(Debug, Clone, Serialize)]
struct Row {
    #[serde(flatten)]
    point: LoadPoint,
    /// Whether this rate is the knee.
    knee: bool,
}

/// The service at every rate.
#[derive(Debug, Clone, Serialize)]
struct LoadReport {
    setup: Setup,
    requests: u64,
    slo_ttft_ms: Option<f64>,
    slo_tpot_ms: Option<f64>,
    /// The highest rate meeting the objectives, every lower one meeting
    /// them too; None without objectives or when the lowest misses them.
    knee_rate: Option<f64>,
    /// A split server's groups; absent for one group.
    #[serde(skip_serializing_if = "Option::is_none")]
    split: Option<SplitGroups>,
    rates: Vec<Row>,
}

/// Serves `load` on `server` at each of `rates` and reports them.
pub fn run(server: &Server, load: &Load, rates: &[f64], slo: Slo, per_gpu: Option<PerGpu>, files: Files) -> Result<()> {
    if rates.len() > MAX_RATES {
        return Err(BadInput(format!("--rates: {} rates, at most {MAX_RATES}", rates.len())).into());
    }
    if let Some(pair) = rates.windows(2).find(|pair| pair[1] <= pair[0]) {
        return Err(BadInput(format!("--rates: {} after {}: give the rates in rising order, each once", pair[1], pair[0])).into());
    }
    let bar = progress_bar((rates.len() * load.count) as u64, "serving {bar:40} {pos}/{len} requests at every rate, {elapsed}");
    let served: Vec<Result<LoadPoint, LoadError>> = rates
        .par_iter()
        .map(|&rate| {
            let arrivals = load.arrivals(Some(rate))?;
            let requests = load.requests(Some(rate))?;
            let (report, _) = server.serve(&requests, Terms { load, arrivals: &arrivals, slo, per_gpu }, &|| bar.inc(1))?;
            Ok(LoadPoint::of(Some(rate), &report, slo))
        })
        .collect();
    bar.finish_and_clear();
    let points = served.into_iter().collect::<Result<Vec<LoadPoint>, LoadError>>()?;
    let knee = load::knee(points.iter().map(|p| p.meets_slo == Some(true)));
    let mut setup = server.setup(load, &Arrivals::rate(rates[0], load.burstiness)?);
    setup.arrivals = load::describe_rates(rates, load.burstiness, load.max_concurrency);
    let report = LoadReport {
        setup,
        requests: load.count as u64,
        slo_ttft_ms: slo.ttft.map(Time::as_ms),
        slo_tpot_ms: slo.tpot.map(Time::as_ms),
        knee_rate: knee.map(|i| rates[i]),
        split: server.split_groups(),
        rates: points.into_iter().enumerate().map(|(i, point)| Row { point, knee: Some(i) == knee }).collect(),
    };
    let rows: Vec<Record> = report.rates.iter().map(report::flattened).collect();
    match files.format {
        Format::Table => emit(&table(&report, &rows))?,
        Format::Json => emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        Format::Csv => emit(&report::render(&rows, Format::Csv))?,
    }
    if let Some(dir) = files.dir {
        let written = write_files(dir, &report, &rows)?;
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        let note = format!("wrote {}", names.join(", "));
        if files.format == Format::Table { emit(&format!("\n{note}\n"))? } else { eprintln!("{note}") }
    }
    Ok(())
}

/// The objectives in words, as the knee reads them.
fn objectives(report: &LoadReport) -> Option<String> {
    let ttft = report.slo_ttft_ms.map(|ms| format!("p99 TTFT within {ms} ms"));
    let tpot = report.slo_tpot_ms.map(|ms| format!("p50 TPOT within {ms} ms"));
    let both: Vec<String> = ttft.into_iter().chain(tpot).collect();
    (!both.is_empty()).then(|| both.join(" and "))
}

fn table(report: &LoadReport, rows: &[Record]) -> String {
    let served = format!("{} requests at each rate, {}", report.requests, report.setup.arrivals);
    let mut text = match &report.split {
        Some(groups) => super::serve::header(
            &report.setup,
            &split::groups_line(&groups.prefill, &groups.decode),
            "KV cache of the decode group",
            &served,
        ),
        None => super::serve::header(&report.setup, &format!("TP={}", report.setup.tp), "KV cache", &served),
    };
    text += "\nlatency (ms, per request) and throughput against load:\n";
    text += &report::render(rows, Format::Table);
    text += &match (objectives(report), report.knee_rate) {
        (None, _) => "\nknee: give --slo-ttft or --slo-tpot to find it\n".to_string(),
        (Some(what), Some(rate)) => {
            format!("\nknee: {rate} requests/s, the highest rate with {what}, every lower rate meeting them too\n")
        }
        (Some(what), None) => format!("\nknee: none, the lowest rate misses {what}\n"),
    };
    text
}

/// Writes load.json, load.csv and the plot into `dir` as one set.
fn write_files(dir: &Path, report: &LoadReport, rows: &[Record]) -> Result<Vec<PathBuf>> {
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot write the results in {}: {e}", dir.display());
    let chart = chart(report);
    report::files::write_set(
        dir,
        |set| {
            let mut written = vec![
                set.write("load.json", serde_json::to_string_pretty(report)? + "\n").map_err(cannot)?,
                set.write("load.csv", report::render(rows, Format::Csv)).map_err(cannot)?,
            ];
            for extension in ["png", "svg"] {
                let path = set.staging().join(format!("latency-load.{extension}"));
                plots::curves(&chart, &path)?;
                written.push(path);
            }
            Ok(written)
        },
        cannot,
    )
}

/// p50 and p99 of TTFT and TPOT against the offered rate, on log axes, the
/// objectives as dashed lines in their metric's colour, the knee ringed on
/// the curves the objectives bound.
fn chart(report: &LoadReport) -> Curves {
    let s = &report.setup;
    let rows = &report.rates;
    let curve = |name: &str, colour: usize, value: fn(&LoadPoint) -> Option<f64>| Curve {
        name: name.into(),
        points: rows.iter().filter_map(|r| Some((r.point.rate?, value(&r.point)?))).collect(),
        reference: false,
        colour,
    };
    let series = vec![
        curve("TTFT p50", 0, |p| Some(p.ttft_p50_ms)),
        curve("TTFT p99", 1, |p| Some(p.ttft_p99_ms)),
        curve("TPOT p50", 2, |p| p.tpot_p50_ms),
        curve("TPOT p99", 3, |p| p.tpot_p99_ms),
    ];
    let bounds: Vec<Bound> = [
        report.slo_ttft_ms.map(|ms| (ms, format!("objective: p99 TTFT <= {ms} ms"), 1)),
        report.slo_tpot_ms.map(|ms| (ms, format!("objective: p50 TPOT <= {ms} ms"), 2)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let marks = match rows.iter().find(|r| r.knee) {
        Some(knee) => bounds
            .iter()
            .filter_map(|&(_, _, colour)| {
                let point = &knee.point;
                Some((point.rate?, if colour == 1 { point.ttft_p99_ms } else { point.tpot_p50_ms? }, colour))
            })
            .collect(),
        None => Vec::new(),
    };
    let offered = |row: Option<&Row>| row.and_then(|r| r.point.rate).unwrap_or(1.0);
    let (low, high) = (offered(rows.first()), offered(rows.last()));
    Curves {
        title: format!("Latency against load: {} on {}, TP={}, {}", s.model, s.topology, s.tp, s.transport),
        x_label: "offered load (requests/s)".into(),
        y_label: "latency per request (ms)".into(),
        x: if high >= 8.0 * low { XScale::Log } else { XScale::Linear },
        log_y: true,
        series,
        bounds,
        marks,
        marks_label: report.knee_rate.map_or_else(String::new, |rate| format!("knee: {rate} requests/s")),
    }
}
