//! Records of an experiment's results (`icsim run`, `icsim llm`): one row a
//! mode, its replay, its busiest link, the vendors' headline arithmetic and
//! its storage results. The field names are an interface (`--format json`,
//! CSV columns, sweeps' columns). Reads the workload's results; computes
//! nothing.

use serde::Serialize;
use serde_json::json;

use crate::units::Time;
use crate::workload::experiment::{ExperimentResult, ModeResult};
use crate::workload::storage::experiment::{Operation, StorageRun, Transfer};
use crate::workload::tp::{AllreduceUse, Query};

use super::Record;

/// Every mode's row and what its query yields and costs (`economics`, one
/// a mode), with its storage fields where the experiment has `[storage]`.
pub fn records(result: &ExperimentResult, economics: &[impl Serialize]) -> Vec<Record> {
    let mut records: Vec<Record> = result
        .modes
        .iter()
        .zip(economics)
        .map(|(m, e)| {
            let mut record = mode_record(m, &result.model, &result.query);
            record.extend(super::record_of(e));
            record
        })
        .collect();
    for (record, (storage, mode)) in records.iter_mut().zip(result.storage.iter().zip(&result.modes)) {
        record.extend(storage_fields(storage, mode.replay.ttft()));
    }
    records
}

/// One mode's row of results, with its query and LLM for context: the
/// workload's typed result flattened under the names of the interface
/// (`--format json`, CSV columns, sweeps' columns), in their order. Unit
/// conversions only; nothing here is computed from other fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeRow {
    pub label: String,
    pub mode: String,
    pub transport: Option<String>,
    pub topology: String,
    pub gpu: String,
    pub host: String,
    pub gpus: usize,
    pub tp: u32,
    pub model: String,
    pub prompt: u64,
    pub output: u64,
    pub batch: u64,
    pub prefill_allreduce_bytes: Option<u64>,
    pub prefill_allreduce: Option<String>,
    pub prefill_allreduces: u64,
    pub prefill_algo: Option<String>,
    pub prefill_allreduce_us: Option<f64>,
    pub prefill_busbw_gbps: Option<f64>,
    pub prefill_gpu_link_util: Option<f64>,
    pub decode_allreduce_bytes: Option<u64>,
    pub decode_allreduce: Option<String>,
    pub decode_allreduces: u64,
    pub decode_algo: Option<String>,
    pub decode_allreduce_us: Option<f64>,
    pub decode_busbw_gbps: Option<f64>,
    pub decode_gpu_link_util: Option<f64>,
    pub tp_bytes_per_gpu: u64,
    pub tp_gb_per_gpu: f64,
    pub prefill_compute_ms: f64,
    pub decode_compute_ms: f64,
    pub compute_ms: f64,
    pub prefill_comm_ms: f64,
    pub decode_comm_ms: f64,
    pub comm_ms: f64,
    pub ttft_ms: f64,
    pub total_ms: f64,
    pub comm_share: f64,
    pub busiest_link: Option<String>,
    pub busiest_link_util: Option<f64>,
    pub headline_gbps: Option<f64>,
    pub naive_comm_ms: Option<f64>,
    pub naive_comm_ms_per_direction: Option<f64>,
    pub launch_wait_ms: f64,
    pub stack: &'static str,
    pub scope: &'static str,
    pub fusion: String,
}

impl ModeRow {
    pub fn of(mode: &ModeResult, model: &str, query: &Query) -> ModeRow {
        let r = &mode.replay;
        let (prefill, decode) = (r.prefill_allreduce.as_ref(), r.decode_allreduce.as_ref());
        let algo = |u: &AllreduceUse| format!("{}/{}", u.algorithm, u.protocol);
        ModeRow {
            label: mode.label.clone(),
            mode: mode.mode.to_string(),
            transport: prefill.map(|u| u.transport.clone()),
            topology: mode.topology.clone(),
            gpu: mode.gpu_model.clone(),
            host: mode.host.clone(),
            gpus: mode.gpus,
            tp: mode.tp,
            model: model.to_string(),
            prompt: query.prompt,
            output: query.output,
            batch: query.batch,
            prefill_allreduce_bytes: prefill.map(|u| u.bytes.0),
            prefill_allreduce: prefill.map(|u| u.bytes.to_string()),
            prefill_allreduces: prefill.map_or(0, |u| u.calls),
            prefill_algo: prefill.map(algo),
            prefill_allreduce_us: prefill.map(|u| u.time.as_us()),
            prefill_busbw_gbps: prefill.map(|u| u.busbw_gbps),
            prefill_gpu_link_util: prefill.map(|u| u.gpu_link_util),
            decode_allreduce_bytes: decode.map(|u| u.bytes.0),
            decode_allreduce: decode.map(|u| u.bytes.to_string()),
            decode_allreduces: decode.map_or(0, |u| u.calls),
            decode_algo: decode.map(algo),
            decode_allreduce_us: decode.map(|u| u.time.as_us()),
            decode_busbw_gbps: decode.map(|u| u.busbw_gbps),
            decode_gpu_link_util: decode.map(|u| u.gpu_link_util),
            tp_bytes_per_gpu: r.tp_bytes_per_gpu.0,
            tp_gb_per_gpu: r.tp_bytes_per_gpu.as_f64() / 1e9,
            prefill_compute_ms: r.prefill.compute.as_ms(),
            decode_compute_ms: r.decode.compute.as_ms(),
            compute_ms: r.compute().as_ms(),
            prefill_comm_ms: r.prefill.comm.as_ms(),
            decode_comm_ms: r.decode.comm.as_ms(),
            comm_ms: r.comm().as_ms(),
            ttft_ms: r.ttft().as_ms(),
            total_ms: r.total().as_ms(),
            comm_share: r.comm_share(),
            busiest_link: mode.busiest_link.as_ref().map(|(name, _)| name.clone()),
            busiest_link_util: mode.busiest_link.as_ref().map(|(_, util)| *util),
            headline_gbps: mode.headline.map(|rate| 2.0 * rate.as_gbps()),
            naive_comm_ms: mode.naive_comm(2).map(Time::as_ms),
            naive_comm_ms_per_direction: mode.naive_comm(1).map(Time::as_ms),
            launch_wait_ms: r.launch_wait().as_ms(),
            stack: mode.stack.name(),
            scope: mode.scope.name(),
            fusion: mode.fusion.clone(),
        }
    }
}

/// One mode's row as a record (the form tables, CSV and sweeps' rows take).
pub fn mode_record(mode: &ModeResult, model: &str, query: &Query) -> Record {
    super::record_of(&ModeRow::of(mode, model, query))
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
        let record = &super::mode_record(&result.modes[1], &result.model, &result.query);
        assert_eq!(record["mode"], "shm");
        assert_eq!(record["prefill_allreduce"], "4MiB");
        assert_eq!(record["headline_gbps"].as_f64().map(f64::round), Some(126.0), "PCIe Gen5 x16: 2 x 63 GB/s");
    }
}
