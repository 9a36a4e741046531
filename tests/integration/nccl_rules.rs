//! NCCL's own rules as icsim re-derives them, against what NCCL 2.28.3
//! printed on 2 and 4 H200 (models/hardware/measurements/h200x4-channels:
//! its tuning table, and the algorithm, protocol and channels of every call
//! with NCCL_DEBUG_SUBSYS=TUNING). These rules only choose; the tests hold
//! them to NCCL exactly.

use std::path::{Path, PathBuf};

use icsim::collective::nccl;
use icsim::collective::{Algorithm, Choice, Op, Plan, Protocol, Request};
use icsim::config::hardware::HardwareModel;
use icsim::topology::{Topology, TopologySpec, resolve};
use icsim::transport::{Mode, PathClass};
use icsim::units::Bytes;

use crate::common::json_lines;

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements/h200x4-channels")
}

/// The board the logs were taken on, as NCCL dumped it, with the base model.
fn board() -> (Topology, HardwareModel) {
    let spec =
        TopologySpec { name: folder().join("nccl-topo.xml").display().to_string(), models: vec!["base".into()], ..Default::default() };
    resolve(&spec).expect("the measured board imports")
}

fn rows(file: &str) -> Vec<serde_json::Value> {
    json_lines(&folder().join(file))
}

/// A runner setting's name ("shm-proto-ll128-channels-4") as what it forced.
struct Setting {
    mode: Mode,
    protocol: Choice<Protocol>,
    algorithm: Choice<Algorithm>,
    channels: Option<u32>,
}

fn setting(name: &str) -> Setting {
    let mut parts = name.split('-');
    let mode = if parts.next() == Some("shm") { Mode::Shm } else { Mode::Nvswitch };
    let mut setting = Setting { mode, protocol: Choice::Auto, algorithm: Choice::Auto, channels: None };
    while let Some(key) = parts.next() {
        let value = parts.next().expect("keys come with values");
        match key {
            "proto" => setting.protocol = Choice::Fixed(value.parse().expect("a protocol")),
            "algo" => setting.algorithm = Choice::Fixed(value.parse().expect("an algorithm")),
            "channels" => setting.channels = Some(value.parse().expect("a count")),
            other => panic!("unknown setting part {other}"),
        }
    }
    setting
}

fn op(name: &str) -> Op {
    match name {
        "allreduce" => Op::AllReduce,
        "allgather" => Op::AllGather,
        "reducescatter" => Op::ReduceScatter,
        other => panic!("unexpected op {other}"),
    }
}

#[test]
fn ncclss_tuning_table_is_reproduced_for_every_algorithm_and_protocol() {
    let (topo, model) = board();
    let arch = model.nccl_arch(90).unwrap().clone();
    let mut checked = 0;
    for row in rows("nccl-tuning.jsonl") {
        let name = row["setting"].as_str().unwrap();
        // Forced settings print zeros for what they disable; the unforced
        // tables hold every term.
        if name != "default" && name != "shm" {
            continue;
        }
        let (printed_latency, printed_bw) = (row["latency_us"].as_f64().unwrap(), row["bandwidth_gbps"].as_f64().unwrap());
        if printed_bw == 0.0 {
            continue;
        }
        let ranks = row["ranks"].as_u64().unwrap() as u32;
        let setting = setting(name);
        let algorithm: Algorithm = row["algo"].as_str().unwrap().parse().unwrap();
        let protocol: Protocol = row["proto"].as_str().unwrap().parse().unwrap();
        let request = Request::new(op(row["op"].as_str().unwrap()), Bytes::mib(1), topo.gpus()[..ranks as usize].to_vec(), setting.mode);
        let plan = Plan::new(&topo, &model, request.clone()).unwrap();
        let class = if setting.mode == Mode::Shm { PathClass::Shm } else { PathClass::Nvlink };
        let candidate = nccl::Candidate { class, op: request.op, algorithm, protocol, ranks };
        let (latency, bw) =
            nccl::model_terms(&model, &arch, &plan.nccl, &candidate).unwrap_or_else(|| panic!("{row}: icsim has no term NCCL has"));
        assert!((latency - printed_latency).abs() < 0.051, "{row}: latency {latency:.2}");
        // NCCL prints one decimal.
        assert!((bw - printed_bw).abs() < 0.051, "{row}: bandwidth {bw:.2}");
        checked += 1;
    }
    println!("{checked} latency and bandwidth terms of NCCL's table reproduced");
    assert!(checked >= 40, "only {checked} terms checked");
}

#[test]
fn every_logged_call_gets_ncclss_algorithm_protocol_and_channel_count() {
    let (topo, model) = board();
    let mut mismatches = Vec::new();
    let logged = rows("nccl-choices.jsonl");
    for row in &logged {
        let setting = setting(row["setting"].as_str().unwrap());
        let ranks = row["ranks"].as_u64().unwrap() as usize;
        let op = op(row["op"].as_str().unwrap());
        // NCCL logs all-gather and reduce-scatter by one rank's part.
        let logged_bytes = row["nccl_bytes"].as_u64().unwrap();
        let bytes = if op == Op::AllReduce { logged_bytes } else { logged_bytes * ranks as u64 };
        let request = Request {
            algorithm: setting.algorithm,
            protocol: setting.protocol,
            channels: setting.channels,
            ..Request::new(op, Bytes(bytes), topo.gpus()[..ranks].to_vec(), setting.mode)
        };
        let plan = Plan::new(&topo, &model, request).unwrap_or_else(|e| panic!("{row}: {e}"));
        let got = (plan.algorithm.to_string(), plan.protocol.to_string(), plan.channels);
        let want = (
            row["algo"].as_str().unwrap().to_string(),
            row["proto"].as_str().unwrap().to_string(),
            row["channels"].as_u64().unwrap() as u32,
        );
        if got != want {
            mismatches.push(format!("{row}: icsim {got:?}"));
        }
    }
    println!("{} of {} logged calls differ from NCCL's choice", mismatches.len(), logged.len());
    for m in &mismatches {
        println!("  {m}");
    }
    assert!(mismatches.is_empty(), "{} calls differ", mismatches.len());
}
