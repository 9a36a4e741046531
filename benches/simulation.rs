//! Speed of the simulator: events per second of the engine (alone, and
//! driving the flow network in a collective), and the time of one 8-GPU
//! 1 GiB ring allreduce simulation. `cargo bench` prints both; the README
//! records the figures.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use icsim::collective::{self, Algorithm, Choice, Op, Plan, Protocol, Request};
use icsim::engine::{self, Fabric, TaskGraph, TaskId};
use icsim::topology::{TopologySpec, resolve};
use icsim::transport::Mode;
use icsim::units::{Bandwidth, Bytes, Time};

/// A fabric with nothing in flight: the engine alone.
struct Idle;

impl Fabric<()> for Idle {
    fn start(&mut self, _: Time, _: TaskId, _: &(), _: Bytes, _: Option<Bandwidth>, _: u32) {
        unreachable!("the graph has no transfers")
    }
    fn next_event_time(&mut self) -> Option<Time> {
        None
    }
    fn advance(&mut self, _: Time, _: &mut Vec<TaskId>) -> u64 {
        0
    }
}

/// 64 independent chains of 4096 delays of varied lengths.
fn delay_graph() -> TaskGraph<()> {
    let mut graph = TaskGraph::new();
    for chain in 0..64u64 {
        let mut last = graph.delay(Time(chain + 1), &[]);
        for step in 0..4096u64 {
            last = graph.delay(Time(1 + (step * 7 + chain * 13) % 97), &[last]);
        }
    }
    graph
}

fn engine_alone(c: &mut Criterion) {
    let graph = delay_graph();
    let events = engine::run(&graph, &mut Idle).events;
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(events));
    group.bench_function("262k delays (events/s)", |b| b.iter(|| black_box(engine::run(&graph, &mut Idle))));
    group.finish();
}

fn allreduce_8gpu_1gib(c: &mut Criterion) {
    let spec = TopologySpec { name: "hgx-h200".into(), ..Default::default() };
    let (topo, model) = resolve(&spec).expect("preset");
    let request = Request {
        algorithm: Choice::Fixed(Algorithm::Ring),
        protocol: Choice::Fixed(Protocol::Simple),
        ..Request::new(Op::AllReduce, Bytes::gib(1), topo.gpus().to_vec(), Mode::Nvswitch)
    };
    let plan = Plan::new(&topo, &model, request).expect("plan");
    let events = collective::simulate_plan(&topo, &model, &plan).expect("runs").events;
    let mut group = c.benchmark_group("allreduce");
    group.sample_size(20);
    group.throughput(Throughput::Elements(events));
    group.bench_function("8 GPUs, 1 GiB, ring, hgx-h200 (events/s)", |b| {
        b.iter(|| black_box(collective::simulate_plan(&topo, &model, &plan).expect("runs")))
    });
    group.finish();
}

criterion_group!(benches, engine_alone, allreduce_8gpu_1gib);
criterion_main!(benches);
