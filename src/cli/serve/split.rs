//! `icsim serve --prefill-tp P --decode-tp D`: the server's GPUs split into
//! a prefill group and a decode group. Owns the split's flags, the TP the
//! flags are resolved at, and the words, by flag, for what the library
//! (`serve::groups`, `serve::load::Server::split`) refuses; the library
//! sets the groups up and serves, and the parent command prints what it
//! reports.

use anyhow::Result;
use clap::Args;

use super::notices;
use crate::cli::BadInput;
use icsim::config::llm::LlmModel;
use icsim::report::{self, Record};
use icsim::serve::groups::{self, GroupError, GroupFailure, PlanError, Role, SplitPlan};
use icsim::serve::load::{EngineSettings, LoadError, Server};
use icsim::serve::results::{GroupSetup, SplitReport};
use icsim::topology::MAX_GPUS;
use icsim::workload::experiment::Experiment;
use icsim::workload::tp::{TpError, allowed_degrees};

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

/// The server split as the flags say, on `experiment`'s first mode; what
/// cannot be is refused by the flag that set it.
pub(super) fn server<'e>(split: &SplitArgs, experiment: &'e Experiment, settings: &EngineSettings) -> Result<Server<'e>> {
    let (Some(prefill_tp), Some(decode_tp)) = (split.prefill_tp, split.decode_tp) else {
        return Err(BadInput("--tp: give the TP degree, or --prefill-tp and --decode-tp to split the server".into()).into());
    };
    let plan = SplitPlan {
        prefill_tp,
        decode_tp,
        prefill_gpus: split.prefill_gpus.clone(),
        decode_gpus: split.decode_gpus.clone(),
        prefill_max_num_batched_tokens: split.prefill_max_num_batched_tokens,
    };
    let server = Server::split(experiment, settings, &plan).map_err(|error| match error {
        LoadError::Plan(error) => anyhow::Error::from(by_flag(&error)),
        LoadError::Group(error) => by_group_flag(error).into(),
        other => other.into(),
    })?;
    let run = server.run;
    for tp in [prefill_tp, decode_tp] {
        if let Some(warning) = run.hardware.coverage_warning(tp, run.stack) {
            notices::warn(warning);
        }
    }
    Ok(server)
}

/// The flag of a group's TP degree, and of its GPUs.
fn flags(role: Role) -> (&'static str, &'static str) {
    match role {
        Role::Prefill => ("--prefill-tp", "--prefill-gpus"),
        Role::Decode => ("--decode-tp", "--decode-gpus"),
    }
}

/// A plan refused, said by the flag that set it.
fn by_flag(error: &PlanError) -> BadInput {
    BadInput(match error {
        PlanError::TooFew { gpus, prefill_tp, decode_tp } => format!(
            "--decode-tp {decode_tp}: the server has {gpus} GPUs, fewer than --prefill-tp {prefill_tp} + --decode-tp {decode_tp}; take smaller groups or a topology with more GPUs (--gpus)"
        ),
        PlanError::ListedCount { role, listed, tp } => {
            let (tp_flag, flag) = flags(*role);
            format!("{flag} {}: lists {} GPUs for {tp_flag} {tp}; list one a rank", groups::listed(listed), listed.len())
        }
        PlanError::NoSuchGpu { role, listed, gpu, gpus } => {
            format!("{} {}: there is no GPU {gpu}; the server's are 0 to {}", flags(*role).1, groups::listed(listed), gpus - 1)
        }
        PlanError::Twice { role, listed, gpu } => format!("{} {}: GPU {gpu} is listed twice", flags(*role).1, groups::listed(listed)),
        PlanError::InBoth { gpu } => format!("--decode-gpus: GPU {gpu} is in the prefill group too; give the groups different GPUs"),
    })
}

/// A group that cannot serve, said by the flag that set it.
fn by_group_flag(GroupError { role, tp, failure }: GroupError) -> BadInput {
    let tp_flag = flags(role).0;
    BadInput(match failure {
        GroupFailure::Tp(TpError::Collective(error)) => format!("--transport: {error} (the {role} group)"),
        GroupFailure::Tp(other) => format!("{tp_flag} {tp}: {other}"),
        GroupFailure::Cache(error) => format!("{error} (the {role} group, {tp_flag} {tp})"),
    })
}

/// The groups as the table's first line says them.
pub(crate) fn groups_line(p: &GroupSetup, d: &GroupSetup) -> String {
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

    fn plan(prefill_gpus: Option<Vec<usize>>, decode_gpus: Option<Vec<usize>>) -> SplitPlan {
        SplitPlan { prefill_tp: 2, decode_tp: 2, prefill_gpus, decode_gpus, prefill_max_num_batched_tokens: None }
    }

    #[test]
    fn groups_that_cannot_be_are_refused_by_flag() {
        let error = |plan: SplitPlan, gpus| by_flag(&plan.groups(gpus).unwrap_err()).0;
        let too_big = SplitPlan { prefill_tp: 4, decode_tp: 8, ..SplitPlan::default() };
        assert!(error(too_big, 8).starts_with("--decode-tp 8: the server has 8 GPUs"));
        assert!(error(plan(Some(vec![0]), None), 8).starts_with("--prefill-gpus 0: lists 1 GPUs for --prefill-tp 2"));
        assert!(error(plan(None, Some(vec![0, 9])), 8).starts_with("--decode-gpus 0,9: there is no GPU 9"));
        assert!(error(plan(Some(vec![3, 3]), None), 8).contains("GPU 3 is listed twice"));
        assert!(error(plan(Some(vec![0, 1]), Some(vec![1, 2])), 8).starts_with("--decode-gpus: GPU 1 is in the prefill group"));
    }
}
