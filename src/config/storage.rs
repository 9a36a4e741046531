//! The storage parts of icsim's files: NVMe drive classes (`[nvme.<key>]`
//! in the hardware model), how storage I/O is cut up and what it costs the
//! CPU (`[storage]` in the hardware model), and an experiment's `[storage]`
//! section. Raw serde types and the hardware model's checks only; the
//! workload resolves an experiment's section (`workload::storage::spec`).
//! Nothing here builds a topology or simulates.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::hardware::HardwareModel;
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
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
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
