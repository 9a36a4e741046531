//! Transport modes: how a GPU's bytes reach another GPU. Turns "move N bytes
//! from A to B in mode M" into flows, staging copies and overheads on the
//! topology's paths. Knows nothing of collectives: a collective asks for a
//! [`Pipe`] per connection and sends pieces down it.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use crate::config::hardware::HardwareModel;
use crate::engine::{Builder, TaskGraph, TaskId, TaskRef};
use crate::network::Path;
use crate::topology::{Medium, NodeId, NodeKind, P2pDenied, Relation, Topology};
use crate::units::{Bandwidth, Bytes, Time};

/// A transport mode, as a user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// What NCCL would pick for each pair.
    Auto,
    /// Two copies through a pinned buffer in host memory.
    Shm,
    /// One DMA over the PCIe path.
    P2p,
    /// Direct NVLink between the pair, no switch.
    Nvlink,
    /// Through the NVSwitch fabric.
    Nvswitch,
}

pub const MODES: [Mode; 5] = [Mode::Auto, Mode::Shm, Mode::P2p, Mode::Nvlink, Mode::Nvswitch];

/// The modes that name one path, fastest first: what `llm --transport all`
/// tries, and the order a refusal lists the modes a topology offers in.
pub const FIXED_MODES: [Mode; 4] = [Mode::Nvswitch, Mode::Nvlink, Mode::P2p, Mode::Shm];

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Shm => "shm",
            Mode::P2p => "p2p",
            Mode::Nvlink => "nvlink",
            Mode::Nvswitch => "nvswitch",
        })
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        MODES
            .iter()
            .copied()
            .find(|m| m.to_string() == text)
            .ok_or_else(|| format!("unknown transport {text:?}: use auto, shm, p2p, nvlink or nvswitch"))
    }
}

/// The kind of path a connection takes, which decides protocol costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathClass {
    Nvlink,
    Pcie,
    Shm,
}

/// Why a mode cannot serve a pair of GPUs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("transport {mode} is not available on topology {topology}: {reason}")]
    Unavailable { mode: Mode, topology: String, reason: String },
    #[error(
        "transport p2p between {a} and {b} on topology {topology} is refused: the path crosses sockets and the platform does not allow peer-to-peer there; use shm, or a topology whose policy allows it"
    )]
    P2pRefused { a: String, b: String, topology: String },
}

/// How one GPU's data reaches another: a direct path, or staged through
/// host memory.
#[derive(Debug, Clone, PartialEq)]
pub enum Connection {
    Direct {
        path: Path,
        class: PathClass,
        /// This connection cannot exceed this rate (a root-complex penalty).
        rate_cap: Option<Bandwidth>,
    },
    Staged {
        write: Path,
        read: Path,
    },
}

impl Connection {
    pub fn class(&self) -> PathClass {
        match self {
            Connection::Direct { class, .. } => *class,
            Connection::Staged { .. } => PathClass::Shm,
        }
    }

    /// The latency of the links a piece crosses on its way, written and
    /// read back through host memory where it is staged.
    pub fn hop_latency(&self) -> Time {
        match self {
            Connection::Direct { path, .. } => path.latency,
            Connection::Staged { write, read } => write.latency + read.latency,
        }
    }

    /// The mode this connection really uses.
    pub fn mode(&self, topo: &Topology) -> Mode {
        match self {
            Connection::Staged { .. } => Mode::Shm,
            Connection::Direct { class: PathClass::Pcie, .. } => Mode::P2p,
            Connection::Direct { path, .. } => {
                if topo.path_crosses(path, NodeKind::NvSwitch) {
                    Mode::Nvswitch
                } else {
                    Mode::Nvlink
                }
            }
        }
    }
}

fn unavailable(mode: Mode, topo: &Topology, reason: String) -> TransportError {
    TransportError::Unavailable { mode, topology: topo.name.clone(), reason }
}

/// The connection from GPU `a` to GPU `b` in `mode`.
pub fn connect(topo: &Topology, a: NodeId, b: NodeId, mode: Mode) -> Result<Connection, TransportError> {
    let name = |n: NodeId| topo.node(n).name.clone();
    match mode {
        Mode::Nvswitch => {
            if !topo.has(NodeKind::NvSwitch) {
                return Err(unavailable(mode, topo, "it has no NVSwitch".into()));
            }
            let path = topo
                .path(a, b, Medium::NvSwitch)
                .ok_or_else(|| unavailable(mode, topo, format!("{} and {} are not both on the NVSwitch", name(a), name(b))))?;
            Ok(Connection::Direct { path, class: PathClass::Nvlink, rate_cap: None })
        }
        Mode::Nvlink => {
            let path = topo.path(a, b, Medium::NvLinkDirect).ok_or_else(|| {
                let reason = if topo.has(NodeKind::NvSwitch) {
                    format!("{} and {} are joined through an NVSwitch, not directly: use nvswitch", name(a), name(b))
                } else {
                    format!("there is no direct NVLink between {} and {}", name(a), name(b))
                };
                unavailable(mode, topo, reason)
            })?;
            Ok(Connection::Direct { path, class: PathClass::Nvlink, rate_cap: None })
        }
        Mode::P2p => {
            // The PCIe path decides, whatever NVLink joins the pair.
            let (path, rate_cap) = topo.peer_to_peer(a, b).map_err(|denied| match denied {
                P2pDenied::NoPath => unavailable(mode, topo, format!("no PCIe path between {} and {}", name(a), name(b))),
                P2pDenied::AcrossSockets => TransportError::P2pRefused { a: name(a), b: name(b), topology: topo.name.clone() },
            })?;
            Ok(Connection::Direct { path, class: PathClass::Pcie, rate_cap })
        }
        Mode::Shm => {
            // NCCL puts the staging buffer on the receiver's side.
            let memory = topo.host_memory(topo.node(b).socket).map_err(|e| unavailable(mode, topo, e.to_string()))?;
            let write = topo
                .memory_path(a, memory, false)
                .ok_or_else(|| unavailable(mode, topo, format!("{} cannot reach host memory", name(a))))?;
            let read = topo
                .memory_path(b, memory, true)
                .ok_or_else(|| unavailable(mode, topo, format!("{} cannot reach host memory", name(b))))?;
            Ok(Connection::Staged { write, read })
        }
        Mode::Auto => {
            if topo.path(a, b, Medium::NvLinkDirect).is_some() {
                connect(topo, a, b, Mode::Nvlink)
            } else if topo.path(a, b, Medium::NvSwitch).is_some() {
                connect(topo, a, b, Mode::Nvswitch)
            } else if matches!(topo.pcie_relation(a, b), Relation::Pix | Relation::Pxb) {
                // NCCL's default P2P level stops at PXB: no host bridge.
                connect(topo, a, b, Mode::P2p)
            } else {
                connect(topo, a, b, Mode::Shm)
            }
        }
    }
}

/// Like [`connect`], but where `p2p` is refused for a pair (across sockets)
/// the pair falls back to `shm`, as NCCL does per connection. Returns whether
/// it fell back.
pub fn connect_with_fallback(topo: &Topology, a: NodeId, b: NodeId, mode: Mode) -> Result<(Connection, bool), TransportError> {
    match connect(topo, a, b, mode) {
        Err(TransportError::P2pRefused { .. }) => Ok((connect(topo, a, b, Mode::Shm)?, true)),
        other => other.map(|c| (c, false)),
    }
}

/// How pieces go down a pipe, besides their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipeRules {
    /// Latency of a step (flag, fence, hop): on the critical path of the
    /// piece, but the next piece may leave meanwhile.
    pub latency: Time,
    /// Work the sender does per piece before the next may leave: serial.
    pub overhead: Time,
    /// Through host memory, the reader follows the writer closely (GPU
    /// threads polling flags, as NCCL's SHM transport does) instead of
    /// waiting for the whole piece to be written (copy engines with the CPU
    /// in between).
    pub streaming: bool,
}

/// A connection in use: the order of what was sent down it, so that pieces
/// leave one after another and the staging buffer never overflows. A pipe
/// may stand for several identical connections on the same path (its
/// copies: identical channels), each piece then for as many identical ones.
#[derive(Debug, Clone)]
pub struct Pipe {
    connection: Connection,
    /// Links of the direct path, or of the read from host memory.
    links: Path,
    /// Links of the write into host memory (staged only).
    write_links: Option<Path>,
    /// From the last byte leaving to the piece counting as delivered.
    delivery_delay: Time,
    /// From the write draining to the reader starting (staged only).
    handover_delay: Time,
    overhead: Time,
    slots: usize,
    copies: u32,
    last_write: Option<TaskRef>,
    last_transfer: Option<TaskRef>,
    /// The last `slots` deliveries, oldest first.
    deliveries: VecDeque<TaskRef>,
}

fn links_only(path: &Path) -> Path {
    Path { links: path.links.clone(), latency: Time::ZERO }
}

/// Most tasks a piece waits for: what made it ready, the pipe's last leg,
/// and a free slot of the staging buffer.
const MOST_WAITS: usize = 4;

/// A short list of tasks to wait for, without allocating.
struct Waits {
    tasks: [TaskRef; MOST_WAITS],
    len: usize,
}

impl Waits {
    fn new(ready: Option<TaskRef>) -> Waits {
        let mut waits = Waits { tasks: [TaskRef::from(TaskId(0)); MOST_WAITS], len: 0 };
        waits.extend(ready);
        waits
    }
    fn extend(&mut self, task: Option<TaskRef>) {
        if let Some(task) = task {
            self.tasks[self.len] = task;
            self.len += 1;
        }
    }
    fn as_slice(&self) -> &[TaskRef] {
        &self.tasks[..self.len]
    }
}

impl Pipe {
    pub fn new(connection: Connection, rules: PipeRules, model: &HardwareModel) -> Pipe {
        Pipe::with_copies(connection, rules, model, 1)
    }

    /// A pipe standing for `copies` identical connections.
    pub fn with_copies(connection: Connection, rules: PipeRules, model: &HardwareModel, copies: u32) -> Pipe {
        let (links, write_links, delivery_delay, handover_delay) = match &connection {
            Connection::Direct { path, .. } => (links_only(path), None, connection.hop_latency() + rules.latency, Time::ZERO),
            Connection::Staged { write, read } if rules.streaming => {
                // One flow over both halves: the memory bus carries it twice.
                // The flag the reader polls is the protocol's step cost.
                let links: Vec<_> = write.links.iter().chain(read.links.iter()).copied().collect();
                (Path::new(links, Time::ZERO), None, connection.hop_latency() + rules.latency, Time::ZERO)
            }
            Connection::Staged { write, read } => {
                (links_only(read), Some(links_only(write)), read.latency + rules.latency, write.latency + model.shm.chunk_sync)
            }
        };
        Pipe {
            connection,
            links,
            write_links,
            delivery_delay,
            handover_delay,
            overhead: rules.overhead,
            slots: model.shm.slots as usize,
            copies,
            last_write: None,
            last_transfer: None,
            deliveries: VecDeque::new(),
        }
    }

    fn delay_unless_zero(graph: &mut dyn Builder<Path>, delay: Time, after: TaskRef) -> TaskRef {
        if delay == Time::ZERO { after } else { graph.delay(delay, &[after]) }
    }

    /// Sends `bytes` (as they go on the wire) once `ready` has finished (a
    /// stream's piece with nothing to wait for leaves when the stream
    /// starts), each flow held to `cap`; returns the task after which the
    /// bytes are at the receiver.
    pub fn send(&mut self, graph: &mut dyn Builder<Path>, bytes: Bytes, cap: Option<Bandwidth>, ready: Option<TaskRef>) -> TaskRef {
        let mut after = Waits::new(ready);
        let first_leg = if self.write_links.is_some() { self.last_write } else { self.last_transfer };
        after.extend(first_leg);
        if self.write_links.is_some() && self.deliveries.len() >= self.slots {
            // The staging buffer has `slots` pieces; wait for one to empty.
            after.extend(self.deliveries.front().copied());
        }
        if self.overhead > Time::ZERO {
            after = Waits::new(Some(graph.delay(self.overhead, after.as_slice())));
        }
        let copies = self.copies;
        let transferred = match (&self.connection, &self.write_links) {
            (Connection::Direct { rate_cap, .. }, _) => {
                graph.transfer(self.links.clone(), bytes, min_cap(cap, *rate_cap), copies, after.as_slice())
            }
            (Connection::Staged { .. }, None) => graph.transfer(self.links.clone(), bytes, cap, copies, after.as_slice()),
            (Connection::Staged { .. }, Some(write_links)) => {
                // Write into a free slot of the staging buffer, hand it over,
                // then the receiver reads it out: two copies, pipelined.
                let written = graph.transfer(write_links.clone(), bytes, cap, copies, after.as_slice());
                self.last_write = Some(written);
                let handed_over = Self::delay_unless_zero(graph, self.handover_delay, written);
                let mut read_after = Waits::new(Some(handed_over));
                read_after.extend(self.last_transfer);
                graph.transfer(self.links.clone(), bytes, cap, copies, read_after.as_slice())
            }
        };
        self.last_transfer = Some(transferred);
        let delivered = Self::delay_unless_zero(graph, self.delivery_delay, transferred);
        if self.deliveries.len() == self.slots {
            self.deliveries.pop_front();
        }
        self.deliveries.push_back(delivered);
        delivered
    }

    /// When the sender last finished pushing bytes (its thread block is
    /// free again), if anything was sent.
    pub fn last_push(&self) -> Option<TaskRef> {
        self.last_transfer
    }

    /// The last delivery, if anything was sent.
    pub fn last_delivery(&self) -> Option<TaskRef> {
        self.deliveries.back().copied()
    }
}

fn min_cap(a: Option<Bandwidth>, b: Option<Bandwidth>) -> Option<Bandwidth> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// Adds a plain copy of `bytes` from GPU `a` to GPU `b` (a DMA, or staged
/// through host memory in chunks) to `graph`; returns its last task.
pub fn add_copy(
    graph: &mut TaskGraph<Path>,
    topo: &Topology,
    model: &HardwareModel,
    (a, b): (NodeId, NodeId),
    bytes: Bytes,
    mode: Mode,
    after: &[TaskId],
) -> Result<TaskId, TransportError> {
    let connection = connect(topo, a, b, mode)?;
    let chunk = match connection {
        Connection::Direct { .. } => bytes.max(Bytes(1)),
        Connection::Staged { .. } => model.shm.copy_chunk,
    };
    let mut pipe = Pipe::new(connection, PipeRules::default(), model);
    let pieces = bytes.0.div_ceil(chunk.0).max(1);
    let ready = graph.join(after).into();
    for piece in bytes.split_even(pieces) {
        pipe.send(graph, piece, None, Some(ready));
    }
    Ok(graph.task_of(pipe.last_delivery().expect("at least one piece is sent")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run;
    use crate::topology::{PresetOptions, preset};

    fn topology(name: &str) -> Topology {
        preset(name, &PresetOptions::default(), &HardwareModel::base()).unwrap()
    }

    #[test]
    fn asking_for_a_mode_the_topology_lacks_names_both() {
        let topo = topology("pcie-gen4-8gpu");
        let (a, b) = (topo.gpus()[0], topo.gpus()[1]);
        let error = connect(&topo, a, b, Mode::Nvlink).unwrap_err().to_string();
        assert!(error.contains("nvlink") && error.contains("pcie-gen4-8gpu"), "{error}");
        let error = connect(&topo, a, b, Mode::Nvswitch).unwrap_err().to_string();
        assert!(error.contains("no NVSwitch"), "{error}");
    }

    #[test]
    fn p2p_across_sockets_is_refused_on_intel_and_falls_back_to_shm() {
        let topo = topology("pcie-gen5-8gpu");
        let (a, b) = (topo.gpus()[0], topo.gpus()[7]);
        assert!(matches!(connect(&topo, a, b, Mode::P2p), Err(TransportError::P2pRefused { .. })));
        let (connection, fell_back) = connect_with_fallback(&topo, a, b, Mode::P2p).unwrap();
        assert!(fell_back && connection.class() == PathClass::Shm);
    }

    #[test]
    fn the_p2p_rule_follows_the_pcie_path_on_every_preset_whatever_nvlink_joins() {
        for (name, _) in crate::topology::PRESETS {
            // Eight GPUs of every preset (a rack's first four superchips).
            let options = PresetOptions { gpus: Some(8), gpu: None, host: None };
            let topo = preset(name, &options, &HardwareModel::base()).unwrap();
            let gpus = topo.gpus();
            let mut refused_pairs = 0;
            for &a in gpus {
                for &b in gpus.iter().filter(|&&b| b != a) {
                    let connection = connect(&topo, a, b, Mode::P2p);
                    if topo.path(a, b, Medium::Pcie).is_none() {
                        // GB200 superchips: no PCIe path joins them at all.
                        assert!(matches!(connection, Err(TransportError::Unavailable { .. })), "{name}: {a:?} -> {b:?}");
                        continue;
                    }
                    let across = topo.node(a).socket != topo.node(b).socket;
                    let refused = matches!(connection, Err(TransportError::P2pRefused { .. }));
                    assert_eq!(refused, across && !topo.policy.p2p_across_sockets, "{name}: {a:?} -> {b:?}");
                    refused_pairs += usize::from(refused);
                }
            }
            let two_socket_board = name.starts_with("hgx") || name.starts_with("pcie") || name.starts_with("h20");
            if two_socket_board && !topo.policy.p2p_across_sockets {
                assert_eq!(refused_pairs, 2 * 4 * 4, "{name}: half of the 8 GPUs on each socket");
            }
        }
    }

    #[test]
    fn p2p_through_an_intel_root_complex_is_slower() {
        let topo = topology("pcie-gen5-8gpu");
        let g = topo.gpus();
        let Connection::Direct { rate_cap, .. } = connect(&topo, g[0], g[2], Mode::P2p).unwrap() else { panic!("direct") };
        let link = topo.bottleneck(&topo.path(g[0], g[2], Medium::Pcie).unwrap());
        assert_eq!(rate_cap, Some(link.scaled(0.833)));
        let Connection::Direct { rate_cap, .. } = connect(&topo, g[0], g[1], Mode::P2p).unwrap() else { panic!("direct") };
        assert_eq!(rate_cap, None, "under one switch the root complex is not crossed");
    }

    #[test]
    fn auto_picks_what_nccl_would() {
        let hgx = topology("hgx-h200");
        assert_eq!(connect(&hgx, hgx.gpus()[0], hgx.gpus()[1], Mode::Auto).unwrap().mode(&hgx), Mode::Nvswitch);
        let mesh = topology("h20-nvlink-mesh");
        assert_eq!(connect(&mesh, mesh.gpus()[0], mesh.gpus()[1], Mode::Auto).unwrap().mode(&mesh), Mode::Nvlink);
        let pcie = topology("pcie-gen4-8gpu");
        let g = pcie.gpus();
        assert_eq!(connect(&pcie, g[0], g[1], Mode::Auto).unwrap().mode(&pcie), Mode::P2p);
        assert_eq!(connect(&pcie, g[0], g[2], Mode::Auto).unwrap().mode(&pcie), Mode::Shm);
    }

    #[test]
    fn a_staged_copy_uses_host_memory_twice_and_both_pcie_links() {
        let model = HardwareModel::base();
        let topo = topology("pcie-gen5-8gpu");
        let (a, b) = (topo.gpus()[0], topo.gpus()[1]);
        let mut graph = TaskGraph::new();
        let bytes = Bytes::mib(64);
        add_copy(&mut graph, &topo, &model, (a, b), bytes, Mode::Shm, &[]).unwrap();
        let mut network = topo.network();
        let schedule = run(&graph, &mut network);
        let usage = network.usage();
        let memory = topo.host_memory(0).unwrap();
        let bus = topo.memory_path(a, memory, false).unwrap().links.last().copied().unwrap();
        assert_eq!(usage[bus.index()].bytes, bytes * 2, "written once, read once");
        // Pipelined: much closer to one copy's time than to two.
        let one_copy = bytes / topo.bottleneck(&topo.path(a, b, Medium::Pcie).unwrap());
        assert!(schedule.makespan() < Time(one_copy.0 * 13 / 10), "{} vs one copy {}", schedule.makespan(), one_copy);
    }
}
