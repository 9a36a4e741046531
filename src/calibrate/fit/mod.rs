//! Fitting the hardware model to measurements by least squares. Every
//! parameter stands for something physical and is fitted only on the points
//! that can see it, in groups fitted one after another so that earlier
//! groups do not depend on later ones: copies (link rates), thread-block
//! rates (one-channel collectives), a channel's rate through host memory,
//! the contention of many channels on a link, latencies per protocol and
//! path (calls of a few bytes from the reference caller, at two step counts
//! or more), each other caller's cost, and NVLS. A group whose data cannot
//! identify it is skipped with the reason; a parameter that ends on its
//! bound is reported (the CLI refuses it). Each group is fitted by
//! Nelder-Mead on the mean squared log error, the simulation in the loop.
//!
//! Files: `parameters` (what may change, with bounds), `groups` (which
//! groups the data identifies, a builder for each concept) and `copies`
//! (the copy paths' groups), `nelder_mead` (the optimizer), `overlay` (the
//! overlay written from a fit).

mod copies;
mod groups;
mod nelder_mead;
mod overlay;
mod parameters;
#[cfg(test)]
mod tests;

use rayon::prelude::*;

pub use groups::groups;
pub use nelder_mead::nelder_mead;
pub use overlay::overlay;
pub use parameters::{Parameter, Unit};
pub(in crate::calibrate) use parameters::{exponent, parameter, ratio, time};

use super::predict::predict;
use super::schema::Measurement;
use crate::config::hardware::HardwareModel;
use crate::topology::{Blueprint, ResolveError, Topology};

/// Measurements and the machine they were made on.
pub struct Source {
    pub board: Blueprint,
    pub measurements: Vec<Measurement>,
}

/// One measured point: its source and its index there.
pub type Point = (usize, usize);

/// A group of parameters and the measurements that constrain them.
pub struct Group {
    pub name: String,
    pub parameters: Vec<Parameter>,
    pub points: Vec<Point>,
    /// What data identifies the group, for messages.
    pub needs: String,
}

/// A group the data cannot identify, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

/// The sources' topologies under `model` (its link rates and latencies).
pub fn build_all(sources: &[Source], model: &HardwareModel) -> Result<Vec<Topology>, ResolveError> {
    sources.iter().map(|s| s.board.build(model)).collect()
}

/// Mean squared log error of `points` under `model` (a failed prediction,
/// or a model no board can be built under, counts as a large error).
fn loss(sources: &[Source], model: &HardwareModel, points: &[Point]) -> f64 {
    let Ok(topologies) = build_all(sources, model) else { return 100.0 };
    let errors: Vec<f64> = points
        .par_iter()
        .map(|&(s, i)| {
            let m = &sources[s].measurements[i];
            match predict(&topologies[s], model, m) {
                Ok(p) => (p.time.as_us().max(1e-6) / m.time_us).ln().powi(2),
                Err(_) => 100.0,
            }
        })
        .collect();
    // Summed in order: a parallel sum's grouping follows the threads'
    // scheduling, and its last bits steer the simplex to another fit.
    errors.iter().sum::<f64>() / points.len().max(1) as f64
}

/// What one group's fit changed.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFit {
    pub name: String,
    pub points: usize,
    /// (key, unit, before, after).
    pub parameters: Vec<(String, Unit, f64, f64)>,
    /// Keys that ended on a bound.
    pub on_bound: Vec<String>,
    /// What data would identify the group's parameters better.
    pub needs: String,
    pub rms_log_error_before: f64,
    pub rms_log_error_after: f64,
}

/// The fitted model, what each group changed, and the groups the data could
/// not identify.
pub struct Fit {
    pub model: HardwareModel,
    pub groups: Vec<GroupFit>,
    pub skipped: Vec<Skipped>,
}

impl Fit {
    /// Parameters that ended on a bound: (key, what data would identify it).
    pub fn pinned(&self) -> Vec<(String, String)> {
        self.groups.iter().flat_map(|g| g.on_bound.iter().map(|k| (k.clone(), g.needs.clone()))).collect()
    }
}

/// How many times every group is fitted in turn (block coordinate descent):
/// a group fitted early sees the later ones still at their priors, so one
/// pass leaves it where those priors put it.
const PASSES: usize = 3;

/// Fits every group in turn, `PASSES` times; each group's report spans all
/// passes (its values and error before the first, after the last).
pub fn fit(sources: &[Source], start: &HardwareModel, max_evaluations: usize) -> Result<Fit, ResolveError> {
    let mut model = start.clone();
    let (groups, skipped) = groups(&build_all(sources, start)?, start, sources);
    let mut fits: Vec<GroupFit> = Vec::new();
    for pass in 0..PASSES {
        for (index, group) in groups.iter().enumerate() {
            let fitted = fit_group(sources, &mut model, group, max_evaluations);
            if pass == 0 {
                fits.push(fitted);
            } else {
                let first = &fits[index];
                let parameters = first.parameters.iter().zip(&fitted.parameters).map(|(f, l)| (f.0.clone(), f.1, f.2, l.3)).collect();
                fits[index] = GroupFit { parameters, rms_log_error_before: first.rms_log_error_before, ..fitted };
            }
        }
    }
    Ok(Fit { model, groups: fits, skipped })
}

/// Fits one group's parameters on its points, the rest of `model` held, and
/// leaves the best values in `model`.
fn fit_group(sources: &[Source], model: &mut HardwareModel, group: &Group, max_evaluations: usize) -> GroupFit {
    let before: Vec<f64> = group.parameters.iter().map(|p| p.get(model)).collect();
    // Search in units of each parameter's own size, so that a step of
    // 0.1 is 10% of it (or 0.5 us / 0.05 for one that starts at zero).
    let scales: Vec<f64> = group
        .parameters
        .iter()
        .zip(&before)
        .map(|(p, &v)| {
            if v.abs() > 1e-9 {
                v.abs()
            } else if p.unit == Unit::Time {
                5.0
            } else {
                0.5
            }
        })
        .collect();
    let start_point: Vec<f64> = before.iter().zip(&scales).map(|(v, s)| v / s).collect();
    let steps = vec![0.1; before.len()];
    let base = model.clone();
    let apply = |x: &[f64]| {
        let mut candidate = base.clone();
        for ((p, v), s) in group.parameters.iter().zip(x).zip(&scales) {
            p.set(&mut candidate, v * s);
        }
        candidate
    };
    let objective = |x: &[f64]| loss(sources, &apply(x), &group.points);
    let loss_before = objective(&start_point);
    let (best, loss_after) = nelder_mead(objective, &start_point, &steps, max_evaluations);
    let (best, loss_after) = if loss_after < loss_before { (best, loss_after) } else { (start_point.clone(), loss_before) };
    *model = apply(&best);
    let after: Vec<f64> = group.parameters.iter().map(|p| p.get(model)).collect();
    GroupFit {
        name: group.name.clone(),
        points: group.points.len(),
        parameters: group.parameters.iter().zip(before.iter().zip(&after)).map(|(p, (b, a))| (p.key.clone(), p.unit, *b, *a)).collect(),
        on_bound: group.parameters.iter().zip(&after).filter(|(p, v)| p.on_bound(**v)).map(|(p, _)| p.key.clone()).collect(),
        needs: group.needs.clone(),
        rms_log_error_before: loss_before.sqrt(),
        rms_log_error_after: loss_after.sqrt(),
    }
}
