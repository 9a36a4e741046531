//! The caller of NCCL and of compute kernels: raw NCCL calls replayed from a
//! CUDA graph (as inference engines replay decode), PyTorch inside a graph,
//! or eager launches from the host. What a caller adds (a cost per
//! collective call, a gap per kernel launch) is kept apart from what NCCL and
//! the hardware cost: the model's `[stack.<name>]` tables hold it, and
//! nothing else in the model may absorb it.

use std::fmt;
use std::str::FromStr;

/// Who issues the collectives and kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// Raw NCCL calls captured in a CUDA graph and replayed: the reference
    /// (NCCL's own kernel start is NCCL's cost, the caller adds nothing).
    #[default]
    NcclGraph,
    /// torch.distributed (and torch kernels) captured in a CUDA graph.
    TorchGraph,
    /// PyTorch launching every kernel and collective from Python.
    TorchEager,
    /// Raw NCCL and kernel launches from the host, one call at a time (as
    /// nccl-tests times without graphs).
    Eager,
}

pub const STACKS: [Stack; 4] = [Stack::NcclGraph, Stack::TorchGraph, Stack::TorchEager, Stack::Eager];

impl Stack {
    pub fn name(self) -> &'static str {
        match self {
            Stack::NcclGraph => "nccl-graph",
            Stack::TorchGraph => "torch-graph",
            Stack::TorchEager => "torch-eager",
            Stack::Eager => "eager",
        }
    }

    /// Whether the caller replays a CUDA graph (no host work between
    /// launches).
    pub fn in_graph(self) -> bool {
        matches!(self, Stack::NcclGraph | Stack::TorchGraph)
    }

    /// The same framework launching from the host, as engines run the
    /// iterations their CUDA graphs do not cover (prompt chunks, mixed
    /// batches): torch-graph's is torch-eager, nccl-graph's eager; a stack
    /// that launches from the host already is its own.
    pub fn eager_counterpart(self) -> Stack {
        match self {
            Stack::NcclGraph => Stack::Eager,
            Stack::TorchGraph => Stack::TorchEager,
            other => other,
        }
    }

    /// The stack a measurement was made with, from what its `timing` and
    /// `source` fields say, for rows written before the `stack` field
    /// existed: PyTorch (torch.distributed, torch.matmul) or raw calls, in a
    /// CUDA graph or launched eagerly.
    pub fn infer(timing: Option<&str>, source: Option<&str>) -> Stack {
        let text = |s: Option<&str>| s.unwrap_or("").to_ascii_lowercase();
        let (timing, source) = (text(timing), text(source));
        let torch = source.contains("torch") || timing.contains("torch");
        let graph = timing.contains("graph") || source.contains("graph");
        match (torch, graph) {
            (true, true) => Stack::TorchGraph,
            (true, false) => Stack::TorchEager,
            (false, true) => Stack::NcclGraph,
            (false, false) => Stack::Eager,
        }
    }
}

impl fmt::Display for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Stack {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        STACKS
            .into_iter()
            .find(|s| s.name() == text)
            .ok_or_else(|| format!("unknown stack {text:?}: use {}", STACKS.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_choices() {
        for stack in STACKS {
            assert_eq!(stack.name().parse::<Stack>().unwrap(), stack);
        }
        let error = "torch".parse::<Stack>().unwrap_err();
        assert!(error.contains("nccl-graph") && error.contains("torch-graph") && error.contains("eager"), "{error}");
    }

    #[test]
    fn each_graph_stack_has_an_eager_counterpart_of_its_framework() {
        let pairs: Vec<(Stack, Stack)> = STACKS.into_iter().map(|s| (s, s.eager_counterpart())).collect();
        assert_eq!(
            pairs,
            [
                (Stack::NcclGraph, Stack::Eager),
                (Stack::TorchGraph, Stack::TorchEager),
                (Stack::TorchEager, Stack::TorchEager),
                (Stack::Eager, Stack::Eager)
            ]
        );
        assert!(STACKS.into_iter().all(|s| !s.eager_counterpart().in_graph()));
    }

    #[test]
    fn old_rows_are_read_for_their_stack() {
        // The shared torch file, the runner's rows, a kernel timed eagerly by torch.
        let torch_graph = Stack::infer(Some("20 calls captured in a CUDA graph and replayed"), Some("torch 2.11 torch.distributed"));
        assert_eq!(torch_graph, Stack::TorchGraph);
        let runner = Stack::infer(Some("cuda graph of 20 calls, cuda events"), Some("NCCL 2.28.3 via icsim 0.1.0 calibrate run"));
        assert_eq!(runner, Stack::NcclGraph);
        assert_eq!(Stack::infer(Some("cuda events"), Some("torch.matmul")), Stack::TorchEager);
        assert_eq!(Stack::infer(None, None), Stack::Eager);
    }
}
