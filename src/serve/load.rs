//! A service at several loads. Owns setting an experiment's first mode up
//! to serve (`Server`: one group, or split into a prefill and a decode
//! group, each with its KV cache, its engine and the source of its
//! iteration times), what a service is apart from its rate (`Load`), what
//! one rate amounts to (`LoadPoint`: the columns of `icsim serve --rates`
//! and of a serving sweep's rows) and the knee: the highest of rising rates
//! that meets the objectives, every lower rate meeting them too. Used by
//! the `serve` command and by sweeps with a `[serve]` table; draws nothing.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::config::hardware::GpuModel;
use crate::stack::Stack;
use crate::sweep::cost::PerGpu;
use crate::topology::NodeId;
use crate::transport::{self, Mode};
use crate::units::{Bytes, Time};
use crate::workload::experiment::{self, Experiment, ModeRun};
use crate::workload::tp::TensorParallel;

use super::groups::{self, GroupError, PlanError, Role, ServingGroup, SplitPlan};
use super::handoff::TopologyMoves;
use super::iteration::{DecodeGraphs, IterationTimes};
use super::requests::{self, Arrivals, Lengths, Request};
use super::results::{self, MoveLinks, ServeReport, Setup, Slo, SplitGroups};
use super::scheduler::{Limits, Preemption};
use super::split::{self, Sources, SplitEngine};
use super::{Engine, KvCapacity, ServeError, ServiceRun};

/// Why a service cannot be set up or served.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// A split's GPUs that cannot be.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A split's group that cannot serve on its GPUs.
    #[error(transparent)]
    Group(#[from] GroupError),
}

impl From<requests::RequestError> for LoadError {
    fn from(error: requests::RequestError) -> LoadError {
        LoadError::Serve(error.into())
    }
}

/// How the engine runs, apart from what the GPUs' memory decides.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// Most sequences running at once, and tokens an iteration computes at
    /// most; None: what `vllm serve` sets on the GPU (`EngineSettings::on`).
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    pub block_size: u64,
    pub gpu_memory_utilization: f64,
    /// Host memory a GPU gives swapped blocks; None: preemption recomputes.
    pub swap_space: Option<Bytes>,
    /// The host's time each iteration adds before its forward.
    pub step_overhead: Time,
    /// Every iteration launched by the mode's stack; false: under a graph
    /// stack only iterations of decodes alone replay the graph, the others
    /// launched by its eager counterpart, as engines run.
    pub one_stack: bool,
    /// How iterations of decodes alone replay the engine's CUDA graphs.
    pub graphs: DecodeGraphs,
}

/// `vllm serve`'s batch limits on a GPU of this much memory and name, as
/// vLLM's engine arguments set them when none are given (`EngineArgs`'
/// defaults for its OpenAI server, from vLLM's pull requests 12369 and
/// 17885, checked by its `test_defaults_with_usage_context`): a GPU of at
/// least 70 GiB that is not an A100 runs up to 1024 sequences and 8192
/// tokens an iteration, any other 256 and 2048.
pub fn vllm_batch_limits(gpu: &GpuModel) -> (u64, u64) {
    const LARGE: Bytes = Bytes(70 << 30);
    if gpu.memory >= LARGE && !gpu.name.to_lowercase().contains("a100") { (1024, 8192) } else { (256, 2048) }
}

impl EngineSettings {
    /// vLLM's defaults (its V1 engine: the batch limits `vllm serve` sets on
    /// the GPU, blocks of 16, 90 % of the memory), recompute, no host time
    /// between iterations.
    pub const DEFAULT: EngineSettings = EngineSettings {
        max_num_seqs: None,
        max_num_batched_tokens: None,
        block_size: 16,
        gpu_memory_utilization: 0.9,
        swap_space: None,
        step_overhead: Time::ZERO,
        one_stack: false,
        graphs: DecodeGraphs::NONE,
    };

    /// These settings on `gpu`: the batch limits not given take what `vllm
    /// serve` sets there.
    pub fn on(&self, gpu: &GpuModel) -> EngineSettings {
        let (seqs, tokens) = vllm_batch_limits(gpu);
        EngineSettings {
            max_num_seqs: Some(self.max_num_seqs.unwrap_or(seqs)),
            max_num_batched_tokens: Some(self.max_num_batched_tokens.unwrap_or(tokens)),
            ..self.clone()
        }
    }

    /// The batch limits of settings `on` a GPU: sequences, tokens.
    fn batch(&self) -> (u64, u64) {
        const ON_A_GPU: &str = "engine settings are put on their GPU (EngineSettings::on) before an engine is built";
        (self.max_num_seqs.expect(ON_A_GPU), self.max_num_batched_tokens.expect(ON_A_GPU))
    }

    /// The stack that launches the iterations that are not decodes alone
    /// where it is not `stack`: a graph stack's eager counterpart, unless
    /// one stack runs them all.
    pub fn eager_stack(&self, stack: Stack) -> Option<Stack> {
        (!self.one_stack && stack.in_graph()).then(|| stack.eager_counterpart())
    }
}

impl EngineSettings {
    /// The scheduler's limits with a token budget of `budget` over the
    /// cache `kv`.
    pub fn limits(&self, budget: u64, kv: KvCapacity) -> Limits {
        let block_bytes = self.block_size * kv.bytes_per_token;
        Limits {
            max_num_seqs: self.batch().0,
            max_num_batched_tokens: budget,
            block_size: self.block_size,
            kv_blocks: kv.blocks,
            preemption: match self.swap_space {
                Some(space) => Preemption::Swap { host_blocks: space.0 / block_bytes },
                None => Preemption::Recompute,
            },
        }
    }

    /// An engine of `tp` GPUs with a budget of `budget` tokens over the
    /// cache `kv`, serving requests of at most `max_model_len` tokens.
    pub fn engine(&self, tp: u32, budget: u64, kv: KvCapacity, max_model_len: u64) -> Engine {
        Engine { limits: self.limits(budget, kv), tp: u64::from(tp), max_model_len, step_overhead: self.step_overhead }
    }
}

/// What is served and how, for a report: `experiment`'s model on its
/// first mode's topology and `gpu`, the serving group's `tp`, `transport`
/// and cache `kv`, `load` arriving as `arrivals`.
pub fn describe(
    experiment: &Experiment,
    gpu: &GpuModel,
    settings: &EngineSettings,
    (tp, transport, kv): (u32, String, KvCapacity),
    load: &Load,
    arrivals: &Arrivals,
) -> Setup {
    let run = &experiment.modes[0];
    let (prompt, output) = load.describe();
    Setup {
        model: experiment.llm.name.clone(),
        topology: run.topology.name.clone(),
        gpu: gpu.name.clone(),
        host: run.topology.host.clone(),
        transport,
        tp,
        stack: run.stack.to_string(),
        eager_stack: settings.eager_stack(run.stack).map(|stack| stack.to_string()),
        arrivals: describe_arrivals(arrivals, load.max_concurrency),
        max_concurrency: load.max_concurrency,
        prompt,
        output,
        seed: load.seed,
        max_num_seqs: settings.batch().0,
        max_num_batched_tokens: settings.batch().1,
        block_size: settings.block_size,
        kv_blocks: kv.blocks,
        kv_gb_per_gpu: kv.bytes_per_gpu.as_f64() / 1e9,
        step_overhead_ms: settings.step_overhead.as_ms(),
        preemption: match settings.swap_space {
            None => "recompute".into(),
            Some(space) => format!("swap, {space} of host memory a GPU"),
        },
        prefill_tp: None,
    }
}

/// An experiment's first mode set up to serve: one group on its first TP
/// GPUs, or split into a prefill and a decode group.
pub struct Server<'e> {
    pub experiment: &'e Experiment,
    pub run: &'e ModeRun,
    pub gpu: &'e GpuModel,
    pub settings: EngineSettings,
    /// The group that generates the tokens: the only one, or a split's
    /// decode group.
    decode: ServingGroup<'e>,
    /// A split's prefill group.
    prefill: Option<Box<ServingGroup<'e>>>,
}

/// What a report says besides what was served: the load and how it
/// arrived, the objectives, and what a GPU-hour costs.
#[derive(Debug, Clone, Copy)]
pub struct Terms<'a> {
    pub load: &'a Load,
    pub arrivals: &'a Arrivals,
    pub slo: Slo,
    pub per_gpu: Option<PerGpu>,
}

impl<'e> Server<'e> {
    /// The engine of `settings` on one group: `experiment`'s first mode.
    pub fn new(experiment: &'e Experiment, settings: &EngineSettings) -> Result<Server<'e>, LoadError> {
        let (run, gpu, setup) = Server::parts(experiment)?;
        let settings = &settings.on(gpu);
        let kv = KvCapacity::of(&experiment.llm, gpu, run.tp, settings.gpu_memory_utilization, settings.block_size)?;
        let ranks = run.topology.gpus()[..run.tp as usize].to_vec();
        let eager = groups::eager_setup(&setup, settings)
            .map_err(|error| experiment.source.invalid(Some(run.index), "stack", error.to_string()))?;
        let (gpus, budget) = ((0..run.tp as usize).collect(), settings.batch().1);
        let group = ServingGroup { tp: run.tp, gpus, ranks, setup, eager, kv, budget };
        Ok(Server { experiment, run, gpu, settings: settings.clone(), decode: group, prefill: None })
    }

    /// The engine of `settings` on `experiment`'s first mode split as
    /// `plan` says, each group's forward run as the mode's is but on its
    /// own GPUs.
    pub fn split(experiment: &'e Experiment, settings: &EngineSettings, plan: &SplitPlan) -> Result<Server<'e>, LoadError> {
        let (run, gpu, setup) = Server::parts(experiment)?;
        let settings = &settings.on(gpu);
        let all = run.topology.gpus();
        let (prefill_gpus, decode_gpus) = plan.groups(all.len())?;
        let prefill_budget = plan.prefill_max_num_batched_tokens.unwrap_or(settings.batch().1);
        let group = |role, setup, gpus: Vec<usize>, budget| {
            let tp = gpus.len() as u32;
            ServingGroup::on(setup, (gpus, all), (&experiment.llm, gpu), settings, budget).map_err(|failure| GroupError {
                role,
                tp,
                failure,
            })
        };
        let prefill = group(Role::Prefill, setup.clone(), prefill_gpus, prefill_budget)?;
        let decode = group(Role::Decode, setup, decode_gpus, settings.batch().1)?;
        Ok(Server { experiment, run, gpu, settings: settings.clone(), decode, prefill: Some(Box::new(prefill)) })
    }

    /// `experiment`'s first mode, its GPU and its forward.
    fn parts(experiment: &'e Experiment) -> Result<(&'e ModeRun, &'e GpuModel, TensorParallel<'e>), LoadError> {
        let run = &experiment.modes[0];
        let setup = experiment::prepare_mode(experiment, run)?;
        let gpu =
            run.hardware.gpu(&run.topology.gpu_model).map_err(|message| experiment.source.invalid(Some(run.index), "gpu", message))?;
        Ok((run, gpu, setup))
    }

    /// The TP degrees of the groups: the decode group's (or the only
    /// one's), and the prefill group's of a split.
    pub fn degrees(&self) -> (u32, Option<u32>) {
        (self.decode.tp, self.prefill.as_ref().map(|prefill| prefill.tp))
    }

    /// The groups of a split, as set up: prefill, then decode; None for one
    /// group.
    pub fn split_groups(&self) -> Option<SplitGroups> {
        self.prefill.as_ref().map(|prefill| SplitGroups { prefill: prefill.described(), decode: self.decode.described() })
    }

    /// Serves `requests` from empty caches of iteration times, calling
    /// `progress` once a finished request, with the iterations simulated
    /// and reused: the report on the `terms`, and the requests as served.
    pub fn serve(&self, requests: &[Request], terms: Terms, progress: &dyn Fn()) -> Result<(ServeReport, ServiceRun), LoadError> {
        let (topo, hardware) = (&self.run.topology, &self.run.hardware);
        let setup = self.setup(terms.load, terms.arrivals);
        let engine = |group: &ServingGroup| group.engine(&self.settings, self.experiment.llm.context_length);
        let decode = &self.decode;
        let mut decode_times = decode.iteration_times(self.run, &self.settings);
        let Some(prefill) = &self.prefill else {
            let run = super::simulate(requests, terms.load.max_concurrency, engine(decode), &mut decode_times, progress)?;
            return Ok((results::report(&run, setup, terms.slo, terms.per_gpu, decode_times.counts()), run));
        };
        let mut prefill_times = prefill.iteration_times(self.run, &self.settings);
        let mut moves = TopologyMoves::new(topo, hardware, &self.experiment.llm, (&prefill.ranks, &decode.ranks), self.run.mode)?;
        if let Some(background) = prefill.background(&self.experiment.llm, &mut prefill_times, (topo, hardware))? {
            moves = moves.with_background(background)?;
        }
        if let Some(traffic) = decode.decode_traffic(&self.experiment.llm) {
            moves = moves.with_decode_traffic(traffic);
        }
        let sources = Sources { prefill: &mut prefill_times, decode: &mut decode_times, moves: &mut moves };
        let engines = SplitEngine { prefill: engine(prefill), decode: engine(decode) };
        let served = split::simulate(requests, terms.load.max_concurrency, engines, sources, progress)?;
        let mut report = results::report(&served.run, setup, terms.slo, terms.per_gpu, decode_times.counts());
        let links = MoveLinks { transport: moves.transport(), busiest: moves.busiest_link() };
        report.split = Some(results::split_report(&served, self.split_groups().expect("a split server"), links));
        Ok((report, served.run))
    }

    /// What is served and how, for a report of `load` arriving as
    /// `arrivals`: a split server's setup is its decode group's, with the
    /// prefill group's TP.
    pub fn setup(&self, load: &Load, arrivals: &Arrivals) -> Setup {
        let (tp, prefill_tp) = self.degrees();
        let mut setup = describe(self.experiment, self.gpu, &self.settings, (tp, self.transport(), self.decode.kv), load, arrivals);
        setup.prefill_tp = prefill_tp;
        setup
    }

    /// The mode the (decode group's) collectives run in: what `auto` picks
    /// between its first two GPUs, said as such; none at TP=1.
    pub fn transport(&self) -> String {
        transport_of(self.run, &self.decode.ranks)
    }
}

/// The mode the collectives of a group on `gpus` of `run`'s topology run
/// in: what `auto` picks between its first two GPUs, said as such; none
/// for one GPU.
pub fn transport_of(run: &ModeRun, gpus: &[NodeId]) -> String {
    match (run.mode, gpus) {
        _ if gpus.len() == 1 => "none at TP=1".into(),
        (Mode::Auto, [a, b, ..]) => match transport::connect(&run.topology, *a, *b, Mode::Auto) {
            Ok(connection) => format!("{} (auto)", connection.mode(&run.topology)),
            Err(_) => Mode::Auto.to_string(),
        },
        (mode, _) => mode.to_string(),
    }
}

/// What a service is apart from its rate: how many requests, how long,
/// how bursty, drawn with which seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    pub count: usize,
    pub lengths: Lengths,
    pub burstiness: f64,
    pub seed: u64,
    /// Most requests in flight at once (`vllm bench serve
    /// --max-concurrency`): one arriving while they are is sent when one
    /// finishes, and its latency counts from then.
    pub max_concurrency: Option<u64>,
}

impl Load {
    /// When this load's requests arrive: at `rate` a second, or, with no
    /// rate under a client cap, all at once.
    pub fn arrivals(&self, rate: Option<f64>) -> Result<Arrivals, requests::RequestError> {
        match (rate, self.max_concurrency) {
            (Some(rate), _) => Arrivals::rate(rate, self.burstiness),
            (None, Some(_)) => Ok(Arrivals::all_at_once(self.count)),
            (None, None) => Err(requests::RequestError::Invalid {
                key: "--rate",
                message: "none given: give a rate, or a client cap to send every request at once under it".into(),
            }),
        }
    }

    /// This load's requests, arriving as `arrivals` says.
    pub fn requests(&self, arrivals: &Arrivals) -> Vec<Request> {
        requests::generate(arrivals, &self.lengths, self.count, self.seed)
    }
}

/// Arrivals in words, with the clients' cap: "Poisson at 6/s, at most 8 in flight".
pub fn describe_arrivals(arrivals: &Arrivals, max_concurrency: Option<u64>) -> String {
    let arriving = match arrivals {
        Arrivals::Rate { per_second, burstiness } => return describe_rates(&[*per_second], *burstiness, max_concurrency),
        Arrivals::At(times) if times.iter().all(|&t| t == Time::ZERO) => "all at once".into(),
        Arrivals::At(_) => "at listed times".into(),
    };
    with_cap(arriving, max_concurrency)
}

/// Arrivals at each of `rates` in words, with the clients' cap: "Poisson at
/// 1, 2/s, at most 8 in flight".
pub fn describe_rates(rates: &[f64], burstiness: f64, max_concurrency: Option<u64>) -> String {
    let listed = rates.iter().map(f64::to_string).collect::<Vec<_>>().join(", ");
    let arriving =
        if burstiness == 1.0 { format!("Poisson at {listed}/s") } else { format!("gamma at {listed}/s, burstiness {burstiness}") };
    with_cap(arriving, max_concurrency)
}

/// Arrivals in words under each of several caps: "all at once, at most 1,
/// 4, 16 in flight".
pub fn describe_caps(arrivals: &Arrivals, caps: &[u64]) -> String {
    format!("{}, at most {} in flight", describe_arrivals(arrivals, None), caps.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
}

fn with_cap(arriving: String, max_concurrency: Option<u64>) -> String {
    match max_concurrency {
        Some(cap) => format!("{arriving}, at most {cap} in flight"),
        None => arriving,
    }
}

impl Load {
    /// The prompts' and outputs' lengths in words.
    pub fn describe(&self) -> (String, String) {
        match &self.lengths {
            Lengths::Drawn { prompt, output } => (prompt.to_string(), output.to_string()),
            Lengths::Listed(rows) => {
                let mean = |part: fn(&(u64, u64)) -> u64| rows.iter().map(part).sum::<u64>() as f64 / rows.len() as f64;
                (format!("from the trace, mean {:.0}", mean(|r| r.0)), format!("from the trace, mean {:.0}", mean(|r| r.1)))
            }
        }
    }
}

/// What a service amounts to at one offered rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPoint {
    /// Offered, requests a second; none where every request arrived at
    /// once, a client cap sending them.
    pub rate: Option<f64>,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: Option<f64>,
    pub tpot_p90_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    pub e2e_p50_ms: f64,
    pub e2e_p90_ms: f64,
    pub e2e_p99_ms: f64,
    /// Served, from the first arrival to the last token.
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub goodput_requests_per_s: f64,
    pub preemptions: u64,
    pub comm_share: f64,
    pub usd_per_hour: Option<f64>,
    pub usd_per_million_output_tokens: Option<f64>,
    /// The offered rate over what the GPUs serving it cost an hour.
    pub rate_per_usd_hour: Option<f64>,
    /// p99 TTFT and p50 TPOT within the objectives given; None without any.
    pub meets_slo: Option<bool>,
}

impl LoadPoint {
    /// Of `report`, a service offered `rate` requests a second, judged by `slo`.
    pub fn of(rate: Option<f64>, report: &ServeReport, slo: Slo) -> LoadPoint {
        let usd_per_hour = report.cost.map(|c| c.usd_per_gpu_hour * f64::from(report.setup.gpus()));
        let tpot = report.tpot;
        let within = |limit: Option<Time>, value: Option<f64>| limit.is_none_or(|limit| value.is_none_or(|v| v <= limit.as_ms()));
        LoadPoint {
            rate,
            ttft_p50_ms: report.ttft.p50_ms,
            ttft_p90_ms: report.ttft.p90_ms,
            ttft_p99_ms: report.ttft.p99_ms,
            tpot_p50_ms: tpot.map(|t| t.p50_ms),
            tpot_p90_ms: tpot.map(|t| t.p90_ms),
            tpot_p99_ms: tpot.map(|t| t.p99_ms),
            e2e_p50_ms: report.e2e.p50_ms,
            e2e_p90_ms: report.e2e.p90_ms,
            e2e_p99_ms: report.e2e.p99_ms,
            requests_per_s: report.throughput.requests_per_s,
            output_tokens_per_s: report.throughput.output_tokens_per_s,
            goodput_requests_per_s: report.goodput.requests_per_s,
            preemptions: report.kv_cache.preemptions,
            comm_share: report.iterations.comm_share,
            usd_per_hour,
            usd_per_million_output_tokens: report.cost.and_then(|c| c.usd_per_million_output_tokens),
            rate_per_usd_hour: rate.zip(usd_per_hour.filter(|usd| *usd > 0.0)).map(|(rate, usd)| rate / usd),
            meets_slo: (slo.ttft.is_some() || slo.tpot.is_some())
                .then(|| within(slo.ttft, Some(report.ttft.p99_ms)) && within(slo.tpot, tpot.map(|t| t.p50_ms))),
        }
    }
}

/// The knee of rates in rising order, each with whether it meets the
/// objectives: the position of the last of the leading run that meets
/// them (the highest rate below the first that fails); None when the
/// lowest already fails.
pub fn knee(meets: impl IntoIterator<Item = bool>) -> Option<usize> {
    meets.into_iter().take_while(|&met| met).count().checked_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::experiment::{RawExperiment, RawMode, RawQuery, Source};
    use crate::serve::requests::Length;

    #[test]
    fn unset_batch_limits_take_what_vllm_serve_sets_on_the_gpu() {
        let model = crate::config::hardware::HardwareModel::base();
        let limits = |gpu: &str| vllm_batch_limits(model.gpu(gpu).unwrap());
        assert_eq!(limits("h200"), (1024, 8192), "141 GB");
        assert_eq!(limits("rtx-pro-6000"), (1024, 8192), "96 GB");
        assert_eq!(limits("a100"), (256, 2048), "80 GB, but an A100");
        assert_eq!(limits("l40s"), (256, 2048), "48 GB");
        let given = EngineSettings { max_num_seqs: Some(64), ..EngineSettings::DEFAULT }.on(model.gpu("h200").unwrap());
        assert_eq!((given.max_num_seqs, given.max_num_batched_tokens), (Some(64), Some(8192)), "a limit given stays");
    }

    #[test]
    fn the_knee_is_the_last_rate_of_the_leading_run_that_meets_the_objectives() {
        assert_eq!(knee([true, true, true, false, true]), Some(2), "a later rate meeting them again is past the knee");
        assert_eq!(knee([true, true]), Some(1));
        assert_eq!(knee([false, true]), None);
        assert_eq!(knee([]), None);
    }

    fn experiment() -> Experiment {
        let raw = RawExperiment {
            model: "llama-3.1-8b".into(),
            tp: Some(2),
            topology: Some("hgx-h200".into()),
            query: RawQuery { prompt: 1, output: 1, batch: 1 },
            modes: vec![RawMode { transport: "nvswitch".into(), ..RawMode::default() }],
            ..RawExperiment::default()
        };
        Experiment::resolve(raw, Source::CommandLine).unwrap()
    }

    #[test]
    fn more_load_raises_latency_and_the_objectives_find_the_knee() {
        let experiment = experiment();
        let server = Server::new(&experiment, &EngineSettings::DEFAULT).unwrap();
        assert_eq!(server.transport(), "nvswitch");
        let load = Load {
            count: 200,
            lengths: Lengths::Drawn { prompt: Length::Fixed(2000), output: Length::Fixed(100) },
            burstiness: 1.0,
            seed: 1,
            max_concurrency: None,
        };
        let slo = Slo { ttft: Some(Time::from_us(1_000_000)), tpot: None };
        let points: Vec<LoadPoint> = [2.0, 200.0]
            .into_iter()
            .map(|rate| {
                let arrivals = Arrivals::rate(rate, 1.0).unwrap();
                let terms = Terms { load: &load, arrivals: &arrivals, slo, per_gpu: None };
                let (report, _) = server.serve(&load.requests(&arrivals), terms, &|| {}).unwrap();
                LoadPoint::of(Some(rate), &report, slo)
            })
            .collect();
        assert!(points[1].ttft_p99_ms > 10.0 * points[0].ttft_p99_ms, "{points:?}");
        assert!(points[1].requests_per_s < 200.0, "a saturated service serves less than it is offered");
        assert_eq!(points.iter().map(|p| p.meets_slo).collect::<Vec<_>>(), [Some(true), Some(false)]);
        assert_eq!(knee(points.iter().map(|p| p.meets_slo == Some(true))), Some(0));
        assert_eq!(points[0].rate_per_usd_hour, None, "no cost, no rate per dollar");
    }
}
