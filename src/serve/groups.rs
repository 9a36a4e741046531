//! The GPUs a server serves on: one tensor-parallel group, or a split into
//! a prefill group and a decode group (`SplitPlan`: each group's TP and,
//! unless listed, the first P GPUs to prefill and the next D to decode).
//! Owns the split's checks, which say as data what they refuse
//! (`PlanError`, `GroupError`; each caller words them by its own flags or
//! keys), and a group set up on its GPUs: its forward, KV cache and token
//! budget.

use std::fmt;
use std::str::FromStr;

use crate::collective;
use crate::config::hardware::{GpuModel, HardwareModel};
use crate::config::llm::LlmModel;
use crate::topology::{NodeId, Topology};
use crate::units::{Bytes, Time};
use crate::workload::experiment::ModeRun;
use crate::workload::forward::PassTokens;
use crate::workload::tp::{CollectiveCache, TensorParallel, TpError};

use super::handoff::{Background, DecodeTraffic};
use super::iteration::{IterationTimes, SimulatedIterations};
use super::load::EngineSettings;
use super::results::GroupSetup;
use super::{Engine, KvCapacity, ServeError};

/// A server split in two: the groups' TP degrees, their GPUs (by index;
/// None: the first GPUs not in the other group), and the prefill group's
/// token budget (None: the engine's, which the decode group keeps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitPlan {
    pub prefill_tp: u32,
    pub decode_tp: u32,
    pub prefill_gpus: Option<Vec<usize>>,
    pub decode_gpus: Option<Vec<usize>>,
    pub prefill_max_num_batched_tokens: Option<u64>,
}

/// Which group of a split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Prefill,
    Decode,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        })
    }
}

/// Why the groups' GPUs cannot be as planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the server has {gpus} GPUs, fewer than {prefill_tp} + {decode_tp}")]
    TooFew { gpus: usize, prefill_tp: u32, decode_tp: u32 },
    #[error("the {role} group lists {} GPUs for TP={tp}", listed.len())]
    ListedCount { role: Role, listed: Vec<usize>, tp: u32 },
    #[error("the {role} group lists GPU {gpu}; the server's are 0 to {}", gpus - 1)]
    NoSuchGpu { role: Role, listed: Vec<usize>, gpu: usize, gpus: usize },
    #[error("the {role} group lists GPU {gpu} twice")]
    Twice { role: Role, listed: Vec<usize>, gpu: usize },
    #[error("GPU {gpu} is in both groups")]
    InBoth { gpu: usize },
}

/// Why a group cannot serve on its GPUs.
#[derive(Debug, thiserror::Error)]
pub enum GroupFailure {
    #[error(transparent)]
    Tp(#[from] TpError),
    #[error(transparent)]
    Cache(#[from] ServeError),
}

/// A group of a split that cannot serve, and why.
#[derive(Debug, thiserror::Error)]
#[error("{failure} (the {role} group at TP={tp})")]
pub struct GroupError {
    pub role: Role,
    pub tp: u32,
    pub failure: GroupFailure,
}

impl SplitPlan {
    /// The GPUs (by index, in rank order) of the prefill and decode groups
    /// of a server of `gpus` GPUs.
    pub fn groups(&self, gpus: usize) -> Result<(Vec<usize>, Vec<usize>), PlanError> {
        let (prefill_tp, decode_tp) = (self.prefill_tp, self.decode_tp);
        if (prefill_tp + decode_tp) as usize > gpus {
            return Err(PlanError::TooFew { gpus, prefill_tp, decode_tp });
        }
        for (role, list, tp) in [(Role::Prefill, &self.prefill_gpus, prefill_tp), (Role::Decode, &self.decode_gpus, decode_tp)] {
            let Some(list) = list else { continue };
            let listed = list.clone();
            if list.len() != tp as usize {
                return Err(PlanError::ListedCount { role, listed, tp });
            }
            if let Some(&gpu) = list.iter().find(|&&g| g >= gpus) {
                return Err(PlanError::NoSuchGpu { role, listed, gpu, gpus });
            }
            if let Some((_, &gpu)) = list.iter().enumerate().find(|(i, g)| list[..*i].contains(g)) {
                return Err(PlanError::Twice { role, listed, gpu });
            }
        }
        // Listed groups first; the other takes the first GPUs left.
        let left = |taken: &[usize], count: u32| (0..gpus).filter(|g| !taken.contains(g)).take(count as usize).collect::<Vec<_>>();
        let (prefill, decode) = match (&self.prefill_gpus, &self.decode_gpus) {
            (Some(p), Some(d)) => (p.clone(), d.clone()),
            (Some(p), None) => (p.clone(), left(p, decode_tp)),
            (None, Some(d)) => (left(d, prefill_tp), d.clone()),
            (None, None) => ((0..prefill_tp as usize).collect(), (prefill_tp as usize..(prefill_tp + decode_tp) as usize).collect()),
        };
        if let Some(&gpu) = decode.iter().find(|g| prefill.contains(g)) {
            return Err(PlanError::InBoth { gpu });
        }
        Ok((prefill, decode))
    }
}

/// `P+D`: a prefill group of TP=P and a decode group of TP=D on the first
/// P + D GPUs, as a sweep's `serve.split` writes it.
impl FromStr for SplitPlan {
    type Err = String;

    fn from_str(text: &str) -> Result<SplitPlan, String> {
        let degree = |part: &str| part.trim().parse::<u32>().ok().filter(|&tp| tp > 0);
        match text.split_once('+').map(|(p, d)| (degree(p), degree(d))) {
            Some((Some(prefill_tp), Some(decode_tp))) => Ok(SplitPlan { prefill_tp, decode_tp, ..SplitPlan::default() }),
            _ => Err(format!("{text:?}: give the prefill and decode groups' TP degrees as \"P+D\" (\"4+4\"), or \"none\" for one group")),
        }
    }
}

impl SplitPlan {
    /// `text` as a split (`P+D`), or as one group (`none`).
    pub fn or_none(text: &str) -> Result<Option<SplitPlan>, String> {
        if text == "none" { Ok(None) } else { text.parse().map(Some) }
    }
}

impl fmt::Display for SplitPlan {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}+{}", self.prefill_tp, self.decode_tp)
    }
}

/// GPUs by index as flags and reports write them: `0,1,2`.
pub fn listed(gpus: &[usize]) -> String {
    gpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// `setup` launched as `settings` launch the iterations that are not
/// decodes alone; None where that is `setup`'s own stack.
pub fn eager_setup<'e>(setup: &TensorParallel<'e>, settings: &EngineSettings) -> Result<Option<TensorParallel<'e>>, TpError> {
    settings.eager_stack(setup.stack()).map(|stack| setup.clone().with_stack(stack)).transpose()
}

/// The allreduces of one pass of `llm`: two a layer, and the embedding's.
fn allreduces_a_pass(llm: &LlmModel) -> u64 {
    2 * llm.layers + 1
}

/// One group set up to serve: its GPUs (by index and as topology nodes,
/// in rank order), its forward on them, its KV cache and token budget.
pub struct ServingGroup<'e> {
    pub tp: u32,
    pub gpus: Vec<usize>,
    pub ranks: Vec<NodeId>,
    pub setup: TensorParallel<'e>,
    /// The forward of its iterations that are not decodes alone, where
    /// another stack launches them (`EngineSettings::eager_stack`).
    pub eager: Option<TensorParallel<'e>>,
    pub kv: KvCapacity,
    pub budget: u64,
}

impl<'e> ServingGroup<'e> {
    /// `setup` moved onto the GPUs `gpus` (indices of `ranks_of`'s list),
    /// with the cache `settings` leave on `gpu` beside `llm`'s weights.
    pub fn on(
        setup: TensorParallel<'e>,
        (gpus, all): (Vec<usize>, &[NodeId]),
        (llm, gpu): (&LlmModel, &GpuModel),
        settings: &EngineSettings,
        budget: u64,
    ) -> Result<ServingGroup<'e>, GroupFailure> {
        let ranks: Vec<NodeId> = gpus.iter().map(|&g| all[g]).collect();
        let tp = ranks.len() as u32;
        let setup = setup.on_gpus(ranks.clone())?;
        let eager = eager_setup(&setup, settings)?;
        let kv = KvCapacity::of(llm, gpu, tp, settings.gpu_memory_utilization, settings.block_size)?;
        Ok(ServingGroup { tp, gpus, ranks, setup, eager, kv, budget })
    }

    /// Its engine under `settings`, for requests of at most
    /// `max_model_len` tokens.
    pub fn engine(&self, settings: &EngineSettings, max_model_len: u64) -> Engine {
        settings.engine(self.tp, self.budget, self.kv, max_model_len)
    }

    /// A source of its iterations' times, simulated on `run`'s topology
    /// (KV blocks of `settings`' size swapped over its host paths).
    pub fn iteration_times(&self, run: &'e ModeRun, settings: &EngineSettings) -> SimulatedIterations<'_> {
        let block_bytes = Bytes(settings.block_size * self.kv.bytes_per_token);
        let times = SimulatedIterations::new(&self.setup, CollectiveCache::new(&run.topology, &run.hardware), block_bytes)
            .with_graphs(settings.graphs.clone());
        match &self.eager {
            Some(eager) => times.with_eager(eager),
            None => times,
        }
    }

    /// What it puts on the links computing a full prompt chunk, its token
    /// budget, at once (`handoff::Background`): the chunk's allreduce, and
    /// the chunk's compute spread evenly before its allreduces, two a layer
    /// (the embedding's, once a pass, counted in). None at TP=1.
    pub fn background(
        &self,
        llm: &LlmModel,
        times: &mut dyn IterationTimes,
        (topo, model): (&Topology, &HardwareModel),
    ) -> Result<Option<Background>, ServeError> {
        let Some(request) = self.setup.allreduce(llm.allreduce_bytes(self.budget)) else { return Ok(None) };
        let mut chunk = PassTokens::empty(u64::from(self.tp));
        chunk.add(self.budget, 0);
        let time = times.time(chunk, false)?;
        let compute = Time(time.total.0.saturating_sub(time.comm.0) / allreduces_a_pass(llm));
        let allreduce = collective::Plan::new(topo, model, request)?;
        Ok(Some(Background { allreduce, compute }))
    }

    /// What it puts on the links running a decode iteration
    /// (`handoff::DecodeTraffic`): its allreduce of one row, and two
    /// allreduces a layer with the embedding's. None at TP=1.
    pub fn decode_traffic(&self, llm: &LlmModel) -> Option<DecodeTraffic> {
        let row = self.setup.allreduce(llm.allreduce_bytes(1))?;
        Some(DecodeTraffic { row, allreduces: allreduces_a_pass(llm) })
    }

    /// Its setup, as a split's report says it.
    pub fn described(&self) -> GroupSetup {
        GroupSetup {
            tp: self.tp,
            gpus: listed(&self.gpus),
            max_num_batched_tokens: self.budget,
            kv_blocks: self.kv.blocks,
            kv_gb_per_gpu: self.kv.bytes_per_gpu.as_f64() / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(prefill_gpus: Option<Vec<usize>>, decode_gpus: Option<Vec<usize>>) -> SplitPlan {
        SplitPlan { prefill_tp: 2, decode_tp: 2, prefill_gpus, decode_gpus, prefill_max_num_batched_tokens: None }
    }

    #[test]
    fn the_first_gpus_prefill_and_the_next_decode_unless_listed() {
        let four = SplitPlan { prefill_tp: 4, decode_tp: 4, ..SplitPlan::default() };
        assert_eq!(plan(None, None).groups(8).unwrap(), (vec![0, 1], vec![2, 3]));
        assert_eq!(four.groups(8).unwrap(), (vec![0, 1, 2, 3], vec![4, 5, 6, 7]));
        assert_eq!(plan(Some(vec![6, 7]), None).groups(8).unwrap(), (vec![6, 7], vec![0, 1]));
        assert_eq!(plan(None, Some(vec![0, 4])).groups(8).unwrap(), (vec![1, 2], vec![0, 4]));
        assert_eq!(plan(Some(vec![0, 2]), Some(vec![1, 3])).groups(8).unwrap(), (vec![0, 2], vec![1, 3]));
    }

    #[test]
    fn groups_that_cannot_be_are_refused_saying_which_and_why() {
        let too_big = SplitPlan { prefill_tp: 4, decode_tp: 8, ..SplitPlan::default() };
        assert_eq!(too_big.groups(8), Err(PlanError::TooFew { gpus: 8, prefill_tp: 4, decode_tp: 8 }));
        assert_eq!(plan(Some(vec![0]), None).groups(8), Err(PlanError::ListedCount { role: Role::Prefill, listed: vec![0], tp: 2 }));
        assert_eq!(
            plan(None, Some(vec![0, 9])).groups(8),
            Err(PlanError::NoSuchGpu { role: Role::Decode, listed: vec![0, 9], gpu: 9, gpus: 8 })
        );
        assert_eq!(plan(Some(vec![3, 3]), None).groups(8), Err(PlanError::Twice { role: Role::Prefill, listed: vec![3, 3], gpu: 3 }));
        assert_eq!(plan(Some(vec![0, 1]), Some(vec![1, 2])).groups(8), Err(PlanError::InBoth { gpu: 1 }));
    }

    #[test]
    fn a_split_reads_and_writes_as_prefill_plus_decode() {
        let plan: SplitPlan = "4+4".parse().unwrap();
        assert_eq!((plan.prefill_tp, plan.decode_tp, plan.prefill_gpus.clone()), (4, 4, None));
        assert_eq!(plan.to_string(), "4+4");
        assert_eq!(" 2 + 6 ".parse::<SplitPlan>().unwrap().to_string(), "2+6");
        for bad in ["4", "0+4", "4+", "a+b", "none"] {
            assert!(bad.parse::<SplitPlan>().unwrap_err().contains("\"P+D\""), "{bad}");
        }
        assert_eq!(SplitPlan::or_none("none"), Ok(None));
        assert_eq!(SplitPlan::or_none("2+6").unwrap().map(|p| p.to_string()).as_deref(), Some("2+6"));
        assert!(SplitPlan::or_none("Nope").is_err());
    }
}
