//! Ring collectives as task graphs, the way NCCL runs them: the buffer is
//! split over channels as NCCL deals it out; each channel walks its ring in
//! loops of `ranks` chunks; every chunk is cut into slices, and a slice
//! moves one hop per step, as soon as it has arrived and the connection is
//! free, at the channel's rate (src/collective/rate.rs).
//! Allreduce is a reduce-scatter (n-1 steps) then an all-gather (n-1 steps);
//! each loop ends with a receive-only primitive (the copy out of the
//! receive buffer), which ends the call on the last loop.

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::transport::Pipe;
use crate::units::{Bandwidth, Bytes, Time};

use super::Op;

/// What a ring's steps move at, per channel.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRates {
    /// Wire rate of every sending step: the channel's thread block spreads
    /// the time of all its primitives over the steps that send.
    pub send: Bandwidth,
    /// Sending steps in a loop.
    pub steps: usize,
    /// Data rate of the loop's final, receive-only primitive (the copy out).
    pub receive: Bandwidth,
}

/// Everything a ring needs, resolved.
pub struct RingPlan<'p> {
    pub op: Op,
    pub ranks: usize,
    /// Data bytes each used channel handles (of the buffer, or of one
    /// rank's part for all-gather and reduce-scatter).
    pub channel_bytes: Vec<Bytes>,
    /// Per used channel: its pipes, `pipes[c][i]` from ring position i to i+1.
    pub pipes: &'p mut [Vec<Pipe>],
    pub chunk: Bytes,
    pub slices_per_chunk: u32,
    pub min_slice: Bytes,
    pub wire_factor: f64,
    pub rates: StepRates,
}

/// Bytes on the wire for `data` bytes of payload.
pub fn wire_bytes(data: Bytes, wire_factor: f64) -> Bytes {
    Bytes((data.0 as f64 * wire_factor).ceil() as u64)
}

/// Slices of one piece: at least `min_slice` each (unless the piece is
/// smaller), at most `slices_per_chunk` of them.
fn slices(piece: Bytes, slices_per_chunk: u32, min_slice: Bytes) -> impl Iterator<Item = Bytes> {
    let target = piece.0.div_ceil(u64::from(slices_per_chunk)).max(min_slice.0).max(1);
    let count = piece.0.div_ceil(target).max(1);
    piece.split_even(count)
}

/// A channel's share of one loop: `ranks` pieces of at most `chunk` bytes.
/// All-reduce splits the channel's bytes into loops of `ranks` chunks;
/// all-gather and reduce-scatter move the channel's part of every rank's
/// data, a chunk of each rank's per loop.
fn loops(op: Op, ranks: usize, channel_bytes: Bytes, chunk: Bytes) -> Vec<Vec<Bytes>> {
    let n = ranks as u64;
    let mut out = Vec::new();
    match op {
        Op::AllGather | Op::ReduceScatter => {
            let mut remaining = channel_bytes;
            while remaining.0 > 0 {
                let piece = remaining.min(chunk);
                remaining = remaining - piece;
                out.push(vec![piece; ranks]);
            }
        }
        Op::AllReduce | Op::Broadcast => {
            let mut remaining = channel_bytes;
            while remaining.0 > 0 {
                let loop_bytes = remaining.min(chunk * n);
                remaining = remaining - loop_bytes;
                out.push(loop_bytes.split_even(n).collect());
            }
        }
    }
    out
}

/// Adds the ring to `graph`, starting after `start`; returns the tasks whose
/// completion ends it.
pub fn build(plan: &mut RingPlan<'_>, graph: &mut TaskGraph<Path>, start: TaskId) -> Vec<TaskId> {
    let n = plan.ranks;
    let steps = plan.rates.steps;
    let reduce_scatter_steps = match plan.op {
        Op::AllReduce | Op::ReduceScatter => n - 1,
        Op::AllGather | Op::Broadcast => 0,
    };
    let mut ends = Vec::new();
    for (channel, &channel_bytes) in plan.channel_bytes.iter().enumerate() {
        // The receiver's final primitive (the copy out), per ring position.
        let mut copied_out: Vec<Option<TaskId>> = vec![None; n];
        for pieces in loops(plan.op, n, channel_bytes, plan.chunk) {
            let piece_slices: Vec<Vec<Bytes>> =
                pieces.iter().map(|&p| slices(p, plan.slices_per_chunk, plan.min_slice).collect()).collect();
            // arrived[i][j]: slice j of the piece that ring position i holds
            // for the next step has arrived there.
            let mut arrived: Vec<Vec<TaskId>> = vec![Vec::new(); n];
            for step in 0..steps {
                let cap = plan.rates.send;
                let mut next_arrived: Vec<Vec<TaskId>> = vec![Vec::new(); n];
                for (position, ready_slices) in arrived.iter().enumerate() {
                    let piece = piece_sent(position, step, reduce_scatter_steps, n, plan.op);
                    let receiver = (position + 1) % n;
                    let pipe = &mut plan.pipes[channel][position];
                    let mut sent = Vec::with_capacity(piece_slices[piece].len());
                    for (j, &slice) in piece_slices[piece].iter().enumerate() {
                        let ready = ready_slices.get(j).copied().unwrap_or(start);
                        sent.push(pipe.send(graph, wire_bytes(slice, plan.wire_factor), Some(cap), &[ready]));
                    }
                    next_arrived[receiver] = sent;
                }
                arrived = next_arrived;
            }
            // Each position copies out the piece that reached it last.
            for (position, delivered) in arrived.iter().enumerate() {
                let piece = piece_sent(position, steps, reduce_scatter_steps, n, plan.op);
                for (&slice, &ready) in piece_slices[piece].iter().zip(delivered) {
                    let mut after = vec![ready];
                    after.extend(copied_out[position]);
                    copied_out[position] = Some(graph.delay(local_time(slice, plan.rates.receive), &after));
                }
            }
        }
        ends.extend(copied_out.into_iter().flatten());
    }
    ends
}

/// The time of a primitive that touches only the GPU's own memory.
fn local_time(bytes: Bytes, rate: Bandwidth) -> Time {
    if bytes.0 == 0 { Time::ZERO } else { bytes / rate }
}

/// Broadcast from ring position 0 along the ring (a chain of n-1 hops):
/// every slice is forwarded as soon as it has arrived. Returns the tasks that
/// end it.
pub fn broadcast(plan: &mut RingPlan<'_>, graph: &mut TaskGraph<Path>, start: TaskId) -> Vec<TaskId> {
    let n = plan.ranks;
    let mut ends = Vec::new();
    let cap = plan.rates.send;
    for (channel, &channel_bytes) in plan.channel_bytes.iter().enumerate() {
        let slice = plan.chunk.0.div_ceil(u64::from(plan.slices_per_chunk)).max(plan.min_slice.0).max(1);
        let count = channel_bytes.0.div_ceil(slice).max(1);
        for piece in channel_bytes.split_even(count) {
            let wire = wire_bytes(piece, plan.wire_factor);
            let mut arrived = start;
            for position in 0..n - 1 {
                arrived = plan.pipes[channel][position].send(graph, wire, Some(cap), &[arrived]);
            }
            ends.push(graph.delay(local_time(piece, plan.rates.receive), &[arrived]));
        }
    }
    ends
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
        // All-reduce: loops of n chunks; all-gather: a chunk of every rank's part a loop.
        let all_reduce = loops(Op::AllReduce, 4, Bytes::mib(10), Bytes::mib(2));
        assert_eq!(all_reduce.len(), 2);
        assert_eq!(all_reduce.iter().flatten().copied().sum::<Bytes>(), Bytes::mib(10));
        let all_gather = loops(Op::AllGather, 4, Bytes::mib(3), Bytes::mib(2));
        assert_eq!(all_gather, vec![vec![Bytes::mib(2); 4], vec![Bytes::mib(1); 4]]);
    }
}
