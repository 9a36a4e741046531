//! `icsim serve --rates R1,R2,...` and `--max-concurrency C1,C2,...`: one
//! service at several rates, or under several client caps, each served
//! alone from its own requests on its own thread (rayon), reported as
//! latency against load with the knee marked: a table (or JSON or CSV), and
//! in --out the same as files with a plot of latency against load, the
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
use icsim::serve::requests::{self, Arrivals};
use icsim::serve::results::{Setup, Slo, SplitGroups};

use super::serve::split;
use icsim::sweep::cost::PerGpu;
use icsim::units::Time;

/// Most rates or caps one command serves.
const MAX_RATES: usize = 64;

/// What the rows vary: the offered rate (at the load's cap, if it has
/// one), or the clients' cap (the requests arriving as `arrivals` says: at
/// a rate, at listed times, or all at once).
pub enum Offers<'a> {
    Rates(&'a [f64]),
    Caps { caps: &'a [u64], arrivals: &'a Arrivals },
}

impl Offers<'_> {
    /// Each row's arrivals and cap.
    fn each(&self, load: &Load) -> Result<Vec<(Arrivals, Option<u64>)>, requests::RequestError> {
        match self {
            Offers::Rates(rates) => rates.iter().map(|&rate| Ok((load.arrivals(Some(rate))?, load.max_concurrency))).collect(),
            Offers::Caps { caps, arrivals } => Ok(caps.iter().map(|&cap| ((*arrivals).clone(), Some(cap))).collect()),
        }
    }

    /// The flag, what it lists, and the values.
    fn listed(&self) -> (&'static str, &'static str, Vec<f64>) {
        match self {
            Offers::Rates(rates) => ("--rates", "rates", rates.to_vec()),
            Offers::Caps { caps, .. } => ("--max-concurrency", "caps", caps.iter().map(|&c| c as f64).collect()),
        }
    }
}

/// Where the results go: stdout's format and the --out folder.
pub struct Files<'a> {
    pub dir: Option<&'a Path>,
    pub format: Format,
}

/// One rate's or one cap's row.
#[derive(Debug, Clone, Serialize)]
struct Row {
    /// The clients' cap, where the rows vary it.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrency: Option<u64>,
    #[serde(flatten)]
    point: LoadPoint,
    /// Whether this row is the knee.
    knee: bool,
}

impl Row {
    /// Where the row sits on the load axis: its cap, or its rate.
    fn x(&self) -> Option<f64> {
        self.max_concurrency.map(|cap| cap as f64).or(self.point.rate)
    }
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
    /// Where the rows vary the clients' cap: the most in flight meeting
    /// the objectives, every smaller cap meeting them too.
    #[serde(skip_serializing_if = "Option::is_none")]
    knee_max_concurrency: Option<u64>,
    /// A split server's groups; absent for one group.
    #[serde(skip_serializing_if = "Option::is_none")]
    split: Option<SplitGroups>,
    rates: Vec<Row>,
}

/// Serves `load` on `server` at each of `offers` and reports them.
pub fn run(server: &Server, load: &Load, offers: Offers, slo: Slo, per_gpu: Option<PerGpu>, files: Files) -> Result<()> {
    let (flag, what, listed) = offers.listed();
    if listed.len() > MAX_RATES {
        return Err(BadInput(format!("{flag}: {} {what}, at most {MAX_RATES}", listed.len())).into());
    }
    if let Some(pair) = listed.windows(2).find(|pair| pair[1] <= pair[0]) {
        return Err(BadInput(format!("{flag}: {} after {}: give the {what} in rising order, each once", pair[1], pair[0])).into());
    }
    let each = offers.each(load)?;
    let bar = progress_bar((each.len() * load.count) as u64, "serving {bar:40} {pos}/{len} requests at every load, {elapsed}");
    let served: Vec<Result<LoadPoint, LoadError>> = each
        .par_iter()
        .map(|(arrivals, cap)| {
            let load = Load { max_concurrency: *cap, ..load.clone() };
            let requests = load.requests(arrivals);
            let (report, _) = server.serve(&requests, Terms { load: &load, arrivals, slo, per_gpu }, &|| bar.inc(1))?;
            Ok(LoadPoint::of(arrivals.per_second(), &report, slo))
        })
        .collect();
    bar.finish_and_clear();
    let points = served.into_iter().collect::<Result<Vec<LoadPoint>, LoadError>>()?;
    let knee = load::knee(points.iter().map(|p| p.meets_slo == Some(true)));
    let (first_arrivals, first_cap) = &each[0];
    let mut setup = server.setup(&Load { max_concurrency: *first_cap, ..load.clone() }, first_arrivals);
    let varies_caps = matches!(offers, Offers::Caps { .. });
    setup.arrivals = match &offers {
        Offers::Rates(rates) => load::describe_rates(rates, load.burstiness, load.max_concurrency),
        Offers::Caps { caps, arrivals } => load::describe_caps(arrivals, caps),
    };
    let report = LoadReport {
        setup,
        requests: load.count as u64,
        slo_ttft_ms: slo.ttft.map(Time::as_ms),
        slo_tpot_ms: slo.tpot.map(Time::as_ms),
        knee_rate: if varies_caps { None } else { knee.and_then(|i| each[i].0.per_second()) },
        knee_max_concurrency: if varies_caps { knee.and_then(|i| each[i].1) } else { None },
        split: server.split_groups(),
        rates: points
            .into_iter()
            .zip(&each)
            .enumerate()
            .map(|(i, (point, (_, cap)))| Row { max_concurrency: cap.filter(|_| varies_caps), point, knee: Some(i) == knee })
            .collect(),
    };
    // No offered rate (every request at once under each cap): no rate columns.
    let rows: Vec<Record> = report
        .rates
        .iter()
        .map(|row| {
            let mut record = report::flattened(row);
            if row.point.rate.is_none() {
                record.shift_remove("rate");
                record.shift_remove("rate_per_usd_hour");
            }
            record
        })
        .collect();
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

impl LoadReport {
    /// Whether the rows vary the clients' cap rather than the rate.
    fn varies_caps(&self) -> bool {
        self.rates.first().is_some_and(|row| row.max_concurrency.is_some())
    }
}

fn table(report: &LoadReport, rows: &[Record]) -> String {
    let each = if report.varies_caps() { "cap" } else { "rate" };
    let served = format!("{} requests at each {each}, {}", report.requests, report.setup.arrivals);
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
    let knee = match (report.knee_max_concurrency, report.knee_rate) {
        (Some(cap), _) => Some(format!("{cap} in flight, the most clients")),
        (None, Some(rate)) => Some(format!("{rate} requests/s, the highest rate")),
        (None, None) => None,
    };
    let (lower, lowest) = if report.varies_caps() { ("smaller cap", "smallest cap") } else { ("lower rate", "lowest rate") };
    text += &match (objectives(report), knee) {
        (None, _) => "\nknee: give --slo-ttft or --slo-tpot to find it\n".to_string(),
        (Some(what), Some(knee)) => format!("\nknee: {knee} with {what}, every {lower} meeting them too\n"),
        (Some(what), None) => format!("\nknee: none, the {lowest} misses {what}\n"),
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

/// p50 and p99 of TTFT and TPOT against the offered rate (or the clients'
/// cap), on log axes, the objectives as dashed lines in their metric's
/// colour, the knee ringed on the curves the objectives bound.
fn chart(report: &LoadReport) -> Curves {
    let s = &report.setup;
    let rows = &report.rates;
    let curve = |name: &str, colour: usize, value: fn(&LoadPoint) -> Option<f64>| Curve {
        name: name.into(),
        points: rows.iter().filter_map(|r| Some((r.x()?, value(&r.point)?))).collect(),
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
                Some((knee.x()?, if colour == 1 { point.ttft_p99_ms } else { point.tpot_p50_ms? }, colour))
            })
            .collect(),
        None => Vec::new(),
    };
    let offered = |row: Option<&Row>| row.and_then(Row::x).unwrap_or(1.0);
    let (low, high) = (offered(rows.first()), offered(rows.last()));
    let (against, x_label, knee) = match (report.varies_caps(), report.knee_max_concurrency, report.knee_rate) {
        (true, cap, _) => ("clients in flight", "most requests in flight", cap.map(|cap| format!("knee: {cap} in flight"))),
        (false, _, rate) => ("load", "offered load (requests/s)", rate.map(|rate| format!("knee: {rate} requests/s"))),
    };
    Curves {
        title: format!("Latency against {against}: {} on {}, TP={}, {}", s.model, s.topology, s.tp, s.transport),
        x_label: x_label.into(),
        y_label: "latency per request (ms)".into(),
        x: if high >= 8.0 * low { XScale::Log } else { XScale::Linear },
        log_y: true,
        series,
        bounds,
        marks,
        marks_label: knee.unwrap_or_default(),
    }
}
