//! Tree allreduce inside one node as a stream of tasks: NCCL's intra-node
//! tree is a chain (src/graph/connect.cc), rank 0 at one end; half of the
//! channels run it from one end and half from the other. A chunk is reduced
//! up the chain to its root, then broadcast back down, chunks pipelined; a
//! thread block's reduce and broadcast halves work at once. The far end's
//! receive copies each chunk out after it has arrived, except through host
//! memory, where that copy is the last hop's read. A channel's chunk is a
//! lane of the stream and a batch its next position: tasks exist only for
//! the chunks on their way, whatever the size.

use crate::engine::{Builder, Generator, Stream, TaskRef};
use crate::network::Path;
use crate::transport::Pipe;
use crate::units::{Bandwidth, Bytes};

use super::chunk_lanes::{ChainWay, ChunkLanes};
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
        let channels = self.channels.iter().map(|c| {
            let chunks = c.bytes.0.div_ceil(self.chunk.0).max(1);
            // The far end's receive of each chunk is a position of its
            // own where it takes time.
            let receives = self.rates.receive.is_some() && c.bytes.0 > 0;
            let positions = (c.up.len() + c.down.len() + usize::from(receives)) as u64;
            (TreeWay { tree: self, channel: c.clone(), last_end: None }, chunks, positions)
        });
        Box::new(ChunkLanes::new(channels))
    }
}

/// One channel's chain: a chunk passes its sends up to the root, those back
/// down, and the far end's receive, each once it has left the one before
/// and once the chunk before it has left this one (src/collective/chunk_lanes.rs).
struct TreeWay<'s> {
    tree: &'s TreeStream,
    channel: ChainChannel,
    /// The far end's last receive.
    last_end: Option<TaskRef>,
}

impl ChainWay for TreeWay<'_> {
    /// Adds the chunk at `position` of its way: a send up the chain (the
    /// far end sends first; each rank towards the root forwards once its
    /// part has arrived, `up[0]` ending at the root), then back down from
    /// the root, then the far end's copy out. Returns where it ends.
    fn advance(&mut self, index: u64, position: u64, arrived: Option<TaskRef>, graph: &mut dyn Builder<Path>) -> TaskRef {
        let tree = self.tree;
        let chunk = self.channel.bytes.chunk_part(Bytes(tree.chunk.0.max(1)), index);
        let wire = wire_bytes(chunk, tree.wire_factor);
        // A hop's first bytes ride on its latency, as many as its receiving
        // threads take in a pass.
        let cap = |receiver| cap_past_latency(tree.rates.send, wire, riding(tree.latency_bytes, receiver));
        let hops = self.channel.up.len();
        let position = position as usize;
        if position < hops {
            let hop = hops - 1 - position;
            let receiver = if hop == 0 { Receiver::Root } else { Receiver::Reducing };
            return self.channel.up[hop].send(graph, wire, cap(receiver), arrived);
        }
        if let Some(pipe) = self.channel.down.get_mut(position - hops) {
            return pipe.send(graph, wire, cap(Receiver::Broadcasting), arrived);
        }
        // The far end copies chunks out one after another.
        let rate = tree.rates.receive.expect("a receive position where the far end copies out");
        let after: Vec<TaskRef> = arrived.into_iter().chain(self.last_end).collect();
        let end = graph.delay(chunk / rate, &after);
        self.last_end = Some(end);
        end
    }
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
