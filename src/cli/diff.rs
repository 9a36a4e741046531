//! `icsim diff A.toml [B.toml] [--set KEY=VALUE]...`: replays one workload
//! before and after a change, mode by mode, and prints what it buys: time
//! saved per phase, tokens/s, cost and energy per token, and the bottleneck
//! link before and after with every link's utilisation. The library
//! compares; this prints.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::llm::emit;
use super::{BadInput, notices, parse_format};
use icsim::config::experiment::{RawExperiment, Source};
use icsim::config::{parse_toml, read_text};
use icsim::report::{self, Format, Record, record_of};
use icsim::sweep::change::Change;
use icsim::sweep::diff::{self, Compared, Comparison, Side, Subject};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The experiment before the change.
    before: PathBuf,
    /// The experiment after it (default: the first, with the --set changes).
    after: Option<PathBuf>,
    /// A change by key, applied to the second experiment (repeatable):
    /// tp=4, transport=shm, topology=h20-nvlink-mesh, query.batch=8,
    /// topology.nvlink_links=12, topology.nvlink_bandwidth=50GB/s,
    /// topology.pcie_generation=gen5, topology.host_memory_bandwidth=400GB/s,
    /// storage.drives=4, hardware.<a key of models/hardware/base.toml>=VALUE.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    #[command(flatten)]
    cost: super::CostArgs,
    /// How many links to list per comparison, busiest first.
    #[arg(long, default_value_t = 8)]
    links: usize,
    /// table or json.
    #[arg(long, default_value = "table", value_parser = parse_format)]
    format: Format,
}

fn read(path: &Path) -> Result<RawExperiment> {
    Ok(parse_toml(path, &read_text(path)?)?)
}

pub fn run(args: DiffArgs) -> Result<()> {
    if args.after.is_none() && args.set.is_empty() {
        let usage = "icsim diff A.toml B.toml, or icsim diff A.toml --set KEY=VALUE...";
        return Err(BadInput(format!(
            "nothing to compare with {}: give a second experiment, or a change with --set KEY=VALUE ({usage})",
            args.before.display()
        ))
        .into());
    }
    let before_raw = read(&args.before)?;
    let after_path = args.after.clone().unwrap_or_else(|| args.before.clone());
    let after_raw = match &args.after {
        Some(path) => {
            let raw = read(path)?;
            diff::check_same_workload(&before_raw, &raw, path)?;
            raw
        }
        None => before_raw.clone(),
    };
    let changes = super::changes(&args.set, "icsim diff compares queries")?;
    let cost = args.cost.model()?;
    let (before_source, after_source) = (Source::File(args.before.clone()), Source::File(after_path.clone()));
    let before = Subject { raw: &before_raw, source: &before_source, changes: &[] };
    let after = Subject { raw: &after_raw, source: &after_source, changes: &changes };
    let mut described: Vec<String> = args.after.iter().map(|p| p.display().to_string()).collect();
    described.extend(changes.iter().map(Change::describe));
    let change = described.join(", ");
    let pairs = before.pairs(&after);
    let unmatched: Vec<String> = pairs.iter().filter(|(_, o)| o.is_none()).map(|(m, _)| before.label(*m)).collect();
    let sides: Vec<(Side, Side)> =
        pairs.par_iter().filter_map(|&(m, o)| o.map(|o| (m, o))).map(|(m, o)| (before.side(m, &cost), after.side(o, &cost))).collect();
    let mut unusual: Vec<&String> = sides.iter().flat_map(|(b, a)| b.unusual.iter().chain(&a.unusual)).collect();
    unusual.sort();
    unusual.dedup();
    for why in unusual {
        notices::warn(why);
    }
    let compared: Vec<Comparison> = sides.iter().map(|(b, a)| diff::compare(b, a, &change)).collect();
    if compared.is_empty() {
        let message =
            format!("no mode of {} has a mode of the same label in {}: label them alike", args.before.display(), after_path.display());
        return Err(BadInput(message).into());
    }
    // One side that cannot run in any mode is an error, not a comparison.
    let after_named = if args.after.is_some() { change.clone() } else { format!("--set {change}") };
    for (side, named) in [
        ("before", format!("{}: no mode can run", args.before.display())),
        ("after", format!("{after_named}: no mode can run after the change")),
    ] {
        let errors: Vec<&String> = compared
            .iter()
            .filter_map(|c| match &c.outcome {
                Compared::Failed { before_error, after_error } => if side == "before" { before_error } else { after_error }.as_ref(),
                Compared::Ran(_) => None,
            })
            .collect();
        if errors.len() == compared.len() {
            let errors: Vec<&str> = errors.iter().map(|e| e.as_str()).collect();
            return Err(BadInput(format!("{named}: {}", errors.join("; "))).into());
        }
    }
    match args.format {
        Format::Json => emit(&report::render(&compared.iter().map(record_of).collect::<Vec<_>>(), Format::Json))?,
        _ => emit(&compared.iter().map(|c| table(c, args.links)).collect::<Vec<_>>().join("\n"))?,
    }
    if !unmatched.is_empty() {
        eprintln!("not compared (no mode of that label after the change): {}", unmatched.join(", "));
    }
    Ok(())
}

/// One comparison as people read it.
fn table(compared: &Comparison, links: usize) -> String {
    let gains = match &compared.outcome {
        Compared::Ran(gains) => gains,
        Compared::Failed { before_error, after_error } => {
            let mut out = format!("{} -> {} ({})\n", compared.before, compared.after, compared.change);
            for (which, error) in [("before", before_error), ("after", after_error)] {
                if let Some(error) = error {
                    out += &format!("  {which}: cannot run: {error}\n");
                }
            }
            return out;
        }
    };
    let mut out = format!(
        "{} ({}) on {} -> {} ({}) on {} ({})\n",
        compared.before, gains.mode_before, gains.topology_before, compared.after, gains.mode_after, gains.topology_after, compared.change
    );
    let percent = |share: Option<f64>| share.map_or(Value::Null, |share| format!("{:+.1}%", 100.0 * share).into());
    let phases: Vec<Record> = gains
        .phases
        .iter()
        .map(|p| {
            let line = json!({"phase": p.phase, "before_ms": p.before_ms, "after_ms": p.after_ms, "saved_ms": p.saved_ms, "saved": percent(p.saved_share)});
            record_of(&line)
        })
        .collect();
    out += &report::render(&phases, Format::Table);
    out += "\n";
    out += &report::render(&gains.rates.iter().map(record_of).collect::<Vec<_>>(), Format::Table);
    let text = |label: &Option<String>| label.clone().unwrap_or_else(|| "-".into());
    let util = |util: Option<f64>| util.map_or("-".into(), |u| format!("{:.1}% busy", 100.0 * u));
    out += &format!(
        "\nbottleneck before: {} ({})\nbottleneck after:  {} ({}){}\n",
        text(&gains.bottleneck_before),
        util(gains.bottleneck_before_util),
        text(&gains.bottleneck_after),
        util(gains.bottleneck_after_util),
        if gains.bottleneck_moved { ": the bottleneck moved" } else { ": the same link" }
    );
    let listed: Vec<Record> = gains.links.iter().take(links).map(record_of).collect();
    out += "links, utilisation over the query's communication time (busiest first):\n";
    out += &report::render(&listed, Format::Table);
    out
}
