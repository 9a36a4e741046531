//! End-to-end tests of the `icsim` binary: what a user types, what comes
//! out. One test binary; each part of the command line has a module in
//! tests/cli/.

#[path = "cli/import.rs"]
mod import;

use std::process::{Command, Output};

/// Runs icsim with `args` from the crate root, where tests/data lies.
pub fn icsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_icsim")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("the icsim binary runs")
}

/// Standard output of a run that must have succeeded.
pub fn succeeded(output: &Output) -> String {
    assert!(output.status.success(), "icsim failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Standard error of a run that must have failed.
pub fn failed(output: &Output) -> String {
    assert!(!output.status.success(), "icsim succeeded: {}", String::from_utf8_lossy(&output.stdout));
    String::from_utf8_lossy(&output.stderr).into_owned()
}
