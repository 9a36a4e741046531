//! What a query's replay found: where each kind of pass spent its time on
//! every GPU, what each collective size cost and how busy it kept the
//! GPUs' own links, and the query's totals (time to first token, share of
//! communication). Plain results; the replay itself is `tp`'s.

use crate::collective::{Algorithm, Outcome, Protocol};
use crate::network::{LinkId, LinkUsage};
use crate::topology::Topology;
use crate::units::{Bytes, Time};

/// Where the time of one kind of pass went over the query, on every GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassTotals {
    /// In kernels, with the gap before each (a graph's, or an eager stream's).
    pub compute: Time,
    /// In collectives.
    pub comm: Time,
    /// Idle, waiting for kernels to be launched (eager callers).
    pub launch_wait: Time,
}

impl PassTotals {
    pub(super) fn add(&mut self, span: Time, compute: Time, comm: Time) {
        self.compute += compute;
        self.comm += comm;
        self.launch_wait += Time(span.0.saturating_sub(compute.0 + comm.0));
    }

    pub fn total(&self) -> Time {
        self.compute + self.comm + self.launch_wait
    }
}

/// One collective size of the query: how often it runs and what the
/// collective layer made of it.
#[derive(Debug, Clone, PartialEq)]
pub struct AllreduceUse {
    pub bytes: Bytes,
    pub calls: u64,
    /// Time of one call.
    pub time: Time,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    /// What the connections really use ("nvswitch", "p2p+shm").
    pub transport: String,
    pub channels: u32,
    pub busbw_gbps: f64,
    /// How busy the GPUs' own links of the mode's kind were during one
    /// call: bytes they carried over their capacity times the call's time.
    pub gpu_link_util: f64,
}

impl AllreduceUse {
    pub(super) fn of(outcome: &Outcome, topo: &Topology, own_links: &[LinkId]) -> AllreduceUse {
        let carried: f64 = own_links.iter().map(|l| outcome.usage[l.index()].bytes.as_f64()).sum();
        let capacity: f64 = own_links.iter().map(|&l| topo.link(l).bandwidth.bytes_per_sec() * outcome.time.as_secs()).sum();
        AllreduceUse {
            bytes: outcome.bytes,
            calls: 0,
            time: outcome.time,
            algorithm: outcome.algorithm,
            protocol: outcome.protocol,
            transport: outcome.transport.clone(),
            channels: outcome.channels,
            busbw_gbps: outcome.busbw_gbps(),
            gpu_link_util: if capacity > 0.0 { carried / capacity } else { 0.0 },
        }
    }
}

/// Where one query's time went, on every GPU of the TP group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryReplay {
    pub prefill: PassTotals,
    pub decode: PassTotals,
    /// The allreduces of the prefill (after each block, and the embedding's).
    pub prefill_allreduce: Option<AllreduceUse>,
    pub decode_allreduce: Option<AllreduceUse>,
    /// The gathers of the logits, one per size.
    pub gathers: Vec<AllreduceUse>,
    /// Payload each GPU sends for TP over the query: 2(n-1)/n of every
    /// allreduce, (n-1)/n of every gather.
    pub tp_bytes_per_gpu: Bytes,
    /// What every link carried over all the query's collectives.
    pub link_usage: Vec<LinkUsage>,
    /// When each pass ended (the prefill's end is the first token's time).
    pub pass_ends: Vec<Time>,
    /// Segments of passes the engine ran, and those reused exactly.
    pub segments_simulated: u64,
    pub segments_reused: u64,
}

impl QueryReplay {
    pub fn compute(&self) -> Time {
        self.prefill.compute + self.decode.compute
    }
    pub fn comm(&self) -> Time {
        self.prefill.comm + self.decode.comm
    }
    pub fn launch_wait(&self) -> Time {
        self.prefill.launch_wait + self.decode.launch_wait
    }
    /// Time to first token: the prefill (its last position's logits give
    /// the first token).
    pub fn ttft(&self) -> Time {
        self.prefill.total()
    }
    pub fn total(&self) -> Time {
        self.prefill.total() + self.decode.total()
    }
    pub fn comm_share(&self) -> f64 {
        let total = self.total();
        if total.0 == 0 { 0.0 } else { self.comm().0 as f64 / total.0 as f64 }
    }
}
