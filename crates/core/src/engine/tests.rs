use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

/// A fabric where every transfer takes `bytes` picoseconds, independently;
/// it records the order transfers started in.
#[derive(Default)]
struct FixedRate {
    in_flight: BinaryHeap<Reverse<(Time, TaskId)>>,
    started: Vec<(Time, Bytes)>,
}

impl Fabric<()> for FixedRate {
    fn start(&mut self, now: Time, transfer: TaskId, _: &(), bytes: Bytes, _: Option<Bandwidth>, _: u32) {
        self.in_flight.push(Reverse((now + Time(bytes.0), transfer)));
        self.started.push((now, bytes));
    }
    fn next_event_time(&mut self) -> Option<Time> {
        self.in_flight.peek().map(|Reverse((t, _))| *t)
    }
    fn advance(&mut self, now: Time, finished: &mut Vec<TaskId>) -> u64 {
        let mut n = 0;
        while let Some(&Reverse((t, task))) = self.in_flight.peek() {
            if t != now {
                break;
            }
            self.in_flight.pop();
            finished.push(task);
            n += 1;
        }
        n
    }
}

#[test]
fn dependencies_order_tasks_and_times_add_up() {
    let mut graph = TaskGraph::new();
    let a = graph.delay(Time(10), &[]);
    let b = graph.transfer((), Bytes(5), None, &[a]);
    let c = graph.delay(Time(3), &[a]);
    let d = graph.join(&[b, c]);
    let schedule = run(&graph, &mut FixedRate::default());
    assert_eq!(schedule.span(a), (Time(0), Time(10)));
    assert_eq!(schedule.span(b), (Time(10), Time(15)));
    assert_eq!(schedule.span(c), (Time(10), Time(13)));
    assert_eq!(schedule.span(d), (Time(15), Time(15)));
    assert_eq!(schedule.makespan(), Time(15));
}

#[test]
fn simultaneous_events_finish_in_a_fixed_order() {
    // Many tasks finishing at the same instant: the schedule must not
    // depend on anything but the graph.
    let build = || {
        let mut graph = TaskGraph::new();
        let roots: Vec<TaskId> = (0..50).map(|i| graph.delay(Time(100 - (i % 2)), &[])).collect();
        for pair in roots.chunks(2) {
            graph.transfer((), Bytes(7), None, pair);
        }
        graph
    };
    let first = run(&build(), &mut FixedRate::default());
    let second = run(&build(), &mut FixedRate::default());
    assert_eq!(first, second);
    assert_eq!(first.makespan(), Time(107));
}

#[test]
fn an_empty_graph_finishes_at_zero() {
    let graph: TaskGraph<()> = TaskGraph::new();
    assert_eq!(run(&graph, &mut FixedRate::default()).makespan(), Time::ZERO);
}

/// Chains of hops in lanes: each batch is one hop of every piece of the
/// lane, a hop waiting for the piece's previous hop and for the lane's
/// previous transfer (one connection a lane, as a pipe serialises). With
/// `follow`, each lane but the first begins after the one before it: its
/// first hop waits for that lane's first transfer.
#[derive(Debug)]
struct Chains {
    lanes: usize,
    pieces: usize,
    hops: usize,
    follow: bool,
}

struct ChainsRun<'s> {
    spec: &'s Chains,
    /// Per lane: hops added so far, the last hop of each piece, the lane's
    /// first and last transfers.
    hop: Vec<usize>,
    arrived: Vec<Vec<Option<TaskRef>>>,
    first: Vec<Option<TaskRef>>,
    last: Vec<Option<TaskRef>>,
}

impl Stream<()> for Chains {
    fn generator(&self) -> Box<dyn Generator<()> + '_> {
        Box::new(ChainsRun {
            spec: self,
            hop: vec![0; self.lanes],
            arrived: vec![vec![None; self.pieces]; self.lanes],
            first: vec![None; self.lanes],
            last: vec![None; self.lanes],
        })
    }
}

impl Generator<()> for ChainsRun<'_> {
    fn lanes(&self) -> usize {
        self.spec.lanes
    }
    fn follows(&self, lane: usize) -> bool {
        self.spec.follow && lane > 0
    }
    fn next_batch(&mut self, lane: usize, builder: &mut dyn Builder<()>) -> bool {
        if self.hop[lane] == self.spec.hops {
            return false;
        }
        let leader = if self.follows(lane) && self.hop[lane] == 0 { self.first[lane - 1] } else { None };
        for piece in 0..self.spec.pieces {
            let after: Vec<TaskRef> = self.arrived[lane][piece].into_iter().chain(self.last[lane]).chain(leader).collect();
            let bytes = Bytes((1 + lane * 3 + piece * 5 + self.hop[lane] * 7) as u64 % 11 + 1);
            let sent = builder.transfer((), bytes, None, 1, &after);
            let arrived = builder.delay(Time((piece % 3) as u64), &[sent]);
            self.first[lane] = self.first[lane].or(Some(sent));
            self.last[lane] = Some(sent);
            self.arrived[lane][piece] = Some(arrived);
        }
        self.hop[lane] += 1;
        true
    }
}

#[test]
fn a_stream_runs_exactly_as_its_tasks_written_out() {
    for (lanes, pieces, hops, follow) in
        [(1, 1, 1, false), (3, 4, 5, false), (2, 7, 9, false), (5, 1, 12, false), (4, 3, 6, true), (6, 1, 2, true)]
    {
        let chains = Chains { lanes, pieces, hops, follow };
        let (mut streamed, mut inline) = (TaskGraph::new(), TaskGraph::new());
        for graph in [&mut streamed, &mut inline] {
            graph.delay(Time(4), &[]);
        }
        let start = TaskId(0);
        let stream = streamed.stream(Box::new(Chains { lanes, pieces, hops, follow }), &[start]);
        let written = inline.inline(&chains, &[start]);
        for (graph, end) in [(&mut streamed, stream), (&mut inline, written)] {
            graph.delay(Time(2), &[end]);
        }
        let (mut a, mut b) = (FixedRate::default(), FixedRate::default());
        let (s, i) = (run(&streamed, &mut a), run(&inline, &mut b));
        assert_eq!(a.started, b.started, "{lanes} lanes: transfers start at the same times in the same order");
        assert_eq!(s.makespan(), i.makespan());
        assert_eq!(s.events, i.events, "a stream counts as the join of its tasks");
        assert_eq!(s.span(stream).1, i.span(written).1, "the stream ends with its last task");
        assert_eq!(a.started.len(), lanes * pieces * hops);
    }
}

/// The most tasks alive at once and the events of `chains` streamed alone.
fn peak_and_events(chains: Chains) -> (usize, u64) {
    let mut graph = TaskGraph::new();
    graph.stream(Box::new(chains), &[]);
    let schedule = run(&graph, &mut FixedRate::default());
    (schedule.peak_tasks, schedule.events)
}

#[test]
fn a_stream_keeps_only_a_few_batches_alive() {
    // 100,000 hops of one piece: written out, 200,000 tasks; streamed, a
    // handful at any moment.
    let (peak, events) = peak_and_events(Chains { lanes: 2, pieces: 1, hops: 100_000, follow: false });
    assert!(peak < 16, "{peak} tasks alive at once");
    assert_eq!(events, 2 * 2 * 100_000 + 2 * 100_000 + 1);
}

#[test]
fn lanes_that_follow_hold_no_tasks_before_they_begin() {
    // 10,000 lanes of one hop, each after the one before: begun all at
    // once, 20,000 tasks; following, a few at any moment.
    let (peak, events) = peak_and_events(Chains { lanes: 10_000, pieces: 1, hops: 1, follow: true });
    assert!(peak < 16, "{peak} tasks alive at once");
    // Two completions a lane and the fabric's event of its transfer.
    assert_eq!(events, 3 * 10_000 + 1);
}

#[test]
fn an_empty_stream_finishes_when_it_starts() {
    let mut graph = TaskGraph::new();
    let a = graph.delay(Time(3), &[]);
    let s = graph.stream(Box::new(Chains { lanes: 2, pieces: 3, hops: 0, follow: false }), &[a]);
    let schedule = run(&graph, &mut FixedRate::default());
    assert_eq!(schedule.span(s), (Time(3), Time(3)));
}

#[test]
fn a_run_bounded_in_events_stops_past_its_bound_and_is_whole_within_it() {
    let chains = || Chains { lanes: 2, pieces: 1, hops: 1_000, follow: false };
    let mut graph = TaskGraph::new();
    graph.stream(Box::new(chains()), &[]);
    let whole = run(&graph, &mut FixedRate::default());
    // 6,001 events (see `a_stream_keeps_only_a_few_batches_alive`).
    assert_eq!(run_within(&graph, &mut FixedRate::default(), whole.events), Ok(whole.clone()));
    let stopped = run_within(&graph, &mut FixedRate::default(), 1_000).expect_err("6,001 events are past a bound of 1,000");
    assert!(stopped.events > 1_000 && stopped.events < 1_010, "stopped at the first instant past the bound: {stopped:?}");
    assert!(stopped.at > Time::ZERO && stopped.at < whole.makespan(), "{stopped:?}");
}
