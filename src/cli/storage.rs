//! The storage part of `icsim run`'s report: tables of the weight load
//! before the query and of the KV cache written out during decode, and the
//! plot of load time against drive count. Shapes results; computes nothing.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::Value;

use icsim::report::plots::{self, LogAxis, RegimeLines, RegimeSeries};
use icsim::report::{self, Format, Record};
use icsim::workload::experiment::ExperimentResult;
use icsim::workload::storage::experiment::Operation;

/// Rows of `records` for each `kinds` entry found as `{prefix}{kind}_...`:
/// `label`, the kind under `kind_name`, then `fields` without the prefix.
fn rows_by_kind(records: &[Record], prefix: &str, kinds: &[String], kind_name: &str, fields: &[&str]) -> Vec<Record> {
    let mut rows = Vec::new();
    for record in records {
        for kind in kinds {
            if !record.contains_key(&format!("{prefix}{kind}_{}", fields[0])) {
                continue;
            }
            let mut row = Record::new();
            row.insert("label".into(), record["label"].clone());
            row.insert(kind_name.into(), Value::from(kind.as_str()));
            for field in fields {
                let value = record.get(&format!("{prefix}{kind}_{field}")).or_else(|| record.get(*field)).cloned().unwrap_or_default();
                row.insert((*field).into(), value);
            }
            rows.push(row);
        }
    }
    rows
}

/// The storage sections of the table, empty without storage results.
pub fn sections(result: &ExperimentResult, records: &[Record]) -> String {
    let mut text = String::new();
    let Some(first) = result.storage.first() else { return text };
    let kinds = |operation: Operation| -> Vec<String> {
        first.transfers.iter().filter(|t| t.operation == operation).map(|t| t.path.to_string()).collect()
    };
    let fields = ["transport", "drives", "drive", "s", "gbps", "bound", "busiest_link", "cpu_cores", "host_memory_gbps"];
    let loads = kinds(Operation::Load);
    if !loads.is_empty() {
        let gb = first.bytes_per_gpu.as_f64() / 1e9;
        text += &format!(
            "\nloading the weights before the query ({gb:.2} GB a GPU; bound: what limited it; then_ttft_s: from the start of the load to the first token):\n"
        );
        let with_ttft: Vec<&str> = fields.iter().copied().chain(["then_ttft_s"]).collect();
        text += &report::render(&rows_by_kind(records, "load_", &loads, "path", &with_ttft), Format::Table);
    }
    for operation in [Operation::Checkpoint, Operation::Restore] {
        let paths = kinds(operation);
        if !paths.is_empty() {
            text += &format!(
                "\n{} every GPU's TP shard:\n",
                if operation == Operation::Checkpoint { "a checkpoint: writing" } else { "a restore: reading back" }
            );
            text += &report::render(&rows_by_kind(records, &format!("{}_", operation.name()), &paths, "path", &fields), Format::Table);
        }
    }
    let sweep: Vec<Record> = result
        .storage
        .iter()
        .flat_map(|run| {
            run.sweep.iter().map(move |point| {
                let mut row = Record::new();
                row.insert("label".into(), Value::from(run.label.as_str()));
                row.insert("path".into(), Value::from(point.path.to_string()));
                row.insert("transport".into(), Value::from(point.run.transport.as_str()));
                row.insert("drives".into(), Value::from(point.drives));
                row.insert("s".into(), Value::from(point.run.time.as_secs()));
                row.insert("gbps".into(), Value::from(point.run.gbps()));
                row.insert("bound".into(), Value::from(point.run.bound_by()));
                row.insert("busiest_link_util".into(), Value::from(point.run.limit.as_ref().map(|l| l.2)));
                row
            })
        })
        .collect();
    if !sweep.is_empty() {
        text += "
load time against the drive count (the plot load_time_vs_drives):
";
        text += &report::render(&sweep, Format::Table);
    }
    let targets: Vec<String> = first.offloads.iter().map(|o| o.target.clone()).collect();
    if !targets.is_empty() {
        text += "\nthe prompt's KV cache written out while decode runs, in one task graph with the decode steps (slowdowns against each alone; shared_link: the link they fight over):\n";
        let fields =
            ["ms", "alone_ms", "decode_steps", "decode_ms", "decode_alone_ms", "decode_slowdown", "offload_slowdown", "shared_link"];
        text += &report::render(&rows_by_kind(records, "kv_", &targets, "target", &fields), Format::Table);
    }
    text
}

/// The load-time plot, where the experiment swept drive counts.
pub fn write_figures(result: &ExperimentResult, dir: &Path) -> Result<Vec<PathBuf>> {
    let series: Vec<RegimeSeries> = result
        .storage
        .iter()
        .flat_map(|run| {
            let mut paths: Vec<_> = run.sweep.iter().map(|p| p.path).collect();
            paths.sort();
            paths.dedup();
            paths.into_iter().map(move |path| RegimeSeries {
                name: format!("{path} ({}, {} drives)", run.topology, run.drive),
                points: run
                    .sweep
                    .iter()
                    .filter(|p| p.path == path)
                    .map(|p| (f64::from(p.drives), p.run.time.as_secs(), p.run.bound_by()))
                    .collect(),
            })
        })
        .collect();
    if series.is_empty() {
        return Ok(Vec::new());
    }
    let gb = result.storage[0].bytes_per_gpu.as_f64() / 1e9;
    let chart = RegimeLines {
        title: format!("{}: loading {gb:.1} GB a GPU from NVMe, GPUDirect Storage against the bounce path", result.model),
        x_label: "NVMe drives".into(),
        y_label: "load time (s); each change of slope labelled with what limits it".into(),
        x_axis: LogAxis::Count,
        series,
    };
    let mut written = Vec::new();
    for extension in ["png", "svg"] {
        let file = dir.join(format!("load_time_vs_drives.{extension}"));
        plots::regime_lines(&chart, &file)?;
        written.push(file);
    }
    Ok(written)
}
