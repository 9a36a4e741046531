//! Task graphs built before they run, and the interfaces of streams: the
//! parts of a graph generated while it runs. Owns no clock: the executor
//! runs graphs.

use std::fmt;

use crate::units::{Bandwidth, Bytes, Time};

use super::{TaskId, Work};

/// A task created through a [`Builder`]: a task of a graph, or one a stream
/// generated (its slot and the slot's generation, so that a handle kept
/// after its task finished never names a later task).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskRef {
    pub(super) slot: u32,
    pub(super) generation: u32,
}

impl From<TaskId> for TaskRef {
    fn from(id: TaskId) -> TaskRef {
        TaskRef { slot: id.0, generation: 0 }
    }
}

/// Where tasks are added: a graph built whole, or a stream while it runs.
pub trait Builder<R> {
    /// Adds a task that starts once every task in `after` has finished (a
    /// task of a stream with nothing in `after` starts with the stream).
    fn add(&mut self, work: Work<R>, after: &[TaskRef]) -> TaskRef;
}

impl<R> dyn Builder<R> + '_ {
    pub fn delay(&mut self, duration: Time, after: &[TaskRef]) -> TaskRef {
        self.add(Work::Delay(duration), after)
    }

    pub fn join(&mut self, after: &[TaskRef]) -> TaskRef {
        self.add(Work::Join, after)
    }

    /// `copies` identical transfers of `bytes` along `route`.
    pub fn transfer(&mut self, route: R, bytes: Bytes, rate_cap: Option<Bandwidth>, copies: u32, after: &[TaskRef]) -> TaskRef {
        self.add(Work::Transfer { route, bytes, rate_cap, copies }, after)
    }
}

/// The tasks of a stream, generated in batches while it runs.
///
/// A stream has lanes (a collective's channels): sequences of batches that
/// run side by side. A lane's first batch is added when the stream starts,
/// or, for a lane that [`follows`](Generator::follows) the lane before it,
/// when the first task of that lane's first batch finishes; its next batch
/// when the first task of its latest batch finishes. So that
/// no task is added after it should have started, every task of a later
/// batch must wait, directly or through tasks of its own batch, for a task
/// of the batch before it (and every task of a following lane's first
/// batch, for a task of the first batch of the lane before it). Within a
/// lane, batches add tasks in the order a graph built whole would hold
/// them, and lanes follow each other in that order too: ties at one instant
/// are broken as in that graph.
pub trait Generator<R> {
    fn lanes(&self) -> usize;
    /// Whether `lane` begins once the first task of the lane before it
    /// finishes rather than with the stream (a chain's chunk, which leaves
    /// after the chunk before it): lanes that wait their turn hold no tasks.
    fn follows(&self, _lane: usize) -> bool {
        false
    }
    /// Adds the next batch of `lane` (at least one task) to `builder`;
    /// returns false, adding nothing, when the lane has no more.
    fn next_batch(&mut self, lane: usize, builder: &mut dyn Builder<R>) -> bool;
}

/// A part of a graph whose tasks are generated while it runs.
pub trait Stream<R>: fmt::Debug {
    /// The generator of one run, from the start.
    fn generator(&self) -> Box<dyn Generator<R> + '_>;
}

/// A directed acyclic graph of work. Tasks may only depend on tasks created
/// before them, which rules out cycles by construction.
#[derive(Debug)]
pub struct TaskGraph<R> {
    work: Vec<Work<R>>,
    /// (before, after) pairs: `after` waits for `before`.
    pub(super) edges: Vec<(TaskId, TaskId)>,
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
        self.add(Work::Transfer { route, bytes, rate_cap, copies: 1 }, after)
    }

    /// A stream, generated while the graph runs, after `after`.
    pub fn stream(&mut self, stream: Box<dyn Stream<R>>, after: &[TaskId]) -> TaskId {
        self.add(Work::Stream(stream), after)
    }

    /// Adds every task of `stream` to the graph itself (lane by lane, a
    /// lane's tasks as they were added), after `after`; returns a join of
    /// them. What a stream runs as, written out: for timelines of its
    /// tasks, and the reference streams are tested against.
    pub fn inline(&mut self, stream: &dyn Stream<R>, after: &[TaskId]) -> TaskId {
        let mut generator = stream.generator();
        let mut written = Written { tasks: Vec::new() };
        for lane in 0..generator.lanes() {
            while generator.next_batch(lane, &mut written) {}
        }
        let mut id_of = vec![None; written.tasks.len()];
        let mut has_successor = vec![false; written.tasks.len()];
        for (i, task) in written.tasks.into_iter().enumerate() {
            let mut before: Vec<TaskId> = Vec::with_capacity(task.after.len().max(after.len()));
            for &earlier in &task.after {
                has_successor[earlier] = true;
                before.push(id_of[earlier].expect("a stream's task waits only for tasks that stand before it"));
            }
            if before.is_empty() {
                before.extend_from_slice(after);
            }
            id_of[i] = Some(self.add(task.work, &before));
        }
        let mut sinks: Vec<TaskId> =
            id_of.iter().zip(&has_successor).filter(|(_, followed)| !**followed).filter_map(|(id, _)| *id).collect();
        sinks.sort();
        if sinks.is_empty() { self.join(after) } else { self.join(&sinks) }
    }

    pub fn len(&self) -> usize {
        self.work.len()
    }

    pub fn is_empty(&self) -> bool {
        self.work.is_empty()
    }

    /// The task of this graph a [`Builder`] handle names.
    pub fn task_of(&self, task: TaskRef) -> TaskId {
        assert!(task.generation == 0 && (task.slot as usize) < self.work.len(), "a handle of this graph's tasks");
        TaskId(task.slot)
    }

    pub fn work(&self, task: TaskId) -> &Work<R> {
        &self.work[task.index()]
    }

    pub fn tasks(&self) -> impl Iterator<Item = (TaskId, &Work<R>)> {
        self.work.iter().enumerate().map(|(i, w)| (TaskId(i as u32), w))
    }
}

impl<R> Builder<R> for TaskGraph<R> {
    fn add(&mut self, work: Work<R>, after: &[TaskRef]) -> TaskRef {
        let after: Vec<TaskId> = after.iter().map(|r| TaskId(r.slot)).collect();
        TaskGraph::add(self, work, &after).into()
    }
}

/// A stream's tasks as its generator adds them, lane by lane: the order a
/// run breaks ties in.
struct Written<R> {
    tasks: Vec<WrittenTask<R>>,
}

struct WrittenTask<R> {
    work: Work<R>,
    /// The stream's tasks it waits for, by their place in `Written::tasks`.
    after: Vec<usize>,
}

impl<R> Builder<R> for Written<R> {
    fn add(&mut self, work: Work<R>, after: &[TaskRef]) -> TaskRef {
        assert!(!matches!(work, Work::Stream(_)), "a stream cannot add a stream");
        let after = after.iter().map(|task| task.slot as usize).collect();
        self.tasks.push(WrittenTask { work, after });
        TaskRef { slot: (self.tasks.len() - 1) as u32, generation: 0 }
    }
}
