//! Where to write names beside points so that they cover neither each
//! other nor the points: each name tries spots around its point, nearest
//! first, and takes the first that is free (or the least covered).
//! Works in pixels; knows nothing of what the points are.

/// A text box: left, top, width, height in pixels.
pub(super) type Box_ = (i32, i32, i32, i32);

/// Pixels between a point and its name.
const GAP: i32 = 8;
/// Rings of spots tried around each point, each one name-height further.
const RINGS: i32 = 4;
/// How far around a point its marker reaches.
const MARKER: i32 = 7;

/// The box of each name of `sizes` (width, height) beside its point of
/// `anchors`, clear of the markers at `points` (the anchors among them)
/// and within `area` (left, top, right, bottom) where it fits.
pub(super) fn place(anchors: &[(i32, i32)], sizes: &[(i32, i32)], points: &[(i32, i32)], area: (i32, i32, i32, i32)) -> Vec<Box_> {
    let markers: Vec<Box_> = points.iter().chain(anchors).map(|&(x, y)| (x - MARKER, y - MARKER, 2 * MARKER, 2 * MARKER)).collect();
    let mut placed: Vec<Box_> = Vec::new();
    for (&(x, y), &(w, h)) in anchors.iter().zip(sizes) {
        let spots = (0..RINGS).flat_map(|ring| {
            let lift = ring * (h + 2);
            [(x + GAP, y - GAP - h - lift), (x + GAP, y + GAP + lift), (x - GAP - w, y - GAP - h - lift), (x - GAP - w, y + GAP + lift)]
        });
        // Covered pixels, with leaving the area worse than any overlap.
        let cost = |&(left, top): &(i32, i32)| {
            let candidate = (left, top, w, h);
            let covered: i64 = placed.iter().chain(&markers).map(|b| overlap(candidate, *b)).sum();
            let outside = left < area.0 || top < area.1 || left + w > area.2 || top + h > area.3;
            (i64::from(outside), covered)
        };
        let best = spots.clone().find(|spot| cost(spot) == (0, 0)).or_else(|| spots.min_by_key(cost)).unwrap_or((x, y));
        placed.push((best.0, best.1, w, h));
    }
    placed
}

/// The area two boxes share, in pixels.
fn overlap(a: Box_, b: Box_) -> i64 {
    let width = (a.0 + a.2).min(b.0 + b.2) - a.0.max(b.0);
    let height = (a.1 + a.3).min(b.1 + b.3) - a.1.max(b.1);
    if width > 0 && height > 0 { i64::from(width) * i64::from(height) } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: (i32, i32, i32, i32) = (0, 0, 1000, 600);

    fn assert_apart(boxes: &[Box_]) {
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                assert_eq!(overlap(*a, *b), 0, "{a:?} and {b:?} overlap");
            }
        }
    }

    #[test]
    fn names_of_close_points_do_not_overlap() {
        // Three points a few pixels apart, as a Pareto front's crowded end.
        let anchors = [(400, 300), (405, 296), (410, 292)];
        let sizes = [(160, 14); 3];
        let boxes = place(&anchors, &sizes, &[], AREA);
        assert_apart(&boxes);
        // Points at the same spot still get names at distinct spots.
        let boxes = place(&[(500, 300); 4], &[(80, 14); 4], &[], AREA);
        assert_apart(&boxes);
    }

    #[test]
    fn a_lone_name_sits_beside_its_point_inside_the_area() {
        assert_eq!(place(&[(100, 100)], &[(50, 14)], &[], AREA), [(108, 78, 50, 14)]);
        // At the right edge it goes to the left; at the top, below.
        assert_eq!(place(&[(990, 5)], &[(50, 14)], &[], AREA), [(932, 13, 50, 14)]);
        // A name covers no other point's marker, named or not.
        let boxes = place(&[(100, 100), (130, 85)], &[(50, 14), (50, 14)], &[], AREA);
        assert_eq!(overlap(boxes[0], (130 - MARKER, 85 - MARKER, 2 * MARKER, 2 * MARKER)), 0);
        let boxes = place(&[(100, 100)], &[(50, 14)], &[(120, 85)], AREA);
        assert_eq!(boxes, [(108, 108, 50, 14)]);
    }
}
