//! NVLS allreduce as a task graph: the reduction happens inside the NVSwitch.
//! Each GPU pushes its buffer to the switch once and gets the reduced result
//! back once; chunks are pipelined over NCCL's NVLS channels. Besides its
//! buffer a GPU also sends and receives its own 1/n shard once (the
//! multimem load-reduce and multicast store of NCCL's NVLS kernels), so
//! each way carries (1 + 1/n) of the buffer.

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::units::{Bandwidth, Bytes};

pub struct NvlsPlan {
    /// Data bytes each channel handles.
    pub channel_bytes: Vec<Bytes>,
    /// Per rank: its link into the switch, and out of it.
    pub up: Vec<Path>,
    pub down: Vec<Path>,
    pub chunk: Bytes,
    pub channel_cap: Bandwidth,
}

/// NCCL's NVLS chunk (enqueue.cc, calcCollChunking): at most `max`, and
/// smaller while the call is short for its channels and heads.
pub fn chunk(max: Bytes, bytes: Bytes, channels: usize, ranks: usize) -> Bytes {
    let concurrent = (channels.max(1) * ranks.max(1)) as u64;
    let mut chunk = max.0.max(1);
    for (depth, floor) in [(64, 65_536), (8, 32_768), (2, 16_384)] {
        if bytes.0 < depth * concurrent * chunk && chunk > floor {
            chunk = floor;
        }
    }
    Bytes(chunk)
}

pub fn build(plan: &NvlsPlan, graph: &mut TaskGraph<Path>, start: TaskId) -> Vec<TaskId> {
    let n = plan.up.len();
    let mut ends = Vec::new();
    for &channel_bytes in &plan.channel_bytes {
        let mut last_up: Vec<TaskId> = vec![start; n];
        let mut last_down: Vec<Option<TaskId>> = vec![None; n];
        let chunks = channel_bytes.0.div_ceil(plan.chunk.0).max(1);
        for chunk in channel_bytes.split_even(chunks) {
            let wire = Bytes(chunk.0 + chunk.0.div_ceil(n as u64));
            let pushed: Vec<TaskId> = (0..n)
                .map(|r| {
                    let task = graph.transfer(plan.up[r].clone(), wire, Some(plan.channel_cap), &[last_up[r]]);
                    last_up[r] = task;
                    task
                })
                .collect();
            let reduced = graph.join(&pushed);
            for (down, last) in plan.down.iter().zip(last_down.iter_mut()) {
                let mut after = vec![reduced];
                after.extend(*last);
                *last = Some(graph.transfer(down.clone(), wire, Some(plan.channel_cap), &after));
            }
        }
        ends.extend(last_down.into_iter().flatten());
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_shrink_for_short_calls() {
        let max = Bytes::kib(128);
        assert_eq!(chunk(max, Bytes::gib(1), 16, 8), max);
        assert_eq!(chunk(max, Bytes::mib(64), 16, 8), Bytes::kib(64));
        assert_eq!(chunk(max, Bytes::mib(4), 16, 8), Bytes::kib(16));
    }
}
