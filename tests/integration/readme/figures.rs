//! The figures the documentation's prose quotes from results, checked against
//! those results: each quote is written here as its page writes it, with its
//! numbers computed from the result it comes from (a shipped sweep's
//! `results.csv`, a sweep file's published series, or a run of the default
//! experiment), so that a page and what it quotes cannot drift apart. A
//! failure names the page, the passage it should hold and where the numbers
//! come from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::page;
use crate::common::{icsim_json, span, thousands};

/// A passage a page must hold (whitespace as on one line) and its source.
pub(super) struct Quote {
    page: &'static str,
    text: String,
    from: &'static str,
}

pub(super) fn quote(page: &'static str, from: &'static str, text: String) -> Quote {
    Quote { page, text, from }
}

/// Fails for every quote its page does not hold, naming each.
pub(super) fn check(quotes: &[Quote]) {
    let mut missing = Vec::new();
    for q in quotes {
        let text = page(q.page).split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.contains(&q.text) {
            missing.push(format!("{}: should say `{}` (computed from {})", q.page, q.text, q.from));
        }
    }
    assert!(missing.is_empty(), "the docs quote figures their results no longer give:\n{}", missing.join("\n"));
}

type Row = BTreeMap<String, String>;

/// One line of a CSV file as fields; a quoted field may hold commas and `""`.
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let (mut quoted, mut chars) = (false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// The rows of a shipped CSV file, by column name.
fn csv(name: &str) -> Vec<Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut lines = text.lines();
    let header = fields(lines.next().unwrap_or_default());
    lines.map(|line| header.iter().cloned().zip(fields(line)).collect()).collect()
}

/// The one row whose columns hold these values.
fn row<'a>(rows: &'a [Row], from: &str, want: &[(&str, &str)]) -> &'a Row {
    let found: Vec<&Row> =
        rows.iter().filter(|r| want.iter().all(|(column, value)| r.get(*column).map(String::as_str) == Some(*value))).collect();
    assert_eq!(found.len(), 1, "{from}: {} rows have {want:?}", found.len());
    found[0]
}

fn num(row: &Row, column: &str) -> f64 {
    row.get(column).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no number in column {column}: {row:?}"))
}

/// A count as the pages write one up to ten (`5` -> `five`).
fn in_words(count: usize) -> String {
    const WORDS: [&str; 11] = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];
    WORDS.get(count).map_or_else(|| count.to_string(), |word| word.to_string())
}

/// A share as a whole percentage (`0.8028` -> `80%`).
fn percent(share: f64) -> String {
    format!("{:.0}%", 100.0 * share)
}

/// A share as a percentage with one decimal (`0.1378` -> `13.8%`).
fn percent1(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

#[test]
fn readme_figures_of_the_machines_sweep_match_its_results() {
    const FROM: &str = "plots/sweeps/machines/results.csv";
    let rows = csv(FROM);
    let ranked = |rank: &str| row(&rows, FROM, &[("rank", rank)]);
    let (first, second) = (ranked("1"), ranked("2"));
    assert_eq!(first["topology"], "h20-nvlink-mesh", "{FROM}: the pages say the mesh ranks first");
    assert_eq!(second["topology"], "hgx-h20", "{FROM}: the pages say the HGX board ranks second");
    let cheapest = num(first, "usd_per_million_tokens");
    let best = |label: &str| {
        rows.iter()
            .filter(|r| r["label"] == label && r["meets_goal"] == "true")
            .map(|r| num(r, "usd_per_million_tokens"))
            .fold(f64::INFINITY, f64::min)
    };
    let meeting = rows.iter().filter(|r| r["meets_goal"] == "true").count();
    let machines: BTreeSet<(&str, &str, &str)> =
        rows.iter().map(|r| (r["topology"].as_str(), r["tp"].as_str(), r["transport"].as_str())).collect();
    let batches: Vec<u64> = rows.iter().map(|r| num(r, "query.batch") as u64).collect();
    let mut quotes = vec![
        quote("README.md", FROM, format!("{meeting} of {} points meet it", rows.len())),
        quote(
            "README.md",
            FROM,
            format!(
                "among {} machines at batches {} to {}",
                in_words(machines.len()),
                batches.iter().min().unwrap(),
                batches.iter().max().unwrap()
            ),
        ),
    ];
    for page in ["README.md", "docs/guide.md"] {
        quotes.push(quote(page, FROM, format!("mesh at batch {} first (${:.2})", first["query.batch"], cheapest)));
        quotes.push(quote(page, FROM, format!("at batch {} next (${:.2})", second["query.batch"], num(second, "usd_per_million_tokens"))));
        quotes.push(quote(
            page,
            FROM,
            format!("cost {:.1}x (P2P) and {:.1}x (SHM) as much per token as the cheapest", best("p2p") / cheapest, best("shm") / cheapest),
        ));
    }
    check(&quotes);
}

#[test]
fn readme_figures_of_the_pcie_sweep_match_its_results() {
    const FROM: &str = "plots/sweeps/pcie-vs-prompt/results.csv";
    let rows = csv(FROM);
    let at = |label: &str, generation: &str| {
        row(&rows, FROM, &[("label", label), ("topology.pcie_generation", generation), ("query.prompt", "8192")])
    };
    let share = |label: &str, generation: &str| percent(num(at(label, generation), "prefill_comm_share"));
    let saved = |label: &str| {
        let (gen4, gen5) = (num(at(label, "gen4"), "ttft_ms"), num(at(label, "gen5"), "ttft_ms"));
        percent1((gen4 - gen5) / gen4)
    };
    let bound = |label: &str, generation: &str, link: &str, says: &str| {
        let busiest = &at(label, generation)["busiest_link"];
        if busiest.contains(link) { says.to_string() } else { format!("where {busiest} binds") }
    };
    let gen6_gain = {
        let (gen5, gen6) = (num(at("shm", "gen5"), "ttft_ms"), num(at("shm", "gen6"), "ttft_ms"));
        if gen6 == gen5 { "Gen6 gains nothing".to_string() } else { format!("Gen6 gains {}", percent1((gen5 - gen6) / gen5)) }
    };
    let meeting = rows.iter().filter(|r| r["meets_goal"] == "true").count();
    let memory = bound("shm", "gen5", "memory bus", "where host memory binds");
    // The goal's bound, 10% of the time to first token: how many points come under it.
    let under = rows.iter().filter(|r| num(r, "prefill_comm_share") < 0.10).count();
    let none_under = if under == 0 {
        "no generation brings communication under 10% of the time to first token".to_string()
    } else {
        format!("{under} points bring communication under 10% of the time to first token")
    };
    let quotes = vec![
        quote("README.md", FROM, none_under.clone()),
        quote("docs/guide.md", FROM, none_under),
        quote("README.md", FROM, format!("saves SHM {} of its time to first token (P2P {})", saved("shm"), saved("p2p"))),
        quote(
            "README.md",
            FROM,
            format!("SHM's share goes from {} on Gen3 to {} on Gen5, {memory} and {gen6_gain}", share("shm", "gen3"), share("shm", "gen5")),
        ),
        quote("docs/guide.md", FROM, format!("Gen5 saves SHM {} of its time to first token and P2P {}", saved("shm"), saved("p2p"))),
        quote(
            "docs/guide.md",
            FROM,
            format!("SHM goes from {} of it on Gen3 to {} on Gen5, {memory} and {gen6_gain}", share("shm", "gen3"), share("shm", "gen5")),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "P2P from {} to {} on Gen5 (the switch uplinks bind) and {} on Gen6, {}",
                share("p2p", "gen3"),
                share("p2p", "gen5"),
                share("p2p", "gen6"),
                bound("p2p", "gen6", "socket link", "where the socket link binds")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            if meeting == 0 { "(the goal is met by no point)".to_string() } else { format!("(the goal is met by {meeting} points)") },
        ),
    ];
    assert!(at("p2p", "gen5")["busiest_link"].contains("pcie-sw0 -> cpu0"), "{FROM}: the guide says the switch uplinks bind P2P on Gen5");
    check(&quotes);
}

#[test]
fn readme_figures_of_the_nvlink_sweep_match_its_results() {
    const FROM: &str = "plots/sweeps/nvlink-vs-tp/results.csv";
    let rows = csv(FROM);
    let at = |tp: &str, rate: &str| row(&rows, FROM, &[("tp", tp), ("topology.nvlink_bandwidth", rate)]);
    let within_2s: Vec<&str> = rows.iter().filter(|r| num(r, "ttft_ms") <= 2000.0).map(|r| r["tp"].as_str()).collect();
    assert!(within_2s.iter().all(|tp| *tp == "8"), "{FROM}: the guide says only TP=8 reaches the first token within 2 s");
    let gain = ["2", "4"]
        .iter()
        .map(|tp| {
            let (at50, at100) = (num(at(tp, "50GB/s"), "ttft_ms"), num(at(tp, "100GB/s"), "ttft_ms"));
            (at50 - at100) / at50
        })
        .fold(0.0, f64::max);
    let prefill = |rate: &str| format!("{:.0}", num(at("2", rate), "prefill_allreduce_us"));
    let quotes = vec![
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "at TP=8 communication is {} of the query at 6.25 GB/s and {} at 100 GB/s",
                percent1(num(at("8", "6.25GB/s"), "comm_share")),
                percent1(num(at("8", "100GB/s"), "comm_share"))
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            if gain < 0.004 { "TP=2 and 4 gain under 0.4%".to_string() } else { format!("TP=2 and 4 gain {}", percent1(gain)) },
        ),
        quote(
            "docs/reference.md",
            FROM,
            format!(
                "a TP=2 prefill allreduce takes {} us at 25 GB/s a link, {} us at 50 and {} us at 100",
                prefill("25GB/s"),
                prefill("50GB/s"),
                prefill("100GB/s")
            ),
        ),
    ];
    check(&quotes);
}

#[test]
fn readme_vendor_comparison_matches_the_sweep_and_the_published_series() {
    const FROM: &str = "plots/sweeps/vendor-tp2-batch/results.csv and configs/sweeps/vendor-tp2-batch.toml";
    let rows = csv("plots/sweeps/vendor-tp2-batch/results.csv");
    let sweep: toml::Value = toml::from_str(&page("configs/sweeps/vendor-tp2-batch.toml")).unwrap();
    // The published series, by the sweep's line each is drawn like.
    let published = |like: &str| -> Vec<(i64, i64)> {
        let plots = sweep["plot"].as_array().unwrap();
        let series = plots
            .iter()
            .filter_map(|plot| plot.get("reference").and_then(toml::Value::as_array))
            .flatten()
            .find(|r| r["like"].as_str() == Some(like))
            .unwrap_or_else(|| panic!("{FROM}: no published series like {like}"));
        series["points"].as_array().unwrap().iter().map(|p| (p[0].as_integer().unwrap(), p[1].as_integer().unwrap())).collect()
    };
    let (switch, direct) = (published("nvswitch"), published("point-to-point"));
    let ours =
        |label: &str, batch: i64| num(row(&rows, FROM, &[("label", label), ("query.batch", &batch.to_string())]), "tokens_per_s_per_gpu");
    let mut quotes = Vec::new();
    let (mut switch_gaps, mut direct_gaps) = (Vec::new(), Vec::new());
    for (&(batch, vendor_switch), &(_, vendor_direct)) in switch.iter().zip(&direct) {
        let (s, d) = (ours("nvswitch", batch), ours("point-to-point", batch));
        switch_gaps.push(1.0 - s / vendor_switch as f64);
        direct_gaps.push(1.0 - d / vendor_direct as f64);
        quotes.push(quote(
            "docs/guide.md",
            FROM,
            format!(
                "| {batch} | {vendor_switch} | {s:.1} | {vendor_direct} | {d:.1} | {:.2} | {:.2} |",
                vendor_switch as f64 / vendor_direct as f64,
                s / d
            ),
        ));
    }
    let span = |gaps: &[f64]| {
        let (low, high) = (gaps.iter().cloned().fold(f64::INFINITY, f64::min), gaps.iter().cloned().fold(0.0, f64::max));
        format!("{:.0}-{}", 100.0 * low, percent(high))
    };
    let (last, _) = *switch.last().unwrap();
    quotes.push(quote(
        "docs/guide.md",
        FROM,
        format!(
            "to {:.2}x against {:.2}x at batch {last}",
            ours("nvswitch", last) / ours("point-to-point", last),
            switch.last().unwrap().1 as f64 / direct.last().unwrap().1 as f64
        ),
    ));
    let all: Vec<f64> = switch_gaps.iter().chain(&direct_gaps).cloned().collect();
    quotes.push(quote("docs/guide.md", FROM, format!("icsim's absolute figures are {} below the vendor's", span(&all))));
    quotes.push(quote(
        "docs/guide.md",
        FROM,
        format!(
            "({} at batch 1, {} at 32; point-to-point {} below at every batch",
            percent(switch_gaps[0]),
            percent(*switch_gaps.last().unwrap()),
            span(&direct_gaps)
        ),
    ));
    assert!(switch_gaps.windows(2).all(|w| w[1] > w[0]), "{FROM}: the guide says the NVSwitch gap grows with the batch");
    check(&quotes);
}

/// The modes of `icsim run --format json` (configs/default.toml).
fn default_run() -> Vec<serde_json::Value> {
    icsim_json(&["run", "--format", "json"])["results"].as_array().unwrap().clone()
}

/// A run's mode, by its label.
fn mode_of<'a>(rows: &'a [serde_json::Value], label: &str) -> &'a serde_json::Value {
    rows.iter().find(|r| r["label"] == label).unwrap_or_else(|| panic!("icsim run: no mode {label}"))
}

/// A number of a run's mode.
fn number_of(rows: &[serde_json::Value], label: &str, field: &str) -> f64 {
    mode_of(rows, label)[field].as_f64().unwrap_or_else(|| panic!("icsim run: no {field} in {label}"))
}

#[test]
fn readme_figures_of_the_default_run_match_it() {
    const FROM: &str = "icsim run --format json (configs/default.toml)";
    let rows = default_run();
    let get = |label: &str, field: &str| number_of(&rows, label, field);
    let ms = |label: &str, field: &str| format!("{:.0}", get(label, field));
    let compute: Vec<String> = rows.iter().map(|r| format!("{:.0}", r["compute_ms"].as_f64().unwrap())).collect();
    assert!(compute.windows(2).all(|w| w[0] == w[1]), "{FROM}: the pages say every mode computes alike: {compute:?}");
    let slower = |label: &str| format!("{:.1}x", get(label, "total_ms") / get("nvswitch", "total_ms"));
    let ahead = |field: &str| percent((get("nvlink", field) - get("nvswitch", field)) / get("nvswitch", field));
    let quotes = vec![
        quote("README.md", FROM, format!("compute is {} ms of every mode's query", compute[0])),
        quote(
            "README.md",
            FROM,
            format!("NVSwitch reaches the first token in {} ms, the NVLink mesh in {}", ms("nvswitch", "ttft_ms"), ms("nvlink", "ttft_ms")),
        ),
        quote(
            "README.md",
            FROM,
            format!(
                "P2P and SHM take {} and {} as long over the whole query ({} and {} ms against {})",
                slower("p2p"),
                slower("shm"),
                ms("p2p", "total_ms"),
                ms("shm", "total_ms"),
                ms("nvswitch", "total_ms")
            ),
        ),
        quote("docs/guide.md", FROM, format!("Compute is {} ms of the {}", compute[0], ms("nvswitch", "total_ms"))),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "Here that is {} ms; at the per-direction rate {} ms. The simulation says {} ms",
                ms("nvswitch", "naive_comm_ms"),
                ms("nvswitch", "naive_comm_ms_per_direction"),
                ms("nvswitch", "comm_ms")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "run at {} GB/s bus bandwidth (NVLS, {} of the GPUs' links)",
                ms("nvswitch", "prefill_busbw_gbps"),
                percent(get("nvswitch", "prefill_gpu_link_util"))
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!("NVSwitch is fastest to the first token (by {}) and over the query (by {})", ahead("ttft_ms"), ahead("total_ms")),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!("P2P and SHM over PCIe Gen4 are {} and {} slower over the whole query", slower("p2p"), slower("shm")),
        ),
        quote("docs/guide.md", FROM, format!("P2P is limited by the switch uplinks ({} busy)", percent(get("p2p", "busiest_link_util")))),
        quote(
            "docs/guide.md",
            FROM,
            format!("Its prefill communication is {:.0}x NVSwitch's", get("shm", "prefill_comm_ms") / get("nvswitch", "prefill_comm_ms")),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "the NVLink mesh is the cheapest per token ({:.1} $/M against NVSwitch's {:.1}: the same speed within {} without switch chips), SHM the dearest ({:.1} $/M)",
                get("nvlink", "usd_per_million_tokens"),
                get("nvswitch", "usd_per_million_tokens"),
                ahead("total_ms"),
                get("shm", "usd_per_million_tokens")
            ),
        ),
    ];
    check(&quotes);
}

/// The names of a JSON object's fields, and of the objects in its arrays.
fn keys(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                out.push(key.clone());
                keys(inner, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| keys(item, out)),
        _ => {}
    }
}

#[test]
fn readme_reference_lists_every_output_column() {
    let inputs = crate::common::Inputs::new("readme-columns");
    let storage = inputs.file(
        "storage.toml",
        "model = \"llama-3.1-8b\"\ntp = 2\ntopology = \"hgx-h200\"\ngpus = 2\n[query]\nprompt = 1024\noutput = 4\nbatch = 1\n\
         [storage]\ndrives = 2\npaths = [\"gds\", \"bounce\"]\nload = \"shard\"\nsweep = [2]\nkv_offload = \"drive\"\n\
         [[mode]]\ntransport = \"nvswitch\"\n",
    );
    let out = inputs.0.join("out");
    let mut columns = Vec::new();
    for args in [
        vec!["run", "--format", "json", "--out", out.to_str().unwrap()],
        vec!["run", &storage, "--format", "json", "--out", out.to_str().unwrap()],
        vec!["collective", "--topology", "hgx-h200", "--sizes", "1MiB", "--format", "json"],
        vec!["diff", "configs/sweeps/base/h20-pcie.toml", "--set", "topology.pcie_generation=gen5", "--format", "json"],
    ] {
        keys(&icsim_json(&args)["results"], &mut columns);
    }
    // A sweep's own columns: those of its results that a run has not, but
    // for its axes (dotted keys, listed in the reference as "one per axis").
    for shipped in ["plots/sweeps/machines/results.csv", "plots/sweeps/serve-nvswitch-or-pcie/results.csv"] {
        columns.extend(csv(shipped)[0].keys().filter(|k| !k.contains('.')).cloned());
    }
    let reference = page("docs/reference.md");
    let mut missing: Vec<String> = columns
        .into_iter()
        .map(|c| c.replace("_gds_", "_<path>_").replace("_bounce_", "_<path>_"))
        .map(|c| if c.ends_with("_used") { "<name>_used".to_string() } else { c })
        .filter(|c| !reference.contains(&format!("`{c}`")))
        .collect();
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "docs/reference.md, Output columns, does not list: {missing:?}");
}

#[test]
fn readme_trust_table_quotes_the_validation_page() {
    let readme = page("README.md");
    let validation = page("docs/validation.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let section = readme.split("## How far to trust it").nth(1).expect("README.md has `## How far to trust it`");
    let section = section.split("\n## ").next().unwrap_or_default();
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| what") && !l.starts_with("| ---")).collect();
    assert_eq!(rows.len(), 6, "README.md: the trust table has six lines");
    for row in rows {
        let figure = row.split(" | ").nth(1).unwrap_or_default().trim();
        assert!(validation.contains(figure), "README.md quotes `{figure}`, which docs/validation.md does not say");
    }
}

#[test]
fn readme_figures_of_the_gds_experiment_match_its_run() {
    const FROM: &str = "icsim run configs/gds-model-load.toml (its tables and results.json)";
    let out = std::env::temp_dir().join(format!("icsim-readme-gds-{}", std::process::id()));
    let output = crate::common::icsim(&["run", "configs/gds-model-load.toml", "--out", out.to_str().unwrap()]);
    let printed = crate::common::succeeded(&output);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let mode = |label: &str| json["results"].as_array().unwrap().iter().find(|r| r["label"] == label).unwrap().clone();
    let get = |label: &str, field: &str| mode(label)[field].as_f64().unwrap_or_else(|| panic!("{FROM}: no {field} in {label}"));
    // The drive-count table: label, path, transport, drives, s, gbps, then
    // what bound it (words) and the busiest link's use.
    let table: Vec<Vec<&str>> = printed
        .split("load time against the drive count")
        .nth(1)
        .unwrap_or_else(|| panic!("{FROM}: no drive-count table"))
        .lines()
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let point = |label: &str, path: &str, drives: &str| -> (f64, f64, f64) {
        let row = table
            .iter()
            .find(|r| r[0] == label && r[1] == path && r[3] == drives)
            .unwrap_or_else(|| panic!("{FROM}: no drive-count row {label} {path} {drives}"));
        (row[4].parse().unwrap(), row[5].parse().unwrap(), row[row.len() - 1].parse().unwrap())
    };
    let (gds32, bounce16, bounce32) =
        (point("nvswitch", "gds", "32"), point("nvswitch", "bounce", "16"), point("nvswitch", "bounce", "32"));
    let (shm_bounce16, shm_gds32) = (point("shm", "bounce", "16"), point("shm", "gds", "32"));
    assert_eq!(format!("{:.2}", bounce16.0), format!("{:.2}", bounce32.0), "{FROM}: the guide says the bounce path stops from 16 drives");
    let quotes = vec![
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "({:.2} s on the HGX board); the bounce path pays in CPU ({:.2} cores against {:.2}) and host memory ({:.0} GB/s",
                get("nvswitch", "load_gds_s"),
                get("nvswitch", "load_bounce_cpu_cores"),
                get("nvswitch", "load_gds_cpu_cores"),
                get("nvswitch", "load_bounce_host_memory_gbps")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "({:.2} s, {:.0} GB/s), while the bounce path stops at {:.2} s from 16 drives and at 32: its reads up and copies down the switch uplinks ({} busy)",
                gds32.0,
                gds32.1,
                bounce16.0,
                percent(bounce32.2)
            ),
        ),
        quote("docs/guide.md", FROM, format!("drives ({:.2} s, {:.0} GB/s: two GPUs a Gen4 x16 uplink)", shm_bounce16.0, shm_bounce16.1)),
        quote("docs/guide.md", FROM, format!("links at 32 ({:.2} s, {:.0} GB/s)", shm_gds32.0, shm_gds32.1)),
        quote("docs/guide.md", FROM, format!("the slower link's raw rate ({:.2} GB/s)", point("shm", "gds", "1").1)),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "loads Llama-3.1-70B ({:.1} GB; a TP=8 shard {:.1} GB)",
                icsim::workload::storage::weight_bytes(&icsim::config::llm::LlmModel::load("llama-3.1-70b").unwrap()).0 as f64 / 1e9,
                get("nvswitch", "load_gb_per_gpu")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "host memory ({:.0} GB/s, {} of both sockets' memory buses)",
                get("nvswitch", "load_bounce_host_memory_gbps"),
                share_in_words(get("nvswitch", "load_bounce_host_memory_gbps") / (2.0 * link_gbps("hgx-h200", "cpu0", "mem0")))
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "({:.1} MB of KV cache a GPU for the 8192-token prompt, written while the {} decode steps it overlaps run)",
                1000.0 * get("shm", "kv_offload_gb_per_gpu"),
                get("shm", "kv_gds_decode_steps")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "lose {:.1}% (GDS) and {:.0}% (bounce)",
                100.0 * get("shm", "kv_gds_decode_slowdown"),
                100.0 * get("shm", "kv_bounce_decode_slowdown")
            ),
        ),
    ];
    check(&quotes);
}

/// docs/serving.md's example service: Llama-3.1-70B, 2000 requests of
/// log-normal lengths, objectives of 2 s to the first token and 50 ms a token.
const SERVED_EXAMPLE: &str =
    "--model llama-3.1-70b --requests 2000 --prompt lognormal:2048,1 --output lognormal:256,1 --slo-ttft 2s --slo-tpot 50ms";

/// Runs `icsim serve --json` with `args` (split at spaces); reads its
/// numbers by section and field.
fn served(args: &str) -> impl Fn(&str, &str) -> f64 + use<> {
    let all: Vec<&str> = ["serve", "--json"].into_iter().chain(args.split_whitespace()).collect();
    let run = icsim_json(&all);
    let args = args.to_string();
    move |section, field| run[section][field].as_f64().unwrap_or_else(|| panic!("icsim serve {args} --json: no {section}.{field}"))
}

#[test]
fn readme_serving_load_and_sweep_prose_match_their_results() {
    const RATES: &str = "icsim serve --json at 10 requests a second (docs/serving.md's example)";
    let all: Vec<String> = format!("serve --json {SERVED_EXAMPLE} --tp 8 --rate 10").split_whitespace().map(String::from).collect();
    let run = icsim_json(&all.iter().map(String::as_str).collect::<Vec<_>>());
    let get = |section: &str, field: &str| run[section][field].as_f64().unwrap_or_else(|| panic!("{RATES}: no {section}.{field}"));
    let running = run["timeline"].as_array().unwrap().iter().map(|w| w["running_peak"].as_u64().unwrap()).max().unwrap();
    let (knee, past) = knee_of_the_shown_rates();
    let mut quotes = vec![
        quote(
            "docs/serving.md",
            RATES,
            format!(
                "at 10 a second the service serves {:.1} and the p99 request waits {:.1} s for its first token",
                get("throughput", "requests_per_s"),
                get("ttft", "p99_ms") / 1000.0
            ),
        ),
        quote(
            "docs/serving.md",
            RATES,
            format!(
                "up to {running} sequences run at once (`vllm serve` lets {} on this GPU), every iteration grows with them and the median token takes {:.0} ms",
                get("setup", "max_num_seqs"),
                get("tpot", "p50_ms")
            ),
        ),
        quote(
            "docs/serving.md",
            "the rates table docs/serving.md shows",
            format!("here the service takes {knee} requests a second and not {past}"),
        ),
        // The example's KV cache does not depend on the rate.
        quote(
            "docs/serving.md",
            RATES,
            format!(
                "KV cache: {} blocks of {} tokens ({:.1} GB a GPU)",
                get("setup", "kv_blocks"),
                get("setup", "block_size"),
                get("setup", "kv_gb_per_gpu")
            ),
        ),
    ];
    const FROM: &str = "plots/sweeps/serve-nvswitch-or-pcie/results.csv";
    let rows = csv(FROM);
    let at =
        |label: &str, split: &str, rate: &str| row(&rows, FROM, &[("label", label), ("serve.split", split), ("serve.rate", rate)]).clone();
    let (nvswitch, past, light, two, three) = (
        at("nvswitch", "none", "9"),
        at("nvswitch", "none", "10"),
        at("p2p", "none", "0.25"),
        at("p2p", "none", "2"),
        at("p2p", "none", "3"),
    );
    let (split_knee, split_full, pcie_split_knee, pcie_split_full) =
        (at("nvswitch", "4+4", "4"), at("nvswitch", "4+4", "8"), at("p2p", "4+4", "0.5"), at("p2p", "4+4", "12"));
    let best = row(&rows, FROM, &[("rank", "1")]);
    assert_eq!(best["point"], nvswitch["point"], "{FROM}: the page says NVSwitch at TP=8, 9 a second, is the best of the four");
    let rates: BTreeSet<u64> = rows.iter().map(|r| (num(r, "serve.rate") * 100.0).round() as u64).collect();
    let (lowest, highest) = (*rates.first().unwrap() as f64 / 100.0, *rates.last().unwrap() as f64 / 100.0);
    let meeting = rows.iter().filter(|r| r["meets_goal"] == "true").count();
    for page in ["docs/serving.md", "docs/guide.md"] {
        quotes.push(quote(page, FROM, format!("at {} rates", rates.len())));
    }
    quotes.push(quote("docs/serving.md", FROM, format!("at {} rates from {lowest} to {highest} a second", rates.len())));
    quotes.push(quote("docs/serving.md", FROM, format!("{meeting} of {} points meet it", rows.len())));
    for text in [
        format!(
            "9 requests a second within a 2 s p99 TTFT (p99 {:.0} ms; at 10 a second {:.0} ms), {:.3} requests a second per $ an hour",
            num(&nvswitch, "ttft_p99_ms"),
            num(&past, "ttft_p99_ms"),
            num(&nvswitch, "rate_per_usd_hour")
        ),
        format!("4 a second (p99 {:.0} ms), {:.3} per $ an hour", num(&split_knee, "ttft_p99_ms"), num(&split_knee, "rate_per_usd_hour")),
        format!(
            "TPOT {:.2} ms at its knee against {:.2} ms for TP=8 at 9 a second",
            num(&split_knee, "tpot_p50_ms"),
            num(&nvswitch, "tpot_p50_ms")
        ),
        format!("from 8 a second it serves no more than {:.2} whatever it is offered", num(&split_full, "requests_per_s")),
        format!("Its p99 TTFT is {:.0} ms already at 0.25 requests a", num(&light, "ttft_p99_ms")),
        format!("when {} of every iteration is allreduces", percent(num(&light, "comm_share"))),
        format!(
            "At 2 a second its p99 is {:.0} ms, and from 3 a second it serves no more than {:.2} whatever it is",
            num(&two, "ttft_p99_ms"),
            num(&three, "requests_per_s")
        ),
        format!(
            "up to 0.5 a second (p99 {:.0} ms; {:.3} requests a second per $ an hour) and serves up to {:.2} a second",
            num(&pcie_split_knee, "ttft_p99_ms"),
            num(&pcie_split_knee, "rate_per_usd_hour"),
            num(&pcie_split_full, "requests_per_s")
        ),
        format!("cost {:.2} $ an hour against the HGX's {:.2}", num(&light, "usd_per_hour"), num(&nvswitch, "usd_per_hour")),
        format!("worth {:.0} times the PCIe box's best", num(&nvswitch, "rate_per_usd_hour") / num(&pcie_split_knee, "rate_per_usd_hour")),
    ] {
        quotes.push(quote("docs/serving.md", FROM, text));
    }
    check(&quotes);
}

#[test]
fn readme_serving_concurrency_prose_matches_its_sweep() {
    const FROM: &str = "plots/sweeps/serve-concurrency/results.csv";
    let rows = csv(FROM);
    let at = |topology: &str, cap: &str| row(&rows, FROM, &[("topology", topology), ("serve.max_concurrency", cap)]).clone();
    let (hgx, hgx_full, pcie, pcie_over) =
        (at("hgx-h200", "64"), at("hgx-h200", "256"), at("pcie-gen5-8gpu", "16"), at("pcie-gen5-8gpu", "64"));
    // What the PCIe box's best token costs against the HGX's, as both pages say it.
    let dearer = num(&pcie, "usd_per_million_output_tokens") / num(&hgx, "usd_per_million_output_tokens");
    let texts = [
        format!(
            "64 in flight keep the p50 TPOT at {:.2} ms ({:.2} requests a second, ${:.2} a million output tokens) and 256 take it to {:.2} ms",
            num(&hgx, "tpot_p50_ms"),
            num(&hgx, "requests_per_s"),
            num(&hgx, "usd_per_million_output_tokens"),
            num(&hgx_full, "tpot_p50_ms")
        ),
        format!(
            "16 in flight already take it to {:.2} ms ({:.2} requests a second, ${:.2} a million) and 64 to {:.2} ms, with {} of every iteration spent in allreduces",
            num(&pcie, "tpot_p50_ms"),
            num(&pcie, "requests_per_s"),
            num(&pcie, "usd_per_million_output_tokens"),
            num(&pcie_over, "tpot_p50_ms"),
            percent(num(&pcie_over, "comm_share"))
        ),
        format!("best, at 16, costs {dearer:.1} times as much"),
    ];
    let pcie_best = rows
        .iter()
        .filter(|r| r["topology"] == "pcie-gen5-8gpu" && r["meets_goal"] == "true")
        .min_by(|a, b| num(a, "usd_per_million_output_tokens").total_cmp(&num(b, "usd_per_million_output_tokens")));
    assert_eq!(pcie_best.map(|r| r["point"].clone()), Some(pcie["point"].clone()), "{FROM}: the page says the PCIe box's best is at 16");
    assert_eq!(row(&rows, FROM, &[("rank", "1")])["point"], hgx["point"], "{FROM}: the cheapest token within 50 ms is the HGX's at 64");
    let mut quotes: Vec<Quote> = texts.into_iter().map(|text| quote("docs/serving.md", FROM, text)).collect();
    quotes.push(quote("README.md", FROM, format!("the PCIe box's token costs {dearer:.1} times as much")));
    check(&quotes);
}

/// The knee docs/serving.md's `--rates` table shows (readme.rs holds the
/// table to its run, row by row) and the rate of the list after it.
fn knee_of_the_shown_rates() -> (String, String) {
    let page = page("docs/serving.md");
    let table = page.split("latency (ms, per request) and throughput against load:").nth(1).expect("docs/serving.md shows a --rates table");
    let mut lines = table.lines().skip(1).take_while(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("the --rates table has no {name}"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    let at = rows.iter().position(|r| r[column("knee")] == "true").expect("the --rates table marks a knee");
    let rate = |r: &Vec<&str>| format!("{}", r[column("rate")].parse::<f64>().unwrap());
    (rate(&rows[at]), rows.get(at + 1).map(rate).unwrap_or_default())
}

#[test]
fn readme_serving_interconnect_and_preemption_tables_match_their_runs() {
    const FROM: &str = "icsim serve --json (docs/serving.md's interconnect and preemption tables)";
    let mut quotes = Vec::new();
    let mut pcie_shares = Vec::new();
    for (machine, name, transport, shown) in [
        ("hgx-h200", "hgx-h200", "auto", "nvswitch (auto)"),
        ("pcie-gen5-8gpu --gpu h200-nvl", "pcie-gen5-8gpu, h200-nvl", "p2p", "p2p"),
        ("pcie-gen5-8gpu --gpu h200-nvl", "pcie-gen5-8gpu, h200-nvl", "shm", "shm"),
    ] {
        let get = served(&format!("{SERVED_EXAMPLE} --tp 8 -t {machine} --transport {transport} --rate 4"));
        if transport != "auto" {
            pcie_shares.push(get("iterations", "comm_share"));
        }
        quotes.push(quote(
            "docs/serving.md",
            FROM,
            format!(
                "| {name} | {shown} | {:.0} | {:.1} | {:.2} | {:.3} |",
                get("ttft", "p50_ms"),
                get("tpot", "p50_ms"),
                get("throughput", "requests_per_s"),
                get("iterations", "comm_share")
            ),
        ));
    }
    // A chunk of the engine's token budget, as one prefill of `icsim llm`.
    let chunk = icsim_json(&[
        "llm",
        "--model",
        "llama-3.1-70b",
        "--prompt",
        "8192",
        "--output",
        "1",
        "--tp",
        "8",
        "-t",
        "pcie-gen5-8gpu",
        "--gpu",
        "h200-nvl",
        "--transport",
        "p2p",
        "--format",
        "json",
    ]);
    let prefill = &chunk["results"][0];
    quotes.push(quote(
        "docs/serving.md",
        FROM,
        format!(
            "spends {} of every iteration in its allreduces (each 8192-token chunk's allreduce is {}, {} of them a pass)",
            span(pcie_shares, 0),
            prefill["prefill_allreduce"].as_str().unwrap().replace("MiB", " MiB"),
            prefill["prefill_allreduces"]
        ),
    ));
    for preemption in ["recompute", "swap"] {
        let get = served(&format!(
            "--model llama-3.1-70b --tp 2 -t pcie-gen4-8gpu --gpu h100-pcie --transport p2p --rate 0.7 --requests 500 --prompt 1024 --output 128 --preemption {preemption}"
        ));
        let swap_share = get("kv_cache", "swap_share");
        quotes.push(quote(
            "docs/serving.md",
            FROM,
            format!("leaves {} blocks ({:.1} GB a GPU) beside the", get("setup", "kv_blocks"), get("setup", "kv_gb_per_gpu")),
        ));
        quotes.push(quote(
            "docs/serving.md",
            FROM,
            format!(
                "| {preemption} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} |",
                get("ttft", "p50_ms"),
                get("ttft", "p99_ms"),
                get("tpot", "p50_ms"),
                get("tpot", "p99_ms"),
                get("kv_cache", "preemptions"),
                get("kv_cache", "recomputed_tokens"),
                get("kv_cache", "swapped_blocks"),
                if swap_share == 0.0 { "0".to_string() } else { format!("{swap_share:.4}") },
            ),
        ));
    }
    check(&quotes);
}

#[test]
fn readme_serving_split_table_matches_its_runs() {
    const FROM: &str = "icsim serve --json --prefill-tp 4 --decode-tp 4 at 1 request a second (docs/serving.md's split table)";
    let mut quotes: Vec<Quote> = [("hgx-h200", "hgx-h200"), ("pcie-gen5-8gpu --gpu h200-nvl", "pcie-gen5-8gpu, h200-nvl")]
        .iter()
        .map(|(machine, name)| {
            let args: Vec<String> = format!("serve --json {SERVED_EXAMPLE} --prefill-tp 4 --decode-tp 4 --rate 1 -t {machine}")
                .split_whitespace()
                .map(String::from)
                .collect();
            let run = icsim_json(&args.iter().map(String::as_str).collect::<Vec<_>>());
            let (moves, get) = (&run["split"]["kv_move"], |section: &str, field: &str| run[section][field].as_f64().unwrap());
            let share = |field: &str| moves[field].as_f64().unwrap();
            let text = format!(
                "| {name} | {} | {:.0} | {:.0} | {:.1} | {:.3} | {:.2} | {:.4} | {:.4} | {} |",
                moves["transport"].as_str().unwrap(),
                get("ttft", "p50_ms"),
                get("ttft", "p99_ms"),
                get("tpot", "p50_ms"),
                moves["move_ms"]["p50_ms"].as_f64().unwrap(),
                moves["move_ms"]["p99_ms"].as_f64().unwrap(),
                share("ttft_share_p50"),
                share("ttft_share_p99"),
                moves["busiest_link"].as_str().unwrap(),
            );
            quote("docs/serving.md", FROM, text)
        })
        .collect();
    // Every KV head once at both TPs: the bytes of a token's keys and values.
    let per_token = icsim::config::llm::LlmModel::load("llama-3.1-70b").unwrap().kv_cache_bytes_per_gpu(1, 1, 1);
    quotes.push(quote(
        "docs/serving.md",
        "models/llm/llama-3.1-70b.toml",
        format!("every head once, {} KiB a token for 70B", per_token / 1024),
    ));
    check(&quotes);
}

#[test]
fn readme_guide_reading_of_the_default_run_matches_it() {
    const FROM: &str = "icsim run --format json (configs/default.toml) and models/llm/llama-3.1-70b.toml";
    let rows = default_run();
    let (mode, get) = (|label: &str| mode_of(&rows, label), |label: &str, field: &str| number_of(&rows, label, field));
    let (nvswitch, shm) = (mode("nvswitch"), mode("shm"));
    // The layers' allreduces: two a layer of tokens x hidden, every token of the query.
    let llm = icsim::config::llm::LlmModel::load("llama-3.1-70b").unwrap();
    let tokens = nvswitch["prompt"].as_u64().unwrap() + nvswitch["output"].as_u64().unwrap();
    let layers = (llm.allreduces_per_pass() * llm.allreduce_bytes(tokens).0) as f64;
    let tp = get("nvswitch", "tp");
    let ring = 2.0 * (tp - 1.0) / tp;
    let rest = get("nvswitch", "tp_bytes_per_gpu") - ring * layers;
    let decode_us = [get("nvswitch", "decode_allreduce_us"), get("nvlink", "decode_allreduce_us")];
    let (low, high) = crate::common::extremes(decode_us);
    assert!(nvswitch["decode_algo"].as_str().unwrap().starts_with("oneshot"), "{FROM}: the guide says decode runs the one-shot kernel");
    assert!(shm["busiest_link"].as_str().unwrap().starts_with("pcie-sw0 -> cpu0"), "{FROM}: the guide says SHM loads the uplinks");
    // The mesh's rings: laid by icsim's ring search for the prefill's allreduce.
    let (topo, model) = crate::common::preset("h20-nvlink-mesh", None, &[]);
    let request = icsim::collective::Request::new(
        icsim::collective::Op::AllReduce,
        icsim::units::Bytes(get("nvlink", "prefill_allreduce_bytes") as u64),
        topo.gpus().to_vec(),
        icsim::transport::Mode::Nvlink,
    );
    let plan = icsim::collective::Plan::new(&topo, &model, request).unwrap();
    let rings = plan.ring_links().len() / topo.gpus().len();
    let quotes = vec![
        quote("docs/guide.md", FROM, format!("so nothing waits for the host (`launch_wait_ms` {})", get("nvswitch", "launch_wait_ms"))),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "Each GPU sends 2(n-1)/n = {ring:.2} x {:.2} GB = {:.2} GB for the layers' allreduces",
                layers / 1e9,
                ring * layers / 1e9
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "and {:.2} GB more for the embedding's allreduce (one a pass) and the gather of the logits (one a pass): {:.2} GB",
                rest / 1e9,
                get("nvswitch", "tp_gb_per_gpu")
            ),
        ),
        quote("docs/guide.md", FROM, format!("At TP=2 the layers' share is 1 x {:.2} GB", layers / 1e9)),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "the {} prefill allreduces of {} run at",
                nvswitch["prefill_allreduces"],
                nvswitch["prefill_allreduce"].as_str().unwrap().replace("MiB", " MiB")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "the {} decode allreduces of {} are latency, not bandwidth: {:.0} µs each even with the one-shot kernel",
                thousands(nvswitch["decode_allreduces"].as_u64().unwrap()),
                nvswitch["decode_allreduce"].as_str().unwrap().replace("KiB", " KiB"),
                get("nvswitch", "decode_allreduce_us")
            ),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!("NCCL's ring search finds {rings} link-disjoint rings and runs {} channels on them", plan.channels),
        ),
        quote(
            "docs/guide.md",
            FROM,
            format!(
                "a prefill allreduce uses {} of the GPUs' links against {} through the switch",
                percent(get("nvlink", "prefill_gpu_link_util")),
                percent(get("nvswitch", "prefill_gpu_link_util"))
            ),
        ),
        quote("docs/guide.md", FROM, format!("Decode allreduces are a tie ({low:.1}-{high:.1} µs)")),
        quote("docs/guide.md", FROM, format!("loads the same uplinks ({} busy)", percent(get("shm", "busiest_link_util")))),
    ];
    check(&quotes);
}

/// `icsim diff ... --format json`'s first mode pair, and a lookup of its
/// phases and rates by name.
fn diffed(args: &[&str]) -> serde_json::Value {
    let all: Vec<&str> = ["diff"].into_iter().chain(args.iter().copied()).chain(["--format", "json"]).collect();
    icsim_json(&all)["results"][0].clone()
}

fn entry<'a>(pair: &'a serde_json::Value, list: &str, key: &str, name: &str) -> &'a serde_json::Value {
    pair[list].as_array().unwrap().iter().find(|e| e[key] == name).unwrap_or_else(|| panic!("no {name} in {list}"))
}

#[test]
fn readme_diff_prose_matches_the_diffs() {
    const GEN5: &str = "icsim diff configs/sweeps/base/h20-pcie.toml --set topology.pcie_generation=gen5 --format json (its shm pair)";
    const MESH: &str =
        "icsim diff configs/sweeps/base/h20-nvswitch.toml --set topology=h20-nvlink-mesh --set transport=nvlink --format json";
    let all = icsim_json(&["diff", "configs/sweeps/base/h20-pcie.toml", "--set", "topology.pcie_generation=gen5", "--format", "json"]);
    let shm = all["results"].as_array().unwrap().iter().find(|p| p["before"] == "shm").expect("the shm pair").clone();
    let util = |pair: &serde_json::Value, side: &str| pair[format!("bottleneck_{side}_util")].as_f64().unwrap();
    let after = shm["bottleneck_after"].as_str().unwrap();
    assert!(after.contains("memory bus"), "{GEN5}: the guide says the memory bus binds after");
    // The guide's shown output: readme.rs compares only these lines' first words.
    let mut quotes = vec![
        quote(
            "docs/guide.md",
            GEN5,
            format!("bottleneck before: {} ({:.1}% busy)", shm["bottleneck_before"].as_str().unwrap(), 100.0 * util(&shm, "before")),
        ),
        quote("docs/guide.md", GEN5, format!("bottleneck after: {after} ({:.1}% busy): the bottleneck moved", 100.0 * util(&shm, "after"))),
    ];
    quotes.push(quote("docs/guide.md", GEN5, format!("make the memory bus the busiest link ({})", percent(util(&shm, "after")))));
    quotes.push(quote(
        "docs/guide.md",
        GEN5,
        format!(
            "Decode allreduces are latency-bound and barely move ({})",
            percent1(entry(&shm, "phases", "phase", "decode")["saved_share"].as_f64().unwrap())
        ),
    ));
    let mesh = diffed(&["configs/sweeps/base/h20-nvswitch.toml", "--set", "topology=h20-nvlink-mesh", "--set", "transport=nvlink"]);
    let cost = entry(&mesh, "rates", "metric", "usd_per_million_tokens");
    let (before, after) = (cost["before"].as_f64().unwrap(), cost["after"].as_f64().unwrap());
    quotes.push(quote(
        "docs/guide.md",
        MESH,
        format!(
            "the mesh takes {} longer to the first token, and the bottleneck moves from `{}` ({} busy) to a pair link `{}` ({}); per generated token the mesh is {} cheaper",
            percent1(-entry(&mesh, "phases", "phase", "prefill (time to first token)")["saved_share"].as_f64().unwrap()),
            mesh["bottleneck_before"].as_str().unwrap(),
            percent(util(&mesh, "before")),
            mesh["bottleneck_after"].as_str().unwrap(),
            percent(util(&mesh, "after")),
            percent((before - after) / before)
        ),
    ));
    check(&quotes);
}

/// A preset's link rate per direction (a memory bus: in total), GB/s, as
/// `icsim topo show --format json` prints it.
/// `preset` may carry flags (`pcie-gen5-8gpu --host epyc-genoa`).
fn link_gbps(preset: &str, from: &str, to: &str) -> f64 {
    let args: Vec<&str> = ["topo", "show"].into_iter().chain(preset.split_whitespace()).chain(["--format", "json"]).collect();
    let topo = icsim_json(&args);
    let link = topo["links"].as_array().unwrap().iter().find(|l| l["from"] == from && l["to"] == to).cloned();
    link.unwrap_or_else(|| panic!("icsim topo show {preset}: no link {from} -> {to}"))["gbps"].as_f64().unwrap()
}

/// A share as the pages write it: `half` near one half, else a percentage.
fn share_in_words(share: f64) -> String {
    if (share * 10.0).round() == 5.0 { "half".to_string() } else { percent(share) }
}

#[test]
fn readme_guide_host_memory_figures_match_the_presets() {
    const FROM: &str = "icsim topo show hgx-h200 and pcie-gen4-8gpu --format json";
    // The bounce path's bytes cross a socket's memory bus twice; each socket has two switches.
    let (spr, epyc) = (link_gbps("hgx-h200", "cpu0", "mem0"), link_gbps("pcie-gen4-8gpu", "cpu0", "mem0"));
    let (memory, uplinks) = (spr / 2.0, 2.0 * link_gbps("hgx-h200", "pcie-sw0", "cpu0"));
    let quotes = vec![
        quote("docs/guide.md", FROM, format!("({spr:.0} GB/s for Sapphire Rapids, {epyc:.0} for EPYC Rome at the model's 75% efficiency)")),
        quote(
            "docs/guide.md",
            FROM,
            format!("only {} after the uplinks do ({uplinks:.1} against {memory:.1} GB/s a socket)", percent(memory / uplinks - 1.0)),
        ),
    ];
    check(&quotes);
}

#[test]
fn readme_guide_counts_the_points_of_the_shipped_sweeps() {
    const FROM: &str = "plots/sweeps/*/results.csv";
    let quotes: Vec<Quote> = ["nvlink-vs-tp", "pcie-vs-prompt", "vendor-tp2-batch", "machines", "serve-nvswitch-or-pcie"]
        .iter()
        .map(|name| {
            quote(
                "docs/guide.md",
                FROM,
                format!("| `configs/sweeps/{name}.toml` | {} |", csv(&format!("plots/sweeps/{name}/results.csv")).len()),
            )
        })
        .collect();
    check(&quotes);
}

#[test]
fn readme_calibration_run_shows_the_measurements_it_shipped() {
    const FROM: &str = "models/hardware/measurements/h200-device-1gpu/measurements.jsonl";
    let rows = page(FROM).lines().filter(|l| !l.trim().is_empty()).count();
    check(&[quote("docs/calibration.md", FROM, format!("wrote {rows} measurements to"))]);
}

#[test]
fn readme_serving_published_runs_match_their_shipped_predictions() {
    const FROM: &str = "models/hardware/measurements/public-serving/predicted-by-icsim.jsonl and predictions.md";
    let rows: Vec<serde_json::Value> = page("models/hardware/measurements/public-serving/predicted-by-icsim.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{FROM}: {e}")))
        .collect();
    // Error = predicted / measured - 1, where both are there.
    let error = |r: &serde_json::Value, key: &str| Some(r["predicted"][key].as_f64()? / r["measured"][key].as_f64()? - 1.0);
    let (out, tpot) = ("output_throughput", "tpot_median_ms");
    let measured = |key: &str| rows.iter().filter_map(|r| error(r, key)).collect::<Vec<f64>>();
    let (outs, tpots) = (measured(out), measured(tpot));
    assert!(outs.iter().all(|e| *e > 0.0) && tpots.iter().all(|e| *e < 0.0), "{FROM}: the page says icsim is optimistic on every run");
    assert!(rows.iter().all(|r| error(r, out).is_some() || error(r, tpot).is_some()), "{FROM}: a run measured neither");
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
    };
    // The groups the page names, each as its median absolute error of output throughput / p50 TPOT.
    let group = |name: &str, pick: &dyn Fn(&serde_json::Value) -> bool| {
        let of = |key: &str| median(rows.iter().filter(|r| pick(r)).filter_map(|r| error(r, key)).map(f64::abs).collect());
        (name.to_string(), of(out), of(tpot))
    };
    let source = |r: &serde_json::Value, s: &str| r["source"] == s;
    let groups = [
        group("vLLM 0.5.4", &|r| source(r, "lambda results_v0.5.4")),
        group("Lambda's later runs (probably vLLM 0.6.0 with ten scheduler steps)", &|r| source(r, "lambda results (2024-09-07)")),
        group("the SGLang team's vLLM 0.6.0 rows", &|r| source(r, "sglang benchmark_vllm_060") && r["engine"] == "vllm 0.6.0"),
        group("vLLM 0.8.3 on A100 at 1, 4 and 16 requests a second, the one V1 engine among them,", &|r| {
            source(r, "llm-k8s (A100 40GB)") && !r["run"].as_str().unwrap().ends_with("rate inf")
        }),
    ];
    let (low, high) = crate::common::extremes(groups.iter().map(|g| g.1));
    let named: Vec<String> = groups.iter().map(|(name, o, t)| format!("{name} **{} / {}**", percent(*o), percent(*t))).collect();
    // The sensitivity table's row for Lambda's later runs: 0 / 0.5 ms / 2 ms of host time.
    let predictions = page("models/hardware/measurements/public-serving/predictions.md");
    let later = predictions.lines().find(|l| l.starts_with("| lambda results (2024-09-07) | +")).expect("predictions.md's sensitivity row");
    let host: Vec<&str> = later.split(" | ").nth(1).unwrap().split(" / ").collect();
    let quotes = vec![
        quote("docs/serving.md", FROM, format!("holds {} published serving runs", rows.len())),
        quote("docs/serving.md", FROM, format!("Against {} published serving runs", rows.len())),
        quote("docs/serving.md", FROM, format!("by {:.0}-{} in output throughput in the median of each group", 100.0 * low, percent(high))),
        quote(
            "docs/serving.md",
            FROM,
            format!(
                "output throughput over-predicted in all {} rows that measured it, median TPOT short in all {}",
                outs.len(),
                tpots.len()
            ),
        ),
        quote("docs/serving.md", FROM, format!("output throughput / p50 TPOT: {}", named.join("; "))),
        quote("docs/serving.md", FROM, format!("brings Lambda's later runs from {} to {} in throughput", host[0], host[2])),
    ];
    check(&quotes);
}

#[test]
fn readme_guide_fastest_algorithms_and_socket_links_match_their_runs() {
    const FROM: &str = "icsim collective --topology hgx-h200 --algo oneshot,twoshot,ring --sizes 1KiB..64MiB:x4";
    // readme.rs compares only the first word of these lines of the shown output.
    let printed = crate::common::succeeded(&crate::common::icsim(&[
        "collective",
        "--topology",
        "hgx-h200",
        "--algo",
        "oneshot,twoshot,ring",
        "--sizes",
        "1KiB..64MiB:x4",
    ]));
    let fastest = printed.split("fastest by size:").nth(1).unwrap_or_else(|| panic!("{FROM}: no `fastest by size:`"));
    let mut quotes: Vec<Quote> = fastest
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .map(|l| quote("docs/guide.md", FROM, l))
        .collect();
    // The socket links, as `icsim topo show` gives them.
    const LINKS: &str = "icsim topo show --format json: cpu0 -> cpu1";
    let epyc = link_gbps("pcie-gen4-8gpu", "cpu0", "cpu1");
    quotes.push(quote("docs/guide.md", LINKS, format!("(four x16 xGMI links, {epyc:.0} GB/s each way)")));
    quotes.push(quote("docs/guide.md", LINKS, format!("(four xGMI links, {epyc:.0} GB/s each way)")));
    quotes.push(quote(
        "docs/guide.md",
        LINKS,
        format!(
            "xGMI-3 links at 32 Gb/s a lane, {:.0} GB/s each way; Sapphire Rapids: four UPI links at 16 GT/s, {:.0} GB/s)",
            link_gbps("pcie-gen5-8gpu --host epyc-genoa", "cpu0", "cpu1"),
            link_gbps("hgx-h200", "cpu0", "cpu1")
        ),
    ));
    assert!(quotes.len() > 3, "{FROM}: no sizes under `fastest by size:`");
    check(&quotes);
}

#[test]
fn readme_model_ring_search_channels_match_the_boards() {
    const FROM: &str = "icsim collective --topology hgx-h100 / hgx-h200 --algo ring --sizes 64MiB --format json";
    let channels: BTreeSet<u64> = ["hgx-h100", "hgx-h200"]
        .iter()
        .map(|board| {
            let run = icsim_json(&["collective", "--topology", board, "--algo", "ring", "--sizes", "64MiB", "--format", "json"]);
            run["results"][0]["channels"].as_u64().unwrap_or_else(|| panic!("{FROM}: no channels for {board}"))
        })
        .collect();
    assert_eq!(channels.len(), 1, "{FROM}: the page gives both boards one count: {channels:?}");
    check(&[quote("docs/model.md", FROM, format!("of NCCL's ring search ({} on an HGX H100/H200)", channels.first().unwrap()))]);
}
