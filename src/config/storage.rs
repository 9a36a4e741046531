//! The storage parts of icsim's files: NVMe drive classes (`[nvme.<key>]`
//! in the hardware model), how storage I/O is cut up and what it costs the
//! CPU (`[storage]` in the hardware model), and an experiment's `[storage]`
//! section. Raw serde types and their validation only; nothing here builds
//! a topology or simulates.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ConfigResult, check_range};
use crate::units::{Bandwidth, Bytes, Time};

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

/// Checks the storage parts of a merged hardware model.
pub fn validate_model(path: &Path, drives: &std::collections::BTreeMap<String, DriveModel>, storage: &StorageModel) -> ConfigResult<()> {
    for (name, drive) in drives {
        let key = |field: &str| format!("nvme.{name}.{field}");
        if drive.read.0 == 0 || drive.write.0 == 0 {
            return Err(ConfigError::invalid(path, key("read"), "read and write rates must be more than zero"));
        }
        if !(1..=16).contains(&drive.lanes) {
            return Err(ConfigError::invalid(path, key("lanes"), format!("{} lanes: a drive has 1 to 16", drive.lanes)));
        }
    }
    for (key, size) in [("storage.gds_io", storage.gds_io), ("storage.bounce_io", storage.bounce_io), ("storage.raid_chunk", storage.raid_chunk)]
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
    /// Which drives a GPU reads: "array" (one RAID-0 of every drive) or
    /// "local" (a RAID-0 of the drives nearest it).
    pub array: Option<String>,
    /// What is loaded before the query: "shard" (each GPU its TP shard),
    /// "whole" (every GPU the whole model) or "none".
    pub load: Option<String>,
    /// Storage paths to compare: "gds", "bounce".
    pub paths: Option<Vec<String>>,
    /// Drive counts of the load-time plot.
    pub sweep: Option<Vec<u32>>,
    /// Where the prompt's KV cache is written while decode runs: "host",
    /// "drive" or "none".
    pub kv_offload: Option<String>,
}
