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

use std::collections::BTreeSet;

use rayon::prelude::*;

use super::predict::{plan_as_measured, predict};
use super::schema::Measurement;
use crate::collective::{Algorithm, Op, Plan, Protocol};
use crate::config::hardware::{CtaRates, HardwareModel, PathCost};
use crate::stack::Stack;
use crate::topology::{Blueprint, Topology};
use crate::transport::PathClass;
use crate::units::{Bandwidth, Time};

type Read = Box<dyn Fn(&HardwareModel) -> f64 + Sync + Send>;
type Write = Box<dyn Fn(&mut HardwareModel, f64) + Sync + Send>;

/// What a parameter's number is, for printing and for its overlay value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds.
    Time,
    /// GB/s.
    Rate,
    /// A plain number.
    Ratio,
}

/// A number in the model the fit may change, within physical bounds.
pub struct Parameter {
    /// Its key in the model file ("protocol.simple.nvlink.step_latency").
    pub key: String,
    pub unit: Unit,
    /// Smallest and largest value the fit may set.
    pub bounds: (f64, f64),
    get: Read,
    set: Write,
}

impl Parameter {
    pub fn get(&self, model: &HardwareModel) -> f64 {
        (self.get)(model)
    }
    pub fn set(&self, model: &mut HardwareModel, value: f64) {
        (self.set)(model, value.clamp(self.bounds.0, self.bounds.1))
    }
    /// Whether `value` sits on one of the bounds (within 0.1% of it).
    pub fn on_bound(&self, value: f64) -> bool {
        let near = |bound: f64| (value - bound).abs() <= 1e-3 * bound.abs().max(1e-6);
        near(self.bounds.0) || near(self.bounds.1)
    }
}

pub(super) fn parameter(
    key: String,
    unit: Unit,
    bounds: (f64, f64),
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    Parameter { key, unit, bounds, get: Box::new(get), set: Box::new(set) }
}

pub(super) fn time(
    key: String,
    get: impl Fn(&HardwareModel) -> Time + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, Time) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Time, (0.0, 100.0), move |m| get(m).as_us(), move |m, us| set(m, Time::from_us_f64(us)))
}

/// A fraction of a peak rate (0.01 to 1).
pub(super) fn ratio(
    key: String,
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Ratio, (0.01, 1.0), get, set)
}

/// An exponent of 1 or more (a curve's sharpness).
pub(super) fn exponent(
    key: String,
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Ratio, (1.0, 64.0), get, set)
}

fn rate(
    key: String,
    get: impl Fn(&HardwareModel) -> Bandwidth + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, Bandwidth) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Rate, (0.1, 5000.0), move |m| get(m).as_gbps(), move |m, gbps| set(m, Bandwidth::from_gbps_f64(gbps)))
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

/// The latencies of one protocol over one kind of path.
fn latency_parameters(protocol: Protocol, class: PathClass) -> Vec<Parameter> {
    let prefix = format!("protocol.{protocol}.{}", class_name(class));
    vec![
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
    ]
}

/// The thread-block rates of one architecture and protocol (set on that
/// architecture's own table, which then no longer follows another's).
fn cta_parameters(arch: &str, protocol: Protocol) -> Vec<Parameter> {
    type Field = fn(&mut CtaRates) -> &mut Bandwidth;
    let fields: [(&str, Field); 3] = [("load", |r| &mut r.load), ("store", |r| &mut r.store), ("remote_store", |r| &mut r.remote_store)];
    fields
        .into_iter()
        .map(|(name, field)| {
            let (get_arch, set_arch) = (arch.to_string(), arch.to_string());
            rate(
                format!("cta.{arch}.{protocol}.{name}"),
                move |m| {
                    let mut rates = m.cta_rates(&get_arch, protocol).expect("grouped only where rates exist");
                    *field(&mut rates)
                },
                move |m, v| {
                    let mut rates = m.cta_rates(&set_arch, protocol).expect("grouped only where rates exist");
                    *field(&mut rates) = v;
                    let table = m.cta.get_mut(&set_arch).expect("grouped only where the table exists");
                    match protocol {
                        Protocol::Simple => table.simple = Some(rates),
                        Protocol::Ll => table.ll = Some(rates),
                        Protocol::Ll128 => table.ll128 = Some(rates),
                    }
                },
            )
        })
        .collect()
}

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

/// Copies from this size up constrain link rates.
const LARGE_COPY: u64 = 64 << 20;
/// Collectives from this size up are set by bandwidth.
const LARGE: u64 = 16 << 20;
/// ... and fitted up to this size: larger ones add simulation time, not information.
const LARGEST: u64 = 256 << 20;
/// Collectives up to this size are set by latency.
const SMALL: u64 = 4 << 10;

/// How a collective measurement runs in the starting model.
struct Run {
    index: Point,
    plan: Plan,
    m: Measurement,
}

impl Run {
    fn ranks(&self) -> usize {
        self.plan.request.ranks.len()
    }
    /// Steps a call of this shape takes, as latency sees it.
    fn steps(&self) -> usize {
        let n = self.ranks();
        match (self.plan.algorithm, self.plan.request.op) {
            (_, Op::AllReduce) => 2 * (n - 1),
            _ => n - 1,
        }
    }
    fn ring_or_tree(&self) -> bool {
        matches!(self.plan.algorithm, Algorithm::Ring | Algorithm::Tree)
    }
}

/// The groups the given measurements can constrain, in fitting order, and
/// those they cannot. The first source's GPU names the architecture and the
/// PCIe generation fitted.
pub fn groups(topologies: &[Topology], model: &HardwareModel, sources: &[Source]) -> (Vec<Group>, Vec<Skipped>) {
    let Some(topo) = topologies.first() else { return (Vec::new(), Vec::new()) };
    let mut out = copy_groups(topo, model, sources);
    // Compute curves: one group per GPU and kind of kernel measured.
    out.extend(super::compute_fit::groups(topologies, model, sources));
    let mut skipped = Vec::new();
    let runs: Vec<Run> = sources
        .iter()
        .zip(topologies)
        .enumerate()
        .flat_map(|(s, (source, topo))| {
            source
                .measurements
                .iter()
                .enumerate()
                .filter(|(_, m)| m.is_collective() && m.bytes <= LARGEST)
                .filter_map(move |(i, m)| plan_as_measured(topo, model, m).ok().map(|plan| Run { index: (s, i), plan, m: m.clone() }))
        })
        .collect();
    let arch = model.gpu(&topo.gpu_model).map(|g| format!("sm{}", g.arch)).unwrap_or_default();
    let mut push = |group: Group, identified: bool, reason: String| {
        if identified {
            out.push(group);
        } else if !group.points.is_empty() || group.name.starts_with("thread blocks") {
            skipped.push(Skipped { name: group.name, reason });
        }
    };
    for protocol in crate::collective::PROTOCOLS {
        // One channel over NVLink: the thread block alone sets the rate.
        let alone: Vec<&Run> = runs
            .iter()
            .filter(|r| r.plan.protocol == protocol && r.plan.class == PathClass::Nvlink && r.plan.channels == 1 && r.m.bytes >= LARGE)
            .collect();
        let shapes: BTreeSet<(Op, usize)> = alone.iter().map(|r| (r.plan.request.op, r.ranks())).collect();
        let needs = "one-channel runs (icsim calibrate run --channels 1) of at least three of allreduce/allgather/reducescatter at 2 and 4 GPUs over NVLink, from 16 MiB".to_string();
        push(
            Group {
                name: format!("thread blocks {protocol} on {arch}"),
                parameters: cta_parameters(&arch, protocol),
                points: alone.iter().map(|r| r.index).collect(),
                needs: needs.clone(),
            },
            shapes.len() >= 3 && model.cta.contains_key(&arch),
            format!("{} one-channel shapes; needs {needs}", shapes.len()),
        );
        // One channel through host memory: the path's own rate.
        let shm: Vec<Point> = runs
            .iter()
            .filter(|r| r.plan.protocol == protocol && r.plan.class == PathClass::Shm && r.plan.channels == 1 && r.m.bytes >= LARGE)
            .map(|r| r.index)
            .collect();
        let key = format!("protocol.{protocol}.shm.channel_rate");
        let shm_group = Group {
            name: format!("{protocol} channel through host memory"),
            parameters: vec![rate(
                key,
                move |m| path_cost_ref(m, protocol, PathClass::Shm).channel_rate.unwrap_or(Bandwidth::gbps(1000)),
                move |m, v| path_cost(m, protocol, PathClass::Shm).channel_rate = Some(v),
            )],
            points: shm.clone(),
            needs: "one-channel runs through host memory (--transports shm --channels 1) from 16 MiB".into(),
        };
        let identified = !shm.is_empty();
        push(shm_group, identified, "no one-channel runs through host memory".into());
    }
    // Many channels on a link: the contention knee (NVLink), and what GPU
    // threads reading host memory get of their PCIe link (SHM).
    let crowded = |class: PathClass| -> Vec<Point> {
        runs.iter()
            .filter(|r| {
                r.plan.class == class
                    && r.plan.algorithm == Algorithm::Ring
                    && r.plan.protocol != Protocol::Ll
                    && r.plan.channels >= 4
                    && r.m.bytes >= 64 << 20
            })
            .map(|r| r.index)
            .collect()
    };
    let nvlink = crowded(PathClass::Nvlink);
    push(
        Group {
            name: "channels sharing NVLink".into(),
            parameters: vec![parameter(
                "contention.sharpness".into(),
                Unit::Ratio,
                (0.5, 50.0),
                |m| m.contention.sharpness,
                |m, v| m.contention.sharpness = v,
            )],
            points: nvlink.clone(),
            needs: "large Simple or LL128 rings over NVLink with 4 or more channels".into(),
        },
        !nvlink.is_empty(),
        "no large multi-channel rings over NVLink".into(),
    );
    if let Some(generation) = model.gpu(&topo.gpu_model).ok().map(|g| g.pcie_generation.clone()) {
        let shm = crowded(PathClass::Shm);
        let (get_gen, set_gen) = (generation.clone(), generation.clone());
        push(
            Group {
                name: format!("GPU threads reading host memory over PCIe {generation}"),
                parameters: vec![parameter(
                    format!("pcie.{generation}.host_read_efficiency"),
                    Unit::Ratio,
                    (0.01, 1.0),
                    move |m| m.pcie[&get_gen].host_read_efficiency,
                    move |m, v| m.pcie.get_mut(&set_gen).expect("generation exists").host_read_efficiency = v,
                )],
                points: shm.clone(),
                needs: "large rings through host memory with 4 or more channels".into(),
            },
            !shm.is_empty(),
            "no large multi-channel rings through host memory".into(),
        );
    }
    // Latencies: a few bytes from the reference caller, at two step counts
    // or more (one count cannot tell a call's cost from a step's); for
    // Simple also medium calls, whose many slices a step tell its fence
    // per slice from its step latency.
    for protocol in crate::collective::PROTOCOLS {
        for class in [PathClass::Nvlink, PathClass::Pcie, PathClass::Shm] {
            let reference = |r: &&Run| {
                r.plan.protocol == protocol && r.plan.class == class && r.ring_or_tree() && r.plan.request.stack == Stack::NcclGraph
            };
            let small: Vec<&Run> = runs.iter().filter(reference).filter(|r| r.m.bytes <= SMALL).collect();
            let medium: Vec<&Run> = runs
                .iter()
                .filter(reference)
                .filter(|r| {
                    protocol == Protocol::Simple && r.plan.algorithm == Algorithm::Ring && r.m.bytes > SMALL * 16 && r.m.bytes < LARGE
                })
                .collect();
            let steps: BTreeSet<usize> = small.iter().map(|r| r.steps()).collect();
            let mut parameters = latency_parameters(protocol, class);
            let mut needs = format!(
                "calls of at most 4 KiB over {} with {protocol} from raw NCCL in a CUDA graph (nccl-graph) at two step counts or more (allreduce and allgather, or 2 and 4 GPUs)",
                class_name(class)
            );
            let mut identified = steps.len() >= 2;
            // Through host memory a Simple step's own cost swamps the fence
            // per slice: the data cannot tell them apart, so it stays at zero.
            if protocol == Protocol::Simple && class != PathClass::Shm {
                parameters.push(time(
                    format!("protocol.simple.{}.slice_overhead", class_name(class)),
                    move |m| path_cost_ref(m, Protocol::Simple, class).slice_overhead,
                    move |m, v| path_cost(m, Protocol::Simple, class).slice_overhead = v,
                ));
                needs += ", and Simple rings from 64 KiB to 16 MiB";
                identified &= !medium.is_empty();
            }
            push(
                Group {
                    name: format!("{protocol} latency over {}", class_name(class)),
                    parameters,
                    points: small.iter().chain(&medium).map(|r| r.index).collect(),
                    needs: needs.clone(),
                },
                identified,
                format!("{} step count(s); needs {needs}", steps.len()),
            );
        }
    }
    // Each other caller's own cost per call, on top of what is fitted above.
    for stack in crate::stack::STACKS.into_iter().filter(|s| *s != Stack::NcclGraph) {
        let points: Vec<Point> =
            runs.iter().filter(|r| r.plan.request.stack == stack && r.m.bytes <= SMALL && r.ring_or_tree()).map(|r| r.index).collect();
        let key = format!("stack.{stack}.collective_call");
        let (get_name, set_name) = (stack.name(), stack.name());
        push(
            Group {
                name: format!("{stack} caller"),
                parameters: vec![time(
                    key,
                    move |m| m.stack[get_name].collective_call,
                    move |m, v| m.stack.get_mut(set_name).expect("every stack is in the model").collective_call = v,
                )],
                points: points.clone(),
                needs: format!("small collectives measured through {stack}"),
            },
            !points.is_empty(),
            format!("no small collectives measured through {stack}"),
        );
    }
    // NVLS: the switch's reduction rate and its latency.
    let nvls: Vec<&Run> = runs.iter().filter(|r| r.plan.algorithm == Algorithm::Nvls).collect();
    let nvls_large: Vec<Point> = nvls.iter().filter(|r| r.m.bytes >= LARGE).map(|r| r.index).collect();
    push(
        Group {
            name: "nvls".into(),
            parameters: vec![
                parameter(
                    "nvls.efficiency_vs_nccl".into(),
                    Unit::Ratio,
                    (0.01, 1.2),
                    |m| m.nvls.efficiency_vs_nccl,
                    |m, v| m.nvls.efficiency_vs_nccl = v,
                ),
                time("nvls.latency".into(), |m| m.nvls.latency, |m, v| m.nvls.latency = v),
            ],
            points: nvls.iter().map(|r| r.index).collect(),
            needs: "NVLS allreduces (NCCL's choice with NVLS enabled) small and from 16 MiB".into(),
        },
        !nvls_large.is_empty() && nvls.len() > nvls_large.len(),
        "needs NVLS allreduces both small and from 16 MiB".into(),
    );
    (out, skipped)
}

/// One link rate per copy path family: PCIe for host copies, NVLink for
/// peer copies, HBM for copies within a GPU.
fn copy_groups(topo: &Topology, model: &HardwareModel, sources: &[Source]) -> Vec<Group> {
    let gpu_key = topo.gpu_model.clone();
    let Some(gpu) = model.gpu.get(&gpu_key) else { return Vec::new() };
    let (pcie, nvlink) = (gpu.pcie_generation.clone(), gpu.nvlink_generation.clone());
    // Link rates are fitted on large copies only: below 64 MiB the host
    // clock's fixed cost (and, within one GPU, the 60 MB L2 cache) dominates.
    // Copies timed with CUDA events are preferred where there are any: a
    // host clock adds the launch and the synchronization to every copy.
    let points = |names: &[&str]| -> Vec<Point> {
        let large: Vec<(Point, bool)> = sources
            .iter()
            .enumerate()
            .flat_map(|(s, source)| {
                source
                    .measurements
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.op == "copy" && m.bytes >= LARGE_COPY && names.contains(&m.path.as_deref().unwrap_or("")))
                    .map(move |(i, m)| ((s, i), m.timing.as_deref().is_some_and(|t| t.contains("cuda events"))))
            })
            .collect();
        let any_events = large.iter().any(|(_, events)| *events);
        large.into_iter().filter(|(_, events)| *events || !any_events).map(|(p, _)| p).collect()
    };
    let efficiency = |key: String, get: Read, set: Write| Parameter { key, unit: Unit::Ratio, bounds: (0.05, 1.0), get, set };
    let (p1, p2, n1, n2, g1, g2) = (pcie.clone(), pcie.clone(), nvlink.clone(), nvlink.clone(), gpu_key.clone(), gpu_key.clone());
    let families = [
        (
            points(&["h2d_pinned", "d2h_pinned"]),
            format!("copies over PCIe {pcie}"),
            efficiency(
                format!("pcie.{pcie}.efficiency"),
                Box::new(move |m| m.pcie[&p1].efficiency),
                Box::new(move |m, v| m.pcie.get_mut(&p2).expect("generation exists").efficiency = v),
            ),
        ),
        (
            points(&["p2p_0to1", "p2p_bidir_total"]),
            format!("copies over NVLink {nvlink}"),
            efficiency(
                format!("nvlink.{nvlink}.efficiency"),
                Box::new(move |m| m.nvlink[&n1].efficiency),
                Box::new(move |m, v| m.nvlink.get_mut(&n2).expect("generation exists").efficiency = v),
            ),
        ),
        (
            points(&["d2d_gpu0"]),
            format!("copies within one {gpu_key}"),
            efficiency(
                format!("gpu.{gpu_key}.compute.memory"),
                Box::new(move |m| m.gpu[&g1].compute.memory),
                Box::new(move |m, v| m.gpu.get_mut(&g2).expect("gpu exists").compute.memory = v),
            ),
        ),
    ];
    families
        .into_iter()
        .filter(|(points, _, _)| !points.is_empty())
        .map(|(points, name, parameter)| Group { name, parameters: vec![parameter], points, needs: "copies from 64 MiB".into() })
        .collect()
}

/// The sources' topologies under `model` (its link rates and latencies).
pub fn build_all(sources: &[Source], model: &HardwareModel) -> Result<Vec<Topology>, crate::Error> {
    sources.iter().map(|s| s.board.build(model)).collect()
}

/// Mean squared log error of `points` under `model` (a failed prediction,
/// or a model no board can be built under, counts as a large error).
fn loss(sources: &[Source], model: &HardwareModel, points: &[Point]) -> f64 {
    let Ok(topologies) = build_all(sources, model) else { return 100.0 };
    let total: f64 = points
        .par_iter()
        .map(|&(s, i)| {
            let m = &sources[s].measurements[i];
            match predict(&topologies[s], model, m) {
                Ok(p) => (p.time.as_us().max(1e-6) / m.time_us).ln().powi(2),
                Err(_) => 100.0,
            }
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
pub fn fit(sources: &[Source], start: &HardwareModel, max_evaluations: usize) -> Result<Fit, crate::Error> {
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

/// The fitted values as a model overlay: only the keys that were fitted.
pub fn overlay(fits: &[GroupFit]) -> toml::Table {
    let mut root = toml::Table::new();
    for fit in fits {
        for (key, unit, _, value) in &fit.parameters {
            let parts: Vec<&str> = key.split('.').collect();
            let mut table = &mut root;
            for part in &parts[..parts.len() - 1] {
                table = table
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                    .as_table_mut()
                    .expect("keys nest tables");
            }
            let value = match unit {
                Unit::Time => toml::Value::String(Time::from_us_f64(value.max(0.0)).to_string()),
                Unit::Rate => toml::Value::String(format!("{:.4}GB/s", value.max(0.0))),
                Unit::Ratio => toml::Value::Float((value * 1e4).round() / 1e4),
            };
            table.insert(parts[parts.len() - 1].to_string(), value);
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
    fn overlays_nest_keys_and_print_values_with_units() {
        let fits = vec![GroupFit {
            name: "g".into(),
            points: 1,
            parameters: vec![
                ("protocol.simple.nvlink.step_latency".into(), Unit::Time, 3.4, 2.5),
                ("pcie.gen5.efficiency".into(), Unit::Ratio, 0.8, 0.87654),
                ("cta.sm90.ll.load".into(), Unit::Rate, 20.0, 21.5),
            ],
            on_bound: vec![],
            needs: String::new(),
            rms_log_error_before: 0.1,
            rms_log_error_after: 0.01,
        }];
        let table = overlay(&fits);
        assert_eq!(table["protocol"]["simple"]["nvlink"]["step_latency"].as_str(), Some("2.5us"));
        assert_eq!(table["pcie"]["gen5"]["efficiency"].as_float(), Some(0.8765));
        assert_eq!(table["cta"]["sm90"]["ll"]["load"].as_str(), Some("21.5000GB/s"));
    }

    #[test]
    fn a_value_on_its_bound_is_caught() {
        let p = parameter("x".into(), Unit::Ratio, (0.0, 1.0), |_| 0.0, |_, _| {});
        assert!(p.on_bound(0.0) && p.on_bound(1.0) && !p.on_bound(0.5));
    }
}
