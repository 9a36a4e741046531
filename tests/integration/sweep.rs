//! `icsim sweep` and `icsim diff` end to end: the same CSV whatever the
//! thread count and however the points are sharded, merge errors, a run
//! killed at each file operation leaving the old set of files or the new
//! one, merge refusing result files of another sweep, every
//! shipped sweep, sweep file errors, and what a diff names as the
//! bottleneck before and after.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{assert_png, failed, icsim, succeeded};

const SMALL: &str = "tests/data/sweeps/small.toml";

/// A fresh folder for one test's files, under cargo's temporary folder.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sweep-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

fn run(args: &[&str]) -> String {
    succeeded(&icsim(args))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn one_and_two_threads_write_the_same_csv_and_four_merged_shards_too() {
    let dir = scratch("shards");
    let out = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let stdout = run(&["sweep", SMALL, "--jobs", "1", "--out", &out("one")]);
    assert!(stdout.contains("12 points: 8 ran, 4 cannot run") && stdout.contains("TP=8 cannot run"), "{stdout}");
    run(&["sweep", SMALL, "--jobs", "2", "--out", &out("two")]);
    let csv = read(&dir.join("one/results.csv"));
    assert_eq!(csv, read(&dir.join("two/results.csv")), "--jobs 1 and --jobs 2");
    assert_eq!(csv.lines().count(), 13, "a header and 12 points");
    for shard in 1..=4 {
        run(&["sweep", SMALL, "--shard", &format!("{shard}/4"), "--out", &out(&format!("shard-{shard}"))]);
    }
    let shards: Vec<String> = (1..=4).map(|s| out(&format!("shard-{s}"))).collect();
    let mut args = vec!["sweep", "merge"];
    args.extend(shards.iter().map(String::as_str).rev());
    let merged = out("merged");
    args.extend(["--out", &merged]);
    let stdout = run(&args);
    assert!(stdout.contains("merged 4 shards"), "{stdout}");
    assert_eq!(read(&dir.join("merged/results.csv")), csv, "4 shards merged against one run");
    assert_eq!(read(&dir.join("merged/results.jsonl")), read(&dir.join("one/results.jsonl")));
    for plot in ["ttft", "share", "pareto"] {
        assert_png(&dir.join(format!("merged/{plot}.png")));
    }
    // A missing shard, or one given twice, is refused as bad input.
    let (one, two, three) = (shards[0].as_str(), shards[1].as_str(), shards[2].as_str());
    for (args, expected) in [(vec![one, two, three], "missing shards 4/4"), (vec![one, one], "shard 1/4 is given twice")] {
        let output = icsim(&[&["sweep", "merge"][..], &args].concat());
        let error = failed(&output);
        assert!(error.contains(expected) && output.status.code() == Some(2), "{error}");
    }
}

/// Every entry of `dir` by name: a file's bytes, a folder as empty.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a folder entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, if path.is_dir() { Vec::new() } else { std::fs::read(&path).unwrap() })
        })
        .collect()
}

/// The small sweep with another description, other batches and no pareto
/// plot: another fingerprint, other rows and fewer files.
fn another_sweep(dir: &Path) -> String {
    let text = read(Path::new(SMALL))
        .replace("description = \"test:", "description = \"test B:")
        .replace("values = [1, 2]", "values = [1, 3]")
        .replace("[[plot]]\nkind = \"pareto\"\nname = \"pareto\"", "");
    let path = dir.join("b.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a_sweep_killed_at_any_file_operation_leaves_the_old_set_or_the_new_one() {
    let dir = scratch("killed");
    let (out, fresh, merged) = (dir.join("out"), dir.join("fresh"), dir.join("merged"));
    let b = another_sweep(&dir);
    // A temporary file of an earlier killed run (its process is gone).
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join(".results.4194303-0.partial.csv"), "half").unwrap();
    run(&["sweep", SMALL, "--jobs", "1", "--out", out.to_str().unwrap()]);
    let old = snapshot(&out);
    assert!(!old.keys().any(|name| name.contains("partial")), "the stale temporary file is removed: {:?}", old.keys());
    run(&["sweep", &b, "--jobs", "1", "--out", fresh.to_str().unwrap()]);
    let new = snapshot(&fresh);
    assert!(old.contains_key("pareto.png") && !new.contains_key("pareto.png") && old != new);
    let (mut saw_old, mut saw_new) = (false, false);
    for operation in 1.. {
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        for (name, bytes) in &old {
            std::fs::write(out.join(name), bytes).unwrap();
        }
        let killed = std::process::Command::new(env!("CARGO_BIN_EXE_icsim"))
            .args(["sweep", &b, "--jobs", "1", "--out", out.to_str().unwrap()])
            .env("ICSIM_ABORT_AFTER_FILE_OPS", operation.to_string())
            .output()
            .unwrap();
        if killed.status.success() {
            assert_eq!(snapshot(&out), new, "a run that was not killed writes the new set");
            assert!(operation > 20, "{operation} file operations");
            break;
        }
        // What icsim reads next: merge finishes or removes what the kill left.
        run(&["sweep", "merge", out.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
        let left = snapshot(&out);
        if left == old {
            saw_old = true;
        } else {
            assert!(left == new, "killed after file operation {operation}: {:?}", left.keys());
            saw_new = true;
        }
    }
    assert!(saw_old && saw_new, "kills before and after the commit");
}

#[test]
fn merge_refuses_result_files_of_another_sweep_under_a_manifest() {
    let dir = scratch("mismatch");
    let b = another_sweep(&dir);
    let folder = |name: &str| dir.join(name).to_string_lossy().into_owned();
    for (sweep, shard, name) in [(SMALL, "1/2", "a1"), (SMALL, "2/2", "a2"), (b.as_str(), "1/2", "b1")] {
        run(&["sweep", sweep, "--shard", shard, "--out", &folder(name)]);
    }
    for file in ["results.jsonl", "results.csv"] {
        let original = read(&dir.join("a1").join(file));
        std::fs::copy(dir.join("b1").join(file), dir.join("a1").join(file)).unwrap();
        let output = icsim(&["sweep", "merge", &folder("a1"), &folder("a2"), "--out", &folder("merged")]);
        let error = failed(&output);
        assert_eq!(output.status.code(), Some(2), "{error}");
        assert!(error.contains(&format!("a1/{file}: line")) && error.contains("belongs to sweep"), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
        std::fs::write(dir.join("a1").join(file), original).unwrap();
    }
    run(&["sweep", "merge", &folder("a1"), &folder("a2"), "--out", &folder("merged")]);
}

#[test]
fn every_shipped_sweep_loads_and_the_small_ones_run_with_their_plots() {
    let dir = scratch("shipped");
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/sweeps"))
        .expect("configs/sweeps/")
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for file in &files {
        let sweep = icsim::sweep::Sweep::load(file).unwrap_or_else(|e| panic!("{e}"));
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "capacity-10k" {
            // docs/guide.md quotes its size twice: the shipped sweeps' table and `10,000 points`.
            let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md")).expect("docs/guide.md");
            let guide = guide.split_whitespace().collect::<Vec<_>>().join(" ");
            let count = crate::common::thousands(sweep.len() as u64);
            for quoted in [
                format!("| `configs/sweeps/capacity-10k.toml` | {count} |"),
                format!("runs {count} points of the default experiment's size"),
            ] {
                assert!(guide.contains(&quoted), "docs/guide.md should say `{quoted}` ({name}.toml has {count} points)");
            }
            continue;
        }
        let out = dir.join(&name);
        let stdout = run(&["sweep", &file.to_string_lossy(), "--out", &out.to_string_lossy()]);
        assert!(stdout.contains("0 cannot run"), "{name}: {stdout}");
        for plot in &sweep.plots {
            let plot = plot.name.as_ref().unwrap_or_else(|| panic!("{name}: name every plot"));
            assert_png(&out.join(format!("{plot}.png")));
        }
    }
}

#[test]
fn the_vendor_comparison_draws_both_series_in_one_plot() {
    let dir = scratch("vendor");
    run(&["sweep", "configs/sweeps/vendor-tp2-batch.toml", "--out", &dir.to_string_lossy()]);
    let svg = read(&dir.join("tokens-per-gpu.svg"));
    for name in ["icsim, nvswitch", "icsim, point-to-point", "NVIDIA model, NVSwitch", "NVIDIA model, point-to-point"] {
        assert!(svg.contains(name), "{name} in the legend");
    }
}

#[test]
fn a_bad_sweep_file_stops_with_the_file_the_key_and_what_is_allowed() {
    let dir = scratch("bad");
    let file = dir.join("bad.toml");
    let text = read(Path::new(env!("CARGO_MANIFEST_DIR")).join(SMALL).as_path()).replace("key = \"tp\"", "key = \"tensor_parallel\"");
    std::fs::write(&file, text).unwrap();
    let error = failed(&icsim(&["sweep", &file.to_string_lossy()]));
    assert!(
        error.contains("bad.toml: key `axis[0].key`") && error.contains("\"tensor_parallel\"") && error.contains("query.batch"),
        "{error}"
    );
    let error = failed(&icsim(&["diff", "configs/sweeps/base/h20-nvswitch.toml", "--set", "topology.nvlink_links=0"]));
    assert!(error.contains("command line: key `--set`") && error.contains("from 1 to 64"), "{error}");
    let output = icsim(&["diff", "configs/sweeps/base/h20-nvswitch.toml", "--set", "serve.rate=4"]);
    let error = failed(&output);
    assert!(error.contains("--set serve.rate=4") && error.contains("[serve] table") && output.status.code() == Some(2), "{error}");
}

fn diff(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["diff"];
    all.extend(args);
    all.extend(["--format", "json"]);
    let document: Value = serde_json::from_str(&run(&all)).expect("JSON");
    document["results"].as_array().cloned().expect("a results array")
}

fn phase<'a>(compared: &'a Value, name: &str) -> &'a Value {
    compared["phases"].as_array().unwrap().iter().find(|p| p["phase"] == name).unwrap_or_else(|| panic!("phase {name}"))
}

#[test]
fn diff_names_the_bottleneck_before_and_after() {
    // NVSwitch against the H20's NVLink mesh: the switch port gives way to a pair link.
    let [mesh] = &diff(&["configs/sweeps/base/h20-nvswitch.toml", "--set", "topology=h20-nvlink-mesh", "--set", "transport=nvlink"])[..]
    else {
        panic!("one mode")
    };
    assert_eq!(mesh["bottleneck_before"], "GPU0 -> nvswitch (NVLink gen4 x18)");
    assert_eq!(mesh["bottleneck_after"], "GPU0 -> GPU1 (NVLink gen4 x2)");
    assert_eq!(mesh["bottleneck_moved"], true);
    let ttft = phase(mesh, "prefill (time to first token)");
    assert!(ttft["saved_ms"].as_f64().unwrap() < 0.0, "the mesh is slower to the first token: {ttft}");
    // PCIe Gen4 against Gen5 for SHM: the switch uplink gives way to host
    // memory, which every staged byte crosses twice (the EPYC socket link,
    // four xGMI links, carries far more than one socket's memory bus).
    let compared = diff(&["configs/sweeps/base/h20-pcie.toml", "--set", "topology.pcie_generation=gen5"]);
    let shm = compared.iter().find(|c| c["before"] == "shm").expect("the shm mode");
    assert_eq!(shm["bottleneck_before"], "pcie-sw0 -> cpu0 (PCIe gen4 x16)");
    assert_eq!(shm["bottleneck_after"], "cpu0 <-> mem0 (memory bus, 8 channels, read+write shared)");
    let ttft = phase(shm, "prefill (time to first token)");
    assert!(ttft["saved_ms"].as_f64().unwrap() > 0.0 && ttft["saved_share"].as_f64().unwrap() > 0.05, "{ttft}");
    let links = shm["links"].as_array().unwrap();
    assert!(links.iter().any(|l| l["kind_before"] == "PCIe gen4 x16" && l["kind_after"] == "PCIe gen5 x16"), "{links:?}");
    // The table says the same in words.
    let table = run(&["diff", "configs/sweeps/base/h20-pcie.toml", "--set", "topology.pcie_generation=gen5"]);
    assert!(table.contains("bottleneck before: pcie-sw0 -> cpu0 (PCIe gen4 x16)") && table.contains("the bottleneck moved"), "{table}");
    assert!(table.contains("saved") && table.contains("usd_per_million_tokens"), "{table}");
}

#[test]
fn diff_of_two_files_compares_modes_of_a_label_and_refuses_different_workloads() {
    // The H20 board against the H200 TP=2 file: their `nvswitch` modes pair up.
    let compared = diff(&["configs/sweeps/base/h20-nvswitch.toml", "configs/sweeps/base/h200-tp2.toml"]);
    assert_eq!(compared.len(), 1);
    assert_eq!((&compared[0]["topology_before"], &compared[0]["topology_after"]), (&Value::from("hgx-h20"), &Value::from("hgx-h200")));
    let dir = scratch("workload");
    let other = dir.join("short.toml");
    std::fs::write(&other, read(Path::new("configs/sweeps/base/h20-nvswitch.toml")).replace("prompt = 8192", "prompt = 4096")).unwrap();
    let error = failed(&icsim(&["diff", "configs/sweeps/base/h20-nvswitch.toml", &other.to_string_lossy()]));
    assert!(error.contains("short.toml: key `query.prompt`") && error.contains("one workload"), "{error}");
}

#[test]
fn a_serving_sweep_is_the_same_on_any_thread_count_or_sharded_and_reads_each_knee() {
    const SERVED: &str = "tests/data/sweeps/serve-small.toml";
    let dir = scratch("serving");
    let out = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let stdout = run(&["sweep", SERVED, "--jobs", "1", "--out", &out("one")]);
    assert!(stdout.contains("16 points: 16 ran, 0 cannot run"), "{stdout}");
    assert!(stdout.contains("highest rate_per_usd_hour") && stdout.contains("knee per configuration"), "{stdout}");
    run(&["sweep", SERVED, "--jobs", "2", "--out", &out("two")]);
    let csv = read(&dir.join("one/results.csv"));
    assert_eq!(csv, read(&dir.join("two/results.csv")), "--jobs 1 and --jobs 2");
    for shard in 1..=3 {
        run(&["sweep", SERVED, "--shard", &format!("{shard}/3"), "--out", &out(&format!("shard-{shard}"))]);
    }
    let merged = run(&["sweep", "merge", &out("shard-1"), &out("shard-2"), &out("shard-3"), "--out", &out("merged")]);
    assert_eq!(read(&dir.join("merged/results.csv")), csv, "3 shards merged against one run");
    assert!(merged.contains("knee per configuration"), "{merged}");
    assert_png(&dir.join("merged/ttft.png"));
    let svg = read(&dir.join("merged/ttft.svg"));
    assert!(
        svg.contains("goal: ttft_p99_ms &lt;= 300") && svg.contains("knee: the highest rate meeting the goal"),
        "the bound and the knee"
    );
    // Each configuration's knee is the last rate of its leading run of points
    // meeting the goal, read off the rows.
    let rows: Vec<Value> = read(&dir.join("one/results.jsonl")).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let knee_table = stdout.split("knee per configuration").nth(1).unwrap();
    for label in ["nvswitch", "shm"] {
        let meets: Vec<(f64, bool)> = rows
            .iter()
            .filter(|r| r["label"] == label && r["serve.max_num_batched_tokens"] == 8192)
            .map(|r| (r["serve.rate"].as_f64().unwrap(), r["meets_goal"] == true))
            .collect();
        let knee = meets.iter().take_while(|m| m.1).last().map_or("-".to_string(), |m| m.0.to_string());
        let line = knee_table.lines().find(|l| l.starts_with(label) && l.contains("8192")).unwrap_or_else(|| panic!("{knee_table}"));
        assert_eq!(line.split_whitespace().nth(2), Some(knee.as_str()), "{label}: {line}");
    }
}

#[test]
fn a_split_is_a_serving_sweeps_axis_and_a_bad_one_is_refused_by_key() {
    const SERVED: &str = "tests/data/sweeps/serve-small.toml";
    let dir = scratch("serving-split");
    let file = dir.join("split.toml");
    let with_axis = |values: &str| {
        read(Path::new(SERVED)).replacen("[[axis]]", &format!("[[axis]]\nkey = \"serve.split\"\nvalues = {values}\n\n[[axis]]"), 1)
    };
    std::fs::write(&file, with_axis(r#"["none", "1+1"]"#)).unwrap();
    let out = dir.join("out");
    run(&["sweep", &file.to_string_lossy(), "--out", &out.to_string_lossy()]);
    let rows: Vec<Value> = read(&out.join("results.jsonl")).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |split: &str| rows.iter().filter(|r| r["serve.split"] == split).collect::<Vec<_>>();
    let (one, two) = (of("none"), of("1+1"));
    assert!(!one.is_empty() && one.len() == two.len(), "{rows:?}");
    for (a, b) in one.iter().zip(&two) {
        assert!(a["error"].is_null() && b["error"].is_null(), "{a} {b}");
        assert_ne!(a["ttft_p99_ms"], b["ttft_p99_ms"], "a split serves differently");
        assert_eq!(b["tp"], 1, "the decode group's TP");
    }
    std::fs::write(&file, with_axis(r#"["none", "3"]"#)).unwrap();
    let output = icsim(&["sweep", &file.to_string_lossy()]);
    let error = failed(&output);
    assert!(error.contains("serve.split") && error.contains("\"P+D\"") && output.status.code() == Some(2), "{error}");
}
