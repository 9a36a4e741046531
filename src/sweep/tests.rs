//! A whole sweep file: its points and their order, the errors of a bad
//! file, rows that do not depend on the thread count, and changes that
//! restate the hardware as it is changing nothing.

use std::path::Path;

use super::change::{self, Change, Key, Origin};
use super::goal::{Measured, Metric};
use super::row::SweepRow;
use super::run::{self, resolve};
use super::*;
use crate::report::Record;
use crate::serve::requests::Lengths;
use crate::topology::{LinkKind, Topology};
use crate::units::Bandwidth;

/// A small base: Llama-3.1-8B, a short query, TP=4 on half an HGX H20.
const SMALL: &str = r#"
[base]
model = "llama-3.1-8b"
tp = 4
topology = "hgx-h20"
gpus = 4
[base.query]
prompt = 512
output = 4
[[base.mode]]
transport = "nvswitch"
[[base.mode]]
transport = "shm"
"#;

fn sweep(extra: &str) -> ConfigResult<Sweep> {
    Sweep::parse(Path::new("s.toml"), &format!("{SMALL}\n{extra}"))
}

fn error(extra: &str) -> String {
    sweep(extra).unwrap_err().to_string()
}

fn described(point: &Point) -> String {
    let changes: Vec<String> = point.changes.iter().map(Change::describe).collect();
    format!("{} {}", point.label, changes.join(" "))
}

#[test]
fn points_run_modes_then_listed_points_then_the_axes() {
    let sweep = sweep("[[point]]\ntp = 2\n[[point]]\ntp = 4\n[[axis]]\nkey = \"query.batch\"\nvalues = [1, 2]").unwrap();
    assert_eq!(sweep.len(), 2 * 2 * 2);
    let points: Vec<String> = (0..sweep.len()).map(|i| described(&sweep.point(i))).collect();
    assert_eq!(points[..3], ["nvswitch tp=2 query.batch=1", "nvswitch tp=2 query.batch=2", "nvswitch tp=4 query.batch=1"]);
    assert_eq!(points[7], "shm tp=4 query.batch=2");
    assert_eq!(sweep.columns, ["label", "query.batch", "tp"]);
}

#[test]
fn bad_sweep_files_name_the_file_the_key_and_what_is_allowed() {
    let cases = [
        ("[[axis]]\nkey = \"nvlink_speed\"\nvalues = [1]", "key `axis[0].key`", "topology.nvlink_bandwidth"),
        ("[[axis]]\nkey = \"query.prompt\"\nfrom = 4096\nto = 1024\nstep = 1024", "key `axis[0].from`", "empty range"),
        ("[[axis]]\nkey = \"tp\"\nvalues = []", "key `axis[0].values`", "at least one value"),
        ("[goal]\nrequire = [\"ttft_ms => 500\"]", "key `goal.require[0]`", "OP one of <=, <, >=, >, =="),
        ("[goal]\nminimize = \"speed\"", "key `goal.minimize`", "usd_per_million_tokens"),
        ("[cost.gpu.h300]\nusd = 1\nwatts = 1", "key `cost.gpu.h300`", "h200"),
        ("[[point]]\ntp = 0", "key `point[0].tp`", "from 1"),
        ("[[point]]\ntransport = \"pcie\"", "key `point[0].transport`", "nvswitch"),
        ("[[axis]]\nkey = \"topology.pcie_generation\"\nvalues = [\"gen7\"]", "axis[0].values[0]", "gen3, gen4, gen5, gen6"),
        ("[[axis]]\nkey = \"hardware.nvlink.gen4.link_rat\"\nvalues = [\"1GB/s\"]", "axis[0].values[0]", "link_rate"),
        ("[[axis]]\nkey = \"hardware.gpu.h20.nvlink_links\"\nvalues = [\"many\"]", "axis[0].values[0]", "u32"),
        ("[[plot]]\nkind = \"lines\"\nx = \"batch\"\ny = \"ttft_ms\"", "key `plot[0].x`", "label"),
    ];
    for (extra, key, allowed) in cases {
        let message = error(extra);
        assert!(message.starts_with("s.toml") && message.contains(key) && message.contains(allowed), "{extra}: {message}");
    }
    // A component the cost model does not have: serde names it and the known ones.
    let message = error("[cost.widget]\nusd = 1");
    assert!(message.starts_with("s.toml") && message.contains("widget") && message.contains("pcie_switch"), "{message}");
    let message = Sweep::parse(Path::new("s.toml"), "description = \"no base\"").unwrap_err().to_string();
    assert!(message.contains("key `experiment`"), "{message}");
}

#[test]
fn a_sweep_too_large_to_run_is_refused() {
    let axis = |key: &str| format!("[[axis]]\nkey = \"{key}\"\nfrom = 1\nto = 100000\nstep = 1\n");
    let message = error(&format!("{}{}", axis("query.prompt"), axis("query.output")));
    assert!(
        message.contains("key `axis[1]`") && message.contains("100000 values of query.output") && message.contains("at most 1000000"),
        "{message}"
    );
    // One range alone past the limit is refused before its values are made.
    let message = error(&axis("query.prompt").replace("100000", "99999999"));
    assert!(message.contains("key `axis[0].to`") && message.contains("99999999 values"), "{message}");
}

#[test]
fn a_transport_axis_needs_a_base_of_one_mode() {
    let message = error("[[axis]]\nkey = \"transport\"\nvalues = [\"nvswitch\", \"shm\"]");
    assert!(message.contains("s.toml: key `mode`") && message.contains("one [[mode]]"), "{message}");
}

#[test]
fn rows_come_in_point_order_whatever_the_thread_count_and_failures_say_why() {
    let sweep = sweep("[[axis]]\nkey = \"tp\"\nvalues = [2, 8]\n[[axis]]\nkey = \"query.batch\"\nvalues = [1, 2]").unwrap();
    let points = run::shard_points(&sweep, axes::Shard::WHOLE);
    let one = run::run(&sweep, &points, Some(1), &|| {}).unwrap();
    let two = run::run(&sweep, &points, Some(2), &|| {}).unwrap();
    assert_eq!(one, two);
    for row in &one {
        assert_eq!(SweepRow::read(row.record(), &sweep.columns).as_ref(), Ok(row), "a row reads back as written");
    }
    let one: Vec<Record> = one.iter().map(SweepRow::record).collect();
    let order: Vec<u64> = one.iter().map(|r| r["point"].as_u64().unwrap()).collect();
    assert_eq!(order, (0..8).collect::<Vec<u64>>());
    // TP=8 on the 4 GPUs of the base cannot run; TP=2 runs.
    assert!(one[2]["error"].as_str().unwrap().contains("TP=8"), "{:?}", one[2]);
    assert!(one[0]["error"].is_null() && one[0]["ttft_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(one[0]["tp"], 2, "the axis column holds the value as written");
    assert_eq!(one[0]["tp_used"], 2, "the result's own field sits beside it");
    assert!(one[0]["usd_per_million_tokens"].as_f64().unwrap() > 0.0 && one[0]["meets_goal"] == true);
}

#[test]
fn every_metric_a_goal_may_name_is_in_a_row() {
    let sweep = sweep("").unwrap();
    let row = run::row(&sweep, &sweep.point(0));
    let record = row.record();
    for (metric, name, _) in goal::METRICS {
        assert!(row.metric(*metric).is_some(), "{name} in {row:?}");
        assert_eq!(record[*name].as_f64(), row.metric(*metric), "{name} is the column of that name");
    }
}

/// A change written at the command line.
fn change(text: &str) -> Change {
    Change::parse_assignment(text, Origin { path: Path::new("command line"), at: "--set", base_dir: Path::new(".") }).unwrap()
}

fn topology_with(changes: &[Change]) -> Topology {
    let sweep = sweep("").unwrap();
    let mut base = sweep.base.clone();
    base.modes.truncate(1);
    let changes: Vec<&Change> = changes.iter().collect();
    resolve(&base, &sweep.base_source, &changes, Path::new("t")).unwrap().modes.remove(0).topology
}

fn nvlink(topo: &Topology) -> (Bandwidth, u32) {
    let link = topo.links().iter().find(|l| matches!(l.kind, LinkKind::NvLink { .. })).unwrap();
    let LinkKind::NvLink { links, .. } = link.kind else { unreachable!() };
    (link.bandwidth, links)
}

#[test]
fn link_changes_rescale_the_links_they_name() {
    let base = topology_with(&[]);
    let (rate, links) = nvlink(&base);
    assert_eq!(links, 18);
    assert_eq!(nvlink(&topology_with(&[change("topology.nvlink_links=12")])), (rate.scaled(12.0 / 18.0), 12));
    assert_eq!(nvlink(&topology_with(&[change("topology.nvlink_bandwidth=50GB/s")])), (rate.scaled(2.0), 18));
    // Every PCIe link at Gen4 rates: what the Gen4 board's links carry.
    let gen4 = topology_with(&[change("topology.pcie_generation=gen4")]);
    let board = crate::topology::preset("pcie-gen4-8gpu", &Default::default(), &crate::config::hardware::HardwareModel::base()).unwrap();
    let pcie =
        |topo: &Topology| topo.links().iter().find(|l| matches!(l.kind, LinkKind::Pcie { .. })).map(|l| (l.bandwidth, l.kind.clone()));
    assert_eq!(pcie(&gen4), pcie(&board));
    let memory = topology_with(&[change("topology.host_memory_bandwidth=400GB/s")]);
    let bus = memory.links().iter().find(|l| matches!(l.kind, LinkKind::MemoryBus { .. })).unwrap();
    assert_eq!(bus.bandwidth, Bandwidth::gbps(300), "400 GB/s peak at the model's 0.75");
}

#[test]
fn changes_that_restate_the_hardware_change_nothing() {
    let sweep = sweep("").unwrap();
    let plain = run::row(&sweep, &sweep.point(0)).record();
    let restated = [
        "topology.nvlink_links=18",
        "topology.nvlink_bandwidth=25GB/s",
        "topology.pcie_generation=gen5",
        "hardware.nvlink.gen4.link_rate=25GB/s",
        "hardware.gpu.h20.nvlink_links=18",
    ];
    let mut point = sweep.point(0);
    point.changes = restated.iter().map(|text| change(text)).collect();
    let changed = run::row(&sweep, &point).record();
    for (name, value) in &plain {
        assert_eq!(changed.get(name), Some(value), "{name}");
    }
}

#[test]
fn keys_list_what_is_allowed() {
    assert!(Key::parse("topology.nvlink_links").is_ok() && Key::parse("hardware.shm.slots").is_ok());
    let message = Key::parse("nvlink").unwrap_err();
    assert!(message.contains("query.prompt") && message.contains("hardware."), "{message}");
    assert_eq!(change::parse_value_text("12"), toml::Value::Integer(12));
    assert_eq!(change::parse_value_text("50GB/s"), toml::Value::String("50GB/s".into()));
    let origin = Origin { path: Path::new("command line"), at: "--set", base_dir: Path::new(".") };
    let message = Change::parse_assignment("tp", origin).unwrap_err().to_string();
    assert!(message.contains("command line: key `--set`") && message.contains("KEY=VALUE"), "{message}");
}

#[test]
fn a_link_key_gives_what_rebuilding_the_board_from_an_edited_model_gives() {
    // On an NVSwitch board the preset reads the GPU's link count and the
    // generation's link rate: editing the model before the build and
    // rescaling the built links must agree to the picosecond.
    let sweep = sweep("").unwrap();
    let row = |text: &str| {
        let mut point = sweep.point(0);
        point.changes = vec![change(text)];
        run::row(&sweep, &point).record()
    };
    for (link_key, model_key) in [
        ("topology.nvlink_links=12", "hardware.gpu.h20.nvlink_links=12"),
        ("topology.nvlink_bandwidth=50GB/s", "hardware.nvlink.gen4.link_rate=50GB/s"),
    ] {
        let (rescaled, rebuilt) = (row(link_key), row(model_key));
        for field in ["ttft_ms", "total_ms", "busiest_link", "busiest_link_util", "prefill_algo"] {
            assert_eq!(rescaled[field], rebuilt[field], "{link_key} against {model_key}: {field}");
        }
        assert_ne!(rescaled["ttft_ms"], run::row(&sweep, &sweep.point(0)).record()["ttft_ms"], "{link_key} changes the time");
    }
}

#[test]
fn a_point_whose_query_outruns_the_clock_is_an_error_not_a_ranked_row() {
    // 64 MiB prefill allreduces over NVLinks of 1 B/s: each takes weeks, the
    // query's 64 of them run past the clock (and once panicked there).
    let sweep =
        sweep("[[axis]]\nkey = \"topology.nvlink_bandwidth\"\nvalues = [\"1B/s\"]\n[[axis]]\nkey = \"query.prompt\"\nvalues = [8192]")
            .unwrap();
    let row = run::row(&sweep, &sweep.point(0)).record();
    let error = row["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("the query under nvswitch on hgx-h20 takes longer than the simulated clock's range"), "{row:?}");
    assert!(row.get("ttft_ms").is_none() && row.get("meets_goal").is_none(), "{row:?}");
}

/// A service on the small base: 40 requests of short prompts.
const SERVED: &str = "[serve]\nrequests = 40\nprompt = \"200..600\"\noutput = \"8\"\n";

#[test]
fn a_service_needs_a_rate_and_its_keys_fit_only_a_service() {
    let message = error(&format!("{SERVED}[[axis]]\nkey = \"tp\"\nvalues = [2, 4]"));
    assert!(message.contains("key `serve.rate`") && message.contains("axis of serve.rate"), "{message}");
    assert!(message.contains("axis of serve.max_concurrency"), "{message}");
    let message = error("[[axis]]\nkey = \"serve.rate\"\nvalues = [1, 2]");
    assert!(message.contains("key `axis[0].key`") && message.contains("add a [serve] table"), "{message}");
    let message = error(&format!("{SERVED}rate = 2\n[[point]]\nquery.prompt = 100"));
    assert!(message.contains("key `point[0].query.prompt`") && message.contains("set their lengths in [serve]"), "{message}");
    let message = error(&format!("{SERVED}rate = 2\nslo_ttft = \"0s\""));
    assert!(message.contains("key `serve.slo_ttft`") && message.contains("above 0"), "{message}");
    let message = error("[serve]\nrate = 2\nprompt = \"10..2\"");
    assert!(message.contains("key `serve.prompt`") && message.contains("LOW..HIGH"), "{message}");
    let message = error(&format!("{SERVED}[[axis]]\nkey = \"serve.rate\"\nvalues = [1, -2]"));
    assert!(message.contains("key `axis[0].values[1]`") && message.contains("a number above zero"), "{message}");
    let message = error(&format!("{SERVED}rate = 2\nmax_concurrency = 0"));
    assert!(message.contains("key `serve.max_concurrency`"), "{message}");
}

#[test]
fn a_services_concurrency_cap_reaches_its_points() {
    let ttft = |cap: &str| {
        let sweep = sweep(&format!("{SERVED}rate = 2000\n{cap}[[axis]]\nkey = \"tp\"\nvalues = [4]")).unwrap();
        run::row(&sweep, &sweep.point(0)).record()["ttft_p99_ms"].as_f64().unwrap()
    };
    let (capped, free) = (ttft("max_concurrency = 4\n"), ttft(""));
    assert!(capped < free, "a cap times each request from when it is sent: {capped} against {free}");
}

#[test]
fn a_services_trace_gives_its_requests_lengths_in_order_and_their_count() {
    let dir = std::env::temp_dir().join(format!("icsim-sweep-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("lengths.jsonl");
    std::fs::write(&trace, "{\"prompt_tokens\": 300, \"output_tokens\": 4}\n{\"prompt_tokens\": 900, \"output_tokens\": 12}\n").unwrap();
    let served = |extra: &str| Sweep::parse(&dir.join("s.toml"), &format!("{SMALL}\n[serve]\nrate = 2\n{extra}"));
    let sweep = served("trace = \"lengths.jsonl\"").unwrap();
    let record = run::row(&sweep, &sweep.point(0)).record();
    assert!(record["error"].is_null() && record["output_tokens_per_s"].as_f64().unwrap() > 0.0, "a point serves it: {record:?}");
    let service = sweep.service.unwrap();
    assert_eq!(service.load.lengths, Lengths::Listed(vec![(300, 4), (900, 12)]), "named relative to the sweep file");
    assert_eq!(service.load.count, 2, "as many requests as the trace lists, unless requests says");
    assert_eq!(served("trace = \"lengths.jsonl\"\nrequests = 5").unwrap().service.unwrap().load.count, 5);
    let message = served("trace = \"lengths.jsonl\"\nprompt = \"100\"").unwrap_err().to_string();
    assert!(message.contains("key `serve.trace`") && message.contains("leave out prompt and output"), "{message}");
    let message = served("trace = \"absent.jsonl\"").unwrap_err().to_string();
    assert!(message.contains("key `serve.trace`") && message.contains("absent.jsonl"), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_concurrency_axis_without_a_rate_sends_every_request_at_once_under_each_cap() {
    let sweep = sweep(&format!("{SERVED}[[axis]]\nkey = \"serve.max_concurrency\"\nvalues = [1, 40]")).unwrap();
    assert_eq!(sweep.goal.objective, Metric::UsdPerMillionOutputTokens, "no rate: judged by what a token costs");
    assert!(!sweep.goal.maximize);
    let typed: Vec<SweepRow> = (0..2).map(|i| run::row(&sweep, &sweep.point(i))).collect();
    let rows: Vec<Record> = typed.iter().map(SweepRow::record).collect();
    for (row, record) in typed.iter().zip(&rows) {
        assert!(record["error"].is_null(), "{record:?}");
        assert!(record["rate"].is_null() && record["rate_per_usd_hour"].is_null(), "no offered rate: {record:?}");
        assert_eq!(SweepRow::read(record.clone(), &sweep.columns).as_ref(), Ok(row), "a capped service's row reads back as written");
    }
    let ttft = |row: &Record| row["ttft_p99_ms"].as_f64().unwrap();
    let served = |row: &Record| row["requests_per_s"].as_f64().unwrap();
    // One in flight: each request alone; forty: all of them at once.
    assert!(ttft(&rows[0]) < ttft(&rows[1]), "{} against {}", ttft(&rows[0]), ttft(&rows[1]));
    assert!(served(&rows[0]) < served(&rows[1]), "{} against {}", served(&rows[0]), served(&rows[1]));
}

#[test]
fn a_service_point_serves_at_its_rate_and_is_judged_by_its_rate_per_dollar() {
    let sweep = sweep(&format!(
        "{SERVED}slo_ttft = \"1s\"\n[[axis]]\nkey = \"serve.rate\"\nvalues = [2, 2000]\n[[axis]]\nkey = \"serve.max_num_batched_tokens\"\nvalues = [256, 8192]\n[goal]\nrequire = [\"ttft_p99_ms <= 400\"]"
    ))
    .unwrap();
    assert_eq!(sweep.goal.objective, Metric::RatePerUsdHour, "a service's default objective");
    assert!(sweep.goal.maximize);
    // Points run modes outermost, then the rate, then the budget.
    let typed: Vec<SweepRow> = (0..4).map(|i| run::row(&sweep, &sweep.point(i))).collect();
    for row in &typed {
        assert_eq!(SweepRow::read(row.record(), &sweep.columns).as_ref(), Ok(row), "a service's row reads back as written");
    }
    let rows: Vec<Record> = typed.iter().map(SweepRow::record).collect();
    let number = |row: &Record, field: &str| row[field].as_f64().unwrap_or_else(|| panic!("{field} in {row:?}"));
    for row in &rows {
        assert!(row["error"].is_null(), "{row:?}");
        assert_eq!(row["tp"], 4);
        let per_dollar = number(row, "rate") / number(row, "usd_per_hour");
        assert!((number(row, "rate_per_usd_hour") - per_dollar).abs() < 1e-12);
    }
    assert!(number(&rows[2], "ttft_p99_ms") > number(&rows[0], "ttft_p99_ms"), "more load, longer waits");
    assert!(number(&rows[2], "ttft_p99_ms") > number(&rows[3], "ttft_p99_ms"), "a small budget chunks long prompts");
    assert_eq!(rows[0]["meets_goal"], true);
    assert_eq!(rows[2]["meets_goal"], false);
    let metrics = goal::SERVICE_METRICS.iter().map(|m| m.0).chain([Metric::CommShare, Metric::UsdPerGpuHour, Metric::UsdPerHour]);
    for metric in metrics {
        assert!(typed[0].metric(metric).is_some(), "{metric} in {:?}", typed[0]);
        assert_eq!(rows[0][metric.name()].as_f64(), typed[0].metric(metric), "{metric} is the column of that name");
    }
}
