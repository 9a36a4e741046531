//! The importers of `nvidia-smi topo -m` output and NCCL's topology dump:
//! any text whose format is recognised is imported and, if that works,
//! built as a topology; never a panic.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use icsim::config::hardware::HardwareModel;
use icsim::topology::import::{self, Format, ImportOptions};
use libfuzzer_sys::fuzz_target;

static MODEL: LazyLock<HardwareModel> = LazyLock::new(HardwareModel::base);

fuzz_target!(|text: &str| {
    let path = Path::new("fuzzed.txt");
    let Some(format) = Format::detect(text) else { return };
    if let Ok(raw) = import::parse(path, text, format, &ImportOptions::default(), &MODEL) {
        let _ = icsim::topology::build_from_file(path, &raw, &MODEL);
    }
});
