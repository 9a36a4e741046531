//! Speed of the simulator (docs/performance.md records the
//! figures): events per second of the engine alone and driving the flow
//! network; the prefill's 160 allreduces of 128 MiB and the seed query's
//! 40,960 decode allreduces, each simulated on its own; a 1 GiB ring
//! allreduce on 8, 72 (GB200 NVL72), 256 and 1,024 GPUs; a 1 MiB allreduce
//! on 1,024 and 4,096 GPUs under PCIe switches (the largest PCIe input within
//! the README's bounds, issue 35's 20 s target); a 16 GiB tree allreduce on
//! 64 GPUs of one fabric (every link saturated: the flow solver's worst
//! case); and the default experiment. `cargo bench --bench simulation` runs
//! them all.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use icsim::collective::{self, Algorithm, Choice, Op, Plan, Protocol, Request};
use icsim::config::hardware::HardwareModel;
use icsim::engine::{self, Fabric, TaskGraph, TaskId};
use icsim::topology::{PresetOptions, Topology, TopologySpec, resolve};
use icsim::transport::Mode;
use icsim::units::{Bandwidth, Bytes, Time};
use icsim::workload::experiment::{self, Experiment, RunOptions};

#[path = "common/pcie_switches.rs"]
mod pcie_switches;

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

fn topology(name: &str, gpus: Option<u32>) -> (Topology, HardwareModel) {
    resolve(&TopologySpec { name: name.into(), options: PresetOptions { gpus, gpu: None, host: None }, models: Vec::new() })
        .expect("a preset")
}

/// The plan of `op` over every GPU of `topo`, algorithm and protocol fixed
/// where given.
fn plan(topo: &Topology, model: &HardwareModel, bytes: Bytes, algorithm: Choice<Algorithm>, protocol: Choice<Protocol>) -> Plan {
    let request = Request { algorithm, protocol, ..Request::new(Op::AllReduce, bytes, topo.gpus().to_vec(), Mode::Auto) };
    Plan::new(topo, model, request).expect("a plan")
}

/// One 1 GiB ring allreduce over every GPU of a topology, as events per
/// second of the engine driving the flow network.
fn ring_1gib(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring allreduce 1 GiB");
    group.sample_size(10);
    for (name, gpus) in [("hgx-h200", None), ("gb200-nvl72", None), ("nvlink-fabric", Some(256)), ("nvlink-fabric", Some(1024))] {
        let (topo, model) = topology(name, gpus);
        let plan = plan(&topo, &model, Bytes::gib(1), Choice::Fixed(Algorithm::Ring), Choice::Fixed(Protocol::Simple));
        let events = collective::simulate_plan(&topo, &model, &plan).expect("runs").events;
        group.throughput(Throughput::Elements(events));
        let label = format!("{} GPUs, {name} (events/s)", topo.gpus().len());
        group.bench_function(label, |b| b.iter(|| black_box(collective::simulate_plan(&topo, &model, &plan).expect("runs"))));
    }
    group.finish();
}

/// A 1 MiB allreduce as `icsim collective` runs it (NCCL's choice: a ring,
/// P2P under each switch and SHM between them) on GPUs under PCIe switches
/// of 32 each, one CPU: 2n(n-1) transfers, each simulated.
fn pcie_switches_1mib(c: &mut Criterion) {
    let mut group = c.benchmark_group("allreduce 1 MiB under PCIe switches");
    group.sample_size(10);
    for gpus in [1024, 4096] {
        let file = std::env::temp_dir().join(format!("icsim-bench-pcie-{gpus}-{}.toml", std::process::id()));
        std::fs::write(&file, pcie_switches::pcie_switches(gpus)).expect("a topology file in the temporary folder");
        let (topo, model) = topology(file.to_str().expect("a UTF-8 temporary folder"), None);
        std::fs::remove_file(&file).expect("the topology file is removed");
        let plan = plan(&topo, &model, Bytes::mib(1), Choice::Auto, Choice::Auto);
        group.bench_function(format!("{gpus} GPUs"), |b| {
            b.iter(|| black_box(collective::simulate_plan(&topo, &model, &plan).expect("runs")))
        });
    }
    group.finish();
}

/// A 16 GiB tree allreduce on 64 GPUs of one NVLink fabric: from when the
/// chain is full every link is saturated, and each flow event re-solves
/// the fair shares of every flow through the switch.
fn tree_saturated(c: &mut Criterion) {
    let (topo, model) = topology("nvlink-fabric", Some(64));
    let plan = plan(&topo, &model, Bytes::gib(16), Choice::Fixed(Algorithm::Tree), Choice::Auto);
    let mut group = c.benchmark_group("tree allreduce 16 GiB");
    group.sample_size(10);
    group
        .bench_function("64 GPUs, nvlink-fabric", |b| b.iter(|| black_box(collective::simulate_plan(&topo, &model, &plan).expect("runs"))));
    group.finish();
}

/// Allreduces of one size simulated one after another, each on its own
/// (no outcome cached), the plan resolved once as a workload's cache of
/// plans does.
fn one_by_one(c: &mut Criterion, label: &str, topology_name: &str, bytes: Bytes, calls: u64) {
    let (topo, model) = topology(topology_name, None);
    let plan = plan(&topo, &model, bytes, Choice::Auto, Choice::Auto);
    let mut group = c.benchmark_group("allreduces one by one");
    group.sample_size(10);
    group.throughput(Throughput::Elements(calls));
    group.bench_function(format!("{label}, {} (calls/s)", plan.algorithm), |b| {
        b.iter(|| {
            for _ in 0..calls {
                black_box(collective::simulate_plan(&topo, &model, &plan).expect("runs"));
            }
        })
    });
    group.finish();
}

/// The prefill of Llama-3.1-70B at TP=8, 8192 tokens: 160 allreduces of
/// 128 MiB (8192 x 8192 bf16 values) on 8x H200.
fn prefill_allreduces(c: &mut Criterion) {
    one_by_one(c, "160 x 128 MiB on 8x H200", "hgx-h200", Bytes::mib(128), 160);
}

/// The seed query's decode: 256 tokens of Llama-3.1-70B at TP=8 on 8x H20,
/// two allreduces of one token (8192 bf16 values) a layer, 80 layers.
fn decode_allreduces(c: &mut Criterion) {
    one_by_one(c, "40,960 x 16 KiB on 8x H20", "hgx-h20", Bytes::kib(16), 40_960);
}

/// What `icsim run` computes for configs/default.toml (the replay under four
/// transports, the bus bandwidth sweep and the layer timelines), without
/// writing files.
fn default_experiment(c: &mut Criterion) {
    let experiment = Experiment::load(Path::new("configs/default.toml")).expect("the default experiment");
    let mut group = c.benchmark_group("experiment");
    group.sample_size(10);
    group.bench_function("configs/default.toml", |b| {
        b.iter(|| black_box(experiment::run(&experiment, &RunOptions::full(), &|| {}).expect("runs")))
    });
    group.finish();
}

criterion_group!(
    benches,
    engine_alone,
    ring_1gib,
    pcie_switches_1mib,
    tree_saturated,
    prefill_allreduces,
    decode_allreduces,
    default_experiment
);
criterion_main!(benches);
