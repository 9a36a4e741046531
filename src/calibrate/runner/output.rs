//! What the runner writes: measurements.jsonl as measurements arrive,
//! system.json and the `nvidia-smi topo -m` text.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::calibrate::schema::{Measurement, to_jsonl};

use super::{Probe, RunnerError};

/// measurements.jsonl, written as measurements arrive so that a failure
/// later keeps what was measured.
pub struct MeasurementsFile {
    path: PathBuf,
    file: File,
    pub written: usize,
}

impl MeasurementsFile {
    /// Opens the file empty, or keeps what it holds when `append`.
    pub fn open(path: PathBuf, append: bool) -> Result<MeasurementsFile, RunnerError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(|e| RunnerError::Write { path: path.clone(), message: e.to_string() })?;
        Ok(MeasurementsFile { path, file, written: 0 })
    }

    pub fn append(&mut self, measurements: &[Measurement]) -> Result<(), RunnerError> {
        self.file
            .write_all(to_jsonl(measurements).as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| RunnerError::Write { path: self.path.clone(), message: e.to_string() })?;
        self.written += measurements.len();
        Ok(())
    }
}

/// Writes a file whole (see `report::files`).
fn write_file(path: &Path, contents: &str) -> Result<(), RunnerError> {
    crate::report::files::write_whole(path, contents).map_err(|e| RunnerError::Write { path: path.to_path_buf(), message: e.to_string() })
}

/// Creates the output folder and writes system.json and nvidia-smi-topo.txt;
/// returns the folder's absolute path (children are told where to dump).
pub(super) fn write_system_files(out: &Path, probe: &Probe, notices: &mut Vec<String>) -> Result<PathBuf, RunnerError> {
    let cannot = |e: std::io::Error| RunnerError::Write { path: out.to_path_buf(), message: e.to_string() };
    std::fs::create_dir_all(out).map_err(cannot)?;
    let out = out.canonicalize().map_err(cannot)?;
    match &probe.topology_text {
        Some(text) => write_file(&out.join("nvidia-smi-topo.txt"), text)?,
        None => notices.push("nvidia-smi is not available: no nvidia-smi-topo.txt".into()),
    }
    write_file(&out.join("system.json"), &(serde_json::to_string_pretty(&probe.record).expect("plain data") + "\n"))?;
    Ok(out)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_replace_the_file_unless_appended() {
        let path = std::env::temp_dir().join(format!("icsim-measurements-{}.jsonl", std::process::id()));
        let one = Measurement {
            schema: 1,
            op: "copy".into(),
            path: Some("d2d_gpu0".into()),
            bytes: 4096,
            time_us: 2.5,
            ..Measurement::default()
        };
        let lines = |append: bool| {
            let mut file = MeasurementsFile::open(path.clone(), append).unwrap();
            file.append(std::slice::from_ref(&one)).unwrap();
            crate::calibrate::read_measurements(&path, &Default::default()).unwrap().len()
        };
        assert_eq!(lines(false), 1);
        assert_eq!(lines(true), 2);
        assert_eq!(lines(false), 1);
        std::fs::remove_file(&path).unwrap();
    }
}
