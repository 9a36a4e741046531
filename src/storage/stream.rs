//! One GPU's storage I/O as tasks of a task graph: the bytes cut into I/Os
//! (cuFile's size on the direct path, a bounce buffer's through host
//! memory), a few in flight at once, each paying its CPU time and the
//! drive's latency, and each spread over the RAID-0 members its stripe
//! units fall on. Adds tasks to any graph, so storage shares the links with
//! whatever else the graph holds.

use crate::config::hardware::HardwareModel;
use crate::engine::{TaskGraph, TaskId};
use crate::network::Path;
use crate::topology::{NodeId, Topology};
use crate::units::{Bandwidth, Bytes, Time};

use super::StorageError;
use super::path::{Direction, Route, StoragePath, route};

/// Where a stream's bytes live besides the GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A RAID-0 of these drives (one drive: no striping), in member order.
    Drives(Vec<NodeId>),
    /// Whole files on these drives in turn, no striping: each I/O on one
    /// drive, the next I/O on the next.
    Files(Vec<NodeId>),
    /// Pinned host memory on the GPU's socket (a plain copy, no drive).
    HostMemory,
}

/// One GPU's I/O.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub gpu: NodeId,
    pub target: Target,
    pub bytes: Bytes,
    pub direction: Direction,
    pub path: StoragePath,
    /// The stripe unit the stream starts on, so that streams of several
    /// GPUs start on different members.
    pub first_unit: u64,
}

/// What a stream added to a graph, and what it will cost.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamTasks {
    /// Finishes when every byte has arrived.
    pub end: TaskId,
    pub ios: u64,
    /// CPU time of all its I/Os.
    pub cpu: Time,
    /// Bytes that cross host memory (each staged byte twice: in and out).
    pub host_memory: Bytes,
    /// Some drive's bytes fell back from `gds` to `bounce`.
    pub fell_back: bool,
}

/// Each drive's route to the GPU, or none for host memory.
fn routes(topo: &Topology, stream: &Stream) -> Result<Vec<(Route, bool)>, StorageError> {
    match &stream.target {
        Target::Drives(drives) | Target::Files(drives) => {
            drives.iter().map(|&d| route(topo, d, stream.gpu, stream.path, stream.direction)).collect()
        }
        Target::HostMemory => Ok(Vec::new()),
    }
}

/// Bytes of an I/O over `[start, start + size)` of the stream that fall on
/// each of `members` RAID-0 members, in stripe units of `unit`.
fn stripe(start: u64, size: u64, unit: u64, members: usize) -> Vec<u64> {
    let mut share = vec![0u64; members];
    let mut at = start;
    while at < start + size {
        let end = ((at / unit) + 1) * unit;
        let piece = end.min(start + size) - at;
        share[((at / unit) % members as u64) as usize] += piece;
        at += piece;
    }
    share
}

/// Adds `stream` to `graph`, starting once `after` has finished.
pub fn add_stream(
    graph: &mut TaskGraph<Path>,
    topo: &Topology,
    model: &HardwareModel,
    stream: &Stream,
    after: &[TaskId],
) -> Result<StreamTasks, StorageError> {
    let costs = &model.storage;
    let routes = routes(topo, stream)?;
    let staged = matches!(stream.target, Target::HostMemory) || routes.iter().any(|(r, _)| matches!(r, Route::Bounce { .. }));
    let (io_size, cpu_per_io, cpu_per_mib) = match (stream.path, staged) {
        (StoragePath::Gds, false) => (costs.gds_io, costs.gds_cpu_per_io, costs.gds_cpu_per_mib),
        _ => (costs.bounce_io, costs.bounce_cpu_per_io, costs.bounce_cpu_per_mib),
    };
    let latency = drive_latency(topo, model, stream)?;
    let host_side = match stream.target {
        Target::HostMemory => {
            let memory = topo.host_memory(topo.node(stream.gpu).socket).map_err(|e| StorageError::NoPath(e.to_string()))?;
            let reading = stream.direction == Direction::Read;
            Some(topo.memory_path(stream.gpu, memory, reading).ok_or_else(|| {
                StorageError::NoPath(format!("{} cannot reach its host memory on {}", topo.node(stream.gpu).name, topo.name))
            })?)
        }
        Target::Drives(_) | Target::Files(_) => None,
    };
    let unit = if matches!(stream.target, Target::Files(_)) { io_size.0 } else { costs.raid_chunk.0 };
    let in_flight = costs.in_flight as usize;
    let mut ends: Vec<TaskId> = Vec::new();
    let mut tasks = StreamTasks { end: TaskId(0), ios: 0, cpu: Time::ZERO, host_memory: Bytes(0), fell_back: routes.iter().any(|r| r.1) };
    let ios = stream.bytes.0.div_ceil(io_size.0).max(1);
    let mut queues = Queues { members: vec![None; routes.len()], copy: None };
    for io in 0..ios {
        let start = io * io_size.0;
        let size = io_size.0.min(stream.bytes.0 - start.min(stream.bytes.0));
        // A worker takes the next I/O once its previous one has finished.
        let ready: Vec<TaskId> = if (io as usize) < in_flight { after.to_vec() } else { vec![ends[io as usize - in_flight]] };
        let cpu = cpu_per_io + Time(cpu_per_mib.0 * size / Bytes::mib(1).0);
        tasks.cpu += cpu;
        let issued = graph.delay(cpu, &ready);
        let end = match &host_side {
            Some(path) => {
                tasks.host_memory += Bytes(size);
                queues.copy(graph, model, path, Bytes(size), &[issued])
            }
            None => {
                let shares = stripe(stream.first_unit * unit + start, size, unit, routes.len());
                let io = Io { model, direction: stream.direction, routes: &routes, latency };
                io.add(graph, &shares, issued, &mut queues, &mut tasks.host_memory)
            }
        };
        ends.push(end);
        tasks.ios += 1;
    }
    tasks.end = graph.join(&ends);
    Ok(tasks)
}

/// What serves a stream's pieces in order: each drive (a command queue:
/// the next I/O's latency hides behind the transfer before it), and the
/// GPU's copy engine (copies between host memory and the GPU run one after
/// another).
struct Queues {
    /// Each member's last transfer for this stream.
    members: Vec<Option<TaskId>>,
    copy: Option<TaskId>,
}

impl Queues {
    /// A transfer on member `m` after `after` and its previous one.
    fn on_drive(
        &mut self,
        graph: &mut TaskGraph<Path>,
        m: usize,
        path: &Path,
        (bytes, cap): (Bytes, Option<Bandwidth>),
        after: &[TaskId],
    ) -> TaskId {
        let mut after = after.to_vec();
        after.extend(self.members[m]);
        let flow = graph.transfer(path.clone(), bytes, cap, &after);
        self.members[m] = Some(flow);
        flow
    }

    /// A copy-engine copy after `after` and the previous copy: its set-up,
    /// then its bytes.
    fn copy(&mut self, graph: &mut TaskGraph<Path>, model: &HardwareModel, path: &Path, bytes: Bytes, after: &[TaskId]) -> TaskId {
        let mut after = after.to_vec();
        after.extend(self.copy);
        let set_up = graph.delay(model.copy_setup, &after);
        let copied = graph.transfer(path.clone(), bytes, None, &[set_up]);
        self.copy = Some(copied);
        copied
    }
}

/// What every I/O of a stream to drives shares.
struct Io<'a> {
    model: &'a HardwareModel,
    direction: Direction,
    /// Each member's route.
    routes: &'a [(Route, bool)],
    latency: Time,
}

impl Io<'_> {
    /// One I/O of `shares[m]` bytes on each member `m` over its route, after
    /// `issued`; returns its last task. Staged bytes go through host memory
    /// together: one copy between host memory and the GPU per I/O.
    fn add(&self, graph: &mut TaskGraph<Path>, shares: &[u64], issued: TaskId, queues: &mut Queues, host_memory: &mut Bytes) -> TaskId {
        let members: Vec<(usize, &Route, Bytes)> =
            self.routes.iter().zip(shares).enumerate().filter(|(_, (_, b))| **b > 0).map(|(m, ((r, _), &b))| (m, r, Bytes(b))).collect();
        let staged: u64 = members.iter().filter(|(_, r, _)| matches!(r, Route::Bounce { .. })).map(|(_, _, b)| b.0).sum();
        *host_memory += Bytes(2 * staged);
        let gpu_side = members.iter().find_map(|(_, r, _)| match r {
            Route::Bounce { gpu_side, .. } => Some(gpu_side.clone()),
            Route::Direct { .. } => None,
        });
        let mut ends = Vec::new();
        match self.direction {
            Direction::Read => {
                let accessed = graph.delay(self.latency, &[issued]);
                let mut in_memory = Vec::new();
                for &(m, route, bytes) in &members {
                    match route {
                        Route::Direct { path, rate_cap } => ends.push(queues.on_drive(graph, m, path, (bytes, *rate_cap), &[accessed])),
                        Route::Bounce { drive_side, .. } => {
                            in_memory.push(queues.on_drive(graph, m, drive_side, (bytes, None), &[accessed]))
                        }
                    }
                }
                if let Some(gpu_side) = gpu_side {
                    ends.push(queues.copy(graph, self.model, &gpu_side, Bytes(staged), &in_memory));
                }
            }
            Direction::Write => {
                let mut from = vec![issued];
                if let Some(gpu_side) = gpu_side {
                    from.push(queues.copy(graph, self.model, &gpu_side, Bytes(staged), &[issued]));
                }
                for &(m, route, bytes) in &members {
                    ends.push(match route {
                        Route::Direct { path, rate_cap } => queues.on_drive(graph, m, path, (bytes, *rate_cap), &[issued]),
                        Route::Bounce { drive_side, .. } => queues.on_drive(graph, m, drive_side, (bytes, None), &from),
                    });
                }
                let written = graph.join(&ends);
                ends = vec![graph.delay(self.latency, &[written])];
            }
        }
        graph.join(&ends)
    }
}

/// The slowest member's latency for the stream's direction (none for host
/// memory).
fn drive_latency(topo: &Topology, model: &HardwareModel, stream: &Stream) -> Result<Time, StorageError> {
    let (Target::Drives(drives) | Target::Files(drives)) = &stream.target else { return Ok(Time::ZERO) };
    if drives.is_empty() {
        return Err(StorageError::Invalid(format!("{} has no drive to read or write", topo.node(stream.gpu).name)));
    }
    let mut latency = Time::ZERO;
    for &drive in drives {
        let class = topo
            .drive_model(drive)
            .ok_or_else(|| StorageError::Invalid(format!("{} is not an NVMe drive of {}", topo.node(drive).name, topo.name)))?;
        let spec = model.drive(class).map_err(StorageError::Model)?;
        latency = latency.max(match stream.direction {
            Direction::Read => spec.read_latency,
            Direction::Write => spec.write_latency,
        });
    }
    Ok(latency)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine;
    use crate::topology::{DriveLayout, Placement, PresetOptions, preset};

    /// One GPU on an HGX H200 switch with `drives` Gen4 drives beside it.
    fn board(drives: u32) -> (Topology, HardwareModel) {
        let model = HardwareModel::base();
        let topo = preset("hgx-h200", &PresetOptions { gpus: Some(1), gpu: None, host: None }, &model).unwrap();
        let layout = DriveLayout { count: drives, drive: "gen4".into(), placement: Placement::Switch };
        (topo.with_drives(&layout, &model).unwrap(), model)
    }

    fn stream(topo: &Topology, bytes: Bytes, path: StoragePath) -> Stream {
        let target = Target::Drives(topo.drives());
        Stream { gpu: topo.gpus()[0], target, bytes, direction: Direction::Read, path, first_unit: 0 }
    }

    #[test]
    fn one_direct_io_costs_its_cpu_time_the_drives_latency_and_its_bytes_at_the_drives_rate() {
        let (topo, model) = board(1);
        let mut graph = TaskGraph::new();
        let added = add_stream(&mut graph, &topo, &model, &stream(&topo, Bytes::mib(1), StoragePath::Gds), &[]).unwrap();
        let schedule = engine::run(&graph, &mut topo.network());
        // 1.31 us + 0.74 us a MiB of CPU, 80 us to the first byte, 1 MiB at
        // 7.4 GB/s, two PCIe hops of 0.15 us.
        let transfer = Bytes::mib(1) / crate::units::Bandwidth::from_gbps_f64(7.4);
        let expected = Time::from_us_f64(1.31 + 0.74) + Time::from_us(80) + transfer + Time::from_us_f64(0.3);
        let time = schedule.end[added.end.index()];
        assert!(time.0.abs_diff(expected.0) <= 2, "{time} against {expected} by hand");
        assert_eq!((added.ios, added.cpu, added.host_memory), (1, Time::from_us_f64(2.05), Bytes(0)));
    }

    #[test]
    fn a_bounced_stream_crosses_host_memory_twice_and_every_drive_carries_its_stripes() {
        let (topo, model) = board(3);
        let bytes = Bytes::mib(10);
        let mut graph = TaskGraph::new();
        let added = add_stream(&mut graph, &topo, &model, &stream(&topo, bytes, StoragePath::Bounce), &[]).unwrap();
        let mut network = topo.network();
        engine::run(&graph, &mut network);
        let usage = network.usage();
        let on =
            |from: NodeId| -> Bytes { topo.links().iter().enumerate().filter(|(_, l)| l.from == from).map(|(i, _)| usage[i].bytes).sum() };
        let per_drive: Vec<Bytes> = topo.drives().into_iter().map(on).collect();
        // Twenty 512 KiB stripes over three drives: 7, 7 and 6.
        assert_eq!(per_drive, [Bytes::kib(512) * 7, Bytes::kib(512) * 7, Bytes::kib(512) * 6]);
        let memory = topo.host_memory(0).unwrap();
        let bus = topo.memory_path(topo.gpus()[0], memory, false).unwrap().links.last().copied().unwrap();
        assert_eq!(usage[bus.index()].bytes, bytes * 2, "written once, read once");
        assert_eq!((added.host_memory, added.ios), (bytes * 2, 10));
    }

    #[test]
    fn a_stream_without_drives_or_with_a_foreign_node_is_refused() {
        let (topo, model) = board(1);
        let mut bad = stream(&topo, Bytes::mib(1), StoragePath::Gds);
        bad.target = Target::Drives(Vec::new());
        assert!(add_stream(&mut TaskGraph::new(), &topo, &model, &bad, &[]).is_err());
        bad.target = Target::Drives(vec![topo.gpus()[0]]);
        let error = add_stream(&mut TaskGraph::new(), &topo, &model, &bad, &[]).unwrap_err().to_string();
        assert!(error.contains("GPU0"), "{error}");
    }

    #[test]
    fn stripes_fall_on_members_in_turn() {
        let kib = |k: u64| k * 1024;
        assert_eq!(stripe(0, kib(2048), kib(512), 4), vec![kib(512); 4]);
        assert_eq!(stripe(0, kib(2048), kib(512), 3), vec![kib(1024), kib(512), kib(512)]);
        assert_eq!(stripe(kib(256), kib(1024), kib(512), 2), vec![kib(512), kib(512)], "a part of a unit at each end");
        assert_eq!(stripe(kib(512), kib(512), kib(512), 1), vec![kib(512)]);
    }
}
