//! A service on one tensor-parallel group, or on a server split into a
//! prefill group and a decode group (`split`, with the KV cache moved
//! between them by `handoff`): requests arrive (`requests`), a
//! continuously batching scheduler turns them into iterations
//! (`scheduler`), each iteration's kernels and collectives are replayed on
//! the topology (`iteration`), and what each request saw becomes latency,
//! throughput, goodput and cost (`results`). This file owns the KV cache's
//! capacity, a group's iterations, the clients' side (which requests are
//! sent when, under a concurrency cap) and the clock of the one-group
//! service: an iteration starts when the one before ends and takes the
//! requests sent by then; an idle engine waits for the next. Knows nothing
//! of links; draws nothing.

pub mod groups;
pub mod handoff;
pub mod iteration;
pub mod load;
pub mod requests;
pub mod results;
pub mod scheduler;
pub mod split;

use std::collections::VecDeque;
use std::ops::Range;

use crate::collective::CollectiveError;
use crate::config::hardware::GpuModel;
use crate::config::llm::LlmModel;
use crate::storage::Direction;
use crate::units::{Bytes, Time};
use crate::workload::storage::shard_bytes;

use iteration::IterationTimes;
use requests::Request;
use scheduler::{Limits, Scheduler};

/// Why a service cannot be simulated.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Requests(#[from] requests::RequestError),
    /// A flag's value that cannot work; `key` names the flag.
    #[error("{key} {message}")]
    Invalid { key: &'static str, message: String },
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    /// The service ran to the end of the simulated clock: no result to
    /// report.
    #[error("the service runs past the simulated clock's range ({end}, about 213 days); serve fewer requests", end = Time::END)]
    BeyondClock,
}

/// The KV cache the GPUs hold beside the weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvCapacity {
    pub blocks: u64,
    /// Memory one GPU gives the cache.
    pub bytes_per_gpu: Bytes,
    /// Of one token on one GPU (its share of the KV heads of every layer).
    pub bytes_per_token: u64,
}

impl KvCapacity {
    /// What `utilization` of each GPU's memory holds after its shard of
    /// `llm`'s weights at TP=`tp`, in blocks of `block_size` tokens.
    /// Activations, the framework's workspace and CUDA graphs take nothing
    /// here (vLLM measures their peak and takes it off): an upper bound.
    pub fn of(llm: &LlmModel, gpu: &GpuModel, tp: u32, utilization: f64, block_size: u64) -> Result<KvCapacity, ServeError> {
        if !(utilization > 0.0 && utilization <= 1.0) {
            return Err(ServeError::Invalid {
                key: "--gpu-memory-utilization",
                message: format!("{utilization}: give the share of each GPU's memory the engine takes, above 0 and at most 1"),
            });
        }
        if block_size == 0 {
            return Err(ServeError::Invalid { key: "--block-size", message: "0: give tokens a block, 1 or more".into() });
        }
        let usable = (gpu.memory.as_f64() * utilization) as u64;
        let weights = shard_bytes(llm, u64::from(tp));
        let bytes_per_token = u64::try_from(llm.kv_cache_bytes_per_gpu(1, 1, tp)).expect("a token's keys and values fit in memory");
        let left = usable.saturating_sub(weights.0);
        let blocks = left / (bytes_per_token * block_size);
        if blocks == 0 {
            return Err(ServeError::Invalid {
                key: "--gpu-memory-utilization",
                message: format!(
                    "{utilization}: {:.1} GB of {}'s weights on each GPU at TP={tp} leave no block of KV cache in {:.1} GB of each {}'s {:.1} GB; raise it or --tp",
                    weights.as_f64() / 1e9,
                    llm.name,
                    usable as f64 / 1e9,
                    gpu.name,
                    gpu.memory.as_f64() / 1e9
                ),
            });
        }
        Ok(KvCapacity { blocks, bytes_per_gpu: Bytes(blocks * block_size * bytes_per_token), bytes_per_token })
    }
}

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub request: Request,
    pub first_token: Time,
    pub finished: Time,
    pub preemptions: u32,
}

/// One iteration as it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IterationRecord {
    pub start: Time,
    pub time: iteration::IterationTime,
    /// Tokens of prompts (or recomputed) and sequences decoding.
    pub prefill_tokens: u64,
    pub decodes: u64,
    pub kv_blocks: u64,
    pub running: u32,
    pub waiting: u32,
    pub preempted: u32,
    pub sampled: u32,
}

/// The service's run.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceRun {
    /// In the order of the requests.
    pub served: Vec<Served>,
    pub iterations: Vec<IterationRecord>,
    /// Gaps between successive tokens of each request, every request's.
    pub token_gaps: Vec<Time>,
    /// Tokens computed again after preemptions.
    pub recomputed: u64,
    /// Blocks swapped out to host memory (each came back in).
    pub swapped_blocks: u64,
}

/// The engine serving: its scheduler's limits, its TP degree, the
/// longest request its model takes and what its host adds to each
/// iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engine {
    pub limits: Limits,
    pub tp: u64,
    /// The model's context: a request's prompt and output together.
    pub max_model_len: u64,
    /// The host's time an iteration takes before its forward runs on the
    /// GPUs (scheduling, preparing inputs, processing the last outputs),
    /// not overlapped with the GPUs: the caller's, not the hardware's.
    pub step_overhead: Time,
}

/// The clients' side of a run: which requests have been sent, and when.
/// Without a cap a request is sent when it arrives; with one (`vllm bench
/// serve --max-concurrency`) at most that many are in flight, and a request
/// arriving while they are is sent when one of them finishes.
struct Clients<'r> {
    requests: &'r [Request],
    /// The first request not sent yet.
    next: usize,
    /// With a cap: when each free place in flight was freed, oldest first
    /// (requests finish in time order).
    free: Option<VecDeque<Time>>,
    sent: Vec<Time>,
}

impl<'r> Clients<'r> {
    /// The clients of `requests` (in arrival order), at most `cap` in flight.
    fn new(requests: &'r [Request], cap: Option<u64>) -> Clients<'r> {
        let free = cap.map(|cap| vec![Time::ZERO; cap.min(requests.len() as u64) as usize].into());
        Clients { requests, next: 0, free, sent: vec![Time::ZERO; requests.len()] }
    }

    /// The requests sent by `now` that were not sent before, in order.
    fn send(&mut self, now: Time) -> Range<usize> {
        let first = self.next;
        while let Some(request) = self.requests.get(self.next).filter(|r| r.arrival <= now) {
            let freed = match &mut self.free {
                None => Time::ZERO,
                Some(free) => match free.pop_front() {
                    Some(freed) => freed,
                    None => break,
                },
            };
            self.sent[self.next] = request.arrival.max(freed);
            self.next += 1;
        }
        first..self.next
    }

    /// When the next request is sent, unless it waits for one in flight to
    /// finish (or none is left).
    fn next_send(&self) -> Option<Time> {
        let request = self.requests.get(self.next)?;
        match &self.free {
            Some(free) => free.front().map(|&freed| request.arrival.max(freed)),
            None => Some(request.arrival),
        }
    }

    /// A request finished at `now`: its place in flight is free.
    fn finished(&mut self, now: Time) {
        if let Some(free) = &mut self.free {
            free.push_back(now);
        }
    }
}

/// Serves `requests` (in arrival order, at most `max_concurrency` in
/// flight) on `engine`, timing iterations with `times`; `progress` is
/// called once per finished request.
pub fn simulate(
    requests: &[Request],
    max_concurrency: Option<u64>,
    engine: Engine,
    times: &mut dyn IterationTimes,
    progress: &dyn Fn(),
) -> Result<ServiceRun, ServeError> {
    check_fits(requests, engine, "--tp")?;
    let mut group = Group::new(engine, times);
    let mut ledger = Ledger::new(requests.len());
    let mut clients = Clients::new(requests, max_concurrency);
    let mut now = Time::ZERO;
    loop {
        for r in clients.send(now) {
            group.scheduler.arrive(r, requests[r].prompt, requests[r].output);
        }
        if group.scheduler.is_idle() {
            match clients.next_send() {
                Some(next) => {
                    now = next;
                    continue;
                }
                None => break,
            }
        }
        group.start(now, &mut ledger.preemptions)?;
        now = group.end().expect("a request that fits alone always runs when the engine is idle");
        for sampled in group.finish() {
            if sampled.finished {
                clients.finished(now);
            }
            ledger.sampled(sampled, now, progress);
        }
    }
    if now.is_end() {
        return Err(ServeError::BeyondClock);
    }
    Ok(ServiceRun {
        served: ledger.served(&clients),
        iterations: group.records,
        token_gaps: ledger.token_gaps,
        recomputed: group.recomputed,
        swapped_blocks: group.swapped_blocks,
    })
}

/// One group of GPUs serving: its scheduler, where its iteration times come
/// from, the iteration running and those that ran.
struct Group<'t> {
    engine: Engine,
    scheduler: Scheduler,
    times: &'t mut dyn IterationTimes,
    /// The iteration running, its record and when it ends.
    running: Option<(scheduler::Iteration, IterationRecord, Time)>,
    /// Time the group's allreduces lost to other traffic while idle, paid
    /// by the next iteration.
    slowed: Time,
    records: Vec<IterationRecord>,
    recomputed: u64,
    swapped_blocks: u64,
}

impl<'t> Group<'t> {
    fn new(engine: Engine, times: &'t mut dyn IterationTimes) -> Group<'t> {
        Group {
            engine,
            scheduler: Scheduler::new(engine.limits),
            times,
            running: None,
            slowed: Time::ZERO,
            records: Vec::new(),
            recomputed: 0,
            swapped_blocks: 0,
        }
    }

    /// When the running iteration ends; None when idle.
    fn end(&self) -> Option<Time> {
        self.running.as_ref().map(|(.., end)| *end)
    }

    /// Starts the next iteration at `now` if the group is idle and has work
    /// that fits (or sequences to preempt), counting each request preempted
    /// in `preemptions`.
    fn start(&mut self, now: Time, preemptions: &mut [u32]) -> Result<(), ServeError> {
        if self.running.is_some() || self.scheduler.is_idle() {
            return Ok(());
        }
        let iteration = self.scheduler.schedule();
        if iteration.scheduled.is_empty() && iteration.preempted.is_empty() {
            return Ok(());
        }
        // An iteration that only preempted runs no forward.
        let mut time = if iteration.scheduled.is_empty() {
            Default::default()
        } else {
            self.times.time(iteration.tokens(self.engine.tp), iteration.decodes_only())?
        };
        // Blocks move to host memory or back before the forward runs.
        time.swap = self.times.swap(iteration.swapped_out, Direction::Write)? + self.times.swap(iteration.swapped_in, Direction::Read)?;
        time.total += time.swap;
        let slowed = std::mem::take(&mut self.slowed);
        time.total += slowed;
        time.comm += slowed;
        let (prefill_tokens, decodes) = iteration.prefill_and_decodes();
        let record = IterationRecord {
            start: now,
            time,
            prefill_tokens,
            decodes,
            kv_blocks: self.scheduler.used_blocks(),
            running: self.scheduler.running() as u32,
            waiting: self.scheduler.waiting() as u32,
            preempted: iteration.preempted.len() as u32,
            sampled: 0,
        };
        for &request in &iteration.preempted {
            preemptions[request] += 1;
        }
        self.recomputed += iteration.discarded;
        self.swapped_blocks += iteration.swapped_out;
        self.running = Some((iteration, record, now + self.engine.step_overhead + time.total));
        Ok(())
    }

    /// The iteration under way, as the traffic a KV move meets.
    fn under_way(&self) -> Option<handoff::Decoding> {
        self.running.as_ref().map(|(_, record, _)| handoff::Decoding { rows: record.prefill_tokens + record.decodes, time: record.time })
    }

    /// Other traffic on the group's links makes its allreduces take `delay`
    /// longer: the running iteration ends later, or the next one if idle.
    fn slow_by(&mut self, delay: Time) {
        match &mut self.running {
            Some((_, record, end)) => {
                record.time.total += delay;
                record.time.comm += delay;
                *end += delay;
            }
            None => self.slowed += delay,
        }
    }

    /// Ends the running iteration: the tokens it sampled, in schedule order.
    fn finish(&mut self) -> Vec<scheduler::Sampled> {
        let (iteration, mut record, _) = self.running.take().expect("an iteration is running");
        let sampled = self.scheduler.complete(&iteration);
        record.sampled = sampled.len() as u32;
        self.records.push(record);
        sampled
    }
}

/// What each request has seen so far.
struct Ledger {
    first_token: Vec<Option<Time>>,
    last_token: Vec<Time>,
    finished: Vec<Option<Time>>,
    preemptions: Vec<u32>,
    token_gaps: Vec<Time>,
}

impl Ledger {
    fn new(requests: usize) -> Ledger {
        Ledger {
            first_token: vec![None; requests],
            last_token: vec![Time::ZERO; requests],
            finished: vec![None; requests],
            preemptions: vec![0; requests],
            token_gaps: Vec::new(),
        }
    }

    /// A token of a request sampled at `now`.
    fn sampled(&mut self, sampled: scheduler::Sampled, now: Time, progress: &dyn Fn()) {
        let r = sampled.request;
        match self.first_token[r] {
            None => self.first_token[r] = Some(now),
            Some(_) => self.token_gaps.push(now - self.last_token[r]),
        }
        self.last_token[r] = now;
        if sampled.finished {
            assert!(self.finished[r].is_none(), "request {r} finishes once");
            self.finished[r] = Some(now);
            progress();
        }
    }

    /// Every request as served, in request order, arriving when its client
    /// sent it.
    fn served(&self, clients: &Clients) -> Vec<Served> {
        clients
            .requests
            .iter()
            .enumerate()
            .map(|(r, &request)| Served {
                request: Request { arrival: clients.sent[r], ..request },
                first_token: self.first_token[r].expect("every request finishes"),
                finished: self.finished[r].expect("every request finishes"),
                preemptions: self.preemptions[r],
            })
            .collect()
    }
}

/// Refuses requests arriving beyond the clock's range, and a request
/// longer than the model's context or that the cache cannot hold alone
/// (`tp_flag` names the flag that gives the GPUs).
fn check_fits(requests: &[Request], engine: Engine, tp_flag: &str) -> Result<(), ServeError> {
    if let Some(last) = requests.last().filter(|r| r.arrival.as_secs() > requests::MAX_SECONDS) {
        return Err(ServeError::Invalid {
            key: "--requests",
            message: format!(
                "{}: the last arrives after {:.0} days, more than the {:.0} a run may span; serve fewer requests or at a higher rate",
                requests.len(),
                last.arrival.as_secs() / 86400.0,
                requests::MAX_SECONDS / 86400.0
            ),
        });
    }
    if let Some((index, r)) = requests.iter().enumerate().find(|(_, r)| r.prompt.saturating_add(r.output) > engine.max_model_len) {
        return Err(ServeError::Invalid {
            key: "--prompt",
            message: format!(
                "request {index} ({} prompt + {} output tokens) is longer than the model's context of {} tokens; shorten the requests",
                r.prompt, r.output, engine.max_model_len
            ),
        });
    }
    let limits = engine.limits;
    check_cache(requests, limits, |r| limits.peak_blocks(r.prompt, r.output), tp_flag)
}

/// Refuses a request whose cache at its largest (`peak` blocks) the
/// cache of `limits` cannot hold alone.
fn check_cache(requests: &[Request], limits: Limits, peak: impl Fn(&Request) -> u64, tp_flag: &str) -> Result<(), ServeError> {
    match requests.iter().enumerate().find(|(_, r)| peak(r) > limits.kv_blocks) {
        Some((index, r)) => Err(ServeError::Invalid {
            key: "--prompt",
            message: format!(
                "request {index} ({} prompt + {} output tokens) needs {} KV blocks of {} tokens, more than the {} the GPUs hold; shorten the requests, or raise {tp_flag} or --gpu-memory-utilization",
                r.prompt,
                r.output,
                peak(r),
                limits.block_size,
                limits.kv_blocks
            ),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::iteration::IterationTime;
    use super::requests::{Arrivals, Length, Lengths, generate};
    use super::scheduler::Preemption;
    use super::*;
    use crate::workload::forward::PassTokens;

    /// An iteration takes 1 ms plus 10 us a row, and 500 us more unless it
    /// is decodes alone (launched from the host): a closed form to check
    /// the clock against.
    struct LinearTimes;

    impl IterationTimes for LinearTimes {
        fn time(&mut self, tokens: PassTokens, decodes_only: bool) -> Result<IterationTime, ServeError> {
            let eager = if decodes_only { 0 } else { 500 };
            Ok(IterationTime { total: Time::from_us(1000 + 10 * tokens.rows + eager), comm: Time::ZERO, swap: Time::ZERO })
        }
        fn swap(&mut self, blocks: u64, _: Direction) -> Result<Time, ServeError> {
            Ok(Time::from_us(blocks))
        }
        fn counts(&self) -> (u64, u64) {
            (0, 0)
        }
    }

    fn engine(kv_blocks: u64) -> Engine {
        let limits = Limits { max_num_seqs: 8, max_num_batched_tokens: 256, block_size: 16, kv_blocks, preemption: Preemption::Recompute };
        Engine { limits, tp: 1, max_model_len: 4096, step_overhead: Time::ZERO }
    }

    #[test]
    fn a_lone_request_takes_its_chunks_then_one_iteration_a_token() {
        let request = Request { arrival: Time::from_us(5_000), prompt: 300, output: 4 };
        let run = simulate(&[request], None, engine(100), &mut LinearTimes, &|| {}).unwrap();
        let served = run.served[0];
        // Chunks of 256 and 44 tokens (not decodes alone), then three
        // decodes of one row.
        assert_eq!(served.first_token, Time::from_us(5_000 + (1000 + 2560 + 500) + (1000 + 440 + 500)));
        assert_eq!(served.finished, served.first_token + Time::from_us(3 * 1010));
        assert_eq!(run.token_gaps, vec![Time::from_us(1010); 3]);
        assert_eq!(run.iterations.len(), 5);
        assert_eq!(run.iterations[0].start, Time::from_us(5_000), "the idle engine waited for the arrival");
        // The host's time before each forward delays every token by it.
        let hosted = Engine { step_overhead: Time::from_us(300), ..engine(100) };
        let late = simulate(&[request], None, hosted, &mut LinearTimes, &|| {}).unwrap();
        assert_eq!(late.served[0].first_token, served.first_token + Time::from_us(2 * 300));
        assert_eq!(late.served[0].finished, served.finished + Time::from_us(5 * 300));
        assert_eq!(late.token_gaps, vec![Time::from_us(1310); 3]);
    }

    #[test]
    fn a_busy_service_serves_every_request_the_same_way_each_time() {
        let arrivals = Arrivals::rate(400.0, 2.0).unwrap();
        let lengths = Lengths::Drawn { prompt: Length::Uniform { low: 10, high: 600 }, output: Length::Uniform { low: 1, high: 80 } };
        let requests = generate(&arrivals, &lengths, 300, 3);
        let finished = std::cell::Cell::new(0);
        let run = simulate(&requests, None, engine(60), &mut LinearTimes, &|| finished.set(finished.get() + 1)).unwrap();
        assert_eq!(finished.get(), 300);
        assert!(run.served.iter().all(|s| s.request.arrival < s.first_token && s.first_token <= s.finished));
        assert!(run.iterations.iter().all(|i| i.kv_blocks <= 60));
        assert!(run.iterations.iter().any(|i| i.preempted > 0), "a small cache preempts");
        let tokens: u64 = run.iterations.iter().map(|i| u64::from(i.sampled)).sum();
        assert_eq!(tokens, requests.iter().map(|r| r.output).sum::<u64>());
        assert_eq!(run, simulate(&requests, None, engine(60), &mut LinearTimes, &|| {}).unwrap());
        // With swap space, preempted sequences keep their tokens: nothing is
        // computed again, and each swap's time is in its iteration's.
        let swapping = Engine { limits: Limits { preemption: Preemption::Swap { host_blocks: 1000 }, ..engine(60).limits }, ..engine(60) };
        let swapped = simulate(&requests, None, swapping, &mut LinearTimes, &|| {}).unwrap();
        assert!(swapped.swapped_blocks > 0 && swapped.recomputed == 0);
        let swap_time: Time = swapped.iterations.iter().fold(Time::ZERO, |sum, i| sum + i.time.swap);
        assert_eq!(swap_time, Time::from_us(2 * swapped.swapped_blocks), "out and back in, 1 us a block");
    }

    #[test]
    fn a_capped_client_sends_a_request_when_one_in_flight_finishes() {
        let at_once = |prompt| Request { arrival: Time::ZERO, prompt, output: 3 };
        let requests = [at_once(100), at_once(200), at_once(50)];
        let one = simulate(&requests, Some(1), engine(100), &mut LinearTimes, &|| {}).unwrap();
        for (before, after) in one.served.iter().zip(&one.served[1..]) {
            assert_eq!(after.request.arrival, before.finished, "sent as the one before finished, and timed from then");
        }
        // The first is served as alone, each request as if alone after it.
        let alone = |r: Request| simulate(&[r], None, engine(100), &mut LinearTimes, &|| {}).unwrap().served[0];
        assert_eq!(one.served[0], alone(requests[0]));
        let latency = |s: &Served| (s.first_token - s.request.arrival, s.finished - s.request.arrival);
        let (first, last) = (alone(requests[2]), &one.served[2]);
        assert_eq!(latency(last), latency(&first));
        // A cap above the requests' count changes nothing.
        let free = simulate(&requests, None, engine(100), &mut LinearTimes, &|| {}).unwrap();
        assert_eq!(simulate(&requests, Some(3), engine(100), &mut LinearTimes, &|| {}).unwrap(), free);
    }

    proptest::proptest! {
        #[test]
        fn no_more_requests_are_in_flight_than_the_cap(cap in 1u64..6, seed in 0u64..50) {
            let arrivals = Arrivals::rate(500.0, 2.0).unwrap();
            let lengths = Lengths::Drawn { prompt: Length::Uniform { low: 10, high: 400 }, output: Length::Uniform { low: 1, high: 40 } };
            let requests = generate(&arrivals, &lengths, 60, seed);
            let run = simulate(&requests, Some(cap), engine(200), &mut LinearTimes, &|| {}).unwrap();
            for (r, s) in run.served.iter().enumerate() {
                let sent = s.request.arrival;
                proptest::prop_assert!(sent >= requests[r].arrival, "sent before it arrived");
                let in_flight = run.served.iter().filter(|o| o.request.arrival <= sent && sent < o.finished).count() as u64;
                proptest::prop_assert!(in_flight <= cap, "{in_flight} in flight at {sent:?}, cap {cap}");
            }
        }
    }

    #[test]
    fn requests_too_long_for_the_model_or_the_cache_are_refused_by_name() {
        let long = Request { arrival: Time::ZERO, prompt: 4000, output: 200 };
        let error = simulate(&[long], None, engine(1000), &mut LinearTimes, &|| {}).unwrap_err().to_string();
        assert!(error.contains("--prompt") && error.contains("context of 4096"), "{error}");
        let big = Request { arrival: Time::ZERO, prompt: 200, output: 10 };
        let error = simulate(&[big], None, engine(10), &mut LinearTimes, &|| {}).unwrap_err().to_string();
        assert!(error.contains("needs 14 KV blocks") && error.contains("the 10 the GPUs hold"), "{error}");
    }

    #[test]
    fn the_cache_is_what_the_weights_leave_of_the_memory_used() {
        let model = crate::config::hardware::HardwareModel::base();
        let gpu = model.gpu("h200").unwrap();
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let kv = KvCapacity::of(&llm, gpu, 8, 0.9, 16).unwrap();
        // 80 layers x 2 (K, V) x 1 KV head of 128 x 2 bytes a GPU at TP=8.
        assert_eq!(kv.bytes_per_token, 80 * 2 * 128 * 2);
        let left = (gpu.memory.as_f64() * 0.9) as u64 - shard_bytes(&llm, 8).0;
        assert_eq!(kv.blocks, left / (16 * 40960));
        let error = KvCapacity::of(&llm, gpu, 1, 0.9, 16).unwrap_err().to_string();
        assert!(error.starts_with("--gpu-memory-utilization 0.9:") && error.contains("raise it or --tp"), "{error}");
        assert!(KvCapacity::of(&llm, gpu, 8, 1.5, 16).is_err());
    }
}
