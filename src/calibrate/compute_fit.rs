//! The GPU's compute curves as fit groups: for each kind of kernel measured
//! on a GPU (matrix products, attention, elementwise kernels), the
//! parameters of its curve (compute and memory fractions, floor, blend) that
//! the measured points can tell apart. A parameter is fitted only when
//! changing it changes the predictions in a way no other parameter of the
//! group can (the columns of d ln(time) / d ln(parameter) over the points,
//! orthogonalized); the others keep their values and are named, with the
//! measurements that would identify them. Fitting itself is `fit`'s.

use super::compute::measured_kernel;
use super::fit::{Group, Parameter, Point, Source, exponent, ratio, time};
use super::predict::predict;
use crate::config::hardware::{ComputeEfficiency, HardwareModel};
use crate::topology::Topology;
use crate::units::Time;
use crate::workload::compute::KernelClass;
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
}

fn curves(class: KernelClass) -> Vec<Curve> {
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
        KernelClass::Elementwise => vec![
            Curve {
                field: "elementwise",
                get: |c| c.elementwise,
                set: |c, v| c.elementwise = v.min(1.0),
                kind: Kind::Fraction,
                needs: "many rows",
            },
            Curve {
                field: "elementwise_floor",
                get: |c| c.elementwise_floor.as_us(),
                set: |c, v| c.elementwise_floor = Time::from_us_f64(v),
                kind: Kind::Time,
                needs: "few rows",
            },
        ],
    }
}

fn parameter(gpu: &str, curve: &Curve) -> Parameter {
    let key = format!("gpu.{gpu}.compute.{}", curve.field);
    let (get, set) = (curve.get, curve.set);
    let (read, write) = (gpu.to_string(), gpu.to_string());
    let read_value = move |m: &HardwareModel| get(&m.gpu[&read].compute);
    let write_value = move |m: &mut HardwareModel, v: f64| set(&mut m.gpu.get_mut(&write).expect("gpu exists").compute, v);
    match curve.kind {
        Kind::Time => time(key, move |m| Time::from_us_f64(read_value(m)), move |m, v| write_value(m, v.as_us())),
        Kind::Fraction => ratio(key, read_value, write_value),
        Kind::Exponent => exponent(key, read_value, write_value),
    }
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

/// One group per GPU and kind of kernel among the `kernel` measurements,
/// with the parameters its points identify.
pub fn groups(topologies: &[Topology], model: &HardwareModel, sources: &[Source]) -> Vec<Group> {
    let mut by_curve: Vec<((String, KernelClass), Vec<Point>)> = Vec::new();
    for (s, (source, topo)) in sources.iter().zip(topologies).enumerate() {
        for (i, m) in source.measurements.iter().enumerate().filter(|(_, m)| m.op == "kernel") {
            let (Ok(kernel), Some(gpu)) = (measured_kernel(m), m.gpu.as_deref().and_then(|g| gpu_key(model, g))) else { continue };
            if predict(topo, model, m).is_err() {
                continue;
            }
            let key = (gpu, kernel.class);
            match by_curve.iter_mut().find(|(k, _)| *k == key) {
                Some((_, points)) => points.push((s, i)),
                None => by_curve.push((key, vec![(s, i)])),
            }
        }
    }
    by_curve.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::new();
    for ((gpu, class), points) in by_curve {
        let candidates: Vec<(Curve, Parameter)> = curves(class)
            .into_iter()
            .map(|c| {
                let p = parameter(&gpu, &c);
                (c, p)
            })
            .collect();
        let columns: Vec<Vec<f64>> = candidates.iter().map(|(_, p)| sensitivities(topologies, model, sources, &points, p)).collect();
        let kept = independent(&columns);
        let left: Vec<String> =
            candidates.iter().zip(&kept).filter(|(_, k)| !**k).map(|((c, _), _)| format!("{} (needs {})", c.field, c.needs)).collect();
        let parameters: Vec<Parameter> = candidates.into_iter().zip(&kept).filter(|(_, k)| **k).map(|((_, p), _)| p).collect();
        let mut name = format!("{} kernels on {gpu}", class.name());
        if !left.is_empty() {
            name += &format!("; not identifiable from these points: {}", left.join(", "));
        }
        let needs = if left.is_empty() { format!("{} kernel rows", class.name()) } else { left.join(", ") };
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
        let spec =
            TopologySpec { name: "hgx-h200".into(), options: PresetOptions { gpus: Some(1), gpu: None }, models: vec!["base".into()] };
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
