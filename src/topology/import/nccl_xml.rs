//! NCCL's topology dump (NCCL_TOPO_DUMP_FILE: XML under `<system>`) read
//! into a topology file the way NCCL reads it itself (src/graph/topo.cc,
//! ncclTopoAddCpu, ncclTopoAddPci, ncclTopoAddNvLinks): each `<cpu>` is a
//! socket, a `<pci>` holding `<pci>` elements is a PCIe switch, a `<pci>`
//! holding a `<gpu>` is that GPU, and each `<nvlink>` goes to an NVSwitch, a
//! peer GPU or a CPU by its target class. A `<pci>` of the NVMe class is a
//! drive on its parent (NCCL itself reads it as a plain PCI device); NICs
//! and other devices are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use roxmltree::{Document, Node};

use super::{Assembly, DEFAULT_HOST, ImportError, ImportOptions, NVSWITCH, counted, cpu_name, gpu_name};
use crate::config::hardware::HardwareModel;
use crate::config::topology::{NodeKindFile, TopologyFile};
use crate::topology::{MAX_GPUS, MAX_GPUS_REASON};

/// Identification tables: which model key a part in the dump stands for.
mod identify {
    /// GPU model keys by PCI device id, vendor 0x10de (the PCI ID Repository,
    /// pci.ids: 20b2 "GA100 [A100 SXM4 80GB]", 2330 "GH100 [H100 SXM5 80GB]",
    /// 2335 "GH100 [H200 SXM 141GB]" (also in shared/calibration/h200x2-nvswitch),
    /// 2329 "GH100 [H20]", 2901 "GB100 [B200]").
    pub const GPU_BY_PCI_DEVICE: &[(u32, &str)] =
        &[(0x20b2, "a100"), (0x2330, "h100"), (0x2335, "h200"), (0x2329, "h20"), (0x2901, "b200")];
    pub const NVIDIA_PCI_VENDOR: u32 = 0x10de;

    /// GPU model keys by compute capability (NCCL's `sm` attribute) for
    /// device ids not listed: the SXM part of each architecture.
    pub const GPU_BY_SM: &[(u32, &str)] = &[(80, "a100"), (90, "h100"), (100, "b200")];

    /// Host platform keys of Intel family 6 CPUs, by the lowest model number
    /// of each generation, as NCCL classifies them (src/graph/topo.cc
    /// ncclTopoAddCpu: from 0xCF Emerald Rapids, from 0x8F Sapphire Rapids,
    /// from 0x55 Skylake).
    pub const INTEL_FAMILY_6_FROM_MODEL: &[(u32, &str)] = &[(0xCF, "emr-2s"), (0x8F, "spr-2s"), (0x55, "skylake-2s")];

    /// The host platform of AMD CPUs (NCCL models every AMD socket link alike).
    pub const AMD_HOST: &str = "epyc-2s";

    /// PCIe generation keys by transfer rate per lane, GT/s (PCI-SIG: gen3
    /// 8, gen4 16, gen5 32, gen6 64; NCCL's kvDictPciGen reads the same
    /// strings from sysfs). Gen1 and gen2 are not in the hardware model.
    pub const PCIE_BY_RATE: &[(f64, &str)] = &[(8.0, "gen3"), (16.0, "gen4"), (32.0, "gen5"), (64.0, "gen6")];

    /// NVLink target classes (NCCL kvDictPciClass): an NVSwitch bridge, a
    /// CPU; any class starting 0x03 is a GPU. NCCL treats other and missing
    /// classes as an NVSwitch.
    pub const NVSWITCH_CLASS: &str = "0x068000";
    pub const CPU_CLASS: &str = "0x068001";
    pub const GPU_CLASS_PREFIX: &str = "0x03";

    /// PCI class of an NVMe controller (PCI-SIG class codes: 0x01 mass
    /// storage, 0x08 non-volatile memory, 0x02 NVMe).
    pub const NVME_CLASS: &str = "0x010802";
}

/// NCCL's lane count when sysfs gave none (topo.cc: "if (width == 0) width = 16").
const UNREPORTED_WIDTH_LANES: u32 = 16;

/// Where an NVLink of a GPU goes.
enum NvlinkTarget {
    NvSwitch,
    Gpu(String),
    Cpu,
}

struct Gpu {
    dev: u32,
    /// The NCCL rank that dumped the file saw this GPU as, where written.
    rank: Option<u32>,
    sm: u32,
    /// PCI device id, for NVIDIA devices.
    device: Option<u32>,
    busid: Option<String>,
    socket: u32,
    /// The switch or CPU the GPU hangs off.
    parent: String,
    link: PcieLink,
    nvlinks: Vec<(NvlinkTarget, u32)>,
    line: usize,
}

struct PcieLink {
    generation: Option<String>,
    lanes: u32,
}

/// A PCIe switch or an NVMe drive: a part on a PCIe link to its parent.
struct PciePart {
    name: String,
    socket: u32,
    parent: String,
    link: PcieLink,
}

/// What the walk over the document collects.
struct Dump<'p> {
    path: &'p Path,
    gpus: Vec<Gpu>,
    switches: Vec<PciePart>,
    drives: Vec<PciePart>,
    /// Things the model leaves out, said in the description.
    notes: Vec<String>,
}

fn is_drive(node: Node) -> bool {
    node.has_tag_name("pci") && node.attribute("class").is_some_and(|c| c.eq_ignore_ascii_case(identify::NVME_CLASS))
}

fn line_of(node: Node) -> usize {
    node.document().text_pos_at(node.range().start).row as usize
}

/// An integer attribute, decimal or 0x hexadecimal.
fn number(text: &str) -> Option<i64> {
    match text.trim().strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => text.trim().parse().ok(),
    }
}

impl Dump<'_> {
    fn error(&self, node: Node, message: impl Into<String>) -> ImportError {
        ImportError::syntax(self.path, line_of(node), message)
    }

    fn required(&self, node: Node, name: &str) -> Result<i64, ImportError> {
        let tag = node.tag_name().name();
        let text = node.attribute(name).ok_or_else(|| self.error(node, format!("<{tag}> has no {name} attribute")))?;
        number(text).ok_or_else(|| self.error(node, format!("<{tag}> {name}={text:?} is not a number")))
    }

    fn unsigned(&self, node: Node, name: &str) -> Result<u32, ImportError> {
        let value = self.required(node, name)?;
        let tag = node.tag_name().name();
        match u32::try_from(value) {
            Ok(value) => Ok(value),
            Err(_) if value < 0 => Err(self.error(node, format!("<{tag}> {name}={value} must not be negative"))),
            Err(_) => Err(self.error(node, format!("<{tag}> {name}={value} is too large: at most {}", u32::MAX))),
        }
    }

    /// The link of a `<pci>` element to its parent.
    fn pcie_link(&mut self, pci: Node) -> Result<PcieLink, ImportError> {
        let lanes = match pci.attribute("link_width").map(|w| (w, number(w))) {
            None | Some((_, Some(0))) => UNREPORTED_WIDTH_LANES,
            Some((_, Some(width))) if let Ok(width) = u32::try_from(width) => width,
            Some((text, _)) => return Err(self.error(pci, format!("link_width={text:?} is not a lane count"))),
        };
        let speed = pci.attribute("link_speed").unwrap_or("");
        let rate = speed.split("GT/s").next().and_then(|r| r.trim().parse::<f64>().ok()).filter(|_| speed.contains("GT/s"));
        let generation = match rate {
            Some(rate) => match identify::PCIE_BY_RATE.iter().find(|(r, _)| (r - rate).abs() < 0.01) {
                Some((_, generation)) => Some(generation.to_string()),
                None => {
                    return Err(self.error(
                        pci,
                        format!("link_speed={speed:?}: the hardware model has PCIe gen3 to gen6 (8, 16, 32 and 64 GT/s) only"),
                    ));
                }
            },
            None => {
                let busid = pci.attribute("busid").unwrap_or("?");
                self.notes.push(format!("PCIe {busid} reports link_speed {speed:?}: the GPU's generation is used"));
                None
            }
        };
        Ok(PcieLink { generation, lanes })
    }

    /// A `<pci>` element under `parent` (a CPU or a switch) on `socket`.
    fn walk(&mut self, pci: Node, parent: &str, socket: u32) -> Result<(), ImportError> {
        if let Some(gpu) = pci.children().find(|c| c.has_tag_name("gpu")) {
            return self.add_gpu(pci, gpu, parent, socket);
        }
        if is_drive(pci) {
            let (name, link) = (format!("nvme{}", self.drives.len()), self.pcie_link(pci)?);
            self.drives.push(PciePart { name, socket, parent: parent.to_string(), link });
            return Ok(());
        }
        let children: Vec<Node> = pci.children().filter(|c| c.has_tag_name("pci")).collect();
        if !children.iter().any(|c| c.descendants().any(|d| d.has_tag_name("gpu") || is_drive(d))) {
            // A NIC or an empty bridge: no GPU or storage traffic crosses it.
            return Ok(());
        }
        let name = format!("pcie-sw{}", self.switches.len());
        let link = self.pcie_link(pci)?;
        self.switches.push(PciePart { name: name.clone(), socket, parent: parent.to_string(), link });
        for child in children {
            self.walk(child, &name, socket)?;
        }
        Ok(())
    }

    /// A PCI id attribute (`vendor`, `device`), if there is one: 16 bits.
    fn pci_id(&self, pci: Node, name: &str) -> Result<Option<u32>, ImportError> {
        let Some(text) = pci.attribute(name) else { return Ok(None) };
        match number(text).and_then(|id| u16::try_from(id).ok()) {
            Some(id) => Ok(Some(u32::from(id))),
            None => Err(self.error(pci, format!("<pci> {name}={text:?} is not a PCI {name} id: a 16-bit number such as 0x10de"))),
        }
    }

    /// A number below [`MAX_GPUS`] (a GPU's `dev` or `rank`).
    fn gpu_index(&self, gpu: Node, name: &str) -> Result<u32, ImportError> {
        let value = self.unsigned(gpu, name)?;
        if value as usize >= MAX_GPUS {
            return Err(self.error(gpu, format!("<gpu> {name}={value} is out of range: allowed 0 to {} ({MAX_GPUS_REASON})", MAX_GPUS - 1)));
        }
        Ok(value)
    }

    fn add_gpu(&mut self, pci: Node, gpu: Node, parent: &str, socket: u32) -> Result<(), ImportError> {
        let nvidia = self.pci_id(pci, "vendor")?.is_none_or(|v| v == identify::NVIDIA_PCI_VENDOR);
        let device = self.pci_id(pci, "device")?.filter(|_| nvidia);
        let mut nvlinks = Vec::new();
        for nvlink in gpu.children().filter(|c| c.has_tag_name("nvlink")) {
            let count = self.unsigned(nvlink, "count")?;
            let target = match nvlink.attribute("tclass") {
                Some(identify::CPU_CLASS) => NvlinkTarget::Cpu,
                Some(class) if class.starts_with(identify::GPU_CLASS_PREFIX) => {
                    let busid =
                        nvlink.attribute("target").ok_or_else(|| self.error(nvlink, "an NVLink to a GPU needs its target busid"))?;
                    NvlinkTarget::Gpu(busid.to_ascii_lowercase())
                }
                // NCCL fills in a missing class itself, as an NVSwitch where
                // it cannot see the target (a VM).
                Some(identify::NVSWITCH_CLASS) | None => NvlinkTarget::NvSwitch,
                Some(other) => {
                    let line = line_of(nvlink);
                    self.notes.push(format!("the NVLink on line {line} goes to class {other}, taken for an NVSwitch as NCCL does"));
                    NvlinkTarget::NvSwitch
                }
            };
            nvlinks.push((target, count));
        }
        let (dev, sm, link) = (self.gpu_index(gpu, "dev")?, self.unsigned(gpu, "sm")?, self.pcie_link(pci)?);
        let rank = gpu.attribute("rank").map(|_| self.gpu_index(gpu, "rank")).transpose()?;
        self.gpus.push(Gpu {
            dev,
            rank,
            sm,
            device,
            busid: pci.attribute("busid").map(str::to_ascii_lowercase),
            socket,
            parent: parent.to_string(),
            link,
            nvlinks,
            line: line_of(gpu),
        });
        Ok(())
    }
}

/// The GPU model key of every GPU, and how it was chosen.
fn gpu_model(path: &Path, gpus: &[Gpu], options: &ImportOptions) -> Result<(String, String), ImportError> {
    if let Some(gpu) = &options.gpu {
        return Ok((gpu.clone(), "given".into()));
    }
    let mut chosen: BTreeMap<&str, String> = BTreeMap::new();
    for gpu in gpus {
        let by_device = gpu.device.and_then(|d| identify::GPU_BY_PCI_DEVICE.iter().find(|(id, _)| *id == d));
        let by_sm = identify::GPU_BY_SM.iter().find(|(sm, _)| *sm == gpu.sm);
        let (key, how) = if let Some((id, key)) = by_device {
            (*key, format!("PCI device {id:#06x}"))
        } else if let Some((_, key)) = by_sm {
            (*key, format!("sm{}, the architecture's default", gpu.sm))
        } else {
            return Err(ImportError::syntax(
                path,
                gpu.line,
                format!("GPU{} (sm{}) is not a model icsim knows by its PCI device or architecture; pass --gpu", gpu.dev, gpu.sm),
            ));
        };
        chosen.entry(key).or_insert(how);
    }
    if chosen.len() > 1 {
        let keys: Vec<&str> = chosen.keys().copied().collect();
        return Err(ImportError::invalid(
            path,
            format!("GPUs of several models ({}): a topology has one GPU model; pass --gpu", keys.join(", ")),
        ));
    }
    chosen.pop_first().map(|(key, how)| (key.to_string(), how)).ok_or_else(|| ImportError::invalid(path, "no GPU"))
}

/// The host platform key, from the first CPU's identity.
fn host_platform(cpu: Node, options: &ImportOptions) -> (String, String) {
    if let Some(host) = &options.host {
        return (host.clone(), "given".into());
    }
    let vendor = cpu.attribute("vendor").unwrap_or("");
    let (family, model) = (cpu.attribute("familyid").and_then(number), cpu.attribute("modelid").and_then(number));
    let identity = format!("{vendor} family {} model {}", family.unwrap_or(-1), model.unwrap_or(-1));
    let known = match (vendor, family, model) {
        ("GenuineIntel", Some(6), Some(model)) => {
            identify::INTEL_FAMILY_6_FROM_MODEL.iter().find(|(lowest, _)| model >= i64::from(*lowest)).map(|(_, host)| *host)
        }
        ("AuthenticAMD", _, _) => Some(identify::AMD_HOST),
        _ => None,
    };
    match known {
        Some(host) => (host.to_string(), format!("CPU {identity}")),
        None => (DEFAULT_HOST.to_string(), format!("assumed: CPU {identity} is not in icsim's table; pass --host")),
    }
}

pub(super) fn parse(path: &Path, text: &str, options: &ImportOptions, model: &HardwareModel) -> Result<TopologyFile, ImportError> {
    let document =
        Document::parse(text).map_err(|e| ImportError::syntax(path, e.pos().row as usize, format!("not well-formed XML: {e}")))?;
    let system = document.root_element();
    if !system.has_tag_name("system") {
        return Err(ImportError::syntax(path, line_of(system), "the root element must be <system>, as NCCL_TOPO_DUMP_FILE writes it"));
    }
    let mut dump = Dump { path, gpus: Vec::new(), switches: Vec::new(), drives: Vec::new(), notes: Vec::new() };
    let cpus: Vec<Node> = system.children().filter(|c| c.has_tag_name("cpu")).collect();
    let first_cpu = *cpus.first().ok_or_else(|| ImportError::syntax(path, line_of(system), "no <cpu> element"))?;
    let mut sockets = BTreeSet::new();
    for (index, &cpu) in cpus.iter().enumerate() {
        // A VM often reports numaid -1: the CPU's position stands in.
        let socket = match dump.required(cpu, "numaid")? {
            numa if numa >= 0 => u32::try_from(numa).map_err(|_| dump.error(cpu, format!("numaid {numa} is too large")))?,
            _ => index as u32,
        };
        if !sockets.insert(socket) {
            return Err(dump.error(cpu, format!("a second <cpu> on NUMA node {socket}")));
        }
        for pci in cpu.children().filter(|c| c.has_tag_name("pci")) {
            dump.walk(pci, &cpu_name(socket), socket)?;
        }
    }
    if dump.gpus.is_empty() {
        return Err(ImportError::invalid(path, "no <gpu> element under the <cpu> elements"));
    }
    dump.gpus.sort_by_key(|g| g.dev);
    if let Some(pair) = dump.gpus.windows(2).find(|w| w[0].dev == w[1].dev) {
        return Err(ImportError::syntax(
            path,
            pair[1].line,
            format!("a second GPU with dev {} (the first is line {})", pair[1].dev, pair[0].line),
        ));
    }
    let mut ranked: Vec<(u32, usize)> = dump.gpus.iter().filter_map(|g| Some((g.rank?, g.line))).collect();
    ranked.sort();
    if let Some(pair) = ranked.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(ImportError::syntax(
            path,
            pair[1].1,
            format!("a second GPU with rank {} (the first is line {})", pair[1].0, pair[0].1),
        ));
    }

    let (gpu, gpu_how) = gpu_model(path, &dump.gpus, options)?;
    let (host, host_how) = host_platform(first_cpu, options);
    let mut assembly = Assembly::with_sockets(&sockets);
    let on_nvswitch = dump.gpus.iter().any(|g| g.nvlinks.iter().any(|(t, _)| matches!(t, NvlinkTarget::NvSwitch)));
    if on_nvswitch {
        assembly.add_node(NVSWITCH, NodeKindFile::Nvswitch, 0);
    }
    for switch in &dump.switches {
        assembly.add_node(&switch.name, NodeKindFile::PcieSwitch, switch.socket);
        assembly.pcie(&switch.name, &switch.parent, switch.link.generation.clone(), Some(switch.link.lanes));
    }
    for drive in &dump.drives {
        assembly.add_node(&drive.name, NodeKindFile::Nvme, drive.socket);
        assembly.pcie(&drive.name, &drive.parent, drive.link.generation.clone(), Some(drive.link.lanes));
    }
    let names: BTreeMap<&str, String> = dump.gpus.iter().filter_map(|g| g.busid.as_deref().map(|busid| (busid, gpu_name(g.dev)))).collect();
    let mut peers: BTreeMap<(String, String), u32> = BTreeMap::new();
    for g in &dump.gpus {
        let name = gpu_name(g.dev);
        assembly.add_node(&name, NodeKindFile::Gpu, g.socket);
        assembly.pcie(&name, &g.parent, g.link.generation.clone(), Some(g.link.lanes));
        // NCCL adds up a GPU's links to the switch chips into one.
        let to_switch: u32 = g.nvlinks.iter().filter(|(t, _)| matches!(t, NvlinkTarget::NvSwitch)).map(|(_, count)| count).sum();
        if to_switch > 0 {
            assembly.nvlink(&name, NVSWITCH, to_switch);
        }
        for (target, count) in &g.nvlinks {
            match target {
                NvlinkTarget::NvSwitch => {}
                NvlinkTarget::Gpu(busid) => match names.get(busid.as_str()) {
                    // Both ends list the link: keep it once.
                    Some(peer) => {
                        let pair = if name < *peer { (name.clone(), peer.clone()) } else { (peer.clone(), name.clone()) };
                        peers.entry(pair).or_insert(*count);
                    }
                    None => dump.notes.push(format!("{name}'s NVLink to {busid}, a GPU not in the file, is left out")),
                },
                NvlinkTarget::Cpu => dump.notes.push(format!("{name}'s NVLink to its CPU is left out (not modelled)")),
            }
        }
    }
    for ((a, b), count) in &peers {
        assembly.nvlink(a, b, *count);
    }

    let mut description = format!(
        "Imported from NCCL's topology dump ({}): {}, GPU {gpu} ({gpu_how}), host {host} ({host_how}), {}, {}{}{}.",
        path.display(),
        counted(dump.gpus.len(), "GPU", "GPUs"),
        counted(sockets.len(), "socket", "sockets"),
        counted(dump.switches.len(), "PCIe switch", "PCIe switches"),
        if dump.drives.is_empty() { String::new() } else { format!(", {}", counted(dump.drives.len(), "NVMe drive", "NVMe drives")) },
        if on_nvswitch { ", NVLinks into one NVSwitch" } else { "" },
    );
    for note in &dump.notes {
        description += &format!(" {note}.");
    }
    assembly.finish(path, model, gpu, host, description)
}

#[cfg(test)]
mod tests {
    use super::super::DEFAULT_GPU;
    use super::*;
    use crate::topology::{LinkKind, NodeId, NodeKind, Relation, build_from_file};

    fn import_text(text: &str, options: &ImportOptions) -> Result<TopologyFile, ImportError> {
        parse(Path::new("dump.xml"), text, options, &HardwareModel::base())
    }

    /// Two sockets; GPU0 and GPU1 under one switch on socket 0, GPU2 on
    /// socket 1; GPU0 and GPU1 joined directly by 12 NVLinks.
    const TWO_SOCKETS: &str = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">
    <pci busid="0000:10:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" vendor="0x10de" device="0x20b2" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="80" rank="0" gdr="1">
          <nvlink target="0000:12:00.0" count="12" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:12:00.0" class="0x030200" vendor="0x10de" device="0x20b2" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="80" rank="1" gdr="1">
          <nvlink target="0000:11:00.0" count="12" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:13:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">
        <nic><net name="mlx5_0" dev="0" speed="200000"/></nic>
      </pci>
    </pci>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">
    <pci busid="0000:80:00.0" class="0x030200" vendor="0x10de" device="0x20b2" link_speed="16.0 GT/s PCIe" link_width="8">
      <gpu dev="2" sm="80" rank="2" gdr="1"/>
    </pci>
  </cpu>
</system>"#;

    #[test]
    fn switches_sockets_peers_and_lanes_follow_the_dump() {
        let raw = import_text(TWO_SOCKETS, &ImportOptions::default()).unwrap();
        assert_eq!((raw.gpu.as_str(), raw.host.as_str()), ("a100", "epyc-2s"));
        let topo = build_from_file(Path::new("dump.xml"), &raw, &HardwareModel::base()).unwrap();
        let g = topo.gpus().to_vec();
        assert_eq!(topo.relation(g[0], g[1]), Relation::NvLink(12));
        assert_eq!(topo.relation(g[0], g[2]), Relation::Sys);
        assert_eq!(topo.nodes_of(NodeKind::PcieSwitch).count(), 1, "the NIC's bridge holds no GPU");
        assert_eq!(topo.node(g[2]).socket, 1);
        let lanes = topo.links().iter().find(|l| l.from == g[2]).map(|l| l.kind.clone());
        assert_eq!(lanes, Some(LinkKind::Pcie { generation: "gen4".into(), lanes: 8 }));
        assert_eq!(raw.links.iter().filter(|l| l.links == Some(12)).count(), 1, "the pair listed from both ends is one link");
    }

    #[test]
    fn nvme_drives_are_kept_on_their_switch_or_root_port() {
        let drive =
            |busid: &str, speed: &str| format!(r#"<pci busid="{busid}" class="0x010802" link_speed="{speed} GT/s PCIe" link_width="4"/>"#);
        let text = TWO_SOCKETS
            .replace(
                "      <pci busid=\"0000:13:00.0\"",
                &format!("      {}\n      <pci busid=\"0000:13:00.0\"", drive("0000:14:00.0", "16.0")),
            )
            .replace("  </cpu>\n</system>", &format!("    {}\n  </cpu>\n</system>", drive("0000:90:00.0", "32.0")));
        let raw = import_text(&text, &ImportOptions::default()).unwrap();
        assert!(raw.description.contains("2 NVMe drives"), "{}", raw.description);
        let topo = build_from_file(Path::new("dump.xml"), &raw, &HardwareModel::base()).unwrap();
        let drives = topo.drives();
        assert_eq!(drives.len(), 2);
        let port =
            |d: NodeId| topo.node(topo.link(topo.path(d, topo.gpus()[0], crate::topology::Medium::Pcie).unwrap().links[0]).to).name.clone();
        assert_eq!((port(drives[0]).as_str(), port(drives[1]).as_str()), ("pcie-sw0", "cpu1"));
        assert_eq!((topo.drive_model(drives[0]), topo.drive_model(drives[1])), (Some("gen4"), Some("gen5")));
        let again: TopologyFile = crate::config::parse_toml(Path::new("w.toml"), &super::super::to_toml(&raw)).unwrap();
        assert_eq!(again, raw, "drives survive the written file");
    }

    #[test]
    fn counts_beyond_what_a_number_holds_are_called_too_large() {
        let error = import_text(&TWO_SOCKETS.replacen("count=\"12\"", "count=\"99999999999\"", 1), &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("dump.xml: line") && error.contains("too large") && !error.contains("negative"), "{error}");
        // A width that wraps around 2^32 to 16 is not taken for 16.
        let wide = TWO_SOCKETS.replacen("link_width=\"8\"", "link_width=\"4294967304\"", 1);
        let raw = import_text(&wide, &ImportOptions::default());
        assert!(raw.is_err(), "{raw:?}");
    }

    #[test]
    fn bad_device_ids_and_repeated_ranks_are_refused_by_line() {
        for (from, to, line, says) in [
            ("device=\"0x20b2\"", "device=\"0xzz\"", 4, "device=\"0xzz\""),
            ("device=\"0x20b2\"", "device=\"0x1020b2\"", 4, "16-bit"),
            ("vendor=\"0x10de\"", "vendor=\"nvidia\"", 4, "vendor"),
            ("dev=\"0\"", "dev=\"4000000000\"", 5, "dev=4000000000"),
            ("rank=\"1\"", "rank=\"0\"", 10, "a second GPU with rank 0 (the first is line 5)"),
        ] {
            let error = import_text(&TWO_SOCKETS.replacen(from, to, 1), &ImportOptions::default()).unwrap_err().to_string();
            assert!(error.starts_with(&format!("dump.xml: line {line}:")) && error.contains(says), "{to}: {error}");
        }
    }

    #[test]
    fn sm_picks_the_architecture_default_when_the_device_is_unknown() {
        let text = TWO_SOCKETS.replace("0x20b2", "0x20f1").replace("sm=\"80\"", "sm=\"90\"");
        let raw = import_text(&text, &ImportOptions::default()).unwrap();
        assert_eq!(raw.gpu, "h100");
        assert!(raw.description.contains("sm90"), "{}", raw.description);
        let text = TWO_SOCKETS.replace("0x20b2", "0x9999").replace("sm=\"80\"", "sm=\"75\"");
        let error = import_text(&text, &ImportOptions::default()).unwrap_err().to_string();
        assert!(error.starts_with("dump.xml: line 5:") && error.contains("--gpu"), "{error}");
    }

    #[test]
    fn intel_generations_follow_nccls_thresholds() {
        let host = |model: &str| {
            let text = TWO_SOCKETS.replace("AuthenticAMD", "GenuineIntel").replace("familyid=\"25\" modelid=\"1\"", model);
            import_text(&text, &ImportOptions::default()).unwrap().host
        };
        assert_eq!(host("familyid=\"6\" modelid=\"207\""), "emr-2s");
        assert_eq!(host("familyid=\"6\" modelid=\"143\""), "spr-2s");
        assert_eq!(host("familyid=\"6\" modelid=\"85\""), "skylake-2s");
        assert_eq!(host("familyid=\"6\" modelid=\"79\""), DEFAULT_HOST);
    }

    #[test]
    fn every_key_in_the_tables_is_in_the_shipped_model() {
        let model = HardwareModel::base();
        for (_, key) in identify::GPU_BY_PCI_DEVICE.iter().chain(identify::GPU_BY_SM) {
            assert!(model.gpu(key).is_ok(), "{key}");
        }
        for key in identify::INTEL_FAMILY_6_FROM_MODEL.iter().map(|(_, k)| *k).chain([identify::AMD_HOST, DEFAULT_HOST]) {
            assert!(model.host(key).is_ok(), "{key}");
        }
        for (_, key) in identify::PCIE_BY_RATE {
            assert!(model.pcie(key).is_ok(), "{key}");
        }
        assert!(model.gpu(DEFAULT_GPU).is_ok());
    }

    #[test]
    fn malformed_dumps_name_the_file_and_line() {
        let error = import_text("<system>\n  <cpu numaid=\"0\">\n</system>", &ImportOptions::default()).unwrap_err().to_string();
        assert!(error.starts_with("dump.xml: line 3:") && error.contains("XML"), "{error}");
        let text = TWO_SOCKETS.replace("<gpu dev=\"2\" sm=\"80\"", "<gpu dev=\"2\"");
        let error = import_text(&text, &ImportOptions::default()).unwrap_err().to_string();
        assert!(error.starts_with("dump.xml: line 21:") && error.contains("sm"), "{error}");
        let text = TWO_SOCKETS.replace("link_width=\"8\"", "link_width=\"x8\"");
        let error = import_text(&text, &ImportOptions::default()).unwrap_err().to_string();
        assert!(error.starts_with("dump.xml: line 20:") && error.contains("link_width"), "{error}");
        let text = TWO_SOCKETS.replace("16.0 GT/s PCIe", "5.0 GT/s PCIe");
        let error = import_text(&text, &ImportOptions::default()).unwrap_err().to_string();
        assert!(error.contains("gen3 to gen6"), "{error}");
        let error = import_text("<topology/>", &ImportOptions::default()).unwrap_err().to_string();
        assert!(error.contains("<system>"), "{error}");
    }
}
