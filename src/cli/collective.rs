//! `icsim collective`: one collective over many sizes, one row per size.

use anyhow::{Context, Result, bail};
use clap::Args;
use rayon::prelude::*;
use serde_json::json;

use super::{TopologyArgs, parse_format};
use icsim::collective::{self, Algorithm, Choice, Op, Protocol, Request};
use icsim::report::{self, Format, Record};
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
    /// auto, ring, tree, nvls, oneshot or twoshot.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<Choice<Algorithm>>())]
    algo: Choice<Algorithm>,
    /// auto, simple, ll or ll128.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<Choice<Protocol>>())]
    proto: Choice<Protocol>,
    /// table, json or csv.
    #[arg(long, default_value = "table", value_parser = parse_format)]
    format: Format,
}

/// A list of message sizes, as one argument.
#[derive(Debug, Clone)]
pub struct Sizes(pub Vec<Bytes>);

pub fn run(args: CollectiveArgs) -> Result<()> {
    let sizes = &args.sizes.0;
    let (topo, model) = topology::resolve(&args.topology.spec())?;
    let gpus = args.topology.gpus.map_or(topo.gpus().len(), |g| g as usize);
    if gpus > topo.gpus().len() {
        bail!("{} has {} GPUs; --gpus {gpus} is too many", topo.name, topo.gpus().len());
    }
    let ranks = topo.gpus()[..gpus].to_vec();
    let outcomes: Vec<_> = sizes
        .par_iter()
        .map(|&bytes| {
            let request =
                Request { op: args.op, bytes, ranks: ranks.clone(), mode: args.transport, algorithm: args.algo, protocol: args.proto };
            collective::simulate(&topo, &model, request).with_context(|| format!("{} of {bytes} on {}", args.op, topo.name))
        })
        .collect::<Result<_>>()?;
    let records: Vec<Record> = outcomes
        .iter()
        .map(|o| {
            let busiest = collective::busiest_link(&topo, &o.usage, o.time);
            let value = json!({
                "bytes": o.bytes.0,
                "size": o.bytes.to_string(),
                "time_us": o.time.as_us(),
                "algbw_gbps": o.algbw_gbps(),
                "busbw_gbps": o.busbw_gbps(),
                "algo": o.algorithm.to_string(),
                "proto": o.protocol.to_string(),
                "transport": o.transport,
                "channels": o.channels,
                "busiest_link": busiest.map(|(l, _)| topo.link_label(l)),
                "busiest_link_util": busiest.map(|(_, u)| u),
            });
            value.as_object().cloned().expect("a JSON object")
        })
        .collect();
    print!("{}", report::render(&records, args.format));
    Ok(())
}
