//! `icsim serve --prefill-tp P --decode-tp D`: the server's GPUs split into
//! a prefill group and a decode group. Owns the split's flags and their
//! checks (which GPUs go to which group: the first P to prefill and the
//! next D to decode unless listed), each group's tensor parallelism, KV
//! cache and limits, and the KV moves between them on the topology; the
//! library serves, and the parent command prints what it reports.

use anyhow::Result;
use clap::Args;

use super::{ServeArgs, Shared, notices, progress_bar};
use crate::cli::BadInput;
use icsim::config::llm::LlmModel;
use icsim::report::{self, Record};
use icsim::serve::KvCapacity;
use icsim::serve::handoff::TopologyMoves;
use icsim::serve::iteration::{IterationTimes, SimulatedIterations};
use icsim::serve::load::{describe, transport_of};
use icsim::serve::requests::Request;
use icsim::serve::results::{self, GroupSetup, MoveLinks, RequestRow, ServeReport, SplitReport};
use icsim::serve::split::{self, Sources, SplitEngine};
use icsim::topology::MAX_GPUS;
use icsim::units::Bytes;
use icsim::workload::tp::{CollectiveCache, TensorParallel, TpError, allowed_degrees};

#[derive(Debug, Args)]
pub struct SplitArgs {
    /// Split the server in two: the prefill group's TP degree (with
    /// --decode-tp, instead of --tp). It computes prompts only; each
    /// request's KV cache then moves to the decode group.
    #[arg(long, value_parser = crate::cli::gpu_count(), requires = "decode_tp", conflicts_with = "tp")]
    prefill_tp: Option<u32>,
    /// The decode group's TP degree (with --prefill-tp): it generates the
    /// tokens.
    #[arg(long, value_parser = crate::cli::gpu_count(), requires = "prefill_tp", conflicts_with = "tp")]
    decode_tp: Option<u32>,
    /// The prefill group's GPUs by index, comma-separated (default: the
    /// first --prefill-tp GPUs not listed for decode).
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "I,J,...", requires = "prefill_tp")]
    prefill_gpus: Option<Vec<usize>>,
    /// The decode group's GPUs by index (default: the first --decode-tp
    /// GPUs after the prefill group's).
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "I,J,...", requires = "decode_tp")]
    decode_gpus: Option<Vec<usize>>,
    /// Tokens one prefill iteration computes at most (default:
    /// --max-num-batched-tokens, which the decode group keeps).
    #[arg(long, requires = "prefill_tp", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    prefill_max_num_batched_tokens: Option<u64>,
}

/// The TP degree the flags are resolved at for a split server: the larger
/// group's, once each group's degree is one `model` splits over (refused
/// by its flag otherwise; a model that cannot be read is the resolver's to
/// report).
pub(super) fn resolving_tp(split: &SplitArgs, model: &str) -> Result<u32, BadInput> {
    if let Ok(llm) = LlmModel::load(model) {
        let allowed = allowed_degrees(&llm, MAX_GPUS as u32);
        for (flag, tp) in [("--prefill-tp", split.prefill_tp), ("--decode-tp", split.decode_tp)] {
            if let Some(tp) = tp.filter(|tp| !allowed.contains(tp)) {
                let shown: Vec<String> = allowed.iter().filter(|&&t| t <= 64).map(u32::to_string).collect();
                return Err(BadInput(format!(
                    "{flag} {tp}: TP={tp} cannot split {}'s heads and FFN evenly; allowed up to 64: {}",
                    llm.name,
                    shown.join(", ")
                )));
            }
        }
    }
    Ok(split.prefill_tp.max(split.decode_tp).unwrap_or(1))
}

/// The GPUs (by index, in rank order) of the prefill and decode groups of
/// a server of `gpus` GPUs, as the flags say; refused by flag when they
/// cannot be.
fn groups(split: &SplitArgs, (prefill_tp, decode_tp): (u32, u32), gpus: usize) -> Result<(Vec<usize>, Vec<usize>), BadInput> {
    if (prefill_tp + decode_tp) as usize > gpus {
        return Err(BadInput(format!(
            "--decode-tp {decode_tp}: the server has {gpus} GPUs, fewer than --prefill-tp {prefill_tp} + --decode-tp {decode_tp}; take smaller groups or a topology with more GPUs (--gpus)"
        )));
    }
    for (flag, list, tp) in [("--prefill-gpus", &split.prefill_gpus, prefill_tp), ("--decode-gpus", &split.decode_gpus, decode_tp)] {
        let Some(list) = list else { continue };
        let shown = list.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        if list.len() != tp as usize {
            let tp_flag = flag.replace("gpus", "tp");
            return Err(BadInput(format!("{flag} {shown}: lists {} GPUs for {tp_flag} {tp}; list one a rank", list.len())));
        }
        if let Some(beyond) = list.iter().find(|&&g| g >= gpus) {
            return Err(BadInput(format!("{flag} {shown}: there is no GPU {beyond}; the server's are 0 to {}", gpus - 1)));
        }
        if let Some((_, twice)) = list.iter().enumerate().find(|(i, g)| list[..*i].contains(g)) {
            return Err(BadInput(format!("{flag} {shown}: GPU {twice} is listed twice")));
        }
    }
    // Listed groups first; the other takes the first GPUs left.
    let left = |taken: &[usize], count: u32| (0..gpus).filter(|g| !taken.contains(g)).take(count as usize).collect::<Vec<_>>();
    let (prefill, decode) = match (&split.prefill_gpus, &split.decode_gpus) {
        (Some(p), Some(d)) => (p.clone(), d.clone()),
        (Some(p), None) => (p.clone(), left(p, decode_tp)),
        (None, Some(d)) => (left(d, prefill_tp), d.clone()),
        (None, None) => ((0..prefill_tp as usize).collect(), (prefill_tp as usize..(prefill_tp + decode_tp) as usize).collect()),
    };
    if let Some(both) = decode.iter().find(|g| prefill.contains(g)) {
        return Err(BadInput(format!("--decode-gpus: GPU {both} is in the prefill group too; give the groups different GPUs")));
    }
    Ok((prefill, decode))
}

/// A group's setup refused, said by the flag that set it.
fn refused(flag: &str, tp: u32, error: TpError) -> BadInput {
    match error {
        TpError::Collective(error) => BadInput(format!("--transport: {error} (the {} group)", &flag[2..flag.len() - 3])),
        other => BadInput(format!("{flag} {tp}: {other}")),
    }
}

fn indices(gpus: &[usize]) -> String {
    gpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// Serves `requests` on the split server the flags describe, each group
/// set up as `setup` is but on its own GPUs.
pub(super) fn serve(
    args: &ServeArgs,
    shared: &Shared,
    setup: TensorParallel,
    requests: &[Request],
) -> Result<(ServeReport, Vec<RequestRow>)> {
    let split = &args.split;
    let (Some(prefill_tp), Some(decode_tp)) = (split.prefill_tp, split.decode_tp) else {
        return Err(BadInput("--tp: give the TP degree, or --prefill-tp and --decode-tp to split the server".into()).into());
    };
    let run = &shared.experiment.modes[0];
    let (topo, hardware, llm) = (&run.topology, &run.hardware, &shared.experiment.llm);
    let (prefill_gpus, decode_gpus) = groups(split, (prefill_tp, decode_tp), topo.gpus().len())?;
    let ranks = |gpus: &[usize]| gpus.iter().map(|&g| topo.gpus()[g]).collect::<Vec<_>>();
    let (prefill_ranks, decode_ranks) = (ranks(&prefill_gpus), ranks(&decode_gpus));
    let prefill_setup = setup.clone().on_gpus(prefill_ranks.clone()).map_err(|e| refused("--prefill-tp", prefill_tp, e))?;
    let decode_setup = setup.on_gpus(decode_ranks.clone()).map_err(|e| refused("--decode-tp", decode_tp, e))?;
    for tp in [prefill_tp, decode_tp] {
        if let Some(warning) = run.hardware.coverage_warning(tp, run.stack) {
            notices::warn(warning);
        }
    }
    let kv = |group: &str, tp| {
        KvCapacity::of(llm, shared.gpu, tp, args.gpu_memory_utilization, args.block_size)
            .map_err(|e| BadInput(format!("{e} (the {group} group, --{group}-tp {tp})")))
    };
    let (prefill_kv, decode_kv) = (kv("prefill", prefill_tp)?, kv("decode", decode_tp)?);
    let prefill_budget = split.prefill_max_num_batched_tokens.unwrap_or(args.max_num_batched_tokens);
    let engine = |tp: u32, budget, kv| shared.settings.engine(tp, budget, kv, llm.context_length);
    let engine = SplitEngine {
        prefill: engine(prefill_tp, prefill_budget, prefill_kv),
        decode: engine(decode_tp, args.max_num_batched_tokens, decode_kv),
    };
    let times = |setup, kv: KvCapacity| {
        SimulatedIterations::new(setup, CollectiveCache::new(topo, hardware), Bytes(args.block_size * kv.bytes_per_token))
    };
    let (mut prefill_times, mut decode_times) = (times(&prefill_setup, prefill_kv), times(&decode_setup, decode_kv));
    let mut moves = TopologyMoves::new(topo, hardware, llm, (&prefill_ranks, &decode_ranks), run.mode)?;
    let bar = progress_bar(requests.len() as u64, "serving {bar:40} {pos}/{len} requests, {elapsed}");
    let sources = Sources { prefill: &mut prefill_times, decode: &mut decode_times, moves: &mut moves };
    let served = split::simulate(requests, engine, sources, &|| bar.inc(1));
    bar.finish_and_clear();
    let served = served?;
    let decode_group = (decode_tp, transport_of(run, &decode_ranks), decode_kv);
    let mut description = describe(shared.experiment, shared.gpu, &shared.settings, decode_group, shared.load, shared.arrivals);
    description.prefill_tp = Some(prefill_tp);
    let mut report = results::report(&served.run, description, shared.slo, shared.per_gpu, decode_times.counts());
    let group = |tp, gpus: &[usize], budget, kv: KvCapacity| GroupSetup {
        tp,
        gpus: indices(gpus),
        max_num_batched_tokens: budget,
        kv_blocks: kv.blocks,
        kv_gb_per_gpu: kv.bytes_per_gpu.as_f64() / 1e9,
    };
    let groups = (
        group(prefill_tp, &prefill_gpus, prefill_budget, prefill_kv),
        group(decode_tp, &decode_gpus, args.max_num_batched_tokens, decode_kv),
    );
    report.split = Some(results::split_report(&served, groups, MoveLinks { transport: moves.transport(), busiest: moves.busiest_link() }));
    Ok((report, results::request_rows(&served.run, shared.slo)))
}

/// The groups as the table's first line says them.
pub(super) fn groups_line(split: &SplitReport) -> String {
    let (p, d) = (&split.prefill.setup, &split.decode.setup);
    format!("prefill TP={} on GPUs {}, decode TP={} on GPUs {}", p.tp, p.gpus, d.tp, d.gpus)
}

/// The table's sections of a split server: its groups, then its moves.
pub(super) fn sections(split: &SplitReport) -> Vec<(String, Vec<Record>)> {
    let groups = [("prefill", &split.prefill), ("decode", &split.decode)]
        .into_iter()
        .map(|(name, group)| {
            let mut row = Record::new();
            row.insert("group".into(), name.into());
            row.extend(report::flattened(group));
            row
        })
        .collect();
    let moves = &split.kv_move;
    let mut summary = Record::new();
    for (key, value) in report::flattened(moves) {
        if !key.starts_with("move_ms") && !key.starts_with("wait_ms") {
            summary.insert(key, value);
        }
    }
    let times = [("move", moves.move_ms), ("wait", moves.wait_ms)]
        .into_iter()
        .map(|(name, p)| {
            let mut row = Record::new();
            row.insert("kv".into(), name.into());
            row.extend(report::flattened(&p));
            row
        })
        .collect();
    vec![
        ("groups (busy_share: of the run's time; the decode group's iterations are the section above)".into(), groups),
        (
            "KV cache moved from the prefill to the decode group (shares: of each request's TTFT and end to end latency)".into(),
            vec![summary],
        ),
        ("per request (move: start to arrival; wait: prompt computed to move started)".into(), times),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(prefill_gpus: Option<Vec<usize>>, decode_gpus: Option<Vec<usize>>) -> SplitArgs {
        SplitArgs { prefill_tp: Some(2), decode_tp: Some(2), prefill_gpus, decode_gpus, prefill_max_num_batched_tokens: None }
    }

    #[test]
    fn the_first_gpus_prefill_and_the_next_decode_unless_listed() {
        assert_eq!(groups(&flags(None, None), (2, 2), 8).unwrap(), (vec![0, 1], vec![2, 3]));
        assert_eq!(groups(&flags(None, None), (4, 4), 8).unwrap(), (vec![0, 1, 2, 3], vec![4, 5, 6, 7]));
        assert_eq!(groups(&flags(Some(vec![6, 7]), None), (2, 2), 8).unwrap(), (vec![6, 7], vec![0, 1]));
        assert_eq!(groups(&flags(None, Some(vec![0, 4])), (2, 2), 8).unwrap(), (vec![1, 2], vec![0, 4]));
        assert_eq!(groups(&flags(Some(vec![0, 2]), Some(vec![1, 3])), (2, 2), 8).unwrap(), (vec![0, 2], vec![1, 3]));
    }

    #[test]
    fn groups_that_cannot_be_are_refused_by_flag() {
        let error = |split: SplitArgs, tps, gpus| groups(&split, tps, gpus).unwrap_err().0;
        assert!(error(flags(None, None), (4, 8), 8).starts_with("--decode-tp 8: the server has 8 GPUs"));
        assert!(error(flags(Some(vec![0]), None), (2, 2), 8).starts_with("--prefill-gpus 0: lists 1 GPUs for --prefill-tp 2"));
        assert!(error(flags(None, Some(vec![0, 9])), (2, 2), 8).contains("no GPU 9"));
        assert!(error(flags(Some(vec![3, 3]), None), (2, 2), 8).contains("GPU 3 is listed twice"));
        assert!(error(flags(Some(vec![0, 1]), Some(vec![1, 2])), (2, 2), 8).starts_with("--decode-gpus: GPU 1 is in the prefill group"));
    }
}
