//! What the command line says beside results that may not be physical:
//! warnings about links far outside known hardware and about measurements
//! of another GPU than the topology's, a `warning` field on
//! each result such a link limits or whose link utilisation passes 1 (which
//! a correct simulation never gives). Computes no result (times that reach
//! the end of the simulated clock are refused where they are simulated).

use std::collections::BTreeMap;

use icsim::calibrate::schema::Measurement;
use icsim::config::hardware::HardwareModel;
use icsim::report::Record;
use icsim::topology::{Topology, plausible};
use icsim::workload::gpu_key;
use serde_json::Value;

use super::notices;

/// Utilisation above 1 by more than rounding is a bug, not a busy link.
const UTILISATION_TOLERANCE: f64 = 1e-6;

/// Prints a warning for every link of `topo` far outside known hardware.
pub fn warn_unusual_links(topo: &Topology) {
    for unusual in plausible::unusual_links(topo) {
        notices::warn(format!("{}: {}", topo.name, unusual.why));
    }
}

/// Prints a warning for every GPU that rows of `file` were measured on
/// other than `topo`'s: their collectives and copies are simulated on
/// `topo`'s GPU (kernels and forwards on their own), so the comparison is
/// not like with like.
pub fn warn_other_gpus(file: &std::path::Path, topo: &Topology, model: &HardwareModel, rows: &[Measurement]) {
    let mut others: BTreeMap<&str, usize> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.is_collective() || r.op == "copy") {
        if let Some(name) = row.gpu.as_deref().filter(|name| gpu_key(model, name).as_deref() != Some(topo.gpu_model.as_str())) {
            *others.entry(name).or_default() += 1;
        }
    }
    for (name, count) in others {
        let key = gpu_key(model, name).map_or("not in the hardware model".to_string(), |key| format!("`{key}` in the hardware model"));
        notices::warn(format!(
            "{}: {count} rows were measured on {name} ({key}), simulated here on {}'s {}; pass a --topology with that GPU",
            file.display(),
            topo.name,
            topo.gpu_model
        ));
    }
}

/// What makes `record` (a result on `topo`) doubtful, if anything: its
/// busiest link (named by its label in the `busiest_link` field) is far
/// slower than any real part, or a `*_util` field passes 1.
pub fn doubt(record: &Record, topo: &Topology) -> Option<String> {
    let mut reasons = Vec::new();
    if let Some(Value::String(busiest)) = record.get("busiest_link") {
        let slow =
            plausible::unusual_links(topo).into_iter().any(|u| plausible::is_far_slower(topo, u.link) && same_cable(topo, u.link, busiest));
        if slow {
            reasons.push(format!("dominated by {busiest}, far slower than any real part"));
        }
    }
    for (field, value) in record {
        if field.ends_with("_util") && value.as_f64().is_some_and(|u| u > 1.0 + UTILISATION_TOLERANCE) {
            reasons.push(format!("{field} is {}, above 1: the simulation overcounted this link (a bug; please report it)", value));
        }
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// Whether `label` names `link` or the other direction of its cable.
fn same_cable(topo: &Topology, link: icsim::network::LinkId, label: &str) -> bool {
    let l = topo.link(link);
    topo.links()
        .iter()
        .enumerate()
        .filter(|(_, other)| (other.from, other.to) == (l.from, l.to) || (other.from, other.to) == (l.to, l.from))
        .any(|(i, _)| topo.link_label(icsim::network::LinkId(i as u32)) == label)
}

/// Adds a `warning` field to each doubtful record of `records` (results on
/// the topology `topology_of` gives for a record) and prints it.
pub fn flag_doubts<'t>(records: &mut [Record], topology_of: impl Fn(&Record) -> Option<&'t Topology>) {
    for record in records.iter_mut() {
        let Some(topo) = topology_of(record) else { continue };
        if let Some(warning) = doubt(record, topo) {
            let name = record.get("label").or_else(|| record.get("size")).map(icsim::report::cell).unwrap_or_default();
            notices::warn(format!("{name}: {warning}"));
            record.insert("warning".into(), Value::String(warning));
        }
    }
}
