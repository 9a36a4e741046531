//! `icsim topo import`, `icsim topo show` of imported files, and
//! `icsim calibrate validate` of nccl-tests output.

use icsim::config::topology::{NodeKindFile, TopologyFile};

use crate::common::{failed, icsim, succeeded};

#[test]
fn topo_import_prints_a_topology_file_that_reads_back() {
    let text = succeeded(&icsim(&["topo", "import", "tests/data/nccl-topo-h200x2.xml"]));
    let file: TopologyFile = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!((file.gpu.as_str(), file.host.as_str()), ("h200", "emr-2s"));
    let gpus = file.nodes.iter().filter(|n| n.kind == NodeKindFile::Gpu).count();
    let nvswitches = file.nodes.iter().filter(|n| n.kind == NodeKindFile::Nvswitch).count();
    assert_eq!((gpus, nvswitches), (2, 1));
    assert!(text.starts_with('#') && text.contains("nccl-topo-h200x2.xml"), "the header says where it came from:\n{text}");
}

#[test]
fn topo_import_writes_out_with_the_given_models_and_show_reads_it() {
    let dir = std::env::temp_dir().join(format!("icsim-cli-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("box.toml");
    let out_arg = out.display().to_string();
    let args = ["topo", "import", "tests/data/nvidia-smi-topo-pcie-8gpu.txt", "--gpu", "a100", "--host", "epyc-2s", "--out", &out_arg];
    succeeded(&icsim(&args));
    let shown = succeeded(&icsim(&["topo", "show", &out_arg]));
    assert!(shown.contains("GPU model a100, host platform epyc-2s"), "{shown}");
    assert!(shown.contains("PCIe gen4 x16"), "the A100's generation:\n{shown}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn topo_show_takes_nvidia_smi_output_directly() {
    let shown = succeeded(&icsim(&["topo", "show", "tests/data/nvidia-smi-topo-pcie-8gpu.txt"]));
    let row = |name: &str| shown.lines().find(|l| l.starts_with(name)).map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>());
    assert_eq!(row("GPU0"), Some(vec!["X", "PIX", "PHB", "PHB", "SYS", "SYS", "SYS", "SYS"]), "{shown}");
    let shown = succeeded(&icsim(&["topo", "show", "tests/data/nvidia-smi-topo-h200x2.txt", "--gpu", "h100"]));
    assert!(shown.contains("GPU model h100") && shown.contains("NV18"), "{shown}");
}

#[test]
fn a_broken_matrix_is_reported_with_its_file_and_line() {
    let dir = std::env::temp_dir().join(format!("icsim-cli-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("topo.txt");
    std::fs::write(&file, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-7\nGPU1\tNV81x\t X \t0-7\n").unwrap();
    let error = failed(&icsim(&["topo", "import", &file.display().to_string()]));
    assert!(error.contains("topo.txt: line 3:") && error.contains("NV81x"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn calibrate_validate_reads_nccl_tests_output() {
    let plot = std::env::temp_dir().join(format!("icsim-nccl-tests-{}.png", std::process::id()));
    let plot_arg = plot.display().to_string();
    let args = ["calibrate", "validate", "tests/data/all_reduce_perf_8gpu.txt", "--topology", "hgx-h100", "--transport", "nvswitch"];
    let json = succeeded(&icsim(&[&args[..], &["--format", "json", "--plot", &plot_arg]].concat()));
    std::fs::remove_file(&plot).expect("the plot was written");
    let document: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
    let results = document["results"].as_array().expect("results");
    assert_eq!(results.len(), 16);
    assert!(results.iter().all(|r| r["series"] == "allreduce nvswitch ranks=8"), "{json}");
    assert_eq!(results[12]["measured_us"], 529.62);
    let error = failed(&icsim(&["calibrate", "validate", "tests/data/all_reduce_perf_8gpu.txt", "--transport", "pcie"]));
    assert!(error.contains("all_reduce_perf_8gpu.txt") && error.contains("transport"), "{error}");
}
