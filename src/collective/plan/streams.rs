//! A plan's call as tasks: its start latency, then its body as a stream
//! (ring, tree, NVLS or direct reads) with the rates of its channels and
//! the latencies of its steps, identical channels (and NVLS ranks) simulated
//! once as far as the caller's [`Symmetry`] allows.

use crate::collective::direct::DirectStream;
use crate::collective::nvls::{self, NvlsChannel, NvlsStream};
use crate::collective::rate::{self, HostLoop, Primitive, ThreadBlock};
use crate::collective::ring::{self, Drift, RingChannel, RingStream, StepRates};
use crate::collective::symmetry::{self, ChannelClass, Symmetry};
use crate::collective::tree::{self, ChainChannel, ChainRates, TreeStream};
use crate::collective::{Algorithm, CollectiveError, Element, Op, Protocol, nccl, waits};
use crate::config::hardware::{HardwareModel, PathCost};
use crate::engine::{Stream, TaskGraph, TaskId};
use crate::network::{LinkId, Path};
use crate::topology::{LinkKind, Medium, NodeKind, Topology};
use crate::transport::{self, Connection, PathClass, Pipe, PipeRules};
use crate::units::{Bandwidth, Bytes, Time};

use super::Plan;

/// A call's body, ready to run: its stream, and the links whose traffic is
/// another's (ranks simulated once): (the simulated one, its mirror).
pub struct Body {
    pub stream: Box<dyn Stream<Path>>,
    pub mirrored: Vec<(LinkId, LinkId)>,
    /// How long after the stream's end the slowest channel ends.
    pub straggler: Time,
}

/// How a call's tasks enter a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expansion {
    /// Generated while the graph runs, identical channels simulated once.
    Streamed,
    /// Every task of every channel written into the graph before it runs
    /// (for timelines of the call's transfers).
    Inline,
}

impl Plan {
    /// Adds the collective to `graph` after `after`, its tasks entering as
    /// `expansion` says; returns the task that finishes when the collective
    /// has.
    pub fn build(
        &self,
        topo: &Topology,
        model: &HardwareModel,
        graph: &mut TaskGraph<Path>,
        after: &[TaskId],
        expansion: Expansion,
    ) -> Result<TaskId, CollectiveError> {
        let symmetry = match expansion {
            Expansion::Streamed => Symmetry::Channels,
            Expansion::Inline => Symmetry::None,
        };
        self.add_to(topo, model, graph, after, symmetry, expansion).map(|(end, _)| end)
    }

    /// Adds the collective alone (at the start of `graph`), streamed with
    /// `symmetry`; returns its end and the links whose traffic mirrors
    /// another's.
    pub(crate) fn build_alone(
        &self,
        topo: &Topology,
        model: &HardwareModel,
        graph: &mut TaskGraph<Path>,
        symmetry: Symmetry,
    ) -> Result<(TaskId, Vec<(LinkId, LinkId)>), CollectiveError> {
        self.add_to(topo, model, graph, &[], symmetry, Expansion::Streamed)
    }

    fn add_to(
        &self,
        topo: &Topology,
        model: &HardwareModel,
        graph: &mut TaskGraph<Path>,
        after: &[TaskId],
        symmetry: Symmetry,
        expansion: Expansion,
    ) -> Result<(TaskId, Vec<(LinkId, LinkId)>), CollectiveError> {
        if self.nccl_shortcut().is_some() {
            return Ok((graph.delay(self.shortcut_time(topo, model)?, after), Vec::new()));
        }
        let start = graph.delay(self.start_latency(topo, model)?, after);
        let body = self.body(topo, model, symmetry)?;
        let mut end = match expansion {
            Expansion::Streamed => graph.stream(body.stream, &[start]),
            Expansion::Inline => graph.inline(&*body.stream, &[start]),
        };
        if body.straggler > Time::ZERO {
            end = graph.delay(body.straggler, &[end]);
        }
        Ok((end, body.mirrored))
    }

    /// The call's body (what follows its start latency) as a stream.
    pub fn body(&self, topo: &Topology, model: &HardwareModel, symmetry: Symmetry) -> Result<Body, CollectiveError> {
        let alone = |stream: Box<dyn Stream<Path>>| Body { stream, mirrored: Vec::new(), straggler: Time::ZERO };
        match self.algorithm {
            Algorithm::Ring => self.ring_body(topo, model, symmetry),
            Algorithm::Tree => Ok(Body { straggler: self.skew(model), ..alone(Box::new(self.tree_stream(topo, model, symmetry)?)) }),
            Algorithm::Nvls => self.nvls_body(topo, model, symmetry),
            Algorithm::OneShot | Algorithm::TwoShot => Ok(alone(Box::new(DirectStream {
                bytes: self.request.bytes,
                reads: self.direct_reads(topo).map_err(CollectiveError::Unsupported)?,
                wire_factor: 1.0 / model.direct.efficiency,
                barrier: model.direct.barrier_latency,
                two_shot: self.algorithm == Algorithm::TwoShot,
            }))),
        }
    }

    /// NCCL's transports are SM-driven: through host memory the reader
    /// follows the writer, and a step pays the protocol's step cost on top
    /// of the links' hop latency.
    fn pipe_rules(&self, topo: &Topology, model: &HardwareModel) -> Result<PipeRules, CollectiveError> {
        let costs = self.costs(model);
        let (_, arch_step) = self.arch_latency(topo, model)?;
        let caller_step = model.stack(self.request.stack).map_err(CollectiveError::Model)?.collective_step;
        Ok(PipeRules { latency: costs.step_latency + arch_step + caller_step, overhead: costs.slice_overhead, streaming: true })
    }

    /// In a stream of calls, a ring allreduce whose chunks are partly
    /// empty overlaps the next call by the steps its ranks sit out
    /// (`waits::overlapped_steps`), of which the next call gains the share
    /// `skew.call_overlap`: its steps, protocol and hop, are shorter by
    /// that, spread over them.
    fn sparse_ring_rules(&self, rules: PipeRules, model: &HardwareModel) -> PipeRules {
        let (op, n) = (self.request.op, self.request.ranks.len());
        let largest = self.channel_bytes.iter().map(|b| b.0).max().unwrap_or(0);
        let overlapped = if op == Op::AllReduce { waits::overlapped_steps(n, waits::carrying_chunks(largest, n)) } else { 0.0 };
        let Some(ring) = self.connections.first().filter(|ring| overlapped > 0.0 && !ring.is_empty()) else { return rules };
        let hop_us = ring.iter().map(|k| k.hop_latency().as_us()).sum::<f64>() / ring.len() as f64;
        let saved_us = (rules.latency.as_us() + hop_us) * model.skew.call_overlap * overlapped / rate::ring_sends(op, n) as f64;
        PipeRules { latency: Time::from_us_f64((rules.latency.as_us() - saved_us).max(0.0)), ..rules }
    }

    /// The ring with its channels' pipes and rates, and how late its
    /// slowest channel ends.
    fn ring_body(&self, topo: &Topology, model: &HardwareModel, symmetry: Symmetry) -> Result<Body, CollectiveError> {
        let n = self.request.ranks.len();
        let protocol = self.protocol.model(model);
        let wire_factor = self.wire_factor(topo, model)?;
        let cta = self.channel_physics(topo, model)?;
        let op = self.request.op;
        let rings = self.connections.len();
        let ring_of = |c: usize| &self.connections[c % rings];
        let final_over_link = self.final_receive_reads_host_memory();
        let ring_loop = rate::ring_loop(op, n, &cta, final_over_link);
        // How much the channels slow one another when each puts `demand`
        // (wire bytes a second) on every connection of its ring.
        let contention_at = |demand: f64| {
            let flows: Vec<(&Connection, f64)> =
                (0..self.channel_bytes.len()).flat_map(|c| ring_of(c).iter().map(move |k| (k, demand))).collect();
            self.contention(topo, model, &flows, HostLoop::Ring { op, ranks: n })
        };
        // In step, every channel sends at once: the link sees what each
        // pushes while it sends.
        let slowdown = contention_at(ring_loop.link_rate() * wire_factor);
        let rules = self.sparse_ring_rules(self.pipe_rules(topo, model)?, model);
        let channels = symmetry::channel_classes(&self.channel_bytes, |c| c % rings, symmetry)
            .into_iter()
            .map(|ChannelClass { channel, copies }| RingChannel {
                bytes: self.channel_bytes[channel],
                pipes: ring_of(channel).iter().map(|k| Pipe::with_copies(k.clone(), rules, model, copies)).collect(),
            })
            .collect();
        let phases = ring_loop.phases(slowdown);
        // Drifted apart, the link sees each channel's demand averaged over
        // its loop, whose time the sends then spread. Seen, and fitted, over
        // NVLink; over PCIe how fast channels drift apart is not measured,
        // and they stay in step there.
        let drift = (phases.copy_out.is_some() && self.class == PathClass::Nvlink).then(|| {
            let average = ring_loop.rate(1.0) * wire_factor;
            Drift { per_step: model.contention.drift, send: Bandwidth::from_bytes_per_sec_f64(average * contention_at(average)) }
        });
        let ring = RingStream {
            op,
            ranks: n,
            channels,
            chunk: protocol.chunk,
            slices_per_chunk: protocol.slices_per_chunk,
            min_slice: protocol.min_slice,
            wire_factor,
            rates: StepRates {
                send: Bandwidth::from_bytes_per_sec_f64(phases.send * wire_factor),
                steps: rate::ring_sends(op, n),
                copy_out: phases.copy_out.map(Bandwidth::from_bytes_per_sec_f64),
                drift,
            },
            latency_bytes: self.latency_wire_bytes(model),
        };
        // The lag follows how much contention slows the channel's loop as a whole.
        let loop_slowdown = ring_loop.rate(slowdown) / ring_loop.rate(1.0);
        let straggler = self.straggler(model, &ring, loop_slowdown) + self.skew(model);
        Ok(Body { stream: Box::new(ring), mirrored: Vec::new(), straggler })
    }

    /// How long after one channel alone the slowest of a ring's or chain's
    /// channels ends where latency sets their pace: channels' step
    /// latencies differ (`skew.step_spread`, across channels), the same at
    /// every step, so a channel's walk through a loop's steps differs by
    /// their count times that, and the slowest of n walks lags by the
    /// largest of n normal draws (`rate::slowest_of`) of it.
    /// Seen, and fitted, over NVLink; through host memory or PCIe how far
    /// channels drift apart is not measured, so they keep pace there.
    fn skew(&self, model: &HardwareModel) -> Time {
        let channels = self.channel_bytes.len();
        if channels < 2 || self.class != PathClass::Nvlink {
            return Time::ZERO;
        }
        let steps = rate::ring_sends(self.request.op, self.request.ranks.len());
        Time::from_us_f64(model.skew.step_spread.as_us() * steps as f64 * rate::slowest_of(channels))
    }

    /// How long the slowest of a ring's channels ends after the others:
    /// contending channels' shares of a link fluctuate, so their progress
    /// spreads as a random walk does, with the square root of the time; the
    /// slowest of n lags by the largest of n normal draws of that spread
    /// (`rate::slowest_of`). Channels that do not contend (`slowdown` 1)
    /// keep pace.
    fn straggler(&self, model: &HardwareModel, ring: &RingStream, slowdown: f64) -> Time {
        let (channels, coefficient) = (self.channel_bytes.len(), model.contention.straggler);
        let contended = 1.0 - slowdown;
        // Seen, and fitted, on Simple and LL128 channels sharing NVLink;
        // through host memory the channels' limit is the host's, not a
        // shared link's, and LL's flagged lines are not fitted for it.
        let fitted_on = self.class == PathClass::Nvlink && self.protocol != Protocol::Ll;
        if !fitted_on || channels < 2 || coefficient <= 0.0 || contended <= 0.0 {
            return Time::ZERO;
        }
        let spread_us = ring.sending_time().as_us().sqrt();
        Time::from_us_f64(coefficient * contended * rate::slowest_of(channels) * spread_us)
    }

    /// The tree (a chain inside one node) with its channels' connections
    /// and rates.
    fn tree_stream(&self, topo: &Topology, model: &HardwareModel, symmetry: Symmetry) -> Result<TreeStream, CollectiveError> {
        let n = self.request.ranks.len();
        let protocol = self.protocol.model(model);
        let cta = self.channel_physics(topo, model)?;
        // Even channels run the chain from one end, odd ones from the other.
        let mut orders: Vec<(Vec<Connection>, Vec<Connection>)> = Vec::new();
        for c in 0..2.min(self.channel_bytes.len()) {
            let order = tree::chain(n, c);
            let (mut up, mut down) = (Vec::new(), Vec::new());
            for k in 0..n - 1 {
                let (root_side, far_side) = (self.request.ranks[order[k]], self.request.ranks[order[k + 1]]);
                up.push(transport::connect_with_fallback(topo, far_side, root_side, self.request.mode)?.0);
                down.push(transport::connect_with_fallback(topo, root_side, far_side, self.request.mode)?.0);
            }
            orders.push((up, down));
        }
        let wire_factor = self.wire_factor(topo, model)?;
        let alone = rate::chain_channel_rate(&cta) * wire_factor;
        let chunk = nccl::tree_chunk(protocol.tree_chunk, self.protocol, self.request.bytes, self.channel_bytes.len(), n);
        // A chunk is on one hop of the chain at a time, and a channel's
        // chunks fill its pipeline of 2(n-1) hops and drain from it: a hop
        // carries the channel during `chunks` of the pipeline's
        // `chunks + 2(n-1) - 1` stages, and loads the links it shares only
        // that part of the time.
        let most_chunks = self.channel_bytes.iter().map(|b| b.0.div_ceil(chunk.0).max(1)).max().unwrap_or(1);
        let duty = most_chunks as f64 / (most_chunks + 2 * (n as u64 - 1) - 1) as f64;
        let flows: Vec<(&Connection, f64)> = (0..self.channel_bytes.len())
            .flat_map(|c| {
                let (up, down) = &orders[c % 2];
                up.iter().chain(down).map(|k| (k, alone * duty))
            })
            .collect();
        let slowdown = self.contention(topo, model, &flows, HostLoop::Chain);
        let rules = self.pipe_rules(topo, model)?;
        let pipes =
            |connections: &[Connection], copies| connections.iter().map(|k| Pipe::with_copies(k.clone(), rules, model, copies)).collect();
        let channels = symmetry::channel_classes(&self.channel_bytes, |c| c % 2, symmetry)
            .into_iter()
            .map(|ChannelClass { channel, copies }| {
                let (up, down) = &orders[channel % 2];
                ChainChannel { bytes: self.channel_bytes[channel], up: pipes(up, copies), down: pipes(down, copies) }
            })
            .collect();
        Ok(TreeStream {
            channels,
            chunk,
            wire_factor,
            rates: ChainRates {
                send: Bandwidth::from_bytes_per_sec_f64(alone * slowdown),
                receive: (!self.final_receive_reads_host_memory())
                    .then(|| Bandwidth::from_bytes_per_sec_f64(Primitive::Recv.rate(&cta) * slowdown)),
            },
            latency_bytes: self.latency_wire_bytes(model),
        })
    }

    /// GPUs that head NVLS channels in this call.
    fn nvls_heads(&self, model: &HardwareModel) -> usize {
        nccl::nvls_heads(model, self.request.ranks.len() as u32) as usize
    }

    /// The chunk NCCL's NVLS kernel moves at a time for this call.
    pub fn nvls_chunk(&self, model: &HardwareModel) -> Bytes {
        nvls::chunk(model.nvls.chunk, self.request.bytes, self.channel_bytes.len(), self.nvls_heads(model))
    }

    fn nvls_body(&self, topo: &Topology, model: &HardwareModel, symmetry: Symmetry) -> Result<Body, CollectiveError> {
        let switch_path = |from, to| {
            topo.path(from, to, Medium::NvSwitch).ok_or_else(|| CollectiveError::Unsupported("nvls needs every GPU on the NVSwitch".into()))
        };
        let switch =
            topo.nodes_of(NodeKind::NvSwitch).next().ok_or_else(|| CollectiveError::Unsupported("nvls needs an NVSwitch".into()))?;
        let mut up = self.request.ranks.iter().map(|&g| switch_path(g, switch)).collect::<Result<Vec<_>, _>>()?;
        let mut down = self.request.ranks.iter().map(|&g| switch_path(switch, g)).collect::<Result<Vec<_>, _>>()?;
        let mirrored = match symmetry {
            Symmetry::ChannelsAndRanks => symmetry::mirrored_ports(topo, &up, &down),
            Symmetry::None | Symmetry::Channels => None,
        };
        if mirrored.is_some() {
            up.truncate(1);
            down.truncate(1);
        }
        // Each chunk's flag handshake follows its push, before the switch
        // reduces it and before the next push: it arrives that much later.
        for path in &mut up {
            path.latency += model.nvls.chunk_overhead;
        }
        let port = topo.nvlink_bandwidth(self.request.ranks[0]);
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let arch = model.nccl_arch(gpu.arch).map_err(CollectiveError::Model)?;
        let efficiency = arch.nvls_efficiency * model.nvls.efficiency_vs_nccl;
        let channels = symmetry::channel_classes(&self.channel_bytes, |_| 0, symmetry)
            .into_iter()
            .map(|ChannelClass { channel, copies }| NvlsChannel { bytes: self.channel_bytes[channel], copies })
            .collect();
        let stream = NvlsStream {
            heads: self.nvls_heads(model),
            channels,
            up,
            down,
            chunk: self.nvls_chunk(model),
            channel_cap: port.scaled(efficiency / f64::from(self.nvls_channels)),
        };
        Ok(Body { stream: Box::new(stream), mirrored: mirrored.unwrap_or_default(), straggler: Time::ZERO })
    }

    fn costs<'m>(&self, model: &'m HardwareModel) -> &'m PathCost {
        let protocol = self.protocol.model(model);
        match self.class {
            PathClass::Nvlink => &protocol.nvlink,
            PathClass::Pcie => protocol.pcie_cost(),
            PathClass::Shm => &protocol.shm,
        }
    }

    /// Bytes on the wire a byte of data puts on this path: the protocol's
    /// framing and, over PCIe, the smaller packets GPU threads store in
    /// (`thread_store_efficiency` of the GPU's PCIe generation).
    fn wire_factor(&self, topo: &Topology, model: &HardwareModel) -> Result<f64, CollectiveError> {
        let framing = self.protocol.model(model).wire_factor;
        if self.class != PathClass::Pcie {
            return Ok(framing);
        }
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let pcie = model.pcie(&gpu.pcie_generation).map_err(CollectiveError::Model)?;
        Ok(framing / pcie.thread_store_efficiency)
    }

    /// Wire bytes of a step's piece that ride on the step's latency.
    fn latency_wire_bytes(&self, model: &HardwareModel) -> Bytes {
        ring::wire_bytes(self.costs(model).latency_bytes, self.protocol.model(model).wire_factor)
    }

    /// Whether a ring's or chain's final receive reads what arrived out of
    /// host memory, over the contended link (through host memory), rather
    /// than the GPU's own memory (over NVLink or PCIe, where the data
    /// landed in its receive buffer).
    fn final_receive_reads_host_memory(&self) -> bool {
        self.class == PathClass::Shm
    }

    /// A channel's thread block: this plan's GPU, protocol and elements,
    /// reading what arrives no faster than the path lets one channel.
    fn channel_physics(&self, topo: &Topology, model: &HardwareModel) -> Result<ThreadBlock, CollectiveError> {
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        let rates = model.gpu_cta_rates(gpu, self.protocol).map_err(CollectiveError::Model)?;
        // Only 8-bit elements need the GPU's table of adds.
        let extra_add = match self.request.element {
            Element::Wide => None,
            eight_bit => eight_bit.add_rate(&model.gpu_element_adds(gpu).map_err(CollectiveError::Model)?),
        };
        Ok(ThreadBlock::new(rates, extra_add, self.costs(model).channel_rate))
    }

    /// How much every channel slows when this call's channels share links
    /// (the contention knee of src/collective/rate.rs): `flows` lists each
    /// channel's connections with the wire rate it would push alone.
    fn contention(&self, topo: &Topology, model: &HardwareModel, flows: &[(&Connection, f64)], host: HostLoop) -> f64 {
        let mut demand = vec![0.0f64; topo.links().len()];
        let mut capacity: Vec<f64> = topo.links().iter().map(|l| l.bandwidth.bytes_per_sec()).collect();
        for &(connection, wire_rate) in flows {
            let (paths, read): (Vec<&Path>, Option<&Path>) = match connection {
                Connection::Direct { path, .. } => (vec![path], None),
                Connection::Staged { write, read } => (vec![write, read], Some(read)),
            };
            for path in paths {
                for link in path.links.iter() {
                    demand[link.index()] += wire_rate;
                }
            }
            // GPU threads reading host memory get less of the link into
            // the GPU than a DMA engine does: how much less depends on how
            // their loop mixes reads and writes, and on the protocol.
            if let Some(&last) = read.and_then(|r| r.links.last())
                && let LinkKind::Pcie { generation, .. } = &topo.link(last).kind
                && let Ok(pcie) = model.pcie(generation)
            {
                let share = rate::host_loop_share(host, &self.costs(model).host_shares(pcie));
                capacity[last.index()] = topo.link(last).bandwidth.bytes_per_sec() * share;
            }
        }
        demand
            .iter()
            .zip(&capacity)
            .filter(|(d, _)| **d > 0.0)
            .map(|(d, c)| rate::contention_factor(*d, *c, model.contention.sharpness))
            .fold(1.0, f64::min)
    }

    /// The time of a call NCCL does not run as a collective: nothing for an
    /// empty call; for one rank's data a copy within the GPU's memory, which
    /// NCCL issues as cudaMemcpyAsync (ncclLaunchOneRank, for sums). No
    /// collective kernel runs, so the caller's `collective_call` is not paid:
    /// PyTorch's one-rank calls in a graph take what raw NCCL's do
    /// (measurements/h200-device-1gpu/torch-caller.jsonl).
    fn shortcut_time(&self, topo: &Topology, model: &HardwareModel) -> Result<Time, CollectiveError> {
        if self.request.bytes.0 == 0 {
            return Ok(Time::ZERO);
        }
        let launch = model.stack(self.request.stack).map_err(CollectiveError::Model)?.copy_launch;
        let gpu = model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?;
        Ok(launch + self.request.bytes / gpu.local_copy_rate())
    }

    /// What the GPU's architecture adds to a call's start and to a step.
    fn arch_latency(&self, topo: &Topology, model: &HardwareModel) -> Result<(Time, Time), CollectiveError> {
        Ok(model.arch_latency(model.gpu(&topo.gpu_model).map_err(CollectiveError::Model)?))
    }

    /// The fixed latency a call pays before its first step: the caller's
    /// cost, then the kernel's start (its operation's, where it differs)
    /// with the protocol's set-up.
    fn start_latency(&self, topo: &Topology, model: &HardwareModel) -> Result<Time, CollectiveError> {
        let caller = model.stack(self.request.stack).map_err(CollectiveError::Model)?.collective_call;
        let kernel = match self.algorithm {
            Algorithm::Nvls => model.nvls.latency,
            Algorithm::OneShot | Algorithm::TwoShot => model.direct.launch_latency,
            Algorithm::Ring | Algorithm::Tree => {
                let starts = &self.protocol.model(model).kernel_start;
                let by_op = match self.request.op {
                    Op::AllGather => starts.allgather,
                    Op::ReduceScatter => starts.reducescatter,
                    Op::AllReduce | Op::Broadcast => Time::ZERO,
                };
                self.costs(model).base_latency + by_op + self.arch_latency(topo, model)?.0
            }
        };
        Ok(caller + kernel)
    }
}
