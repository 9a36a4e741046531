//! `icsim calibrate run`: measures a GPU machine and writes what it measured
//! as schema-1 measurements (shared/calibration/README.md), with system.json,
//! `nvidia-smi topo -m` and NCCL's own topology dump beside them. Copies are
//! measured in this process; NCCL collectives in child processes, one per
//! GPU count and transport/protocol/algorithm setting, because NCCL reads
//! its environment once. Beside single collectives it replays an LLM's
//! tensor-parallel allreduces, a prefill's and a decode step's, as they run. A child is this same program re-run with a hidden subcommand; it
//! reports through tagged lines on its standard output (the child protocol
//! below). Changes no simulator logic.
//!
//! The CUDA driver and NCCL are loaded at run time, so everything builds and
//! every other command works on machines without them; a run without them
//! stops with one line saying what is missing.

pub mod collectives;
pub mod copies;
pub mod cuda;
pub mod kernels;
pub mod nccl;
pub mod system;

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::calibrate::clock::UtcTime;
use crate::calibrate::schema::{Measurement, to_jsonl};
use crate::collective::{Algorithm, Op, Protocol};
use crate::config::llm::LlmModel;
use crate::transport::Mode;
use crate::units::{Bytes, Time};

use self::collectives::{CollectivePoint, Sequence};
use self::cuda::{Device, Driver};
use self::nccl::{DataType, Nccl, NcclError};
use self::system::SystemRecord;

/// Sizes measured when none are given.
pub const DEFAULT_COPY_SIZES: &str = "4KiB..1GiB:x4";
pub const DEFAULT_COLLECTIVE_SIZES: &str = "8B..4GiB:x4";

/// The hidden `icsim calibrate` subcommand a child process runs.
pub const CHILD_SUBCOMMAND: &str = "collective-child";

/// Why a run could not measure, in one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(
        "no NVIDIA GPU driver: the CUDA driver library (libcuda.so.1) cannot be loaded; run this on a machine with an NVIDIA GPU and its driver installed, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH"
    )]
    NoDriver,
    #[error("no usable NVIDIA GPU: {detail}; check that `nvidia-smi` lists the GPUs and that none is hidden from this process ({visible})")]
    NoGpu { detail: String, visible: String },
    #[error("--gpus {requested}: only {available} GPU(s) are visible ({visible})")]
    TooFewGpus { requested: usize, available: usize, visible: String },
    #[error("CUDA failed while {what}: {error}")]
    Cuda { what: String, error: String },
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

/// Which transport NCCL is told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportSetting {
    /// NCCL's own choice.
    Default,
    /// NCCL_P2P_DISABLE=1: GPU pairs talk through host shared memory.
    Shm,
}

impl FromStr for TransportSetting {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "default" => Ok(TransportSetting::Default),
            "shm" => Ok(TransportSetting::Shm),
            other => Err(format!("unknown transport setting {other:?}: use default (NCCL's choice) or shm (NCCL_P2P_DISABLE=1)")),
        }
    }
}

impl fmt::Display for TransportSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportSetting::Default => "default",
            TransportSetting::Shm => "shm",
        })
    }
}

/// NCCL_PROTO's spelling of a protocol.
pub fn nccl_protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Ll => "LL",
        Protocol::Ll128 => "LL128",
        Protocol::Simple => "Simple",
    }
}

/// NCCL_ALGO's spelling of the algorithms the runner can force.
pub fn nccl_algorithm_name(algorithm: Algorithm) -> Option<&'static str> {
    match algorithm {
        Algorithm::Ring => Some("Ring"),
        Algorithm::Tree => Some("Tree"),
        Algorithm::Nvls | Algorithm::OneShot | Algorithm::TwoShot => None,
    }
}

/// NCCL variables a child must not inherit: each would change what a setting
/// measures, so the runner sets them or leaves them unset itself.
pub const NCCL_VARIABLES_SET_PER_SETTING: [&str; 12] = [
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_NVLS_ENABLE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
];

/// One way of running NCCL, measured in its own process: a transport, at
/// most one protocol or algorithm forced, and the channel count where forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclSetting {
    pub transport: TransportSetting,
    pub proto: Option<Protocol>,
    pub algo: Option<Algorithm>,
    /// NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS.
    #[serde(default)]
    pub channels: Option<u32>,
}

impl NcclSetting {
    /// Every transport with NCCL's own choices (where "auto" is asked for),
    /// then with each protocol and each algorithm forced, one at a time; all
    /// of it at each channel count asked for (`None`: NCCL's own).
    pub fn all(
        transports: &[TransportSetting],
        protos: &[Option<Protocol>],
        algos: &[Option<Algorithm>],
        channel_counts: &[Option<u32>],
    ) -> Vec<NcclSetting> {
        let mut settings = Vec::new();
        for &channels in channel_counts {
            for &transport in transports {
                let forced = protos
                    .iter()
                    .map(|&proto| NcclSetting { transport, proto, algo: None, channels })
                    .chain(algos.iter().map(|&algo| NcclSetting { transport, proto: None, algo, channels }));
                for setting in forced {
                    if !settings.contains(&setting) {
                        settings.push(setting);
                    }
                }
            }
        }
        settings
    }

    /// Whether NCCL chooses everything (nothing forced).
    pub fn is_unforced(&self) -> bool {
        self.proto.is_none() && self.algo.is_none() && self.channels.is_none()
    }

    /// The variables this setting sets. NVLink SHARP (NVLS) is always off:
    /// on shared machines its multicast objects can take GPUs out of service.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("NCCL_NVLS_ENABLE", "0".to_string())];
        if self.transport == TransportSetting::Shm {
            env.push(("NCCL_P2P_DISABLE", "1".into()));
        }
        if let Some(proto) = self.proto {
            env.push(("NCCL_PROTO", nccl_protocol_name(proto).into()));
        }
        if let Some(name) = self.algo.and_then(nccl_algorithm_name) {
            env.push(("NCCL_ALGO", name.into()));
        }
        if let Some(channels) = self.channels {
            env.push(("NCCL_MIN_NCHANNELS", channels.to_string()));
            env.push(("NCCL_MAX_NCHANNELS", channels.to_string()));
        }
        env
    }

    /// The `env` field of its measurements: "NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1".
    pub fn env_text(&self) -> String {
        self.environment().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// "shm proto=ll", for progress and messages.
    pub fn label(&self) -> String {
        let mut label = self.transport.to_string();
        if let Some(proto) = self.proto {
            label += &format!(" proto={proto}");
        }
        if let Some(algo) = self.algo {
            label += &format!(" algo={algo}");
        }
        if let Some(channels) = self.channels {
            label += &format!(" channels={channels}");
        }
        label
    }

    /// Whether NCCL can run `op` under this setting: it runs the tree
    /// algorithm only for all-reduce.
    pub fn supports(&self, op: Op) -> bool {
        self.algo != Some(Algorithm::Tree) || op == Op::AllReduce
    }
}

/// What a child's environment gets: variables to set and to remove.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildEnvironment {
    pub set: Vec<(&'static str, String)>,
    pub remove: Vec<&'static str>,
}

/// A child's environment: the setting's variables, where NCCL dumps its
/// topology, and where it writes its log (`debug_log`: NCCL_DEBUG=INFO for
/// set-up and tuning, which names the channels, algorithm and protocol of
/// every call).
pub fn child_environment(setting: &NcclSetting, topology_dump: &Path, debug_log: Option<&Path>) -> ChildEnvironment {
    let mut set = setting.environment();
    set.push(("NCCL_TOPO_DUMP_FILE", topology_dump.display().to_string()));
    if let Some(log) = debug_log {
        set.push(("NCCL_DEBUG", "INFO".into()));
        set.push(("NCCL_DEBUG_SUBSYS", "INIT,TUNING".into()));
        set.push(("NCCL_DEBUG_FILE", log.display().to_string()));
    }
    let remove = NCCL_VARIABLES_SET_PER_SETTING.iter().copied().filter(|name| !set.iter().any(|(k, _)| k == name)).collect();
    ChildEnvironment { set, remove }
}

/// Where NCCL logs one child under `--nccl-debug`: one file per GPU count and
/// setting, `%h.%p` (host, process) keeping the ranks' lines apart.
pub fn debug_log_path(out: &Path, gpus: usize, setting: &NcclSetting) -> PathBuf {
    let name: String = setting.label().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    out.join("nccl-debug").join(format!("{gpus}gpu-{name}.%h.%p.log"))
}

/// What a measurement may use of a GPU's free memory: all but a reserve for
/// NCCL's own buffers, the CUDA context and other processes.
pub fn usable_memory(free: u64) -> u64 {
    const RESERVE_AT_LEAST: u64 = 2 << 30;
    free.saturating_sub(RESERVE_AT_LEAST.max(free / 10))
}

/// Requested sizes, rounded down to a multiple of a granularity, split into
/// those that fit and those that do not.
#[derive(Debug, Clone, PartialEq)]
pub struct SizePlan {
    pub kept: Vec<Bytes>,
    pub too_large: Vec<Bytes>,
}

pub fn plan_sizes(requested: &[Bytes], granularity: u64, fits: impl Fn(Bytes) -> bool) -> SizePlan {
    assert!(granularity > 0, "size granularity must be positive");
    let mut plan = SizePlan { kept: Vec::new(), too_large: Vec::new() };
    for size in requested {
        let rounded = Bytes(size.0 / granularity * granularity);
        if rounded.0 == 0 || plan.kept.contains(&rounded) || plan.too_large.contains(&rounded) {
            continue;
        }
        if fits(rounded) { plan.kept.push(rounded) } else { plan.too_large.push(rounded) }
    }
    plan
}

/// A measured time in microseconds as it is written: to the nanosecond,
/// and never zero (the schema refuses that).
pub fn microseconds(time_us: f64) -> f64 {
    ((time_us * 1000.0).round() / 1000.0).max(0.001)
}

/// "1GiB, 4GiB".
pub fn size_list(sizes: &[Bytes]) -> String {
    sizes.iter().map(Bytes::to_string).collect::<Vec<_>>().join(", ")
}

/// MemAvailable of /proc/meminfo, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// ---------------------------------------------------------------------------
// The child protocol: the child writes one tagged JSON object per line on its
// standard output. The tag may follow text NCCL printed without a newline
// (its log goes to the same stream), so it is searched anywhere in a line.

/// Starts every line of the child protocol; the number is its version.
pub const CHILD_TAG: &str = "@icsim-child:1 ";

/// What a child reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChildMessage {
    /// It begins measuring this.
    Started { label: String },
    /// One finished measurement.
    Measured { measurement: Box<Measurement> },
    /// Something the user should know.
    Notice { text: String },
}

/// What the parent hands a child: everything it measures and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildSpec {
    pub setting: NcclSetting,
    /// The `transport` its measurements get ("nvswitch", "auto", "shm").
    pub transport: String,
    /// What to load NCCL from (a path, or a library name).
    pub nccl_library: String,
    /// Use the first `gpus` GPUs, one rank each.
    pub gpus: usize,
    pub points: Vec<CollectivePoint>,
    pub timing: Timing,
    pub system: String,
    pub source: String,
    /// The LLM whose allreduce sequences are among the points (its name
    /// as `--llm` gave it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<String>,
}

pub fn encode(message: &ChildMessage) -> String {
    format!("{CHILD_TAG}{}", serde_json::to_string(message).expect("plain data"))
}

/// One line of a child's standard output.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildLine {
    /// Text that is not the protocol's (NCCL's log), possibly empty.
    pub text: String,
    /// The protocol message on the line, or why it could not be read.
    pub message: Option<Result<ChildMessage, String>>,
}

pub fn decode(line: &str) -> ChildLine {
    match line.find(CHILD_TAG) {
        None => ChildLine { text: line.to_string(), message: None },
        Some(at) => {
            let json = &line[at + CHILD_TAG.len()..];
            let message = serde_json::from_str(json).map_err(|e| format!("unreadable child message {json:?}: {e}"));
            ChildLine { text: line[..at].to_string(), message: Some(message) }
        }
    }
}

/// Runs in the child process: measures the collectives `spec_json` asks for
/// and reports them on standard output.
pub fn run_child(spec_json: &str) -> Result<(), RunnerError> {
    let spec: ChildSpec =
        serde_json::from_str(spec_json).map_err(|e| RunnerError::Child(format!("unreadable child specification: {e}")))?;
    let emit = |message: ChildMessage| {
        // One write of the whole line: pipe writes this short are atomic, so
        // NCCL's log (on the same stream) cannot land inside it.
        let line = encode(&message) + "\n";
        let mut out = std::io::stdout().lock();
        // A parent that went away leaves nobody to tell.
        let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
    };
    collectives::run(&spec, &emit)
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

/// The passes of `llm` at TP=`ranks` as measured points: a prefill of
/// `prompt` tokens and one decode step, each `allreduces_per_pass` calls.
/// Says in `notices` why any is left out.
pub fn sequence_points(llm: &LlmModel, prompt: u64, ranks: usize, device_limit: u64, notices: &mut Vec<String>) -> Vec<CollectivePoint> {
    if !crate::workload::tp::allowed_degrees(llm, ranks as u32).contains(&(ranks as u32)) {
        notices
            .push(format!("{}: TP={ranks} cannot split its heads and FFN, so its allreduces are not replayed on {ranks} GPUs", llm.name));
        return Vec::new();
    }
    let Some(dtype) = DataType::of_width(llm.dtype_bytes) else {
        notices.push(format!(
            "{}: activations of {} bytes have no NCCL type here; its allreduces are not replayed",
            llm.name, llm.dtype_bytes
        ));
        return Vec::new();
    };
    let calls = u32::try_from(llm.allreduces_per_pass()).unwrap_or(u32::MAX);
    let mut points = Vec::new();
    for tokens in [prompt, 1] {
        let bytes = llm.allreduce_bytes(tokens);
        if bytes.0.saturating_mul(2) > device_limit {
            notices.push(format!("{}: a {tokens}-token allreduce of {bytes} is more than the free GPU memory allows", llm.name));
            continue;
        }
        points.push(CollectivePoint { op: Op::AllReduce, bytes, sequence: Some(Sequence { tokens, calls, dtype }) });
    }
    points
}

/// What a finished run wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub out: PathBuf,
    pub measurements: usize,
}

/// The progress bar on standard error (drawn only on a terminal), with
/// notices printed above it.
pub struct Progress {
    pub(super) bar: ProgressBar,
}

impl Progress {
    pub(super) fn new(total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar }
    }

    /// Shows what is being measured.
    pub fn start(&self, label: &str) {
        self.bar.set_message(label.to_string());
    }

    /// Counts `points` as done (measured, or given up).
    pub fn advance(&self, points: u64) {
        self.bar.inc(points);
    }

    pub fn notice(&self, text: &str) {
        self.bar.suspend(|| eprintln!("notice: {text}"));
    }

    pub fn warning(&self, text: &str) {
        self.bar.suspend(|| eprintln!("warning: {text}"));
    }

    /// Passes on a line a child printed that is not the protocol's.
    fn forward(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }
}

/// measurements.jsonl, written as measurements arrive so that a failure
/// later keeps what was measured.
pub(super) struct MeasurementsFile {
    path: PathBuf,
    file: File,
    pub(super) written: usize,
}

impl MeasurementsFile {
    /// Opens the file empty, or keeps what it holds when `append`.
    pub(super) fn open(path: PathBuf, append: bool) -> Result<MeasurementsFile, RunnerError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(|e| RunnerError::Write { path: path.clone(), message: e.to_string() })?;
        Ok(MeasurementsFile { path, file, written: 0 })
    }

    pub(super) fn append(&mut self, measurements: &[Measurement]) -> Result<(), RunnerError> {
        self.file
            .write_all(to_jsonl(measurements).as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| RunnerError::Write { path: self.path.clone(), message: e.to_string() })?;
        self.written += measurements.len();
        Ok(())
    }
}

fn write_file(path: &Path, contents: &str) -> Result<(), RunnerError> {
    std::fs::write(path, contents).map_err(|e| RunnerError::Write { path: path.to_path_buf(), message: e.to_string() })
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
        usable = usable.min(usable_memory(device.free_memory()?));
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
            Some(LlmModel::load(&sequences.llm).map_err(|e| RunnerError::Usage(format!("--llm: {e}")))?)
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
    let out = write_system_files(&options.out, &probe, &mut plan.notices)?;
    let mut file = MeasurementsFile::open(out.join("measurements.jsonl"), options.append)?;
    let progress = Progress::new(plan.points());
    for notice in &plan.notices {
        progress.notice(notice);
    }

    let system = &probe.record.system;
    let mut failures = Vec::new();
    let source = format!("icsim {} calibrate run, CUDA driver API (CUDA {})", env!("CARGO_PKG_VERSION"), probe.record.cuda_version);
    for copy in &plan.copies {
        let mut measured = 0;
        let outcome = copies::measure_path(&devices, copy, &options.timing, &progress, &mut |bytes, mean| {
            measured += 1;
            file.append(&[copies::record(system, &source, copy.path, bytes, &mean, options.timing.warmup)])
        });
        if let Err(error) = outcome {
            let message = format!("copy {}: {error}", copy.path.name());
            progress.warning(&message);
            progress.advance((copy.sizes.len() - measured) as u64);
            failures.push(message);
        }
    }
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
            let (measured, outcome) = run_child_process(&spec, &environment, options.child_timeout, &progress, &mut file);
            if let Err(reason) = outcome {
                let message = format!("collectives on {gpus} GPUs under {}: {reason}", setting.label());
                progress.warning(&message);
                progress.advance((points.len() - measured) as u64);
                failures.push(message);
            }
        }
    }
    progress.bar.finish_and_clear();
    if !failures.is_empty() {
        return Err(RunnerError::Failed { failures, total: plan.copies.len() + plan.collectives.len(), out });
    }
    Ok(RunReport { out, measurements: file.written })
}

/// The first `count` GPUs.
pub(super) fn open_devices(driver: &Driver, count: usize) -> Result<Vec<Device>, RunnerError> {
    let visible = driver.device_count()?;
    if visible == 0 {
        return Err(RunnerError::NoGpu { detail: "the driver reports no GPU".into(), visible: cuda::visible_devices() });
    }
    if count > visible {
        return Err(RunnerError::TooFewGpus { requested: count, available: visible, visible: cuda::visible_devices() });
    }
    (0..count).map(|ordinal| driver.open(ordinal)).collect()
}

/// What a run measures, and the notices about what it leaves out.
struct RunPlan {
    copies: Vec<copies::CopyPlan>,
    /// Each GPU count and NCCL setting with its points (those with none
    /// are left out).
    collectives: Vec<(usize, NcclSetting, Vec<CollectivePoint>)>,
    notices: Vec<String>,
}

impl RunPlan {
    /// Copies on the `gpus` opened GPUs; collectives on each of
    /// `group_sizes`; `llm`'s allreduce passes where NCCL chooses.
    fn new(options: &RunOptions, probe: &Probe, gpus: usize, group_sizes: &[usize], llm: Option<&LlmModel>) -> RunPlan {
        let mut notices = Vec::new();
        let host_limit = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| parse_mem_available(&m)).map_or(u64::MAX, |a| a / 2);
        let copies = if options.skip_copies {
            Vec::new()
        } else {
            let peer_0_1 = probe.record.peer_access.first().and_then(|row| row.get(1)).copied().unwrap_or(false);
            copies::plan(gpus, peer_0_1, &options.copy_sizes, probe.usable_memory, host_limit, &mut notices)
        };
        let mut collectives = Vec::new();
        if !options.skip_collectives {
            for &ranks in group_sizes {
                if ranks < 2 {
                    notices.push(format!(
                        "{ranks} GPU: NCCL collectives need 2 or more ranks, so none are measured on it; run on 2+ GPUs (or --gpus 2) to measure them"
                    ));
                    continue;
                }
                collectives.extend(Self::collectives_on(options, probe.usable_memory, ranks, llm, &mut notices));
            }
            if !collectives.is_empty() {
                for name in NCCL_VARIABLES_SET_PER_SETTING {
                    if std::env::var_os(name).is_some() {
                        notices.push(format!(
                            "{name} from the environment is not passed on: the runner sets NCCL's transport variables per setting"
                        ));
                    }
                }
            }
        }
        // Each GPU count would say the same about a setting.
        let mut unique = Vec::new();
        for notice in notices {
            if !unique.contains(&notice) {
                unique.push(notice);
            }
        }
        RunPlan { copies, collectives, notices: unique }
    }

    /// Every setting's points on `ranks` GPUs: single collectives, and the
    /// LLM's allreduce passes where nothing is forced.
    fn collectives_on(
        options: &RunOptions,
        device_limit: u64,
        ranks: usize,
        llm: Option<&LlmModel>,
        notices: &mut Vec<String>,
    ) -> Vec<(usize, NcclSetting, Vec<CollectivePoint>)> {
        let points = collectives::plan_points(&options.ops, &options.collective_sizes, ranks, device_limit, notices);
        let sequences = match (llm, &options.sequences) {
            (Some(llm), Some(asked)) => sequence_points(llm, asked.prompt, ranks, device_limit, notices),
            _ => Vec::new(),
        };
        let mut out = Vec::new();
        for setting in NcclSetting::all(&options.transports, &options.protos, &options.algos, &options.channels) {
            let mut kept: Vec<CollectivePoint> = points.iter().copied().filter(|p| setting.supports(p.op)).collect();
            if kept.len() < points.len() {
                notices.push(format!(
                    "{}: NCCL runs the tree algorithm only for allreduce; the other collectives are skipped there",
                    setting.label()
                ));
            }
            if setting.is_unforced() {
                kept.extend(&sequences);
            }
            if !kept.is_empty() {
                out.push((ranks, setting, kept));
            }
        }
        out
    }

    fn points(&self) -> u64 {
        let copies: usize = self.copies.iter().map(|p| p.sizes.len()).sum();
        let collectives: usize = self.collectives.iter().map(|(_, _, p)| p.len()).sum();
        (copies + collectives) as u64
    }
}

/// Creates the output folder and writes system.json and nvidia-smi-topo.txt;
/// returns the folder's absolute path (children are told where to dump).
pub(super) fn write_system_files(out: &Path, probe: &Probe, notices: &mut Vec<String>) -> Result<PathBuf, RunnerError> {
    let cannot = |e: std::io::Error| RunnerError::Write { path: out.to_path_buf(), message: e.to_string() };
    std::fs::create_dir_all(out).map_err(cannot)?;
    let out = out.canonicalize().map_err(cannot)?;
    match &probe.topology_text {
        Some(text) => write_file(&out.join("nvidia-smi-topo.txt"), text)?,
        None => notices.push("nvidia-smi is not available: no nvidia-smi-topo.txt".into()),
    }
    write_file(&out.join("system.json"), &(serde_json::to_string_pretty(&probe.record).expect("plain data") + "\n"))?;
    Ok(out)
}

/// Runs one child and relays what it reports; returns how many points it
/// measured, and why it failed if it did.
fn run_child_process(
    spec: &ChildSpec,
    environment: &ChildEnvironment,
    timeout: Time,
    progress: &Progress,
    file: &mut MeasurementsFile,
) -> (usize, Result<(), String>) {
    let executable = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => return (0, Err(format!("cannot find this program to re-run it: {error}"))),
    };
    let mut command = Command::new(executable);
    command
        .args(["calibrate", CHILD_SUBCOMMAND, "--spec", &serde_json::to_string(spec).expect("plain data")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in &environment.remove {
        command.env_remove(name);
    }
    for (name, value) in &environment.set {
        command.env(name, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return (0, Err(format!("cannot start a measuring process: {error}"))),
    };
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return (0, Err("the measuring process has no output pipes".into()));
    };
    let (lines, received) = mpsc::channel::<String>();
    let stdout_reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let stderr_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    });

    let deadline = Instant::now() + Duration::from_secs_f64(timeout.as_secs());
    let mut measured = 0;
    let mut problem = None;
    loop {
        match received.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let decoded = decode(&line);
                if !decoded.text.trim().is_empty() {
                    progress.forward(&decoded.text);
                }
                match decoded.message {
                    None => {}
                    Some(Ok(ChildMessage::Started { label })) => progress.start(&label),
                    Some(Ok(ChildMessage::Notice { text })) => progress.notice(&text),
                    Some(Ok(ChildMessage::Measured { measurement })) => {
                        if let Err(error) = file.append(&[*measurement]) {
                            problem.get_or_insert(error.to_string());
                        }
                        measured += 1;
                        progress.advance(1);
                    }
                    Some(Err(error)) => progress.warning(&error),
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                // Stops only the process this function started.
                let _ = child.kill();
                problem.get_or_insert(format!(
                    "did not finish within {timeout} and was stopped; raise --child-timeout or measure fewer sizes"
                ));
                break;
            }
        }
    }
    let status = child.wait();
    let _ = stdout_reader.join();
    let errors = stderr_reader.join().unwrap_or_default();
    if let Some(problem) = problem {
        return (measured, Err(problem));
    }
    match status {
        Ok(status) if status.success() => (measured, Ok(())),
        Ok(status) => (measured, Err(format!("the measuring process {}: {}", exit_description(status), last_error(&errors)))),
        Err(error) => (measured, Err(format!("cannot wait for the measuring process: {error}"))),
    }
}

fn exit_description(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("exited with {status}")
}

/// The child's own error line, else the last thing it said.
fn last_error(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.iter().rev().find_map(|l| l.strip_prefix("error: ")) {
        Some(error) => error.to_string(),
        None => lines.last().map_or_else(|| "it said nothing on standard error".to_string(), |l| l.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing { iters: 20, warmup: 3, graph_calls: 20, point_time: "200ms".parse().unwrap() }
    }

    #[test]
    fn repetitions_shrink_for_slow_operations_but_never_to_zero() {
        assert_eq!(timing().repetitions(5.0), 20);
        assert_eq!(timing().repetitions(50_000.0), 4);
        assert_eq!(timing().repetitions(5_000_000.0), 1);
        assert_eq!(timing().repetitions(0.0), 20);
    }

    #[test]
    fn settings_force_one_thing_at_a_time() {
        let settings = NcclSetting::all(
            &[TransportSetting::Default, TransportSetting::Shm],
            &[None, Some(Protocol::Ll), Some(Protocol::Ll128), Some(Protocol::Simple)],
            &[None, Some(Algorithm::Ring), Some(Algorithm::Tree)],
            &[None],
        );
        assert_eq!(settings.len(), 12);
        assert!(settings.iter().all(|s| s.proto.is_none() || s.algo.is_none()));
        let labels: Vec<String> = settings.iter().map(NcclSetting::label).collect();
        assert_eq!(
            &labels[..6],
            &["default", "default proto=ll", "default proto=ll128", "default proto=simple", "default algo=ring", "default algo=tree"]
        );
        // Without "auto" nothing runs unforced.
        let forced_only = NcclSetting::all(&[TransportSetting::Shm], &[Some(Protocol::Simple)], &[], &[None]);
        assert_eq!(
            forced_only,
            vec![NcclSetting { transport: TransportSetting::Shm, proto: Some(Protocol::Simple), algo: None, channels: None }]
        );
    }

    #[test]
    fn channel_counts_multiply_the_settings_and_are_forced_both_ways() {
        let settings = NcclSetting::all(&[TransportSetting::Default], &[None, Some(Protocol::Ll)], &[], &[None, Some(1), Some(4)]);
        assert_eq!(settings.len(), 6);
        assert_eq!(settings.iter().filter(|s| s.is_unforced()).count(), 1, "only NCCL's own channels leave everything to NCCL");
        let one = settings.iter().find(|s| s.channels == Some(1) && s.proto.is_none()).unwrap();
        assert_eq!(one.label(), "default channels=1");
        assert_eq!(one.env_text(), "NCCL_NVLS_ENABLE=0 NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1");
        let log = debug_log_path(Path::new("/out"), 2, one);
        assert_eq!(log, Path::new("/out/nccl-debug/2gpu-default-channels-1.%h.%p.log"));
        let env = child_environment(one, Path::new("/out/nccl-topo.xml"), Some(&log));
        assert!(env.set.contains(&("NCCL_DEBUG", "INFO".into())) && env.set.iter().any(|(k, _)| *k == "NCCL_DEBUG_FILE"));
        assert!(!env.remove.contains(&"NCCL_DEBUG"), "a variable the child gets is not removed");
    }

    #[test]
    fn every_child_environment_turns_nvls_off_and_shm_disables_p2p() {
        let dump = Path::new("/out/nccl-topo.xml");
        let default =
            child_environment(&NcclSetting { transport: TransportSetting::Default, proto: None, algo: None, channels: None }, dump, None);
        assert!(default.set.contains(&("NCCL_NVLS_ENABLE", "0".into())));
        assert!(default.set.contains(&("NCCL_TOPO_DUMP_FILE", "/out/nccl-topo.xml".into())));
        assert!(!default.set.iter().any(|(k, _)| *k == "NCCL_P2P_DISABLE"));
        assert!(default.remove.contains(&"NCCL_P2P_DISABLE") && default.remove.contains(&"NCCL_PROTO"));

        let shm = NcclSetting { transport: TransportSetting::Shm, proto: Some(Protocol::Ll128), algo: None, channels: None };
        let env = child_environment(&shm, dump, None);
        assert!(env.set.contains(&("NCCL_NVLS_ENABLE", "0".into())));
        assert!(env.set.contains(&("NCCL_P2P_DISABLE", "1".into())));
        assert!(env.set.contains(&("NCCL_PROTO", "LL128".into())));
        assert!(!env.remove.contains(&"NCCL_P2P_DISABLE") && !env.remove.contains(&"NCCL_NVLS_ENABLE"));
        assert_eq!(shm.env_text(), "NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_PROTO=LL128");

        let tree = NcclSetting { transport: TransportSetting::Default, proto: None, algo: Some(Algorithm::Tree), channels: None };
        assert!(child_environment(&tree, dump, None).set.contains(&("NCCL_ALGO", "Tree".into())));
        assert!(tree.supports(Op::AllReduce) && !tree.supports(Op::AllGather));
    }

    #[test]
    fn sizes_are_rounded_deduplicated_and_capped() {
        let requested = [Bytes(8), Bytes(12), Bytes(32), Bytes(4), Bytes::gib(1), Bytes::gib(4)];
        let plan = plan_sizes(&requested, 8, |b| b <= Bytes::gib(2));
        assert_eq!(plan.kept, vec![Bytes(8), Bytes(32), Bytes::gib(1)]);
        assert_eq!(plan.too_large, vec![Bytes::gib(4)]);
    }

    #[test]
    fn an_llm_pass_is_two_allreduces_per_layer_of_its_activations() {
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let mut notices = Vec::new();
        let points = sequence_points(&llm, 8192, 8, 80 << 30, &mut notices);
        let shapes: Vec<(Bytes, Option<Sequence>)> = points.iter().map(|p| (p.bytes, p.sequence)).collect();
        let pass = |tokens| Some(Sequence { tokens, calls: 160, dtype: DataType::Bfloat16 });
        assert_eq!(shapes, vec![(Bytes::mib(128), pass(8192)), (Bytes::kib(16), pass(1))]);
        assert!(notices.is_empty(), "{notices:?}");
        // 64 heads do not split over 3 GPUs; a small GPU keeps only the decode step.
        assert!(sequence_points(&llm, 8192, 3, 80 << 30, &mut notices).is_empty());
        assert_eq!(sequence_points(&llm, 8192, 2, 100 << 20, &mut notices).len(), 1);
        assert!(notices[0].contains("TP=3") && notices[1].contains("128MiB"), "{notices:?}");
    }

    #[test]
    fn usable_memory_keeps_a_reserve() {
        assert_eq!(usable_memory(100 << 30), 90 << 30);
        assert_eq!(usable_memory(10 << 30), 8 << 30);
        assert_eq!(usable_memory(1 << 30), 0);
        assert_eq!(parse_mem_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"), Some(2 << 20));
    }

    #[test]
    fn child_messages_round_trip_and_survive_nccl_text_before_them() {
        let measurement = Measurement {
            schema: 1,
            system: "x".into(),
            op: "allreduce".into(),
            bytes: 8,
            time_us: 9.5,
            ranks: Some(2),
            ..Measurement::default()
        };
        for message in [
            ChildMessage::Started { label: "allreduce shm 8B".into() },
            ChildMessage::Measured { measurement: Box::new(measurement) },
            ChildMessage::Notice { text: "hello".into() },
        ] {
            let line = encode(&message);
            assert!(!line.contains('\n'));
            assert_eq!(decode(&line), ChildLine { text: String::new(), message: Some(Ok(message.clone())) });
            let glued = format!("host:1:2 [0] NCCL INFO Channel 00/02 {line}");
            let decoded = decode(&glued);
            assert_eq!(decoded.text, "host:1:2 [0] NCCL INFO Channel 00/02 ");
            assert_eq!(decoded.message, Some(Ok(message)));
        }
        assert_eq!(decode("host:1:2 [0] NCCL INFO Bootstrap").message, None);
        assert!(matches!(decode(&format!("{CHILD_TAG}{{\"kind\": \"bogus\"}}")).message, Some(Err(_))));
    }

    #[test]
    fn child_specs_round_trip_through_json() {
        let spec = ChildSpec {
            setting: NcclSetting { transport: TransportSetting::Shm, proto: None, algo: Some(Algorithm::Ring), channels: None },
            transport: "shm".into(),
            nccl_library: "/x/libnccl.so.2".into(),
            gpus: 2,
            points: vec![CollectivePoint::single(Op::ReduceScatter, Bytes::mib(64))],
            timing: timing(),
            system: "box".into(),
            source: "NCCL 2.28.9".into(),
            llm: None,
        };
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ChildSpec>(&text).unwrap(), spec);
    }

    #[test]
    fn measurements_replace_the_file_unless_appended() {
        let path = std::env::temp_dir().join(format!("icsim-measurements-{}.jsonl", std::process::id()));
        let one = Measurement {
            schema: 1,
            op: "copy".into(),
            path: Some("d2d_gpu0".into()),
            bytes: 4096,
            time_us: 2.5,
            ..Measurement::default()
        };
        let lines = |append: bool| {
            let mut file = MeasurementsFile::open(path.clone(), append).unwrap();
            file.append(std::slice::from_ref(&one)).unwrap();
            crate::calibrate::read_measurements(&path, &Default::default()).unwrap().len()
        };
        assert_eq!(lines(false), 1);
        assert_eq!(lines(true), 2);
        assert_eq!(lines(false), 1);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_last_error_line_of_a_child_is_its_reason() {
        assert_eq!(last_error("NCCL WARN x\nerror: ncclAllReduce failed\n"), "ncclAllReduce failed");
        assert_eq!(last_error("thread panicked\n\n"), "thread panicked");
        assert_eq!(last_error(""), "it said nothing on standard error");
    }

    fn options() -> RunOptions {
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
    fn llm_passes_run_only_where_nccl_chooses_and_tree_only_for_allreduce() {
        let options = RunOptions {
            ops: vec![Op::AllReduce, Op::AllGather],
            protos: vec![None, Some(Protocol::Ll)],
            algos: vec![None, Some(Algorithm::Tree)],
            collective_sizes: vec![Bytes::mib(1)],
            ..options()
        };
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let mut notices = Vec::new();
        let planned = RunPlan::collectives_on(&options, 80 << 30, 4, Some(&llm), &mut notices);
        let described: Vec<(usize, String, usize, usize)> = planned
            .iter()
            .map(|(ranks, setting, points)| (*ranks, setting.label(), points.len(), points.iter().filter(|p| p.sequence.is_some()).count()))
            .collect();
        assert_eq!(
            described,
            vec![(4, "default".to_string(), 4, 2), (4, "default proto=ll".to_string(), 2, 0), (4, "default algo=tree".to_string(), 1, 0)]
        );
        assert!(notices.iter().any(|n| n.contains("tree algorithm only for allreduce")), "{notices:?}");
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
