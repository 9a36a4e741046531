//! What the runner records about the measured machine (system.json) and what
//! it reads from `nvidia-smi`: the `topo -m` matrix (which GPUs are joined by
//! NVLink, hence the name of NCCL's default transport), PCI addresses and the
//! driver version. Measures nothing.

use std::process::{Command, Stdio};

use serde::Serialize;

use crate::transport::Mode;

/// system.json.
#[derive(Debug, Clone, Serialize)]
pub struct SystemRecord {
    pub system: String,
    pub hostname: String,
    pub measured_at: String,
    pub icsim_version: String,
    pub gpu_count: usize,
    pub gpus: Vec<GpuRecord>,
    /// The kernel driver's version as nvidia-smi reports it ("580.159.04").
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports (cuDriverGetVersion), "13.0".
    pub cuda_version: String,
    pub nccl_version: Option<String>,
    pub nccl_library: Option<String>,
    /// `peer_access[i][j]`: GPU i's copies can reach GPU j's memory directly.
    pub peer_access: Vec<Vec<bool>>,
    /// The `transport` given to measurements under NCCL's defaults, and why.
    pub default_transport: String,
    pub default_transport_reason: String,
    /// The command line of the run.
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuRecord {
    /// CUDA's device number (after CUDA_VISIBLE_DEVICES).
    pub index: usize,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_capability: String,
    pub pci_bus_id: String,
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// The default `system` name: the host name, with anything but letters,
/// digits, '.', '_' and '-' replaced.
pub fn default_system_name(hostname: &str) -> String {
    hostname.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect()
}

/// nvidia-smi's standard output, or `None` when it is missing or fails.
pub fn nvidia_smi(args: &[&str]) -> Option<String> {
    let output = Command::new("nvidia-smi").args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A PCI address, however many digits its domain is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

/// Reads "0000:00:06.0" (CUDA) or "00000000:00:06.0" (nvidia-smi).
pub fn parse_pci_address(text: &str) -> Option<PciAddress> {
    let mut parts = text.trim().split(':');
    let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some(PciAddress { domain: hex(domain)?, bus: hex(bus)?, device: hex(device)?, function: hex(function)? })
}

/// One line of `nvidia-smi --query-gpu=index,pci.bus_id,driver_version --format=csv,noheader`.
#[derive(Debug, Clone, PartialEq)]
pub struct SmiGpu {
    pub index: usize,
    pub pci: PciAddress,
    pub driver_version: String,
}

pub const SMI_GPU_QUERY: [&str; 2] = ["--query-gpu=index,pci.bus_id,driver_version", "--format=csv,noheader"];

pub fn parse_smi_gpus(text: &str) -> Vec<SmiGpu> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            match fields.as_slice() {
                [index, pci, driver] => {
                    Some(SmiGpu { index: index.parse().ok()?, pci: parse_pci_address(pci)?, driver_version: driver.to_string() })
                }
                _ => None,
            }
        })
        .collect()
}

/// The GPU-to-GPU part of `nvidia-smi topo -m`: how each pair is connected
/// ("NV18", "SYS", "PIX", ...), by nvidia-smi's GPU numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct TopoMatrix {
    /// nvidia-smi's number of each row and column.
    gpus: Vec<usize>,
    /// `links[row][column]`.
    links: Vec<Vec<String>>,
}

impl TopoMatrix {
    pub fn gpus(&self) -> &[usize] {
        &self.gpus
    }

    /// How nvidia-smi GPUs `a` and `b` are connected.
    pub fn link(&self, a: usize, b: usize) -> Option<&str> {
        let row = self.gpus.iter().position(|&g| g == a)?;
        let column = self.gpus.iter().position(|&g| g == b)?;
        Some(self.links[row][column].as_str())
    }

    /// Whether every pair of these GPUs is joined by bonded NVLinks ("NV#").
    pub fn all_nvlinked(&self, gpus: &[usize]) -> bool {
        gpus.len() >= 2
            && gpus.iter().enumerate().all(|(i, &a)| gpus[i + 1..].iter().all(|&b| self.link(a, b).is_some_and(|l| l.starts_with("NV"))))
    }
}

/// Removes terminal escape sequences ("\x1b[4m") that nvidia-smi prints.
fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn gpu_number(label: &str) -> Option<usize> {
    label.trim().strip_prefix("GPU")?.parse().ok()
}

/// Reads the matrix of `nvidia-smi topo -m`; `None` when it has no GPU columns.
pub fn parse_topo_matrix(text: &str) -> Option<TopoMatrix> {
    let text = strip_escapes(text);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.find(|l| l.split('\t').any(|f| gpu_number(f).is_some()))?.split('\t').collect();
    let columns: Vec<(usize, usize)> = header.iter().enumerate().filter_map(|(i, f)| Some((i, gpu_number(f)?))).collect();
    let mut gpus = Vec::new();
    let mut links = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split('\t').collect();
        let Some(row_gpu) = fields.first().and_then(|f| gpu_number(f)) else { continue };
        let row = columns.iter().map(|&(i, _)| fields.get(i).map_or(String::new(), |f| f.trim().to_string())).collect();
        gpus.push(row_gpu);
        links.push(row);
    }
    let column_gpus: Vec<usize> = columns.iter().map(|&(_, g)| g).collect();
    (!gpus.is_empty() && gpus == column_gpus).then_some(TopoMatrix { gpus, links })
}

/// The name of NCCL's default transport between the measured GPUs:
/// `nvswitch` when every pair is joined by NVLink in `nvidia-smi topo -m`,
/// else `auto` (NCCL picks per pair). `measured` holds nvidia-smi's numbers
/// of the measured GPUs, or `None` when they could not be matched (then all
/// GPUs of the matrix must be NVLinked).
pub fn default_transport(matrix: Option<&TopoMatrix>, measured: Option<&[usize]>) -> (Mode, String) {
    let Some(matrix) = matrix else {
        return (Mode::Auto, "nvidia-smi topo -m is not available".into());
    };
    let gpus = measured.unwrap_or(matrix.gpus());
    if matrix.all_nvlinked(gpus) {
        (Mode::Nvswitch, format!("nvidia-smi topo -m shows NVLink (NV#) between every pair of GPUs {gpus:?}"))
    } else {
        (Mode::Auto, format!("nvidia-smi topo -m does not show NVLink between every pair of GPUs {gpus:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of shared/calibration/h200x2-nvswitch/nvidia-smi-topo.txt, escapes included.
    const H200X2_TOPO: &str = "\u{1b}[4m\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m\n\
                               GPU0\t X \tNV18\t0-31\t0\t\tN/A\n\
                               GPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n";

    #[test]
    fn topo_matrix_reads_links_between_gpus() {
        let matrix = parse_topo_matrix(H200X2_TOPO).unwrap();
        assert_eq!(matrix.gpus(), &[0, 1]);
        assert_eq!(matrix.link(0, 1), Some("NV18"));
        assert_eq!(matrix.link(1, 1), Some("X"));
        assert!(matrix.all_nvlinked(&[0, 1]));
        assert!(!matrix.all_nvlinked(&[0]));
    }

    #[test]
    fn default_transport_is_nvswitch_only_when_every_pair_is_nvlinked() {
        let nvlinked = parse_topo_matrix(H200X2_TOPO).unwrap();
        assert_eq!(default_transport(Some(&nvlinked), Some(&[0, 1])).0, Mode::Nvswitch);
        assert_eq!(default_transport(Some(&nvlinked), None).0, Mode::Nvswitch);
        let pcie = parse_topo_matrix(
            "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tPIX\tSYS\t0-31\nGPU1\tPIX\t X \tSYS\t0-31\nGPU2\tSYS\tSYS\t X \t32-63\n",
        )
        .unwrap();
        assert_eq!(pcie.link(0, 2), Some("SYS"));
        assert_eq!(default_transport(Some(&pcie), Some(&[0, 1])).0, Mode::Auto);
        assert_eq!(default_transport(None, None).0, Mode::Auto);
    }

    #[test]
    fn pci_addresses_match_across_cuda_and_nvidia_smi_spellings() {
        assert_eq!(parse_pci_address("0000:00:06.0"), parse_pci_address("00000000:00:06.0"));
        assert_eq!(parse_pci_address("0000:1b:00.0"), Some(PciAddress { domain: 0, bus: 0x1b, device: 0, function: 0 }));
        assert_eq!(parse_pci_address("garbage"), None);
        let gpus = parse_smi_gpus("0, 00000000:00:06.0, 580.159.04\n1, 00000000:00:07.0, 580.159.04\n");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].index, 1);
        assert_eq!(gpus[1].pci, PciAddress { domain: 0, bus: 0, device: 7, function: 0 });
        assert_eq!(gpus[0].driver_version, "580.159.04");
    }

    #[test]
    fn system_names_from_host_names_are_plain() {
        assert_eq!(default_system_name("gpu-node 7.example"), "gpu-node-7.example");
    }
}
