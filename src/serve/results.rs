//! What a service run amounts to, as typed results: time to first token,
//! time per output token, the gaps between tokens and end-to-end latency
//! at p50/p90/p99 (nearest rank); throughput in requests and tokens a
//! second, per GPU too; goodput at a service-level objective; the KV
//! cache's use and preemptions, over the run and in windows of time; and
//! what a million output tokens cost at that load. Computed once here from
//! the run; JSON, CSV and tables are made from these structs at output.

use serde::Serialize;

use crate::calibrate::validate::quantile;
use crate::sweep::cost::PerGpu;
use crate::units::Time;

use super::split::SplitRun;
use super::{IterationRecord, Served, ServiceRun};

/// Limits a request must meet to count towards goodput (none: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Slo {
    pub ttft: Option<Time>,
    pub tpot: Option<Time>,
}

impl Slo {
    fn met(&self, served: &Served) -> bool {
        self.ttft.is_none_or(|limit| ttft(served) <= limit) && self.tpot.is_none_or(|limit| tpot(served).is_none_or(|t| t <= limit))
    }
}

/// What was served, and how: set by the caller, reported as given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    pub model: String,
    pub topology: String,
    pub gpu: String,
    pub host: String,
    pub transport: String,
    pub tp: u32,
    pub stack: String,
    /// The stack that launches the iterations that are not decodes alone,
    /// where it is not `stack`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eager_stack: Option<String>,
    pub arrivals: String,
    /// Most requests in flight at once; absent: no cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u64>,
    pub prompt: String,
    pub output: String,
    pub seed: u64,
    pub max_num_seqs: u64,
    pub max_num_batched_tokens: u64,
    pub block_size: u64,
    pub kv_blocks: u64,
    pub kv_gb_per_gpu: f64,
    /// Host time each iteration adds before its forward.
    pub step_overhead_ms: f64,
    /// Recompute, or swap with its space.
    pub preemption: String,
    /// GPUs of the prefill group when the server is split (`tp`,
    /// `max_num_batched_tokens` and the KV cache are then the decode
    /// group's); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_tp: Option<u32>,
}

impl Setup {
    /// GPUs serving: the TP group, or both groups of a split server.
    pub fn gpus(&self) -> u32 {
        self.tp + self.prefill_tp.unwrap_or(0)
    }
}

/// A latency's distribution over requests (or gaps), in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl Percentiles {
    /// Of `times`; None when there are none.
    fn of(times: impl Iterator<Item = Time>) -> Option<Percentiles> {
        let mut ms: Vec<f64> = times.map(Time::as_ms).collect();
        if ms.is_empty() {
            return None;
        }
        ms.sort_by(f64::total_cmp);
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        Some(Percentiles { p50_ms: quantile(&ms, 0.5), p90_ms: quantile(&ms, 0.9), p99_ms: quantile(&ms, 0.99), mean_ms: mean })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    /// Prompt and output tokens.
    pub total_tokens_per_s: f64,
    pub output_tokens_per_s_per_gpu: f64,
    pub total_tokens_per_s_per_gpu: f64,
}

/// Requests that met the objective, and how many a second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Goodput {
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
    pub met: u64,
    pub met_share: f64,
    pub requests_per_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvUse {
    pub blocks: u64,
    pub peak_blocks: u64,
    /// Peak and time-weighted mean of the blocks held, as shares of all.
    pub peak_use: f64,
    pub mean_use: f64,
    pub preemptions: u64,
    /// Requests preempted at least once.
    pub preempted_requests: u64,
    /// Tokens thrown away by preemptions and computed again.
    pub recomputed_tokens: u64,
    /// Blocks swapped out to host memory (and back), and the share of the
    /// iterations' time spent moving them.
    pub swapped_blocks: u64,
    pub swap_share: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IterationStats {
    pub count: u64,
    /// Distinct (rounded) iterations simulated, and iterations that reused one.
    pub simulated: u64,
    pub reused: u64,
    pub mean_ms: f64,
    /// Share of the iterations' time in collectives.
    pub comm_share: f64,
    pub mean_tokens: f64,
    pub mean_decodes: f64,
}

/// What the service costs at this load: the GPUs it runs on, for the
/// run's time, over the tokens it generated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cost {
    pub usd_per_gpu_hour: f64,
    pub usd_per_million_output_tokens: Option<f64>,
    pub joules_per_output_token: Option<f64>,
}

/// One window of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
    /// Most blocks held in an iteration that started in it, as a share.
    pub kv_use_peak: f64,
    pub running_peak: u32,
    pub waiting_peak: u32,
    pub preemptions: u64,
    pub output_tokens: u64,
    pub iterations: u64,
}

/// One request's latencies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RequestRow {
    pub id: usize,
    pub arrival_s: f64,
    pub prompt: u64,
    pub output: u64,
    pub ttft_ms: f64,
    /// None for a single output token.
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
    pub preemptions: u32,
    pub met_slo: bool,
}

/// The service's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeReport {
    pub setup: Setup,
    pub requests: u64,
    /// From the first arrival to the last token.
    pub duration_s: f64,
    pub ttft: Percentiles,
    /// Per request: (end - first token) / (output - 1); requests of more
    /// than one output token.
    pub tpot: Option<Percentiles>,
    /// Every gap between two tokens of a request.
    pub itl: Option<Percentiles>,
    pub e2e: Percentiles,
    pub throughput: Throughput,
    pub goodput: Goodput,
    pub kv_cache: KvUse,
    pub iterations: IterationStats,
    pub cost: Option<Cost>,
    pub timeline: Vec<Window>,
    /// The groups of a split server and the KV cache's moves between
    /// them; absent for one group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitReport>,
}

/// A group of a split server as set up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSetup {
    pub tp: u32,
    /// Its GPUs, by index, in rank order.
    pub gpus: String,
    pub max_num_batched_tokens: u64,
    pub kv_blocks: u64,
    pub kv_gb_per_gpu: f64,
}

/// The groups of a split server as set up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitGroups {
    pub prefill: GroupSetup,
    pub decode: GroupSetup,
}

/// A group of a split server as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReport {
    #[serde(flatten)]
    pub setup: GroupSetup,
    pub kv_peak_use: f64,
    pub preemptions: u64,
    pub iterations: u64,
    pub mean_iteration_ms: f64,
    /// Share of its iterations' time in collectives.
    pub comm_share: f64,
    /// Share of the run it was computing.
    pub busy_share: f64,
}

/// The KV cache's moves from the prefill group to the decode group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvMoveReport {
    /// The modes the pairs' copies use.
    pub transport: String,
    pub bytes: u64,
    /// The link the moves loaded most for its capacity, and that load over
    /// the moves' time.
    pub busiest_link: Option<String>,
    pub busiest_link_util: Option<f64>,
    /// Each request's move, from start to arrival.
    pub move_ms: Percentiles,
    /// From its prompt computed to its move starting (room in the decode
    /// group, the move before it).
    pub wait_ms: Percentiles,
    /// Its move's time over its time to first token, and over its end to
    /// end latency, across requests (nearest rank).
    pub ttft_share_p50: f64,
    pub ttft_share_p99: f64,
    pub e2e_share_p50: f64,
    pub e2e_share_p99: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitReport {
    pub prefill: GroupReport,
    pub decode: GroupReport,
    pub kv_move: KvMoveReport,
}

/// Where the moves went, as the move source saw them.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveLinks {
    pub transport: String,
    pub busiest: Option<crate::serve::handoff::BusiestLink>,
}

/// What `split` amounts to: its groups (set up as `prefill` and `decode`)
/// and its moves (over `links`).
pub fn split_report(split: &SplitRun, SplitGroups { prefill, decode }: SplitGroups, links: MoveLinks) -> SplitReport {
    let duration = split.run.served.iter().map(|s| s.finished).max().unwrap_or(Time::ZERO);
    let group = |setup: GroupSetup, iterations: &[IterationRecord]| {
        let busy = iterations.iter().fold(Time::ZERO, |sum, i| sum + i.time.total);
        let comm = iterations.iter().fold(Time::ZERO, |sum, i| sum + i.time.comm);
        GroupReport {
            kv_peak_use: iterations.iter().map(|i| i.kv_blocks).max().unwrap_or(0) as f64 / setup.kv_blocks as f64,
            preemptions: iterations.iter().map(|i| u64::from(i.preempted)).sum(),
            iterations: iterations.len() as u64,
            mean_iteration_ms: busy.as_ms() / iterations.len().max(1) as f64,
            comm_share: comm.as_secs() / busy.as_secs().max(f64::MIN_POSITIVE),
            busy_share: busy.as_secs() / duration.as_secs().max(f64::MIN_POSITIVE),
            setup,
        }
    };
    let moves = split.handoffs.iter().map(|h| h.arrived - h.sent);
    let share = |total: fn(&Served) -> Time| {
        let mut shares: Vec<f64> = split
            .run
            .served
            .iter()
            .zip(&split.handoffs)
            .map(|(s, h)| (h.arrived - h.sent).as_secs() / total(s).as_secs().max(f64::MIN_POSITIVE))
            .collect();
        shares.sort_by(f64::total_cmp);
        if shares.is_empty() { (0.0, 0.0) } else { (quantile(&shares, 0.5), quantile(&shares, 0.99)) }
    };
    let (ttft_share_p50, ttft_share_p99) = share(ttft);
    let (e2e_share_p50, e2e_share_p99) = share(|s| s.finished - s.request.arrival);
    SplitReport {
        prefill: group(prefill, &split.prefill.iterations),
        decode: group(decode, &split.run.iterations),
        kv_move: KvMoveReport {
            transport: links.transport,
            bytes: split.handoffs.iter().map(|h| h.bytes).sum(),
            busiest_link: links.busiest.as_ref().map(|b| b.label.clone()),
            busiest_link_util: links.busiest.as_ref().map(|b| b.utilization),
            move_ms: Percentiles::of(moves).unwrap_or_default(),
            wait_ms: Percentiles::of(split.handoffs.iter().map(|h| h.sent - h.prefilled)).unwrap_or_default(),
            ttft_share_p50,
            ttft_share_p99,
            e2e_share_p50,
            e2e_share_p99,
        },
    }
}

fn ttft(served: &Served) -> Time {
    served.first_token - served.request.arrival
}

fn tpot(served: &Served) -> Option<Time> {
    (served.request.output > 1).then(|| Time((served.finished - served.first_token).0 / (served.request.output - 1)))
}

/// Windows the timeline has at most.
const WINDOWS: usize = 60;

/// Everything worth reporting about `run`, served by `setup` on `tp` GPUs
/// costing `per_gpu` each; `counts` are the iteration source's
/// (simulated, reused).
pub fn report(run: &ServiceRun, setup: Setup, slo: Slo, per_gpu: Option<PerGpu>, counts: (u64, u64)) -> ServeReport {
    let served = &run.served;
    let duration = served.iter().map(|s| s.finished).max().unwrap_or(Time::ZERO);
    let seconds = duration.as_secs().max(f64::MIN_POSITIVE);
    let output: u64 = served.iter().map(|s| s.request.output).sum();
    let prompt: u64 = served.iter().map(|s| s.request.prompt).sum();
    let gpus = f64::from(setup.gpus());
    let met = served.iter().filter(|s| slo.met(s)).count() as u64;
    let requests = served.len() as u64;
    let busy = run.iterations.iter().fold(Time::ZERO, |sum, i| sum + i.time.total);
    let comm = run.iterations.iter().fold(Time::ZERO, |sum, i| sum + i.time.comm);
    let swap = run.iterations.iter().fold(Time::ZERO, |sum, i| sum + i.time.swap);
    let weighted_blocks: f64 = run.iterations.iter().map(|i| i.kv_blocks as f64 * i.time.total.as_secs()).sum();
    let blocks = setup.kv_blocks as f64;
    let count = run.iterations.len().max(1) as f64;
    let peak_blocks = run.iterations.iter().map(|i| i.kv_blocks).max().unwrap_or(0);
    ServeReport {
        requests,
        duration_s: duration.as_secs(),
        ttft: Percentiles::of(served.iter().map(ttft)).unwrap_or_default(),
        tpot: Percentiles::of(served.iter().filter_map(tpot)),
        itl: Percentiles::of(run.token_gaps.iter().copied()),
        e2e: Percentiles::of(served.iter().map(|s| s.finished - s.request.arrival)).unwrap_or_default(),
        throughput: Throughput {
            requests_per_s: requests as f64 / seconds,
            output_tokens_per_s: output as f64 / seconds,
            total_tokens_per_s: (prompt + output) as f64 / seconds,
            output_tokens_per_s_per_gpu: output as f64 / seconds / gpus,
            total_tokens_per_s_per_gpu: (prompt + output) as f64 / seconds / gpus,
        },
        goodput: Goodput {
            slo_ttft_ms: slo.ttft.map(Time::as_ms),
            slo_tpot_ms: slo.tpot.map(Time::as_ms),
            met,
            met_share: met as f64 / requests.max(1) as f64,
            requests_per_s: met as f64 / seconds,
        },
        kv_cache: KvUse {
            blocks: setup.kv_blocks,
            peak_blocks,
            peak_use: peak_blocks as f64 / blocks,
            mean_use: weighted_blocks / busy.as_secs().max(f64::MIN_POSITIVE) / blocks,
            preemptions: served.iter().map(|s| u64::from(s.preemptions)).sum(),
            preempted_requests: served.iter().filter(|s| s.preemptions > 0).count() as u64,
            recomputed_tokens: run.recomputed,
            swapped_blocks: run.swapped_blocks,
            swap_share: swap.as_secs() / busy.as_secs().max(f64::MIN_POSITIVE),
        },
        iterations: IterationStats {
            count: run.iterations.len() as u64,
            simulated: counts.0,
            reused: counts.1,
            mean_ms: busy.as_ms() / count,
            comm_share: comm.as_secs() / busy.as_secs().max(f64::MIN_POSITIVE),
            mean_tokens: run.iterations.iter().map(|i| (i.prefill_tokens + i.decodes) as f64).sum::<f64>() / count,
            mean_decodes: run.iterations.iter().map(|i| i.decodes as f64).sum::<f64>() / count,
        },
        cost: per_gpu.map(|per_gpu| {
            let query = per_gpu.query(setup.gpus(), output, seconds);
            Cost {
                usd_per_gpu_hour: per_gpu.usd_per_hour,
                usd_per_million_output_tokens: query.usd_per_million_tokens,
                joules_per_output_token: query.joules_per_token,
            }
        }),
        timeline: timeline(run, duration, blocks),
        setup,
        split: None,
    }
}

/// The run cut into equal windows of time.
fn timeline(run: &ServiceRun, duration: Time, blocks: f64) -> Vec<Window> {
    let windows = WINDOWS.min(run.iterations.len()).max(1);
    let width = (duration.0 / windows as u64).max(1);
    let mut out: Vec<Window> = (0..windows as u64)
        .map(|w| Window {
            start_s: Time(w * width).as_secs(),
            end_s: if w + 1 == windows as u64 { duration.as_secs() } else { Time((w + 1) * width).as_secs() },
            kv_use_peak: 0.0,
            running_peak: 0,
            waiting_peak: 0,
            preemptions: 0,
            output_tokens: 0,
            iterations: 0,
        })
        .collect();
    for i in &run.iterations {
        let window = &mut out[((i.start.0 / width) as usize).min(windows - 1)];
        window.kv_use_peak = window.kv_use_peak.max(i.kv_blocks as f64 / blocks);
        window.running_peak = window.running_peak.max(i.running);
        window.waiting_peak = window.waiting_peak.max(i.waiting);
        window.preemptions += u64::from(i.preempted);
        window.output_tokens += u64::from(i.sampled);
        window.iterations += 1;
    }
    out
}

/// Each request's latencies, in request order.
pub fn request_rows(run: &ServiceRun, slo: Slo) -> Vec<RequestRow> {
    run.served
        .iter()
        .enumerate()
        .map(|(id, s)| RequestRow {
            id,
            arrival_s: s.request.arrival.as_secs(),
            prompt: s.request.prompt,
            output: s.request.output,
            ttft_ms: ttft(s).as_ms(),
            tpot_ms: tpot(s).map(Time::as_ms),
            e2e_ms: (s.finished - s.request.arrival).as_ms(),
            preemptions: s.preemptions,
            met_slo: slo.met(s),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::IterationRecord;
    use crate::serve::iteration::IterationTime;
    use crate::serve::requests::Request;

    fn ms(ms: u64) -> Time {
        Time::from_us(ms * 1000)
    }

    fn setup() -> Setup {
        Setup {
            model: "m".into(),
            topology: "t".into(),
            gpu: "g".into(),
            host: "h".into(),
            transport: "nvswitch".into(),
            tp: 2,
            stack: "nccl-graph".into(),
            eager_stack: None,
            arrivals: "listed".into(),
            prompt: "10".into(),
            output: "-".into(),
            seed: 0,
            max_num_seqs: 8,
            max_num_batched_tokens: 64,
            block_size: 16,
            kv_blocks: 100,
            kv_gb_per_gpu: 1.0,
            step_overhead_ms: 0.0,
            preemption: "recompute".into(),
            prefill_tp: None,
            max_concurrency: None,
        }
    }

    /// Request i arrives at i s, has its first token 100(i+1) ms later and
    /// then 11 more tokens 10(i+1) ms apart.
    fn run(count: u64) -> ServiceRun {
        let served: Vec<Served> = (0..count)
            .map(|i| {
                let arrival = ms(1000 * i);
                let first_token = arrival + ms(100 * (i + 1));
                Served {
                    request: Request { arrival, prompt: 10, output: 12 },
                    first_token,
                    finished: first_token + ms(110 * (i + 1)),
                    preemptions: u32::from(i == 0),
                }
            })
            .collect();
        let iteration = |start: u64, blocks: u64| IterationRecord {
            start: ms(start),
            time: IterationTime { total: ms(100), comm: ms(25), swap: ms(10) },
            prefill_tokens: 10,
            decodes: 2,
            kv_blocks: blocks,
            running: 2,
            waiting: 1,
            preempted: 0,
            sampled: 3,
        };
        ServiceRun {
            served,
            iterations: vec![iteration(0, 10), iteration(100, 30)],
            token_gaps: vec![ms(10), ms(30)],
            recomputed: 7,
            swapped_blocks: 3,
        }
    }

    #[test]
    fn latencies_throughput_and_goodput_come_from_the_requests_served() {
        let slo = Slo { ttft: Some(ms(500)), tpot: Some(ms(30)) };
        let report = report(&run(10), setup(), slo, None, (1, 1));
        // First tokens after 100..1000 ms: nearest rank.
        assert_eq!((report.ttft.p50_ms, report.ttft.p90_ms, report.ttft.p99_ms, report.ttft.mean_ms), (500.0, 900.0, 1000.0, 550.0));
        let tpot = report.tpot.unwrap();
        assert_eq!((tpot.p50_ms, tpot.p99_ms), (50.0, 100.0), "110(i+1) ms over 11 gaps");
        // The last request finishes at 9 s + 1 s + 1.1 s.
        assert!((report.duration_s - 11.1).abs() < 1e-12);
        assert!((report.throughput.requests_per_s - 10.0 / 11.1).abs() < 1e-12);
        assert!((report.throughput.total_tokens_per_s_per_gpu - 220.0 / 11.1 / 2.0).abs() < 1e-12);
        // TTFT within 500 ms: the first five, whose TPOT (10..50 ms) the
        // first three meet.
        assert_eq!(report.goodput.met, 3);
        assert!((report.goodput.requests_per_s - 3.0 / 11.1).abs() < 1e-12);
        let kv = report.kv_cache;
        assert_eq!((kv.peak_blocks, kv.peak_use, kv.mean_use, kv.preemptions, kv.recomputed_tokens), (30, 0.3, 0.2, 1, 7));
        assert_eq!(kv.swapped_blocks, 3);
        assert!((kv.swap_share - 0.1).abs() < 1e-12, "{}", kv.swap_share);
        assert_eq!((report.iterations.count, report.iterations.comm_share, report.iterations.mean_tokens), (2, 0.25, 12.0));
        let windows = &report.timeline;
        assert_eq!(windows.len(), 2, "no more windows than iterations");
        assert_eq!(windows.iter().map(|w| w.output_tokens).sum::<u64>(), 6);
        assert_eq!(windows[0].iterations, 2, "both start in the first half");
        assert!((windows[1].end_s - report.duration_s).abs() < 1e-12);
    }

    #[test]
    fn a_split_servers_moves_are_shares_of_each_requests_latency_and_its_gpus_all_count() {
        use crate::serve::split::{Handoff, PrefillRun, SplitRun};
        // Request i's first token 100(i+1) ms after it arrives; its move
        // takes 10 ms of that, after a wait of i ms.
        let run = run(10);
        let handoffs = run
            .served
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let sent = s.first_token - ms(20);
                Handoff { prefilled: sent - ms(i as u64), sent, arrived: sent + ms(10), bytes: 1000 }
            })
            .collect();
        let prefill = PrefillRun { iterations: run.iterations[..1].to_vec(), recomputed: 0, swapped_blocks: 0 };
        let split = SplitRun { run, prefill, handoffs };
        let group = |tp| GroupSetup { tp, gpus: "0".into(), max_num_batched_tokens: 64, kv_blocks: 100, kv_gb_per_gpu: 1.0 };
        let links = MoveLinks { transport: "shm".into(), busiest: None };
        let report = split_report(&split, SplitGroups { prefill: group(1), decode: group(2) }, links);
        let moves = &report.kv_move;
        assert_eq!((moves.bytes, moves.move_ms.p50_ms, moves.wait_ms.p99_ms), (10_000, 10.0, 9.0));
        // 10 ms of TTFTs of 100..1000 ms: nearest rank.
        assert!((moves.ttft_share_p50 - 10.0 / 600.0).abs() < 1e-12 && (moves.ttft_share_p99 - 0.1).abs() < 1e-12, "{moves:?}");
        assert!(moves.e2e_share_p99 < moves.ttft_share_p99);
        assert_eq!((report.prefill.iterations, report.decode.iterations, report.decode.kv_peak_use), (1, 2, 0.3));
        assert!((report.prefill.busy_share - 0.1 / 11.1).abs() < 1e-12, "100 ms of the 11.1 s run");
        // Per GPU, both groups' three GPUs.
        let mut setup = setup();
        setup.prefill_tp = Some(1);
        let whole = super::report(&split.run, setup, Slo::default(), None, (0, 0));
        assert!((whole.throughput.total_tokens_per_s_per_gpu * 3.0 - whole.throughput.total_tokens_per_s).abs() < 1e-9);
    }

    #[test]
    fn without_objectives_every_request_counts_and_cost_is_per_output_token() {
        let per_gpu = PerGpu { usd_per_hour: 2.0, watts: 500.0, server_usd: 1.0 };
        let report = report(&run(4), setup(), Slo::default(), Some(per_gpu), (0, 0));
        assert_eq!(report.goodput.met, 4);
        let cost = report.cost.unwrap();
        // 2 GPUs x 2 $/h for 3 + 0.4 + 0.44 s, over 48 output tokens.
        let seconds = 3.84;
        assert!((cost.usd_per_million_output_tokens.unwrap() - 4.0 / 3600.0 * seconds / 48.0 * 1e6).abs() < 1e-9);
        assert!((cost.joules_per_output_token.unwrap() - 1000.0 * seconds / 48.0).abs() < 1e-9);
        let rows = request_rows(&run(4), Slo { ttft: Some(ms(200)), tpot: None });
        assert_eq!(rows.iter().map(|r| r.met_slo).collect::<Vec<_>>(), [true, true, false, false]);
        assert_eq!((rows[1].ttft_ms, rows[1].tpot_ms, rows[1].e2e_ms), (200.0, Some(20.0), 420.0));
    }
}
