//! The topology file reader: parsed, built with the base hardware model,
//! described (`topo show`) and checked for plausibility; never a panic.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use icsim::config::hardware::HardwareModel;
use icsim::config::parse_toml;
use icsim::config::topology::TopologyFile;
use libfuzzer_sys::fuzz_target;

static MODEL: LazyLock<HardwareModel> = LazyLock::new(HardwareModel::base);

fuzz_target!(|text: &str| {
    let path = Path::new("fuzzed.toml");
    let Ok(raw) = parse_toml::<TopologyFile>(path, text) else { return };
    if let Ok(topo) = icsim::topology::build_from_file(path, &raw, &MODEL) {
        let _ = icsim::topology::describe(&topo);
        let _ = icsim::topology::plausible::unusual_links(&topo);
    }
});
