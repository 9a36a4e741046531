//! Storage workloads on small cases computed by hand, one per regime: a
//! drive-bound single drive, a GPU link saturated by GDS while the bounce
//! path hits host memory or the socket link, drives across sockets limited
//! to their share of the socket link; and the sizes of what is moved.

use super::*;
use crate::config::topology::TopologyFile;
use crate::topology::{DriveLayout, Placement, PresetOptions, build_from_file, preset};

fn llama_70b() -> LlmModel {
    LlmModel::load("llama-3.1-70b").unwrap()
}

#[test]
fn llama_70b_weighs_141_gb_and_a_tp8_shard_an_eighth_of_it() {
    let llm = llama_70b();
    // Per layer 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 parameters,
    // 80 layers, embedding and head 2 x 128256 x 8192, 161 norms of 8192.
    assert_eq!(weight_bytes(&llm), Bytes(2 * (80 * 855_638_016 + 2_101_346_304 + 161 * 8192)));
    assert_eq!(weight_bytes(&llm).0, 141_107_412_992);
    assert_eq!(shard_bytes(&llm, 8), Bytes(2 * ((80 * 855_638_016 + 2_101_346_304) / 8 + 161 * 8192)));
    assert_eq!(shard_bytes(&llm, 1), weight_bytes(&llm));
    // One KV head a GPU at TP=8: 2 x 80 layers x 128 x 2 bytes a token.
    assert_eq!(kv_bytes_per_gpu(&llm, 8, 8192, 1), Bytes(2 * 80 * 128 * 2 * 8192));
    assert_eq!(kv_bytes_per_gpu(&llm, 16, 1, 1), kv_bytes_per_gpu(&llm, 8, 1, 1), "replicated beyond the KV heads");
}

/// Rate of `job` alone, GB/s, and what bound it.
fn rate(topo: &Topology, model: &HardwareModel, job: &Job) -> (f64, String) {
    let run = simulate(topo, model, job).unwrap_or_else(|e| panic!("{e}"));
    (run.gbps(), run.bound_by())
}

/// An 8 GiB read by the first `gpus` GPUs from their local drives.
fn read(topo: &Topology, gpus: usize, path: StoragePath) -> Job {
    Job {
        gpus: topo.gpus()[..gpus].to_vec(),
        bytes: Bytes::gib(8),
        direction: Direction::Read,
        path,
        target: JobTarget::Drives(ArrayKind::Local),
    }
}

fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual / expected - 1.0).abs() <= tolerance
}

#[test]
fn one_gen4_drive_bounds_both_paths_within_a_few_percent() {
    let model = HardwareModel::base();
    let board = preset("hgx-h200", &PresetOptions { gpus: Some(1), gpu: None, host: None }, &model).unwrap();
    let topo = board.with_drives(&DriveLayout { count: 1, drive: "gen4".into(), placement: Placement::Switch }, &model).unwrap();
    let (gds, gds_bound) = rate(&topo, &model, &read(&topo, 1, StoragePath::Gds));
    let (bounce, bounce_bound) = rate(&topo, &model, &read(&topo, 1, StoragePath::Bounce));
    println!("one Gen4 drive: gds {gds:.2} GB/s ({gds_bound}), bounce {bounce:.2} GB/s ({bounce_bound}); the drive reads 7.4 GB/s");
    assert!(close(gds, 7.4, 0.02) && close(bounce, 7.4, 0.03), "{gds} {bounce}");
    assert!(close(gds, bounce, 0.03) && gds_bound == "drives" && bounce_bound == "drives");
    // The gain of GDS with one drive is CPU time, not bandwidth.
    let cpu = |path| simulate(&topo, &model, &read(&topo, 1, path)).unwrap().cpu_cores;
    let (gds_cpu, bounce_cpu) = (cpu(StoragePath::Gds), cpu(StoragePath::Bounce));
    println!("CPU cores busy: gds {gds_cpu:.3}, bounce {bounce_cpu:.3}");
    assert!(bounce_cpu > 4.0 * gds_cpu, "{bounce_cpu} {gds_cpu}");
}

/// One Gen5 GPU on a switch with four Gen5 drives beside it, four more on a
/// switch of the other socket; socket 0's memory bus at `memory`, the
/// socket link at `socket` (both the host's where empty).
fn one_gpu_board(host: &str, memory: &str, socket: &str) -> (Topology, HardwareModel) {
    let text = format!(
        r#"
name = "one-gpu"
gpu = "h100"
host = "{host}"
node = [
  {{ name = "cpu0", kind = "cpu", socket = 0 }}, {{ name = "mem0", kind = "memory", socket = 0 }},
  {{ name = "cpu1", kind = "cpu", socket = 1 }}, {{ name = "mem1", kind = "memory", socket = 1 }},
  {{ name = "sw0", kind = "pcie-switch", socket = 0 }}, {{ name = "sw1", kind = "pcie-switch", socket = 1 }},
  {{ name = "GPU0", kind = "gpu", socket = 0 }},
  {{ name = "near0", kind = "nvme", socket = 0, drive = "gen5" }}, {{ name = "near1", kind = "nvme", socket = 0, drive = "gen5" }},
  {{ name = "near2", kind = "nvme", socket = 0, drive = "gen5" }}, {{ name = "near3", kind = "nvme", socket = 0, drive = "gen5" }},
  {{ name = "far0", kind = "nvme", socket = 1, drive = "gen5" }}, {{ name = "far1", kind = "nvme", socket = 1, drive = "gen5" }},
  {{ name = "far2", kind = "nvme", socket = 1, drive = "gen5" }}, {{ name = "far3", kind = "nvme", socket = 1, drive = "gen5" }},
]
link = [
  {{ from = "cpu0", to = "mem0", kind = "memory"{memory} }}, {{ from = "cpu1", to = "mem1", kind = "memory" }},
  {{ from = "cpu0", to = "cpu1", kind = "socket"{socket} }},
  {{ from = "sw0", to = "cpu0", kind = "pcie", generation = "gen5" }}, {{ from = "sw1", to = "cpu1", kind = "pcie", generation = "gen5" }},
  {{ from = "GPU0", to = "sw0", kind = "pcie", generation = "gen5" }},
  {{ from = "near0", to = "sw0", kind = "pcie", generation = "gen5", lanes = 4 }}, {{ from = "near1", to = "sw0", kind = "pcie", generation = "gen5", lanes = 4 }},
  {{ from = "near2", to = "sw0", kind = "pcie", generation = "gen5", lanes = 4 }}, {{ from = "near3", to = "sw0", kind = "pcie", generation = "gen5", lanes = 4 }},
  {{ from = "far0", to = "sw1", kind = "pcie", generation = "gen5", lanes = 4 }}, {{ from = "far1", to = "sw1", kind = "pcie", generation = "gen5", lanes = 4 }},
  {{ from = "far2", to = "sw1", kind = "pcie", generation = "gen5", lanes = 4 }}, {{ from = "far3", to = "sw1", kind = "pcie", generation = "gen5", lanes = 4 }},
]
"#
    );
    let model = HardwareModel::base();
    let raw: TopologyFile = crate::config::parse_toml(std::path::Path::new("one-gpu.toml"), &text).unwrap();
    (build_from_file(std::path::Path::new("one-gpu.toml"), &raw, &model).unwrap(), model)
}

/// A read of 8 GiB by GPU0 from the drives whose names start with `prefix`.
fn read_from(topo: &Topology, prefix: &str, path: StoragePath) -> Stream {
    let drives = topo.drives().into_iter().filter(|&d| topo.node(d).name.starts_with(prefix)).collect();
    Stream { gpu: topo.gpus()[0], target: Target::Drives(drives), bytes: Bytes::gib(8), direction: Direction::Read, path, first_unit: 0 }
}

/// GB/s of one stream alone, and the kind of its busiest link.
fn stream_rate(topo: &Topology, model: &HardwareModel, stream: &Stream) -> (f64, Limit) {
    let mut graph = TaskGraph::new();
    let end = storage::add_stream(&mut graph, topo, model, stream, &[]).unwrap().end;
    let mut network = topo.network();
    let time = engine::run(&graph, &mut network).end[end.index()];
    let (link, _) = collective::busiest_link(topo, &network.usage(), time).unwrap();
    (stream.bytes.as_f64() / time.as_secs() / 1e9, storage::limit_of(topo, link))
}

#[test]
fn enough_drives_let_gds_fill_the_gpu_link_while_bounce_is_capped_by_host_memory_and_the_socket_link() {
    // Four Gen5 drives read 58 GB/s; the GPU's Gen5 x16 link carries
    // 16 x 3.938 x 0.878 = 55.32 GB/s: GDS fills it.
    let (topo, model) = one_gpu_board("spr-2s", r#", bandwidth = "24GB/s""#, "");
    let gpu_link = 16.0 * 3.938 * 0.878;
    let (gds, limit) = stream_rate(&topo, &model, &read_from(&topo, "near", StoragePath::Gds));
    assert!(close(gds, gpu_link, 0.01) && limit == Limit::GpuLink, "gds {gds} {limit}");
    // Through host memory every byte is written and read: a 24 GB/s bus
    // passes 12 GB/s.
    let (bounce, limit) = stream_rate(&topo, &model, &read_from(&topo, "near", StoragePath::Bounce));
    assert!(close(bounce, 12.0, 0.02) && limit == Limit::HostMemory, "bounce {bounce} {limit}");
    // With the bounce buffer on the GPU's socket, drives on the other
    // socket send every byte over the socket link, held here at 22 GB/s
    // (GDS is refused across sockets on Intel and bounces too).
    let (topo, model) = one_gpu_board("spr-2s", "", r#", bandwidth = "22GB/s""#);
    for path in [StoragePath::Bounce, StoragePath::Gds] {
        let (far, limit) = stream_rate(&topo, &model, &read_from(&topo, "far", path));
        println!("{path} from the other socket: {far:.2} GB/s ({limit})");
        assert!(close(far, 22.0, 0.02) && limit == Limit::SocketLink, "{path}: {far} {limit}");
    }
    println!("GPU link {gpu_link:.2} GB/s: gds {gds:.2}; bounce {bounce:.2} (memory bus 24 GB/s); from the other socket 22 GB/s");
}

#[test]
fn drives_across_sockets_get_their_share_of_the_socket_link() {
    // AMD lets GDS cross sockets, over a socket link held here at 16 GB/s.
    let (topo, model) = one_gpu_board("epyc-2s", "", r#", bandwidth = "16GB/s""#);
    let (near, _) = stream_rate(&topo, &model, &read_from(&topo, "near", StoragePath::Gds));
    let (far, limit) = stream_rate(&topo, &model, &read_from(&topo, "far", StoragePath::Gds));
    assert!(close(far, 16.0, 0.01) && limit == Limit::SocketLink, "far {far} {limit}");
    assert!(close(near / far, 55.32 / 16.0, 0.02), "near {near}, far {far}");
    // One RAID-0 of all eight: each I/O waits for its far stripes, which
    // share 16 GB/s four ways, so the array runs at 8 x 4 = 32 GB/s.
    let all = Stream { target: Target::Drives(topo.drives()), ..read_from(&topo, "", StoragePath::Gds) };
    let (mixed, limit) = stream_rate(&topo, &model, &all);
    assert!(close(mixed, 32.0, 0.02) && limit == Limit::SocketLink, "mixed {mixed} {limit}");
}

#[test]
fn a_checkpoint_writes_at_the_drives_write_rate_and_a_restore_reads_at_their_read_rate() {
    let model = HardwareModel::base();
    let topo = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
    let llm = llama_70b();
    let shard = shard_bytes(&llm, 8).as_f64();
    // Two Gen4 drives a switch serve its two GPUs: 6.9 GB/s written and
    // 7.4 GB/s read a GPU.
    for (job, per_gpu) in [
        (Job::checkpoint(&topo, &llm, 8, StoragePath::Gds, JobTarget::Drives(ArrayKind::Local)), 6.9),
        (Job::restore(&topo, &llm, 8, StoragePath::Gds, JobTarget::Drives(ArrayKind::Local)), 7.4),
    ] {
        let run = simulate(&topo, &model, &job).unwrap();
        assert!(close(run.time.as_secs(), shard / (per_gpu * 1e9), 0.02), "{:?}: {}", job.direction, run.time);
        assert_eq!(run.bound_by(), "drives");
    }
}

#[test]
fn local_arrays_are_the_drives_on_the_gpus_switch_else_its_socket() {
    let model = HardwareModel::base();
    let hgx = preset("hgx-h200", &PresetOptions::default(), &model).unwrap();
    let names = |topo: &Topology, drives: Vec<NodeId>| drives.iter().map(|&d| topo.node(d).name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&hgx, drives_for(&hgx, hgx.gpus()[3], ArrayKind::Local)), ["nvme1", "nvme5"]);
    assert_eq!(drives_for(&hgx, hgx.gpus()[3], ArrayKind::Array).len(), 8);
    let pcie = preset("pcie-gen4-8gpu", &PresetOptions::default(), &model).unwrap();
    assert_eq!(names(&pcie, drives_for(&pcie, pcie.gpus()[6], ArrayKind::Local)), ["nvme1", "nvme3"], "root ports of socket 1");
    assert!("raid".parse::<ArrayKind>().unwrap_err().contains("local"));
}

#[test]
fn a_board_without_drives_says_how_to_add_them() {
    let model = HardwareModel::base();
    let board = preset("hgx-h200", &PresetOptions { gpus: Some(2), gpu: None, host: None }, &model).unwrap();
    let bare = board.with_drives(&DriveLayout { count: 0, drive: "gen4".into(), placement: Placement::Switch }, &model).unwrap();
    let error =
        simulate(&bare, &model, &Job::restore(&bare, &llama_70b(), 2, StoragePath::Gds, JobTarget::Drives(ArrayKind::Local))).unwrap_err();
    assert!(error.to_string().contains("drives = N"), "{error}");
}

#[test]
fn whole_files_on_more_drives_than_ios_in_flight_leave_drives_idle() {
    // Eight Gen4 drives beside one Gen5 GPU. Striped, every 16 MiB I/O
    // spans all eight (59.2 GB/s), so the GPU's link (55.32) binds; as whole
    // files, each I/O sits on one drive and four in flight keep four busy,
    // each paying its CPU time (1.31 + 0.74 x 16 us) and the drive's 80 us
    // before its 16 MiB move at 7.4 GB/s.
    let model = HardwareModel::base();
    let board = preset("hgx-h200", &PresetOptions { gpus: Some(1), gpu: None, host: None }, &model).unwrap();
    let topo = board.with_drives(&DriveLayout { count: 8, drive: "gen4".into(), placement: Placement::Switch }, &model).unwrap();
    let job = |striping| Job { target: JobTarget::drives(ArrayKind::Local, striping), ..read(&topo, 1, StoragePath::Gds) };
    let (striped, bound) = rate(&topo, &model, &job(Striping::Raid0));
    assert!(close(striped, 55.32, 0.01) && bound == "GPU PCIe link", "{striped} {bound}");
    let (files, bound) = rate(&topo, &model, &job(Striping::Files));
    let io = Bytes::mib(16).as_f64();
    let per_worker = io / ((1.31 + 0.74 * 16.0 + 80.0) * 1e-6 + io / 7.4e9);
    assert!(close(files, 4.0 * per_worker / 1e9, 0.01) && bound == "I/Os in flight", "{files} {bound}");
    assert!("mirror".parse::<Striping>().unwrap_err().contains("raid0"));
}
