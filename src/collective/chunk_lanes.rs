//! A chain's chunks as lanes of a stream, for the tree allreduce's chain
//! (tree.rs) and the broadcast's (ring.rs): each chunk of each channel is a
//! lane, a batch is the chunk's next position along its way, and a chunk
//! begins once the chunk before it has left its first position's sender.
//! So tasks exist only for the positions chunks are at or about to take,
//! however far ahead the first chunks ran while the chain was empty. Owns
//! the lanes' bookkeeping; what a chunk does at a position is the caller's.

use std::collections::VecDeque;

use crate::engine::{Builder, Generator, TaskRef};
use crate::network::Path;

/// One channel's chain: what its chunks do at each position of their way.
pub trait ChainWay {
    /// Adds chunk `index` at `position` of its way, once it has `arrived`
    /// from the position before (None at its first), and returns where it
    /// ends. A chunk takes a position only after the chunk before it has.
    fn advance(&mut self, index: u64, position: u64, arrived: Option<TaskRef>, graph: &mut dyn Builder<Path>) -> TaskRef;
}

/// One channel's chunks on their way: each passes `positions` in turn, and
/// only the chunks in the pipeline have state.
struct ChannelChunks<W> {
    way: W,
    positions: u64,
    /// The chunk at the front of `in_flight`.
    oldest: u64,
    /// Each chunk that has begun and not yet passed every position, oldest
    /// first.
    in_flight: VecDeque<ChunkRun>,
}

/// A chunk on its way: the next position it takes (past the last once it
/// is done) and where its last one ended (none before its first).
struct ChunkRun {
    position: u64,
    arrived: Option<TaskRef>,
}

/// A lane for each chunk of each channel, channel by channel, so that lanes
/// stand in the order a graph holding the chunks one after another would.
pub struct ChunkLanes<W> {
    channels: Vec<ChannelChunks<W>>,
    /// Each channel's first lane, then the number of lanes.
    first_lane: Vec<usize>,
}

impl<W: ChainWay> ChunkLanes<W> {
    /// Lanes for `channels`: each one's way, its number of chunks (at least
    /// one) and the positions each of its chunks passes.
    pub fn new(channels: impl IntoIterator<Item = (W, u64, u64)>) -> ChunkLanes<W> {
        let mut first_lane = vec![0];
        let channels = channels
            .into_iter()
            .map(|(way, chunks, positions)| {
                first_lane.push(first_lane.last().copied().unwrap_or(0) + chunks as usize);
                ChannelChunks { way, positions, oldest: 0, in_flight: VecDeque::new() }
            })
            .collect();
        ChunkLanes { channels, first_lane }
    }
}

impl<W: ChainWay> Generator<Path> for ChunkLanes<W> {
    fn lanes(&self) -> usize {
        self.first_lane.last().copied().unwrap_or(0)
    }

    fn follows(&self, lane: usize) -> bool {
        self.first_lane.binary_search(&lane).is_err()
    }

    /// The chunk of `lane` one position further.
    fn next_batch(&mut self, lane: usize, graph: &mut dyn Builder<Path>) -> bool {
        let channel = self.first_lane.partition_point(|&first| first <= lane) - 1;
        let index = (lane - self.first_lane[channel]) as u64;
        let run = &mut self.channels[channel];
        let slot = (index - run.oldest) as usize;
        if slot == run.in_flight.len() {
            run.in_flight.push_back(ChunkRun { position: 0, arrived: None });
        }
        let position = run.in_flight[slot].position;
        if position == run.positions {
            // Done. A chunk may finish before the one ahead of it (a
            // broadcast's copy out of a shorter last slice): the chunks
            // are dropped once every one ahead of them is done.
            run.in_flight[slot].position += 1;
            while run.in_flight.front().is_some_and(|chunk| chunk.position > run.positions) {
                run.in_flight.pop_front();
                run.oldest += 1;
            }
            return false;
        }
        let arrived = run.in_flight[slot].arrived;
        let ended = run.way.advance(index, position, arrived, graph);
        run.in_flight[slot] = ChunkRun { position: position + 1, arrived: Some(ended) };
        true
    }
}
