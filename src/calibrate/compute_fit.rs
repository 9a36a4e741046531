//! The GPU's compute curves as fit groups: for each class of kernel measured
//! on a GPU (matrix products, attention), the parameters of its curve
//! (compute and memory fractions, floor, blend), and for each measured
//! elementwise kernel its own rates (HBM fraction, floor, speed-up from the
//! L2 cache, a thread block's rate for one-block-a-row kernels), that the
//! measured points can tell apart. A parameter is fitted only when
//! changing it changes the predictions in a way no other parameter of the
//! group can (the columns of d ln(time) / d ln(parameter) over the points,
//! orthogonalized); the others keep their values and are named, with the
//! measurements that would identify them. Fitting itself is `fit`'s.

use super::compute::measured_kernel;
use super::fit::{Group, Parameter, Point, Source, Unit, exponent, parameter, ratio, time};
use super::predict::predict;
use super::schema::Measurement;
use crate::config::hardware::{ComputeEfficiency, HardwareModel, KernelEfficiency, Library};
use crate::topology::Topology;
use crate::units::{Bandwidth, Time};
use crate::workload::compute::{Kernel, KernelClass};
use crate::workload::gpu_key;

/// The smallest share of a parameter's effect on the predictions (a norm
/// of d ln(time) / d ln(parameter) over the points) that no other parameter
/// of its group explains, for it to be fitted.
const IDENTIFIABLE: f64 = 0.1;

/// A curve parameter: its name in `[gpu.X.compute]`, whether it is a time,
/// and what would identify it.
struct Curve {
    field: &'static str,
    get: fn(&ComputeEfficiency) -> f64,
    set: fn(&mut ComputeEfficiency, f64),
    kind: Kind,
    needs: &'static str,
}

/// What kind of number a curve parameter is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fraction,
    Time,
    Exponent,
    /// A fraction of a peak rate that may pass it (0.01 to 10).
    Multiple,
    /// GB/s.
    Rate,
}

fn curves_of(class: KernelClass) -> Vec<Curve> {
    match class {
        KernelClass::Matmul => vec![
            Curve { field: "matmul", get: |c| c.matmul, set: |c, v| c.matmul = v.min(1.0), kind: Kind::Fraction, needs: "many rows" },
            Curve {
                field: "matmul_memory",
                get: |c| c.matmul_memory,
                set: |c, v| c.matmul_memory = v.min(1.0),
                kind: Kind::Fraction,
                needs: "few rows of large weights",
            },
            Curve {
                field: "matmul_floor",
                get: |c| c.matmul_floor.as_us(),
                set: |c, v| c.matmul_floor = Time::from_us_f64(v),
                kind: Kind::Time,
                needs: "small matrices",
            },
            Curve {
                field: "blend",
                get: |c| c.blend,
                set: |c, v| c.blend = v.max(1.0),
                kind: Kind::Exponent,
                needs: "rows near the ridge point (64 to 512)",
            },
        ],
        KernelClass::Attention => vec![
            Curve {
                field: "attention",
                get: |c| c.attention,
                set: |c, v| c.attention = v.min(1.0),
                kind: Kind::Fraction,
                needs: "long prompts",
            },
            Curve {
                field: "attention_memory",
                get: |c| c.attention_memory,
                set: |c, v| c.attention_memory = v.min(1.0),
                kind: Kind::Fraction,
                needs: "decode over long KV caches",
            },
            Curve {
                field: "attention_floor",
                get: |c| c.attention_floor.as_us(),
                set: |c, v| c.attention_floor = Time::from_us_f64(v),
                kind: Kind::Time,
                needs: "decode over short KV caches",
            },
        ],
        // Elementwise kernels each have their own rates (`own_curves`).
        KernelClass::Elementwise => Vec::new(),
    }
}

/// A parameter of `kind` under `key`, read and written as a number.
fn typed(
    key: String,
    kind: Kind,
    read: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    write: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    match kind {
        Kind::Time => time(key, move |m| Time::from_us_f64(read(m)), move |m, v| write(m, v.as_us())),
        Kind::Fraction => ratio(key, read, write),
        Kind::Exponent => exponent(key, read, write),
        Kind::Multiple => parameter(key, Unit::Ratio, (0.01, 10.0), read, write),
        Kind::Rate => parameter(key, Unit::Rate, (0.1, 5000.0), read, write),
    }
}

fn class_parameter(gpu: &str, curve: &Curve) -> Parameter {
    let key = format!("gpu.{gpu}.compute.{}", curve.field);
    let (get, set) = (curve.get, curve.set);
    let (read, write) = (gpu.to_string(), gpu.to_string());
    typed(key, curve.kind, move |m| get(&m.gpu[&read].compute), move |m, v| set(&mut m.gpu.get_mut(&write).expect("gpu exists").compute, v))
}

/// One of a measured kernel's own numbers: read with its class's value
/// where the kernel has none yet, written as its own.
struct Own {
    field: &'static str,
    get: fn(&KernelEfficiency, &ComputeEfficiency) -> f64,
    set: fn(&mut KernelEfficiency, f64),
    kind: Kind,
    needs: &'static str,
}

/// The numbers an elementwise kernel of `kernel`'s shape has of its own:
/// a row rate only where it gives each row a block, an L2 speed-up only on
/// a GPU with a known L2 cache.
fn own_curves(kernel: &Kernel, l2_known: bool) -> Vec<Own> {
    let mut out = vec![
        Own {
            field: "memory",
            get: |o, c| o.memory.unwrap_or(c.elementwise),
            set: |o, v| o.memory = Some(v.min(1.0)),
            kind: Kind::Fraction,
            needs: "many rows, beyond the L2 cache",
        },
        Own {
            field: "floor",
            get: |o, c| o.floor.unwrap_or(c.elementwise_floor).as_us(),
            set: |o, v| o.floor = Some(Time::from_us_f64(v)),
            kind: Kind::Time,
            needs: "few rows",
        },
    ];
    if l2_known {
        out.push(Own {
            field: "l2",
            get: |o, c| o.l2.or(o.memory).unwrap_or(c.elementwise),
            set: |o, v| o.l2 = Some(v),
            kind: Kind::Multiple,
            needs: "working sets of a few MB to the L2 cache's size",
        });
    }
    if kernel.row_bytes > 0.0 {
        out.push(Own {
            field: "row_rate",
            get: |o, c| o.row_rate.unwrap_or(c.row_rate).as_gbps(),
            set: |o, v| o.row_rate = Some(Bandwidth::from_gbps_f64(v)),
            kind: Kind::Rate,
            needs: "one to a few rows",
        });
    }
    out
}

/// A parameter of a measured kernel's own; a kernel without an entry yet
/// reads (and is first given) `start`.
fn own_parameter(gpu: &str, library: Library, kind_name: &str, own: &Own, start: &KernelEfficiency) -> Parameter {
    let key = format!("gpu.{gpu}.compute.{}.{kind_name}.{}", library.table(), own.field);
    let (get, set) = (own.get, own.set);
    let (read, write, read_kind, write_kind) = (gpu.to_string(), gpu.to_string(), kind_name.to_string(), kind_name.to_string());
    let (read_start, write_start) = (start.clone(), start.clone());
    typed(
        key,
        own.kind,
        move |m| {
            let compute = &m.gpu[&read].compute;
            get(compute.kernels(library).get(&read_kind).unwrap_or(&read_start), compute)
        },
        move |m, v| {
            let compute = &mut m.gpu.get_mut(&write).expect("gpu exists").compute;
            set(compute.kernels_mut(library).entry(write_kind.clone()).or_insert_with(|| write_start.clone()), v)
        },
    )
}

/// Where a measured kernel's own numbers start, from its points: the floor
/// of its smallest call, and the rates its largest calls reach beyond and
/// within the L2 cache (a fit started far from them wanders onto bounds).
fn starting_point(model: &HardwareModel, gpu: &str, measured: &[(Kernel, &Measurement)]) -> KernelEfficiency {
    let Some(g) = model.gpu.get(gpu) else { return KernelEfficiency::default() };
    // Time on the GPU: what the row measured less its caller's gap.
    let on_gpu = |m: &Measurement| {
        let gap = model.stack(m.stack()).map(|s| s.kernel_launch.as_us()).unwrap_or(0.0);
        (m.time_us - gap).max(0.0)
    };
    let floor = measured.iter().map(|(_, m)| on_gpu(m)).fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { g.compute.elementwise_floor.as_us() };
    let in_l2 = |k: &Kernel| g.l2_cache.is_some_and(|l2| k.bytes <= l2.0 as f64);
    let fraction = |within: bool| {
        let largest = measured.iter().filter(|(k, _)| in_l2(k) == within).max_by(|a, b| a.0.bytes.total_cmp(&b.0.bytes))?;
        let streaming_us = on_gpu(largest.1) - floor;
        (streaming_us > 0.0).then(|| (largest.0.bytes / (streaming_us * 1e-6) / g.memory_bandwidth.bytes_per_sec()).clamp(0.05, 0.99))
    };
    KernelEfficiency { memory: fraction(false), floor: Some(Time::from_us_f64(floor)), l2: fraction(true), ..Default::default() }
}

/// d ln(predicted time) / d ln(parameter) at each point (a parameter at
/// zero is moved by 0.1 us instead).
fn sensitivities(topologies: &[Topology], model: &HardwareModel, sources: &[Source], points: &[Point], p: &Parameter) -> Vec<f64> {
    let value = p.get(model);
    let step = if value.abs() > 1e-9 { value * 0.01 } else { 0.1 };
    let mut moved = model.clone();
    p.set(&mut moved, value + step);
    let relative = (p.get(&moved) - value) / value.abs().max(step);
    points
        .iter()
        .map(|&(s, i)| {
            let (topo, m) = (&topologies[s], &sources[s].measurements[i]);
            match (predict(topo, model, m), predict(topo, &moved, m)) {
                (Ok(a), Ok(b)) if relative.abs() > 0.0 => (b.time.as_us() / a.time.as_us()).ln() / relative,
                _ => 0.0,
            }
        })
        .collect()
}

/// Which of `columns` (in order of their norm) add a direction the ones
/// before them do not span, by Gram-Schmidt.
fn independent(columns: &[Vec<f64>]) -> Vec<bool> {
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by(|&a, &b| norm(&columns[b]).total_cmp(&norm(&columns[a])));
    let mut basis: Vec<Vec<f64>> = Vec::new();
    let mut kept = vec![false; columns.len()];
    for index in order {
        let mut residual = columns[index].clone();
        for unit in &basis {
            let dot: f64 = residual.iter().zip(unit).map(|(a, b)| a * b).sum();
            residual.iter_mut().zip(unit).for_each(|(r, u)| *r -= dot * u);
        }
        let length = norm(&residual);
        if length >= IDENTIFIABLE {
            basis.push(residual.iter().map(|r| r / length).collect());
            kept[index] = true;
        }
    }
    kept
}

/// What a group of kernel rows fits: a class's curve, or one measured
/// kernel's own rates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Curves {
    Class(KernelClass),
    Own(Library, &'static str),
}

/// The kernel rows of one GPU and one set of curves.
struct Rows<'m> {
    gpu: String,
    curves: Curves,
    measured: Vec<(Kernel, &'m Measurement)>,
    points: Vec<Point>,
}

/// One group per GPU and class of kernel (matrix products, attention), and
/// one per measured elementwise kernel, among the `kernel` measurements,
/// each with the parameters its points identify.
pub fn groups(topologies: &[Topology], model: &HardwareModel, sources: &[Source]) -> Vec<Group> {
    let mut by_curve: Vec<Rows> = Vec::new();
    for (s, (source, topo)) in sources.iter().zip(topologies).enumerate() {
        for (i, m) in source.measurements.iter().enumerate().filter(|(_, m)| m.op == "kernel") {
            let (Ok(kernel), Some(gpu)) = (measured_kernel(m), m.gpu.as_deref().and_then(|g| gpu_key(model, g))) else { continue };
            if predict(topo, model, m).is_err() {
                continue;
            }
            let curves = match kernel.class {
                KernelClass::Elementwise => Curves::Own(kernel.library, kernel.kind),
                class => Curves::Class(class),
            };
            match by_curve.iter_mut().find(|rows| rows.gpu == gpu && rows.curves == curves) {
                Some(rows) => {
                    rows.measured.push((kernel, m));
                    rows.points.push((s, i));
                }
                None => by_curve.push(Rows { gpu, curves, measured: vec![(kernel, m)], points: vec![(s, i)] }),
            }
        }
    }
    by_curve.sort_by(|a, b| (&a.gpu, &a.curves).cmp(&(&b.gpu, &b.curves)));
    let mut out = Vec::new();
    for Rows { gpu, curves, measured, points } in by_curve {
        // Sensitivities are taken where the fit starts: a measured kernel
        // with its starting numbers.
        let mut seeded = model.clone();
        let (name, candidates): (String, Vec<(&'static str, &'static str, Parameter)>) = match curves {
            Curves::Class(class) => (
                format!("{} kernels on {gpu}", class.name()),
                curves_of(class).iter().map(|c| (c.field, c.needs, class_parameter(&gpu, c))).collect(),
            ),
            Curves::Own(library, kind) => {
                let l2_known = model.gpu.get(&gpu).is_some_and(|g| g.l2_cache.is_some());
                let start = starting_point(model, &gpu, &measured);
                if let Some(g) = seeded.gpu.get_mut(&gpu) {
                    g.compute.kernels_mut(library).entry(kind.to_string()).or_insert_with(|| start.clone());
                }
                let own = own_curves(&measured[0].0, l2_known);
                (
                    format!("{} kernel {kind} on {gpu}", library.name()),
                    own.iter().map(|o| (o.field, o.needs, own_parameter(&gpu, library, kind, o, &start))).collect(),
                )
            }
        };
        let columns: Vec<Vec<f64>> = candidates.iter().map(|(_, _, p)| sensitivities(topologies, &seeded, sources, &points, p)).collect();
        let kept = independent(&columns);
        let left: Vec<String> =
            candidates.iter().zip(&kept).filter(|(_, k)| !**k).map(|((field, needs, _), _)| format!("{field} (needs {needs})")).collect();
        let parameters: Vec<Parameter> = candidates.into_iter().zip(&kept).filter(|(_, k)| **k).map(|((_, _, p), _)| p).collect();
        let needs = if left.is_empty() { format!("more {name} rows") } else { left.join(", ") };
        let name = if left.is_empty() { name } else { format!("{name}; not identifiable from these points: {}", left.join(", ")) };
        if !parameters.is_empty() {
            out.push(Group { name, parameters, points, needs });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::fit::fit;
    use crate::calibrate::schema::Measurement;
    use crate::topology::{Blueprint, PresetOptions, TopologySpec, blueprint};

    fn one_h200() -> (Blueprint, Topology, HardwareModel) {
        let spec = TopologySpec {
            name: "hgx-h200".into(),
            options: PresetOptions { gpus: Some(1), gpu: None, host: None },
            models: vec!["base".into()],
        };
        let (board, model) = blueprint(&spec).unwrap();
        let topo = board.build(&model).unwrap();
        (board, topo, model)
    }

    fn source(board: &Blueprint, measurements: Vec<Measurement>) -> Vec<Source> {
        vec![Source { board: board.clone(), measurements }]
    }

    fn gemm(m: u64, n: u64, k: u64) -> Measurement {
        Measurement {
            schema: 1,
            op: "kernel".into(),
            kernel: Some("gemm".into()),
            gpu: Some("NVIDIA H200".into()),
            m: Some(m),
            n: Some(n),
            k: Some(k),
            stack: Some(crate::stack::Stack::NcclGraph),
            time_us: 1.0,
            ..Measurement::default()
        }
    }

    #[test]
    fn prefill_shapes_alone_identify_only_the_compute_fraction() {
        let (board, topo, model) = one_h200();
        let rows: Vec<Measurement> =
            [(5120, 8192), (8192, 4096), (28672, 8192), (8192, 14336)].iter().map(|&(n, k)| gemm(8192, n, k)).collect();
        let groups = groups(&[topo], &model, &source(&board, rows));
        assert_eq!(groups.len(), 1);
        let keys: Vec<&str> = groups[0].parameters.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["gpu.h200.compute.matmul"]);
        assert!(groups[0].name.contains("matmul_memory (needs few rows"), "{}", groups[0].name);
    }

    #[test]
    fn a_norms_rows_recover_its_own_rates() {
        let (board, topo, _) = one_h200();
        let truth = HardwareModel::base();
        let mut known = truth.clone();
        let own = KernelEfficiency {
            memory: Some(0.7),
            floor: Some(Time::from_us(1)),
            l2: Some(1.2),
            row_rate: Some(Bandwidth::from_gbps_f64(15.0)),
            ..Default::default()
        };
        known.gpu.get_mut("h200").unwrap().compute.kernel.insert("rms_norm".into(), own);
        let mut rows = Vec::new();
        for model in ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"] {
            for tokens in [1, 16, 256, 2048, 16384] {
                let mut row = Measurement {
                    kernel: Some("rms_norm".into()),
                    model: Some(model.into()),
                    tokens: Some(tokens),
                    tp: Some(1),
                    m: None,
                    n: None,
                    k: None,
                    ..gemm(1, 1, 1)
                };
                row.time_us = predict(&topo, &known, &row).unwrap().time.as_us();
                rows.push(row);
            }
        }
        let sources = source(&board, rows);
        let found = groups(&[topo], &truth, &sources);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].parameters.len(), 4, "memory, floor, l2, row rate: {}", found[0].name);
        let fitted = fit(&sources, &truth, 2000).unwrap();
        let got = &fitted.model.gpu["h200"].compute.kernel["rms_norm"];
        for (name, value, expected) in [
            ("memory", got.memory.unwrap(), 0.7),
            ("floor", got.floor.unwrap().as_us(), 1.0),
            ("l2", got.l2.unwrap(), 1.2),
            ("row_rate", got.row_rate.unwrap().as_gbps(), 15.0),
        ] {
            assert!((value / expected - 1.0).abs() < 0.01, "{name}: {value} against {expected}; {:?}", fitted.groups);
        }
        // The class's numbers are left as they were.
        assert_eq!(fitted.model.gpu["h200"].compute.elementwise, truth.gpu["h200"].compute.elementwise);
    }

    #[test]
    fn a_grid_of_rows_recovers_the_whole_curve() {
        let (board, topo, truth) = one_h200();
        let mut known = truth.clone();
        let c = &mut known.gpu.get_mut("h200").unwrap().compute;
        (c.matmul, c.matmul_memory, c.blend, c.matmul_floor) = (0.72, 0.78, 2.5, Time::from_us(4));
        let mut rows = Vec::new();
        for m in [1, 4, 16, 64, 128, 256, 512, 2048, 8192] {
            for (n, k) in [(1024, 1024), (5120, 8192), (28672, 8192), (8192, 14336)] {
                let mut row = gemm(m, n, k);
                row.time_us = predict(&topo, &known, &row).unwrap().time.as_us();
                rows.push(row);
            }
        }
        let sources = source(&board, rows);
        let groups = groups(&[topo], &truth, &sources);
        assert_eq!(groups[0].parameters.len(), 4, "{}", groups[0].name);
        let fitted = fit(&sources, &truth, 2000).unwrap();
        let fits = &fitted.groups;
        let got = &fitted.model.gpu["h200"].compute;
        for (name, value, expected) in [
            ("matmul", got.matmul, 0.72),
            ("matmul_memory", got.matmul_memory, 0.78),
            ("blend", got.blend, 2.5),
            ("floor", got.matmul_floor.as_us(), 4.0),
        ] {
            assert!((value / expected - 1.0).abs() < 0.01, "{name}: {value} against {expected}; {fits:?}");
        }
    }
}
