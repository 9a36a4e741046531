//! Fidelity of the collective model against every real measurement we hold:
//! the runner's 2- and 4-GPU H200 files, the shared torch file, the public
//! nccl-tests tables (H200 fitted; H100 and B200 predicted from datasheet
//! differences, never fitted), leave-one-source-out overlays and the public
//! 8-GPU ring figure, and the runner's copies against the shared file's.
//! Each test prints its table (`cargo test fidelity --
//! --nocapture`) and holds every series to the issue's bound. Where the model
//! misses a bound, the miss is listed beside the series with the figure it
//! reaches today, held so it cannot grow unseen; the README lists the same
//! misses.

use std::path::{Path, PathBuf};

use icsim::calibrate::read_measurements;
use icsim::calibrate::schema::Measurement;
use icsim::calibrate::validate::{self, Row};
use icsim::collective::{self, Algorithm, Choice, Op, Request};
use icsim::config::hardware::HardwareModel;
use icsim::stack::Stack;
use icsim::topology::{PresetOptions, Topology, TopologySpec, resolve};
use icsim::transport::Mode;
use icsim::units::Bytes;

use crate::common::{
    extremes, h200_measurements_path, line, listed, page_quotes, page_says, preset, public_nvls_allreduces, section_quotes, span,
};

/// A bound on the absolute errors of one series: their median and maximum.
#[derive(Clone, Copy)]
struct Bound {
    median: f64,
    max: f64,
}

const NO_MAX: f64 = f64::INFINITY;

/// A series the model misses the issue's bound on, and what it reaches today.
struct Miss {
    series: &'static str,
    today: Bound,
}

fn measurements_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements")
}

fn read(path: &Path) -> Vec<Measurement> {
    read_measurements(path, &Default::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// A preset or topology file with `gpus` GPUs; `models` are overlays after
/// its own.
fn board(topology: &str, gpus: u32, models: &[String]) -> (Topology, HardwareModel) {
    let spec =
        TopologySpec { name: topology.into(), options: PresetOptions { gpus: Some(gpus), gpu: None, host: None }, models: models.to_vec() };
    resolve(&spec).unwrap_or_else(|e| panic!("{topology}: {e}"))
}

/// The board a runner folder measured, as NCCL saw it (the topology dump
/// beside its measurements), with `models` (default: the shipped H200 fit),
/// as `icsim calibrate validate FILE --topology hgx-h200` predicts it.
fn runner_board(folder: &str, gpus: u32, models: &[String]) -> (Topology, HardwareModel) {
    let models = if models.is_empty() { vec!["h200-fit".to_string()] } else { models.to_vec() };
    board(measurements_dir().join(folder).join("nccl-topo.xml").to_str().unwrap(), gpus, &models)
}

/// The models of a leave-one-source-out overlay: base, then
/// models/hardware/loso/NAME.toml.
fn loso_overlay(name: &str) -> Vec<String> {
    vec!["base".to_string(), measurements_dir().join(format!("../loso/{name}.toml")).to_str().unwrap().to_string()]
}

/// Predicts every row of `measured` on `board`.
fn predict(board: &(Topology, HardwareModel), measured: &[Measurement]) -> Vec<Row> {
    validate::compare(&board.0, &board.1, measured).expect("every row is predicted or listed as not modelled")
}

fn print_rows(title: &str, rows: &[&Row]) {
    println!("\n{title}");
    println!("{:<44} {:>8} {:>12} {:>12} {:>8}  model", "series", "size", "measured_us", "predicted_us", "error");
    for r in rows {
        let predicted = r.predicted_us.map_or("-".to_string(), |p| format!("{p:.2}"));
        let error = r.error.map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0));
        println!("{:<44} {:>8} {:>12.2} {:>12} {:>8}  {}", r.series, r.label, r.measured_us, predicted, error, r.note);
    }
}

/// One series' absolute errors, as `hold` found them.
struct Held {
    series: String,
    points: usize,
    median: f64,
    p90: f64,
    max: f64,
}

/// The held series whose name has `word` as a word.
fn named<'h>(held: &'h [Held], word: &str) -> Vec<&'h Held> {
    held.iter().filter(|h| h.series.split([' ', ':']).any(|w| w == word)).collect()
}

/// The held series of this name.
fn series<'h>(held: &'h [Held], name: &str) -> &'h Held {
    held.iter().find(|h| h.series == name).unwrap_or_else(|| panic!("no series {name}"))
}

/// The series of `held` whose name ends in `ranks=N`, for each of `counts`,
/// their medians as the page writes them: `3.3 / 2.4 / 4.2%`.
fn by_ranks(held: &[Held], counts: &[u32]) -> String {
    let medians: Vec<String> = counts
        .iter()
        .map(|n| {
            let series =
                held.iter().find(|h| h.series.ends_with(&format!("ranks={n}"))).unwrap_or_else(|| panic!("no series at {n} ranks"));
            format!("{:.1}", series.median * 100.0)
        })
        .collect();
    format!("{}%", medians.join(" / "))
}

fn medians<'h>(held: impl IntoIterator<Item = &'h Held>) -> Vec<f64> {
    held.into_iter().map(|h| h.median).collect()
}

fn largest<'h>(held: impl IntoIterator<Item = &'h Held>) -> f64 {
    held.into_iter().map(|h| h.max).fold(0.0, f64::max)
}

/// Holds each series of `rows` kept by `keep` to `issue` (median and max of
/// its absolute errors), or to today's figure where `misses` lists it;
/// prints a line per series. Returns the series held.
fn hold(title: &str, rows: &[Row], keep: impl Fn(&Row) -> bool, issue: Bound, misses: &[Miss]) -> Vec<Held> {
    let mut series: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| keep(r) && r.error.is_some()) {
        if !series.contains(&r.series.as_str()) {
            series.push(&r.series);
        }
    }
    let max = if issue.max.is_finite() { format!(", max <= {:.0}%", issue.max * 100.0) } else { String::new() };
    println!("\n{title} (issue: median <= {:.0}%{max})", issue.median * 100.0);
    let (mut failures, mut held) = (Vec::new(), Vec::new());
    for name in &series {
        let mut errors: Vec<f64> = rows.iter().filter(|r| r.series == *name && keep(r)).filter_map(|r| r.error.map(f64::abs)).collect();
        errors.sort_by(f64::total_cmp);
        let (median, max) = (validate::median(&errors), errors.iter().cloned().fold(0.0, f64::max));
        held.push(Held { series: name.to_string(), points: errors.len(), median, p90: validate::quantile(&errors, 0.9), max });
        let miss = misses.iter().find(|m| m.series == *name);
        let bound = miss.map_or(issue, |m| m.today);
        let verdict = match miss {
            Some(_) if median <= issue.median && max <= issue.max => "MEETS the issue now: remove it from the misses",
            Some(_) => "MISSES the issue's bound",
            None if median <= issue.median && max <= issue.max => "meets the issue",
            None => "MISSES the issue's bound (not listed as a miss)",
        };
        println!("{name:<52} {:>3} points  median {:>5.1}%  max {:>6.1}%  {verdict}", errors.len(), median * 100.0, max * 100.0);
        if miss.is_some() && median <= issue.median && max <= issue.max {
            // A miss kept on the list after the model meets the issue again
            // would let the series slip back to today's figure unseen.
            failures.push(format!("{name}: listed as a miss, but meets the issue's bound now: take it off the list"));
        } else if median > bound.median || max > bound.max {
            failures.push(format!(
                "{name}: median {:.1}%, max {:.1}% over {:.0}% / {:.0}%",
                median * 100.0,
                max * 100.0,
                bound.median * 100.0,
                bound.max * 100.0
            ));
        }
    }
    for miss in misses {
        assert!(series.contains(&miss.series), "{title}: the listed miss {:?} names no series", miss.series);
    }
    assert!(failures.is_empty(), "{title}:\n{}", failures.join("\n"));
    held
}

fn nccl_choosing(r: &Row) -> bool {
    !r.series.contains("proto=") && !r.series.contains("algo=") && !r.series.contains("channels=") && is_collective(r)
}

fn forced(r: &Row) -> bool {
    (r.series.contains("proto=") || r.series.contains("algo=")) && !r.series.contains("channels=") && is_collective(r)
}

fn is_collective(r: &Row) -> bool {
    ["allreduce ", "allgather ", "reducescatter "].iter().any(|op| r.series.starts_with(op))
}

fn ranks(n: u32) -> impl Fn(&Row) -> bool {
    move |r: &Row| r.series.ends_with(&format!("ranks={n}"))
}

const SERIES_BOUND: Bound = Bound { median: 0.05, max: 0.15 };
const FORCED_BOUND: Bound = Bound { median: 0.10, max: NO_MAX };

#[test]
fn the_runners_two_and_four_gpu_files_are_predicted_series_by_series() {
    let rows = predict(&runner_board("h200x2-runner", 2, &[]), &read(&measurements_dir().join("h200x2-runner/measurements.jsonl")));
    // Its 512 KiB SHM call, 20% fast (NCCL's small Simple calls; the README's known limits).
    let misses = [Miss { series: "allreduce shm ranks=2", today: Bound { median: 0.05, max: 0.20 } }];
    let two = hold("runner, 2x H200, NCCL choosing, from 8 B", &rows, nccl_choosing, SERIES_BOUND, &misses);
    quote_size_bands(&rows, &two);
    hold("runner, 2x H200, forced protocol or algorithm", &rows, forced, FORCED_BOUND, &[]);
    quote_small_simple_calls(&rows);
    let mut medium_shm = shm_medians(&rows, &two);
    let rows = predict(&runner_board("h200x4-runner", 4, &[]), &read(&measurements_dir().join("h200x4-runner/measurements.jsonl")));
    let at_four = ranks(4);
    let four = hold("runner, 4x H200, 4 ranks, NCCL choosing, from 8 B", &rows, |r| at_four(r) && nccl_choosing(r), SERIES_BOUND, &[]);
    medium_shm.extend(shm_medians(&rows, &four));
    page_says("docs/model.md", &format!("Medium SHM calls (64 KiB - 16 MiB) are {} off (median a series;", span(medium_shm, 0)));
    let forced_four = hold("runner, 4x H200, 4 ranks, forced protocol or algorithm", &rows, |r| at_four(r) && forced(r), FORCED_BOUND, &[]);
    // NCCL's chain (the tuner's tree) of forced LL128 at 4 ranks, from 2 KiB: slow, each hop moving its piece at the block's rate.
    let chain: Vec<f64> = rows
        .iter()
        .filter(|r| r.series == "allreduce nvswitch proto=ll128 ranks=4" && r.note.starts_with("tree/") && r.bytes >= 2048)
        .filter_map(|r| r.error)
        .collect();
    assert!(!chain.is_empty() && chain.iter().all(|e| *e > 0.0), "the 4-rank LL128 chain comes out slow from 2 KiB: {chain:?}");
    page_says("docs/model.md", &format!("comes out {} slow from 2 KiB", span(chain, 0)));
    page_says(
        "docs/model.md",
        &format!(
            "forced reduce-scatter LL128 at 4 ranks is within {:.1}% and the runner's 2-rank NVSwitch reduce-scatter maximum {:.1}%",
            series(&forced_four, "reducescatter nvswitch proto=ll128 ranks=4").median * 100.0,
            series(&two, "reducescatter nvswitch ranks=2").max * 100.0
        ),
    );
    let both: Vec<Held> = two.into_iter().chain(four).collect();
    let (nvswitch, shm) = (named(&both, "nvswitch"), named(&both, "shm"));
    let at = |n: &str| -> Vec<f64> { shm.iter().filter(|h| h.series.ends_with(n)).map(|h| h.median).collect() };
    page_quotes(
        "NCCL collectives over NVSwitch",
        &format!(
            "{} a series over NVSwitch, {} SHM; worst {:.1}% (reduce-scatter, 8 MiB) and **{:.1}%** (SHM",
            span(medians(nvswitch.iter().copied()), 1),
            span(medians(shm.iter().copied()), 1),
            largest(nvswitch.iter().copied()) * 100.0,
            largest(shm.iter().copied()) * 100.0
        ),
    );
    page_quotes(
        "the same through host memory",
        &format!(
            "{} at 2 ranks, {} at 4; worst **{:.1}%**",
            span(at("ranks=2"), 1),
            span(at("ranks=4"), 1),
            largest(shm.iter().copied()) * 100.0
        ),
    );
}

/// The absolute errors of `series`' rows of `sizes`.
fn band_errors(rows: &[Row], series: &str, sizes: std::ops::Range<u64>) -> Vec<f64> {
    rows.iter().filter(|r| r.series == series && sizes.contains(&r.bytes)).filter_map(|r| r.error.map(f64::abs)).collect()
}

/// The median absolute error of each SHM series of `held` over its medium
/// calls, 64 KiB - 16 MiB (docs/model.md, through host memory).
fn shm_medians(rows: &[Row], held: &[Held]) -> Vec<f64> {
    named(held, "shm").iter().map(|h| validate::median(&band_errors(rows, &h.series, 64 << 10..(16 << 20) + 1))).collect()
}

/// docs/model.md on the thread count NCCL gives small calls: the runner's
/// 2-rank Simple all-gathers over NVSwitch at each warp count NCCL's thread
/// sizing gives them (enqueue.cc, `topoGetAlgoInfo`: 3 warps at 512 B, 5
/// at 8 KiB, 17 from 32 KiB), the time a warp adds, and how fast the model,
/// which leaves the thread count out, runs forced Simple calls of 16-512
/// KiB.
fn quote_small_simple_calls(rows: &[Row]) {
    let simple = |r: &&Row| r.series.ends_with(" nvswitch proto=simple ranks=2");
    let gather = |bytes: u64| {
        let found = rows.iter().filter(simple).find(|r| r.series.starts_with("allgather ") && r.bytes == bytes);
        found.unwrap_or_else(|| panic!("no forced Simple all-gather of {bytes} B")).measured_us
    };
    let full: Vec<f64> = [32 << 10, 128 << 10, 512 << 10].into_iter().map(gather).collect();
    let (low, high) = extremes(full.iter().copied());
    let per_warp = (full.iter().sum::<f64>() / full.len() as f64 - gather(512)) / (17.0 - 3.0);
    let fast: Vec<f64> = rows.iter().filter(simple).filter(|r| (16 << 10..=512 << 10).contains(&r.bytes)).filter_map(|r| r.error).collect();
    assert!(fast.len() >= 6 && fast.iter().all(|e| *e < 0.0), "forced Simple calls of 16-512 KiB come out fast: {fast:?}");
    page_says(
        "docs/model.md",
        &format!(
            "take about {per_warp:.1} us more a warp: all-gather {:.1} us at 3 warps (512 B), {:.1} at 5 (8 KiB), {low:.1}-{high:.1} at 17 (32-512 KiB)",
            gather(512),
            gather(8 << 10)
        ),
    );
    page_says("docs/model.md", &format!("So forced Simple calls of 16-512 KiB come out {} fast", span(fast.iter().map(|e| -e), 0)));
}

/// docs/validation.md's section (a): each NCCL-choosing series of the 2x
/// runner file by size band, median / max absolute error, as the test
/// computes them (`| allreduce NVSwitch | 15 | 1.7% / 4.1% | ...`).
fn quote_size_bands(rows: &[Row], held: &[Held]) {
    const KIB: u64 = 1024;
    let bands: [(u64, u64); 4] = [(0, 64 * KIB), (64 * KIB, 16 * KIB * KIB), (16 * KIB * KIB, u64::MAX), (0, u64::MAX)];
    for series in held {
        let cells: Vec<String> = bands
            .iter()
            .map(|&(from, to)| {
                let errors = band_errors(rows, &series.series, from..to);
                let max = errors.iter().copied().fold(0.0, f64::max);
                format!("{:.1}% / {:.1}%", validate::median(&errors) * 100.0, max * 100.0)
            })
            .collect();
        let mut words = series.series.split(' ');
        let op = match words.next() {
            Some("allgather") => "all-gather",
            Some("reducescatter") => "reduce-scatter",
            other => other.unwrap_or_default(),
        };
        let transport = match words.next() {
            Some("shm") => "SHM",
            Some("nvswitch") => "NVSwitch",
            other => other.unwrap_or_default(),
        };
        let name = format!("{op} {transport}");
        section_quotes(
            "(a) In sample: the runner's 2x H200 file",
            &name,
            &format!("| {name} | {} | {} |", series.points, cells.join(" | ")),
        );
    }
}

#[test]
fn the_llm_allreduce_passes_the_runner_replayed_are_within_15_percent() {
    // The Llama-3.1-70B prefill (80 x 2 allreduces of 8192 tokens) and decode
    // (of one token) passes, replayed back to back in one CUDA graph.
    let bound = Bound { median: 0.15, max: 0.15 };
    for (folder, gpus) in [("h200x2-runner", 2), ("h200x4-runner", 4)] {
        let rows = predict(&runner_board(folder, gpus, &[]), &read(&measurements_dir().join(folder).join("measurements.jsonl")));
        let sequences: Vec<&Row> = rows.iter().filter(|r| r.series.starts_with("allreduce_sequence")).collect();
        print_rows(&format!("{folder}: LLM allreduce passes"), &sequences);
        hold(&format!("{folder}: LLM allreduce passes"), &rows, |r| r.series.starts_with("allreduce_sequence"), bound, &[]);
    }
}

#[test]
fn nccls_one_rank_collectives_are_a_copy_on_the_gpu() {
    // NCCL 2.28.3 on one H200 (`icsim calibrate run --gpus 1`): each call a
    // cudaMemcpyAsync, 20 to a CUDA graph. From 512 MiB these copies move
    // 2.8 TB/s of traffic where the same GPU's standalone 1 GiB device copy
    // (the model's rate) moves 4.3: 35% slow; 2 and 8 MiB sit in the L2
    // cache, which the model ignores (+22%, +51%).
    let rows = predict(&board("hgx-h200", 1, &[]), &read(&measurements_dir().join("h200-device-1gpu/one-rank.jsonl")));
    let today = Bound { median: 0.05, max: 0.51 };
    let misses = [
        Miss { series: "allreduce auto ranks=1", today },
        Miss { series: "allgather auto ranks=1", today },
        Miss { series: "reducescatter auto ranks=1", today },
    ];
    let one = ranks(1);
    let held = hold("one rank, 1x H200, NCCL's copy, from 8 B", &rows, one, SERIES_BOUND, &misses);
    assert_eq!(held.len(), 3);
    let worst = rows.iter().filter_map(|r| r.error).fold(0.0, f64::max);
    // From 512 MiB the model's copy is faster than the measured by this share of its rate.
    let large: Vec<f64> = rows.iter().filter(|r| r.bytes >= 512 << 20).filter_map(|r| r.error).collect();
    page_says(
        "docs/model.md",
        &format!(
            "the median error is {} a collective; from 512 MiB the real copies run {:.0}% slower than the model (and than a standalone 1 GiB device copy on the same GPU), and 2-8 MiB sit in the L2 cache, which the model ignores (up to +{:.0}%)",
            span(held.iter().map(|h| h.median), 1),
            -validate::median(&large) * 100.0,
            worst * 100.0
        ),
    );
}

#[test]
fn pytorch_adds_no_cost_of_its_own_where_nccl_runs_no_kernel() {
    // torch.distributed at one rank in a CUDA graph (PyTorch 2.11, its NCCL
    // 2.28.9) beside raw NCCL 2.28.3, the same session on one H200: NCCL
    // copies, PyTorch adds no node. The fitted torch-graph caller (4-5 us,
    // h200-fit) is paid by NCCL's kernels only, so it must not show here.
    // The one miss is PyTorch's 8 B all-gather, 0.88 us: faster than raw
    // NCCL's 0.89 (+18%).
    // (Raw NCCL's rows of that session, 0.89-0.91 us, are 5-7% over the
    // 0.85 us of the session that measured `stack.nccl-graph.copy_launch`.)
    let measured = read(&measurements_dir().join("h200-device-1gpu/torch-caller.jsonl"));
    let (torch, raw): (Vec<Measurement>, Vec<Measurement>) = measured.into_iter().partition(|m| m.stack() == Stack::TorchGraph);
    let h200 = board("hgx-h200", 1, &["h200-fit".to_string()]);
    let rows = predict(&h200, &torch);
    let misses = [Miss { series: "allgather auto ranks=1", today: Bound { median: 0.05, max: 0.18 } }];
    assert_eq!(hold("one rank in a graph, 1x H200, torch-graph, 8 B - 2 KiB", &rows, |_| true, SERIES_BOUND, &misses).len(), 2);
    // docs/model.md: the mean call of each caller, PyTorch's fastest (its
    // 8 B all-gather), and the torch-graph copy launch as the model holds it.
    let mean = |rows: &[Measurement]| rows.iter().map(|m| m.time_us).sum::<f64>() / rows.len() as f64;
    let fastest = torch.iter().min_by(|a, b| a.time_us.total_cmp(&b.time_us)).expect("torch rows");
    assert_eq!((fastest.op.as_str(), fastest.bytes), ("allgather", 8), "PyTorch's fastest call");
    let launch = h200.1.stack[Stack::TorchGraph.name()].copy_launch.as_us();
    assert_eq!(format!("{launch:.2}"), format!("{:.2}", mean(&torch)), "torch-graph's copy launch is PyTorch's mean call");
    page_says(
        "docs/model.md",
        &format!("({:.2} against {:.2} µs; {:.2} at 8 B, `torch-caller.jsonl`)", mean(&torch), mean(&raw), fastest.time_us),
    );
}

#[test]
fn the_runners_copies_on_one_h200_agree_with_the_shared_files() {
    // The runner's first copies (one H200, 2026-11-29) against the shared
    // torch file's, of the same machine type on another VM: how far this
    // machine's time for each path and size is off the shared file's.
    let shared = read(&h200_measurements_path());
    let ours = read(&measurements_dir().join("h200-device-1gpu/measurements.jsonl"));
    let off = |paths: &[&str], from: u64| -> Vec<f64> {
        let copies = ours.iter().filter(|m| m.op == "copy" && m.bytes >= from && paths.contains(&m.path.as_deref().unwrap_or_default()));
        let off: Vec<f64> = copies
            .filter_map(|m| {
                shared.iter().find(|s| s.op == "copy" && s.path == m.path && s.bytes == m.bytes).map(|s| m.time_us / s.time_us - 1.0)
            })
            .collect();
        assert!(off.len() >= 3, "{paths:?} from {from} B: {} sizes in both files", off.len());
        off
    };
    let pinned = ["h2d_pinned", "d2h_pinned"];
    let (from_4_mib, device) = (off(&pinned, 4 << 20), off(&["d2d_gpu0"], 16 << 20));
    assert!(from_4_mib.iter().chain(&device).all(|o| o.abs() <= 0.02), "pinned from 4 MiB {from_4_mib:?}, device from 16 MiB {device:?}");
    let at_1_mib = off(&pinned, 1 << 20).into_iter().map(f64::abs).fold(0.0, f64::max);
    let pageable = off(&["h2d_pageable", "d2h_pageable"], 64 << 20);
    page_says(
        "docs/calibration.md",
        &format!(
            "pinned host copies agree within 2% from 4 MiB up ({}; {:.1}% at 1 MiB) and device copies from 16 MiB up ({}); pageable copies are {} slower here from 64 MiB",
            span(from_4_mib.iter().map(|o| o.abs()), 1),
            at_1_mib * 100.0,
            span(device.iter().map(|o| o.abs()), 1),
            span(pageable, 0)
        ),
    );
}

#[test]
fn the_shared_torch_file_is_predicted_with_the_torch_graph_caller() {
    // Its folder holds the topology dump of the VM it was measured on.
    let dump = h200_measurements_path().with_file_name("nccl-topo.xml");
    let rows = predict(&board(dump.to_str().unwrap(), 2, &["h200-fit".to_string()]), &read(&h200_measurements_path()));
    // Its 512 KiB SHM call, 17% fast (NCCL's small Simple calls; the README's known limits).
    let misses = [Miss { series: "allreduce shm ranks=2", today: Bound { median: 0.05, max: 0.17 } }];
    hold("torch file, 2x H200 (torch-graph), NCCL choosing, from 8 B", &rows, nccl_choosing, SERIES_BOUND, &misses);
}

/// The public nccl-tests tables of one GPU (aiconfigurator, NCCL 2.29.2,
/// eager launches) on its board (HGX, or a GB200 NVL72 compute tray's four
/// GPUs) with `models` after its own (none: the shipped ones), pooled per
/// GPU count from 512 B.
fn public_table(gpu: &str, models: &[String], misses: &[Miss], bound: Bound) -> Vec<Held> {
    pooled_table(gpu, public_rows(gpu, models), misses, bound)
}

/// `public_table` of rows already predicted.
fn pooled_table(gpu: &str, rows: Vec<Row>, misses: &[Miss], bound: Bound) -> Vec<Held> {
    let pooled: Vec<Row> = rows
        .into_iter()
        .filter(|r| is_collective(r) && r.bytes >= 512)
        .map(|r| Row { series: format!("{gpu} {}", r.series.rsplit(' ').next().unwrap_or_default()), ..r })
        .collect();
    hold(&format!("public nccl-tests tables, {gpu}, allreduce + all-gather + reduce-scatter, from 512 B"), &pooled, |_| true, bound, misses)
}

/// The public nccl-tests table of `gpu`, predicted on its board with
/// `models` after the shipped ones.
fn public_rows(gpu: &str, models: &[String]) -> Vec<Row> {
    let measured = read(&measurements_dir().join(format!("public-aiconfigurator/{gpu}.jsonl")));
    let (preset, gpus) = if gpu == "gb200" { ("gb200-nvl72".to_string(), 4) } else { (format!("hgx-{gpu}"), 8) };
    predict(&board(&preset, gpus, models), &measured)
}

#[test]
fn the_public_h200_tables_ring_all_gathers_and_reduce_scatters_from_16_mib() {
    // NCCL runs them over NVLS on one node; icsim runs a ring (docs/model.md).
    let errors: Vec<f64> = public_rows("h200", &[])
        .iter()
        .filter(|r| ["allgather ", "reducescatter "].iter().any(|op| r.series.starts_with(op)) && r.series.ends_with("ranks=8"))
        .filter(|r| r.bytes >= 16 << 20)
        .inspect(|r| assert!(r.note.starts_with("ring/"), "{} at {} B runs {}", r.series, r.bytes, r.note))
        .filter_map(|r| r.error.map(f64::abs))
        .collect();
    assert!(errors.len() >= 4, "{} all-gathers and reduce-scatters from 16 MiB", errors.len());
    let worst = errors.iter().copied().fold(0.0, f64::max);
    page_says(
        "docs/model.md",
        &format!(
            "on the public 8x H200 tables the ring is within {:.0}% from 16 MiB, median {:.1}%",
            (worst * 100.0).ceil(),
            validate::median(&errors) * 100.0
        ),
    );
}

#[test]
fn the_public_h200_tables_are_within_5_percent_per_gpu_count() {
    let held = public_table("h200", &[], &[], Bound { median: 0.05, max: NO_MAX });
    assert_eq!(held.len(), 3);
    let p90s = held.iter().map(|h| h.p90);
    page_quotes("public nccl-tests tables, H200", &format!("{} (p90 {})", by_ranks(&held, &[2, 4, 8]), span(p90s, 0)));
}

#[test]
fn the_public_h100_b200_and_gb200_tables_are_predicted_within_10_percent_per_gpu_count() {
    // Never fitted: the H200's fit carried over by the datasheet differences
    // (link counts and rates, NCCL's per-architecture constants).
    let h100 = public_table("h100", &[], &[], Bound { median: 0.10, max: NO_MAX });
    assert_eq!(h100.len(), 3);
    page_quotes("the same tables for H100", &format!("H100 {}", by_ranks(&h100, &[2, 4, 8])));
    // Blackwell's calls and steps take longer than Hopper's; what they add
    // (blackwell-latency.toml) is fitted on the GB200 tray's tables, two and
    // four GPUs through the rack's NVLink switches, so HGX B200, eight GPUs
    // included, stays a prediction.
    let rows = public_rows("b200", &[]);
    // docs/model.md sets the 8 GPUs of two NVL72 trays beside the model's
    // NVLS run of this table's 8-GPU 128 MiB allreduce.
    let nvls = rows.iter().find(|r| r.series == "allreduce nvswitch ranks=8" && r.bytes == 128 << 20 && r.note.starts_with("nvls/"));
    let error = nvls.and_then(|r| r.error).expect("the HGX B200 table's 128 MiB allreduce on 8 GPUs runs NVLS");
    page_says("docs/model.md", &format!("about as fast as the model runs the HGX B200 table's 128 MiB call ({:+.1}%)", error * 100.0));
    let b200 = pooled_table("b200", rows, &[], Bound { median: 0.10, max: NO_MAX });
    assert_eq!(b200.len(), 3);
    page_quotes("the same tables for H100", &format!("B200 {}", by_ranks(&b200, &[2, 4, 8])));
    assert_eq!(public_table("gb200", &[], &[], Bound { median: 0.10, max: NO_MAX }).len(), 2);
}

#[test]
fn a_line_through_each_public_nvls_table_from_32_mib() {
    // docs/model.md: each 8-GPU table's float16 allreduces from 32 MiB
    // (NVLS, in NCCL and in the model) as `time = fixed + size / rate`,
    // measured and simulated; the GB200 rack's line is scale.rs's.
    let (mut measured, mut modelled) = (Vec::new(), Vec::new());
    for gpu in ["h100", "h200", "b200"] {
        let rows = predict(&board(&format!("hgx-{gpu}"), 8, &[]), &public_nvls_allreduces(gpu));
        assert!(rows.len() >= 4 && rows.iter().all(|r| r.note.starts_with("nvls/")), "{gpu}: {} rows, each NVLS", rows.len());
        let fit = |time: fn(&Row) -> f64| line(&rows.iter().map(|r| (r.bytes as f64, time(r) * 1e-6)).collect::<Vec<_>>());
        let ((fixed, rate), (model_fixed, model_rate)) = (fit(|r| r.measured_us), fit(|r| r.predicted_us.expect("a prediction")));
        measured.push(format!("{} {:.0} us and {rate:.0} GB/s", gpu.to_uppercase(), fixed * 1e6));
        modelled.push((format!("{:.0}", model_fixed * 1e6), format!("{model_rate:.0}")));
    }
    let (fixed, rates): (Vec<String>, Vec<String>) = modelled.into_iter().unzip();
    page_says(
        "docs/model.md",
        &format!("at 8 GPUs: {}, where the model gives {} us and {} GB/s", measured.join(", "), listed(&fixed), listed(&rates)),
    );
}

#[test]
fn the_public_a100_tables_fit_amperes_latency_on_2_and_4_gpus_and_predict_8() {
    // A100 (NCCL 2.27.3): what Ampere adds to a call and a step
    // (ampere-latency.toml) is fitted on the 2- and 4-GPU tables; the
    // 8-GPU one is a prediction.
    let a100 = public_table("a100", &[], &[], Bound { median: 0.10, max: NO_MAX });
    assert_eq!(a100.len(), 3);
    page_quotes("the same tables for H100", &format!("A100 {}", by_ranks(&a100, &[8])));
}

#[test]
fn leaving_one_source_out_predicts_the_other() {
    // Overlays fitted from base on one source only (models/hardware/loso/),
    // each predicting the source it never saw. The torch file alone cannot
    // tell NCCL's own latency from torch's per-call cost (one caller, two
    // ranks), so NCCL's priors stay and the runner's small calls miss.
    let torch_dump = h200_measurements_path().with_file_name("nccl-topo.xml");
    let torch_rows = predict(&board(torch_dump.to_str().unwrap(), 2, &loso_overlay("runner-only")), &read(&h200_measurements_path()));
    let to_torch =
        hold("runner-only overlay -> torch file, NCCL choosing", &torch_rows, nccl_choosing, Bound { median: 0.10, max: NO_MAX }, &[]);
    let runner = read(&measurements_dir().join("h200x2-runner/measurements.jsonl"));
    let runner_rows = predict(&runner_board("h200x2-runner", 2, &loso_overlay("torch-only")), &runner);
    let misses = [
        Miss { series: "allreduce nvswitch ranks=2", today: Bound { median: 0.23, max: NO_MAX } },
        Miss { series: "allgather nvswitch ranks=2", today: Bound { median: 0.29, max: NO_MAX } },
        Miss { series: "reducescatter nvswitch ranks=2", today: Bound { median: 0.39, max: NO_MAX } },
    ];
    let to_runner = hold(
        "torch-only overlay -> runner, 2x H200, NCCL choosing",
        &runner_rows,
        nccl_choosing,
        Bound { median: 0.10, max: NO_MAX },
        &misses,
    );
    // The torch file holds one allreduce series a transport.
    let [over_nvswitch, through_shm] = ["nvswitch", "shm"].map(|t| match named(&to_torch, t)[..] {
        [series] => series.median * 100.0,
        _ => panic!("the torch file has one {t} series"),
    });
    page_quotes(
        "one source alone predicting another",
        &format!(
            "{over_nvswitch:.1}% NVSwitch, {through_shm:.1}% SHM; the other way round **{}** over NVSwitch, {} SHM",
            span(medians(named(&to_runner, "nvswitch")), 0),
            span(medians(named(&to_runner, "shm")), 0)
        ),
    );
}

#[test]
fn leaving_each_source_out_of_the_fit_predicts_it() {
    // Overlays fitted from base on every source but one
    // (models/hardware/loso/without-*.toml), each predicting the source it
    // never saw, NCCL choosing, with the issue's median bound. (Without the
    // channel sweeps no one-channel run places a thread block's rates: the
    // sweeps' forced channel counts, not held here, come out 7-15% off
    // (README).)
    let bound = Bound { median: 0.10, max: NO_MAX };
    let mut held = Vec::new();
    for (folder, gpus, without) in [("h200x2-runner", 2, "without-runner-2x"), ("h200x4-runner", 4, "without-runner-4x")] {
        let measured = read(&measurements_dir().join(folder).join("measurements.jsonl"));
        let rows = predict(&runner_board(folder, gpus, &loso_overlay(without)), &measured);
        let own = ranks(gpus);
        held.extend(hold(&format!("fitted without {folder} -> it, NCCL choosing"), &rows, |r| own(r) && nccl_choosing(r), bound, &[]));
    }
    let sweeps = read(&measurements_dir().join("h200x4-channels/measurements.jsonl"));
    for gpus in [2, 4] {
        let rows = predict(&runner_board("h200x4-channels", gpus, &loso_overlay("without-channels")), &sweeps);
        let own = ranks(gpus);
        let title = format!("fitted without the channel sweeps -> them, {gpus} ranks");
        held.extend(hold(&title, &rows, |r| own(r) && nccl_choosing(r), bound, &[]));
    }
    let torch_dump = h200_measurements_path().with_file_name("nccl-topo.xml");
    let torch_rows = predict(&board(torch_dump.to_str().unwrap(), 2, &loso_overlay("without-torch")), &read(&h200_measurements_path()));
    held.extend(hold("fitted without the torch file -> it, NCCL choosing", &torch_rows, nccl_choosing, bound, &[]));
    let public = public_table("h200", &loso_overlay("without-public"), &[], bound);
    assert_eq!(public.len(), 3);
    let figure = format!(
        "{} a series (public tables {} at 2 / 4 / 8 GPUs)",
        span(medians(held.iter().chain(&public)), 1),
        by_ranks(&public, &[2, 4, 8])
    );
    page_quotes("each source left out of the fit", &figure);
}

/// Relative distance of `value` from the range [low, high] (0 inside it).
fn off_range(value: f64, low: f64, high: f64) -> f64 {
    if value < low {
        value / low - 1.0
    } else if value > high {
        value / high - 1.0
    } else {
        0.0
    }
}

/// A public bus bandwidth figure and the bound the issue sets for it.
struct Figure {
    board: &'static str,
    gpus: usize,
    algorithm: Choice<Algorithm>,
    public: (f64, f64),
    bound: f64,
}

#[test]
fn the_public_4_gib_figures_are_predicted_from_the_links() {
    // Public (shared/reference/hardware.md), 4 GiB allreduce: 365-370 GB/s
    // ring bus bandwidth on H100 SXM, "2 to 8 GPUs", without NVLS; about 480
    // GB/s with NVLS on 8x H100; 232 GB/s on 8x A100. The issue asks 5% for
    // the 8x H100 ring and a test bound of at most 10%; NVLS and A100 keep
    // the 8% an earlier issue set.
    let ring = Choice::Fixed(Algorithm::Ring);
    let figures = [
        Figure { board: "hgx-h100", gpus: 8, algorithm: ring, public: (365.0, 370.0), bound: 0.10 },
        Figure { board: "hgx-h200", gpus: 8, algorithm: ring, public: (365.0, 370.0), bound: 0.10 },
        Figure { board: "hgx-h100", gpus: 4, algorithm: ring, public: (365.0, 370.0), bound: 0.10 },
        Figure { board: "hgx-h100", gpus: 2, algorithm: ring, public: (365.0, 370.0), bound: 0.10 },
        Figure { board: "hgx-h100", gpus: 8, algorithm: Choice::Fixed(Algorithm::Nvls), public: (480.0, 480.0), bound: 0.08 },
        Figure { board: "hgx-a100", gpus: 8, algorithm: Choice::Auto, public: (232.0, 232.0), bound: 0.08 },
    ];
    let mut offs = Vec::new();
    for figure in figures {
        let (topo, model) = preset(figure.board, None, &[]);
        let request = Request {
            algorithm: figure.algorithm,
            ..Request::new(Op::AllReduce, Bytes::gib(4), topo.gpus()[..figure.gpus].to_vec(), Mode::Nvswitch)
        };
        let outcome = collective::simulate(&topo, &model, request).expect("the public figure's collective runs");
        let busbw = outcome.busbw_gbps();
        let off = off_range(busbw, figure.public.0, figure.public.1);
        println!(
            "{}, {} GPUs, 4 GiB {}: {busbw:.1} GB/s against {}-{} ({:+.1}%), bound {:.0}%",
            figure.board,
            figure.gpus,
            outcome.algorithm,
            figure.public.0,
            figure.public.1,
            off * 100.0,
            figure.bound * 100.0
        );
        assert!(off.abs() <= figure.bound, "{} GPUs on {}: {busbw:.1} GB/s is {:+.1}% off", figure.gpus, figure.board, off * 100.0);
        if figure.algorithm == Choice::Fixed(Algorithm::Nvls) {
            // docs/model.md: the NVLS handshake fitted on Hopper, confirmed here.
            page_says("docs/model.md", &format!("the 8x H100 4 GiB figure, which runs 128 KiB chunks: {:+.1}%)", off * 100.0));
        }
        offs.push(off);
    }
    let (low, high) = extremes(offs);
    page_quotes("4 GiB rings", &format!("{:+.1}% to {:+.1}%", low * 100.0, high * 100.0));
}

#[test]
fn one_shot_beats_ring_for_16_kib_on_eight_gpus() {
    let (topo, model) = preset("hgx-h200", None, &[]);
    let time = |algorithm| {
        let request = Request {
            algorithm: Choice::Fixed(algorithm),
            ..Request::new(Op::AllReduce, Bytes::kib(16), topo.gpus().to_vec(), Mode::Nvswitch)
        };
        collective::simulate(&topo, &model, request).unwrap().time
    };
    let (one_shot, ring) = (time(Algorithm::OneShot), time(Algorithm::Ring));
    println!("16 KiB allreduce on 8x H200: one-shot {one_shot}, ring {ring}");
    assert!(one_shot < ring);
}

#[test]
fn several_rings_on_the_h20_mesh_beat_a_single_ring() {
    let (topo, model) = preset("h20-nvlink-mesh", None, &[]);
    let request = Request {
        algorithm: Choice::Fixed(Algorithm::Ring),
        ..Request::new(Op::AllReduce, Bytes::gib(1), topo.gpus().to_vec(), Mode::Nvlink)
    };
    let time = |rings: usize| {
        let plan = collective::Plan::with_ring_limit(&topo, &model, request.clone(), rings).unwrap();
        collective::simulate_plan(&topo, &model, &plan).unwrap()
    };
    let (single, multi) = (time(1), time(usize::MAX));
    let speedup = single.time.as_secs() / multi.time.as_secs();
    println!(
        "1 GiB allreduce on 8x H20 mesh: one ring {} ({:.1} GB/s busbw, {} channels), link-disjoint rings {} ({:.1} GB/s, {} channels): {speedup:.2}x faster",
        single.time,
        single.busbw_gbps(),
        single.channels,
        multi.time,
        multi.busbw_gbps(),
        multi.channels
    );
    assert!(speedup > 1.5, "rings over all links should be much faster than one ring, got {speedup:.2}x");
}

/// Public measurements of PCIe-only servers nobody here owns
/// (models/hardware/measurements/public-pcie/, README.md there): the file,
/// the topology written from what its source says, the transport NCCL used
/// (for nccl-tests text, which does not print it), and whether the series
/// counts in the issue's figure: a table whose transport is in doubt is
/// predicted with each transport NCCL could have used, the one its numbers
/// and NCCL's rules point to counting. A file of several series names the
/// rows of each (`rows`: their transport as written and their GPUs). None
/// of them is fitted: every figure is a prediction of the shipped model
/// (the presets' calibrated overlays, the GPUs' and hosts' datasheets,
/// NCCL's tuner).
struct PublicTable {
    file: &'static str,
    topology: &'static str,
    transport: &'static str,
    rows: Option<(&'static str, u32)>,
    counts: bool,
}

/// A table whose rows are all one series, predicted with `transport`.
const fn table(file: &'static str, topology: &'static str, transport: &'static str, counts: bool) -> PublicTable {
    PublicTable { file, topology, transport, rows: None, counts }
}

impl PublicTable {
    /// Only the rows written with `transport` on `ranks` GPUs.
    const fn rows(self, transport: &'static str, ranks: u32) -> PublicTable {
        PublicTable { rows: Some((transport, ranks)), ..self }
    }

    /// Whether the predicted series `name` is this table's.
    fn names(&self, name: &str) -> bool {
        name.starts_with(&format!("{}: allreduce {} ", self.file, self.transport))
            && self.rows.is_none_or(|(_, ranks)| name.ends_with(&format!(" ranks={ranks}")))
    }
}

const PUBLIC_PCIE: &[PublicTable] = &[
    table("rtx5090-8gpu-turin-p2p-patched.txt", "turin-8x5090", "p2p", true),
    table("rtx5090-4gpu-genoa-shm.txt", "genoa-4x5090", "shm", true),
    table("rtx4090-8gpu-rome-shm.txt", "rome-8x4090", "shm", true),
    // Not logged. Its calls up to 32 KiB take what the same host's SHM
    // table's take (38.82 against 38.83 us at 8 B), and NCCL from 2.23 keeps
    // P2P on AMD hosts to pairs under one PCIe switch once there are more
    // than two GPUs (paths.cc): SHM. Predicted as the post assumed, P2P, too.
    table("rtx4090-8gpu-rome-p2p-patched.txt", "rome-8x4090", "shm", true),
    table("rtx4090-8gpu-rome-p2p-patched.txt", "rome-8x4090", "p2p", false),
    table("rtx4090-6gpu-tinybox-p2p-patched.txt", "rome-6x4090", "p2p", true),
    table("h100pcie-2gpu-nvlink-bridge.txt", "h100pcie-bridged-pair", "nvlink", true),
    table("wrx90-8x6000-cpayne-p2p.jsonl", "wrx90-8x6000", "p2p", true),
    // Not logged; the post installs the P2P driver and tests for P2P. On an
    // AMD host NCCL from 2.23 would keep four GPUs on separate root ports to
    // SHM (paths.cc), and the NCCL version is not stated: SHM is reported too.
    table("rtx4090-4gpu-pptest-p2p-patched.txt", "pptest-4x4090", "p2p", true),
    table("rtx4090-4gpu-pptest-p2p-patched.txt", "pptest-4x4090", "shm", false),
    table("v100pcie-4gpu-bessemer-p2p.txt", "bessemer-4xv100", "p2p", true),
    table("l40s-4gpu-farmshare-shm.txt", "farmshare-4xl40s", "shm", true),
    // The ASUS ESC8000A-E13P's p2pmark tables: four GPUs of socket 0 as NCCL
    // chose by default (P2P within a logical switch, SHM across: its log
    // lines) and with NCCL_P2P_LEVEL=SYS, and all eight by default, whose
    // P2P prediction is reported, not counted (README.md there).
    table("esc8000a-8x6000-p2pmark.jsonl", "esc8000a-8x6000", "auto", true).rows("auto", 4),
    table("esc8000a-8x6000-p2pmark.jsonl", "esc8000a-8x6000", "p2p", true).rows("p2p", 4),
    table("esc8000a-8x6000-p2pmark.jsonl", "esc8000a-8x6000", "auto", true).rows("auto", 8),
    table("esc8000a-8x6000-p2pmark.jsonl", "esc8000a-8x6000", "p2p", false).rows("auto", 8),
    table("trx40-2x6000-p2p.jsonl", "trx40-2x6000", "p2p", true),
];

/// Every public PCIe table predicted on its machine, each series named by
/// its file.
fn public_pcie_predictions() -> Vec<Row> {
    let folder = measurements_dir().join("public-pcie");
    let mut rows = Vec::new();
    for table in PUBLIC_PCIE {
        // Schema-1 rows name their own transport; nccl-tests text does not.
        let text = !table.file.ends_with(".jsonl");
        let options = icsim::calibrate::nccl_tests::NcclTestsOptions { op: None, transport: text.then(|| table.transport.to_string()) };
        let mut measured = read_measurements(&folder.join(table.file), &options).unwrap_or_else(|e| panic!("{e}"));
        if let Some((written, ranks)) = table.rows {
            measured.retain(|m| m.transport.as_deref().unwrap_or("auto") == written && m.ranks == Some(ranks));
            measured.iter_mut().for_each(|m| m.transport = Some(table.transport.to_string()));
        }
        let gpus = measured.iter().filter_map(|m| m.ranks).max().unwrap_or(2);
        let predicted = predict(&board(folder.join(format!("{}.topology.toml", table.topology)).to_str().unwrap(), gpus, &[]), &measured);
        rows.extend(predicted.into_iter().map(|r| Row { series: format!("{}: {}", table.file, r.series), ..r }));
    }
    rows
}

#[test]
fn public_pcie_servers_are_predicted_within_the_issue_from_64_kib() {
    // Issue 33: the median of the series' medians within 10%, the worst
    // series within 20%, on sizes from 64 KiB. Each series is held to 20%;
    // those that miss it are listed at today's figure (README, fidelity).
    let rows = public_pcie_predictions();
    let from_64_kib = |r: &Row| r.bytes >= 64 * 1024;
    let misses = [
        Miss { series: "rtx4090-8gpu-rome-p2p-patched.txt: allreduce shm ranks=8", today: Bound { median: 0.28, max: NO_MAX } },
        Miss { series: "rtx4090-8gpu-rome-p2p-patched.txt: allreduce p2p ranks=8", today: Bound { median: 0.23, max: NO_MAX } },
        Miss { series: "h100pcie-2gpu-nvlink-bridge.txt: allreduce nvlink ranks=2", today: Bound { median: 0.49, max: NO_MAX } },
        Miss { series: "rtx4090-4gpu-pptest-p2p-patched.txt: allreduce shm ranks=4", today: Bound { median: 0.61, max: NO_MAX } },
        Miss { series: "esc8000a-8x6000-p2pmark.jsonl: allreduce auto ranks=4", today: Bound { median: 0.22, max: NO_MAX } },
        Miss { series: "esc8000a-8x6000-p2pmark.jsonl: allreduce auto ranks=8", today: Bound { median: 0.28, max: NO_MAX } },
        Miss { series: "esc8000a-8x6000-p2pmark.jsonl: allreduce p2p ranks=8", today: Bound { median: 0.51, max: NO_MAX } },
        Miss { series: "trx40-2x6000-p2p.jsonl: allreduce p2p channels=8 ranks=2", today: Bound { median: 0.24, max: NO_MAX } },
    ];
    let held = hold("public PCIe servers, NCCL choosing, from 64 KiB", &rows, from_64_kib, Bound { median: 0.20, max: NO_MAX }, &misses);
    let mut medians: Vec<f64> = PUBLIC_PCIE
        .iter()
        .filter(|table| table.counts)
        .map(|table| {
            let errors: Vec<f64> =
                rows.iter().filter(|r| table.names(&r.series) && from_64_kib(r)).filter_map(|r| r.error.map(f64::abs)).collect();
            validate::median(&errors)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    let median_of_medians = validate::median(&medians);
    // The issue's 10% held until the ESC8000A and TRX40 tables were added,
    // blind: since then it is missed, held at today's figure, and the test
    // fails once it meets the issue again, so that the hold is taken off.
    const MEDIAN_TODAY: f64 = 0.103;
    println!("median of the series' medians: {:.1}% (issue: 10%; held at {:.1}%)", median_of_medians * 100.0, MEDIAN_TODAY * 100.0);
    assert!(
        median_of_medians <= MEDIAN_TODAY,
        "the median of the public PCIe series' medians grew to {:.1}%, past today's {:.1}% (issue: 10%)",
        median_of_medians * 100.0,
        MEDIAN_TODAY * 100.0
    );
    assert!(
        median_of_medians > 0.10,
        "the median of the public PCIe series' medians is {:.1}%, within the issue's 10% again: hold it there (MEDIAN_TODAY)",
        median_of_medians * 100.0
    );
    const ROW: &str = "PCIe-only servers nobody here owns";
    page_quotes(ROW, &format!("median of the series' medians **{:.1}%**", median_of_medians * 100.0));
    // The series that count and meet the issue's 20%, in the table's order,
    // then the misses.
    let of = |table: &PublicTable| {
        held.iter().find(|h| table.names(&h.series)).unwrap_or_else(|| panic!("no series of {} {}", table.file, table.transport))
    };
    let meeting: Vec<String> = PUBLIC_PCIE
        .iter()
        .filter(|table| table.counts && !misses.iter().any(|m| table.names(m.series)))
        .map(|table| match of(table) {
            h if h.points == 1 => format!("{:.1}% (one point)", h.median * 100.0),
            h => format!("{:.1}", h.median * 100.0),
        })
        .collect();
    page_quotes(ROW, &format!("series {}% a series", meeting.join(" / ")));
    // The worst points of the counted series of more than two points, and their sizes.
    let counted = |series: &str| PUBLIC_PCIE.iter().any(|table| table.counts && table.names(series));
    let worst: Vec<&Row> = held
        .iter()
        .filter(|h| h.points > 2 && counted(&h.series))
        .map(|h| {
            let of_series = rows.iter().filter(|r| r.series == h.series && from_64_kib(r) && r.error.is_some());
            of_series.max_by(|a, b| a.error.unwrap().abs().total_cmp(&b.error.unwrap().abs())).expect("a point")
        })
        .collect();
    let (smallest, largest) = (worst.iter().min_by_key(|r| r.bytes).unwrap(), worst.iter().max_by_key(|r| r.bytes).unwrap());
    // A size label as the page writes it: `64KiB` -> `64 KiB`.
    let spaced = |label: &str| {
        let at = label.find(|c: char| !c.is_ascii_digit()).unwrap_or(label.len());
        format!("{} {}", &label[..at], &label[at..])
    };
    page_quotes(
        ROW,
        &format!(
            "worst points {} at {} - {}",
            span(worst.iter().map(|r| r.error.unwrap().abs()), 0),
            spaced(&smallest.label),
            spaced(&largest.label)
        ),
    );
    let miss =
        |file: &str, transport: &str| of(PUBLIC_PCIE.iter().find(|t| t.file == file && t.transport == transport).unwrap()).median * 100.0;
    page_quotes(
        ROW,
        &format!(
            "**{:.1}%** (RTX 4090 with P2P unlocked, as SHM; {:.1}% as P2P) and **{:.1}%** (H100 PCIe bridge",
            miss("rtx4090-8gpu-rome-p2p-patched.txt", "shm"),
            miss("rtx4090-8gpu-rome-p2p-patched.txt", "p2p"),
            miss("h100pcie-2gpu-nvlink-bridge.txt", "nvlink")
        ),
    );
    page_quotes(ROW, &format!("{:.1}% for the 4x RTX 4090 unlocked box as SHM", miss("rtx4090-4gpu-pptest-p2p-patched.txt", "shm")));
    let esc8000a = |transport: &str, ranks: u32| {
        let table = PUBLIC_PCIE.iter().find(|t| t.file.starts_with("esc8000a") && t.transport == transport && t.rows.unwrap().1 == ranks);
        of(table.unwrap()).median * 100.0
    };
    page_quotes(
        ROW,
        &format!(
            "**{:.1}%** and **{:.1}%** (the ESC8000A's four and eight GPUs as NCCL chose; {:.1}% at eight as P2P, not counted) and **{:.1}%** (the TRX40 pair)",
            esc8000a("auto", 4),
            esc8000a("auto", 8),
            esc8000a("p2p", 8),
            miss("trx40-2x6000-p2p.jsonl", "p2p")
        ),
    );
}

#[test]
fn four_rank_shm_calls_of_8_mib_run_faster_than_the_model_in_both_4_gpu_runs() {
    // NCCL's own choice through host memory at 4 ranks, 8 MiB: the runner's
    // 4-GPU file and the channel sweeps' run (docs/model.md, the SHM fence).
    let mut errors = Vec::new();
    for folder in ["h200x4-runner", "h200x4-channels"] {
        let rows = predict(&runner_board(folder, 4, &[]), &read(&measurements_dir().join(format!("{folder}/measurements.jsonl"))));
        let shm_at_four = |r: &&Row| r.series.split(' ').nth(1) == Some("shm") && r.series.ends_with("ranks=4");
        let at = rows.iter().filter(|r| nccl_choosing(r) && shm_at_four(r) && r.bytes == 8 << 20);
        let found: Vec<f64> = at.filter_map(|r| r.error).collect();
        assert_eq!(found.len(), 3, "{folder}: one 8 MiB call of each operation");
        errors.extend(found);
    }
    assert!(errors.iter().all(|e| *e > 0.0), "the model is slower than every 4-rank 8 MiB SHM call: {errors:?}");
    page_says("docs/model.md", &format!("The 4-rank 8 MiB calls still run {} faster than the model in both 4-GPU runs", span(errors, 0)));
}
