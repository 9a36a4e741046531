//! `nvidia-smi topo -m` read into a topology file: the GPU relation matrix
//! exactly as printed (terminal escape codes, NIC columns and rows, affinity
//! columns), sockets from the NUMA or CPU affinity, PCIe switches standing
//! for the PIX and PXB groups, NVLinks from the NV# cells. The matrix names
//! neither the GPU model nor the PCIe generation: they come from the options.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use super::{Assembly, DEFAULT_GPU, DEFAULT_HOST, ImportError, ImportOptions, NVSWITCH, counted, cpu_name, gpu_name, nvlink_links};
use crate::config::hardware::HardwareModel;
use crate::config::topology::{NodeKindFile, TopologyFile};
use crate::topology::MAX_SOCKETS;

/// Removes terminal escape sequences (`ESC [ ... letter`, as the underline
/// nvidia-smi puts around its header row).
pub(super) fn strip_escape_codes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameter and intermediate bytes, then one final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// One cell of the matrix, in nvidia-smi's legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    SelfGpu,
    /// A bonded set of this many NVLinks (the PCIe path is not shown).
    NvLink(u32),
    /// At most one PCIe bridge.
    Pix,
    /// Several PCIe bridges, no host bridge.
    Pxb,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Between PCIe host bridges of one NUMA node.
    Node,
    /// Across the link between NUMA nodes.
    Sys,
}

impl Cell {
    fn parse(text: &str) -> Option<Cell> {
        match text {
            "X" => Some(Cell::SelfGpu),
            "PIX" => Some(Cell::Pix),
            "PXB" => Some(Cell::Pxb),
            "PHB" => Some(Cell::Phb),
            "NODE" => Some(Cell::Node),
            // Drivers before 410 wrote SOC for what is now SYS.
            "SYS" | "SOC" => Some(Cell::Sys),
            _ => text.strip_prefix("NV").and_then(|n| n.parse().ok()).filter(|&n| n > 0).map(Cell::NvLink),
        }
    }

    /// Where the PCIe path between the two GPUs runs; None where NVLink hides it.
    fn reach(self) -> Option<Reach> {
        match self {
            Cell::SelfGpu | Cell::NvLink(_) => None,
            Cell::Pix => Some(Reach::OneSwitch),
            Cell::Pxb => Some(Reach::SwitchTree),
            Cell::Phb | Cell::Node => Some(Reach::Socket),
            Cell::Sys => Some(Reach::AcrossSockets),
        }
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::SelfGpu => f.write_str("X"),
            Cell::NvLink(n) => write!(f, "NV{n}"),
            Cell::Pix => f.write_str("PIX"),
            Cell::Pxb => f.write_str("PXB"),
            Cell::Phb => f.write_str("PHB"),
            Cell::Node => f.write_str("NODE"),
            Cell::Sys => f.write_str("SYS"),
        }
    }
}

/// The PCIe distance between two GPUs, as the imported tree gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    OneSwitch,
    SwitchTree,
    Socket,
    AcrossSockets,
}

impl fmt::Display for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reach::OneSwitch => "under one PCIe switch (PIX)",
            Reach::SwitchTree => "under one tree of PCIe switches (PXB)",
            Reach::Socket => "on one socket, through its host bridge (PHB or NODE)",
            Reach::AcrossSockets => "on different sockets (SYS)",
        })
    }
}

/// The columns after the device columns, by their header words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Affinity {
    Cpu,
    Numa,
    GpuNumaId,
}

/// Header words of each column, the longer spelling first (posted matrices
/// often shorten "NUMA Affinity" to "NUMA").
const AFFINITY_COLUMNS: &[(&[&str], Affinity)] = &[
    (&["CPU", "Affinity"], Affinity::Cpu),
    (&["NUMA", "Affinity"], Affinity::Numa),
    (&["NUMA"], Affinity::Numa),
    (&["GPU", "NUMA", "ID"], Affinity::GpuNumaId),
];

/// The matrix as printed, restricted to GPUs.
struct Matrix {
    /// `cells[i][j]`: how GPU i reaches GPU j.
    cells: Vec<Vec<Cell>>,
    /// Line number of each GPU's row.
    row_lines: Vec<usize>,
    cpu_affinity: Vec<Option<String>>,
    numa_affinity: Vec<Option<u32>>,
}

impl Matrix {
    fn gpus(&self) -> usize {
        self.cells.len()
    }
}

/// The matrix's header row: where it is, its device columns (GPUs first,
/// then NICs), how many of them are GPUs, and the affinity columns after.
struct Header<'t> {
    index: usize,
    devices: Vec<&'t str>,
    gpus: usize,
    affinity: Vec<Affinity>,
}

fn read_header<'t>(path: &Path, lines: &'t [String]) -> Result<Header<'t>, ImportError> {
    let (index, header) = lines.iter().enumerate().find(|(_, line)| line.split_whitespace().next() == Some("GPU0")).ok_or_else(|| {
        ImportError::invalid(path, "no header row (GPU0 GPU1 ... CPU Affinity ...): is this `nvidia-smi topo -m` output?")
    })?;
    let header_line = index + 1;
    let words: Vec<&str> = header.split_whitespace().collect();
    let device_count = words.iter().position(|w| AFFINITY_COLUMNS.iter().any(|(names, _)| names[0] == *w)).unwrap_or(words.len());
    let devices = words[..device_count].to_vec();
    let gpus = devices.iter().enumerate().take_while(|(i, d)| **d == gpu_name(*i as u32)).count();
    if let Some(stray) = devices[gpus..].iter().find(|d| d.strip_prefix("GPU").is_some_and(|n| n.parse::<u32>().is_ok())) {
        return Err(ImportError::syntax(
            path,
            header_line,
            format!("column {stray}: GPU columns must come first, numbered from GPU0 in order"),
        ));
    }
    let mut affinity = Vec::new();
    let mut rest = &words[device_count..];
    while !rest.is_empty() {
        let (names, column) = AFFINITY_COLUMNS.iter().find(|(names, _)| rest.starts_with(names)).ok_or_else(|| {
            ImportError::syntax(
                path,
                header_line,
                format!(
                    "unknown column at {:?}: after the device columns come CPU Affinity, NUMA Affinity and GPU NUMA ID",
                    rest.join(" ")
                ),
            )
        })?;
        affinity.push(*column);
        rest = &rest[names.len()..];
    }
    Ok(Header { index, devices, gpus, affinity })
}

/// The GPU-to-GPU relations and each GPU's affinity of `nvidia-smi topo -m`
/// output `text` (read from `path`), checked cell by cell.
fn read_matrix(path: &Path, text: &str) -> Result<Matrix, ImportError> {
    let lines: Vec<String> = text.lines().map(strip_escape_codes).collect();
    let header = read_header(path, &lines)?;
    let (header_line, devices, gpus) = (header.index + 1, &header.devices, header.gpus);
    let mut matrix =
        Matrix { cells: vec![Vec::new(); gpus], row_lines: vec![0; gpus], cpu_affinity: vec![None; gpus], numa_affinity: vec![None; gpus] };
    let columns = 1 + devices.len() + header.affinity.len();
    for (index, line) in lines.iter().enumerate().skip(header.index + 1) {
        let number = index + 1;
        let cells: Vec<&str> = line.split_whitespace().collect();
        // The matrix ends at the first line that is not a device's row
        // (the blank line before the Legend); NIC rows are skipped.
        let Some(&label) = cells.first().filter(|label| devices.contains(label)) else { break };
        let Some(gpu) = (0..gpus).find(|&g| gpu_name(g as u32) == label) else { continue };
        if matrix.row_lines[gpu] != 0 {
            return Err(ImportError::syntax(
                path,
                number,
                format!("a second row for {label} (the first is line {})", matrix.row_lines[gpu]),
            ));
        }
        if cells.len() != columns {
            return Err(ImportError::syntax(
                path,
                number,
                format!(
                    "{label}'s row has {} cells; the header (line {header_line}) gives {columns}: the label, {} device columns, then {}",
                    cells.len(),
                    devices.len(),
                    header.affinity.len()
                ),
            ));
        }
        matrix.row_lines[gpu] = number;
        for (other, text) in cells[1..=gpus].iter().enumerate() {
            let cell = Cell::parse(text).ok_or_else(|| {
                ImportError::syntax(
                    path,
                    number,
                    format!(
                        "{label}/GPU{other}: {text:?} is not a relation nvidia-smi prints; expected X, NV#, PIX, PXB, PHB, NODE or SYS"
                    ),
                )
            })?;
            if (cell == Cell::SelfGpu) != (other == gpu) {
                return Err(ImportError::syntax(path, number, format!("{label}/GPU{other}: X belongs on the diagonal, and only there")));
            }
            matrix.cells[gpu].push(cell);
        }
        let values = header.affinity.iter().zip(&cells[1 + devices.len()..]);
        read_affinity(path, (number, label, gpu), values, &mut matrix)?;
    }
    if let Some(missing) = matrix.row_lines.iter().position(|&line| line == 0) {
        return Err(ImportError::invalid(path, format!("the header names GPU{missing} but no row for it follows")));
    }
    check_symmetric(path, &matrix)?;
    Ok(matrix)
}

/// GPU `gpu`'s affinity cells (its row `label` on line `number`), into
/// `matrix`.
fn read_affinity<'v>(
    path: &Path,
    (number, label, gpu): (usize, &str, usize),
    values: impl Iterator<Item = (&'v Affinity, &'v &'v str)>,
    matrix: &mut Matrix,
) -> Result<(), ImportError> {
    for (column, value) in values {
        let known = *value != "N/A";
        match column {
            Affinity::Cpu if known && !is_cpu_list(value) => {
                return Err(ImportError::syntax(
                    path,
                    number,
                    format!("CPU Affinity {value:?} of {label}: expected CPU numbers and ranges (0-55,112-167) or N/A"),
                ));
            }
            Affinity::Cpu => matrix.cpu_affinity[gpu] = known.then(|| value.to_string()),
            Affinity::Numa if known => {
                let numa = value.parse().ok().filter(|&numa| numa < MAX_SOCKETS).ok_or_else(|| {
                    ImportError::syntax(
                        path,
                        number,
                        format!(
                            "NUMA Affinity {value:?} of {label}: expected a NUMA node number from 0 to {} (at most one socket a GPU) or N/A",
                            MAX_SOCKETS - 1
                        ),
                    )
                })?;
                matrix.numa_affinity[gpu] = Some(numa);
            }
            Affinity::Numa | Affinity::GpuNumaId => {}
        }
    }
    Ok(())
}

/// Refuses a matrix whose GPU pairs read differently either way round.
fn check_symmetric(path: &Path, matrix: &Matrix) -> Result<(), ImportError> {
    for i in 0..matrix.gpus() {
        for j in 0..i {
            if matrix.cells[i][j] != matrix.cells[j][i] {
                return Err(ImportError::syntax(
                    path,
                    matrix.row_lines[i],
                    format!(
                        "GPU{i}/GPU{j} is {} but GPU{j}/GPU{i} is {}: the matrix must be symmetric",
                        matrix.cells[i][j], matrix.cells[j][i]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `text` is a list of CPUs as Linux writes one: numbers and
/// ranges (`0-55,112-167`), each range rising.
fn is_cpu_list(text: &str) -> bool {
    let cpu = |n: &str| (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse::<u64>().ok()).flatten();
    text.split(',').all(|item| match item.split_once('-') {
        Some((low, high)) => cpu(low).zip(cpu(high)).is_some_and(|(low, high)| low <= high),
        None => cpu(item).is_some(),
    })
}

/// Each GPU's NUMA domain (what nvidia-smi's SYS crosses), and what said so.
fn domains(matrix: &Matrix) -> (Vec<u32>, &'static str) {
    if let Some(numa) = matrix.numa_affinity.iter().copied().collect::<Option<Vec<u32>>>() {
        return (numa, "NUMA affinity");
    }
    if let Some(cpus) = matrix.cpu_affinity.iter().cloned().collect::<Option<Vec<String>>>() {
        // Distinct CPU sets, numbered in the order of their lowest CPU.
        let lowest = |set: &str| set.split(|c: char| !c.is_ascii_digit()).find(|n| !n.is_empty()).and_then(|n| n.parse::<u64>().ok());
        let sets: BTreeSet<(Option<u64>, &str)> = cpus.iter().map(|s| (lowest(s), s.as_str())).collect();
        let sets: Vec<&str> = sets.into_iter().map(|(_, s)| s).collect();
        let sockets = cpus.iter().map(|s| sets.iter().position(|set| set == s).unwrap_or(0) as u32).collect();
        return (sockets, "CPU affinity");
    }
    // No affinity: one socket, unless SYS cells say otherwise; then each GPU
    // joins the socket of a GPU it reaches without SYS, or the first socket
    // holding no GPU it reaches across sockets.
    let n = matrix.gpus();
    let mut sockets = vec![0u32; n];
    for i in 0..n {
        let same = (0..i).find(|&j| matches!(matrix.cells[i][j].reach(), Some(Reach::OneSwitch | Reach::SwitchTree | Reach::Socket)));
        sockets[i] = match same {
            Some(j) => sockets[j],
            None => (0..=i as u32).find(|&s| (0..i).all(|j| sockets[j] != s || matrix.cells[i][j] != Cell::Sys)).unwrap_or(i as u32),
        };
    }
    (sockets, "the SYS cells (the affinity columns say N/A)")
}

/// Each GPU's socket from its NUMA domain: the same where the host has as
/// many sockets as the matrix has domains or more; where it has fewer
/// (AMD's NPS2 and NPS4, Intel's sub-NUMA clusters split a socket into two
/// or four nodes), the domains in order, an equal share a socket (Linux
/// numbers one socket's nodes before the next's). Two GPUs of one socket
/// in different domains are SYS to nvidia-smi and meet in the socket here.
fn sockets_of(domains: &[u32], host_sockets: u32) -> Vec<u32> {
    let count = domains.iter().max().map_or(1, |&most| most + 1);
    if count <= host_sockets {
        return domains.to_vec();
    }
    let per_socket = count.div_ceil(host_sockets);
    domains.iter().map(|&d| d / per_socket).collect()
}

/// Connected groups of GPUs under `joined`, each labelled by its lowest GPU.
fn groups(n: usize, joined: impl Fn(usize, usize) -> bool) -> Vec<usize> {
    let mut label: Vec<usize> = (0..n).collect();
    for i in 0..n {
        for j in 0..i {
            if joined(i, j) && label[i] != label[j] {
                let (keep, drop) = (label[i].min(label[j]), label[i].max(label[j]));
                label.iter_mut().filter(|l| **l == drop).for_each(|l| *l = keep);
            }
        }
    }
    label
}

/// Checks that the PCIe tree of `one_switch` (PIX groups) and `switch_tree`
/// (PXB groups) under the sockets of `domains` gives back every PCIe cell of
/// the matrix.
fn check_tree(
    path: &Path,
    matrix: &Matrix,
    one_switch: &[usize],
    switch_tree: &[usize],
    domains: &[u32],
    socket_source: &str,
) -> Result<(), ImportError> {
    let n = matrix.gpus();
    for i in 0..n {
        for j in 0..i {
            let Some(printed) = matrix.cells[i][j].reach() else { continue };
            let built = if one_switch[i] == one_switch[j] {
                Reach::OneSwitch
            } else if switch_tree[i] == switch_tree[j] {
                Reach::SwitchTree
            } else if domains[i] == domains[j] {
                Reach::Socket
            } else {
                Reach::AcrossSockets
            };
            if printed != built {
                return Err(ImportError::syntax(
                    path,
                    matrix.row_lines[i],
                    format!(
                        "GPU{i}/GPU{j} is {}, but the other cells and the {socket_source} put them {built}; no PCIe tree gives this matrix",
                        matrix.cells[i][j]
                    ),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn parse(path: &Path, text: &str, options: &ImportOptions, model: &HardwareModel) -> Result<TopologyFile, ImportError> {
    let matrix = read_matrix(path, text)?;
    let n = matrix.gpus();
    let (domains, socket_source) = domains(&matrix);
    let (gpu, host) =
        (options.gpu.clone().unwrap_or_else(|| DEFAULT_GPU.into()), options.host.clone().unwrap_or_else(|| DEFAULT_HOST.into()));
    let sockets = sockets_of(&domains, model.host(&host).map_or(2, |h| h.sockets()));
    let one_switch = groups(n, |i, j| matrix.cells[i][j] == Cell::Pix);
    let switch_tree = groups(n, |i, j| matches!(matrix.cells[i][j], Cell::Pix | Cell::Pxb));
    check_tree(path, &matrix, &one_switch, &switch_tree, &domains, socket_source)?;

    let gpu_links = nvlink_links(path, model, &gpu)?;
    let mut assembly = Assembly::with_sockets(&sockets.iter().copied().collect());

    // NVLink: every pair NV# with one count that is all of a GPU's links can
    // only be an NVSwitch board (with two GPUs, a bridge would look the same
    // and carry the same); anything else is direct links, pair by pair.
    let pairs: Vec<(usize, usize, u32)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .filter_map(|(i, j)| match matrix.cells[i][j] {
            Cell::NvLink(count) => Some((i, j, count)),
            _ => None,
        })
        .collect();
    if let Some(&(i, j, count)) = pairs.iter().find(|p| p.2 > gpu_links) {
        return Err(ImportError::syntax(
            path,
            matrix.row_lines[i],
            format!("GPU{i}/GPU{j}: NV{count} is more NVLink links than a {gpu} has ports ({gpu_links}); pass --gpu for the GPU measured"),
        ));
    }
    let switch_count = pairs
        .first()
        .map(|p| p.2)
        .filter(|&count| n >= 2 && pairs.len() == n * (n - 1) / 2 && pairs.iter().all(|p| p.2 == count) && count >= gpu_links);
    let nvlink_summary = match (switch_count, pairs.len()) {
        (Some(count), _) => {
            assembly.add_node(NVSWITCH, NodeKindFile::Nvswitch, 0);
            format!("every GPU pair is NV{count}: one NVSwitch, {count} links from each GPU")
        }
        (None, 0) => "no NVLink".to_string(),
        (None, pairs) => format!("{pairs} GPU pairs joined directly by NVLink"),
    };

    // PCIe: a switch for each PIX group of two or more; a PXB group of
    // several PIX groups gets an upper switch with each PIX group (a lone
    // GPU too) under its own switch, so that they meet through two.
    let mut parents: Vec<String> = (0..n).map(|g| cpu_name(sockets[g])).collect();
    for tree in (0..n).filter(|&g| switch_tree[g] == g) {
        let members: Vec<usize> = (0..n).filter(|&g| switch_tree[g] == tree).collect();
        let leaves: Vec<usize> = members.iter().copied().filter(|&g| one_switch[g] == g).collect();
        let socket = sockets[tree];
        let under = if leaves.len() > 1 {
            let upper = assembly.add_switch(socket);
            assembly.pcie(&upper, &cpu_name(socket), None, None);
            upper
        } else if members.len() > 1 {
            cpu_name(socket)
        } else {
            continue;
        };
        for leaf in leaves {
            let switch = assembly.add_switch(socket);
            assembly.pcie(&switch, &under, None, None);
            for g in members.iter().copied().filter(|&g| one_switch[g] == leaf) {
                parents[g] = switch.clone();
            }
        }
    }
    for g in 0..n {
        let name = gpu_name(g as u32);
        assembly.add_node(&name, NodeKindFile::Gpu, sockets[g]);
        assembly.pcie(&name, &parents[g], None, None);
    }
    match switch_count {
        Some(count) => (0..n).for_each(|g| assembly.nvlink(&gpu_name(g as u32), NVSWITCH, count)),
        None => pairs.iter().for_each(|&(i, j, count)| assembly.nvlink(&gpu_name(i as u32), &gpu_name(j as u32), count)),
    }

    let source = |given: &Option<String>| if given.is_some() { "given" } else { "assumed" };
    let description = format!(
        "Imported from `nvidia-smi topo -m` output ({}): {} on {} by {socket_source}; {nvlink_summary}; PCIe switches stand \
         for the PIX and PXB groups. nvidia-smi names neither the GPU model nor the host nor the PCIe generation: GPU {gpu} ({}, --gpu), \
         host {host} ({}, --host), PCIe links x16 at the GPU's generation.",
        path.display(),
        counted(n, "GPU", "GPUs"),
        counted(sockets.iter().collect::<BTreeSet<_>>().len(), "socket", "sockets"),
        source(&options.gpu),
        source(&options.host),
    );
    assembly.finish(path, model, gpu, host, description)
}

#[cfg(test)]
mod tests {
    use super::super::tests::data;
    use super::*;
    use crate::topology::build_from_file;

    fn parse_text(text: &str) -> Result<TopologyFile, ImportError> {
        parse(Path::new("topo.txt"), text, &ImportOptions::default(), &HardwareModel::base())
    }

    fn relations(text: &str) -> Vec<Vec<String>> {
        let raw = parse_text(text).unwrap_or_else(|e| panic!("{e}"));
        let topo = build_from_file(Path::new("topo.txt"), &raw, &HardwareModel::base()).unwrap_or_else(|e| panic!("{e}"));
        let g = topo.gpus();
        g.iter().map(|&a| g.iter().map(|&b| topo.relation(a, b).to_string()).collect()).collect()
    }

    #[test]
    fn numa_nodes_finer_than_sockets_share_the_socket_they_lie_in() {
        // Two EPYC sockets in NPS4 (blog.chlc.cc, 8x RTX 4090): every GPU
        // on its own NUMA node, all pairs SYS, under a short "NUMA" header.
        let mut text = String::from("\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA\n");
        for (g, node) in [3, 2, 1, 0, 7, 6, 5, 4].iter().enumerate() {
            let cells: Vec<&str> = (0..8).map(|o| if o == g { " X " } else { "SYS" }).collect();
            text += &format!("GPU{g}\t{}\t0-7\t{node}\n", cells.join("\t"));
        }
        let raw = parse_text(&text).unwrap_or_else(|e| panic!("{e}"));
        let socket_of = |name: &str| raw.nodes.iter().find(|n| n.name == name).map(|n| n.socket);
        assert_eq!((0..8).map(|g| socket_of(&format!("GPU{g}"))).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
        assert_eq!(sockets_of(&[0, 1], 2), vec![0, 1], "as many nodes as sockets: one a socket");
    }

    #[test]
    fn escape_codes_are_removed_and_nothing_else() {
        assert_eq!(strip_escape_codes("\u{1b}[4mGPU0\tGPU1\u{1b}[0m"), "GPU0\tGPU1");
        assert_eq!(strip_escape_codes("\u{1b}[1;31mred\u{1b}[0m plain"), "red plain");
        assert_eq!(strip_escape_codes("GPU0\t X \tNV18"), "GPU0\t X \tNV18");
    }

    #[test]
    fn the_shared_matrix_parses_with_its_underline_and_without() {
        let text = std::fs::read_to_string(data("nvidia-smi-topo-h200x2.txt")).unwrap();
        assert!(text.contains("\u{1b}[4m"), "the fixture keeps nvidia-smi's escape codes");
        let with = parse_text(&text).unwrap();
        let without = parse_text(&strip_escape_codes(&text)).unwrap();
        assert_eq!(with.nodes, without.nodes);
        assert_eq!(with.links, without.links);
        assert_eq!(relations(&text), vec![vec!["X", "NV18"], vec!["NV18", "X"]]);
    }

    #[test]
    fn pxb_and_node_cells_come_back_from_the_switch_tree() {
        // GPU0/1 share a switch; GPU2 hangs alone under the same upper
        // switch; GPU3 is on the socket's other host bridge.
        let text = "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n\
                    GPU0\t X \tPIX\tPXB\tNODE\t0-15\t0\n\
                    GPU1\tPIX\t X \tPXB\tNODE\t0-15\t0\n\
                    GPU2\tPXB\tPXB\t X \tNODE\t0-15\t0\n\
                    GPU3\tNODE\tNODE\tNODE\t X \t0-15\t0\n\nLegend:\n";
        let expected = [["X", "PIX", "PXB", "PHB"], ["PIX", "X", "PXB", "PHB"], ["PXB", "PXB", "X", "PHB"], ["PHB", "PHB", "PHB", "X"]];
        assert_eq!(relations(text), expected.map(|row| row.map(String::from).to_vec()).to_vec());
    }

    #[test]
    fn unequal_nvlink_counts_become_direct_links() {
        let text = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n\
                    GPU0\t X \tNV4\tNV2\t0-7\n\
                    GPU1\tNV4\t X \tNV2\t0-7\n\
                    GPU2\tNV2\tNV2\t X \t0-7\n";
        let raw = parse_text(text).unwrap();
        assert!(raw.nodes.iter().all(|n| n.kind != NodeKindFile::Nvswitch));
        assert_eq!(relations(text)[0], ["X", "NV4", "NV2"]);
    }

    #[test]
    fn without_affinity_the_sys_cells_place_the_sockets() {
        let text = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n\
                    GPU0\t X \tPHB\tSYS\tN/A\tN/A\n\
                    GPU1\tPHB\t X \tSYS\tN/A\tN/A\n\
                    GPU2\tSYS\tSYS\t X \tN/A\tN/A\n";
        let raw = parse_text(text).unwrap();
        let socket = |name: &str| raw.nodes.iter().find(|n| n.name == name).map(|n| n.socket);
        assert_eq!((socket("GPU0"), socket("GPU1"), socket("GPU2")), (Some(0), Some(0), Some(1)));
        assert_eq!(relations(text)[0], ["X", "PHB", "SYS"]);
    }

    #[test]
    fn malformed_matrices_name_the_file_and_line() {
        let bad_cell = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIZ\t0-7\nGPU1\tPIX\t X \t0-7\n";
        let error = parse_text(bad_cell).unwrap_err().to_string();
        assert!(error.starts_with("topo.txt: line 2:") && error.contains("\"PIZ\"") && error.contains("NODE"), "{error}");

        let short_row = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X \n";
        let error = parse_text(short_row).unwrap_err().to_string();
        assert!(error.starts_with("topo.txt: line 3:") && error.contains("3 cells") && error.contains("4"), "{error}");

        let asymmetric = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPHB\t X \t0-7\n";
        let error = parse_text(asymmetric).unwrap_err().to_string();
        assert!(error.starts_with("topo.txt: line 3:") && error.contains("symmetric"), "{error}");

        let missing_row = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n";
        let error = parse_text(missing_row).unwrap_err().to_string();
        assert!(error.contains("topo.txt") && error.contains("no row for it"), "{error}");

        let not_a_tree = "\tGPU0\tGPU1\tGPU2\tNUMA Affinity\nGPU0\t X \tPIX\tPHB\t0\nGPU1\tPIX\t X \tPIX\t0\nGPU2\tPHB\tPIX\t X \t0\n";
        let error = parse_text(not_a_tree).unwrap_err().to_string();
        assert!(error.starts_with("topo.txt: line 4:") && error.contains("GPU2/GPU0 is PHB"), "{error}");

        let sys_on_one_node = "\tGPU0\tGPU1\tNUMA Affinity\nGPU0\t X \tSYS\t0\nGPU1\tSYS\t X \t0\n";
        let error = parse_text(sys_on_one_node).unwrap_err().to_string();
        assert!(error.contains("line 3") && error.contains("NUMA affinity"), "{error}");

        let unknown_column = "\tGPU0\tGPU1\tCPU Affinity\tPower Draw\nGPU0\t X \tPIX\t0-7\t1\nGPU1\tPIX\t X \t0-7\t1\n";
        let error = parse_text(unknown_column).unwrap_err().to_string();
        assert!(error.starts_with("topo.txt: line 1:") && error.contains("Power Draw"), "{error}");
    }

    #[test]
    fn affinities_no_machine_prints_are_refused_by_line_and_column() {
        let matrix = |cpus: &str, numa: &str| {
            format!("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-7\t0\nGPU1\tPIX\t X \t{cpus}\t{numa}\n")
        };
        assert!(parse_text(&matrix("0-3,8,10-11", "0")).is_ok());
        for (cpus, numa, says) in
            [("0-7", "999999", "NUMA Affinity \"999999\""), ("zz", "0", "CPU Affinity \"zz\""), ("7-0", "0", "CPU Affinity")]
        {
            let error = parse_text(&matrix(cpus, numa)).unwrap_err().to_string();
            assert!(error.starts_with("topo.txt: line 3:") && error.contains(says), "{error}");
        }
    }
}
