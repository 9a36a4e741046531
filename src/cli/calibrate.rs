//! `icsim calibrate run|fit|validate`: measure a GPU machine, fit the
//! hardware model to measurements, and report how far predictions are from
//! them.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use super::collective::Sizes;
use super::{TopologyArgs, parse_format};
use icsim::calibrate::nccl_tests::NcclTestsOptions;
use icsim::calibrate::runner::{self, RunOptions, Timing, TransportSetting};
use icsim::calibrate::schema::Measurement;
use icsim::calibrate::{clock, fit, read_measurements_located, validate, vllm_bench};
use icsim::collective::{Algorithm, Choice, Op, Protocol};
use icsim::config::ConfigError;
use icsim::config::hardware::HardwareModel;
use icsim::report::{self, Format, plots};
use icsim::topology::{self, TopologySpec};
use icsim::transport::Mode;
use icsim::units::{Time, parse_sizes};

#[derive(Debug, Subcommand)]
pub enum CalibrateCommand {
    /// Measure this machine's GPUs (copies between host and GPUs and between
    /// GPUs; NCCL collectives under each transport, protocol and algorithm)
    /// and write schema-1 measurements with a record of the system. Needs an
    /// NVIDIA driver, and NCCL for collectives; both are loaded at run time.
    Run(Box<RunArgs>),
    /// Internal: measures collectives under one NCCL setting for `run`.
    #[command(name = "collective-child", hide = true)]
    CollectiveChild {
        /// The child specification (JSON) the parent wrote.
        #[arg(long)]
        spec: String,
    },
    /// Compare predictions with measurements: every point, then the median,
    /// 90th percentile and largest absolute error of each series.
    Validate {
        #[command(flatten)]
        measurements: MeasurementArgs,
        #[command(flatten)]
        topology: TopologyArgs,
        /// Only sizes from this many bytes up count in the statistics.
        #[arg(long, value_parser = |s: &str| s.parse::<icsim::units::Bytes>().map_err(|e| e.to_string()))]
        min_bytes: Option<icsim::units::Bytes>,
        /// table, json or csv.
        #[arg(long, default_value = "table", value_parser = parse_format)]
        format: Format,
        /// Draw measured points against predicted curves into this file (PNG
        /// or SVG); nothing is drawn without it.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// A second model to set beside: these overlays (files or shipped
        /// names) in place of --hardware's, e.g. `--before base` for the model
        /// before calibration; its errors get their own columns. Repeatable.
        #[arg(long, value_name = "FILE")]
        before: Vec<String>,
        /// Simulate every file on --topology, even one whose folder holds the
        /// NCCL topology dump of the machine it was measured on.
        #[arg(long)]
        same_topology: bool,
    },
    /// Fit the model's parameters to measurements by least squares and write
    /// them as a model overlay with their provenance.
    Fit {
        #[command(flatten)]
        measurements: MeasurementArgs,
        #[command(flatten)]
        topology: TopologyArgs,
        /// Where to write the fitted overlay (models/hardware/NAME.toml).
        #[arg(long)]
        out: PathBuf,
        /// Name of the measured system, for the provenance.
        #[arg(long)]
        system: Option<String>,
        /// Objective evaluations per parameter group, 1 to 1000000.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        evaluations: u32,
        /// Write the overlay even when a parameter ends on its bound (the
        /// data cannot place it).
        #[arg(long)]
        allow_bounds: bool,
        /// Simulate every file on --topology, even one whose folder holds the
        /// NCCL topology dump of the machine it was measured on.
        #[arg(long)]
        same_topology: bool,
    },
}

/// Measurement files and what nccl-tests output does not say.
#[derive(Debug, Args)]
pub struct MeasurementArgs {
    /// Schema-1 measurements (JSON Lines), or the output of a nccl-tests
    /// binary (all_reduce_perf, all_gather_perf, ...); several files are
    /// read as one set (different sources, GPU counts and callers).
    #[arg(required = true, num_args = 1..)]
    measurements: Vec<PathBuf>,
    /// For nccl-tests output: the transport NCCL used (auto, nvswitch,
    /// nvlink, p2p, shm), which nccl-tests does not print. Default auto.
    #[arg(long)]
    transport: Option<String>,
    /// For nccl-tests output that does not name its test: the collective
    /// (allreduce, allgather, reducescatter, broadcast).
    #[arg(long)]
    op: Option<String>,
    /// For `vllm bench latency --output-json` results: what vLLM was run
    /// with (its own flag names), which the JSON does not record.
    #[command(flatten)]
    vllm: VllmArgs,
}

/// What a `vllm bench latency` result does not say.
#[derive(Debug, Args)]
struct VllmArgs {
    /// The LLM vLLM served: a shipped name (llama-3.1-70b) or a model file.
    #[arg(long = "model", alias = "llm")]
    llm: Option<String>,
    /// vLLM's --tensor-parallel-size.
    #[arg(long, value_parser = super::gpu_count())]
    tp: Option<u32>,
    /// vLLM's --input-len.
    #[arg(long)]
    input_len: Option<u64>,
    /// vLLM's --output-len.
    #[arg(long)]
    output_len: Option<u64>,
    /// vLLM's --batch-size.
    #[arg(long)]
    batch_size: Option<u64>,
    /// How vLLM launched its kernels (default nccl-graph: CUDA graphs).
    #[arg(long, value_parser = |s: &str| s.parse::<icsim::stack::Stack>())]
    stack: Option<icsim::stack::Stack>,
}

impl MeasurementArgs {
    /// Each file's measurements, with the line each was read from.
    fn read_each(&self) -> Result<Vec<(Vec<Measurement>, Vec<usize>)>> {
        self.measurements.iter().map(|path| self.read_one(path)).collect()
    }

    /// One file: vLLM's benchmark JSON, nccl-tests output or schema-1
    /// lines, each measurement with its line (a vLLM result: its position).
    fn read_one(&self, path: &std::path::Path) -> Result<(Vec<Measurement>, Vec<usize>)> {
        // A file that cannot be read is reported by the reader below.
        let text = icsim::config::read_text(path).unwrap_or_default();
        if vllm_bench::is_vllm_bench(&text) {
            let v = &self.vllm;
            let options = vllm_bench::VllmBenchOptions {
                llm: v.llm.clone(),
                tp: v.tp,
                input_len: v.input_len,
                output_len: v.output_len,
                batch_size: v.batch_size,
                stack: v.stack,
                transport: self.transport.clone(),
            };
            let rows = vllm_bench::parse(path, &text, &options)?;
            let lines = (1..=rows.len()).collect();
            return Ok((rows, lines));
        }
        let options = NcclTestsOptions { op: self.op.clone(), transport: self.transport.clone() };
        Ok(read_measurements_located(path, &options)?.into_iter().map(|(line, m)| (m, line)).unzip())
    }

    /// Every file with the board it was measured on: the NCCL topology dump
    /// beside it where the runner left one (the machine as measured), else
    /// `--topology`; and the hardware model `--topology` and `--hardware` name.
    /// Each source comes with the lines its measurements were read from;
    /// an unknown overlay is named as `overlay_flag`.
    fn sources(
        &self,
        topology: &TopologyArgs,
        same_topology: bool,
        overlay_flag: &str,
    ) -> Result<(Vec<fit::Source>, Vec<Vec<usize>>, HardwareModel)> {
        let (default_board, model) = super::blueprint_topology(&topology.spec(), overlay_flag)?;
        let mut sources = Vec::new();
        let mut lines = Vec::new();
        for (path, (measurements, read_from)) in self.measurements.iter().zip(self.read_each()?) {
            let dump = path.parent().map(|folder| folder.join("nccl-topo.xml")).filter(|dump| dump.is_file());
            let board = match dump {
                Some(dump) if !same_topology => {
                    let options = icsim::topology::PresetOptions { gpus: None, gpu: topology.gpu.clone(), host: None };
                    let spec = TopologySpec { name: dump.display().to_string(), options, models: Vec::new() };
                    topology::blueprint(&spec).with_context(|| format!("the board {} was measured on", path.display()))?.0
                }
                _ => default_board.clone(),
            };
            sources.push(fit::Source { board, measurements });
            lines.push(read_from);
        }
        Ok((sources, lines, model))
    }

    /// Predicts every measurement of every source on its board; a
    /// measurement the model cannot predict is named by its file and line.
    fn compare(&self, sources: &[fit::Source], lines: &[Vec<usize>], model: &HardwareModel) -> Result<Vec<validate::Row>> {
        let topologies = fit::build_all(sources, model)?;
        let mut rows = Vec::new();
        for (((source, topo), path), lines) in sources.iter().zip(&topologies).zip(&self.measurements).zip(lines) {
            super::checks::warn_unusual_links(topo);
            super::checks::warn_other_gpus(path, topo, model, &source.measurements);
            let predicted = validate::compare(topo, model, &source.measurements).map_err(|error| {
                let line = lines.get(error.index).copied().unwrap_or(error.index + 1);
                ConfigError::invalid(path, format!("line {line}"), format!("{}: {}", error.series, error.error))
            })?;
            rows.extend(predicted);
        }
        Ok(rows)
    }

    /// Refuses `rows` (predicted from these files, read from `lines`) when
    /// the model predicts none of them (an unknown operation, transport or
    /// kernel): an empty table answers nothing. Names the first row.
    fn some_predicted(&self, rows: &[validate::Row], lines: &[Vec<usize>]) -> Result<(), ConfigError> {
        let Some(first) = rows.first().filter(|_| rows.iter().all(|row| row.predicted_us.is_none())) else { return Ok(()) };
        let (line, count, names) = (lines.first().and_then(|l| l.first()).copied().unwrap_or(1), rows.len(), self.names());
        let why = format!("{}: {}; the model predicts none of the {count} rows of {names}: nothing to validate", first.series, first.note);
        Err(ConfigError::invalid(&self.measurements[0], format!("line {line}"), why))
    }

    /// The files, for messages and provenance.
    fn names(&self) -> String {
        self.measurements.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// What `icsim calibrate run` takes.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Folder for measurements.jsonl, system.json, nvidia-smi-topo.txt and nccl-topo.xml.
    #[arg(long, default_value = "calibration-out")]
    out: PathBuf,
    /// The `system` name of the measurements [default: the host name].
    #[arg(long)]
    system: Option<String>,
    /// Sizes of copies and collectives alike: a list (1MiB,16MiB), a doubling
    /// range (8B..4GiB) or a range with a factor (4KiB..1GiB:x4).
    #[arg(long, value_parser = sizes_arg)]
    sizes: Option<Sizes>,
    /// Copy sizes (overrides --sizes) [default: 4KiB..1GiB:x4].
    #[arg(long, value_parser = sizes_arg)]
    copy_sizes: Option<Sizes>,
    /// Collective sizes as nccl-tests counts them (overrides --sizes) [default: 8B..4GiB:x4].
    #[arg(long, value_parser = sizes_arg)]
    collective_sizes: Option<Sizes>,
    /// Timed repetitions of each point (graph replays for collectives), at most.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed repetitions before timing, at most.
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Collective calls captured in each CUDA graph, at most.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    graph_calls: u32,
    /// About how long the timed part of one point may take: slower points get
    /// fewer repetitions and graph calls (at least one).
    #[arg(long, default_value = "200ms", value_parser = time_arg)]
    point_time: Time,
    /// Collectives to measure: allreduce, allgather, reducescatter.
    #[arg(long, value_delimiter = ',', default_value = "allreduce,allgather,reducescatter", value_parser = |s: &str| s.parse::<Op>())]
    ops: Vec<Op>,
    /// NCCL transports: default (NCCL's choice) and shm (NCCL_P2P_DISABLE=1).
    #[arg(long, value_delimiter = ',', default_value = "default,shm", value_parser = |s: &str| s.parse::<TransportSetting>())]
    transports: Vec<TransportSetting>,
    /// Protocols to force with NCCL_PROTO, one per run (auto: none forced).
    #[arg(long, value_delimiter = ',', default_value = "auto,ll,ll128,simple", value_parser = |s: &str| s.parse::<Choice<Protocol>>())]
    protos: Vec<Choice<Protocol>>,
    /// Algorithms to force with NCCL_ALGO, one per run: ring, tree (auto: none forced).
    #[arg(long, value_delimiter = ',', default_value = "auto,ring,tree", value_parser = |s: &str| s.parse::<Choice<Algorithm>>())]
    algos: Vec<Choice<Algorithm>>,
    /// Channel counts to force, one per run (NCCL_MIN_NCHANNELS =
    /// NCCL_MAX_NCHANNELS; auto: NCCL's own), each with every setting above.
    #[arg(long, value_delimiter = ',', default_value = "auto", value_parser = channel_count)]
    channels: Vec<Choice<u32>>,
    /// Keep NCCL's own log (NCCL_DEBUG=INFO, set-up and tuning: the channels,
    /// algorithm and protocol of every call) under OUT/nccl-debug/.
    #[arg(long)]
    nccl_debug: bool,
    /// Measure no copies.
    #[arg(long)]
    skip_copies: bool,
    /// Measure no collectives.
    #[arg(long)]
    skip_collectives: bool,
    /// NCCL's shared library; else $NCCL_LIB, then libnccl.so.2 on the library
    /// path, then python3's nvidia.nccl package, then torch's lib folder.
    #[arg(long, value_name = "PATH")]
    nccl_lib: Option<PathBuf>,
    /// Use the first N GPUs; a list (2,4,8) measures collectives on each of
    /// those counts, and copies on the most [default: all visible].
    #[arg(long, value_name = "N", value_delimiter = ',')]
    gpus: Vec<usize>,
    /// The LLM whose tensor-parallel allreduces are replayed on every GPU
    /// count it splits over, with NCCL choosing: a prefill's and a decode
    /// step's (2 per layer, one CUDA graph each). A shipped name or a file.
    #[arg(long = "model", alias = "llm", default_value = "llama-3.1-70b")]
    llm: String,
    /// Prompt tokens of the replayed prefill.
    #[arg(long, default_value_t = 8192)]
    prompt: u64,
    /// Replay no LLM allreduces.
    #[arg(long)]
    skip_sequences: bool,
    /// The `transport` written for NCCL's default choice (auto, p2p, nvlink,
    /// nvswitch) [default: nvswitch where nvidia-smi topo -m shows NVLink
    /// between every pair of GPUs, else auto].
    #[arg(long, value_parser = |s: &str| s.parse::<Mode>())]
    default_transport: Option<Mode>,
    /// How long the process measuring one NCCL setting may run.
    #[arg(long, default_value = "300s", value_parser = time_arg)]
    child_timeout: Time,
    /// Add to the folder's measurements.jsonl instead of replacing it (to
    /// split a run over several commands).
    #[arg(long)]
    append: bool,
    /// Measure compute kernels on the first GPU instead of copies and
    /// collectives: bf16 products through cuBLAS and the memory-bound
    /// kernels of a layer (NVRTC), at the LLMs' shapes for each TP degree,
    /// prefill token count and decode batch.
    #[arg(long)]
    kernels: bool,
    /// With --kernels: the LLMs (shipped names or files).
    #[arg(long, value_delimiter = ',', default_value = "llama-3.1-8b,llama-3.1-70b,llama-3.1-405b")]
    kernel_llms: Vec<String>,
    /// With --kernels: tensor-parallel degrees.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8", value_parser = clap::value_parser!(u64).range(1..))]
    kernel_tps: Vec<u64>,
    /// With --kernels: prefill token counts (one sequence each).
    #[arg(long, value_delimiter = ',', default_value = runner::kernels::DEFAULT_PREFILL, value_parser = clap::value_parser!(u64).range(1..1_048_577))]
    prefill_tokens: Vec<u64>,
    /// With --kernels: decode batches (one token a sequence).
    #[arg(long, value_delimiter = ',', default_value = runner::kernels::DEFAULT_DECODE, value_parser = clap::value_parser!(u64).range(1..65_537))]
    decode_batches: Vec<u64>,
    /// With --kernels: about how long each kernel is timed.
    #[arg(long, default_value = "25ms", value_parser = time_arg)]
    kernel_time: Time,
}

fn sizes_arg(text: &str) -> Result<Sizes, String> {
    parse_sizes(text).map(Sizes)
}

fn channel_count(text: &str) -> Result<Choice<u32>, String> {
    match text {
        "auto" => Ok(Choice::Auto),
        _ => text.parse().map(Choice::Fixed).map_err(|_| format!("{text:?} is not a channel count: use auto or a number such as 8")),
    }
}

fn time_arg(text: &str) -> Result<Time, String> {
    text.parse::<Time>().map_err(|e| e.to_string())
}

fn choices<T>(values: &[Choice<T>]) -> Vec<Option<T>>
where
    T: Copy,
{
    values.iter().map(|c| if let Choice::Fixed(v) = c { Some(*v) } else { None }).collect()
}

fn run_options(args: RunArgs) -> RunOptions {
    let default_sizes = |text: &str| parse_sizes(text).expect("the default sizes parse");
    let copy_sizes = args.copy_sizes.or_else(|| args.sizes.clone()).map_or_else(|| default_sizes(runner::DEFAULT_COPY_SIZES), |s| s.0);
    let collective_sizes = args.collective_sizes.or(args.sizes).map_or_else(|| default_sizes(runner::DEFAULT_COLLECTIVE_SIZES), |s| s.0);
    RunOptions {
        out: args.out,
        system: args.system,
        copy_sizes,
        collective_sizes,
        timing: Timing { iters: args.iters, warmup: args.warmup, graph_calls: args.graph_calls, point_time: args.point_time },
        ops: args.ops,
        transports: args.transports,
        protos: choices(&args.protos),
        algos: choices(&args.algos),
        channels: choices(&args.channels),
        nccl_debug: args.nccl_debug,
        skip_copies: args.skip_copies,
        skip_collectives: args.skip_collectives,
        nccl_lib: args.nccl_lib,
        gpus: args.gpus,
        sequences: (!args.skip_sequences).then_some(runner::SequenceOptions { llm: args.llm, prompt: args.prompt }),
        default_transport: args.default_transport,
        child_timeout: args.child_timeout,
        append: args.append,
        command: std::env::args().collect(),
        kernels: args.kernels.then_some(runner::kernels::KernelOptions {
            llms: args.kernel_llms,
            tps: args.kernel_tps,
            prefill: args.prefill_tokens,
            decode: args.decode_batches,
            point_time: args.kernel_time,
        }),
    }
}

pub fn run(command: CalibrateCommand) -> Result<()> {
    match command {
        CalibrateCommand::Run(args) => {
            let report = runner::run(&run_options(*args))?;
            println!("wrote {} measurements to {}", report.measurements, report.out.join("measurements.jsonl").display());
            Ok(())
        }
        CalibrateCommand::CollectiveChild { spec } => Ok(runner::run_child(&spec)?),
        CalibrateCommand::Validate { measurements, topology, min_bytes, format, plot, before, same_topology } => {
            let predicted = |hardware: Vec<String>, flag: &str| -> Result<Vec<validate::Row>> {
                let spec_args = TopologyArgs { hardware, ..topology.clone() };
                let (sources, lines, model) = measurements.sources(&spec_args, same_topology, flag)?;
                let rows = measurements.compare(&sources, &lines, &model)?;
                measurements.some_predicted(&rows, &lines)?;
                Ok(rows)
            };
            if let Some(plot) = &plot {
                plots::figure_format(plot).map_err(|why| super::BadInput(format!("--plot {}: {why}", plot.display())))?;
                super::check_output_file(plot, "--plot")?;
            }
            let rows = predicted(topology.hardware.clone(), "--hardware")?;
            let before_rows = if before.is_empty() { None } else { Some(predicted(before, "--before")?) };
            let min = min_bytes.map_or(0, |b| b.0);
            let kept = |r: &validate::Row| r.bytes >= min || r.series.starts_with("kernel");
            if let Some(min_bytes) = min_bytes.filter(|_| !rows.iter().any(kept)) {
                return Err(super::BadInput(format!(
                    "--min-bytes {min_bytes}: no row passes the filters (sizes from {min_bytes} up, and kernels); {} rows were read from {}",
                    rows.len(),
                    measurements.names()
                ))
                .into());
            }
            let summary = validate::summarize(&rows, before_rows.as_deref(), kept);
            print_validation(&rows, &summary, format, &topology.topology);
            // Kernels and forwards have no size axis to draw them on.
            if let Some(plot) = plot.filter(|_| rows.iter().any(|r| r.bytes > 0 && r.predicted_us.is_some())) {
                draw_validation(&rows, &topology.topology, &plot)?;
                eprintln!("wrote {}", plot.display());
            }
            Ok(())
        }
        CalibrateCommand::Fit { measurements, topology, out, system, evaluations, allow_bounds, same_topology } => {
            let (sources, lines, model) = measurements.sources(&topology, same_topology, "--hardware")?;
            super::check_output_file(&out, "--out")?;
            for ((source, topo), path) in sources.iter().zip(fit::build_all(&sources, &model)?).zip(&measurements.measurements) {
                super::checks::warn_other_gpus(path, &topo, &model, &source.measurements);
            }
            let points: Vec<icsim::calibrate::schema::Measurement> = sources.iter().flat_map(|s| s.measurements.clone()).collect();
            if points.is_empty() {
                bail!(super::BadInput(format!("{} holds no measurements", measurements.names())));
            }
            let fitted = fit::fit(&sources, &model, evaluations as usize)?;
            for skipped in &fitted.skipped {
                println!("not fitted: {}: {}", skipped.name, skipped.reason);
            }
            if fitted.groups.is_empty() {
                bail!(super::BadInput(format!(
                    "nothing in {} identifies a parameter of the model (no large copies, one-channel or multi-channel collectives, or small calls at two step counts); nothing written",
                    measurements.names()
                )));
            }
            for group in &fitted.groups {
                println!(
                    "{} ({} points): rms log error {:.3} -> {:.3}",
                    group.name, group.points, group.rms_log_error_before, group.rms_log_error_after
                );
                for (key, _, before, after) in &group.parameters {
                    println!("  {key:<45} {before:>12.4} -> {after:>12.4}");
                }
            }
            let pinned = fitted.pinned();
            if !pinned.is_empty() && !allow_bounds {
                let list: Vec<String> = pinned.iter().map(|(key, needs)| format!("{key} (needs {needs})")).collect();
                bail!(super::BadInput(format!(
                    "{} parameter(s) ended on their bound, so the data does not place them: {}; nothing written (--allow-bounds writes it anyway)",
                    pinned.len(),
                    list.join("; ")
                )));
            }
            let system =
                system.or_else(|| points.iter().map(|p| p.system.clone()).find(|s| !s.is_empty())).unwrap_or_else(|| "unnamed".into());
            let text = overlay_text(&fitted.groups, &measurements.names(), &points, &system, &topology.topology);
            icsim::report::files::write_whole(&out, text).map_err(|e| anyhow::anyhow!("cannot write --out {}: {e}", out.display()))?;
            println!("\nwrote {}", out.display());
            let (rows, before) = (measurements.compare(&sources, &lines, &fitted.model)?, measurements.compare(&sources, &lines, &model)?);
            let summary = validate::summarize(&rows, Some(&before), |_| true);
            println!("\nresiduals of the fitted model (before: the model it started from):");
            print_validation(&rows, &summary, Format::Table, &topology.topology);
            Ok(())
        }
    }
}

fn overlay_text(
    fits: &[fit::GroupFit],
    files: &str,
    points: &[icsim::calibrate::schema::Measurement],
    system: &str,
    topology: &str,
) -> String {
    let mut table = fit::overlay(fits);
    let mut provenance = toml::Table::new();
    let files: Vec<toml::Value> = files.split(", ").map(|f| toml::Value::String(f.to_string())).collect();
    provenance.insert("measurements".into(), toml::Value::Array(files));
    let gpu_counts: std::collections::BTreeSet<u32> = points.iter().filter(|p| p.is_collective()).filter_map(|p| p.ranks).collect();
    let stacks: std::collections::BTreeSet<String> = points.iter().filter(|p| p.is_collective()).map(|p| p.stack().to_string()).collect();
    provenance
        .insert("gpu_counts".into(), toml::Value::Array(gpu_counts.into_iter().map(|n| toml::Value::Integer(i64::from(n))).collect()));
    provenance.insert("stacks".into(), toml::Value::Array(stacks.into_iter().map(toml::Value::String).collect()));
    provenance.insert("system".into(), toml::Value::String(system.to_string()));
    provenance.insert("fitted_at".into(), toml::Value::String(clock::today()));
    provenance.insert(
        "method".into(),
        toml::Value::String(format!("icsim calibrate fit: Nelder-Mead on the mean squared log error, simulated on topology {topology}")),
    );
    // A group's name may go on, after a ';', to say what it could not fit.
    let residuals: toml::Table = fits
        .iter()
        .map(|f| (f.name.split(';').next().unwrap_or(&f.name).to_string(), toml::Value::Float((f.rms_log_error_after * 1e4).round() / 1e4)))
        .collect();
    provenance.insert("residuals".into(), toml::Value::Table(residuals));
    let files_text = provenance["measurements"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(", "))
        .unwrap_or_default();
    table.insert("provenance".into(), toml::Value::Array(vec![toml::Value::Table(provenance)]));
    format!(
        "# Fitted by `icsim calibrate fit` to {files_text} ({system}).\n# Each value replaces the base model's; residuals are rms log errors per group.\n\n{}",
        toml::to_string(&table).expect("plain values")
    )
}

/// Measured points and predicted curves of every series measured over sizes.
fn draw_validation(rows: &[validate::Row], topology: &str, path: &std::path::Path) -> Result<()> {
    let mut series: Vec<plots::MeasuredSeries> = Vec::new();
    for row in rows.iter().filter(|r| r.bytes > 0) {
        let Some(predicted) = row.predicted_us else { continue };
        let index = match series.iter().position(|s| s.name == row.series) {
            Some(i) => i,
            None => {
                series.push(plots::MeasuredSeries { name: row.series.clone(), measured: Vec::new(), predicted: Vec::new() });
                series.len() - 1
            }
        };
        series[index].measured.push((row.bytes as f64, row.measured_us));
        series[index].predicted.push((row.bytes as f64, predicted));
    }
    if series.is_empty() {
        return Err(super::BadInput(format!("--plot {}: no measurement over sizes has a prediction to draw", path.display())).into());
    }
    let chart = plots::MeasuredVsPredicted {
        title: format!("measured (points) and predicted (lines), topology {topology}"),
        x_label: "message size".into(),
        y_label: "time (us)".into(),
        x_axis: plots::LogAxis::Bytes,
        series,
    };
    Ok(plots::measured_vs_predicted(&chart, path)?)
}

fn print_validation(rows: &[validate::Row], summary: &[validate::Summary], format: Format, topology: &str) {
    let (lines, summary_lines): (Vec<_>, Vec<_>) =
        (rows.iter().map(validate::Row::line).collect(), summary.iter().map(validate::Summary::line).collect());
    let row_records: Vec<report::Record> = lines.iter().map(report::record_of).collect();
    let summary_records: Vec<report::Record> = summary_lines.iter().map(report::record_of).collect();
    match format {
        Format::Json => {
            let unpredicted: Vec<serde_json::Value> = validate::unpredicted(rows)
                .into_iter()
                .map(|(series, reason)| serde_json::json!({ "series": series, "reason": reason }))
                .collect();
            let document = serde_json::json!({
                "topology": topology,
                "results": lines,
                "summary": summary_lines,
                "not_predicted": unpredicted,
            });
            println!("{}", serde_json::to_string_pretty(&document).expect("plain data"));
        }
        Format::Csv => print!("{}", report::render(&row_records, Format::Csv)),
        Format::Table => {
            print!("{}", report::render(&row_records, Format::Table));
            println!("\nabsolute error by series and size band (topology {topology}):");
            print!("{}", report::render(&summary_records, Format::Table));
            let unpredicted = validate::unpredicted(rows);
            if !unpredicted.is_empty() {
                println!("\nnot predicted (left out of the statistics):");
                for (series, reason) in unpredicted {
                    println!("  {series}: {reason}");
                }
            }
        }
    }
}
