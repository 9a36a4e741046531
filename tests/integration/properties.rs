//! Laws that hold for any input: no link carries more than its capacity;
//! the incremental solver agrees with the full re-solve; a ring allreduce
//! conserves bytes; the same input gives the same output.

use proptest::prelude::*;

use icsim::collective::{self, Algorithm, Choice, Op, Protocol, Request};
use icsim::engine::{self, Fabric, TaskGraph, TaskId};
use icsim::network::{LinkId, Network, Path};
use icsim::transport::Mode;
use icsim::units::{Bandwidth, Bytes, Time};

use crate::common::preset;

/// A network that checks, after every change, that no link is over capacity.
struct Checked(Network);

impl Checked {
    fn check(&self) {
        for link in 0..self.0.link_count() {
            let load = self.0.load(LinkId(link as u32));
            assert!(load <= 1.0 + 1e-6, "link {link} carries {load:.9} of its capacity");
        }
    }
}

impl Fabric<Path> for Checked {
    fn start(&mut self, now: Time, transfer: TaskId, path: &Path, bytes: Bytes, cap: Option<Bandwidth>, copies: u32) {
        self.0.start(now, transfer, path, bytes, cap, copies);
        self.check();
    }
    fn next_event_time(&mut self) -> Option<Time> {
        self.0.next_event_time()
    }
    fn advance(&mut self, now: Time, finished: &mut Vec<TaskId>) -> u64 {
        let handled = self.0.advance(now, finished);
        self.check();
        handled
    }
}

/// One random flow: its links, bytes, rate cap (GB/s), the earlier flow it
/// waits for, and a start delay (µs).
type RandomFlow = (Vec<u32>, u64, Option<u64>, Option<usize>, u64);

/// A random workload: link capacities (GB/s) and flows over random subsets
/// of the links, some capped, some waiting for others, some delayed.
fn workload() -> impl Strategy<Value = (Vec<u64>, Vec<RandomFlow>)> {
    let links = prop::collection::vec(1u64..100, 2..7);
    links.prop_flat_map(|capacities| {
        let n = capacities.len() as u32;
        let flow = (prop::collection::vec(0..n, 1..4), 1u64..5_000_000, prop::option::of(1u64..60), prop::option::of(0usize..20), 0u64..3);
        (Just(capacities), prop::collection::vec(flow, 1..24))
    })
}

/// A random saturated chain: many links, each flow over one to three
/// neighbouring ones, most flows capped, so that a change's region has to
/// grow along the chain for several rounds before every flow has a
/// bottleneck (as a tree allreduce's chain on a large switch).
fn chain_workload() -> impl Strategy<Value = (Vec<u64>, Vec<RandomFlow>)> {
    let links = prop::collection::vec(1u64..100, 6..24);
    links.prop_flat_map(|capacities| {
        let n = capacities.len() as u32;
        let flow = (0..n, 1u32..4, 1u64..5_000_000, prop::option::weighted(0.8, 1u64..60), prop::option::of(0usize..40), 0u64..3);
        let flows = prop::collection::vec(flow, 8..48).prop_map(move |flows| {
            flows
                .into_iter()
                .map(|(first, span, bytes, cap, after, delay)| ((first..(first + span).min(n)).collect(), bytes, cap, after, delay))
                .collect()
        });
        (Just(capacities), flows)
    })
}

/// Every task ends at the same time, within rounding, whether the network
/// re-solves incrementally or every flow on every change.
fn incremental_agrees_with_full(capacities: &[u64], flows: &[RandomFlow]) -> Result<(), TestCaseError> {
    let graph = build(flows);
    let fast = engine::run(&graph, &mut Network::new(capacities.iter().map(|&c| Bandwidth::gbps(c))));
    let slow = engine::run(&graph, &mut Network::new(capacities.iter().map(|&c| Bandwidth::gbps(c))).with_full_recompute());
    for (task, _) in graph.tasks() {
        let (a, b) = (fast.span(task).1, slow.span(task).1);
        // Floating point differs in the order of updates: allow a part
        // in a million of the time, plus a picosecond of rounding.
        let tolerance = a.0.max(b.0) / 1_000_000 + 2;
        prop_assert!(a.0.abs_diff(b.0) <= tolerance, "task {}: incremental {} vs full {}", task.0, a, b);
    }
    Ok(())
}

fn build(flows: &[RandomFlow]) -> TaskGraph<Path> {
    let mut graph = TaskGraph::new();
    let mut ids: Vec<TaskId> = Vec::new();
    for (links, bytes, cap, after, delay_us) in flows {
        let mut path: Vec<LinkId> = links.iter().map(|&l| LinkId(l)).collect();
        path.sort();
        path.dedup();
        let mut deps = Vec::new();
        if let Some(a) = after.filter(|&a| a < ids.len()) {
            deps.push(ids[a]);
        }
        let start = graph.delay(Time::from_us(*delay_us), &deps);
        let id = graph.transfer(Path::new(path, Time::ZERO), Bytes(*bytes), cap.map(Bandwidth::gbps), &[start]);
        ids.push(id);
    }
    graph
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_link_ever_carries_more_than_its_capacity((capacities, flows) in workload()) {
        let graph = build(&flows);
        let mut network = Checked(Network::new(capacities.iter().map(|&c| Bandwidth::gbps(c))));
        engine::run(&graph, &mut network);
    }

    #[test]
    fn the_incremental_solver_agrees_with_the_full_re_solve((capacities, flows) in workload()) {
        incremental_agrees_with_full(&capacities, &flows)?;
    }

    #[test]
    fn the_incremental_solver_agrees_with_the_full_re_solve_along_a_saturated_chain((capacities, flows) in chain_workload()) {
        incremental_agrees_with_full(&capacities, &flows)?;
    }

    #[test]
    fn a_ring_allreduce_sends_and_receives_two_n_minus_one_over_n_of_the_buffer(gpus in 2usize..=8, bytes in 1u64..64_000_000, proto in 0usize..3) {
        let (topo, model) = preset("hgx-h100", Some(gpus as u32), &[]);
        let protocol = [Protocol::Simple, Protocol::Ll, Protocol::Ll128][proto];
        let request = Request { algorithm: Choice::Fixed(Algorithm::Ring), protocol: Choice::Fixed(protocol), ..Request::new(Op::AllReduce, Bytes(bytes), topo.gpus().to_vec(), Mode::Nvswitch) };
        let outcome = collective::simulate(&topo, &model, request).unwrap();
        let n = gpus as u64;
        let per_gpu = |to: bool| -> Vec<u64> {
            topo.gpus()
                .iter()
                .map(|&gpu| topo.links().iter().enumerate().filter(|(_, l)| if to { l.to == gpu } else { l.from == gpu }).map(|(i, _)| outcome.usage[i].bytes.0).sum())
                .collect()
        };
        let (out, into) = (per_gpu(false), per_gpu(true));
        let (sent, received): (u64, u64) = (out.iter().sum(), into.iter().sum());
        prop_assert_eq!(sent, received, "every byte sent is received");
        // Pieces of a loop differ by a byte when the buffer does not divide
        // evenly: allow one byte per piece a GPU sends.
        let pieces_slack = 2 * n * 64 * (bytes / (n * 32 * 1024) + 1);
        if protocol == Protocol::Simple {
            prop_assert_eq!(sent, 2 * (n - 1) * bytes, "in all, 2(n-1) buffers cross the wire");
            for &o in &out {
                prop_assert!(o.abs_diff(2 * (n - 1) * bytes / n) <= pieces_slack, "{o} vs {}", 2 * (n - 1) * bytes / n);
            }
        } else {
            // LL and LL128 add their flags: at least the payload, at most the
            // wire factor of it (each slice rounded up to a byte).
            let factor = if protocol == Protocol::Ll { model.protocol.ll.wire_factor } else { model.protocol.ll128.wire_factor };
            let payload = 2 * (n - 1) * bytes;
            prop_assert!(sent >= payload && (sent as f64) <= payload as f64 * factor + (n * pieces_slack) as f64, "{sent} vs {payload}");
        }
    }

    #[test]
    fn the_same_input_gives_the_same_output(gpus in 2usize..=8, kib in 1u64..65536, algo in 0usize..5, mode in 0usize..2) {
        let (topo, model) = preset(["hgx-h200", "h20-nvlink-mesh"][mode], Some(gpus as u32), &[]);
        let algorithm = [Algorithm::Ring, Algorithm::Tree, Algorithm::Nvls, Algorithm::OneShot, Algorithm::TwoShot][algo];
        let request = Request { algorithm: Choice::Fixed(algorithm), ..Request::new(Op::AllReduce, Bytes::kib(kib), topo.gpus().to_vec(), Mode::Auto) };
        let first = collective::simulate(&topo, &model, request.clone());
        let second = collective::simulate(&topo, &model, request);
        match (first, second) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(a.time, b.time);
                prop_assert_eq!(a.usage, b.usage);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            _ => prop_assert!(false, "one run failed and the other did not"),
        }
    }
}
