//! Runs a task graph against a clock and a fabric: tasks start when their
//! dependencies have finished, delays on timers ordered by (time, sequence),
//! transfers on the fabric. The graph's own tasks live in flat arrays
//! (successors as CSR); streams generate theirs batch by batch as they run,
//! into slots that are reused once an instant is over. Knows nothing of
//! GPUs or links.

use crate::units::Time;

use super::graph::{Builder, Generator, TaskGraph, TaskRef};
use super::queue::EventQueue;
use super::{Fabric, Schedule, TaskId, Work};

/// Runs every task of `graph` to completion on `fabric`, starting at zero.
pub fn run<R, F: Fabric<R>>(graph: &TaskGraph<R>, fabric: &mut F) -> Schedule {
    match Executor::new(graph).run(fabric, u64::MAX) {
        Ok(schedule) => schedule,
        Err(stopped) => unreachable!("a run without a bound on its events stopped: {stopped:?}"),
    }
}

/// Like [`run`], but stops once the run has handled more than
/// `most_events` events: a bound on its cost, which grows with them.
pub fn run_within<R, F: Fabric<R>>(graph: &TaskGraph<R>, fabric: &mut F, most_events: u64) -> Result<Schedule, Stopped> {
    Executor::new(graph).run(fabric, most_events)
}

/// A run stopped at its bound on events: how many it had handled, and the
/// simulated time it had reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub events: u64,
    pub at: Time,
}

/// Where a task stands among those ready at one instant: as a graph built
/// whole would number it. The graph's task in the top 32 bits of `lane`,
/// then a stream's lane (0 for the graph's own tasks) in the low 32; then
/// the order it was added to the lane. Compared field by field (two words,
/// aligned as words, so that a slot fits a cache line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Order {
    lane: u64,
    added: u64,
}

impl Order {
    fn new(task: u32, lane: u32, added: u64) -> Order {
        Order { lane: u64::from(task) << 32 | u64::from(lane), added }
    }

    fn of_graph(task: u32) -> Order {
        Order::new(task, 0, 0)
    }
}

/// A task ready to start: its place in the wave and its id (the graph's
/// tasks first, then generated ones: the graph's size plus their slot).
type Ready = (Order, u32);

const NONE: u32 = u32::MAX;

/// Tasks a run makes room for at once.
const SMALL: usize = 256;

/// Whether the order tasks start in at one instant matters: to the fabric's
/// sharing for transfers, and for a stream's first tasks; that of delays and
/// joins does not.
fn is_ordered<R>(work: &Work<R>) -> bool {
    matches!(work, Work::Transfer { .. } | Work::Stream(_))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Running,
    Finished,
    Free,
}

/// A task a stream generated, alive in the run: what its predecessors and
/// successors touch. Its work is kept apart ([`Tasks::work`]), read only
/// when it starts, so that the slots a run walks stay compact.
struct Slot {
    order: Order,
    end: Time,
    generation: u32,
    waiting: u32,
    /// Head of this task's successors in the edge pool.
    first_edge: u32,
    /// The stream that generated it, its lane and its batch there.
    stream: u32,
    lane: u32,
    batch: u32,
    state: State,
}

const _: () = assert!(std::mem::size_of::<Slot>() <= 64, "a slot fits a cache line");

/// An edge of the pool: the waiting slot and the next edge of the list.
#[derive(Clone, Copy)]
struct Edge {
    to: u32,
    next: u32,
}

/// A lane of a running stream.
struct LaneRun {
    /// Batches added so far.
    batches: u32,
    exhausted: bool,
    /// Tasks added so far: the next one's place in the lane.
    added: u64,
    /// Whether the next lane follows this one and has not begun yet.
    leads: bool,
}

/// A stream of the graph, running.
struct StreamRun<'g, R> {
    /// The graph's task that it is.
    task: u32,
    /// Dropped once the stream has finished, with what it held.
    generator: Option<Box<dyn Generator<R> + 'g>>,
    lanes: Vec<LaneRun>,
    /// Its tasks not yet finished.
    live: u64,
}

/// Generated tasks, their edges and the queues they join: what a stream's
/// generator adds to.
struct Tasks<R> {
    /// Ids of generated tasks start here (the graph's size).
    first_id: u32,
    slots: Vec<Slot>,
    /// The work of each slot's task, while it is alive.
    work: Vec<Option<Work<R>>>,
    free_slots: Vec<u32>,
    /// Slots whose task finished at the current instant: freed once it is over.
    retiring: Vec<u32>,
    edges: Vec<Edge>,
    free_edge: u32,
    /// Tasks that became ready for the next wave.
    ready: Vec<Ready>,
    /// Tasks of a stream's first batches, ready as it starts: they start
    /// right after it, before the rest of its wave.
    ready_with_stream: Vec<Ready>,
    live: usize,
    peak: usize,
}

impl<R> Tasks<R> {
    fn push_edge(&mut self, from: u32, to: u32) {
        let edge = Edge { to, next: self.slots[from as usize].first_edge };
        let index = if self.free_edge != NONE {
            let index = self.free_edge;
            self.free_edge = self.edges[index as usize].next;
            self.edges[index as usize] = edge;
            index
        } else {
            self.edges.push(edge);
            (self.edges.len() - 1) as u32
        };
        self.slots[from as usize].first_edge = index;
    }

    fn allocate(&mut self, slot: Slot, work: Work<R>) -> u32 {
        self.live += 1;
        self.peak = self.peak.max(self.live);
        match self.free_slots.pop() {
            Some(index) => {
                let generation = self.slots[index as usize].generation;
                self.slots[index as usize] = Slot { generation, ..slot };
                self.work[index as usize] = Some(work);
                index
            }
            None => {
                self.slots.push(slot);
                self.work.push(Some(work));
                (self.slots.len() - 1) as u32
            }
        }
    }
}

/// What a stream's generator adds to: its tasks become slots of the run.
struct Spawner<'t, R> {
    tasks: &'t mut Tasks<R>,
    stream: u32,
    stream_task: u32,
    lane: &'t mut LaneRun,
    lane_index: u32,
    /// Tasks added, for the stream's count of live ones.
    added: u64,
    /// Whether ready tasks start with the stream (its first batches)
    /// rather than in the next wave.
    with_stream: bool,
    now: Time,
}

impl<R> Builder<R> for Spawner<'_, R> {
    fn add(&mut self, work: Work<R>, after: &[TaskRef]) -> TaskRef {
        assert!(!matches!(work, Work::Stream(_)), "a stream cannot add a stream");
        let order = Order::new(self.stream_task, self.lane_index, self.lane.added);
        self.lane.added += 1;
        self.added += 1;
        let slot = self.tasks.allocate(
            Slot {
                order,
                end: Time::ZERO,
                generation: 0,
                waiting: 0,
                first_edge: NONE,
                stream: self.stream,
                lane: self.lane_index - 1,
                batch: self.lane.batches,
                state: State::Waiting,
            },
            work,
        );
        let mut finished_now = false;
        for before in after {
            let other = &self.tasks.slots[before.slot as usize];
            if other.generation != before.generation {
                continue; // finished at an earlier instant, and freed
            }
            debug_assert!(other.stream == self.stream, "a stream's tasks wait only for its own");
            if other.state == State::Finished {
                finished_now |= other.end == self.now;
                continue;
            }
            self.tasks.push_edge(before.slot, slot);
            self.tasks.slots[slot as usize].waiting += 1;
        }
        if self.tasks.slots[slot as usize].waiting == 0 {
            debug_assert!(
                after.is_empty() || finished_now,
                "a generated task was added after everything it waits for had finished: its lane's batches break the generator's contract"
            );
            let ready = (order, self.tasks.first_id + slot);
            if self.with_stream { self.tasks.ready_with_stream.push(ready) } else { self.tasks.ready.push(ready) }
        }
        TaskRef { slot, generation: self.tasks.slots[slot as usize].generation }
    }
}

struct Executor<'g, R> {
    graph: &'g TaskGraph<R>,
    /// The graph's tasks: their successors (CSR) and what they wait for.
    successor_start: Vec<u32>,
    successor_list: Vec<u32>,
    waiting: Vec<u32>,
    start: Vec<Time>,
    end: Vec<Time>,
    tasks: Tasks<R>,
    streams: Vec<StreamRun<'g, R>>,
    /// Delays in progress, by finish time then start order.
    timers: EventQueue<u32>,
    events: u64,
    /// Tasks that finished at the current instant, to complete.
    finished: Vec<TaskId>,
}

impl<'g, R> Executor<'g, R> {
    fn new(graph: &'g TaskGraph<R>) -> Self {
        let n = graph.len();
        let mut successor_start = vec![0u32; n + 1];
        let mut waiting = vec![0u32; n];
        for &(before, after) in &graph.edges {
            successor_start[before.index() + 1] += 1;
            waiting[after.index()] += 1;
        }
        for i in 0..n {
            successor_start[i + 1] += successor_start[i];
        }
        let mut fill = successor_start.clone();
        let mut successor_list = vec![0u32; graph.edges.len()];
        for &(before, after) in &graph.edges {
            successor_list[fill[before.index()] as usize] = after.0;
            fill[before.index()] += 1;
        }
        let first_id = u32::try_from(n).expect("a graph holds at most 2^32 tasks");
        Executor {
            graph,
            successor_start,
            successor_list,
            waiting,
            start: vec![Time::ZERO; n],
            end: vec![Time::ZERO; n],
            // Room for a small collective's tasks alive at once, so that
            // short runs do not grow these step by step.
            tasks: Tasks {
                first_id,
                slots: Vec::with_capacity(SMALL),
                work: Vec::with_capacity(SMALL),
                free_slots: Vec::with_capacity(SMALL),
                retiring: Vec::with_capacity(SMALL),
                edges: Vec::with_capacity(2 * SMALL),
                free_edge: NONE,
                ready: Vec::with_capacity(SMALL),
                ready_with_stream: Vec::with_capacity(SMALL),
                live: n,
                peak: n,
            },
            streams: Vec::new(),
            timers: EventQueue::new(),
            events: 0,
            finished: Vec::with_capacity(SMALL),
        }
    }

    fn run<F: Fabric<R>>(mut self, fabric: &mut F, most_events: u64) -> Result<Schedule, Stopped> {
        let mut now = Time::ZERO;
        self.tasks.ready =
            (0..self.graph.len() as u32).filter(|&t| self.waiting[t as usize] == 0).map(|t| (Order::of_graph(t), t)).collect();
        let mut completed = Vec::new();
        let mut wave = Vec::new();
        let mut due = Vec::new();
        loop {
            // Start everything that became ready at `now`, wave by wave, in
            // the order a graph built whole would number the tasks.
            while !self.tasks.ready.is_empty() {
                std::mem::swap(&mut self.tasks.ready, &mut wave);
                self.start_wave(&mut wave, now, fabric);
                self.complete_finished(now, &mut completed);
            }
            self.retire();
            if self.events > most_events {
                return Err(Stopped { events: self.events, at: now });
            }
            let next_timer = self.timers.next_time();
            let next_fabric = fabric.next_event_time();
            now = match (next_timer, next_fabric) {
                (None, None) => break,
                (Some(t), None) | (None, Some(t)) => t,
                (Some(a), Some(b)) => a.min(b),
            };
            if next_timer == Some(now) {
                self.timers.pop_earliest(&mut due);
                self.finished.extend(due.iter().map(|&id| TaskId(id)));
            }
            if next_fabric == Some(now) {
                self.events += fabric.advance(now, &mut self.finished);
            }
            self.complete_finished(now, &mut completed);
        }
        assert!(self.waiting.iter().all(|&w| w == 0), "every task of an acyclic graph finishes");
        assert!(self.tasks.live == self.graph.len(), "every generated task finishes");
        Ok(Schedule { start: self.start, end: self.end, events: self.events, peak_tasks: self.tasks.peak })
    }

    fn work(&self, id: u32) -> &Work<R> {
        match id.checked_sub(self.tasks.first_id) {
            None => self.graph.work(TaskId(id)),
            Some(slot) => self.tasks.work[slot as usize].as_ref().expect("a live generated task has its work"),
        }
    }

    /// Starts the tasks of `wave` (leaving it empty): delays and joins, then
    /// transfers and streams in order; a stream's first tasks that are ready
    /// start right after it.
    fn start_wave<F: Fabric<R>>(&mut self, wave: &mut Vec<Ready>, now: Time, fabric: &mut F) {
        let mut kept = 0;
        for i in 0..wave.len() {
            let (_, id) = wave[i];
            if is_ordered(self.work(id)) {
                wave[kept] = wave[i];
                kept += 1;
            } else {
                self.start_unordered(id, now);
            }
        }
        wave.truncate(kept);
        wave.sort_unstable_by_key(|&(order, _)| order);
        for &(_, slot) in wave.iter() {
            self.start_task(slot, now, fabric);
            if !self.tasks.ready_with_stream.is_empty() {
                let mut first = std::mem::take(&mut self.tasks.ready_with_stream);
                self.start_wave(&mut first, now, fabric);
                self.tasks.ready_with_stream = first;
            }
        }
        wave.clear();
    }

    fn complete_finished(&mut self, now: Time, completed: &mut Vec<TaskId>) {
        std::mem::swap(&mut self.finished, completed);
        for task in completed.iter() {
            self.complete(task.0, now);
        }
        completed.clear();
    }

    /// Starts a delay or a join.
    fn start_unordered(&mut self, id: u32, now: Time) {
        let duration = match id.checked_sub(self.tasks.first_id) {
            None => {
                self.start[id as usize] = now;
                self.graph.work(TaskId(id))
            }
            Some(slot) => {
                self.tasks.slots[slot as usize].state = State::Running;
                self.tasks.work[slot as usize].as_ref().expect("a live generated task has its work")
            }
        };
        match duration {
            Work::Delay(duration) if duration.0 > 0 => self.timers.push(now + *duration, id),
            Work::Delay(_) | Work::Join => self.finished.push(TaskId(id)),
            Work::Transfer { .. } | Work::Stream(_) => unreachable!("transfers and streams start in order"),
        }
    }

    fn start_task<F: Fabric<R>>(&mut self, id: u32, now: Time, fabric: &mut F) {
        let graph = self.graph;
        let work = match id.checked_sub(self.tasks.first_id) {
            None => {
                self.start[id as usize] = now;
                let work = graph.work(TaskId(id));
                if let Work::Stream(stream) = work {
                    self.begin_stream(id, stream.generator(), now);
                    return;
                }
                work
            }
            Some(slot) => {
                self.tasks.slots[slot as usize].state = State::Running;
                self.tasks.work[slot as usize].as_ref().expect("a live generated task has its work")
            }
        };
        match work {
            Work::Transfer { route, bytes, rate_cap, copies } => fabric.start(now, TaskId(id), route, *bytes, *rate_cap, *copies),
            Work::Delay(duration) if duration.0 > 0 => self.timers.push(now + *duration, id),
            Work::Delay(_) | Work::Join => self.finished.push(TaskId(id)),
            Work::Stream(_) => unreachable!("streams are the graph's own tasks"),
        }
    }

    /// Adds the first batch of every lane of a stream that starts now.
    fn begin_stream(&mut self, task: u32, generator: Box<dyn Generator<R> + 'g>, now: Time) {
        let index = self.streams.len() as u32;
        let count = generator.lanes();
        let lanes = (0..count)
            .map(|lane| LaneRun { batches: 0, exhausted: false, added: 0, leads: lane + 1 < count && generator.follows(lane + 1) })
            .collect();
        let begins: Vec<bool> = (0..count).map(|lane| !generator.follows(lane)).collect();
        self.streams.push(StreamRun { task, generator: Some(generator), lanes, live: 0 });
        for lane in (0..count).filter(|&lane| begins[lane]) {
            self.next_batch(index, lane, true, now);
        }
        if self.streams[index as usize].live == 0 {
            self.finished.push(TaskId(task));
        }
    }

    /// Asks a stream for the next batch of one lane.
    fn next_batch(&mut self, stream: u32, lane: usize, with_stream: bool, now: Time) {
        let run = &mut self.streams[stream as usize];
        let mut spawner = Spawner {
            tasks: &mut self.tasks,
            stream,
            stream_task: run.task,
            lane: &mut run.lanes[lane],
            lane_index: lane as u32 + 1,
            added: 0,
            with_stream,
            now,
        };
        let generator = run.generator.as_mut().expect("a running stream has its generator");
        if generator.next_batch(lane, &mut spawner) {
            assert!(spawner.added > 0, "a stream's batch adds at least one task");
            let added = spawner.added;
            run.lanes[lane].batches += 1;
            run.live += added;
        } else {
            run.lanes[lane].exhausted = true;
        }
    }

    fn complete(&mut self, id: u32, now: Time) {
        self.events += 1;
        let Some(slot) = id.checked_sub(self.tasks.first_id) else {
            self.end[id as usize] = now;
            let successors = self.successor_start[id as usize] as usize..self.successor_start[id as usize + 1] as usize;
            for &next in &self.successor_list[successors] {
                let waiting = &mut self.waiting[next as usize];
                *waiting -= 1;
                if *waiting == 0 {
                    self.tasks.ready.push((Order::of_graph(next), next));
                }
            }
            if let Some(run) = self.streams.iter_mut().rfind(|s| s.task == id) {
                // A stream of the graph, done with: drop what its generator holds.
                run.generator = None;
            }
            return;
        };
        let task = &mut self.tasks.slots[slot as usize];
        task.state = State::Finished;
        task.end = now;
        let (stream, lane, batch) = (task.stream, task.lane, task.batch);
        let mut edge = task.first_edge;
        task.first_edge = NONE;
        while edge != NONE {
            let Edge { to, next } = self.tasks.edges[edge as usize];
            self.tasks.edges[edge as usize].next = self.tasks.free_edge;
            self.tasks.free_edge = edge;
            edge = next;
            let waiting = &mut self.tasks.slots[to as usize].waiting;
            *waiting -= 1;
            if *waiting == 0 {
                self.tasks.ready.push((self.tasks.slots[to as usize].order, self.tasks.first_id + to));
            }
        }
        self.tasks.retiring.push(slot);
        let run = &mut self.streams[stream as usize];
        let lane_run = &mut run.lanes[lane as usize];
        let begins_next = batch == 0 && std::mem::take(&mut lane_run.leads);
        if !lane_run.exhausted && batch + 1 == lane_run.batches {
            self.next_batch(stream, lane as usize, false, now);
        }
        if begins_next {
            self.next_batch(stream, lane as usize + 1, false, now);
        }
        let run = &mut self.streams[stream as usize];
        run.live -= 1;
        if run.live == 0 && run.lanes.iter().all(|l| l.exhausted) {
            let task = run.task;
            self.complete(task, now);
        }
    }

    /// Frees the slots of generated tasks that finished at the instant that
    /// is over: a handle to one then reads as finished.
    fn retire(&mut self) {
        for &slot in &self.tasks.retiring {
            let task = &mut self.tasks.slots[slot as usize];
            task.state = State::Free;
            self.tasks.work[slot as usize] = None;
            task.generation = task.generation.wrapping_add(1);
            self.tasks.free_slots.push(slot);
        }
        self.tasks.live -= self.tasks.retiring.len();
        self.tasks.retiring.clear();
    }
}
