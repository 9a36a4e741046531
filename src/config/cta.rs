//! Thread blocks (`[cta.<arch>]` of a hardware model): what one channel's
//! thread block moves per kind of memory operation with each protocol, what
//! reducing 8-bit elements adds to its time, and what the architecture adds
//! to a call's start and to its steps. An architecture without rates of its
//! own follows another's (`like`), scaled by a published ratio.

use serde::{Deserialize, Serialize};

use super::hardware::{GpuModel, HardwareModel};
use super::nccl_model::ProtocolTriple;
use super::protocol::Protocol;
use crate::units::{Bandwidth, Time};

/// How fast one thread block moves data with one protocol, per kind of
/// memory operation: a primitive's time per byte is the sum over its
/// operations of one over these rates (src/collective/rate.rs).
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CtaRates {
    /// Loads from the GPU's own memory (the user's input, a receive buffer
    /// a peer wrote into).
    pub load: Bandwidth,
    /// Stores to the GPU's own memory (the user's output).
    pub store: Bandwidth,
    /// Stores into a peer's memory or host memory (the send).
    pub remote_store: Bandwidth,
}

/// One GPU architecture's thread blocks: measured rates per protocol, or
/// another architecture's scaled by a published per-channel ratio.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CtaModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simple: Option<CtaRates>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ll: Option<CtaRates>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ll128: Option<CtaRates>,
    /// Take the rates of this architecture ("sm90")...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub like: Option<String>,
    /// ...times these factors per protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<ProtocolTriple>,
    /// What reducing 8-bit elements adds; followed through `like` unscaled (the SM's instruction rate, not
    /// its memory path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adds: Option<ElementAdds>,
    /// What a ring or tree call's start and each of its steps take longer on this architecture than on the
    /// one the protocols' latencies were fitted on (zero there); fitted where this one's rates follow it.
    #[serde(default)]
    pub call_latency: Time,
    #[serde(default)]
    pub step_latency: Time,
}

/// What reducing a byte of an 8-bit element type costs a thread block beyond
/// a 16-bit float's add (one instruction for 4 bytes, which the memory rates
/// include): the rate its extra instructions would run at alone.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ElementAdds {
    /// 8-bit integers: NCCL adds four to a 32-bit word with two masked adds
    /// and a byte permute.
    pub int8: Bandwidth,
    /// 8-bit floats: NCCL widens each pair to two halves, adds them and
    /// narrows the sum back.
    pub float8: Bandwidth,
}

impl HardwareModel {
    /// Walks the table of `arch` and those it follows (`like`, at most a few
    /// levels) until `pick` finds what it looks for, calling `passing` on
    /// each table it leaves for the one it follows.
    fn follow_cta<T>(
        &self,
        arch: &str,
        what: &str,
        pick: impl Fn(&CtaModel) -> Option<T>,
        mut passing: impl FnMut(&CtaModel),
    ) -> Result<T, String> {
        let mut key = arch;
        for _ in 0..4 {
            let model = self.cta.get(key).ok_or_else(|| {
                format!("no [cta.{key}] thread-block rates; known: {}", self.cta.keys().cloned().collect::<Vec<_>>().join(", "))
            })?;
            if let Some(found) = pick(model) {
                return Ok(found);
            }
            let like = model.like.as_deref().ok_or_else(|| format!("[cta.{key}] has no {what} and no `like`"))?;
            passing(model);
            key = like;
        }
        Err(format!("[cta.{arch}]: `like` chains too deep (a loop?)"))
    }

    /// The thread-block rates of architecture `arch` ("sm90") for `protocol`,
    /// following `like` and applying its speedups.
    pub fn cta_rates(&self, arch: &str, protocol: Protocol) -> Result<CtaRates, String> {
        let mut factor = 1.0;
        let own = |model: &CtaModel| match protocol {
            Protocol::Simple => model.simple,
            Protocol::Ll => model.ll,
            Protocol::Ll128 => model.ll128,
        };
        let rates = self.follow_cta(arch, &format!("{protocol} rates"), own, |model| {
            factor *= model.speedup.map_or(1.0, |speedup| speedup.of(protocol));
        })?;
        let scale = |b: Bandwidth| b.scaled(factor);
        Ok(CtaRates { load: scale(rates.load), store: scale(rates.store), remote_store: scale(rates.remote_store) })
    }

    /// The thread-block rates of a GPU model for `protocol`.
    pub fn gpu_cta_rates(&self, gpu: &GpuModel, protocol: Protocol) -> Result<CtaRates, String> {
        self.cta_rates(&format!("sm{}", gpu.arch), protocol)
    }

    /// What reducing 8-bit elements costs a GPU model's thread blocks.
    pub fn gpu_element_adds(&self, gpu: &GpuModel) -> Result<ElementAdds, String> {
        self.follow_cta(&format!("sm{}", gpu.arch), "[adds] for 8-bit elements", |model| model.adds, |_| {})
    }

    /// What a GPU's architecture adds to a call's start and to a step: its
    /// own, or where it has none, that of the architecture it follows
    /// (`like`: an architecture in another's row of NCCL's tables, as Ada in
    /// Ampere's); zero for an architecture without a thread-block table.
    pub fn arch_latency(&self, gpu: &GpuModel) -> (Time, Time) {
        let own = |c: &CtaModel| (c.call_latency, c.step_latency);
        let set = |c: &CtaModel| (own(c) != (Time::ZERO, Time::ZERO) || c.like.is_none()).then(|| own(c));
        self.follow_cta(&format!("sm{}", gpu.arch), "latency", set, |_| {}).unwrap_or((Time::ZERO, Time::ZERO))
    }
}
