//! Ring collectives as streams of tasks, the way NCCL runs them: the buffer
//! is split over channels as NCCL deals it out; each channel walks its ring
//! in loops of `ranks` chunks; every chunk is cut into slices, and a slice
//! moves one hop per step, as soon as it has arrived and the connection is
//! free, at the channel's rate (src/collective/rate.rs).
//! Allreduce is a reduce-scatter (n-1 steps) then an all-gather (n-1 steps);
//! each loop ends with a receive-only primitive (the copy out of the
//! receive buffer), which ends the call on the last loop. A channel's
//! thread block does one thing at a time: where the copy out reads local
//! memory it starts once the position's own sends of the loop are done,
//! and the next loop's sends once it is; as the channels drift apart
//! (`Drift`) its time moves into the sends. Through host memory its loads
//! are the pipe's reads and its time is in the sends from the start. A
//! channel is a lane of the stream and a step a batch: tasks exist for
//! about two steps of each channel at a time, whatever the size.

use crate::engine::{Builder, Generator, Stream, TaskRef};
use crate::network::Path;
use crate::transport::Pipe;
use crate::units::{Bandwidth, Bytes, Time};

use super::Op;
use super::chunk_lanes::{ChainWay, ChunkLanes};

/// What a ring's steps move at, per channel.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRates {
    /// Wire rate of every sending step: the channel's thread block spreads
    /// the time of its sending primitives (through host memory, of its
    /// whole loop) over the steps that send.
    pub send: Bandwidth,
    /// Sending steps in a loop.
    pub steps: usize,
    /// Data rate of the loop's final, receive-only primitive (the copy out)
    /// where a position runs it after its own sends of the loop, holding up
    /// its next loop (the thread block does one thing at a time); None
    /// where its time is in `send` (through host memory, where its loads
    /// are the pipe's reads).
    pub copy_out: Option<Bandwidth>,
    /// Where the copy out runs in series: how the channels drift apart.
    pub drift: Option<Drift>,
}

/// Channels drifting apart (`contention.drift` in the hardware
/// model): the rates above are those of channels in step, whose copies out
/// leave the link idle at the same moments; `send` is the wire rate of a
/// sending step once they are apart, the link carrying their average
/// demand and the copy out's time hidden in it. A loop that starts after
/// `k` sending steps runs a share `1 - exp(-k x per_step)` of the way there.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub per_step: f64,
    pub send: Bandwidth,
}

/// The rates one loop of a channel runs at.
#[derive(Debug)]
struct LoopRates {
    send: Bandwidth,
    /// The copy out's rate where it runs in series; None where its time
    /// is all hidden in the sends.
    copy_out: Option<Bandwidth>,
}

impl StepRates {
    /// The rates of a loop that starts after `steps_done` sending steps.
    fn of_loop(&self, steps_done: u64) -> LoopRates {
        let in_step = LoopRates { send: self.send, copy_out: self.copy_out };
        let Some(drift) = &self.drift else { return in_step };
        let still_in_step = (-(steps_done as f64) * drift.per_step).exp();
        if still_in_step >= 1.0 {
            return in_step;
        }
        // Seconds a wire byte, weighted between in step and drifted apart.
        let per_byte = still_in_step / self.send.bytes_per_sec() + (1.0 - still_in_step) / drift.send.bytes_per_sec();
        LoopRates {
            send: Bandwidth::from_bytes_per_sec_f64(1.0 / per_byte),
            copy_out: self
                .copy_out
                .filter(|_| still_in_step > 1e-12)
                .map(|rate| Bandwidth::from_bytes_per_sec_f64(rate.bytes_per_sec() / still_in_step)),
        }
    }
}

/// One simulated channel: its data bytes (of the buffer, or of one rank's
/// part for all-gather and reduce-scatter) and its pipes, `pipes[i]` from
/// ring position i to i+1 (standing for as many identical channels as the
/// pipes have copies).
#[derive(Debug, Clone)]
pub struct RingChannel {
    pub bytes: Bytes,
    pub pipes: Vec<Pipe>,
}

/// Everything a ring needs, resolved.
#[derive(Debug)]
pub struct RingStream {
    pub op: Op,
    pub ranks: usize,
    pub channels: Vec<RingChannel>,
    pub chunk: Bytes,
    pub slices_per_chunk: u32,
    pub min_slice: Bytes,
    pub wire_factor: f64,
    pub rates: StepRates,
    /// Wire bytes of each step's piece that move within the step's latency.
    pub latency_bytes: Bytes,
}

/// Bytes on the wire for `data` bytes of payload.
pub fn wire_bytes(data: Bytes, wire_factor: f64) -> Bytes {
    Bytes((data.0 as f64 * wire_factor).ceil() as u64)
}

/// The rate cap of a step's piece (or one of its slices) of `wire` bytes
/// of which `riding` ride on the step's latency: the rest takes its time at
/// `rate`; where all of it rides, only the links limit it.
pub fn cap_past_latency(rate: Bandwidth, wire: Bytes, riding: Bytes) -> Option<Bandwidth> {
    if riding.0 == 0 {
        return Some(rate);
    }
    (wire > riding).then(|| rate.scaled(wire.0 as f64 / (wire.0 - riding.0) as f64))
}

/// The bytes of a slice of `piece`: a `slices_per_chunk`-th of it, at least
/// `min_slice` (and a byte).
fn slice_size(piece: Bytes, slices_per_chunk: u32, min_slice: Bytes) -> u64 {
    piece.0.div_ceil(u64::from(slices_per_chunk)).max(min_slice.0).max(1)
}

/// Slices of one piece, as NCCL's primitives loop over it: whole slices of
/// `slice_size` and the remainder last (at least `min_slice` each unless
/// the piece is smaller, at most `slices_per_chunk` of them). A piece a
/// byte past one slice is a whole slice and a byte, not two halves: halves
/// would forward its first half a slice early, and a call could get faster
/// for more bytes.
fn slices(piece: Bytes, slices_per_chunk: u32, min_slice: Bytes) -> impl Iterator<Item = Bytes> {
    let size = slice_size(piece, slices_per_chunk, min_slice);
    let count = piece.0.div_ceil(size).max(1);
    (0..count).map(move |i| Bytes(size.min(piece.0 - i * size)))
}

/// A channel's next loop, taken from its `remaining` bytes: `ranks` pieces
/// of at most `chunk` bytes. All-reduce splits the channel's bytes into
/// loops of `ranks` chunks; all-gather and reduce-scatter move the
/// channel's part of every rank's data, a chunk of each rank's per loop.
/// None when no bytes remain. A loop takes at least a byte a piece, so a
/// zero chunk cannot loop for ever.
fn next_loop(op: Op, ranks: usize, remaining: &mut Bytes, chunk: Bytes) -> Option<Vec<Bytes>> {
    if remaining.0 == 0 {
        return None;
    }
    let chunk = Bytes(chunk.0.max(1));
    match op {
        Op::AllGather | Op::ReduceScatter => {
            let piece = (*remaining).min(chunk);
            *remaining = *remaining - piece;
            Some(vec![piece; ranks])
        }
        Op::AllReduce | Op::Broadcast => {
            let loop_bytes = (*remaining).min(chunk * ranks as u64);
            *remaining = *remaining - loop_bytes;
            Some(loop_bytes.split_even(ranks as u64).collect())
        }
    }
}

impl RingStream {
    /// How long the largest channel spends sending at its rate: its bytes
    /// are its part of the buffer (allreduce, broadcast: a rank's share of
    /// it a send) or of one rank's part (all-gather, reduce-scatter: all of
    /// it a send), as `next_loop` deals them.
    pub fn sending_time(&self) -> Time {
        let largest = self.channels.iter().map(|c| c.bytes.0).max().unwrap_or(0) as f64;
        let per_send = match self.op {
            Op::AllReduce | Op::Broadcast => largest / self.ranks as f64,
            Op::AllGather | Op::ReduceScatter => largest,
        };
        Time::from_us_f64(1e6 * self.rates.steps as f64 * per_send * self.wire_factor / self.rates.send.bytes_per_sec())
    }
}

impl Stream<Path> for RingStream {
    fn generator(&self) -> Box<dyn Generator<Path> + '_> {
        let lanes = || self.channels.iter().map(|channel| LaneRun::new(channel, self.ranks)).collect();
        if self.op == Op::Broadcast {
            Box::new(ChunkLanes::new(self.channels.iter().map(|channel| BroadcastWay::new(channel, self))))
        } else {
            Box::new(RingRun { ring: self, lanes: lanes() })
        }
    }
}

/// One channel of a ring, running.
struct LaneRun {
    pipes: Vec<Pipe>,
    /// Bytes not yet dealt into a loop.
    remaining: Bytes,
    /// The current loop's pieces, cut into slices.
    piece_slices: Vec<Vec<Bytes>>,
    /// The next step of the current loop (0: a loop is to start).
    step: usize,
    /// Per ring position: the slices that arrived there for the next step,
    /// and the buffer for those of the step being added.
    arrived: Vec<Vec<TaskRef>>,
    arriving: Vec<Vec<TaskRef>>,
    /// Per ring position: its last copy out of the receive buffer.
    copied_out: Vec<Option<TaskRef>>,
    /// Loops the channel has finished.
    loops_done: u64,
}

impl LaneRun {
    fn new(channel: &RingChannel, ranks: usize) -> LaneRun {
        LaneRun {
            pipes: channel.pipes.clone(),
            remaining: channel.bytes,
            piece_slices: Vec::new(),
            step: 0,
            arrived: vec![Vec::new(); ranks],
            arriving: vec![Vec::new(); ranks],
            copied_out: vec![None; ranks],
            loops_done: 0,
        }
    }
}

struct RingRun<'s> {
    ring: &'s RingStream,
    lanes: Vec<LaneRun>,
}

impl Generator<Path> for RingRun<'_> {
    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// One step of the channel's current loop; the loop's last step with
    /// the copies out that end it.
    fn next_batch(&mut self, lane: usize, graph: &mut dyn Builder<Path>) -> bool {
        let ring = self.ring;
        let n = ring.ranks;
        let run = &mut self.lanes[lane];
        if run.step == 0 {
            let Some(pieces) = next_loop(ring.op, n, &mut run.remaining, ring.chunk) else { return false };
            run.piece_slices = pieces.iter().map(|&p| slices(p, ring.slices_per_chunk, ring.min_slice).collect()).collect();
            run.arrived.iter_mut().for_each(Vec::clear);
        }
        let steps = ring.rates.steps;
        let rates = ring.rates.of_loop(run.loops_done * steps as u64);
        let reduce_scatter_steps = match ring.op {
            Op::AllReduce | Op::ReduceScatter => n - 1,
            Op::AllGather | Op::Broadcast => 0,
        };
        let step = run.step;
        for position in 0..n {
            let piece = piece_sent(position, step, reduce_scatter_steps, n, ring.op);
            let receiver = (position + 1) % n;
            let mut sent = std::mem::take(&mut run.arriving[receiver]);
            sent.clear();
            // The piece's first bytes ride on the step's latency, in
            // whichever of its first slices carry them.
            let mut riding = ring.latency_bytes;
            for (j, &slice) in run.piece_slices[piece].iter().enumerate() {
                // A loop's first step waits for the thread block to finish
                // the last loop's copy out; later steps for what arrived.
                let ready = if step > 0 {
                    run.arrived[position].get(j).copied()
                } else if ring.rates.copy_out.is_some() {
                    run.copied_out[position]
                } else {
                    None
                };
                let wire = wire_bytes(slice, ring.wire_factor);
                let rides = Bytes(riding.0.min(wire.0));
                riding = Bytes(riding.0 - rides.0);
                sent.push(run.pipes[position].send(graph, wire, cap_past_latency(rates.send, wire, rides), ready));
            }
            run.arriving[receiver] = sent;
        }
        std::mem::swap(&mut run.arrived, &mut run.arriving);
        if step + 1 < steps {
            run.step += 1;
            return true;
        }
        // Each position copies out the piece that reached it last, after
        // its own sends of the loop. Through host memory (no copy out in
        // series) that time is the sends': nothing to add.
        if ring.rates.copy_out.is_some() {
            for (position, delivered) in run.arrived.iter().enumerate() {
                let piece = piece_sent(position, steps, reduce_scatter_steps, n, ring.op);
                // The position's own sends of the last step arrived at the next one.
                let mut own_sends_done = run.arrived[(position + 1) % n].last().copied();
                for (&slice, &ready) in run.piece_slices[piece].iter().zip(delivered) {
                    let mut after = vec![ready];
                    after.extend(run.copied_out[position]);
                    after.extend(own_sends_done.take());
                    let copy_time = rates.copy_out.map_or(Time::ZERO, |rate| local_time(slice, rate));
                    run.copied_out[position] = Some(graph.delay(copy_time, &after));
                }
            }
        }
        run.step = 0;
        run.loops_done += 1;
        true
    }
}

/// The time of a primitive that touches only the GPU's own memory.
fn local_time(bytes: Bytes, rate: Bandwidth) -> Time {
    if bytes.0 == 0 { Time::ZERO } else { bytes / rate }
}

/// Broadcast from ring position 0 along the ring (a chain of n-1 hops):
/// every slice is forwarded as soon as it has arrived, and the last rank
/// copies it out where the protocol does. Each slice of each channel is a
/// lane and a batch its next position, as the tree's chunks
/// (src/collective/chunk_lanes.rs): tasks exist only for the positions
/// slices are at or about to take.
struct BroadcastWay<'s> {
    ring: &'s RingStream,
    pipes: Vec<Pipe>,
    bytes: Bytes,
    /// Bytes of each slice but the last, which takes the remainder.
    slice: Bytes,
}

impl<'s> BroadcastWay<'s> {
    /// A channel's way, its slices and the positions of a slice's way (the
    /// hops, then the copy out if any).
    fn new(channel: &RingChannel, ring: &'s RingStream) -> (BroadcastWay<'s>, u64, u64) {
        let slice = slice_size(ring.chunk, ring.slices_per_chunk, ring.min_slice);
        let hops = ring.ranks as u64 - 1;
        let way = BroadcastWay { ring, pipes: channel.pipes.clone(), bytes: channel.bytes, slice: Bytes(slice.max(1)) };
        (way, channel.bytes.0.div_ceil(slice).max(1), hops + u64::from(ring.rates.copy_out.is_some()))
    }
}

impl ChainWay for BroadcastWay<'_> {
    fn advance(&mut self, index: u64, position: u64, arrived: Option<TaskRef>, graph: &mut dyn Builder<Path>) -> TaskRef {
        let ring = self.ring;
        let piece = self.bytes.chunk_part(self.slice, index);
        match ring.rates.copy_out {
            Some(rate) if position == ring.ranks as u64 - 1 => {
                graph.delay(local_time(piece, rate), &[arrived.expect("a slice arrives before it is copied out")])
            }
            _ => self.pipes[position as usize].send(graph, wire_bytes(piece, ring.wire_factor), Some(ring.rates.send), arrived),
        }
    }
}

/// The piece ring position `position` sends at `step`. In the reduce-scatter
/// phase a position passes on what it received, reduced with its own part;
/// after it, each position starts the all-gather with the piece it finished.
fn piece_sent(position: usize, step: usize, reduce_scatter_steps: usize, n: usize, op: Op) -> usize {
    match op {
        Op::AllGather | Op::Broadcast => (position + n - step % n) % n,
        _ if step < reduce_scatter_steps => (position + n - step % n) % n,
        _ => (position + 1 + n - (step - reduce_scatter_steps) % n) % n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_position_forwards_the_piece_it_just_received() {
        for n in 2..9 {
            for (op, steps, rs) in [(Op::AllReduce, 2 * (n - 1), n - 1), (Op::AllGather, n - 1, 0), (Op::ReduceScatter, n - 1, n - 1)] {
                for step in 1..steps {
                    for position in 0..n {
                        let previous = (position + n - 1) % n;
                        assert_eq!(
                            piece_sent(position, step, rs, n, op),
                            piece_sent(previous, step - 1, rs, n, op),
                            "{op:?} n={n} step={step} position={position}"
                        );
                    }
                }
            }
        }
    }

    fn drifting_rates(per_step: f64) -> StepRates {
        StepRates {
            send: Bandwidth::gbps(10),
            steps: 2,
            copy_out: Some(Bandwidth::gbps(40)),
            drift: Some(Drift { per_step, send: Bandwidth::gbps(8) }),
        }
    }

    #[test]
    fn channels_start_in_step_and_drift_to_the_average_demand() {
        let rates = drifting_rates(0.1);
        // The first loop runs in step: the sends at their own pace, the copy out after them.
        let first = rates.of_loop(0);
        assert_eq!(first.send, Bandwidth::gbps(10));
        assert_eq!(first.copy_out, Some(Bandwidth::gbps(40)));
        // After k steps a share exp(-k x drift) is still in step: a wire
        // byte's time is weighted between the two, and the copy out keeps
        // only the in-step share of its time.
        let later = rates.of_loop(10);
        let in_step = (-1.0f64).exp();
        let seconds_a_byte = in_step / 10e9 + (1.0 - in_step) / 8e9;
        assert!((later.send.bytes_per_sec() * seconds_a_byte - 1.0).abs() < 1e-9);
        assert!((later.copy_out.unwrap().bytes_per_sec() * in_step / 40e9 - 1.0).abs() < 1e-9);
        // Long after, the loop runs at the drifted rate, its copy out hidden in it.
        let apart = rates.of_loop(100_000);
        assert!((apart.send.bytes_per_sec() / 8e9 - 1.0).abs() < 1e-9);
        assert_eq!(apart.copy_out, None);
        // No drift: every loop runs in step.
        assert_eq!(drifting_rates(0.0).of_loop(100_000).send, Bandwidth::gbps(10));
    }

    #[test]
    fn a_pieces_first_bytes_ride_on_the_steps_latency() {
        let rate = Bandwidth::gbps(2);
        // 10 KiB with 2 KiB riding: the other 8 KiB take their time at 2 GB/s.
        let cap = cap_past_latency(rate, Bytes::kib(10), Bytes::kib(2)).unwrap();
        assert!(((Bytes::kib(10) / cap).as_us() - (Bytes::kib(8) / rate).as_us()).abs() < 1e-3);
        // All of it riding: only the links limit it; none riding: the rate.
        assert_eq!(cap_past_latency(rate, Bytes::kib(2), Bytes::kib(2)), None);
        assert_eq!(cap_past_latency(rate, Bytes::kib(10), Bytes(0)), Some(rate));
    }

    #[test]
    fn slices_respect_the_minimum_and_conserve_bytes() {
        let pieces: Vec<Bytes> = slices(Bytes::mib(2), 2, Bytes::kib(32)).collect();
        assert_eq!(pieces, vec![Bytes::mib(1), Bytes::mib(1)]);
        let small: Vec<Bytes> = slices(Bytes::kib(40), 2, Bytes::kib(32)).collect();
        assert_eq!(small.iter().copied().sum::<Bytes>(), Bytes::kib(40));
        assert_eq!(small.len(), 2);
        assert_eq!(slices(Bytes(10), 2, Bytes::kib(32)).collect::<Vec<_>>(), vec![Bytes(10)]);
    }

    #[test]
    fn loops_cover_the_channels_bytes_once() {
        let all = |op, ranks, bytes, chunk| {
            let mut remaining = bytes;
            std::iter::from_fn(|| next_loop(op, ranks, &mut remaining, chunk)).collect::<Vec<_>>()
        };
        // All-reduce: loops of n chunks; all-gather: a chunk of every rank's part a loop.
        let all_reduce = all(Op::AllReduce, 4, Bytes::mib(10), Bytes::mib(2));
        assert_eq!(all_reduce.len(), 2);
        assert_eq!(all_reduce.iter().flatten().copied().sum::<Bytes>(), Bytes::mib(10));
        let all_gather = all(Op::AllGather, 4, Bytes::mib(3), Bytes::mib(2));
        assert_eq!(all_gather, vec![vec![Bytes::mib(2); 4], vec![Bytes::mib(1); 4]]);
        assert!(all(Op::AllReduce, 4, Bytes(0), Bytes::mib(2)).is_empty());
        // A zero chunk (a model no check caught) still ends.
        assert_eq!(all(Op::AllReduce, 2, Bytes(4), Bytes(0)).len(), 2);
    }
}
