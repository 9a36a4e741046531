//! What the model predicts for one measurement: the same operation, on the
//! same number of GPUs, simulated on the topology that stands for the
//! measured machine.

use std::borrow::Cow;

use crate::collective::{self, Algorithm, Choice, CollectiveError, Op, Plan, Protocol, Request};
use crate::config::hardware::HardwareModel;
use crate::config::llm::LlmModel;
use crate::engine::{TaskGraph, run};
use crate::topology::{Medium, Topology};
use crate::transport::Mode;
use crate::units::{Bytes, Time};
use crate::workload::tp::{Pass, Query, TensorParallel};

use super::schema::{ALLREDUCE_SEQUENCE, LLM_FORWARD, Measurement};

/// Why a measurement has no prediction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    /// The model does not cover this kind of measurement (it is listed, not
    /// counted in the error statistics).
    #[error("not modelled: {0}")]
    NotModelled(String),
    /// The measurement ran on more GPUs than the topology has (a file of
    /// several GPU counts checked on a few of its GPUs): listed, not counted.
    #[error("not on this topology: {0}")]
    Elsewhere(String),
    #[error("{0}")]
    Failed(String),
}

fn choice<T: std::str::FromStr<Err = String>>(value: Option<&str>) -> Result<Choice<T>, PredictError> {
    value.unwrap_or("auto").parse().map_err(PredictError::Failed)
}

/// A predicted time, and what the model chose to get it ("ring/simple").
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub time: Time,
    pub detail: String,
}

/// The predicted time of `measurement` on `topo` with `model`.
pub fn predict(topo: &Topology, model: &HardwareModel, measurement: &Measurement) -> Result<Prediction, PredictError> {
    let plain = |time: Time| Prediction { time, detail: String::new() };
    if measurement.is_collective() {
        predict_collective(topo, model, measurement)
    } else if measurement.op == ALLREDUCE_SEQUENCE {
        predict_sequence(&as_measured(topo, measurement), model, measurement)
    } else if measurement.op == "copy" {
        predict_copy(topo, model, measurement).map(plain)
    } else if measurement.op == "kernel" {
        super::compute::predict_kernel(model, measurement)
    } else if measurement.op == LLM_FORWARD {
        super::compute::predict_forward(&as_measured(topo, measurement), model, measurement)
    } else {
        Err(PredictError::NotModelled(format!(
            "operation {:?}: icsim predicts allreduce, allgather, reducescatter, broadcast, {ALLREDUCE_SEQUENCE}, copy, kernel and {LLM_FORWARD}",
            measurement.op
        )))
    }
}

/// The topology as NCCL saw it in the measurement's environment:
/// NCCL_NVLS_ENABLE=0 (which the runner always sets) takes the switch's
/// in-network reduction away, so the tuner cannot pick NVLS.
fn as_measured<'t>(topo: &'t Topology, m: &Measurement) -> Cow<'t, Topology> {
    let nvls_off = m.env.as_deref().is_some_and(|env| env.split_whitespace().any(|setting| setting == "NCCL_NVLS_ENABLE=0"));
    if nvls_off && topo.policy.nvls {
        let mut without = topo.clone();
        without.policy.nvls = false;
        Cow::Owned(without)
    } else {
        Cow::Borrowed(topo)
    }
}

/// The transport and GPU count a collective measurement names, checked
/// against the topology.
fn transport_and_ranks(topo: &Topology, m: &Measurement) -> Result<(Mode, usize), PredictError> {
    let mode: Mode = m.transport.as_deref().unwrap_or("auto").parse().map_err(PredictError::NotModelled)?;
    let ranks = m.ranks.unwrap_or(topo.gpus().len() as u32) as usize;
    if ranks == 0 {
        return Err(PredictError::Failed("0 ranks measured; a collective needs at least 1".into()));
    }
    if ranks > topo.gpus().len() {
        return Err(PredictError::Elsewhere(format!("{ranks} ranks measured; topology {} has {} GPUs", topo.name, topo.gpus().len())));
    }
    Ok((mode, ranks))
}

/// `request` as `m` ran it: its caller, and the algorithm, protocol and
/// channel count it forced, if any.
fn as_run(m: &Measurement, request: Request) -> Result<Request, PredictError> {
    Ok(Request {
        algorithm: choice::<Algorithm>(m.algo.as_deref())?,
        protocol: choice::<Protocol>(m.proto.as_deref())?,
        stack: m.stack(),
        channels: m.channels,
        element: m.dtype.as_deref().map(str::parse).transpose().map_err(PredictError::Failed)?.unwrap_or_default(),
        ..request
    })
}

/// A collective NCCL itself refuses (an algorithm it has not for this
/// operation) is not modelled; anything else that fails is a failure.
fn plan_error(error: CollectiveError) -> PredictError {
    match error {
        CollectiveError::Unsupported(why) => PredictError::NotModelled(why),
        other => PredictError::Failed(other.to_string()),
    }
}

/// How the model runs a collective measurement: the plan NCCL's rules give
/// it on the topology as the measurement saw it.
pub fn plan_as_measured(topo: &Topology, model: &HardwareModel, m: &Measurement) -> Result<Plan, PredictError> {
    let seen = as_measured(topo, m);
    let op: Op = m.op.parse().map_err(PredictError::NotModelled)?;
    let (mode, ranks) = transport_and_ranks(&seen, m)?;
    let request = as_run(m, Request::new(op, Bytes(m.bytes), seen.gpus()[..ranks].to_vec(), mode))?;
    Plan::new(&seen, model, request).map_err(plan_error)
}

/// Simulates a plan, saying what the model chose ("ring/ll x4", and what
/// NCCL does differently from what was asked).
fn simulate_described(topo: &Topology, model: &HardwareModel, plan: &Plan) -> Result<Prediction, PredictError> {
    let outcome = collective::simulate_plan(topo, model, plan).map_err(plan_error)?;
    let mut detail = format!("{}/{} x{}", outcome.algorithm, outcome.protocol, outcome.channels);
    if let Some(note) = &outcome.note {
        detail += &format!(" ({note})");
    }
    Ok(Prediction { time: outcome.time, detail })
}

fn predict_collective(topo: &Topology, model: &HardwareModel, m: &Measurement) -> Result<Prediction, PredictError> {
    let plan = plan_as_measured(topo, model, m)?;
    simulate_described(&as_measured(topo, m), model, &plan)
}

/// A measured pass of an LLM's tensor-parallel allreduces: what the LLM
/// replay charges for it, `calls` allreduces of the pass's size one after
/// another (each as long as one alone on an idle network).
fn predict_sequence(topo: &Topology, model: &HardwareModel, m: &Measurement) -> Result<Prediction, PredictError> {
    let failed = |message: String| PredictError::Failed(message);
    let llm = LlmModel::load(m.model.as_deref().unwrap_or("llama-3.1-70b")).map_err(|e| failed(e.to_string()))?;
    let (mode, ranks) = transport_and_ranks(topo, m)?;
    let (Some(tokens), Some(calls)) = (m.tokens, m.calls) else {
        return Err(failed(format!("an {ALLREDUCE_SEQUENCE} measurement needs `tokens` and `calls`")));
    };
    let tp = TensorParallel::new(topo, model, &llm, ranks as u32, mode).map_err(|e| failed(e.to_string()))?;
    // A pass pushing `tokens` new tokens through every layer, as a prefill of that many does.
    let bytes = tp.allreduce_bytes(&Query { prompt: tokens, output: 0, batch: 1 }, Pass::Prefill);
    if bytes != Bytes(m.bytes) {
        return Err(failed(format!("{} measured per allreduce; {} at {tokens} tokens allreduces {bytes}", Bytes(m.bytes), llm.name)));
    }
    let request = tp.allreduce(bytes).ok_or_else(|| failed("one rank makes no allreduce".into()))?;
    let plan = Plan::new(topo, model, as_run(m, request)?).map_err(plan_error)?;
    let one = simulate_described(topo, model, &plan)?;
    Ok(Prediction { time: one.time * calls, detail: format!("{calls} x {}", one.detail) })
}

fn predict_copy(topo: &Topology, model: &HardwareModel, m: &Measurement) -> Result<Time, PredictError> {
    let path_name = m.path.as_deref().unwrap_or("");
    let overhead = model
        .copy_overhead
        .get(path_name)
        .copied()
        .ok_or_else(|| PredictError::NotModelled(format!("copy path {path_name:?} (no copy_overhead for it in the model)")))?;
    let bytes = Bytes(m.bytes);
    let gpus = topo.gpus();
    let gpu0 = gpus[0];
    let no_path = |what: &str| PredictError::Failed(format!("topology {} has no {what}", topo.name));
    let memory = topo.host_memory(topo.node(gpu0).socket).map_err(|e| PredictError::Failed(e.to_string()))?;
    let peer_path = |a, b| {
        topo.path(a, b, Medium::NvLinkDirect).or_else(|| topo.path(a, b, Medium::NvSwitch)).or_else(|| topo.path(a, b, Medium::Pcie))
    };
    let flows = match path_name {
        "d2d_gpu0" => {
            let gpu = model.gpu(&topo.gpu_model).map_err(PredictError::Failed)?;
            return Ok((model.copy_setup + bytes / gpu.local_copy_rate()).max(overhead));
        }
        "h2d_pinned" => vec![(topo.memory_path(gpu0, memory, true).ok_or_else(|| no_path("host-to-GPU path"))?, bytes)],
        "d2h_pinned" => vec![(topo.memory_path(gpu0, memory, false).ok_or_else(|| no_path("GPU-to-host path"))?, bytes)],
        "p2p_0to1" | "p2p_bidir_total" => {
            let gpu1 = *gpus.get(1).ok_or_else(|| no_path("second GPU"))?;
            let forward = peer_path(gpu0, gpu1).ok_or_else(|| no_path("GPU-to-GPU path"))?;
            if path_name == "p2p_0to1" {
                vec![(forward, bytes)]
            } else {
                let backward = peer_path(gpu1, gpu0).ok_or_else(|| no_path("GPU-to-GPU path"))?;
                let halves: Vec<Bytes> = bytes.split_even(2).collect();
                vec![(forward, halves[0]), (backward, halves[1])]
            }
        }
        other => return Err(PredictError::NotModelled(format!("copy path {other:?}"))),
    };
    let mut graph = TaskGraph::new();
    for (path, size) in flows {
        graph.transfer(path, size, None, &[]);
    }
    let schedule = run(&graph, &mut topo.network());
    // The fixed cost hides small transfers: a copy takes the longer of it
    // and the DMA's set-up plus the transfer.
    Ok((model.copy_setup + schedule.makespan()).max(overhead))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, TopologySpec, resolve};

    fn measured(op: &str, bytes: u64) -> Measurement {
        Measurement {
            schema: 1,
            op: op.into(),
            transport: Some("nvswitch".into()),
            ranks: Some(4),
            bytes,
            time_us: 1.0,
            ..Measurement::default()
        }
    }

    #[test]
    fn a_sequence_is_its_calls_times_one_allreduce() {
        let spec =
            TopologySpec { name: "hgx-h200".into(), options: PresetOptions { gpus: Some(4), gpu: None, host: None }, models: vec![] };
        let (topo, model) = resolve(&spec).unwrap();
        // Llama-3.1-70B decode: one token of 8192 bf16 values per allreduce, two per layer.
        let sequence = Measurement {
            model: Some("llama-3.1-70b".into()),
            tokens: Some(1),
            calls: Some(160),
            ..measured(ALLREDUCE_SEQUENCE, 16 << 10)
        };
        let one = predict(&topo, &model, &measured("allreduce", 16 << 10)).unwrap();
        let all = predict(&topo, &model, &sequence).unwrap();
        assert_eq!(all.time, one.time * 160);
        assert_eq!(all.detail, format!("160 x {}", one.detail));

        let wrong_size = Measurement { bytes: 32 << 10, ..sequence.clone() };
        let error = predict(&topo, &model, &wrong_size).unwrap_err().to_string();
        assert!(error.contains("32KiB measured per allreduce") && error.contains("16KiB"), "{error}");
        let no_calls = Measurement { calls: None, ..sequence };
        assert!(predict(&topo, &model, &no_calls).unwrap_err().to_string().contains("`calls`"));
    }

    #[test]
    fn nvls_turned_off_in_the_measured_environment_is_not_predicted() {
        let spec = TopologySpec { name: "hgx-h200".into(), options: PresetOptions { gpus: None, gpu: None, host: None }, models: vec![] };
        let (topo, model) = resolve(&spec).unwrap();
        let large = Measurement { ranks: Some(8), ..measured("allreduce", 1 << 30) };
        assert!(predict(&topo, &model, &large).unwrap().detail.starts_with("nvls/"), "8 H200 on NVSwitch reduce in the switch");
        let nvls_off = Measurement { env: Some("NCCL_NVLS_ENABLE=0 NCCL_PROTO=Simple".into()), ..large };
        assert_eq!(predict(&topo, &model, &nvls_off).unwrap().detail, "ring/simple x24");
    }
}
