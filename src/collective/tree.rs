//! Tree allreduce as a task graph: NCCL's double binary tree. Two
//! complementary binary trees share the work (each rank is an inner node in
//! at most one of them); a chunk is reduced up a tree to its root, then
//! broadcast back down, chunks pipelined.

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::transport::Pipe;
use crate::units::{Bandwidth, Bytes};

/// The parent of every rank position in one of the two trees (None: root).
pub fn parents(n: usize, tree: usize) -> Vec<Option<usize>> {
    // Heap order over the positions, read forwards for tree 0 and backwards
    // for tree 1: the leaves of one are the inner nodes of the other.
    let position = |order: usize| if tree == 0 { order } else { n - 1 - order };
    let mut parent = vec![None; n];
    for order in 1..n {
        parent[position(order)] = Some(position((order - 1) / 2));
    }
    parent
}

/// A tree's connections for one channel: `up[i]` from rank position i to
/// its parent, `down[i]` from its parent to i.
pub struct TreePipes {
    pub parent: Vec<Option<usize>>,
    pub up: Vec<Option<Pipe>>,
    pub down: Vec<Option<Pipe>>,
}

pub struct TreePlan<'p> {
    pub bytes: Bytes,
    pub channels: &'p mut [TreePipes],
    pub chunk: Bytes,
    pub wire_factor: f64,
    pub channel_cap: Bandwidth,
}

/// Adds the tree allreduce; returns the tasks that end it.
pub fn build(plan: &mut TreePlan<'_>, graph: &mut TaskGraph<Path>, start: TaskId) -> Vec<TaskId> {
    let channels = plan.channels.len() as u64;
    let mut ends = Vec::new();
    for (channel, channel_bytes) in plan.bytes.split_even(channels).enumerate() {
        let tree = &mut plan.channels[channel];
        let n = tree.parent.len();
        let children: Vec<Vec<usize>> = (0..n).map(|p| (0..n).filter(|&c| tree.parent[c] == Some(p)).collect()).collect();
        // Children before parents: deepest positions first.
        let depth = |mut i: usize| {
            let mut d = 0;
            while let Some(p) = tree.parent[i] {
                i = p;
                d += 1;
            }
            d
        };
        let mut upward: Vec<usize> = (0..n).collect();
        upward.sort_by_key(|&i| std::cmp::Reverse(depth(i)));
        let chunks = channel_bytes.0.div_ceil(plan.chunk.0).max(1);
        for chunk in channel_bytes.split_even(chunks) {
            let wire = crate::collective::ring::wire_bytes(chunk, plan.wire_factor);
            // Reduce: a rank sends up once every child's part has arrived.
            let mut reduced: Vec<Option<TaskId>> = vec![None; n];
            for &i in &upward {
                let mut ready = vec![start];
                ready.extend(children[i].iter().filter_map(|&c| reduced[c]));
                match tree.up[i].as_mut() {
                    Some(pipe) => reduced[i] = Some(pipe.send(graph, wire, Some(plan.channel_cap), &ready)),
                    None => reduced[i] = Some(graph.join(&ready)),
                }
            }
            // Broadcast: the root's result flows back down.
            let mut has_result: Vec<Option<TaskId>> = vec![None; n];
            for &i in upward.iter().rev() {
                let arrived = match (tree.parent[i], tree.down[i].as_mut()) {
                    (Some(p), Some(pipe)) => {
                        let ready = has_result[p].expect("parents are visited before children");
                        pipe.send(graph, wire, Some(plan.channel_cap), &[ready])
                    }
                    _ => reduced[i].expect("every rank reduced"),
                };
                has_result[i] = Some(arrived);
            }
            ends.extend(has_result.into_iter().flatten());
        }
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_trees_have_one_root_each_and_swap_leaves_for_inner_nodes() {
        for n in 2..=16 {
            let (a, b) = (parents(n, 0), parents(n, 1));
            assert_eq!(a.iter().filter(|p| p.is_none()).count(), 1);
            assert_eq!(b.iter().filter(|p| p.is_none()).count(), 1);
            let inner = |tree: &[Option<usize>], i: usize| tree.contains(&Some(i));
            let inner_in_both = (0..n).filter(|&i| inner(&a, i) && inner(&b, i)).count();
            assert!(inner_in_both <= 1, "n={n}: {inner_in_both} ranks are inner nodes of both trees");
        }
    }
}
