//! Fidelity: predictions against the shared 2x H200 measurements and the
//! public 8-GPU figures of shared/reference/hardware.md. Every test prints
//! its table and fails when an error passes its bound.

use std::path::{Path, PathBuf};

use icsim::calibrate::schema::{ALLREDUCE_SEQUENCE, Measurement};
use icsim::calibrate::validate::{self, Band, Row};
use icsim::collective::{self, Algorithm, Choice, Op, Plan, Request};
use icsim::config::hardware::HardwareModel;
use icsim::topology::Topology;
use icsim::transport::Mode;
use icsim::units::Bytes;

use crate::common::{h200_measurements, preset};

fn allreduce(topo: &Topology, gpus: usize, bytes: Bytes, mode: Mode, algorithm: Choice<Algorithm>) -> Request {
    Request { algorithm, ..Request::new(Op::AllReduce, bytes, topo.gpus()[..gpus].to_vec(), mode) }
}

fn busbw(topo: &Topology, model: &HardwareModel, request: Request) -> f64 {
    collective::simulate(topo, model, request).expect("simulates").busbw_gbps()
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

fn print_rows(title: &str, rows: &[&Row]) {
    if rows.is_empty() {
        return;
    }
    println!("\n{title}");
    println!("{:<22} {:>8} {:>12} {:>12} {:>8}  model", "series", "size", "measured_us", "predicted_us", "error");
    for r in rows {
        let predicted = r.predicted_us.map_or("-".to_string(), |p| format!("{p:.2}"));
        let error = r.error.map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0));
        println!("{:<22} {:>8} {:>12.2} {:>12} {:>8}  {}", r.series, r.label, r.measured_us, predicted, error, r.note);
    }
}

fn allreduce_rows(model_overlays: &[&str]) -> Vec<Row> {
    let (topo, model) = preset("hgx-h200", Some(2), model_overlays);
    let measured: Vec<Measurement> = h200_measurements().into_iter().filter(|m| m.op == "allreduce").collect();
    validate::compare(&topo, &model, &measured).expect("every row predictable")
}

fn median_abs(rows: &[&Row]) -> f64 {
    validate::median(&rows.iter().filter_map(|r| r.error.map(f64::abs)).collect::<Vec<_>>())
}

#[test]
fn two_h200_from_one_mib_up_are_within_25_percent_median() {
    // Issue: simulation core. Shipped (calibrated) model and the public,
    // uncalibrated one, both printed; both must pass.
    for (label, overlays) in [("calibrated (shipped)", &[][..]), ("uncalibrated NCCL-derived base", &["base"][..])] {
        let rows = allreduce_rows(overlays);
        for transport in ["nvswitch", "shm"] {
            let selected: Vec<&Row> =
                rows.iter().filter(|r| r.series == format!("allreduce {transport} ranks=2") && r.bytes >= 1 << 20).collect();
            print_rows(&format!("2x H200 allreduce over {transport}, 1 MiB and up, {label} model"), &selected);
            let median = median_abs(&selected);
            println!("median absolute error: {:.1}%", median * 100.0);
            assert!(median < 0.25, "{label}, {transport}: median error {:.1}% is over 25%", median * 100.0);
        }
    }
}

#[test]
fn two_h200_with_nccl_choosing_are_within_10_percent_median_and_20_percent_from_64_kib() {
    // Issue: collectives as NCCL runs them. These points were fitted: the
    // out-of-sample check is `a_fit_on_half_the_sizes_predicts_the_other_half`.
    let rows = allreduce_rows(&[]);
    for transport in ["nvswitch", "shm"] {
        let series: Vec<&Row> = rows.iter().filter(|r| r.series == format!("allreduce {transport} ranks=2")).collect();
        print_rows(&format!("2x H200 allreduce over {transport}, NCCL choosing"), &series);
        let median = median_abs(&series);
        println!("median absolute error: {:.1}%", median * 100.0);
        assert!(median <= 0.10, "{transport}: median error {:.1}% is over 10%", median * 100.0);
        for r in series.iter().filter(|r| r.bytes >= 64 << 10) {
            let error = r.error.expect("predicted");
            assert!(error.abs() <= 0.20, "{transport} {}: error {:+.1}% is over 20%", r.label, error * 100.0);
        }
    }
}

/// Folders `icsim calibrate run` wrote, committed under models/hardware/measurements/.
fn runner_folders() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements");
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|entry| entry.expect("a readable folder entry").path())
        .filter(|path| path.join("system.json").is_file())
        .collect();
    folders.sort();
    folders
}

/// The board a runner folder measured, from its system record: the HGX
/// preset of its GPU model with as many GPUs as were measured.
fn measured_board(folder: &Path) -> (Topology, HardwareModel) {
    let path = folder.join("system.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let system: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let gpu = system["gpus"][0]["name"].as_str().expect("system.json names its GPUs").to_lowercase();
    let preset_name = ["h200", "h100", "a100", "h20"]
        .into_iter()
        .find(|model| gpu.contains(model))
        .map(|model| format!("hgx-{model}"))
        .unwrap_or_else(|| panic!("{}: no board preset for GPU {gpu:?}", folder.display()));
    let gpus = system["gpu_count"].as_u64().expect("system.json counts its GPUs") as u32;
    preset(&preset_name, Some(gpus), &[])
}

#[test]
fn the_runners_own_measurements_are_predicted_at_every_gpu_count() {
    // Issues 5 and 6: whatever the runner measured and was committed, at every
    // GPU count it ran on. Bounds: large copies (64 MiB up, what the fit
    // uses) within 10%; allreduces with NCCL choosing, 1 MiB up, a median
    // within 10% per transport and GPU count; an LLM's allreduce passes
    // within 15% each.
    let mut checked = 0;
    for folder in runner_folders() {
        let (topo, model) = measured_board(&folder);
        let measured: Vec<Measurement> =
            icsim::calibrate::read_measurements(&folder.join("measurements.jsonl"), &Default::default()).unwrap_or_else(|e| panic!("{e}"));
        let rows = validate::compare(&topo, &model, &measured).expect("every row predictable");
        let pairs: Vec<(&Measurement, &Row)> = measured.iter().zip(&rows).collect();
        let name = folder.file_name().expect("a folder name").to_string_lossy().into_owned();

        let copies: Vec<&Row> =
            pairs.iter().filter(|(m, r)| m.op == "copy" && m.bytes >= 64 << 20 && r.error.is_some()).map(|p| p.1).collect();
        print_rows(&format!("{name}: copies from 64 MiB"), &copies);
        for r in &copies {
            let error = r.error.expect("kept for having one");
            assert!(error.abs() <= 0.10, "{name}: {} {}: {:+.1}% is over 10%", r.series, r.label, error * 100.0);
        }

        let nccl_choosing = |m: &Measurement| m.algo.as_deref() == Some("auto") && m.proto.as_deref() == Some("auto");
        let allreduces: Vec<Row> =
            pairs.iter().filter(|(m, _)| m.op == "allreduce" && nccl_choosing(m) && m.bytes >= 1 << 20).map(|p| p.1.clone()).collect();
        print_rows(&format!("{name}: allreduces with NCCL choosing, 1 MiB up"), &allreduces.iter().collect::<Vec<_>>());
        for series in validate::summarize(&allreduces, None, |_| true).iter().filter(|s| s.band == Band::All) {
            let median = series.errors.median_abs;
            println!("{}: median absolute error {:.1}%", series.series, median * 100.0);
            assert!(median <= 0.10, "{name}: {}: median error {:.1}% is over 10%", series.series, median * 100.0);
        }

        let sequences: Vec<&Row> = pairs.iter().filter(|(m, _)| m.op == ALLREDUCE_SEQUENCE).map(|p| p.1).collect();
        print_rows(&format!("{name}: LLM allreduce passes"), &sequences);
        for r in &sequences {
            let error = r.error.unwrap_or_else(|| panic!("{name}: {} has no prediction: {}", r.series, r.note));
            assert!(error.abs() <= 0.15, "{name}: {} {}: {:+.1}% is over 15%", r.series, r.label, error * 100.0);
        }
        checked += copies.len() + allreduces.len() + sequences.len();
    }
    assert!(checked > 0, "no runner measurement was checked");
}

#[test]
fn eight_h200_ring_at_4_gib_is_near_the_public_figure() {
    // Public: 365-370 GB/s bus bandwidth on 8x H100/H200 without NVLS.
    let bytes = Bytes::gib(4);
    let (topo, calibrated) = preset("hgx-h200", None, &[]);
    let (_, public) = preset("hgx-h200", None, &["base"]);
    let ring = |model: &HardwareModel| busbw(&topo, model, allreduce(&topo, 8, bytes, Mode::Nvswitch, Choice::Fixed(Algorithm::Ring)));
    let (from_public, from_calibrated) = (ring(&public), ring(&calibrated));
    println!(
        "8x H200, 4 GiB ring allreduce, busbw: NCCL-derived base model {from_public:.1} GB/s ({:+.1}%), calibrated on the 2-GPU VM {from_calibrated:.1} GB/s ({:+.1}%); public 365-370",
        off_range(from_public, 365.0, 370.0) * 100.0,
        off_range(from_calibrated, 365.0, 370.0) * 100.0
    );
    assert!(off_range(from_public, 365.0, 370.0).abs() <= 0.10, "base model {from_public:.1} GB/s is more than 10% off 365-370");
    // The 2-GPU machine itself peaks at 340 GB/s at 2 GiB; its calibrated
    // model lands 10.1% under the public range (the README says so).
    assert!(
        off_range(from_calibrated, 365.0, 370.0).abs() <= 0.12,
        "calibrated model {from_calibrated:.1} GB/s is more than 12% off 365-370"
    );
}

#[test]
fn eight_h100_and_a100_match_the_public_ring_and_nvls_figures() {
    let bytes = Bytes::gib(4);
    let (h100, model) = preset("hgx-h100", None, &[]);
    let ring = busbw(&h100, &model, allreduce(&h100, 8, bytes, Mode::Nvswitch, Choice::Fixed(Algorithm::Ring)));
    let nvls = busbw(&h100, &model, allreduce(&h100, 8, bytes, Mode::Nvswitch, Choice::Fixed(Algorithm::Nvls)));
    let (a100, a100_model) = preset("hgx-a100", None, &[]);
    let a100_ring = busbw(&a100, &a100_model, allreduce(&a100, 8, bytes, Mode::Nvswitch, Choice::Auto));
    println!("8x H100 ring {ring:.1} GB/s (public 365-370, {:+.1}%)", off_range(ring, 365.0, 370.0) * 100.0);
    println!("8x H100 NVLS {nvls:.1} GB/s (public about 480, {:+.1}%)", (nvls / 480.0 - 1.0) * 100.0);
    println!("8x A100 auto {a100_ring:.1} GB/s (public 232, {:+.1}%)", (a100_ring / 232.0 - 1.0) * 100.0);
    assert!(off_range(ring, 365.0, 370.0).abs() <= 0.05, "H100 ring {ring:.1} GB/s");
    assert!((nvls / 480.0 - 1.0).abs() <= 0.08, "H100 NVLS {nvls:.1} GB/s");
    assert!((a100_ring / 232.0 - 1.0).abs() <= 0.08, "A100 {a100_ring:.1} GB/s");
}

#[test]
fn h100_ring_bus_bandwidth_holds_from_2_to_8_gpus() {
    // Public: 365-370 GB/s ring bus bandwidth on H100 SXM "2 to 8 GPUs"
    // (shared/reference/hardware.md). The one public figure that says how a
    // ring behaves as the group grows; within 5% at every count.
    let (h100, model) = preset("hgx-h100", None, &[]);
    for gpus in [2, 4, 8] {
        let ring = busbw(&h100, &model, allreduce(&h100, gpus, Bytes::gib(4), Mode::Nvswitch, Choice::Fixed(Algorithm::Ring)));
        let off = off_range(ring, 365.0, 370.0);
        println!("{gpus}x H100, 4 GiB ring: {ring:.1} GB/s ({:+.1}% from 365-370)", off * 100.0);
        assert!(off.abs() <= 0.05, "{gpus} GPUs: {ring:.1} GB/s is more than 5% off 365-370");
    }
}

#[test]
fn an_eight_byte_allreduce_on_two_h200_takes_about_ten_microseconds() {
    let measured = h200_measurements()
        .into_iter()
        .find(|m| m.op == "allreduce" && m.transport.as_deref() == Some("nvswitch") && m.bytes == 8)
        .expect("the shared file has the 8 B point");
    let (topo, model) = preset("hgx-h200", Some(2), &[]);
    let outcome = collective::simulate(&topo, &model, allreduce(&topo, 2, Bytes(8), Mode::Nvswitch, Choice::Auto)).unwrap();
    let error = outcome.time.as_us() / measured.time_us - 1.0;
    println!(
        "8 B allreduce on 2x H200: predicted {} ({}/{}), measured {} us, error {:+.1}%",
        outcome.time,
        outcome.algorithm,
        outcome.protocol,
        measured.time_us,
        error * 100.0
    );
    assert!(error.abs() <= 0.20);
}

#[test]
fn one_shot_beats_ring_for_16_kib_on_eight_gpus() {
    let (topo, model) = preset("hgx-h200", None, &[]);
    let time = |algorithm| {
        collective::simulate(&topo, &model, allreduce(&topo, 8, Bytes::kib(16), Mode::Nvswitch, Choice::Fixed(algorithm))).unwrap().time
    };
    let (one_shot, ring) = (time(Algorithm::OneShot), time(Algorithm::Ring));
    println!("16 KiB allreduce on 8x H200: one-shot {one_shot}, ring {ring}");
    assert!(one_shot < ring);
}

#[test]
fn several_rings_on_the_h20_mesh_beat_a_single_ring() {
    let (topo, model) = preset("h20-nvlink-mesh", None, &[]);
    let request = allreduce(&topo, 8, Bytes::gib(1), Mode::Nvlink, Choice::Fixed(Algorithm::Ring));
    let time = |rings: usize| {
        let plan = Plan::with_ring_limit(&topo, &model, request.clone(), rings).unwrap();
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
