//! Records of an experiment's results (`icsim run`, `icsim llm`): one row a
//! mode, its replay, its busiest link, the vendors' headline arithmetic and
//! its storage results. The field names are an interface (`--format json`,
//! CSV columns, sweeps' columns). Reads the workload's results; computes
//! nothing.

use serde_json::json;

use crate::units::Time;
use crate::workload::experiment::{ExperimentResult, ModeResult};
use crate::workload::storage::experiment::{Operation, StorageRun, Transfer};
use crate::workload::tp::{AllreduceUse, Query};

use super::Record;

/// Every mode's row, with its storage fields where the experiment has
/// `[storage]`.
pub fn records(result: &ExperimentResult) -> Vec<Record> {
    let mut records: Vec<Record> = result.modes.iter().map(|m| mode_record(m, &result.model, &result.query)).collect();
    for (record, (storage, mode)) in records.iter_mut().zip(result.storage.iter().zip(&result.modes)) {
        record.extend(storage_fields(storage, mode.replay.ttft()));
    }
    records
}

/// One mode's row of results, with `query` and `model` for context. The field
/// names are an interface (`--format json`).
pub fn mode_record(mode: &ModeResult, model: &str, query: &Query) -> Record {
    let r = &mode.replay;
    let algo = |u: &Option<AllreduceUse>| u.as_ref().map(|u| format!("{}/{}", u.algorithm, u.protocol));
    let value = json!({
        "label": mode.label,
        "mode": mode.mode.to_string(),
        "transport": r.prefill_allreduce.as_ref().map(|u| u.transport.clone()),
        "topology": mode.topology,
        "gpu": mode.gpu_model,
        "host": mode.host,
        "gpus": mode.gpus,
        "tp": mode.tp,
        "model": model,
        "prompt": query.prompt,
        "output": query.output,
        "batch": query.batch,
        "prefill_allreduce_bytes": r.prefill_allreduce.as_ref().map(|u| u.bytes.0),
        "prefill_allreduce": r.prefill_allreduce.as_ref().map(|u| u.bytes.to_string()),
        "prefill_allreduces": r.prefill_allreduce.as_ref().map_or(0, |u| u.calls),
        "prefill_algo": algo(&r.prefill_allreduce),
        "prefill_allreduce_us": r.prefill_allreduce.as_ref().map(|u| u.time.as_us()),
        "prefill_busbw_gbps": r.prefill_allreduce.as_ref().map(|u| u.busbw_gbps),
        "prefill_gpu_link_util": r.prefill_allreduce.as_ref().map(|u| u.gpu_link_util),
        "decode_allreduce_bytes": r.decode_allreduce.as_ref().map(|u| u.bytes.0),
        "decode_allreduce": r.decode_allreduce.as_ref().map(|u| u.bytes.to_string()),
        "decode_allreduces": r.decode_allreduce.as_ref().map_or(0, |u| u.calls),
        "decode_algo": algo(&r.decode_allreduce),
        "decode_allreduce_us": r.decode_allreduce.as_ref().map(|u| u.time.as_us()),
        "decode_busbw_gbps": r.decode_allreduce.as_ref().map(|u| u.busbw_gbps),
        "decode_gpu_link_util": r.decode_allreduce.as_ref().map(|u| u.gpu_link_util),
        "tp_bytes_per_gpu": r.tp_bytes_per_gpu.0,
        "tp_gb_per_gpu": r.tp_bytes_per_gpu.as_f64() / 1e9,
        "prefill_compute_ms": r.prefill.compute.as_ms(),
        "decode_compute_ms": r.decode.compute.as_ms(),
        "compute_ms": r.compute().as_ms(),
        "prefill_comm_ms": r.prefill.comm.as_ms(),
        "decode_comm_ms": r.decode.comm.as_ms(),
        "comm_ms": r.comm().as_ms(),
        "ttft_ms": r.ttft().as_ms(),
        "total_ms": r.total().as_ms(),
        "comm_share": r.comm_share(),
        "busiest_link": mode.busiest_link.as_ref().map(|(name, _)| name.clone()),
        "busiest_link_util": mode.busiest_link.as_ref().map(|(_, util)| *util),
        "headline_gbps": mode.headline.map(|rate| 2.0 * rate.as_gbps()),
        "naive_comm_ms": mode.naive_comm(2).map(Time::as_ms),
        "naive_comm_ms_per_direction": mode.naive_comm(1).map(Time::as_ms),
    });
    let mut record = value.as_object().cloned().expect("a JSON object");
    let forward = json!({
        "launch_wait_ms": r.launch_wait().as_ms(),
        "stack": mode.stack.name(),
        "scope": mode.scope.name(),
        "fusion": mode.fusion,
    });
    record.extend(forward.as_object().cloned().expect("a JSON object"));
    record
}

/// Record fields of one mode's storage results (the names are part of the
/// `--format json` interface).
pub fn storage_fields(run: &StorageRun, ttft: Time) -> Record {
    let mut record = Record::new();
    let mut put = |key: String, value: serde_json::Value| {
        record.insert(key, value);
    };
    put("drives".into(), json!(run.drives));
    put("drive".into(), json!(run.drive));
    if run.transfers.iter().any(|t| t.operation == Operation::Load) {
        put("load_gb_per_gpu".into(), json!(run.bytes_per_gpu.as_f64() / 1e9));
    }
    for Transfer { operation, path, run: done } in &run.transfers {
        let key = |field: &str| format!("{}_{path}_{field}", operation.name());
        put(key("s"), json!(done.time.as_secs()));
        if *operation == Operation::Load {
            put(key("then_ttft_s"), json!((done.time + ttft).as_secs()));
        }
        put(key("gbps"), json!(done.gbps()));
        put(key("transport"), json!(done.transport));
        put(key("bound"), json!(done.bound_by()));
        put(key("busiest_link"), json!(done.limit.as_ref().map(|l| l.0.clone())));
        put(key("busiest_link_util"), json!(done.limit.as_ref().map(|l| l.2)));
        put(key("cpu_cores"), json!(done.cpu_cores));
        put(key("host_memory_gbps"), json!(done.host_memory_gbps));
    }
    for offload in &run.offloads {
        let (t, c) = (&offload.target, &offload.contention);
        put("kv_offload_gb_per_gpu".into(), json!(offload.bytes_per_gpu.as_f64() / 1e9));
        put(format!("kv_{t}_ms"), json!(c.storage_with.as_ms()));
        put(format!("kv_{t}_alone_ms"), json!(c.storage_alone.as_ms()));
        put(format!("kv_{t}_decode_steps"), json!(offload.steps));
        put(format!("kv_{t}_decode_ms"), json!(c.other_with.as_ms()));
        put(format!("kv_{t}_decode_alone_ms"), json!(c.other_alone.as_ms()));
        put(format!("kv_{t}_decode_slowdown"), json!(c.other_slowdown()));
        put(format!("kv_{t}_offload_slowdown"), json!(c.storage_slowdown()));
        put(format!("kv_{t}_shared_link"), json!(c.shared.as_ref().map(|s| s.label.clone())));
    }
    record
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::workload::experiment::{Experiment, RunOptions, run};

    #[test]
    fn a_mode_row_names_its_mode_its_allreduce_and_the_headline_figure() {
        let text = "model = \"llama-3.1-8b\"\ntp = 4\ntopology = \"hgx-h20\"\ngpus = 4\n[query]\nprompt = 512\noutput = 4\n[[mode]]\ntransport = \"nvswitch\"\n[[mode]]\ntransport = \"shm\"\n";
        let experiment = Experiment::parse(Path::new("t.toml"), text).unwrap();
        let result = run(&experiment, &RunOptions::replay_only(), &|| {}).unwrap();
        let record = &super::records(&result)[1];
        assert_eq!(record["mode"], "shm");
        assert_eq!(record["prefill_allreduce"], "4MiB");
        assert_eq!(record["headline_gbps"].as_f64().map(f64::round), Some(126.0), "PCIe Gen5 x16: 2 x 63 GB/s");
    }
}
