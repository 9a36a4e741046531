//! Tree allreduce inside one node as a stream of tasks: NCCL's intra-node
//! tree is a chain (src/graph/connect.cc), rank 0 at one end; half of the
//! channels run it from one end and half from the other. A chunk is reduced
//! up the chain to its root, then broadcast back down, chunks pipelined; a
//! thread block's reduce and broadcast halves work at once. The far end's
//! receive copies each chunk out after it has arrived, except through host
//! memory, where that copy is the last hop's read. A channel is a lane of
//! the stream and a batch a wave of the pipeline (every chunk on its way
//! one position further): tasks exist only for the chunks on their way,
//! whatever the size.

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
        let lanes = self
            .channels
            .iter()
            .map(|c| {
                let chunks = c.bytes.0.div_ceil(self.chunk.0).max(1);
                // The far end's receive of each chunk is a position of its
                // own where it takes time.
                let receives = self.rates.receive.is_some() && c.bytes.0 > 0;
                let positions = (c.up.len() + c.down.len() + usize::from(receives)) as u64;
                ChainRun { channel: c.clone(), chunks, positions, wave: 0, in_flight: VecDeque::new(), last_end: None }
            })
            .collect();
        Box::new(TreeRun { tree: self, lanes })
    }
}

/// One channel's chunks on their way along the chain. A chunk passes
/// `positions` in turn (its sends up to the root, those back down, and the
/// far end's receive), each once it has left the one before and once the
/// chunk before it has left this one: so a batch is a wave of positions,
/// chunk k at position `wave - k`, and only the chunks in the pipeline
/// have state.
struct ChainRun {
    channel: ChainChannel,
    chunks: u64,
    positions: u64,
    /// The next wave to add.
    wave: u64,
    /// Each chunk in the pipeline, oldest first: where its last position
    /// ended (none before its first).
    in_flight: VecDeque<Option<TaskRef>>,
    /// The far end's last receive.
    last_end: Option<TaskRef>,
}

struct TreeRun<'s> {
    tree: &'s TreeStream,
    lanes: Vec<ChainRun>,
}

impl Generator<Path> for TreeRun<'_> {
    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// One wave: every chunk in the pipeline one position further. Each
    /// chunk's tasks are a group of the lane, so ties break as in a graph
    /// that holds the chunks one after another.
    fn next_batch(&mut self, lane: usize, graph: &mut dyn Builder<Path>) -> bool {
        let tree = self.tree;
        let run = &mut self.lanes[lane];
        let wave = run.wave;
        if wave == run.chunks + run.positions - 1 {
            return false;
        }
        run.wave += 1;
        if wave < run.chunks {
            run.in_flight.push_back(None);
        }
        let oldest = (wave + 1).saturating_sub(run.positions);
        for (chunk_index, arrived) in (oldest..).zip(run.in_flight.iter_mut()) {
            graph.group(chunk_index);
            let chunk = run.channel.bytes.chunk_part(Bytes(tree.chunk.0.max(1)), chunk_index);
            *arrived = advance(tree, &mut run.channel, &mut run.last_end, chunk, wave - chunk_index, *arrived, graph);
        }
        if wave + 1 >= run.positions {
            run.in_flight.pop_front();
        }
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
