//! NVLS allreduce as a task graph: the reduction happens inside the NVSwitch.
//! Each GPU pushes its buffer to the switch once and gets the reduced result
//! back once; chunks are pipelined over channels. Besides its buffer a GPU
//! also sends and receives its own 1/n shard once (the multimem load-reduce
//! and multicast store of NCCL's NVLS kernels), so each way carries
//! (1 + 1/n) of the buffer.

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::units::{Bandwidth, Bytes};

pub struct NvlsPlan {
    pub bytes: Bytes,
    /// Per rank: its link into the switch, and out of it.
    pub up: Vec<Path>,
    pub down: Vec<Path>,
    pub channels: u32,
    pub chunk: Bytes,
    pub channel_cap: Bandwidth,
}

pub fn build(plan: &NvlsPlan, graph: &mut TaskGraph<Path>, start: TaskId) -> Vec<TaskId> {
    let n = plan.up.len();
    let mut ends = Vec::new();
    for channel_bytes in plan.bytes.split_even(u64::from(plan.channels)) {
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
