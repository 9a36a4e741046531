//! The copy paths the runner measures (names as in the shared calibration
//! README), what memory each needs, and how each is queued and timed with
//! CUDA events on the GPUs' streams. Knows nothing of NCCL.

use crate::calibrate::schema::Measurement;
use crate::units::Bytes;

use super::cuda::{Device, Event, Stream};
use super::progress::Progress;
use super::sizes::{plan_sizes, size_list};
use super::{RunnerError, Timing, microseconds};

/// The staging chunk of `staged_0to1`.
pub const STAGING_CHUNK: usize = 4 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPath {
    /// Within GPU 0's memory.
    D2dGpu0,
    H2dPinned,
    D2hPinned,
    H2dPageable,
    D2hPageable,
    /// GPU 0 to GPU 1, one direct copy.
    P2p0to1,
    /// GPU 0 to GPU 1 and GPU 1 to GPU 0 at once, half the bytes each way.
    P2pBidirTotal,
    /// GPU 0 to pinned host memory to GPU 1, in chunks, the two copies of
    /// successive chunks overlapping.
    Staged0to1,
}

pub const COPY_PATHS: [CopyPath; 8] = [
    CopyPath::D2dGpu0,
    CopyPath::H2dPinned,
    CopyPath::D2hPinned,
    CopyPath::H2dPageable,
    CopyPath::D2hPageable,
    CopyPath::P2p0to1,
    CopyPath::P2pBidirTotal,
    CopyPath::Staged0to1,
];

impl CopyPath {
    pub fn name(self) -> &'static str {
        match self {
            CopyPath::D2dGpu0 => "d2d_gpu0",
            CopyPath::H2dPinned => "h2d_pinned",
            CopyPath::D2hPinned => "d2h_pinned",
            CopyPath::H2dPageable => "h2d_pageable",
            CopyPath::D2hPageable => "d2h_pageable",
            CopyPath::P2p0to1 => "p2p_0to1",
            CopyPath::P2pBidirTotal => "p2p_bidir_total",
            CopyPath::Staged0to1 => "staged_0to1",
        }
    }

    fn gpus_needed(self) -> usize {
        match self {
            CopyPath::P2p0to1 | CopyPath::P2pBidirTotal | CopyPath::Staged0to1 => 2,
            _ => 1,
        }
    }

    fn needs_peer_access(self) -> bool {
        matches!(self, CopyPath::P2p0to1 | CopyPath::P2pBidirTotal)
    }

    /// Device memory a measured size needs on the GPU that needs the most.
    pub fn device_bytes(self, size: Bytes) -> u64 {
        match self {
            CopyPath::D2dGpu0 => 2 * size.0,
            _ => size.0,
        }
    }

    /// Host memory a measured size needs.
    pub fn host_bytes(self, size: Bytes) -> u64 {
        match self {
            CopyPath::H2dPinned | CopyPath::D2hPinned | CopyPath::H2dPageable | CopyPath::D2hPageable => size.0,
            CopyPath::Staged0to1 => 2 * STAGING_CHUNK as u64,
            CopyPath::D2dGpu0 | CopyPath::P2p0to1 | CopyPath::P2pBidirTotal => 0,
        }
    }

    /// Sizes are multiples of this (the bidirectional copy halves them).
    fn granularity(self) -> u64 {
        if self == CopyPath::P2pBidirTotal { 2 } else { 1 }
    }

    /// Whether both GPUs' streams take part (timed around both).
    fn uses_two_streams(self) -> bool {
        matches!(self, CopyPath::P2pBidirTotal | CopyPath::Staged0to1)
    }
}

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

/// The mean time of one copy, and how many were timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mean {
    pub time_us: f64,
    pub repetitions: u32,
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

/// GPU 0's stream, and GPU 1's where the path uses both, with the events
/// that fork work to the second and join it back.
struct Lanes {
    primary: Stream,
    secondary: Option<SecondLane>,
}

struct SecondLane {
    stream: Stream,
    /// Recorded on the primary stream (GPU 0).
    fork: Event,
    /// Recorded on the secondary stream (GPU 1).
    join: Event,
}

impl Lanes {
    fn one(device: &Device) -> Result<Lanes, RunnerError> {
        Ok(Lanes { primary: device.stream()?, secondary: None })
    }

    fn two(first: &Device, second: &Device) -> Result<Lanes, RunnerError> {
        let secondary = SecondLane { stream: second.stream()?, fork: first.event()?, join: second.event()? };
        Ok(Lanes { primary: first.stream()?, secondary: Some(secondary) })
    }

    fn second(&self) -> &SecondLane {
        self.secondary.as_ref().expect("a path of two GPUs has two lanes")
    }

    /// Queues `enqueue` (which may use both streams) between a fork from and
    /// a join back to the primary stream, and waits until all of it is done,
    /// also when `enqueue` fails.
    fn run_timed(&self, enqueue: impl FnOnce() -> Result<(), RunnerError>) -> Result<f64, RunnerError> {
        let timed = self.primary.time(|| {
            if let Some(lane) = &self.secondary {
                self.primary.record(&lane.fork)?;
                lane.stream.wait(&lane.fork)?;
            }
            let queued = enqueue();
            if let Some(lane) = &self.secondary {
                lane.stream.record(&lane.join)?;
                self.primary.wait(&lane.join)?;
            }
            queued
        });
        if timed.is_err()
            && let Some(lane) = &self.secondary
        {
            // Nothing may still run on host memory when the caller frees it.
            lane.stream.synchronize()?;
        }
        timed
    }

    /// Warm-up, an estimate from one repetition, then the mean of as many
    /// repetitions as the timing allows. `enqueue(n)` queues n copies.
    fn measure(&self, timing: &Timing, mut enqueue: impl FnMut(u32) -> Result<(), RunnerError>) -> Result<Mean, RunnerError> {
        if timing.warmup > 0 {
            self.run_timed(|| enqueue(timing.warmup))?;
        }
        let estimate = self.run_timed(|| enqueue(1))?;
        let repetitions = timing.repetitions(estimate);
        let total = self.run_timed(|| enqueue(repetitions))?;
        Ok(Mean { time_us: total / f64::from(repetitions), repetitions })
    }
}

/// Measures one path at each of its sizes, handing each mean to `measured`
/// as soon as it is known.
pub fn measure_path(
    devices: &[Device],
    plan: &CopyPlan,
    timing: &Timing,
    progress: &Progress,
    measured: &mut dyn FnMut(Bytes, Mean) -> Result<(), RunnerError>,
) -> Result<(), RunnerError> {
    let path = plan.path;
    let largest = plan.sizes.iter().map(|s| s.0 as usize).max().unwrap_or(0);
    let gpu0 = &devices[0];
    let gpu1 = || devices.get(1).ok_or_else(|| RunnerError::Usage(format!("copy {} needs 2 GPUs", path.name())));
    let mut each_size = |enqueue: &mut dyn FnMut(usize, u32) -> Result<(), RunnerError>, lanes: &Lanes| -> Result<(), RunnerError> {
        for &size in &plan.sizes {
            progress.start(&format!("copy {} {size}", path.name()));
            let mean = lanes.measure(timing, |n| enqueue(size.0 as usize, n))?;
            measured(size, mean)?;
            progress.advance(1);
        }
        Ok(())
    };
    // SAFETY (every host-memory copy below): the host buffers live in this
    // function's frame and outlive `each_size`; every batch of copies is
    // queued inside `Lanes::run_timed`, which returns only after the streams
    // finished it (also on errors), so no copy into or out of host memory
    // outlives the borrow it was given.
    match path {
        CopyPath::D2dGpu0 => {
            let lanes = Lanes::one(gpu0)?;
            let (src, dst) = (gpu0.alloc(largest)?, gpu0.alloc(largest)?);
            each_size(&mut |size, n| (0..n).try_for_each(|_| lanes.primary.copy_device(dst.range(0, size), src.range(0, size))), &lanes)
        }
        CopyPath::H2dPinned => {
            let lanes = Lanes::one(gpu0)?;
            let (host, device) = (gpu0.alloc_pinned(largest)?, gpu0.alloc(largest)?);
            each_size(
                &mut |size, n| {
                    (0..n).try_for_each(|_| {
                        // SAFETY: see the note above the match.
                        unsafe { lanes.primary.copy_to_device(device.range(0, size), &host.as_slice()[..size]) }
                    })
                },
                &lanes,
            )
        }
        CopyPath::D2hPinned => {
            let lanes = Lanes::one(gpu0)?;
            let (mut host, device) = (gpu0.alloc_pinned(largest)?, gpu0.alloc(largest)?);
            each_size(
                &mut |size, n| {
                    (0..n).try_for_each(|_| {
                        // SAFETY: see the note above the match.
                        unsafe { lanes.primary.copy_to_host(&mut host.as_mut_slice()[..size], device.range(0, size)) }
                    })
                },
                &lanes,
            )
        }
        CopyPath::H2dPageable => {
            let lanes = Lanes::one(gpu0)?;
            let (host, device) = (vec![1u8; largest], gpu0.alloc(largest)?);
            each_size(
                &mut |size, n| {
                    (0..n).try_for_each(|_| {
                        // SAFETY: see the note above the match.
                        unsafe { lanes.primary.copy_to_device(device.range(0, size), &host[..size]) }
                    })
                },
                &lanes,
            )
        }
        CopyPath::D2hPageable => {
            let lanes = Lanes::one(gpu0)?;
            let (mut host, device) = (vec![1u8; largest], gpu0.alloc(largest)?);
            each_size(
                &mut |size, n| {
                    (0..n).try_for_each(|_| {
                        // SAFETY: see the note above the match.
                        unsafe { lanes.primary.copy_to_host(&mut host[..size], device.range(0, size)) }
                    })
                },
                &lanes,
            )
        }
        CopyPath::P2p0to1 => {
            let gpu1 = gpu1()?;
            gpu0.enable_peer_access(gpu1)?;
            let lanes = Lanes::one(gpu0)?;
            let (src, dst) = (gpu0.alloc(largest)?, gpu1.alloc(largest)?);
            each_size(&mut |size, n| (0..n).try_for_each(|_| lanes.primary.copy_device(dst.range(0, size), src.range(0, size))), &lanes)
        }
        CopyPath::P2pBidirTotal => {
            let gpu1 = gpu1()?;
            gpu0.enable_peer_access(gpu1)?;
            gpu1.enable_peer_access(gpu0)?;
            let lanes = Lanes::two(gpu0, gpu1)?;
            let half = largest / 2;
            let (src0, dst0, src1, dst1) = (gpu0.alloc(half)?, gpu0.alloc(half)?, gpu1.alloc(half)?, gpu1.alloc(half)?);
            each_size(
                &mut |size, n| {
                    let half = size / 2;
                    (0..n).try_for_each(|_| {
                        lanes.primary.copy_device(dst1.range(0, half), src0.range(0, half))?;
                        lanes.second().stream.copy_device(dst0.range(0, half), src1.range(0, half))
                    })
                },
                &lanes,
            )
        }
        CopyPath::Staged0to1 => {
            let gpu1 = gpu1()?;
            let lanes = Lanes::two(gpu0, gpu1)?;
            let (src, dst) = (gpu0.alloc(largest)?, gpu1.alloc(largest)?);
            let mut slots = [gpu0.alloc_pinned(STAGING_CHUNK)?, gpu0.alloc_pinned(STAGING_CHUNK)?];
            // filled[s]: slot s holds a chunk for GPU 1 (recorded by GPU 0);
            // freed[s]: GPU 1 has taken it (recorded by GPU 1).
            let filled = [gpu0.event()?, gpu0.event()?];
            let freed = [gpu1.event()?, gpu1.event()?];
            let (to_host, to_device) = (&lanes.primary, &lanes.second().stream);
            let mut chunk_number = 0usize;
            each_size(
                &mut |size, n| {
                    for _ in 0..n {
                        for offset in (0..size).step_by(STAGING_CHUNK) {
                            let len = STAGING_CHUNK.min(size - offset);
                            let slot = chunk_number % 2;
                            chunk_number += 1;
                            // A wait on an event never recorded returns at once.
                            to_host.wait(&freed[slot])?;
                            // SAFETY: see the note above the match.
                            unsafe { to_host.copy_to_host(&mut slots[slot].as_mut_slice()[..len], src.range(offset, len))? };
                            to_host.record(&filled[slot])?;
                            to_device.wait(&filled[slot])?;
                            // SAFETY: see the note above the match.
                            unsafe { to_device.copy_to_device(dst.range(offset, len), &slots[slot].as_slice()[..len])? };
                            to_device.record(&freed[slot])?;
                        }
                    }
                    Ok(())
                },
                &lanes,
            )
        }
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
