//! The LLM model file reader: a model that loads has shapes whose byte
//! counts (allreduces, KV cache) and TP degrees can be computed; never a panic.
#![no_main]

use icsim::config::llm::LlmModel;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(llm) = LlmModel::parse(std::path::Path::new("fuzzed.toml"), text) else { return };
    let _ = llm.allreduce_bytes(llm.context_length);
    let _ = llm.kv_cache_bytes_per_gpu(llm.context_length, 1, 1);
    let _ = icsim::workload::tp::allowed_degrees(&llm, 64);
});
