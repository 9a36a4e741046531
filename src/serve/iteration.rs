//! How long one iteration of a continuously batched engine takes. An
//! iteration is the tokens it pushes through the model (`PassTokens`: rows,
//! sequences, attended pairs, cached tokens), and its time is a pass of the
//! tensor-parallel forward replayed on the topology, every kernel on every
//! GPU and every collective simulated on the network, as `icsim llm`
//! replays a query. Iterations repeat by the thousand, so their time is
//! kept by a key that rounds each of those counts up to its six
//! leading binary digits (exact below 64; at most 1/32 more above): an
//! iteration is timed as the rounded one, and every iteration with the same
//! key is that one's time. KV blocks swapped to host memory and back
//! before an iteration move over each GPU's path to its socket's memory,
//! simulated as the storage workload's host copies are (by block counts
//! rounded the same way). Under a graph stack, as engines run, only
//! iterations of decodes alone replay the CUDA graph; the others (prompt
//! chunks, prompts beside decodes) may be launched by another caller, its
//! eager counterpart, each caller with its own kept times. A replayed
//! iteration runs the graph the engine captured for its batch (padded up to
//! the next captured size, its attention told the keys of capture) and waits
//! for the stack's launch of it. The source of
//! iteration times is a trait, so that other sources (a measured table, a
//! group of GPUs split in two) fit beside this one.

use std::collections::BTreeMap;

use crate::collective::CollectiveError;
use crate::storage::{Direction, StoragePath};
use crate::units::{Bytes, Time};
use crate::workload::forward::PassTokens;
use crate::workload::replay::Memo;
use crate::workload::storage::{self, Job, JobTarget};
use crate::workload::tp::{CollectiveCache, TensorParallel};

use super::ServeError;

/// Where an iteration's time went, on every GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IterationTime {
    pub total: Time,
    /// In collectives.
    pub comm: Time,
    /// Swapping KV blocks to host memory or back, before the forward.
    pub swap: Time,
}

/// A source of iteration times.
pub trait IterationTimes {
    /// The time of an iteration of `tokens`; `decodes_only`: whether every
    /// sequence in it decodes one token (what engines replay from CUDA
    /// graphs).
    fn time(&mut self, tokens: PassTokens, decodes_only: bool) -> Result<IterationTime, ServeError>;
    /// The time of copying `blocks` KV blocks out to host memory
    /// (`Direction::Write`) or back in (`Direction::Read`).
    fn swap(&mut self, blocks: u64, direction: Direction) -> Result<Time, ServeError>;
    /// Iterations timed by simulating, and by reusing an earlier one.
    fn counts(&self) -> (u64, u64);
}

/// Leading binary digits an iteration's counts keep.
const KEPT_BITS: u32 = 6;

/// `count` rounded up to its [`KEPT_BITS`] leading binary digits.
pub fn round_up(count: u64) -> u64 {
    let width = u64::BITS - count.leading_zeros();
    if width <= KEPT_BITS {
        return count;
    }
    let step = 1u64 << (width - KEPT_BITS);
    count.div_ceil(step).saturating_mul(step)
}

/// The iteration an iteration of `tokens` is timed as.
pub fn rounded(tokens: PassTokens) -> PassTokens {
    PassTokens {
        tp: tokens.tp,
        rows: round_up(tokens.rows),
        sequences: round_up(tokens.sequences),
        attended: round_up(tokens.attended),
        cached: round_up(tokens.cached),
        tail_pairs: round_up(tokens.tail_pairs),
        key_limit: round_up(tokens.key_limit),
    }
}

/// How an engine replays its iterations of decodes alone from CUDA graphs.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeGraphs {
    /// Batch sizes captured, rising: a batch replays the graph of the next
    /// size up, padded with sequences of no cached token; empty, or a batch
    /// past the largest: the batch as it is.
    pub sizes: Vec<u64>,
    /// Keys the graphs' attention was told at capture (FlashAttention's
    /// `max_seqlen_k`, fixed in the graph: the slot length the engine gives
    /// a sequence); None: each batch's longest sequence.
    pub keys: Option<u64>,
}

impl DecodeGraphs {
    /// Batches replayed as they are.
    pub const NONE: DecodeGraphs = DecodeGraphs { sizes: Vec::new(), keys: None };

    /// Graphs of the batch `sizes`, in any order, told `keys` keys.
    pub fn new(mut sizes: Vec<u64>, keys: Option<u64>) -> DecodeGraphs {
        sizes.sort_unstable();
        sizes.dedup();
        DecodeGraphs { sizes, keys }
    }

    /// The pass a batch of decodes `tokens` replays.
    pub fn replayed(&self, mut tokens: PassTokens) -> PassTokens {
        if let Some(&size) = self.sizes.iter().find(|&&size| size >= tokens.sequences) {
            (tokens.sequences..size).for_each(|_| tokens.add(1, 0));
        }
        tokens.key_limit = tokens.key_limit.max(self.keys.unwrap_or(0));
        tokens
    }
}

/// One caller's iterations: its forward, the collectives and layers it
/// simulated, and its kept times.
struct Caller<'a> {
    setup: &'a TensorParallel<'a>,
    cache: CollectiveCache<'a>,
    /// Layers already simulated, reused by later passes.
    memo: Memo,
    times: BTreeMap<PassTokens, IterationTime>,
}

impl<'a> Caller<'a> {
    fn new(setup: &'a TensorParallel<'a>, cache: CollectiveCache<'a>) -> Self {
        Caller { setup, cache, memo: Memo::default(), times: BTreeMap::new() }
    }

    fn simulate(&mut self, tokens: PassTokens) -> Result<IterationTime, CollectiveError> {
        let program = self.setup.program_of(tokens);
        let totals = self.setup.simulate_program(&program, &mut self.memo, &mut self.cache)?;
        let launch = self.setup.graph_launch(&program).map_err(CollectiveError::Model)?;
        Ok(IterationTime { total: launch + totals.total(), comm: totals.comm, swap: Time::ZERO })
    }
}

/// Iteration times from the tensor-parallel forward simulated on a
/// topology, each distinct rounded iteration once.
pub struct SimulatedIterations<'a> {
    /// Iterations of decodes alone, and every other one without `eager`.
    graphed: Caller<'a>,
    /// The iterations that are not decodes alone, where another caller
    /// launches them.
    eager: Option<Caller<'a>>,
    graphs: DecodeGraphs,
    reused: u64,
    /// One GPU's share of a KV block.
    block_bytes: Bytes,
    swaps: BTreeMap<(u64, Direction), Time>,
}

impl<'a> SimulatedIterations<'a> {
    /// Iterations of `setup`, whose GPUs each hold `block_bytes` of a KV block.
    pub fn new(setup: &'a TensorParallel<'a>, cache: CollectiveCache<'a>, block_bytes: Bytes) -> Self {
        SimulatedIterations {
            graphed: Caller::new(setup, cache),
            eager: None,
            graphs: DecodeGraphs::NONE,
            reused: 0,
            block_bytes,
            swaps: BTreeMap::new(),
        }
    }

    /// Iterations of decodes alone replay `graphs`.
    pub fn with_graphs(self, graphs: DecodeGraphs) -> Self {
        SimulatedIterations { graphs, ..self }
    }

    /// Iterations that are not decodes alone run as `eager` (the same
    /// forward on the same GPUs, another stack) runs them.
    pub fn with_eager(mut self, eager: &'a TensorParallel<'a>) -> Self {
        let replayer = eager.replayer();
        self.eager = Some(Caller::new(eager, CollectiveCache::new(replayer.topo, replayer.model)));
        self
    }

    /// The caller of an iteration.
    fn caller(&mut self, decodes_only: bool) -> &mut Caller<'a> {
        match &mut self.eager {
            Some(eager) if !decodes_only => eager,
            _ => &mut self.graphed,
        }
    }

    /// An iteration of exactly `tokens`, simulated (no rounding, no reuse of
    /// whole iterations): the reference the kept times are tested against.
    pub fn simulate(&mut self, tokens: PassTokens, decodes_only: bool) -> Result<IterationTime, CollectiveError> {
        self.caller(decodes_only).simulate(tokens)
    }
}

impl IterationTimes for SimulatedIterations<'_> {
    fn swap(&mut self, blocks: u64, direction: Direction) -> Result<Time, ServeError> {
        if blocks == 0 {
            return Ok(Time::ZERO);
        }
        let key = (round_up(blocks), direction);
        if let Some(&time) = self.swaps.get(&key) {
            return Ok(time);
        }
        let replayer = self.graphed.setup.replayer();
        // Every GPU of the group copies its share at once, through pinned
        // host memory.
        let job = Job {
            gpus: replayer.ranks.to_vec(),
            bytes: Bytes(key.0 * self.block_bytes.0),
            direction,
            path: StoragePath::Bounce,
            target: JobTarget::HostMemory,
        };
        let time = storage::simulate(replayer.topo, replayer.model, &job)?.time;
        self.swaps.insert(key, time);
        Ok(time)
    }

    fn time(&mut self, tokens: PassTokens, decodes_only: bool) -> Result<IterationTime, ServeError> {
        let tokens = if decodes_only { self.graphs.replayed(tokens) } else { tokens };
        let key = rounded(self.caller(decodes_only).setup.priced(tokens));
        if let Some(&time) = self.caller(decodes_only).times.get(&key) {
            self.reused += 1;
            return Ok(time);
        }
        let caller = self.caller(decodes_only);
        let time = caller.simulate(key)?;
        caller.times.insert(key, time);
        Ok(time)
    }

    fn counts(&self) -> (u64, u64) {
        let kept = self.graphed.times.len() + self.eager.as_ref().map_or(0, |eager| eager.times.len());
        (kept as u64, self.reused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hardware::HardwareModel;
    use crate::config::llm::LlmModel;
    use crate::stack::Stack;
    use crate::topology::{PresetOptions, preset};
    use crate::transport::Mode;
    use proptest::prelude::*;

    #[test]
    fn a_batch_replays_the_next_captured_size_padded_with_empty_sequences() {
        let graphs = DecodeGraphs::new(vec![32, 8, 16, 8], Some(2304));
        assert_eq!(graphs.sizes, [8, 16, 32], "sizes in any order, once each");
        let mut batch = PassTokens::empty(1);
        (0..9).for_each(|_| batch.add(1, 1000));
        let replayed = graphs.replayed(batch);
        assert_eq!((replayed.sequences, replayed.rows, replayed.cached), (16, 16, 9000), "seven empty sequences");
        assert_eq!((replayed.key_limit, replayed.tail_pairs), (2304, 1001), "told the slot length; its longest unchanged");
        let mut beyond = PassTokens::empty(1);
        (0..40).for_each(|_| beyond.add(1, 10));
        assert_eq!(graphs.replayed(beyond).sequences, 40, "past the largest graph: as it is");
        assert_eq!(DecodeGraphs::NONE.replayed(batch), batch);
    }

    proptest! {
        #[test]
        fn rounding_never_lowers_a_count_and_adds_at_most_a_32nd(count in 0u64..u64::MAX / 2) {
            let up = round_up(count);
            prop_assert!(up >= count);
            prop_assert!((up - count) as f64 <= count as f64 / 32.0, "{} -> {}", count, up);
            prop_assert_eq!(round_up(up), up, "a rounded count is a key");
        }
    }

    #[test]
    fn counts_below_64_are_exact_and_a_kept_time_is_the_rounded_iteration_simulated() {
        assert_eq!((0..64).map(round_up).collect::<Vec<_>>(), (0..64).collect::<Vec<_>>());
        assert_eq!((round_up(65), round_up(8191), round_up(8192)), (66, 8192, 8192));
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
        let llm = LlmModel::load("llama-3.1-8b").unwrap();
        let setup = TensorParallel::new(&topo, &model, &llm, 4, Mode::Nvswitch).unwrap();
        let eager = setup.clone().with_stack(Stack::Eager).unwrap();
        let mut times = SimulatedIterations::new(&setup, CollectiveCache::new(&topo, &model), Bytes(16 * 32768)).with_eager(&eager);
        let mut mixed = PassTokens::empty(4);
        mixed.add(700, 300);
        (0..90).for_each(|_| mixed.add(1, 1000));
        let kept = times.time(mixed, false).unwrap();
        assert_eq!(kept, times.simulate(rounded(mixed), false).unwrap());
        assert!(kept.total > times.simulate(mixed, false).unwrap().total, "rounded up: a little longer");
        let mut next = mixed;
        next.add(1, 5);
        assert_eq!(times.time(next, false).unwrap(), kept, "the same key");
        assert_eq!(times.counts(), (1, 1));
        assert!(kept.comm > Time::ZERO && kept.comm < kept.total);
        // The same tokens replayed from the graph: the graph's caller, kept
        // apart, and shorter than launched from the host.
        let graphed = times.time(mixed, true).unwrap();
        assert_eq!(graphed, SimulatedIterations::new(&setup, CollectiveCache::new(&topo, &model), Bytes(1)).time(mixed, false).unwrap());
        assert!(graphed.total < kept.total, "{graphed:?} {kept:?}");
        assert_eq!(times.counts(), (2, 1));
        // Swaps take time, more for more blocks, and are kept by count.
        let (some, more) = (times.swap(100, Direction::Write).unwrap(), times.swap(1000, Direction::Write).unwrap());
        assert!(Time::ZERO < some && some < more, "{some} {more}");
        assert_eq!(times.swap(999, Direction::Write).unwrap(), more, "rounded to the same count");
        assert_eq!(times.swap(0, Direction::Read).unwrap(), Time::ZERO);
    }
}
