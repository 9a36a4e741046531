//! NVLS allreduce as a stream of tasks: the reduction happens inside the
//! NVSwitch. Each GPU pushes its buffer to the switch once and gets the
//! reduced result back once; chunks are pipelined over NCCL's NVLS
//! channels. Besides its buffer a head GPU also sends and receives its own
//! 1/h share once (the multimem load-reduce and multicast store of NCCL's
//! NVLS kernels; h is the rank count up to NCCL's NVLS arity of 32), so
//! each way carries (1 + 1/h) of the buffer. A channel is a lane of the
//! stream and a chunk a batch.
//!
//! Every rank does the same with each chunk. When every GPU's port into
//! the switch is alike and nothing else crosses them, one rank stands for
//! all: its pushes finish when everyone's do (src/collective/symmetry.rs).

use crate::engine::{Builder, Generator, Stream, TaskRef};
use crate::network::Path;
use crate::units::{Bandwidth, Bytes};

/// One simulated channel: its data bytes and how many identical channels
/// it stands for.
#[derive(Debug, Clone, Copy)]
pub struct NvlsChannel {
    pub bytes: Bytes,
    pub copies: u32,
}

#[derive(Debug)]
pub struct NvlsStream {
    /// GPUs that reduce and multicast a share of each chunk (every rank up
    /// to NCCL's NVLS arity): a head sends and receives its 1/heads share
    /// once more, and the heads set the pace.
    pub heads: usize,
    pub channels: Vec<NvlsChannel>,
    /// Per simulated rank: its path into the switch (its latency includes
    /// the flag handshake of each chunk, in series with the data), and out
    /// of it.
    pub up: Vec<Path>,
    pub down: Vec<Path>,
    pub chunk: Bytes,
    pub channel_cap: Bandwidth,
}

/// NCCL's NVLS chunk (enqueue.cc, calcCollChunking): at most `max`, and
/// smaller while the call is short for its channels and heads.
pub fn chunk(max: Bytes, bytes: Bytes, channels: usize, heads: usize) -> Bytes {
    let concurrent = (channels.max(1) * heads.max(1)) as u64;
    let mut chunk = max.0.max(1);
    for (depth, floor) in [(64, 65_536), (8, 32_768), (2, 16_384)] {
        if bytes.0 < depth * concurrent * chunk && chunk > floor {
            chunk = floor;
        }
    }
    Bytes(chunk)
}

impl Stream<Path> for NvlsStream {
    fn generator(&self) -> Box<dyn Generator<Path> + '_> {
        let simulated = self.up.len();
        let lanes = self
            .channels
            .iter()
            .map(|_| ChannelRun { chunks_sent: 0, last_up: vec![None; simulated], last_down: vec![None; simulated], pushed: Vec::new() })
            .collect();
        Box::new(NvlsRun { nvls: self, lanes })
    }
}

struct ChannelRun {
    chunks_sent: u64,
    /// Per simulated rank: its last push and its last pull.
    last_up: Vec<Option<TaskRef>>,
    last_down: Vec<Option<TaskRef>>,
    /// Scratch: the pushes of the chunk being added.
    pushed: Vec<TaskRef>,
}

struct NvlsRun<'s> {
    nvls: &'s NvlsStream,
    lanes: Vec<ChannelRun>,
}

impl Generator<Path> for NvlsRun<'_> {
    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// One chunk: every rank pushes it, the switch reduces it, every rank
    /// pulls the result.
    fn next_batch(&mut self, lane: usize, graph: &mut dyn Builder<Path>) -> bool {
        let nvls = self.nvls;
        let channel = nvls.channels[lane];
        let run = &mut self.lanes[lane];
        let chunks = channel.bytes.0.div_ceil(nvls.chunk.0).max(1);
        if run.chunks_sent == chunks {
            return false;
        }
        let chunk = channel.bytes.chunk_part(Bytes(nvls.chunk.0.max(1)), run.chunks_sent);
        run.chunks_sent += 1;
        let wire = Bytes(chunk.0 + chunk.0.div_ceil(nvls.heads as u64));
        let cap = Some(nvls.channel_cap);
        run.pushed.clear();
        for (up, last) in nvls.up.iter().zip(run.last_up.iter_mut()) {
            let after: &[TaskRef] = match last {
                Some(task) => std::slice::from_ref(task),
                None => &[],
            };
            let task = graph.transfer(up.clone(), wire, cap, channel.copies, after);
            *last = Some(task);
            run.pushed.push(task);
        }
        // One rank standing for all: the switch reduces when its push is in.
        let reduced = if let [pushed] = run.pushed[..] { pushed } else { graph.join(&run.pushed) };
        for (down, last) in nvls.down.iter().zip(run.last_down.iter_mut()) {
            let mut after = vec![reduced];
            after.extend(*last);
            *last = Some(graph.transfer(down.clone(), wire, cap, channel.copies, &after));
        }
        true
    }
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
