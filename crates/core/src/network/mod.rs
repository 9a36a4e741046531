//! The flow-level network: transfers are flows over paths of directed links,
//! and flows that share a link share its capacity max-min fairly (progressive
//! filling). A start or a finish re-solves only the connected group of links
//! and flows around it. Keeps per-link byte counters and busy time. Knows
//! nothing of transports or collectives: a link is a capacity per direction.
//!
//! Vocabulary after SimGrid's solver: a link is a *constraint* (its capacity),
//! a flow a *variable* (its rate); a flow's own rate cap is a constraint that
//! only it takes part in. A flow may stand for several identical flows on
//! the same path (its copies: identical channels simulated once); each copy
//! gets the share one of them would, and the flow takes them all from its
//! links.

mod region;
mod takings;

use std::rc::Rc;

use crate::engine::{EventQueue, Fabric, TaskId};
use crate::units::{Bandwidth, Bytes, Time};

use takings::Takings;

/// Index of a directed link (one direction of a cable, or a shared resource
/// such as a memory bus) in the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct LinkId(pub u32);

impl LinkId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The links a flow crosses, in order, and the latency it pays end to end.
/// Its links are shared by every transfer a pipe sends, counted without
/// atomics: a path belongs to one simulation on one thread, and an atomic
/// count taken and dropped per transfer (a locked instruction that waits
/// for the stores before it) was a tenth of a large PCIe ring's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    pub links: Rc<[LinkId]>,
    pub latency: Time,
}

impl Path {
    pub fn new(links: Vec<LinkId>, latency: Time) -> Path {
        Path { links: links.into(), latency }
    }
}

/// Relative tolerance of the solver when comparing shares and capacities:
/// the one place floating point meets a decision.
const SHARE_TOLERANCE: f64 = 1e-9;

/// A duration of `ps` picoseconds rounded up to a whole one, exactly as
/// `Time(ps.ceil() as u64)` (saturating, NaN as zero), but without a call:
/// baseline x86-64 has no rounding instruction, and `ceil` goes through
/// libm once per flow event.
fn picoseconds_up(ps: f64) -> Time {
    let whole = ps as u64;
    Time(if (whole as f64) < ps { whole.saturating_add(1) } else { whole })
}

/// Traffic a link carried over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkUsage {
    pub bytes: Bytes,
    /// Time during which at least one flow crossed the link.
    pub busy: Time,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Bytes are leaving the source at the flow's current rate.
    Draining,
    /// Every byte has left; the last one is still on its way (latency).
    Arriving,
    Free,
}

#[derive(Debug, Clone)]
struct Flow {
    transfer: TaskId,
    /// The links of its path: a copy kept with the flow's slot and refilled
    /// when the slot is reused, so that starting and finishing a flow
    /// touches no shared count.
    links: Vec<LinkId>,
    latency: Time,
    /// Bytes of one copy.
    bytes: Bytes,
    copies: u32,
    /// Bytes of one copy still to leave the source, as of `updated`.
    remaining: f64,
    /// Rate of one copy.
    rate: f64,
    /// The rate the solver is computing (scratch of `fill_progressively`).
    next_rate: f64,
    cap: f64,
    updated: Time,
    /// When its scheduled event is due.
    due: Time,
    /// Bumped whenever the flow's scheduled event changes; stale heap entries
    /// carry an older generation and are skipped when popped.
    generation: u32,
    phase: Phase,
    /// In the region being re-solved when equal to the network's epoch.
    mark: u64,
    /// Checked for a bottleneck in the pass numbered so.
    checked: u64,
    frozen: bool,
}

#[derive(Debug, Clone)]
struct LinkState {
    capacity: f64,
    flows: Vec<u32>,
    /// Copies of the flows in `flows`, kept as they come and go.
    copies: u32,
    /// Sum of the rates of the flows on the link, every copy counted.
    allocated: f64,
    usage: LinkUsage,
    busy_since: Time,
    /// Touched by the region being re-solved when equal to the epoch.
    mark: u64,
    // Scratch for progressive filling: capacity left, and copies of
    // flows not yet frozen.
    spare: f64,
    unfrozen: u32,
    /// Scratch of the bottleneck check: whether the link is full and its
    /// fastest flow's rate, as of the check pass numbered `looked`.
    looked: u64,
    full: bool,
    fastest: f64,
}

/// A scheduled flow event: (flow slot, generation).
type FlowEvent = (u32, u32);

/// The flow network: links with capacities and the flows crossing them.
#[derive(Debug, Clone)]
pub struct Network {
    links: Vec<LinkState>,
    flows: Vec<Flow>,
    free_slots: Vec<u32>,
    /// Flow events by time, then the order they were scheduled in.
    events: EventQueue<FlowEvent>,
    /// Scratch: the events of the instant being handled.
    due: Vec<FlowEvent>,
    /// Epoch for the "in the region" marks of a re-solve.
    epoch: u64,
    /// Number of the bottleneck check pass, for its marks.
    pass: u64,
    scratch_links: Vec<u32>,
    scratch_flows: Vec<u32>,
    /// Scratch: flows found without a bottleneck by a check pass.
    unsettled: Vec<u32>,
    /// Scratch: the full links a finished flow leaves.
    scratch_full: Vec<LinkId>,
    /// Links whose flows changed at `pending_at`, and flows that started
    /// then, not re-solved yet: the flows that start and finish at one
    /// instant are solved together, once, before time moves on (the max-min
    /// shares they reach are the same; each change solved on its own
    /// re-solved a shared link's whole component once a flow).
    pending: Vec<LinkId>,
    pending_flows: Vec<u32>,
    pending_at: Time,
    /// Re-solve every flow on every change: the slow reference the
    /// incremental solver is tested against.
    full_recompute: bool,
    takings: Takings,
}

impl Network {
    /// A network of links with the given capacities (bytes per second, one
    /// direction each), indexed by `LinkId` in order.
    pub fn new(capacities: impl IntoIterator<Item = Bandwidth>) -> Network {
        let links = capacities
            .into_iter()
            .map(|capacity| {
                assert!(capacity.0 > 0, "a link must have a non-zero capacity");
                LinkState {
                    capacity: capacity.bytes_per_sec(),
                    flows: Vec::new(),
                    copies: 0,
                    allocated: 0.0,
                    usage: LinkUsage::default(),
                    busy_since: Time::ZERO,
                    mark: 0,
                    spare: 0.0,
                    unfrozen: 0,
                    looked: 0,
                    full: false,
                    fastest: 0.0,
                }
            })
            .collect();
        Network {
            links,
            flows: Vec::new(),
            free_slots: Vec::new(),
            events: EventQueue::new(),
            due: Vec::new(),
            epoch: 0,
            pass: 0,
            scratch_links: Vec::new(),
            scratch_flows: Vec::new(),
            unsettled: Vec::new(),
            scratch_full: Vec::new(),
            pending: Vec::new(),
            pending_flows: Vec::new(),
            pending_at: Time::ZERO,
            full_recompute: false,
            takings: Takings::new(),
        }
    }

    /// The same network, re-solving all flows on every change (slow; the
    /// reference for tests).
    pub fn with_full_recompute(mut self) -> Network {
        self.full_recompute = true;
        self
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// What each link carried so far, indexed by `LinkId`.
    pub fn usage(&self) -> Vec<LinkUsage> {
        self.links.iter().map(|l| l.usage).collect()
    }

    /// Current rate of every draining flow on `link` (of each of its
    /// copies), bytes per second.
    pub fn rates_on(&self, link: LinkId) -> impl Iterator<Item = f64> + '_ {
        self.links[link.index()].flows.iter().map(|&f| self.flows[f as usize].rate)
    }

    /// Sum of the rates on `link`, every copy counted, over its capacity: at
    /// most 1 (within the solver's tolerance) at every instant.
    pub fn load(&self, link: LinkId) -> f64 {
        let state = &self.links[link.index()];
        state.flows.iter().map(|&f| self.flows[f as usize].total_rate()).sum::<f64>() / state.capacity
    }

    /// A slot for `flow` (whose own list of links is empty), its links
    /// copied in: a reused slot keeps its list's room.
    fn allocate(&mut self, flow: Flow, links: &[LinkId]) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => {
                let old = &mut self.flows[slot as usize];
                let mut kept = std::mem::take(&mut old.links);
                kept.clear();
                kept.extend_from_slice(links);
                *old = Flow { generation: old.generation.wrapping_add(1), links: kept, ..flow };
                slot
            }
            None => {
                self.flows.push(Flow { links: links.to_vec(), ..flow });
                (self.flows.len() - 1) as u32
            }
        }
    }

    fn schedule(&mut self, slot: u32, at: Time) {
        let flow = &mut self.flows[slot as usize];
        flow.generation = flow.generation.wrapping_add(1);
        flow.due = at;
        self.events.push(at, (slot, flow.generation));
    }

    fn start_flow(&mut self, now: Time, transfer: TaskId, path: &Path, bytes: Bytes, rate_cap: Option<Bandwidth>, copies: u32) {
        assert!(copies > 0, "a transfer stands for at least one copy");
        let cap = rate_cap.map_or(f64::INFINITY, |c| c.bytes_per_sec());
        let flow = Flow {
            transfer,
            links: Vec::new(),
            latency: path.latency,
            bytes,
            copies,
            remaining: bytes.as_f64(),
            rate: 0.0,
            next_rate: 0.0,
            cap,
            updated: now,
            due: now,
            generation: 0,
            phase: Phase::Draining,
            mark: 0,
            checked: 0,
            frozen: false,
        };
        let slot = self.allocate(flow, &path.links);
        if bytes.0 == 0 || path.links.is_empty() {
            // Nothing to share: the flow only pays its latency (or, on an
            // empty path, moves at its own cap within one device).
            let drain = if path.links.is_empty() && bytes.0 > 0 { rate_cap.map_or(Time::ZERO, |c| bytes / c) } else { Time::ZERO };
            self.flows[slot as usize].phase = Phase::Arriving;
            self.schedule(slot, now + drain + path.latency);
            return;
        }
        // Fast path: a capped flow that fits in the spare capacity of every
        // link it crosses runs at its cap and changes no one else's share
        // (a saturated link, the only kind that limits others, has no spare).
        let demand = cap * f64::from(copies);
        // Shares are settled only where nothing waits to be re-solved.
        let settled = !self.full_recompute && !self.is_pending();
        let fits = settled
            && cap.is_finite()
            && path.links.iter().all(|l| {
                let state = &self.links[l.index()];
                state.allocated + demand <= state.capacity * (1.0 - SHARE_TOLERANCE)
            });
        for &link in path.links.iter() {
            let state = &mut self.links[link.index()];
            if state.flows.is_empty() {
                state.busy_since = now;
            }
            state.flows.push(slot);
            state.copies += copies;
            if fits {
                state.allocated += demand;
            }
        }
        if fits {
            self.flows[slot as usize].rate = cap;
            let at = now + picoseconds_up(bytes.as_f64() * 1e12 / cap);
            self.schedule(slot, at);
            return;
        }
        // Fast path: alone on every link it crosses, the flow is a component
        // of its own, and progressive filling gives it its narrowest link's
        // share or its cap at once: the same arithmetic without the search.
        if settled && path.links.iter().all(|l| self.links[l.index()].flows.iter().all(|&f| f == slot)) {
            let flow = &self.flows[slot as usize];
            let share = path
                .links
                .iter()
                .map(|l| {
                    let state = &self.links[l.index()];
                    state.capacity / f64::from(state.flows.len() as u32 * flow.copies)
                })
                .fold(f64::INFINITY, f64::min)
                .min(flow.cap);
            self.rerate(now, slot, share);
            for &link in path.links.iter() {
                self.settle_allocated(link.0);
            }
            return;
        }
        self.defer(now, &[], Some(slot));
    }

    /// Whether changes wait to be re-solved (the links' allocated rates are
    /// not settled meanwhile).
    fn is_pending(&self) -> bool {
        !self.pending.is_empty() || !self.pending_flows.is_empty()
    }

    /// Marks `links`, whose flows may get other shares, and a flow that
    /// started, to be re-solved before time moves past `now`.
    fn defer(&mut self, now: Time, links: &[LinkId], started: Option<u32>) {
        if self.pending_at != now {
            self.settle_pending();
        }
        self.pending_at = now;
        self.pending.extend_from_slice(links);
        self.pending_flows.extend(started);
    }

    /// Re-solves around every change made at `pending_at`.
    fn settle_pending(&mut self) {
        if !self.is_pending() {
            return;
        }
        let mut links = std::mem::take(&mut self.pending);
        let mut flows = std::mem::take(&mut self.pending_flows);
        links.retain(|l| !self.links[l.index()].flows.is_empty());
        // A flow that started and drained at this instant is no one's now.
        flows.retain(|&slot| self.flows[slot as usize].phase == Phase::Draining);
        if !links.is_empty() || !flows.is_empty() {
            self.reshare(self.pending_at, &links, &flows);
        }
        links.clear();
        flows.clear();
        self.pending = links;
        self.pending_flows = flows;
    }

    /// Gives the flows around the changes their max-min fair rates at `now`.
    /// The region re-solved starts as the flows on `seeds` (links whose
    /// flows may get more) and the `started` ones, the rates of the flows
    /// beside it held; an allocation is max-min fair when every
    /// flow has a bottleneck (a full link on which no flow is faster, or its
    /// own cap), so the region takes in each flow left without one and is
    /// solved again; after a few rounds it becomes the seeds' whole
    /// connected component. A change in a large saturated fabric (a long
    /// chain, every link full) moves a few rates, not the fabric's.
    fn reshare(&mut self, now: Time, seeds: &[LinkId], started: &[u32]) {
        /// Rounds of growing the region before it is the whole component.
        /// A saturated chain's change settles within three; with three in
        /// all, the one re-solve in twenty that needed the third solved the
        /// whole chain instead, which was nearly all of the solver's time.
        /// The cap keeps a region that keeps growing from being solved
        /// many more times than the component would be.
        const ROUNDS: u32 = 8;
        /// Flows on one link past which the region is the whole component
        /// at once: checking every flow of a crowded link (a memory bus)
        /// for a bottleneck costs more than the solve it would spare.
        const CROWD: usize = 16;
        self.epoch += 1;
        let mut region_links = std::mem::take(&mut self.scratch_links);
        let mut region_flows = std::mem::take(&mut self.scratch_flows);
        region_links.clear();
        region_flows.clear();
        if self.full_recompute {
            for link in 0..self.links.len() as u32 {
                if !self.links[link as usize].flows.is_empty() {
                    self.take_in_link(link, &mut region_links, &mut region_flows);
                }
            }
        }
        for &seed in seeds {
            self.take_in_link(seed.0, &mut region_links, &mut region_flows);
        }
        for &slot in started {
            self.take_in_flow(slot, &mut region_links, &mut region_flows);
        }
        let crowded = region_links.iter().any(|&l| self.links[l as usize].flows.len() > CROWD);
        let mut round = if crowded { ROUNDS - 1 } else { 0 };
        loop {
            if round + 1 == ROUNDS {
                let mut next = 0;
                while next < region_links.len() {
                    self.take_in_link(region_links[next], &mut region_links, &mut region_flows);
                    next += 1;
                }
                self.fill_progressively(&region_links, &region_flows);
                break;
            }
            self.fill_progressively(&region_links, &region_flows);
            if self.full_recompute || !self.find_unsettled(&region_links) {
                break;
            }
            round += 1;
            let unsettled = std::mem::take(&mut self.unsettled);
            for &slot in &unsettled {
                self.take_in_flow(slot, &mut region_links, &mut region_flows);
            }
            self.unsettled = unsettled;
        }

        // Flows whose share changed: bring their remaining bytes up to `now`
        // at the old rate, then reschedule. The others keep their event, and
        // so does a flow whose last byte leaves now: it has drained (what
        // floating point leaves of its bytes would finish it a picosecond
        // late, apart from identical flows finishing with it).
        for &slot in &region_flows {
            let flow = &mut self.flows[slot as usize];
            debug_assert!(flow.next_rate > 0.0, "every flow gets a positive share");
            if flow.rate > 0.0 && (flow.next_rate - flow.rate).abs() <= flow.rate * SHARE_TOLERANCE {
                continue;
            }
            if flow.rate > 0.0 && flow.due == now {
                flow.remaining = 0.0;
                flow.updated = now;
                flow.rate = flow.next_rate;
                continue;
            }
            let rate = flow.next_rate;
            self.rerate(now, slot, rate);
        }
        for &link in &region_links {
            self.settle_allocated(link);
        }
        self.scratch_links = region_links;
        self.scratch_flows = region_flows;
    }

    /// Brings a flow's remaining bytes up to `now` at its old rate, gives it
    /// `rate` and schedules when its last byte leaves.
    fn rerate(&mut self, now: Time, slot: u32, rate: f64) {
        let flow = &mut self.flows[slot as usize];
        let elapsed = (now - flow.updated).as_secs();
        flow.remaining = (flow.remaining - flow.rate * elapsed).max(0.0);
        flow.updated = now;
        flow.rate = rate;
        let drain = picoseconds_up(flow.remaining * 1e12 / flow.rate);
        self.schedule(slot, now + drain);
    }

    /// Sets a link's allocated rate to the sum of its flows' rates.
    fn settle_allocated(&mut self, link: u32) {
        let allocated = self.links[link as usize].flows.iter().map(|&f| self.flows[f as usize].total_rate()).sum();
        self.links[link as usize].allocated = allocated;
    }

    /// Max-min fairness by progressive filling: raise all unfrozen rates
    /// together until a link (or a flow's own cap) is full, freeze the flows
    /// it limits, repeat. A flow's copies count one by one, and each takes
    /// its share from the link's spare capacity as a flow of its own would.
    /// The flows beside the region keep their rates: the region's links
    /// offer what those leave.
    fn fill_progressively(&mut self, region_links: &[u32], region_flows: &[u32]) {
        for &link in region_links {
            let state = &mut self.links[link as usize];
            state.spare = state.capacity;
            state.unfrozen = state.copies;
            for &slot in &state.flows {
                let flow = &self.flows[slot as usize];
                if flow.mark != self.epoch {
                    state.spare = (state.spare - flow.total_rate()).max(0.0);
                    state.unfrozen -= flow.copies;
                }
            }
        }
        for &slot in region_flows {
            self.flows[slot as usize].frozen = false;
        }
        let mut unfrozen = region_flows.len();
        while unfrozen > 0 {
            let mut share = f64::INFINITY;
            for &link in region_links {
                let state = &self.links[link as usize];
                if state.unfrozen > 0 {
                    share = share.min(state.spare / f64::from(state.unfrozen));
                }
            }
            for &slot in region_flows {
                let flow = &self.flows[slot as usize];
                if !flow.frozen {
                    share = share.min(flow.cap);
                }
            }
            let threshold = share * (1.0 + SHARE_TOLERANCE);
            for &slot in region_flows {
                let flow = &self.flows[slot as usize];
                if flow.frozen {
                    continue;
                }
                let limited = flow.cap <= threshold
                    || flow.links.iter().any(|l| {
                        let state = &self.links[l.index()];
                        state.unfrozen > 0 && state.spare / f64::from(state.unfrozen) <= threshold
                    });
                if !limited {
                    continue;
                }
                let flow = &mut self.flows[slot as usize];
                flow.frozen = true;
                flow.next_rate = share;
                unfrozen -= 1;
                for l in flow.links.iter() {
                    let state = &mut self.links[l.index()];
                    state.spare = self.takings.take(state.spare, share, flow.copies);
                    state.unfrozen -= flow.copies;
                }
            }
        }
    }

    /// A flow's last byte has left: it frees its links, and finishes once
    /// that byte has arrived (at once, over a path without latency).
    fn drain_finished(&mut self, now: Time, slot: u32, finished: &mut Vec<TaskId>) {
        // Taken out while the links are updated, and put back: the flow's
        // arrival counts its bytes on them.
        let links = std::mem::take(&mut self.flows[slot as usize].links);
        let rate = self.flows[slot as usize].total_rate();
        let copies = self.flows[slot as usize].copies;
        // Only a full link was anyone's bottleneck: the flows on the others
        // keep their shares when it leaves (unless shares wait to be
        // settled, when any may be full).
        let unsettled = self.full_recompute || self.is_pending();
        let mut full = std::mem::take(&mut self.scratch_full);
        full.clear();
        full.extend(links.iter().filter(|l| {
            let state = &self.links[l.index()];
            unsettled || state.allocated >= state.capacity * (1.0 - SHARE_TOLERANCE)
        }));
        for &link in links.iter() {
            let state = &mut self.links[link.index()];
            let position = state.flows.iter().position(|&f| f == slot).expect("a draining flow is listed on each of its links");
            state.flows.swap_remove(position);
            state.copies -= copies;
            state.allocated = if state.flows.is_empty() { 0.0 } else { (state.allocated - rate).max(0.0) };
            if state.flows.is_empty() {
                state.usage.busy += now - state.busy_since;
            }
        }
        if !full.is_empty() {
            self.defer(now, &full, None);
        }
        self.scratch_full = full;
        let flow = &mut self.flows[slot as usize];
        flow.links = links;
        flow.phase = Phase::Arriving;
        flow.rate = 0.0;
        flow.remaining = 0.0;
        let latency = flow.latency;
        if latency == Time::ZERO {
            self.arrived(slot, finished);
        } else {
            self.schedule(slot, now + latency);
        }
    }

    fn arrived(&mut self, slot: u32, finished: &mut Vec<TaskId>) {
        let flow = &mut self.flows[slot as usize];
        let bytes = Bytes(flow.bytes.0 * u64::from(flow.copies));
        for link in flow.links.iter() {
            self.links[link.index()].usage.bytes += bytes;
        }
        flow.phase = Phase::Free;
        finished.push(flow.transfer);
        self.free_slots.push(slot);
    }

    /// Whether an event was superseded (a reshare moved it, or its flow
    /// is gone).
    fn is_stale(&self, (slot, generation): FlowEvent) -> bool {
        let flow = &self.flows[slot as usize];
        flow.generation != generation || flow.phase == Phase::Free
    }
}

impl Flow {
    /// The rate of all its copies together.
    fn total_rate(&self) -> f64 {
        self.rate * f64::from(self.copies)
    }
}

impl Fabric<Path> for Network {
    fn start(&mut self, now: Time, transfer: TaskId, path: &Path, bytes: Bytes, rate_cap: Option<Bandwidth>, copies: u32) {
        self.start_flow(now, transfer, path, bytes, rate_cap, copies);
    }

    fn next_event_time(&mut self) -> Option<Time> {
        self.settle_pending();
        let flows = &self.flows;
        self.events.drop_stale(|&(slot, generation)| {
            let flow = &flows[slot as usize];
            flow.generation != generation || flow.phase == Phase::Free
        });
        self.events.next_time()
    }

    fn advance(&mut self, now: Time, finished: &mut Vec<TaskId>) -> u64 {
        self.settle_pending();
        let mut handled = 0;
        let mut due = std::mem::take(&mut self.due);
        // Events handled now may schedule more for now: those come after.
        while self.events.next_time() == Some(now) {
            self.events.pop_earliest(&mut due);
            for &event in &due {
                if self.is_stale(event) {
                    continue;
                }
                let slot = event.0;
                handled += 1;
                match self.flows[slot as usize].phase {
                    Phase::Draining => {
                        self.drain_finished(now, slot, finished);
                        // Arrived at once: its arrival is an event all the same.
                        handled += u64::from(self.flows[slot as usize].phase == Phase::Free);
                    }
                    Phase::Arriving => self.arrived(slot, finished),
                    Phase::Free => unreachable!("freed flows have no live events"),
                }
            }
        }
        self.due = due;
        handled
    }
}

#[cfg(test)]
mod tests;
