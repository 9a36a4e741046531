//! The fitted values written as a hardware model overlay: only the keys
//! that were fitted, nested as the model file nests them, in its units.

use super::{GroupFit, Unit};
use crate::config::dotted::Overlay;
use crate::units::Time;

/// The fitted values as a model overlay: only the keys that were fitted.
pub fn overlay(fits: &[GroupFit]) -> toml::Table {
    let mut overlay = Overlay::default();
    for fit in fits {
        for (key, unit, _, value) in &fit.parameters {
            overlay.set(key, unit.written(*value));
        }
    }
    overlay.into_table()
}

impl Unit {
    /// `value` (in this unit's number) as a model file writes it.
    pub fn written(self, value: f64) -> toml::Value {
        match self {
            Unit::Time => toml::Value::String(Time::from_us_f64(value.max(0.0)).to_string()),
            Unit::Rate => toml::Value::String(format!("{:.4}GB/s", value.max(0.0))),
            Unit::Ratio => toml::Value::Float((value * 1e4).round() / 1e4),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
