//! Measurement schema 1 (JSON Lines; shared/calibration/README.md): one
//! measured operation per line. Unknown fields are kept out of the way, not
//! refused: the schema grows by adding fields.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::collective::DataType;
use crate::config::ConfigError;
use crate::config::llm::Scope;
use crate::stack::Stack;
use crate::units::Time;

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Measurement {
    pub schema: u32,
    #[serde(default)]
    pub system: String,
    /// copy, allreduce, allgather, reducescatter, broadcast, kernel,
    /// allreduce_sequence, ...
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Mean time of one operation; rows that give `time_ms` instead have it
    /// filled in when read.
    #[serde(default)]
    pub time_us: f64,
    /// The same time in milliseconds (how `llm_forward` rows write it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// For `kernel`: the LLM whose layer it is (icsim's addition; files
    /// without it mean Llama-3.1-70B, as the shared README says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// For `allreduce_sequence` (icsim's addition): allreduces of `bytes`
    /// issued back to back, one pass of an LLM's tensor-parallel layers;
    /// `time_us` is the whole sequence's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    /// For `kernel_trace` (one CUDA kernel of a profiled forward, by its
    /// name in `kernel`): its launches per decoder layer; `time_us` is the
    /// mean of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_layer: Option<f64>,
    /// For a `kernel` that is a matrix product (icsim's addition): rows,
    /// output columns and inner dimension, (m x k) by (k x n).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<u64>,
    /// For `llm_forward` and `kernel`: sequences processed together, and
    /// tokens of each already in the KV cache (none at prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_len: Option<u64>,
    /// For `llm_forward`: `prefill`, `decode_step`, or `query` (a prefill
    /// and `output` decode steps, as `vllm bench latency` times them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<u64>,
    /// For `llm_forward` (icsim's additions): which kernels ran (`layers` or
    /// `full`; rows without it are read from `source`) and the LLM file's
    /// fusion they ran as (default: `torch` for PyTorch stacks, else `vllm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<String>,
    /// For collectives: the channel count forced with NCCL_MIN_NCHANNELS =
    /// NCCL_MAX_NCHANNELS (icsim's addition; absent: NCCL's own choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// Who issued the calls (icsim's addition; rows without it are read by
    /// [`Measurement::stack`] from `timing` and `source`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Stack>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The `op` of a measured sequence of allreduces (see `Measurement::calls`).
pub const ALLREDUCE_SEQUENCE: &str = "allreduce_sequence";

/// The `op` of a measured forward pass (or whole query) of an LLM.
pub const LLM_FORWARD: &str = "llm_forward";

/// The `op` of one CUDA kernel of a profiled forward pass.
pub const KERNEL_TRACE: &str = "kernel_trace";

impl Measurement {
    /// A short name of what was measured: "allreduce nvswitch ranks=2",
    /// "copy h2d_pinned", "allreduce_sequence nvswitch ranks=8 tokens=1".
    pub fn series(&self) -> String {
        match self.op.as_str() {
            "copy" => format!("copy {}", self.path.as_deref().unwrap_or("?")),
            "kernel" => format!("kernel {}", self.kernel.as_deref().unwrap_or("?")),
            LLM_FORWARD => {
                format!("{LLM_FORWARD} {} {}", self.phase.as_deref().unwrap_or("?"), self.transport.as_deref().unwrap_or("auto"))
            }
            op => {
                let mut name = format!("{op} {}", self.transport.as_deref().unwrap_or("auto"));
                for (label, value) in [("algo", &self.algo), ("proto", &self.proto)] {
                    if let Some(v) = value.as_deref().filter(|v| *v != "auto") {
                        name += &format!(" {label}={v}");
                    }
                }
                if let Some(channels) = self.channels {
                    name += &format!(" channels={channels}");
                }
                if let Some(ranks) = self.ranks {
                    name += &format!(" ranks={ranks}");
                }
                if op == ALLREDUCE_SEQUENCE {
                    name += &format!(" tokens={}", self.tokens.unwrap_or(0));
                }
                name
            }
        }
    }

    /// The caller that made this measurement: as written, else inferred
    /// from how it was timed and what ran it.
    pub fn stack(&self) -> Stack {
        self.stack.unwrap_or_else(|| Stack::infer(self.timing.as_deref(), self.source.as_deref()))
    }

    pub fn is_collective(&self) -> bool {
        matches!(self.op.as_str(), "allreduce" | "allgather" | "reducescatter" | "broadcast")
    }

    /// Whether the row times moving a buffer, whose size it must give.
    pub fn moves_a_buffer(&self) -> bool {
        self.is_collective() || matches!(self.op.as_str(), "copy" | "allreduce_sequence")
    }
}

/// The shortest time a measurement may give, in microseconds: 10 ns, below
/// what CUDA events (0.5 us) or a GPU's global timer resolve.
const SHORTEST_TIME_US: f64 = 0.01;

/// The largest buffer a measurement may name: what the largest GPU of the
/// hardware model holds (twice that for `p2p_bidir_total`, which counts
/// both directions' buffers), and that GPU's name.
fn largest_buffer() -> (u64, String) {
    let model = crate::config::hardware::HardwareModel::base();
    model.gpu.values().map(|g| (g.memory.0, g.name.clone())).max().unwrap_or((u64::MAX, "any GPU".into()))
}

/// What is wrong with one measurement, as (its key, what is allowed), if
/// anything: each field that is present must be one a real run could give.
pub fn check(m: &Measurement, largest: &(u64, String)) -> Result<(), (&'static str, String)> {
    if !(m.time_us.is_finite() && m.time_us >= SHORTEST_TIME_US && m.time_us <= Time::END.as_us()) {
        return Err((
            "time_us",
            format!(
                "{}: must be a number of microseconds (or time_ms in milliseconds) from {SHORTEST_TIME_US} (no GPU timer resolves less) to {} (the clock's range)",
                crate::config::number(m.time_us),
                Time::END
            ),
        ));
    }
    if m.moves_a_buffer() && m.bytes == 0 {
        return Err(("bytes", format!("0: a row of op {:?} times moving a buffer of at least one byte", m.op)));
    }
    let buffers = if m.path.as_deref() == Some("p2p_bidir_total") { 2 } else { 1 };
    if m.bytes > largest.0.saturating_mul(buffers) {
        return Err((
            "bytes",
            format!(
                "{}: more than any GPU holds (the largest the hardware model knows, {}, holds {:.1} GB){}",
                m.bytes,
                largest.1,
                largest.0 as f64 / 1e9,
                if buffers > 1 { ", twice over for both directions" } else { "" }
            ),
        ));
    }
    let most_gpus = crate::topology::MAX_GPUS as u64;
    let most_calls = 2 * crate::config::llm::MAX_LAYERS;
    for (key, value, least, most, what) in [
        ("ranks", m.ranks.map(u64::from), 1, most_gpus, "GPUs, as a topology holds at most"),
        ("tp", m.tp.map(u64::from), 1, most_gpus, "GPUs, as a topology holds at most"),
        ("tokens", m.tokens, 1, crate::config::llm::MAX_CONTEXT, "tokens, the longest context a model may have"),
        ("kv_len", m.kv_len, 0, crate::config::llm::MAX_CONTEXT, "tokens, the longest context a model may have"),
        ("batch", m.batch, 1, u64::from(u32::MAX), "sequences"),
        ("calls", m.calls, 1, most_calls, "calls, two a layer of the deepest model allowed"),
        ("channels", m.channels.map(u64::from), 1, u64::from(crate::config::experiment::MAX_CHANNELS), "channels, NCCL's most"),
    ] {
        if let Some(value) = value
            && !(least..=most).contains(&value)
        {
            return Err((key, format!("{value} is out of range: allowed {least} to {most} ({what})")));
        }
    }
    if let Some(dtype) = m.dtype.as_deref() {
        let dtype = dtype.parse::<DataType>().map_err(|message| ("dtype", message))?;
        if !m.bytes.is_multiple_of(dtype.bytes) {
            return Err(("bytes", format!("not a whole number of {} elements ({} bytes each)", dtype.name, dtype.bytes)));
        }
    }
    Ok(())
}

/// How far a row's `time_us` and `time_ms` may differ, as a share of the
/// larger: room for either rounded to a few digits, none for a slipped
/// unit (a factor of 1000) or two different runs.
const TIME_AGREEMENT: f64 = 0.01;

/// Whether two readings of one time agree within [`TIME_AGREEMENT`].
fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= TIME_AGREEMENT * a.abs().max(b.abs())
}

/// A JSON object's entries in the order written, repeated keys included
/// (serde_json's map keeps the last of a repeated key without a word).
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Entries, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Parses JSON Lines of schema-1 measurements read from `path` (which errors
/// name); blank lines and lines starting with '#' are skipped. Files are read
/// by `calibrate::read_measurements`, which also takes nccl-tests output.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Measurement>, ConfigError> {
    Ok(parse_located(path, text)?.into_iter().map(|(_, m)| m).collect())
}

/// [`parse`], each measurement with its line number.
pub fn parse_located(path: &Path, text: &str) -> Result<Vec<(usize, Measurement)>, ConfigError> {
    let largest = largest_buffer();
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with('{') {
            return Err(ConfigError::Syntax {
                path: path.to_path_buf(),
                message: format!(
                    "line {number}: not a JSON object; each line must be a schema-1 measurement object ({{\"schema\": 1, ...}})"
                ),
            });
        }
        let syntax = |e: serde_json::Error| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: format!("line {number}: {e}; each line must be a schema-1 measurement object"),
        };
        let Entries(entries) = serde_json::from_str(line).map_err(syntax)?;
        let keyed = |key: &str, message: String| ConfigError::invalid(path, format!("line {number}: {key}"), message);
        if let Some(twice) = crate::first_repeat(&entries.iter().map(|(key, _)| key).collect::<Vec<_>>()) {
            return Err(keyed(&entries[twice].0, "given twice in one row: JSON keeps one of them silently, so give each key once".into()));
        }
        let object: serde_json::Map<String, serde_json::Value> = entries.into_iter().collect();
        let given = |key: &str| object.contains_key(key);
        let (has_bytes, has_us) = (given("bytes"), given("time_us"));
        let mut measurement: Measurement = serde_json::from_value(serde_json::Value::Object(object)).map_err(syntax)?;
        if measurement.schema != 1 {
            return Err(ConfigError::invalid(
                path,
                format!("line {number}: schema"),
                format!("schema {} is not supported: icsim reads schema 1", measurement.schema),
            ));
        }
        if measurement.moves_a_buffer() && !has_bytes {
            return Err(ConfigError::invalid(
                path,
                format!("line {number}: bytes"),
                format!("missing: a row of op {:?} must say how many bytes it moved", measurement.op),
            ));
        }
        match (has_us, measurement.time_ms) {
            (false, None) => {
                return Err(keyed("time_us", "missing: a row gives its time as time_us (microseconds) or time_ms (milliseconds)".into()));
            }
            (false, Some(ms)) => measurement.time_us = ms * 1000.0,
            (true, Some(ms)) if !agree(measurement.time_us, ms * 1000.0) => {
                return Err(keyed(
                    "time_ms",
                    format!(
                        "{} ms disagrees with time_us {} by more than {}%: give the time once, or both alike",
                        crate::config::number(ms),
                        crate::config::number(measurement.time_us),
                        TIME_AGREEMENT * 100.0
                    ),
                ));
            }
            (true, _) => {}
        }
        check(&measurement, &largest).map_err(|(key, message)| ConfigError::invalid(path, format!("line {number}: {key}"), message))?;
        out.push((number, measurement));
    }
    Ok(out)
}

/// [`check`] for measurements read from another tool's output.
pub fn check_all(path: &Path, rows: &[(usize, Measurement)]) -> Result<(), ConfigError> {
    let largest = largest_buffer();
    for (number, m) in rows {
        check(m, &largest).map_err(|(key, message)| ConfigError::invalid(path, format!("line {number}: {key}"), message))?;
    }
    Ok(())
}

/// Writes measurements as JSON Lines.
pub fn to_jsonl(measurements: &[Measurement]) -> String {
    measurements.iter().map(|m| serde_json::to_string(m).expect("plain data") + "\n").collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lines_and_keeps_going_past_unknown_fields() {
        let text = r#"{"schema": 1, "system": "x", "op": "allreduce", "transport": "nvswitch", "ranks": 2, "bytes": 8, "time_us": 9.9, "new_field": 3}
# a comment

{"schema": 1, "op": "copy", "path": "h2d_pinned", "bytes": 4096, "time_us": 4.3}"#;
        let m = parse_located(Path::new("m.jsonl"), text).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].0, m[0].1.series()), (1, "allreduce nvswitch ranks=2".to_string()));
        assert_eq!((m[1].0, m[1].1.series()), (4, "copy h2d_pinned".to_string()));
    }

    #[test]
    fn forward_rows_give_milliseconds_and_their_shape() {
        let text = r#"{"schema": 1, "op": "llm_forward", "model": "llama-3.1-70b", "tp": 2, "phase": "decode_step", "tokens": 1, "batch": 1, "kv_len": 8321, "time_ms": 21.357, "stack": "torch-graph"}"#;
        let m = &parse(Path::new("f.jsonl"), text).unwrap()[0];
        assert!((m.time_us - 21357.0).abs() < 1e-6);
        assert_eq!((m.batch, m.kv_len, m.phase.as_deref(), m.stack()), (Some(1), Some(8321), Some("decode_step"), Stack::TorchGraph));
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let error = parse(Path::new("m.jsonl"), "{\"schema\": 1, \"op\": \"copy\", \"bytes\": 4096}").unwrap_err().to_string();
        assert!(error.contains("m.jsonl") && error.contains("line 1") && error.contains("time_us"), "{error}");
        let error =
            parse(Path::new("m.jsonl"), "{\"schema\": 1, \"op\": \"copy\", \"bytes\": 4096, \"time_us\": 1e-30}").unwrap_err().to_string();
        assert!(error.contains("line 1: time_us") && error.contains("no GPU timer"), "{error}");
        let error = parse(Path::new("m.jsonl"), "\n{\"schema\": 1, \"op\": \"allreduce\", \"ranks\": 2, \"time_us\": 9.9}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 2: bytes") && error.contains("missing"), "{error}");
        let error = parse(Path::new("m.jsonl"), "{\"schema\": 2, \"op\": \"copy\", \"time_us\": 1}").unwrap_err().to_string();
        assert!(error.contains("schema 2"), "{error}");
    }

    #[test]
    fn repeated_keys_two_disagreeing_times_a_missing_time_and_an_empty_buffer_are_refused_by_key() {
        let row = r#"{"schema":1,"op":"allreduce","ranks":2,"bytes":1024,"time_us":10}"#;
        assert!(parse(Path::new("m.jsonl"), row).is_ok());
        for (from, to, key, says) in [
            (r#""bytes":1024"#, r#""bytes":1024,"bytes":2048"#, "bytes", "twice"),
            (r#""time_us":10"#, r#""time_us":10,"time_ms":1"#, "time_ms", "disagrees"),
            (r#","time_us":10"#, "", "time_us", "missing"),
            (r#""bytes":1024"#, r#""bytes":0"#, "bytes", "at least one byte"),
        ] {
            let error = parse(Path::new("m.jsonl"), &row.replace(from, to)).unwrap_err().to_string();
            assert!(error.contains(&format!("key `line 1: {key}`")) && error.contains(says), "{to}: {error}");
        }
        let both = parse(Path::new("m.jsonl"), &row.replace(r#""time_us":10"#, r#""time_us":10,"time_ms":0.01"#)).unwrap();
        assert_eq!(both[0].time_us, 10.0, "two times that agree are one");
    }

    #[test]
    fn values_no_real_run_gives_are_refused_with_their_line_and_key() {
        let good =
            r#"{"schema":1,"system":"x","tp":2,"gpu":"NVIDIA H200","op":"kernel","kernel":"gemm_down","tokens":8192,"time_us":2931.98}"#;
        assert!(parse(Path::new("m.jsonl"), good).is_ok());
        for (from, to, key) in [
            (r#""tp":2"#, r#""tp":0"#, "tp"),
            (r#""tokens":8192"#, r#""tokens":0"#, "tokens"),
            (r#""tokens":8192"#, r#""tokens":18446744073709551615"#, "tokens"),
            (r#""tp":2"#, r#""tp":2,"bytes":18446744073709551615"#, "bytes"),
            (r#""tp":2"#, r#""tp":2,"dtype":"int3""#, "dtype"),
            (r#""tp":2"#, r#""tp":2,"dtype":"float32","bytes":6"#, "bytes"),
            (r#""tp":2"#, r#""tp":2,"channels":65"#, "channels"),
            (r#""tp":2"#, r#""tp":2,"ranks":0"#, "ranks"),
            (r#""tp":2"#, r#""tp":2,"calls":0"#, "calls"),
            (r#""time_us":2931.98"#, r#""time_us":1e300"#, "time_us"),
        ] {
            let text = format!("\n{}", good.replace(from, to));
            let error = parse(Path::new("m.jsonl"), &text).unwrap_err().to_string();
            assert!(error.contains(&format!("m.jsonl: key `line 2: {key}`")), "{to}: {error}");
        }
    }
}
