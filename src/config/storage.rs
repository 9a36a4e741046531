//! The storage parts of icsim's files: NVMe drive classes (`[nvme.<key>]`
//! in the hardware model), how storage I/O is cut up and what it costs the
//! CPU (`[storage]` in the hardware model), and an experiment's `[storage]`
//! section. Raw serde types and their validation only; nothing here builds
//! a topology or simulates.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::experiment::Source;
use super::hardware::HardwareModel;
use super::{ConfigError, ConfigResult, check_range};
use crate::storage::{STORAGE_PATHS, StoragePath};
use crate::topology::{DriveLayout, Placement, Topology};
use crate::units::{Bandwidth, Bytes, Time};
use crate::workload::storage::{ArrayKind, JobTarget, LoadKind, OffloadTarget, Striping};

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

/// Checks the storage parts of a merged hardware model.
pub fn validate_model(path: &Path, model: &HardwareModel) -> ConfigResult<()> {
    for (name, drive) in &model.nvme {
        let key = |field: &str| format!("nvme.{name}.{field}");
        if drive.read.0 == 0 || drive.write.0 == 0 {
            return Err(ConfigError::invalid(path, key("read"), "read and write rates must be more than zero"));
        }
        if !(1..=16).contains(&drive.lanes) {
            return Err(ConfigError::invalid(path, key("lanes"), format!("{} lanes: a drive has 1 to 16", drive.lanes)));
        }
        if !model.pcie.contains_key(&drive.pcie_generation) {
            let known: Vec<&String> = model.pcie.keys().collect();
            return Err(ConfigError::invalid(
                path,
                key("pcie_generation"),
                format!("unknown generation {:?}; known: {known:?}", drive.pcie_generation),
            ));
        }
    }
    let storage = &model.storage;
    for (key, size) in
        [("storage.gds_io", storage.gds_io), ("storage.bounce_io", storage.bounce_io), ("storage.raid_chunk", storage.raid_chunk)]
    {
        if size.0 == 0 {
            return Err(ConfigError::invalid(path, key, "must be more than zero bytes"));
        }
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
