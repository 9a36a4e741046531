//! Values of a file by dotted key (`protocol.simple.nvlink.step_latency` of
//! the hardware model, `drives` of an experiment's `[storage]`): the one way
//! a key is written into an overlay (a fit's result, a what-if change of a
//! sweep, a diff or `--set`) or into a raw section, read back out of a
//! loaded model, and the one list of the keys a raw file type accepts. Knows
//! nothing of what a key means; loading the overlay or the section checks it.

use std::path::PathBuf;

use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Serialize};

use super::hardware::{HardwareModel, ModelSource};

/// A hardware model overlay built key by key, a later value of a key
/// winning.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overlay(toml::Table);

impl Overlay {
    /// Sets `key` (dotted) to `value`, making the tables on its way; a value
    /// in the way of a deeper key gives way to a table.
    pub fn set(&mut self, key: &str, value: toml::Value) {
        set_in_table(&mut self.0, key, value);
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

/// Sets `key` (dotted) in `table`, making the tables on its way; a value in
/// the way of a deeper key gives way to a table.
fn set_in_table(table: &mut toml::Table, key: &str, value: toml::Value) {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, parents) = parts.split_last().expect("split gives at least one part");
    let mut table = table;
    for part in parents {
        let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        table = entry.as_table_mut().expect("made a table above");
    }
    table.insert(last.to_string(), value);
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

/// `section` (a raw section of a file) with `key` (dotted) set to `value`,
/// read back as the file is read: a key the section lacks or a value of the
/// wrong kind is refused with serde's message, as it is in a file.
pub fn set<T: Serialize + DeserializeOwned>(section: &T, key: &str, value: toml::Value) -> Result<T, String> {
    let mut table = match toml::Value::try_from(section).map_err(|error| error.to_string())? {
        toml::Value::Table(table) => table,
        other => return Err(format!("{other} is not a section of keys")),
    };
    set_in_table(&mut table, key, value);
    T::deserialize(toml::Value::Table(table)).map_err(|error| error.to_string().trim_end().to_string())
}

/// The keys a raw file type `T` (a struct) accepts, as a file writes them
/// (after serde's renames), in the order of its fields: read from its
/// `Deserialize`, so that the list cannot drift from the type. Empty for a
/// type that is not a struct.
pub fn keys_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    /// A deserializer that asks for nothing but the names of a struct's fields.
    struct Fields(&'static [&'static str]);
    impl<'de> de::Deserializer<'de> for &mut Fields {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only a struct's field names are read"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = fields;
            Err(de::Error::custom("field names read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields = Fields(&[]);
    // The error is the point: the fields were read on the way to it.
    let _ = T::deserialize(&mut fields);
    fields.0
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
    fn p2p_over_pcie_pays_nvlinks_costs_but_for_the_keys_set_apart() {
        let base = HardwareModel::base();
        let nvlink = &base.protocol.simple.nvlink;
        assert_eq!(base.protocol.simple.pcie_cost().step_latency, nvlink.step_latency, "no pcie costs: NVLink's");
        let mut overlay = Overlay::default();
        overlay.set("protocol.simple.pcie.step_latency", toml::Value::String("5.4us".into()));
        let model = HardwareModel::load(&[overlay.into_source(PathBuf::from("what-if")).unwrap()]).unwrap();
        let pcie = model.protocol.simple.pcie_cost();
        assert_eq!(pcie.step_latency, Time::from_us_f64(5.4));
        assert_eq!((pcie.base_latency, pcie.slice_overhead), (nvlink.base_latency, nvlink.slice_overhead), "the rest as NVLink's");
        assert_eq!(model.protocol.simple.nvlink.step_latency, nvlink.step_latency, "NVLink's own unchanged");
    }

    #[test]
    fn a_section_key_is_set_and_checked_as_in_a_file() {
        use crate::config::storage::RawStorage;
        let set = set(&RawStorage::default(), "drives", toml::Value::Integer(4)).unwrap();
        assert_eq!(set, RawStorage { drives: Some(4), ..RawStorage::default() });
        let again = super::set(&set, "paths", toml::Value::Array(vec![toml::Value::String("gds".into())])).unwrap();
        assert_eq!((again.drives, again.paths), (Some(4), Some(vec!["gds".to_string()])), "the keys set before stay");
        let wrong = super::set(&set, "drives", toml::Value::String("four".into())).unwrap_err();
        assert!(wrong.contains("drives"), "{wrong}");
        let unknown = super::set(&set, "drivez", toml::Value::Integer(1)).unwrap_err();
        assert!(unknown.contains("drivez") && unknown.contains("kv_offload"), "names the key and those allowed: {unknown}");
    }

    #[test]
    fn the_keys_of_a_raw_type_are_its_fields_as_a_file_writes_them() {
        use crate::config::experiment::RawExperiment;
        let keys = keys_of::<RawExperiment>();
        assert!(keys.contains(&"mode") && keys.contains(&"storage") && !keys.contains(&"modes"), "{keys:?}");
        assert!(keys_of::<u32>().is_empty());
    }

    #[test]
    fn a_deeper_key_replaces_a_value_in_its_way() {
        let mut overlay = Overlay::default();
        overlay.set("skew", toml::Value::Integer(1));
        overlay.set("skew.step_spread", toml::Value::String("1us".into()));
        assert_eq!(overlay.into_table()["skew"]["step_spread"].as_str(), Some("1us"));
    }
}
