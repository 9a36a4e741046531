//! Hostile input to every subcommand, end to end: garbage files, numbers
//! past every type, empty values, values of the wrong type and odd flag
//! combinations. Whatever icsim makes of each, it never panics, answers
//! in time, and either runs (exit 0) or refuses as bad input (exit 2,
//! never 1) with one `error:` line, first on standard error.

use crate::common::{Inputs, page_says, run_within};

/// A small experiment on two H200, quick to replay.
const EXPERIMENT: &str = "model = \"llama-3.1-8b\"\ntp = 2\ntopology = \"hgx-h200\"\ngpus = 2\n[query]\nprompt = 128\noutput = 2\n[[mode]]\ntransport = \"nvswitch\"\n";

/// Two H100 under one socket joined by NVLink.
const TOPOLOGY: &str = "name = \"two\"\ngpu = \"h100\"\nhost = \"spr-2s\"\n\
    [[node]]\nname = \"cpu0\"\nkind = \"cpu\"\n[[node]]\nname = \"mem0\"\nkind = \"memory\"\n\
    [[node]]\nname = \"GPU0\"\nkind = \"gpu\"\n[[node]]\nname = \"GPU1\"\nkind = \"gpu\"\n\
    [[link]]\nfrom = \"cpu0\"\nto = \"mem0\"\nkind = \"memory\"\n[[link]]\nfrom = \"GPU0\"\nto = \"cpu0\"\nkind = \"pcie\"\n\
    [[link]]\nfrom = \"GPU1\"\nto = \"cpu0\"\nkind = \"pcie\"\n[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"nvlink\"\n";

/// A measured allreduce the model predicts.
const ROW: &str = r#"{"schema":1,"op":"allreduce","bytes":1024,"time_us":10,"ranks":2,"transport":"nvswitch"}"#;

/// `args` as the arguments of a run.
fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// Checks one hostile run: no panic, exit 0 or 2, and when refused one
/// error line, first.
fn survives(what: &str, args: &[String]) {
    let (code, stderr) = run_within(args);
    assert!(!stderr.contains("panicked") && code != Some(101), "{what}: icsim panicked: {stderr}");
    assert!(matches!(code, Some(0 | 2)), "{what}: exit code {code:?}; bad input is 2: {stderr}");
    if code == Some(2) {
        assert_eq!(stderr.lines().filter(|l| l.starts_with("error:")).count(), 1, "{what}: one error line: {stderr}");
        assert!(stderr.starts_with("error:"), "{what}: the error comes first: {stderr}");
    }
}

#[test]
fn hostile_input_never_panics_never_exits_1_and_refuses_in_one_line() {
    let inputs = Inputs::new("hostile");
    let garbage = inputs.0.join("garbage.bin");
    std::fs::write(&garbage, (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect::<Vec<u8>>()).unwrap();
    let garbage = garbage.display().to_string();
    let file = |name: &str, text: &str| inputs.file(name, text);
    let empty = file("empty.toml", "");
    let experiment = file("exp.toml", EXPERIMENT);
    let with = |name: &str, from: &str, to: &str| file(name, &EXPERIMENT.replacen(from, to, 1));
    let topo_with = |name: &str, from: &str, to: &str| file(name, &TOPOLOGY.replacen(from, to, 1));
    let rows = |name: &str, from: &str, to: &str| file(name, &ROW.replacen(from, to, 1));
    let sweep = |name: &str, axis: &str| file(name, &format!("experiment = \"exp.toml\"\n[[axis]]\nkey = \"query.batch\"\n{axis}\n"));
    let good_sweep = sweep("sweep.toml", "values = [1, 2]");
    let validate = |path: &str| owned(&["calibrate", "validate", path, "--topology", "hgx-h200", "--gpus", "2"]);
    let cases: Vec<(&str, Vec<String>)> = vec![
        // Garbage files.
        ("a binary file as a topology", owned(&["topo", "show", &garbage])),
        ("a binary file as an experiment", owned(&["run", &garbage])),
        ("a binary file as measurements", validate(&garbage)),
        ("a binary file as an overlay", owned(&["collective", "--hardware", &garbage])),
        ("a binary file as an LLM", owned(&["llm", "--tp", "2", "--model", &garbage])),
        ("a binary file as a sweep", owned(&["sweep", &garbage])),
        ("a binary file as a capture to import", owned(&["topo", "import", &garbage])),
        ("an empty experiment", owned(&["run", &empty])),
        ("an empty sweep", owned(&["sweep", &empty])),
        ("empty experiments to diff", owned(&["diff", &empty, &empty])),
        ("broken JSON rows", validate(&file("broken.jsonl", "}{\n{\"schema\":1,"))),
        ("an empty capture as a topology", owned(&["collective", "--topology", &file("empty.xml", "")])),
        ("a file as shards to merge", owned(&["sweep", "merge", &experiment])),
        // Numbers past every type.
        ("a size past 64 bits", owned(&["collective", "--sizes", "99999999999999999999999B"])),
        ("the largest size", owned(&["collective", "--sizes", "18446744073709551615B"])),
        ("a range to the largest size", owned(&["collective", "--sizes", "1B..18446744073709551615B"])),
        ("eleven-digit channels", owned(&["collective", "--channels", "99999999999"])),
        ("the longest prompt", owned(&["llm", "--tp", "2", "--prompt", "18446744073709551615"])),
        ("the largest batch", owned(&["llm", "--tp", "2", "--batch", "18446744073709551615"])),
        ("the longest output", owned(&["llm", "--tp", "2", "--output", "18446744073709551615"])),
        ("a TP of 2^63", owned(&["run", &with("tp.toml", "tp = 2", "tp = 9223372036854775807")])),
        ("NVLinks past 64 bits", owned(&["topo", "show", &file("links.toml", &format!("{TOPOLOGY}links = 18446744073709551616\n"))])),
        ("ranks past 32 bits", validate(&rows("ranks.jsonl", "\"ranks\":2", "\"ranks\":4294967296"))),
        ("jobs past 64 bits", owned(&["sweep", &good_sweep, "--jobs", "18446744073709551616"])),
        ("evaluations past 32 bits", owned(&["calibrate", "fit", ROW, "--evaluations", "4294967296", "--out", "x.toml"])),
        ("an NVLS chunk of exbibytes", owned(&["collective", "--hardware", &file("chunk.toml", "[nvls]\nchunk = \"16EiB\"\n")])),
        // Empty values.
        ("an empty topology name", owned(&["collective", "--topology", ""])),
        ("empty sizes", owned(&["collective", "--sizes", ""])),
        ("an empty LLM name", owned(&["llm", "--tp", "2", "--model", ""])),
        ("an empty overlay name", owned(&["collective", "--hardware", ""])),
        ("an experiment's empty model", owned(&["run", &with("model.toml", "\"llama-3.1-8b\"", "\"\"")])),
        ("a topology's empty GPU", owned(&["topo", "show", &topo_with("gpu.toml", "\"h100\"", "\"\"")])),
        ("an empty measurements path", validate("")),
        ("an empty change", owned(&["diff", &experiment, "--set", ""])),
        ("a change to nothing", owned(&["diff", &experiment, "--set", "tp="])),
        // Wrong types.
        ("a TP in words", owned(&["run", &with("words.toml", "tp = 2", "tp = \"two\"")])),
        ("half a token", owned(&["run", &with("half.toml", "prompt = 128", "prompt = 1.5")])),
        ("a bandwidth without a unit", owned(&["topo", "show", &file("bare.toml", &format!("{TOPOLOGY}bandwidth = 5\n"))])),
        ("bytes as a string", validate(&rows("string.jsonl", "\"bytes\":1024", "\"bytes\":\"1024\""))),
        ("a time in words", validate(&rows("fast.jsonl", "\"time_us\":10", "\"time_us\":\"fast\""))),
        ("axis values as a string", owned(&["sweep", &sweep("axis.toml", "values = \"abc\"")])),
        ("memory as a boolean", owned(&["collective", "--hardware", &file("bool.toml", "[gpu.h200]\nmemory = true\n")])),
        // Odd flag combinations.
        ("NVLS through host memory", owned(&["collective", "--algo", "nvls", "--transport", "shm", "--sizes", "1MiB"])),
        ("a ring of one GPU", owned(&["collective", "--gpus", "1", "--algo", "ring", "--sizes", "1MiB"])),
        ("a TP beyond the GPUs used", owned(&["llm", "--tp", "8", "--gpus", "2"])),
        ("direct NVLink on a switch board", owned(&["collective", "--transport", "nvlink", "--sizes", "1MiB"])),
        ("a shard past the count", owned(&["sweep", &good_sweep, "--shard", "3/2"])),
        ("a shard of none", owned(&["sweep", &good_sweep, "--shard", "0/0"])),
        ("an import as an unknown GPU", owned(&["topo", "import", "tests/data/nvidia-smi-topo-h200x2.txt", "--gpu", "h900"])),
        ("a second experiment and a change at once", owned(&["diff", &experiment, &experiment, "--set", "tp=4"])),
        ("a format no one reads", owned(&["collective", "--format", "yaml"])),
        ("an empty model before", [validate(&file("row.jsonl", ROW)), owned(&["--before", ""])].concat()),
    ];
    // docs/model.md counts them in tens, rounded down.
    let tens = cases.len() / 10 * 10;
    assert!(cases.len() > tens, "docs/model.md says \"over {tens}\": {} inputs", cases.len());
    page_says("docs/model.md", &format!("runs over {tens} hostile inputs through every subcommand"));
    for (what, args) in cases {
        survives(what, &args);
    }
}
