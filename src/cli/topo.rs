//! `icsim topo show|import`: describe a topology; turn `nvidia-smi topo -m`
//! output or NCCL's topology XML into a topology file.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::Subcommand;

use super::{BadInput, TopologyArgs};
use icsim::config::hardware::HardwareModel;
use icsim::report::Format;
use icsim::topology::{self, import};

#[derive(Debug, Subcommand)]
pub enum TopoCommand {
    /// Describe a preset or topology file (TOML, `nvidia-smi topo -m`
    /// output, NCCL's topology XML): parts, links, GPU relations.
    Show {
        /// Preset name or topology file.
        topology: String,
        /// Use the first N GPUs.
        #[arg(long, value_parser = super::gpu_count())]
        gpus: Option<u32>,
        /// GPU model for pcie-* presets and imported files.
        #[arg(long)]
        gpu: Option<String>,
        /// Host platform for presets and imported files.
        #[arg(long)]
        host: Option<String>,
        /// Hardware model overlay: a shipped one or a .toml file; repeatable.
        #[arg(long = "hardware", value_name = "NAME|FILE")]
        hardware: Vec<String>,
        /// table (a description to read) or json (every part, link and GPU
        /// relation).
        #[arg(long, default_value = "table", value_parser = parse_show_format)]
        format: Format,
    },
    /// Turn `nvidia-smi topo -m` output or NCCL's topology dump
    /// (NCCL_TOPO_DUMP_FILE) into a topology file.
    Import {
        /// The file to import; its format is told from its content.
        file: PathBuf,
        /// GPU model (default: the dump's PCI device or architecture; h200
        /// for nvidia-smi output, which does not say).
        #[arg(long)]
        gpu: Option<String>,
        /// Host platform (skylake-2s, icx-2s, spr-2s, emr-2s, gnr-2s, epyc-2s,
        /// epyc-genoa, epyc-turin, threadripper-pro, threadripper-3000; default: the dump's CPU;
        /// spr-2s for nvidia-smi output, which does not say).
        #[arg(long)]
        host: Option<String>,
        /// Write the topology file here instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Hardware model overlay: a shipped one or a .toml file; repeatable.
        #[arg(long = "hardware", value_name = "NAME|FILE")]
        hardware: Vec<String>,
    },
}

/// `topo show`'s formats: a table (the description) or JSON; CSV has no
/// one table to hold parts, links and relations.
fn parse_show_format(text: &str) -> Result<Format, String> {
    match super::parse_format(text)? {
        Format::Csv => Err("topo show prints table or json; csv has no one table for parts, links and relations".into()),
        format => Ok(format),
    }
}

pub fn run(command: TopoCommand) -> Result<()> {
    match command {
        TopoCommand::Show { topology, gpus, gpu, host, hardware, format } => {
            let args = TopologyArgs { topology, gpus, gpu, host, hardware };
            let (topo, _) = args.resolve()?;
            super::checks::warn_unusual_links(&topo);
            match format {
                Format::Json => {
                    let view = topology::TopologyView::of(&topo);
                    println!("{}", serde_json::to_string_pretty(&view).expect("a topology view is plain JSON"));
                }
                _ => print!("{}", topology::describe(&topo)),
            }
            Ok(())
        }
        TopoCommand::Import { file, gpu, host, out, hardware } => {
            let overlays = topology::model_sources(&hardware, std::path::Path::new("."))
                .map_err(|unknown| BadInput(format!("--hardware: {unknown}")))?;
            let model = HardwareModel::load(&overlays)?;
            let raw = import::import(&file, &import::ImportOptions { gpu, host }, &model)?;
            // Build it once, so that what is written is known to load.
            topology::build_from_file(&file, &raw, &model)?;
            let text = import::to_toml(&raw);
            match out {
                Some(out) => {
                    super::check_output_file(&out, "--out")?;
                    icsim::report::files::write_whole(&out, text).map_err(|e| anyhow!("cannot write --out {}: {e}", out.display()))?;
                    println!("wrote {}", out.display());
                }
                None => print!("{text}"),
            }
            Ok(())
        }
    }
}
