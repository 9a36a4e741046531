//! Fidelity of the whole forward and of its kernels on H200, against what
//! PyTorch measured (`tools/torch_forward.py`; prefills launched eagerly,
//! decode steps replayed from a CUDA graph; `scope = layers`, PyTorch's
//! fusion, each row's stack), replayed on `hgx-h200` with its shipped
//! overlays. Prints every table. The issue's bounds are held for every
//! phase and transport; prefills with SHM allreduces miss them (the
//! collective model's SHM error) and are held at today's figure. The held-back
//! forwards (`forward-holdout.jsonl`) are never fitted to: their test only
//! reads them.

use icsim::calibrate::read_measurements;
use icsim::calibrate::schema::Measurement;
use icsim::calibrate::validate::{self, Row};
use icsim::calibrate::{profile, validate::median};

use crate::common::{icsim, page_quotes, preset, section_quotes, shared, span, succeeded};

/// The issue's bound on each shared forward row, and on the median of the
/// forwards of each phase.
const BOUND: f64 = 0.05;
/// The issue's bound on the largest error of the forwards of each phase.
const MAX_BOUND: f64 = 0.10;

fn measurements_folder() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements")
}

/// The forward rows of `path` predicted on two H200 of `hgx-h200`, printed
/// as a table under `title`.
fn forward_table(path: &std::path::Path, title: &str) -> Vec<(Measurement, Row)> {
    let measured: Vec<Measurement> = read_measurements(path, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|m| m.op == "llm_forward")
        .collect();
    // Measured with NCCL_NVLS_ENABLE=0, as tools/torch_forward.py runs NCCL
    // (the committed rows say so in their `env`; the shared file's method).
    let (mut topo, model) = preset("hgx-h200", Some(2), &[]);
    topo.policy.nvls = false;
    let rows = validate::compare(&topo, &model, &measured).expect("every forward row is predicted");
    println!("\n{title} ({}):", path.display());
    println!(
        "{:<16} {:>3} {:<12} {:>7} {:>5} {:<9} {:>12} {:>12} {:>8}",
        "model", "tp", "phase", "tokens", "batch", "allreduce", "measured_ms", "predicted_ms", "error"
    );
    for (m, r) in measured.iter().zip(&rows) {
        let predicted = r.predicted_us.map_or("-".into(), |p| format!("{:.3}", p / 1000.0));
        let error = r.error.map_or("-".into(), |e| format!("{:+.1}%", e * 100.0));
        let tokens = if m.phase.as_deref() == Some("prefill") { m.tokens } else { m.kv_len }.unwrap_or(0);
        println!(
            "{:<16} {:>3} {:<12} {:>7} {:>5} {:<9} {:>12.3} {:>12} {:>8}",
            m.model.as_deref().unwrap_or("?"),
            m.tp.unwrap_or(1),
            m.phase.as_deref().unwrap_or("?"),
            tokens,
            m.batch.unwrap_or(1),
            m.transport.as_deref().unwrap_or("?"),
            r.measured_us / 1000.0,
            predicted,
            error
        );
    }
    measured.into_iter().zip(rows).collect()
}

/// Median and largest absolute error of the rows of `phase` whose
/// allreduces ran over `transport` ("none": no allreduce), printed; None
/// when there are none.
fn phase_errors(rows: &[(Measurement, Row)], phase: &str, transport: &str) -> Option<(f64, f64)> {
    let errors: Vec<f64> = rows
        .iter()
        .filter(|(m, _)| m.phase.as_deref() == Some(phase) && m.transport.as_deref() == Some(transport))
        .map(|(_, r)| r.error.expect("predicted").abs())
        .collect();
    if errors.is_empty() {
        return None;
    }
    let (mid, max) = (median(&errors), errors.iter().copied().fold(0.0, f64::max));
    println!("  {phase:<12} allreduce {transport:<9} {:>2} rows: median {:.1}%, max {:.1}%", errors.len(), mid * 100.0, max * 100.0);
    Some((mid, max))
}

/// The issue's bounds (median 5%, max 10%) on the rows of each phase and
/// transport. The one miss: prefills with SHM allreduces, which do not add
/// up with the same machines' standalone SHM allreduces (docs/validation.md,
/// A whole Llama forward); held at today's 13% so that it cannot grow unseen.
/// Returns each phase and transport's median, the SHM prefills' apart, and
/// docs/validation.md's row of their medians and maxima (`1.0% / 4.5% |
/// ...`, the misses in bold).
fn assert_forward_bounds(rows: &[(Measurement, Row)]) -> (Vec<f64>, Vec<f64>, String) {
    let (mut within, mut shm_prefill, mut cells) = (Vec::new(), Vec::new(), Vec::new());
    for phase in ["prefill", "decode_step"] {
        for transport in ["none", "nvswitch", "shm"] {
            let Some((mid, max)) = phase_errors(rows, phase, transport) else { continue };
            let cell = format!("{:.1}% / {:.1}%", mid * 100.0, max * 100.0);
            if (phase, transport) == ("prefill", "shm") {
                shm_prefill.push(mid);
                cells.push(format!("**{cell}**"));
            } else {
                within.push(mid);
                cells.push(cell);
            }
            let (bound, max_bound) = if (phase, transport) == ("prefill", "shm") { (0.13, 0.13) } else { (BOUND, MAX_BOUND) };
            assert!(
                mid <= bound && max <= max_bound,
                "{phase}, allreduce {transport}: median {:.1}%, max {:.1}% over {:.0}% / {:.0}%",
                mid * 100.0,
                max * 100.0,
                bound * 100.0,
                max_bound * 100.0
            );
        }
    }
    (within, shm_prefill, format!("| {} |", cells.join(" | ")))
}

#[test]
fn the_shared_forward_is_within_5_percent_a_row_but_the_shm_prefill() {
    let path = shared().join("calibration/h200x2-nvswitch/llama70b-tp2-forward.jsonl");
    let rows = forward_table(&path, "Llama-3.1-70B forward at TP=2 on 2x H200 (shared)");
    assert_eq!(rows.len(), 6);
    for (m, r) in &rows {
        let (phase, transport) = (m.phase.as_deref().unwrap_or("?"), m.transport.as_deref().unwrap_or("?"));
        let error = r.error.expect("predicted");
        // The miss: 160 allreduces of 128 MiB through host memory (+12.3% on
        // the whole prefill; docs/validation.md says why).
        let bound = if (phase, transport) == ("prefill", "shm") { 0.13 } else { BOUND };
        assert!(error.abs() <= bound, "{phase}, allreduce {transport}: {:+.1}% over {:.0}%", error * 100.0, bound * 100.0);
        // docs/validation.md's row of it, the miss in bold.
        let shown = match transport {
            "nvswitch" => "NVSwitch",
            "shm" => "SHM",
            other => other,
        };
        let error = if bound > BOUND { format!("**{:+.1}%**", error * 100.0) } else { format!("{:+.1}%", error * 100.0) };
        let predicted = r.predicted_us.expect("predicted") / 1000.0;
        let start = format!("{} | {shown}", phase.replace('_', " "));
        section_quotes("A whole Llama forward", &start, &format!("{start} | {:.2} | {predicted:.2} | {error} |", r.measured_us / 1000.0));
    }
}

#[test]
fn the_measured_and_held_back_forwards_are_within_the_issues_bounds() {
    // In sample: the profile of one of these forwards (70B TP=2, 8192)
    // set PyTorch's kernels and the sustained clock (h200-forward.toml).
    let rows = forward_table(&measurements_folder().join("h200-forward/forward.jsonl"), "Forwards on H200, in sample");
    assert_eq!(rows.len(), 32);
    let (mut within, mut shm_prefill, row) = assert_forward_bounds(&rows);
    section_quotes("A whole Llama forward", "measured here (in sample)", &row);
    // Out of sample: never fitted to (405B at TP=2, 70B at batch 8, 8B at
    // 16K tokens).
    let rows = forward_table(&measurements_folder().join("h200-forward/forward-holdout.jsonl"), "Forwards on H200, held back");
    assert_eq!(rows.len(), 18);
    let (held_back, held_back_shm, row) = assert_forward_bounds(&rows);
    section_quotes("A whole Llama forward", "held back", &row);
    within.extend(held_back);
    shm_prefill.extend(held_back_shm);
    page_quotes("whole Llama forwards", &format!("{}; prefills with SHM allreduces **{}**", span(within, 1), span(shm_prefill, 1)));
}

#[test]
fn the_profiled_kernels_are_predicted() {
    // In sample: h200-forward.toml's ATen kernels and sustained clock were
    // worked out from this profile. Which kernels PyTorch launches a layer
    // (the model's kernels against the profile's launches: a split-K
    // product and decode attention launch a reduction too, inside what the
    // runner times as one kernel) and their GPU time.
    let path = measurements_folder().join("h200-forward/profile.jsonl");
    let measured = read_measurements(&path, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let (_, model) = preset("hgx-h200", Some(2), &[]);
    let kinds = profile::compare(&model, &measured).expect("the profile is compared");
    println!("\nLlama-3.1-70B TP=2 on H200, one layer as PyTorch profiled it ({}):", path.display());
    println!(
        "{:<12} {:<13} {:>8} {:>7} {:>12} {:>12} {:>8}",
        "phase", "kernel", "launches", "kernels", "measured_us", "predicted_us", "error"
    );
    for k in &kinds {
        let error = k.error().map_or("-".into(), |e| format!("{:+.1}%", e * 100.0));
        println!(
            "{:<12} {:<13} {:>8} {:>7} {:>12.1} {:>12.1} {:>8}",
            k.phase, k.kind, k.launches, k.kernels, k.measured_us, k.predicted_us, error
        );
    }
    for phase in ["prefill", "decode_step"] {
        let of_phase: Vec<&profile::KindRow> = kinds.iter().filter(|k| k.phase == phase).collect();
        // Every elementwise kernel PyTorch launches is one of the model's, and
        // the other way round (the prefill's memsets, 1 us each, are not).
        for k in of_phase.iter().filter(|k| !["matmul", "attention", "memset"].contains(&k.kind.as_str())) {
            assert_eq!(k.launches, k.kernels as f64, "{phase} {}: launches a layer against the model's kernels", k.kind);
        }
        let measured: f64 = of_phase.iter().map(|k| k.measured_us).sum();
        let predicted: f64 = of_phase.iter().map(|k| k.predicted_us).sum();
        let error = predicted / measured - 1.0;
        println!("{phase}: {measured:.0} us measured a layer, {predicted:.0} us predicted ({:+.1}%)", error * 100.0);
        assert!(error.abs() <= BOUND, "{phase}: the layer's kernels {:+.1}% off the profile", error * 100.0);
    }
}

#[test]
fn validate_predicts_forward_rows_from_the_command_line() {
    let out =
        succeeded(&icsim(&["calibrate", "validate", "tests/data/h200x2-forward-slice.jsonl", "--topology", "hgx-h200", "--gpus", "2"]));
    assert!(out.contains("llm_forward decode_step none") && out.contains("torch-graph layers torch"), "{out}");
}

/// Kernel rows of `measurements` predicted on one GPU of `preset`: every
/// series, then the median and 90th percentile of all absolute errors.
fn kernel_errors(folder: &std::path::Path, preset_name: &str, overlays: &[&str]) -> Option<(usize, f64, f64, f64)> {
    let measured = read_measurements(&folder.join("measurements.jsonl"), &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let kernels: Vec<Measurement> = measured.into_iter().filter(|m| m.op == "kernel").collect();
    if kernels.is_empty() {
        return None;
    }
    let (topo, model) = preset(preset_name, Some(1), overlays);
    let rows = validate::compare(&topo, &model, &kernels).expect("every kernel row is predicted");
    let mut errors: Vec<f64> = rows.iter().filter_map(|r| r.error.map(f64::abs)).collect();
    errors.sort_by(f64::total_cmp);
    let summary = validate::summarize(&rows, None, |_| true);
    for s in &summary {
        println!(
            "{:<28} {:>4} rows  median {:>5.1}%  p90 {:>5.1}%  max {:>5.1}%",
            s.series,
            s.errors.points,
            s.errors.median_abs * 100.0,
            s.errors.p90_abs * 100.0,
            s.errors.max_abs * 100.0
        );
    }
    let largest = errors.last().copied().unwrap_or(0.0);
    Some((errors.len(), validate::median(&errors), validate::quantile(&errors, 0.9), largest))
}

#[test]
fn the_public_h200_gemms_are_predicted_by_the_curve_fitted_to_them() {
    // The base H200 curve was fitted to these 945 public timings (in
    // sample): a regression guard of the fit, at its own median (6.8%) and
    // 90th percentile (14.7%) plus a margin. The issue's 5% median is for the
    // runner's own kernels (below). `base` sets aside the runner's fit.
    let folder = measurements_folder().join("public-h200-gemm");
    let (rows, median, p90, _) = kernel_errors(&folder, "pcie-gen5-8gpu", &["base"]).expect("the public GEMMs");
    println!("public H200 GEMMs: {rows} rows, median {:.1}%, p90 {:.1}%", median * 100.0, p90 * 100.0);
    assert!(rows == 945 && median <= 0.07 && p90 <= 0.15, "median {:.1}%, p90 {:.1}%", median * 100.0, p90 * 100.0);
}

#[test]
fn the_runners_own_kernels_are_predicted_within_5_percent_median() {
    // Issue 11: kernel prediction median <= 5% over every measured shape,
    // for each committed runner folder with kernel rows.
    let mut checked = 0;
    for entry in std::fs::read_dir(measurements_folder()).expect("the measurements folder") {
        let folder = entry.expect("a folder entry").path();
        let Ok(system) = std::fs::read_to_string(folder.join("system.json")) else { continue };
        let gpu = serde_json::from_str::<serde_json::Value>(&system).expect("system.json")["gpus"][0]["name"]
            .as_str()
            .unwrap_or("")
            .to_lowercase();
        let Some(board) = ["h200", "h100", "a100", "h20"].iter().find(|g| gpu.contains(*g)).map(|g| format!("hgx-{g}")) else { continue };
        let Some((rows, median, p90, max)) = kernel_errors(&folder, &board, &[]) else { continue };
        println!(
            "{}: {rows} kernel rows, median {:.1}%, p90 {:.1}%, max {:.1}%",
            folder.display(),
            median * 100.0,
            p90 * 100.0,
            max * 100.0
        );
        assert!(median <= BOUND, "{}: kernel median {:.1}% over 5%", folder.display(), median * 100.0);
        checked += rows;
    }
    assert!(checked > 0, "the committed runner kernels (h200-kernels) are checked");
}
