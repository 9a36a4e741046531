//! One-shot and two-shot allreduce, as the custom allreduce kernels of
//! inference engines run them: every GPU reads its peers' buffers directly.
//! One-shot reads all of every peer's buffer and reduces locally ((n-1)
//! buffers in per GPU, one barrier); two-shot reads a 1/n shard from every
//! peer, reduces it, then reads the other reduced shards (2(n-1)/n of the
//! buffer in per GPU, two barriers). A stream of one lane; a round of reads
//! and its barrier is a batch.

use crate::engine::{Builder, Generator, Stream, TaskRef};
use crate::network::Path;
use crate::units::{Bytes, Time};

#[derive(Debug)]
pub struct DirectStream {
    pub bytes: Bytes,
    /// `reads[r]`: the paths from each peer of rank r to r.
    pub reads: Vec<Vec<Path>>,
    /// Bytes on the wire per byte of data (1 / load efficiency).
    pub wire_factor: f64,
    pub barrier: Time,
    pub two_shot: bool,
}

impl Stream<Path> for DirectStream {
    fn generator(&self) -> Box<dyn Generator<Path> + '_> {
        Box::new(DirectRun { direct: self, rounds: 0, barrier: None })
    }
}

struct DirectRun<'s> {
    direct: &'s DirectStream,
    rounds: usize,
    /// The last round's barrier.
    barrier: Option<TaskRef>,
}

impl Generator<Path> for DirectRun<'_> {
    fn lanes(&self) -> usize {
        1
    }

    /// One round of every rank reading from each of its peers at once, and
    /// the barrier after it.
    fn next_batch(&mut self, _: usize, graph: &mut dyn Builder<Path>) -> bool {
        let direct = self.direct;
        let (rounds, bytes) =
            if direct.two_shot { (2, Bytes(direct.bytes.0.div_ceil(direct.reads.len() as u64))) } else { (1, direct.bytes) };
        if self.rounds == rounds {
            return false;
        }
        self.rounds += 1;
        let wire = crate::collective::ring::wire_bytes(bytes, direct.wire_factor);
        let after: Vec<TaskRef> = self.barrier.into_iter().collect();
        let reads: Vec<TaskRef> = direct.reads.iter().flatten().map(|path| graph.transfer(path.clone(), wire, None, 1, &after)).collect();
        let done = graph.join(&reads);
        self.barrier = Some(graph.delay(direct.barrier, &[done]));
        true
    }
}
