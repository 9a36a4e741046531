//! The checks a hardware model passes after its overlays are merged: every
//! rate, size and count more than zero, every latency under a millisecond,
//! efficiencies and NCCL's constants in their ranges, names that refer to
//! what the model holds. Errors name the last file merged and the key.
//! Reads nothing, changes nothing.

use std::path::Path;

use super::experiment::MAX_CHANNELS;
use super::hardware::HardwareModel;
use super::{ConfigError, ConfigResult, check_range};
use crate::units::{Bandwidth, Bytes, Time};

/// No call, step, fence or launch the model times takes this long: NCCL's
/// own largest base latency is 14 us (LL128's), a host's launch of a
/// kernel some 5-90 us. A value past it is a typo (a unit) or not hardware.
pub const LONGEST_LATENCY: Time = Time::from_us(1000);

/// No protocol, staged copy or NVLS call moves less than this a chunk: NCCL's
/// smallest are LL's 32 KiB and NVLS's 16 KiB floor. A smaller chunk is a
/// typo, and would cost a task per few bytes.
pub const SMALLEST_CHUNK: Bytes = Bytes::kib(4);

/// Least memory a GPU may hold: a what-if below any real part would only
/// move its size limits onto every other input.
const SMALLEST_GPU_MEMORY: Bytes = Bytes::gib(1);

/// Most slices a chunk is cut into: NCCL's most is LL128's 15.
const MOST_SLICES: u32 = 64;

/// Least a thread block (one channel) may move a second with any protocol,
/// kind of memory operation or 8-bit add, and least a channel may read
/// through host memory: the slowest measured in the base model are 3.4
/// GB/s (an LL step through host memory) and 12.8 GB/s (Ampere's LL
/// thread block, scaled), NCCL's slowest per-channel figure 20 GB/s. A
/// rate far below (`1B/s`, a unit typo) would run a collective for months.
const SLOWEST_CHANNEL_RATE: Bandwidth = Bandwidth::gbps(1);

impl HardwareModel {
    /// Every latency the model adds to a call, a step, a slice, a hop or a
    /// launch, by key.
    fn latencies(&self) -> Vec<(String, Time)> {
        let mut out: Vec<(String, Time)> = Vec::new();
        for (name, p) in [("simple", &self.protocol.simple), ("ll", &self.protocol.ll), ("ll128", &self.protocol.ll128)] {
            for (class, cost) in p.path_costs() {
                out.push((format!("protocol.{name}.{class}.base_latency"), cost.base_latency));
                out.push((format!("protocol.{name}.{class}.step_latency"), cost.step_latency));
                out.push((format!("protocol.{name}.{class}.slice_overhead"), cost.slice_overhead));
            }
            out.push((format!("protocol.{name}.kernel_start.allgather"), p.kernel_start.allgather));
            out.push((format!("protocol.{name}.kernel_start.reducescatter"), p.kernel_start.reducescatter));
        }
        for (name, stack) in &self.stack {
            out.push((format!("stack.{name}.collective_call"), stack.collective_call));
            out.push((format!("stack.{name}.collective_step"), stack.collective_step));
            out.push((format!("stack.{name}.kernel_launch"), stack.kernel_launch));
            out.push((format!("stack.{name}.kernel_gap"), stack.kernel_gap));
            out.push((format!("stack.{name}.copy_launch"), stack.copy_launch));
            out.push((format!("stack.{name}.graph_launch"), stack.graph_launch));
        }
        for (arch, cta) in &self.cta {
            out.push((format!("cta.{arch}.call_latency"), cta.call_latency));
            out.push((format!("cta.{arch}.step_latency"), cta.step_latency));
        }
        for (name, g) in &self.pcie {
            out.push((format!("pcie.{name}.hop_latency"), g.hop_latency));
        }
        for (name, g) in &self.nvlink {
            out.push((format!("nvlink.{name}.hop_latency"), g.hop_latency));
        }
        for (name, h) in &self.host {
            out.push((format!("host.{name}.socket_link_latency"), h.socket_link_latency));
        }
        out.push(("shm.chunk_sync".into(), self.shm.chunk_sync));
        out.push(("nvls.latency".into(), self.nvls.latency));
        out.push(("nvls.chunk_overhead".into(), self.nvls.chunk_overhead));
        out.push(("skew.step_spread".into(), self.skew.step_spread));
        out
    }

    /// Every quantity that must be more than zero (rates, sizes, counts),
    /// by key: a zero rate would divide by zero, a zero size never end.
    fn positive_quantities(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = Vec::new();
        let mut add = |key: String, value: f64| out.push((key, value));
        for (name, g) in &self.pcie {
            add(format!("pcie.{name}.lane_rate"), g.lane_rate.bytes_per_sec());
            add(format!("pcie.{name}.nccl_x16_gbps"), g.nccl_x16_gbps);
        }
        for (name, g) in &self.nvlink {
            add(format!("nvlink.{name}.link_rate"), g.link_rate.bytes_per_sec());
        }
        for (name, h) in &self.host {
            if h.socket_links > 0 {
                add(format!("host.{name}.socket_link_lanes"), f64::from(h.socket_link_lanes));
                add(format!("host.{name}.socket_link_lane_rate"), h.socket_link_lane_rate.bytes_per_sec());
            }
            add(format!("host.{name}.memory_channels"), f64::from(h.memory_channels));
            add(format!("host.{name}.memory_channel_rate"), h.memory_channel_rate.bytes_per_sec());
            add(format!("host.{name}.nccl_socket_gbps"), h.nccl_socket_gbps);
        }
        for (name, g) in &self.gpu {
            add(format!("gpu.{name}.memory"), g.memory.as_f64());
            add(format!("gpu.{name}.memory_bandwidth"), g.memory_bandwidth.bytes_per_sec());
            add(format!("gpu.{name}.bf16_tflops"), g.bf16_tflops);
            add(format!("gpu.{name}.pcie_lanes"), f64::from(g.pcie_lanes));
        }
        for (name, p) in [("simple", &self.protocol.simple), ("ll", &self.protocol.ll), ("ll128", &self.protocol.ll128)] {
            add(format!("protocol.{name}.chunk"), p.chunk.as_f64());
            add(format!("protocol.{name}.slices_per_chunk"), f64::from(p.slices_per_chunk));
        }
        add("shm.copy_chunk".into(), self.shm.copy_chunk.as_f64());
        add("shm.slots".into(), f64::from(self.shm.slots));
        add("nvls.chunk".into(), self.nvls.chunk.as_f64());
        add("direct.max_ranks".into(), f64::from(self.direct.max_ranks));
        add("nccl.max_channels".into(), f64::from(self.nccl.max_channels));
        add("nccl.max_nvls_heads".into(), f64::from(self.nccl.max_nvls_heads));
        add("nccl.ll128_factor".into(), self.nccl.ll128_factor);
        add("nccl.tree_factor".into(), self.nccl.tree_factor);
        for (arch, cta) in &self.cta {
            for (protocol, rates) in [("simple", cta.simple), ("ll", cta.ll), ("ll128", cta.ll128)] {
                if let Some(rates) = rates {
                    add(format!("cta.{arch}.{protocol}.load"), rates.load.bytes_per_sec());
                    add(format!("cta.{arch}.{protocol}.store"), rates.store.bytes_per_sec());
                    add(format!("cta.{arch}.{protocol}.remote_store"), rates.remote_store.bytes_per_sec());
                }
            }
            if let Some(adds) = cta.adds {
                add(format!("cta.{arch}.adds.int8"), adds.int8.bytes_per_sec());
                add(format!("cta.{arch}.adds.float8"), adds.float8.bytes_per_sec());
            }
        }
        for (name, arch) in &self.nccl.arch {
            add(format!("nccl.arch.{name}.nvlink_gbps"), arch.nvlink_gbps);
            add(format!("nccl.arch.{name}.ll_max_gbps"), arch.ll_max_gbps);
            add(format!("nccl.arch.{name}.ll128_channel_max_gbps"), arch.ll128_channel_max_gbps);
            add(format!("nccl.arch.{name}.tree_channel_max_gbps"), arch.tree_channel_max_gbps);
            add(format!("nccl.arch.{name}.tree_ll128_channel_max_gbps"), arch.tree_ll128_channel_max_gbps);
            add(format!("nccl.arch.{name}.search_speeds"), arch.search_speeds.iter().copied().fold(f64::INFINITY, f64::min));
        }
        out
    }

    #[expect(clippy::too_many_lines, reason = "a list of checks, one after another, over the hardware model's keys")]
    pub(super) fn validate(&self, path: &Path) -> ConfigResult<()> {
        for (key, value) in self.positive_quantities() {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::invalid(path, key, format!("{} is not allowed: must be more than zero", super::number(value))));
            }
        }
        for (key, latency) in self.latencies() {
            if latency > LONGEST_LATENCY {
                return Err(ConfigError::invalid(
                    path,
                    key,
                    format!("{latency} is out of range: allowed 0 to {LONGEST_LATENCY} (no call, step or launch takes longer)"),
                ));
            }
        }
        let mut chunks = vec![("shm.copy_chunk".to_string(), self.shm.copy_chunk), ("nvls.chunk".to_string(), self.nvls.chunk)];
        for (name, p) in [("simple", &self.protocol.simple), ("ll", &self.protocol.ll), ("ll128", &self.protocol.ll128)] {
            chunks.push((format!("protocol.{name}.chunk"), p.chunk));
            if p.slices_per_chunk > MOST_SLICES {
                return Err(ConfigError::invalid(
                    path,
                    format!("protocol.{name}.slices_per_chunk"),
                    format!("{} is out of range: allowed 1 to {MOST_SLICES} (NCCL cuts a chunk into at most 15)", p.slices_per_chunk),
                ));
            }
        }
        for (key, chunk) in chunks {
            if chunk < SMALLEST_CHUNK {
                return Err(ConfigError::invalid(
                    path,
                    key,
                    format!("{chunk} is too small: at least {SMALLEST_CHUNK} (NCCL's smallest chunks are 16-32 KiB)"),
                ));
            }
        }
        if self.nccl.max_channels > MAX_CHANNELS {
            return Err(ConfigError::invalid(
                path,
                "nccl.max_channels",
                format!("{} is more than NCCL's {} (MAXCHANNELS)", self.nccl.max_channels, MAX_CHANNELS),
            ));
        }
        for (name, arch) in &self.nccl.arch {
            check_range(path, &format!("nccl.arch.{name}.nvls_efficiency"), arch.nvls_efficiency, 0.0..=1.0)?;
            let channels = f64::from(arch.nvls_channels);
            if arch.nvls_efficiency > 0.0 {
                check_range(path, &format!("nccl.arch.{name}.nvls_channels"), channels, 1.0..=f64::from(MAX_CHANNELS))?;
            }
        }
        for (name, g) in &self.pcie {
            check_range(path, &format!("pcie.{name}.efficiency"), g.efficiency, 0.05..=1.0)?;
        }
        for (name, g) in &self.nvlink {
            check_range(path, &format!("nvlink.{name}.efficiency"), g.efficiency, 0.05..=1.0)?;
        }
        for (name, h) in &self.host {
            check_range(path, &format!("host.{name}.memory_efficiency"), h.memory_efficiency, 0.05..=1.0)?;
            check_range(path, &format!("host.{name}.socket_link_efficiency"), h.socket_link_efficiency, 0.05..=1.0)?;
            check_range(path, &format!("host.{name}.root_complex_p2p_factor"), h.root_complex_p2p_factor, 0.05..=1.0)?;
            if !["intel", "amd", "nvidia"].contains(&h.vendor.as_str()) {
                return Err(ConfigError::invalid(
                    path,
                    format!("host.{name}.vendor"),
                    format!("{:?} is not allowed: use \"intel\", \"amd\" or \"nvidia\"", h.vendor),
                ));
            }
        }
        for (name, g) in &self.gpu {
            let key = |field: &str| format!("gpu.{name}.{field}");
            if !self.nvlink.contains_key(&g.nvlink_generation) && g.nvlink_links > 0 {
                return Err(ConfigError::invalid(
                    path,
                    key("nvlink_generation"),
                    format!("unknown generation {:?}; known: {:?}", g.nvlink_generation, self.nvlink.keys()),
                ));
            }
            if g.memory < SMALLEST_GPU_MEMORY {
                return Err(ConfigError::invalid(
                    path,
                    key("memory"),
                    format!("{} is too small: at least {SMALLEST_GPU_MEMORY} (the GPUs modelled hold 16-192 GB)", g.memory),
                ));
            }
            if !self.pcie.contains_key(&g.pcie_generation) {
                return Err(ConfigError::invalid(
                    path,
                    key("pcie_generation"),
                    format!("unknown generation {:?}; known: {:?}", g.pcie_generation, self.pcie.keys()),
                ));
            }
            g.compute.validate(path, &key("compute"))?;
        }
        for (name, p) in [("simple", &self.protocol.simple), ("ll", &self.protocol.ll), ("ll128", &self.protocol.ll128)] {
            check_range(path, &format!("protocol.{name}.wire_factor"), p.wire_factor, 1.0..=4.0)?;
            for (class, cost) in p.path_costs() {
                if let Some(rate) = cost.channel_rate {
                    at_least_channel_rate(path, &format!("protocol.{name}.{class}.channel_rate"), rate)?;
                }
                for (key, share) in
                    [("host_read_efficiency", cost.host_read_efficiency), ("host_read_write_efficiency", cost.host_read_write_efficiency)]
                {
                    if let Some(share) = share {
                        check_range(path, &format!("protocol.{name}.{class}.{key}"), share, 0.01..=1.0)?;
                    }
                }
            }
            if p.slices_per_chunk == 0 || p.chunk.0 == 0 {
                return Err(ConfigError::invalid(path, format!("protocol.{name}"), "chunk and slices_per_chunk must be positive"));
            }
        }
        for stack in crate::stack::STACKS {
            if !self.stack.contains_key(stack.name()) {
                return Err(ConfigError::invalid(
                    path,
                    format!("stack.{stack}"),
                    "missing: every stack needs collective_call, kernel_launch and copy_launch",
                ));
            }
        }
        super::storage::validate_model(path, self)?;
        check_range(path, "contention.sharpness", self.contention.sharpness, 0.5..=50.0)?;
        check_range(path, "contention.drift", self.contention.drift, 0.0..=1.0)?;
        // A lag, never a lead: the fit's 2.6 sits well inside.
        check_range(path, "contention.straggler", self.contention.straggler, 0.0..=100.0)?;
        check_range(path, "skew.call_overlap", self.skew.call_overlap, 0.0..=1.0)?;
        for (name, g) in &self.pcie {
            check_range(path, &format!("pcie.{name}.host_read_efficiency"), g.host_read_efficiency, 0.01..=1.0)?;
            check_range(path, &format!("pcie.{name}.host_read_write_efficiency"), g.host_read_write_efficiency, 0.01..=1.0)?;
        }
        for (arch, cta) in &self.cta {
            if cta.like.as_deref() == Some(arch.as_str()) {
                return Err(ConfigError::invalid(path, format!("cta.{arch}.like"), "names its own table: name another architecture's"));
            }
            if let Some(speedup) = cta.speedup {
                for (protocol, factor) in [("ll", speedup.ll), ("ll128", speedup.ll128), ("simple", speedup.simple)] {
                    // Published per-channel ratios between architectures lie within 0.25-4.
                    check_range(path, &format!("cta.{arch}.speedup.{protocol}"), factor, 0.01..=100.0)?;
                }
            }
        }
        // Only once every table's factors are known good: a table's rates
        // follow others' through `like`. The rates as written first, then
        // as followed, so that a slow table is named, not one following it.
        for (arch, cta) in &self.cta {
            for (protocol, rates) in [("simple", cta.simple), ("ll", cta.ll), ("ll128", cta.ll128)] {
                for (field, rate) in rates.iter().flat_map(|r| [("load", r.load), ("store", r.store), ("remote_store", r.remote_store)]) {
                    at_least_channel_rate(path, &format!("cta.{arch}.{protocol}.{field}"), rate)?;
                }
            }
            for (kind, rate) in cta.adds.iter().flat_map(|adds| [("int8", adds.int8), ("float8", adds.float8)]) {
                at_least_channel_rate(path, &format!("cta.{arch}.adds.{kind}"), rate)?;
            }
        }
        // The table whose speedup scales `arch`'s followed rates: its own,
        // or the nearest one it follows (`like` with no speedup of its own).
        // (A few levels, as `cta_rates` follows them.)
        let speedup_owner = |arch: &str| -> String {
            let mut key = arch;
            for _ in 0..4 {
                match self.cta.get(key).filter(|cta| cta.speedup.is_none()).and_then(|cta| cta.like.as_deref()) {
                    Some(like) => key = like,
                    None => break,
                }
            }
            key.to_string()
        };
        for arch in self.cta.keys() {
            for protocol in super::protocol::PROTOCOLS {
                let rates = self.cta_rates(arch, protocol).map_err(|message| ConfigError::invalid(path, format!("cta.{arch}"), message))?;
                // Own rates passed above; followed ones are another table's times a speedup.
                for rate in [rates.load, rates.store, rates.remote_store] {
                    at_least_channel_rate(path, &format!("cta.{}.speedup.{protocol}", speedup_owner(arch)), rate)?;
                }
            }
        }
        check_range(path, "nvls.efficiency_vs_nccl", self.nvls.efficiency_vs_nccl, 0.01..=1.2)?;
        check_range(path, "direct.efficiency", self.direct.efficiency, 0.01..=1.0)?;
        if self.shm.slots == 0 {
            return Err(ConfigError::invalid(path, "shm.slots", "must be at least 1"));
        }
        for (key, triple) in [
            ("ring_base_us", &self.nccl.ring_base_us),
            ("tree_base_us", &self.nccl.tree_base_us),
            ("ring_nvlink_hop_us", &self.nccl.ring_nvlink_hop_us),
            ("tree_nvlink_hop_us", &self.nccl.tree_nvlink_hop_us),
            ("ring_pcie_hop_us", &self.nccl.ring_pcie_hop_us),
            ("tree_pcie_hop_us", &self.nccl.tree_pcie_hop_us),
        ] {
            for (protocol, value) in [("ll", triple.ll), ("ll128", triple.ll128), ("simple", triple.simple)] {
                check_range(path, &format!("nccl.{key}.{protocol}"), value, 0.0..=1e6)?;
            }
        }
        check_range(path, "nccl.nvls_latency_us", self.nccl.nvls_latency_us, 0.0..=1e6)?;
        for (name, table) in [
            ("ll", &self.nccl.tree_correction.ll),
            ("ll128", &self.nccl.tree_correction.ll128),
            ("simple", &self.nccl.tree_correction.simple),
        ] {
            if table.len() != 23 {
                return Err(ConfigError::invalid(
                    path,
                    format!("nccl.tree_correction.{name}"),
                    format!("needs 23 factors (64 B to 256 MiB), has {}", table.len()),
                ));
            }
            for (index, &factor) in table.iter().enumerate() {
                // NCCL's own factors lie between 0.4 and 1.
                check_range(path, &format!("nccl.tree_correction.{name}[{index}]"), factor, 0.01..=2.0)?;
            }
        }
        Ok(())
    }
}

/// Refuses a channel's `rate` (at `key`) far below any real one.
fn at_least_channel_rate(path: &Path, key: &str, rate: Bandwidth) -> ConfigResult<()> {
    if rate < SLOWEST_CHANNEL_RATE {
        return Err(ConfigError::invalid(
            path,
            key,
            format!(
                "{rate} is far below any real thread block: at least {SLOWEST_CHANNEL_RATE} (measured ones move 3.4-60 GB/s; NCCL's slowest per-channel figure is 20 GB/s)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::hardware::{HardwareModel, ModelSource};

    #[test]
    fn zero_rates_sizes_and_counts_latencies_past_a_millisecond_and_factors_out_of_range_are_refused_by_key() {
        let dir = std::env::temp_dir().join(format!("icsim-zero-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("zero.toml");
        for (overlay, key) in [
            ("[gpu.h200]\nbf16_tflops = 0.0\n", "gpu.h200.bf16_tflops"),
            ("[pcie.gen5]\nlane_rate = \"0B/s\"\n", "pcie.gen5.lane_rate"),
            ("[nccl]\nmax_nvls_heads = 0\n", "nccl.max_nvls_heads"),
            ("[nccl.arch.sm90]\nnvls_channels = 0\n", "nccl.arch.sm90.nvls_channels"),
            ("[gpu.h200]\nmemory_bandwidth = \"0B/s\"\n", "gpu.h200.memory_bandwidth"),
            ("[nccl]\nmax_channels = 65\n", "nccl.max_channels"),
            ("[skew]\ncall_overlap = 5.0\n", "skew.call_overlap"),
            ("[protocol.simple.shm]\nslice_overhead = \"1s\"\n", "protocol.simple.shm.slice_overhead"),
            ("[protocol.ll128.kernel_start]\nreducescatter = \"2ms\"\n", "protocol.ll128.kernel_start.reducescatter"),
            ("[stack.eager]\ncollective_call = \"1.5ms\"\n", "stack.eager.collective_call"),
            ("[cta.sm80]\nspeedup = { ll = -1.0, ll128 = 0.5, simple = 0.5 }\n", "cta.sm80.speedup.ll"),
            ("[cta.sm80]\nspeedup = { ll = 1e-300, ll128 = 1e-300, simple = 1e-300 }\n", "cta.sm80.speedup.ll"),
            ("[cta.sm90]\nlike = \"sm90\"\n", "cta.sm90.like"),
            ("[cta.sm90.simple]\nload = \"0B/s\"\n", "cta.sm90.simple.load"),
            ("[cta.sm90.simple]\nload = \"1B/s\"\n", "cta.sm90.simple.load"),
            ("[cta.sm90.adds]\nint8 = \"1MB/s\"\n", "cta.sm90.adds.int8"),
            ("[cta.sm80]\nspeedup = { ll = 0.01, ll128 = 0.5, simple = 0.5 }\n", "cta.sm80.speedup.ll"),
            ("[protocol.ll.shm]\nchannel_rate = \"1B/s\"\n", "protocol.ll.shm.channel_rate"),
            ("[contention]\nstraggler = -1.0\n", "contention.straggler"),
            ("[nvls]\nchunk = \"1B\"\n", "nvls.chunk"),
            ("[protocol.ll]\nslices_per_chunk = 1000000\n", "protocol.ll.slices_per_chunk"),
            ("[nvlink.gen9]\nlink_rate = \"25GB/s\"\n", "nvlink.gen9"),
            ("[nvlink.gen4]\nlink_rate = 25\n", "nvlink.gen4.link_rate"),
            ("[gpu.h200]\nmemory = \"1B\"\n", "gpu.h200.memory"),
        ] {
            std::fs::write(&file, overlay).unwrap();
            let error = HardwareModel::load(&[ModelSource::File(file.clone())]).unwrap_err().to_string();
            assert!(error.contains("zero.toml") && error.contains(&format!("key `{key}`")), "{error}");
        }
        let mut factors = vec!["0.9"; 23];
        factors[4] = "-1.0";
        std::fs::write(&file, format!("[nccl.tree_correction]\nsimple = [{}]\n", factors.join(", "))).unwrap();
        let error = HardwareModel::load(&[ModelSource::File(file.clone())]).unwrap_err().to_string();
        assert!(error.contains("key `nccl.tree_correction.simple[4]`"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
