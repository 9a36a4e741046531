//! The hardware model overlay reader: merged over the base model and
//! validated; a model that loads must build every preset or refuse it, and
//! say the plausible range of its links; never a panic.
#![no_main]

use icsim::config::hardware::{HardwareModel, ModelSource};
use icsim::topology::{PRESETS, PresetOptions, plausible::KnownRange, preset};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let overlay = ModelSource::Text { label: "fuzzed.toml".into(), text: text.to_string() };
    let Ok(model) = HardwareModel::load(&[overlay]) else { return };
    let _ = KnownRange::of(&model);
    for (name, _) in PRESETS {
        let _ = preset(name, &PresetOptions::default(), &model);
    }
});
