//! The measurement reader: schema-1 JSON Lines or nccl-tests output. Rows
//! that are read are predicted on two GPUs of hgx-h200, as `calibrate
//! validate` does (small ones only, to keep each run short); never a panic.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use icsim::calibrate::nccl_tests::NcclTestsOptions;
use icsim::calibrate::{parse_measurements, validate};
use icsim::config::hardware::HardwareModel;
use icsim::topology::{PresetOptions, Topology, TopologySpec, resolve};
use libfuzzer_sys::fuzz_target;

static BOARD: LazyLock<(Topology, HardwareModel)> = LazyLock::new(|| {
    let spec = TopologySpec { name: "hgx-h200".into(), options: PresetOptions { gpus: Some(2), gpu: None, host: None }, models: Vec::new() };
    resolve(&spec).expect("the preset builds")
});

/// Largest measured size simulated per run.
const SIMULATED_BYTES: u64 = 1 << 16;

fuzz_target!(|text: &str| {
    let Ok(rows) = parse_measurements(Path::new("fuzzed.jsonl"), text, &NcclTestsOptions::default()) else { return };
    let small: Vec<_> = rows.into_iter().map(|(_, m)| m).filter(|m| m.bytes <= SIMULATED_BYTES).take(8).collect();
    let (topo, model) = &*BOARD;
    let _ = validate::compare(topo, model, &small);
});
