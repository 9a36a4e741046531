//! The copy paths the runner measures (names as in the shared calibration
//! README), what memory each needs, and how each is queued and timed with
//! CUDA events on the GPUs' streams. Host-memory copies are `unsafe fn`s of
//! `cuda`; this file is where they are made safe (every batch is waited for
//! before the host memory it touches can go), so that the runner's
//! orchestration needs no unsafe code. Knows nothing of NCCL or of what a
//! measurement is written as.

use icsim_core::units::Bytes;

use crate::GpuError;
use crate::cuda::{Device, Event, Stream};

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

    pub fn gpus_needed(self) -> usize {
        match self {
            CopyPath::P2p0to1 | CopyPath::P2pBidirTotal | CopyPath::Staged0to1 => 2,
            _ => 1,
        }
    }

    pub fn needs_peer_access(self) -> bool {
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
    pub fn granularity(self) -> u64 {
        if self == CopyPath::P2pBidirTotal { 2 } else { 1 }
    }

    /// Whether both GPUs' streams take part (timed around both).
    pub fn uses_two_streams(self) -> bool {
        matches!(self, CopyPath::P2pBidirTotal | CopyPath::Staged0to1)
    }
}

/// The mean time of one copy, and how many were timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mean {
    pub time_us: f64,
    pub repetitions: u32,
}

/// How often each size is copied: untimed warm-up copies first, then as
/// many timed ones as `repetitions` allows for the microseconds one took.
pub struct Repeat<'a> {
    pub warmup: u32,
    pub repetitions: &'a dyn Fn(f64) -> u32,
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
    fn one(device: &Device) -> Result<Lanes, GpuError> {
        Ok(Lanes { primary: device.stream()?, secondary: None })
    }

    fn two(first: &Device, second: &Device) -> Result<Lanes, GpuError> {
        let secondary = SecondLane { stream: second.stream()?, fork: first.event()?, join: second.event()? };
        Ok(Lanes { primary: first.stream()?, secondary: Some(secondary) })
    }

    fn second(&self) -> &SecondLane {
        self.secondary.as_ref().expect("a path of two GPUs has two lanes")
    }

    /// Queues `enqueue` (which may use both streams) between a fork from and
    /// a join back to the primary stream, and waits until all of it is done,
    /// also when `enqueue` fails.
    fn run_timed(&self, enqueue: impl FnOnce() -> Result<(), GpuError>) -> Result<f64, GpuError> {
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
    /// repetitions as `repeat` allows. `enqueue(n)` queues n copies.
    fn measure(&self, repeat: &Repeat<'_>, mut enqueue: impl FnMut(u32) -> Result<(), GpuError>) -> Result<Mean, GpuError> {
        if repeat.warmup > 0 {
            self.run_timed(|| enqueue(repeat.warmup))?;
        }
        let estimate = self.run_timed(|| enqueue(1))?;
        let repetitions = (repeat.repetitions)(estimate);
        let total = self.run_timed(|| enqueue(repetitions))?;
        Ok(Mean { time_us: total / f64::from(repetitions), repetitions })
    }
}

/// Measures `path` at each of `sizes`: says when each size starts, and hands
/// each mean to `measured` as soon as it is known.
#[expect(clippy::too_many_lines, reason = "a table: one arm per copy path, each with its buffers and the copies it queues")]
pub fn measure_path<E: From<GpuError>>(
    devices: &[Device],
    path: CopyPath,
    sizes: &[Bytes],
    repeat: &Repeat<'_>,
    starting: &mut dyn FnMut(Bytes),
    measured: &mut dyn FnMut(Bytes, Mean) -> Result<(), E>,
) -> Result<(), E> {
    let largest = sizes.iter().map(|s| s.0 as usize).max().unwrap_or(0);
    let gpu0 = &devices[0];
    let gpu1 = || devices.get(1).ok_or_else(|| GpuError::Usage(format!("copy {} needs 2 GPUs", path.name())));
    let mut each_size = |enqueue: &mut dyn FnMut(usize, u32) -> Result<(), GpuError>, lanes: &Lanes| -> Result<(), E> {
        for &size in sizes {
            starting(size);
            let mean = lanes.measure(repeat, |n| enqueue(size.0 as usize, n))?;
            measured(size, mean)?;
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
