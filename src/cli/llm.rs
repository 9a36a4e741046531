//! `icsim run [EXPERIMENT]` and `icsim llm ...`: replay one LLM query under
//! each transport mode, print one row per mode, and write results.json,
//! results.csv and the plots. What the user typed is turned into an
//! experiment here; the library runs it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use super::{checks, figures, notices, parse_format, progress_bar};
use icsim::config::experiment::{RawExperiment, RawMode, RawQuery, Source};
use icsim::config::read_text;
use icsim::report::experiment::ExperimentRow;
use icsim::report::{self, Format, Record};
use icsim::sweep::change::{self, Change};
use icsim::sweep::cost::{Bill, Economics};
use icsim::transport::FIXED_MODES;
use icsim::workload::experiment::{self, Experiment, ExperimentResult, RunOptions};

/// The experiment a plain `icsim` (or `cargo run`) runs.
pub const DEFAULT_EXPERIMENT: &str = "configs/default.toml";
/// The same file, built in, for runs outside the repository.
const DEFAULT_TEXT: &str = include_str!("../../configs/default.toml");

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment file (TOML).
    #[arg(default_value = DEFAULT_EXPERIMENT)]
    experiment: PathBuf,
    #[command(flatten)]
    set: super::SetArgs,
    #[command(flatten)]
    output: OutputArgs,
}

impl RunArgs {
    /// What `icsim` with no subcommand does.
    pub fn default_run() -> RunArgs {
        RunArgs {
            experiment: PathBuf::from(DEFAULT_EXPERIMENT),
            set: super::SetArgs::default(),
            output: OutputArgs { out: None, plots: None, format: Format::Table, cost: super::CostArgs::default() },
        }
    }
}

#[derive(Debug, Args)]
struct OutputArgs {
    /// Write results.json, results.csv and the plots into DIR instead of the
    /// experiment's output_dir.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the plots into DIR instead of the output folder.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// table, json or csv.
    #[arg(long, default_value = "table", value_parser = parse_format)]
    format: Format,
    #[command(flatten)]
    cost: super::CostArgs,
}

impl OutputArgs {
    /// Refuses folders that --out and --plots give and no file could go in.
    fn check(&self) -> Result<()> {
        for (flag, dir) in [("--out", &self.out), ("--plots", &self.plots)] {
            if let Some(dir) = dir {
                super::check_output_folder(dir, flag)?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Args)]
pub struct LlmArgs {
    /// A shipped LLM (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b) or a model file.
    #[arg(long, default_value = "llama-3.1-70b")]
    model: String,
    /// Prompt tokens (prefill).
    #[arg(long, default_value_t = 8192)]
    prompt: u64,
    /// Generated tokens (decode steps).
    #[arg(long, default_value_t = 256)]
    output: u64,
    /// Sequences processed together.
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Tensor-parallel degree.
    #[arg(long, value_parser = super::gpu_count())]
    tp: u32,
    /// A preset (hgx-h200, hgx-h20, h20-nvlink-mesh, pcie-gen4-8gpu, ...) or a topology file.
    #[arg(long, short = 't', default_value = "hgx-h200")]
    topology: String,
    /// Use the first N GPUs of the topology.
    #[arg(long, value_parser = super::gpu_count())]
    gpus: Option<u32>,
    /// GPU model for the pcie-* presets (a100, h100, h200, h20, b200, h100-pcie,
    /// h200-nvl, a100-pcie, l4, l40s, rtx4090, rtx5090, rtx-pro-6000, v100-pcie).
    #[arg(long)]
    gpu: Option<String>,
    /// Host platform for the presets (epyc-turin, spr-2s, ...).
    #[arg(long)]
    host: Option<String>,
    /// Hardware model overlay (a file, or a shipped model's name); repeatable.
    #[arg(long = "hardware", value_name = "FILE")]
    hardware: Vec<String>,
    /// How allreduce algorithms are chosen: nccl (NCCL's tuner) or fastest
    /// (NCCL or the one-shot/two-shot kernels inference engines use,
    /// whichever is faster).
    #[arg(long, default_value = "fastest")]
    allreduce: String,
    /// Who issues the collectives and kernels: nccl-graph (raw NCCL in a
    /// CUDA graph, as inference engines replay decode), torch-graph,
    /// torch-eager or eager.
    #[arg(long, default_value = "nccl-graph")]
    stack: String,
    /// Force NCCL's channel count (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS).
    #[arg(long)]
    channels: Option<u32>,
    /// Which kernels run: full (the whole model) or layers (the decoder
    /// layers as the shared torch forward ran them: no rotary, embedding,
    /// final norm, LM head or sampling).
    #[arg(long, default_value = "full")]
    scope: String,
    /// Which of the LLM file's fusions the kernels run as (vllm, torch, or
    /// one the file names).
    #[arg(long, default_value = "vllm")]
    fusion: String,
    /// nvswitch, nvlink, p2p, shm, auto, or all (every mode the topology offers).
    #[arg(long, default_value = "all")]
    transport: String,
    #[command(flatten)]
    set: super::SetArgs,
    #[command(flatten)]
    files: OutputArgs,
}

pub fn run_experiment(args: RunArgs) -> Result<()> {
    let path = &args.experiment;
    let changes = super::changes(&args.set.set, "icsim run replays a query")?;
    let changes: Vec<&Change> = changes.iter().collect();
    let text = if !path.exists() && path == Path::new(DEFAULT_EXPERIMENT) { DEFAULT_TEXT.to_string() } else { read_text(path)? };
    let experiment =
        Experiment::parse_edited(path, &text, |raw| change::apply(&changes, raw), &change::edit(&changes, Path::new("command line")))?;
    let out = args.output.out.clone().or_else(|| experiment.output_dir.clone());
    args.output.check()?;
    if args.output.out.is_none()
        && let Some(dir) = &experiment.output_dir
        && let Some(why) = icsim::report::files::unusable_folder(dir)
    {
        return Err(experiment.source.invalid(None, "output_dir", format!("{}: {why}", dir.display())).into());
    }
    replay(&experiment, &args.output, out.as_deref())
}

pub fn run_llm(args: LlmArgs) -> Result<()> {
    let all = args.transport == "all";
    if !all && args.transport.parse::<icsim::transport::Mode>().is_err() {
        return Err(super::BadInput(format!(
            "--transport {:?}: use nvswitch, nvlink, p2p, shm, auto, or all (every mode the topology offers)",
            args.transport
        ))
        .into());
    }
    let transports: Vec<String> = if all { FIXED_MODES.map(|mode| mode.to_string()).to_vec() } else { vec![args.transport.clone()] };
    let mut raw = RawExperiment {
        description: String::new(),
        model: args.model.clone(),
        tp: Some(args.tp),
        output_dir: None,
        topology: Some(args.topology.clone()),
        gpus: args.gpus,
        gpu: args.gpu.clone(),
        host: args.host.clone(),
        models: Some(args.hardware.clone()),
        allreduce: Some(args.allreduce.clone()),
        stack: Some(args.stack.clone()),
        channels: args.channels,
        scope: Some(args.scope.clone()),
        fusion: Some(args.fusion.clone()),
        query: RawQuery { prompt: args.prompt, output: args.output, batch: args.batch },
        modes: transports.into_iter().map(|transport| RawMode { transport, ..RawMode::default() }).collect(),
        storage: None,
    };
    let changes = super::changes(&args.set.set, "icsim llm replays a query")?;
    let changes: Vec<&Change> = changes.iter().collect();
    change::apply(&changes, &mut raw);
    let mut experiment = Experiment::resolve_edited(raw, Source::CommandLine, &change::edit(&changes, Path::new("command line")))?;
    if all {
        let offered: Vec<bool> = experiment.modes.iter().map(|run| experiment::prepare_mode(&experiment, run).is_ok()).collect();
        let mut keep = offered.into_iter();
        experiment.modes.retain(|_| keep.next().unwrap_or(false));
        if experiment.modes.is_empty() {
            return Err(super::BadInput(format!(
                "--transport all: topology {} offers none of {} for TP={}",
                args.topology,
                FIXED_MODES.map(|mode| mode.to_string()).join(", "),
                args.tp
            ))
            .into());
        }
    }
    args.files.check()?;
    replay(&experiment, &args.files, args.files.out.as_deref())
}

/// Runs `experiment`, prints its rows, and writes results and plots.
fn replay(experiment: &Experiment, output: &OutputArgs, out: Option<&Path>) -> Result<()> {
    let mut warnings: Vec<String> = Vec::new();
    for run in &experiment.modes {
        if let Some(warning) = run.hardware.coverage_warning(run.tp, run.stack)
            && !warnings.contains(&warning)
        {
            notices::warn(format!("mode {}: {warning}", run.label));
            warnings.push(warning);
        }
    }
    let plots = output.plots.as_deref().or(out);
    let options = if plots.is_some() { RunOptions::full() } else { RunOptions::replay_only() };
    for (index, run) in experiment.modes.iter().enumerate() {
        // Modes on the same topology would say the same.
        if !experiment.modes[..index].iter().any(|other| other.topology.name == run.topology.name) {
            checks::warn_unusual_links(&run.topology);
        }
    }
    let bar = progress_bar(experiment::steps(experiment, &options), "simulating {bar:40} {pos}/{len} runs, {elapsed}");
    let result = experiment::run(experiment, &options, &|| bar.inc(1));
    bar.finish_and_clear();
    let result = result?;
    let cost = output.cost.model()?;
    let rows = ExperimentRow::all(&result, |i, mode| Economics::of(mode, &Bill::of(&experiment.modes[i].topology), &cost));
    for error in rows.iter().filter_map(|row| row.economics.cost_error.as_ref()) {
        notices::warn(format!("no cost per token: {error}"));
    }
    let mut records: Vec<Record> = rows.iter().map(ExperimentRow::record).collect();
    checks::flag_doubts(&mut records, |record| {
        let run = experiment.modes.iter().find(|run| record.get("label").and_then(|l| l.as_str()) == Some(run.label.as_str()))?;
        Some(&run.topology)
    });
    match output.format {
        Format::Table => emit(&table(&result, &records))?,
        format => emit(&report::render(&records, format))?,
    }
    // Results and plots in one folder are one set of files (see
    // `report::files`); plots in a folder of their own, a set of their own.
    let mut written = Vec::new();
    if let Some(dir) = plots.filter(|&dir| Some(dir) != out) {
        written.extend(report::files::write_set(dir, |set| figures::write_all(&result, set.staging()), cannot(dir))?);
    }
    if let Some(dir) = out {
        let fill = |set: &report::files::FileSet| {
            let mut staged = if plots == Some(dir) { figures::write_all(&result, set.staging())? } else { Vec::new() };
            for (name, format) in [("results.json", Format::Json), ("results.csv", Format::Csv)] {
                staged.push(set.write(name, report::render(&records, format)).map_err(cannot(dir))?);
            }
            Ok(staged)
        };
        written.extend(report::files::write_set(dir, fill, cannot(dir))?);
    }
    if !written.is_empty() {
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        let note = format!("wrote {}", names.join(", "));
        // Keep stdout machine-readable in json and csv.
        if output.format == Format::Table { emit(&format!("\n{note}\n"))? } else { eprintln!("{note}") }
    }
    Ok(())
}

/// The error of a failed file operation on the results in `dir`.
fn cannot(dir: &Path) -> impl Fn(std::io::Error) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("cannot write the results in {}: {e}", dir.display())
}

/// Prints to stdout; a reader that went away (`| head`) is not an error.
pub(super) fn emit(text: &str) -> Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error).context("writing to stdout"),
        _ => Ok(()),
    }
}

/// How the forward ran, when every mode ran it the same way: "; every
/// kernel of the model as vllm fuses them, launched as nccl-graph".
fn forward_note(result: &ExperimentResult) -> String {
    let ways: Vec<(icsim::stack::Stack, icsim::config::llm::Scope, &str)> =
        result.modes.iter().map(|m| (m.stack, m.scope, m.fusion.as_str())).collect();
    match ways.first() {
        Some(&(stack, scope, fusion)) if ways.iter().all(|w| *w == (stack, scope, fusion)) => {
            let what = match scope {
                icsim::config::llm::Scope::Full => "every kernel of the model",
                icsim::config::llm::Scope::Layers => "the decoder layers' kernels",
            };
            format!(";\n{what} as {fusion} fuses them, launched as {stack} launches them")
        }
        _ => String::new(),
    }
}

/// Keeps the named fields of each record, in that order.
fn project(records: &[Record], fields: &[&str]) -> Vec<Record> {
    records.iter().map(|r| fields.iter().filter_map(|&f| r.get(f).map(|v| (f.to_string(), v.clone()))).collect()).collect()
}

/// The human-readable report: the query, then tables whose columns are
/// the JSON fields (or, for allreduces, those fields without their pass).
fn table(result: &ExperimentResult, records: &[Record]) -> String {
    let q = &result.query;
    let mut text = format!(
        "{}: one query of {} prompt + {} output tokens, batch {} (TTFT = prefill compute + communication){}\n",
        result.model,
        q.prompt,
        q.output,
        q.batch,
        forward_note(result)
    );
    let mut section = |title: &str, rows: Vec<Record>| {
        text += &format!("\n{title}:\n");
        text += &report::render(&rows, Format::Table);
    };
    section(
        "time per query, ms, on every GPU of the TP group",
        project(
            records,
            &[
                "label",
                "topology",
                "gpu",
                "host",
                "transport",
                "tp",
                "compute_ms",
                "launch_wait_ms",
                "prefill_comm_ms",
                "decode_comm_ms",
                "ttft_ms",
                "total_ms",
                "comm_share",
            ],
        ),
    );
    section(
        "allreduces, two a layer and (whole model) the embedding's (algorithm/protocol: NCCL's tuner, or with allreduce = fastest the one-shot/two-shot kernels where faster; gpu_link_util: use of the GPUs' own links during one call)",
        {
            let mut rows = Vec::new();
            for record in records {
                for pass in ["prefill", "decode"] {
                    if record.get(&format!("{pass}_allreduce")).is_none_or(|v| v.is_null()) {
                        continue;
                    }
                    let mut row = Record::new();
                    row.insert("label".into(), record["label"].clone());
                    row.insert("pass".into(), pass.into());
                    for field in ["allreduce", "allreduces", "algo", "allreduce_us", "busbw_gbps", "gpu_link_util"] {
                        row.insert(field.into(), record.get(&format!("{pass}_{field}")).cloned().unwrap_or_default());
                    }
                    rows.push(row);
                }
            }
            rows
        },
    );
    section(
        "each GPU's TP traffic (2(n-1)/n of every allreduce, as a ring moves it): simulated against \"bytes / headline bandwidth\" (headline: 2 x the raw rate per direction)",
        project(records, &["label", "tp_gb_per_gpu", "comm_ms", "headline_gbps", "naive_comm_ms", "naive_comm_ms_per_direction"]),
    );
    section(
        "the busiest link: most bytes for its capacity over the communication time",
        project(records, &["label", "busiest_link", "busiest_link_util"]),
    );
    section(
        "what a query yields and costs (generated tokens; $ and energy of the TP group's GPUs and their share of the server, models/cost/default.toml or --cost)",
        project(records, &["label", "tokens_per_s", "tokens_per_s_per_gpu", "usd_per_million_tokens", "joules_per_token"]),
    );
    text + &super::storage::sections(result, records)
}
