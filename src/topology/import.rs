//! Importers of real machines' topologies: the matrix `nvidia-smi topo -m`
//! prints, and NCCL's topology dump (NCCL_TOPO_DUMP_FILE). Each becomes a
//! topology file (`config::topology::TopologyFile`) that `topology::file`
//! builds exactly like a hand-written one. Reads text only: builds no graph
//! and sets no link rate (rates come from the hardware model at build time).

mod nccl_xml;
mod nvidia_smi;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::PresetOption;
use crate::config::hardware::HardwareModel;
use crate::config::topology::{LinkFile, LinkKindFile, NodeFile, NodeKindFile, TopologyFile};

/// Why a file could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: not a topology icsim can import: expected the output of `nvidia-smi topo -m` (a header row starting with GPU0, then one \
         row a GPU) or NCCL's topology dump (XML with a <system> root)",
        path.display()
    )]
    UnknownFormat { path: PathBuf },
    #[error("{}: line {line}: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, message: String },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    /// The GPU or host (the user's option, or what the file identifies) is
    /// not in the hardware model.
    #[error("{}: {message}", path.display())]
    UnknownPart { path: PathBuf, option: PresetOption, message: String },
}

impl ImportError {
    fn syntax(path: &Path, line: usize, message: impl Into<String>) -> ImportError {
        ImportError::Syntax { path: path.to_path_buf(), line, message: message.into() }
    }

    fn invalid(path: &Path, message: impl Into<String>) -> ImportError {
        ImportError::Invalid { path: path.to_path_buf(), message: message.into() }
    }

    fn unknown_part(path: &Path, option: PresetOption, message: String) -> ImportError {
        ImportError::UnknownPart { path: path.to_path_buf(), option, message }
    }
}

/// What the user says that the file does not.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// GPU model key; default: what NCCL's dump identifies (PCI device,
    /// else architecture); `h200` for nvidia-smi output, which names none.
    pub gpu: Option<String>,
    /// Host platform key; default: what NCCL's dump identifies (CPU vendor
    /// and model); `spr-2s` where it names none or an unknown one.
    pub host: Option<String>,
}

/// GPU model and host platform when the file does not identify them.
const DEFAULT_GPU: &str = "h200";
const DEFAULT_HOST: &str = "spr-2s";

/// The formats icsim imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `nvidia-smi topo -m` output, terminal escape codes included.
    NvidiaSmi,
    /// NCCL's topology XML (NCCL_TOPO_DUMP_FILE).
    NcclXml,
}

impl Format {
    /// Recognizes an importable format by content; None for anything else
    /// (a TOML topology file).
    pub fn detect(text: &str) -> Option<Format> {
        if xml_root(text).starts_with("<system") {
            return Some(Format::NcclXml);
        }
        let mut lines = text.lines().map(nvidia_smi::strip_escape_codes);
        let is_header = |line: &str| line.split_whitespace().next() == Some("GPU0") && !line.contains('=');
        if lines.by_ref().any(|line| is_header(&line)) && lines.any(|line| line.split_whitespace().next() == Some("GPU0")) {
            return Some(Format::NvidiaSmi);
        }
        None
    }
}

/// The text from the root element on: past a byte-order mark, whitespace,
/// the XML declaration and comments.
fn xml_root(text: &str) -> &str {
    let mut rest = text.trim_start_matches('\u{feff}').trim_start();
    loop {
        let skipped = if rest.starts_with("<?") {
            rest.find("?>").map(|end| &rest[end + 2..])
        } else if rest.starts_with("<!--") {
            rest.find("-->").map(|end| &rest[end + 3..])
        } else {
            None
        };
        match skipped {
            Some(after) => rest = after.trim_start(),
            None => return rest,
        }
    }
}

/// Reads and imports the file at `path`, whichever importable format it is.
/// `model` is consulted for the GPU's NVLink count and to check the keys.
pub fn import(path: &Path, options: &ImportOptions, model: &HardwareModel) -> Result<TopologyFile, ImportError> {
    let text = crate::config::read_text(path).map_err(|error| match error {
        crate::config::ConfigError::Io { path, error } => ImportError::Io { path, source: error },
        crate::config::ConfigError::Syntax { path, message } => ImportError::Invalid { path, message },
        other => ImportError::Invalid { path: path.to_path_buf(), message: other.to_string() },
    })?;
    let format = Format::detect(&text).ok_or_else(|| ImportError::UnknownFormat { path: path.to_path_buf() })?;
    parse(path, &text, format, options, model)
}

/// Imports `text` (read from `path`, which errors name) in `format`.
pub fn parse(path: &Path, text: &str, format: Format, options: &ImportOptions, model: &HardwareModel) -> Result<TopologyFile, ImportError> {
    match format {
        Format::NvidiaSmi => nvidia_smi::parse(path, text, options, model),
        Format::NcclXml => nccl_xml::parse(path, text, options, model),
    }
}

/// A readable topology file: a header comment saying where it came from,
/// the keys, then one node and one link a line.
pub fn to_toml(file: &TopologyFile) -> String {
    let mut out = String::from("# Topology imported by `icsim topo import`.\n");
    for line in wrap(&file.description, 96) {
        out += &format!("# {line}\n");
    }
    out += "# Link bandwidths and latencies are left out: they come from the hardware model\n";
    out += "# (models/hardware/*.toml) for the GPU model and host platform named below.\n\n";
    out += &format!("name = {}\n", quoted(&file.name));
    out += &format!("gpu = {}\n", quoted(&file.gpu));
    out += &format!("host = {}\n", quoted(&file.host));
    if !file.models.is_empty() {
        let models: Vec<String> = file.models.iter().map(|m| quoted(m)).collect();
        out += &format!("models = [{}]\n", models.join(", "));
    }
    out += &format!("description = {}\n", quoted(&file.description));
    if file.policy.p2p_across_sockets.is_some() || file.policy.nvls.is_some() {
        out += &format!("policy = {}\n", inline_table(&file.policy));
    }
    out += "\nnode = [\n";
    for node in &file.nodes {
        out += &format!("    {},\n", inline_table(node));
    }
    out += "]\n\nlink = [\n";
    for link in &file.links {
        out += &format!("    {},\n", inline_table(link));
    }
    out += "]\n";
    out
}

fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// A flat struct of plain values as one inline table, fields in declaration
/// order (absent options left out).
fn inline_table(value: &impl Serialize) -> String {
    let text = toml::to_string(value).expect("topology file entries are flat tables of plain values");
    let fields: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    format!("{{ {} }}", fields.join(", "))
}

/// Splits `text` into lines of at most `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        if !current.is_empty() && current.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current += word;
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// "1 socket", "2 sockets".
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The name an imported topology takes: its file's stem.
fn topology_name(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "imported".into())
}

fn gpu_name(index: u32) -> String {
    format!("GPU{index}")
}

fn cpu_name(socket: u32) -> String {
    format!("cpu{socket}")
}

/// The one node standing for a board's NVSwitch chips.
const NVSWITCH: &str = "nvswitch";

/// The nodes and links of an imported topology, collected in a readable
/// order: sockets and memory first, then what the importer adds.
struct Assembly {
    nodes: Vec<NodeFile>,
    links: Vec<LinkFile>,
    switches: u32,
}

impl Assembly {
    /// CPU sockets, each with its host memory, every pair of sockets joined
    /// by a socket link.
    fn with_sockets(sockets: &BTreeSet<u32>) -> Assembly {
        let mut assembly = Assembly { nodes: Vec::new(), links: Vec::new(), switches: 0 };
        for &socket in sockets {
            let (cpu, memory) = (cpu_name(socket), format!("mem{socket}"));
            assembly.add_node(&cpu, NodeKindFile::Cpu, socket);
            assembly.add_node(&memory, NodeKindFile::Memory, socket);
            assembly.link(&cpu, &memory, LinkKindFile::Memory);
        }
        let sockets: Vec<u32> = sockets.iter().copied().collect();
        for (i, &a) in sockets.iter().enumerate() {
            for &b in &sockets[i + 1..] {
                assembly.link(&cpu_name(a), &cpu_name(b), LinkKindFile::Socket);
            }
        }
        assembly
    }

    fn add_node(&mut self, name: &str, kind: NodeKindFile, socket: u32) {
        self.nodes.push(NodeFile { name: name.to_string(), kind, socket, drive: None, chip: None, package: None });
    }

    /// A new PCIe switch on `socket`; returns its name.
    fn add_switch(&mut self, socket: u32) -> String {
        let name = format!("pcie-sw{}", self.switches);
        self.switches += 1;
        self.add_node(&name, NodeKindFile::PcieSwitch, socket);
        name
    }

    fn link(&mut self, from: &str, to: &str, kind: LinkKindFile) -> &mut LinkFile {
        self.links.push(LinkFile {
            from: from.to_string(),
            to: to.to_string(),
            kind,
            generation: None,
            lanes: None,
            links: None,
            bandwidth: None,
            latency: None,
        });
        self.links.last_mut().expect("a link was just pushed")
    }

    /// A PCIe link; generation and lanes default to the GPU's when absent.
    fn pcie(&mut self, from: &str, to: &str, generation: Option<String>, lanes: Option<u32>) {
        let link = self.link(from, to, LinkKindFile::Pcie);
        link.generation = generation;
        link.lanes = lanes;
    }

    /// `links` bonded NVLinks of the GPU's generation.
    fn nvlink(&mut self, from: &str, to: &str, links: u32) {
        self.link(from, to, LinkKindFile::Nvlink).links = Some(links);
    }

    /// The topology file, after checking that the model knows `gpu` and `host`.
    fn finish(
        self,
        path: &Path,
        model: &HardwareModel,
        gpu: String,
        host: String,
        description: String,
    ) -> Result<TopologyFile, ImportError> {
        nvlink_links(path, model, &gpu)?;
        model.host(&host).map_err(|m| ImportError::unknown_part(path, PresetOption::Host, format!("host platform: {m}")))?;
        Ok(TopologyFile {
            name: topology_name(path),
            gpu,
            host,
            models: Vec::new(),
            description,
            policy: Default::default(),
            nodes: self.nodes,
            links: self.links,
        })
    }
}

/// The GPU model's NVLink count, naming the file if the model is unknown.
fn nvlink_links(path: &Path, model: &HardwareModel, gpu: &str) -> Result<u32, ImportError> {
    model.gpu(gpu).map(|g| g.nvlink_links).map_err(|m| ImportError::unknown_part(path, PresetOption::Gpu, format!("GPU model: {m}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_toml;
    use crate::topology::{LinkKind, NodeKind, Relation, Topology, build_from_file};

    pub(super) fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
    }

    fn imported(name: &str, options: &ImportOptions) -> (TopologyFile, Topology) {
        let model = HardwareModel::base();
        let path = data(name);
        let raw = import(&path, options, &model).unwrap_or_else(|e| panic!("{e}"));
        let topo = build_from_file(&path, &raw, &model).unwrap_or_else(|e| panic!("{e}"));
        (raw, topo)
    }

    /// The PCIe link from a GPU to whatever it hangs off.
    fn host_link(topo: &Topology, gpu: usize) -> (LinkKind, NodeKind) {
        let node = topo.gpus()[gpu];
        let link =
            topo.links().iter().find(|l| l.from == node && matches!(l.kind, LinkKind::Pcie { .. })).expect("every GPU has a PCIe link");
        (link.kind.clone(), topo.node(link.to).kind)
    }

    #[test]
    fn both_h200_files_import_to_two_gpus_on_one_nvswitch_with_pcie_gen5_to_the_cpu() {
        for name in ["nvidia-smi-topo-h200x2.txt", "nccl-topo-h200x2.xml"] {
            let (raw, topo) = imported(name, &ImportOptions::default());
            assert_eq!(raw.gpu, "h200", "{name}");
            let gpus = topo.gpus();
            assert_eq!(gpus.len(), 2, "{name}");
            assert_eq!(topo.relation(gpus[0], gpus[1]), Relation::NvLink(18), "{name}");
            let switches: Vec<_> = topo.nodes_of(NodeKind::NvSwitch).collect();
            assert_eq!(switches.len(), 1, "{name}: one NVSwitch");
            for &gpu in gpus {
                let to_switch = topo.links().iter().find(|l| l.from == gpu && l.to == switches[0]).expect("GPU to NVSwitch");
                assert!(matches!(to_switch.kind, LinkKind::NvLink { links: 18, .. }), "{name}: {:?}", to_switch.kind);
            }
            for gpu in 0..2 {
                let (kind, parent) = host_link(&topo, gpu);
                assert_eq!(kind, LinkKind::Pcie { generation: "gen5".into(), lanes: 16 }, "{name}");
                assert_eq!(parent, NodeKind::CpuSocket, "{name}: straight to the CPU");
            }
            assert_eq!(topo.find("cpu0").map(|c| topo.node(c).kind), Some(NodeKind::CpuSocket), "{name}");
            assert!(topo.host_memory(0).is_ok(), "{name}: host memory mem0");
            assert_eq!(topo.nodes_of(NodeKind::CpuSocket).count(), 1, "{name}: one socket");
            assert!(topo.policy.nvls, "{name}: Hopper on an NVSwitch reduces in the switch");
        }
    }

    #[test]
    fn the_nccl_dump_names_the_emerald_rapids_host_and_the_options_override_it() {
        let (raw, _) = imported("nccl-topo-h200x2.xml", &ImportOptions::default());
        assert_eq!(raw.host, "emr-2s");
        let options = ImportOptions { gpu: Some("h100".into()), host: Some("spr-2s".into()) };
        let (raw, topo) = imported("nccl-topo-h200x2.xml", &options);
        assert_eq!((raw.gpu.as_str(), raw.host.as_str()), ("h100", "spr-2s"));
        assert_eq!(topo.gpu_model, "h100");
    }

    #[test]
    fn the_pcie_box_matrix_gives_back_its_own_relations() {
        let (raw, topo) = imported("nvidia-smi-topo-pcie-8gpu.txt", &ImportOptions::default());
        assert_eq!(raw.gpu, DEFAULT_GPU);
        let g = topo.gpus().to_vec();
        assert_eq!(g.len(), 8);
        // The matrix in the file, row by row.
        let expected = |i: usize, j: usize| match (i / 4 == j / 4, i / 2 == j / 2) {
            _ if i == j => Relation::SelfGpu,
            (true, true) => Relation::Pix,
            (true, false) => Relation::Phb,
            (false, _) => Relation::Sys,
        };
        for i in 0..8 {
            for j in 0..8 {
                assert_eq!(topo.relation(g[i], g[j]), expected(i, j), "GPU{i}/GPU{j}");
            }
        }
        // PIX pairs share one switch; SYS pairs sit on different sockets.
        for pair in [(0, 1), (2, 3), (4, 5), (6, 7)] {
            let parent = |gpu: usize| topo.links().iter().find(|l| l.from == g[gpu]).map(|l| l.to);
            assert_eq!(parent(pair.0), parent(pair.1));
            assert_eq!(topo.node(parent(pair.0).unwrap()).kind, NodeKind::PcieSwitch);
        }
        assert_ne!(topo.node(g[0]).socket, topo.node(g[4]).socket);
        assert_eq!(topo.nodes_of(NodeKind::CpuSocket).count(), 2);
        assert!(!topo.has(NodeKind::NvSwitch));
        assert!(!topo.policy.nvls, "no in-switch reduction without a switch");
    }

    #[test]
    fn written_toml_reads_back_to_the_same_file() {
        for name in ["nvidia-smi-topo-h200x2.txt", "nccl-topo-h200x2.xml", "nvidia-smi-topo-pcie-8gpu.txt"] {
            let (raw, _) = imported(name, &ImportOptions::default());
            let text = to_toml(&raw);
            assert!(text.starts_with("# Topology imported by `icsim topo import`."), "{text}");
            let again: TopologyFile = parse_toml(Path::new("written.toml"), &text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            assert_eq!(again, raw, "{name}");
        }
    }

    #[test]
    fn every_field_a_topology_file_may_set_is_written() {
        let (mut raw, _) = imported("nvidia-smi-topo-pcie-8gpu.txt", &ImportOptions::default());
        raw.models = vec!["h200-fit".into(), "my \"tuned\".toml".into()];
        raw.policy.p2p_across_sockets = Some(true);
        raw.links[0].bandwidth = Some("100GB/s".parse().unwrap());
        raw.links[0].latency = Some("1us".parse().unwrap());
        let again: TopologyFile = parse_toml(Path::new("written.toml"), &to_toml(&raw)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, raw);
    }

    #[test]
    fn topology_files_resolve_by_content_whatever_their_extension() {
        use crate::topology::{PresetOptions, TopologySpec, resolve};
        let spec = |path: &Path, gpu: Option<&str>| TopologySpec {
            name: path.display().to_string(),
            options: PresetOptions { gpus: None, gpu: gpu.map(String::from), host: None },
            models: Vec::new(),
        };
        let (topo, _) = resolve(&spec(&data("nccl-topo-h200x2.xml"), Some("h100"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(topo.gpu_model, "h100", "--gpu overrides the dump's GPU");
        let (topo, _) = resolve(&spec(&data("nvidia-smi-topo-pcie-8gpu.txt"), None)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(topo.relation(topo.gpus()[0], topo.gpus()[1]), Relation::Pix);

        // A TOML topology file named .txt is read as TOML.
        let (raw, _) = imported("nvidia-smi-topo-pcie-8gpu.txt", &ImportOptions { gpu: Some("a100".into()), host: None });
        let dir = std::env::temp_dir().join(format!("icsim-resolve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("written.txt");
        std::fs::write(&file, to_toml(&raw)).unwrap();
        let (topo, _) = resolve(&spec(&file, None)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(topo.gpu_model, "a100");
        assert_eq!(topo.relation(topo.gpus()[0], topo.gpus()[7]), Relation::Sys);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn formats_are_told_apart_by_content() {
        assert_eq!(Format::detect("<?xml version=\"1.0\"?>\n<!-- dump -->\n<system version=\"1\"/>"), Some(Format::NcclXml));
        let matrix = std::fs::read_to_string(data("nvidia-smi-topo-h200x2.txt")).unwrap();
        assert_eq!(Format::detect(&matrix), Some(Format::NvidiaSmi));
        assert_eq!(Format::detect("name = \"GPU0\"\ngpu = \"h200\"\n[[node]]\nname = \"GPU0\"\n"), None);
        assert_eq!(Format::detect(""), None);
    }

    #[test]
    fn an_unknown_format_and_an_unknown_gpu_are_named() {
        let dir = std::env::temp_dir().join(format!("icsim-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("notes.txt");
        std::fs::write(&file, "hello\n").unwrap();
        let error = import(&file, &ImportOptions::default(), &HardwareModel::base()).unwrap_err().to_string();
        assert!(error.contains("notes.txt") && error.contains("nvidia-smi topo -m") && error.contains("<system>"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
        let options = ImportOptions { gpu: Some("h300".into()), host: None };
        let error = import(&data("nvidia-smi-topo-h200x2.txt"), &options, &HardwareModel::base()).unwrap_err().to_string();
        assert!(error.contains("nvidia-smi-topo-h200x2.txt") && error.contains("h300") && error.contains("h200"), "{error}");
    }
}
