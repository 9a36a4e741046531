//! Which links of a topology lie far outside the hardware icsim ships:
//! slower or faster than any part in the shipped hardware model (PCIe
//! generations at every width, NVLink generations up to a GPU's ports, socket
//! links, memory buses) by more than a factor, or with a latency far beyond
//! any hop. The yardstick is the shipped model, not the one a run loaded, so
//! an overlay that makes NVLink a hundred times faster is said too. Such a
//! link is allowed (a what-if may want it) but said: a result it dominates is
//! a statement about an imaginary part. Judges nothing else.

use super::file::PCIE_WIDTHS;
use super::{LinkKind, Topology};
use crate::config::hardware::HardwareModel;
use crate::network::LinkId;
use crate::units::{Bandwidth, Time};

/// How far outside the known range a link must lie to be called
/// implausible: a factor of 10 either way.
pub const FAR: u64 = 10;

/// The slowest and fastest links the hardware model knows, by name, and its
/// longest hop latency.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownRange {
    pub slowest: (Bandwidth, String),
    pub fastest: (Bandwidth, String),
    pub longest_latency: Time,
}

impl KnownRange {
    pub fn of(model: &HardwareModel) -> KnownRange {
        let mut parts: Vec<(Bandwidth, String)> = Vec::new();
        let mut latencies = Vec::new();
        let widest_pcie = PCIE_WIDTHS[PCIE_WIDTHS.len() - 1];
        for (name, g) in &model.pcie {
            let lane = g.lane_rate.scaled(g.efficiency);
            parts.push((lane, format!("PCIe {name} x1")));
            parts.push((lane.scaled(f64::from(widest_pcie)), format!("PCIe {name} x{widest_pcie}")));
            latencies.push(g.hop_latency);
        }
        let most_ports = model.gpu.values().map(|g| g.nvlink_links).max().unwrap_or(1).max(1);
        for (name, g) in &model.nvlink {
            let link = g.link_rate.scaled(g.efficiency);
            parts.push((link, format!("NVLink {name} x1")));
            parts.push((link.scaled(f64::from(most_ports)), format!("NVLink {name} x{most_ports}")));
            latencies.push(g.hop_latency);
        }
        for (name, h) in &model.host {
            if h.socket_links > 0 {
                parts.push((h.socket_link(), format!("{name} socket link")));
            }
            parts.push((h.memory_channel_rate.scaled(f64::from(h.memory_channels) * h.memory_efficiency), format!("{name} memory bus")));
            latencies.push(h.socket_link_latency);
        }
        let fallback = || (Bandwidth(1), "nothing".to_string());
        KnownRange {
            slowest: parts.iter().min_by_key(|(b, _)| *b).cloned().unwrap_or_else(fallback),
            fastest: parts.iter().max_by_key(|(b, _)| *b).cloned().unwrap_or_else(fallback),
            longest_latency: latencies.into_iter().max().unwrap_or(Time::ZERO),
        }
    }

    /// Whether `bandwidth` is more than [`FAR`] times slower than any known part.
    pub fn far_slower(&self, bandwidth: Bandwidth) -> bool {
        u128::from(bandwidth.0) * u128::from(FAR) < u128::from(self.slowest.0.0)
    }

    /// Why `bandwidth` and `latency` are implausible, if they are.
    pub fn judge(&self, bandwidth: Bandwidth, latency: Time) -> Option<String> {
        if self.far_slower(bandwidth) {
            Some(format!(
                "{bandwidth} per direction is over {FAR} times slower than any part the shipped hardware model knows (slowest: {}, {})",
                self.slowest.1, self.slowest.0
            ))
        } else if u128::from(bandwidth.0) > u128::from(self.fastest.0.0) * u128::from(FAR) {
            Some(format!(
                "{bandwidth} per direction is over {FAR} times faster than any part the shipped hardware model knows (fastest: {}, {})",
                self.fastest.1, self.fastest.0
            ))
        } else if latency > self.longest_latency * FAR {
            Some(format!("a latency of {latency} is over {FAR} times any hop the shipped hardware model knows ({})", self.longest_latency))
        } else {
            None
        }
    }
}

/// A link far outside known hardware, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct UnusualLink {
    pub link: LinkId,
    pub why: String,
}

/// The range of the shipped hardware model, the yardstick of every topology.
fn shipped_range() -> &'static KnownRange {
    static RANGE: std::sync::OnceLock<KnownRange> = std::sync::OnceLock::new();
    RANGE.get_or_init(|| KnownRange::of(&HardwareModel::base()))
}

/// The links of `topo` far outside the shipped hardware, in link order; a
/// full-duplex cable is listed once, by its first direction.
pub fn unusual_links(topo: &Topology) -> Vec<UnusualLink> {
    let range = shipped_range();
    topo.links()
        .iter()
        .enumerate()
        .filter(|(_, l)| matches!(l.kind, LinkKind::MemoryBus { .. }) || l.from.0 < l.to.0)
        .filter_map(|(i, l)| {
            let link = LinkId(i as u32);
            range.judge(l.bandwidth, l.latency).map(|why| UnusualLink { link, why: format!("{}: {why}", topo.link_label(link)) })
        })
        .collect()
}

/// Whether `link` (either direction of its cable) is far slower than any
/// known part: a result it limits says little about real hardware.
pub fn is_far_slower(topo: &Topology, link: LinkId) -> bool {
    shipped_range().far_slower(topo.link(link).bandwidth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hardware::ModelSource;
    use crate::topology::{PresetOptions, preset};

    #[test]
    fn the_known_range_spans_pcie_x1_to_the_widest_part() {
        let range = KnownRange::of(&HardwareModel::base());
        assert_eq!(range.slowest.1, "PCIe gen3 x1");
        assert!(range.fastest.0 >= Bandwidth::gbps(700), "{:?}", range.fastest);
        assert!(range.judge(Bandwidth(1), Time::ZERO).unwrap().contains("slower"));
        assert!(range.judge(Bandwidth::gbps(100_000), Time::ZERO).unwrap().contains("faster"));
        assert!(range.judge(Bandwidth::gbps(50), Time::from_us(1000)).unwrap().contains("latency"));
        assert_eq!(range.judge(Bandwidth::gbps(50), Time::from_us(1)), None);
    }

    #[test]
    fn every_preset_is_plausible() {
        let model = HardwareModel::base();
        for (name, _) in crate::topology::PRESETS {
            let topo = preset(name, &PresetOptions::default(), &model).unwrap();
            assert_eq!(unusual_links(&topo), vec![], "{name}");
        }
    }

    #[test]
    fn an_overlay_that_makes_a_part_far_faster_is_judged_against_the_shipped_model() {
        let overlay = ModelSource::Text { label: "fast.toml".into(), text: "[nvlink.gen4]\nlink_rate = \"25000GB/s\"\n".into() };
        let model = HardwareModel::load(&[overlay]).unwrap();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let unusual = unusual_links(&topo);
        assert!(!unusual.is_empty() && unusual.iter().all(|u| u.why.contains("faster")), "{unusual:?}");
    }
}
