//! Which copy paths this machine can measure and at which sizes, and the
//! schema-1 record of each measured copy. The paths themselves (names as in
//! the shared calibration README, the memory each needs) and how each is
//! queued and timed are icsim-gpu's `copies`. Knows nothing of NCCL.

use crate::calibrate::schema::Measurement;
use crate::units::Bytes;

use super::microseconds;
use super::sizes::{plan_sizes, size_list};

pub use icsim_gpu::copies::{COPY_PATHS, CopyPath, Mean, Repeat, measure_path};

/// One path and the sizes to measure on it.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyPlan {
    pub path: CopyPath,
    pub sizes: Vec<Bytes>,
}

/// The paths this machine can measure and their sizes within the memory
/// limits (per GPU and of host memory); what is left out is explained in
/// `notices`.
pub fn plan(
    gpus: usize,
    peer_access_0_1: bool,
    sizes: &[Bytes],
    device_limit: u64,
    host_limit: u64,
    notices: &mut Vec<String>,
) -> Vec<CopyPlan> {
    let mut plans = Vec::new();
    for path in COPY_PATHS {
        if gpus < path.gpus_needed() {
            notices.push(format!("copy {}: needs 2 GPUs, {gpus} measured; skipped", path.name()));
            continue;
        }
        if path.needs_peer_access() && !peer_access_0_1 {
            notices.push(format!("copy {}: GPU 0 cannot reach GPU 1's memory directly (no peer access); skipped", path.name()));
            continue;
        }
        let sizes = plan_sizes(sizes, path.granularity(), |s| path.device_bytes(s) <= device_limit && path.host_bytes(s) <= host_limit);
        if !sizes.too_large.is_empty() {
            notices.push(format!(
                "copy {}: {} left out, more than the free GPU memory ({}) or half the available host memory allow",
                path.name(),
                size_list(&sizes.too_large),
                Bytes(device_limit).human()
            ));
        }
        if !sizes.kept.is_empty() {
            plans.push(CopyPlan { path, sizes: sizes.kept });
        }
    }
    plans
}

/// The schema-1 record of a copy measurement.
pub fn record(system: &str, source: &str, path: CopyPath, bytes: Bytes, mean: &Mean, warmup: u32) -> Measurement {
    let streams = if path.uses_two_streams() { "cuda events around both GPUs' streams" } else { "cuda events on the copy stream" };
    Measurement {
        schema: 1,
        system: system.to_string(),
        op: "copy".into(),
        path: Some(path.name().into()),
        bytes: bytes.0,
        time_us: microseconds(mean.time_us),
        timing: Some(format!("{streams}, mean of {} after {warmup} warm-up", mean.repetitions)),
        source: Some(source.to_string()),
        ..Measurement::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gpu_measures_the_paths_of_one_gpu_and_says_why_not_the_others() {
        let mut notices = Vec::new();
        let plans = plan(1, false, &[Bytes::kib(4)], u64::MAX, u64::MAX, &mut notices);
        let names: Vec<&str> = plans.iter().map(|p| p.path.name()).collect();
        assert_eq!(names, ["d2d_gpu0", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"]);
        assert_eq!(notices.len(), 3);
        assert!(notices[0].contains("p2p_0to1") && notices[0].contains("needs 2 GPUs"), "{notices:?}");
    }

    #[test]
    fn two_gpus_without_peer_access_still_measure_the_staged_path() {
        let mut notices = Vec::new();
        let plans = plan(2, false, &[Bytes::kib(4)], u64::MAX, u64::MAX, &mut notices);
        assert!(plans.iter().any(|p| p.path == CopyPath::Staged0to1));
        assert!(!plans.iter().any(|p| p.path.needs_peer_access()));
        assert!(notices.iter().all(|n| n.contains("no peer access")), "{notices:?}");
        let with_peers = plan(2, true, &[Bytes::kib(4)], u64::MAX, u64::MAX, &mut Vec::new());
        assert_eq!(with_peers.len(), COPY_PATHS.len());
    }

    #[test]
    fn sizes_beyond_memory_are_left_out_per_path() {
        let mut notices = Vec::new();
        let sizes = [Bytes::gib(1), Bytes::gib(4)];
        let plans = plan(1, false, &sizes, 5 << 30, 2 << 30, &mut notices);
        let sizes_of = |path| plans.iter().find(|p| p.path == path).map(|p| p.sizes.clone()).unwrap();
        // Two buffers on one GPU: 4 GiB needs 8 GiB.
        assert_eq!(sizes_of(CopyPath::D2dGpu0), vec![Bytes::gib(1)]);
        // Host memory caps the host paths.
        assert_eq!(sizes_of(CopyPath::H2dPinned), vec![Bytes::gib(1)]);
        assert!(notices.iter().any(|n| n.contains("d2d_gpu0") && n.contains("4GiB")), "{notices:?}");
    }

    #[test]
    fn copy_records_carry_the_schema_fields_and_shared_names() {
        let mean = Mean { time_us: 4.123_456, repetitions: 20 };
        let m = record("box", "icsim", CopyPath::P2pBidirTotal, Bytes::mib(1), &mean, 3);
        assert_eq!((m.schema, m.op.as_str(), m.path.as_deref(), m.bytes), (1, "copy", Some("p2p_bidir_total"), 1 << 20));
        assert_eq!(m.time_us, 4.123);
        assert_eq!(m.series(), "copy p2p_bidir_total");
        let line = crate::calibrate::schema::to_jsonl(&[m]);
        let back = crate::calibrate::schema::parse(std::path::Path::new("m.jsonl"), &line).unwrap();
        assert_eq!(back[0].timing.as_deref(), Some("cuda events around both GPUs' streams, mean of 20 after 3 warm-up"));
        let names: Vec<&str> = COPY_PATHS.iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            ["d2d_gpu0", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable", "p2p_0to1", "p2p_bidir_total", "staged_0to1"]
        );
    }
}
