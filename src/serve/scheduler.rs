//! A continuously batching scheduler as vLLM's V1 engine runs one: each
//! iteration has a budget of tokens (`max_num_batched_tokens`) shared by
//! the running sequences first (a decode's one token, or the next chunk of
//! a prompt) and then, when nothing was preempted, by waiting requests in
//! arrival order (a prompt may be cut into chunks), up to `max_num_seqs`
//! running at once. Every sequence holds KV-cache blocks of `block_size`
//! tokens for the tokens it has computed; when a running sequence needs a
//! block and none is free, the latest to have started is preempted: its
//! blocks freed and all its tokens computed again when it runs next
//! (recompute), or its blocks copied out to host memory and back in when
//! it runs next (swap, while the host's swap space has room; recompute
//! when it has not). Owns the queues and the blocks; knows nothing of time
//! or hardware.

use std::collections::VecDeque;

use crate::workload::forward::PassTokens;

/// What a preempted sequence's KV cache becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preemption {
    /// Dropped, computed again.
    Recompute,
    /// Copied to host memory holding at most `host_blocks` blocks.
    Swap { host_blocks: u64 },
}

/// What bounds the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_num_seqs: u64,
    pub max_num_batched_tokens: u64,
    pub block_size: u64,
    /// KV-cache blocks the GPUs hold (each GPU its share of every block).
    pub kv_blocks: u64,
    pub preemption: Preemption,
}

impl Limits {
    /// Blocks that hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.block_size)
    }

    /// Blocks a request of `prompt` and `output` tokens holds at its
    /// largest: every token but the last generated one is in the cache.
    pub fn peak_blocks(&self, prompt: u64, output: u64) -> u64 {
        self.blocks_for(prompt + output - 1)
    }
}

/// A request in the scheduler.
#[derive(Debug, Clone)]
struct Sequence {
    request: usize,
    /// The prompt and the tokens generated so far.
    tokens: u64,
    /// Tokens whose keys and values are in the cache.
    computed: u64,
    /// Tokens still to generate.
    remaining: u64,
    blocks: u64,
    /// Whether its blocks are in host memory.
    swapped: bool,
}

impl Sequence {
    /// Tokens it computes next, within `budget`: its next prompt chunk (or
    /// the whole prompt again after a recompute), or one decode step.
    fn next_tokens(&self, budget: u64) -> u64 {
        (self.tokens - self.computed).min(budget)
    }

    /// Its part of an iteration computing `new_tokens` of it.
    fn scheduled(&self, new_tokens: u64) -> Scheduled {
        Scheduled { request: self.request, new_tokens, context: self.computed, samples: self.computed + new_tokens == self.tokens }
    }
}

/// One sequence's part of an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    pub request: usize,
    /// Tokens the iteration computes for it.
    pub new_tokens: u64,
    /// Tokens of it already in the cache.
    pub context: u64,
    /// Whether its last known token is among them: it samples a token.
    pub samples: bool,
}

impl Scheduled {
    /// Whether it decodes: one new token after cached ones.
    pub fn decodes(&self) -> bool {
        self.new_tokens == 1 && self.context > 0
    }
}

/// What the next iteration runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Iteration {
    pub scheduled: Vec<Scheduled>,
    /// Requests preempted to make room, in order.
    pub preempted: Vec<usize>,
    /// Tokens the preempted had in the cache: computed again later.
    pub discarded: u64,
    /// Blocks copied to host memory before the iteration runs, and back.
    pub swapped_out: u64,
    pub swapped_in: u64,
}

impl Iteration {
    /// The tokens the iteration pushes through the model at TP=`tp`.
    pub fn tokens(&self, tp: u64) -> PassTokens {
        let mut tokens = PassTokens::empty(tp);
        for s in &self.scheduled {
            tokens.add(s.new_tokens, s.context);
        }
        tokens
    }

    /// Tokens computed for sequences still in their prompt (or computing
    /// it again), and sequences decoding one token.
    pub fn prefill_and_decodes(&self) -> (u64, u64) {
        let decodes = self.scheduled.iter().filter(|s| s.decodes()).count() as u64;
        let total: u64 = self.scheduled.iter().map(|s| s.new_tokens).sum();
        (total - decodes, decodes)
    }

    /// Whether every sequence scheduled decodes one token: the iterations
    /// engines replay from CUDA graphs.
    pub fn decodes_only(&self) -> bool {
        self.scheduled.iter().all(Scheduled::decodes)
    }
}

/// A token an iteration generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampled {
    pub request: usize,
    /// Whether it was the request's last.
    pub finished: bool,
}

/// The queues and the KV-cache blocks.
#[derive(Debug, Clone)]
pub struct Scheduler {
    limits: Limits,
    /// Arrived, not running: preempted ones first, then by arrival.
    waiting: VecDeque<Sequence>,
    /// In the order they started running.
    running: Vec<Sequence>,
    free_blocks: u64,
    /// Blocks of swapped sequences in host memory.
    host_blocks: u64,
}

impl Scheduler {
    pub fn new(limits: Limits) -> Scheduler {
        Scheduler { limits, waiting: VecDeque::new(), running: Vec::new(), free_blocks: limits.kv_blocks, host_blocks: 0 }
    }

    /// Queues a request that has arrived.
    pub fn arrive(&mut self, request: usize, prompt: u64, output: u64) {
        assert!(prompt >= 1 && output >= 1, "a request has a prompt and an output");
        self.waiting.push_back(Sequence { request, tokens: prompt, computed: 0, remaining: output, blocks: 0, swapped: false });
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn used_blocks(&self) -> u64 {
        self.limits.kv_blocks - self.free_blocks
    }

    /// Whether `blocks` free blocks can be taken now.
    pub fn has_room(&self, blocks: u64) -> bool {
        blocks <= self.free_blocks
    }

    /// Takes `blocks` free blocks for a cache that is not a running
    /// sequence's (one being moved in from another group, or out to it).
    pub fn reserve(&mut self, blocks: u64) {
        assert!(blocks <= self.free_blocks, "a reservation takes free blocks: {blocks} of {}", self.free_blocks);
        self.free_blocks -= blocks;
    }

    /// Gives back `blocks` reserved blocks.
    pub fn release(&mut self, blocks: u64) {
        assert!(self.free_blocks + blocks <= self.limits.kv_blocks, "only reserved blocks are released");
        self.free_blocks += blocks;
    }

    /// Starts running a request whose first `computed` of `tokens` tokens
    /// are in the cache already, in `blocks` reserved blocks: its cache was
    /// computed elsewhere and moved in. It runs from the next iteration on,
    /// as the latest started.
    pub fn resume(&mut self, request: usize, tokens: u64, computed: u64, remaining: u64, blocks: u64) {
        assert!(computed < tokens && remaining >= 1, "a resumed request has a token to compute and one to generate");
        assert!(blocks <= self.limits.blocks_for(computed + 1), "its blocks hold its cache and its next token");
        self.running.push(Sequence { request, tokens, computed, remaining, blocks, swapped: false });
    }

    /// Blocks swapped out to host memory now.
    pub fn host_blocks(&self) -> u64 {
        self.host_blocks
    }

    /// Chooses the next iteration's work and takes the blocks it needs.
    pub fn schedule(&mut self) -> Iteration {
        let mut budget = self.limits.max_num_batched_tokens;
        let mut iteration = Iteration::default();
        let mut index = 0;
        while index < self.running.len() && budget > 0 {
            let sequence = &self.running[index];
            let new_tokens = sequence.next_tokens(budget);
            let needed = self.limits.blocks_for(sequence.computed + new_tokens) - sequence.blocks;
            // Preempt the latest started until the blocks are free, or the
            // sequence itself was the latest.
            while needed > self.free_blocks && index < self.running.len() {
                let victim = self.running.pop().expect("index is inside running");
                iteration.preempted.push(victim.request);
                self.free_blocks += victim.blocks;
                let swap_room = match self.limits.preemption {
                    Preemption::Swap { host_blocks } => host_blocks - self.host_blocks,
                    Preemption::Recompute => 0,
                };
                if victim.blocks <= swap_room {
                    iteration.swapped_out += victim.blocks;
                    self.host_blocks += victim.blocks;
                    self.waiting.push_front(Sequence { swapped: true, ..victim });
                } else {
                    iteration.discarded += victim.computed;
                    self.waiting.push_front(Sequence { computed: 0, blocks: 0, ..victim });
                }
            }
            if index == self.running.len() {
                break;
            }
            let sequence = &mut self.running[index];
            self.free_blocks -= needed;
            sequence.blocks += needed;
            iteration.scheduled.push(sequence.scheduled(new_tokens));
            budget -= new_tokens;
            index += 1;
        }
        if iteration.preempted.is_empty() {
            while budget > 0 && (self.running.len() as u64) < self.limits.max_num_seqs {
                let Some(sequence) = self.waiting.front() else { break };
                // A swapped sequence takes its blocks back and more for its
                // new tokens; another starts from nothing.
                let new_tokens = sequence.next_tokens(budget);
                let blocks = self.limits.blocks_for(sequence.computed + new_tokens);
                if blocks > self.free_blocks {
                    break;
                }
                let mut sequence = self.waiting.pop_front().expect("a front");
                self.free_blocks -= blocks;
                if sequence.swapped {
                    iteration.swapped_in += sequence.blocks;
                    self.host_blocks -= sequence.blocks;
                    sequence.swapped = false;
                }
                sequence.blocks = blocks;
                iteration.scheduled.push(sequence.scheduled(new_tokens));
                budget -= new_tokens;
                self.running.push(sequence);
            }
        }
        iteration
    }

    /// Records that `iteration` ran: its tokens are in the cache, each
    /// sequence whose last token was computed samples one, and finished
    /// ones free their blocks. Returns the sampled tokens, in schedule order.
    pub fn complete(&mut self, iteration: &Iteration) -> Vec<Sampled> {
        let mut sampled = Vec::new();
        // Scheduled sequences are running, in the order they were scheduled.
        let mut cursor = 0;
        for s in &iteration.scheduled {
            while self.running[cursor].request != s.request {
                cursor += 1;
            }
            let sequence = &mut self.running[cursor];
            sequence.computed += s.new_tokens;
            if s.samples {
                sequence.remaining -= 1;
                sequence.tokens += 1;
                sampled.push(Sampled { request: s.request, finished: sequence.remaining == 0 });
            }
        }
        let free = &mut self.free_blocks;
        self.running.retain(|sequence| {
            let done = sequence.remaining == 0;
            if done {
                *free += sequence.blocks;
            }
            !done
        });
        sampled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(max_num_seqs: u64, max_num_batched_tokens: u64, kv_blocks: u64) -> Limits {
        Limits { max_num_seqs, max_num_batched_tokens, block_size: 16, kv_blocks, preemption: Preemption::Recompute }
    }

    /// Runs `requests` (prompt, output, arriving before iteration N) to the
    /// end, checking the invariants at every iteration; returns the
    /// iterations and the tokens sampled for each request.
    fn run_all(limits: Limits, requests: &[(u64, u64, usize)]) -> (Vec<Iteration>, Vec<u64>) {
        let mut scheduler = Scheduler::new(limits);
        let mut sampled = vec![0; requests.len()];
        let mut iterations = Vec::new();
        let mut arrived = 0;
        let mut step = 0;
        while arrived < requests.len() || !scheduler.is_idle() {
            while arrived < requests.len() && requests[arrived].2 <= step {
                scheduler.arrive(arrived, requests[arrived].0, requests[arrived].1);
                arrived += 1;
            }
            step += 1;
            let iteration = scheduler.schedule();
            assert!(scheduler.used_blocks() <= limits.kv_blocks, "blocks within capacity");
            if let Preemption::Swap { host_blocks } = limits.preemption {
                assert!(scheduler.host_blocks() <= host_blocks, "swap space within capacity");
            }
            assert!(scheduler.running() as u64 <= limits.max_num_seqs);
            let tokens: u64 = iteration.scheduled.iter().map(|s| s.new_tokens).sum();
            assert!(tokens <= limits.max_num_batched_tokens, "the budget holds");
            assert!(!iteration.scheduled.is_empty() || scheduler.is_idle(), "work waits only when nothing runs");
            for s in scheduler.complete(&iteration) {
                sampled[s.request] += 1;
                assert_eq!(s.finished, sampled[s.request] == requests[s.request].1);
            }
            iterations.push(iteration);
            assert!(step < 1_000_000, "the run ends");
        }
        assert_eq!(scheduler.used_blocks(), 0, "every block comes back");
        (iterations, sampled)
    }

    #[test]
    fn a_long_prompt_is_cut_into_chunks_of_the_budget_beside_decodes() {
        let (iterations, _) = run_all(limits(8, 512, 1000), &[(100, 4, 0), (1200, 2, 1)]);
        // First: the short prompt whole. Then its decode and 511 tokens of
        // the long prompt, then decode + 511, then decode + the last 178.
        let shapes: Vec<Vec<(u64, u64)>> =
            iterations.iter().map(|i| i.scheduled.iter().map(|s| (s.new_tokens, s.context)).collect()).collect();
        assert_eq!(shapes[0], [(100, 0)]);
        assert_eq!(shapes[1], [(1, 100), (511, 0)]);
        assert_eq!(shapes[2], [(1, 101), (511, 511)]);
        assert_eq!(shapes[3], [(1, 102), (178, 1022)]);
        assert_eq!(shapes[4], [(1, 1200)], "the first finished; the long one decodes its second token");
        assert_eq!(iterations[3].prefill_and_decodes(), (178, 1));
        let decodes_only: Vec<bool> = iterations[..5].iter().map(Iteration::decodes_only).collect();
        assert_eq!(decodes_only, [false, false, false, false, true], "a chunk beside a decode is not decode-only");
    }

    #[test]
    fn when_blocks_run_out_the_latest_started_is_preempted_and_computed_again() {
        // 9 blocks of 16: two requests of 64 prompt tokens take 8; their
        // decodes need a fifth block each at token 65.
        let (iterations, sampled) = run_all(limits(8, 1000, 9), &[(64, 20, 0), (64, 20, 0)]);
        let preempted: Vec<usize> = iterations.iter().flat_map(|i| i.preempted.clone()).collect();
        assert_eq!(preempted, [1], "the second, once");
        assert_eq!(sampled, [20, 20]);
        // Its recompute covers its prompt and what it had generated.
        let recompute = iterations.iter().flat_map(|i| &i.scheduled).find(|s| s.request == 1 && s.context == 0 && s.new_tokens > 64);
        assert!(recompute.is_some(), "{iterations:?}");
    }

    #[test]
    fn with_swap_space_a_preempted_sequence_comes_back_without_computing_again() {
        let swap = Limits { preemption: Preemption::Swap { host_blocks: 5 }, ..limits(8, 1000, 9) };
        let (iterations, sampled) = run_all(swap, &[(64, 20, 0), (64, 20, 0)]);
        assert_eq!(sampled, [20, 20]);
        assert_eq!(iterations.iter().map(|i| i.discarded).sum::<u64>(), 0, "nothing thrown away");
        // Its 4 blocks of 64 tokens went out at token 65 and came back.
        assert_eq!(iterations.iter().map(|i| (i.swapped_out, i.swapped_in)).filter(|&m| m != (0, 0)).collect::<Vec<_>>(), [(4, 0), (0, 4)]);
        let back = iterations.iter().find(|i| i.swapped_in > 0).unwrap();
        assert_eq!(back.scheduled.iter().find(|s| s.request == 1).map(|s| (s.new_tokens, s.context)), Some((1, 64)), "a decode step again");
        // Swap space too small for its blocks: recompute.
        let small = Limits { preemption: Preemption::Swap { host_blocks: 3 }, ..swap };
        let (iterations, _) = run_all(small, &[(64, 20, 0), (64, 20, 0)]);
        assert_eq!(iterations.iter().map(|i| i.swapped_out).sum::<u64>(), 0);
        assert_eq!(iterations.iter().map(|i| i.discarded).sum::<u64>(), 64);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn every_request_finishes_with_its_tokens_and_the_cache_never_overflows(
            requests in proptest::collection::vec((1u64..300, 1u64..40, 0usize..30), 1..25),
            max_num_seqs in 1u64..10,
            max_num_batched_tokens in 1u64..600,
            spare_blocks in 0u64..60,
            swap_blocks in proptest::option::of(0u64..40),
        ) {
            let mut requests = requests;
            requests.sort_by_key(|r| r.2);
            let base = limits(max_num_seqs, max_num_batched_tokens, 0);
            let largest = requests.iter().map(|&(p, o, _)| base.peak_blocks(p, o)).max().unwrap_or(0);
            let preemption = swap_blocks.map_or(Preemption::Recompute, |host_blocks| Preemption::Swap { host_blocks });
            let limits = Limits { kv_blocks: largest + spare_blocks, preemption, ..base };
            let (iterations, sampled) = run_all(limits, &requests);
            prop_assert_eq!(sampled, requests.iter().map(|r| r.1).collect::<Vec<_>>());
            // Tokens are conserved: every prompt token and every generated
            // token but the last is computed once, plus what preemption
            // threw away.
            let computed: u64 = iterations.iter().flat_map(|i| &i.scheduled).map(|s| s.new_tokens).sum();
            let needed: u64 = requests.iter().map(|&(p, o, _)| p + o - 1).sum();
            let discarded: u64 = iterations.iter().map(|i| i.discarded).sum();
            prop_assert_eq!(computed, needed + discarded);
            let preempted = iterations.iter().any(|i| !i.preempted.is_empty());
            let swapped_out: u64 = iterations.iter().map(|i| i.swapped_out).sum();
            prop_assert_eq!(preempted, discarded > 0 || swapped_out > 0, "a preempted sequence had computed tokens");
            prop_assert_eq!(swapped_out, iterations.iter().map(|i| i.swapped_in).sum::<u64>(), "what goes out comes back");
        }
    }
}
