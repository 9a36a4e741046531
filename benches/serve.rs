//! Requests a second `icsim serve` simulates: 10,000 requests of
//! Llama-3.1-70B at TP=8 on the 8-GPU H200 board (Poisson at 20 a second,
//! log-normal prompts of mean 1024 and outputs of mean 256 tokens), every
//! iteration timed from a fresh cache on one thread, as one command run
//! does. The issue asks for under 5 s; `cargo bench --bench serve` prints
//! the time. The same under a client cap of 64 (`--max-concurrency`).
//! Split servers too: four GPUs prefilling and four decoding
//! over NVSwitch, and on the PCIe board through host memory as `icsim serve
//! --prefill-tp 4 --decode-tp 4` runs it (each move beside both groups'
//! allreduces, the slowest moves there are).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use icsim::collective::Selection;
use icsim::config::experiment::{RawExperiment, Source};
use icsim::config::llm::{LlmModel, Scope};
use icsim::serve::groups::SplitPlan;
use icsim::serve::handoff::TopologyMoves;
use icsim::serve::iteration::SimulatedIterations;
use icsim::serve::load::{EngineSettings, Load, Server, Terms};
use icsim::serve::requests::{self, Arrivals, Length, Lengths};
use icsim::serve::results::Slo;
use icsim::serve::scheduler::{Limits, Preemption};
use icsim::serve::split::{self, Sources, SplitEngine};
use icsim::serve::{self, Engine, KvCapacity};
use icsim::stack::Stack;
use icsim::topology::{PresetOptions, TopologySpec};
use icsim::transport::Mode;
use icsim::units::Bytes;
use icsim::units::Time;
use icsim::workload::experiment::Experiment;
use icsim::workload::tp::{CollectiveCache, TensorParallel};

const REQUESTS: usize = 10_000;

fn ten_thousand_requests(c: &mut Criterion) {
    let spec = TopologySpec { name: "hgx-h200".into(), options: PresetOptions::default(), models: Vec::new() };
    let (topo, model) = icsim::topology::resolve(&spec).expect("the shipped preset");
    let llm = LlmModel::load("llama-3.1-70b").expect("a shipped model");
    let setup = TensorParallel::new(&topo, &model, &llm, 8, Mode::Nvswitch)
        .expect("TP=8 on the board")
        .with_selection(Selection::Fastest)
        .with_forward(Stack::NcclGraph, Scope::Full, "vllm")
        .expect("the vLLM fusion");
    let gpu = model.gpu(&topo.gpu_model).expect("the board's GPU");
    let kv = KvCapacity::of(&llm, gpu, 8, 0.9, 16).expect("room for a KV cache");
    let limits =
        Limits { max_num_seqs: 256, max_num_batched_tokens: 8192, block_size: 16, kv_blocks: kv.blocks, preemption: Preemption::Recompute };
    let engine = Engine { limits, tp: 8, max_model_len: llm.context_length, step_overhead: Time::ZERO };
    let arrivals = Arrivals::rate(20.0, 1.0).expect("a rate");
    let lengths =
        Lengths::Drawn { prompt: Length::LogNormal { mean: 1024.0, cv: 1.0 }, output: Length::LogNormal { mean: 256.0, cv: 1.0 } };
    let requests = requests::generate(&arrivals, &lengths, REQUESTS, 0);
    let mut group = c.benchmark_group("serve");
    group.sample_size(10);
    group.throughput(Throughput::Elements(REQUESTS as u64));
    group.bench_function("10,000 requests, Llama-3.1-70B TP=8 on hgx-h200, one thread (requests/s)", |b| {
        b.iter(|| {
            let mut times = SimulatedIterations::new(&setup, CollectiveCache::new(&topo, &model), Bytes(16 * kv.bytes_per_token));
            black_box(serve::simulate(&requests, None, engine, &mut times, &|| {}).expect("the service runs"))
        })
    });
    // The same requests under a client cap, which holds each arrival until
    // one of 64 in flight finishes.
    group.bench_function("10,000 requests, Llama-3.1-70B TP=8 on hgx-h200, at most 64 in flight, one thread (requests/s)", |b| {
        b.iter(|| {
            let mut times = SimulatedIterations::new(&setup, CollectiveCache::new(&topo, &model), Bytes(16 * kv.bytes_per_token));
            black_box(serve::simulate(&requests, Some(64), engine, &mut times, &|| {}).expect("the capped service runs"))
        })
    });
    // Split four and four: each group its own TP=4 on its own GPUs.
    let gpus = topo.gpus();
    let (prefill_gpus, decode_gpus) = (gpus[..4].to_vec(), gpus[4..].to_vec());
    let prefill_setup = setup.clone().on_gpus(prefill_gpus.clone()).expect("TP=4 on the first four");
    let decode_setup = setup.clone().on_gpus(decode_gpus.clone()).expect("TP=4 on the last four");
    let kv = KvCapacity::of(&llm, gpu, 4, 0.9, 16).expect("room for a KV cache");
    let engine =
        Engine { limits: Limits { kv_blocks: kv.blocks, ..limits }, tp: 4, max_model_len: llm.context_length, step_overhead: Time::ZERO };
    let engine = SplitEngine { prefill: engine, decode: engine };
    group.bench_function("10,000 requests, Llama-3.1-70B split TP=4 + TP=4 on hgx-h200, one thread (requests/s)", |b| {
        b.iter(|| {
            let block = Bytes(16 * kv.bytes_per_token);
            let mut prefill = SimulatedIterations::new(&prefill_setup, CollectiveCache::new(&topo, &model), block);
            let mut decode = SimulatedIterations::new(&decode_setup, CollectiveCache::new(&topo, &model), block);
            let mut moves =
                TopologyMoves::new(&topo, &model, &llm, (&prefill_gpus, &decode_gpus), Mode::Nvswitch).expect("NVSwitch joins them");
            let sources = Sources { prefill: &mut prefill, decode: &mut decode, moves: &mut moves };
            black_box(split::simulate(&requests, None, engine, sources, &|| {}).expect("the split service runs"))
        })
    });
    // The same split on eight H200 NVL cards of the PCIe board, through
    // host memory, set up as the command sets it up.
    let raw: RawExperiment = toml::from_str(
        "model = \"llama-3.1-70b\"\ntp = 4\ntopology = \"pcie-gen5-8gpu\"\ngpu = \"h200-nvl\"\nquery = { prompt = 1, output = 1 }\n[[mode]]\ntransport = \"auto\"\n",
    )
    .expect("an experiment");
    let experiment = Experiment::resolve(raw, Source::CommandLine).expect("a PCIe board");
    let plan: SplitPlan = "4+4".parse().expect("a split");
    // At 2 a second, below the board's knee (20 a second queues for minutes).
    let load = Load { count: REQUESTS, lengths, burstiness: 1.0, seed: 0, max_concurrency: None };
    let slower = Arrivals::rate(2.0, 1.0).expect("a rate");
    let requests = load.requests(&slower);
    let terms = Terms { load: &load, arrivals: &slower, slo: Slo { ttft: None, tpot: None }, per_gpu: None };
    group.bench_function("10,000 requests, Llama-3.1-70B split TP=4 + TP=4 on pcie-gen5-8gpu (shm), one thread (requests/s)", |b| {
        b.iter(|| {
            let server = Server::split(&experiment, &EngineSettings::DEFAULT, &plan).expect("the split server");
            black_box(server.serve(&requests, terms, &|| {}).expect("the split service runs"))
        })
    });
    group.finish();
}

criterion_group!(benches, ten_thousand_requests);
criterion_main!(benches);
