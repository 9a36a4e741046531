//! Sweeps whose workload is a service: the `[serve]` table (how many
//! requests, their lengths, the engine's limits, objectives for goodput,
//! a rate or a client cap), the `serve.*` keys a point may change, and one
//! point's row: the base experiment with the point's changes serving the
//! requests at the point's rate, or all at once under its cap
//! (`serve::load`), priced by the sweep's cost model. The
//! highest rate meeting an objective is searched on a grid: `serve.rate` is
//! an axis like any other, so the rates of every configuration run in
//! parallel and in shards as other points do, and the summary reads each
//! configuration's knee off its rows.

use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::change::{Change, Key, ServeKey, Value as Changed};
use super::cost::{Bill, CostModel, resolve_path};
use super::row::{Outcome, ServiceSetup};
use crate::config::{ConfigError, ConfigResult, check_range};
use crate::serve::groups::SplitPlan;
use crate::serve::load::{EngineSettings, Load, LoadError, LoadPoint, Server, Terms};
use crate::serve::requests::{self, Length, Lengths, TimeUnit};
use crate::serve::results::Slo;
use crate::units::{Bytes, Time};
use crate::workload::experiment::Experiment;

/// The column of the offered rate.
pub const RATE: &str = "serve.rate";
/// The column of the clients' cap.
pub const CAP: &str = "serve.max_concurrency";

/// The load a serving sweep's knee is read along: its rates, or else its
/// clients' caps; None where it varies neither.
pub fn load_axis(columns: &[String]) -> Option<&'static str> {
    [RATE, CAP].into_iter().find(|load| columns.iter().any(|c| c == load))
}

/// The knee along `load` in words: "the highest rate", "the most clients".
pub fn knee_words(load: &str) -> (&'static str, &'static str) {
    if load == CAP { ("the most clients", "every smaller cap") } else { ("the highest rate", "every lower rate") }
}

/// `[serve]` as written; what is left out is `icsim serve`'s default.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawService {
    /// Requests a second, unless `serve.rate` is an axis or a point's key.
    pub rate: Option<f64>,
    pub requests: Option<u64>,
    /// `N`, `LOW..HIGH` or `lognormal:MEAN,CV` tokens.
    pub prompt: Option<String>,
    pub output: Option<String>,
    /// A trace file (relative to the sweep file) whose requests' prompt
    /// and output lengths are served in order, in place of `prompt` and
    /// `output`; a point's rate or cap decides when they arrive.
    pub trace: Option<String>,
    pub burstiness: Option<f64>,
    pub seed: Option<u64>,
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    /// Most requests in flight at once (`icsim serve --max-concurrency`).
    pub max_concurrency: Option<u64>,
    pub block_size: Option<u64>,
    pub gpu_memory_utilization: Option<f64>,
    /// Host memory a GPU gives swapped blocks (`"4GiB"`); absent: recompute.
    pub swap_space: Option<String>,
    /// Every iteration launched by the experiment's stack (`icsim serve
    /// --one-stack`); absent or false: a graph stack's prompt chunks and
    /// mixed iterations launched by its eager counterpart.
    pub one_stack: Option<bool>,
    /// Objectives a request must meet to count towards goodput (`"2s"`).
    pub slo_ttft: Option<String>,
    pub slo_tpot: Option<String>,
    /// `"P+D"`: prefill and decode groups of TP=P and TP=D on the first
    /// P + D GPUs; `"none"` (the default): one group of the base's TP.
    pub split: Option<String>,
}

/// A validated `[serve]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub rate: Option<f64>,
    pub load: Load,
    pub engine: EngineSettings,
    pub slo: Slo,
    pub split: Option<SplitPlan>,
}

/// Requests a point serves when `[serve]` does not say.
const DEFAULT_REQUESTS: u64 = 1000;

impl Service {
    /// Checks `raw`, written under `[serve]` in `path`.
    pub fn new(raw: &RawService, path: &Path) -> ConfigResult<Service> {
        let key = |name: &str| format!("serve.{name}");
        let parsed = |name: &str, text: &Option<String>, default: &str| -> ConfigResult<Length> {
            Length::from_str(text.as_deref().unwrap_or(default)).map_err(|message| ConfigError::invalid(path, key(name), message))
        };
        let time = |name: &str, text: &Option<String>| -> ConfigResult<Option<Time>> {
            text.as_deref()
                .map(|t| match Time::from_str(t) {
                    Ok(time) if time > Time::ZERO => Ok(time),
                    _ => Err(ConfigError::invalid(path, key(name), format!("{t:?}: give a time above 0, as \"2s\" or \"50ms\""))),
                })
                .transpose()
        };
        let count = |name: &str, value: Option<u64>, default: u64, max: u64| -> ConfigResult<u64> {
            let value = value.unwrap_or(default);
            check_range(path, &key(name), value as f64, 1.0..=max as f64)?;
            Ok(value)
        };
        // Left out: what `vllm serve` sets on the point's GPU.
        let limit = |name: &str, value: Option<u64>, max: u64| value.map(|value| count(name, Some(value), value, max)).transpose();
        if let Some(rate) = raw.rate {
            check_range(path, &key("rate"), rate, f64::MIN_POSITIVE..=f64::MAX)?;
        }
        let burstiness = raw.burstiness.unwrap_or(1.0);
        check_range(path, &key("burstiness"), burstiness, 0.01..=100.0)?;
        let utilization = raw.gpu_memory_utilization.unwrap_or(EngineSettings::DEFAULT.gpu_memory_utilization);
        check_range(path, &key("gpu_memory_utilization"), utilization, f64::MIN_POSITIVE..=1.0)?;
        let swap_space = raw
            .swap_space
            .as_deref()
            .map(|text| {
                Bytes::from_str(text).map_err(|e| ConfigError::invalid(path, key("swap_space"), format!("{text:?}: {e}; as \"4GiB\"")))
            })
            .transpose()?;
        let defaults = EngineSettings::DEFAULT;
        let (lengths, listed) = match &raw.trace {
            Some(name) => {
                if raw.prompt.is_some() || raw.output.is_some() {
                    return Err(ConfigError::invalid(
                        path,
                        key("trace"),
                        "the trace gives the lengths: leave out prompt and output, or the trace",
                    ));
                }
                let rows = traced_lengths(&resolve_path(name, path.parent().unwrap_or(Path::new(""))))
                    .map_err(|message| ConfigError::invalid(path, key("trace"), message))?;
                let listed = rows.len() as u64;
                (Lengths::Listed(rows), Some(listed))
            }
            None => {
                (Lengths::Drawn { prompt: parsed("prompt", &raw.prompt, "1024")?, output: parsed("output", &raw.output, "128")? }, None)
            }
        };
        Ok(Service {
            rate: raw.rate,
            load: Load {
                count: count("requests", raw.requests, listed.unwrap_or(DEFAULT_REQUESTS), 10_000_000)? as usize,
                lengths,
                burstiness,
                seed: raw.seed.unwrap_or(0),
                max_concurrency: limit("max_concurrency", raw.max_concurrency, 10_000_000)?,
            },
            engine: EngineSettings {
                max_num_seqs: limit("max_num_seqs", raw.max_num_seqs, 65_536)?,
                max_num_batched_tokens: limit("max_num_batched_tokens", raw.max_num_batched_tokens, 1_048_576)?,
                block_size: count("block_size", raw.block_size, defaults.block_size, 4096)?,
                gpu_memory_utilization: utilization,
                swap_space,
                step_overhead: defaults.step_overhead,
                one_stack: raw.one_stack.unwrap_or(defaults.one_stack),
                graphs: defaults.graphs,
            },
            slo: Slo { ttft: time("slo_ttft", &raw.slo_ttft)?, tpot: time("slo_tpot", &raw.slo_tpot)? },
            split: SplitPlan::or_none(raw.split.as_deref().unwrap_or("none"))
                .map_err(|message| ConfigError::invalid(path, key("split"), message))?,
        })
    }

    /// The service with a point's `serve.*` changes: its rate, load (the
    /// clients' cap), engine and split.
    fn changed(&self, changes: &[&Change]) -> (Option<f64>, Load, EngineSettings, Option<SplitPlan>) {
        let (mut rate, mut load, mut engine, mut split) = (self.rate, self.load.clone(), self.engine.clone(), self.split.clone());
        for change in changes {
            match (&change.key, &change.value) {
                (Key::Serve(ServeKey::Rate), Changed::Number(r)) => rate = Some(*r),
                (Key::Serve(ServeKey::MaxConcurrency), Changed::Count(n)) => load.max_concurrency = Some(*n),
                (Key::Serve(ServeKey::MaxNumSeqs), Changed::Count(n)) => engine.max_num_seqs = Some(*n),
                (Key::Serve(ServeKey::MaxNumBatchedTokens), Changed::Count(n)) => engine.max_num_batched_tokens = Some(*n),
                (Key::Serve(ServeKey::Split), Changed::Text(text)) => {
                    split = SplitPlan::or_none(text).expect("a split is checked when the sweep is read");
                }
                _ => {}
            }
        }
        (rate, load, engine, split)
    }
}

/// The (prompt, output) lengths of the requests a trace lists, or why it
/// cannot be read.
fn traced_lengths(file: &Path) -> Result<Vec<(u64, u64)>, String> {
    match requests::read_trace(file, TimeUnit::Seconds).map_err(|e| e.to_string())?.lengths {
        Lengths::Listed(rows) if !rows.is_empty() => Ok(rows),
        _ => Err(format!("trace {} lists no request", file.display())),
    }
}

/// Refuses keys that do not fit the sweep's workload: `serve.*` without a
/// `[serve]` table, a query's keys with one, and a service with neither a
/// rate nor a client cap (under which every request arrives at once).
/// `keys` are the sweep's axis and point keys with where each is written.
pub fn check_keys(service: Option<&Service>, keys: &[(String, Key)], path: &Path) -> ConfigResult<()> {
    for (at, key) in keys {
        match (key, service) {
            (Key::Serve(_), None) => {
                return Err(ConfigError::invalid(
                    path,
                    at,
                    format!("{} varies a service: add a [serve] table (its requests and engine) to sweep one", key.name()),
                ));
            }
            (Key::Prompt | Key::Output | Key::Batch, Some(_)) => {
                return Err(ConfigError::invalid(
                    path,
                    at,
                    format!("{} varies a query, and this sweep serves requests: set their lengths in [serve] (prompt, output)", key.name()),
                ));
            }
            _ => {}
        }
    }
    if service.is_some_and(|service| offered(service, keys) == Offered::Neither) {
        return Err(ConfigError::invalid(
            path,
            "serve.rate",
            "the service has no rate: give rate = R in [serve], an axis of serve.rate to find the highest that meets the goal, \
             or a client cap (max_concurrency, or an axis of serve.max_concurrency) to send every request at once under it",
        ));
    }
    Ok(())
}

/// How a service's requests are offered across a sweep's points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offered {
    /// At a rate (in `[serve]`, or a `serve.rate` key).
    AtRates,
    /// Only all at once under a client cap.
    AllAtOnce,
    Neither,
}

fn offered(service: &Service, keys: &[(String, Key)]) -> Offered {
    let varied = |wanted: ServeKey| keys.iter().any(|(_, key)| *key == Key::Serve(wanted));
    if service.rate.is_some() || varied(ServeKey::Rate) {
        Offered::AtRates
    } else if service.load.max_concurrency.is_some() || varied(ServeKey::MaxConcurrency) {
        Offered::AllAtOnce
    } else {
        Offered::Neither
    }
}

/// What a service is judged by when the goal does not say: the load it
/// takes for its price where requests come at a rate (`rate_per_usd_hour`,
/// maximized); all at once under a cap, where no rate is offered, what an
/// output token costs (`usd_per_million_output_tokens`, minimized).
pub fn default_objective(service: &Service, keys: &[(String, Key)]) -> (&'static str, bool) {
    match offered(service, keys) {
        Offered::AllAtOnce => ("usd_per_million_output_tokens", false),
        Offered::AtRates | Offered::Neither => ("rate_per_usd_hour", true),
    }
}

/// What `experiment` serving `service` with `changes` yields, priced by
/// `cost`; or why the service cannot run.
pub fn serve(experiment: &Experiment, service: &Service, changes: &[&Change], cost: &CostModel) -> Result<Outcome, String> {
    let (rate, load, engine, split) = service.changed(changes);
    let bill = Bill::of(&experiment.modes[0].topology);
    let (per_gpu, cost_error) = match cost.per_gpu(&bill) {
        Ok(per_gpu) => (Some(per_gpu), None),
        Err(message) => (None, Some(message)),
    };
    let server = match &split {
        None => Server::new(experiment, &engine),
        Some(plan) => Server::split(experiment, &engine, plan),
    };
    let outcome = server.and_then(|server| {
        let arrivals = load.arrivals(rate)?;
        let requests = load.requests(&arrivals);
        let terms = Terms { load: &load, arrivals: &arrivals, slo: service.slo, per_gpu };
        Ok(server.serve(&requests, terms, &|| {})?.0)
    });
    match outcome {
        // The point's columns say what was asked: no file or key.
        Err(LoadError::Config(ConfigError::Invalid { message, .. })) => Err(message),
        Err(other) => Err(other.to_string()),
        Ok(report) => {
            let setup = &report.setup;
            let setup = ServiceSetup {
                topology: setup.topology.clone(),
                gpu: setup.gpu.clone(),
                transport: setup.transport.clone(),
                tp: setup.tp,
                kv_blocks: setup.kv_blocks,
                usd_per_gpu_hour: per_gpu.map(|p| p.usd_per_hour),
            };
            Ok(Outcome::Service { setup, load: LoadPoint::of(rate, &report, service.slo), cost_error })
        }
    }
}
