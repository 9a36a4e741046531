//! Back-to-back calls of an allreduce whose chunks are partly empty.
//! NCCL rounds a rank's share of a ring allreduce up to 16 bytes, so a call
//! of fewer than 16 bytes a rank leaves some chunks empty, and a step with
//! nothing to move neither waits nor sends. Each rank's kernel then ends
//! after its own last step with data, some ranks steps before the call's
//! last, and in a stream of calls (a CUDA graph of them, or eager launches
//! queued ahead) a rank's next call starts there: the calls overlap, and
//! each takes fewer of the stream's steps than its 2n - 1 from start to
//! end. A full ring's ranks all end at its last step, so its calls cannot
//! overlap, and two ranks always end together. This module counts the steps
//! the overlap saves, by running the stream's max-plus recursion.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Calls in the simulated stream: the first ones settle it, the rest are
/// timed.
const SETTLING_CALLS: usize = 3;
const TIMED_CALLS: usize = 8;

/// The data-carrying chunk positions of one loop of a ring allreduce of
/// `bytes` over `ranks` ranks: NCCL's share of a rank is
/// `alignUp(divUp(count, nranks), 16 / sizeof(T))` elements (`runRing` in
/// all_reduce.h), 16 bytes at least whatever the type.
pub fn carrying_chunks(bytes: u64, ranks: usize) -> usize {
    let share = bytes.div_ceil(ranks.max(1) as u64).next_multiple_of(16).max(16);
    (bytes.div_ceil(share) as usize).clamp(1, ranks.max(1))
}

/// How many steps sooner each call of a stream of ring allreduces, one
/// after another, ends when only `carrying` of its `ranks` chunk positions
/// carry data than when all do. Cached: the same arguments give the same
/// count.
pub fn overlapped_steps(ranks: usize, carrying: usize) -> f64 {
    if carrying >= ranks || ranks < 3 {
        return 0.0;
    }
    static CACHE: OnceLock<Mutex<HashMap<(usize, usize), f64>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(&steps) = cache.lock().expect("the cache holds plain numbers").get(&(ranks, carrying)) {
        return steps;
    }
    let steps = (2 * ranks - 1) as f64 - steps_a_call(ranks, carrying);
    cache.lock().expect("the cache holds plain numbers").insert((ranks, carrying), steps);
    steps
}

/// A stream of ring allreduces, max-plus, each step one unit of time: in
/// each call rank r's step j (of 2n - 1: a send, 2n - 3 receive-and-sends,
/// a final receive) handles chunk (r - j) mod n; it starts when the rank's
/// previous step has ended (its previous call's last step with data, for
/// its first) and, after the first, when its predecessor's step j - 1 of
/// the call has. Steps on empty chunks take no time and wait for nothing. A
/// rank's fixed cost a call (its kernel's start) shifts all of its steps
/// alike and is left out. Returns the steps a call takes in the stream.
fn steps_a_call(ranks: usize, carrying: usize) -> f64 {
    let steps = 2 * ranks - 1;
    let (mut end, mut next) = (vec![0.0f64; ranks], vec![0.0f64; ranks]);
    let mut settled = 0.0;
    for call in 0..SETTLING_CALLS + TIMED_CALLS {
        if call == SETTLING_CALLS {
            settled = end.iter().copied().fold(0.0, f64::max);
        }
        for step in 0..steps {
            for rank in 0..ranks {
                let chunk = (rank + ranks * steps - step) % ranks;
                next[rank] = if chunk >= carrying {
                    end[rank]
                } else if step == 0 {
                    end[rank] + 1.0
                } else {
                    end[rank].max(end[(rank + ranks - 1) % ranks]) + 1.0
                };
            }
            std::mem::swap(&mut end, &mut next);
        }
    }
    (end.iter().copied().fold(0.0, f64::max) - settled) / TIMED_CALLS as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_carries_data_from_sixteen_bytes_of_its_share() {
        for (bytes, ranks, carrying) in [(8, 4, 1), (32, 4, 2), (128, 4, 4), (8, 2, 1), (32, 2, 2), (64, 8, 4), (1 << 20, 8, 8)] {
            assert_eq!(carrying_chunks(bytes, ranks), carrying, "{bytes} B over {ranks} ranks");
        }
    }

    #[test]
    fn calls_overlap_by_the_steps_their_ranks_sit_out_at_the_end() {
        // A full ring: 2n - 1 steps a call, none saved.
        assert_eq!(steps_a_call(4, 4), 7.0);
        assert_eq!(overlapped_steps(4, 4), 0.0);
        // 4 ranks, one chunk with data: rank 0 ends after the fifth of the
        // 7 steps and its next call starts there: 5 steps a call. Two
        // chunks: 6.
        assert_eq!(overlapped_steps(4, 1), 2.0);
        assert_eq!(overlapped_steps(4, 2), 1.0);
        assert_eq!(overlapped_steps(4, 3), 0.0);
        // Two ranks always end together; more ranks sit out more steps.
        assert_eq!(steps_a_call(2, 1), 3.0);
        assert_eq!(overlapped_steps(2, 1), 0.0);
        assert_eq!(overlapped_steps(8, 1), 6.0);
    }
}
