//! `icsim calibrate fit|validate`: fit the hardware model to measurements,
//! and report how far predictions are from them.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use super::{TopologyArgs, parse_format};
use icsim::calibrate::nccl_tests::NcclTestsOptions;
use icsim::calibrate::{fit, read_measurements, validate};
use icsim::report::{self, Format};
use icsim::topology;

#[derive(Debug, Subcommand)]
pub enum CalibrateCommand {
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
        /// Objective evaluations per parameter group.
        #[arg(long, default_value_t = 300)]
        evaluations: usize,
    },
}

/// A measurements file and what nccl-tests output does not say.
#[derive(Debug, Args)]
pub struct MeasurementArgs {
    /// Schema-1 measurements (JSON Lines), or the output of a nccl-tests
    /// binary (all_reduce_perf, all_gather_perf, ...).
    measurements: PathBuf,
    /// For nccl-tests output: the transport NCCL used (auto, nvswitch,
    /// nvlink, p2p, shm), which nccl-tests does not print. Default auto.
    #[arg(long)]
    transport: Option<String>,
    /// For nccl-tests output that does not name its test: the collective
    /// (allreduce, allgather, reducescatter, broadcast).
    #[arg(long)]
    op: Option<String>,
}

impl MeasurementArgs {
    fn read(&self) -> Result<Vec<icsim::calibrate::schema::Measurement>> {
        let options = NcclTestsOptions { op: self.op.clone(), transport: self.transport.clone() };
        Ok(read_measurements(&self.measurements, &options)?)
    }
}

pub fn run(command: CalibrateCommand) -> Result<()> {
    match command {
        CalibrateCommand::Validate { measurements, topology, min_bytes, format } => {
            let points = measurements.read()?;
            let (topo, model) = topology::resolve(&topology.spec())?;
            let rows =
                validate::compare(&topo, &model, &points).with_context(|| format!("predicting {}", measurements.measurements.display()))?;
            let min = min_bytes.map_or(0, |b| b.0);
            let summary = validate::summarize(&rows, |r| r.bytes >= min || r.series.starts_with("kernel"));
            print_validation(&rows, &summary, format, &topo.name);
            Ok(())
        }
        CalibrateCommand::Fit { measurements, topology, out, system, evaluations } => {
            let points = measurements.read()?;
            let measurements = measurements.measurements;
            if points.is_empty() {
                bail!("{} holds no measurements", measurements.display());
            }
            let (topo, model) = topology::resolve(&topology.spec())?;
            let (fitted, fits) = fit::fit(&topo, &model, &points, evaluations);
            for group in &fits {
                println!(
                    "{} ({} points): rms log error {:.3} -> {:.3}",
                    group.name, group.points, group.rms_log_error_before, group.rms_log_error_after
                );
                for (key, before, after) in &group.parameters {
                    println!("  {key:<45} {before:>12.4} -> {after:>12.4}");
                }
            }
            let system =
                system.or_else(|| points.iter().map(|p| p.system.clone()).find(|s| !s.is_empty())).unwrap_or_else(|| "unnamed".into());
            let text = overlay_text(&fits, &measurements, &system, &topo.name);
            std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
            println!("\nwrote {}", out.display());
            let rows = validate::compare(&topo, &fitted, &points)?;
            let summary = validate::summarize(&rows, |_| true);
            println!("\nresiduals of the fitted model:");
            print_validation(&rows, &summary, Format::Table, &topo.name);
            Ok(())
        }
    }
}

fn overlay_text(fits: &[fit::GroupFit], measurements: &std::path::Path, system: &str, topology: &str) -> String {
    let mut table = fit::overlay(fits);
    let mut provenance = toml::Table::new();
    provenance.insert("measurements".into(), toml::Value::Array(vec![toml::Value::String(measurements.display().to_string())]));
    provenance.insert("system".into(), toml::Value::String(system.to_string()));
    provenance.insert("fitted_at".into(), toml::Value::String(today()));
    provenance.insert(
        "method".into(),
        toml::Value::String(format!("icsim calibrate fit: Nelder-Mead on the mean squared log error, simulated on topology {topology}")),
    );
    let residuals: toml::Table =
        fits.iter().map(|f| (f.name.clone(), toml::Value::Float((f.rms_log_error_after * 1e4).round() / 1e4))).collect();
    provenance.insert("residuals".into(), toml::Value::Table(residuals));
    table.insert("provenance".into(), toml::Value::Array(vec![toml::Value::Table(provenance)]));
    format!(
        "# Fitted by `icsim calibrate fit` to {} ({system}).\n# Each value replaces the base model's; residuals are rms log errors per group.\n\n{}",
        measurements.display(),
        toml::to_string(&table).expect("plain values")
    )
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
fn today() -> String {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() / 86_400).unwrap_or(0) as i64;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn print_validation(rows: &[validate::Row], summary: &[validate::Summary], format: Format, topology: &str) {
    let row_records = validate::row_records(rows);
    let summary_records = validate::summary_records(summary);
    match format {
        Format::Json => {
            let document = serde_json::json!({ "topology": topology, "results": row_records, "summary": summary_records });
            println!("{}", serde_json::to_string_pretty(&document).expect("plain data"));
        }
        Format::Csv => print!("{}", report::render(&row_records, Format::Csv)),
        Format::Table => {
            print!("{}", report::render(&row_records, Format::Table));
            println!("\nabsolute error by series (topology {topology}):");
            print!("{}", report::render(&summary_records, Format::Table));
        }
    }
}
