//! One-shot and two-shot allreduce, as the custom allreduce kernels of
//! inference engines run them: every GPU reads its peers' buffers directly.
//! One-shot reads all of every peer's buffer and reduces locally ((n-1)
//! buffers in per GPU, one barrier); two-shot reads a 1/n shard from every
//! peer, reduces it, then reads the other reduced shards (2(n-1)/n of the
//! buffer in per GPU, two barriers).

use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::units::{Bytes, Time};

pub struct DirectPlan {
    pub bytes: Bytes,
    /// `reads[r]`: the paths from each peer of rank r to r.
    pub reads: Vec<Vec<Path>>,
    /// Bytes on the wire per byte of data (1 / load efficiency).
    pub wire_factor: f64,
    pub barrier: Time,
    pub two_shot: bool,
}

/// One round of every rank reading `bytes` from each of its peers at once.
fn read_round(plan: &DirectPlan, graph: &mut TaskGraph<Path>, bytes: Bytes, after: TaskId) -> TaskId {
    let wire = crate::collective::ring::wire_bytes(bytes, plan.wire_factor);
    let reads: Vec<TaskId> = plan.reads.iter().flatten().map(|path| graph.transfer(path.clone(), wire, None, &[after])).collect();
    let done = graph.join(&reads);
    graph.delay(plan.barrier, &[done])
}

pub fn build(plan: &DirectPlan, graph: &mut TaskGraph<Path>, start: TaskId) -> TaskId {
    let n = plan.reads.len() as u64;
    if plan.two_shot {
        let shard = Bytes(plan.bytes.0.div_ceil(n));
        let scattered = read_round(plan, graph, shard, start);
        read_round(plan, graph, shard, scattered)
    } else {
        read_round(plan, graph, plan.bytes, start)
    }
}
