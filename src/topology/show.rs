//! A readable description of a topology: its parts, its links and the GPU
//! relation matrix in the words of `nvidia-smi topo -m`; and the same as a
//! typed view for `topo show --format json`.

use std::fmt::Write;

use serde::Serialize;

use super::{LinkKind, NodeKind, Topology};

/// Most GPUs whose relation matrix is printed: wider is unreadable, and
/// each of its n^2 cells is a path search.
pub const MATRIX_GPUS: usize = 32;

pub fn describe(topo: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "topology {}: {}", topo.name, topo.description);
    let _ = writeln!(out, "GPU model {}, host platform {}", topo.gpu_model, topo.host);
    let _ = writeln!(
        out,
        "policy: P2P across sockets {}, P2P through a root complex at {:.0}% of the path, in-switch reduction (NVLS) {}",
        if topo.policy.p2p_across_sockets { "allowed" } else { "refused" },
        topo.policy.root_complex_p2p_factor * 100.0,
        if topo.policy.nvls { "yes" } else { "no" }
    );
    let _ = writeln!(out);
    for kind in [NodeKind::Gpu, NodeKind::NvSwitch, NodeKind::PcieSwitch, NodeKind::CpuSocket, NodeKind::HostMemory, NodeKind::Nvme] {
        let names: Vec<String> = topo.nodes_of(kind).map(|n| format!("{} (socket {})", topo.node(n).name, topo.node(n).socket)).collect();
        if !names.is_empty() {
            let _ = writeln!(out, "{kind}: {}", names.join(", "));
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "links (bandwidth per direction; a drive's link: its read rate up, its write rate down; a memory bus is one capacity for reads and writes):"
    );
    let rows: Vec<(String, String, String)> = topo
        .links()
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            // Show a full-duplex cable once, from its first end.
            matches!(l.kind, LinkKind::MemoryBus { .. }) || l.from.0 < l.to.0
        })
        .map(|(i, l)| {
            let label = topo.link_label(crate::network::LinkId(i as u32));
            let label = if matches!(l.kind, LinkKind::MemoryBus { .. }) { label } else { label.replacen(" -> ", " <-> ", 1) };
            // A drive's link carries its read rate up, its write rate down.
            let back = topo.links().iter().find(|b| b.from == l.to && b.to == l.from && b.kind == l.kind).map(|b| b.bandwidth);
            let bandwidth = match back {
                Some(write) if topo.node(l.from).kind == NodeKind::Nvme => format!("read {}, write {write}", l.bandwidth),
                Some(read) if topo.node(l.to).kind == NodeKind::Nvme => format!("read {read}, write {}", l.bandwidth),
                _ => l.bandwidth.to_string(),
            };
            (label, bandwidth, l.latency.to_string())
        })
        .collect();
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    for (label, bandwidth, latency) in rows {
        let _ = writeln!(out, "  {label:<width$}  {bandwidth:>12}  latency {latency}");
    }
    let _ = writeln!(out);
    let gpus = topo.gpus();
    if gpus.len() > MATRIX_GPUS {
        // The matrix has n^2 cells, each a path search: GPU0's row stands for it.
        let mut counts: Vec<(String, usize)> = Vec::new();
        for &b in &gpus[1..] {
            let relation = topo.relation(gpus[0], b).to_string();
            match counts.iter_mut().find(|(r, _)| *r == relation) {
                Some((_, count)) => *count += 1,
                None => counts.push((relation, 1)),
            }
        }
        let listed: Vec<String> = counts.iter().map(|(relation, count)| format!("{relation} to {count}")).collect();
        let _ = writeln!(
            out,
            "GPU relations: {} GPUs, more than the {MATRIX_GPUS} a matrix is printed for; GPU0 is {}",
            gpus.len(),
            listed.join(", ")
        );
        return out;
    }
    let _ = write!(out, "{:<6}", "");
    for (i, _) in gpus.iter().enumerate() {
        let _ = write!(out, "{:>6}", format!("GPU{i}"));
    }
    let _ = writeln!(out);
    for (i, &a) in gpus.iter().enumerate() {
        let _ = write!(out, "{:<6}", format!("GPU{i}"));
        for &b in gpus {
            let _ = write!(out, "{:>6}", topo.relation(a, b).to_string());
        }
        let _ = writeln!(out);
    }
    out
}

/// A topology as `topo show --format json` prints it: every part, every
/// directed link, and the GPUs' relations where the matrix is printed.
#[derive(Debug, Serialize)]
pub struct TopologyView {
    pub name: String,
    pub description: String,
    pub gpu: String,
    pub host: String,
    pub p2p_across_sockets: bool,
    pub root_complex_p2p_factor: f64,
    pub nvls: bool,
    pub nodes: Vec<NodeView>,
    pub links: Vec<LinkView>,
    /// `nvidia-smi topo -m`'s words, row by row in GPU order; empty past
    /// [`MATRIX_GPUS`] GPUs.
    pub gpu_relations: Vec<Vec<String>>,
}

#[derive(Debug, Serialize)]
pub struct NodeView {
    pub name: String,
    pub kind: String,
    pub socket: u32,
}

/// One direction of a link (a memory bus: its one shared capacity).
#[derive(Debug, Serialize)]
pub struct LinkView {
    pub from: String,
    pub to: String,
    pub kind: String,
    pub gbps: f64,
    pub latency_us: f64,
}

impl TopologyView {
    pub fn of(topo: &Topology) -> TopologyView {
        let gpus = topo.gpus();
        let gpu_relations = if gpus.len() > MATRIX_GPUS {
            Vec::new()
        } else {
            gpus.iter().map(|&a| gpus.iter().map(|&b| topo.relation(a, b).to_string()).collect()).collect()
        };
        TopologyView {
            name: topo.name.clone(),
            description: topo.description.clone(),
            gpu: topo.gpu_model.clone(),
            host: topo.host.clone(),
            p2p_across_sockets: topo.policy.p2p_across_sockets,
            root_complex_p2p_factor: topo.policy.root_complex_p2p_factor,
            nvls: topo.policy.nvls,
            nodes: topo.nodes().map(|(_, n)| NodeView { name: n.name.clone(), kind: n.kind.to_string(), socket: n.socket }).collect(),
            links: topo
                .links()
                .iter()
                .map(|l| LinkView {
                    from: topo.node(l.from).name.clone(),
                    to: topo.node(l.to).name.clone(),
                    kind: l.kind.to_string(),
                    gbps: l.bandwidth.as_gbps(),
                    latency_us: l.latency.as_us(),
                })
                .collect(),
            gpu_relations,
        }
    }
}
