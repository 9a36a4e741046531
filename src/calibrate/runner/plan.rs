//! What a run measures: the copy paths, and for each GPU count the NCCL
//! settings with their points (single collectives, and an LLM's allreduce
//! passes where NCCL chooses), with notices on what is left out.

use crate::collective::Op;
use crate::config::llm::LlmModel;

use super::collectives::{self, CollectivePoint, Sequence};
use super::copies;
use super::memory;
use super::settings::{NCCL_VARIABLES_SET_PER_SETTING, NcclSetting, TransportSetting};
use super::{Probe, RunOptions};
use icsim_gpu::nccl::DataType;

/// The passes of `llm` at TP=`ranks` as measured points: a prefill of
/// `prompt` tokens and one decode step, each `allreduces_per_pass` calls.
/// Says in `notices` why any is left out.
pub fn sequence_points(llm: &LlmModel, prompt: u64, ranks: usize, device_limit: u64, notices: &mut Vec<String>) -> Vec<CollectivePoint> {
    if !crate::workload::tp::splits(llm, ranks as u64) {
        notices
            .push(format!("{}: TP={ranks} cannot split its heads and FFN, so its allreduces are not replayed on {ranks} GPUs", llm.name));
        return Vec::new();
    }
    let Some(dtype) = DataType::of_width(llm.dtype_bytes) else {
        notices.push(format!(
            "{}: activations of {} bytes have no NCCL type here; its allreduces are not replayed",
            llm.name, llm.dtype_bytes
        ));
        return Vec::new();
    };
    let calls = u32::try_from(llm.allreduces_per_pass()).unwrap_or(u32::MAX);
    let mut points = Vec::new();
    for tokens in [prompt, 1] {
        let bytes = llm.allreduce_bytes(tokens);
        if bytes.0.saturating_mul(2) > device_limit {
            notices.push(format!("{}: a {tokens}-token allreduce of {bytes} is more than the free GPU memory allows", llm.name));
            continue;
        }
        points.push(CollectivePoint { op: Op::AllReduce, bytes, sequence: Some(Sequence { tokens, calls, dtype }) });
    }
    points
}

/// What a run measures, and the notices about what it leaves out.
pub struct RunPlan {
    pub copies: Vec<copies::CopyPlan>,
    /// Each GPU count and NCCL setting with its points (those with none
    /// are left out).
    pub collectives: Vec<(usize, NcclSetting, Vec<CollectivePoint>)>,
    pub notices: Vec<String>,
}

impl RunPlan {
    /// Copies on the `gpus` opened GPUs; collectives on each of
    /// `group_sizes`; `llm`'s allreduce passes where NCCL chooses.
    pub(super) fn new(options: &RunOptions, probe: &Probe, gpus: usize, group_sizes: &[usize], llm: Option<&LlmModel>) -> RunPlan {
        let mut notices = Vec::new();
        let host_limit = memory::host_limit();
        let copies = if options.skip_copies {
            Vec::new()
        } else {
            let peer_0_1 = probe.record.peer_access.first().and_then(|row| row.get(1)).copied().unwrap_or(false);
            copies::plan(gpus, peer_0_1, &options.copy_sizes, probe.usable_memory, host_limit, &mut notices)
        };
        let mut collectives = Vec::new();
        if !options.skip_collectives {
            for &ranks in group_sizes {
                collectives.extend(Self::collectives_on(options, probe.usable_memory, ranks, llm, &mut notices));
            }
            if !collectives.is_empty() {
                for name in NCCL_VARIABLES_SET_PER_SETTING {
                    if std::env::var_os(name).is_some() {
                        notices.push(format!(
                            "{name} from the environment is not passed on: the runner sets NCCL's transport variables per setting"
                        ));
                    }
                }
            }
        }
        // Each GPU count would say the same about a setting.
        let mut unique = Vec::new();
        for notice in notices {
            if !unique.contains(&notice) {
                unique.push(notice);
            }
        }
        RunPlan { copies, collectives, notices: unique }
    }

    /// Every setting's points on `ranks` GPUs: single collectives, and the
    /// LLM's allreduce passes where nothing is forced. One rank's collective
    /// is a copy on its GPU (NCCL's ncclLaunchOneRank): no transport,
    /// protocol, algorithm or channel count to force and no tensor-parallel
    /// allreduce to replay, so only NCCL's default setting runs there.
    pub fn collectives_on(
        options: &RunOptions,
        device_limit: u64,
        ranks: usize,
        llm: Option<&LlmModel>,
        notices: &mut Vec<String>,
    ) -> Vec<(usize, NcclSetting, Vec<CollectivePoint>)> {
        let alone;
        let (options, llm) = if ranks < 2 {
            notices.push(
                "1 GPU: NCCL runs a one-rank collective as a copy on the GPU, so only NCCL's default setting is measured on it; run on 2+ GPUs (or --gpus 2) to measure collectives between GPUs".into(),
            );
            alone = RunOptions {
                transports: vec![TransportSetting::Default],
                protos: vec![None],
                algos: vec![None],
                channels: vec![None],
                ..options.clone()
            };
            (&alone, None)
        } else {
            (options, llm)
        };
        let points = collectives::plan_points(&options.ops, &options.collective_sizes, ranks, device_limit, notices);
        let sequences = match (llm, &options.sequences) {
            (Some(llm), Some(asked)) => sequence_points(llm, asked.prompt, ranks, device_limit, notices),
            _ => Vec::new(),
        };
        let mut out = Vec::new();
        for setting in NcclSetting::all(&options.transports, &options.protos, &options.algos, &options.channels) {
            let mut kept: Vec<CollectivePoint> = points.iter().copied().filter(|p| setting.supports(p.op)).collect();
            if kept.len() < points.len() {
                notices.push(format!(
                    "{}: NCCL runs the tree algorithm only for allreduce; the other collectives are skipped there",
                    setting.label()
                ));
            }
            if setting.is_unforced() {
                kept.extend(&sequences);
            }
            if !kept.is_empty() {
                out.push((ranks, setting, kept));
            }
        }
        out
    }

    pub fn points(&self) -> u64 {
        let copies: usize = self.copies.iter().map(|p| p.sizes.len()).sum();
        let collectives: usize = self.collectives.iter().map(|(_, _, p)| p.len()).sum();
        (copies + collectives) as u64
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::runner::tests::options;
    use crate::collective::{Algorithm, Protocol};
    use crate::units::Bytes;

    #[test]
    fn an_llm_pass_is_two_allreduces_per_layer_of_its_activations() {
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let mut notices = Vec::new();
        let points = sequence_points(&llm, 8192, 8, 80 << 30, &mut notices);
        let shapes: Vec<(Bytes, Option<Sequence>)> = points.iter().map(|p| (p.bytes, p.sequence)).collect();
        let pass = |tokens| Some(Sequence { tokens, calls: 160, dtype: DataType::Bfloat16 });
        assert_eq!(shapes, vec![(Bytes::mib(128), pass(8192)), (Bytes::kib(16), pass(1))]);
        assert!(notices.is_empty(), "{notices:?}");
        // 64 heads do not split over 3 GPUs; a small GPU keeps only the decode step.
        assert!(sequence_points(&llm, 8192, 3, 80 << 30, &mut notices).is_empty());
        assert_eq!(sequence_points(&llm, 8192, 2, 100 << 20, &mut notices).len(), 1);
        assert!(notices[0].contains("TP=3") && notices[1].contains("128MiB"), "{notices:?}");
    }

    #[test]
    fn one_gpu_measures_nccls_one_rank_collectives_under_its_default_setting_only() {
        let options = RunOptions {
            ops: vec![Op::AllReduce, Op::AllGather],
            transports: vec![TransportSetting::Default, TransportSetting::Shm],
            protos: vec![None, Some(Protocol::Ll)],
            algos: vec![None, Some(Algorithm::Tree)],
            channels: vec![None, Some(4)],
            collective_sizes: vec![Bytes::mib(1)],
            ..options()
        };
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let mut notices = Vec::new();
        let planned = RunPlan::collectives_on(&options, 80 << 30, 1, Some(&llm), &mut notices);
        let described: Vec<(usize, String, usize)> = planned.iter().map(|(r, s, p)| (*r, s.label(), p.len())).collect();
        assert_eq!(described, vec![(1, "default".to_string(), 2)], "two single collectives, no LLM pass");
        assert!(notices.iter().any(|n| n.contains("one-rank collective as a copy")), "{notices:?}");
    }

    #[test]
    fn llm_passes_run_only_where_nccl_chooses_and_tree_only_for_allreduce() {
        let options = RunOptions {
            ops: vec![Op::AllReduce, Op::AllGather],
            protos: vec![None, Some(Protocol::Ll)],
            algos: vec![None, Some(Algorithm::Tree)],
            collective_sizes: vec![Bytes::mib(1)],
            ..options()
        };
        let llm = LlmModel::load("llama-3.1-70b").unwrap();
        let mut notices = Vec::new();
        let planned = RunPlan::collectives_on(&options, 80 << 30, 4, Some(&llm), &mut notices);
        let described: Vec<(usize, String, usize, usize)> = planned
            .iter()
            .map(|(ranks, setting, points)| (*ranks, setting.label(), points.len(), points.iter().filter(|p| p.sequence.is_some()).count()))
            .collect();
        assert_eq!(
            described,
            vec![(4, "default".to_string(), 4, 2), (4, "default proto=ll".to_string(), 2, 0), (4, "default algo=tree".to_string(), 1, 0)]
        );
        assert!(notices.iter().any(|n| n.contains("tree algorithm only for allreduce")), "{notices:?}");
    }
}
