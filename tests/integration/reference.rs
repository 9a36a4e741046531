//! docs/reference.md held to the code, both ways: every key that the raw
//! types of the experiment file (with its `[storage]`), the sweep file, the
//! cost file, the topology file, the hardware model file (every table of
//! it) and the LLM model file accept (read from their `Deserialize`,
//! `config::dotted::keys_of`), every `--set` key (`sweep::change::keys`),
//! every metric a goal may name (`sweep::goal`) and every column of `icsim
//! run`'s rows (the typed `ModeRow`, `Economics` and `StorageRow` of a
//! run with every storage part on) is documented; and every key or column
//! the page documents there still exists; and the columns `collective`,
//! `serve --rates` and `diff` print in JSON are documented, and no other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use icsim::config::dotted::keys_of;
use icsim::config::experiment::{RawExperiment, RawMode, RawQuery};
use icsim::config::hardware::{
    ComputeEfficiency, Contention, CtaModel, CtaRates, DirectModel, ElementAdds, GpuModel, HardwareModel, HostPlatform, KernelEfficiency,
    KernelStart, NcclArch, NcclModel, NvlinkGeneration, NvlsModel, PathCost, PcieGeneration, PcieSwitchChip, Protocol, ProtocolTriple,
    Protocols, Provenance, ShmModel, Skew, StackModel, TreeCorrection,
};
use icsim::config::llm::{Fusion, LlmModel};
use icsim::config::storage::{DriveModel, RawStorage, StorageModel};
use icsim::config::topology::{LinkFile, NodeFile, PolicyFile, TopologyFile};
use icsim::report::experiment::{ExperimentRow, StorageRow};
use icsim::report::record_of;
use icsim::sweep::axes::RawAxis;
use icsim::sweep::cost::{Bill, CostModel, Economics, RawComponent, RawCost};
use icsim::sweep::figures::{RawPlot, RawReference};
use icsim::sweep::goal::{METRICS, RawGoal, SERVICE_METRICS};
use icsim::sweep::serving::RawService;
use icsim::sweep::{RawSweep, change};
use icsim::workload::experiment::{Experiment, RunOptions, run};

use crate::common::icsim_json;
use crate::readme::page;

/// The text of the section under `heading` (a whole heading line), to the
/// next heading of its level or above.
fn section<'p>(page: &'p str, heading: &str) -> &'p str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = page.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("docs/reference.md has no `{heading}`"));
    let body = &page[start + heading.len() + 2..];
    let (mut at, mut fenced) = (0, false);
    for line in body.lines() {
        fenced ^= line.starts_with("```");
        let heading = line.chars().take_while(|c| *c == '#').count();
        if !fenced && (1..=level).contains(&heading) && line[heading..].starts_with(' ') {
            break;
        }
        at += line.len() + 1;
    }
    &body[..at.min(body.len())]
}

/// The lines of a section's code blocks.
fn code(section: &str) -> Vec<&str> {
    let mut inside = false;
    let mut lines = Vec::new();
    for line in section.lines() {
        if line.starts_with("```") {
            inside = !inside;
        } else if inside {
            lines.push(line);
        }
    }
    lines
}

/// What a TOML block documents under `table` ("" for the top level;
/// `[[axis]]` is "axis", `[cost.gpu.h20]` "cost.gpu.h20"): the first key of
/// each line (`key =` or `# key =`), and every word of those lines (a key
/// named in a comment counts as documented).
fn toml_table(lines: &[&str], table: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut keys, mut words) = (BTreeSet::new(), BTreeSet::new());
    let mut current = String::new();
    for line in lines {
        let bare = line.trim_start_matches([' ', '#']).trim();
        if bare.starts_with('[') && !bare.starts_with("[[1") {
            current = bare.split(']').next().unwrap_or_default().trim_start_matches('[').to_string();
            // A table header documents its key in the table above it.
            let below = if table.is_empty() { Some(current.as_str()) } else { current.strip_prefix(&format!("{table}.")) };
            if let Some(below) = below {
                words.insert(below.split('.').next().unwrap_or_default().to_string());
            }
        }
        if current != table {
            continue;
        }
        words.extend(line.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(String::from));
        if let Some((key, _)) = bare.split_once(" = ")
            && !key.contains(' ')
            && !bare.starts_with('[')
        {
            keys.insert(key.to_string());
        }
    }
    (keys, words)
}

/// The keys the rows of a section's tables name, by the table they belong
/// to: a row's first cell names its tables in brackets (`[gpu.<model>]`,
/// `[[node]]`; none: the top level), then its keys (`usd`, `watts`).
fn rows_by_table(section: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let names = backticked(line.split(" | ").next().unwrap_or_default());
        let (headers, keys): (BTreeSet<String>, BTreeSet<String>) = names.into_iter().partition(|name| name.starts_with('['));
        let headers = if headers.is_empty() { BTreeSet::from([String::new()]) } else { headers };
        for header in headers {
            tables.entry(header.trim_matches(['[', ']']).to_string()).or_default().extend(keys.iter().cloned());
        }
    }
    tables
}

/// The backticked names of the first cell of each row of a section's
/// tables (`[gpu.<model>]` `usd`, `watts` gives usd and watts; a table
/// header in brackets is left out).
fn first_cells(section: &str) -> BTreeSet<String> {
    rows_by_table(section).into_values().flatten().collect()
}

/// What a section's tables document of a file, by table: the keys of its
/// rows, and the key each table header makes in every table above it
/// (`[gpu.<model>.compute]` documents `gpu` at the top level and `compute`
/// in `gpu.<model>`). A name in angle brackets (`<model>`) stands for the
/// keys of a map, which are data, and is left out.
fn documented_tables(section: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut tables = rows_by_table(section);
    for header in tables.keys().filter(|header| !header.is_empty()).cloned().collect::<Vec<_>>() {
        let mut above = String::new();
        for part in header.split('.') {
            if !part.starts_with('<') {
                tables.entry(above.clone()).or_default().insert(part.to_string());
            }
            above = if above.is_empty() { part.to_string() } else { format!("{above}.{part}") };
        }
    }
    for keys in tables.values_mut() {
        keys.retain(|key| !key.starts_with('<'));
    }
    tables
}

/// Problems of a file whose keys a section documents as tables, against the
/// `code`'s tables (as the section names them) and the keys each accepts:
/// a key undocumented or stale, a table the code does not read, and a key
/// that a file shipped in `shipped` writes where no table of `code` has it
/// (so that `code` names the tables as the files have them; a name in
/// angle brackets matches any key, a table of no keys is a map of data).
fn compare_tables(what: &str, section: &str, shipped: &str, code: &[(&str, BTreeSet<String>)], problems: &mut Vec<String>) {
    let documented = documented_tables(section);
    for (table, keys) in code {
        let listed = documented.get(*table).cloned().unwrap_or_default();
        compare(&format!("{what}, [{table}]"), keys, &listed, &listed, problems);
    }
    for table in documented.keys().filter(|table| !code.iter().any(|(known, _)| known == table)) {
        problems.push(format!("{what}: `[{table}]` is documented but the code reads no such table"));
    }
    let matches = |pattern: &str, table: &str| {
        pattern.split('.').count() == table.split('.').count()
            && pattern.split('.').zip(table.split('.')).all(|(p, t)| p == t || p.starts_with('<'))
    };
    for path in
        std::fs::read_dir(shipped).unwrap().map(|entry| entry.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "toml"))
    {
        let file: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (table, key) in leaf_keys(&file, "") {
            let known = code.iter().any(|(pattern, keys)| matches(pattern, &table) && (keys.is_empty() || keys.contains(&key)));
            if !known {
                problems.push(format!("{what}: {} writes `{key}` in `[{table}]`, which no table the test names has", path.display()));
            }
        }
    }
}

/// Every key of `table` (at `path`, dotted) and of the tables and lists of
/// tables in it that holds a value, with the path of its table.
fn leaf_keys(table: &toml::Table, path: &str) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for (key, value) in table {
        let below = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        match value {
            toml::Value::Table(inner) => keys.extend(leaf_keys(inner, &below)),
            toml::Value::Array(items) if !items.is_empty() && items.iter().all(toml::Value::is_table) => {
                keys.extend(items.iter().filter_map(toml::Value::as_table).flat_map(|item| leaf_keys(item, &below)));
            }
            _ => keys.push((path.to_string(), key.clone())),
        }
    }
    keys
}

/// Every backticked name in `text`.
fn backticked(text: &str) -> BTreeSet<String> {
    text.split('`').skip(1).step_by(2).map(String::from).collect()
}

/// Problems of one kind of file or output: what the code has that the page
/// does not document, and what the page documents that the code lacks.
fn compare(what: &str, code: &BTreeSet<String>, documented: &BTreeSet<String>, stale: &BTreeSet<String>, problems: &mut Vec<String>) {
    for key in code.difference(documented) {
        problems.push(format!("{what}: `{key}` is in the code but not documented"));
    }
    for key in stale.difference(code) {
        problems.push(format!("{what}: `{key}` is documented but the code has no such key"));
    }
}

fn set_of(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// The tables of a hardware model file, named as docs/reference.md names
/// them, with the keys each accepts.
fn hardware_tables() -> Vec<(&'static str, BTreeSet<String>)> {
    let mut top = set_of(keys_of::<HardwareModel>());
    // Taken out of each layer before the rest is read (config/hardware.rs).
    top.insert("compute_prior".into());
    let triple = || set_of(keys_of::<ProtocolTriple>());
    vec![
        ("", top),
        ("pcie.<gen>", set_of(keys_of::<PcieGeneration>())),
        ("nvlink.<gen>", set_of(keys_of::<NvlinkGeneration>())),
        ("host.<platform>", set_of(keys_of::<HostPlatform>())),
        ("pcie_switch.<chip>", set_of(keys_of::<PcieSwitchChip>())),
        ("gpu.<model>", set_of(keys_of::<GpuModel>())),
        ("gpu.<model>.compute", set_of(keys_of::<ComputeEfficiency>())),
        ("gpu.<model>.compute.kernel.<kind>", set_of(keys_of::<KernelEfficiency>())),
        ("gpu.<model>.compute.aten.<kind>", set_of(keys_of::<KernelEfficiency>())),
        ("nvme.<gen>", set_of(keys_of::<DriveModel>())),
        ("storage", set_of(keys_of::<StorageModel>())),
        ("protocol", set_of(keys_of::<Protocols>())),
        ("protocol.<protocol>", set_of(keys_of::<Protocol>())),
        ("protocol.<protocol>.kernel_start", set_of(keys_of::<KernelStart>())),
        ("protocol.<protocol>.<path>", set_of(keys_of::<PathCost>())),
        ("cta.<arch>", set_of(keys_of::<CtaModel>())),
        ("cta.<arch>.<protocol>", set_of(keys_of::<CtaRates>())),
        ("cta.<arch>.speedup", triple()),
        ("cta.<arch>.adds", set_of(keys_of::<ElementAdds>())),
        ("contention", set_of(keys_of::<Contention>())),
        ("skew", set_of(keys_of::<Skew>())),
        ("shm", set_of(keys_of::<ShmModel>())),
        ("nvls", set_of(keys_of::<NvlsModel>())),
        ("direct", set_of(keys_of::<DirectModel>())),
        ("stack.<caller>", set_of(keys_of::<StackModel>())),
        // A map by copy path: its keys are data.
        ("copy_overhead", BTreeSet::new()),
        ("nccl", set_of(keys_of::<NcclModel>())),
        ("nccl.<latency>", triple()),
        ("nccl.tree_correction", set_of(keys_of::<TreeCorrection>())),
        ("nccl.arch.<sm>", set_of(keys_of::<NcclArch>())),
        ("provenance", set_of(keys_of::<Provenance>())),
        // A map by what was fitted.
        ("provenance.residuals", BTreeSet::new()),
    ]
}

#[test]
fn reference_documents_every_key_of_the_input_files_and_no_other() {
    let reference = page("docs/reference.md");
    let mut problems = Vec::new();

    let experiment = code(section(&reference, "## Experiment file"));
    let storage = code(section(&reference, "## `[storage]` section"));
    let (mut keys, mut words) = toml_table(&experiment, "");
    let (storage_top_keys, storage_top_words) = toml_table(&storage, "");
    keys.extend(storage_top_keys);
    words.extend(storage_top_words);
    compare("experiment file", &set_of(keys_of::<RawExperiment>()), &words, &keys, &mut problems);
    for (table, fields, lines) in [
        ("[query]", keys_of::<RawQuery>(), &experiment),
        ("[[mode]]", keys_of::<RawMode>(), &experiment),
        ("[storage]", keys_of::<RawStorage>(), &storage),
    ] {
        let (keys, words) = toml_table(lines, table.trim_matches(['[', ']']));
        compare(&format!("experiment file, {table}"), &set_of(fields), &words, &keys, &mut problems);
    }

    let sweep = code(section(&reference, "## Sweep file"));
    for (table, fields) in [
        ("", keys_of::<RawSweep>()),
        ("axis", keys_of::<RawAxis>()),
        ("goal", keys_of::<RawGoal>()),
        ("plot", keys_of::<RawPlot>()),
        ("plot.reference", keys_of::<RawReference>()),
        ("serve", keys_of::<RawService>()),
    ] {
        let (keys, words) = toml_table(&sweep, table);
        compare(&format!("sweep file, [{table}]"), &set_of(fields), &words, &keys, &mut problems);
    }

    let component = || set_of(keys_of::<RawComponent>());
    let cost = [
        ("", set_of(keys_of::<RawCost>())),
        ("gpu.<model>", component()),
        ("nvswitch", component()),
        ("pcie_switch", component()),
        ("drive", component()),
        ("server", component()),
    ];
    compare_tables("cost file", section(&reference, "## Cost file"), "models/cost", &cost, &mut problems);

    let topology = [
        ("", set_of(keys_of::<TopologyFile>())),
        ("policy", set_of(keys_of::<PolicyFile>())),
        ("node", set_of(keys_of::<NodeFile>())),
        ("link", set_of(keys_of::<LinkFile>())),
    ];
    compare_tables("topology file", section(&reference, "## Topology file"), "configs/topologies", &topology, &mut problems);
    compare_tables(
        "hardware model file",
        section(&reference, "## Hardware model file"),
        "models/hardware",
        &hardware_tables(),
        &mut problems,
    );
    let llm = [("", set_of(keys_of::<LlmModel>())), ("fusion.<name>", set_of(keys_of::<Fusion>()))];
    compare_tables("LLM model file", section(&reference, "## LLM model file"), "models/llm", &llm, &mut problems);

    let mut set: BTreeSet<String> = change::keys().into_iter().collect();
    set.insert("hardware.<key>".into());
    let listed = first_cells(section(&reference, "## Keys for `--set`, sweep axes and listed points"));
    compare("--set keys", &set, &listed, &listed, &mut problems);

    assert!(problems.is_empty(), "docs/reference.md against the code:\n{}", problems.join("\n"));
}

/// The columns of `icsim run`'s rows, from the typed results of a run with
/// every storage part on (a load, a checkpoint and a KV offload, on both
/// paths), storage paths written as `<path>`.
fn run_columns() -> BTreeSet<String> {
    let text = "model = \"llama-3.1-8b\"\ntp = 2\ntopology = \"hgx-h200\"\ngpus = 2\n[query]\nprompt = 1024\noutput = 4\n\
        [[mode]]\ntransport = \"nvswitch\"\n\
        [storage]\ndrives = 2\nload = \"shard\"\npaths = [\"gds\", \"bounce\"]\ncheckpoint = true\nkv_offload = \"drive\"\n";
    let experiment = Experiment::parse(Path::new("columns.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let result = run(&experiment, &RunOptions::replay_only(), &|| {}).unwrap_or_else(|e| panic!("{e}"));
    let cost = CostModel::load(None, &Path::new(env!("CARGO_MANIFEST_DIR")).join("models/cost/default.toml"), "").unwrap();
    let rows = ExperimentRow::all(&result, |i, mode| Economics::of(mode, &Bill::of(&experiment.modes[i].topology), &cost));
    let row = &rows[0];
    let storage: Vec<String> = row.storage.iter().flat_map(StorageRow::fields).map(|(name, _)| name).collect();
    record_of(&row.mode)
        .keys()
        .chain(record_of(&row.economics).keys())
        .chain(&storage)
        .map(|c| c.replace("_gds_", "_<path>_").replace("_bounce_", "_<path>_"))
        .collect()
}

#[test]
fn reference_documents_every_output_column_of_run_and_every_goal_metric_and_no_other() {
    let reference = page("docs/reference.md");
    let mut problems = Vec::new();
    // Added by the command line to a suspect row, not by a result type.
    let added_by_the_cli = set_of(&["warning"]);
    let mut columns = run_columns();
    columns.extend(added_by_the_cli);
    let documented = first_cells(section(&reference, "### `icsim run` and `icsim llm`"));
    compare("icsim run's columns", &columns, &documented, &documented, &mut problems);

    let sweep_results = section(&reference, "## Sweep results");
    let paragraph = sweep_results.split("Metrics a goal or a plot may name:").nth(1).expect("the metrics a goal may name");
    let paragraph = paragraph.split(". A lines plot").next().unwrap_or_default();
    let metrics: BTreeSet<String> = METRICS.iter().chain(SERVICE_METRICS).map(|(_, name, _)| name.to_string()).collect();
    let named = backticked(paragraph);
    compare("metrics a goal may name", &metrics, &named, &named, &mut problems);

    assert!(problems.is_empty(), "docs/reference.md against the code:\n{}", problems.join("\n"));
}

/// The keys of a JSON object, and those of the objects in its lists.
fn keys_in(object: &serde_json::Value) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for (key, value) in object.as_object().expect("a JSON object") {
        keys.insert(key.clone());
        for item in value.as_array().into_iter().flatten().filter(|item| item.is_object()) {
            keys.extend(keys_in(item));
        }
    }
    keys
}

#[test]
fn reference_documents_every_column_collective_serve_and_diff_print_and_no_other() {
    let reference = page("docs/reference.md");
    let mut problems = Vec::new();

    let collective = icsim_json(&["collective", "--sizes", "1MiB", "--format", "json"]);
    let documented = first_cells(section(&reference, "### `icsim collective`"));
    compare("icsim collective's columns", &keys_in(&collective["results"][0]), &documented, &documented, &mut problems);

    let load = icsim_json(&["serve", "--model", "llama-3.1-8b", "--tp", "2", "--requests", "40", "--rates", "1,2", "--json"]);
    let serve_section = section(&reference, "### `icsim serve --rates`");
    let columns = first_cells(serve_section);
    compare("icsim serve --rates' columns", &keys_in(&load["rates"][0]), &columns, &columns, &mut problems);
    let around: BTreeSet<String> = load.as_object().unwrap().keys().filter(|k| *k != "rates").cloned().collect();
    let named = backticked(serve_section);
    let missing: Vec<&String> = around.iter().filter(|k| !named.contains(*k)).collect();
    if !missing.is_empty() {
        problems.push(format!("icsim serve --rates' JSON: undocumented {missing:?}"));
    }

    let diff = icsim_json(&["diff", "configs/sweeps/base/h20-pcie.toml", "--set", "topology.pcie_generation=gen5", "--format", "json"]);
    let diff_section = section(&reference, "### `icsim diff`");
    let named = backticked(diff_section);
    let first = if diff.is_array() { &diff[0] } else { &diff["results"][0] };
    let printed = keys_in(first);
    compare("icsim diff's fields", &printed, &named, &BTreeSet::new(), &mut problems);

    assert!(problems.is_empty(), "docs/reference.md against what the commands print:\n{}", problems.join("\n"));
}
