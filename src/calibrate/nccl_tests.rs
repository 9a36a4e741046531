//! nccl-tests output (the text all_reduce_perf, all_gather_perf,
//! reduce_scatter_perf, broadcast_perf and the other `*_perf` binaries
//! print) read into schema-1 measurements, one for each result row. The
//! layout is nccl-tests' own (src/util.cu: writeDeviceReport,
//! writeResultHeader, writeBenchmarkLine*): `#` header lines, a column
//! header, then one row a size with out-of-place and in-place columns.
//! Reads text only; simulates nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::schema::Measurement;
use crate::config::ConfigError;
use crate::topology::{MAX_GPUS, MAX_GPUS_REASON};
use crate::transport::Mode;

/// What nccl-tests output does not say.
#[derive(Debug, Clone, Default)]
pub struct NcclTestsOptions {
    /// The collective (allreduce, allgather, reducescatter, broadcast),
    /// where the output does not name its test binary.
    pub op: Option<String>,
    /// The transport NCCL used (auto, nvswitch, nvlink, p2p, shm); default auto.
    pub transport: Option<String>,
}

/// How the rows were timed, in the words of the schema's `timing` field.
const TIMING: &str = "nccl-tests, host-timed over iterations";

/// nccl-tests' element type names that the schema spells otherwise.
const DTYPE_NAMES: &[(&str, &str)] =
    &[("half", "float16"), ("float", "float32"), ("double", "float64"), ("f8e4m3", "float8e4m3"), ("f8e5m2", "float8e5m2")];

/// The collective a test binary runs: `all_reduce_perf` -> `allreduce`.
fn op_of_binary(name: &str) -> Option<String> {
    let base = name.trim().rsplit('/').next()?;
    let (stem, _) = base.split_once("_perf")?;
    (!stem.is_empty()).then(|| stem.replace('_', ""))
}

/// Where the columns of a result row are, from the column header.
struct Columns {
    size: usize,
    dtype: usize,
    /// Out-of-place time, then in-place time where printed (`time`, or
    /// `cputime` with -C).
    times: Vec<usize>,
    wrong: Vec<usize>,
    /// Cells a row has; rows with a timestamp (-T) run on past it.
    cells: usize,
    open_ended: bool,
    line: usize,
}

impl Columns {
    fn parse(words: &[&str], line: usize) -> Option<Columns> {
        let at = |name: &str| words.iter().position(|w| *w == name);
        let times: Vec<usize> = words.iter().enumerate().filter(|(_, w)| matches!(**w, "time" | "cputime")).map(|(i, _)| i).collect();
        let wrong = words.iter().enumerate().filter(|(_, w)| **w == "#wrong").map(|(i, _)| i).collect();
        let timestamp = at("timestamp");
        Some(Columns {
            size: at("size")?,
            dtype: at("type")?,
            times: (!times.is_empty()).then_some(times)?,
            wrong,
            cells: timestamp.unwrap_or(words.len()),
            open_ended: timestamp.is_some(),
            line,
        })
    }
}

/// What the `#` lines said so far: a file may hold several tests in a row.
#[derive(Default)]
struct Header {
    binary: Option<String>,
    op: Option<String>,
    /// nThread x nGpus: ranks of one process, and the line that says so.
    ranks_per_process: Option<(u32, usize)>,
    /// Ranks listed under "# Using devices".
    ranks: BTreeSet<u32>,
    /// Ranks listed for each process (`Pid <pid> on <host>`).
    process_ranks: BTreeMap<String, u32>,
    columns: Option<Columns>,
}

impl Header {
    /// Reads comment line `number` of nccl-tests' output (after its `#`):
    /// the test's name, the ranks a process runs, the ranks listed, or the
    /// column header.
    fn read(&mut self, comment: &str, number: usize, path: &Path, options: &NcclTestsOptions) -> Result<(), ConfigError> {
        let words: Vec<&str> = comment.split_whitespace().collect();
        if let Some(binary) = comment.strip_prefix("Collective test starting:") {
            let binary = binary.trim().to_string();
            let op = op_of_binary(&binary).ok_or_else(|| syntax(path, number, format!("{binary:?} is not a nccl-tests *_perf binary")))?;
            if let Some(given) = options.op.as_ref().filter(|given| **given != op) {
                return Err(syntax(path, number, format!("the output is from {binary} ({op}), but the op given is {given}")));
            }
            *self = Header { binary: Some(binary), op: Some(op), ..Header::default() };
        } else if words.first() == Some(&"nThread") {
            let value = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).and_then(|v| v.parse::<u64>().ok());
            self.ranks_per_process = match value("nThread").zip(value("nGpus")) {
                Some((threads, gpus)) => match u32::try_from(threads.saturating_mul(gpus)) {
                    Ok(ranks) if (1..=MAX_GPUS as u32).contains(&ranks) => Some((ranks, number)),
                    _ => {
                        return Err(syntax(
                            path,
                            number,
                            format!("nThread {threads} x nGpus {gpus}: a process runs 1 to {MAX_GPUS} ranks ({MAX_GPUS_REASON})"),
                        ));
                    }
                },
                None => None,
            };
            self.ranks.clear();
            self.process_ranks.clear();
        } else if comment == "Using devices" {
            self.ranks.clear();
            self.process_ranks.clear();
        } else if words.first() == Some(&"Rank") {
            let rank = words
                .get(1)
                .and_then(|r| r.parse().ok())
                .ok_or_else(|| syntax(path, number, "a Rank line without a rank number".into()))?;
            self.ranks.insert(rank);
            let after = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).copied();
            if let Some(pid) = after("Pid") {
                *self.process_ranks.entry(format!("{pid} on {}", after("on").unwrap_or("?"))).or_default() += 1;
            }
        } else if words.first() == Some(&"size") {
            self.columns = Some(Columns::parse(&words, number).ok_or_else(|| {
                syntax(path, number, "the column header needs size, type and time columns, as nccl-tests prints them".into())
            })?);
        }
        Ok(())
    }

    /// How many ranks ran the row on line `number`: those the Rank lines
    /// list, else nThread x nGpus; a process whose Rank lines disagree with
    /// nThread x nGpus is refused.
    fn rank_count(&self, path: &Path, number: usize) -> Result<u32, ConfigError> {
        if let Some(((process, listed), (per_process, line))) =
            self.ranks_per_process.and_then(|given| Some((self.process_ranks.iter().find(|(_, n)| **n != given.0)?, given)))
        {
            return Err(syntax(
                path,
                line,
                format!(
                    "nThread x nGpus gives {per_process} ranks a process, but the Rank lines list {listed} for process {process}: the output is not of one run"
                ),
            ));
        }
        match self.ranks.len() {
            0 => self.ranks_per_process.map(|(ranks, _)| ranks).ok_or_else(|| {
                syntax(path, number, "the output says neither nThread and nGpus nor which ranks took part (# Using devices)".into())
            }),
            listed => Ok(listed as u32),
        }
    }
}

fn syntax(path: &Path, line: usize, message: String) -> ConfigError {
    ConfigError::Syntax { path: path.to_path_buf(), message: format!("line {line}: {message}") }
}

/// The value NCCL was told for `key` (NCCL_ALGO, NCCL_PROTO), as an
/// environment listing (`NCCL_ALGO=Ring`) or NCCL's INFO line (`NCCL_ALGO
/// set by environment to Ring`) shows it.
fn forced(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line[line.find(key)? + key.len()..].trim_start();
        let value = rest.strip_prefix('=').or_else(|| rest.strip_prefix("set by environment to"))?;
        let value = value.split_whitespace().next()?.trim_matches(|c| matches!(c, '"' | '\'' | '.' | ','));
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// Reads nccl-tests output from `text` (read from `path`, which errors name).
pub fn parse(path: &Path, text: &str, options: &NcclTestsOptions) -> Result<Vec<Measurement>, ConfigError> {
    Ok(parse_located(path, text, options)?.into_iter().map(|(_, m)| m).collect())
}

/// [`parse`], each measurement with the line of its result row.
pub fn parse_located(path: &Path, text: &str, options: &NcclTestsOptions) -> Result<Vec<(usize, Measurement)>, ConfigError> {
    let transport = options.transport.clone().unwrap_or_else(|| "auto".into());
    transport.parse::<Mode>().map_err(|message| ConfigError::invalid(path, "transport", message))?;
    let forced_algo = forced(text, "NCCL_ALGO");
    let forced_proto = forced(text, "NCCL_PROTO");
    // A single name is what NCCL ran; a list or an exclusion (^NVLS) left it a choice.
    let choice = |value: &Option<String>| match value {
        Some(v) if v.chars().all(|c| c.is_ascii_alphanumeric()) => v.to_ascii_lowercase(),
        _ => "auto".to_string(),
    };
    let (algo, proto) = (choice(&forced_algo), choice(&forced_proto));
    let env: Vec<String> = [("NCCL_ALGO", &forced_algo), ("NCCL_PROTO", &forced_proto)]
        .iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={v}")))
        .collect();
    let from_file_name = path.file_stem().and_then(|s| op_of_binary(&s.to_string_lossy()));

    let mut header = Header::default();
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix('#') {
            header.read(comment.trim(), number, path, options)?;
            continue;
        }
        let cells: Vec<&str> = trimmed.split_whitespace().collect();
        // Result rows start with the size; anything else (NCCL's INFO lines,
        // warnings) is not nccl-tests' to read.
        if !cells.first().is_some_and(|c| c.chars().all(|d| d.is_ascii_digit())) {
            continue;
        }
        let columns = header.columns.as_ref().ok_or_else(|| {
            syntax(path, number, "a result row before the column header (#  size  count  type  redop  root  time ...)".into())
        })?;
        if cells.len() < columns.cells || (!columns.open_ended && cells.len() > columns.cells) {
            return Err(syntax(
                path,
                number,
                format!("{} cells in this row; the column header (line {}) has {}", cells.len(), columns.line, columns.cells),
            ));
        }
        let time = |column: usize| -> Result<f64, ConfigError> {
            let text = cells[column];
            text.parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0)
                .ok_or_else(|| syntax(path, number, format!("time {text:?}: expected a positive number of microseconds")))
        };
        let bytes =
            cells[columns.size].parse().map_err(|_| syntax(path, number, format!("size {:?} is not a byte count", cells[columns.size])))?;
        let time_us = time(columns.times[0])?;
        let mut notes = Vec::new();
        if let Some(&in_place) = columns.times.get(1) {
            notes.push(format!("in-place {} us", time(in_place)?));
        }
        for (&column, place) in columns.wrong.iter().zip(["out-of-place", "in-place"]) {
            if !matches!(cells[column], "0" | "N/A") {
                notes.push(format!("{place} #wrong {}", cells[column]));
            }
        }
        let op = header.op.clone().or_else(|| options.op.clone()).or_else(|| from_file_name.clone()).ok_or_else(|| {
            syntax(path, number, "the output does not name its test (no \"# Collective test starting\" line) and neither does the file name: pass the op (allreduce, allgather, reducescatter, broadcast)".into())
        })?;
        let ranks = header.rank_count(path, number)?;
        let dtype = cells[columns.dtype];
        out.push((
            number,
            Measurement {
                schema: 1,
                op,
                transport: Some(transport.clone()),
                algo: Some(algo.clone()),
                proto: Some(proto.clone()),
                ranks: Some(ranks),
                bytes,
                dtype: Some(DTYPE_NAMES.iter().find(|(name, _)| *name == dtype).map_or(dtype, |(_, schema)| schema).to_string()),
                time_us,
                timing: Some(TIMING.into()),
                source: Some(format!("nccl-tests {}", header.binary.as_deref().unwrap_or("output"))),
                env: (!env.is_empty()).then(|| env.join(" ")),
                note: (!notes.is_empty()).then(|| notes.join("; ")),
                ..Measurement::default()
            },
        ));
    }
    if out.is_empty() {
        return Err(ConfigError::Syntax {
            path: path.to_path_buf(),
            message: "no result rows: expected nccl-tests output (a `#  size  count  type ...` column header, then one row a size)".into(),
        });
    }
    super::schema::check_all(path, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (std::path::PathBuf, String) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/all_reduce_perf_8gpu.txt");
        let text = std::fs::read_to_string(&path).unwrap();
        (path, text)
    }

    #[test]
    fn every_row_of_the_allreduce_run_becomes_a_measurement() {
        let (path, text) = fixture();
        let rows = parse(&path, &text, &NcclTestsOptions::default()).unwrap();
        assert_eq!(rows.len(), 16, "8 B to 8 GiB by factors of 4");
        assert!(rows.iter().all(|m| m.op == "allreduce" && m.ranks == Some(8) && m.dtype.as_deref() == Some("float32")));
        let row = rows.iter().find(|m| m.bytes == 134_217_728).expect("the 128 MiB row");
        assert_eq!(row.time_us, 529.62);
        assert_eq!(row.note.as_deref(), Some("in-place 531.21 us"));
        assert_eq!((row.transport.as_deref(), row.algo.as_deref(), row.proto.as_deref()), (Some("auto"), Some("auto"), Some("auto")));
        assert_eq!(row.source.as_deref(), Some("nccl-tests all_reduce_perf"));
        assert_eq!(row.timing.as_deref(), Some(TIMING));
        assert_eq!(rows.last().map(|m| (m.bytes, m.time_us)), Some((8_589_934_592, 31571.8)));
    }

    #[test]
    fn transport_algo_and_proto_come_from_the_options_and_the_log() {
        let (path, text) = fixture();
        let options = NcclTestsOptions { op: None, transport: Some("nvswitch".into()) };
        let logged = text.replacen(
            "# Using devices",
            "node1:4123:4123 [0] NCCL INFO NCCL_ALGO set by environment to Ring\nNCCL_PROTO=Simple\n# Using devices",
            1,
        );
        let rows = parse(&path, &logged, &options).unwrap();
        assert_eq!(rows.len(), 16, "log lines are not rows");
        assert_eq!(
            (rows[0].transport.as_deref(), rows[0].algo.as_deref(), rows[0].proto.as_deref()),
            (Some("nvswitch"), Some("ring"), Some("simple"))
        );
        assert_eq!(rows[0].env.as_deref(), Some("NCCL_ALGO=Ring NCCL_PROTO=Simple"));
        let excluded = text.replacen("# Using devices", "NCCL_ALGO=^NVLS\n# Using devices", 1);
        assert_eq!(parse(&path, &excluded, &options).unwrap()[0].algo.as_deref(), Some("auto"));
        let error = parse(&path, &text, &NcclTestsOptions { op: None, transport: Some("pcie".into()) }).unwrap_err().to_string();
        assert!(error.contains("transport") && error.contains("nvswitch"), "{error}");
    }

    #[test]
    fn older_output_takes_the_op_from_the_options_or_the_file_name_and_ranks_from_the_header() {
        let (_, text) = fixture();
        let older: String =
            text.lines().filter(|l| !l.contains("Collective test") && !l.contains("Rank")).map(|l| format!("{l}\n")).collect();
        let rows = parse(Path::new("reduce_scatter_perf.log"), &older, &NcclTestsOptions::default()).unwrap();
        assert_eq!((rows[0].op.as_str(), rows[0].ranks), ("reducescatter", Some(8)));
        assert_eq!(rows[0].source.as_deref(), Some("nccl-tests output"));
        let options = NcclTestsOptions { op: Some("allgather".into()), transport: None };
        assert_eq!(parse(Path::new("run.log"), &older, &options).unwrap()[0].op, "allgather");
        let error = parse(Path::new("run.log"), &older, &NcclTestsOptions::default()).unwrap_err().to_string();
        assert!(error.contains("run.log") && error.contains("line 11") && error.contains("op"), "{error}");
        let error = parse(Path::new("run.log"), &text, &options).unwrap_err().to_string();
        assert!(error.contains("line 4") && error.contains("allgather"), "{error}");
    }

    #[test]
    fn malformed_rows_name_the_file_and_line() {
        let (path, text) = fixture();
        let short = text.replacen("      -1    13.81    0.00    0.00       0    13.85    0.00    0.00       0", "      -1    13.81", 1);
        let error = parse(&path, &short, &NcclTestsOptions::default()).unwrap_err().to_string();
        assert!(error.contains("all_reduce_perf_8gpu.txt") && error.contains("line 20") && error.contains("6 cells"), "{error}");
        let bad_time = text.replacen("13.81", "fast", 1);
        let error = parse(&path, &bad_time, &NcclTestsOptions::default()).unwrap_err().to_string();
        assert!(error.contains("line 20") && error.contains("\"fast\""), "{error}");
        let error = parse(Path::new("empty.txt"), "# nothing here\n", &NcclTestsOptions::default()).unwrap_err().to_string();
        assert!(error.contains("empty.txt") && error.contains("no result rows"), "{error}");
    }

    #[test]
    fn a_gpu_count_the_rank_lines_deny_is_refused_by_line() {
        let (path, text) = fixture();
        let error = parse(&path, &text.replacen("nGpus 8", "nGpus 4", 1), &NcclTestsOptions::default()).unwrap_err().to_string();
        assert!(error.contains("line 5:") && error.contains("4 ranks a process") && error.contains("list 8"), "{error}");
        let error = parse(&path, &text.replacen("nGpus 8", "nGpus 4294967296", 1), &NcclTestsOptions::default()).unwrap_err().to_string();
        assert!(error.contains("line 5:") && error.contains("1 to 4096"), "{error}");
    }

    #[test]
    fn binaries_name_their_collective() {
        assert_eq!(op_of_binary("all_reduce_perf").as_deref(), Some("allreduce"));
        assert_eq!(op_of_binary("/opt/nccl-tests/build/reduce_scatter_perf").as_deref(), Some("reducescatter"));
        assert_eq!(op_of_binary("all_gather_perf_mpi").as_deref(), Some("allgather"));
        assert_eq!(op_of_binary("broadcast_perf").as_deref(), Some("broadcast"));
        assert_eq!(op_of_binary("measurements"), None);
    }
}
