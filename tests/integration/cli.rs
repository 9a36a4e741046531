//! The command line end to end: what a user types and what they read.

use crate::common::{assert_png, h200_measurements_path, icsim, icsim_json, stderr, stdout};

#[test]
fn collective_prints_the_json_interface() {
    let value = icsim_json(&[
        "collective",
        "--topology",
        "hgx-h200",
        "--gpus",
        "8",
        "--op",
        "allreduce",
        "--sizes",
        "1KiB..1MiB:x32",
        "--transport",
        "nvswitch",
        "--format",
        "json",
    ]);
    let results = value["results"].as_array().expect("results array");
    assert_eq!(results.len(), 3, "1KiB, 32KiB, 1MiB");
    for row in results {
        for field in ["bytes", "time_us", "algbw_gbps", "busbw_gbps", "algo", "proto", "transport", "busiest_link"] {
            assert!(!row[field].is_null(), "missing {field} in {row}");
        }
        assert_eq!(row["transport"], "nvswitch");
    }
    assert_eq!(results[2]["bytes"], 1 << 20);
}

#[test]
fn tables_and_csv_carry_the_same_rows() {
    let table = stdout(&icsim(&["collective", "--sizes", "1MiB,16MiB"]));
    assert_eq!(table.lines().count(), 4, "a title, a header and two rows: {table}");
    assert_eq!(table.lines().next(), Some("allreduce of float32 on hgx-h200: 8 GPUs (h200, host spr-2s), called as nccl-graph"));
    assert!(table.lines().nth(1).unwrap().contains("busbw_gbps"));
    let csv = stdout(&icsim(&["collective", "--sizes", "1MiB,16MiB", "--format", "csv"]));
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("op,dtype,topology,gpu,host,gpus,stack,bytes,size,time_us,"), "every row names its call: {csv}");
}

#[test]
fn comparing_algorithms_prints_where_each_is_fastest() {
    let output = icsim(&["collective", "--topology", "hgx-h200", "--algo", "oneshot,twoshot,ring", "--sizes", "1KiB..64MiB:x4"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let summary = text.split("fastest by size:").nth(1).expect("a crossover summary");
    println!("{summary}");
    let first = summary.lines().find(|l| !l.trim().is_empty()).unwrap();
    assert!(first.trim_start().starts_with("oneshot") && first.contains("from 1KiB"), "{summary}");
    assert!(summary.contains("ring"), "ring takes over for large messages: {summary}");
}

#[test]
fn a_preset_used_beyond_its_fit_says_so() {
    // The preset loads several fitted overlays; what each was fitted on
    // adds up, and a GPU count none of them saw is flagged.
    let beyond = icsim(&["collective", "--topology", "hgx-h200", "--gpus", "3", "--sizes", "1MiB"]);
    assert!(beyond.status.success(), "{}", stderr(&beyond));
    assert!(stderr(&beyond).contains("3 GPUs (fitted on 2, 4, 8)"), "{}", stderr(&beyond));
    let within = icsim(&["collective", "--topology", "hgx-h200", "--gpus", "4", "--sizes", "1MiB"]);
    assert!(within.status.success() && !stderr(&within).contains("outside"), "{}", stderr(&within));
}

#[test]
fn a_mode_the_topology_lacks_is_a_clear_error() {
    let output = icsim(&["collective", "--topology", "pcie-gen4-8gpu", "--transport", "nvlink", "--sizes", "1MiB"]);
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(error.contains("nvlink") && error.contains("pcie-gen4-8gpu"), "{error}");
    assert!(!error.contains("panicked"), "{error}");
}

#[test]
fn bad_sizes_and_units_say_what_is_accepted() {
    let error = stderr(&icsim(&["collective", "--sizes", "12parsecs"]));
    assert!(error.contains("parsecs") && error.contains("MiB"), "{error}");
    let error = stderr(&icsim(&["collective", "--topology", "hgx-h300"]));
    assert!(error.contains("hgx-h200") && !error.contains("panicked"), "{error}");
}

#[test]
fn the_topology_help_names_every_preset() {
    let help = stdout(&icsim(&["collective", "--help"]));
    for (name, _) in icsim::topology::PRESETS {
        assert!(help.contains(name), "`collective --help` does not name the preset {name}:\n{help}");
    }
}

#[test]
fn topo_show_describes_links_and_relations() {
    let output = icsim(&["topo", "show", "pcie-gen4-8gpu"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("PIX") && text.contains("SYS") && text.contains("socket link"), "{text}");
}

#[test]
fn validate_reports_every_point_and_the_error_statistics() {
    let path = h200_measurements_path();
    let plot = std::env::temp_dir().join(format!("icsim-validation-{}.png", std::process::id()));
    let value = icsim_json(&[
        "calibrate",
        "validate",
        path.to_str().unwrap(),
        "--topology",
        "hgx-h200",
        "--gpus",
        "2",
        "--format",
        "json",
        "--plot",
        plot.to_str().unwrap(),
        "--before",
        "base",
    ]);
    assert_png(&plot);
    std::fs::remove_file(&plot).unwrap();
    let rows = value["results"].as_array().unwrap();
    assert_eq!(rows.len(), 103, "one row per measurement");
    let summary = value["summary"].as_array().unwrap();
    let nvswitch: Vec<&serde_json::Value> = summary.iter().filter(|s| s["series"] == "allreduce nvswitch ranks=2").collect();
    let bands: Vec<&str> = nvswitch.iter().map(|s| s["sizes"].as_str().unwrap()).collect();
    assert_eq!(bands, ["all sizes", "< 64 KiB", "64 KiB - 16 MiB", ">= 16 MiB"]);
    let (after, before) =
        (nvswitch[0]["median_abs_error_pct"].as_f64().unwrap(), nvswitch[0]["before_median_abs_error_pct"].as_f64().unwrap());
    assert!(after < 10.0, "calibrated: {after}%");
    assert!(after < before, "calibration should bring the median error down: {before}% -> {after}%");
}

#[test]
fn validate_warns_when_rows_were_measured_on_another_gpu_than_the_topologys() {
    let gb200 = concat!(env!("CARGO_MANIFEST_DIR"), "/models/hardware/measurements/public-aiconfigurator/gb200.jsonl");
    let on_h200 = icsim(&["calibrate", "validate", gb200, "--format", "json"]);
    let warning = stderr(&on_h200);
    assert!(on_h200.status.success(), "{warning}");
    assert!(
        warning.contains(
            "gb200.jsonl: 252 rows were measured on NVIDIA GB200 (`b200` in the hardware model), simulated here on hgx-h200's h200"
        ),
        "{warning}"
    );
    let on_its_rack = icsim(&["calibrate", "validate", gb200, "--topology", "gb200-nvl72", "--gpus", "4", "--format", "json"]);
    assert!(on_its_rack.status.success() && !stderr(&on_its_rack).contains("measured on"), "{}", stderr(&on_its_rack));
}

/// Runs `calibrate fit` with `args` into a temporary overlay named after
/// `name`, which must succeed: the overlay's text and what the fit printed.
fn fit_overlay(name: &str, args: &[&str]) -> (String, String) {
    let out = std::env::temp_dir().join(format!("icsim-{name}-{}.toml", std::process::id()));
    let mut full = vec!["calibrate", "fit"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--out", out.to_str().unwrap()]);
    let output = icsim(&full);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    (text, stdout(&output))
}

#[test]
fn a_fit_on_blackwell_places_only_what_blackwell_adds_to_latency() {
    // B200's thread blocks follow H200's (`like = "sm90"`): its calls place
    // only the architecture's own call and step latency, nothing fitted on
    // H200 (callers, protocols, thread blocks) moves.
    let gb200 = concat!(env!("CARGO_MANIFEST_DIR"), "/models/hardware/measurements/public-aiconfigurator/gb200.jsonl");
    let (text, _) = fit_overlay("blackwell", &[gb200, "--topology", "gb200-nvl72", "--gpus", "4", "--system", "gb200"]);
    let keys: Vec<&str> =
        text.lines().filter(|l| l.contains(" = ") && !l.starts_with('#')).map(|l| l.split(" = ").next().unwrap()).collect();
    assert!(text.contains("[cta.sm100]"), "{text}");
    assert_eq!(keys[..2], ["call_latency", "step_latency"], "{text}");
    assert!(!text.contains("[stack.") && !text.contains("[protocol."), "{text}");
}

#[test]
fn eager_calls_alone_never_place_nccls_latency() {
    // The public tables are nccl-tests launched eagerly: each call carries
    // the caller's cost, which no step count tells from NCCL's start. They
    // join the latency groups beside raw NCCL in a graph, never alone.
    let public = concat!(env!("CARGO_MANIFEST_DIR"), "/models/hardware/measurements/public-aiconfigurator/h200.jsonl");
    let (text, printed) =
        fit_overlay("eager-only", &[public, "--topology", "hgx-h200", "--hardware", "base", "--allow-bounds", "--evaluations", "60"]);
    assert!(printed.contains("not fitted: ll latency over nvlink: no nccl-graph calls"), "{printed}");
    assert!(!text.contains("[protocol."), "{text}");
}

#[test]
fn one_step_count_cannot_place_how_far_channels_end_apart() {
    // The shared torch file is 2-rank allreduce only: every call walks 2
    // steps a loop, so the slowest channel's lag cannot be told from a
    // step's latency, and the fit says what would tell them apart.
    let path = h200_measurements_path();
    let (text, printed) = fit_overlay(
        "one-step-count",
        &[path.to_str().unwrap(), "--topology", "hgx-h200", "--gpus", "2", "--hardware", "base", "--allow-bounds", "--evaluations", "60"],
    );
    assert!(printed.contains("not fitted: channels ending apart: "), "{printed}");
    assert!(printed.contains("and 1 step count(s); needs LL calls over NVLink"), "{printed}");
    assert!(!text.contains("[skew]"), "{text}");
}

#[test]
fn fit_writes_an_overlay_with_its_provenance() {
    let dir = std::env::temp_dir().join(format!("icsim-fit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("fitted.toml");
    let path = h200_measurements_path();
    let output = icsim(&[
        "calibrate",
        "fit",
        path.to_str().unwrap(),
        "--topology",
        "hgx-h200",
        "--gpus",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--evaluations",
        "60",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("[[provenance]]") && text.contains("measurements.jsonl"), "{text}");
    // The overlay loads as a model file.
    let check = icsim(&["collective", "--sizes", "1MiB", "--hardware", out.to_str().unwrap()]);
    assert!(check.status.success(), "{}", stderr(&check));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_forced_channel_count_the_call_does_not_run_is_noted_in_the_row_and_on_stderr() {
    let args = ["collective", "--topology", "hgx-h200", "--algo", "ring", "--proto", "ll", "--channels", "64", "--sizes", "1MiB"];
    let output = icsim(&[&args[..], &["--format", "json"]].concat());
    assert!(output.status.success(), "{}", stderr(&output));
    let note = "32 of the 64 channels forced: NCCL drops channels from a call this small";
    assert!(stderr(&output).contains(&format!("note: {note}")), "{}", stderr(&output));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(rows["results"][0]["note"], note);
    assert_eq!(rows["results"][0]["channels"], 32);
}

#[test]
fn every_pcie_gpu_runs_collective_and_llm_on_a_pcie_board_and_the_table_names_gpu_and_host() {
    for gpu in ["l4", "l40s", "rtx4090", "rtx5090", "rtx-pro-6000", "a100-pcie", "h100-pcie", "h200-nvl", "v100-pcie"] {
        let board = ["--topology", "pcie-direct-8gpu", "--gpu", gpu, "--host", "epyc-genoa"];
        let collective = [&["collective", "--op", "allreduce", "--sizes", "1MiB"][..], &board[..]].concat();
        assert!(icsim(&collective).status.success(), "collective on {gpu}: {}", stderr(&icsim(&collective)));
        let llm =
            [&["llm", "--model", "llama-3.1-70b", "--prompt", "1024", "--output", "8", "--tp", "8", "--transport", "shm"][..], &board[..]]
                .concat();
        let table = stdout(&icsim(&llm));
        let row = table.lines().find(|l| l.starts_with("shm ")).unwrap_or_else(|| panic!("no shm row for {gpu}: {table}"));
        assert!(row.contains(&format!(" {gpu} ")) && row.contains(" epyc-genoa "), "{gpu}: {row}");
    }
}

#[test]
fn topo_show_prints_every_part_link_and_relation_as_json() {
    let view = icsim_json(&["topo", "show", "hgx-h200", "--format", "json"]);
    assert_eq!(view["gpu"], "h200");
    let nodes = view["nodes"].as_array().unwrap();
    assert_eq!(nodes.iter().filter(|n| n["kind"] == "GPU").count(), 8, "{view}");
    let links = view["links"].as_array().unwrap();
    let nvlink = links.iter().find(|l| l["from"] == "GPU0" && l["to"] == "nvswitch").expect("GPU0's NVLinks");
    assert_eq!(nvlink["kind"], "NVLink gen4 x18");
    assert!(nvlink["gbps"].as_f64().unwrap() > 0.0 && nvlink["latency_us"].as_f64().is_some());
    let relations = view["gpu_relations"].as_array().unwrap();
    assert_eq!(relations.len(), 8);
    assert_eq!(relations[0][0], "X");
    assert_eq!(relations[0][1], "NV18");
    let csv = icsim(&["topo", "show", "hgx-h200", "--format", "csv"]);
    assert_eq!(csv.status.code(), Some(2), "{}", stderr(&csv));
}
