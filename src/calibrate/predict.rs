//! What the model predicts for one measurement: the same operation, on the
//! same number of GPUs, simulated on the topology that stands for the
//! measured machine.

use crate::collective::{self, Algorithm, Choice, Op, Protocol, Request};
use crate::config::hardware::HardwareModel;
use crate::engine::{TaskGraph, run};
use crate::topology::{Medium, Topology};
use crate::transport::Mode;
use crate::units::{Bandwidth, Bytes, Time};
use crate::workload;

use super::schema::Measurement;

/// Why a measurement has no prediction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    /// The model does not cover this kind of measurement (it is listed, not
    /// counted in the error statistics).
    #[error("not modelled: {0}")]
    NotModelled(String),
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
    } else if measurement.op == "copy" {
        predict_copy(topo, model, measurement).map(plain)
    } else if measurement.op == "kernel" {
        workload::predict_kernel(model, measurement).map(plain).map_err(PredictError::NotModelled)
    } else {
        Err(PredictError::NotModelled(format!("operation {:?}", measurement.op)))
    }
}

fn predict_collective(topo: &Topology, model: &HardwareModel, m: &Measurement) -> Result<Prediction, PredictError> {
    let op: Op = m.op.parse().map_err(PredictError::Failed)?;
    let mode: Mode = m.transport.as_deref().unwrap_or("auto").parse().map_err(PredictError::NotModelled)?;
    let ranks = m.ranks.unwrap_or(topo.gpus().len() as u32) as usize;
    if ranks > topo.gpus().len() || ranks == 0 {
        return Err(PredictError::Failed(format!("{ranks} ranks measured; topology {} has {} GPUs", topo.name, topo.gpus().len())));
    }
    let request = Request {
        op,
        bytes: Bytes(m.bytes),
        ranks: topo.gpus()[..ranks].to_vec(),
        mode,
        algorithm: choice::<Algorithm>(m.algo.as_deref())?,
        protocol: choice::<Protocol>(m.proto.as_deref())?,
    };
    let outcome = collective::simulate(topo, model, request).map_err(|e| PredictError::Failed(e.to_string()))?;
    Ok(Prediction { time: outcome.time, detail: format!("{}/{}", outcome.algorithm, outcome.protocol) })
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
            // Every byte is read once and written once.
            let rate: Bandwidth = gpu.memory_bandwidth.scaled(gpu.compute.memory / 2.0);
            return Ok((model.copy_setup + bytes / rate).max(overhead));
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
