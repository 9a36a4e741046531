//! Identical work simulated once. Channels of a call that handle the same
//! bytes over the same connections run in lockstep: one of them is
//! simulated, its flows standing for all (a flow's copies, each with the
//! share one flow would get), which holds whatever else shares the links.
//! NVLS ranks whose ports into the switch are alike do the same with each
//! chunk: alone on an idle network one rank stands for all, and what its
//! links carried is what every rank's did. The tests check both against
//! the simulation of every channel and rank, to the picosecond.

use crate::network::{LinkId, Path};
use crate::topology::Topology;
use crate::units::Bytes;

/// How much of a call's symmetry a simulation uses; every level gives the
/// same times, link bytes and busy times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Symmetry {
    /// Every channel and every rank simulated: the reference.
    None,
    /// Identical channels simulated once: right in any task graph.
    Channels,
    /// Also one NVLS rank for all whose ports are alike: right when the call
    /// is alone on an idle network.
    ChannelsAndRanks,
}

/// A simulated channel: the first of its class, and how many it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelClass {
    pub channel: usize,
    pub copies: u32,
}

/// The channels to simulate: with `Symmetry::None` every one; otherwise the
/// first of each class of channels with the same bytes and the same
/// connections (`layout(c)`: which of the call's rings or chains channel c
/// uses), in channel order.
pub fn channel_classes(channel_bytes: &[Bytes], layout: impl Fn(usize) -> usize, symmetry: Symmetry) -> Vec<ChannelClass> {
    let mut classes: Vec<(ChannelClass, (usize, Bytes))> = Vec::new();
    for (channel, &bytes) in channel_bytes.iter().enumerate() {
        let key = (layout(channel), bytes);
        match classes.iter_mut().find(|(_, k)| *k == key) {
            Some((class, _)) if symmetry != Symmetry::None => class.copies += 1,
            _ => classes.push((ChannelClass { channel, copies: 1 }, key)),
        }
    }
    classes.into_iter().map(|(class, _)| class).collect()
}

/// Whether every rank's paths into and out of the switch are single links
/// of their own, all alike (bandwidth and latency): then one rank's flows
/// time every rank's. Returns the links of each other rank that mirror the
/// first rank's (into, then out of, the switch).
pub fn mirrored_ports(topo: &Topology, up: &[Path], down: &[Path]) -> Option<Vec<(LinkId, LinkId)>> {
    let single = |paths: &[Path]| paths.iter().map(|p| (p.links.len() == 1).then(|| p.links[0])).collect::<Option<Vec<LinkId>>>();
    let (up, down) = (single(up)?, single(down)?);
    let alike = |links: &[LinkId]| {
        let first = topo.link(links[0]);
        links.iter().all(|&l| topo.link(l).bandwidth == first.bandwidth && topo.link(l).latency == first.latency)
    };
    let mut all: Vec<LinkId> = up.iter().chain(&down).copied().collect();
    all.sort();
    all.dedup();
    let distinct = all.len() == up.len() + down.len();
    if up.is_empty() || !alike(&up) || !alike(&down) || !distinct {
        return None;
    }
    Some(up[1..].iter().map(|&l| (up[0], l)).chain(down[1..].iter().map(|&l| (down[0], l))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_with_the_same_bytes_and_connections_form_a_class() {
        let bytes = [Bytes(8), Bytes(8), Bytes(8), Bytes(8), Bytes(6)];
        let by_ring = |c: usize| c % 2;
        let classes = channel_classes(&bytes, by_ring, Symmetry::Channels);
        assert_eq!(
            classes,
            vec![ChannelClass { channel: 0, copies: 2 }, ChannelClass { channel: 1, copies: 2 }, ChannelClass { channel: 4, copies: 1 }]
        );
        assert_eq!(channel_classes(&bytes, by_ring, Symmetry::None).len(), 5);
    }
}
