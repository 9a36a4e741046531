//! Named server topologies with parameters (GPU model, GPU count): HGX and
//! PCIe boards of 8 GPUs, and racks of GB200 superchips on one NVLink
//! switch fabric (GB200 NVL72, and the same fabric grown to any size up to
//! `MAX_GPUS`, a what-if). Link bandwidths come from the hardware model; the
//! few numbers that belong to a board or rack design rather than a part
//! live in the table below, with sources.

use super::{LinkKind, LinkRates, MAX_GPUS, NodeId, NodeKind, Policy, PresetOption, Topology, TopologyError};
use crate::config::hardware::{GpuModel, HardwareModel, HostPlatform};
use crate::units::{Bandwidth, Time};

/// Board-design figures of the presets.
mod board {
    use crate::units::Bandwidth;
    /// HGX boards: two GPUs share a PCIe switch, two switches a socket
    /// (NVIDIA HGX H100 / DGX H100 user guide block diagram).
    pub const GPUS_PER_PCIE_SWITCH: u32 = 2;
    pub const PCIE_SWITCHES_PER_SOCKET: u32 = 2;
    /// 8x H20 without NVSwitch: each GPU pair joined directly at 128 GB/s
    /// "bidirectional", i.e. 64 GB/s per direction, 7 such links a GPU
    /// (shared/reference/hardware.md, the seed article).
    pub const H20_MESH_PAIR_RATE: Bandwidth = Bandwidth::gbps(64);
    /// The GPU count of every preset board.
    pub const BOARD_GPUS: u32 = 8;
    /// 8-GPU PCIe servers with one switch chip per socket carry four GPUs a
    /// switch and one x16 uplink to the socket (a 144-lane Broadcom PEX89144
    /// has room for four x16 GPUs and the uplink: 72 ports, 144 lanes,
    /// Broadcom's brief); servers that attach GPUs directly put four on each
    /// socket's root ports (the dual EPYC 9575F of aikitoria's 8x RTX 5090
    /// table: buses 01, 11, 61, 71 and 81, 91, e1, f1).
    pub const GPUS_PER_WIDE_SWITCH: u32 = 4;
    pub const DIRECT_GPUS_PER_SOCKET: u32 = 4;
    /// GB200 NVL72 (NVIDIA GB200 NVL72 product page and datasheet): 72
    /// Blackwell GPUs and 36 Grace CPUs in 18 compute trays, each tray two
    /// GB200 superchips of one Grace CPU and two GPUs; every GPU's 18
    /// NVLink 5 links (1.8 TB/s "bidirectional", 900 GB/s per direction)
    /// go to the 18 NVLink Switch chips of the rack's 9 NVLink switch trays,
    /// one link to each chip: 130 TB/s of NVLink across the rack, any GPU to
    /// any other at full port bandwidth, which icsim models as one
    /// non-blocking switch.
    pub const NVL72_GPUS: u32 = 72;
    pub const GPUS_PER_SUPERCHIP: u32 = 2;
    /// The largest NVLink 5 domain NVIDIA gives: 576 GPUs (NVIDIA,
    /// fifth-generation NVLink and NVLink Switch): the default size of the
    /// `nvlink-fabric` what-if.
    pub const NVLINK5_DOMAIN_GPUS: u32 = 576;
}

/// Preset names and what they are.
pub const PRESETS: &[(&str, &str)] = &[
    ("hgx-h100", "8x H100 SXM on NVSwitch (18 NVLink 4 links each), PCIe Gen5 to two Sapphire Rapids sockets"),
    ("hgx-h200", "8x H200 SXM on NVSwitch (18 NVLink 4 links each), PCIe Gen5 to two Sapphire Rapids sockets"),
    ("hgx-h20", "8x H20 on NVSwitch (18 NVLink 4 links each), PCIe Gen5 to two Sapphire Rapids sockets"),
    ("hgx-b200", "8x B200 on NVSwitch (18 NVLink 5 links each), PCIe Gen5 to two Emerald Rapids sockets"),
    ("hgx-a100", "8x A100 SXM on NVSwitch (12 NVLink 3 links each), PCIe Gen4 to two EPYC sockets"),
    ("h20-nvlink-mesh", "8x H20 with no NVSwitch: every pair joined directly, 64 GB/s per direction (7 links a GPU)"),
    ("pcie-gen3-8gpu", "8 GPUs on PCIe Gen3, no NVLink: two Skylake sockets, two switches a socket, two GPUs a switch"),
    ("pcie-gen4-8gpu", "8 GPUs on PCIe Gen4, no NVLink: two EPYC sockets, two switches a socket, two GPUs a switch"),
    ("pcie-gen5-8gpu", "8 GPUs on PCIe Gen5, no NVLink: two Sapphire Rapids sockets, two switches a socket, two GPUs a switch"),
    ("pcie-switch-8gpu", "8 GPUs, no NVLink: two EPYC Turin sockets, one PCIe Gen5 switch a socket with four GPUs and one x16 uplink"),
    ("pcie-direct-8gpu", "8 GPUs, no NVLink: two EPYC Turin sockets, four GPUs on each socket's own root ports, no switch"),
    ("gb200-nvl72", "GB200 NVL72: 72 Blackwell GPUs, 18 NVLink 5 links each through the rack's NVLink switch trays; two GPUs a Grace CPU"),
    (
        "nvlink-fabric",
        "GB200 superchips on one NVLink 5 switch fabric as in GB200 NVL72, any size (--gpus, default 576): a what-if beyond one rack",
    ),
];

/// The calibrated hardware model overlays every preset loads, by shipped
/// name. Compute and callers are properties of the GPU and the software,
/// not of the board: the compute curves fitted to the runner's kernels on
/// one H200 (h200-compute.toml: H200 keys, which GPUs of its die take) and
/// what the profiled PyTorch forward measured (h200-forward.toml: the
/// CUDA-graph gap of every stack, the H200's sustained clock and PyTorch's
/// kernels on it). The collective overlay (h200-fit.toml: thread blocks,
/// protocols, host-memory paths) is fitted on H200 NVSwitch boards; every
/// other board takes it as a prediction: what differs is its datasheet
/// (links, hosts, NCCL's per-architecture constants, thread blocks scaled
/// by NCCL's own ratios), and for Blackwell and Ampere what their calls and
/// steps take longer than Hopper's (blackwell-latency.toml, fitted on a
/// GB200 tray's public tables, so that HGX B200 stays a prediction;
/// ampere-latency.toml, fitted on A100's tables of 2 and 4 GPUs, so that 8
/// stay one). The overlays' keys are disjoint.
pub const PRESET_MODELS: &[&str] = &["h200-fit", "blackwell-latency", "ampere-latency", "h200-compute", "h200-forward"];

/// What a user may change about a preset.
#[derive(Debug, Clone, Default)]
pub struct PresetOptions {
    /// Use the first N GPUs of the board (default: all of them; the
    /// `nvlink-fabric` what-if is built with N).
    pub gpus: Option<u32>,
    /// GPU model key, for the PCIe presets (default per preset).
    pub gpu: Option<String>,
    /// Host platform key (default per preset).
    pub host: Option<String>,
}

enum GpuFabric {
    NvSwitch,
    PairMesh(Bandwidth),
    None,
}

/// How a board's GPUs hang on its sockets' PCIe.
#[derive(Clone, Copy)]
enum PcieLayout {
    /// Switches of `gpus` GPUs each, `per_socket` of them a socket, one x16
    /// uplink each.
    Switches { gpus: u32, per_socket: u32 },
    /// Each GPU on a root port of its own, `per_socket` GPUs a socket.
    Direct { per_socket: u32 },
}

struct Board {
    name: &'static str,
    gpu: String,
    host: String,
    /// The generation of the board's PCIe switches (a direct layout takes the host's).
    pcie_generation: String,
    layout: PcieLayout,
    fabric: GpuFabric,
}

/// The older of two PCIe generations: a link trains to the slower end.
fn older(a: &str, b: &str) -> String {
    if a <= b { a.to_string() } else { b.to_string() }
}

/// Builds the preset `name`.
#[expect(clippy::too_many_lines, reason = "a table: one arm per preset, each its board")]
pub fn preset(name: &str, options: &PresetOptions, model: &HardwareModel) -> Result<Topology, TopologyError> {
    let gpu_or = |default: &str| options.gpu.clone().unwrap_or_else(|| default.to_string());
    let host_or = |default: &str| options.host.clone().unwrap_or_else(|| default.to_string());
    let hgx = PcieLayout::Switches { gpus: board::GPUS_PER_PCIE_SWITCH, per_socket: board::PCIE_SWITCHES_PER_SOCKET };
    let fixed_gpu = |gpu: &str| -> Result<String, TopologyError> {
        match &options.gpu {
            Some(other) if other != gpu => {
                let message = format!("preset {name} is built around {gpu}; --gpu {other} applies to the pcie-* presets only");
                Err(PresetOption::Gpu.error(message))
            }
            _ => Ok(gpu.to_string()),
        }
    };
    let board = match name {
        "hgx-h100" | "hgx-h200" | "hgx-h20" => {
            let gpu = fixed_gpu(&name["hgx-".len()..])?;
            let pcie_generation = model.gpu(&gpu).map_err(|m| PresetOption::Gpu.error(m))?.pcie_generation.clone();
            Board { name: leak(name), gpu, host: host_or("spr-2s"), pcie_generation, layout: hgx, fabric: GpuFabric::NvSwitch }
        }
        // DGX B200 (NVIDIA datasheet): eight B200 on NVLink 5 switches, two
        // Intel Xeon Platinum 8570 (Emerald Rapids) hosts, PCIe Gen5.
        "hgx-b200" => {
            let gpu = fixed_gpu("b200")?;
            let pcie_generation = model.gpu(&gpu).map_err(|m| PresetOption::Gpu.error(m))?.pcie_generation.clone();
            Board { name: "hgx-b200", gpu, host: host_or("emr-2s"), pcie_generation, layout: hgx, fabric: GpuFabric::NvSwitch }
        }
        "hgx-a100" => Board {
            name: "hgx-a100",
            gpu: fixed_gpu("a100")?,
            host: host_or("epyc-2s"),
            pcie_generation: "gen4".into(),
            layout: hgx,
            fabric: GpuFabric::NvSwitch,
        },
        "h20-nvlink-mesh" => Board {
            name: "h20-nvlink-mesh",
            gpu: fixed_gpu("h20")?,
            host: host_or("spr-2s"),
            pcie_generation: "gen5".into(),
            layout: hgx,
            fabric: GpuFabric::PairMesh(board::H20_MESH_PAIR_RATE),
        },
        "pcie-gen3-8gpu" => Board {
            name: "pcie-gen3-8gpu",
            gpu: gpu_or("a100"),
            host: host_or("skylake-2s"),
            pcie_generation: "gen3".into(),
            layout: hgx,
            fabric: GpuFabric::None,
        },
        "pcie-gen4-8gpu" => Board {
            name: "pcie-gen4-8gpu",
            gpu: gpu_or("a100"),
            host: host_or("epyc-2s"),
            pcie_generation: "gen4".into(),
            layout: hgx,
            fabric: GpuFabric::None,
        },
        "pcie-gen5-8gpu" => Board {
            name: "pcie-gen5-8gpu",
            gpu: gpu_or("h100"),
            host: host_or("spr-2s"),
            pcie_generation: "gen5".into(),
            layout: hgx,
            fabric: GpuFabric::None,
        },
        "pcie-switch-8gpu" => Board {
            name: "pcie-switch-8gpu",
            gpu: gpu_or("rtx-pro-6000"),
            host: host_or("epyc-turin"),
            pcie_generation: "gen5".into(),
            layout: PcieLayout::Switches { gpus: board::GPUS_PER_WIDE_SWITCH, per_socket: 1 },
            fabric: GpuFabric::None,
        },
        "pcie-direct-8gpu" => {
            let host = host_or("epyc-turin");
            let pcie_generation = model.host(&host).map_err(|m| PresetOption::Host.error(m))?.pcie_generation.clone();
            Board {
                name: "pcie-direct-8gpu",
                gpu: gpu_or("rtx-pro-6000"),
                host,
                pcie_generation,
                layout: PcieLayout::Direct { per_socket: board::DIRECT_GPUS_PER_SOCKET },
                fabric: GpuFabric::None,
            }
        }
        "gb200-nvl72" | "nvlink-fabric" => {
            let most = if name == "gb200-nvl72" { board::NVL72_GPUS } else { MAX_GPUS as u32 };
            let default = if name == "gb200-nvl72" { board::NVL72_GPUS } else { board::NVLINK5_DOMAIN_GPUS };
            let gpus = options.gpus.unwrap_or(default);
            if gpus == 0 || gpus > most {
                return Err(PresetOption::Gpus.error(format!("{name} takes 1 to {most} GPUs; --gpus {gpus} is outside that")));
            }
            if let Some(host) = options.host.as_deref().filter(|h| *h != RACK_HOST) {
                return Err(PresetOption::Host.error(format!("{name} is built of Grace CPUs; --host {host} applies to the other presets")));
            }
            let gpu = fixed_gpu("b200")?;
            known_parts(model, &gpu, RACK_HOST)?;
            return rack(leak(name), &gpu, gpus, model).map_err(TopologyError::Invalid);
        }
        other => {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
            return Err(TopologyError::Invalid(format!(
                "unknown topology {other:?}: use a preset ({}) or a topology file (.toml, `nvidia-smi topo -m` output, NCCL's topology XML)",
                names.join(", ")
            )));
        }
    };
    let gpus = options.gpus.unwrap_or(board::BOARD_GPUS);
    if gpus == 0 || gpus > board::BOARD_GPUS {
        return Err(PresetOption::Gpus.error(format!("{name} has {} GPUs; --gpus must be 1 to {}", board::BOARD_GPUS, board::BOARD_GPUS)));
    }
    known_parts(model, &board.gpu, &board.host)?;
    build(&board, gpus, model).map_err(TopologyError::Invalid)
}

/// A board's GPU and host must be in the hardware model: an unknown one is
/// an error about the option that names it.
fn known_parts(model: &HardwareModel, gpu: &str, host: &str) -> Result<(), TopologyError> {
    model.gpu(gpu).map_err(|m| PresetOption::Gpu.error(m))?;
    model.host(host).map_err(|m| PresetOption::Host.error(m))?;
    Ok(())
}

/// The host of a GB200 rack: its Grace CPUs.
const RACK_HOST: &str = "grace";

/// Preset names are static strings; this maps a matched name back to one.
fn leak(name: &str) -> &'static str {
    PRESETS.iter().map(|(n, _)| *n).find(|n| *n == name).expect("matched names are presets")
}

/// The board of `board` with its first `gpus` GPUs, from `model`: its host,
/// its PCIe tree, its GPUs' NVLink fabric and its drives.
fn build(board: &Board, gpus: u32, model: &HardwareModel) -> Result<Topology, String> {
    let gpu_model = model.gpu(&board.gpu)?;
    let host = model.host(&board.host)?;
    let rates = LinkRates { model };
    let policy = Policy {
        p2p_across_sockets: host.p2p_across_sockets,
        root_complex_p2p_factor: host.root_complex_p2p_factor,
        nvls: matches!(board.fabric, GpuFabric::NvSwitch) && model.nccl_arch(gpu_model.arch)?.nvls_efficiency > 0.0,
    };
    let mut topo = Topology::new(board.name, &board.gpu, &board.host, policy);
    topo.description = PRESETS.iter().find(|(n, _)| *n == board.name).map(|(_, d)| d.to_string()).unwrap_or_default();
    if gpus < board::BOARD_GPUS {
        topo.description = format!("{} (first {gpus} GPUs)", topo.description);
    }

    let sockets = add_host(&mut topo, board, host, &rates)?;
    let gpu_nodes = add_pcie(&mut topo, board, gpus, (gpu_model, host), &sockets, &rates)?;
    add_fabric(&mut topo, board, gpu_model, &gpu_nodes, model)?;
    if let Some(layout) = super::preset_drives(board.name) {
        topo.attach_drives(&layout, model).map_err(|e| e.to_string())?;
    }
    topo.validate().map_err(|e| e.to_string())?;
    Ok(topo)
}

/// The host's sockets (two, or one on a one-socket platform), each with its
/// memory, joined by the socket link.
fn add_host(topo: &mut Topology, board: &Board, host: &HostPlatform, rates: &LinkRates) -> Result<Vec<NodeId>, String> {
    let socket_count = host.sockets();
    let sockets: Vec<NodeId> = (0..socket_count).map(|s| topo.add_node(format!("cpu{s}"), NodeKind::CpuSocket, s)).collect();
    let (memory_rate, channels) = rates.memory(&board.host)?;
    for (s, &socket) in sockets.iter().enumerate() {
        let memory = topo.add_node(format!("mem{s}"), NodeKind::HostMemory, s as u32);
        topo.connect_shared(socket, memory, LinkKind::MemoryBus { channels }, memory_rate, crate::units::Time::ZERO);
    }
    if let [first, second] = sockets[..] {
        topo.connect(first, second, LinkKind::SocketLink, host.socket_link(), host.socket_link_latency);
    }
    Ok(sockets)
}

/// The GPUs in order under the switches or root ports, so that a slice of
/// the board's first GPUs shares what the board's first GPUs share; a link
/// trains to the older generation of its two ends.
fn add_pcie(
    topo: &mut Topology,
    board: &Board,
    gpus: u32,
    (gpu_model, host): (&GpuModel, &HostPlatform),
    sockets: &[NodeId],
    rates: &LinkRates,
) -> Result<Vec<NodeId>, String> {
    let socket_count = sockets.len() as u32;
    let socket_of = |slot: u32, per_socket: u32| (slot / per_socket).min(socket_count - 1);
    let pcie_link = |generation: String| -> Result<(LinkKind, Bandwidth, Time), String> {
        let (rate, latency) = rates.pcie(&generation, 16)?;
        Ok((LinkKind::Pcie { generation, lanes: 16 }, rate, latency))
    };
    let (uplink, uplink_rate, uplink_latency) = pcie_link(older(&board.pcie_generation, &host.pcie_generation))?;
    let gpu_port_generation = match board.layout {
        PcieLayout::Switches { .. } => &board.pcie_generation,
        PcieLayout::Direct { .. } => &host.pcie_generation,
    };
    let (gpu_link, gpu_rate, gpu_latency) = pcie_link(older(&gpu_model.pcie_generation, gpu_port_generation))?;
    let mut ports_used = vec![0u32; socket_count as usize];
    let mut take_port = |socket: u32, what: &str| -> Result<(), String> {
        ports_used[socket as usize] += 1;
        if ports_used[socket as usize] > host.root_ports() {
            return Err(format!(
                "{} has {} x16 root ports a socket ({} PCIe lanes); {what} needs more: use fewer GPUs or another --host",
                board.host,
                host.root_ports(),
                host.pcie_lanes
            ));
        }
        Ok(())
    };
    let mut gpu_nodes = Vec::new();
    match board.layout {
        PcieLayout::Switches { gpus: per_switch, per_socket } => {
            let mut switches = Vec::new();
            for s in 0..gpus.div_ceil(per_switch) {
                let socket = socket_of(s, per_socket);
                take_port(socket, &format!("pcie-sw{s}"))?;
                let switch = topo.add_node(format!("pcie-sw{s}"), NodeKind::PcieSwitch, socket);
                topo.connect(switch, sockets[socket as usize], uplink.clone(), uplink_rate, uplink_latency);
                switches.push(switch);
            }
            for g in 0..gpus {
                let switch = switches[(g / per_switch) as usize];
                let node = topo.add_node(format!("GPU{g}"), NodeKind::Gpu, topo.node(switch).socket);
                topo.connect(node, switch, gpu_link.clone(), gpu_rate, gpu_latency);
                gpu_nodes.push(node);
            }
        }
        PcieLayout::Direct { per_socket } => {
            for g in 0..gpus {
                let socket = socket_of(g, per_socket);
                take_port(socket, &format!("GPU{g}"))?;
                let node = topo.add_node(format!("GPU{g}"), NodeKind::Gpu, socket);
                topo.connect(node, sockets[socket as usize], gpu_link.clone(), gpu_rate, gpu_latency);
                gpu_nodes.push(node);
            }
        }
    }
    Ok(gpu_nodes)
}

/// The GPUs' NVLink: into the NVSwitch, a mesh of pairs, a two-card bridge
/// or none.
fn add_fabric(topo: &mut Topology, board: &Board, gpu_model: &GpuModel, gpu_nodes: &[NodeId], model: &HardwareModel) -> Result<(), String> {
    let rates = LinkRates { model };
    match board.fabric {
        GpuFabric::NvSwitch => {
            let links = gpu_model.nvlink_links;
            let (rate, latency) = rates.nvlink(&gpu_model.nvlink_generation, links)?;
            let fabric = topo.add_node("nvswitch", NodeKind::NvSwitch, 0);
            for &gpu in gpu_nodes {
                topo.connect(gpu, fabric, LinkKind::NvLink { generation: gpu_model.nvlink_generation.clone(), links }, rate, latency);
            }
        }
        GpuFabric::PairMesh(pair_rate) => {
            let generation = model.nvlink(&gpu_model.nvlink_generation)?;
            let rate = pair_rate.scaled(generation.efficiency);
            // The vendor gives the pair rate, not a link count: 18 links over
            // 7 peers is 2 or 3 links a pair.
            let links_per_pair = gpu_model.nvlink_links / (board::BOARD_GPUS - 1);
            for (i, &a) in gpu_nodes.iter().enumerate() {
                for &b in &gpu_nodes[i + 1..] {
                    topo.connect(
                        a,
                        b,
                        LinkKind::NvLink { generation: gpu_model.nvlink_generation.clone(), links: links_per_pair },
                        rate,
                        generation.hop_latency,
                    );
                }
            }
        }
        // A PCIe board's cards that have NVLink carry a bridge to their
        // neighbour (GPU0-GPU1, GPU2-GPU3, ...) with all their links: the
        // H100 PCIe's and A100 PCIe's two-card bridges, the H200 NVL's
        // two-way one (NVIDIA's datasheets).
        GpuFabric::None if gpu_model.nvlink_bridge => {
            let links = gpu_model.nvlink_links;
            let (rate, latency) = rates.nvlink(&gpu_model.nvlink_generation, links)?;
            for pair in gpu_nodes.chunks_exact(2) {
                topo.connect(pair[0], pair[1], LinkKind::NvLink { generation: gpu_model.nvlink_generation.clone(), links }, rate, latency);
            }
        }
        GpuFabric::None => {}
    }
    Ok(())
}

/// A rack of GB200 superchips: `gpus` GPUs, two a Grace CPU (a socket of its
/// own, with its memory), every GPU's NVLink into one switch fabric.
///
/// The GPUs are the `b200` model: NVLink 5 x18 as GB200's; GB200's GPU has
/// 186 GB and 2.5 PFLOP/s of dense BF16 (NVIDIA GB200 NVL72 datasheet:
/// 13.4 TB and 180 PFLOP/s over 72 GPUs) against B200's 180 GB and 2.25,
/// so compute runs about 10% slow here. A GPU reaches its Grace CPU over
/// NVLink-C2C (900 GB/s "bidirectional", NVIDIA), for which icsim has no
/// link kind: it is modelled as the GPU's PCIe link (assumed; only host
/// memory traffic crosses it, no collective over the NVLink fabric does).
fn rack(name: &'static str, gpu: &str, gpus: u32, model: &HardwareModel) -> Result<Topology, String> {
    let gpu_model = model.gpu(gpu)?;
    let host_key = RACK_HOST;
    let host = model.host(host_key)?;
    let policy = Policy {
        p2p_across_sockets: host.p2p_across_sockets,
        root_complex_p2p_factor: host.root_complex_p2p_factor,
        nvls: model.nccl_arch(gpu_model.arch)?.nvls_efficiency > 0.0,
    };
    let mut topo = Topology::new(name, gpu, host_key, policy);
    topo.description = PRESETS.iter().find(|(n, _)| *n == name).map(|(_, d)| d.to_string()).unwrap_or_default();
    if name == "nvlink-fabric" || gpus < board::NVL72_GPUS {
        topo.description = format!("{} ({gpus} GPUs)", topo.description);
    }
    let rates = LinkRates { model };
    let (memory_rate, channels) = rates.memory(host_key)?;
    let (pcie_rate, pcie_latency) = rates.pcie(&gpu_model.pcie_generation, gpu_model.pcie_lanes)?;
    let pcie = LinkKind::Pcie { generation: gpu_model.pcie_generation.clone(), lanes: gpu_model.pcie_lanes };
    let links = gpu_model.nvlink_links;
    let (nvlink_rate, nvlink_latency) = rates.nvlink(&gpu_model.nvlink_generation, links)?;
    let nvlink = LinkKind::NvLink { generation: gpu_model.nvlink_generation.clone(), links };
    let fabric = topo.add_node("nvlink-switch", NodeKind::NvSwitch, 0);
    let mut grace = None;
    for g in 0..gpus {
        let socket = g / board::GPUS_PER_SUPERCHIP;
        if g % board::GPUS_PER_SUPERCHIP == 0 {
            let cpu = topo.add_node(format!("grace{socket}"), NodeKind::CpuSocket, socket);
            let memory = topo.add_node(format!("mem{socket}"), NodeKind::HostMemory, socket);
            topo.connect_shared(cpu, memory, LinkKind::MemoryBus { channels }, memory_rate, Time::ZERO);
            grace = Some(cpu);
        }
        let node = topo.add_node(format!("GPU{g}"), NodeKind::Gpu, socket);
        topo.connect(node, grace.expect("a superchip's CPU comes before its GPUs"), pcie.clone(), pcie_rate, pcie_latency);
        topo.connect(node, fabric, nvlink.clone(), nvlink_rate, nvlink_latency);
    }
    topo.validate().map_err(|e| e.to_string())?;
    Ok(topo)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_host_brings_its_socket_link_and_root_ports() {
        let model = HardwareModel::base();
        let options = |host: &str| PresetOptions { gpus: None, gpu: None, host: Some(host.into()) };
        let genoa = preset("pcie-direct-8gpu", &options("epyc-genoa"), &model).unwrap();
        let socket = genoa.links().iter().find(|l| l.kind == LinkKind::SocketLink).expect("two sockets");
        // Four x16 xGMI-3 links at 32 Gb/s a lane, 68% of the raw rate each way.
        assert_eq!(socket.bandwidth, Bandwidth::from_gbps_f64(4.0 * 16.0 * 4.0 * 0.68));
        assert_eq!(genoa.host, "epyc-genoa");
        // One socket of 128 lanes has 8 x16 root ports: 8 GPUs fit, and a
        // Skylake socket's 48 lanes (3 ports) cannot take four direct GPUs.
        assert_eq!(preset("pcie-direct-8gpu", &options("threadripper-pro"), &model).unwrap().gpus().len(), 8);
        let error = preset("pcie-direct-8gpu", &options("skylake-2s"), &model).unwrap_err().to_string();
        assert!(error.contains("3 x16 root ports"), "{error}");
        let error = preset("gb200-nvl72", &options("spr-2s"), &model).unwrap_err().to_string();
        assert!(error.contains("Grace"), "{error}");
    }

    #[test]
    fn pcie_cards_with_a_bridge_get_it_and_sxm_parts_do_not() {
        let model = HardwareModel::base();
        let board =
            |gpu: &str| preset("pcie-switch-8gpu", &PresetOptions { gpus: None, gpu: Some(gpu.into()), host: None }, &model).unwrap();
        let bridges = |topo: &Topology| topo.links().iter().filter(|l| matches!(l.kind, LinkKind::NvLink { .. })).count();
        assert_eq!(bridges(&board("h100-pcie")), 8, "four pairs, both directions");
        assert_eq!(bridges(&board("h100")), 0);
        // A Gen4 card on a Gen5 switch trains at Gen4.
        let l40s = board("l40s");
        let gpu_link = l40s.links().iter().find(|l| l.from == l40s.gpus()[0]).unwrap();
        assert_eq!(gpu_link.kind, LinkKind::Pcie { generation: "gen4".into(), lanes: 16 });
    }
    use super::*;
    use crate::topology::Medium;

    #[test]
    fn every_preset_builds_with_every_gpu_count() {
        let model = HardwareModel::base();
        for (name, _) in PRESETS {
            for gpus in 1..=8 {
                let topo = preset(name, &PresetOptions { gpus: Some(gpus), gpu: None, host: None }, &model)
                    .unwrap_or_else(|e| panic!("{name} with {gpus} GPUs: {e}"));
                assert_eq!(topo.gpus().len(), gpus as usize);
            }
        }
    }

    #[test]
    fn the_mesh_has_seven_direct_links_a_gpu_and_no_switch() {
        let topo = preset("h20-nvlink-mesh", &PresetOptions::default(), &HardwareModel::base()).unwrap();
        let g = topo.gpus()[3];
        let direct = topo.gpus().iter().filter(|&&o| o != g && topo.path(g, o, Medium::NvLinkDirect).is_some()).count();
        assert_eq!(direct, 7);
        assert!(!topo.has(NodeKind::NvSwitch));
        // Per direction: 64 GB/s a pair at NVLink 4's measured efficiency.
        let path = topo.path(g, topo.gpus()[0], Medium::NvLinkDirect).unwrap();
        assert_eq!(topo.bottleneck(&path), Bandwidth::from_gbps_f64(64.0 * 0.877));
    }

    #[test]
    fn hgx_h200_port_is_eighteen_links_at_measured_efficiency() {
        let topo = preset("hgx-h200", &PresetOptions::default(), &HardwareModel::base()).unwrap();
        assert_eq!(topo.nvlink_bandwidth(topo.gpus()[0]), Bandwidth::from_gbps_f64(450.0 * 0.877));
        assert!(topo.policy.nvls);
        let a100 = preset("hgx-a100", &PresetOptions::default(), &HardwareModel::base()).unwrap();
        assert!(!a100.policy.nvls, "NVSwitch gen 2 has no in-switch reduction");
    }

    #[test]
    fn bad_preset_requests_say_what_is_allowed() {
        let model = HardwareModel::base();
        let error = preset("hgx-h300", &PresetOptions::default(), &model).unwrap_err().to_string();
        assert!(error.contains("hgx-h200") && error.contains(".toml"), "{error}");
        let error = preset("hgx-h200", &PresetOptions { gpus: Some(9), gpu: None, host: None }, &model).unwrap_err().to_string();
        assert!(error.contains("1 to 8"), "{error}");
    }
}
