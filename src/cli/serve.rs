//! `icsim serve ...`: a service on one tensor-parallel group of a topology,
//! or on a split into prefill and decode groups (`split`). What the user
//! typed becomes requests and a server here; the library serves them; the results are printed as tables
//! (or JSON or CSV) and written into a folder as one set of files.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use super::llm::emit;
use super::{BadInput, TopologyArgs, checks, notices, parse_format, progress_bar};
use icsim::config::experiment::{RawExperiment, RawMode, RawQuery, Source};
use icsim::report::{self, Format, Record};
use icsim::serve::iteration::DecodeGraphs;
use icsim::serve::load::{self, EngineSettings, Load, Server, Terms};
use icsim::serve::requests::{self, Arrivals, BenchmarkLoad, Length, Lengths, TimeUnit};
use icsim::serve::results::{self, ServeReport, Setup, Slo};
use icsim::sweep::cost::Bill;
use icsim::units::{Bytes, Time};
use icsim::workload::experiment::Experiment;

pub(super) mod split;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("rated").args(["rate", "rates"])))]
pub struct ServeArgs {
    /// A shipped LLM (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b) or a model file.
    #[arg(long, default_value = "llama-3.1-70b")]
    model: String,
    /// Tensor-parallel degree: the service runs on the first TP GPUs
    /// (or give --prefill-tp and --decode-tp to split the server).
    #[arg(long, value_parser = super::gpu_count(), required_unless_present = "prefill_tp")]
    tp: Option<u32>,
    #[command(flatten)]
    topology: TopologyArgs,
    /// nvswitch, nvlink, p2p, shm or auto (what NCCL would pick).
    #[arg(long, default_value = "auto")]
    transport: String,
    /// How allreduce algorithms are chosen: nccl or fastest.
    #[arg(long, default_value = "fastest")]
    allreduce: String,
    /// Who issues the kernels and collectives: nccl-graph (as engines
    /// replay CUDA graphs), torch-graph, torch-eager or eager.
    #[arg(long, default_value = "nccl-graph")]
    stack: String,
    /// Launch every iteration as --stack does. Without it a graph stack
    /// replays only iterations of decodes alone from its CUDA graphs, and
    /// launches prompt chunks and mixed iterations from the host as its
    /// eager counterpart (nccl-graph: eager, torch-graph: torch-eager), as
    /// engines capture graphs of decode batches.
    #[arg(long)]
    one_stack: bool,
    /// Which of the LLM file's fusions the kernels run as.
    #[arg(long, default_value = "vllm")]
    fusion: String,
    /// Requests a second arriving (with --burstiness), or replaying a
    /// --trace's lengths at this rate.
    #[arg(long, conflicts_with = "at")]
    rate: Option<f64>,
    /// Several rates in rising order (1,2,4,8): each served alone, in
    /// parallel; latency against load with the knee, and its plot in --out.
    #[arg(long, value_delimiter = ',', num_args = 1.., conflicts_with = "at", value_name = "R1,R2,...")]
    rates: Option<Vec<f64>>,
    /// Coefficient of variation of the gaps between arrivals (a gamma
    /// process): 1 is Poisson, more is burstier.
    #[arg(long, default_value_t = 1.0, requires = "rated")]
    burstiness: f64,
    /// Arrival times in seconds, comma-separated (instead of --rate).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    at: Option<Vec<f64>>,
    /// Requests to serve (default: every one --at or a trace lists, else
    /// 1000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    requests: Option<u64>,
    /// Prompt tokens: N, LOW..HIGH (uniform) or lognormal:MEAN,CV.
    #[arg(long, default_value = "1024", conflicts_with = "trace")]
    prompt: Length,
    /// Output tokens: N, LOW..HIGH (uniform) or lognormal:MEAN,CV.
    #[arg(long, default_value = "128", conflicts_with = "trace")]
    output: Length,
    /// JSON Lines or a JSON array of requests: timestamp (optional),
    /// prompt_tokens/input_length, output_tokens/output_length; ShareGPT
    /// conversations (tokens counted at 4 characters each); or a `vllm
    /// bench serve --save-result` file (its input_lens and output_lens,
    /// served at the request_rate and max_concurrency it records unless a
    /// flag says otherwise).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Unit of a trace's timestamps: s or ms.
    #[arg(long, default_value = "s", requires = "trace")]
    trace_time_unit: TimeUnit,
    /// Most requests in flight at once, as `vllm bench serve
    /// --max-concurrency`: a request arriving while they are is sent when
    /// one finishes, and its latency counts from then. Several caps in
    /// rising order (1,4,16,64): each served alone, in parallel; latency
    /// against the cap with the knee, as --rates gives it against the rate.
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N[,N2,...]",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_concurrency: Option<Vec<u64>>,
    /// Seed of the arrivals and lengths drawn.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most sequences running at once. Default: what `vllm serve` sets on
    /// the GPU: 1024 on GPUs of 70 GiB or more other than A100s, else 256.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    max_num_seqs: Option<u64>,
    /// Tokens one iteration computes at most (prompt chunks and decodes).
    /// Default: what `vllm serve` sets on the GPU: 8192 on GPUs of 70 GiB
    /// or more other than A100s, else 2048.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    max_num_batched_tokens: Option<u64>,
    /// Tokens a KV-cache block holds.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    block_size: u64,
    /// Batch sizes the engine captured decode graphs for (as vLLM's
    /// --cuda-graph-sizes): a batch of decodes alone runs the graph of the
    /// next size up, padded. Default: each batch as it is.
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N1,N2,...",
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    cuda_graph_sizes: Vec<u64>,
    /// Keys the decode graphs' attention was told at capture
    /// (FlashAttention's max_seqlen_k: the slot length an engine gives a
    /// sequence), which decide how it splits a batch's keys. Default: each
    /// batch's longest sequence, as attention launched outside a graph.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    graph_keys: Option<u64>,
    /// Host time each iteration adds before its forward (the engine's
    /// scheduling, inputs and output processing; 500us).
    #[arg(long, value_name = "TIME", default_value = "0s")]
    step_overhead: Time,
    /// Share of each GPU's memory the engine takes (weights and KV cache).
    #[arg(long, default_value_t = 0.9)]
    gpu_memory_utilization: f64,
    /// What a preempted sequence's KV cache becomes: recompute (dropped, as
    /// vLLM's V1 engine does) or swap (copied to host memory and back).
    #[arg(long, default_value = "recompute", value_parser = ["recompute", "swap"])]
    preemption: String,
    /// Host memory for swapped KV blocks, per GPU (with --preemption swap).
    #[arg(long, default_value = "4GiB", value_name = "BYTES")]
    swap_space: Bytes,
    /// Time to first token a request must meet to count as goodput (2s, 500ms).
    #[arg(long, value_name = "TIME")]
    slo_ttft: Option<Time>,
    /// Time per output token a request must meet to count as goodput (50ms).
    #[arg(long, value_name = "TIME")]
    slo_tpot: Option<Time>,
    #[command(flatten)]
    cost: super::CostArgs,
    /// table, json or csv.
    #[arg(long, default_value = "table", value_parser = parse_format, conflicts_with = "json")]
    format: Format,
    /// The same as --format json.
    #[arg(long)]
    json: bool,
    /// Write summary.json, summary.csv, requests.csv and timeline.csv into
    /// DIR (with --rates: load.json, load.csv and the latency-load plot).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Boxed: a command's flags stay small beside the other commands'.
    #[command(flatten)]
    split: Box<split::SplitArgs>,
}

/// Requests at a rate when none is said.
const DEFAULT_REQUESTS: u64 = 1000;

pub fn run(args: ServeArgs) -> Result<()> {
    if let Some(dir) = &args.out {
        super::check_output_folder(dir, "--out")?;
    }
    let format = if args.json { Format::Json } else { args.format };
    for (flag, limit) in [("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot)] {
        if limit == Some(Time::ZERO) {
            return Err(BadInput(format!("{flag} 0: give a time above 0 (2s, 50ms)")).into());
        }
    }
    let Asked { arrivals, lengths, count, caps } = requests_of(&args)?;

    // A split server's groups are set up from a run of the same flags at
    // the larger group's TP.
    let tp = match args.tp {
        Some(tp) => tp,
        None => split::resolving_tp(&args.split, &args.model)?,
    };
    let experiment = Experiment::resolve(raw_experiment(&args, tp), Source::CommandLine)?;
    let run = &experiment.modes[0];
    checks::warn_unusual_links(&run.topology);
    let per_gpu = cost_per_gpu(&args, &run.topology)?;
    let slo = Slo { ttft: args.slo_ttft, tpot: args.slo_tpot };
    let settings = EngineSettings {
        max_num_seqs: args.max_num_seqs,
        max_num_batched_tokens: args.max_num_batched_tokens,
        block_size: args.block_size,
        gpu_memory_utilization: args.gpu_memory_utilization,
        swap_space: (args.preemption == "swap").then_some(args.swap_space),
        step_overhead: args.step_overhead,
        one_stack: args.one_stack,
        graphs: DecodeGraphs::new(args.cuda_graph_sizes.clone(), args.graph_keys),
    };
    let one_cap = match caps[..] {
        [cap] => Some(cap),
        _ => None,
    };
    // The arrivals' burstiness: --burstiness, or a benchmark result's own.
    let burstiness = match &arrivals {
        Arrivals::Rate { burstiness, .. } => *burstiness,
        Arrivals::At(_) => args.burstiness,
    };
    let load = Load { count, lengths, burstiness, seed: args.seed, max_concurrency: one_cap };
    let server = match args.tp {
        Some(_) => {
            if let Some(warning) = run.hardware.coverage_warning(run.tp, run.stack) {
                notices::warn(warning);
            }
            Server::new(&experiment, &settings)?
        }
        None => split::server(&args.split, &experiment, &settings)?,
    };
    let offers = match (&args.rates, caps.len() > 1) {
        (Some(_), true) => {
            return Err(BadInput("--rates with several --max-concurrency caps: vary one of them, the other at one value".into()).into());
        }
        (Some(rates), false) => Some(super::load::Offers::Rates(rates)),
        (None, true) => Some(super::load::Offers::Caps { caps: &caps, arrivals: &arrivals }),
        (None, false) => None,
    };
    if let Some(offers) = offers {
        let files = super::load::Files { dir: args.out.as_deref(), format };
        return super::load::run(&server, &load, offers, slo, per_gpu, files);
    }
    let requests = requests::generate(&arrivals, &load.lengths, count, args.seed);
    let bar = progress_bar(requests.len() as u64, "serving {bar:40} {pos}/{len} requests, {elapsed}");
    let served = server.serve(&requests, Terms { load: &load, arrivals: &arrivals, slo, per_gpu }, &|| bar.inc(1));
    bar.finish_and_clear();
    let (report, served) = served?;
    let rows = results::request_rows(&served, slo);
    match format {
        Format::Table => emit(&table(&report))?,
        Format::Json => emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        Format::Csv => emit(&report::render(&[report::flattened(&report)], Format::Csv))?,
    }
    if let Some(dir) = &args.out {
        let written = write_files(dir, &report, &rows)?;
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        let note = format!("wrote {}", names.join(", "));
        if format == Format::Table { emit(&format!("\n{note}\n"))? } else { eprintln!("{note}") }
    }
    Ok(())
}

/// The requests asked for: when they arrive, how long they are, how many
/// to serve, and the clients' caps (the flags', else a benchmark result's).
struct Asked {
    arrivals: Arrivals,
    lengths: Lengths,
    count: usize,
    caps: Vec<u64>,
}

/// The requests the flags and the trace ask for.
fn requests_of(args: &ServeArgs) -> Result<Asked> {
    let trace = match &args.trace {
        Some(path) => {
            let trace = requests::read_trace(path, args.trace_time_unit)?;
            if trace.estimated > 0 {
                notices::note(format!(
                    "{}: the tokens of {} prompts given as text are counted at 4 characters a token, not by the model's tokenizer",
                    path.display(),
                    trace.estimated
                ));
            }
            if trace.skipped > 0 {
                notices::note(format!(
                    "{}: {} rows left out (conversations of one turn, or requests that failed in the benchmark)",
                    path.display(),
                    trace.skipped
                ));
            }
            Some(trace)
        }
        None => None,
    };
    // With --rates, the first rate's: each rate is checked when served.
    let rate = args.rate.or(args.rates.as_ref().and_then(|rates| rates.first().copied()));
    let listed = trace.as_ref().and_then(|t| match &t.lengths {
        Lengths::Listed(rows) => Some(rows.len()),
        Lengths::Drawn { .. } => None,
    });
    let at_once = || Arrivals::all_at_once(args.requests.map(|n| n as usize).or(listed).unwrap_or(DEFAULT_REQUESTS as usize));
    // A vLLM benchmark's result, served as the benchmark sent its requests
    // where no flag says otherwise: its rate, and its cap.
    let benchmark = trace.as_ref().and_then(|t| t.benchmark);
    let benchmark_rate = benchmark.filter(|_| rate.is_none() && args.at.is_none());
    let caps = match (&args.max_concurrency, benchmark.and_then(|b| b.max_concurrency)) {
        (Some(caps), _) => caps.clone(),
        (None, Some(cap)) => vec![cap],
        (None, None) => Vec::new(),
    };
    let arrivals = match (rate, &args.at, trace.as_ref().and_then(|t| t.arrivals.clone()), benchmark_rate) {
        (Some(rate), _, _, _) => Arrivals::rate(rate, args.burstiness)?,
        (None, Some(at), _, _) => Arrivals::at_seconds(at, "--at")?,
        (None, None, Some(listed), _) => listed,
        (None, None, None, Some(bench)) => match bench.rate {
            Some(rate) => Arrivals::rate(rate, bench.burstiness)?,
            None => at_once(),
        },
        // As `vllm bench serve --max-concurrency` at its default rate: every
        // request at once, the cap deciding when each is sent.
        (None, None, None, None) if !caps.is_empty() => at_once(),
        (None, None, None, None) => {
            let trace_hint = if args.trace.is_some() { " (the trace has no timestamps)" } else { "" };
            return Err(BadInput(format!(
                "--rate: give a rate, --at times, a --trace with timestamps{trace_hint}, or --max-concurrency to send them all at once under a cap"
            ))
            .into());
        }
    };
    if let (Some(bench), Some(path)) = (benchmark, &args.trace) {
        let cap_taken = bench.max_concurrency.filter(|_| args.max_concurrency.is_none());
        note_what_the_benchmark_gave(path, bench, benchmark_rate.is_some(), cap_taken, &arrivals);
    }
    let lengths = match trace {
        Some(trace) => trace.lengths,
        None => Lengths::Drawn { prompt: args.prompt, output: args.output },
    };
    let count = match (&arrivals, args.requests, &lengths) {
        (Arrivals::At(times), Some(asked), _) if asked as usize > times.len() => {
            return Err(BadInput(format!("--requests {asked}: only {} arrival times are listed", times.len())).into());
        }
        (_, Some(asked), _) => asked as usize,
        (Arrivals::At(times), None, _) => times.len(),
        (Arrivals::Rate { .. }, None, Lengths::Listed(rows)) => rows.len(),
        (Arrivals::Rate { .. }, None, Lengths::Drawn { .. }) => DEFAULT_REQUESTS as usize,
    };
    Ok(Asked { arrivals, lengths, count, caps })
}

/// Says what of a benchmark result's own sending was taken: its rate (the
/// `arrivals` made of it) where `rate_taken`, its cap where `cap_taken`.
fn note_what_the_benchmark_gave(path: &Path, bench: BenchmarkLoad, rate_taken: bool, cap_taken: Option<u64>, arrivals: &Arrivals) {
    let taken = match (rate_taken, cap_taken) {
        (true, cap) => load::describe_arrivals(arrivals, cap),
        (false, Some(cap)) => format!("at most {cap} in flight"),
        (false, None) => return,
    };
    let ramped =
        if bench.ramped && rate_taken { "; it ramped its rate up, which icsim does not: served at its recorded request_rate" } else { "" };
    notices::note(format!(
        "{}: served as the benchmark sent its requests, {taken} (its request_rate, burstiness and max_concurrency; --rate, --at and --max-concurrency change them){ramped}",
        path.display()
    ));
}

/// The experiment `icsim llm` would resolve from the same flags at TP=`tp`
/// (its query unused): the model, the topology, the mode and how the
/// forward runs.
fn raw_experiment(args: &ServeArgs, tp: u32) -> RawExperiment {
    let topology = &args.topology;
    RawExperiment {
        description: String::new(),
        model: args.model.clone(),
        tp: Some(tp),
        output_dir: None,
        topology: Some(topology.topology.clone()),
        gpus: topology.gpus,
        gpu: topology.gpu.clone(),
        host: topology.host.clone(),
        models: Some(topology.hardware.clone()),
        allreduce: Some(args.allreduce.clone()),
        stack: Some(args.stack.clone()),
        channels: None,
        scope: None,
        fusion: Some(args.fusion.clone()),
        query: RawQuery { prompt: 1, output: 1, batch: 1 },
        modes: vec![RawMode { transport: args.transport.clone(), ..RawMode::default() }],
        storage: None,
    }
}

/// What a GPU-hour of the topology's server costs; None, with a note, for
/// a GPU the cost model has no price for.
fn cost_per_gpu(args: &ServeArgs, topology: &icsim::topology::Topology) -> Result<Option<icsim::sweep::cost::PerGpu>> {
    Ok(match args.cost.model()?.per_gpu(&Bill::of(topology)) {
        Ok(per_gpu) => Some(per_gpu),
        Err(why) => {
            notices::note(format!("no cost: {why}"));
            None
        }
    })
}

/// Writes the report's files into `dir` as one set.
fn write_files(dir: &Path, report: &ServeReport, requests: &[results::RequestRow]) -> Result<Vec<PathBuf>> {
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot write the results in {}: {e}", dir.display());
    let files = [
        ("summary.json", serde_json::to_string_pretty(report)? + "\n"),
        ("summary.csv", report::render(&[report::flattened(report)], Format::Csv)),
        ("requests.csv", report::render(&records(requests), Format::Csv)),
        ("timeline.csv", report::render(&records(&report.timeline), Format::Csv)),
    ];
    report::files::write_set(dir, |set| files.iter().map(|(name, text)| set.write(name, text).map_err(cannot)).collect(), cannot)
}

/// One record a row.
fn records(rows: &[impl serde::Serialize]) -> Vec<Record> {
    rows.iter().map(report::flattened).collect()
}

/// Eight levels of a bar, lowest first.
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `values` as a line of bars, scaled to `top`.
fn sparkline(values: impl Iterator<Item = f64>, top: f64) -> String {
    values.map(|v| if top > 0.0 { LEVELS[((v / top * 7.0).round() as usize).min(7)] } else { LEVELS[0] }).collect()
}

/// The human-readable report.
fn table(r: &ServeReport) -> String {
    let s = &r.setup;
    let mut text = match &r.split {
        Some(split) => header(
            s,
            &split::groups_line(&split.prefill.setup, &split.decode.setup),
            "KV cache of the decode group",
            &format!("{} requests, {}", r.requests, s.arrivals),
        ),
        None => header(s, &format!("TP={}", s.tp), "KV cache", &format!("{} requests, {}", r.requests, s.arrivals)),
    };
    let mut section = |title: &str, rows: Vec<Record>| {
        text += &format!("\n{title}:\n");
        text += &report::render(&rows, Format::Table);
    };
    let latency = [("ttft", Some(r.ttft)), ("tpot", r.tpot), ("itl", r.itl), ("e2e", Some(r.e2e))]
        .into_iter()
        .filter_map(|(name, p)| {
            let mut row = Record::new();
            row.insert("latency".into(), name.into());
            row.extend(report::flattened(&p?));
            Some(row)
        })
        .collect();
    section("latency per request (tpot: (end - first token) / (output - 1); itl: every gap between tokens)", latency);
    section(&format!("throughput over {:.1} s", r.duration_s), vec![report::flattened(&r.throughput)]);
    section("goodput: requests meeting every objective given", vec![report::flattened(&r.goodput)]);
    section(&format!("KV cache and preemptions ({})", s.preemption), vec![report::flattened(&r.kv_cache)]);
    section(
        "iterations (each a forward of the whole model on every GPU, collectives simulated; counts rounded up to 6 binary digits, see docs/serving.md)",
        vec![report::flattened(&r.iterations)],
    );
    if let Some(cost) = &r.cost {
        section("cost at this load (models/cost/default.toml or --cost)", vec![report::flattened(cost)]);
    }
    if let Some(split) = &r.split {
        for (title, rows) in split::sections(split) {
            section(&title, rows);
        }
    }
    let windows = &r.timeline;
    text += &format!("\nover time ({} windows of {:.2} s):\n", windows.len(), windows.first().map_or(0.0, |w| w.end_s - w.start_s));
    let series: [(&str, Vec<f64>); 4] = [
        ("kv use", windows.iter().map(|w| w.kv_use_peak).collect()),
        ("running", windows.iter().map(|w| f64::from(w.running_peak)).collect()),
        ("waiting", windows.iter().map(|w| f64::from(w.waiting_peak)).collect()),
        ("preempted", windows.iter().map(|w| w.preemptions as f64).collect()),
    ];
    for (name, values) in series {
        // KV use is a share: its bars are scaled to the whole cache.
        let top = if name == "kv use" { 1.0 } else { values.iter().copied().fold(0.0, f64::max) };
        text += &format!("  {name:<10} {} (top {top:.2})\n", sparkline(values.into_iter(), top));
    }
    text
}

/// What was served and how, in two lines: `served` says how many requests
/// and how they arrive.
pub fn header(s: &Setup, groups: &str, cache: &str, served: &str) -> String {
    let mut text = format!(
        "{} on {} ({}, host {}, {}), {groups}, {}: {served}, prompts {}, outputs {}, seed {}\n\
         {cache}: {} blocks of {} tokens ({:.1} GB a GPU); at most {} sequences and {} tokens an iteration\n",
        s.model,
        s.topology,
        s.gpu,
        s.host,
        s.transport,
        match &s.eager_stack {
            Some(eager) => format!("{} (decodes alone; the other iterations {eager})", s.stack),
            None => s.stack.clone(),
        },
        s.prompt,
        s.output,
        s.seed,
        s.kv_blocks,
        s.block_size,
        s.kv_gb_per_gpu,
        s.max_num_seqs,
        s.max_num_batched_tokens
    );
    if s.step_overhead_ms > 0.0 {
        text += &format!("host time before each iteration's forward: {} ms\n", s.step_overhead_ms);
    }
    text
}
