//! Hardware model values by dotted key (`protocol.simple.nvlink.step_latency`):
//! the one way a key is written into an overlay (a fit's result, a what-if
//! change of a sweep or a diff) and read back out of a loaded model. Knows
//! nothing of what a key means; loading the overlay checks it.

use std::path::PathBuf;

use super::hardware::{HardwareModel, ModelSource};

/// A hardware model overlay built key by key, a later value of a key
/// winning.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overlay(toml::Table);

impl Overlay {
    /// Sets `key` (dotted) to `value`, making the tables on its way; a value
    /// in the way of a deeper key gives way to a table.
    pub fn set(&mut self, key: &str, value: toml::Value) {
        let parts: Vec<&str> = key.split('.').collect();
        let (last, parents) = parts.split_last().expect("split gives at least one part");
        let mut table = &mut self.0;
        for part in parents {
            let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            table = entry.as_table_mut().expect("made a table above");
        }
        table.insert(last.to_string(), value);
    }

    /// The keys set, nested as a model file nests them.
    pub fn into_table(self) -> toml::Table {
        self.0
    }

    /// The overlay as a model source named `label` in messages; none when
    /// no key was set.
    pub fn into_source(self, label: PathBuf) -> Option<ModelSource> {
        (!self.0.is_empty())
            .then(|| ModelSource::Text { label, text: toml::to_string(&self.0).expect("a table of keys and values prints") })
    }
}

/// The value of `key` (dotted) in `model`, as its file writes it
/// ("2.5us", "21.5GB/s", 0.87); none where the model has no such key.
pub fn get(model: &HardwareModel, key: &str) -> Option<toml::Value> {
    let mut value = toml::Value::try_from(model).expect("a loaded model serializes");
    for part in key.split('.') {
        value = value.as_table_mut()?.remove(part)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Time;

    #[test]
    fn a_key_set_in_an_overlay_is_read_back_from_the_model() {
        let mut overlay = Overlay::default();
        overlay.set("protocol.simple.nvlink.step_latency", toml::Value::String("2.5us".into()));
        overlay.set("pcie.gen5.efficiency", toml::Value::Float(0.5));
        overlay.set("pcie.gen5.efficiency", toml::Value::Float(0.75));
        let source = overlay.clone().into_source(PathBuf::from("what-if")).expect("two keys");
        let model = HardwareModel::load(&[source]).unwrap();
        assert_eq!(model.protocol.simple.nvlink.step_latency, Time::from_us_f64(2.5));
        assert_eq!(get(&model, "protocol.simple.nvlink.step_latency"), Some(toml::Value::String("2.5us".into())));
        assert_eq!(get(&model, "pcie.gen5.efficiency"), Some(toml::Value::Float(0.75)), "the later value wins");
        assert_eq!(get(&model, "pcie.gen9.efficiency"), None);
        assert_eq!(overlay.into_table()["protocol"]["simple"]["nvlink"]["step_latency"].as_str(), Some("2.5us"));
        assert_eq!(Overlay::default().into_source(PathBuf::from("x")), None);
    }

    #[test]
    fn a_deeper_key_replaces_a_value_in_its_way() {
        let mut overlay = Overlay::default();
        overlay.set("skew", toml::Value::Integer(1));
        overlay.set("skew.step_spread", toml::Value::String("1us".into()));
        assert_eq!(overlay.into_table()["skew"]["step_spread"].as_str(), Some("1us"));
    }
}
