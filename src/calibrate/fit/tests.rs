//! Every parameter the fit finds in the shipped measurements points at one
//! field through both of its doors: its key, written into an overlay and
//! loaded (as a fit's output and a sweep's `hardware.*` change are), is what
//! its accessor reads, and what its accessor writes is what its key reads
//! back out of the model.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Parameter, Source, Unit, build_all, groups};
use crate::calibrate::nccl_tests::NcclTestsOptions;
use crate::calibrate::read_measurements;
use crate::config::dotted::{self, Overlay};
use crate::config::hardware::{self, HardwareModel, ModelSource};
use crate::topology::{PRESET_MODELS, PresetOptions, TopologySpec, blueprint};
use crate::units::{Bandwidth, Time};

/// The parameters `groups` makes of each shipped measurement folder's
/// files on a preset of the board they were measured on, by key.
fn fitted_parameters() -> BTreeMap<String, Parameter> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements");
    let sets: [(&str, &[&str], &str, Option<u32>); 8] = [
        ("h200x2-runner", &["measurements.jsonl"], "hgx-h200", Some(2)),
        ("h200x4-runner", &["measurements.jsonl"], "hgx-h200", Some(4)),
        ("h200x4-channels", &["measurements.jsonl"], "hgx-h200", Some(4)),
        ("h200-device-1gpu", &["measurements.jsonl", "one-rank.jsonl", "torch-caller.jsonl"], "hgx-h200", Some(1)),
        ("h200-kernels", &["measurements.jsonl"], "hgx-h200", Some(1)),
        ("h200-forward", &["forward.jsonl", "profile.jsonl"], "hgx-h200", Some(2)),
        ("public-aiconfigurator", &["gb200.jsonl"], "gb200-nvl72", Some(4)),
        ("public-aiconfigurator", &["a100.jsonl"], "hgx-a100", Some(4)),
    ];
    let mut found = BTreeMap::new();
    for (folder, files, preset, gpus) in sets {
        let options = PresetOptions { gpus, ..PresetOptions::default() };
        let (board, model) = blueprint(&TopologySpec { name: preset.into(), options, models: Vec::new() }).unwrap();
        let sources: Vec<Source> = files
            .iter()
            .map(|file| {
                let measurements = read_measurements(&root.join(folder).join(file), &NcclTestsOptions::default()).unwrap();
                Source { board: board.clone(), measurements }
            })
            .collect();
        let (groups, _) = groups(&build_all(&sources, &model).unwrap(), &model, &sources);
        for parameter in groups.into_iter().flat_map(|g| g.parameters) {
            found.entry(parameter.key.clone()).or_insert(parameter);
        }
    }
    found
}

/// A key's value in a loaded model as the parameter's number.
fn number(value: &toml::Value, unit: Unit) -> f64 {
    match unit {
        Unit::Time => value.as_str().and_then(|t| t.parse::<Time>().ok()).map(Time::as_us),
        Unit::Rate => value.as_str().and_then(|t| t.parse::<Bandwidth>().ok()).map(Bandwidth::as_gbps),
        Unit::Ratio => value.as_float().or_else(|| value.as_integer().map(|i| i as f64)),
    }
    .unwrap_or_else(|| panic!("{value} is not a {unit:?}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-3 * a.abs().max(b.abs()).max(1e-6)
}

#[test]
fn every_fitted_parameter_reads_and_writes_its_own_key() {
    let parameters = fitted_parameters();
    // Each kind of group the shipped data identifies is here.
    for prefix in ["protocol.", "cta.sm90.", "cta.sm100.", "cta.sm80.", "contention.", "gpu.h200.compute", "stack.", "nvlink.", "pcie."] {
        assert!(parameters.keys().any(|k| k.starts_with(prefix)), "no fitted key starts with {prefix}: {:?}", parameters.keys());
    }
    // Every preset loads the same layers: what the fit starts from.
    let layers: Vec<ModelSource> = PRESET_MODELS.iter().map(|name| hardware::shipped(name).expect("shipped")).collect();
    let start = HardwareModel::load(&layers).unwrap();
    for (key, parameter) in &parameters {
        let (low, high) = parameter.bounds;
        // A value inside the bounds that no model starts at.
        let value = low + (high - low) * 0.3173;
        // By key (an overlay, as a fit writes and a sweep changes), then by accessor.
        let mut overlay = Overlay::default();
        overlay.set(key, parameter.unit.written(value));
        let written = layers.iter().cloned().chain(overlay.into_source("round-trip".into())).collect::<Vec<_>>();
        let by_key = HardwareModel::load(&written).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(close(parameter.get(&by_key), value), "{key}: the key set {value}, the accessor reads {}", parameter.get(&by_key));
        // By accessor, then by key.
        let mut by_accessor = start.clone();
        parameter.set(&mut by_accessor, value);
        let read = dotted::get(&by_accessor, key).unwrap_or_else(|| panic!("{key} is not a key of the model"));
        assert!(close(number(&read, parameter.unit), value), "{key}: the accessor set {value}, the key reads {read}");
    }
}
