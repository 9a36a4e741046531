//! `icsim run` and `icsim llm` end to end: every shipped experiment runs and
//! writes its results and plots; the numbers the issue names hold; bad
//! experiments stop with a message that names the file, the key and what is
//! allowed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{assert_png, icsim_in, shared, stderr as stderr_of, succeeded};

/// Fields every result object carries: the interface others read.
const FIELDS: &[&str] = &[
    "label",
    "mode",
    "topology",
    "gpus",
    "tp",
    "model",
    "prefill_allreduce",
    "prefill_algo",
    "decode_allreduce",
    "decode_algo",
    "tp_bytes_per_gpu",
    "prefill_comm_ms",
    "decode_comm_ms",
    "compute_ms",
    "launch_wait_ms",
    "ttft_ms",
    "total_ms",
    "comm_share",
    "busiest_link",
    "busiest_link_util",
    "naive_comm_ms",
    "naive_comm_ms_per_direction",
];

const PLOTS: &[&str] = &["time_breakdown", "allreduce_busbw", "layer_timeline"];

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh folder for one test's files, under cargo's temporary folder.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("llm-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// Runs icsim in `folder`, which must succeed; returns its stdout.
fn succeed(args: &[&str], folder: &Path) -> String {
    succeeded(&icsim_in(args, folder))
}

fn results(json: &str) -> Vec<Value> {
    let document: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}):\n{json}"));
    document["results"].as_array().cloned().expect("a results array")
}

fn number(result: &Value, field: &str) -> f64 {
    result[field].as_f64().unwrap_or_else(|| panic!("{field} is not a number in {result}"))
}

fn by_label<'a>(results: &'a [Value], label: &str) -> &'a Value {
    results.iter().find(|r| r["label"] == label).unwrap_or_else(|| panic!("no result labelled {label}"))
}

/// One shipped experiment, run once for all tests.
struct ShippedRun {
    name: String,
    out: PathBuf,
    stdout: String,
}

fn shipped_runs() -> &'static [ShippedRun] {
    static RUNS: OnceLock<Vec<ShippedRun>> = OnceLock::new();
    RUNS.get_or_init(|| {
        let mut files: Vec<PathBuf> = std::fs::read_dir(repository().join("configs"))
            .expect("configs/")
            .map(|entry| entry.expect("a folder entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|file| {
                let name = file.file_stem().expect("a file name").to_string_lossy().into_owned();
                let out = scratch(&format!("shipped-{name}"));
                let file_arg = file.to_string_lossy();
                let stdout = succeed(&["run", &file_arg, "--out", &out.to_string_lossy(), "--format", "json"], repository());
                ShippedRun { name, out, stdout }
            })
            .collect()
    })
}

fn shipped(name: &str) -> Vec<Value> {
    let run = shipped_runs().iter().find(|r| r.name == name).unwrap_or_else(|| panic!("configs/{name}.toml is shipped"));
    results(&run.stdout)
}

#[test]
fn every_shipped_experiment_writes_its_results_and_plots() {
    let runs = shipped_runs();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    for expected in ["default", "h200-tp2-vs-tp8", "pcie-generations"] {
        assert!(names.contains(&expected), "configs/{expected}.toml ran: {names:?}");
    }
    for run in runs {
        let printed = results(&run.stdout);
        assert!(!printed.is_empty(), "{}: no rows", run.name);
        for result in &printed {
            for field in FIELDS {
                assert!(result.get(*field).is_some_and(|v| !v.is_null()), "{}: {field} missing in {result}", run.name);
            }
            let parts = number(result, "compute_ms")
                + number(result, "launch_wait_ms")
                + number(result, "prefill_comm_ms")
                + number(result, "decode_comm_ms");
            assert!(
                (parts / number(result, "total_ms") - 1.0).abs() < 1e-6,
                "{}: total is not compute + launches + communication",
                run.name
            );
            assert!(number(result, "ttft_ms") < number(result, "total_ms"));
            assert!((0.0..1.0).contains(&number(result, "comm_share")));
        }
        let written = std::fs::read_to_string(run.out.join("results.json")).expect("results.json");
        assert_eq!(results(&written), printed, "{}: results.json holds what was printed", run.name);
        let csv = std::fs::read_to_string(run.out.join("results.csv")).expect("results.csv");
        assert_eq!(csv.lines().count(), printed.len() + 1, "{}: a header and one line per mode", run.name);
        assert!(csv.lines().next().is_some_and(|header| FIELDS.iter().all(|f| header.split(',').any(|c| c == *f))));
        for plot in PLOTS {
            assert_png(&run.out.join(format!("{plot}.png")));
            let svg = std::fs::read_to_string(run.out.join(format!("{plot}.svg"))).expect("an SVG beside the PNG");
            assert!(svg.starts_with("<svg"), "{plot}.svg");
        }
    }
}

#[test]
fn seventy_b_at_tp8_sends_38_8_gb_a_gpu_and_nvswitch_leads_while_shm_trails_far_behind() {
    let results = shipped("default");
    let labels: Vec<&str> = results.iter().filter_map(|r| r["label"].as_str()).collect();
    assert_eq!(labels, ["nvswitch", "nvlink", "p2p", "shm"]);
    for result in &results {
        // 80 layers x 2 allreduces x (8192 + 256) tokens x 8192 x 2 B = 22.15 GB,
        // and the embedding's allreduce (161 a pass), times 2(n-1)/n = 1.75: 39.00 GB;
        // and 257 gathers of 128256 bf16 logits, times (n-1)/n: 0.06 GB.
        let gb = number(result, "tp_bytes_per_gpu") / 1e9;
        assert!((gb - 39.06).abs() < 0.01, "{}: {gb} GB", result["label"]);
        assert_eq!(result["prefill_allreduce"], "128MiB");
        assert_eq!(result["decode_allreduce"], "16KiB");
    }
    let (nvswitch, shm) = (by_label(&results, "nvswitch"), by_label(&results, "shm"));
    for other in &results {
        if other["label"] != "nvswitch" {
            for field in ["prefill_comm_ms", "ttft_ms", "total_ms", "comm_share"] {
                assert!(number(nvswitch, field) < number(other, field), "NVSwitch is fastest in {field}: {nvswitch} vs {other}");
            }
        }
        if other["label"] != "shm" {
            for field in ["prefill_comm_ms", "ttft_ms", "total_ms", "comm_share"] {
                assert!(number(shm, field) > number(other, field), "SHM is slowest in {field}: {shm} vs {other}");
            }
        }
    }
    assert!(number(shm, "total_ms") > 1.5 * number(nvswitch, "total_ms"), "SHM over Gen4 is far slower than NVSwitch");
    assert!(number(shm, "prefill_comm_ms") > 20.0 * number(nvswitch, "prefill_comm_ms"));
    // The vendor's arithmetic: 39.06 GB over 900 GB/s is 43 ms, over 450 GB/s per direction 87 ms.
    assert!((number(nvswitch, "naive_comm_ms") - 43.39).abs() < 0.1, "{nvswitch}");
    assert!((number(nvswitch, "naive_comm_ms_per_direction") - 86.79).abs() < 0.1, "{nvswitch}");
    assert!((number(by_label(&results, "nvlink"), "headline_gbps") - 128.0).abs() < 0.01);
    assert!((number(shm, "headline_gbps") - 63.0).abs() < 0.1);
}

#[test]
fn seventy_b_at_tp2_sends_22_gb_a_gpu() {
    let results = shipped("h200-tp2-vs-tp8");
    // The layers' 22.15 and 38.76 GB with the embedding's allreduce and the logits' gathers.
    for (label, expected_gb) in [("tp2-nvswitch", 22.32), ("tp2-shm", 22.32), ("tp8-nvswitch", 39.06)] {
        let gb = number(by_label(&results, label), "tp_bytes_per_gpu") / 1e9;
        assert!((gb - expected_gb).abs() < 0.01, "{label}: {gb} GB");
    }
    let (tp2, tp8) = (by_label(&results, "tp2-nvswitch"), by_label(&results, "tp8-nvswitch"));
    // The prefill's large kernels split about four ways; a decode step's
    // fixed costs (every kernel's floor and launch) do not split at all.
    assert!(number(tp8, "prefill_compute_ms") < number(tp2, "prefill_compute_ms") / 3.5, "TP=8 splits the prefill four ways");
    assert!(number(tp8, "decode_compute_ms") > number(tp2, "decode_compute_ms") / 4.0, "TP=8 cannot split a decode step's floors");
}

/// The shared measurements' 128 MiB allreduce of 2x H200 over NVSwitch, µs.
fn measured_128mib_allreduce_us() -> f64 {
    let slice = std::fs::read_to_string(repository().join("tests/data/h200x2-slice.jsonl")).expect("the test slice");
    slice
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .find(|m| m["op"] == "allreduce" && m["transport"] == "nvswitch" && m["bytes"] == 134_217_728 && m["ranks"] == 2)
        .and_then(|m| m["time_us"].as_f64())
        .expect("the 128 MiB allreduce in the slice")
}

#[test]
fn h200_tp2_prefill_allreduces_take_what_the_measurements_imply() {
    // The decoder layers only: two allreduces a layer, as the measurements' calls.
    let args = ["llm", "--model", "llama-3.1-70b", "--prompt", "8192", "--output", "256", "--tp", "2", "--scope", "layers"];
    let stdout = succeed(
        &[&args[..], &["--topology", "hgx-h200", "--gpus", "2", "--transport", "nvswitch", "--format", "json"]].concat(),
        repository(),
    );
    let results = results(&stdout);
    let [result] = &results[..] else { panic!("one mode: {results:?}") };
    assert_eq!(result["prefill_allreduce"], "128MiB");
    let calls = number(result, "prefill_allreduces");
    assert_eq!(calls, 160.0, "80 layers x 2");
    let simulated_ms = number(result, "prefill_comm_ms");
    let measured_ms = calls * measured_128mib_allreduce_us() / 1e3;
    let error = simulated_ms / measured_ms - 1.0;
    println!(
        "TP=2 on 2x H200: 160 allreduces of 128 MiB take {simulated_ms:.2} ms simulated, {measured_ms:.2} ms as measured ({:+.1}%)",
        100.0 * error
    );
    assert!(error.abs() <= 0.15, "simulated {simulated_ms:.2} ms against {measured_ms:.2} ms measured");
}

#[test]
fn the_test_slice_is_verbatim_from_the_shared_measurements() {
    let shared_file = shared().join("calibration/h200x2-nvswitch/measurements.jsonl");
    let Ok(shared_text) = std::fs::read_to_string(&shared_file) else {
        println!("{} is not here: nothing to compare the slice with", shared_file.display());
        return;
    };
    let shared_lines: Vec<&str> = shared_text.lines().collect();
    let slice = std::fs::read_to_string(repository().join("tests/data/h200x2-slice.jsonl")).expect("the test slice");
    for line in slice.lines().filter(|line| !line.starts_with('#')) {
        assert!(shared_lines.contains(&line), "not in {}: {line}", shared_file.display());
    }
}

#[test]
fn a_plain_run_replays_the_default_experiment_from_any_folder() {
    let folder = scratch("plain");
    let stdout = succeed(&[], &folder);
    for label in ["nvswitch", "nvlink", "p2p", "shm"] {
        assert!(stdout.lines().any(|line| line.starts_with(label)), "no {label} row in:\n{stdout}");
    }
    assert!(stdout.contains("tp_gb_per_gpu") && stdout.contains("39.06"), "{stdout}");
    let out = folder.join("results/default");
    assert_eq!(results(&std::fs::read_to_string(out.join("results.json")).expect("results.json")).len(), 4);
    for plot in PLOTS {
        assert_png(&out.join(format!("{plot}.png")));
    }
}

#[test]
fn llm_offers_every_mode_the_topology_has() {
    let stdout =
        succeed(&["llm", "--tp", "8", "--topology", "hgx-h20", "--prompt", "1024", "--output", "4", "--format", "json"], repository());
    let modes: Vec<String> = results(&stdout).iter().filter_map(|r| r["mode"].as_str().map(String::from)).collect();
    assert_eq!(modes, ["nvswitch", "p2p", "shm"], "no direct NVLink mesh on an NVSwitch board");
    let csv = succeed(
        &["llm", "--tp", "4", "--gpus", "4", "--topology", "h20-nvlink-mesh", "--transport", "nvlink", "--format", "csv"],
        repository(),
    );
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(csv.starts_with("label,mode,"), "{csv}");
}

#[test]
fn bad_experiments_name_the_file_the_key_and_what_is_allowed() {
    let folder = scratch("bad");
    let good = "model = \"llama-3.1-70b\"\ntp = 8\ntopology = \"hgx-h20\"\n[query]\nprompt = 8192\noutput = 256\n[[mode]]\ntransport = \"nvswitch\"\n";
    let cases = [
        ("unknown-model", good.replace("llama-3.1-70b", "llama-3.1-7b"), "key `model`", "llama-3.1-70b"),
        ("tp-too-large", good.replace("tp = 8", "tp = 16"), "key `tp`", "allowed: 1, 2, 4, 8"),
        ("missing-transport", good.replace("\"nvswitch\"", "\"nvlink\""), "key `mode[0].transport`", "allowed on hgx-h20: nvswitch"),
        ("typo", good.replace("output = 256", "outptu = 256"), "outptu", "`output`"),
        ("unknown-transport", good.replace("\"nvswitch\"", "\"infiniband\""), "key `mode[0].transport`", "shm"),
    ];
    for (name, experiment, key, allowed) in cases {
        let file = folder.join(format!("{name}.toml"));
        std::fs::write(&file, experiment).expect("an experiment file");
        let output = icsim_in(&["run", &file.to_string_lossy(), "--out", &folder.join("out").to_string_lossy()], &folder);
        let stderr = stderr_of(&output);
        assert!(!output.status.success(), "{name}: accepted");
        assert!(stderr.contains(&format!("{name}.toml")) && stderr.contains(key) && stderr.contains(allowed), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    let output = icsim_in(&["llm", "--tp", "3", "--topology", "hgx-h20"], &folder);
    let stderr = stderr_of(&output);
    assert!(!output.status.success() && stderr.contains("command line: key `--tp`") && stderr.contains("allowed: 1, 2, 4, 8"), "{stderr}");
}

#[test]
fn llm_prices_its_query_and_a_cost_file_changes_the_price() {
    let folder = scratch("cost");
    let args = ["llm", "--tp", "8", "--prompt", "1024", "--output", "16", "--transport", "nvswitch"];
    let json = |extra: &[&str]| {
        let all: Vec<&str> = args.iter().chain(extra).copied().collect();
        results(&succeed(&all, &folder)).remove(0)
    };
    let shipped = json(&["--format", "json"]);
    let tokens_per_s = number(&shipped, "tokens_per_s");
    assert!((tokens_per_s - 16.0 / (number(&shipped, "total_ms") / 1e3)).abs() < 1e-9, "{shipped}");
    assert!((number(&shipped, "tokens_per_s_per_gpu") - tokens_per_s / 8.0).abs() < 1e-9);
    let usd = number(&shipped, "usd_per_million_tokens");
    assert!(usd > 0.0 && shipped["cost_error"].is_null(), "{shipped}");
    std::fs::write(folder.join("rent.toml"), "usd_per_gpu_hour = 2.0\n").unwrap();
    let rented = json(&["--format", "json", "--cost", "rent.toml"]);
    let expected = 2.0 * 8.0 / 3600.0 * (number(&rented, "total_ms") / 1e3) / 16.0 * 1e6;
    assert!((number(&rented, "usd_per_million_tokens") - expected).abs() < 1e-6 * expected, "{rented}");
    assert_ne!(number(&rented, "usd_per_million_tokens"), usd);
    let table = succeed(&args, &folder);
    assert!(table.contains("what a query yields and costs") && table.contains("usd_per_million_tokens"), "{table}");
}
