//! Tree allreduce inside one node as a stream of tasks: NCCL's intra-node
//! tree is a chain (src/graph/connect.cc), rank 0 at one end; half of the
//! channels run it from one end and half from the other. A chunk is reduced
//! up the chain to its root, then broadcast back down, chunks pipelined; a
//! thread block's reduce and broadcast halves work at once. The far end's
//! receive copies each chunk out after it has arrived, except through host
//! memory, where that copy is the last hop's read. A channel's chunk is a
//! lane of the stream and a batch its next position: tasks exist only for
//! the chunks on their way, whatever the size.

use std::collections::VecDeque;

use crate::engine::{Builder, Generator, Stream, TaskRef};
use crate::network::Path;
use crate::transport::Pipe;
use crate::units::{Bandwidth, Bytes};

use super::ring::{cap_past_latency, wire_bytes};

/// The chain's order for one channel: rank positions from the root to the
/// far end. Even channels start at rank 0, odd ones at the last rank.
pub fn chain(ranks: usize, channel: usize) -> Vec<usize> {
    if channel.is_multiple_of(2) { (0..ranks).collect() } else { (0..ranks).rev().collect() }
}

/// One simulated channel: its data bytes and its chain's connections along
/// its order: `up[k]` from order[k+1] to order[k] (towards the root),
/// `down[k]` from order[k] to order[k+1].
#[derive(Debug, Clone)]
pub struct ChainChannel {
    pub bytes: Bytes,
    pub up: Vec<Pipe>,
    pub down: Vec<Pipe>,
}

/// The rates a chain's steps move at, per channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainRates {
    /// Wire rate of every send, up and down: the slowest rank's thread
    /// block spreads its primitives' time over its sends.
    pub send: Bandwidth,
    /// Data rate of the far end's final receive, which runs after its
    /// chunk has arrived; None through host memory, where its loads are
    /// the last hop's reads out of the staging buffer (as a ring's copy out
    /// there, src/collective/ring.rs).
    pub receive: Option<Bandwidth>,
}

#[derive(Debug)]
pub struct TreeStream {
    pub channels: Vec<ChainChannel>,
    pub chunk: Bytes,
    pub wire_factor: f64,
    pub rates: ChainRates,
    /// Wire bytes of each hop's chunk that move within the step's latency
    /// when all of the receiving thread block's threads receive it.
    pub latency_bytes: Bytes,
}

/// Of a hop's bytes that ride on its latency (a pass of the receiving
/// threads), the part a chain's receiver takes: NCCL's tree kernel for LL
/// and LL128 (`runTreeSplit`, all_reduce.h) gives a rank below the root
/// 70% of its warps to reduce (receiving from below) and the rest to
/// broadcast (receiving from above): of LL's 512 threads 352 and 160. The
/// root receives with all of them.
fn riding(full: Bytes, receiver: Receiver) -> Bytes {
    const THREADS: u64 = 512;
    const REDUCING: u64 = THREADS * 7 / (10 * 32) * 32;
    let threads = match receiver {
        Receiver::Root => THREADS,
        Receiver::Reducing => REDUCING,
        Receiver::Broadcasting => THREADS - REDUCING,
    };
    Bytes(full.0 * threads / THREADS)
}

/// Which of its rank's threads receive a chain's hop.
#[derive(Clone, Copy)]
enum Receiver {
    Root,
    Reducing,
    Broadcasting,
}

impl Stream<Path> for TreeStream {
    fn generator(&self) -> Box<dyn Generator<Path> + '_> {
        let mut first_lane = Vec::with_capacity(self.channels.len() + 1);
        first_lane.push(0);
        let channels = self
            .channels
            .iter()
            .map(|c| {
                let chunks = c.bytes.0.div_ceil(self.chunk.0).max(1);
                first_lane.push(first_lane.last().copied().unwrap_or(0) + chunks as usize);
                // The far end's receive of each chunk is a position of its
                // own where it takes time.
                let receives = self.rates.receive.is_some() && c.bytes.0 > 0;
                let positions = (c.up.len() + c.down.len() + usize::from(receives)) as u64;
                ChainRun { channel: c.clone(), positions, oldest: 0, in_flight: VecDeque::new(), last_end: None }
            })
            .collect();
        Box::new(TreeRun { tree: self, channels, first_lane })
    }
}

/// One channel's chunks on their way along the chain. A chunk passes
/// `positions` in turn (its sends up to the root, those back down, and the
/// far end's receive), each once it has left the one before and once the
/// chunk before it has left this one: so a chunk leaves the pipe of a
/// position only after the chunk before it, and only the chunks in the
/// pipeline have state.
struct ChainRun {
    channel: ChainChannel,
    positions: u64,
    /// The chunk at the front of `in_flight`.
    oldest: u64,
    /// Each chunk that has begun and not yet passed every position, oldest
    /// first.
    in_flight: VecDeque<ChunkRun>,
    /// The far end's last receive.
    last_end: Option<TaskRef>,
}

/// A chunk on its way: the next position it takes and where its last one
/// ended (none before its first).
struct ChunkRun {
    position: u64,
    arrived: Option<TaskRef>,
}

/// A lane for each chunk of each channel, channel by channel, so that lanes
/// stand in the order a graph holding the chunks one after another would;
/// a batch is the chunk's next position, and a chunk begins once the one
/// before it has left its first position's sender. So tasks exist only for
/// positions a chunk is at or about to take, however far ahead the first
/// chunks ran while the chain was empty.
struct TreeRun<'s> {
    tree: &'s TreeStream,
    channels: Vec<ChainRun>,
    /// Each channel's first lane, then the number of lanes.
    first_lane: Vec<usize>,
}

impl Generator<Path> for TreeRun<'_> {
    fn lanes(&self) -> usize {
        self.first_lane.last().copied().unwrap_or(0)
    }

    fn follows(&self, lane: usize) -> bool {
        self.first_lane.binary_search(&lane).is_err()
    }

    /// The chunk of `lane` one position further.
    fn next_batch(&mut self, lane: usize, graph: &mut dyn Builder<Path>) -> bool {
        let tree = self.tree;
        let channel = self.first_lane.partition_point(|&first| first <= lane) - 1;
        let chunk_index = (lane - self.first_lane[channel]) as u64;
        let run = &mut self.channels[channel];
        let slot = (chunk_index - run.oldest) as usize;
        if slot == run.in_flight.len() {
            run.in_flight.push_back(ChunkRun { position: 0, arrived: None });
        }
        let position = run.in_flight[slot].position;
        if position == run.positions {
            // Chunks pass the last position in order: the oldest is done.
            debug_assert!(slot == 0, "a chain's chunks finish in order");
            run.in_flight.pop_front();
            run.oldest += 1;
            return false;
        }
        let chunk = run.channel.bytes.chunk_part(Bytes(tree.chunk.0.max(1)), chunk_index);
        let arrived = run.in_flight[slot].arrived;
        let ended = advance(tree, &mut run.channel, &mut run.last_end, chunk, position, arrived, graph);
        run.in_flight[slot] = ChunkRun { position: position + 1, arrived: ended };
        true
    }
}

/// Adds `chunk` at `position` of its way: a send up the chain (the far end
/// sends first; each rank towards the root forwards once its part has
/// arrived, `up[0]` ending at the root), then back down from the root,
/// then the far end's copy out. Returns where it ends.
fn advance(
    tree: &TreeStream,
    channel: &mut ChainChannel,
    last_end: &mut Option<TaskRef>,
    chunk: Bytes,
    position: u64,
    arrived: Option<TaskRef>,
    graph: &mut dyn Builder<Path>,
) -> Option<TaskRef> {
    let wire = wire_bytes(chunk, tree.wire_factor);
    // A hop's first bytes ride on its latency, as many as its receiving
    // threads take in a pass.
    let cap = |receiver| cap_past_latency(tree.rates.send, wire, riding(tree.latency_bytes, receiver));
    let hops = channel.up.len();
    let position = position as usize;
    if position < hops {
        let hop = hops - 1 - position;
        let receiver = if hop == 0 { Receiver::Root } else { Receiver::Reducing };
        return Some(channel.up[hop].send(graph, wire, cap(receiver), arrived));
    }
    if let Some(pipe) = channel.down.get_mut(position - hops) {
        return Some(pipe.send(graph, wire, cap(Receiver::Broadcasting), arrived));
    }
    // The far end copies chunks out one after another.
    let rate = tree.rates.receive.expect("a receive position where the far end copies out");
    let after: Vec<TaskRef> = arrived.into_iter().chain(*last_end).collect();
    *last_end = Some(graph.delay(chunk / rate, &after));
    *last_end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_channels_run_the_chain_from_each_end() {
        assert_eq!(chain(4, 0), vec![0, 1, 2, 3]);
        assert_eq!(chain(4, 1), vec![3, 2, 1, 0]);
        assert_eq!(chain(2, 5), vec![1, 0]);
    }
}
