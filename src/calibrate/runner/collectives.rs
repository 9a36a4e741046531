//! NCCL collectives as a child process measures them under one setting: one
//! thread per GPU (rank), each capturing its calls into a CUDA graph and
//! timing replays with CUDA events, so the time is the GPU's and not the
//! host's launch overhead. Sizes and buffers follow nccl-tests (float32;
//! `bytes` is the all-reduce buffer, the full gathered buffer of all-gather
//! and the full input of reduce-scatter). An LLM's pass of tensor-parallel
//! allreduces (bfloat16, one per block of every layer) is captured whole
//! into one graph and timed the same way.
//!
//! One thread per rank rather than one thread driving all ranks inside
//! ncclGroupStart/End: a CUDA graph is captured from one stream, so each
//! GPU's calls are captured by the thread that owns that GPU's stream.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Barrier, Mutex, PoisonError};

use icsim_gpu::cuda::{self, Device, DeviceBuffer, Driver, Stream};
use icsim_gpu::nccl::{Communicator, DataType, Nccl};
use serde::{Deserialize, Serialize};

use crate::calibrate::schema::{ALLREDUCE_SEQUENCE, Measurement};
use crate::collective::Op;
use crate::stack::Stack;
use crate::units::Bytes;

use super::protocol::{ChildMessage, ChildSpec};
use super::sizes::{plan_sizes, size_list};
use super::{RunnerError, Timing, microseconds};

/// One measured collective call: which, and its size as nccl-tests counts
/// it; or a whole sequence of allreduces of that size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectivePoint {
    pub op: Op,
    pub bytes: Bytes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<Sequence>,
}

/// One pass of an LLM's tensor-parallel allreduces: `calls` allreduces of
/// `tokens` tokens' activations of `dtype`, back to back (the LLM is the
/// child's `llm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequence {
    pub tokens: u64,
    pub calls: u32,
    pub dtype: DataType,
}

impl CollectivePoint {
    pub fn single(op: Op, bytes: Bytes) -> CollectivePoint {
        CollectivePoint { op, bytes, sequence: None }
    }

    fn data_type(&self) -> DataType {
        self.sequence.map_or(DataType::Float32, |s| s.dtype)
    }

    /// Calls in one timed repetition: the whole sequence, or one.
    fn calls_per_repetition(&self) -> u32 {
        self.sequence.map_or(1, |s| s.calls)
    }
}

/// The buffers and element count of one call on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub send_bytes: usize,
    pub recv_bytes: usize,
    /// The count NCCL is given: all elements (all-reduce), those one rank
    /// sends (all-gather) or receives (reduce-scatter).
    pub count: usize,
}

impl Shape {
    pub fn of(point: &CollectivePoint, ranks: usize) -> Shape {
        let bytes = point.bytes.0 as usize;
        let element = point.data_type().bytes();
        match point.op {
            Op::AllReduce | Op::Broadcast => Shape { send_bytes: bytes, recv_bytes: bytes, count: bytes / element },
            Op::AllGather => Shape { send_bytes: bytes / ranks, recv_bytes: bytes, count: bytes / ranks / element },
            Op::ReduceScatter => Shape { send_bytes: bytes, recv_bytes: bytes / ranks, count: bytes / ranks / element },
        }
    }
}

/// Sizes of `op` are multiples of this: whole floats on every rank.
fn granularity(op: Op, ranks: usize) -> u64 {
    let element = DataType::Float32.bytes() as u64;
    match op {
        Op::AllReduce | Op::Broadcast => element,
        Op::AllGather | Op::ReduceScatter => element * ranks as u64,
    }
}

/// The points to measure, each op at each size that fits: a rank's send and
/// receive buffers are each as large as the largest full buffer, so twice
/// that must fit in `device_limit`.
pub fn plan_points(ops: &[Op], sizes: &[Bytes], ranks: usize, device_limit: u64, notices: &mut Vec<String>) -> Vec<CollectivePoint> {
    let mut points = Vec::new();
    for &op in ops {
        let plan = plan_sizes(sizes, granularity(op, ranks), |b| b.0.saturating_mul(2) <= device_limit);
        if !plan.too_large.is_empty() {
            notices.push(format!(
                "{op}: {} left out, more than the free GPU memory ({}) allows",
                size_list(&plan.too_large),
                Bytes(device_limit).human()
            ));
        }
        points.extend(plan.kept.into_iter().map(|bytes| CollectivePoint::single(op, bytes)));
    }
    points
}

/// How one point is replayed, the same on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayPlan {
    pub calls_per_graph: u32,
    pub warmup_replays: u32,
    pub timed_replays: u32,
}

impl ReplayPlan {
    /// For calls that take about `call_us`: up to `graph_calls` per graph
    /// and `iters` timed replays, fewer where they would take longer than
    /// the point's time.
    pub fn new(call_us: f64, timing: &Timing) -> ReplayPlan {
        let fitting_calls = (timing.point_time.as_us() / call_us.max(f64::MIN_POSITIVE)).floor();
        let calls_per_graph = (fitting_calls.min(f64::from(timing.graph_calls)) as u32).max(1);
        ReplayPlan::of_graph(calls_per_graph, call_us, timing)
    }

    /// For `point`: a sequence is one graph of all its calls.
    pub fn for_point(point: &CollectivePoint, call_us: f64, timing: &Timing) -> ReplayPlan {
        match point.sequence {
            Some(sequence) => ReplayPlan::of_graph(sequence.calls, call_us, timing),
            None => ReplayPlan::new(call_us, timing),
        }
    }

    fn of_graph(calls_per_graph: u32, call_us: f64, timing: &Timing) -> ReplayPlan {
        let timed_replays = timing.repetitions(call_us * f64::from(calls_per_graph));
        ReplayPlan { calls_per_graph, warmup_replays: timing.warmup.min(timed_replays), timed_replays }
    }
}

/// "allreduce shm proto=ll, 2 GPUs, 64MiB", "allreduce default, 8 GPUs, 160 x 128MiB".
fn label(spec: &ChildSpec, point: &CollectivePoint) -> String {
    let calls = point.sequence.map_or(String::new(), |s| format!("{} x ", s.calls));
    format!("{} {}, {} GPUs, {calls}{}", point.op, spec.setting.label(), spec.gpus, point.bytes)
}

/// The schema-1 record of one collective measurement; `time_us` is one
/// repetition's (a call, or a whole sequence).
pub fn record(spec: &ChildSpec, point: &CollectivePoint, time_us: f64, plan: &ReplayPlan) -> Measurement {
    let or_auto = |value: Option<String>| Some(value.unwrap_or_else(|| "auto".into()));
    let measured = Measurement {
        schema: 1,
        system: spec.system.clone(),
        op: point.op.to_string(),
        transport: Some(spec.transport.clone()),
        algo: or_auto(spec.setting.algo.map(|a| a.to_string())),
        proto: or_auto(spec.setting.proto.map(|p| p.to_string())),
        ranks: Some(spec.gpus as u32),
        bytes: point.bytes.0,
        dtype: Some(point.data_type().name().into()),
        time_us: microseconds(time_us),
        timing: Some(format!(
            "cuda graph of {} calls, cuda events, mean of {} replays after {} warm-up, slowest of {} ranks",
            plan.calls_per_graph, plan.timed_replays, plan.warmup_replays, spec.gpus
        )),
        source: Some(spec.source.clone()),
        env: Some(spec.setting.env_text()),
        channels: spec.setting.channels,
        stack: Some(Stack::NcclGraph),
        ..Measurement::default()
    };
    match point.sequence {
        None => measured,
        Some(sequence) => Measurement {
            op: ALLREDUCE_SEQUENCE.into(),
            model: spec.llm.clone(),
            tokens: Some(sequence.tokens),
            tp: Some(spec.gpus as u32),
            calls: Some(u64::from(sequence.calls)),
            note: Some(format!("one pass of tensor-parallel allreduces: {} back to back in one graph", sequence.calls)),
            ..measured
        },
    }
}

/// What a rank's thread tells the collecting thread.
enum RankReport {
    Timed { point: usize, rank: usize, time_us: f64, plan: ReplayPlan },
    Failed(RunnerError),
}

/// Keeps the ranks in step: they agree on each point's replay plan and start
/// timing together.
struct Agreement {
    barrier: Barrier,
    values: Mutex<Vec<f64>>,
}

impl Agreement {
    fn new(ranks: usize) -> Agreement {
        Agreement { barrier: Barrier::new(ranks), values: Mutex::new(vec![0.0; ranks]) }
    }

    /// The largest of every rank's `value`; every rank must call this.
    fn largest(&self, rank: usize, value: f64) -> f64 {
        self.values.lock().unwrap_or_else(PoisonError::into_inner)[rank] = value;
        self.barrier.wait();
        let largest = self.values.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().fold(0.0, f64::max);
        // Nobody writes the next point's value before everyone has read.
        self.barrier.wait();
        largest
    }

    fn wait(&self) {
        self.barrier.wait();
    }
}

/// Measures every point of `spec` on its GPUs and reports through `emit`.
pub fn run(spec: &ChildSpec, emit: &(dyn Fn(ChildMessage) + Sync)) -> Result<(), RunnerError> {
    let nccl = Nccl::load(&spec.nccl_library)?;
    let driver = Driver::init()?;
    let visible = driver.device_count()?;
    if visible < spec.gpus {
        return Err(RunnerError::TooFewGpus { requested: spec.gpus, available: visible, visible: cuda::visible_devices() });
    }
    let devices = (0..spec.gpus).map(|ordinal| driver.open(ordinal)).collect::<Result<Vec<_>, _>>()?;
    let ordinals: Vec<i32> = (0..spec.gpus).map(|o| o as i32).collect();
    let communicators = nccl.init_all(&ordinals)?;
    let largest = spec.points.iter().map(|p| p.bytes.0 as usize).max().unwrap_or(0);
    let agreement = Agreement::new(spec.gpus);
    let (reports, received) = mpsc::channel();
    std::thread::scope(|scope| {
        for (device, communicator) in devices.iter().zip(communicators) {
            let reports = reports.clone();
            let agreement = &agreement;
            scope.spawn(move || {
                rank_thread(device, communicator, spec, largest, agreement, &reports);
            });
        }
        drop(reports);
        if let Err(error) = collect(spec, &received, emit) {
            abandon(&error);
        }
    });
    Ok(())
}

/// Ends the process at once with `error`: the other ranks may be waiting on
/// their GPUs for the rank that failed, forever, so they cannot be joined.
fn abandon(error: &RunnerError) -> ! {
    eprintln!("error: {error}");
    std::process::exit(1)
}

/// Turns the ranks' times into measurements, point by point: the slowest
/// rank's time, since the collective is done when the last rank is.
fn collect(spec: &ChildSpec, received: &Receiver<RankReport>, emit: &(dyn Fn(ChildMessage) + Sync)) -> Result<(), RunnerError> {
    let mut times: Vec<Vec<Option<f64>>> = vec![vec![None; spec.gpus]; spec.points.len()];
    let mut plans: Vec<Option<ReplayPlan>> = vec![None; spec.points.len()];
    let mut next = 0;
    if let Some(first) = spec.points.first() {
        emit(ChildMessage::Started { label: label(spec, first) });
    }
    for report in received {
        match report {
            RankReport::Failed(error) => return Err(error),
            RankReport::Timed { point, rank, time_us, plan } => {
                times[point][rank] = Some(time_us);
                plans[point] = Some(plan);
            }
        }
        while let (Some(point), Some(plan)) = (spec.points.get(next), plans.get(next).copied().flatten()) {
            let Some(slowest) = times[next].iter().copied().collect::<Option<Vec<f64>>>().map(|t| t.into_iter().fold(0.0, f64::max)) else {
                break;
            };
            emit(ChildMessage::Measured { measurement: Box::new(record(spec, point, slowest, &plan)) });
            next += 1;
            if let Some(following) = spec.points.get(next) {
                emit(ChildMessage::Started { label: label(spec, following) });
            }
        }
    }
    if next < spec.points.len() {
        return Err(RunnerError::Child(format!("a rank stopped after {next} of {} points without saying why", spec.points.len())));
    }
    Ok(())
}

/// One rank's thread: every point in order, in step with the other ranks,
/// then the communicator is freed. A failure is reported first and nothing
/// is freed after it: freeing waits for this GPU, which may wait for a peer
/// forever; the collector ends the process instead (see `abandon`).
fn rank_thread(
    device: &Device,
    communicator: Communicator<'_>,
    spec: &ChildSpec,
    largest: usize,
    agreement: &Agreement,
    reports: &Sender<RankReport>,
) {
    let fail = |error: RunnerError| {
        // The collector may already be gone; then so is the process.
        let _ = reports.send(RankReport::Failed(error));
    };
    let buffers =
        match device.stream().and_then(|stream| Ok(RankBuffers { send: device.alloc(largest)?, recv: device.alloc(largest)?, stream })) {
            Ok(buffers) => buffers,
            Err(error) => {
                fail(error.into());
                std::mem::forget(communicator);
                return;
            }
        };
    if let Err(error) = measure_points(&communicator, &buffers, spec, agreement, reports) {
        fail(error);
        std::mem::forget((buffers, communicator));
        return;
    }
    drop(buffers);
    if let Err(error) = communicator.destroy() {
        fail(error.into());
    }
}

/// A rank's stream and its send and receive buffers, as large as the
/// largest point needs.
struct RankBuffers {
    stream: Stream,
    send: DeviceBuffer,
    recv: DeviceBuffer,
}

fn measure_points(
    communicator: &Communicator<'_>,
    buffers: &RankBuffers,
    spec: &ChildSpec,
    agreement: &Agreement,
    reports: &Sender<RankReport>,
) -> Result<(), RunnerError> {
    let (rank, stream) = (communicator.rank(), &buffers.stream);
    for (index, point) in spec.points.iter().enumerate() {
        let shape = Shape::of(point, spec.gpus);
        let call = || enqueue(communicator, point, &shape, buffers, spec.gpus);
        // NCCL connects ranks on first use, which must not happen inside a
        // capture; this call also warms up.
        call()?;
        let estimate = stream.time(call)?;
        let plan = ReplayPlan::for_point(point, agreement.largest(rank, estimate), &spec.timing);
        let graph = stream.capture(|| (0..plan.calls_per_graph).try_for_each(|_| call()))?;
        graph.upload()?;
        for _ in 0..plan.warmup_replays {
            graph.launch()?;
        }
        stream.synchronize()?;
        agreement.wait();
        let total = stream.time(|| (0..plan.timed_replays).try_for_each(|_| graph.launch()))?;
        let time_us = total * f64::from(point.calls_per_repetition()) / f64::from(plan.timed_replays * plan.calls_per_graph);
        reports
            .send(RankReport::Timed { point: index, rank, time_us, plan })
            .map_err(|_| RunnerError::Child("the collecting thread stopped".into()))?;
    }
    Ok(())
}

fn enqueue(
    communicator: &Communicator<'_>,
    point: &CollectivePoint,
    shape: &Shape,
    buffers: &RankBuffers,
    ranks: usize,
) -> Result<(), RunnerError> {
    let (send, recv, stream) = (buffers.send.range(0, shape.send_bytes), buffers.recv.range(0, shape.recv_bytes), &buffers.stream);
    match point.op {
        Op::AllReduce => communicator.all_reduce(send, recv, shape.count, point.data_type(), stream)?,
        Op::AllGather => communicator.all_gather(send, recv, shape.count, ranks, stream)?,
        Op::ReduceScatter => communicator.reduce_scatter(send, recv, shape.count, ranks, stream)?,
        Op::Broadcast => return Err(RunnerError::Usage("broadcast is not measured by the runner".into())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::runner::protocol::ChildMessage;
    use crate::calibrate::runner::settings::{NcclSetting, TransportSetting};
    use crate::collective::Protocol;

    fn timing() -> Timing {
        Timing { iters: 20, warmup: 3, graph_calls: 20, point_time: "200ms".parse().unwrap() }
    }

    #[test]
    fn shapes_count_bytes_as_nccl_tests_does() {
        let single = |op| CollectivePoint::single(op, Bytes(64));
        assert_eq!(Shape::of(&single(Op::AllReduce), 2), Shape { send_bytes: 64, recv_bytes: 64, count: 16 });
        assert_eq!(Shape::of(&single(Op::AllGather), 2), Shape { send_bytes: 32, recv_bytes: 64, count: 8 });
        assert_eq!(Shape::of(&single(Op::ReduceScatter), 4), Shape { send_bytes: 64, recv_bytes: 16, count: 4 });
        // An LLM's allreduces are of bfloat16 values.
        let sequence =
            CollectivePoint { sequence: Some(Sequence { tokens: 1, calls: 160, dtype: DataType::Bfloat16 }), ..single(Op::AllReduce) };
        assert_eq!(Shape::of(&sequence, 2), Shape { send_bytes: 64, recv_bytes: 64, count: 32 });
    }

    #[test]
    fn points_hold_whole_floats_per_rank_and_fit_in_memory() {
        let mut notices = Vec::new();
        let sizes = [Bytes(8), Bytes(12), Bytes::gib(1), Bytes::gib(4)];
        let points = plan_points(&[Op::AllReduce, Op::AllGather], &sizes, 4, 3 << 30, &mut notices);
        let of = |op| points.iter().filter(|p| p.op == op).map(|p| p.bytes).collect::<Vec<_>>();
        assert_eq!(of(Op::AllReduce), vec![Bytes(8), Bytes(12), Bytes::gib(1)]);
        // 16 bytes is the least that gives each of 4 ranks a float: 8 and 12 round to 0.
        assert_eq!(of(Op::AllGather), vec![Bytes::gib(1)]);
        assert_eq!(notices.len(), 2);
        assert!(notices[0].starts_with("allreduce: 4GiB left out"), "{notices:?}");
    }

    fn spec(points: Vec<CollectivePoint>) -> ChildSpec {
        ChildSpec {
            setting: NcclSetting { transport: TransportSetting::Default, proto: None, algo: None, channels: None },
            transport: "nvswitch".into(),
            nccl_library: "libnccl.so.2".into(),
            gpus: 2,
            points,
            timing: timing(),
            system: "box".into(),
            source: "test".into(),
            llm: None,
        }
    }

    #[test]
    fn ranks_agree_on_the_largest_estimate_every_time() {
        let agreement = Agreement::new(3);
        let agreed: Vec<Vec<f64>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..3)
                .map(|rank| {
                    let agreement = &agreement;
                    scope.spawn(move || (0..50).map(|point| agreement.largest(rank, (rank * 100 + point) as f64)).collect::<Vec<f64>>())
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let expected: Vec<f64> = (0..50).map(|point| (200 + point) as f64).collect();
        assert!(agreed.iter().all(|a| *a == expected), "{agreed:?}");
    }

    #[test]
    fn points_are_written_in_order_at_the_slowest_ranks_time() {
        let points = vec![CollectivePoint::single(Op::AllReduce, Bytes(8)), CollectivePoint::single(Op::AllReduce, Bytes(16))];
        let spec = spec(points);
        let plan = ReplayPlan::new(10.0, &timing());
        let (send, received) = mpsc::channel();
        // Rank 1 runs ahead; the second point is not written before the first.
        for (point, rank, time_us) in [(0, 1, 12.0), (1, 1, 20.0), (1, 0, 21.0), (0, 0, 11.0)] {
            send.send(RankReport::Timed { point, rank, time_us, plan }).unwrap();
        }
        drop(send);
        let emitted = Mutex::new(Vec::new());
        collect(&spec, &received, &|message| emitted.lock().unwrap().push(message)).unwrap();
        let measured: Vec<(u64, f64)> = emitted
            .into_inner()
            .unwrap()
            .into_iter()
            .filter_map(|m| match m {
                ChildMessage::Measured { measurement } => Some((measurement.bytes, measurement.time_us)),
                _ => None,
            })
            .collect();
        assert_eq!(measured, vec![(8, 12.0), (16, 21.0)]);

        // A rank that stops early is an error, not a silent gap.
        let (send, received) = mpsc::channel();
        send.send(RankReport::Timed { point: 0, rank: 0, time_us: 1.0, plan }).unwrap();
        drop(send);
        let error = collect(&spec, &received, &|_| {}).unwrap_err().to_string();
        assert!(error.contains("after 0 of 2 points"), "{error}");
    }

    #[test]
    fn replay_plans_shrink_for_slow_calls() {
        assert_eq!(ReplayPlan::new(10.0, &timing()), ReplayPlan { calls_per_graph: 20, warmup_replays: 3, timed_replays: 20 });
        // 2 ms calls: 20 per graph take 40 ms, so 5 replays fill 200 ms.
        assert_eq!(ReplayPlan::new(2_000.0, &timing()), ReplayPlan { calls_per_graph: 20, warmup_replays: 3, timed_replays: 5 });
        assert_eq!(ReplayPlan::new(300_000.0, &timing()), ReplayPlan { calls_per_graph: 1, warmup_replays: 1, timed_replays: 1 });
        // A sequence is one graph of all its calls however long: 160 x 0.5 ms is 80 ms, so two replays fill 200 ms.
        let sequence = CollectivePoint {
            op: Op::AllReduce,
            bytes: Bytes::mib(128),
            sequence: Some(Sequence { tokens: 8192, calls: 160, dtype: DataType::Bfloat16 }),
        };
        assert_eq!(
            ReplayPlan::for_point(&sequence, 500.0, &timing()),
            ReplayPlan { calls_per_graph: 160, warmup_replays: 2, timed_replays: 2 }
        );
    }

    #[test]
    fn collective_records_carry_the_schema_fields() {
        let spec = ChildSpec {
            setting: NcclSetting { transport: TransportSetting::Shm, proto: Some(Protocol::Ll), algo: None, channels: None },
            transport: "shm".into(),
            source: "NCCL 2.28.9 via icsim".into(),
            llm: Some("llama-3.1-70b".into()),
            ..spec(vec![])
        };
        let point = CollectivePoint::single(Op::AllGather, Bytes::mib(1));
        let plan = ReplayPlan::new(10.0, &timing());
        let m = record(&spec, &point, 12.345_67, &plan);
        assert_eq!((m.schema, m.system.as_str(), m.op.as_str(), m.bytes), (1, "box", "allgather", 1 << 20));
        assert_eq!((m.transport.as_deref(), m.algo.as_deref(), m.proto.as_deref()), (Some("shm"), Some("auto"), Some("ll")));
        assert_eq!((m.ranks, m.dtype.as_deref(), m.time_us), (Some(2), Some("float32"), 12.346));
        assert_eq!(m.env.as_deref(), Some("NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_PROTO=LL"));
        assert_eq!(m.series(), "allgather shm proto=ll ranks=2");
        assert!(m.is_collective());
        assert!(m.timing.as_deref().is_some_and(|t| t.starts_with("cuda graph of 20 calls, cuda events")));
        // What the runner writes, the calibration reader reads back.
        let back =
            crate::calibrate::schema::parse(std::path::Path::new("m.jsonl"), &crate::calibrate::schema::to_jsonl(std::slice::from_ref(&m)))
                .unwrap();
        assert_eq!(back, vec![m]);

        // A sequence's record says what the predictor needs to replay it.
        let decode = CollectivePoint {
            op: Op::AllReduce,
            bytes: Bytes::kib(16),
            sequence: Some(Sequence { tokens: 1, calls: 160, dtype: DataType::Bfloat16 }),
        };
        let m = record(&spec, &decode, 1_600.0, &ReplayPlan::for_point(&decode, 10.0, &timing()));
        assert_eq!(
            (m.op.as_str(), m.model.as_deref(), m.tokens, m.tp, m.calls),
            ("allreduce_sequence", Some("llama-3.1-70b"), Some(1), Some(2), Some(160))
        );
        assert_eq!(
            (m.dtype.as_deref(), m.time_us, m.series().as_str()),
            (Some("bfloat16"), 1_600.0, "allreduce_sequence shm proto=ll ranks=2 tokens=1")
        );
    }
}
