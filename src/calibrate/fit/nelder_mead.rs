//! Nelder-Mead minimisation: a simplex search that needs no gradient, for
//! losses computed by simulation.

/// Nelder-Mead minimisation of `f` from `start`, with initial steps `steps`.
pub fn nelder_mead(f: impl Fn(&[f64]) -> f64, start: &[f64], steps: &[f64], max_evaluations: usize) -> (Vec<f64>, f64) {
    let n = start.len();
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    simplex.push((start.to_vec(), f(start)));
    for i in 0..n {
        let mut point = start.to_vec();
        point[i] += steps[i];
        let value = f(&point);
        simplex.push((point, value));
    }
    let mut evaluations = n + 1;
    let lerp = |a: &[f64], b: &[f64], t: f64| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x + t * (y - x)).collect() };
    while evaluations < max_evaluations {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let spread = simplex[n].1 - simplex[0].1;
        if spread.abs() <= 1e-12 * (1.0 + simplex[0].1.abs()) {
            break;
        }
        let centroid: Vec<f64> = (0..n).map(|d| simplex[..n].iter().map(|(p, _)| p[d]).sum::<f64>() / n as f64).collect();
        let worst = simplex[n].clone();
        let reflected = lerp(&centroid, &worst.0, -1.0);
        let reflected_value = f(&reflected);
        evaluations += 1;
        if reflected_value < simplex[0].1 {
            let expanded = lerp(&centroid, &worst.0, -2.0);
            let expanded_value = f(&expanded);
            evaluations += 1;
            simplex[n] = if expanded_value < reflected_value { (expanded, expanded_value) } else { (reflected, reflected_value) };
        } else if reflected_value < simplex[n - 1].1 {
            simplex[n] = (reflected, reflected_value);
        } else {
            let outside = reflected_value < worst.1;
            let contracted = if outside { lerp(&centroid, &reflected, 0.5) } else { lerp(&centroid, &worst.0, 0.5) };
            let contracted_value = f(&contracted);
            evaluations += 1;
            if contracted_value < worst.1.min(reflected_value) {
                simplex[n] = (contracted, contracted_value);
            } else {
                let best = simplex[0].0.clone();
                for vertex in simplex.iter_mut().skip(1) {
                    vertex.0 = lerp(&best, &vertex.0, 0.5);
                    vertex.1 = f(&vertex.0);
                    evaluations += 1;
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex.swap_remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_the_bottom_of_a_bowl() {
        let (x, value) = nelder_mead(|p| (p[0] - 3.0).powi(2) + 10.0 * (p[1] + 1.0).powi(2), &[0.0, 0.0], &[1.0, 1.0], 2000);
        assert!((x[0] - 3.0).abs() < 1e-3 && (x[1] + 1.0).abs() < 1e-3 && value < 1e-6, "{x:?} {value}");
    }
}
