//! Link bandwidths and latencies of a preset or topology file, from the
//! hardware model's generations and hosts; a link the model rates at
//! nothing is refused, saying which key to set.

use crate::config::hardware::HardwareModel;
use crate::units::{Bandwidth, Time};

/// Builds the link bandwidths of a preset or file from the hardware model.
pub(crate) struct LinkRates<'m> {
    pub model: &'m HardwareModel,
}

impl LinkRates<'_> {
    pub fn pcie(&self, generation: &str, lanes: u32) -> Result<(Bandwidth, Time), String> {
        let g = self.model.pcie(generation)?;
        let rate = nonzero(g.lane_rate.scaled(f64::from(lanes) * g.efficiency), || format!("PCIe {generation} x{lanes}"))?;
        Ok((rate, g.hop_latency))
    }

    pub fn nvlink(&self, generation: &str, links: u32) -> Result<(Bandwidth, Time), String> {
        let g = self.model.nvlink(generation)?;
        if links == 0 {
            return Err(format!(
                "an NVLink {generation} link of no links: where GPUs are joined by NVLink, their `nvlink_links` in the hardware model (or the link's `links` in a topology file) must be more than zero"
            ));
        }
        let rate = nonzero(g.link_rate.scaled(f64::from(links) * g.efficiency), || format!("NVLink {generation} x{links}"))?;
        Ok((rate, g.hop_latency))
    }

    pub fn memory(&self, host: &str) -> Result<(Bandwidth, u32), String> {
        let h = self.model.host(host)?;
        let rate = nonzero(h.memory_channel_rate.scaled(f64::from(h.memory_channels) * h.memory_efficiency), || format!("{host} memory"))?;
        Ok((rate, h.memory_channels))
    }
}

/// A link rate the model gives, refused where it rounds to nothing (no
/// links, or a rate below one byte a second).
fn nonzero(rate: Bandwidth, what: impl Fn() -> String) -> Result<Bandwidth, String> {
    if rate.0 == 0 { Err(format!("{} has no bandwidth in the hardware model", what())) } else { Ok(rate) }
}
