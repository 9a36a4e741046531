//! Which of the requested sizes a run measures: rounded to what an operation
//! needs, deduplicated, and split by whether they fit in memory.

use crate::units::Bytes;

/// those that fit and those that do not.
#[derive(Debug, Clone, PartialEq)]
pub struct SizePlan {
    pub kept: Vec<Bytes>,
    pub too_large: Vec<Bytes>,
}

pub fn plan_sizes(requested: &[Bytes], granularity: u64, fits: impl Fn(Bytes) -> bool) -> SizePlan {
    assert!(granularity > 0, "size granularity must be positive");
    let mut plan = SizePlan { kept: Vec::new(), too_large: Vec::new() };
    for size in requested {
        let rounded = Bytes(size.0 / granularity * granularity);
        if rounded.0 == 0 || plan.kept.contains(&rounded) || plan.too_large.contains(&rounded) {
            continue;
        }
        if fits(rounded) { plan.kept.push(rounded) } else { plan.too_large.push(rounded) }
    }
    plan
}

/// "1GiB, 4GiB".
pub fn size_list(sizes: &[Bytes]) -> String {
    sizes.iter().map(Bytes::to_string).collect::<Vec<_>>().join(", ")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_rounded_deduplicated_and_capped() {
        let requested = [Bytes(8), Bytes(12), Bytes(32), Bytes(4), Bytes::gib(1), Bytes::gib(4)];
        let plan = plan_sizes(&requested, 8, |b| b <= Bytes::gib(2));
        assert_eq!(plan.kept, vec![Bytes(8), Bytes(32), Bytes::gib(1)]);
        assert_eq!(plan.too_large, vec![Bytes::gib(4)]);
    }
}
