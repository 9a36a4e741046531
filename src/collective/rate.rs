//! What one channel can move: bandwidth from physics, not from NCCL's tuner.
//! A channel is one thread block running NCCL's primitives (send,
//! recvReduceSend, ...); each primitive loads and stores every byte a known
//! number of times, and its time per byte is the sum over those memory
//! operations of one over the thread block's rate for that kind of
//! operation (a property of the GPU architecture, measured with one
//! channel); a reducing primitive's adds of 8-bit elements cost it more
//! (measured on one GPU). A path may limit what a channel reads a second
//! (through host memory, the reads it keeps in flight): a primitive that
//! receives there loads what arrived at that rate where it is slower than
//! the block's own, in series with its other memory operations (one block
//! reading host memory and writing it in one pass moves what the two take
//! in series, tools/probes/host_channels.cu); through host memory the share of
//! the GPU's PCIe link a channel's traffic gets follows its primitives in
//! order ([`host_loop_share`]). When many channels share a link, their
//! rate bends smoothly to the link's capacity (the contention knee); the
//! flow network then enforces every link's capacity as a hard limit, so a
//! change of links changes the time exactly where it changes the bottleneck.

use crate::config::hardware::{CtaRates, HostShares};
use crate::units::Bandwidth;

use super::Op;

/// One of NCCL's primitives, as a ring or tree step runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// Load the input, store it into the peer's receive buffer.
    Send,
    /// Load what arrived and the input, reduce, store to the peer.
    RecvReduceSend,
    /// As above, and store the result to the output as well.
    RecvReduceCopySend,
    /// Load what arrived, store it to the output and to the peer.
    RecvCopySend,
    /// Load the input, store it to the output and to the peer.
    CopySend,
    /// Load what arrived, store it to the output.
    Recv,
    /// Load what arrived and the input, reduce, store to the output.
    RecvReduceCopy,
}

/// Memory operations per byte of one primitive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operations {
    pub loads: f64,
    pub stores: f64,
    pub remote_stores: f64,
}

impl Primitive {
    pub fn operations(self) -> Operations {
        let (loads, stores, remote_stores) = match self {
            Primitive::Send => (1.0, 0.0, 1.0),
            Primitive::RecvReduceSend => (2.0, 0.0, 1.0),
            Primitive::RecvReduceCopySend => (2.0, 1.0, 1.0),
            Primitive::RecvCopySend => (1.0, 1.0, 1.0),
            Primitive::CopySend => (1.0, 1.0, 1.0),
            Primitive::Recv => (1.0, 1.0, 0.0),
            Primitive::RecvReduceCopy => (2.0, 1.0, 0.0),
        };
        Operations { loads, stores, remote_stores }
    }

    /// Whether the primitive reads what arrived from its peer.
    pub fn receives(self) -> bool {
        !matches!(self, Primitive::Send | Primitive::CopySend)
    }

    /// Whether the primitive stores to its peer.
    pub fn sends(self) -> bool {
        self.operations().remote_stores > 0.0
    }

    /// The share of its GPU's PCIe link the primitive's traffic through
    /// host memory gets: the link's rate where it only writes there.
    fn host_share(self, shares: &HostShares) -> f64 {
        match (self.receives(), self.sends()) {
            (true, true) => shares.read_write,
            (true, false) => shares.read,
            (false, _) => 1.0,
        }
    }

    /// Whether the primitive adds what arrived to the input.
    pub fn reduces(self) -> bool {
        matches!(self, Primitive::RecvReduceSend | Primitive::RecvReduceCopySend | Primitive::RecvReduceCopy)
    }

    /// Seconds a thread block takes per byte of data: its memory
    /// operations and adds, one after another; where it receives over a
    /// path that bounds a channel's reads, its load of what arrived takes
    /// the path's time where that is longer than the block's own.
    pub fn seconds_per_byte(self, block: &ThreadBlock) -> f64 {
        let (ops, cta) = (self.operations(), &block.rates);
        let load = 1.0 / cta.load.bytes_per_sec();
        let memory = ops.loads * load + ops.stores / cta.store.bytes_per_sec() + ops.remote_stores / cta.remote_store.bytes_per_sec();
        let work = if self.reduces() { memory + block.extra_add_seconds_per_byte } else { memory };
        if self.receives() { work + (block.read_seconds_per_byte - load).max(0.0) } else { work }
    }

    /// Data bytes per second one thread block moves with this primitive.
    pub fn rate(self, block: &ThreadBlock) -> f64 {
        1.0 / self.seconds_per_byte(block)
    }
}

/// One channel's thread block in a call: its protocol's memory-operation
/// rates, the seconds a byte its adds of the call's elements take beyond a
/// 16-bit float's (whose adds the rates include), and the seconds a byte
/// its reads of what arrived take at least where the path bounds them.
#[derive(Debug, Clone, Copy)]
pub struct ThreadBlock {
    pub rates: CtaRates,
    pub extra_add_seconds_per_byte: f64,
    pub read_seconds_per_byte: f64,
}

impl ThreadBlock {
    /// A thread block of `rates` whose adds run at `extra_add` beyond a
    /// 16-bit float's (none for 16-bit or wider elements), reading what
    /// arrived at no more than `read_rate` (none: as its rates allow).
    pub fn new(rates: CtaRates, extra_add: Option<Bandwidth>, read_rate: Option<Bandwidth>) -> ThreadBlock {
        let seconds = |rate: Option<Bandwidth>| rate.map_or(0.0, |rate| 1.0 / rate.bytes_per_sec());
        ThreadBlock { rates, extra_add_seconds_per_byte: seconds(extra_add), read_seconds_per_byte: seconds(read_rate) }
    }
}

/// The primitive a ring position runs at `step` of one loop of `op` over
/// `ranks` (steps that send; the loop's last, receive-only primitive is
/// [`ring_final`]). NCCL's ring kernels, src/device/all_reduce.h and friends.
pub fn ring_step(op: Op, ranks: usize, step: usize) -> Primitive {
    match op {
        Op::AllReduce => match step {
            0 => Primitive::Send,
            s if s + 1 < ranks => Primitive::RecvReduceSend,
            s if s + 1 == ranks => Primitive::RecvReduceCopySend,
            _ => Primitive::RecvCopySend,
        },
        Op::ReduceScatter => {
            if step == 0 {
                Primitive::Send
            } else {
                Primitive::RecvReduceSend
            }
        }
        Op::AllGather => {
            if step == 0 {
                Primitive::CopySend
            } else {
                Primitive::RecvCopySend
            }
        }
        Op::Broadcast => Primitive::RecvCopySend,
    }
}

/// The receive-only primitive that ends a ring loop at each position.
pub fn ring_final(op: Op) -> Primitive {
    match op {
        Op::ReduceScatter => Primitive::RecvReduceCopy,
        Op::AllReduce | Op::AllGather | Op::Broadcast => Primitive::Recv,
    }
}

/// Steps that send, in one ring loop of `op` over `ranks`.
pub fn ring_sends(op: Op, ranks: usize) -> usize {
    match op {
        Op::AllReduce => 2 * (ranks - 1),
        Op::AllGather | Op::ReduceScatter => ranks - 1,
        Op::Broadcast => ranks - 1,
    }
}

/// A ring loop of one channel, per byte of a chunk: its thread block's time
/// on the primitives whose memory operations cross the link that channels
/// contend for (every sending one; the final receive too where it reads
/// what arrived over that link, as through host memory), and on those that
/// touch only the GPU's own memory, which contention does not slow. The
/// thread block runs them in order: the sending steps, then the final
/// receive, then the next loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingLoop {
    sends: usize,
    /// Seconds a byte of all the sending steps.
    sending: f64,
    /// Seconds a byte of the final receive.
    last: f64,
    /// Whether the final receive reads over the contended link.
    final_over_link: bool,
}

/// The loop of `op` over `ranks` on thread blocks `block`; the final
/// receive counts as on the link when `final_reads_over_link`.
pub fn ring_loop(op: Op, ranks: usize, block: &ThreadBlock, final_reads_over_link: bool) -> RingLoop {
    let sends = ring_sends(op, ranks);
    let sending: f64 = (0..sends).map(|s| ring_step(op, ranks, s).seconds_per_byte(block)).sum();
    RingLoop { sends, sending, last: ring_final(op).seconds_per_byte(block), final_over_link: final_reads_over_link }
}

/// How fast a channel's thread block runs each part of its loop: the wire
/// rate of a sending step, and the data rate of the final receive where
/// the thread block runs it after the loop's sends, holding up the next
/// loop's (None where its time is spread over the sends).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoopPhases {
    pub send: f64,
    pub copy_out: Option<f64>,
}

impl RingLoop {
    /// Seconds a byte on the primitives that cross the contended link.
    fn on_link(&self) -> f64 {
        if self.final_over_link { self.sending + self.last } else { self.sending }
    }

    /// Seconds a byte on the primitives that touch only local memory.
    fn local(&self) -> f64 {
        if self.final_over_link { 0.0 } else { self.last }
    }

    /// What the channel pushes while it works on the link (bytes sent a
    /// second): its demand on the link.
    pub fn link_rate(&self) -> f64 {
        self.sends as f64 / self.on_link()
    }

    /// Seconds a byte the loop's link part takes when it runs at
    /// `slowdown` of its demand: all the sending steps, and the final
    /// receive where it reads over the link.
    fn link_seconds(&self, slowdown: f64) -> f64 {
        self.sends as f64 / (self.link_rate() * slowdown)
    }

    /// The channel's average data rate over the loop when its work on the
    /// link runs at `slowdown` of its demand.
    pub fn rate(&self, slowdown: f64) -> f64 {
        self.sends as f64 / (self.link_seconds(slowdown) + self.local())
    }

    /// The rates of the loop's two parts at `slowdown`. Where the final
    /// receive reads only local memory the thread block runs it after the
    /// sending steps and before the next loop's. Where it reads over the
    /// link (through host memory) its loads are the pipe's reads out of the
    /// staging buffer, simulated as the data arrives: the loop's time, the
    /// copy out's included, is spread over the sending steps, and the copy
    /// out adds none of its own (not even after the last loop).
    pub fn phases(&self, slowdown: f64) -> LoopPhases {
        if self.final_over_link {
            LoopPhases { send: self.rate(slowdown), copy_out: None }
        } else {
            LoopPhases { send: self.sends as f64 / self.link_seconds(slowdown), copy_out: Some(1.0 / self.last) }
        }
    }
}

/// What a channel's thread block does with host memory through one loop:
/// a ring's steps in order, or a chain's rank, which reads and writes there
/// at once (the root in one pass, the ranks below in two thread groups).
#[derive(Debug, Clone, Copy)]
pub enum HostLoop {
    Ring { op: Op, ranks: usize },
    Chain,
}

/// The share of a GPU's PCIe link, in bytes sent a second, that a loop's
/// traffic through host memory gets when the link binds. A thread block
/// runs its primitives in order, each at its own share of the link (a
/// write alone at the link's rate, a read alone at the read share, a read
/// and a write in one pass at the read-write share each way), so a loop's
/// share is its sends over the sum of its primitives' inverse shares.
/// One H200 mixing them so (tools/probes/host_channels.cu) moves what
/// this gives from its reads alone, writes alone and one-pass mixes.
pub fn host_loop_share(host: HostLoop, shares: &HostShares) -> f64 {
    match host {
        HostLoop::Chain => shares.read_write,
        HostLoop::Ring { op, ranks } => {
            let sends = ring_sends(op, ranks);
            let primitives = (0..sends).map(|s| ring_step(op, ranks, s)).chain(std::iter::once(ring_final(op)));
            sends as f64 / primitives.map(|p| 1.0 / p.host_share(shares)).sum::<f64>()
        }
    }
}

/// A chain's (NCCL's tree inside one node) data rate per flow: its root's.
/// Below the root NCCL splits a rank's thread block in two groups that run
/// at once (runTreeSplit), one reducing up the chain (send, or
/// recvReduceSend), one broadcasting down it (recv, or recvCopySend); each
/// group's primitive does part of the memory operations, adds and reads of
/// the root's recvReduceCopySend, which its whole block runs, so the root
/// sets the chain's pace.
pub fn chain_channel_rate(block: &ThreadBlock) -> f64 {
    Primitive::RecvReduceCopySend.rate(block)
}

/// The soft minimum of a demand and a capacity with the given sharpness:
/// about the demand when it is far below the capacity, about the capacity
/// when far above, and below both near the knee.
pub fn soft_min(demand: f64, capacity: f64, sharpness: f64) -> f64 {
    if demand <= 0.0 || capacity <= 0.0 {
        return 0.0;
    }
    // In the larger's units, so that large exponents cannot overflow.
    let (small, large) = if demand < capacity { (demand, capacity) } else { (capacity, demand) };
    small * (1.0 + (small / large).powf(sharpness)).powf(-1.0 / sharpness)
}

/// The factor every channel's rate is scaled by when `demand` (what the
/// channels crossing a link could push together) meets `capacity`.
pub fn contention_factor(demand: f64, capacity: f64, sharpness: f64) -> f64 {
    if demand <= 0.0 { 1.0 } else { soft_min(demand, capacity, sharpness) / demand }
}

/// How many spreads after their mean the slowest of `n` alike channels
/// ends: the expected largest of n standard normal draws, by Blom's
/// approximation (Phi^-1((n - 0.375) / (n + 0.25))), within 0.03 of the
/// exact value from 2 draws up; 0 for one.
pub fn slowest_of(n: usize) -> f64 {
    if n < 2 {
        return 0.0;
    }
    let upper_tail = 1.0 - (n as f64 - 0.375) / (n as f64 + 0.25);
    // Abramowitz and Stegun 26.2.23: the normal quantile, |error| < 4.5e-4.
    let t = (-2.0 * upper_tail.ln()).sqrt();
    t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_PRIMITIVE: [Primitive; 7] = {
        use Primitive::*;
        [Send, RecvReduceSend, RecvReduceCopySend, RecvCopySend, CopySend, Recv, RecvReduceCopy]
    };

    fn hopper_simple() -> ThreadBlock {
        let rates = CtaRates {
            load: Bandwidth::from_gbps_f64(147.0),
            store: Bandwidth::from_gbps_f64(56.0),
            remote_store: Bandwidth::from_gbps_f64(61.0),
        };
        ThreadBlock::new(rates, None, None)
    }

    #[test]
    fn primitives_in_series_give_the_measured_mixes_of_host_reads_and_writes() {
        // One H200, 4 blocks of 512 threads on pinned host memory
        // (tools/probes/host_channels.cu, h200-device-1gpu/host-channels.jsonl,
        // 2026-12-02, three runs): a copy moves 55.3 GB/s, reads alone
        // 51.0-51.2, a pass that reads, adds and writes back 39.3-39.9 each
        // way; alternating a slice's write and read (a 2-rank all-gather's
        // loop) 25.4-25.9, and a 2-rank ring allreduce's loop 30.6-31.3.
        let link = 55.3;
        let shares = HostShares { read: 51.1 / link, read_write: 39.6 / link };
        for (op, low, high) in [(Op::AllGather, 25.4, 25.9), (Op::AllReduce, 30.6, 31.3)] {
            let each_way = host_loop_share(HostLoop::Ring { op, ranks: 2 }, &shares) * link;
            let middle = (low + high) / 2.0;
            assert!((each_way / middle - 1.0).abs() < 0.05, "{op:?}: {each_way:.2} GB/s each way against {low}-{high} measured");
        }
        // A chain's ranks read and write at once; a 2-rank reduce-scatter
        // alternates as the all-gather does.
        assert_eq!(host_loop_share(HostLoop::Chain, &shares), shares.read_write);
        let two_ranks = |op| host_loop_share(HostLoop::Ring { op, ranks: 2 }, &shares);
        assert_eq!(two_ranks(Op::ReduceScatter), two_ranks(Op::AllGather));
    }

    #[test]
    fn eight_bit_adds_cost_only_the_primitives_that_reduce() {
        let wide = hopper_simple();
        let int8 = ThreadBlock::new(wide.rates, Some(Bandwidth::from_gbps_f64(1000.0 / 3.0)), None);
        for primitive in EVERY_PRIMITIVE {
            let extra = primitive.seconds_per_byte(&int8) - primitive.seconds_per_byte(&wide);
            let expected = if primitive.reduces() { 3e-12 } else { 0.0 };
            assert!((extra - expected).abs() < 1e-18, "{primitive:?}: {extra}");
        }
        // A 2-rank reduce-scatter loop reduces once a byte sent (its final
        // receive), an all-gather never.
        let loop_seconds = |op, block: &ThreadBlock| 1.0 / ring_loop(op, 2, block, false).rate(1.0);
        assert!((loop_seconds(Op::ReduceScatter, &int8) - loop_seconds(Op::ReduceScatter, &wide) - 3e-12).abs() < 1e-18);
        assert_eq!(loop_seconds(Op::AllGather, &int8), loop_seconds(Op::AllGather, &wide));
    }

    #[test]
    fn a_receive_through_host_memory_loads_what_arrived_at_the_paths_rate_in_series_with_its_other_work() {
        let free = hopper_simple();
        let bounded = ThreadBlock::new(free.rates, None, Some(Bandwidth::from_gbps_f64(10.0)));
        use Primitive::*;
        let slower_load = 1e-10 - 1.0 / 147e9;
        for primitive in EVERY_PRIMITIVE {
            let extra = if primitive.receives() { slower_load } else { 0.0 };
            let expected = primitive.seconds_per_byte(&free) + extra;
            assert!((primitive.seconds_per_byte(&bounded) - expected).abs() < 1e-20, "{primitive:?}");
        }
        // Per byte sent, a 2-rank all-reduce loop and an all-gather's each
        // wait once per byte received, on top of all their other work.
        let per_byte_sent = |op| 1.0 / ring_loop(op, 2, &bounded, true).rate(1.0);
        let all_reduce =
            (Send.seconds_per_byte(&free) + RecvReduceCopySend.seconds_per_byte(&free) + Recv.seconds_per_byte(&free)) / 2.0 + slower_load;
        let all_gather = CopySend.seconds_per_byte(&free) + Recv.seconds_per_byte(&free) + slower_load;
        assert!((per_byte_sent(Op::AllReduce) - all_reduce).abs() < 1e-20);
        assert!((per_byte_sent(Op::AllGather) - all_gather).abs() < 1e-20);
        // One H200 block of 512 threads (four 16-byte loads in flight a
        // thread) reads pinned host memory at 18.3-18.7 GB/s alone, writes
        // it at 34.7-35.3, and reads and writes back in one pass at
        // 12.2-12.8 each way (tools/probes/host_channels.cu,
        // h200-device-1gpu/host-channels.jsonl): the two in series.
        let in_series: f64 = 1.0 / (1.0 / 18.6 + 1.0 / 35.0);
        assert!((in_series / 12.5 - 1.0).abs() < 0.05, "{in_series:.2} GB/s against 12.2-12.8 measured");
    }

    #[test]
    fn a_ring_loop_runs_ncclss_primitives_in_order() {
        let all_reduce: Vec<Primitive> = (0..6).map(|s| ring_step(Op::AllReduce, 4, s)).collect();
        use Primitive::*;
        assert_eq!(all_reduce, vec![Send, RecvReduceSend, RecvReduceSend, RecvReduceCopySend, RecvCopySend, RecvCopySend]);
        assert_eq!((0..2).map(|s| ring_step(Op::AllReduce, 2, s)).collect::<Vec<_>>(), vec![Send, RecvReduceCopySend]);
        assert_eq!(ring_final(Op::ReduceScatter), RecvReduceCopy);
        assert_eq!(ring_step(Op::AllGather, 4, 0), CopySend);
    }

    #[test]
    fn operation_counts_give_the_measured_one_channel_rates() {
        // Per byte sent, the loop's operations (the hand count of the
        // runner's one-channel analysis): all-reduce over 2 ranks loads 2,
        // stores 1 and stores remotely 1 per byte sent.
        let cta = hopper_simple();
        let ar2 = ring_loop(Op::AllReduce, 2, &cta, false).rate(1.0) / 1e9;
        let expected = 1.0 / (2.0 / 147.0 + 1.0 / 56.0 + 1.0 / 61.0);
        assert!((ar2 - expected).abs() < 1e-9, "{ar2} vs {expected}");
        // Measured (h200x4-channels, one channel, 1 GiB): 20.9, 15.2, 18.3 GB/s.
        let ag2 = ring_loop(Op::AllGather, 2, &cta, false).rate(1.0) / 1e9;
        let rs2 = ring_loop(Op::ReduceScatter, 2, &cta, false).rate(1.0) / 1e9;
        for (got, measured) in [(ar2, 20.9), (ag2, 15.2), (rs2, 18.3)] {
            assert!((got / measured - 1.0).abs() < 0.03, "{got:.2} GB/s against {measured}");
        }
        // Two ranks of a chain: the root reduces, copies and sends with its
        // whole block, an all-reduce ring loop's work a byte; the far end's
        // two groups send and receive at once, each doing less.
        let chain = chain_channel_rate(&cta) / 1e9;
        assert!((chain / ar2 - 1.0).abs() < 1e-9, "{chain} against {ar2}");
        // Through host memory the root's load of what arrived takes the
        // path's time where that is longer, in series with its other work.
        let waiting = |gbps: f64| ThreadBlock::new(cta.rates, None, Some(Bandwidth::from_gbps_f64(gbps)));
        assert!((chain_channel_rate(&waiting(200.0)) / 1e9 / ar2 - 1.0).abs() < 1e-9);
        let slower = 1.0 / (1e9 * ar2) + 1.0 / 10e9 - 1.0 / 147e9;
        assert!((chain_channel_rate(&waiting(10.0)) - 1.0 / slower).abs() / (1.0 / slower) < 1e-9);
    }

    #[test]
    fn contention_slows_only_the_primitives_on_the_link() {
        let cta = hopper_simple();
        // A reduce-scatter's send (a load and a store into the peer) presses
        // on the link harder than its loop's average rate says.
        let over_nvlink = ring_loop(Op::ReduceScatter, 2, &cta, false);
        assert!(over_nvlink.link_rate() > 1.5 * over_nvlink.rate(1.0));
        // At half speed on the link the loop takes its link part twice and
        // its local part (the final receive from local memory) once.
        let per_byte = 1.0 / over_nvlink.rate(0.5);
        let by_hand = (2.0 * over_nvlink.on_link() + over_nvlink.local()) / over_nvlink.sends as f64;
        assert!((per_byte / by_hand - 1.0).abs() < 1e-12);
        // Through host memory the final receive reads across the link too.
        let through_host = ring_loop(Op::ReduceScatter, 2, &cta, true);
        assert!((through_host.rate(0.5) / through_host.rate(1.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_loop_sends_then_copies_out_once() {
        let cta = hopper_simple();
        // Over NVLink the final receive reads local memory: the sending
        // steps run at the link's pace, then the copy out at its own, and
        // the two add up to the loop.
        let over_nvlink = ring_loop(Op::AllGather, 4, &cta, false);
        let phases = over_nvlink.phases(0.5);
        let copy_out = phases.copy_out.expect("over NVLink the copy out runs in series");
        let loop_seconds = over_nvlink.sends as f64 / phases.send + 1.0 / copy_out;
        assert!((loop_seconds * over_nvlink.rate(0.5) / over_nvlink.sends as f64 - 1.0).abs() < 1e-12);
        assert!((copy_out - ring_final(Op::AllGather).rate(&cta)).abs() < 1e-6);
        // Through host memory the copy out's loads are the pipe's reads:
        // the sends carry the whole loop's time, the copy out none.
        let through_host = ring_loop(Op::AllGather, 4, &cta, true);
        let phases = through_host.phases(0.5);
        assert_eq!(phases.copy_out, None);
        assert!((phases.send - through_host.rate(0.5)).abs() < 1e-6);
    }

    #[test]
    fn the_soft_minimum_follows_the_smaller_far_from_the_knee_and_bends_near_it() {
        assert!((soft_min(10.0, 1000.0, 2.76) / 10.0 - 1.0).abs() < 1e-4);
        assert!((soft_min(1e6, 400.0, 2.76) / 400.0 - 1.0).abs() < 1e-6);
        let at_knee = soft_min(400.0, 400.0, 2.76);
        assert!(at_knee < 400.0 * 0.8 && at_knee > 400.0 * 0.7, "{at_knee}");
        assert_eq!(soft_min(0.0, 1.0, 2.0), 0.0);
        assert!((contention_factor(1.0, 1e9, 2.76) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_slowest_of_n_channels_lags_by_the_expected_largest_normal_draw() {
        // Exact expected maxima of n standard normal draws (order-statistics tables).
        for (n, exact) in [(1, 0.0), (2, 0.5642), (4, 1.0294), (8, 1.4236), (16, 1.7660), (32, 2.0697)] {
            assert!((slowest_of(n) - exact).abs() < 0.03, "n = {n}: {} against {exact}", slowest_of(n));
        }
    }
}
