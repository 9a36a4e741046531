//! Argument types (what the user typed, kept apart from resolved
//! configuration) and the dispatch to each subcommand.

mod calibrate;
mod checks;
mod collective;
mod diff;
mod figures;
mod llm;
mod load;
mod notices;
mod serve;
mod storage;
mod sweep;
mod topo;

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use icsim::config::hardware::HardwareModel;
use icsim::report::Format;
use icsim::topology::{self, PresetOptions, Topology, TopologySpec};

/// icsim: a discrete-event simulator of the interconnect inside a GPU server.
/// With no subcommand it runs configs/default.toml.
#[derive(Debug, Parser)]
#[command(name = "icsim", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an experiment file: one LLM query replayed under each transport
    /// mode (default: configs/default.toml).
    Run(llm::RunArgs),
    /// Replay one LLM query with tensor parallelism on one topology.
    Llm(llm::LlmArgs),
    /// Simulate a collective over a range of message sizes.
    Collective(collective::CollectiveArgs),
    /// Show or import topologies.
    #[command(subcommand)]
    Topo(topo::TopoCommand),
    /// Fit the hardware model to measurements, and validate it.
    #[command(subcommand)]
    Calibrate(calibrate::CalibrateCommand),
    /// Serve requests arriving at a rate (or from a trace) on one
    /// tensor-parallel group, batched continuously as vLLM does: latency
    /// percentiles, throughput, goodput at an SLO, KV-cache use and cost.
    Serve(Box<serve::ServeArgs>),
    /// Run a sweep file: a base experiment over axes or listed points, in
    /// parallel, ranked by a goal and a cost (or merge a sweep's shards).
    Sweep(sweep::SweepArgs),
    /// What does a change buy: one workload before and after (a second
    /// experiment, or --set KEY=VALUE), mode by mode.
    Diff(diff::DiffArgs),
}

/// Which server to simulate.
#[derive(Debug, Clone, Args)]
pub struct TopologyArgs {
    /// A preset (hgx-h100, hgx-h200, hgx-h20, hgx-b200, hgx-a100,
    /// h20-nvlink-mesh, pcie-gen3-8gpu, pcie-gen4-8gpu, pcie-gen5-8gpu,
    /// pcie-switch-8gpu, pcie-direct-8gpu, gb200-nvl72, nvlink-fabric) or a
    /// topology file: TOML, `nvidia-smi topo -m` output or NCCL's topology
    /// XML.
    #[arg(long, short = 't', default_value = "hgx-h200")]
    pub topology: String,
    /// Use the first N GPUs.
    #[arg(long, value_parser = gpu_count())]
    pub gpus: Option<u32>,
    /// GPU model for the pcie-* presets and for imported nvidia-smi or NCCL
    /// files (a100, h100, h200, h20, b200; h100-pcie, h200-nvl, a100-pcie,
    /// l4, l40s, rtx4090, rtx5090, rtx-pro-6000, v100-pcie).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Host platform (CPU sockets, their link, memory and PCIe lanes) for
    /// the presets and for imported nvidia-smi or NCCL files: skylake-2s,
    /// icx-2s, spr-2s, emr-2s, gnr-2s, epyc-2s, epyc-genoa, epyc-turin,
    /// threadripper-pro, threadripper-3000, grace.
    #[arg(long)]
    pub host: Option<String>,
    /// Hardware model overlay: a shipped one (base, h200-fit,
    /// blackwell-latency, ampere-latency, h200-compute, h200-forward) or a
    /// .toml file, applied after the topology's own; repeatable.
    #[arg(long = "hardware", value_name = "NAME|FILE")]
    pub hardware: Vec<String>,
}

impl TopologyArgs {
    pub fn spec(&self) -> TopologySpec {
        TopologySpec {
            name: self.topology.clone(),
            options: PresetOptions { gpus: self.gpus, gpu: self.gpu.clone(), host: self.host.clone() },
            models: self.hardware.clone(),
        }
    }

    /// The topology and its hardware model, with errors naming the flags.
    pub fn resolve(&self) -> Result<(Topology, HardwareModel)> {
        resolve_topology(&self.spec(), "--hardware")
    }
}

/// What `spec` is built from (see `topology::blueprint`); an unknown overlay
/// among its models is named as the flag `overlay_flag` that gave it.
pub fn blueprint_topology(spec: &TopologySpec, overlay_flag: &str) -> Result<(topology::Blueprint, HardwareModel)> {
    topology::blueprint(spec).map_err(|error| overlay_named(error, overlay_flag))
}

/// An unknown overlay named as the flag that gave it; other errors as they are.
fn overlay_named(error: topology::ResolveError, overlay_flag: &str) -> anyhow::Error {
    match error {
        topology::ResolveError::Config(misnamed) if misnamed.is_misnamed() => BadInput(format!("{overlay_flag}: {misnamed}")).into(),
        other => other.into(),
    }
}

/// Builds the topology of `spec`; an unknown overlay among its models is
/// named as the flag `overlay_flag` that gave it.
pub fn resolve_topology(spec: &TopologySpec, overlay_flag: &str) -> Result<(Topology, HardwareModel)> {
    topology::resolve(spec).map_err(|error| overlay_named(error, overlay_flag))
}

/// `--gpus` and `--tp`: a count of GPUs, from 1 to the most a topology
/// holds, so that a refusal says the real range.
/// `--cost FILE`: prices and power over the shipped cost model.
#[derive(Debug, Default, Args)]
pub struct CostArgs {
    /// A cost file (the keys of a sweep's [cost] table) over
    /// models/cost/default.toml: what tokens/s cost in $ and joules.
    #[arg(long, value_name = "FILE")]
    cost: Option<std::path::PathBuf>,
}

impl CostArgs {
    /// The cost model: the file over the shipped one, or the shipped one.
    pub fn model(&self) -> Result<icsim::sweep::cost::CostModel> {
        use icsim::sweep::cost::CostModel;
        Ok(match &self.cost {
            Some(path) => CostModel::from_file(path)?,
            None => CostModel::load(None, Path::new("models/cost/default.toml"), "")?,
        })
    }
}

/// `--set KEY=VALUE` of `icsim run` and `icsim llm`: what-if changes by
/// key, the vocabulary of sweep axes.
#[derive(Debug, Default, Args)]
pub struct SetArgs {
    /// A change by key (repeatable): tp=4, transport=shm, query.batch=8,
    /// topology.nvlink_bandwidth=50GB/s, storage.drives=4,
    /// hardware.<a key of models/hardware/base.toml>=VALUE (docs/reference.md).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

/// The changes `set` (the `--set` texts) asks of one query, checked: a
/// service's key (`command` says what the command does instead) and a key
/// set twice are refused.
pub fn changes(set: &[String], command: &str) -> Result<Vec<icsim::sweep::change::Change>> {
    use icsim::sweep::change::{Change, Key, Origin};
    let (command_line, here) = (Path::new("command line"), Path::new("."));
    let changes = set
        .iter()
        .map(|text| Change::parse_assignment(text, Origin { path: command_line, at: "--set", base_dir: here }))
        .collect::<Result<Vec<Change>, _>>()?;
    if let Some(served) = changes.iter().find(|c| matches!(c.key, Key::Serve(_))) {
        return Err(BadInput(format!("--set {}: a service's keys vary a sweep with a [serve] table; {command}", served.describe())).into());
    }
    if let Some(twice) = (0..changes.len()).find(|&i| changes[..i].iter().any(|c| c.key == changes[i].key)) {
        let first = changes.iter().find(|c| c.key == changes[twice].key).map(Change::describe).unwrap_or_default();
        return Err(BadInput(format!(
            "--set {}: the key {} is set twice (first {first}); set each key once",
            changes[twice].describe(),
            changes[twice].key.name()
        ))
        .into());
    }
    Ok(changes)
}

pub fn gpu_count() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=topology::MAX_GPUS as i64)
}

pub fn parse_format(text: &str) -> Result<Format, String> {
    text.parse()
}

/// Something wrong with what the user gave (a flag, a file, a value) that
/// the library's own error types do not already say: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Refuses, before anything runs, an output folder `dir` given by `flag`
/// that cannot exist (see `report::files::unusable_folder`).
pub fn check_output_folder(dir: &Path, flag: &str) -> Result<(), BadInput> {
    refuse_output(dir, flag, icsim::report::files::unusable_folder(dir), "a folder that exists or can be created")
}

/// Refuses, before anything runs, an output file `path` given by `flag`
/// that cannot be written (see `report::files::unusable_file`).
pub fn check_output_file(path: &Path, flag: &str) -> Result<(), BadInput> {
    refuse_output(path, flag, icsim::report::files::unusable_file(path), "a file in a folder that exists or can be created")
}

/// Bad input naming `flag`, `path` and `why` it is unusable, if it is,
/// and what to `give` instead.
fn refuse_output(path: &Path, flag: &str, why: Option<String>, give: &str) -> Result<(), BadInput> {
    match why {
        Some(why) => Err(BadInput(format!("{flag} {}: {why}; give {give}", path.display()))),
        None => Ok(()),
    }
}

/// What a failed command prints after `error: `, on one line: the reason
/// (the innermost cause that says more than its wrapper already does)
/// first, then what was being done, innermost first, in parentheses:
/// `nvls cannot run ll: ... (allreduce of 1MiB on hgx-h200)`.
pub fn error_line(error: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
        // A wrapper that prints its cause (`cannot read x: <cause>`) has said it.
        if !said.last().is_some_and(|outer| outer.contains(&text)) {
            said.push(text);
        }
    }
    let reason = said.pop().unwrap_or_default();
    // What was being done, where the reason already names it, is said once.
    said.retain(|context| !reason.contains(context.as_str()));
    if said.is_empty() {
        return reason;
    }
    said.reverse();
    format!("{reason} ({})", said.join("; "))
}

/// The exit code of a failed command: 2 when the input was at fault (as
/// clap's own usage errors), 1 when the command could not do its work
/// (no GPU, a file that cannot be written).
pub fn exit_code(error: &anyhow::Error) -> u8 {
    use icsim::calibrate::runner::RunnerError;
    let bad_input = error.chain().any(|cause| {
        cause.is::<BadInput>()
            || cause.is::<icsim::Error>()
            || cause.is::<icsim::config::ConfigError>()
            || cause.is::<icsim::topology::TopologyError>()
            || cause.is::<icsim::topology::ResolveError>()
            || cause.is::<icsim::workload::experiment::RunError>()
            || cause.is::<icsim::topology::import::ImportError>()
            || cause.is::<icsim::transport::TransportError>()
            || cause.is::<icsim::collective::CollectiveError>()
            || cause.is::<icsim::calibrate::validate::RowError>()
            || cause.is::<icsim::serve::ServeError>()
            || cause.is::<icsim::serve::load::LoadError>()
            || cause.is::<icsim::serve::requests::RequestError>()
            || cause.downcast_ref::<RunnerError>().is_some_and(RunnerError::is_usage)
    });
    if bad_input { 2 } else { 1 }
}

/// A bar on stderr drawn with indicatif's `template`, only when stderr is
/// a terminal; redrawn every fifth of a second, so that a long step (one
/// collective on thousands of GPUs) still shows its time going by.
pub fn progress_bar(steps: u64, template: &str) -> ProgressBar {
    let terminal = std::io::stderr().is_terminal();
    let target = if terminal { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let bar = ProgressBar::with_draw_target(Some(steps), target);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    if terminal {
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
    }
    bar
}

/// Runs what `cli` asks; what it noticed on the way is printed once it
/// ends (see `notices`), by `main` after the error if it fails.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        None => llm::run_experiment(llm::RunArgs::default_run()),
        Some(Command::Run(args)) => llm::run_experiment(args),
        Some(Command::Llm(args)) => llm::run_llm(args),
        Some(Command::Collective(args)) => collective::run(args),
        Some(Command::Topo(command)) => topo::run(command),
        Some(Command::Calibrate(command)) => calibrate::run(command),
        Some(Command::Serve(args)) => serve::run(*args),
        Some(Command::Sweep(args)) => sweep::run(args),
        Some(Command::Diff(args)) => diff::run(args),
    }
}

/// Prints what the command noticed (warnings, notes) and has not printed.
pub fn print_notices() {
    notices::print();
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    #[test]
    fn an_error_is_one_line_with_its_reason_first() {
        let error = Err::<(), _>(anyhow::anyhow!("nvls cannot run ll\nuse --proto simple"))
            .context("allreduce of 1MiB on hgx-h200")
            .context("a sweep point")
            .unwrap_err();
        assert_eq!(super::error_line(&error), "nvls cannot run ll; use --proto simple (allreduce of 1MiB on hgx-h200; a sweep point)");
        let io = std::io::Error::other("disk on fire");
        let wrapped = anyhow::Error::new(icsim::topology::import::ImportError::Io { path: "x.txt".into(), source: io });
        assert_eq!(super::error_line(&wrapped), "cannot read x.txt: disk on fire", "a cause its wrapper prints is said once");
        let named = Err::<(), _>(anyhow::anyhow!("allreduce of 1MiB on hgx-h200 (8 GPUs) needs more than 150 million simulated events"))
            .context("allreduce of 1MiB on hgx-h200")
            .context("a sweep point")
            .unwrap_err();
        assert_eq!(
            super::error_line(&named),
            "allreduce of 1MiB on hgx-h200 (8 GPUs) needs more than 150 million simulated events (a sweep point)",
            "a context the reason names is said once"
        );
    }
}
