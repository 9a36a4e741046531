//! `icsim calibrate run` where there is no GPU (as on CI): it stops before
//! writing anything, with one line that says what is missing and what to do.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A folder name in the temporary directory that nothing has created.
fn unused_folder(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("icsim-{name}-{}", std::process::id()))
}

/// Runs icsim with no GPU visible (CUDA_VISIBLE_DEVICES=-1 hides any there is).
fn icsim_without_gpu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_icsim"))
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "-1")
        .env_remove("NCCL_LIB")
        .output()
        .expect("icsim runs")
}

fn single_error_line(output: &Output) -> String {
    assert!(!output.status.success(), "expected a failure, got {:?}", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected exactly one line on stderr, got {stderr:?}");
    assert!(lines[0].starts_with("error: "), "{stderr:?}");
    lines[0].to_string()
}

#[test]
fn without_a_gpu_run_fails_with_one_line_saying_what_is_missing() {
    let out = unused_folder("no-gpu");
    let output = icsim_without_gpu(&["calibrate", "run", "--out", out.to_str().unwrap()]);
    let line = single_error_line(&output);
    let says_what_is_missing = line.contains("no NVIDIA GPU driver") || line.contains("no usable NVIDIA GPU");
    assert!(says_what_is_missing, "{line}");
    assert!(line.contains("LD_LIBRARY_PATH") || line.contains("CUDA_VISIBLE_DEVICES"), "should say what to do: {line}");
    assert!(!out.exists(), "a failed run must not create {}", out.display());
}

#[test]
fn a_missing_nccl_library_is_named() {
    let output =
        icsim_without_gpu(&["calibrate", "run", "--nccl-lib", "/nonexistent", "--out", unused_folder("no-nccl").to_str().unwrap()]);
    let line = single_error_line(&output);
    assert!(line.starts_with("error: --nccl-lib /nonexistent: no such file"), "{line}");
    assert!(line.contains("libnccl.so.2"), "{line}");
}

#[test]
fn options_that_measure_nothing_are_refused_before_looking_for_a_gpu() {
    let output = icsim_without_gpu(&["calibrate", "run", "--skip-copies", "--skip-collectives"]);
    assert!(single_error_line(&output).contains("nothing to measure"));
}

#[test]
fn the_hidden_child_refuses_a_bad_specification_in_one_line() {
    let output = icsim_without_gpu(&["calibrate", "collective-child", "--spec", "{}"]);
    assert!(single_error_line(&output).contains("unreadable child specification"));
}

#[test]
fn an_unknown_llm_to_replay_is_named_before_looking_for_a_gpu() {
    let output = icsim_without_gpu(&["calibrate", "run", "--model", "llama-9", "--out", unused_folder("no-llm").to_str().unwrap()]);
    let line = single_error_line(&output);
    assert!(line.contains("--model") && line.contains("llama-9") && line.contains("llama-3.1-70b"), "{line}");
}

#[test]
fn kernels_without_a_gpu_fail_in_one_line_and_unknown_llms_are_named_first() {
    let out = unused_folder("no-gpu-kernels");
    let line = single_error_line(&icsim_without_gpu(&["calibrate", "run", "--kernels", "--out", out.to_str().unwrap()]));
    assert!(line.contains("no NVIDIA GPU driver") || line.contains("no usable NVIDIA GPU"), "{line}");
    assert!(!out.exists(), "a failed run must not create {}", out.display());
    let line = single_error_line(&icsim_without_gpu(&["calibrate", "run", "--kernels", "--kernel-llms", "llama-9"]));
    assert!(line.contains("--kernel-llms") && line.contains("llama-9") && line.contains("llama-3.1-70b"), "{line}");
}
