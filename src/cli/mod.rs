//! Argument types (what the user typed, kept apart from resolved
//! configuration) and the dispatch to each subcommand.

mod calibrate;
mod collective;
mod figures;
mod llm;
mod storage;
mod topo;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use icsim::report::Format;
use icsim::topology::{PresetOptions, TopologySpec};

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
}

/// Which server to simulate.
#[derive(Debug, Clone, Args)]
pub struct TopologyArgs {
    /// A preset (hgx-h100, hgx-h200, hgx-h20, hgx-a100, h20-nvlink-mesh,
    /// pcie-gen3-8gpu, pcie-gen4-8gpu, pcie-gen5-8gpu) or a topology file:
    /// TOML, `nvidia-smi topo -m` output or NCCL's topology XML.
    #[arg(long, short = 't', default_value = "hgx-h200")]
    pub topology: String,
    /// Use the first N GPUs.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// GPU model (a100, h100, h200, h20, b200) for the pcie-* presets and
    /// for imported nvidia-smi or NCCL files.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Hardware model overlay (a file, or a shipped model's name); repeatable.
    #[arg(long = "model", value_name = "FILE")]
    pub models: Vec<String>,
}

impl TopologyArgs {
    pub fn spec(&self) -> TopologySpec {
        TopologySpec {
            name: self.topology.clone(),
            options: PresetOptions { gpus: self.gpus, gpu: self.gpu.clone() },
            models: self.models.clone(),
        }
    }
}

pub fn parse_format(text: &str) -> Result<Format, String> {
    text.parse()
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        None => llm::run_experiment(llm::RunArgs::default_run()),
        Some(Command::Run(args)) => llm::run_experiment(args),
        Some(Command::Llm(args)) => llm::run_llm(args),
        Some(Command::Collective(args)) => collective::run(args),
        Some(Command::Topo(command)) => topo::run(command),
        Some(Command::Calibrate(command)) => calibrate::run(command),
    }
}
