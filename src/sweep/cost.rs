//! Cost and energy: a price and a power per server component (the shipped
//! `models/cost/default.toml`, with a sweep's `[cost]` table or a `--cost`
//! file over it), the bill of components a topology has, and what a query
//! costs: $ per GPU-hour, $ per million generated tokens, joules per
//! generated token. Reads topologies; simulates nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::hardware::HardwareModel;
use crate::config::{ConfigError, ConfigResult, check_range, parse_toml, read_text};
use crate::report::experiment::ModeRow;
use crate::topology::{NodeKind, Topology};

/// The shipped cost model.
const DEFAULT: &str = include_str!("../../models/cost/default.toml");
const DEFAULT_PATH: &str = "models/cost/default.toml";

/// Hours a server runs in a year (365.25 days).
const HOURS_PER_YEAR: f64 = 8766.0;

/// A cost table as written; every field may be left to the shipped model.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawCost {
    /// By GPU model key (`h200`).
    #[serde(default)]
    pub gpu: BTreeMap<String, RawComponent>,
    /// One NVSwitch fabric of a board.
    pub nvswitch: Option<RawComponent>,
    pub pcie_switch: Option<RawComponent>,
    /// One NVMe drive.
    pub drive: Option<RawComponent>,
    /// The rest of one server: chassis, CPUs, memory, NICs, fans.
    pub server: Option<RawComponent>,
    /// Years the server is paid off over.
    pub years: Option<f64>,
    pub usd_per_kwh: Option<f64>,
    /// A rental price covering everything, instead of the components'.
    pub usd_per_gpu_hour: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawComponent {
    pub usd: Option<f64>,
    pub watts: Option<f64>,
}

impl RawComponent {
    fn over(self, base: Option<RawComponent>) -> RawComponent {
        let base = base.unwrap_or_default();
        RawComponent { usd: self.usd.or(base.usd), watts: self.watts.or(base.watts) }
    }
}

impl RawCost {
    /// `self` with `overlay`'s values replacing its own.
    fn merged(&self, overlay: &RawCost) -> RawCost {
        let mut gpu = self.gpu.clone();
        for (name, component) in &overlay.gpu {
            gpu.insert(name.clone(), component.over(self.gpu.get(name).copied()));
        }
        let component = |mine: Option<RawComponent>, theirs: Option<RawComponent>| match theirs {
            Some(theirs) => Some(theirs.over(mine)),
            None => mine,
        };
        RawCost {
            gpu,
            nvswitch: component(self.nvswitch, overlay.nvswitch),
            pcie_switch: component(self.pcie_switch, overlay.pcie_switch),
            drive: component(self.drive, overlay.drive),
            server: component(self.server, overlay.server),
            years: overlay.years.or(self.years),
            usd_per_kwh: overlay.usd_per_kwh.or(self.usd_per_kwh),
            usd_per_gpu_hour: overlay.usd_per_gpu_hour.or(self.usd_per_gpu_hour),
        }
    }
}

/// A component's price and power.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Component {
    pub usd: f64,
    pub watts: f64,
}

/// A validated cost model.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    pub gpu: BTreeMap<String, Component>,
    pub nvswitch: Component,
    pub pcie_switch: Component,
    pub drive: Component,
    pub server: Component,
    pub years: f64,
    pub usd_per_kwh: f64,
    pub usd_per_gpu_hour: Option<f64>,
}

impl CostModel {
    /// The shipped model with `overlay` (written under `prefix` in `path`)
    /// over it.
    pub fn load(overlay: Option<&RawCost>, path: &Path, prefix: &str) -> ConfigResult<CostModel> {
        let default: RawCost = parse_toml(Path::new(DEFAULT_PATH), DEFAULT)?;
        let Some(overlay) = overlay else { return CostModel::validate(&default, Path::new(DEFAULT_PATH), "") };
        let known = HardwareModel::base().gpu;
        for name in overlay.gpu.keys() {
            if !known.contains_key(name) {
                let names: Vec<&str> = known.keys().map(String::as_str).collect();
                return Err(ConfigError::invalid(
                    path,
                    format!("{prefix}gpu.{name}"),
                    format!("unknown GPU model {name:?}; known: {}", names.join(", ")),
                ));
            }
        }
        CostModel::validate(&default.merged(overlay), path, prefix)
    }

    /// Reads a cost file (a `[cost]`-style table at its top level) over
    /// the shipped model.
    pub fn from_file(path: &Path) -> ConfigResult<CostModel> {
        let raw: RawCost = parse_toml(path, &read_text(path)?)?;
        CostModel::load(Some(&raw), path, "")
    }

    fn validate(raw: &RawCost, path: &Path, prefix: &str) -> ConfigResult<CostModel> {
        let key = |name: &str| format!("{prefix}{name}");
        let component = |name: &str, raw: Option<RawComponent>| -> ConfigResult<Component> {
            let raw = raw.unwrap_or_default();
            let (Some(usd), Some(watts)) = (raw.usd, raw.watts) else {
                return Err(ConfigError::invalid(path, key(name), "needs usd and watts"));
            };
            check_range(path, &key(&format!("{name}.usd")), usd, 0.0..=1e9)?;
            check_range(path, &key(&format!("{name}.watts")), watts, 0.0..=1e7)?;
            Ok(Component { usd, watts })
        };
        let gpu = raw
            .gpu
            .iter()
            .map(|(name, c)| component(&format!("gpu.{name}"), Some(*c)).map(|c| (name.clone(), c)))
            .collect::<ConfigResult<BTreeMap<_, _>>>()?;
        let number = |name: &str, value: Option<f64>, range: std::ops::RangeInclusive<f64>| -> ConfigResult<f64> {
            let value = value.ok_or_else(|| ConfigError::invalid(path, key(name), "missing"))?;
            check_range(path, &key(name), value, range)?;
            Ok(value)
        };
        let usd_per_gpu_hour = match raw.usd_per_gpu_hour {
            Some(rate) => Some(number("usd_per_gpu_hour", Some(rate), 0.0..=1e6)?),
            None => None,
        };
        Ok(CostModel {
            gpu,
            nvswitch: component("nvswitch", raw.nvswitch)?,
            pcie_switch: component("pcie_switch", raw.pcie_switch)?,
            drive: component("drive", raw.drive)?,
            server: component("server", raw.server)?,
            years: number("years", raw.years, 0.01..=100.0)?,
            usd_per_kwh: number("usd_per_kwh", raw.usd_per_kwh, 0.0..=100.0)?,
            usd_per_gpu_hour,
        })
    }

    /// What one GPU-hour of `topology`'s server costs and draws.
    pub fn per_gpu(&self, bill: &Bill) -> Result<PerGpu, String> {
        let gpu = self.gpu.get(&bill.gpu_model).ok_or_else(|| {
            let known: Vec<&str> = self.gpu.keys().map(String::as_str).collect();
            format!("no price for GPU model {}: add [cost.gpu.{}] (priced: {})", bill.gpu_model, bill.gpu_model, known.join(", "))
        })?;
        let parts = [
            (gpu, bill.gpus),
            (&self.nvswitch, bill.nvswitches),
            (&self.pcie_switch, bill.pcie_switches),
            (&self.drive, bill.drives),
            (&self.server, 1),
        ];
        let usd: f64 = parts.iter().map(|(c, n)| c.usd * *n as f64).sum();
        let watts: f64 = parts.iter().map(|(c, n)| c.watts * *n as f64).sum();
        let gpus = bill.gpus.max(1) as f64;
        let owned = (usd / (self.years * HOURS_PER_YEAR) + watts / 1000.0 * self.usd_per_kwh) / gpus;
        Ok(PerGpu { usd_per_hour: self.usd_per_gpu_hour.unwrap_or(owned), watts: watts / gpus, server_usd: usd })
    }
}

/// The components of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bill {
    pub gpu_model: String,
    pub gpus: u64,
    pub nvswitches: u64,
    pub pcie_switches: u64,
    pub drives: u64,
}

impl Bill {
    pub fn of(topology: &Topology) -> Bill {
        let count = |kind| topology.nodes_of(kind).count() as u64;
        Bill {
            gpu_model: topology.gpu_model.clone(),
            gpus: topology.gpus().len() as u64,
            nvswitches: count(NodeKind::NvSwitch),
            pcie_switches: count(NodeKind::PcieSwitch),
            drives: count(NodeKind::Nvme),
        }
    }
}

/// A server's cost and power per GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerGpu {
    pub usd_per_hour: f64,
    pub watts: f64,
    /// What the whole server costs to buy.
    pub server_usd: f64,
}

/// What a query on `tp` GPUs that generates `tokens` in `seconds` costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueryCost {
    pub usd_per_hour: f64,
    pub watts: f64,
    /// None when the query generates no token.
    pub usd_per_million_tokens: Option<f64>,
    pub joules_per_token: Option<f64>,
}

impl PerGpu {
    pub fn query(&self, tp: u32, tokens: u64, seconds: f64) -> QueryCost {
        let usd_per_hour = self.usd_per_hour * f64::from(tp);
        let watts = self.watts * f64::from(tp);
        let per_token = |total: f64| (tokens > 0).then(|| total / tokens as f64);
        QueryCost {
            usd_per_hour,
            watts,
            usd_per_million_tokens: per_token(usd_per_hour / 3600.0 * seconds * 1e6),
            joules_per_token: per_token(watts * seconds),
        }
    }
}

/// What one replayed query yields and costs on its TP group under a cost
/// model, computed once from the typed row: the communication share of the
/// time to first token, generated tokens per second (of the group and per
/// GPU), $ and watts of the group, $ per million and joules per generated
/// token. Its field names are columns of sweeps, diffs and `--format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Economics {
    pub prefill_comm_share: Option<f64>,
    pub tokens_per_s: Option<f64>,
    pub tokens_per_s_per_gpu: Option<f64>,
    pub usd_per_gpu_hour: Option<f64>,
    pub usd_per_hour: Option<f64>,
    pub watts: Option<f64>,
    pub usd_per_million_tokens: Option<f64>,
    pub joules_per_token: Option<f64>,
    /// Why there is no price (a GPU the cost model does not list).
    pub cost_error: Option<String>,
}

impl Economics {
    /// The economics of `mode`'s query on a server of `bill` under `cost`.
    pub fn of(mode: &ModeRow, bill: &Bill, cost: &CostModel) -> Economics {
        let tokens = mode.batch * mode.output;
        let seconds = mode.total_ms / 1000.0;
        let rate = (seconds > 0.0).then(|| tokens as f64 / seconds);
        let mut economics = Economics {
            prefill_comm_share: (mode.ttft_ms > 0.0).then(|| mode.prefill_comm_ms / mode.ttft_ms),
            tokens_per_s: rate,
            tokens_per_s_per_gpu: rate.map(|r| r / f64::from(mode.tp)),
            usd_per_gpu_hour: None,
            usd_per_hour: None,
            watts: None,
            usd_per_million_tokens: None,
            joules_per_token: None,
            cost_error: None,
        };
        match cost.per_gpu(bill) {
            Ok(per_gpu) => {
                let query = per_gpu.query(mode.tp, tokens, seconds);
                economics.usd_per_gpu_hour = Some(per_gpu.usd_per_hour);
                economics.usd_per_hour = Some(query.usd_per_hour);
                economics.watts = Some(query.watts);
                economics.usd_per_million_tokens = query.usd_per_million_tokens;
                economics.joules_per_token = query.joules_per_token;
            }
            Err(message) => economics.cost_error = Some(message),
        }
        economics
    }
}

/// Where a cost file is named relative to.
pub fn resolve_path(name: &str, base_dir: &Path) -> PathBuf {
    let path = Path::new(name);
    if path.is_absolute() { path.to_path_buf() } else { base_dir.join(path) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PresetOptions, preset};

    #[test]
    fn the_shipped_model_prices_every_gpu_of_the_hardware_model() {
        let model = CostModel::load(None, Path::new("x"), "").unwrap();
        let hardware = HardwareModel::base();
        assert_eq!(model.gpu.keys().collect::<Vec<_>>(), hardware.gpu.keys().collect::<Vec<_>>());
    }

    #[test]
    fn a_query_pays_its_share_of_the_server_by_the_hour() {
        let raw: RawCost = toml::from_str(
            "years = 1\nusd_per_kwh = 0\n[gpu.h20]\nusd = 8766\nwatts = 100\n[nvswitch]\nusd = 0\nwatts = 0\n[pcie_switch]\nusd = 0\nwatts = 0\n[drive]\nusd = 0\nwatts = 0\n[server]\nusd = 8766\nwatts = 200",
        )
        .unwrap();
        let model = CostModel::load(Some(&raw), Path::new("s.toml"), "cost.").unwrap();
        let topo = preset("hgx-h20", &PresetOptions::default(), &HardwareModel::base()).unwrap();
        let bill = Bill::of(&topo);
        // The HGX drive layout: eight data drives, two a PCIe switch.
        assert_eq!((bill.gpus, bill.nvswitches, bill.pcie_switches, bill.drives), (8, 1, 4, 8));
        let per_gpu = model.per_gpu(&bill).unwrap();
        // 9 x 8766 $ over 8766 hours, shared by 8 GPUs; (800 + 200) W / 8.
        assert!((per_gpu.usd_per_hour - 9.0 / 8.0).abs() < 1e-12 && (per_gpu.watts - 125.0).abs() < 1e-12, "{per_gpu:?}");
        let query = per_gpu.query(2, 1000, 3600.0);
        assert!((query.usd_per_million_tokens.unwrap() - 2.25 * 1000.0).abs() < 1e-9, "{query:?}");
        assert!((query.joules_per_token.unwrap() - 250.0 * 3.6).abs() < 1e-9, "{query:?}");
        assert_eq!(per_gpu.query(2, 0, 1.0).usd_per_million_tokens, None);
    }

    #[test]
    fn unknown_components_and_gpus_are_named() {
        let error = toml::from_str::<RawCost>("[widget]\nusd = 1").unwrap_err().to_string();
        assert!(error.contains("widget") && error.contains("nvswitch"), "{error}");
        let raw: RawCost = toml::from_str("[gpu.h300]\nusd = 1\nwatts = 1").unwrap();
        let error = CostModel::load(Some(&raw), Path::new("s.toml"), "cost.").unwrap_err().to_string();
        assert!(error.contains("s.toml: key `cost.gpu.h300`") && error.contains("h200"), "{error}");
        let raw: RawCost = toml::from_str("years = 0").unwrap();
        let error = CostModel::load(Some(&raw), Path::new("s.toml"), "cost.").unwrap_err().to_string();
        assert!(error.contains("cost.years"), "{error}");
    }
}
