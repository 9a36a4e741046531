//! An experiment's `[storage]` section resolved for the workload: which
//! drives go on each mode's topology, what each GPU loads or checkpoints and
//! over which storage paths, with keys named as the user wrote them. The
//! section's raw data is `config::storage::RawStorage`.

use crate::config::ConfigResult;
use crate::config::experiment::Source;
use crate::config::hardware::HardwareModel;
use crate::config::llm::LlmModel;
use crate::config::storage::RawStorage;
use crate::storage::{STORAGE_PATHS, StoragePath};
use crate::topology::{DriveLayout, Placement, Topology};
use crate::workload::experiment::ModeRun;

use super::{ArrayKind, JobTarget, LoadKind, OffloadTarget, Striping, shard_bytes, weight_bytes};

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
    /// changes); the error is (key, message): a drive the hardware model
    /// does not know is `storage.drive`'s, drives the topology has no place
    /// for `storage.placement`'s.
    pub fn apply(&self, topo: &Topology, model: &HardwareModel) -> Result<Topology, (&'static str, String)> {
        if *self == LayoutChange::default() {
            return Ok(topo.clone());
        }
        let current = topo.drive_layout();
        let layout = DriveLayout {
            count: self.drives.unwrap_or(current.count),
            drive: self.drive.clone().unwrap_or(current.drive),
            placement: self.placement.unwrap_or(current.placement),
        };
        model.drive(&layout.drive).map_err(|message| ("storage.drive", message))?;
        topo.with_drives(&layout, model).map_err(|error| ("storage.placement", error.to_string()))
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

impl StorageSpec {
    /// Validates an experiment's `[storage]` section; keys are named as
    /// `storage.<key>`.
    pub fn resolve(raw: &RawStorage, source: &Source) -> ConfigResult<StorageSpec> {
        let spec = StorageSpec::read(raw, source)?;
        if spec.load.is_none() && !spec.sweep.is_empty() {
            let message = "a sweep of drive counts times a load: set storage.load = \"shard\" or \"whole\"";
            return Err(source.invalid(None, "storage.sweep", message));
        }
        Ok(spec)
    }

    /// Checks each key of `raw` on its own (what a `--set storage.<key>`
    /// or a sweep's value of one is held to before anything runs);
    /// [`StorageSpec::resolve`] adds the checks of keys together.
    pub fn read(raw: &RawStorage, source: &Source) -> ConfigResult<StorageSpec> {
        let invalid = |key: &str, message: String| source.invalid(None, &format!("storage.{key}"), message);
        let count_ok = |key: &str, n: u32, low: u32| {
            if (low..=MAX_DRIVES).contains(&n) { Ok(()) } else { Err(invalid(key, format!("{n} drives: use {low} to {MAX_DRIVES}"))) }
        };
        if let Some(n) = raw.drives {
            count_ok("drives", n, 0)?;
        }
        let sweep = raw.sweep.clone().unwrap_or_default();
        if sweep.len() > MAX_SWEEP_POINTS {
            return Err(invalid("sweep", format!("{} drive counts: at most {MAX_SWEEP_POINTS}", sweep.len())));
        }
        for &n in &sweep {
            count_ok("sweep", n, 1)?;
        }
        let placement = raw.placement.as_deref().map(str::parse).transpose().map_err(|m: String| invalid("placement", m))?;
        let array = raw.array.as_deref().map(str::parse).transpose().map_err(|m: String| invalid("array", m))?.unwrap_or(ArrayKind::Local);
        let striping =
            raw.striping.as_deref().map(str::parse).transpose().map_err(|m: String| invalid("striping", m))?.unwrap_or(Striping::Raid0);
        // "none" turns a part off.
        let given = |text: &Option<String>| text.clone().filter(|t| t != "none");
        let load = given(&raw.load).map(|t| t.parse()).transpose().map_err(|m: String| invalid("load", m))?;
        let kv_offload = given(&raw.kv_offload).map(|t| t.parse()).transpose().map_err(|m: String| invalid("kv_offload", m))?;
        let paths = match &raw.paths {
            Some(names) => {
                names.iter().map(|n| n.parse()).collect::<Result<Vec<StoragePath>, String>>().map_err(|m| invalid("paths", m))?
            }
            None => STORAGE_PATHS.to_vec(),
        };
        if paths.is_empty() {
            return Err(invalid("paths", "no storage path: list one or more of \"gds\", \"bounce\"".into()));
        }
        if let Some(twice) = crate::first_repeat(&paths) {
            return Err(invalid("paths", format!("{} is listed twice: list each of \"gds\", \"bounce\" once", paths[twice])));
        }
        let layout = LayoutChange { drives: raw.drives, drive: raw.drive.clone(), placement };
        let drives = JobTarget::drives(array, striping);
        Ok(StorageSpec { layout, drives, load, paths, sweep, checkpoint: raw.checkpoint.unwrap_or(false), kv_offload })
    }
}
