//! The numbers of the hardware model a fit may change: each a key of the
//! model file with its unit and physical bounds, read and written through
//! the model (protocol latencies per path, thread-block rates per
//! architecture, and the helpers other groups are built with).

use crate::collective::Protocol;
use crate::config::hardware::{CtaModel, CtaRates, HardwareModel, PathCost, Protocol as ProtocolModel};
use crate::transport::PathClass;
use crate::units::{Bandwidth, Time};

pub(super) type Read = Box<dyn Fn(&HardwareModel) -> f64 + Sync + Send>;
pub(super) type Write = Box<dyn Fn(&mut HardwareModel, f64) + Sync + Send>;

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
    pub(super) get: Read,
    pub(super) set: Write,
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

pub(in crate::calibrate) fn parameter(
    key: String,
    unit: Unit,
    bounds: (f64, f64),
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    Parameter { key, unit, bounds, get: Box::new(get), set: Box::new(set) }
}

pub(in crate::calibrate) fn time(
    key: String,
    get: impl Fn(&HardwareModel) -> Time + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, Time) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Time, (0.0, 100.0), move |m| get(m).as_us(), move |m, us| set(m, Time::from_us_f64(us)))
}

/// A fraction of a peak rate (0.01 to 1).
pub(in crate::calibrate) fn ratio(
    key: String,
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Ratio, (0.01, 1.0), get, set)
}

/// An exponent of 1 or more (a curve's sharpness).
pub(in crate::calibrate) fn exponent(
    key: String,
    get: impl Fn(&HardwareModel) -> f64 + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, f64) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Ratio, (1.0, 64.0), get, set)
}

pub(super) fn rate(
    key: String,
    get: impl Fn(&HardwareModel) -> Bandwidth + Sync + Send + 'static,
    set: impl Fn(&mut HardwareModel, Bandwidth) + Sync + Send + 'static,
) -> Parameter {
    parameter(key, Unit::Rate, (0.1, 5000.0), move |m| get(m).as_gbps(), move |m, gbps| set(m, Bandwidth::from_gbps_f64(gbps)))
}

pub(super) fn class_name(class: PathClass) -> &'static str {
    match class {
        PathClass::Nvlink => "nvlink",
        PathClass::Pcie => "pcie",
        PathClass::Shm => "shm",
    }
}

pub(super) fn protocol_mut(model: &mut HardwareModel, protocol: Protocol) -> &mut ProtocolModel {
    match protocol {
        Protocol::Simple => &mut model.protocol.simple,
        Protocol::Ll => &mut model.protocol.ll,
        Protocol::Ll128 => &mut model.protocol.ll128,
    }
}

pub(super) fn path_cost(model: &mut HardwareModel, protocol: Protocol, class: PathClass) -> &mut PathCost {
    let p = protocol_mut(model, protocol);
    match class {
        PathClass::Nvlink => &mut p.nvlink,
        PathClass::Pcie => p.pcie_cost_mut(),
        PathClass::Shm => &mut p.shm,
    }
}

pub(super) fn path_cost_ref(model: &HardwareModel, protocol: Protocol, class: PathClass) -> &PathCost {
    let p = protocol.model(model);
    match class {
        PathClass::Nvlink => &p.nvlink,
        PathClass::Pcie => p.pcie_cost(),
        PathClass::Shm => &p.shm,
    }
}

/// The latencies of one protocol over one kind of path.
pub(super) fn latency_parameters(protocol: Protocol, class: PathClass) -> Vec<Parameter> {
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

/// What an architecture adds to a call's start and to each step.
pub(super) fn arch_latency_parameters(arch: &str) -> Vec<Parameter> {
    type Get = fn(&CtaModel) -> Time;
    type Set = fn(&mut CtaModel, Time);
    let fields: [(&str, Get, Set); 2] =
        [("call_latency", |c| c.call_latency, |c, v| c.call_latency = v), ("step_latency", |c| c.step_latency, |c, v| c.step_latency = v)];
    fields
        .into_iter()
        .map(|(name, get, set)| {
            let (get_arch, set_arch) = (arch.to_string(), arch.to_string());
            time(
                format!("cta.{arch}.{name}"),
                move |m| m.cta.get(&get_arch).map_or(Time::ZERO, get),
                move |m, v| set(m.cta.get_mut(&set_arch).expect("the architecture's table exists"), v),
            )
        })
        .collect()
}

/// The thread-block rates of one architecture and protocol (set on that
/// architecture's own table, which then no longer follows another's).
pub(super) fn cta_parameters(arch: &str, protocol: Protocol) -> Vec<Parameter> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_on_its_bound_is_caught() {
        let p = parameter("x".into(), Unit::Ratio, (0.0, 1.0), |_| 0.0, |_, _| {});
        assert!(p.on_bound(0.0) && p.on_bound(1.0) && !p.on_bound(0.5));
    }
}
