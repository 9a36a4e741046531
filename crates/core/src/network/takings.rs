//! What progressive filling leaves of a link's spare capacity once a flow's
//! copies have taken their shares, remembered: the same bits as taking them
//! again. Owns no link or flow; the solver in `network` calls it.

/// What progressive filling leaves of a link's spare capacity once each copy
/// of a flow has taken its share, one copy after another (each subtraction
/// rounded, never below zero), remembered by its inputs. In a fabric of
/// identical links the same spare loses the same share to flows of as many
/// copies on link after link, and taking many copies one by one is the
/// solver's longest chain of arithmetic; a remembered result is the same
/// bits as one taken again.
#[derive(Debug, Clone)]
pub(super) struct Takings {
    /// (spare's bits, share's bits, copies) and what is left, by a hash of
    /// the first three; copies of 0 marks an empty entry.
    entries: Vec<(u64, u64, u32, f64)>,
}

impl Takings {
    /// Bits of the hash that pick an entry.
    const BITS: u32 = 6;

    pub(super) fn new() -> Takings {
        Takings { entries: vec![(0, 0, 0, 0.0); 1 << Self::BITS] }
    }

    pub(super) fn take(&mut self, spare: f64, share: f64, copies: u32) -> f64 {
        let once = |left: f64| (left - share).max(0.0);
        if copies == 1 {
            return once(spare);
        }
        let key = (spare.to_bits(), share.to_bits(), copies);
        let hash = (key.0 ^ key.1.rotate_left(29) ^ u64::from(copies)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let entry = &mut self.entries[(hash >> (64 - Self::BITS)) as usize];
        if (entry.0, entry.1, entry.2) == key {
            return entry.3;
        }
        // The same arithmetic as `once` copy after copy, without its
        // comparison on the chain: a share no more than what is left leaves
        // zero or more, and once a share is more than what is left, nothing
        // is left.
        let mut left = spare;
        for _ in 0..copies {
            if left < share {
                left = 0.0;
                break;
            }
            left -= share;
        }
        *entry = (key.0, key.1, key.2, left);
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_taking_is_the_same_bits_as_one_taken_again() {
        let mut takings = Takings::new();
        let by_hand = |spare: f64, share: f64, copies: u32| (0..copies).fold(spare, |left, _| (left - share).max(0.0));
        // Spares and shares that repeat (as in a fabric of identical links) and
        // some that collide in the table, with shares that empty the link.
        for round in 0..3 {
            for i in 0..200u32 {
                let spare = 1e11 / f64::from(1 + i % 7) + f64::from(round);
                let share = spare / f64::from(3 + i % 11) * if i % 13 == 0 { 4.0 } else { 1.0 };
                let copies = 1 + i % 40;
                let taken = takings.take(spare, share, copies);
                assert_eq!(taken.to_bits(), by_hand(spare, share, copies).to_bits(), "{spare} less {copies} x {share}");
            }
        }
        // A share that empties the link exactly, and no share at all.
        for (spare, share, copies) in [(3e9, 1e9, 3), (3e9, 1e9, 5), (0.0, 0.0, 4), (2.5e9, 0.0, 2)] {
            assert_eq!(takings.take(spare, share, copies).to_bits(), by_hand(spare, share, copies).to_bits());
        }
    }
}
