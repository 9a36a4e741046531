//! The storage parts of icsim's files: NVMe drive classes (`[nvme.<key>]`
//! in the hardware model), how storage I/O is cut up and what it costs the
//! CPU (`[storage]` in the hardware model), and an experiment's `[storage]`
//! section. Raw serde types and their validation only; nothing here builds
//! a topology or simulates.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::experiment::{ModeRun, Source};
use super::hardware::HardwareModel;
use super::llm::LlmModel;
use super::{ConfigError, ConfigResult, check_range};
use crate::storage::{STORAGE_PATHS, StoragePath};
use crate::topology::{DriveLayout, Placement, Topology};
use crate::units::{Bandwidth, Bytes, Time};
use crate::workload::storage::{ArrayKind, JobTarget, LoadKind, OffloadTarget, Striping, shard_bytes, weight_bytes};

/// One class of NVMe drive. Its rates are the vendor's sequential figures,
/// which are measured through the drive's own PCIe link and so already
/// include that link's efficiency.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DriveModel {
    pub description: String,
    /// PCIe generation of the drive's own link (a key of `[pcie]`).
    pub pcie_generation: String,
    pub lanes: u32,
    /// Sequential read rate (bytes leave the drive).
    pub read: Bandwidth,
    /// Sequential write rate (bytes enter the drive).
    pub write: Bandwidth,
    /// From a read command to its first byte (flash access).
    pub read_latency: Time,
    /// From a write command to its completion, beyond moving its bytes.
    pub write_latency: Time,
}

/// How storage I/O is cut into pieces and what each piece costs the CPU.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StorageModel {
    /// Largest I/O cuFile hands to the driver on the direct (GDS) path.
    pub gds_io: Bytes,
    /// One bounce buffer: the I/O size of the path through host memory.
    pub bounce_io: Bytes,
    /// I/Os one GPU's stream keeps in flight (and bounce buffers it owns).
    pub in_flight: u32,
    /// RAID-0 stripe unit: an I/O is spread over the members it covers.
    pub raid_chunk: Bytes,
    /// CPU time one I/O costs on the direct path, and per MiB it moves.
    pub gds_cpu_per_io: Time,
    pub gds_cpu_per_mib: Time,
    /// CPU time one I/O costs on the bounce path, and per MiB it moves.
    pub bounce_cpu_per_io: Time,
    pub bounce_cpu_per_mib: Time,
}

impl HardwareModel {
    /// The drive class `name` (a key of `[nvme]`).
    pub fn drive(&self, name: &str) -> Result<&DriveModel, String> {
        self.nvme
            .get(name)
            .ok_or_else(|| format!("unknown drive {name:?}; known: {}", self.nvme.keys().cloned().collect::<Vec<_>>().join(", ")))
    }
}

/// Smallest I/O and stripe unit: 64 KiB, the smallest I/O of the table the
/// CPU costs are fitted to (Solidigm's, 64 KiB to 4 MiB); below it the
/// fitted costs say nothing, and a load's I/Os would run to millions.
pub const MIN_IO: Bytes = Bytes(64 << 10);
/// Largest I/O and stripe unit: 1 GiB, 64 times cuFile's default largest
/// I/O (16 MiB); it keeps the pieces of one I/O few.
pub const MAX_IO: Bytes = Bytes(1 << 30);
/// Longest a drive may take to answer a command: 1 s (data-centre drives
/// answer in tens of microseconds, a disk in milliseconds).
pub const MAX_DRIVE_LATENCY: Time = Time(1_000_000_000_000);
/// Most CPU time one I/O, or one MiB of it, may cost: 10 ms (the fitted
/// figures are microseconds; 10 ms a MiB is a core copying 100 MB/s).
pub const MAX_CPU_COST: Time = Time(10_000_000_000);

/// Checks the storage parts of a merged hardware model: every drive's
/// rates within what its own PCIe link carries, latencies and CPU costs
/// bounded, I/O sizes between [`MIN_IO`] and [`MAX_IO`].
pub fn validate_model(path: &Path, model: &HardwareModel) -> ConfigResult<()> {
    let at_most = |key: String, value: Time, most: Time| {
        if value <= most { Ok(()) } else { Err(ConfigError::invalid(path, key, format!("{value} is out of range: allowed 0 to {most}"))) }
    };
    for (name, drive) in &model.nvme {
        let key = |field: &str| format!("nvme.{name}.{field}");
        if !(1..=16).contains(&drive.lanes) {
            return Err(ConfigError::invalid(path, key("lanes"), format!("{} lanes: a drive has 1 to 16", drive.lanes)));
        }
        let generation = model.pcie.get(&drive.pcie_generation).ok_or_else(|| {
            let known: Vec<&String> = model.pcie.keys().collect();
            ConfigError::invalid(path, key("pcie_generation"), format!("unknown generation {:?}; known: {known:?}", drive.pcie_generation))
        })?;
        // A drive's sequential rate is measured through its own link.
        let link = Bandwidth(generation.lane_rate.0.saturating_mul(u64::from(drive.lanes)));
        for (field, rate) in [("read", drive.read), ("write", drive.write)] {
            if rate.0 == 0 || rate > link {
                return Err(ConfigError::invalid(
                    path,
                    key(field),
                    format!(
                        "{rate} is out of range: more than zero and at most what its PCIe {} x{} link carries ({link})",
                        drive.pcie_generation, drive.lanes
                    ),
                ));
            }
        }
        at_most(key("read_latency"), drive.read_latency, MAX_DRIVE_LATENCY)?;
        at_most(key("write_latency"), drive.write_latency, MAX_DRIVE_LATENCY)?;
    }
    let storage = &model.storage;
    for (key, size) in
        [("storage.gds_io", storage.gds_io), ("storage.bounce_io", storage.bounce_io), ("storage.raid_chunk", storage.raid_chunk)]
    {
        if !(MIN_IO..=MAX_IO).contains(&size) {
            return Err(ConfigError::invalid(path, key, format!("{size} is out of range: allowed {MIN_IO} to {MAX_IO}")));
        }
    }
    for (key, cost) in [
        ("storage.gds_cpu_per_io", storage.gds_cpu_per_io),
        ("storage.gds_cpu_per_mib", storage.gds_cpu_per_mib),
        ("storage.bounce_cpu_per_io", storage.bounce_cpu_per_io),
        ("storage.bounce_cpu_per_mib", storage.bounce_cpu_per_mib),
    ] {
        at_most(key.into(), cost, MAX_CPU_COST)?;
    }
    check_range(path, "storage.in_flight", f64::from(storage.in_flight), 1.0..=1024.0)
}

/// An experiment's `[storage]` section: drives to put on each mode's
/// topology, a load of the weights before the query, and storage traffic
/// during it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    /// Drives on the topology (default: the preset's or file's own).
    pub drives: Option<u32>,
    /// Drive class, a key of `[nvme]` (default: the layout's).
    pub drive: Option<String>,
    /// Where drives sit: "switch" (on the GPUs' PCIe switches) or
    /// "root-port" (on the CPUs' root ports).
    pub placement: Option<String>,
    /// Which drives a GPU reads: "array" (every drive) or "local" (the
    /// drives nearest it).
    pub array: Option<String>,
    /// How files lie on those drives: "raid0" (striped) or "files" (whole
    /// files on the drives in turn).
    pub striping: Option<String>,
    /// What is loaded before the query: "shard" (each GPU its TP shard),
    /// "whole" (every GPU the whole model) or "none".
    pub load: Option<String>,
    /// Storage paths to compare: "gds", "bounce".
    pub paths: Option<Vec<String>>,
    /// Drive counts of the load-time plot.
    pub sweep: Option<Vec<u32>>,
    /// Also write every GPU's shard as a checkpoint and restore it.
    pub checkpoint: Option<bool>,
    /// Where the prompt's KV cache is written while decode runs: "host",
    /// "drive" or "none".
    pub kv_offload: Option<String>,
}

/// A validated `[storage]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageSpec {
    /// Drives to put on every mode's topology instead of its own.
    pub layout: LayoutChange,
    /// The drives each GPU uses and how its files lie on them.
    pub drives: JobTarget,
    /// What is loaded before the query, if anything.
    pub load: Option<LoadKind>,
    pub paths: Vec<StoragePath>,
    /// Drive counts of the load-time plot.
    pub sweep: Vec<u32>,
    pub checkpoint: bool,
    pub kv_offload: Option<OffloadTarget>,
}

/// What a `[storage]` section changes about a topology's drives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutChange {
    pub drives: Option<u32>,
    pub drive: Option<String>,
    pub placement: Option<Placement>,
}

impl LayoutChange {
    /// `topo`'s drives with this change applied (its own where nothing
    /// changes); the error says what is wrong, for the caller to name a key.
    pub fn apply(&self, topo: &Topology, model: &HardwareModel) -> Result<Topology, String> {
        if *self == LayoutChange::default() {
            return Ok(topo.clone());
        }
        let current = topo.drive_layout();
        let layout = DriveLayout {
            count: self.drives.unwrap_or(current.count),
            drive: self.drive.clone().unwrap_or(current.drive),
            placement: self.placement.unwrap_or(current.placement),
        };
        model.drive(&layout.drive)?;
        topo.with_drives(&layout, model).map_err(|e| e.to_string())
    }
}

/// Most drives a `[storage]` section may put on a server.
pub const MAX_DRIVES: u32 = 256;
/// Most drive counts in `storage.sweep`: each is a load simulated for
/// every path and mode.
pub const MAX_SWEEP_POINTS: usize = 64;

/// What each GPU of `run` reads or writes (the load, a checkpoint of its
/// shard) must fit in its memory; the error is (key, message).
pub fn check_fits(spec: &StorageSpec, llm: &LlmModel, run: &ModeRun) -> Result<(), (&'static str, String)> {
    let gpu = run.hardware.gpu(&run.topology.gpu_model).map_err(|m| ("storage", m))?;
    let tp = u64::from(run.tp);
    let mut moved = Vec::new();
    if let Some(kind) = spec.load {
        let bytes = if kind == LoadKind::Whole { weight_bytes(llm) } else { shard_bytes(llm, tp) };
        moved.push(("storage.load", bytes));
    }
    if spec.checkpoint {
        moved.push(("storage.checkpoint", shard_bytes(llm, tp)));
    }
    match moved.into_iter().find(|(_, bytes)| *bytes > gpu.memory) {
        Some((key, bytes)) => Err((
            key,
            format!(
                "mode[{}]: {:.1} GB of weights on each GPU at TP={} is more than a {} holds ({:.1} GB): load each GPU's shard, or raise tp",
                run.index,
                bytes.as_f64() / 1e9,
                run.tp,
                gpu.name,
                gpu.memory.as_f64() / 1e9
            ),
        )),
        None => Ok(()),
    }
}

impl RawStorage {
    /// Validates the section; keys are named as `storage.<key>`.
    pub fn resolve(&self, source: &Source) -> ConfigResult<StorageSpec> {
        let invalid = |key: &str, message: String| source.invalid(None, &format!("storage.{key}"), message);
        let count_ok = |key: &str, n: u32, low: u32| {
            if (low..=MAX_DRIVES).contains(&n) { Ok(()) } else { Err(invalid(key, format!("{n} drives: use {low} to {MAX_DRIVES}"))) }
        };
        if let Some(n) = self.drives {
            count_ok("drives", n, 0)?;
        }
        let sweep = self.sweep.clone().unwrap_or_default();
        if sweep.len() > MAX_SWEEP_POINTS {
            return Err(invalid("sweep", format!("{} drive counts: at most {MAX_SWEEP_POINTS}", sweep.len())));
        }
        for &n in &sweep {
            count_ok("sweep", n, 1)?;
        }
        let placement = self.placement.as_deref().map(str::parse).transpose().map_err(|m: String| invalid("placement", m))?;
        let array = self.array.as_deref().map(str::parse).transpose().map_err(|m: String| invalid("array", m))?.unwrap_or(ArrayKind::Local);
        let striping =
            self.striping.as_deref().map(str::parse).transpose().map_err(|m: String| invalid("striping", m))?.unwrap_or(Striping::Raid0);
        // "none" turns a part off.
        let given = |text: &Option<String>| text.clone().filter(|t| t != "none");
        let load = given(&self.load).map(|t| t.parse()).transpose().map_err(|m: String| invalid("load", m))?;
        let kv_offload = given(&self.kv_offload).map(|t| t.parse()).transpose().map_err(|m: String| invalid("kv_offload", m))?;
        let paths = match &self.paths {
            Some(names) => {
                names.iter().map(|n| n.parse()).collect::<Result<Vec<StoragePath>, String>>().map_err(|m| invalid("paths", m))?
            }
            None => STORAGE_PATHS.to_vec(),
        };
        if paths.is_empty() {
            return Err(invalid("paths", "no storage path: list one or more of \"gds\", \"bounce\"".into()));
        }
        if load.is_none() && (!sweep.is_empty()) {
            return Err(invalid("sweep", "a sweep of drive counts times a load: set storage.load = \"shard\" or \"whole\"".into()));
        }
        let layout = LayoutChange { drives: self.drives, drive: self.drive.clone(), placement };
        let drives = JobTarget::drives(array, striping);
        Ok(StorageSpec { layout, drives, load, paths, sweep, checkpoint: self.checkpoint.unwrap_or(false), kv_offload })
    }
}
