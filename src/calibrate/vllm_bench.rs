//! A reader for `vllm bench latency --output-json` results: the mean
//! latency of generating `output_len` tokens for `batch_size` prompts of
//! `input_len` tokens, as one `op: llm_forward` row of phase `query` (a
//! prefill, then `output_len - 1` decode steps). The JSON holds only times,
//! so the model, TP degree and lengths come from flags, as vLLM took them.
//! vLLM runs decode in CUDA graphs (stack `nccl-graph` unless said), its own
//! kernels (fusion `vllm`) and its custom allreduce where faster
//! (`algo: fastest`).

use std::path::Path;

use serde::Deserialize;

use super::schema::{LLM_FORWARD, Measurement};
use crate::config::ConfigError;
use crate::stack::Stack;

/// What the JSON does not say, from the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VllmBenchOptions {
    /// The LLM vLLM served (a shipped name or a model file).
    pub llm: Option<String>,
    pub tp: Option<u32>,
    pub input_len: Option<u64>,
    pub output_len: Option<u64>,
    pub batch_size: Option<u64>,
    pub stack: Option<Stack>,
    /// The transport NCCL used (default auto: what NCCL picks).
    pub transport: Option<String>,
}

#[derive(Deserialize)]
struct Latency {
    avg_latency: f64,
}

/// Whether `text` is `vllm bench latency` output (one JSON object with an
/// `avg_latency`).
pub fn is_vllm_bench(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.get("avg_latency").is_some())
}

/// The result in `text`, read from `path`, as a measurement.
pub fn parse(path: &Path, text: &str, options: &VllmBenchOptions) -> Result<Vec<Measurement>, ConfigError> {
    let latency: Latency = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        message: format!("{e}; expected vllm bench latency's JSON with avg_latency in seconds"),
    })?;
    if !(latency.avg_latency.is_finite() && latency.avg_latency > 0.0) {
        return Err(ConfigError::invalid(path, "avg_latency", "must be a positive number of seconds"));
    }
    let missing = |flag: &str| {
        ConfigError::invalid(
            "command line",
            flag,
            format!("{} is a vllm bench latency result, which does not say it: give {flag} as vLLM was run", path.display()),
        )
    };
    let output_len = options.output_len.filter(|&n| n > 0).ok_or_else(|| missing("--output-len"))?;
    Ok(vec![Measurement {
        schema: 1,
        system: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        op: LLM_FORWARD.into(),
        model: Some(options.llm.clone().ok_or_else(|| missing("--model"))?),
        tp: Some(options.tp.filter(|&tp| tp > 0).ok_or_else(|| missing("--tp"))?),
        phase: Some("query".into()),
        tokens: Some(options.input_len.filter(|&n| n > 0).ok_or_else(|| missing("--input-len"))?),
        batch: Some(options.batch_size.filter(|&n| n > 0).ok_or_else(|| missing("--batch-size"))?),
        // The prefill yields the first token; every other one is a decode step.
        output: Some(output_len - 1),
        transport: Some(options.transport.clone().unwrap_or_else(|| "auto".into())),
        algo: Some("fastest".into()),
        fusion: Some("vllm".into()),
        stack: Some(options.stack.unwrap_or(Stack::NcclGraph)),
        time_us: latency.avg_latency * 1e6,
        timing: Some("vllm bench latency: mean end-to-end latency of one batch".into()),
        source: Some(format!("vllm bench latency --output-json {}", path.display())),
        ..Measurement::default()
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULT: &str = r#"{"avg_latency": 2.5, "latencies": [2.4, 2.5, 2.6], "percentiles": {"50": 2.5, "99": 2.6}}"#;

    fn options() -> VllmBenchOptions {
        VllmBenchOptions {
            llm: Some("llama-3.1-8b".into()),
            tp: Some(2),
            input_len: Some(1024),
            output_len: Some(128),
            batch_size: Some(8),
            ..Default::default()
        }
    }

    #[test]
    fn a_result_is_one_query_of_the_flags_shape() {
        assert!(is_vllm_bench(RESULT) && !is_vllm_bench("{\"schema\": 1}\n{\"schema\": 1}"));
        let rows = parse(Path::new("h200-tp2.json"), RESULT, &options()).unwrap();
        let m = &rows[0];
        assert_eq!(
            (m.op.as_str(), m.phase.as_deref(), m.tokens, m.output, m.batch),
            ("llm_forward", Some("query"), Some(1024), Some(127), Some(8))
        );
        assert_eq!((m.time_us, m.stack(), m.system.as_str()), (2.5e6, Stack::NcclGraph, "h200-tp2"));
    }

    #[test]
    fn what_the_json_lacks_is_asked_for_by_flag() {
        let error = parse(Path::new("r.json"), RESULT, &VllmBenchOptions { tp: None, ..options() }).unwrap_err().to_string();
        assert!(error.contains("--tp") && error.contains("r.json"), "{error}");
        let error = parse(Path::new("r.json"), "{\"avg_latency\": -1}", &options()).unwrap_err().to_string();
        assert!(error.contains("avg_latency"), "{error}");
    }
}
