//! Helpers shared by the integration tests: the shared measurement folder,
//! running the `icsim` binary, loading presets.

use std::path::{Path, PathBuf};
use std::process::Output;

use icsim::config::hardware::HardwareModel;
use icsim::topology::{PresetOptions, Topology, TopologySpec, resolve};

/// The shared folder beside the checkout (or `ICSIM_SHARED`).
pub fn shared() -> PathBuf {
    std::env::var_os("ICSIM_SHARED").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

pub fn h200_measurements_path() -> PathBuf {
    shared().join("calibration/h200x2-nvswitch/measurements.jsonl")
}

/// A preset with its shipped model overlays (`models` adds more, e.g. "base"
/// to undo calibration).
pub fn preset(name: &str, gpus: Option<u32>, models: &[&str]) -> (Topology, HardwareModel) {
    let spec = TopologySpec {
        name: name.into(),
        options: PresetOptions { gpus, gpu: None, host: None },
        models: models.iter().map(|m| m.to_string()).collect(),
    };
    resolve(&spec).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Runs `icsim` with `args` from the crate root, where tests/data lies.
pub fn icsim(args: &[&str]) -> Output {
    icsim_in(args, Path::new(env!("CARGO_MANIFEST_DIR")))
}

/// Runs `icsim` with `args` from `folder`.
pub fn icsim_in(args: &[&str], folder: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_icsim")).args(args).current_dir(folder).output().expect("the icsim binary runs")
}

/// Checks that `path` holds a real PNG image of a plausible size.
pub fn assert_png(path: &Path) {
    const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes.get(..8), Some(&PNG_SIGNATURE[..]), "{} is not a PNG", path.display());
    assert!((10_000..2_000_000).contains(&bytes.len()), "{} has an implausible size: {} bytes", path.display(), bytes.len());
}

/// Standard output of a run that must have succeeded.
pub fn succeeded(output: &Output) -> String {
    assert!(output.status.success(), "icsim failed: {}", stderr(output));
    stdout(output)
}

/// Standard error of a run that must have failed.
pub fn failed(output: &Output) -> String {
    assert!(!output.status.success(), "icsim succeeded: {}", stdout(output));
    stderr(output)
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `icsim` and parses its JSON output, failing with its stderr.
pub fn icsim_json(args: &[&str]) -> serde_json::Value {
    let output = icsim(args);
    assert!(output.status.success(), "icsim {args:?} failed: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("icsim {args:?} printed no JSON ({e}): {}", stdout(&output)))
}
