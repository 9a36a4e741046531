//! `icsim calibrate run`: measures a GPU machine and writes what it measured
//! as schema-1 measurements (shared/calibration/README.md), with system.json,
//! `nvidia-smi topo -m` and NCCL's own topology dump beside them. Copies are
//! measured in this process; NCCL collectives in child processes, one per
//! GPU count and transport/protocol/algorithm setting, because NCCL reads
//! its environment once. Beside single collectives it replays an LLM's
//! tensor-parallel allreduces, a prefill's and a decode step's, as they run.
//! A child is this same program re-run with a hidden subcommand; it reports
//! through tagged lines on its standard output (protocol.rs). Changes no
//! simulator logic.
//!
//! This file holds the orchestration (options, the machine probe, the run);
//! each concern has its own file: NCCL's environment per setting
//! (settings.rs), the child protocol (protocol.rs) and the parent's side of
//! a child (child_process.rs), size planning (sizes.rs, plan.rs), memory
//! limits (memory.rs), progress (progress.rs), what is written (output.rs).
//!
//! The CUDA driver and NCCL are loaded at run time, so everything builds and
//! every other command works on machines without them; a run without them
//! stops with one line saying what is missing. Every call into them (and
//! every copy that touches host memory) is the icsim-gpu crate's, the only
//! one with unsafe code; this module plans, records and reports.

pub mod child_process;
pub mod collectives;
pub mod copies;
pub mod kernels;
pub mod memory;
pub mod output;
pub mod plan;
pub mod progress;
pub mod protocol;
pub mod settings;
pub mod sizes;
pub mod system;

use std::path::{Path, PathBuf};

use icsim_gpu::GpuError;
use icsim_gpu::cuda::{self, Device, Driver};
use icsim_gpu::nccl::{self, Nccl, NcclError};
use serde::{Deserialize, Serialize};

use crate::calibrate::clock::UtcTime;
use crate::collective::{Algorithm, Op, Protocol};
use crate::config::llm::LlmModel;
use crate::transport::Mode;
use crate::units::{Bytes, Time};

use self::output::MeasurementsFile;
use self::plan::RunPlan;
use self::progress::Progress;
use self::protocol::ChildSpec;
use self::settings::{child_environment, debug_log_path, nccl_algorithm_name};
use self::system::SystemRecord;

pub use self::protocol::run_child;
pub use self::settings::TransportSetting;

/// Sizes measured when none are given.
pub const DEFAULT_COPY_SIZES: &str = "4KiB..1GiB:x4";
pub const DEFAULT_COLLECTIVE_SIZES: &str = "8B..4GiB:x4";

/// Why a run could not measure, in one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The GPU, its driver or one of its libraries (icsim-gpu).
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("--gpus {requested}: only {available} GPU(s) are visible ({visible})")]
    TooFewGpus { requested: usize, available: usize, visible: String },
    #[error(transparent)]
    Nccl(#[from] NcclError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot write {}: {message}", path.display())]
    Write { path: PathBuf, message: String },
    #[error("{0}")]
    Child(String),
    #[error("{} of {total} measurement groups failed: {}; the other measurements are in {}", failures.len(), failures.join("; "), out.display())]
    Failed { failures: Vec<String>, total: usize, out: PathBuf },
}

impl RunnerError {
    /// Whether the user can fix it by changing what they asked or installed
    /// (the command's exit code for bad input).
    pub fn is_usage(&self) -> bool {
        matches!(self, RunnerError::Usage(_) | RunnerError::Gpu(GpuError::Usage(_)))
    }
}

/// How each point is timed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Timed repetitions (graph replays for collectives), at most.
    pub iters: u32,
    /// Untimed repetitions first, at most.
    pub warmup: u32,
    /// Collective calls captured in one CUDA graph, at most.
    pub graph_calls: u32,
    /// Rough bound on the timed part of one point: slow operations get fewer
    /// repetitions (never fewer than one).
    pub point_time: Time,
}

impl Timing {
    /// How many times to repeat an operation that takes `estimate_us`.
    pub fn repetitions(&self, estimate_us: f64) -> u32 {
        let fitting = (self.point_time.as_us() / estimate_us.max(f64::MIN_POSITIVE)).floor();
        (fitting.min(f64::from(self.iters)) as u32).max(1)
    }
}
/// A measured time in microseconds as it is written: to the nanosecond,
/// and never zero (the schema refuses that).
pub fn microseconds(time_us: f64) -> f64 {
    ((time_us * 1000.0).round() / 1000.0).max(0.001)
}

// ---------------------------------------------------------------------------
// The parent.

/// Everything `icsim calibrate run` was asked, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    pub out: PathBuf,
    pub system: Option<String>,
    pub copy_sizes: Vec<Bytes>,
    pub collective_sizes: Vec<Bytes>,
    pub timing: Timing,
    pub ops: Vec<Op>,
    pub transports: Vec<TransportSetting>,
    pub protos: Vec<Option<Protocol>>,
    pub algos: Vec<Option<Algorithm>>,
    /// Channel counts to force (`None`: NCCL's own).
    pub channels: Vec<Option<u32>>,
    /// Keep NCCL's own log of every child under `<out>/nccl-debug/`.
    pub nccl_debug: bool,
    pub skip_copies: bool,
    pub skip_collectives: bool,
    pub nccl_lib: Option<PathBuf>,
    /// GPU counts to measure collectives on, the first N GPUs each time
    /// (empty: all visible); copies use the most.
    pub gpus: Vec<usize>,
    /// The LLM whose tensor-parallel allreduce passes are replayed, and
    /// its prompt length; `None` replays none.
    pub sequences: Option<SequenceOptions>,
    /// The `transport` of measurements under NCCL's defaults; detected when `None`.
    pub default_transport: Option<Mode>,
    /// How long one child process may take.
    pub child_timeout: Time,
    /// Add to measurements.jsonl instead of replacing it (a run split over
    /// several commands).
    pub append: bool,
    /// The command line, for system.json.
    pub command: Vec<String>,
    /// Measure compute kernels on the first GPU instead of copies and
    /// collectives (`--kernels`).
    pub kernels: Option<kernels::KernelOptions>,
}

impl RunOptions {
    pub fn validate(&self) -> Result<(), RunnerError> {
        let usage = |m: String| Err(RunnerError::Usage(m));
        if self.kernels.is_none() && self.skip_copies && self.skip_collectives {
            return usage("--skip-copies and --skip-collectives together leave nothing to measure".into());
        }
        if let Some(op) = self.ops.iter().find(|op| !matches!(op, Op::AllReduce | Op::AllGather | Op::ReduceScatter)) {
            return usage(format!("--ops: {op} is not measured by the runner; use allreduce, allgather, reducescatter"));
        }
        if let Some(algo) = self.algos.iter().flatten().find(|a| nccl_algorithm_name(**a).is_none()) {
            return usage(format!(
                "--algos: {algo} cannot be forced (NVLS stays off, NCCL_NVLS_ENABLE=0; oneshot and twoshot are no NCCL_ALGO values); use auto, ring or tree"
            ));
        }
        for (flag, empty) in [
            ("--ops", self.ops.is_empty()),
            ("--transports", self.transports.is_empty()),
            ("--protos", self.protos.is_empty()),
            ("--algos", self.algos.is_empty()),
            ("--channels", self.channels.is_empty()),
        ] {
            if empty && !self.skip_collectives {
                return usage(format!("{flag} lists nothing; name at least one, or use --skip-collectives"));
            }
        }
        if self.timing.iters == 0 || self.timing.graph_calls == 0 {
            return usage("--iters and --graph-calls must be at least 1".into());
        }
        if self.timing.point_time == Time::ZERO || self.child_timeout == Time::ZERO {
            return usage("--point-time and --child-timeout must be longer than zero".into());
        }
        if let Some(count) = self.channels.iter().flatten().find(|&&c| !(1..=crate::config::experiment::MAX_CHANNELS).contains(&c)) {
            return usage(format!("--channels {count}: NCCL runs 1 to {} channels", crate::config::experiment::MAX_CHANNELS));
        }
        if self.gpus.contains(&0) {
            return usage("--gpus 0 measures nothing; use at least 1".into());
        }
        if self.sequences.as_ref().is_some_and(|s| s.prompt == 0) {
            return usage("--prompt 0 leaves the prefill without tokens; use at least 1".into());
        }
        Ok(())
    }
}

/// Which LLM's allreduces to replay, and over how long a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceOptions {
    /// A shipped model's name or a model file, as `icsim llm --model` takes.
    pub llm: String,
    pub prompt: u64,
}

/// What a finished run wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub out: PathBuf,
    pub measurements: usize,
}

/// What the parent learns about the machine before measuring.
pub(super) struct Probe {
    pub(super) record: SystemRecord,
    topology_text: Option<String>,
    /// The least any measured GPU has for measurements.
    pub(super) usable_memory: u64,
}

pub(super) fn probe(driver: &Driver, devices: &[Device], nccl: Option<&Nccl>, options: &RunOptions) -> Result<Probe, RunnerError> {
    let mut gpus = Vec::new();
    let mut usable = u64::MAX;
    for device in devices {
        let (major, minor) = device.compute_capability()?;
        gpus.push(system::GpuRecord {
            index: device.ordinal(),
            name: device.name()?,
            memory_bytes: device.total_memory()?,
            compute_capability: format!("{major}.{minor}"),
            pci_bus_id: device.pci_bus_id()?,
        });
        usable = usable.min(memory::usable_memory(device.free_memory()?));
    }
    let mut peer_access = Vec::new();
    for a in devices {
        let row =
            devices.iter().map(|b| if a.ordinal() == b.ordinal() { Ok(true) } else { a.can_access_peer(b) }).collect::<Result<_, _>>()?;
        peer_access.push(row);
    }
    let smi_gpus = system::nvidia_smi(&system::SMI_GPU_QUERY).map(|t| system::parse_smi_gpus(&t)).unwrap_or_default();
    let measured_smi_indices: Option<Vec<usize>> = gpus
        .iter()
        .map(|g| {
            let pci = system::parse_pci_address(&g.pci_bus_id)?;
            smi_gpus.iter().find(|s| s.pci == pci).map(|s| s.index)
        })
        .collect();
    let topology_text = system::nvidia_smi(&["topo", "-m"]);
    let matrix = topology_text.as_deref().and_then(system::parse_topo_matrix);
    let (transport, reason) = match options.default_transport {
        Some(mode) => (mode, "set by --default-transport".to_string()),
        None => system::default_transport(matrix.as_ref(), measured_smi_indices.as_deref()),
    };
    let (cuda_major, cuda_minor) = driver.cuda_version()?;
    let hostname = system::hostname();
    let nccl_version = nccl.map(Nccl::version).transpose()?;
    let record = SystemRecord {
        system: options.system.clone().unwrap_or_else(|| system::default_system_name(&hostname)),
        hostname,
        measured_at: UtcTime::now().rfc3339(),
        icsim_version: env!("CARGO_PKG_VERSION").to_string(),
        gpu_count: gpus.len(),
        gpus,
        driver_version: smi_gpus.first().map(|g| g.driver_version.clone()),
        cuda_version: format!("{cuda_major}.{cuda_minor}"),
        nccl_version: nccl_version.map(|v| v.to_string()),
        nccl_library: nccl.map(Nccl::location),
        peer_access,
        default_transport: transport.to_string(),
        default_transport_reason: reason,
        command: options.command.clone(),
    };
    Ok(Probe { record, topology_text, usable_memory: usable })
}

/// Measures the machine as `options` ask, writing into `options.out`.
pub fn run(options: &RunOptions) -> Result<RunReport, RunnerError> {
    options.validate()?;
    if let Some(kernels) = &options.kernels {
        return kernels::run(options, kernels);
    }
    // A library the user named must work, whatever else is missing.
    let named_nccl = nccl::explicit_library(options.nccl_lib.as_deref()).map(|library| Nccl::load_explicit(&library)).transpose()?;
    let llm = match &options.sequences {
        Some(sequences) if !options.skip_collectives => {
            let llm = LlmModel::load(&sequences.llm).map_err(|e| RunnerError::Usage(format!("--model: {e}")))?;
            if sequences.prompt > llm.context_length {
                return Err(RunnerError::Usage(format!(
                    "--prompt {}: more than {}'s context of {} tokens",
                    sequences.prompt, llm.name, llm.context_length
                )));
            }
            Some(llm)
        }
        _ => None,
    };
    let driver = Driver::init()?;
    let visible = driver.device_count()?;
    let group_sizes = if options.gpus.is_empty() { vec![visible] } else { options.gpus.clone() };
    let devices = open_devices(&driver, group_sizes.iter().copied().max().unwrap_or(visible))?;
    let measure_collectives = !options.skip_collectives && group_sizes.iter().any(|&n| n >= 2);
    let nccl = match named_nccl {
        Some(nccl) => Some(nccl),
        None if measure_collectives => Some(Nccl::search()?),
        // Only for the system record.
        None => Nccl::search().ok(),
    };
    let probe = probe(&driver, &devices, nccl.as_ref(), options)?;
    let mut plan = RunPlan::new(options, &probe, devices.len(), &group_sizes, llm.as_ref());
    let out = output::write_system_files(&options.out, &probe, &mut plan.notices)?;
    let mut file = MeasurementsFile::open(out.join("measurements.jsonl"), options.append)?;
    let progress = Progress::new(plan.points());
    for notice in &plan.notices {
        progress.notice(notice);
    }

    let system = &probe.record.system;
    let mut failures = measure_copies(&devices, &plan.copies, &options.timing, &probe.record, &progress, &mut file);
    // The children open the GPUs themselves: give them the memory back.
    drop(devices);

    // `nccl` is there whenever collectives are planned (the search above fails otherwise).
    if let Some(nccl) = &nccl {
        let source = format!(
            "NCCL {} via icsim {} calibrate run",
            probe.record.nccl_version.as_deref().unwrap_or("(unknown version)"),
            env!("CARGO_PKG_VERSION")
        );
        for (gpus, setting, points) in &plan.collectives {
            let gpus = *gpus;
            let spec = ChildSpec {
                setting: *setting,
                transport: match setting.transport {
                    TransportSetting::Default => probe.record.default_transport.clone(),
                    TransportSetting::Shm => Mode::Shm.to_string(),
                },
                nccl_library: nccl.location(),
                gpus,
                points: points.clone(),
                timing: options.timing,
                system: system.clone(),
                source: source.clone(),
                llm: options.sequences.as_ref().map(|s| s.llm.clone()),
            };
            let debug_log = options.nccl_debug.then(|| debug_log_path(&out, gpus, setting));
            if let Some(folder) = debug_log.as_deref().and_then(Path::parent)
                && let Err(error) = std::fs::create_dir_all(folder)
            {
                return Err(RunnerError::Write { path: folder.to_path_buf(), message: error.to_string() });
            }
            let environment = child_environment(setting, &out.join("nccl-topo.xml"), debug_log.as_deref());
            let (measured, outcome) = child_process::run_child_process(&spec, &environment, options.child_timeout, &progress, &mut file);
            if let Err(reason) = outcome {
                let message = format!("collectives on {gpus} GPUs under {}: {reason}", setting.label());
                progress.warning(&message);
                progress.advance((points.len() - measured) as u64);
                failures.push(message);
            }
        }
    }
    progress.finish();
    if !failures.is_empty() {
        return Err(RunnerError::Failed { failures, total: plan.copies.len() + plan.collectives.len(), out });
    }
    Ok(RunReport { out, measurements: file.written })
}

/// Measures each planned copy path on `devices`, appending each mean to
/// `file` as soon as it is known; a path that fails is warned about and
/// returned among the failures, and the other paths go on.
fn measure_copies(
    devices: &[Device],
    plans: &[copies::CopyPlan],
    timing: &Timing,
    record: &SystemRecord,
    progress: &Progress,
    file: &mut MeasurementsFile,
) -> Vec<String> {
    let mut failures = Vec::new();
    let source = format!("icsim {} calibrate run, CUDA driver API (CUDA {})", env!("CARGO_PKG_VERSION"), record.cuda_version);
    let repeat = copies::Repeat { warmup: timing.warmup, repetitions: &|estimate| timing.repetitions(estimate) };
    for copy in plans {
        let mut measured = 0;
        let outcome = copies::measure_path(
            devices,
            copy.path,
            &copy.sizes,
            &repeat,
            &mut |size| progress.start(&format!("copy {} {size}", copy.path.name())),
            &mut |bytes, mean| -> Result<(), RunnerError> {
                measured += 1;
                file.append(&[copies::record(&record.system, &source, copy.path, bytes, &mean, timing.warmup)])?;
                progress.advance(1);
                Ok(())
            },
        );
        if let Err(error) = outcome {
            let message = format!("copy {}: {error}", copy.path.name());
            progress.warning(&message);
            progress.advance((copy.sizes.len() - measured) as u64);
            failures.push(message);
        }
    }
    failures
}

/// The first `count` GPUs.
pub(super) fn open_devices(driver: &Driver, count: usize) -> Result<Vec<Device>, RunnerError> {
    let visible = driver.device_count()?;
    if visible == 0 {
        return Err(GpuError::NoGpu { detail: "the driver reports no GPU".into(), visible: cuda::visible_devices() }.into());
    }
    if count > visible {
        return Err(RunnerError::TooFewGpus { requested: count, available: visible, visible: cuda::visible_devices() });
    }
    Ok((0..count).map(|ordinal| driver.open(ordinal)).collect::<Result<_, _>>()?)
}
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn timing() -> Timing {
        Timing { iters: 20, warmup: 3, graph_calls: 20, point_time: "200ms".parse().unwrap() }
    }

    #[test]
    fn repetitions_shrink_for_slow_operations_but_never_to_zero() {
        assert_eq!(timing().repetitions(5.0), 20);
        assert_eq!(timing().repetitions(50_000.0), 4);
        assert_eq!(timing().repetitions(5_000_000.0), 1);
        assert_eq!(timing().repetitions(0.0), 20);
    }

    pub(crate) fn options() -> RunOptions {
        RunOptions {
            out: PathBuf::from("out"),
            system: None,
            copy_sizes: vec![Bytes::kib(4)],
            collective_sizes: vec![Bytes(8)],
            timing: timing(),
            ops: vec![Op::AllReduce],
            transports: vec![TransportSetting::Default],
            protos: vec![None],
            algos: vec![None],
            channels: vec![None],
            nccl_debug: false,
            skip_copies: false,
            skip_collectives: false,
            nccl_lib: None,
            gpus: vec![],
            sequences: Some(SequenceOptions { llm: "llama-3.1-70b".into(), prompt: 8192 }),
            default_transport: None,
            child_timeout: "300s".parse().unwrap(),
            append: false,
            command: vec![],
            kernels: None,
        }
    }

    #[test]
    fn options_that_cannot_be_measured_are_refused() {
        assert!(options().validate().is_ok());
        let refused = |o: RunOptions| o.validate().unwrap_err().to_string();
        assert!(refused(RunOptions { skip_copies: true, skip_collectives: true, ..options() }).contains("nothing to measure"));
        assert!(refused(RunOptions { ops: vec![Op::Broadcast], ..options() }).contains("broadcast"));
        assert!(refused(RunOptions { algos: vec![Some(Algorithm::Nvls)], ..options() }).contains("NCCL_NVLS_ENABLE=0"));
        assert!(refused(RunOptions { gpus: vec![2, 0], ..options() }).contains("--gpus 0"));
        let no_prompt = RunOptions { sequences: Some(SequenceOptions { llm: "llama-3.1-70b".into(), prompt: 0 }), ..options() };
        assert!(refused(no_prompt).contains("--prompt 0"));
    }
}
