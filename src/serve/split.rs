//! A server split in two: a prefill group computes prompts only (in chunks
//! of its own token budget) and a decode group generates tokens only, each
//! with its own scheduler, KV cache and clock, and each request's KV cache
//! moves from one to the other between them (`handoff`). A request arrives
//! at the prefill group; once its prompt is computed its cache stays there
//! (the token the prefill samples is dropped) until it has moved. It waits
//! for room in the decode group (blocks for its prompt, a place among
//! `max_num_seqs`, and no preempted sequence waiting there), which takes
//! the blocks; then its move starts, after the move before it (one at a
//! time, in the order prompts finished). When the cache has arrived the
//! prefill group frees it and the request runs in the decode group, whose
//! first step with it computes its first token from the moved cache (the
//! prompt's last token again, as vLLM's decode instance does). Each
//! group's iteration starts when its previous one ends and it has work.
//! Knows nothing of links.

use std::collections::VecDeque;

use crate::units::Time;

use super::handoff::MoveTimes;
use super::iteration::IterationTimes;
use super::requests::Request;
use super::{Clients, Engine, Group, IterationRecord, Ledger, ServeError, ServiceRun, check_cache, check_fits};

/// The two groups' engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitEngine {
    pub prefill: Engine,
    pub decode: Engine,
}

/// Where the split server's times come from.
pub struct Sources<'t> {
    pub prefill: &'t mut dyn IterationTimes,
    pub decode: &'t mut dyn IterationTimes,
    pub moves: &'t mut dyn MoveTimes,
}

/// One request's way from the prefill group to the decode group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handoff {
    /// Its prompt computed.
    pub prefilled: Time,
    /// Its move started, and its cache arrived.
    pub sent: Time,
    pub arrived: Time,
    pub bytes: u64,
}

/// What the prefill group did.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillRun {
    pub iterations: Vec<IterationRecord>,
    pub recomputed: u64,
    pub swapped_blocks: u64,
}

/// The split server's run.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitRun {
    /// Requests as served (preemptions in either group), and the decode
    /// group's iterations, recompute and swaps.
    pub run: ServiceRun,
    pub prefill: PrefillRun,
    /// In the order of the requests.
    pub handoffs: Vec<Handoff>,
}

/// Serves `requests` (in arrival order, at most `max_concurrency` in
/// flight) on a split server.
pub fn simulate(
    requests: &[Request],
    max_concurrency: Option<u64>,
    engine: SplitEngine,
    sources: Sources,
    progress: &dyn Fn(),
) -> Result<SplitRun, ServeError> {
    check_fits(requests, engine.decode, "--decode-tp")?;
    let prefill_limits = engine.prefill.limits;
    check_cache(requests, prefill_limits, |r| prefill_limits.blocks_for(r.prompt), "--prefill-tp")?;
    let decode_limits = engine.decode.limits;
    let mut prefill = Group::new(engine.prefill, sources.prefill);
    let mut decode = Group::new(engine.decode, sources.decode);
    let moves = sources.moves;
    let mut ledger = Ledger::new(requests.len());
    let mut handoffs = vec![Handoff::default(); requests.len()];
    // Prompts computed, waiting for the decode group's room; and moves
    // started, in the order they arrive.
    let mut ready: VecDeque<usize> = VecDeque::new();
    let mut moving: VecDeque<usize> = VecDeque::new();
    let mut link_free = Time::ZERO;
    let mut clients = Clients::new(requests, max_concurrency);
    let mut now = Time::ZERO;
    loop {
        if prefill.end() == Some(now) {
            for sampled in prefill.finish() {
                // Its cache stays until moved.
                prefill.scheduler.reserve(prefill_limits.blocks_for(requests[sampled.request].prompt));
                handoffs[sampled.request].prefilled = now;
                ready.push_back(sampled.request);
            }
        }
        if decode.end() == Some(now) {
            for sampled in decode.finish() {
                if sampled.finished {
                    clients.finished(now);
                }
                ledger.sampled(sampled, now, progress);
            }
        }
        while let Some(&r) = moving.front().filter(|&&r| handoffs[r].arrived <= now) {
            moving.pop_front();
            let Request { prompt, output, .. } = requests[r];
            prefill.scheduler.release(prefill_limits.blocks_for(prompt));
            decode.scheduler.resume(r, prompt, prompt - 1, output, decode_limits.blocks_for(prompt));
        }
        for r in clients.send(now) {
            // The prefill group samples one token, and drops it.
            prefill.scheduler.arrive(r, requests[r].prompt, 1);
        }
        while let Some(&r) = ready.front() {
            let prompt = requests[r].prompt;
            let blocks = decode_limits.blocks_for(prompt);
            let seats = (decode.scheduler.running() + moving.len()) as u64;
            if decode.scheduler.waiting() > 0 || seats >= decode_limits.max_num_seqs || !decode.scheduler.has_room(blocks) {
                break;
            }
            ready.pop_front();
            decode.scheduler.reserve(blocks);
            let sent = now.max(link_free);
            // The prefill group computes on while it has prompts, the
            // decode group runs the iteration under way; the move and their
            // allreduces slow each other.
            let moved = moves.time(prompt, !prefill.scheduler.is_idle(), decode.under_way())?;
            prefill.slow_by(moved.prefill_delay);
            decode.slow_by(moved.decode_delay);
            link_free = sent + moved.duration;
            handoffs[r] = Handoff { sent, arrived: link_free, bytes: prompt * moves.bytes_per_token(), ..handoffs[r] };
            moving.push_back(r);
        }
        prefill.start(now, &mut ledger.preemptions)?;
        decode.start(now, &mut ledger.preemptions)?;
        let next_move = moving.front().map(|&r| handoffs[r].arrived);
        match [clients.next_send(), prefill.end(), decode.end(), next_move].into_iter().flatten().min() {
            Some(next) => now = next,
            None => break,
        }
        if now.is_end() {
            return Err(ServeError::BeyondClock);
        }
    }
    assert!(
        ready.is_empty() && prefill.scheduler.is_idle() && decode.scheduler.is_idle(),
        "the split server ends with every request served"
    );
    Ok(SplitRun {
        run: ServiceRun {
            served: ledger.served(&clients),
            iterations: decode.records,
            token_gaps: ledger.token_gaps,
            recomputed: decode.recomputed,
            swapped_blocks: decode.swapped_blocks,
        },
        prefill: PrefillRun { iterations: prefill.records, recomputed: prefill.recomputed, swapped_blocks: prefill.swapped_blocks },
        handoffs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::handoff::{Decoding, MoveTime};
    use crate::serve::iteration::IterationTime;
    use crate::serve::requests::{Arrivals, Length, Lengths, generate};
    use crate::serve::scheduler::{Limits, Preemption};
    use crate::storage::Direction;
    use crate::workload::forward::PassTokens;
    use proptest::prelude::*;

    /// An iteration takes `base` us plus 10 us a row; a swap 1 us a block.
    struct LinearTimes {
        base: u64,
    }

    impl IterationTimes for LinearTimes {
        fn time(&mut self, tokens: PassTokens, _: bool) -> Result<IterationTime, ServeError> {
            Ok(IterationTime { total: Time::from_us(self.base + 10 * tokens.rows), comm: Time::ZERO, swap: Time::ZERO })
        }
        fn swap(&mut self, blocks: u64, _: Direction) -> Result<Time, ServeError> {
            Ok(Time::from_us(blocks))
        }
        fn counts(&self) -> (u64, u64) {
            (0, 0)
        }
    }

    /// A move takes 1 us a token; a token is 100 bytes. It slows the
    /// prefill group's allreduces by `prefill_delay` while that group
    /// computes, and the decode group's by `decode_delay` while it runs.
    #[derive(Default)]
    struct LinearMoves {
        prefill_delay: Time,
        decode_delay: Time,
    }

    impl MoveTimes for LinearMoves {
        fn bytes_per_token(&self) -> u64 {
            100
        }
        fn time(&mut self, tokens: u64, prefilling: bool, decoding: Option<Decoding>) -> Result<MoveTime, ServeError> {
            let prefill_delay = if prefilling { self.prefill_delay } else { Time::ZERO };
            let decode_delay = if decoding.is_some() { self.decode_delay } else { Time::ZERO };
            Ok(MoveTime { duration: Time::from_us(tokens), prefill_delay, decode_delay })
        }
    }

    fn engine(prefill_blocks: u64, decode_blocks: u64, max_num_seqs: u64) -> SplitEngine {
        let limits = |kv_blocks, budget| Limits {
            max_num_seqs,
            max_num_batched_tokens: budget,
            block_size: 16,
            kv_blocks,
            preemption: Preemption::Recompute,
        };
        SplitEngine {
            prefill: Engine { limits: limits(prefill_blocks, 256), tp: 1, max_model_len: 4096, step_overhead: Time::ZERO },
            decode: Engine { limits: limits(decode_blocks, 64), tp: 1, max_model_len: 4096, step_overhead: Time::ZERO },
        }
    }

    fn serve(requests: &[Request], engine: SplitEngine) -> SplitRun {
        serve_with(requests, engine, LinearMoves::default())
    }

    fn serve_with(requests: &[Request], engine: SplitEngine, mut moves: LinearMoves) -> SplitRun {
        let (mut prefill, mut decode) = (LinearTimes { base: 1000 }, LinearTimes { base: 500 });
        simulate(requests, None, engine, Sources { prefill: &mut prefill, decode: &mut decode, moves: &mut moves }, &|| {}).unwrap()
    }

    #[test]
    fn a_capped_client_sends_to_the_split_server_as_one_in_flight_finishes() {
        let at_once = |prompt| Request { arrival: Time::ZERO, prompt, output: 3 };
        let requests = [at_once(100), at_once(300), at_once(50)];
        let (mut prefill, mut decode) = (LinearTimes { base: 1000 }, LinearTimes { base: 500 });
        let mut moves = LinearMoves::default();
        let sources = Sources { prefill: &mut prefill, decode: &mut decode, moves: &mut moves };
        let one = simulate(&requests, Some(1), engine(100, 100, 8), sources, &|| {}).unwrap();
        for (before, after) in one.run.served.iter().zip(&one.run.served[1..]) {
            assert_eq!(after.request.arrival, before.finished, "sent as the one before finished");
        }
        for (served, handoff) in one.run.served.iter().zip(&one.handoffs) {
            assert!(served.request.arrival < handoff.prefilled, "its prompt computed after it was sent");
        }
    }

    #[test]
    fn a_move_beside_the_prefill_groups_next_chunk_makes_that_chunk_longer() {
        // 100 + 156 tokens in the first chunk, the second prompt's 144 in
        // the next: the first prompt's move runs beside that chunk.
        let two = [Request { arrival: Time::ZERO, prompt: 100, output: 2 }, Request { arrival: Time::ZERO, prompt: 300, output: 2 }];
        let slowing = LinearMoves { prefill_delay: Time::from_us(70), ..LinearMoves::default() };
        let (plain, slowed) = (serve(&two, engine(100, 100, 8)), serve_with(&two, engine(100, 100, 8), slowing));
        assert_eq!(slowed.handoffs[0], plain.handoffs[0], "the move itself is as before");
        assert_eq!(slowed.handoffs[1].prefilled, plain.handoffs[1].prefilled + Time::from_us(70));
        let second = |run: &SplitRun| run.prefill.iterations[1].time;
        assert_eq!(second(&slowed).total, second(&plain).total + Time::from_us(70));
        assert_eq!(second(&slowed).comm, second(&plain).comm + Time::from_us(70), "the delay is its allreduces'");
        // The last prompt's move has no chunk beside it.
        assert_eq!(slowed.prefill.iterations.len(), 2);
    }

    #[test]
    fn a_move_beside_the_decode_groups_iteration_makes_that_iteration_longer() {
        // The first request decodes (510 us a step from 2,100 us) when the
        // second's prompt is computed, at 6,000 us: its move runs beside
        // the step under way, the one from 5,670 us.
        let two =
            [Request { arrival: Time::ZERO, prompt: 100, output: 20 }, Request { arrival: Time::from_us(4_000), prompt: 100, output: 2 }];
        let slowing = LinearMoves { decode_delay: Time::from_us(70), ..LinearMoves::default() };
        let (plain, slowed) = (serve(&two, engine(100, 100, 8)), serve_with(&two, engine(100, 100, 8), slowing));
        assert_eq!(slowed.handoffs, plain.handoffs, "the moves are as before, and the first met an idle decode group");
        let step = |run: &SplitRun| run.run.iterations.iter().position(|i| i.start + i.time.total > Time::from_us(6_000)).unwrap();
        assert_eq!(step(&plain), step(&slowed));
        let (plain_step, slowed_step) = (plain.run.iterations[step(&plain)], slowed.run.iterations[step(&slowed)]);
        assert_eq!(plain_step.start, Time::from_us(5_670));
        assert_eq!(slowed_step.time.total, plain_step.time.total + Time::from_us(70));
        assert_eq!(slowed_step.time.comm, plain_step.time.comm + Time::from_us(70), "the delay is its allreduces'");
        assert_eq!(slowed.run.served[0].finished, plain.run.served[0].finished + Time::from_us(70));
    }

    #[test]
    fn a_lone_request_is_prefilled_moved_then_decoded_token_by_token() {
        let request = Request { arrival: Time::from_us(5_000), prompt: 300, output: 4 };
        let run = serve(&[request], engine(100, 100, 8));
        // Chunks of 256 and 44 tokens on the prefill group.
        let prefilled = Time::from_us(5_000 + (1000 + 2560) + (1000 + 440));
        let handoff = run.handoffs[0];
        assert_eq!((handoff.prefilled, handoff.sent, handoff.arrived), (prefilled, prefilled, prefilled + Time::from_us(300)));
        assert_eq!(handoff.bytes, 300 * 100);
        // Then four steps of one row on the decode group, the first token
        // from the first of them.
        let served = run.run.served[0];
        assert_eq!(served.first_token, handoff.arrived + Time::from_us(510));
        assert_eq!(served.finished, served.first_token + Time::from_us(3 * 510));
        assert_eq!(run.run.token_gaps, vec![Time::from_us(510); 3]);
        assert_eq!(run.prefill.iterations.len(), 2);
        assert_eq!(run.run.iterations.len(), 4);
        assert!(run.run.iterations.iter().all(|i| i.prefill_tokens == 0 && i.decodes == 1), "the decode group only decodes");
    }

    #[test]
    fn moves_go_one_at_a_time_and_wait_for_the_decode_groups_room() {
        // Two prompts computed in one prefill iteration; their moves queue
        // on the link.
        let two = [Request { arrival: Time::ZERO, prompt: 100, output: 2 }, Request { arrival: Time::ZERO, prompt: 100, output: 2 }];
        let run = serve(&two, engine(100, 100, 8));
        let (a, b) = (run.handoffs[0], run.handoffs[1]);
        assert_eq!((a.prefilled, a.sent), (b.prefilled, b.prefilled));
        assert_eq!(b.sent, a.arrived, "the second waits for the first");
        // A decode group of room for one request (7 blocks of 16 hold 100
        // prompt + 2 output tokens, not two of them): the second moves
        // once the first has finished, and the prefill group holds its
        // cache meanwhile.
        let run = serve(&two, engine(100, 7, 8));
        let (a, b) = (run.handoffs[0], run.handoffs[1]);
        assert_eq!(b.sent, run.run.served[0].finished);
        assert!(b.sent > a.arrived && run.prefill.iterations.len() == 1);
        // A decode group of one seat: the same.
        let mut one_seat = engine(100, 100, 8);
        one_seat.decode.limits.max_num_seqs = 1;
        let run = serve(&two, one_seat);
        assert_eq!(run.handoffs[1].sent, run.run.served[0].finished);
    }

    #[test]
    fn a_request_too_long_for_a_groups_cache_is_refused_naming_the_group() {
        let long = [Request { arrival: Time::ZERO, prompt: 200, output: 10 }];
        let (mut prefill, mut decode) = (LinearTimes { base: 1 }, LinearTimes { base: 1 });
        let mut run = |engine| {
            simulate(
                &long,
                None,
                engine,
                Sources { prefill: &mut prefill, decode: &mut decode, moves: &mut LinearMoves::default() },
                &|| {},
            )
            .unwrap_err()
            .to_string()
        };
        assert!(run(engine(10, 100, 8)).contains("raise --prefill-tp"));
        assert!(run(engine(100, 13, 8)).contains("needs 14 KV blocks") && run(engine(100, 13, 8)).contains("raise --decode-tp"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn every_request_finishes_once_and_the_bytes_moved_are_the_prompts_caches(
            count in 1usize..120,
            rate in 50.0f64..2000.0,
            seed in 0u64..1000,
            spare in 0u64..40,
            max_num_seqs in 1u64..12,
            swap in proptest::bool::ANY,
        ) {
            let lengths = Lengths::Drawn { prompt: Length::Uniform { low: 1, high: 400 }, output: Length::Uniform { low: 1, high: 60 } };
            let requests = generate(&Arrivals::rate(rate, 2.0).unwrap(), &lengths, count, seed);
            let mut split = engine(0, 0, max_num_seqs);
            split.prefill.limits.kv_blocks = requests.iter().map(|r| split.prefill.limits.blocks_for(r.prompt)).max().unwrap() + spare;
            split.decode.limits.kv_blocks = requests.iter().map(|r| split.decode.limits.peak_blocks(r.prompt, r.output)).max().unwrap() + spare / 2;
            if swap {
                split.decode.limits.preemption = Preemption::Swap { host_blocks: 30 };
            }
            let finished = std::cell::Cell::new(0);
            let (mut prefill, mut decode) = (LinearTimes { base: 1000 }, LinearTimes { base: 500 });
            let sources = Sources { prefill: &mut prefill, decode: &mut decode, moves: &mut LinearMoves::default() };
            let run = simulate(&requests, None, split, sources, &|| finished.set(finished.get() + 1)).unwrap();
            prop_assert_eq!(finished.get(), count, "every request finishes, once");
            let moved: u64 = run.handoffs.iter().map(|h| h.bytes).sum();
            prop_assert_eq!(moved, requests.iter().map(|r| r.prompt * 100).sum::<u64>());
            for ((served, handoff), request) in run.run.served.iter().zip(&run.handoffs).zip(&requests) {
                prop_assert!(request.arrival < handoff.prefilled && handoff.prefilled <= handoff.sent);
                prop_assert_eq!(handoff.arrived, handoff.sent + Time::from_us(request.prompt));
                prop_assert!(handoff.arrived < served.first_token && served.first_token <= served.finished);
            }
            let sampled: u64 = run.run.iterations.iter().map(|i| u64::from(i.sampled)).sum();
            prop_assert_eq!(sampled, requests.iter().map(|r| r.output).sum::<u64>(), "the decode group samples every output token");
            prop_assert!(run.run.iterations.iter().all(|i| i.kv_blocks <= split.decode.limits.kv_blocks));
            prop_assert!(run.prefill.iterations.iter().all(|i| i.kv_blocks <= split.prefill.limits.kv_blocks));
            // The prefill group computes every prompt once, and again what
            // it threw away.
            let computed: u64 = run.prefill.iterations.iter().map(|i| i.prefill_tokens + i.decodes).sum();
            prop_assert_eq!(computed, requests.iter().map(|r| r.prompt).sum::<u64>() + run.prefill.recomputed);
            // Moves never overlap: one at a time.
            let mut spans: Vec<(Time, Time)> = run.handoffs.iter().map(|h| (h.sent, h.arrived)).collect();
            spans.sort();
            prop_assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
        }
    }
}
