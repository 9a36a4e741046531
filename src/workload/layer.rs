//! One decoder layer simulated as one task graph with its collectives'
//! own transfers, and what each GPU does over it: its attention and MLP
//! kernels, its time inside each allreduce, and when it is sending. For
//! timelines; the query replay itself is `replay`.

use crate::collective::CollectiveError;
use crate::engine::{self, TaskGraph, TaskId, Work};
use crate::units::Time;

use super::cache::CollectiveCache;
use super::forward::{Block, PassProgram, Step};
use super::replay::{Collectives, Replayer, StepTasks};

/// Compute time of one layer's two blocks on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerCompute {
    pub attention: Time,
    pub mlp: Time,
}

/// What a GPU does at a moment of a simulated layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Activity {
    Attention,
    Mlp,
    /// Inside an allreduce call (waiting, reducing or sending).
    Allreduce,
    /// At least one of its transfers of the allreduce is in flight.
    Sending,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub activity: Activity,
    pub start: Time,
    pub end: Time,
}

/// One GPU's activities over a simulated layer.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuLane {
    pub gpu: String,
    pub spans: Vec<Span>,
}

/// One decoder layer simulated as one task graph.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRun {
    pub makespan: Time,
    pub compute: LayerCompute,
    pub lanes: Vec<GpuLane>,
}

/// Kernel time of each block of `program`'s layer on one GPU.
pub fn layer_compute(replayer: &Replayer, program: &PassProgram) -> LayerCompute {
    let mut compute = LayerCompute::default();
    for step in &program.layer {
        if let Step::Kernel { kernel, block } = step {
            let time = replayer.kernel_time(kernel);
            match block {
                Block::Mlp => compute.mlp += time,
                _ => compute.attention += time,
            }
        }
    }
    compute
}

/// Simulates the layer of `program` from idle, all GPUs starting together.
pub fn simulate_layer(replayer: &Replayer, program: &PassProgram) -> Result<LayerRun, CollectiveError> {
    let mut cache = CollectiveCache::new(replayer.topo, replayer.model);
    let pass = replayer.prepare(program, &mut cache)?;
    let mut graph = TaskGraph::new();
    let ranks = replayer.ranks.len();
    let start = graph.join(&[]);
    let host = if matches!(replayer.launch, super::compute::Launch::Eager { .. }) { vec![start; ranks] } else { Vec::new() };
    let tasks = replayer.build(&mut graph, &pass.layer, vec![start; ranks], host, Collectives::Inline, &mut cache)?;
    let schedule = engine::run(&graph, &mut replayer.topo.network());
    let topo = replayer.topo;
    let mut lanes: Vec<GpuLane> =
        replayer.ranks.iter().map(|&gpu| GpuLane { gpu: topo.node(gpu).name.clone(), spans: Vec::new() }).collect();
    for (rank, lane) in lanes.iter_mut().enumerate() {
        let gpu = replayer.ranks[rank];
        for (activity, block) in [(Activity::Attention, Block::Attention), (Activity::Mlp, Block::Mlp)] {
            let spans: Vec<(Time, Time)> = program
                .layer
                .iter()
                .zip(&tasks.steps)
                .filter(|(step, _)| matches!(step, Step::Kernel { block: b, .. } if *b == block))
                .filter_map(|(_, tasks)| match tasks {
                    StepTasks::Kernels(per_rank) => Some(schedule.span(per_rank[rank])),
                    StepTasks::Collective { .. } => None,
                })
                .collect();
            if let (Some(first), Some(last)) = (spans.first(), spans.last()) {
                lane.spans.push(Span { activity, start: first.0, end: last.1 });
            }
        }
        for step in &tasks.steps {
            let StepTasks::Collective { first, end } = step else { continue };
            lane.spans.push(Span { activity: Activity::Allreduce, start: schedule.start[first.index()], end: schedule.end[end.index()] });
            let sending = (first.0..=end.0).map(TaskId).filter(|&task| match graph.work(task) {
                Work::Transfer { route, .. } => route.links.first().is_some_and(|&l| topo.link(l).from == gpu),
                _ => false,
            });
            let intervals = merge(sending.map(|task| schedule.span(task)).collect());
            lane.spans.extend(intervals.into_iter().map(|(start, end)| Span { activity: Activity::Sending, start, end }));
        }
    }
    Ok(LayerRun { makespan: schedule.makespan(), compute: layer_compute(replayer, program), lanes })
}

/// Sorts intervals and merges those that overlap or touch.
fn merge(mut intervals: Vec<(Time, Time)>) -> Vec<(Time, Time)> {
    intervals.sort();
    let mut merged: Vec<(Time, Time)> = Vec::new();
    for (start, end) in intervals {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}
