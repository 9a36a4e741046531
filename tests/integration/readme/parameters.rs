//! The hardware model's parameters that docs/model.md quotes in its prose,
//! checked against the model as the command line loads it for a preset
//! (`base.toml` with every shipped overlay, `h200-fit.toml` among them):
//! each passage is written here as the page writes it, its number rounded
//! from the loaded value as the page rounds it, so that a refit that moves
//! a parameter fails here until the page says the new figure.

use icsim::config::hardware::{HardwareModel, PathCost};
use icsim::units::{Bytes, Time};

use super::figures::{check, quote};
use crate::common::{preset, thousands};

const PAGE: &str = "docs/model.md";
const FITTED: &str = "the shipped hardware model (base.toml and its overlays)";
const BASE: &str = "models/hardware/base.toml alone (the fit's priors)";

/// A size as the page writes it: `512 KiB`, `576000 B`.
fn spaced(size: Bytes) -> String {
    let text = size.to_string();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    format!("{} {}", &text[..digits], &text[digits..])
}

fn us(time: Time, decimals: usize) -> String {
    format!("{:.*}", decimals, time.as_us())
}

/// A protocol's channel rate through host memory, GB/s.
fn rate(cost: &PathCost, decimals: usize) -> String {
    format!("{:.*}", decimals, cost.channel_rate.expect("a channel rate through host memory").as_gbps())
}

/// The one value every item gives, failing if they differ.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, mut values: impl Iterator<Item = T>) -> T {
    let first = values.next().unwrap_or_else(|| panic!("no {what}"));
    for other in values {
        assert_eq!(other, first, "the page quotes one {what}, the model has several");
    }
    first
}

/// The model as a preset loads it, and `base.toml` alone.
fn models() -> (HardwareModel, HardwareModel) {
    let (_, model) = preset("hgx-h200", None, &[]);
    (model, HardwareModel::load(&[]).expect("base.toml loads"))
}

#[test]
fn readme_model_page_quotes_the_models_transports_collectives_and_callers() {
    let (model, base) = models();
    let (simple, ll, ll128) = (&model.protocol.simple, &model.protocol.ll, &model.protocol.ll128);
    let h200 = &model.gpu["h200"];
    let (nvlink, gen5) = (&model.nvlink[&h200.nvlink_generation], &model.pcie[&h200.pcie_generation]);
    let nvme_latency = |read: bool| {
        let latency = same("drive latency", model.nvme.values().map(|d| if read { d.read_latency } else { d.write_latency }));
        us(latency, 0)
    };
    assert_eq!(ll128.min_slice.0, 640 * 60, "the page reads LL128's smallest slice as 640 threads x 60 B");
    let q = |from: &'static str, text: String| quote(PAGE, from, text);
    check(&[
        // What each transport mode models.
        q(
            FITTED,
            format!(
                "the port ({} links x {:.0} GB/s x {:.3} per direction)",
                h200.nvlink_links,
                nvlink.link_rate.as_gbps(),
                nvlink.efficiency
            ),
        ),
        q(
            FITTED,
            format!(
                "a plain staged copy is two copies of {} chunks, pipelined over {} slots",
                spaced(model.shm.copy_chunk),
                model.shm.slots
            ),
        ),
        // How the simulator works: collectives.
        q(
            FITTED,
            format!(
                "whose {:.1} us more a Simple step over PCIe (tuning.cc)",
                model.nccl.ring_pcie_hop_us.simple - model.nccl.ring_nvlink_hop_us.simple
            ),
        ),
        q(FITTED, format!("Their stores reach {:.2} of a PCIe link's copy rate (`thread_store_efficiency`", gen5.thread_store_efficiency)),
        q(FITTED, format!("chunking ({}, {}, {})", spaced(ll.chunk), spaced(ll128.chunk), spaced(simple.chunk))),
        q(FITTED, format!("(src/graph/connect.cc) with {} chunks", spaced(simple.tree_chunk))),
        q(
            FITTED,
            format!(
                "NVLS keeps its own channels ({} on Hopper, {} on Blackwell) and at most {} head GPUs",
                model.nccl.arch["sm90"].nvls_channels, model.nccl.arch["sm100"].nvls_channels, model.nccl.max_nvls_heads
            ),
        ),
        q(FITTED, format!("(`nvls.chunk_overhead`, fitted: {} µs)", us(model.nvls.chunk_overhead, 1))),
        // Callers.
        q(FITTED, format!("What `torch-graph`'s fitted {} µs is, is open", us(model.stack["torch-graph"].collective_call, 1))),
        q(FITTED, format!("against the {} us `torch-eager` assumes a launch", us(model.stack["torch-eager"].kernel_launch, 0))),
        q(
            FITTED,
            format!(
                "(`copy_launch`, {} µs a copy node of a CUDA graph, {} µs through PyTorch in a graph, measured)",
                us(model.stack["nccl-graph"].copy_launch, 2),
                us(model.stack["torch-graph"].copy_launch, 2)
            ),
        ),
        // Storage.
        q(FITTED, format!("({} µs read, {} µs write)", nvme_latency(true), nvme_latency(false))),
        q(FITTED, format!("(stream i of n at i/n x {} µs)", nvme_latency(true))),
        // Collectives: what a call costs.
        q(FITTED, format!("(LL128: 640 threads x 60 B, {} B)", thousands(ll128.min_slice.0))),
        q(
            BASE,
            format!(
                "({} us priors, assumed;",
                us(
                    same(
                        "kernel start prior",
                        [base.protocol.ll128.kernel_start.reducescatter, base.protocol.simple.kernel_start.allgather].into_iter()
                    ),
                    0
                )
            ),
        ),
        q(
            FITTED,
            format!(
                "fitted: LL128's reduce-scatter {} us, Simple's all-gather {} us, the rest absorbed",
                us(ll128.kernel_start.reducescatter, 2),
                us(simple.kernel_start.allgather, 2)
            ),
        ),
        q(FITTED, format!("`skew.call_overlap` ({:.2}, fitted)", model.skew.call_overlap)),
        q(FITTED, format!("Why the share is {:.2} rather than 1", model.skew.call_overlap)),
        q(FITTED, format!("(`skew.step_spread`, {} us a step over NVLink", us(model.skew.step_spread, 2))),
    ]);
}

#[test]
fn readme_model_page_quotes_the_models_host_memory_nvls_and_limits() {
    let (model, base) = models();
    let (simple, ll, ll128) = (&model.protocol.simple, &model.protocol.ll, &model.protocol.ll128);
    let (h200, b200) = (&model.gpu["h200"], &model.gpu["b200"]);
    let (nvlink, gen5) = (&model.nvlink[&h200.nvlink_generation], &model.pcie[&h200.pcie_generation]);
    let largest = model.gpu.iter().max_by_key(|(_, g)| g.memory.0).expect("GPUs in the model");
    let q = |from: &'static str, text: String| quote(PAGE, from, text);
    check(&[
        // Through host memory.
        q(
            FITTED,
            format!("the fitted step is {} us plus the {} us fence", us(simple.shm.step_latency, 2), us(simple.shm.slice_overhead, 1)),
        ),
        q(FITTED, format!("The fit puts Simple's rate at {} GB/s a channel", rate(&simple.shm, 1))),
        q(BASE, format!("(its prior set to the {} GB/s a GPU's link reads alone", rate(&base.protocol.simple.shm, 0))),
        q(FITTED, format!("LL's at {} GB/s (the LL probe below", rate(&ll.shm, 2))),
        q(FITTED, format!("and LL128's at {}. The rule before", rate(&ll128.shm, 1))),
        q(FITTED, format!("({:.2} of the link, `pcie.gen5.host_read_efficiency`, not fitted)", gen5.host_read_efficiency)),
        q(
            BASE,
            format!(
                "the read-write share is fitted ({:.2}, against {:.2} on one GPU alone",
                gen5.host_read_write_efficiency, base.pcie["gen5"].host_read_write_efficiency
            ),
        ),
        q(
            FITTED,
            format!(
                "LL128 fits both its own ({:.2} and {:.2}) on its rings",
                ll128.shm.host_read_efficiency.expect("LL128's own read share"),
                ll128.shm.host_read_write_efficiency.expect("LL128's own read-write share")
            ),
        ),
        q(FITTED, format!("({} us, serial on the sender, measured, not fitted", us(simple.shm.slice_overhead, 1))),
        q(
            FITTED,
            format!("carries its first {} of data on its latency (`latency_bytes` of `protocol.ll.shm`", spaced(ll.shm.latency_bytes)),
        ),
        q(FITTED, format!("pays the channel's fitted rate ({} GB/s)", rate(&ll.shm, 2))),
        q(
            FITTED,
            format!(
                "`host_read_efficiency`, {:.2}, measured, and `host_read_write_efficiency`, fitted {:.2} on large 2-rank",
                gen5.host_read_efficiency, gen5.host_read_write_efficiency
            ),
        ),
        q(
            FITTED,
            format!(
                "fitted {:.2} and {:.2} on large LL128 rings",
                ll128.shm.host_read_efficiency.expect("LL128's own read share"),
                ll128.shm.host_read_write_efficiency.expect("LL128's own read-write share")
            ),
        ),
        // NVSwitch, NVLS and Blackwell.
        q(FITTED, format!("its traversal costs two link latencies ({} µs each, assumed)", us(nvlink.hop_latency, 2))),
        q(
            FITTED,
            format!(
                "at most {} head GPUs (NCCL_MAX_NVLS_ARITY) and {} channels on Blackwell ({} on Hopper)",
                model.nccl.max_nvls_heads, model.nccl.arch["sm100"].nvls_channels, model.nccl.arch["sm90"].nvls_channels
            ),
        ),
        q(FITTED, format!("(NVLS latency {} µs", us(model.nvls.latency, 0))),
        // Copies within a GPU; limits on input.
        q(FITTED, format!("ignore the {:.0} MB L2 cache", h200.l2_cache.expect("the H200's L2 cache").as_f64() / 1e6)),
        q(FITTED, format!("at most the GPU's memory ({:.0} GB on an H200)", h200.memory.as_f64() / 1e9)),
        q(FITTED, format!("at most {} GPUs (`direct.max_ranks`)", model.direct.max_ranks)),
        q(
            FITTED,
            format!("largest GPU memory of the hardware model ({:.0} GB, {})", largest.1.memory.as_f64() / 1e9, largest.0.to_uppercase()),
        ),
        q(FITTED, format!("({} on Hopper and Blackwell)", same("NVLink port count", [h200.nvlink_links, b200.nvlink_links].into_iter()))),
    ]);
}
