use super::*;
use crate::engine::{TaskGraph, run};

fn path(links: &[u32]) -> Path {
    Path::new(links.iter().map(|&l| LinkId(l)).collect(), Time::ZERO)
}

const GB: u64 = 1_000_000_000;

#[test]
fn two_flows_on_one_link_get_half_each() {
    let mut network = Network::new([Bandwidth::gbps(100)]);
    let mut graph = TaskGraph::new();
    let a = graph.transfer(path(&[0]), Bytes(GB), None, &[]);
    let b = graph.transfer(path(&[0]), Bytes(GB), None, &[]);
    let schedule = run(&graph, &mut network);
    // Each gets 50 GB/s: 1 GB takes 20 ms.
    assert_eq!(schedule.span(a).1, Time::from_us(20_000));
    assert_eq!(schedule.span(b).1, Time::from_us(20_000));
    assert_eq!(network.usage()[0].bytes, Bytes(2 * GB));
    assert_eq!(network.usage()[0].busy, Time::from_us(20_000));
}

#[test]
fn a_flow_limited_elsewhere_leaves_its_share_to_others() {
    // Link 0: 100 GB/s shared by A and B; link 1: 10 GB/s carries B too.
    // B is held to 10 GB/s by link 1, so A gets the other 90 GB/s.
    let mut network = Network::new([Bandwidth::gbps(100), Bandwidth::gbps(10)]);
    let mut graph = TaskGraph::new();
    let a = graph.transfer(path(&[0]), Bytes(90 * GB), None, &[]);
    let b = graph.transfer(path(&[0, 1]), Bytes(10 * GB), None, &[]);
    let schedule = run(&graph, &mut network);
    assert_eq!(schedule.span(a).1, Time::from_us(1_000_000));
    assert_eq!(schedule.span(b).1, Time::from_us(1_000_000));
}

#[test]
fn a_finished_flow_hands_its_share_back() {
    // A (1 GB) and B (3 GB) share 100 GB/s: A ends at 20 ms having moved
    // 1 GB; B moved 1 GB by then and does its last 2 GB at 100 GB/s.
    let mut network = Network::new([Bandwidth::gbps(100)]);
    let mut graph = TaskGraph::new();
    let a = graph.transfer(path(&[0]), Bytes(GB), None, &[]);
    let b = graph.transfer(path(&[0]), Bytes(3 * GB), None, &[]);
    let schedule = run(&graph, &mut network);
    assert_eq!(schedule.span(a).1, Time::from_us(20_000));
    assert_eq!(schedule.span(b).1, Time::from_us(40_000));
}

#[test]
fn rate_caps_and_latency_are_honoured() {
    let mut network = Network::new([Bandwidth::gbps(100)]);
    let mut graph = TaskGraph::new();
    let capped = Path::new(vec![LinkId(0)], Time::from_us(2));
    let a = graph.transfer(capped, Bytes(GB), Some(Bandwidth::gbps(10)), &[]);
    let b = graph.transfer(path(&[0]), Bytes(9 * GB), None, &[]);
    let schedule = run(&graph, &mut network);
    assert_eq!(schedule.span(a).1, Time::from_us(100_000 + 2));
    assert_eq!(schedule.span(b).1, Time::from_us(100_000));
}

#[test]
fn disjoint_components_do_not_disturb_each_other() {
    let mut network = Network::new([Bandwidth::gbps(10), Bandwidth::gbps(20)]);
    let mut graph = TaskGraph::new();
    let a = graph.transfer(path(&[0]), Bytes(GB), None, &[]);
    let b = graph.transfer(path(&[1]), Bytes(GB), None, &[]);
    let schedule = run(&graph, &mut network);
    assert_eq!(schedule.span(a).1, Time::from_us(100_000));
    assert_eq!(schedule.span(b).1, Time::from_us(50_000));
}

#[test]
fn a_flow_of_copies_shares_as_that_many_flows() {
    // Three copies and a lone flow on one link: four shares of 25 GB/s.
    let copied = |copies: u32| {
        let mut network = Network::new([Bandwidth::gbps(100), Bandwidth::gbps(100)]);
        let mut graph = TaskGraph::new();
        let mut ends = Vec::new();
        for _ in 0..(3 / copies) {
            ends.push(graph.add(crate::engine::Work::Transfer { route: path(&[0]), bytes: Bytes(GB), rate_cap: None, copies }, &[]));
        }
        let lone = graph.transfer(path(&[0, 1]), Bytes(GB), Some(Bandwidth::gbps(40)), &[]);
        let schedule = run(&graph, &mut network);
        (ends.iter().map(|&t| schedule.span(t).1).collect::<Vec<_>>(), schedule.span(lone).1, network.usage())
    };
    let (copies, lone, usage) = copied(3);
    assert_eq!(copies, vec![Time::from_us(40_000)]);
    assert_eq!(lone, Time::from_us(40_000));
    assert_eq!(usage[0].bytes, Bytes(4 * GB), "every copy's bytes counted");
    assert_eq!(copied(1), (vec![Time::from_us(40_000); 3], lone, usage), "the same as three flows of their own");
}

#[test]
fn picoseconds_round_up_exactly_as_ceil_does() {
    let mut values = vec![
        0.0,
        -0.0,
        -0.5,
        -3.0,
        0.25,
        1.0,
        1.0 + f64::EPSILON,
        2f64.powi(52) - 0.5,
        2f64.powi(53) + 2.0,
        2f64.powi(63),
        2f64.powi(64),
        1e30,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MIN_POSITIVE,
    ];
    // Quotients as the solver forms them: bytes in picoseconds over a rate.
    for bytes in [1u64, 7, 512, 4096, 1 << 20, 3 << 28] {
        for rate in [1.0, 3.0, 7e9, 12.5e9, 64e9 / 3.0, 450e9] {
            values.push(bytes as f64 * 1e12 / rate);
        }
    }
    for ps in values {
        assert_eq!(picoseconds_up(ps), Time(ps.ceil() as u64), "{ps}");
    }
}
