//! icsim-core: what every layer of the simulator stands on. `units` (bytes,
//! time, bandwidth, size lists), `engine` (task graphs, streams, the
//! executor and its event queue) and `network` (max-min fair flows on
//! links). It knows no hardware, file or workload: nothing here may name a
//! module of the model (the crate boundary enforces it), and no unsafe code.

#![forbid(unsafe_code)]

pub mod engine;
pub mod network;
pub mod units;

/// The position of the first item of `items` that repeats an earlier one:
/// how every list a user writes (sizes, algorithms, plot names, a row's
/// keys) finds the item it names twice, in O(n log n) for hostile lengths.
pub fn first_repeat<T: Ord>(items: &[T]) -> Option<usize> {
    let mut seen = std::collections::BTreeSet::new();
    items.iter().position(|item| !seen.insert(item))
}
