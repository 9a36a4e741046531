//! The region a re-solve takes in: the flows a change can move, grown by
//! every flow that the rates just solved leave without a bottleneck (a full
//! link on which no flow is faster, or its own cap). Part of the solver in
//! `network`; owns no state of its own.

use super::{Network, SHARE_TOLERANCE};

impl Network {
    /// Takes every flow on `link` into the region being re-solved.
    pub(super) fn take_in_link(&mut self, link: u32, region_links: &mut Vec<u32>, region_flows: &mut Vec<u32>) {
        let state = &mut self.links[link as usize];
        if state.mark != self.epoch {
            state.mark = self.epoch;
            region_links.push(link);
        }
        for i in 0..self.links[link as usize].flows.len() {
            let slot = self.links[link as usize].flows[i];
            self.take_in_flow(slot, region_links, region_flows);
        }
    }

    /// Takes a flow into the region being re-solved, and its links with it.
    pub(super) fn take_in_flow(&mut self, slot: u32, region_links: &mut Vec<u32>, region_flows: &mut Vec<u32>) {
        let epoch = self.epoch;
        let flow = &mut self.flows[slot as usize];
        if flow.mark == epoch {
            return;
        }
        flow.mark = epoch;
        region_flows.push(slot);
        for &link in flow.links.iter() {
            let state = &mut self.links[link.index()];
            if state.mark != epoch {
                state.mark = epoch;
                region_links.push(link.0);
            }
        }
    }

    /// Checks every flow on the region's links for a bottleneck at the rates
    /// just solved; lists in `unsettled` the flows outside the region that
    /// lack one, and those faster than a region flow that lacks one on a
    /// link they share. Whether any was found.
    pub(super) fn find_unsettled(&mut self, region_links: &[u32]) -> bool {
        self.pass += 1;
        let pass = self.pass;
        let mut unsettled = std::mem::take(&mut self.unsettled);
        unsettled.clear();
        for &link in region_links {
            for i in 0..self.links[link as usize].flows.len() {
                let slot = self.links[link as usize].flows[i];
                if self.flows[slot as usize].checked == pass {
                    continue;
                }
                self.flows[slot as usize].checked = pass;
                if self.has_bottleneck(slot) {
                    continue;
                }
                if self.flows[slot as usize].mark != self.epoch {
                    unsettled.push(slot);
                    continue;
                }
                // Only a held flow can be faster than a region flow on the
                // link that froze it: take in those.
                let rate = self.flows[slot as usize].next_rate;
                for &other_link in self.flows[slot as usize].links.iter() {
                    for &other in &self.links[other_link.index()].flows {
                        let flow = &self.flows[other as usize];
                        if flow.mark != self.epoch && flow.rate > rate * (1.0 + SHARE_TOLERANCE) {
                            unsettled.push(other);
                        }
                    }
                }
            }
        }
        let found = !unsettled.is_empty();
        self.unsettled = unsettled;
        found
    }

    /// The rate a flow has as the region is being solved: its new share in
    /// the region, its old one outside.
    fn solved_rate(&self, slot: u32) -> f64 {
        let flow = &self.flows[slot as usize];
        if flow.mark == self.epoch { flow.next_rate } else { flow.rate }
    }

    /// Whether a flow, at the rates being solved, is held by its own cap or
    /// by a full link on which no flow is faster.
    fn has_bottleneck(&mut self, slot: u32) -> bool {
        let rate = self.solved_rate(slot);
        if self.flows[slot as usize].cap <= rate * (1.0 + SHARE_TOLERANCE) {
            return true;
        }
        for i in 0..self.flows[slot as usize].links.len() {
            let link = self.flows[slot as usize].links[i].index();
            if self.links[link].looked != self.pass {
                let (mut load, mut fastest) = (0.0, 0.0f64);
                for &other in &self.links[link].flows {
                    let other_rate = self.solved_rate(other);
                    load += other_rate * f64::from(self.flows[other as usize].copies);
                    fastest = fastest.max(other_rate);
                }
                let state = &mut self.links[link];
                state.looked = self.pass;
                state.full = load >= state.capacity * (1.0 - SHARE_TOLERANCE);
                state.fastest = fastest;
            }
            let state = &self.links[link];
            if state.full && rate >= state.fastest * (1.0 - SHARE_TOLERANCE) {
                return true;
            }
        }
        false
    }
}
