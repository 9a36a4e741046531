//! The KV cache's move from the prefill group to the decode group of a
//! split server. Tensor parallelism shards the KV heads on each side (GPU
//! `i` of TP=`t` holds heads `i*K/t ..`, and where the `K` heads are fewer
//! than the GPUs each is replicated on `t/K` neighbours), so each decode
//! GPU takes the heads it holds from a prefill GPU holding them. A move of
//! one request's cache is one task graph: every pair's copy at once, each
//! made as `transport::add_copy` makes a GPU-to-GPU copy (one DMA over
//! NVLink or PCIe, or staged through host memory in chunks), run by the
//! engine on the topology's links. Moves are kept by token count rounded
//! up as iterations are (`iteration::round_up`). A move shares the links,
//! in its task graph, with both groups' traffic: the prefill group's as it
//! computes the next prompt chunk (that chunk's allreduces one after
//! another, each after the compute that comes before it: `Background`),
//! and the decode group's as it runs the iteration under way when the move
//! starts (its allreduces, a few KiB a sequence, spaced by its compute:
//! `DecodeTraffic`; found once per size of iteration and scaled to each
//! move). The move is slowed by them and they by it, and all are told
//! ([`MoveTime`]). Other moves (the service queues them one at a time) are
//! not in it. Knows nothing of scheduling.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::collective::{self, Expansion, Request};
use crate::config::hardware::HardwareModel;
use crate::config::llm::LlmModel;
use crate::engine::{self, TaskGraph};
use crate::network::LinkUsage;
use crate::topology::{NodeId, Topology};
use crate::transport::{self, Mode};
use crate::units::{Bytes, Time};

use super::ServeError;
use super::iteration::{IterationTime, round_up};

/// A source of the times of KV moves.
pub trait MoveTimes {
    /// Bytes of one token's KV cache a move carries, over every pair.
    fn bytes_per_token(&self) -> u64;
    /// The time of moving the cache of `tokens` tokens, while the prefill
    /// group computes (`prefilling`) or idles, and while the decode group
    /// runs an iteration (`decoding`) or idles.
    fn time(&mut self, tokens: u64, prefilling: bool, decoding: Option<Decoding>) -> Result<MoveTime, ServeError>;
}

/// The decode group's iteration under way as a move starts: its rows and
/// its time, the part of it in collectives told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoding {
    pub rows: u64,
    pub time: IterationTime,
}

/// One move's time, and how much later each group's allreduces beside it
/// end for sharing the links with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoveTime {
    pub duration: Time,
    pub prefill_delay: Time,
    pub decode_delay: Time,
}

/// What one prefill GPU sends one decode GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub from: NodeId,
    pub to: NodeId,
    pub bytes_per_token: u64,
}

/// The KV heads GPU `rank` of a TP=`tp` group holds, of `kv_heads`.
fn heads(kv_heads: u64, tp: u64, rank: u64) -> Range<u64> {
    if kv_heads >= tp {
        let each = kv_heads.div_ceil(tp);
        (rank * each).min(kv_heads)..((rank + 1) * each).min(kv_heads)
    } else {
        let head = rank * kv_heads / tp;
        head..head + 1
    }
}

/// Who sends whom the KV cache of `llm` when `prefill` GPUs (in rank
/// order) hand requests to `decode` GPUs: each decode GPU's heads, each
/// from a prefill GPU holding it (among replicas, spread by the decode
/// GPU's rank), one share a pair.
pub fn shares(llm: &LlmModel, prefill: &[NodeId], decode: &[NodeId]) -> Vec<Share> {
    let head_bytes = u64::try_from(llm.kv_cache_bytes_per_gpu(1, 1, llm.kv_heads as u32)).expect("a head's token fits in memory");
    let (p, d) = (prefill.len() as u64, decode.len() as u64);
    // Heads each pair carries, by (prefill rank, decode rank), ordered.
    let mut counts: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for j in 0..d {
        for head in heads(llm.kv_heads, d, j) {
            let holders: Vec<u64> = (0..p).filter(|&i| heads(llm.kv_heads, p, i).contains(&head)).collect();
            let from = holders[(j as usize) % holders.len()];
            *counts.entry((from, j)).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .map(|((i, j), heads)| Share { from: prefill[i as usize], to: decode[j as usize], bytes_per_token: heads * head_bytes })
        .collect()
}

/// A move simulated, and what the moves kept under its key carried.
#[derive(Debug)]
struct Kept {
    time: MoveTime,
    usage: Vec<LinkUsage>,
    /// Moves timed by it, and their tokens (unrounded).
    moves: u64,
    tokens: u64,
}

/// Which link carried the moves most for its capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct BusiestLink {
    pub label: String,
    pub bytes: Bytes,
    /// Its bytes over its capacity for the moves' whole time.
    pub utilization: f64,
}

/// What the prefill group puts on the links while a move runs: the
/// allreduce of a full prompt chunk (its token budget's activations), one
/// after another, each after `compute` (the chunk's kernels between two of
/// its allreduces). A decode group's iteration is one too (`DecodeTraffic`).
pub struct Background {
    pub allreduce: collective::Plan,
    pub compute: Time,
}

/// What the decode group puts on the links while a move runs: the
/// allreduces of the iteration under way (`allreduces` an iteration, each
/// of its rows' activations), each after its share of the iteration's
/// compute. The allreduces after its first few are taken to be slowed as
/// those are.
pub struct DecodeTraffic {
    /// The group's allreduce of one row.
    pub row: Request,
    pub allreduces: u64,
}

impl DecodeTraffic {
    /// The iteration `decoding`'s traffic, as a chain of allreduces.
    fn background(&self, topo: &Topology, model: &HardwareModel, decoding: Decoding) -> Result<Background, ServeError> {
        let request = Request { bytes: self.row.bytes * decoding.rows, ..self.row.clone() };
        let compute = Time(decoding.time.total.0.saturating_sub(decoding.time.comm.0) / self.allreduces.max(1));
        Ok(Background { allreduce: collective::Plan::new(topo, model, request)?, compute })
    }
}

/// A chain of a background's allreduces (each `allreduce` long alone) that
/// keeps its group busy for twice `duration` (past them, the move runs
/// alone), and how many of its allreduces end within `duration` at their
/// pace alone.
fn chain_for(background: &Background, allreduce: Time, duration: Time) -> (usize, f64) {
    let period = (allreduce + background.compute).as_secs().max(f64::MIN_POSITIVE);
    ((2.0 * duration.as_secs() / period).ceil() as usize + 1, duration.as_secs() / period)
}

/// What a move is keyed by: its rounded tokens, whether the prefill group
/// computes, and the decode group's rows (`decode_key`; 0: idle).
type MoveKey = (u64, bool, u64);

/// The decode group's rows a move is timed beside: `rows` rounded up to a
/// power of two (its allreduces are bound by latency; their size matters
/// little, and each key costs a simulation).
fn decode_key(rows: u64) -> u64 {
    rows.next_power_of_two()
}

/// The decode group's allreduces a move is simulated beside, at most: the
/// delay they take is scaled to the allreduces the move overlaps.
const DECODE_WINDOW: usize = 16;

/// KV moves simulated on a topology.
pub struct TopologyMoves<'a> {
    topo: &'a Topology,
    model: &'a HardwareModel,
    /// Each pair's share and the mode its copy really uses.
    shares: Vec<(Share, Mode)>,
    /// The prefill group's traffic, and one of its allreduces' time alone.
    background: Option<(Background, Time)>,
    /// The decode group's traffic, and how moves and its iterations slow
    /// each other, by rows (`decode_key`).
    decode: Option<DecodeTraffic>,
    decode_contention: BTreeMap<u64, DecodeContention>,
    kept: BTreeMap<MoveKey, Kept>,
    /// A move's time and links' use alone, by rounded tokens.
    alone: BTreeMap<u64, (Time, Vec<LinkUsage>)>,
    /// When a chain of that many of the prefill group's allreduces ends alone.
    unshared: BTreeMap<usize, Time>,
}

/// How a move and the decode group's allreduces beside it slow each other:
/// the move's time over its time alone, the delay each allreduce it
/// overlaps takes (seconds), and an allreduce's period (its time alone and
/// the compute before it, seconds).
#[derive(Debug, Clone, Copy)]
struct DecodeContention {
    stretch: f64,
    delay_per_allreduce: f64,
    period: f64,
}

impl<'a> TopologyMoves<'a> {
    /// Moves of `llm`'s cache from `prefill` to `decode` GPUs in `mode`;
    /// where `p2p` is refused for a pair (across sockets) it goes through
    /// host memory, as NCCL falls back per connection.
    pub fn new(
        topo: &'a Topology,
        model: &'a HardwareModel,
        llm: &LlmModel,
        (prefill, decode): (&[NodeId], &[NodeId]),
        mode: Mode,
    ) -> Result<Self, ServeError> {
        let shares = shares(llm, prefill, decode)
            .into_iter()
            .map(|share| {
                let (connection, _) = transport::connect_with_fallback(topo, share.from, share.to, mode)?;
                Ok((share, connection.mode(topo)))
            })
            .collect::<Result<Vec<_>, transport::TransportError>>()
            .map_err(collective::CollectiveError::from)?;
        Ok(TopologyMoves {
            topo,
            model,
            shares,
            background: None,
            decode: None,
            decode_contention: BTreeMap::new(),
            kept: BTreeMap::new(),
            alone: BTreeMap::new(),
            unshared: BTreeMap::new(),
        })
    }

    /// The same moves, each sharing the links with the prefill group's
    /// `background` while that group computes.
    pub fn with_background(mut self, background: Background) -> Result<Self, ServeError> {
        let alone = collective::simulate_plan(self.topo, self.model, &background.allreduce)?.time;
        self.background = Some((background, alone));
        Ok(self)
    }

    /// The same moves, each sharing the links with the decode group's
    /// iteration under way.
    pub fn with_decode_traffic(mut self, traffic: DecodeTraffic) -> Self {
        self.decode = Some(traffic);
        self
    }

    /// The modes the pairs' copies use, each once, in pair order.
    pub fn transport(&self) -> String {
        let mut modes: Vec<String> = Vec::new();
        for (_, mode) in &self.shares {
            if !modes.contains(&mode.to_string()) {
                modes.push(mode.to_string());
            }
        }
        modes.join(", ")
    }

    /// How a move and the decode group's iteration of `decoding`'s rows
    /// (`decode_key`) slow each other, found with the first move of such
    /// an iteration (`tokens`): None without the group's allreduces.
    fn decode_contention(&mut self, decoding: Decoding, tokens: u64) -> Result<Option<DecodeContention>, ServeError> {
        let Some(traffic) = &self.decode else { return Ok(None) };
        let rows = decode_key(decoding.rows);
        if let Some(&contention) = self.decode_contention.get(&rows) {
            return Ok(Some(contention));
        }
        let background = traffic.background(self.topo, self.model, Decoding { rows, ..decoding })?;
        let allreduce = collective::simulate_plan(self.topo, self.model, &background.allreduce)?.time;
        let (alone, _) = self.alone(tokens)?;
        let count = chain_for(&background, allreduce, alone).0.min(DECODE_WINDOW);
        let (duration, shared, _) = self.run(Some(tokens), &[(&background, count)])?;
        let (_, unshared, _) = self.run(None, &[(&background, count)])?;
        let delay = shared[0].max(unshared[0]) - unshared[0];
        let overlapped = chain_for(&background, allreduce, duration).1.clamp(1.0, count as f64);
        let contention = DecodeContention {
            stretch: duration.as_secs() / alone.as_secs().max(f64::MIN_POSITIVE),
            delay_per_allreduce: delay.as_secs() / overlapped,
            period: (allreduce + background.compute).as_secs(),
        };
        self.decode_contention.insert(rows, contention);
        Ok(Some(contention))
    }

    /// A move of `tokens` tokens alone: its time and every link's use.
    fn alone(&mut self, tokens: u64) -> Result<(Time, Vec<LinkUsage>), ServeError> {
        if !self.alone.contains_key(&tokens) {
            let (alone, _, usage) = self.run(Some(tokens), &[])?;
            self.alone.insert(tokens, (alone, usage));
        }
        Ok(self.alone[&tokens].clone())
    }

    /// One move of `tokens` tokens beside the groups' traffic where they
    /// run: its time and the delay it puts on each group's allreduces, and
    /// every link's use by the move alone. The prefill group's chain is
    /// simulated with each move; the decode group's contention is taken
    /// from the first move beside an iteration of as many rows
    /// (`decode_contention`) and scaled to the allreduces this move
    /// overlaps.
    fn simulate(&mut self, tokens: u64, prefilling: bool, decoding: Option<Decoding>) -> Result<(MoveTime, Vec<LinkUsage>), ServeError> {
        let (alone, usage) = self.alone(tokens)?;
        let (mut duration, prefill_delay) = match self.background.as_ref().filter(|_| prefilling) {
            Some((background, allreduce)) => {
                let count = chain_for(background, *allreduce, alone).0;
                let (duration, shared, _) = self.run(Some(tokens), &[(background, count)])?;
                let unshared = match self.unshared.get(&count) {
                    Some(&end) => end,
                    None => {
                        let (_, end, _) = self.run(None, &[(background, count)])?;
                        self.unshared.insert(count, end[0]);
                        end[0]
                    }
                };
                (duration, shared[0].max(unshared) - unshared)
            }
            None => (alone, Time::ZERO),
        };
        let contention = match decoding {
            Some(decoding) => self.decode_contention(decoding, tokens)?,
            None => None,
        };
        let decode_delay = match contention {
            Some(contention) => {
                duration = Time((duration.0 as f64 * contention.stretch).round() as u64);
                let overlapped = (duration.as_secs() / contention.period.max(f64::MIN_POSITIVE)).max(1.0);
                Time::from_us_f64(contention.delay_per_allreduce * overlapped * 1e6)
            }
            None => Time::ZERO,
        };
        Ok((MoveTime { duration, prefill_delay, decode_delay }, usage))
    }

    /// The copies of a move of `tokens` tokens (none without) in one task
    /// graph, with `count` of each chain's allreduces: when the copies end,
    /// when each chain's last allreduce ends, and every link's use.
    fn run(&self, tokens: Option<u64>, chains: &[(&Background, usize)]) -> Result<(Time, Vec<Time>, Vec<LinkUsage>), ServeError> {
        let mut graph = TaskGraph::new();
        let mut ends = Vec::new();
        for (share, mode) in tokens.map_or(&[][..], |_| &self.shares[..]) {
            let tokens = tokens.unwrap_or_default();
            let bytes = Bytes(tokens * share.bytes_per_token);
            let end = transport::add_copy(&mut graph, self.topo, self.model, (share.from, share.to), bytes, *mode, &[])
                .map_err(collective::CollectiveError::from)?;
            ends.push(end);
        }
        let mut lasts = Vec::new();
        for &(background, count) in chains {
            let mut after = Vec::new();
            for _ in 0..count {
                let computed = graph.delay(background.compute, &after);
                after = vec![background.allreduce.build(self.topo, self.model, &mut graph, &[computed], Expansion::Streamed)?];
            }
            lasts.push(after);
        }
        let mut network = self.topo.network();
        let schedule = engine::run(&graph, &mut network);
        let end = |tasks: &[_]| tasks.iter().map(|&task| schedule.span(task).1).max().unwrap_or(Time::ZERO);
        Ok((end(&ends), lasts.iter().map(|last| end(last)).collect(), network.usage()))
    }

    /// The link the moves timed so far loaded most for its capacity over
    /// their time; None before any move.
    pub fn busiest_link(&self) -> Option<BusiestLink> {
        let mut bytes = vec![0u128; self.topo.links().len()];
        let mut time = Time::ZERO;
        for (&(key, _, _), kept) in &self.kept {
            // A link's bytes grow with the tokens moved: scaled from the
            // rounded move to the moves' own tokens.
            for (link, usage) in kept.usage.iter().enumerate() {
                bytes[link] += u128::from(usage.bytes.0) * u128::from(kept.tokens) / u128::from(key);
            }
            time += kept.time.duration * kept.moves;
        }
        let usage: Vec<LinkUsage> = bytes.iter().map(|&b| LinkUsage { bytes: Bytes(b as u64), busy: Time::ZERO }).collect();
        let (link, utilization) = collective::busiest_link(self.topo, &usage, time)?;
        Some(BusiestLink { label: self.topo.link_label(link), bytes: usage[link.index()].bytes, utilization })
    }
}

impl MoveTimes for TopologyMoves<'_> {
    fn bytes_per_token(&self) -> u64 {
        self.shares.iter().map(|(share, _)| share.bytes_per_token).sum()
    }

    fn time(&mut self, tokens: u64, prefilling: bool, decoding: Option<Decoding>) -> Result<MoveTime, ServeError> {
        let decoding = decoding.filter(|_| self.decode.is_some());
        let key = (round_up(tokens), prefilling, decoding.map_or(0, |d| decode_key(d.rows)));
        if !self.kept.contains_key(&key) {
            let (time, usage) = self.simulate(key.0, prefilling, decoding)?;
            self.kept.insert(key, Kept { time, usage, moves: 0, tokens: 0 });
        }
        let kept = self.kept.get_mut(&key).expect("kept above");
        kept.moves += 1;
        kept.tokens += tokens;
        Ok(kept.time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    fn board(name: &str) -> (Topology, HardwareModel) {
        let model = HardwareModel::base();
        (preset(name, &PresetOptions::default(), &model).unwrap(), model)
    }

    #[test]
    fn heads_are_split_in_runs_and_replicated_when_fewer_than_the_gpus() {
        assert_eq!((0..4).map(|r| heads(8, 4, r)).collect::<Vec<_>>(), [0..2, 2..4, 4..6, 6..8]);
        assert_eq!((0..8).map(|r| heads(2, 8, r).start).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(heads(8, 1, 0), 0..8);
    }

    #[test]
    fn every_decode_gpu_gets_its_heads_from_a_prefill_gpu_holding_them() {
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let (topo, _) = board("hgx-h200");
        let g = topo.gpus();
        let per_gpu = |tp: u32| u64::try_from(llm.kv_cache_bytes_per_gpu(1, 1, tp)).unwrap();
        // 8 KV heads: TP=2 prefill hands its 4 heads a GPU to four GPUs
        // holding 2 each, two from each prefill GPU.
        let wide = shares(&llm, &g[..2], &g[2..6]);
        assert_eq!(wide.iter().map(|s| (s.from, s.to)).collect::<Vec<_>>(), [(g[0], g[2]), (g[0], g[3]), (g[1], g[4]), (g[1], g[5])]);
        assert!(wide.iter().all(|s| s.bytes_per_token == per_gpu(4)));
        // Narrow: each decode GPU gathers from two prefill GPUs.
        let narrow = shares(&llm, &g[..4], &g[4..6]);
        assert_eq!(narrow.len(), 4);
        // Either way, the decode group receives every head once.
        for (p, d) in [(2, 4), (4, 2), (1, 8), (8, 1), (4, 4)] {
            let total: u64 = shares(&llm, &g[..p], &g[8 - d..]).iter().map(|s| s.bytes_per_token).sum();
            assert_eq!(total, d as u64 * per_gpu(d as u32), "TP {p} -> {d}");
            assert_eq!(total, per_gpu(1), "no head replicated at TP <= 8 heads");
        }
    }

    #[test]
    fn a_move_and_the_prefill_groups_allreduces_beside_it_slow_each_other() {
        use crate::collective::{Op, Request};
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let (topo, model) = board("pcie-gen5-8gpu");
        let g = topo.gpus();
        // Through host memory, where both load the prefill GPUs' links and host memory.
        let allreduce = Request::new(Op::AllReduce, llm.allreduce_bytes(8192), g[..4].to_vec(), Mode::Shm);
        let background = |compute| Background { allreduce: collective::Plan::new(&topo, &model, allreduce.clone()).unwrap(), compute };
        let moves = || TopologyMoves::new(&topo, &model, &llm, (&g[..4], &g[4..]), Mode::Auto).unwrap();
        let mut alone = moves();
        let mut beside = moves().with_background(background(Time::from_us(100))).unwrap();
        let (idle, busy) = (beside.time(2000, false, None).unwrap(), beside.time(2000, true, None).unwrap());
        assert_eq!(idle, alone.time(2000, true, None).unwrap(), "no background: as alone; an idle prefill group: as alone");
        assert_eq!(idle.prefill_delay, Time::ZERO);
        alone.time(2000, false, None).unwrap();
        assert!(
            busy.duration.as_secs() > idle.duration.as_secs() * 1.2,
            "the allreduces cross the same host memory and socket link: {busy:?} vs {idle:?}"
        );
        // The allreduces lose time to the move too, never more than the move takes.
        assert!(busy.prefill_delay > Time::ZERO && busy.prefill_delay < busy.duration, "{busy:?}");
        // The moves' own bytes, not the allreduces', are what their busiest link reports.
        assert_eq!(beside.busiest_link().unwrap().bytes, alone.busiest_link().unwrap().bytes);
        // A move done before the group's first allreduce starts is not
        // slowed, and slows nothing.
        let mut later = moves().with_background(background(Time::from_us(1_000_000))).unwrap();
        assert_eq!(later.time(2000, true, None).unwrap(), idle);
    }

    #[test]
    fn a_move_and_the_decode_groups_iteration_beside_it_slow_each_other() {
        use crate::collective::{Op, Request};
        use crate::serve::iteration::IterationTime;
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let (topo, model) = board("pcie-gen5-8gpu");
        let g = topo.gpus();
        // Through host memory, where the copies arrive over the decode GPUs'
        // links that their allreduces use too.
        let traffic =
            || DecodeTraffic { row: Request::new(Op::AllReduce, llm.allreduce_bytes(1), g[4..].to_vec(), Mode::Shm), allreduces: 161 };
        let moves = || TopologyMoves::new(&topo, &model, &llm, (&g[..4], &g[4..]), Mode::Auto).unwrap();
        let decoding = |rows, compute_us: u64| Decoding {
            rows,
            time: IterationTime { total: Time::from_us(compute_us + 1_000), comm: Time::from_us(1_000), swap: Time::ZERO },
        };
        let alone = moves().time(8000, false, None).unwrap();
        let mut beside = moves().with_decode_traffic(traffic());
        assert_eq!(beside.time(8000, false, None).unwrap(), alone, "an idle decode group: as alone");
        let busy = beside.time(8000, false, Some(decoding(200, 16_100))).unwrap();
        assert!(busy.decode_delay > Time::ZERO && busy.prefill_delay == Time::ZERO, "{busy:?}");
        assert!(busy.duration >= alone.duration, "{busy:?} vs {alone:?}");
        // Rows rounded up to a power of two: 256 rows are timed as the 200 were.
        assert_eq!(beside.time(8000, false, Some(decoding(256, 1))).unwrap(), busy);
        // A longer move overlaps more of the group's allreduces.
        assert!(beside.time(16000, false, Some(decoding(200, 16_100))).unwrap().decode_delay > busy.decode_delay);
        // A group with more rows a step loses more time beside the same move.
        let wider = beside.time(8000, false, Some(decoding(1024, 16_100))).unwrap();
        assert!(wider.decode_delay > busy.decode_delay, "{wider:?} vs {busy:?}");
        // Without the decode group's allreduces (TP=1), a move ignores it.
        assert_eq!(moves().time(8000, false, Some(decoding(64, 16_100))).unwrap(), alone);
    }

    #[test]
    fn a_move_over_nvswitch_beats_one_through_pcie_and_host_memory() {
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let time = |name: &str| {
            let (topo, model) = board(name);
            let g = topo.gpus();
            let mut moves = TopologyMoves::new(&topo, &model, &llm, (&g[..4], &g[4..]), Mode::Auto).unwrap();
            let time = moves.time(2000, false, None).unwrap().duration;
            assert_eq!(moves.time(1990, false, None).unwrap().duration, time, "rounded to the same key");
            (time, moves.transport(), moves.busiest_link().unwrap())
        };
        let (nvswitch, nvswitch_mode, nvswitch_link) = time("hgx-h200");
        let (pcie, pcie_mode, pcie_link) = time("pcie-gen5-8gpu");
        assert_eq!((nvswitch_mode.as_str(), pcie_mode.as_str()), ("nvswitch", "shm"), "the groups sit on two sockets of the PCIe board");
        assert!(pcie > nvswitch * 3, "{pcie} vs {nvswitch}");
        assert!(nvswitch_link.label.contains("NVLink") || nvswitch_link.label.to_lowercase().contains("nvl"), "{nvswitch_link:?}");
        assert!(pcie_link.utilization > 0.0 && pcie_link.utilization <= 1.0 + 1e-9, "{pcie_link:?}");
        // The bytes the busiest link carried are the two moves' own.
        let bytes = (2000 + 1990) * llm.kv_cache_bytes_per_gpu(1, 1, 1) as u64;
        assert!(nvswitch_link.bytes.0 <= bytes && nvswitch_link.bytes.0 >= bytes / 8, "{nvswitch_link:?}");
        // Bounded below by the bytes over the fastest link a GPU has.
        let (topo, _) = board("hgx-h200");
        let out = topo.links().iter().filter(|l| l.from == topo.gpus()[0]).map(|l| l.bandwidth).max().unwrap();
        assert!(nvswitch >= Bytes(2000 * llm.kv_cache_bytes_per_gpu(1, 1, 4) as u64) / out);
    }
}
