//! Fitting the hardware model to measurements by least squares: the model's
//! parameters are grouped by what the measurements can see (a copy path, a
//! kernel class, one protocol over one kind of path), and each group is
//! fitted by Nelder-Mead on the mean squared log error of its points, with
//! the simulation in the loop. Groups go in an order where earlier ones do
//! not depend on later ones: copies (link rates), kernels, collectives.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::predict::predict;
use super::schema::Measurement;
use crate::collective::Protocol;
use crate::config::hardware::{HardwareModel, PathCost};
use crate::topology::Topology;
use crate::transport::PathClass;
use crate::units::Time;

type Read = Box<dyn Fn(&HardwareModel) -> f64 + Sync + Send>;
type Write = Box<dyn Fn(&mut HardwareModel, f64) + Sync + Send>;

/// A number in the model the fit may change.
pub struct Parameter {
    /// Its key in the model file ("protocol.simple.nvlink.step_latency").
    pub key: String,
    /// Times are fitted in microseconds, ratios as they are.
    pub is_time: bool,
    /// The values the fit may give it.
    range: (f64, f64),
    get: Read,
    set: Write,
}

impl Parameter {
    pub fn get(&self, model: &HardwareModel) -> f64 {
        (self.get)(model)
    }
    pub fn set(&self, model: &mut HardwareModel, value: f64) {
        (self.set)(model, value.clamp(self.range.0, self.range.1))
    }
}

pub(super) fn ratio(
    key: String,
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    Parameter { key, is_time: false, range: (0.01, 4.0), get: Box::new(get), set: Box::new(set) }
}

/// An exponent of 1 or more (a curve's sharpness).
pub(super) fn exponent(
    key: String,
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    Parameter { key, is_time: false, range: (1.0, 64.0), get: Box::new(get), set: Box::new(set) }
}

pub(super) fn time(
    key: String,
    get: impl Fn(&HardwareModel) -> Time + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, Time) + Sync + Send + 'static,
) -> Parameter {
    Parameter {
        key,
        is_time: true,
        range: (0.0, 1e5),
        get: Box::new(move |m| get(m).as_us()),
        set: Box::new(move |m, us| set(m, Time::from_us_f64(us))),
    }
}

fn class_name(class: PathClass) -> &'static str {
    match class {
        PathClass::Nvlink => "nvlink",
        PathClass::Pcie => "pcie",
        PathClass::Shm => "shm",
    }
}

fn path_cost(model: &mut HardwareModel, protocol: Protocol, class: PathClass) -> &mut PathCost {
    let p = match protocol {
        Protocol::Simple => &mut model.protocol.simple,
        Protocol::Ll => &mut model.protocol.ll,
        Protocol::Ll128 => &mut model.protocol.ll128,
    };
    match class {
        PathClass::Nvlink => &mut p.nvlink,
        PathClass::Pcie => &mut p.pcie,
        PathClass::Shm => &mut p.shm,
    }
}

fn path_cost_ref(model: &HardwareModel, protocol: Protocol, class: PathClass) -> &PathCost {
    let p = protocol.model(model);
    match class {
        PathClass::Nvlink => &p.nvlink,
        PathClass::Pcie => &p.pcie,
        PathClass::Shm => &p.shm,
    }
}

/// The costs of one protocol over one kind of path.
pub fn protocol_parameters(protocol: Protocol, class: PathClass) -> Vec<Parameter> {
    let prefix = format!("protocol.{protocol}.{}", class_name(class));
    let mut out = vec![
        ratio(
            format!("{prefix}.channel_efficiency"),
            move |m| path_cost_ref(m, protocol, class).channel_efficiency,
            move |m, v| path_cost(m, protocol, class).channel_efficiency = v,
        ),
        time(
            format!("{prefix}.base_latency"),
            move |m| path_cost_ref(m, protocol, class).base_latency,
            move |m, v| path_cost(m, protocol, class).base_latency = v,
        ),
        time(
            format!("{prefix}.step_latency"),
            move |m| path_cost_ref(m, protocol, class).step_latency,
            move |m, v| path_cost(m, protocol, class).step_latency = v,
        ),
    ];
    if protocol == Protocol::Simple {
        out.push(time(
            format!("{prefix}.slice_overhead"),
            move |m| path_cost_ref(m, protocol, class).slice_overhead,
            move |m, v| path_cost(m, protocol, class).slice_overhead = v,
        ));
    }
    out
}

/// Copies from this size up constrain link rates.
const LARGE_COPY: u64 = 64 << 20;

/// A group of parameters and the measurements that constrain them.
pub struct Group {
    pub name: String,
    pub parameters: Vec<Parameter>,
    /// Indices into the measurement list.
    pub points: Vec<usize>,
}

/// The groups the given measurements can constrain, in fitting order.
pub fn groups(topo: &Topology, model: &HardwareModel, measurements: &[Measurement]) -> Vec<Group> {
    let gpu_key = topo.gpu_model.clone();
    let gpu = model.gpu.get(&gpu_key);
    let pcie_generation = gpu.map(|g| g.pcie_generation.clone()).unwrap_or_default();
    let nvlink_generation = gpu.map(|g| g.nvlink_generation.clone()).unwrap_or_default();
    let mut out: Vec<Group> = Vec::new();
    let indices = |keep: &dyn Fn(&Measurement) -> bool| -> Vec<usize> {
        measurements.iter().enumerate().filter(|(_, m)| keep(m)).map(|(i, _)| i).collect()
    };
    // Link rates are fitted on large copies only: below 64 MiB the host
    // clock's fixed cost (and, within one GPU, the 60 MB L2 cache) dominates.
    let is_copy =
        |m: &Measurement, names: &[&str]| m.op == "copy" && m.bytes >= LARGE_COPY && names.contains(&m.path.as_deref().unwrap_or(""));

    // One link rate per copy path family: PCIe for host copies, NVLink for
    // peer copies, HBM for copies within a GPU.
    let (pcie, nvlink, gpu_for_get, gpu_for_set) = (pcie_generation.clone(), nvlink_generation.clone(), gpu_key.clone(), gpu_key.clone());
    let (pcie_set, nvlink_set) = (pcie.clone(), nvlink.clone());
    let copy_groups: [(&[&str], String, Parameter); 3] = [
        (
            &["h2d_pinned", "d2h_pinned"],
            format!("copies over PCIe {pcie_generation}"),
            ratio(
                format!("pcie.{pcie_generation}.efficiency"),
                move |m| m.pcie[&pcie].efficiency,
                move |m, v| m.pcie.get_mut(&pcie_set).expect("generation exists").efficiency = v.min(1.0),
            ),
        ),
        (
            &["p2p_0to1", "p2p_bidir_total"],
            format!("copies over NVLink {nvlink_generation}"),
            ratio(
                format!("nvlink.{nvlink_generation}.efficiency"),
                move |m| m.nvlink[&nvlink].efficiency,
                move |m, v| m.nvlink.get_mut(&nvlink_set).expect("generation exists").efficiency = v.min(1.0),
            ),
        ),
        (
            &["d2d_gpu0"],
            format!("copies within one {gpu_key}"),
            ratio(
                format!("gpu.{gpu_key}.compute.memory"),
                move |m| m.gpu[&gpu_for_get].compute.memory,
                move |m, v| m.gpu.get_mut(&gpu_for_set).expect("gpu exists").compute.memory = v.min(1.0),
            ),
        ),
    ];
    for (paths, name, parameter) in copy_groups {
        let points = indices(&|m| is_copy(m, paths));
        if !points.is_empty() {
            out.push(Group { name, parameters: vec![parameter], points });
        }
    }
    // Compute curves: one group per GPU and kind of kernel measured.
    out.extend(super::compute_fit::groups(topo, model, measurements));

    // Collectives: one group per protocol and kind of path, with the points
    // where NCCL's tuner (whose constants are not fitted) picks it.
    let mut by_cost: BTreeMap<(PathClass, Protocol), Vec<usize>> = BTreeMap::new();
    for (i, m) in measurements.iter().enumerate().filter(|(_, m)| m.is_collective()) {
        let class = match m.transport.as_deref() {
            Some("shm") => PathClass::Shm,
            Some("p2p") => PathClass::Pcie,
            _ => PathClass::Nvlink,
        };
        let Ok(prediction) = predict(topo, model, m) else { continue };
        let protocol = match prediction.detail.rsplit('/').next() {
            Some("ll") => Protocol::Ll,
            Some("ll128") => Protocol::Ll128,
            _ => Protocol::Simple,
        };
        by_cost.entry((class, protocol)).or_default().push(i);
    }
    for ((class, protocol), points) in by_cost {
        out.push(Group {
            name: format!("{protocol} over {}", class_name(class)),
            parameters: protocol_parameters(protocol, class),
            points,
        });
    }
    out
}

/// Mean squared log error of `points` under `model` (a failed prediction
/// counts as a large error).
fn loss(topo: &Topology, model: &HardwareModel, measurements: &[Measurement], points: &[usize]) -> f64 {
    let total: f64 = points
        .par_iter()
        .map(|&i| match predict(topo, model, &measurements[i]) {
            Ok(p) => (p.time.as_us().max(1e-6) / measurements[i].time_us).ln().powi(2),
            Err(_) => 100.0,
        })
        .sum();
    total / points.len().max(1) as f64
}

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

/// What one group's fit changed.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFit {
    pub name: String,
    pub points: usize,
    /// (key, before, after), times in microseconds.
    pub parameters: Vec<(String, f64, f64)>,
    pub rms_log_error_before: f64,
    pub rms_log_error_after: f64,
}

/// Fits every group in turn; returns the fitted model and what changed.
pub fn fit(topo: &Topology, start: &HardwareModel, measurements: &[Measurement], max_evaluations: usize) -> (HardwareModel, Vec<GroupFit>) {
    let mut model = start.clone();
    let mut fits = Vec::new();
    for group in groups(topo, start, measurements) {
        let before: Vec<f64> = group.parameters.iter().map(|p| p.get(&model)).collect();
        // Search in units of each parameter's own size, so that a step of
        // 0.1 is 10% of it (or 0.5 us / 0.05 for one that starts at zero).
        let scales: Vec<f64> = group
            .parameters
            .iter()
            .zip(&before)
            .map(|(p, &v)| {
                if v.abs() > 1e-9 {
                    v.abs()
                } else if p.is_time {
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
        let objective = |x: &[f64]| loss(topo, &apply(x), measurements, &group.points);
        let loss_before = objective(&start_point);
        let (best, loss_after) = nelder_mead(objective, &start_point, &steps, max_evaluations);
        let (best, loss_after) = if loss_after < loss_before { (best, loss_after) } else { (start_point.clone(), loss_before) };
        model = apply(&best);
        let after: Vec<f64> = group.parameters.iter().map(|p| p.get(&model)).collect();
        fits.push(GroupFit {
            name: group.name.clone(),
            points: group.points.len(),
            parameters: group.parameters.iter().zip(before.iter().zip(&after)).map(|(p, (b, a))| (p.key.clone(), *b, *a)).collect(),
            rms_log_error_before: loss_before.sqrt(),
            rms_log_error_after: loss_after.sqrt(),
        });
    }
    (model, fits)
}

/// The fitted values as a model overlay: only the keys that were fitted.
pub fn overlay(fits: &[GroupFit]) -> toml::Table {
    let mut root = toml::Table::new();
    for fit in fits {
        for (key, _, value) in &fit.parameters {
            let parts: Vec<&str> = key.split('.').collect();
            let mut table = &mut root;
            for part in &parts[..parts.len() - 1] {
                table = table
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                    .as_table_mut()
                    .expect("keys nest tables");
            }
            let leaf = parts[parts.len() - 1];
            let is_time =
                leaf.ends_with("latency") || leaf.ends_with("overhead") || leaf.ends_with("_floor") || parts[0] == "copy_overhead";
            let value = if is_time {
                toml::Value::String(Time::from_us_f64(value.max(0.0)).to_string())
            } else {
                toml::Value::Float((value * 1e4).round() / 1e4)
            };
            table.insert(leaf.to_string(), value);
        }
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_the_bottom_of_a_bowl() {
        let (x, value) = nelder_mead(|p| (p[0] - 3.0).powi(2) + 10.0 * (p[1] + 1.0).powi(2), &[0.0, 0.0], &[1.0, 1.0], 2000);
        assert!((x[0] - 3.0).abs() < 1e-3 && (x[1] + 1.0).abs() < 1e-3 && value < 1e-6, "{x:?} {value}");
    }

    #[test]
    fn overlays_nest_keys_and_print_times_with_units() {
        let fits = vec![GroupFit {
            name: "g".into(),
            points: 1,
            parameters: vec![("protocol.simple.nvlink.step_latency".into(), 3.4, 2.5), ("pcie.gen5.efficiency".into(), 0.8, 0.87654)],
            rms_log_error_before: 0.1,
            rms_log_error_after: 0.01,
        }];
        let table = overlay(&fits);
        assert_eq!(table["protocol"]["simple"]["nvlink"]["step_latency"].as_str(), Some("2.5us"));
        assert_eq!(table["pcie"]["gen5"]["efficiency"].as_float(), Some(0.8765));
    }
}
