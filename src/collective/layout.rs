//! Where rings go: orders of the ranks such that consecutive ranks are
//! joined by a link. On a switch any order will do; on a mesh of direct
//! links the rings are link-disjoint Hamiltonian cycles, so that together
//! they use every link of a GPU rather than one.

/// Up to `max_rings` link-disjoint directed rings over `n` ranks, where
/// `linked(a, b)` says whether rank `a` can send directly to rank `b`. Each
/// ring lists rank positions in sending order. Deterministic: ranks are tried
/// in ascending order, with a bounded backtracking search per ring.
pub fn disjoint_rings(n: usize, linked: impl Fn(usize, usize) -> bool, max_rings: usize) -> Vec<Vec<usize>> {
    if n < 2 {
        return vec![(0..n).collect()];
    }
    let mut free = vec![vec![false; n]; n];
    for (a, row) in free.iter_mut().enumerate() {
        for (b, arc) in row.iter_mut().enumerate() {
            *arc = a != b && linked(a, b);
        }
    }
    let mut rings = Vec::new();
    while rings.len() < max_rings {
        let Some(ring) = hamiltonian_cycle(&free) else {
            break;
        };
        for i in 0..n {
            free[ring[i]][ring[(i + 1) % n]] = false;
        }
        rings.push(ring);
    }
    rings
}

/// Work budget of one cycle search (extensions tried); generous for the
/// boards icsim models (at most a few dozen GPUs).
const SEARCH_BUDGET: u32 = 200_000;

fn hamiltonian_cycle(free: &[Vec<bool>]) -> Option<Vec<usize>> {
    let n = free.len();
    let mut path = vec![0usize];
    let mut used = vec![false; n];
    used[0] = true;
    let mut budget = SEARCH_BUDGET;
    extend(free, &mut path, &mut used, &mut budget).then_some(path)
}

fn extend(free: &[Vec<bool>], path: &mut Vec<usize>, used: &mut [bool], budget: &mut u32) -> bool {
    let n = free.len();
    let last = *path.last().expect("the path starts at rank 0");
    if path.len() == n {
        return free[last][path[0]];
    }
    // Try the rank whose links are scarcest first (Warnsdorff's rule), ties
    // by rank: it keeps later rings possible.
    let mut candidates: Vec<usize> = (0..n).filter(|&next| !used[next] && free[last][next]).collect();
    candidates.sort_by_key(|&next| ((0..n).filter(|&k| !used[k] && free[next][k]).count(), next));
    for next in candidates {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        used[next] = true;
        path.push(next);
        if extend(free, path, used, budget) {
            return true;
        }
        path.pop();
        used[next] = false;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_ring(ring: &[usize], n: usize) -> bool {
        let mut seen = ring.to_vec();
        seen.sort_unstable();
        seen == (0..n).collect::<Vec<_>>()
    }

    #[test]
    fn a_full_mesh_of_eight_gives_rings_over_every_link() {
        let rings = disjoint_rings(8, |_, _| true, 7);
        assert!(rings.len() >= 6, "found {} rings", rings.len());
        let mut arcs = std::collections::BTreeSet::new();
        for ring in &rings {
            assert!(is_ring(ring, 8));
            for i in 0..8 {
                assert!(arcs.insert((ring[i], ring[(i + 1) % 8])), "rings share a link");
            }
        }
    }

    #[test]
    fn two_ranks_make_one_ring_both_ways() {
        assert_eq!(disjoint_rings(2, |_, _| true, 7), vec![vec![0, 1]]);
    }

    #[test]
    fn a_ring_only_uses_existing_links() {
        // A line 0-1-2-3 closed into a cycle by 3-0, both directions.
        let linked = |a: usize, b: usize| a.abs_diff(b) == 1 || a.abs_diff(b) == 3;
        let rings = disjoint_rings(4, linked, 4);
        assert_eq!(rings.len(), 2);
        assert_eq!(rings[0], vec![0, 1, 2, 3]);
    }
}
