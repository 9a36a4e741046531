//! Calibration: the measurement schema, predicting measurements, the
//! fidelity report, fitting the hardware model, importers of other tools'
//! output, and the GPU runner. Changes no simulator logic: it only reads
//! measurements and writes model files.

pub mod clock;
pub mod compute;
pub mod compute_fit;
pub mod fit;
pub mod nccl_tests;
pub mod predict;
pub mod profile;
pub mod runner;
pub mod schema;
pub mod validate;
pub mod vllm_bench;

use std::path::Path;

use crate::config::{ConfigError, read_text};
use nccl_tests::NcclTestsOptions;
use schema::Measurement;

/// Reads measurements from schema-1 JSON Lines or from nccl-tests output,
/// told apart by the first line that is neither blank nor a `#` comment: a
/// JSON Lines file starts it with `{`. `options` say what nccl-tests output
/// does not (JSON Lines say it themselves, so options are refused there).
pub fn read_measurements(path: &Path, options: &NcclTestsOptions) -> Result<Vec<Measurement>, ConfigError> {
    Ok(read_measurements_located(path, options)?.into_iter().map(|(_, m)| m).collect())
}

/// [`read_measurements`], each measurement with its line number. A file
/// with no measurement at all is refused.
pub fn read_measurements_located(path: &Path, options: &NcclTestsOptions) -> Result<Vec<(usize, Measurement)>, ConfigError> {
    parse_measurements(path, &read_text(path)?, options)
}

/// [`read_measurements_located`] of text read from `path` (which errors name).
pub fn parse_measurements(path: &Path, text: &str, options: &NcclTestsOptions) -> Result<Vec<(usize, Measurement)>, ConfigError> {
    let first = text.lines().map(str::trim).find(|line| !line.is_empty() && !line.starts_with('#'));
    let Some(first) = first else {
        return Err(ConfigError::Syntax {
            path: path.to_path_buf(),
            message: "holds no measurement: expected schema-1 JSON Lines (one {\"schema\": 1, ...} object a line) or nccl-tests output"
                .into(),
        });
    };
    // JSON of another shape (`[1,2,3]`) is JSON all the same, not nccl-tests output.
    if !first.starts_with(['{', '[', '"']) {
        return nccl_tests::parse_located(path, text, options);
    }
    for (key, given) in [("op", &options.op), ("transport", &options.transport)] {
        if given.is_some() {
            return Err(ConfigError::invalid(
                path,
                key,
                "schema-1 measurements say their own op and transport; this option is for nccl-tests output only",
            ));
        }
    }
    schema::parse_located(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_and_nccl_tests_output_are_both_read() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let rows = read_measurements(&data.join("all_reduce_perf_8gpu.txt"), &NcclTestsOptions::default()).unwrap();
        assert_eq!(rows.len(), 16);

        let dir = std::env::temp_dir().join(format!("icsim-measurements-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("m.jsonl");
        std::fs::write(&file, format!("# from nccl-tests\n\n{}", schema::to_jsonl(&rows))).unwrap();
        assert_eq!(read_measurements(&file, &NcclTestsOptions::default()).unwrap(), rows, "a leading comment keeps it JSON Lines");
        let options = NcclTestsOptions { op: None, transport: Some("shm".into()) };
        let error = read_measurements(&file, &options).unwrap_err().to_string();
        assert!(error.contains("m.jsonl") && error.contains("transport"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
