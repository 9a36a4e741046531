//! The figures of an LLM replay: shapes an experiment's results into the
//! general charts of `report::plots` (where the time goes, allreduce bus
//! bandwidth against size, one layer's timeline) and writes each as PNG and
//! SVG. Computes nothing new.

use std::path::{Path, PathBuf};

use anyhow::Result;

use icsim::report::plots::{self, BarSegment, Lane, LineSeries, LogAxis, LogLogLines, SpanKind, StackedBars, Timeline, TimelinePanel};
use icsim::workload::experiment::{ExperimentResult, ModeResult};
use icsim::workload::layer::Activity;

/// Writes every figure into `dir`; returns the files written.
pub fn write_all(result: &ExperimentResult, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for extension in ["png", "svg"] {
        let path = |name: &str| dir.join(format!("{name}.{extension}"));
        let file = path("time_breakdown");
        plots::stacked_bars(&time_breakdown(result), &file)?;
        written.push(file);
        let file = path("allreduce_busbw");
        plots::log_log_lines(&bus_bandwidth(result), &file)?;
        written.push(file);
        if !result.timelines.is_empty() {
            let file = path("layer_timeline");
            plots::timeline(&layer_timeline(result), &file)?;
            written.push(file);
        }
    }
    written.extend(super::storage::write_figures(result, dir)?);
    Ok(written)
}

/// "Llama-3.1-70B, 8192 + 256 tokens, TP=8": what every title starts with.
fn subject(result: &ExperimentResult) -> String {
    let q = &result.query;
    let mut degrees: Vec<u32> = result.modes.iter().map(|m| m.tp).collect();
    degrees.sort();
    degrees.dedup();
    let tp: Vec<String> = degrees.iter().map(u32::to_string).collect();
    let batch = if q.batch > 1 { format!(", batch {}", q.batch) } else { String::new() };
    format!("{}, {} + {} tokens{batch}, TP={}", result.model, q.prompt, q.output, tp.join("/"))
}

fn category(mode: &ModeResult) -> String {
    format!("{}\n{}", mode.label, mode.topology)
}

fn time_breakdown(result: &ExperimentResult) -> StackedBars {
    let seconds = |f: fn(&ModeResult) -> f64| result.modes.iter().map(f).collect();
    StackedBars {
        title: format!("{}: where one query's time goes", subject(result)),
        x_label: "transport mode and topology".into(),
        y_label: "time per query (s)".into(),
        categories: result.modes.iter().map(category).collect(),
        segments: vec![
            BarSegment { name: "compute (prefill + decode)".into(), values: seconds(|m| m.replay.compute().as_secs()) },
            BarSegment { name: "prefill allreduces".into(), values: seconds(|m| m.replay.prefill.comm.as_secs()) },
            BarSegment { name: "decode allreduces".into(), values: seconds(|m| m.replay.decode.comm.as_secs()) },
        ],
        total_unit: "s".into(),
    }
}

fn bus_bandwidth(result: &ExperimentResult) -> LogLogLines {
    let mut guides: Vec<(f64, String)> = Vec::new();
    for mode in &result.modes {
        let uses = [("prefill", &mode.replay.prefill_allreduce), ("decode", &mode.replay.decode_allreduce)];
        for (pass, used) in uses {
            if let Some(used) = used {
                let guide = (used.bytes.as_f64(), format!("{pass}: {}", used.bytes));
                if !guides.contains(&guide) {
                    guides.push(guide);
                }
            }
        }
    }
    let series = result
        .modes
        .iter()
        .map(|mode| LineSeries {
            name: format!("{} (TP={}, {})", mode.label, mode.tp, mode.topology),
            points: mode.sweep.iter().filter(|p| p.busbw_gbps > 0.0).map(|p| (p.bytes.as_f64(), p.busbw_gbps)).collect(),
            marked: [&mode.replay.prefill_allreduce, &mode.replay.decode_allreduce]
                .into_iter()
                .flatten()
                .map(|u| (u.bytes.as_f64(), u.busbw_gbps))
                .collect(),
        })
        .collect();
    LogLogLines {
        title: format!("Allreduce bus bandwidth by transport ({})", subject(result)),
        x_label: "allreduce buffer size".into(),
        y_label: "bus bandwidth (GB/s, nccl-tests busbw)".into(),
        x_axis: LogAxis::Bytes,
        series,
        guides,
        marked_label: "sizes this query uses".into(),
    }
}

fn layer_timeline(result: &ExperimentResult) -> Timeline {
    let kinds = [
        (Activity::Attention, "attention block (compute)", 0.7, plots::color(0)),
        (Activity::Mlp, "MLP block (compute)", 0.7, plots::color(2)),
        (Activity::Allreduce, "inside an allreduce", 0.7, plots::color(1)),
        (Activity::Sending, "sending allreduce data", 0.3, plots::color(3)),
    ];
    let kind_of = |activity: Activity| kinds.iter().position(|k| k.0 == activity).expect("every activity has a kind");
    let panels = result
        .timelines
        .iter()
        .enumerate()
        .map(|(index, timeline)| {
            let mode = result.modes.iter().find(|m| m.label == timeline.label);
            let which = if result.timelines.len() == 1 {
                ""
            } else if index == 0 {
                "fastest to first token: "
            } else {
                "slowest to first token: "
            };
            let place = mode.map_or(String::new(), |m| format!(" on {}", m.topology));
            TimelinePanel {
                title: format!("{which}{}{place}, one prefill layer in {:.2} ms", timeline.label, timeline.layer.makespan.as_ms()),
                lanes: timeline
                    .layer
                    .lanes
                    .iter()
                    .map(|lane| Lane {
                        name: lane.gpu.clone(),
                        spans: lane.spans.iter().map(|s| (s.start.as_ms(), s.end.as_ms(), kind_of(s.activity))).collect(),
                    })
                    .collect(),
            }
        })
        .collect();
    Timeline {
        title: format!("{}: one decoder layer of the prefill on each GPU", subject(result)),
        x_label: "time from the start of the layer (ms)".into(),
        kinds: kinds.iter().map(|&(_, name, height, color)| SpanKind { name: name.into(), height, color }).collect(),
        panels,
    }
}
