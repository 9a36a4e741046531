//! Rows of an experiment's results (`icsim run`, `icsim llm`), typed: one a
//! mode, its replay, its busiest link, the vendors' headline arithmetic and
//! its storage results, made records only to be written. The field names
//! are an interface (`--format json`, CSV columns, sweeps' columns). Reads
//! the workload's results; computes nothing.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::units::Time;
use crate::workload::experiment::{ExperimentResult, ModeResult};
use crate::workload::storage::experiment::{Operation, StorageRun, Transfer};
use crate::workload::tp::{AllreduceUse, Query};

use super::Record;

/// One mode's results as `icsim run` and `icsim llm` report them: its row,
/// what its query yields and costs, and its storage results where the
/// experiment has `[storage]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentRow<E> {
    pub mode: ModeRow,
    pub economics: E,
    pub storage: Option<StorageRow>,
}

impl<E: Serialize> ExperimentRow<E> {
    /// Every mode's row, with what its query yields and costs
    /// (`economics` of the mode's index and row).
    pub fn all(result: &ExperimentResult, economics: impl Fn(usize, &ModeRow) -> E) -> Vec<ExperimentRow<E>> {
        result
            .modes
            .iter()
            .enumerate()
            .map(|(i, mode)| {
                let row = ModeRow::of(mode, &result.model, &result.query);
                ExperimentRow {
                    economics: economics(i, &row),
                    mode: row,
                    storage: result.storage.get(i).map(|storage| StorageRow::of(storage, mode.replay.ttft())),
                }
            })
            .collect()
    }

    /// The row as written: the mode's fields, then its economics', then its
    /// storage's.
    pub fn record(&self) -> Record {
        let mut record = super::record_of(&self.mode);
        record.extend(super::record_of(&self.economics));
        record.extend(self.storage.iter().flat_map(StorageRow::fields));
        record
    }
}

/// One mode's row of results, with its query and LLM for context: the
/// workload's typed result flattened under the names of the interface
/// (`--format json`, CSV columns, sweeps' columns), in their order. Unit
/// conversions only; nothing here is computed from other fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub stack: String,
    pub scope: String,
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
            stack: mode.stack.name().to_string(),
            scope: mode.scope.name().to_string(),
            fusion: mode.fusion.clone(),
        }
    }
}

/// One mode's storage results: its drives, then each transfer and each
/// KV offload. Their columns' names depend on the operations and paths
/// (`load_gds_s`) and are part of the `--format json` interface.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRow {
    pub drives: usize,
    pub drive: String,
    /// Each GPU's share of the weights, where they are loaded.
    pub load_gb_per_gpu: Option<f64>,
    pub transfers: Vec<TransferRow>,
    pub offloads: Vec<OffloadRow>,
}

/// One transfer of a mode's storage run (a load, a checkpoint or a restore
/// over one path).
#[derive(Debug, Clone, PartialEq)]
pub struct TransferRow {
    pub operation: &'static str,
    pub path: String,
    pub s: f64,
    /// The load and then the query's first token (loads only).
    pub then_ttft_s: Option<f64>,
    pub gbps: f64,
    pub transport: String,
    pub bound: String,
    pub busiest_link: Option<String>,
    pub busiest_link_util: Option<f64>,
    pub cpu_cores: f64,
    pub host_memory_gbps: f64,
}

/// The query's KV cache written to one target while decode runs.
#[derive(Debug, Clone, PartialEq)]
pub struct OffloadRow {
    pub target: String,
    pub gb_per_gpu: f64,
    pub ms: f64,
    pub alone_ms: f64,
    pub decode_steps: u64,
    pub decode_ms: f64,
    pub decode_alone_ms: f64,
    pub decode_slowdown: f64,
    pub offload_slowdown: f64,
    pub shared_link: Option<String>,
}

impl StorageRow {
    /// Of `run`, a mode's storage results; `ttft` is its query's time to
    /// first token.
    pub fn of(run: &StorageRun, ttft: Time) -> StorageRow {
        let transfers = run
            .transfers
            .iter()
            .map(|Transfer { operation, path, run: done }| TransferRow {
                operation: operation.name(),
                path: path.to_string(),
                s: done.time.as_secs(),
                then_ttft_s: (*operation == Operation::Load).then(|| (done.time + ttft).as_secs()),
                gbps: done.gbps(),
                transport: done.transport.clone(),
                bound: done.bound_by(),
                busiest_link: done.limit.as_ref().map(|l| l.0.clone()),
                busiest_link_util: done.limit.as_ref().map(|l| l.2),
                cpu_cores: done.cpu_cores,
                host_memory_gbps: done.host_memory_gbps,
            })
            .collect();
        let offloads = run
            .offloads
            .iter()
            .map(|offload| {
                let c = &offload.contention;
                OffloadRow {
                    target: offload.target.clone(),
                    gb_per_gpu: offload.bytes_per_gpu.as_f64() / 1e9,
                    ms: c.storage_with.as_ms(),
                    alone_ms: c.storage_alone.as_ms(),
                    decode_steps: offload.steps,
                    decode_ms: c.other_with.as_ms(),
                    decode_alone_ms: c.other_alone.as_ms(),
                    decode_slowdown: c.other_slowdown(),
                    offload_slowdown: c.storage_slowdown(),
                    shared_link: c.shared.as_ref().map(|s| s.label.clone()),
                }
            })
            .collect();
        StorageRow {
            drives: run.drives,
            drive: run.drive.clone(),
            load_gb_per_gpu: run.transfers.iter().any(|t| t.operation == Operation::Load).then(|| run.bytes_per_gpu.as_f64() / 1e9),
            transfers,
            offloads,
        }
    }

    /// Its columns in order: `drives`, `drive`, then `<operation>_<path>_*`
    /// for each transfer and `kv_<target>_*` for each offload.
    pub fn fields(&self) -> Vec<(String, Value)> {
        let mut record = Record::new();
        let mut put = |key: String, value: Value| {
            record.insert(key, value);
        };
        put("drives".into(), json!(self.drives));
        put("drive".into(), json!(self.drive));
        if let Some(gb) = self.load_gb_per_gpu {
            put("load_gb_per_gpu".into(), json!(gb));
        }
        for t in &self.transfers {
            let key = |field: &str| format!("{}_{}_{field}", t.operation, t.path);
            put(key("s"), json!(t.s));
            if let Some(then) = t.then_ttft_s {
                put(key("then_ttft_s"), json!(then));
            }
            put(key("gbps"), json!(t.gbps));
            put(key("transport"), json!(t.transport));
            put(key("bound"), json!(t.bound));
            put(key("busiest_link"), json!(t.busiest_link));
            put(key("busiest_link_util"), json!(t.busiest_link_util));
            put(key("cpu_cores"), json!(t.cpu_cores));
            put(key("host_memory_gbps"), json!(t.host_memory_gbps));
        }
        for o in &self.offloads {
            let t = &o.target;
            // Every offload moves the same cache: one column.
            put("kv_offload_gb_per_gpu".into(), json!(o.gb_per_gpu));
            put(format!("kv_{t}_ms"), json!(o.ms));
            put(format!("kv_{t}_alone_ms"), json!(o.alone_ms));
            put(format!("kv_{t}_decode_steps"), json!(o.decode_steps));
            put(format!("kv_{t}_decode_ms"), json!(o.decode_ms));
            put(format!("kv_{t}_decode_alone_ms"), json!(o.decode_alone_ms));
            put(format!("kv_{t}_decode_slowdown"), json!(o.decode_slowdown));
            put(format!("kv_{t}_offload_slowdown"), json!(o.offload_slowdown));
            put(format!("kv_{t}_shared_link"), json!(o.shared_link));
        }
        record.into_iter().collect()
    }
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
        let record = &crate::report::record_of(&super::ModeRow::of(&result.modes[1], &result.model, &result.query));
        assert_eq!(record["mode"], "shm");
        assert_eq!(record["prefill_allreduce"], "4MiB");
        assert_eq!(record["headline_gbps"].as_f64().map(f64::round), Some(126.0), "PCIe Gen5 x16: 2 x 63 GB/s");
    }
}
