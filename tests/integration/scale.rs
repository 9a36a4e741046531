//! Scale: identical channels and NVLS ranks simulated once give the full
//! simulation to the picosecond; a collective streamed as it runs gives the
//! schedule of its tasks written out, with memory flat in the number of
//! chunks; the GB200 NVL72 preset and its check against the public NVL72
//! allreduce bus bandwidth; 4,096 GPUs under PCIe switches finishing.

use proptest::prelude::*;

use icsim::collective::{self, Algorithm, Choice, Expansion, Op, Plan, Protocol, Request, Symmetry};
use icsim::config::hardware::HardwareModel;
use icsim::engine::{self, TaskGraph};
use icsim::stack::Stack;
use icsim::topology::{Medium, NodeKind, Topology};
use icsim::transport::{self, Mode, TransportError};
use icsim::units::{Bandwidth, Bytes, Time};

use crate::common::{extremes, line, listed, page_quotes, page_says, preset, public_nvls_allreduces, thousands};

#[path = "../../benches/common/pcie_switches.rs"]
mod pcie_switches;
use pcie_switches::pcie_switches;

const OPS: [Op; 4] = [Op::AllReduce, Op::AllGather, Op::ReduceScatter, Op::Broadcast];
const ALGORITHMS: [Algorithm; 5] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Nvls, Algorithm::OneShot, Algorithm::TwoShot];
const PROTOCOLS: [Protocol; 3] = [Protocol::Simple, Protocol::Ll, Protocol::Ll128];

fn request(topo: &Topology, op: Op, bytes: Bytes, algorithm: Algorithm, protocol: Protocol, mode: Mode) -> Request {
    Request {
        algorithm: Choice::Fixed(algorithm),
        protocol: Choice::Fixed(protocol),
        ..Request::new(op, bytes, topo.gpus().to_vec(), mode)
    }
}

/// Simulates `plan` with every level of symmetry and checks each against
/// the full simulation; returns (events simulated in full, with symmetry).
fn assert_symmetry_is_exact(topo: &Topology, model: &icsim::config::hardware::HardwareModel, plan: &Plan, what: &str) -> (u64, u64) {
    let full = collective::simulate_plan_with(topo, model, plan, Symmetry::None).unwrap();
    let mut events = 0;
    for symmetry in [Symmetry::Channels, Symmetry::ChannelsAndRanks] {
        let once = collective::simulate_plan_with(topo, model, plan, symmetry).unwrap();
        assert_eq!(once.time, full.time, "{what}, {symmetry:?}: time");
        assert_eq!(once.usage, full.usage, "{what}, {symmetry:?}: link bytes and busy times");
        assert!(once.events <= full.events, "{what}, {symmetry:?}: {} events against {}", once.events, full.events);
        events = once.events;
    }
    (full.events, events)
}

#[test]
fn identical_channels_and_ranks_simulated_once_give_the_full_simulation_to_the_picosecond() {
    let mut compared = 0;
    let (mut full_events, mut symmetric_events) = (0, 0);
    for (board, gpus) in
        [("hgx-h200", 8), ("hgx-h200", 3), ("hgx-b200", 8), ("h20-nvlink-mesh", 8), ("pcie-gen4-8gpu", 4), ("gb200-nvl72", 16)]
    {
        let (topo, model) = preset(board, Some(gpus), &[]);
        for op in OPS {
            for algorithm in ALGORITHMS {
                for protocol in PROTOCOLS {
                    for mode in [Mode::Auto, Mode::Shm] {
                        for bytes in [Bytes(1000), Bytes::kib(96), Bytes(5_000_011), Bytes::mib(48)] {
                            let Ok(plan) = Plan::new(&topo, &model, request(&topo, op, bytes, algorithm, protocol, mode)) else { continue };
                            let what = format!("{board} x{gpus} {op} {algorithm}/{protocol} over {mode}, {bytes:?}");
                            let (full, once) = assert_symmetry_is_exact(&topo, &model, &plan, &what);
                            full_events += full;
                            symmetric_events += once;
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 500, "{compared} plans compared");
    assert!(symmetric_events * 2 < full_events, "symmetry saves events: {symmetric_events} against {full_events}");
}

#[test]
fn nvls_on_uniform_chunks_takes_a_fraction_of_the_events() {
    // The case: 4 GiB over NVLS on 8 GPUs was 1.6 M events, a ring 0.24 M.
    let (topo, model) = preset("hgx-h200", None, &[]);
    let plan =
        Plan::new(&topo, &model, request(&topo, Op::AllReduce, Bytes::gib(4), Algorithm::Nvls, Protocol::Simple, Mode::Auto)).unwrap();
    let (full, once) = assert_symmetry_is_exact(&topo, &model, &plan, "NVLS 4 GiB on 8 H200");
    assert!(full > 1_500_000, "{full} events in full");
    println!("NVLS 4 GiB on 8 H200: {full} events in full, {once} with one channel and one rank for all");
    assert!(once < full / 100, "{once} events with one channel and one rank for all");
    page_says(
        "docs/model.md",
        &format!(
            "a 4 GiB NVLS allreduce on 8 GPUs takes {} events instead of {:.1} million",
            thousands((once as f64 / 1000.0).round() as u64 * 1000),
            full as f64 / 1e6
        ),
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Odd sizes and forced channel counts deal channels unequal bytes:
    /// classes of several sizes, each simulated once.
    #[test]
    fn symmetry_is_exact_for_any_size_and_channel_count(
        gpus in 2u32..=8, bytes in 1u64..40_000_000, channels in prop::option::of(1u32..=24), algo in 0usize..3, proto in 0usize..3, op in 0usize..4,
    ) {
        let (topo, model) = preset("hgx-h100", Some(gpus), &[]);
        let request = Request { channels, ..request(&topo, OPS[op], Bytes(bytes), ALGORITHMS[algo], PROTOCOLS[proto], Mode::Nvswitch) };
        if let Ok(plan) = Plan::new(&topo, &model, request) {
            assert_symmetry_is_exact(&topo, &model, &plan, &format!("{gpus} GPUs, {bytes} B, {channels:?} channels"));
        }
    }
}

/// A graph of one collective among other work: a transfer on a link it
/// uses, started a little later, and a delay after both.
fn graph_with(
    plan: &Plan,
    topo: &Topology,
    model: &icsim::config::hardware::HardwareModel,
    inline: bool,
) -> TaskGraph<icsim::network::Path> {
    let mut graph = TaskGraph::new();
    let kernel = graph.delay(Time::from_us(3), &[]);
    let expansion = if inline { Expansion::Inline } else { Expansion::Streamed };
    let end = plan.build(topo, model, &mut graph, &[kernel], expansion);
    let end = end.unwrap();
    let gpus = topo.gpus();
    let path = topo.path(gpus[0], gpus[1], Medium::NvSwitch).or_else(|| topo.path(gpus[0], gpus[1], Medium::Pcie)).unwrap();
    let later = graph.delay(Time::from_us(20), &[]);
    let other = graph.transfer(path, Bytes::mib(64), None, &[later]);
    graph.delay(Time::from_us(1), &[end, other]);
    graph
}

#[test]
fn a_streamed_collective_runs_as_its_tasks_written_out_beside_other_traffic() {
    for board in ["hgx-h200", "h20-nvlink-mesh", "pcie-gen5-8gpu"] {
        let (topo, model) = preset(board, None, &[]);
        for algorithm in ALGORITHMS {
            for bytes in [Bytes::kib(64), Bytes::mib(33)] {
                let Ok(plan) = Plan::new(&topo, &model, request(&topo, Op::AllReduce, bytes, algorithm, Protocol::Simple, Mode::Auto))
                else {
                    continue;
                };
                let (mut streamed_network, mut written_network) = (topo.network(), topo.network());
                let streamed = engine::run(&graph_with(&plan, &topo, &model, false), &mut streamed_network);
                let written = engine::run(&graph_with(&plan, &topo, &model, true), &mut written_network);
                assert_eq!(streamed.makespan(), written.makespan(), "{board} {algorithm} {bytes:?}");
                assert_eq!(streamed_network.usage(), written_network.usage(), "{board} {algorithm} {bytes:?}");
            }
        }
    }
}

/// The most tasks alive at once and the events of `op` by `algorithm` over
/// `bytes` on two channels of `topo`, its graph streamed.
fn peak_and_events(topo: &Topology, model: &HardwareModel, op: Op, algorithm: Algorithm, bytes: Bytes) -> (usize, u64) {
    let request = request(topo, op, bytes, algorithm, Protocol::Simple, Mode::Auto);
    let plan = Plan::new(topo, model, Request { channels: Some(2), ..request }).unwrap();
    let mut graph = TaskGraph::new();
    plan.build(topo, model, &mut graph, &[], Expansion::Streamed).unwrap();
    let schedule = engine::run(&graph, &mut topo.network());
    (schedule.peak_tasks, schedule.events)
}

/// Sixteen times the bytes from `small` to `large`: many times the events,
/// and no more tasks alive at once.
fn assert_flat(what: &str, (small_peak, small_events): (usize, u64), (large_peak, large_events): (usize, u64)) {
    assert!(large_events > 10 * small_events, "{what}: {large_events} events against {small_events}");
    assert!(large_peak <= small_peak * 11 / 10, "{what}: {large_peak} tasks alive against {small_peak}");
    assert!(large_peak * 100 < large_events as usize, "{what}: {large_peak} tasks alive for {large_events} events");
}

#[test]
fn a_streamed_ring_keeps_memory_flat_in_the_number_of_chunks() {
    // 16 GPUs of one fabric: 16 times the bytes is 16 times the loops and
    // events, and no more tasks alive at once.
    let (topo, model) = preset("nvlink-fabric", Some(16), &[]);
    let run = |bytes| peak_and_events(&topo, &model, Op::AllReduce, Algorithm::Ring, bytes);
    assert_flat("ring", run(Bytes::mib(256)), run(Bytes::gib(4)));
}

#[test]
fn streamed_chains_keep_memory_flat_in_the_number_of_chunks() {
    // A tree's chain of 16 GPUs is a pipeline of 31 positions, a
    // broadcast's of 15 hops and a copy out: past that many chunks a
    // channel (64 MiB on two channels), 16 times the bytes is 16 times the
    // events, and no more tasks alive at once.
    let (topo, model) = preset("nvlink-fabric", Some(16), &[]);
    for (op, algorithm) in [(Op::AllReduce, Algorithm::Tree), (Op::Broadcast, Algorithm::Ring)] {
        let run = |bytes| peak_and_events(&topo, &model, op, algorithm, bytes);
        assert_flat(&format!("{op:?}"), run(Bytes::mib(64)), run(Bytes::gib(1)));
    }
}

#[test]
fn gb200_nvl72_is_72_gpus_on_one_nvlink_5_fabric_two_a_grace_cpu() {
    let (topo, model) = preset("gb200-nvl72", None, &[]);
    assert_eq!(topo.gpus().len(), 72);
    assert_eq!(topo.nodes_of(NodeKind::NvSwitch).count(), 1, "the switch trays act as one non-blocking switch");
    assert_eq!(topo.nodes_of(NodeKind::CpuSocket).count(), 36);
    let nvlink5 = model.nvlink("gen5").unwrap();
    // 18 links of 50 GB/s a direction (900 GB/s, "1.8 TB/s bidirectional").
    let port = Bandwidth::gbps(50).scaled(18.0 * nvlink5.efficiency);
    for &gpu in topo.gpus() {
        assert_eq!(topo.nvlink_bandwidth(gpu), port, "{}", topo.node(gpu).name);
    }
    assert!(topo.policy.nvls, "Blackwell's NVLink switches reduce in the switch");
    // Any GPU reaches any other through the switch in two links.
    let (first, last) = (topo.gpus()[0], topo.gpus()[71]);
    assert_eq!(topo.path(first, last, Medium::NvSwitch).unwrap().links.len(), 2);
    // Two GPUs of a superchip share a Grace CPU; no PCIe path joins superchips.
    assert_eq!(topo.node(topo.gpus()[2]).socket, topo.node(topo.gpus()[3]).socket);
    assert!(matches!(transport::connect(&topo, first, last, Mode::P2p), Err(TransportError::Unavailable { .. })));
    let mut too_many = icsim::topology::PresetOptions { gpus: Some(73), gpu: None, host: None };
    let error = icsim::topology::preset("gb200-nvl72", &too_many, &model).unwrap_err().to_string();
    assert!(error.contains("1 to 72"), "{error}");
    too_many.gpus = Some(1024);
    assert_eq!(icsim::topology::preset("nvlink-fabric", &too_many, &model).unwrap().gpus().len(), 1024);
}

/// GB200 NVL72 allreduce bus bandwidth, 72 GPUs, nccl-tests (launched
/// eagerly) on NCCL 2.26.2 (shared/reference/hardware.md; coreweave/nccl-tests
/// README, commit bee97e7), from 1 GB, with the bound (10%) or, where
/// icsim misses it, today's error held so that it cannot grow.
///
/// The NCCL release is the measurement's: 32 NVLS channels on Blackwell
/// (tests/data/nccl-2.26-blackwell.toml), where today's NCCL runs 24. The
/// scripts at that commit set NCCL_NVLS_ENABLE=0, yet the table is NVLS: its
/// marginal bus bandwidth from 2 to 4 GB (941 GB/s out of place, 907 in
/// place) is more than the 900 GB/s a ring could carry over 18 NVLink 5
/// links, and NVLS moves about half as many bytes a GPU. With NCCL 2.26.2's
/// channels the simulated marginal rate from 1 to 4 GB is within 1% of the
/// rack's (464 against 461 GB/s algorithm bandwidth); what icsim misses is
/// about 0.6 ms of fixed cost that no part of the model accounts for (1 and
/// 2 GB come out fast), and the rack does not speed up when NCCL doubles
/// its NVLS chunk at 8 GB, where the per-chunk cost fitted on Hopper says it
/// should.
const NVL72_BUSBW_GBPS: [(u64, f64, f64); 4] =
    [(1 << 30, 681.0, 0.34), (2 << 30, 758.0, 0.21), (4 << 30, 839.0, 0.10), (8 << 30, 835.0, 0.26)];

#[test]
fn gb200_nvl72_allreduce_bus_bandwidth_against_the_public_figure_from_1gb() {
    let nccl_2_26 = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nccl-2.26-blackwell.toml");
    let (topo, model) = preset("gb200-nvl72", None, &[nccl_2_26]);
    let (mut misses, mut errors, mut rates, mut times) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (bytes, measured, bound) in NVL72_BUSBW_GBPS {
        let request = Request { stack: Stack::Eager, ..Request::new(Op::AllReduce, Bytes(bytes), topo.gpus().to_vec(), Mode::Auto) };
        let outcome = collective::simulate(&topo, &model, request).unwrap();
        assert_eq!(outcome.algorithm, Algorithm::Nvls, "NCCL runs NVLS on 72 GPUs of one NVLink domain");
        assert_eq!(outcome.channels, 32, "NCCL 2.26.2's NVLS channels on Blackwell");
        let error = outcome.busbw_gbps() / measured - 1.0;
        println!(
            "NVL72 allreduce {} GiB: {:.0} GB/s against {measured} ({:+.1}%, bound {:.0}%)",
            bytes >> 30,
            outcome.busbw_gbps(),
            error * 100.0,
            bound * 100.0
        );
        if error.abs() > bound {
            misses.push(format!("{} GiB: {:.0} GB/s against {measured} ({:+.1}%)", bytes >> 30, outcome.busbw_gbps(), error * 100.0));
        }
        errors.push(error);
        rates.push(format!("{:.0}", outcome.busbw_gbps()));
        times.push(outcome.time.as_secs());
    }
    assert!(misses.is_empty(), "{}", misses.join("; "));
    // docs/model.md: every size's rate and error (only 4 GB inside the
    // issue's 10%), and the marginal rate from 1 to 4 GB.
    assert!(errors[2].abs() <= 0.10 && [0, 1, 3].iter().all(|&i| errors[i].abs() > 0.10), "{errors:?}");
    let marginal = (NVL72_BUSBW_GBPS[2].0 - NVL72_BUSBW_GBPS[0].0) as f64 / (times[2] - times[0]) / 1e9;
    for quoted in [
        format!("With 32 channels icsim gives {} GB/s at 1, 2, 4 and 8 GB", listed(&rates)),
        format!(
            "GB: **{:+.1}%, {:+.1}%**, {:+.1}% (inside the issue's 10%) and **{:+.1}%**",
            errors[0] * 100.0,
            errors[1] * 100.0,
            errors[2] * 100.0,
            errors[3] * 100.0
        ),
    ] {
        page_says("docs/model.md", &quoted);
    }
    let (low, high) = extremes(errors);
    page_quotes("GB200 NVL72", &format!("**{:+.0}% to {:+.0}%** (bus bandwidth)", low * 100.0, high * 100.0));
    quote_the_racks_line(marginal);
    // The same sizes taken as a ring, and run with today's NCCL's NVLS channels.
    let busbw = |model: &HardwareModel, algorithm: Choice<Algorithm>, bytes: u64| {
        let request =
            Request { stack: Stack::Eager, algorithm, ..Request::new(Op::AllReduce, Bytes(bytes), topo.gpus().to_vec(), Mode::Auto) };
        collective::simulate(&topo, model, request).unwrap().busbw_gbps()
    };
    let (_, today) = preset("gb200-nvl72", None, &[]);
    let ring: Vec<(f64, f64)> =
        NVL72_BUSBW_GBPS.iter().map(|&(bytes, measured, _)| (busbw(&today, Choice::Fixed(Algorithm::Ring), bytes), measured)).collect();
    let (slow, fast) = extremes(ring.iter().map(|(rate, _)| *rate));
    let (most, least) = extremes(ring.iter().map(|(rate, measured)| rate / measured - 1.0));
    page_says(
        "docs/model.md",
        &format!("icsim's ring gives {slow:.0}-{fast:.0} GB/s from 1 to 8 GB, {:+.0}% to {:+.0}%", least * 100.0, most * 100.0),
    );
    let nvls: Vec<f64> = NVL72_BUSBW_GBPS.iter().map(|&(bytes, _, _)| busbw(&today, Choice::Auto, bytes)).collect();
    let (low, high) = extremes(nvls[..3].iter().copied());
    page_says("docs/model.md", &format!("the preset gives {low:.0}-{high:.0} GB/s from 1 to 4 GB and {:.0} at 8 GB", nvls[3]));
}

/// The rack's bus bandwidth at 512 MB, the fifth size of its public table
/// (shared/reference/hardware.md), below the range the test holds.
const NVL72_512MB_BUSBW_GBPS: f64 = 586.0;

/// docs/model.md on the rack's public times: their marginal rate from 1 to
/// 4 GB beside the simulated one (`simulated`, GB/s), a line through all
/// five sizes, and how much its fixed cost is above HGX B200's at 8 GPUs
/// (a line through that table's NVLS allreduces from 32 MiB) a rank.
fn quote_the_racks_line(simulated: f64) {
    let ranks = 72.0;
    let seconds = |bytes: u64, busbw: f64| bytes as f64 * 2.0 * (ranks - 1.0) / ranks / (busbw * 1e9);
    let times: Vec<(f64, f64)> = std::iter::once((1 << 29, NVL72_512MB_BUSBW_GBPS))
        .chain(NVL72_BUSBW_GBPS.iter().map(|&(bytes, busbw, _)| (bytes, busbw)))
        .map(|(bytes, busbw)| (bytes as f64, seconds(bytes, busbw)))
        .collect();
    let marginal = (times[3].0 - times[1].0) / (times[3].1 - times[1].1) / 1e9;
    let (fixed, rate) = line(&times);
    let b200 = public_nvls_allreduces("b200");
    let (b200_fixed, _) = line(&b200.iter().map(|m| (m.bytes as f64, m.time_us * 1e-6)).collect::<Vec<_>>());
    for quoted in [
        format!(
            "The simulated rate from 1 to 4 GB, {simulated:.0} GB/s of algorithm bandwidth, is within 1% of the rack's marginal rate ({marginal:.0} GB/s; {rate:.0} from a line through all five sizes)"
        ),
        format!("and the rack's rate ({rate:.0} GB/s, and {:.2} ms fixed, from a line through its five sizes)", fixed * 1e3),
        format!("its fixed cost grows with the ranks, about {:.0} us a rank from 8 to 72", (fixed - b200_fixed) * 1e6 / (ranks - 8.0)),
    ] {
        page_says("docs/model.md", &quoted);
    }
    assert!((simulated / marginal - 1.0).abs() <= 0.01, "{simulated:.0} GB/s simulated against {marginal:.0} measured");
}

#[test]
fn eight_gpus_of_two_nvl72_trays_allreduce_128_mib_within_10_percent() {
    // Two GB200 compute trays of one NVL72 rack (8 GPUs over the rack's
    // NVLink switches, MNNVL), nccl-tests 2.16.7 launched eagerly on NCCL
    // 2.27.7: 134217728 B allreduce in 386.7 us out of place (busbw 607.37
    // GB/s; aws/aws-parallelcluster pull request 6956, 2025-09-02). Never
    // fitted: the tray's 2- and 4-GPU tables place Blackwell's latency, not
    // its rates. Today's NCCL's own choice (NVLS over 24 channels) is
    // predicted; the log shows 32 ring channels connected, not which
    // algorithm each size ran.
    let (topo, model) = preset("gb200-nvl72", Some(8), &[]);
    let request = Request { stack: Stack::Eager, ..Request::new(Op::AllReduce, Bytes::mib(128), topo.gpus().to_vec(), Mode::Auto) };
    let outcome = collective::simulate(&topo, &model, request).unwrap();
    let measured_us = 386.7;
    let error = outcome.time.as_us() / measured_us - 1.0;
    println!(
        "8 GPUs of an NVL72, 128 MiB allreduce: {:.1} us ({}) against {measured_us} ({:+.1}%)",
        outcome.time.as_us(),
        outcome.algorithm,
        error * 100.0
    );
    assert!(error.abs() <= 0.10, "{:.1} us against {measured_us} us: {:+.1}%", outcome.time.as_us(), error * 100.0);
    page_quotes("GB200 NVL72", &format!("8 GPUs of two trays, 128 MiB: {:+.1}%", error * 100.0));
    let ring = Request {
        stack: Stack::Eager,
        algorithm: Choice::Fixed(Algorithm::Ring),
        ..Request::new(Op::AllReduce, Bytes::mib(128), topo.gpus().to_vec(), Mode::Auto)
    };
    let ring = collective::simulate(&topo, &model, ring).unwrap().time.as_us();
    page_says(
        "docs/model.md",
        &format!(
            "allreduce 128 MiB in {measured_us} us; the preset gives {:.1} ({}, {} channels; {:+.1}%, `tests/integration/scale.rs`; a ring would take {ring:.1}, {:+.1}%)",
            outcome.time.as_us(),
            outcome.algorithm.to_string().to_uppercase(),
            outcome.channels,
            error * 100.0,
            (ring / measured_us - 1.0) * 100.0
        ),
    );
}

#[test]
fn a_ring_on_256_gpus_moves_what_the_analytical_ring_says() {
    // The closed form as an oracle at scale: every GPU sends 2(n-1)/n of the
    // buffer, and the call takes at least that over its port.
    let (topo, model) = preset("nvlink-fabric", Some(256), &[]);
    let bytes = Bytes::mib(256);
    let outcome =
        collective::simulate(&topo, &model, request(&topo, Op::AllReduce, bytes, Algorithm::Ring, Protocol::Simple, Mode::Auto)).unwrap();
    let n = 256u64;
    let port = topo.nvlink_bandwidth(topo.gpus()[0]);
    let expected = 2 * (n - 1) * bytes.0 / n;
    for &gpu in topo.gpus() {
        let sent: u64 = topo.links().iter().enumerate().filter(|(_, l)| l.from == gpu).map(|(i, _)| outcome.usage[i].bytes.0).sum();
        assert!(sent.abs_diff(expected) <= expected / 10_000, "{}: {sent} against {expected}", topo.node(gpu).name);
    }
    let bound = Bytes(expected) / port;
    assert!(outcome.time > bound, "{} against the bound {bound}", outcome.time);
    let (_, utilisation) = collective::busiest_link(&topo, &outcome.usage, outcome.time).unwrap();
    assert!(utilisation <= 1.0, "{utilisation}");
}

#[test]
fn a_1_mib_allreduce_on_4096_gpus_under_pcie_switches_finishes() {
    // A hang guard, not a speed target: docs/performance.md
    // says how long it takes.
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pcie-4096.toml");
    std::fs::write(&file, pcie_switches(4096)).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_icsim"))
        .args(["collective", "--topology", file.to_str().unwrap(), "--op", "allreduce", "--sizes", "1MiB", "--format", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("a 1 MiB allreduce on 4,096 GPUs under PCIe switches ran past 300 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["results"][0]["transport"], "shm+p2p", "{json}");
}
