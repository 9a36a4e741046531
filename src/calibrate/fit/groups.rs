//! Which parameter groups the measurements can identify, in fitting order:
//! copies (link rates, in `copies`), thread-block rates (one-channel collectives), a
//! channel's rate through host memory, the contention of many channels on a
//! link, latencies per protocol and path, how much calls with empty chunks
//! overlap in a stream, each other caller's cost, and NVLS; a group its
//! data cannot identify is skipped with the reason.

use std::collections::BTreeSet;

use super::copies::copy_groups;
use super::parameters::{
    Parameter, Unit, arch_latency_parameters, class_name, cta_parameters, latency_parameters, parameter, path_cost, path_cost_ref,
    protocol_mut, rate, time,
};
use super::{Group, Point, Skipped, Source};
use crate::calibrate::predict::plan_as_measured;
use crate::calibrate::schema::Measurement;
use crate::collective::{Algorithm, Op, Plan, Protocol};
use crate::config::hardware::{HardwareModel, HostShares, KernelStart, PathCost, StackModel};
use crate::stack::Stack;
use crate::topology::Topology;
use crate::transport::PathClass;
use crate::units::{Bandwidth, Time};

/// Collectives from this size up are set by bandwidth.
const LARGE: u64 = 16 << 20;
/// ... and fitted up to this size: larger ones add simulation time, not
/// information, except on how channels drift apart over hundreds of steps.
const LARGEST: u64 = 256 << 20;
/// Collectives up to this size are set by latency.
const SMALL: u64 = 4 << 10;
/// LL calls up to this size are still set by latency on many channels.
const SKEWED_LARGEST: u64 = 512 << 10;
/// An architecture's own latency shows in calls up to this size.
const ARCH_LATENCY_LARGEST: u64 = 64 << 10;

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
        crate::collective::rate::ring_sends(self.plan.request.op, self.ranks())
    }
    fn ring_or_tree(&self) -> bool {
        matches!(self.plan.algorithm, Algorithm::Ring | Algorithm::Tree)
    }
    /// Whether this allreduce leaves chunks empty, so that in a stream its
    /// ranks start the next call early (src/collective/waits.rs).
    fn overlaps_next_call(&self) -> bool {
        let carrying = crate::collective::carrying_chunks(self.m.bytes, self.ranks());
        crate::collective::overlapped_steps(self.ranks(), carrying) > 0.0
    }
    /// Whether many channels share a link of `class` in this run, with a
    /// protocol `keep` takes: a ring of 4 or more channels, 64 MiB or more.
    fn crowds(&self, class: PathClass, keep: fn(Protocol) -> bool) -> bool {
        self.plan.class == class
            && self.plan.algorithm == Algorithm::Ring
            && keep(self.plan.protocol)
            && self.plan.channels >= 4
            && self.m.bytes >= 64 << 20
    }
}

/// The groups the given measurements can constrain, in fitting order, and
/// those they cannot. The first source's GPU names the architecture and the
/// PCIe generation fitted.
pub fn groups(topologies: &[Topology], model: &HardwareModel, sources: &[Source]) -> (Vec<Group>, Vec<Skipped>) {
    let Some(topo) = topologies.first() else { return (Vec::new(), Vec::new()) };
    let mut out = copy_groups(topo, model, sources);
    // Compute curves: one group per GPU and kind of kernel measured.
    out.extend(crate::calibrate::compute_fit::groups(topologies, model, sources));
    let every_size: Vec<Run> = sources
        .iter()
        .zip(topologies)
        .enumerate()
        .flat_map(|(s, (source, topo))| {
            source
                .measurements
                .iter()
                .enumerate()
                .filter(|(_, m)| m.is_collective())
                .filter_map(move |(i, m)| plan_as_measured(topo, model, m).ok().map(|plan| Run { index: (s, i), plan, m: m.clone() }))
        })
        .collect();
    let (runs, larger): (Vec<Run>, Vec<Run>) = every_size.into_iter().partition(|r| r.m.bytes <= LARGEST);
    let arch = model.gpu(&topo.gpu_model).map(|g| format!("sm{}", g.arch)).unwrap_or_default();
    let follows_another = model.cta.get(&arch).is_some_and(|c| c.like.is_some());
    let context = Context { runs, larger, model, topo, arch };
    // An architecture whose thread blocks follow another's fits only its
    // own latency; everything else stays as fitted on the one it follows.
    let builders: &[Builder] = if follows_another {
        &[arch_latency]
    } else {
        &[thread_blocks, contention, host_memory, latencies, kernel_starts, call_overlap, callers, channel_skew, nvls]
    };
    let mut found = Found { out, skipped: Vec::new() };
    for builder in builders {
        builder(&context, &mut found);
    }
    (found.out, found.skipped)
}

/// What every builder of groups reads: the collective runs in the starting
/// model (up to `LARGEST`, and `larger` ones), the model, the first board
/// and its GPU's architecture.
struct Context<'a> {
    runs: Vec<Run>,
    larger: Vec<Run>,
    model: &'a HardwareModel,
    topo: &'a Topology,
    arch: String,
}

impl Context<'_> {
    /// Runs in which many channels share a link of `class` with a protocol
    /// `keep` takes (see [`Run::crowds`]).
    fn crowded(&self, class: PathClass, keep: fn(Protocol) -> bool) -> Vec<Point> {
        self.runs.iter().filter(|r| r.crowds(class, keep)).map(|r| r.index).collect()
    }
}

/// Adds the groups of one concept to what is found.
type Builder = fn(&Context, &mut Found);

/// The groups found so far, and those skipped with the reason.
struct Found {
    out: Vec<Group>,
    skipped: Vec<Skipped>,
}

impl Found {
    /// A group is fitted only where its data can place every parameter: the
    /// right kind of runs, and at least as many of them as parameters.
    fn push(&mut self, group: Group, identified: bool, reason: String) {
        let (points, parameters) = (group.points.len(), group.parameters.len());
        if identified && points >= parameters {
            self.out.push(group);
        } else if identified {
            let reason = format!("{points} point(s) for {parameters} parameters; needs {}", group.needs);
            self.skipped.push(Skipped { name: group.name, reason });
        } else if points > 0 || group.name.starts_with("thread blocks") {
            self.skipped.push(Skipped { name: group.name, reason });
        }
    }
}

/// An architecture whose thread blocks follow another's: its calls place
/// only what it adds to a call's start and to a step.
fn arch_latency(context: &Context, found: &mut Found) {
    let Context { runs, arch, .. } = context;
    let small: Vec<&Run> = runs.iter().filter(|r| r.ring_or_tree() && r.m.bytes <= ARCH_LATENCY_LARGEST).collect();
    let steps: BTreeSet<usize> = small.iter().map(|r| r.steps()).collect();
    let needs = format!("ring or tree calls of at most 64 KiB on {arch} at two step counts or more");
    found.push(
        Group {
            name: format!("latency of {arch}"),
            parameters: arch_latency_parameters(arch),
            points: small.iter().map(|r| r.index).collect(),
            needs: needs.clone(),
        },
        steps.len() >= 2,
        format!("{} step count(s); needs {needs}", steps.len()),
    );
}

/// One channel alone, per protocol: the thread block's rates over NVLink,
/// and the channel's rate through host memory.
fn thread_blocks(context: &Context, found: &mut Found) {
    let Context { runs, model, arch, .. } = context;
    for protocol in crate::collective::PROTOCOLS {
        // One channel over NVLink: the thread block alone sets the rate.
        let alone: Vec<&Run> = runs
            .iter()
            .filter(|r| r.plan.protocol == protocol && r.plan.class == PathClass::Nvlink && r.plan.channels == 1 && r.m.bytes >= LARGE)
            .collect();
        let shapes: BTreeSet<(Op, usize)> = alone.iter().map(|r| (r.plan.request.op, r.ranks())).collect();
        let needs = "one-channel runs (icsim calibrate run --channels 1) of at least three of allreduce/allgather/reducescatter at 2 and 4 GPUs over NVLink, from 16 MiB".to_string();
        found.push(
            Group {
                name: format!("thread blocks {protocol} on {arch}"),
                parameters: cta_parameters(arch, protocol),
                points: alone.iter().map(|r| r.index).collect(),
                needs: needs.clone(),
            },
            shapes.len() >= 3 && model.cta.contains_key(arch.as_str()),
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
        found.push(shm_group, identified, "no one-channel runs through host memory".into());
    }
}

/// Many channels on NVLink: the contention knee, and channels drifting
/// apart over the longest calls.
fn contention(context: &Context, found: &mut Found) {
    let Context { larger, .. } = context;
    // Many channels on a link: the contention knee.
    let contention = |key: &str, bounds: (f64, f64), get: fn(&HardwareModel) -> f64, set: fn(&mut HardwareModel, f64)| {
        parameter(format!("contention.{key}"), Unit::Ratio, bounds, get, set)
    };
    let nvlink = context.crowded(PathClass::Nvlink, |p| p != Protocol::Ll);
    found.push(
        Group {
            name: "channels sharing NVLink".into(),
            parameters: vec![
                contention("sharpness", (0.5, 50.0), |m| m.contention.sharpness, |m, v| m.contention.sharpness = v),
                contention("straggler", (0.0, 50.0), |m| m.contention.straggler, |m, v| m.contention.straggler = v),
            ],
            points: nvlink.clone(),
            needs: "large Simple or LL128 rings over NVLink with 4 or more channels".into(),
        },
        !nvlink.is_empty(),
        "no large multi-channel rings over NVLink".into(),
    );
    // Channels drift apart over hundreds of steps: only the longest calls
    // show it, and calls of at most `LARGEST` barely see it, so the knee
    // and the lag above stay where those place them. Channels in step and
    // apart differ in how hard they press on the link, which only calls at
    // two channel counts or more tell apart from the knee.
    let drifting_runs: Vec<&Run> = larger.iter().filter(|r| r.crowds(PathClass::Nvlink, |p| p != Protocol::Ll)).collect();
    let drifting: Vec<Point> = drifting_runs.iter().map(|r| r.index).collect();
    let channel_counts: BTreeSet<u32> = drifting_runs.iter().map(|r| r.plan.channels).collect();
    found.push(
        Group {
            name: "channels drifting apart on NVLink".into(),
            parameters: vec![contention("drift", (0.0, 1.0), |m| m.contention.drift, |m, v| m.contention.drift = v)],
            points: drifting.clone(),
            needs: "Simple or LL128 rings over NVLink above 256 MiB at two channel counts of 4 or more".into(),
        },
        channel_counts.len() >= 2,
        "no multi-channel rings over NVLink above 256 MiB at two channel counts (--channels 4,16)".into(),
    );
}

/// GPU threads reading host memory over their PCIe link: LL128's shares,
/// and Simple's read-write share.
fn host_memory(context: &Context, found: &mut Found) {
    let Context { runs, model, topo, .. } = context;
    if let Some(generation) = model.gpu(&topo.gpu_model).ok().map(|g| g.pcie_generation.clone()) {
        // Simple: the protocol NCCL runs through host memory for large
        // calls. LL128 (only where forced) polls a flag in every line it
        // reads there, and gets its own shares; LL's channels are bound by
        // their own rate before the link. A ring whose steps only read
        // there (2-rank all-gathers and reduce-scatters) sees the read
        // share, one whose steps read and write in one pass (allreduces,
        // and every ring of 3 ranks or more) the read-write share too.
        let ll128 = context.crowded(PathClass::Shm, |p| p == Protocol::Ll128);
        type Share = fn(&HostShares) -> f64;
        type SetShare = fn(&mut PathCost, f64);
        let shares: [(&str, Share, SetShare); 2] = [
            ("host_read_efficiency", |s| s.read, |c, v| c.host_read_efficiency = Some(v)),
            ("host_read_write_efficiency", |s| s.read_write, |c, v| c.host_read_write_efficiency = Some(v)),
        ];
        let ll128_shares = shares
            .into_iter()
            .map(|(key, share, set)| {
                let generation = generation.clone();
                parameter(
                    format!("protocol.ll128.shm.{key}"),
                    Unit::Ratio,
                    (0.01, 1.0),
                    move |m| share(&path_cost_ref(m, Protocol::Ll128, PathClass::Shm).host_shares(&m.pcie[&generation])),
                    move |m, v| set(path_cost(m, Protocol::Ll128, PathClass::Shm), v),
                )
            })
            .collect();
        found.push(
            Group {
                name: "ll128 threads reading host memory".into(),
                parameters: ll128_shares,
                points: ll128.clone(),
                needs: "large LL128 rings through host memory with 4 or more channels, allreduces and all-gathers (--transports shm --protos ll128)"
                    .into(),
            },
            !ll128.is_empty(),
            "no large multi-channel LL128 rings through host memory".into(),
        );
        // With Simple, what threads that only read get is measured on one
        // GPU (the base model's prior) and kept; what they get reading and
        // writing in one pass with every GPU of a board doing so is fitted,
        // on 2-rank rings: with more ranks on one socket the host's memory
        // bus binds before a GPU's link does, and those calls tell the bus,
        // not the link's share.
        let shm: Vec<Point> =
            runs.iter().filter(|r| r.ranks() == 2 && r.crowds(PathClass::Shm, |p| p == Protocol::Simple)).map(|r| r.index).collect();
        let (get_gen, set_gen) = (generation.clone(), generation.clone());
        found.push(
            Group {
                name: format!("GPU threads reading host memory over PCIe {generation}"),
                parameters: vec![parameter(
                    format!("pcie.{generation}.host_read_write_efficiency"),
                    Unit::Ratio,
                    (0.01, 1.0),
                    move |m| m.pcie[&get_gen].host_read_write_efficiency,
                    move |m, v| m.pcie.get_mut(&set_gen).expect("generation exists").host_read_write_efficiency = v,
                )],
                points: shm.clone(),
                needs: "large rings through host memory with 4 or more channels, allreduces among them".into(),
            },
            !shm.is_empty(),
            "no large multi-channel rings through host memory".into(),
        );
    }
}

/// Latencies per protocol and kind of path, from calls of a few bytes.
fn latencies(context: &Context, found: &mut Found) {
    let Context { runs, .. } = context;
    // Latencies: a few bytes, at two step counts or more (one count cannot
    // tell a call's cost from a step's), from every caller, each call with
    // its caller's own cost (fitted in the callers' groups below, in turn
    // with these); some from the reference caller, which adds nothing, so
    // that a call's cost is NCCL's, not a caller's. For Simple also medium
    // calls, whose many slices a step tell its fence per slice from its step
    // latency.
    for protocol in crate::collective::PROTOCOLS {
        for class in [PathClass::Nvlink, PathClass::Pcie, PathClass::Shm] {
            let on_path = |r: &&Run| r.plan.protocol == protocol && r.plan.class == class && r.ring_or_tree();
            let small: Vec<&Run> = runs.iter().filter(on_path).filter(|r| r.m.bytes <= SMALL).collect();
            let medium: Vec<&Run> = runs
                .iter()
                .filter(on_path)
                .filter(|r| {
                    protocol == Protocol::Simple && r.plan.algorithm == Algorithm::Ring && r.m.bytes > SMALL * 16 && r.m.bytes < LARGE
                })
                .collect();
            let steps: BTreeSet<usize> = small.iter().map(|r| r.steps()).collect();
            let mut parameters = latency_parameters(protocol, class);
            let mut needs = format!(
                "calls of at most 4 KiB over {} with {protocol} at two step counts or more (allreduce and allgather, or 2 and 4 GPUs), some from raw NCCL in a CUDA graph (nccl-graph)",
                class_name(class)
            );
            let reference = small.iter().any(|r| r.plan.request.stack == Stack::NcclGraph);
            let mut identified = steps.len() >= 2 && reference;
            // Through host memory a Simple step's own cost swamps the fence
            // per slice: the data cannot tell them apart, so it stays at the
            // fence measured on one GPU.
            if protocol == Protocol::Simple && class != PathClass::Shm {
                parameters.push(time(
                    format!("protocol.simple.{}.slice_overhead", class_name(class)),
                    move |m| path_cost_ref(m, Protocol::Simple, class).slice_overhead,
                    move |m, v| path_cost(m, Protocol::Simple, class).slice_overhead = v,
                ));
                needs += ", and Simple rings from 64 KiB to 16 MiB";
                identified &= !medium.is_empty();
            }
            found.push(
                Group {
                    name: format!("{protocol} latency over {}", class_name(class)),
                    parameters,
                    points: small.iter().chain(&medium).map(|r| r.index).collect(),
                    needs: needs.clone(),
                },
                identified,
                if reference {
                    format!("{} step count(s); needs {needs}", steps.len())
                } else {
                    format!("no nccl-graph calls; needs {needs}")
                },
            );
        }
    }
}

/// Kernels that start later than the allreduce's, per protocol.
fn kernel_starts(context: &Context, found: &mut Found) {
    let Context { runs, model, .. } = context;
    // Kernels that start later than the allreduce's: those the base model
    // gives a start of their own (a gap between the operations' small calls
    // that is the same on every path, so the kernel's), fitted on the
    // protocol's small calls of every operation on every path.
    for protocol in crate::collective::PROTOCOLS {
        let starts = &protocol.model(model).kernel_start;
        type Get = fn(&KernelStart) -> Time;
        type Set = fn(&mut KernelStart, Time);
        let fields: [(&str, Get, Set); 2] =
            [("allgather", |k| k.allgather, |k, v| k.allgather = v), ("reducescatter", |k| k.reducescatter, |k, v| k.reducescatter = v)];
        let parameters: Vec<Parameter> = fields
            .into_iter()
            .filter(|&(_, get, _)| get(starts) > Time::ZERO)
            .map(|(name, get, set)| {
                time(
                    format!("protocol.{protocol}.kernel_start.{name}"),
                    move |m| get(&protocol.model(m).kernel_start),
                    move |m, v| set(&mut protocol_mut(m, protocol).kernel_start, v),
                )
            })
            .collect();
        if parameters.is_empty() {
            continue;
        }
        let small: Vec<&Run> = runs.iter().filter(|r| r.plan.protocol == protocol && r.ring_or_tree() && r.m.bytes <= SMALL).collect();
        let ops: BTreeSet<Op> = small.iter().map(|r| r.plan.request.op).collect();
        found.push(
            Group {
                name: format!("{protocol} kernels by operation"),
                parameters,
                points: small.iter().map(|r| r.index).collect(),
                needs: format!("{protocol} calls of at most 4 KiB of every operation (allreduce, all-gather, reduce-scatter)"),
            },
            ops.len() >= 3,
            format!("{protocol} calls of at most 4 KiB of {} operation(s); needs all three", ops.len()),
        );
    }
}

/// Calls overlapping in a stream where their chunks are partly empty.
fn call_overlap(context: &Context, found: &mut Found) {
    let Context { runs, .. } = context;
    // Calls overlapping in a stream: small LL allreduces over NVLink whose
    // chunks are partly empty (fewer than 16 bytes a rank), against the
    // full ones the latencies above are fitted on. Fitted over NVLink only:
    // through host memory, whose steps are longer, it is a check the fit
    // never saw.
    let sparse: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            r.plan.algorithm == Algorithm::Ring
                && r.plan.request.op == Op::AllReduce
                && r.plan.protocol == Protocol::Ll
                && r.plan.class == PathClass::Nvlink
                && r.overlaps_next_call()
        })
        .collect();
    let needs =
        "LL allreduces of fewer than 16 bytes a rank over NVLink at 4 GPUs or more (8 and 32 B), and the latency fit's calls beside them";
    found.push(
        Group {
            name: "calls overlapping in a stream".into(),
            parameters: vec![parameter(
                "skew.call_overlap".into(),
                Unit::Ratio,
                (0.0, 1.0),
                |m| m.skew.call_overlap,
                |m, v| m.skew.call_overlap = v,
            )],
            points: sparse.iter().map(|r| r.index).collect(),
            needs: needs.into(),
        },
        !sparse.is_empty(),
        format!("no overlapping calls; needs {needs}"),
    );
}

/// Each caller's own cost besides the reference's.
fn callers(context: &Context, found: &mut Found) {
    let Context { runs, .. } = context;
    // Each other caller's own cost, on top of what is fitted above: per step
    // where its calls come at two step counts or more, else per call (one
    // count cannot tell the two apart). Not both: fitted beside the cost a
    // step, the public tables' eager calls put the cost a call on zero.
    for stack in crate::stack::STACKS.into_iter().filter(|s| *s != Stack::NcclGraph) {
        let small: Vec<&Run> = runs.iter().filter(|r| r.plan.request.stack == stack && r.m.bytes <= SMALL && r.ring_or_tree()).collect();
        let steps: BTreeSet<usize> = small.iter().map(|r| r.steps()).collect();
        type Field = (&'static str, fn(&StackModel) -> Time, fn(&mut StackModel, Time));
        let (field, get, set): Field = if steps.len() >= 2 {
            ("collective_step", |s| s.collective_step, |s, v| s.collective_step = v)
        } else {
            ("collective_call", |s| s.collective_call, |s, v| s.collective_call = v)
        };
        let name = stack.name();
        let parameter = time(
            format!("stack.{stack}.{field}"),
            move |m| get(&m.stack[name]),
            move |m, v| set(m.stack.get_mut(name).expect("every stack is in the model"), v),
        );
        found.push(
            Group {
                name: format!("{stack} caller"),
                parameters: vec![parameter],
                points: small.iter().map(|r| r.index).collect(),
                needs: format!("small collectives measured through {stack}"),
            },
            !small.is_empty(),
            format!("no small collectives measured through {stack}"),
        );
    }
}

/// Many channels ending with the slowest.
fn channel_skew(context: &Context, found: &mut Found) {
    let Context { runs, .. } = context;
    // Many channels end with the slowest: LL calls over NVLink past one
    // channel and short of the links' worth, at several channel counts.
    let skewed: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            r.ring_or_tree()
                && r.plan.protocol == Protocol::Ll
                && r.plan.class == PathClass::Nvlink
                && r.plan.channels >= 2
                && r.m.bytes > SMALL
                && r.m.bytes <= SKEWED_LARGEST
        })
        .collect();
    // The lag grows with a channel's steps and with the number of
    // channels: both must vary for the data to show it.
    let channel_counts: BTreeSet<u32> = skewed.iter().map(|r| r.plan.channels).collect();
    let step_counts: BTreeSet<usize> = skewed.iter().map(|r| r.steps()).collect();
    let needs = "LL calls over NVLink from 4 KiB to 512 KiB at two channel counts and two step counts or more (2 and 4 GPUs, or allreduce and allgather)";
    found.push(
        Group {
            name: "channels ending apart".into(),
            parameters: vec![time("skew.step_spread".into(), |m| m.skew.step_spread, |m, v| m.skew.step_spread = v)],
            points: skewed.iter().map(|r| r.index).collect(),
            needs: needs.into(),
        },
        channel_counts.len() >= 2 && step_counts.len() >= 2,
        format!("{} channel count(s) and {} step count(s); needs {needs}", channel_counts.len(), step_counts.len()),
    );
}

/// NVLS: the switch's reduction rate and its latency.
fn nvls(context: &Context, found: &mut Found) {
    let Context { runs, model, .. } = context;
    // NVLS: the switch's reduction rate and its latency.
    let nvls: Vec<&Run> = runs.iter().filter(|r| r.plan.algorithm == Algorithm::Nvls).collect();
    let nvls_large: Vec<Point> = nvls.iter().filter(|r| r.m.bytes >= LARGE).map(|r| r.index).collect();
    // NCCL shrinks the NVLS chunk for smaller calls: sizes on both sides of
    // a shrink tell the per-chunk cost from the rate.
    let nvls_chunks: BTreeSet<u64> = nvls.iter().map(|r| r.plan.nvls_chunk(model).0).collect();
    found.push(
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
                time("nvls.chunk_overhead".into(), |m| m.nvls.chunk_overhead, |m, v| m.nvls.chunk_overhead = v),
            ],
            points: nvls.iter().map(|r| r.index).collect(),
            needs: "NVLS allreduces (NCCL's choice with NVLS enabled) small and from 16 MiB, at two chunk sizes or more".into(),
        },
        !nvls_large.is_empty() && nvls.len() > nvls_large.len() && nvls_chunks.len() >= 2,
        "needs NVLS allreduces both small and from 16 MiB, at two chunk sizes or more".into(),
    );
}
