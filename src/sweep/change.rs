//! What-if changes by key (`tp=4`, `topology.nvlink_links=12`,
//! `hardware.nvlink.gen4.link_rate=50GB/s`, `storage.drives=4`): one
//! vocabulary for sweep axes, listed points and `--set` (`icsim run`, `icsim
//! llm`, `icsim diff`). Checks a key and its value (errors name the file, the
//! key and what is allowed), applies experiment keys (`storage.*` by dotted
//! path, as the file's `[storage]` reads them) to a raw experiment, and
//! hardware and link keys as a [`topology::Edit`]: a
//! model overlay before the topology is built, then link changes to what was
//! built. Simulates nothing.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::collective::Selection;
use crate::config::dotted::{self, Overlay};
use crate::config::experiment::{MAX_CHANNELS, RawExperiment, Source};
use crate::config::hardware::{HardwareModel, ModelSource};
use crate::config::llm::LlmModel;
use crate::config::storage::RawStorage;
use crate::config::{ConfigError, ConfigResult, names_a_file};
use crate::network::LinkId;
use crate::serve::groups::SplitPlan;
use crate::stack::Stack;
use crate::topology::{self, LinkKind, LinkRates, Topology};
use crate::transport::Mode;
use crate::units::Bandwidth;
use crate::workload::storage::spec::StorageSpec;

/// What a change sets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Model,
    Tp,
    Topology,
    Gpus,
    Gpu,
    Host,
    Transport,
    Allreduce,
    Stack,
    Channels,
    Prompt,
    Output,
    Batch,
    /// Every NVLink link's rate per link and per direction.
    NvlinkBandwidth,
    /// NVLink links per GPU.
    NvlinkLinks,
    /// Every PCIe link's generation.
    PcieGeneration,
    /// Peak memory bandwidth of each socket.
    HostMemoryBandwidth,
    /// A value of the hardware model, by its dotted path below `hardware.`.
    Hardware(String),
    /// A key of the experiment's `[storage]` section, below `storage.`.
    Storage(String),
    /// A key of a serving sweep's `[serve]` table (its service, not its
    /// experiment). A split of prefill and decode would be one more.
    Serve(ServeKey),
}

/// The keys of a service a sweep may vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServeKey {
    Rate,
    MaxNumSeqs,
    MaxNumBatchedTokens,
    /// The clients' cap on requests in flight.
    MaxConcurrency,
    /// The server split into prefill and decode groups, or not.
    Split,
}

/// The kinds of value a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Count {
        min: u64,
        max: u64,
    },
    Text,
    Bandwidth,
    /// A number above zero.
    Positive,
    /// Whatever the hardware model's key holds (checked by loading it).
    Any,
    /// What the `[storage]` key takes in a file (checked as the file's
    /// section is); lists too (`storage.paths`, `storage.sweep`).
    Storage,
}

/// The named keys, what they take and what they are (for axis titles).
const NAMED: &[(Key, &str, Kind, &str)] = &[
    (Key::Model, "model", Kind::Text, "LLM"),
    (Key::Tp, "tp", Kind::Count { min: 1, max: 1 << 16 }, "TP degree"),
    (Key::Topology, "topology", Kind::Text, "topology"),
    (Key::Gpus, "gpus", Kind::Count { min: 1, max: 1 << 16 }, "GPUs used"),
    (Key::Gpu, "gpu", Kind::Text, "GPU model"),
    (Key::Host, "host", Kind::Text, "host platform"),
    (Key::Transport, "transport", Kind::Text, "transport"),
    (Key::Allreduce, "allreduce", Kind::Text, "allreduce choice"),
    (Key::Stack, "stack", Kind::Text, "caller stack"),
    (Key::Channels, "channels", Kind::Count { min: 1, max: MAX_CHANNELS as u64 }, "NCCL channels"),
    (Key::Prompt, "query.prompt", Kind::Count { min: 1, max: 1 << 24 }, "prompt tokens"),
    (Key::Output, "query.output", Kind::Count { min: 0, max: 1 << 24 }, "generated tokens"),
    (Key::Batch, "query.batch", Kind::Count { min: 1, max: 1 << 16 }, "sequences in a batch"),
    (Key::NvlinkBandwidth, "topology.nvlink_bandwidth", Kind::Bandwidth, "NVLink rate per link, per direction"),
    (Key::NvlinkLinks, "topology.nvlink_links", Kind::Count { min: 1, max: 64 }, "NVLink links per GPU"),
    (Key::PcieGeneration, "topology.pcie_generation", Kind::Text, "PCIe generation"),
    (Key::HostMemoryBandwidth, "topology.host_memory_bandwidth", Kind::Bandwidth, "host memory bandwidth per socket, peak"),
    (Key::Serve(ServeKey::Rate), "serve.rate", Kind::Positive, "offered load, requests/s"),
    (Key::Serve(ServeKey::MaxNumSeqs), "serve.max_num_seqs", Kind::Count { min: 1, max: 65_536 }, "max sequences running"),
    (
        Key::Serve(ServeKey::MaxNumBatchedTokens),
        "serve.max_num_batched_tokens",
        Kind::Count { min: 1, max: 1_048_576 },
        "token budget of an iteration",
    ),
    (Key::Serve(ServeKey::MaxConcurrency), "serve.max_concurrency", Kind::Count { min: 1, max: 10_000_000 }, "most requests in flight"),
    (Key::Serve(ServeKey::Split), "serve.split", Kind::Text, "prefill + decode TP, or none"),
];

/// A key in words, for titles, axes and legends: a named key as `NAMED`
/// says ("TP degree"), a metric as `Metric::describe` says, `label` as the
/// mode it names; any other key (a hardware path) by its last segment in
/// words after the part it belongs to: `hardware.gpu.h200.nvlink.bandwidth`
/// reads "NVLink bandwidth".
pub fn key_words(key: &str) -> String {
    if let Some((_, _, _, what)) = NAMED.iter().find(|(_, name, _, _)| *name == key) {
        return what.to_string();
    }
    if key == super::LABEL {
        return "transport mode".into();
    }
    if let Ok(metric) = key.parse::<super::goal::Metric>() {
        return metric.describe().to_string();
    }
    let segments: Vec<&str> = key.split('.').collect();
    let last = segments.last().copied().unwrap_or(key);
    let part = segments[..segments.len() - 1].iter().rev().find(|s| PARTS.contains(s)).filter(|part| !last.contains(**part));
    match part {
        Some(part) => format!("{} {}", segment_words(part), segment_words(last)),
        None => segment_words(last),
    }
}

/// A key in a few words, for the names of points and lines: its last
/// segment in words ("TP", "batch", "NVLink bandwidth", "max sequences").
pub fn short_words(key: &str) -> String {
    segment_words(key.rsplit('.').next().unwrap_or(key))
}

/// The parts of the hardware model a key's value may belong to.
const PARTS: [&str; 10] = ["nvlink", "nvswitch", "pcie", "pcie_switch", "nvme", "storage", "host", "gpu", "compute", "protocol"];

/// Segments that read better as other words, and words written in capitals.
const SEGMENTS: [(&str, &str); 5] = [
    ("max_num_seqs", "max sequences"),
    ("max_concurrency", "max concurrency"),
    ("max_num_batched_tokens", "max batched tokens"),
    ("prompt", "prompt tokens"),
    ("output", "generated tokens"),
];
const WORDS: [(&str, &str); 13] = [
    ("tp", "TP"),
    ("nvlink", "NVLink"),
    ("nvswitch", "NVSwitch"),
    ("pcie", "PCIe"),
    ("nvme", "NVMe"),
    ("gpu", "GPU"),
    ("gpus", "GPUs"),
    ("cpu", "CPU"),
    ("kv", "KV"),
    ("hbm", "HBM"),
    ("gds", "GDS"),
    ("ttft", "TTFT"),
    ("tpot", "TPOT"),
];

/// One segment of a key in words: `link_rate` reads "link rate",
/// `pcie_switch` "PCIe switch".
fn segment_words(segment: &str) -> String {
    if let Some((_, words)) = SEGMENTS.iter().find(|(name, _)| *name == segment) {
        return words.to_string();
    }
    let word = |w: &str| WORDS.iter().find(|(name, _)| *name == w).map_or_else(|| w.to_string(), |(_, written)| written.to_string());
    segment.split(['_', '-']).filter(|w| !w.is_empty()).map(word).collect::<Vec<_>>().join(" ")
}

const HARDWARE_PREFIX: &str = "hardware.";
const STORAGE_PREFIX: &str = "storage.";

/// Every key a change may name but `hardware.*`: the named keys, then
/// `storage.<key>` for each key of the experiment's `[storage]` section.
pub fn keys() -> Vec<String> {
    let named = NAMED.iter().map(|(_, name, _, _)| name.to_string());
    named.chain(dotted::keys_of::<RawStorage>().iter().map(|key| format!("{STORAGE_PREFIX}{key}"))).collect()
}

/// Every key a change may name, for messages.
pub fn allowed_keys() -> String {
    format!("{}, or hardware.<a key of models/hardware/base.toml> (e.g. hardware.nvlink.gen4.link_rate)", keys().join(", "))
}

impl Key {
    /// The key as written.
    pub fn name(&self) -> String {
        match self {
            Key::Hardware(path) => format!("{HARDWARE_PREFIX}{path}"),
            Key::Storage(field) => format!("{STORAGE_PREFIX}{field}"),
            named => {
                NAMED.iter().find(|(k, _, _, _)| k == named).map(|(_, name, _, _)| name.to_string()).expect("every named key is listed")
            }
        }
    }

    pub fn parse(text: &str) -> Result<Key, String> {
        if let Some((key, _, _, _)) = NAMED.iter().find(|(_, name, _, _)| *name == text) {
            return Ok(key.clone());
        }
        if let Some(field) = text.strip_prefix(STORAGE_PREFIX).filter(|field| dotted::keys_of::<RawStorage>().contains(field)) {
            return Ok(Key::Storage(field.to_string()));
        }
        match text.strip_prefix(HARDWARE_PREFIX) {
            Some(path) if !path.is_empty() && path.split('.').all(|part| !part.is_empty()) => Ok(Key::Hardware(path.to_string())),
            _ => Err(format!("unknown key {text:?}; allowed: {}", allowed_keys())),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Key::Storage(_) => Kind::Storage,
            named => NAMED.iter().find(|(k, _, _, _)| k == named).map_or(Kind::Any, |(_, _, kind, _)| *kind),
        }
    }
}

/// A checked value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Count(u64),
    /// Text; a file named relative to the file that named it is stored with
    /// that folder joined.
    Text(String),
    Bandwidth(Bandwidth),
    /// A hardware model or `[storage]` value, as TOML.
    Toml(toml::Value),
    Number(f64),
}

/// One change: a key, its checked value, and the value as the user wrote
/// it (what tables and plots show).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub key: Key,
    pub value: Value,
    pub shown: serde_json::Value,
}

/// Where a change was written, for messages and relative files.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The file (or "command line").
    pub path: &'a Path,
    /// The key the change sits under, as the user wrote it
    /// (`axis[1].values[2]`, `--set`).
    pub at: &'a str,
    /// Files the change names are relative to this folder.
    pub base_dir: &'a Path,
}

impl Origin<'_> {
    fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.path, self.at, message)
    }
}

/// Reads `VALUE` of a command line `KEY=VALUE` as TOML where it is a
/// number, a boolean, a quoted string or a list (`storage.paths=["gds"]`),
/// and as plain text otherwise.
pub fn parse_value_text(text: &str) -> toml::Value {
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut table| table.remove("v"))
        .filter(|value| !value.is_table())
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

impl Change {
    /// Checks `value` for `key`, written at `origin`.
    pub fn new(key: Key, value: &toml::Value, origin: Origin) -> ConfigResult<Change> {
        let name = key.name();
        let shown = match value {
            toml::Value::Integer(i) => json!(i),
            toml::Value::Float(f) => json!(f),
            toml::Value::Boolean(b) => json!(b),
            toml::Value::String(s) => json!(s),
            toml::Value::Array(_) if key.kind() == Kind::Storage => serde_json::to_value(value).expect("a TOML list is JSON"),
            other => return Err(origin.invalid(format!("{name} takes one value, not {other}"))),
        };
        let value = match key.kind() {
            Kind::Count { min, max } => match value.as_integer().and_then(|i| u64::try_from(i).ok()) {
                Some(count) if (min..=max).contains(&count) => Value::Count(count),
                _ => return Err(origin.invalid(format!("{name} = {value} is not allowed: an integer from {min} to {max}"))),
            },
            Kind::Bandwidth => match value.as_str().map(str::parse::<Bandwidth>) {
                Some(Ok(rate)) if rate.0 > 0 => Value::Bandwidth(rate),
                Some(Err(error)) => return Err(origin.invalid(format!("{name}: {error}"))),
                _ => return Err(origin.invalid(format!("{name} = {value} is not allowed: a bandwidth above zero, as \"25GB/s\""))),
            },
            Kind::Positive => match value.as_float().or(value.as_integer().map(|i| i as f64)) {
                Some(number) if number.is_finite() && number > 0.0 => Value::Number(number),
                _ => return Err(origin.invalid(format!("{name} = {value} is not allowed: a number above zero"))),
            },
            Kind::Text => {
                let text = value.as_str().ok_or_else(|| origin.invalid(format!("{name} = {value} is not allowed: {name} takes text")))?;
                Value::Text(check_text(&key, text, origin).map_err(|message| origin.invalid(format!("{name}: {message}")))?)
            }
            Kind::Any => {
                let change = Change { key: key.clone(), value: Value::Toml(value.clone()), shown: shown.clone() };
                let overlay = overlay(&[&change], origin.path).expect("a hardware change makes an overlay");
                HardwareModel::load(&[overlay]).map_err(|error| origin.invalid(format!("{name}: {}", hardware_message(&error))))?;
                return Ok(change);
            }
            Kind::Storage => {
                check_storage(&key, value, origin).map_err(|message| origin.invalid(format!("{name}: {message}")))?;
                Value::Toml(value.clone())
            }
        };
        Ok(Change { key, value, shown })
    }

    /// Parses `KEY=VALUE` from the command line.
    pub fn parse_assignment(text: &str, origin: Origin) -> ConfigResult<Change> {
        let (key, value) =
            text.split_once('=').ok_or_else(|| origin.invalid(format!("{text:?} is not KEY=VALUE; keys: {}", allowed_keys())))?;
        let key = Key::parse(key.trim()).map_err(|message| origin.invalid(message))?;
        Change::new(key, &parse_value_text(value.trim()), origin)
    }

    /// `key=value` as the user wrote it.
    pub fn describe(&self) -> String {
        let value = match &self.shown {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        format!("{}={value}", self.key.name())
    }
}

/// The message of a model that would not load, without the in-memory
/// overlay's label (the caller names the key).
fn hardware_message(error: &ConfigError) -> String {
    match error {
        ConfigError::Invalid { key, message, .. } => format!("{key}: {message}"),
        ConfigError::Syntax { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Checks a `[storage]` key's value as the file's section is checked, key
/// by key: its kind (serde), its value (the section's own checks) and a
/// drive class the shipped hardware model knows (as `gpu` is checked).
fn check_storage(key: &Key, value: &toml::Value, origin: Origin) -> Result<(), String> {
    let Key::Storage(field) = key else { unreachable!("a storage kind is a storage key, not {key:?}") };
    let raw = dotted::set(&RawStorage::default(), field, value.clone())?;
    StorageSpec::read(&raw, &Source::File(origin.path.to_path_buf())).map_err(|error| match error {
        ConfigError::Invalid { message, .. } => message,
        other => other.to_string(),
    })?;
    match &raw.drive {
        Some(drive) => HardwareModel::base().drive(drive).map(|_| ()),
        None => Ok(()),
    }
}

fn check_text(key: &Key, text: &str, origin: Origin) -> Result<String, String> {
    let base = HardwareModel::base();
    // Absolute, so that an experiment does not read it beside its own file.
    let file = |text: &str| {
        let path = origin.base_dir.join(text);
        std::path::absolute(&path).unwrap_or(path)
    };
    let known = |names: Vec<&String>| names.into_iter().map(String::as_str).collect::<Vec<_>>().join(", ");
    match key {
        Key::Model => {
            let name = if names_a_file(text, &file(text)) { file(text).to_string_lossy().into_owned() } else { text.to_string() };
            LlmModel::load(&name).map_err(|error| hardware_message(&error))?;
            Ok(name)
        }
        Key::Topology if names_a_file(text, &file(text)) => {
            let path = file(text);
            if path.is_file() { Ok(path.to_string_lossy().into_owned()) } else { Err(format!("no topology file {}", path.display())) }
        }
        Key::Topology => {
            let presets: Vec<&str> = topology::PRESETS.iter().map(|(name, _)| *name).collect();
            if presets.contains(&text) {
                Ok(text.to_string())
            } else {
                Err(format!("unknown topology {text:?}: use a preset ({}) or a topology file", presets.join(", ")))
            }
        }
        Key::Gpu if !base.gpu.contains_key(text) => Err(format!("unknown GPU model {text:?}; known: {}", known(base.gpu.keys().collect()))),
        Key::Host if !base.host.contains_key(text) => {
            Err(format!("unknown host platform {text:?}; known: {}", known(base.host.keys().collect())))
        }
        Key::PcieGeneration if !base.pcie.contains_key(text) => {
            Err(format!("unknown PCIe generation {text:?}; known: {}", known(base.pcie.keys().collect())))
        }
        Key::Transport => text.parse::<Mode>().map(|_| text.to_string()),
        Key::Allreduce => text.parse::<Selection>().map(|_| text.to_string()),
        Key::Stack => text.parse::<Stack>().map(|_| text.to_string()),
        Key::Serve(ServeKey::Split) => SplitPlan::or_none(text).map(|_| text.to_string()),
        _ => Ok(text.to_string()),
    }
}

/// The hardware model overlay of the `hardware.*` changes, later ones
/// winning, named `<path> (what-if changes)` in messages.
fn overlay(changes: &[&Change], path: &Path) -> Option<ModelSource> {
    let mut overlay = Overlay::default();
    for change in changes {
        if let (Key::Hardware(dotted), Value::Toml(value)) = (&change.key, &change.value) {
            overlay.set(dotted, value.clone());
        }
    }
    overlay.into_source(PathBuf::from(format!("{} (what-if changes)", path.display())))
}

/// Sets `changes`' experiment keys in `raw`, in every mode; hardware and
/// link keys are left to [`edit`].
pub fn apply(changes: &[&Change], raw: &mut RawExperiment) {
    for change in changes {
        let count = |value: &Value| match value {
            Value::Count(count) => *count,
            other => unreachable!("a count key holds a count, not {other:?}"),
        };
        let text = |value: &Value| match value {
            Value::Text(text) => text.clone(),
            other => unreachable!("a text key holds text, not {other:?}"),
        };
        let value = &change.value;
        match change.key {
            Key::Model => raw.model = text(value),
            Key::Tp => {
                raw.tp = Some(count(value) as u32);
                raw.modes.iter_mut().for_each(|m| m.tp = Some(count(value) as u32));
            }
            Key::Topology => {
                raw.topology = Some(text(value));
                raw.modes.iter_mut().for_each(|m| m.topology = Some(text(value)));
            }
            Key::Gpus => raw.modes.iter_mut().for_each(|m| m.gpus = Some(count(value) as u32)),
            Key::Gpu => raw.modes.iter_mut().for_each(|m| m.gpu = Some(text(value))),
            Key::Host => raw.modes.iter_mut().for_each(|m| m.host = Some(text(value))),
            Key::Transport => raw.modes.iter_mut().for_each(|m| m.transport = text(value)),
            Key::Allreduce => raw.modes.iter_mut().for_each(|m| m.allreduce = Some(text(value))),
            Key::Stack => raw.modes.iter_mut().for_each(|m| m.stack = Some(text(value))),
            Key::Channels => raw.modes.iter_mut().for_each(|m| m.channels = Some(count(value) as u32)),
            Key::Prompt => raw.query.prompt = count(value),
            Key::Output => raw.query.output = count(value),
            Key::Batch => raw.query.batch = count(value),
            Key::Storage(ref field) => {
                let Value::Toml(value) = value else { unreachable!("a storage key holds TOML, not {value:?}") };
                let section = raw.storage.take().unwrap_or_default();
                raw.storage = Some(dotted::set(&section, field, value.clone()).expect("the value was checked against the section"));
            }
            Key::NvlinkBandwidth | Key::NvlinkLinks | Key::PcieGeneration | Key::HostMemoryBandwidth | Key::Hardware(_) | Key::Serve(_) => {
            }
        }
    }
}

/// The hardware and link keys of `changes` as an edit of every topology an
/// experiment resolves.
pub fn edit<'c>(changes: &[&'c Change], path: &Path) -> HardwareEdit<'c> {
    let link = changes.iter().copied().filter(|c| is_link_key(&c.key)).collect();
    HardwareEdit { overlay: overlay(changes, path), link }
}

fn is_link_key(key: &Key) -> bool {
    matches!(key, Key::NvlinkBandwidth | Key::NvlinkLinks | Key::PcieGeneration | Key::HostMemoryBandwidth)
}

/// Hardware model and link changes, applied while a topology is resolved.
#[derive(Debug, Clone)]
pub struct HardwareEdit<'c> {
    overlay: Option<ModelSource>,
    link: Vec<&'c Change>,
}

impl topology::Edit for HardwareEdit<'_> {
    fn overlay(&self) -> Option<ModelSource> {
        self.overlay.clone()
    }

    fn built(&self, topo: &mut Topology, model: &mut HardwareModel) -> Result<(), String> {
        for change in &self.link {
            rescale_links(topo, model, change)?;
        }
        Ok(())
    }
}

/// Applies one link change to every link it concerns, and to the model
/// values NCCL's tuner reads about them (the model's link rates, the GPU's
/// NVLink count and PCIe generation, the host's memory channels), so that
/// the tuner sees the hardware the flows run on.
fn rescale_links(topo: &mut Topology, model: &mut HardwareModel, change: &Change) -> Result<(), String> {
    let gpu_key = topo.gpu_model.clone();
    let host_key = topo.host.clone();
    for index in 0..topo.links().len() {
        let id = LinkId(index as u32);
        let link = topo.link(id).clone();
        let (kind, bandwidth, latency) = match (&change.key, &change.value, &link.kind) {
            (Key::NvlinkBandwidth, Value::Bandwidth(rate), LinkKind::NvLink { generation, .. }) => {
                let per_link = model.nvlink(generation)?.link_rate;
                (link.kind.clone(), link.bandwidth.scaled(rate.0 as f64 / per_link.0 as f64), link.latency)
            }
            (Key::NvlinkLinks, Value::Count(count), LinkKind::NvLink { generation, links }) => {
                let per_gpu = u64::from(model.gpu(&gpu_key)?.nvlink_links);
                if per_gpu == 0 {
                    return Err(format!("GPU model {gpu_key} has no NVLink links to scale"));
                }
                let scaled = ((u64::from(*links) * count + per_gpu / 2) / per_gpu).max(1) as u32;
                let kind = LinkKind::NvLink { generation: generation.clone(), links: scaled };
                (kind, link.bandwidth.scaled(*count as f64 / per_gpu as f64), link.latency)
            }
            (Key::PcieGeneration, Value::Text(generation), LinkKind::Pcie { lanes, .. }) => {
                let (bandwidth, latency) = LinkRates { model }.pcie(generation, *lanes)?;
                (LinkKind::Pcie { generation: generation.clone(), lanes: *lanes }, bandwidth, latency)
            }
            (Key::HostMemoryBandwidth, Value::Bandwidth(peak), LinkKind::MemoryBus { .. }) => {
                (link.kind.clone(), peak.scaled(model.host(&host_key)?.memory_efficiency), link.latency)
            }
            _ => continue,
        };
        topo.set_link(id, kind, bandwidth, latency);
    }
    match (&change.key, &change.value) {
        (Key::NvlinkBandwidth, Value::Bandwidth(rate)) => model.nvlink.values_mut().for_each(|g| g.link_rate = *rate),
        (Key::NvlinkLinks, Value::Count(count)) => gpu_mut(model, &gpu_key)?.nvlink_links = *count as u32,
        (Key::PcieGeneration, Value::Text(generation)) => gpu_mut(model, &gpu_key)?.pcie_generation = generation.clone(),
        (Key::HostMemoryBandwidth, Value::Bandwidth(peak)) => {
            let host = model.host.get_mut(&host_key).ok_or_else(|| format!("unknown host platform {host_key:?}"))?;
            host.memory_channel_rate = Bandwidth(peak.0 / u64::from(host.memory_channels.max(1)));
        }
        _ => {}
    }
    Ok(())
}

fn gpu_mut<'m>(model: &'m mut HardwareModel, key: &str) -> Result<&'m mut crate::config::hardware::GpuModel, String> {
    model.gpu.get_mut(key).ok_or_else(|| format!("unknown GPU model {key:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_words() {
        assert_eq!(key_words("serve.max_num_seqs"), "max sequences running");
        assert_eq!(key_words("tp"), "TP degree");
        assert_eq!(key_words("label"), "transport mode");
        assert_eq!(key_words("ttft_ms"), "time to first token (ms)");
        // Hardware paths: the last segment in words after its part.
        assert_eq!(key_words("hardware.gpu.h200.nvlink.bandwidth"), "NVLink bandwidth");
        assert_eq!(key_words("hardware.nvlink.gen4.link_rate"), "NVLink link rate");
        assert_eq!(key_words("hardware.pcie_switch.pex89144.latency"), "PCIe switch latency");
        assert_eq!(key_words("hardware.storage.nvme_count"), "storage NVMe count");
        // No part named: the last segment alone; a part it already names is not repeated.
        assert_eq!(key_words("something.odd_key"), "odd key");
        assert_eq!(key_words("hardware.nvlink.gen5.nvlink_links"), "NVLink links");
        // The short form, for names of points and lines.
        assert_eq!(short_words("tp"), "TP");
        assert_eq!(short_words("query.batch"), "batch");
        assert_eq!(short_words("topology.nvlink_bandwidth"), "NVLink bandwidth");
        assert_eq!(short_words("serve.max_num_seqs"), "max sequences");
        // No key, named or not, keeps a dot or an underscore.
        for (_, name, _, _) in NAMED {
            for words in [key_words(name), short_words(name)] {
                assert!(!words.contains('.') && !words.contains('_'), "{name}: {words}");
            }
        }
    }
}
