//! Tree allreduce inside one node as a task graph: NCCL's intra-node tree
//! is a chain (src/graph/connect.cc), rank 0 at one end; half of the
//! channels run it from one end and half from the other. A chunk is reduced
//! up the chain to its root, then broadcast back down, chunks pipelined; a
//! thread block's reduce and broadcast halves work at once.

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::transport::Pipe;
use crate::units::{Bandwidth, Bytes};

use super::ring::wire_bytes;

/// The chain's order for one channel: rank positions from the root to the
/// far end. Even channels start at rank 0, odd ones at the last rank.
pub fn chain(ranks: usize, channel: usize) -> Vec<usize> {
    if channel.is_multiple_of(2) { (0..ranks).collect() } else { (0..ranks).rev().collect() }
}

/// A chain's connections for one channel, along `order`: `up[k]` from
/// order[k+1] to order[k] (towards the root), `down[k]` from order[k] to
/// order[k+1].
pub struct ChainPipes {
    pub up: Vec<Pipe>,
    pub down: Vec<Pipe>,
}

/// The rates a chain's steps move at, per channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainRates {
    /// Wire rate of every send, up and down: the slowest rank's thread
    /// block spreads its primitives' time over its sends.
    pub send: Bandwidth,
    /// Data rate of the far end's final receive.
    pub receive: Bandwidth,
}

pub struct TreePlan<'p> {
    /// Data bytes each channel handles.
    pub channel_bytes: Vec<Bytes>,
    pub channels: &'p mut [ChainPipes],
    pub chunk: Bytes,
    pub wire_factor: f64,
    pub rates: ChainRates,
}

/// Adds the chain allreduce; returns the tasks that end it.
pub fn build(plan: &mut TreePlan<'_>, graph: &mut TaskGraph<Path>, start: TaskId) -> Vec<TaskId> {
    let mut ends = Vec::new();
    for (channel, &channel_bytes) in plan.channel_bytes.iter().enumerate() {
        let pipes = &mut plan.channels[channel];
        let links = pipes.up.len();
        let chunks = channel_bytes.0.div_ceil(plan.chunk.0).max(1);
        let mut last_end = None;
        for chunk in channel_bytes.split_even(chunks) {
            let wire = wire_bytes(chunk, plan.wire_factor);
            // Reduce: the far end sends first; each rank towards the root
            // forwards once its part has arrived.
            let mut arrived = start;
            for k in (0..links).rev() {
                arrived = pipes.up[k].send(graph, wire, Some(plan.rates.send), &[arrived]);
            }
            // Broadcast: the root's result flows back down.
            for k in 0..links {
                arrived = pipes.down[k].send(graph, wire, Some(plan.rates.send), &[arrived]);
            }
            let mut after = vec![arrived];
            after.extend(last_end);
            let received = if chunk.0 == 0 { arrived } else { graph.delay(chunk / plan.rates.receive, &after) };
            last_end = Some(received);
        }
        ends.extend(last_end);
    }
    ends
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
