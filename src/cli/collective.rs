//! `icsim collective`: one collective over many sizes, one row per size.

use anyhow::{Context, Result};
use clap::Args;
use rayon::prelude::*;
use serde::Serialize;

use super::{BadInput, TopologyArgs, checks, notices, parse_format};
use icsim::collective::{self, Algorithm, Choice, CollectiveError, DataType, Op, Outcome, Protocol, Request};
use icsim::report::{self, Format, Record};
use icsim::stack::Stack;
use icsim::topology;
use icsim::transport::Mode;
use icsim::units::{Bytes, parse_sizes};

#[derive(Debug, Args)]
pub struct CollectiveArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// allreduce, allgather, reducescatter or broadcast.
    #[arg(long, default_value = "allreduce", value_parser = |s: &str| s.parse::<Op>())]
    op: Op,
    /// Sizes: a list (1MiB,16MiB), a doubling range (8B..4GiB) or a range
    /// with a factor (1KiB..1GiB:x4).
    #[arg(long, default_value = "8B..4GiB", value_parser = |s: &str| parse_sizes(s).map(Sizes))]
    sizes: Sizes,
    /// auto, nvswitch, nvlink, p2p or shm.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<Mode>())]
    transport: Mode,
    /// auto, ring, tree, nvls, oneshot or twoshot; a list (oneshot,twoshot,ring)
    /// compares them size by size and prints where each is fastest.
    #[arg(long, default_value = "auto", value_parser = parse_algorithms)]
    algo: Algorithms,
    /// auto, simple, ll or ll128.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<Choice<Protocol>>())]
    proto: Choice<Protocol>,
    /// Who issues the call: nccl-graph (raw NCCL in a CUDA graph), torch-graph,
    /// torch-eager or eager; its per-call cost is added.
    #[arg(long, default_value = "nccl-graph", value_parser = |s: &str| s.parse::<Stack>())]
    stack: Stack,
    /// Force NCCL's channel count, as NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS
    /// does (1 to 64); a call too small for them runs fewer, as in NCCL.
    #[arg(long, value_parser = parse_channels)]
    channels: Option<u32>,
    /// The element type, as NCCL names it (float32, float16, bfloat16, int8,
    /// float8e4m3, ...): 8-bit types never reduce in an NVSwitch and cost a
    /// thread block more to add.
    #[arg(long, default_value = "float32", value_parser = |s: &str| s.parse::<DataType>())]
    dtype: DataType,
    /// table, json or csv.
    #[arg(long, default_value = "table", value_parser = parse_format)]
    format: Format,
}

/// One or more algorithm choices, as one argument.
#[derive(Debug, Clone)]
pub struct Algorithms(Vec<Choice<Algorithm>>);

fn parse_algorithms(text: &str) -> Result<Algorithms, String> {
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    let algorithms = names.iter().map(|a| a.parse::<Choice<Algorithm>>()).collect::<Result<Vec<_>, _>>()?;
    match icsim::first_repeat(&algorithms) {
        Some(twice) => Err(format!("{} is listed twice: name each algorithm once", names[twice])),
        None => Ok(Algorithms(algorithms)),
    }
}

/// A forced channel count: at least one, at most NCCL's MAXCHANNELS.
pub fn parse_channels(text: &str) -> Result<u32, String> {
    let most = icsim::config::experiment::MAX_CHANNELS;
    match text.parse::<u32>() {
        Ok(channels) if (1..=most).contains(&channels) => Ok(channels),
        _ => Err(format!("NCCL runs a collective on 1 to {most} channels (MAXCHANNELS, one thread block each)")),
    }
}

/// A list of message sizes, as one argument.
#[derive(Debug, Clone)]
pub struct Sizes(pub Vec<Bytes>);

pub fn run(args: CollectiveArgs) -> Result<()> {
    let sizes = &args.sizes.0;
    let (topo, model) = args.topology.resolve()?;
    checks::warn_unusual_links(&topo);
    let gpus = args.topology.gpus.map_or(topo.gpus().len(), |g| g as usize);
    if gpus > topo.gpus().len() {
        return Err(BadInput(format!("--gpus {gpus}: {} has {} GPUs", topo.name, topo.gpus().len())).into());
    }
    let gpu = model.gpu(&topo.gpu_model).map_err(BadInput)?;
    if let Some(too_large) = sizes.iter().find(|&&b| b > gpu.memory) {
        return Err(BadInput(format!(
            "--sizes {too_large}: more than a {} holds ({:.1} GB); a collective's buffer lives in one GPU's memory",
            gpu.name,
            gpu.memory.as_f64() / 1e9
        ))
        .into());
    }
    if let Some(ragged) = sizes.iter().find(|b| !b.0.is_multiple_of(args.dtype.bytes)) {
        return Err(BadInput(format!(
            "--sizes {ragged}: not a whole number of {} elements ({} bytes each); NCCL counts a buffer in elements",
            args.dtype.name, args.dtype.bytes
        ))
        .into());
    }
    let ranks = topo.gpus()[..gpus].to_vec();
    if let Some(warning) = model.coverage_warning(gpus as u32, args.stack) {
        notices::warn(warning);
    }
    let algorithms = &args.algo.0;
    let cases: Vec<(Bytes, Choice<Algorithm>)> = sizes.iter().flat_map(|&b| algorithms.iter().map(move |&a| (b, a))).collect();
    let bar = super::progress_bar(cases.len() as u64, "simulating {bar:40} {pos}/{len} sizes and algorithms, {elapsed}");
    let outcomes: Vec<Result<Outcome, CollectiveError>> = cases
        .par_iter()
        .map(|&(bytes, algorithm)| {
            let request = Request {
                algorithm,
                protocol: args.proto,
                stack: args.stack,
                channels: args.channels,
                element: args.dtype.element,
                ..Request::new(args.op, bytes, ranks.clone(), args.transport)
            };
            let outcome = collective::simulate(&topo, &model, request);
            bar.inc(1);
            outcome
        })
        .collect();
    bar.finish_and_clear();
    // What NCCL runs otherwise than asked is said beside the row and here.
    let mut notes: Vec<&str> = Vec::new();
    for note in outcomes.iter().filter_map(|o| o.as_ref().ok()?.note.as_deref()) {
        if !notes.contains(&note) {
            notices::note(note);
            notes.push(note);
        }
    }
    let comparing = algorithms.len() > 1;
    if !comparing {
        // One algorithm: any failure is the answer.
        if let Some((error, (bytes, _))) = outcomes.iter().zip(&cases).find_map(|(o, c)| o.as_ref().err().map(|e| (e, c))) {
            return Err(anyhow::Error::new(error.clone())).with_context(|| format!("{} of {bytes} on {}", args.op, topo.name));
        }
    }
    let fastest = fastest_per_size(&outcomes, sizes.len(), algorithms.len());
    let mut records: Vec<Record> = rows(&topo, &outcomes, &cases, &fastest, algorithms.len()).iter().map(report::record_of).collect();
    checks::flag_doubts(&mut records, |_| Some(&topo));
    let call = Call {
        op: args.op.to_string(),
        dtype: args.dtype.name,
        topology: &topo.name,
        gpu: &topo.gpu_model,
        host: &topo.host,
        gpus,
        stack: args.stack.name(),
    };
    if args.format == Format::Table {
        println!("{}", call.title());
        print!("{}", report::render(&records, args.format));
    } else {
        let records: Vec<Record> = records
            .into_iter()
            .map(|record| {
                let mut row = report::record_of(&call);
                row.extend(record);
                row
            })
            .collect();
        print!("{}", report::render(&records, args.format));
    }
    if comparing && args.format == Format::Table {
        let winners: Vec<(Bytes, String)> = sizes
            .iter()
            .enumerate()
            .filter_map(|(s, &b)| {
                fastest[s].and_then(|a| outcomes[s * algorithms.len() + a].as_ref().ok()).map(|o| (b, o.algorithm.to_string()))
            })
            .collect();
        println!("\nfastest by size:");
        for (label, from, to) in collective::crossovers(&winners) {
            println!("  {label:<8} from {from} to {to}");
        }
    }
    Ok(())
}

/// For each size, the position among the algorithms of the fastest that
/// ran (`outcomes` holds each size's algorithms in turn).
fn fastest_per_size(outcomes: &[Result<Outcome, CollectiveError>], sizes: usize, algorithms: usize) -> Vec<Option<usize>> {
    (0..sizes)
        .map(|s| (0..algorithms).filter_map(|a| outcomes[s * algorithms + a].as_ref().ok().map(|o| (o.time, a))).min().map(|(_, a)| a))
        .collect()
}

/// One row per case: its outcome, or why its algorithm is unavailable;
/// beside several algorithms, whether it was the fastest of its size.
fn rows(
    topo: &topology::Topology,
    outcomes: &[Result<Outcome, CollectiveError>],
    cases: &[(Bytes, Choice<Algorithm>)],
    fastest: &[Option<usize>],
    algorithms: usize,
) -> Vec<CaseRow> {
    outcomes
        .iter()
        .zip(cases)
        .enumerate()
        .map(|(i, (outcome, (bytes, algorithm)))| {
            let case = match outcome {
                Ok(o) => Case::Ran(RunRow::of(topo, o)),
                Err(error) => {
                    let algo = match algorithm {
                        Choice::Auto => "auto".to_string(),
                        Choice::Fixed(a) => a.to_string(),
                    };
                    Case::Unavailable { bytes: bytes.0, size: bytes.to_string(), algo, unavailable: error.to_string() }
                }
            };
            CaseRow { case, fastest: (algorithms > 1).then(|| fastest[i / algorithms] == Some(i % algorithms)) }
        })
        .collect()
}

/// One size and algorithm of the run (the fields are JSON keys and CSV
/// columns).
#[derive(Serialize)]
struct CaseRow {
    #[serde(flatten)]
    case: Case,
    /// Beside several algorithms: whether this was the fastest of its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    fastest: Option<bool>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Case {
    Ran(RunRow),
    Unavailable { bytes: u64, size: String, algo: String, unavailable: String },
}

/// A collective that ran: its time, rates, choices and busiest link.
#[derive(Serialize)]
struct RunRow {
    bytes: u64,
    size: String,
    time_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    algo: String,
    proto: String,
    transport: String,
    channels: u32,
    nccl_model_us: Option<f64>,
    note: Option<String>,
    busiest_link: Option<String>,
    busiest_link_util: Option<f64>,
}

impl RunRow {
    fn of(topo: &topology::Topology, o: &Outcome) -> RunRow {
        let busiest = collective::busiest_link(topo, &o.usage, o.time);
        RunRow {
            bytes: o.bytes.0,
            size: o.bytes.to_string(),
            time_us: o.time.as_us(),
            algbw_gbps: o.algbw_gbps(),
            busbw_gbps: o.busbw_gbps(),
            algo: o.algorithm.to_string(),
            proto: o.protocol.to_string(),
            transport: o.transport.clone(),
            channels: o.channels,
            nccl_model_us: o.nccl_estimate_us,
            note: o.note.clone(),
            busiest_link: busiest.map(|(l, _)| topo.link_label(l)),
            busiest_link_util: busiest.map(|(_, u)| u),
        }
    }
}

/// What every row of one run shares: the call, and the GPUs it ran on
/// (leading each JSON and CSV row; a title above the table).
#[derive(Serialize)]
struct Call<'a> {
    op: String,
    dtype: &'a str,
    topology: &'a str,
    gpu: &'a str,
    host: &'a str,
    gpus: usize,
    stack: &'static str,
}

impl Call<'_> {
    fn title(&self) -> String {
        format!(
            "{} of {} on {}: {} GPUs ({}, host {}), called as {}",
            self.op, self.dtype, self.topology, self.gpus, self.gpu, self.host, self.stack
        )
    }
}
