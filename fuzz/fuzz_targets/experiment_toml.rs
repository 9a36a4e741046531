//! The experiment file reader: any text, read as `configs/x.toml`, either
//! validates (presets built, TP degrees checked) or is refused; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = icsim::workload::experiment::Experiment::parse(std::path::Path::new("configs/fuzzed.toml"), text);
});
