//! Collectives simulated alone on an idle network, once per distinct
//! request, with their plans (to embed them in a larger task graph) and how
//! many calls of each a workload made (for its link usage). Knows nothing of
//! LLMs.

use std::collections::BTreeMap;

use crate::collective::{self, Algorithm, Choice, CollectiveError, Op, Outcome, Plan, Protocol, Request, Selection};
use crate::config::hardware::HardwareModel;
use crate::network::LinkUsage;
use crate::topology::{NodeId, Topology};
use crate::transport::Mode;
use crate::units::Bytes;

/// Ordered key of a collective request (a `BTreeMap` key: iteration is
/// deterministic).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RequestKey {
    op: Op,
    bytes: Bytes,
    ranks: Vec<NodeId>,
    mode: Mode,
    algorithm: Option<Algorithm>,
    protocol: Option<Protocol>,
    selection: Selection,
}

impl RequestKey {
    fn of(request: &Request, selection: Selection) -> RequestKey {
        fn fixed<T>(choice: Choice<T>) -> Option<T> {
            match choice {
                Choice::Auto => None,
                Choice::Fixed(value) => Some(value),
            }
        }
        RequestKey {
            op: request.op,
            bytes: request.bytes,
            ranks: request.ranks.clone(),
            mode: request.mode,
            algorithm: fixed(request.algorithm),
            protocol: fixed(request.protocol),
            selection,
        }
    }
}

#[derive(Debug)]
struct Entry {
    plan: Plan,
    outcome: Outcome,
    calls: u64,
}

/// Outcomes of collectives simulated alone on an idle network, one per
/// distinct request, with how many calls of each a workload made.
#[derive(Debug)]
pub struct CollectiveCache<'a> {
    topo: &'a Topology,
    model: &'a HardwareModel,
    entries: BTreeMap<RequestKey, Entry>,
}

impl<'a> CollectiveCache<'a> {
    pub fn new(topo: &'a Topology, model: &'a HardwareModel) -> Self {
        CollectiveCache { topo, model, entries: BTreeMap::new() }
    }

    /// The entry of `request` (its algorithm chosen as `selection` says),
    /// simulated the first time it is asked for.
    fn entry(&mut self, request: Request, selection: Selection) -> Result<&mut Entry, CollectiveError> {
        let key = RequestKey::of(&request, selection);
        if !self.entries.contains_key(&key) {
            let (plan, outcome) = collective::plan_and_simulate(self.topo, self.model, request, selection)?;
            self.entries.insert(key.clone(), Entry { plan, outcome, calls: 0 });
        }
        Ok(self.entries.get_mut(&key).expect("inserted above"))
    }

    /// The outcome of `request`; counts `calls` calls of it.
    pub fn outcome(&mut self, request: Request, selection: Selection, calls: u64) -> Result<&Outcome, CollectiveError> {
        let entry = self.entry(request, selection)?;
        entry.calls += calls;
        Ok(&entry.outcome)
    }

    /// The plan the outcome of `request` was simulated with (counts no call).
    pub fn plan(&mut self, request: Request, selection: Selection) -> Result<&Plan, CollectiveError> {
        Ok(&self.entry(request, selection)?.plan)
    }

    /// How many distinct collectives were simulated.
    pub fn simulations(&self) -> usize {
        self.entries.len()
    }

    /// What every link carried over all counted calls.
    pub fn link_usage(&self) -> Vec<LinkUsage> {
        let mut total = vec![LinkUsage::default(); self.topo.links().len()];
        for entry in self.entries.values() {
            for (sum, usage) in total.iter_mut().zip(&entry.outcome.usage) {
                sum.bytes += usage.bytes * entry.calls;
                sum.busy += usage.busy * entry.calls;
            }
        }
        total
    }
}
