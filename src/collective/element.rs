//! The elements a collective reduces, as far as its time depends on them:
//! whether an NVSwitch can reduce them in the switch, and what adding them
//! costs a channel's thread block.

use std::fmt;
use std::str::FromStr;

use crate::config::hardware::ElementAdds;
use crate::units::Bandwidth;

/// NCCL's element types (ncclDataType_t in nccl.h), by the measurement
/// schema's names.
const ELEMENT_TYPES: [&str; 12] =
    ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"];

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
        match text {
            "int8" | "uint8" => Ok(Element::Int8),
            "float8e4m3" | "float8e5m2" => Ok(Element::Float8),
            wide if ELEMENT_TYPES.contains(&wide) => Ok(Element::Wide),
            other => Err(format!("{other:?} is not an element type NCCL has: use one of {}", ELEMENT_TYPES.join(", "))),
        }
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
        for name in ELEMENT_TYPES {
            let element: Element = name.parse().unwrap();
            assert_eq!(element.switch_reducible(), !eight_bit.contains(&name), "{name}");
        }
        assert!("int3".parse::<Element>().unwrap_err().contains("float8e4m3"));
    }
}
