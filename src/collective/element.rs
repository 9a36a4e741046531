//! The elements a collective reduces, as far as its time depends on them:
//! whether an NVSwitch can reduce them in the switch, and what adding them
//! costs a channel's thread block.

use std::fmt;
use std::str::FromStr;

use crate::config::hardware::ElementAdds;
use crate::units::Bandwidth;

/// NCCL's element types (ncclDataType_t in nccl.h), by the measurement
/// schema's names, with their bytes.
const ELEMENT_TYPES: [(&str, u64); 12] = [
    ("int8", 1),
    ("uint8", 1),
    ("int32", 4),
    ("uint32", 4),
    ("int64", 8),
    ("uint64", 8),
    ("float16", 2),
    ("float32", 4),
    ("float64", 8),
    ("bfloat16", 2),
    ("float8e4m3", 1),
    ("float8e5m2", 1),
];

/// One of NCCL's element types: its name, its bytes, and what reducing it
/// costs. A call's buffer is a whole number of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataType {
    pub name: &'static str,
    pub bytes: u64,
    pub element: Element,
}

impl FromStr for DataType {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, bytes) = ELEMENT_TYPES.iter().copied().find(|(name, _)| *name == text).ok_or_else(|| {
            let names: Vec<&str> = ELEMENT_TYPES.iter().map(|(name, _)| *name).collect();
            format!("{text:?} is not an element type NCCL has: use one of {}", names.join(", "))
        })?;
        let element = match name {
            "int8" | "uint8" => Element::Int8,
            "float8e4m3" | "float8e5m2" => Element::Float8,
            _ => Element::Wide,
        };
        Ok(DataType { name, bytes, element })
    }
}

/// What a call's elements cost to reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Element {
    /// 16-bit floats or wider: one add instruction for every 4 bytes or
    /// fewer (FADD, HADD2), which the thread blocks' fitted memory rates
    /// include (fp32, fp16 and bf16 reduce at the same rate:
    /// measurements/h200-device-1gpu/cta-reduce.jsonl).
    #[default]
    Wide,
    /// 8-bit integers: NCCL adds four to a 32-bit word with two masked adds
    /// and a byte permute (reduce_kernel.h, FuncSum of uint8).
    Int8,
    /// 8-bit floats: NCCL widens each pair to two halves, adds them and
    /// narrows the sum back.
    Float8,
}

impl Element {
    /// The rate at which a thread block's extra adds of these elements run
    /// alone (`adds`: the GPU's, for 8-bit types); none for wide elements,
    /// whose adds the thread block's memory rates include.
    pub fn add_rate(self, adds: &ElementAdds) -> Option<Bandwidth> {
        match self {
            Element::Int8 => Some(adds.int8),
            Element::Float8 => Some(adds.float8),
            Element::Wide => None,
        }
    }

    /// Whether an NVSwitch can reduce these elements: NCCL's
    /// ncclNvlsSupported (src/include/device.h) refuses 8-bit types, so an
    /// int8 or fp8 allreduce never runs NVLS.
    pub fn switch_reducible(self) -> bool {
        self == Element::Wide
    }
}

impl FromStr for Element {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse::<DataType>().map(|dtype| dtype.element)
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Element::Wide => "16-bit or wider",
            Element::Int8 => "8-bit integer",
            Element::Float8 => "8-bit float",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nccl_type_has_an_element_class_and_only_wide_ones_reduce_in_the_switch() {
        let eight_bit = ["int8", "uint8", "float8e4m3", "float8e5m2"];
        for (name, bytes) in ELEMENT_TYPES {
            let dtype: DataType = name.parse().unwrap();
            assert_eq!(dtype.element.switch_reducible(), !eight_bit.contains(&name), "{name}");
            assert_eq!(dtype.bytes == 1, eight_bit.contains(&name), "{name}: {bytes} bytes");
        }
        assert!("int3".parse::<Element>().unwrap_err().contains("float8e4m3"));
    }
}
