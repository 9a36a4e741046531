//! A queue of events ordered by (time, the order they were pushed in). Many
//! events of a simulation fall due at the same instant (every rank of a
//! collective steps together), so they are kept in one list per instant.
//! The nearest instants sit in a sorted ring buffer (a simulation has few
//! pending at once: found by binary search, inserted by moving the shorter
//! side); when there are very many, the latest wait in an ordered map.
//! Knows nothing of what the events are.

use std::collections::{BTreeMap, VecDeque};

use crate::units::Time;

/// Instants kept in the ring buffer before the latest ones move to the map.
const NEAR: usize = 512;

#[derive(Debug, Clone)]
pub struct EventQueue<T> {
    /// The nearest instants and their events in the order pushed, earliest
    /// first.
    near: VecDeque<(Time, Vec<T>)>,
    /// Instants after every one in `near`.
    far: BTreeMap<Time, Vec<T>>,
    /// Emptied lists, kept to be filled again without allocating.
    spare: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue { near: VecDeque::new(), far: BTreeMap::new(), spare: Vec::new(), len: 0 }
    }
}

impl<T> EventQueue<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, at: Time, event: T) {
        self.len += 1;
        let latest_near = self.near.back().map(|(t, _)| *t);
        if !self.far.is_empty() && latest_near.is_none_or(|t| at > t) {
            let spare = &mut self.spare;
            self.far.entry(at).or_insert_with(|| spare.pop().unwrap_or_default()).push(event);
            return;
        }
        // Most events land at the latest instant, or after it.
        if latest_near == Some(at) {
            self.near.back_mut().expect("a latest instant").1.push(event);
            return;
        }
        let i = if latest_near.is_none_or(|t| at > t) { self.near.len() } else { self.near.partition_point(|(t, _)| *t < at) };
        if let Some((t, events)) = self.near.get_mut(i)
            && *t == at
        {
            events.push(event);
            return;
        }
        let mut events = self.spare.pop().unwrap_or_default();
        events.push(event);
        self.near.insert(i, (at, events));
        if self.near.len() > NEAR {
            let (t, events) = self.near.pop_back().expect("more than NEAR instants");
            self.far.insert(t, events);
        }
    }

    /// When the earliest event is due.
    pub fn next_time(&self) -> Option<Time> {
        self.near.front().map(|(t, _)| *t)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes the events due at the earliest instant, in the order they
    /// were pushed, into `into` (which is cleared first); returns the instant.
    /// Events pushed for that same instant meanwhile come in a later call.
    pub fn pop_earliest(&mut self, into: &mut Vec<T>) -> Option<Time> {
        let (at, mut events) = self.near.pop_front()?;
        self.len -= events.len();
        into.clear();
        std::mem::swap(into, &mut events);
        self.spare.push(events);
        if self.near.is_empty() {
            // Bring the nearest of the far instants forward.
            while self.near.len() < NEAR / 2 {
                let Some(entry) = self.far.pop_first() else { break };
                self.near.push_back(entry);
            }
        }
        Some(at)
    }

    /// Drops the earliest instants while none of their events matters any
    /// more (`stale`), so that `next_time` is when something happens.
    pub fn drop_stale(&mut self, stale: impl Fn(&T) -> bool) {
        let mut dropped = Vec::new();
        while let Some((_, events)) = self.near.front() {
            if events.iter().any(|e| !stale(e)) {
                return;
            }
            self.pop_earliest(&mut dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_the_order_pushed() {
        let mut queue = EventQueue::new();
        for (t, e) in [(5, 'a'), (3, 'b'), (5, 'c'), (3, 'd'), (9, 'e')] {
            queue.push(Time(t), e);
        }
        let mut out = Vec::new();
        assert_eq!(queue.next_time(), Some(Time(3)));
        assert_eq!(queue.pop_earliest(&mut out), Some(Time(3)));
        assert_eq!(out, vec!['b', 'd']);
        queue.push(Time(5), 'f');
        assert_eq!(queue.pop_earliest(&mut out), Some(Time(5)));
        assert_eq!(out, vec!['a', 'c', 'f']);
        queue.drop_stale(|&e| e == 'e');
        assert!(queue.is_empty() && queue.next_time().is_none());
        assert_eq!(queue.pop_earliest(&mut out), None);
    }

    #[test]
    fn many_instants_overflow_into_the_map_and_come_back_in_order() {
        let mut queue = EventQueue::new();
        // 2,000 instants pushed out of order, two events each.
        let times: Vec<u64> = (0..2000).map(|i| (i * 7919) % 2000).collect();
        for (n, &t) in times.iter().enumerate() {
            queue.push(Time(t * 10), (t, n));
        }
        for (n, &t) in times.iter().enumerate() {
            queue.push(Time(t * 10), (t, 1000 + n));
        }
        let mut out = Vec::new();
        for t in 0..2000u64 {
            assert_eq!(queue.pop_earliest(&mut out), Some(Time(t * 10)));
            assert_eq!(out.len(), 2);
            assert!(out.iter().all(|&(time, _)| time == t) && out[0].1 < out[1].1, "{out:?}");
            if t == 100 {
                queue.push(Time(50_000), (5000, 5001));
            }
        }
        assert_eq!(queue.pop_earliest(&mut out), Some(Time(50_000)));
        assert!(queue.is_empty());
    }
}
