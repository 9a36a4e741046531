//! The hardware model file (`models/hardware/*.toml`): links, host platforms,
//! GPUs, the collective protocols' costs and NCCL's own tuning constants.
//! `base.toml` holds public figures, each with its source beside it; a
//! calibrated overlay (written by `icsim calibrate fit`) replaces some of them
//! and records where its numbers came from.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use super::compute::{ComputeEfficiency, KernelEfficiency, Library};
use super::compute::{prior_compute, resolve_compute};
pub use super::cta::{CtaModel, CtaRates, ElementAdds};
pub use super::nccl_model::{NcclArch, NcclModel, ProtocolTriple, TreeCorrection};
pub use super::parts::{HostPlatform, PcieSwitchChip};
use super::storage::{DriveModel, StorageModel};
use super::{ConfigError, ConfigResult, merge_tables, parse_toml, read_text};
use crate::units::{Bandwidth, Bytes, Time};

/// Model files shipped inside the binary, so that it runs from any folder.
const SHIPPED: &[(&str, &str)] = &[
    ("base", include_str!("../../models/hardware/base.toml")),
    ("h200-fit", include_str!("../../models/hardware/h200-fit.toml")),
    ("h200-compute", include_str!("../../models/hardware/h200-compute.toml")),
    ("h200-forward", include_str!("../../models/hardware/h200-forward.toml")),
    ("blackwell-latency", include_str!("../../models/hardware/blackwell-latency.toml")),
    ("ampere-latency", include_str!("../../models/hardware/ampere-latency.toml")),
];

/// One PCIe generation, per lane and per direction.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PcieGeneration {
    /// Raw payload rate of one lane after line coding.
    pub lane_rate: Bandwidth,
    /// Fraction of the raw rate that DMA reaches (TLP headers, flow control).
    pub efficiency: f64,
    /// Latency of one hop (a port of a switch or of the root complex).
    pub hop_latency: Time,
    /// What NCCL's topology model assumes for an x16 link, GB/s.
    pub nccl_x16_gbps: f64,
    /// Fraction of the link's DMA rate that GPU threads reach when they
    /// read host memory over it (NCCL's shared-memory transport), in a
    /// primitive that only reads there.
    pub host_read_efficiency: f64,
    /// The same, each way, in a primitive that reads host memory and writes
    /// it in one pass (receives through host memory and sends on).
    pub host_read_write_efficiency: f64,
    /// Fraction of the link's DMA rate that GPU threads' stores into a
    /// peer GPU's memory reach over it (P2P over PCIe): a thread's stores
    /// leave in smaller packets than a copy engine's, each with its own
    /// header.
    pub thread_store_efficiency: f64,
    /// The generation whose three thread shares above this one takes where
    /// no layer set its own (resolved as the model loads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_as: Option<String>,
}

/// One NVLink generation, per link and per direction.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NvlinkGeneration {
    pub link_rate: Bandwidth,
    /// Fraction of the line rate that a large DMA copy reaches.
    pub efficiency: f64,
    pub hop_latency: Time,
}

/// A GPU: its links and its roofline.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    pub name: String,
    /// Compute capability times ten (80 Ampere, 90 Hopper, 100 Blackwell).
    pub arch: u32,
    pub memory: Bytes,
    pub memory_bandwidth: Bandwidth,
    /// Dense bf16 matrix rate, TFLOP/s.
    pub bf16_tflops: f64,
    pub nvlink_generation: String,
    pub nvlink_links: u32,
    pub pcie_generation: String,
    pub pcie_lanes: u32,
    /// The L2 cache: a kernel whose working set fits streams it from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_cache: Option<Bytes>,
    /// Streaming multiprocessors: how many thread blocks a wave holds, with a
    /// kernel's `blocks_per_sm`; absent, kernels priced in waves stream at
    /// their roofline rates instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<u32>,
    /// A PCIe card whose NVLink links go to an NVLink bridge to its
    /// neighbouring card (not to an SXM board's switches or mesh).
    #[serde(default)]
    pub nvlink_bridge: bool,
    /// The GPU (of the same die) whose compute model this one takes, under
    /// its own `compute` keys; absent: the model's `compute_prior`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_like: Option<String>,
    pub compute: ComputeEfficiency,
}

impl GpuModel {
    /// The rate of a copy within the GPU's memory: every byte read once and
    /// written once at the memory's achieved rate.
    pub fn local_copy_rate(&self) -> Bandwidth {
        self.memory_bandwidth.scaled(self.compute.memory / 2.0)
    }
}

/// What one protocol costs on one class of path: the latencies a call and a
/// step pay besides the links' own hop latency, and the path's own limit on
/// what one channel can push (each counted once; see src/collective/rate.rs).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PathCost {
    /// Once per call: the kernel's start and the protocol's own set-up and
    /// final flush (the caller's cost is the stack's, apart).
    pub base_latency: Time,
    /// Once per step of a chunk: the flag the receiver polls becoming visible; the links' hop latency is
    /// added by the path, not here. The sender may go on meanwhile.
    pub step_latency: Time,
    /// Once per slice, at the sender, before its next slice may leave: the memory fence and flag store that
    /// publish it (Simple; LL and LL128 carry a flag in every line and have none).
    pub slice_overhead: Time,
    /// What one channel can read a second of what arrives over this kind of path, whatever its thread block
    /// does (through host memory: the reads it keeps in flight): a receiving primitive loads what arrived at
    /// this rate where it is slower than the block's own, in series with its other memory operations; absent
    /// where only the thread block limits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_rate: Option<Bandwidth>,
    /// Through host memory: the share of the GPU's PCIe link its threads' reads get with this protocol, where
    /// it differs from the generation's `host_read_efficiency` (LL128 polls a flag in every line it reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_read_efficiency: Option<f64>,
    /// As `host_read_efficiency`, where the protocol's primitive reads and writes host memory in one pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_read_write_efficiency: Option<f64>,
    /// Data bytes of each step's piece the channel's threads move within the step's latency (one pass of
    /// them, polled with the flag): measured for LL through host memory; none elsewhere.
    #[serde(default)]
    pub latency_bytes: Bytes,
}

impl PathCost {
    /// The shares of a PCIe link of generation `pcie` that GPU threads'
    /// traffic with host memory gets with this protocol: its own, or the
    /// generation's.
    pub fn host_shares(&self, pcie: &PcieGeneration) -> HostShares {
        HostShares {
            read: self.host_read_efficiency.unwrap_or(pcie.host_read_efficiency),
            read_write: self.host_read_write_efficiency.unwrap_or(pcie.host_read_write_efficiency),
        }
    }
}

/// The shares of a PCIe link's DMA rate, each way, that a GPU's threads get
/// of host memory: in a primitive that only reads it, and in one that reads
/// and writes it in one pass. A primitive that only writes gets the link's
/// rate, as a copy does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostShares {
    pub read: f64,
    pub read_write: f64,
}

/// A protocol of NCCL's: how data is framed and chunked, and its costs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Bytes on the wire per byte of data (LL: 2, an 8-byte flag per 8
    /// bytes; LL128: 128/120).
    pub wire_factor: f64,
    /// Data a channel moves per ring step of a full loop.
    pub chunk: Bytes,
    /// Data a channel moves per tree step (one step's buffer: trees do not
    /// group steps into chunks).
    pub tree_chunk: Bytes,
    /// Pieces a chunk is cut into, each synchronised on its own.
    pub slices_per_chunk: u32,
    /// A slice is never smaller than this (but a chunk may be).
    pub min_slice: Bytes,
    /// Data per channel (threads x bytes per thread) below which NCCL drops
    /// a channel (rings multiply LL's by the rank count).
    pub channel_threshold: Bytes,
    /// Whether NCCL enables the protocol by default only over NVLink (LL128
    /// does; forced with NCCL_PROTO it runs anywhere).
    pub needs_nvlink: bool,
    /// What an operation's ring or tree kernel takes to start beyond the
    /// path's `base_latency`, where it differs from the allreduce's.
    #[serde(default)]
    pub kernel_start: KernelStart,
    /// Stores into a peer GPU's memory over NVLink (and over PCIe, unless
    /// `pcie` is set): the kernel's own work a call and a step.
    pub nvlink: PathCost,
    /// The same stores over PCIe, where measurements of P2P over PCIe set
    /// them apart (keys left out are `nvlink`'s); absent, P2P over PCIe pays
    /// the `nvlink` costs (the same kernel storing into a peer's buffer,
    /// fencing and storing a flag), and its PCIe links and switches add
    /// their own hop latencies: the links, not NCCL's tuner, decide how much
    /// longer a step over PCIe takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PathCost>,
    pub shm: PathCost,
}

impl Protocol {
    /// What P2P over PCIe costs: its own costs where set, else NVLink's.
    pub fn pcie_cost(&self) -> &PathCost {
        self.pcie.as_ref().unwrap_or(&self.nvlink)
    }

    /// The costs of P2P over PCIe to change: its own, set apart from
    /// NVLink's (starting from them) the first time.
    pub fn pcie_cost_mut(&mut self) -> &mut PathCost {
        self.pcie.get_or_insert_with(|| self.nvlink.clone())
    }

    /// The path costs by class name, for checks and listings.
    pub fn path_costs(&self) -> [(&'static str, &PathCost); 3] {
        [("nvlink", &self.nvlink), ("pcie", self.pcie_cost()), ("shm", &self.shm)]
    }
}

/// The extra start of one protocol's all-gather and reduce-scatter kernels.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KernelStart {
    #[serde(default)]
    pub allgather: Time,
    #[serde(default)]
    pub reducescatter: Time,
}

/// How SM-driven traffic fills a link: the rate of `n` channels each able to
/// push `r` over a link of capacity `C` is the soft minimum
/// `(1/(n r)^s + 1/C^s)^(-1/s)`; `s` large is a hard minimum.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Contention {
    pub sharpness: f64,
    /// Contending channels' shares of a link fluctuate and the call waits for the last channel: after a ring
    /// whose channels' loops contend (running at `slowdown` of their rate alone) and that spends `T` us
    /// sending, the slowest of `n` channels lags by `straggler x (1 - slowdown) x E[max of n] x sqrt(T)` us,
    /// E[max of n] being the expected largest of n standard normal draws.
    pub straggler: f64,
    /// How fast a ring's channels drift apart a sending step (see base.toml).
    pub drift: f64,
}

/// How far apart a call's channels end where latency sets their pace.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Skew {
    /// How much one channel's step latency differs from another's (one standard deviation), the same
    /// every step: of n channels walking s steps, the slowest ends s x E[max of n] x this after the mean.
    pub step_spread: Time,
    /// Of the steps a rank sits out at the end of an allreduce with empty chunks, the share its next
    /// call in a stream gains (src/collective/waits.rs).
    #[serde(default)]
    pub call_overlap: f64,
}

/// The three protocols, by name.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    pub simple: Protocol,
    pub ll: Protocol,
    pub ll128: Protocol,
}

/// The shared-memory transport's staging through host memory.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShmModel {
    /// Cost of handing a staged chunk from the writer to the reader (the
    /// flag in host memory, polled over PCIe).
    pub chunk_sync: Time,
    /// Chunk size for a plain point-to-point copy through host memory.
    pub copy_chunk: Bytes,
    /// Chunks in flight in the staging buffer.
    pub slots: u32,
}

/// In-switch reduction (NVLS / SHARP).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NvlsModel {
    /// The fraction of a GPU's port bandwidth that multimem reduction
    /// reaches, relative to NCCL's own figure for the architecture
    /// (`nccl.arch.*.nvls_efficiency`): 1 is NCCL's model.
    pub efficiency_vs_nccl: f64,
    pub latency: Time,
    pub chunk: Bytes,
    /// What a channel spends on each chunk besides moving it: the flags
    /// every rank posts and the heads wait for before the switch reduces
    /// it, in series with the data.
    pub chunk_overhead: Time,
}

/// Direct-access allreduce kernels (one-shot, two-shot) of inference engines.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DirectModel {
    /// Launching the kernel.
    pub launch_latency: Time,
    /// One barrier across the GPUs (flags written to and polled on peers).
    pub barrier_latency: Time,
    /// Fraction of the link rate that loads from peers reach.
    pub efficiency: f64,
    /// Largest message the kernels take (their staging buffer).
    pub max_bytes: Bytes,
    /// Most GPUs the kernels run on: one NVLink node (each GPU reads every
    /// peer's buffer and waits on a flag of each).
    pub max_ranks: u32,
}

/// What a caller (a [`crate::stack::Stack`]) adds to the work it issues,
/// on the GPU's timeline.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StackModel {
    /// Added before every NCCL kernel of a collective (not to an empty call
    /// or one rank's copy): what this caller costs a call on the GPU beyond
    /// raw NCCL in a graph (a launch's GPU-side cost when eager).
    pub collective_call: Time,
    /// Added to every step of a ring or chain: what this caller's setting
    /// costs a step beyond raw NCCL in a graph (see base.toml).
    #[serde(default)]
    pub collective_step: Time,
    /// Added to every compute kernel: the gap between kernels of a graph, or
    /// the host's launch cost when eager (short kernels wait for it).
    pub kernel_launch: Time,
    /// Eager only: the GPU's gap between kernels a stream has queued (the
    /// host ahead), which a graph's replay shortens to its `kernel_launch`.
    #[serde(default)]
    pub kernel_gap: Time,
    /// Added to every memory copy the caller issues (NCCL's one-rank
    /// collective is one): a copy node's start in a graph, the host's
    /// cudaMemcpyAsync when eager.
    pub copy_launch: Time,
    /// A graph stack only: what a serving engine's replay of a decode graph
    /// waits, once its inputs are built, for each kernel of the graph (the
    /// inputs copied in and the graph launched from the host while the GPU
    /// waits; it grows with the graph), beyond `kernel_launch`.
    #[serde(default)]
    pub graph_launch: Time,
}

/// Where a calibrated model's numbers came from.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub measurements: Vec<String>,
    pub system: String,
    pub fitted_at: String,
    pub method: String,
    /// GPU counts of the collectives fitted on: the model is trusted there.
    #[serde(default)]
    pub gpu_counts: Vec<u32>,
    /// Callers the collectives fitted on were measured through.
    #[serde(default)]
    pub stacks: Vec<String>,
    #[serde(default)]
    pub residuals: BTreeMap<String, f64>,
}

/// The whole hardware model, after overlays.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareModel {
    pub pcie: BTreeMap<String, PcieGeneration>,
    pub nvlink: BTreeMap<String, NvlinkGeneration>,
    pub host: BTreeMap<String, HostPlatform>,
    pub gpu: BTreeMap<String, GpuModel>,
    pub protocol: Protocols,
    /// Thread-block rates by architecture ("sm90").
    pub cta: BTreeMap<String, CtaModel>,
    pub contention: Contention,
    #[serde(default)]
    pub skew: Skew,
    pub shm: ShmModel,
    pub nvls: NvlsModel,
    pub direct: DirectModel,
    pub nccl: NcclModel,
    /// Per caller, by stack name (`nccl-graph`, `torch-graph`, ...).
    pub stack: BTreeMap<String, StackModel>,
    /// Shortest time of one timed copy (launch, completion, the timing
    /// itself), by the copy path names of the measurement schema.
    pub copy_overhead: BTreeMap<String, Time>,
    /// What a copy engine takes to start a transfer, before its bytes flow.
    pub copy_setup: Time,
    /// NVMe drive classes, by key (`gen4`, `gen5`, ...).
    pub nvme: BTreeMap<String, DriveModel>,
    /// PCIe switch chips, by key (`pex89144`, ...).
    #[serde(default)]
    pub pcie_switch: BTreeMap<String, PcieSwitchChip>,
    /// How storage I/O is cut up and what it costs the CPU.
    pub storage: StorageModel,
    #[serde(default)]
    pub provenance: Vec<Provenance>,
}

/// Where a model layer comes from: shipped in the binary, or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    Shipped(&'static str),
    File(PathBuf),
    /// Text already read or made in memory (a what-if change), named in
    /// messages by `label`.
    Text {
        label: PathBuf,
        text: String,
    },
}

impl ModelSource {
    fn label(&self) -> PathBuf {
        match self {
            ModelSource::Shipped(name) => PathBuf::from(format!("models/hardware/{name}.toml")),
            ModelSource::File(path) | ModelSource::Text { label: path, .. } => path.clone(),
        }
    }
}

/// Names of the model files shipped in the binary.
pub fn shipped_names() -> impl Iterator<Item = &'static str> {
    SHIPPED.iter().map(|(name, _)| *name)
}

/// Finds a shipped model by name.
pub fn shipped(name: &str) -> Option<ModelSource> {
    SHIPPED.iter().find(|(n, _)| *n == name).map(|(n, _)| ModelSource::Shipped(n))
}

fn layer_text(source: &ModelSource) -> ConfigResult<String> {
    match source {
        ModelSource::Shipped(name) => {
            Ok(SHIPPED.iter().find(|(n, _)| n == name).map(|(_, text)| text.to_string()).expect("shipped names come from the table"))
        }
        ModelSource::File(path) => read_text(path),
        ModelSource::Text { text, .. } => Ok(text.clone()),
    }
}

/// The shares of a PCIe link that GPU threads take: host reads, reads and
/// writes in one pass, stores to a peer.
const THREAD_SHARES: [&str; 3] = ["host_read_efficiency", "host_read_write_efficiency", "thread_store_efficiency"];

/// A generation that says `threads_as = "genN"` takes the thread shares no
/// layer set for it from genN as the layers leave genN, so that a fit of
/// the generation they were measured on carries to those assumed to behave
/// as it does.
fn inherit_thread_shares(merged: &mut toml::Table, last: &std::path::Path) -> ConfigResult<()> {
    let Some(toml::Value::Table(generations)) = merged.get_mut("pcie") else { return Ok(()) };
    let names: Vec<String> = generations.keys().cloned().collect();
    for name in names {
        let Some(like) = generations.get(&name).and_then(|generation| generation.get("threads_as")) else { continue };
        let key = format!("pcie.{name}.threads_as");
        let like = like.as_str().ok_or_else(|| ConfigError::invalid(last, &key, "expected the name of a PCIe generation"))?.to_string();
        let shares: Vec<(&str, toml::Value)> = match generations.get(&like) {
            Some(toml::Value::Table(source)) if !source.contains_key("threads_as") => {
                THREAD_SHARES.iter().filter_map(|&share| source.get(share).map(|v| (share, v.clone()))).collect()
            }
            Some(_) => return Err(ConfigError::invalid(last, &key, format!("pcie.{like} takes its own shares from another generation"))),
            None => return Err(ConfigError::invalid(last, &key, format!("no PCIe generation {like:?}"))),
        };
        let Some(toml::Value::Table(generation)) = generations.get_mut(&name) else { continue };
        for (share, value) in shares {
            generation.entry(share).or_insert(value);
        }
    }
    Ok(())
}

/// A protocol's `pcie` costs, where any layer sets some, take the keys no
/// layer set from its `nvlink` costs as the layers leave them: P2P over PCIe
/// runs the same kernel, set apart only where a measurement says so.
fn inherit_pcie_costs(merged: &mut toml::Table) {
    let Some(toml::Value::Table(protocols)) = merged.get_mut("protocol") else { return };
    for (_, protocol) in protocols.iter_mut() {
        let Some(protocol) = protocol.as_table_mut() else { continue };
        let Some(toml::Value::Table(nvlink)) = protocol.get("nvlink").cloned() else { continue };
        if let Some(toml::Value::Table(pcie)) = protocol.get_mut("pcie") {
            for (key, value) in nvlink {
                pcie.entry(key).or_insert(value);
            }
        }
    }
}

impl HardwareModel {
    /// The base model with `overlays` applied in order.
    pub fn load(overlays: &[ModelSource]) -> ConfigResult<HardwareModel> {
        let base = ModelSource::Shipped("base");
        let mut merged = toml::Table::new();
        // Each layer says what it was fitted on; a later layer adds to that
        // rather than replacing it, so that no fit's coverage is lost.
        let mut provenance = toml::value::Array::new();
        let mut last = base.label();
        // The compute a GPU of an unmeasured die starts from: the base
        // layer's table of the GPU it names, before any fit.
        let mut prior = None;
        for source in std::iter::once(&base).chain(overlays) {
            let text = layer_text(source)?;
            let mut table: toml::Table = parse_toml(&source.label(), &text)?;
            if let Some(name) = table.remove("compute_prior") {
                prior =
                    Some(prior_compute(&table, &name).map_err(|message| ConfigError::invalid(source.label(), "compute_prior", message))?);
            }
            match table.remove("provenance") {
                Some(toml::Value::Array(entries)) => provenance.extend(entries),
                Some(other) => {
                    return Err(ConfigError::invalid(
                        source.label(),
                        "provenance",
                        format!("expected [[provenance]] tables, found {}", other.type_str()),
                    ));
                }
                None => {}
            }
            merge_tables(&mut merged, table);
            last = source.label();
        }
        merged.insert("provenance".into(), toml::Value::Array(provenance));
        resolve_compute(&mut merged, prior.unwrap_or_default(), &last)?;
        inherit_pcie_costs(&mut merged);
        inherit_thread_shares(&mut merged, &last)?;
        let layers: Vec<String> = std::iter::once(&base).chain(overlays).map(|s| s.label().display().to_string()).collect();
        // The error names the table and key it stopped at ("nvlink.gen9"),
        // which the merged table has lost its lines for.
        let model: HardwareModel = serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|error| {
            let key = error.path().to_string();
            ConfigError::invalid(last.clone(), key, format!("{} (in the model made of {})", error.inner().message(), layers.join(" + ")))
        })?;
        model.validate(&last)?;
        Ok(model)
    }

    /// The base model alone.
    pub fn base() -> HardwareModel {
        HardwareModel::load(&[]).expect("the shipped base model is valid (tested)")
    }

    pub fn gpu(&self, name: &str) -> Result<&GpuModel, String> {
        self.gpu
            .get(name)
            .ok_or_else(|| format!("unknown GPU model {name:?}; known: {}", self.gpu.keys().cloned().collect::<Vec<_>>().join(", ")))
    }

    pub fn host(&self, name: &str) -> Result<&HostPlatform, String> {
        self.host
            .get(name)
            .ok_or_else(|| format!("unknown host platform {name:?}; known: {}", self.host.keys().cloned().collect::<Vec<_>>().join(", ")))
    }

    pub fn pcie_switch(&self, chip: &str) -> Result<&PcieSwitchChip, String> {
        self.pcie_switch.get(chip).ok_or_else(|| {
            format!("unknown PCIe switch chip {chip:?}; known: {}", self.pcie_switch.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    pub fn pcie(&self, generation: &str) -> Result<&PcieGeneration, String> {
        self.pcie.get(generation).ok_or_else(|| {
            format!("unknown PCIe generation {generation:?}; known: {}", self.pcie.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    pub fn nvlink(&self, generation: &str) -> Result<&NvlinkGeneration, String> {
        self.nvlink.get(generation).ok_or_else(|| {
            format!("unknown NVLink generation {generation:?}; known: {}", self.nvlink.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    pub fn stack(&self, stack: crate::stack::Stack) -> Result<&StackModel, String> {
        self.stack.get(stack.name()).ok_or_else(|| {
            format!("no [stack.{stack}] in the hardware model; known: {}", self.stack.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    /// A warning when this model's collective parameters were fitted on
    /// other GPU counts or callers than `gpus` and `stack`: the fit only
    /// vouches for what it saw.
    pub fn coverage_warning(&self, gpus: u32, stack: crate::stack::Stack) -> Option<String> {
        let fitted: Vec<&Provenance> = self.provenance.iter().filter(|p| !p.gpu_counts.is_empty()).collect();
        if fitted.is_empty() || gpus < 2 {
            return None;
        }
        let counts: std::collections::BTreeSet<u32> = fitted.iter().flat_map(|p| p.gpu_counts.iter().copied()).collect();
        let stacks: std::collections::BTreeSet<&str> = fitted.iter().flat_map(|p| p.stacks.iter().map(String::as_str)).collect();
        let list = |items: Vec<String>| items.join(", ");
        let mut outside = Vec::new();
        if !counts.contains(&gpus) {
            outside.push(format!("{gpus} GPUs (fitted on {})", list(counts.iter().map(u32::to_string).collect())));
        }
        if !stacks.is_empty() && !stacks.contains(stack.name()) {
            outside.push(format!("the {stack} caller (fitted on {})", list(stacks.iter().map(|s| s.to_string()).collect())));
        }
        (!outside.is_empty())
            .then(|| format!("the collective model's fitted parameters are used outside what they were fitted on: {}", outside.join("; ")))
    }

    pub fn nccl_arch(&self, arch: u32) -> Result<&NcclArch, String> {
        let key = format!("sm{arch}");
        self.nccl.arch.get(&key).ok_or_else(|| {
            let known = self.nccl.arch.keys().cloned().collect::<Vec<_>>().join(", ");
            format!("no NCCL constants ([nccl.arch.{key}] in the hardware model) for a GPU of `arch = {arch}`; known: {known}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_layer_keeps_what_it_was_fitted_on() {
        let collectives_then_compute = [shipped("h200-fit").unwrap(), shipped("h200-compute").unwrap()];
        let model = HardwareModel::load(&collectives_then_compute).unwrap();
        assert_eq!(model.provenance.len(), 2, "a later overlay adds its provenance, it does not replace the earlier one");
        let warning = model.coverage_warning(3, crate::stack::Stack::NcclGraph).expect("3 GPUs were not fitted on");
        assert!(warning.contains("3 GPUs (fitted on 2, 4, 8)"), "{warning}");
        assert_eq!(model.coverage_warning(8, crate::stack::Stack::NcclGraph), None);
    }

    #[test]
    fn generations_assumed_as_gen5_take_its_thread_shares_as_the_layers_leave_them() {
        let text = |text: &str| ModelSource::Text { label: PathBuf::from("layer.toml"), text: text.into() };
        let fitted = HardwareModel::load(&[shipped("h200-fit").unwrap()]).unwrap();
        let gen5 = fitted.pcie("gen5").unwrap();
        for generation in ["gen3", "gen4", "gen6"] {
            let pcie = fitted.pcie(generation).unwrap();
            assert_eq!(pcie.host_read_write_efficiency, gen5.host_read_write_efficiency, "{generation}");
            assert_eq!(pcie.host_read_efficiency, gen5.host_read_efficiency, "{generation}");
            assert_eq!(pcie.thread_store_efficiency, gen5.thread_store_efficiency, "{generation}");
        }
        assert_ne!(fitted.pcie("gen4").unwrap().lane_rate, gen5.lane_rate, "only the thread shares are taken");
        // A layer that sets a generation's own share keeps it.
        let own = HardwareModel::load(&[text("[pcie.gen4]\nhost_read_write_efficiency = 0.5\n")]).unwrap();
        assert_eq!(own.pcie("gen4").unwrap().host_read_write_efficiency, 0.5);
        assert_eq!(own.pcie("gen3").unwrap().host_read_write_efficiency, own.pcie("gen5").unwrap().host_read_write_efficiency);
        let error = HardwareModel::load(&[text("[pcie.gen4]\nthreads_as = \"gen9\"\n")]).unwrap_err().to_string();
        assert!(error.contains("pcie.gen4.threads_as") && error.contains("gen9"), "{error}");
        let chained = HardwareModel::load(&[text("[pcie.gen4]\nthreads_as = \"gen3\"\n")]).unwrap_err().to_string();
        assert!(chained.contains("pcie.gen3 takes its own shares from another generation"), "{chained}");
    }

    #[test]
    fn a_provenance_that_is_not_a_list_of_tables_is_named() {
        let odd = ModelSource::Text { label: PathBuf::from("odd.toml"), text: "provenance = \"yesterday\"".into() };
        let error = HardwareModel::load(&[odd]).unwrap_err().to_string();
        assert!(error.contains("odd.toml") && error.contains("provenance") && error.contains("[[provenance]]"), "{error}");
    }

    #[test]
    fn every_shipped_model_loads_over_the_base() {
        for name in shipped_names() {
            HardwareModel::load(&[shipped(name).unwrap()]).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn the_shipped_base_model_loads() {
        let model = HardwareModel::base();
        assert!(model.gpu.contains_key("h200"));
        assert!(model.nccl.arch.contains_key("sm90"));
    }

    #[test]
    fn an_overlay_replaces_only_what_it_names() {
        let dir = std::env::temp_dir().join(format!("icsim-overlay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("overlay.toml");
        std::fs::write(&file, "[shm]\nslots = 3\n").unwrap();
        let model = HardwareModel::load(&[ModelSource::File(file.clone())]).unwrap();
        assert_eq!(model.shm.slots, 3);
        assert_eq!(model.shm.copy_chunk, HardwareModel::base().shm.copy_chunk);
        std::fs::write(&file, "[shm]\nslotz = 3\n").unwrap();
        let error = HardwareModel::load(&[ModelSource::File(file.clone())]).unwrap_err().to_string();
        assert!(error.contains("slotz") && error.contains("overlay.toml"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
