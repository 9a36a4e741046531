//! Helpers shared by the integration tests: the shared measurement folder,
//! running the `icsim` binary (also within a deadline, on input files
//! written for one test), loading presets, holding docs/validation.md's
//! summary table and the pages' prose to the figures the tests compute, and
//! the lines through timings that some of those figures are.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// Longest a refusal may take: refusing is checking, not simulating.
const DEADLINE: Duration = Duration::from_secs(20);

/// A folder of input files for one test.
pub struct Inputs(pub PathBuf);

impl Inputs {
    pub fn new(name: &str) -> Inputs {
        let dir = std::env::temp_dir().join(format!("icsim-bad-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Inputs(dir)
    }

    /// Writes `text` as `name` and returns its path as an argument.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Inputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs icsim with `args` from the crate root, stopping it at the
/// deadline; returns its exit code and standard error.
pub fn run_within(args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_icsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CUDA_VISIBLE_DEVICES", "-1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("icsim starts");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("icsim can be waited for") {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            return (status.code(), stderr);
        }
        if started.elapsed() > DEADLINE {
            // Stops only the process this test started.
            let _ = child.kill();
            panic!("icsim {args:?} ran past {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails unless the row of docs/validation.md's "In one table" whose first
/// cell starts with `row_start` quotes `figure`, written as the page writes
/// it from what the calling test computed: the page's summary cannot drift
/// from its tests unseen.
pub fn page_quotes(row_start: &str, figure: &str) {
    section_quotes("In one table", row_start, figure);
}

/// Fails unless the table row of docs/validation.md's `## section` whose
/// first cell starts with `row_start` quotes `figure`.
pub fn section_quotes(section: &str, row_start: &str, figure: &str) {
    const PAGE: &str = "docs/validation.md";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    let table = text.split(&format!("\n## {section}\n")).nth(1).unwrap_or_else(|| panic!("{PAGE} has no `## {section}`"));
    let table = table.split("\n## ").next().unwrap_or_default();
    let rows: Vec<&str> = table.lines().filter(|l| l.strip_prefix("| ").is_some_and(|cell| cell.starts_with(row_start))).collect();
    assert_eq!(rows.len(), 1, "{PAGE}, {section}: {} rows start with `{row_start}`", rows.len());
    assert!(
        rows[0].contains(figure),
        "{PAGE}, {section}, the row `{row_start}...` should quote `{figure}` (what the test computes), but says:\n{}",
        rows[0]
    );
}

/// The smallest and the largest of `values`.
pub fn extremes(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values.into_iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| (low.min(v), high.max(v)))
}

/// The rows of a JSON Lines file, one object a line.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).collect()
}

/// The float16 allreduces on 8 GPUs from 32 MiB of the public nccl-tests
/// table of `gpu` (aiconfigurator): NCCL runs them over NVLS.
pub fn public_nvls_allreduces(gpu: &str) -> Vec<icsim::calibrate::schema::Measurement> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("models/hardware/measurements/public-aiconfigurator/{gpu}.jsonl"));
    let rows = icsim::calibrate::read_measurements(&path, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    rows.into_iter()
        .filter(|m| m.op == "allreduce" && m.ranks == Some(8) && m.dtype.as_deref() == Some("float16") && m.bytes >= 32 << 20)
        .collect()
}

/// The least-squares line through `points` (size in bytes, time in
/// seconds) as `time = fixed + size / rate`: (fixed seconds, rate in GB/s).
pub fn line(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (mean_x, mean_y) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let slope = points.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum::<f64>()
        / points.iter().map(|(x, _)| (x - mean_x).powi(2)).sum::<f64>();
    (mean_y - slope * mean_x, 1.0 / slope / 1e9)
}

/// The range of `shares` as the page writes it, `decimals` after the point:
/// `1.0-3.5%`.
pub fn span(shares: impl IntoIterator<Item = f64>, decimals: usize) -> String {
    let (low, high) = extremes(shares);
    format!("{:.*}-{:.*}%", decimals, low * 100.0, decimals, high * 100.0)
}

/// `12345` as the pages write it: `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Fails unless `page` (a path in the repository) says `quoted`, its
/// whitespace read as single spaces: a page's prose cannot drift from the
/// figure the calling test computed.
pub fn page_says(page: &str, quoted: &str) {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains(quoted), "{page} should say `{quoted}` (what the test computes)");
}

/// `a`, `a and b`, `a, b and c`.
pub fn listed(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.join(""),
    }
}
