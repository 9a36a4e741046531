//! `icsim topo show`: describe a topology.

use anyhow::Result;
use clap::Subcommand;

use super::TopologyArgs;
use icsim::topology;

#[derive(Debug, Subcommand)]
pub enum TopoCommand {
    /// Describe a preset or topology file: parts, links, GPU relations.
    Show {
        /// Preset name or topology file.
        topology: String,
        #[arg(long)]
        gpus: Option<u32>,
        #[arg(long)]
        gpu: Option<String>,
        #[arg(long = "model", value_name = "FILE")]
        models: Vec<String>,
    },
}

pub fn run(command: TopoCommand) -> Result<()> {
    match command {
        TopoCommand::Show { topology, gpus, gpu, models } => {
            let args = TopologyArgs { topology, gpus, gpu, models };
            let (topo, _) = topology::resolve(&args.spec())?;
            print!("{}", topology::describe(&topo));
            Ok(())
        }
    }
}
