//! `icsim sweep SWEEP.toml [--jobs N] [--shard I/N]` and `icsim sweep merge
//! DIR...`: runs a sweep's points (or one shard of them) with a progress
//! bar, writes sweep.json, results.jsonl and results.csv, and for a whole
//! sweep (or merged shards) ranks the points and draws the plots, all as
//! one set of files. The
//! library does the work.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use super::llm::emit;
use super::{BadInput, progress_bar};
use icsim::sweep::axes::Shard;
use icsim::sweep::output::{self, Manifest};
use icsim::sweep::row::SweepRow;
use icsim::sweep::{Sweep, run as runner};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SweepArgs {
    #[command(subcommand)]
    command: Option<SweepCommand>,
    /// The sweep file (TOML: a base experiment, [[axis]] or [[point]]
    /// tables, [goal], [cost], [[plot]]).
    #[arg(required = true)]
    sweep: Option<PathBuf>,
    /// Threads, 1 to 256 (default: every core); never more than the points.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=MAX_JOBS))]
    jobs: Option<u16>,
    /// Run only the I-th of N slices of the points (I from 1 to N), for a
    /// batch scheduler's array of jobs; join them with `icsim sweep merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<Shard>,
    /// Output folder (default: the sweep's output_dir, and
    /// <output_dir>/shard-I-of-N for a shard).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum SweepCommand {
    /// Join the output folders of every shard of one sweep into one result,
    /// ranked and plotted.
    Merge {
        /// The shards' output folders.
        #[arg(required = true, num_args = 1..)]
        dirs: Vec<PathBuf>,
        /// Output folder (default: the sweep's output_dir).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// Most threads `--jobs` may ask for.
const MAX_JOBS: i64 = 256;

pub fn run(args: SweepArgs) -> Result<()> {
    if let Some(SweepCommand::Merge { dirs, out }) = args.command {
        let (manifest, rows) = output::merge(&dirs).map_err(BadInput)?;
        let dir = match out {
            Some(out) => checked(out, "--out")?,
            None => checked(manifest.output_dir.clone(), &format!("{}: key `output_dir`", manifest.sweep.display()))?,
        };
        emit(&format!("merged {} shards of {}\n", dirs.len(), manifest.sweep.display()))?;
        return finish(&manifest, rows, &dir);
    }
    let Some(path) = args.sweep else { bail!("name a sweep file, or `merge` and the shards' folders") };
    let sweep = Sweep::load(&path)?;
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let output_dir = format!("{}: key `output_dir`", path.display());
    let dir = match (args.out, shard == Shard::WHOLE) {
        (Some(out), _) => checked(out, "--out")?,
        (None, true) => checked(sweep.output_dir.clone(), &output_dir)?,
        (None, false) => checked(sweep.output_dir.join(format!("shard-{}-of-{}", shard.index, shard.count)), &output_dir)?,
    };
    let points = runner::shard_points(&sweep, shard);
    // A thread without a point would only wait.
    let jobs = args.jobs.map(|jobs| usize::from(jobs).min(points.len().max(1)));
    let threads = jobs.unwrap_or_else(rayon::current_num_threads);
    let bar = progress_bar(points.len() as u64, "sweeping {bar:40} {pos}/{len} points, {per_sec}, {eta} left");
    let started = Instant::now();
    let rows = runner::run(&sweep, &points, jobs, &|| bar.inc(1));
    bar.finish_and_clear();
    let rows = rows.map_err(anyhow::Error::msg)?;
    let seconds = started.elapsed().as_secs_f64();
    let which = if shard == Shard::WHOLE { String::new() } else { format!(" (shard {shard} of {} points)", sweep.len()) };
    emit(&format!(
        "{}: {} points{which} in {seconds:.1} s on {threads} threads ({:.0} points/s)\n",
        path.display(),
        rows.len(),
        rows.len() as f64 / seconds.max(1e-9)
    ))?;
    let manifest = Manifest::of(&sweep, shard);
    if shard == Shard::WHOLE {
        return finish(&manifest, rows, &dir);
    }
    let written = output::write(&dir, &manifest, &rows, false).map_err(anyhow::Error::msg)?;
    emit(&format!("wrote {}\njoin the shards with: icsim sweep merge <their folders> (all {} of them)\n", names(&written), shard.count))
}

/// Ranks a whole sweep's rows, writes them, draws the plots, prints the summary.
fn finish(manifest: &Manifest, mut rows: Vec<SweepRow>, dir: &std::path::Path) -> Result<()> {
    let goal = manifest.goal().map_err(anyhow::Error::msg)?;
    output::rank(&goal, &mut rows);
    let written = output::write(dir, manifest, &rows, true).map_err(anyhow::Error::msg)?;
    emit(&format!("\n{}\nwrote {}\n", output::summary(manifest, &rows, &goal), names(&written)))
}

/// `dir`, once it is known that an output folder can be there; `given`
/// says where it was named (a flag, or a file's key).
fn checked(dir: PathBuf, given: &str) -> Result<PathBuf> {
    super::check_output_folder(&dir, given)?;
    Ok(dir)
}

fn names(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
