//! How the runner sets NCCL's environment for each measured setting: the
//! transport, the protocol or algorithm forced, the channel count, NCCL's
//! topology dump and debug log. Pure data: starts no process, loads no
//! library.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::collective::{Algorithm, Op, Protocol};

/// Which transport NCCL is told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportSetting {
    /// NCCL's own choice.
    Default,
    /// NCCL_P2P_DISABLE=1: GPU pairs talk through host shared memory.
    Shm,
}

impl FromStr for TransportSetting {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "default" => Ok(TransportSetting::Default),
            "shm" => Ok(TransportSetting::Shm),
            other => Err(format!("unknown transport setting {other:?}: use default (NCCL's choice) or shm (NCCL_P2P_DISABLE=1)")),
        }
    }
}

impl fmt::Display for TransportSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportSetting::Default => "default",
            TransportSetting::Shm => "shm",
        })
    }
}

/// NCCL_PROTO's spelling of a protocol.
pub fn nccl_protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Ll => "LL",
        Protocol::Ll128 => "LL128",
        Protocol::Simple => "Simple",
    }
}

/// NCCL_ALGO's spelling of the algorithms the runner can force.
pub fn nccl_algorithm_name(algorithm: Algorithm) -> Option<&'static str> {
    match algorithm {
        Algorithm::Ring => Some("Ring"),
        Algorithm::Tree => Some("Tree"),
        Algorithm::Nvls | Algorithm::OneShot | Algorithm::TwoShot => None,
    }
}

/// NCCL variables a child must not inherit: each would change what a setting
/// measures, so the runner sets them or leaves them unset itself.
pub const NCCL_VARIABLES_SET_PER_SETTING: [&str; 12] = [
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_NVLS_ENABLE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
];

/// One way of running NCCL, measured in its own process: a transport, at
/// most one protocol or algorithm forced, and the channel count where forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclSetting {
    pub transport: TransportSetting,
    pub proto: Option<Protocol>,
    pub algo: Option<Algorithm>,
    /// NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS.
    #[serde(default)]
    pub channels: Option<u32>,
}

impl NcclSetting {
    /// Every transport with NCCL's own choices (where "auto" is asked for),
    /// then with each protocol and each algorithm forced, one at a time; all
    /// of it at each channel count asked for (`None`: NCCL's own).
    pub fn all(
        transports: &[TransportSetting],
        protos: &[Option<Protocol>],
        algos: &[Option<Algorithm>],
        channel_counts: &[Option<u32>],
    ) -> Vec<NcclSetting> {
        let mut settings = Vec::new();
        for &channels in channel_counts {
            for &transport in transports {
                let forced = protos
                    .iter()
                    .map(|&proto| NcclSetting { transport, proto, algo: None, channels })
                    .chain(algos.iter().map(|&algo| NcclSetting { transport, proto: None, algo, channels }));
                for setting in forced {
                    if !settings.contains(&setting) {
                        settings.push(setting);
                    }
                }
            }
        }
        settings
    }

    /// Whether NCCL chooses everything (nothing forced).
    pub fn is_unforced(&self) -> bool {
        self.proto.is_none() && self.algo.is_none() && self.channels.is_none()
    }

    /// The variables this setting sets. NVLink SHARP (NVLS) is always off:
    /// on shared machines its multicast objects can take GPUs out of service.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("NCCL_NVLS_ENABLE", "0".to_string())];
        if self.transport == TransportSetting::Shm {
            env.push(("NCCL_P2P_DISABLE", "1".into()));
        }
        if let Some(proto) = self.proto {
            env.push(("NCCL_PROTO", nccl_protocol_name(proto).into()));
        }
        if let Some(name) = self.algo.and_then(nccl_algorithm_name) {
            env.push(("NCCL_ALGO", name.into()));
        }
        if let Some(channels) = self.channels {
            env.push(("NCCL_MIN_NCHANNELS", channels.to_string()));
            env.push(("NCCL_MAX_NCHANNELS", channels.to_string()));
        }
        env
    }

    /// The `env` field of its measurements: "NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1".
    pub fn env_text(&self) -> String {
        self.environment().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// "shm proto=ll", for progress and messages.
    pub fn label(&self) -> String {
        let mut label = self.transport.to_string();
        if let Some(proto) = self.proto {
            label += &format!(" proto={proto}");
        }
        if let Some(algo) = self.algo {
            label += &format!(" algo={algo}");
        }
        if let Some(channels) = self.channels {
            label += &format!(" channels={channels}");
        }
        label
    }

    /// Whether NCCL can run `op` under this setting: it runs the tree
    /// algorithm only for all-reduce.
    pub fn supports(&self, op: Op) -> bool {
        self.algo != Some(Algorithm::Tree) || op == Op::AllReduce
    }
}

/// What a child's environment gets: variables to set and to remove.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildEnvironment {
    pub set: Vec<(&'static str, String)>,
    pub remove: Vec<&'static str>,
}

/// A child's environment: the setting's variables, where NCCL dumps its
/// topology, and where it writes its log (`debug_log`: NCCL_DEBUG=INFO for
/// set-up and tuning, which names the channels, algorithm and protocol of
/// every call).
pub fn child_environment(setting: &NcclSetting, topology_dump: &Path, debug_log: Option<&Path>) -> ChildEnvironment {
    let mut set = setting.environment();
    set.push(("NCCL_TOPO_DUMP_FILE", topology_dump.display().to_string()));
    if let Some(log) = debug_log {
        set.push(("NCCL_DEBUG", "INFO".into()));
        set.push(("NCCL_DEBUG_SUBSYS", "INIT,TUNING".into()));
        set.push(("NCCL_DEBUG_FILE", log.display().to_string()));
    }
    let remove = NCCL_VARIABLES_SET_PER_SETTING.iter().copied().filter(|name| !set.iter().any(|(k, _)| k == name)).collect();
    ChildEnvironment { set, remove }
}

/// Where NCCL logs one child under `--nccl-debug`: one file per GPU count and
/// setting, `%h.%p` (host, process) keeping the ranks' lines apart.
pub fn debug_log_path(out: &Path, gpus: usize, setting: &NcclSetting) -> PathBuf {
    let name: String = setting.label().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    out.join("nccl-debug").join(format!("{gpus}gpu-{name}.%h.%p.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_force_one_thing_at_a_time() {
        let settings = NcclSetting::all(
            &[TransportSetting::Default, TransportSetting::Shm],
            &[None, Some(Protocol::Ll), Some(Protocol::Ll128), Some(Protocol::Simple)],
            &[None, Some(Algorithm::Ring), Some(Algorithm::Tree)],
            &[None],
        );
        assert_eq!(settings.len(), 12);
        assert!(settings.iter().all(|s| s.proto.is_none() || s.algo.is_none()));
        let labels: Vec<String> = settings.iter().map(NcclSetting::label).collect();
        assert_eq!(
            &labels[..6],
            &["default", "default proto=ll", "default proto=ll128", "default proto=simple", "default algo=ring", "default algo=tree"]
        );
        // Without "auto" nothing runs unforced.
        let forced_only = NcclSetting::all(&[TransportSetting::Shm], &[Some(Protocol::Simple)], &[], &[None]);
        assert_eq!(
            forced_only,
            vec![NcclSetting { transport: TransportSetting::Shm, proto: Some(Protocol::Simple), algo: None, channels: None }]
        );
    }

    #[test]
    fn channel_counts_multiply_the_settings_and_are_forced_both_ways() {
        let settings = NcclSetting::all(&[TransportSetting::Default], &[None, Some(Protocol::Ll)], &[], &[None, Some(1), Some(4)]);
        assert_eq!(settings.len(), 6);
        assert_eq!(settings.iter().filter(|s| s.is_unforced()).count(), 1, "only NCCL's own channels leave everything to NCCL");
        let one = settings.iter().find(|s| s.channels == Some(1) && s.proto.is_none()).unwrap();
        assert_eq!(one.label(), "default channels=1");
        assert_eq!(one.env_text(), "NCCL_NVLS_ENABLE=0 NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1");
        let log = debug_log_path(Path::new("/out"), 2, one);
        assert_eq!(log, Path::new("/out/nccl-debug/2gpu-default-channels-1.%h.%p.log"));
        let env = child_environment(one, Path::new("/out/nccl-topo.xml"), Some(&log));
        assert!(env.set.contains(&("NCCL_DEBUG", "INFO".into())) && env.set.iter().any(|(k, _)| *k == "NCCL_DEBUG_FILE"));
        assert!(!env.remove.contains(&"NCCL_DEBUG"), "a variable the child gets is not removed");
    }

    #[test]
    fn every_child_environment_turns_nvls_off_and_shm_disables_p2p() {
        let dump = Path::new("/out/nccl-topo.xml");
        let default =
            child_environment(&NcclSetting { transport: TransportSetting::Default, proto: None, algo: None, channels: None }, dump, None);
        assert!(default.set.contains(&("NCCL_NVLS_ENABLE", "0".into())));
        assert!(default.set.contains(&("NCCL_TOPO_DUMP_FILE", "/out/nccl-topo.xml".into())));
        assert!(!default.set.iter().any(|(k, _)| *k == "NCCL_P2P_DISABLE"));
        assert!(default.remove.contains(&"NCCL_P2P_DISABLE") && default.remove.contains(&"NCCL_PROTO"));

        let shm = NcclSetting { transport: TransportSetting::Shm, proto: Some(Protocol::Ll128), algo: None, channels: None };
        let env = child_environment(&shm, dump, None);
        assert!(env.set.contains(&("NCCL_NVLS_ENABLE", "0".into())));
        assert!(env.set.contains(&("NCCL_P2P_DISABLE", "1".into())));
        assert!(env.set.contains(&("NCCL_PROTO", "LL128".into())));
        assert!(!env.remove.contains(&"NCCL_P2P_DISABLE") && !env.remove.contains(&"NCCL_NVLS_ENABLE"));
        assert_eq!(shm.env_text(), "NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_PROTO=LL128");

        let tree = NcclSetting { transport: TransportSetting::Default, proto: None, algo: Some(Algorithm::Tree), channels: None };
        assert!(child_environment(&tree, dump, None).set.contains(&("NCCL_ALGO", "Tree".into())));
        assert!(tree.supports(Op::AllReduce) && !tree.supports(Op::AllGather));
    }
}
