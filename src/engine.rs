//! The discrete-event engine: a task graph (transfers, delays, joins with
//! dependencies) executed against a clock. Events are ordered by time, then by
//! the order they were scheduled in (a sequence number), so a run is the same
//! bit for bit every time. The engine knows nothing of GPUs or links: a
//! transfer is handed to a [`Fabric`], which says when it is finished.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::units::{Bandwidth, Bytes, Time};

/// Index of a task in its [`TaskGraph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

impl TaskId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a task does once all the tasks it depends on have finished.
#[derive(Debug, Clone)]
pub enum Work<R> {
    /// Move `bytes` along `route`; the fabric decides how long it takes.
    /// `rate_cap` bounds this transfer's own rate (a copy engine or a single
    /// thread block that cannot drive a link at full speed).
    Transfer { route: R, bytes: Bytes, rate_cap: Option<Bandwidth> },
    /// Occupy nothing for a fixed time (a kernel, a synchronisation).
    Delay(Time),
    /// Finish as soon as its dependencies have: a barrier.
    Join,
}

/// A directed acyclic graph of work. Tasks may only depend on tasks created
/// before them, which rules out cycles by construction.
#[derive(Debug, Clone)]
pub struct TaskGraph<R> {
    work: Vec<Work<R>>,
    /// (before, after) pairs: `after` waits for `before`.
    edges: Vec<(TaskId, TaskId)>,
}

impl<R> Default for TaskGraph<R> {
    fn default() -> Self {
        TaskGraph { work: Vec::new(), edges: Vec::new() }
    }
}

impl<R> TaskGraph<R> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a task that starts once every task in `after` has finished.
    pub fn add(&mut self, work: Work<R>, after: &[TaskId]) -> TaskId {
        let id = TaskId(u32::try_from(self.work.len()).expect("task graph holds at most 2^32 tasks"));
        for &before in after {
            assert!(before < id, "task {} may only depend on earlier tasks", before.0);
            self.edges.push((before, id));
        }
        self.work.push(work);
        id
    }

    pub fn delay(&mut self, duration: Time, after: &[TaskId]) -> TaskId {
        self.add(Work::Delay(duration), after)
    }

    pub fn join(&mut self, after: &[TaskId]) -> TaskId {
        self.add(Work::Join, after)
    }

    pub fn transfer(&mut self, route: R, bytes: Bytes, rate_cap: Option<Bandwidth>, after: &[TaskId]) -> TaskId {
        self.add(Work::Transfer { route, bytes, rate_cap }, after)
    }

    pub fn len(&self) -> usize {
        self.work.len()
    }

    pub fn is_empty(&self) -> bool {
        self.work.is_empty()
    }

    pub fn work(&self, task: TaskId) -> &Work<R> {
        &self.work[task.index()]
    }

    pub fn tasks(&self) -> impl Iterator<Item = (TaskId, &Work<R>)> {
        self.work.iter().enumerate().map(|(i, w)| (TaskId(i as u32), w))
    }
}

/// What moves the bytes of transfers: the network model, or a test double.
pub trait Fabric<R> {
    /// Begins `transfer` at `now`.
    fn start(&mut self, now: Time, transfer: TaskId, route: &R, bytes: Bytes, rate_cap: Option<Bandwidth>);
    /// When the fabric next changes state (a transfer finishes or a rate
    /// changes), if anything is in flight.
    fn next_event_time(&mut self) -> Option<Time>;
    /// Processes the fabric's events at `now` (which is `next_event_time`),
    /// appending transfers that finished; returns how many events it handled.
    fn advance(&mut self, now: Time, finished: &mut Vec<TaskId>) -> u64;
}

/// When each task started and finished, and how much work the run was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub start: Vec<Time>,
    pub end: Vec<Time>,
    /// Events handled: task completions of the engine plus the fabric's own.
    pub events: u64,
}

impl Schedule {
    /// The time the last task finished.
    pub fn makespan(&self) -> Time {
        self.end.iter().copied().max().unwrap_or(Time::ZERO)
    }
    pub fn span(&self, task: TaskId) -> (Time, Time) {
        (self.start[task.index()], self.end[task.index()])
    }
}

/// Runs every task of `graph` to completion on `fabric`, starting at zero.
pub fn run<R, F: Fabric<R>>(graph: &TaskGraph<R>, fabric: &mut F) -> Schedule {
    Executor::new(graph).run(fabric)
}

struct Executor<'g, R> {
    graph: &'g TaskGraph<R>,
    /// Successors of each task, as ranges into `successor_list` (CSR).
    successor_start: Vec<u32>,
    successor_list: Vec<TaskId>,
    waiting_on: Vec<u32>,
    start: Vec<Time>,
    end: Vec<Time>,
    /// Delays in progress: (finish time, sequence number, task).
    timers: BinaryHeap<Reverse<(Time, u64, TaskId)>>,
    sequence: u64,
    events: u64,
}

impl<'g, R> Executor<'g, R> {
    fn new(graph: &'g TaskGraph<R>) -> Self {
        let n = graph.len();
        let mut successor_start = vec![0u32; n + 1];
        let mut waiting_on = vec![0u32; n];
        for &(before, after) in &graph.edges {
            successor_start[before.index() + 1] += 1;
            waiting_on[after.index()] += 1;
        }
        for i in 0..n {
            successor_start[i + 1] += successor_start[i];
        }
        let mut fill = successor_start.clone();
        let mut successor_list = vec![TaskId(0); graph.edges.len()];
        for &(before, after) in &graph.edges {
            successor_list[fill[before.index()] as usize] = after;
            fill[before.index()] += 1;
        }
        Executor {
            graph,
            successor_start,
            successor_list,
            waiting_on,
            start: vec![Time::ZERO; n],
            end: vec![Time::ZERO; n],
            timers: BinaryHeap::new(),
            sequence: 0,
            events: 0,
        }
    }

    fn run<F: Fabric<R>>(mut self, fabric: &mut F) -> Schedule {
        let mut now = Time::ZERO;
        let mut ready: Vec<TaskId> = (0..self.graph.len() as u32).map(TaskId).filter(|t| self.waiting_on[t.index()] == 0).collect();
        let mut finished = Vec::new();
        let mut starting = Vec::new();
        let mut done = 0usize;
        loop {
            // Start everything that became ready at `now`, in task order so
            // that ties are broken the same way on every run.
            while !ready.is_empty() {
                ready.sort_unstable();
                std::mem::swap(&mut ready, &mut starting);
                for task in starting.drain(..) {
                    self.start[task.index()] = now;
                    match self.graph.work(task) {
                        Work::Transfer { route, bytes, rate_cap } => fabric.start(now, task, route, *bytes, *rate_cap),
                        Work::Delay(duration) if duration.0 > 0 => {
                            self.timers.push(Reverse((now + *duration, self.sequence, task)));
                            self.sequence += 1;
                        }
                        Work::Delay(_) | Work::Join => finished.push(task),
                    }
                }
                for task in finished.drain(..) {
                    done += 1;
                    self.complete(task, now, &mut ready);
                }
            }
            let next_timer = self.timers.peek().map(|Reverse((t, _, _))| *t);
            let next_fabric = fabric.next_event_time();
            now = match (next_timer, next_fabric) {
                (None, None) => break,
                (Some(t), None) | (None, Some(t)) => t,
                (Some(a), Some(b)) => a.min(b),
            };
            while let Some(&Reverse((t, _, task))) = self.timers.peek() {
                if t != now {
                    break;
                }
                self.timers.pop();
                finished.push(task);
            }
            if next_fabric == Some(now) {
                self.events += fabric.advance(now, &mut finished);
            }
            for task in finished.drain(..) {
                done += 1;
                self.complete(task, now, &mut ready);
            }
        }
        assert_eq!(done, self.graph.len(), "every task of an acyclic graph finishes");
        Schedule { start: self.start, end: self.end, events: self.events }
    }

    fn complete(&mut self, task: TaskId, now: Time, ready: &mut Vec<TaskId>) {
        self.events += 1;
        self.end[task.index()] = now;
        let range = self.successor_start[task.index()] as usize..self.successor_start[task.index() + 1] as usize;
        for &next in &self.successor_list[range] {
            let waiting = &mut self.waiting_on[next.index()];
            *waiting -= 1;
            if *waiting == 0 {
                ready.push(next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fabric where every transfer takes `bytes` picoseconds, independently.
    #[derive(Default)]
    struct FixedRate {
        in_flight: BinaryHeap<Reverse<(Time, TaskId)>>,
    }

    impl Fabric<()> for FixedRate {
        fn start(&mut self, now: Time, transfer: TaskId, _: &(), bytes: Bytes, _: Option<Bandwidth>) {
            self.in_flight.push(Reverse((now + Time(bytes.0), transfer)));
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
}
