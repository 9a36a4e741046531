//! The fit's groups of copies: one link rate per copy path family, placed
//! by large copies alone.

use super::parameters::{Parameter, Read, Unit, Write};
use super::{Group, Point, Source};
use crate::config::hardware::HardwareModel;
use crate::topology::Topology;

/// Copies from this size up constrain link rates.
const LARGE_COPY: u64 = 64 << 20;

/// One link rate per copy path family: PCIe for host copies, NVLink for
/// peer copies, HBM for copies within a GPU.
pub(super) fn copy_groups(topo: &Topology, model: &HardwareModel, sources: &[Source]) -> Vec<Group> {
    let gpu_key = topo.gpu_model.clone();
    let Some(gpu) = model.gpu.get(&gpu_key) else { return Vec::new() };
    let (pcie, nvlink) = (gpu.pcie_generation.clone(), gpu.nvlink_generation.clone());
    // Link rates are fitted on large copies only: below 64 MiB the host
    // clock's fixed cost (and, within one GPU, the 60 MB L2 cache) dominates.
    // Copies timed with CUDA events are preferred where there are any: a
    // host clock adds the launch and the synchronization to every copy.
    let points = |names: &[&str]| -> Vec<Point> {
        let large: Vec<(Point, bool)> = sources
            .iter()
            .enumerate()
            .flat_map(|(s, source)| {
                source
                    .measurements
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.op == "copy" && m.bytes >= LARGE_COPY && names.contains(&m.path.as_deref().unwrap_or("")))
                    .map(move |(i, m)| ((s, i), m.timing.as_deref().is_some_and(|t| t.contains("cuda events"))))
            })
            .collect();
        let any_events = large.iter().any(|(_, events)| *events);
        large.into_iter().filter(|(_, events)| *events || !any_events).map(|(p, _)| p).collect()
    };
    let efficiency = |key: String, get: Read, set: Write| Parameter { key, unit: Unit::Ratio, bounds: (0.05, 1.0), get, set };
    let (p1, p2, n1, n2, g1, g2) = (pcie.clone(), pcie.clone(), nvlink.clone(), nvlink.clone(), gpu_key.clone(), gpu_key.clone());
    let families = [
        (
            points(&["h2d_pinned", "d2h_pinned"]),
            format!("copies over PCIe {pcie}"),
            efficiency(
                format!("pcie.{pcie}.efficiency"),
                Box::new(move |m| m.pcie[&p1].efficiency),
                Box::new(move |m, v| m.pcie.get_mut(&p2).expect("generation exists").efficiency = v),
            ),
        ),
        (
            points(&["p2p_0to1", "p2p_bidir_total"]),
            format!("copies over NVLink {nvlink}"),
            efficiency(
                format!("nvlink.{nvlink}.efficiency"),
                Box::new(move |m| m.nvlink[&n1].efficiency),
                Box::new(move |m, v| m.nvlink.get_mut(&n2).expect("generation exists").efficiency = v),
            ),
        ),
        (
            points(&["d2d_gpu0"]),
            format!("copies within one {gpu_key}"),
            efficiency(
                format!("gpu.{gpu_key}.compute.memory"),
                Box::new(move |m| m.gpu[&g1].compute.memory),
                Box::new(move |m, v| m.gpu.get_mut(&g2).expect("gpu exists").compute.memory = v),
            ),
        ),
    ];
    families
        .into_iter()
        .filter(|(points, _, _)| !points.is_empty())
        .map(|(points, name, parameter)| Group { name, parameters: vec![parameter], points, needs: "copies from 64 MiB".into() })
        .collect()
}
