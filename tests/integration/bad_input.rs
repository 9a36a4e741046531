//! Bad input of every kind, end to end: each gives exit code 2 and one
//! error line naming the file or flag, the key, and what is allowed; none
//! panics or runs past a deadline (which bounds its time, and so its memory).
//! docs/model.md's count of the kinds is what this file's tests try.

use std::path::Path;

use crate::common::{Inputs, page_says, run_within};

/// Set in a run of this file's tests that only counts the kinds of bad
/// input they try: each is named, none is run.
const COUNT_ONLY: &str = "ICSIM_BAD_INPUT_COUNT_ONLY";

/// What a counting run prints for each kind it would try.
const KIND: &str = "bad input kind: ";

/// Checks that `args` is refused as bad input with one error line holding
/// every one of `expected`.
pub(crate) fn refused(what: &str, args: &[&str], expected: &[&str]) {
    if std::env::var_os(COUNT_ONLY).is_some() {
        println!("{KIND}{what}");
        return;
    }
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (code, stderr) = run_within(&args);
    assert!(!stderr.contains("panicked"), "{what}: icsim panicked: {stderr}");
    assert_eq!(code, Some(2), "{what}: exit code {code:?}, expected 2 for bad input: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{what}: expected one error line: {stderr}");
    assert!(stderr.starts_with("error:"), "{what}: the error comes first, before any warning: {stderr}");
    for needle in expected {
        assert!(errors[0].contains(needle), "{what}: {needle:?} missing from {:?}", errors[0]);
    }
}

const KERNEL_ROW: &str =
    r#"{"schema":1,"system":"x","tp":2,"gpu":"NVIDIA H200","op":"kernel","kernel":"gemm_down","tokens":8192,"time_us":2931.98}"#;

fn experiment(extra_top: &str, query: &str, mode: &str) -> String {
    format!(
        "model = \"llama-3.1-70b\"\ntp = 8\ntopology = \"hgx-h20\"\n{extra_top}\n[query]\nprompt = 8192\noutput = 256\n{query}\n[[mode]]\ntransport = \"nvswitch\"\n{mode}\n"
    )
}

/// Two H100 under one socket, then `links`.
fn topology(links: &str) -> String {
    let mut text = String::from("name = \"two\"\ngpu = \"h100\"\nhost = \"spr-2s\"\n");
    for (name, kind) in [("cpu0", "cpu"), ("mem0", "memory"), ("GPU0", "gpu"), ("GPU1", "gpu")] {
        text += &format!("[[node]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
    }
    for (from, to, kind) in [("cpu0", "mem0", "memory"), ("GPU0", "cpu0", "pcie"), ("GPU1", "cpu0", "pcie")] {
        text += &format!("[[link]]\nfrom = \"{from}\"\nto = \"{to}\"\nkind = \"{kind}\"\n");
    }
    text + links
}

const NVLINK: &str = "[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"nvlink\"\n";

fn validate(file: &str) -> Vec<&str> {
    vec!["calibrate", "validate", file, "--topology", "hgx-h200", "--gpus", "2"]
}

#[test]
fn bad_measurements_are_refused_by_file_line_and_key() {
    let inputs = Inputs::new("measurements");
    let row = |from: &str, to: &str| inputs.file(&format!("{}.jsonl", to.len()), &KERNEL_ROW.replace(from, to));
    let tp0 = row(r#""tp":2"#, r#""tp":0"#);
    refused("a kernel row with tp 0", &validate(&tp0), &[&tp0, "line 1: tp", "allowed 1"]);
    let fit = ["calibrate", "fit", &tp0, "--topology", "hgx-h200", "--gpus", "2", "--out", "/nonexistent/x.toml"];
    refused("fitting a kernel row with tp 0", &fit, &["line 1: tp"]);
    let huge = row(r#""tp":2"#, r#""tp":2,"bytes":18446744073709551615"#);
    refused("a measured size beyond any GPU", &validate(&huge), &[&huge, "line 1: bytes", "GB"]);
    let int3 = row(r#""tp":2"#, r#""tp":2,"dtype":"int3""#);
    refused("an element type NCCL lacks", &validate(&int3), &[&int3, "line 1: dtype", "bfloat16"]);
    let forever = row(r#""time_us":2931.98"#, r#""time_us":1e300"#);
    refused("a time beyond the clock", &validate(&forever), &[&forever, "line 1: time_us"]);
    let tokens = row(r#""tokens":8192"#, r#""tokens":0"#);
    refused("a kernel of no tokens", &validate(&tokens), &[&tokens, "line 1: tokens"]);
    let empty = inputs.file("empty.jsonl", "\n# nothing\n");
    refused("an empty measurements file", &validate(&empty), &[&empty, "no measurement"]);
    let array = inputs.file("array.jsonl", "[1,2,3]\n");
    refused("a JSON line that is no object", &validate(&array), &[&array, "line 1", "not a JSON object"]);
    let ranks = inputs.file(
        "ranks.jsonl",
        "# four ranks\n{\"schema\":1,\"op\":\"allreduce\",\"bytes\":1024,\"time_us\":10,\"ranks\":4,\"transport\":\"nvswitch\"}\n",
    );
    refused("a row the topology cannot run", &validate(&ranks), &[&ranks, "line 2", "4 ranks"]);
    let table = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/all_reduce_perf_8gpu.txt")).unwrap();
    let nccl_tests = inputs.file("all_reduce_perf.txt", &table.replacen("           8  ", "18446744073709551615  ", 1));
    refused("a nccl-tests row beyond any GPU", &validate(&nccl_tests), &[&nccl_tests, "line 20: bytes"]);
    let good = inputs.file("good.jsonl", KERNEL_ROW);
    refused("an unknown --before overlay", &[&validate(&good)[..], &["--before", "h200x9"]].concat(), &["--before", "h200-fit"]);
}

#[test]
fn bad_experiments_and_llm_files_are_refused_by_file_and_key() {
    let inputs = Inputs::new("experiments");
    let cases: [(&str, String, &[&str]); 9] = [
        ("a prompt beyond the context", experiment("", "", "").replace("prompt = 8192", "prompt = 10000000"), &["query.prompt", "131072"]),
        ("an output beyond the context", experiment("", "", "").replace("output = 256", "output = 100000000"), &["query.output"]),
        ("a batch whose KV cache no GPU holds", experiment("", "batch = 2147483648", ""), &["query.batch", "KV cache"]),
        ("an unknown overlay", experiment("models = [\"h200x9\"]", "", ""), &["key `models`", "h200-fit"]),
        ("an unknown transport", experiment("", "", "").replace("\"nvswitch\"", "\"pcie\""), &["mode[0].transport", "nvswitch"]),
        ("more channels than NCCL runs", experiment("channels = 65", "", ""), &["key `channels`", "64"]),
        ("a misspelt key", experiment("", "", "").replace("prompt =", "promt ="), &["promt", "prompt"]),
        ("a TP the GPUs cannot split", experiment("", "", "tp = 3"), &["mode[0].tp", "allowed"]),
        ("no TP in the experiment or its mode", experiment("", "", "").replace("tp = 8\n", ""), &["mode[0].tp", "is not set"]),
    ];
    for (index, (what, text, expected)) in cases.iter().enumerate() {
        let path = inputs.file(&format!("exp{index}.toml"), text);
        refused(what, &["run", &path, "--out", "/nonexistent/out"], &[&[path.as_str()][..], expected].concat());
    }
    let shipped = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/llm/llama-3.1-8b.toml")).unwrap();
    for (what, from, to, key) in [
        ("an LLM with no heads", "heads = 32", "heads = 0", "heads"),
        ("an LLM element of 3 bytes", "dtype_bytes = 2", "dtype_bytes = 3", "dtype_bytes"),
        ("an LLM wider than any", "hidden = 4096", "hidden = 4611686018427387904", "hidden"),
    ] {
        let path = inputs.file(&format!("{key}.toml"), &shipped.replace(from, to));
        refused(what, &["llm", "--model", &path, "--tp", "8"], &[&path, &format!("key `{key}`")]);
    }
}

#[test]
fn bad_topologies_are_refused_by_file_and_key() {
    let inputs = Inputs::new("topologies");
    let show = |file: &str| vec!["topo".to_string(), "show".to_string(), file.to_string()];
    for (what, links, key) in [
        ("a link from a node to itself", "[[link]]\nfrom = \"GPU0\"\nto = \"GPU0\"\nkind = \"nvlink\"\n".to_string(), "link[3].to"),
        ("a second link between a pair", format!("{NVLINK}links = 2\n{NVLINK}links = 2\n"), "link[4].to"),
        (
            "a PCIe width that does not exist",
            "[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"pcie\"\nlanes = 3\n".into(),
            "link[3].lanes",
        ),
        ("four billion NVLinks", format!("{NVLINK}links = 4000000000\n"), "link[3].links"),
        ("a link to no node", "[[link]]\nfrom = \"GPU0\"\nto = \"GPU9\"\nkind = \"nvlink\"\n".into(), "link[3].to"),
        ("a zero bandwidth", format!("{NVLINK}bandwidth = \"0B/s\"\n"), "link[3].bandwidth"),
    ] {
        let path = inputs.file(&format!("{}.toml", key.replace(['[', ']', '.'], "-")), &topology(&links));
        let args = show(&path);
        refused(what, &args.iter().map(String::as_str).collect::<Vec<_>>(), &[&path, key]);
    }
    let mut many = String::from("name = \"many\"\ngpu = \"h100\"\nhost = \"spr-2s\"\n");
    for gpu in 0..=4096 {
        many += &format!("[[node]]\nname = \"GPU{gpu}\"\nkind = \"gpu\"\n");
    }
    let path = inputs.file("many.toml", &many);
    refused("more GPUs than a topology holds", &["topo", "show", &path], &[&path, "4096"]);
    let mangled = inputs.file("topo.txt", "\u{1b}[4mGPU0\tGPU1\nGPU0\t X \tNV18\ngarbage\n");
    refused("a mangled nvidia-smi capture", &["collective", "--topology", &mangled], &[&mangled]);
    let notes = inputs.file("notes.txt", "these are my notes\n");
    refused("a text file that is no topology", &["collective", "--topology", &notes], &[&notes, "not a topology", "nvidia-smi"]);
    let xml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-topo-h200x2.xml")).unwrap();
    let count = xml.find("count=\"").expect("the dump has NVLinks");
    let end = xml[count + 7..].find('"').unwrap() + count + 7;
    let huge = inputs.file("dump.xml", &format!("{}count=\"99999999999{}", &xml[..count], &xml[end..]));
    refused("an NVLink count beyond any number", &["topo", "import", &huge], &[&huge, "too large"]);
    refused("an endless file", &["topo", "show", "/dev/zero"], &["/dev/zero", "64 MiB"]);
    let overlay = inputs.file("zero.toml", "[gpu.h200]\nbf16_tflops = 0.0\n");
    refused("a hardware overlay with no compute", &["collective", "--hardware", &overlay], &[&overlay, "gpu.h200.bf16_tflops"]);
    let fence = inputs.file("fence.toml", "[protocol.simple.shm]\nslice_overhead = \"1s\"\n");
    refused("a fence of a second", &["collective", "--hardware", &fence], &[&fence, "protocol.simple.shm.slice_overhead", "1ms"]);
    let start = inputs.file("start.toml", "[protocol.simple.kernel_start]\nallgather = \"-1us\"\n");
    refused("a negative kernel start", &["collective", "--hardware", &start], &[&start, "-1us", "must not be negative"]);
    let slow = inputs.file("slow.toml", &topology(&format!("{NVLINK}bandwidth = \"1B/s\"\n")));
    let slow_run = ["collective", "--topology", &slow, "--transport", "nvlink", "--algo", "ring", "--sizes", "32MiB"];
    refused("a link so slow the clock runs out", &slow_run, &["32MiB", "1B/s", "213 days"]);
}

#[test]
fn bad_flags_are_refused_by_flag() {
    for (what, args, expected) in [
        ("a size no GPU holds", &["collective", "--sizes", "1TiB"][..], &["--sizes 1TiB", "141.0 GB"][..]),
        ("a size in scientific notation", &["collective", "--sizes", "1e30GiB"], &["--sizes", "no exponents"]),
        ("a size of part of an element", &["collective", "--sizes", "6B", "--dtype", "float32"], &["--sizes 6B", "float32"]),
        ("more GPUs than the board has", &["collective", "--gpus", "9"], &["--gpus", "1 to 8"]),
        ("an unknown overlay", &["collective", "--hardware", "nosuch"], &["--hardware", "h200-fit"]),
        ("an unknown llm transport", &["llm", "--tp", "8", "--transport", "foo"], &["--transport", "all"]),
        ("a prompt beyond the context", &["llm", "--tp", "8", "--prompt", "200000"], &["--prompt", "131072"]),
        ("an empty prompt", &["llm", "--tp", "8", "--prompt", "0"], &["--prompt"]),
        ("an unknown LLM", &["llm", "--tp", "8", "--model", "llama-9"], &["--model", "llama-3.1-70b"]),
        ("a runner prompt beyond the context", &["calibrate", "run", "--prompt", "200000", "--out", "/nonexistent"], &["--prompt 200000"]),
    ] {
        refused(what, args, expected);
    }
}

#[test]
fn bad_storage_inputs_are_refused_by_file_and_key() {
    let inputs = Inputs::new("storage");
    for (index, (what, storage, expected)) in [
        ("a whole model no GPU holds", "load = \"whole\"", &["key `storage.load`", "96.0 GB"][..]),
        ("more drives than a server takes", "drives = 100000", &["key `storage.drives`", "256"]),
        ("a sweep of no drives", "load = \"shard\"\nsweep = [0, 2]", &["key `storage.sweep`", "1 to 256"]),
        ("an endless sweep", &format!("load = \"shard\"\nsweep = [{}]", vec!["1"; 65].join(", ")), &["key `storage.sweep`", "64"]),
        ("an unknown drive class", "drive = \"gen9\"", &["key `storage.drive`", "gen5"]),
    ]
    .iter()
    .enumerate()
    {
        let path = inputs.file(&format!("storage{index}.toml"), &format!("{}\n[storage]\n{storage}\n", experiment("", "", "")));
        refused(what, &["run", &path, "--out", "/nonexistent/out"], &[&[path.as_str()][..], expected].concat());
    }
    for (index, (what, overlay, expected)) in [
        ("a drive faster than its own link", "[nvme.gen4]\nread = \"100GB/s\"\n", &["key `nvme.gen4.read`", "gen4 x4"][..]),
        ("a drive that never answers", "[nvme.gen5]\nread_latency = \"2s\"\n", &["key `nvme.gen5.read_latency`"]),
        ("I/Os smaller than the fitted costs know", "[storage]\ngds_io = \"4KiB\"\n", &["key `storage.gds_io`", "64KiB"]),
        ("a stripe unit of one byte", "[storage]\nraid_chunk = \"1B\"\n", &["key `storage.raid_chunk`"]),
        ("a CPU cost beyond the clock", "[storage]\nbounce_cpu_per_mib = \"1000s\"\n", &["key `storage.bounce_cpu_per_mib`"]),
    ]
    .iter()
    .enumerate()
    {
        let path = inputs.file(&format!("overlay{index}.toml"), overlay);
        refused(what, &["collective", "--hardware", &path], &[&[path.as_str()][..], expected].concat());
    }
}

/// A small experiment on two H200 over NVSwitch, quick to replay.
const SMALL_EXPERIMENT: &str = "model = \"llama-3.1-8b\"\ntp = 2\ntopology = \"hgx-h200\"\ngpus = 2\n[query]\nprompt = 128\noutput = 2\n[[mode]]\ntransport = \"nvswitch\"\n";

#[test]
fn bad_output_paths_are_refused_before_anything_runs() {
    let inputs = Inputs::new("outputs");
    let afile = inputs.file("afile", "not a folder");
    let under_afile = format!("{afile}/x");
    let fresh = inputs.0.join("fresh").to_str().unwrap().to_string();
    let default = "configs/default.toml";
    refused("results into a file", &["run", default, "--out", &afile], &["--out", &afile, "not a folder"]);
    refused("results into /dev/null", &["run", default, "--out", "/dev/null"], &["--out /dev/null", "not a folder"]);
    refused("plots under a file", &["run", default, "--out", &fresh, "--plots", &under_afile], &["--plots", "not a folder"]);
    assert!(!Path::new(&fresh).exists(), "a refused run leaves no output behind");
    let proc = inputs.file("proc.toml", &experiment("output_dir = \"/proc/nope/x\"", "", ""));
    refused("an output_dir nothing can create", &["run", &proc], &[&proc, "key `output_dir`", "/proc"]);
    refused("llm results into a file", &["llm", "--tp", "2", "--out", &afile], &["--out", "not a folder"]);
    let rows = inputs.file("rows.jsonl", KERNEL_ROW);
    let fit = ["calibrate", "fit", &rows, "--topology", "hgx-h200", "--gpus", "2", "--out", "/proc/nope/x.toml"];
    refused("a fitted overlay where nothing can be created", &fit, &["--out /proc/nope/x.toml", "/proc"]);
    refused("a plot format plotters lacks", &[&validate(&rows)[..], &["--plot", "x.jpg"]].concat(), &["--plot x.jpg", ".png or .svg"]);
    let plot = [&validate(&rows)[..], &["--plot", "/proc/nope/x.png"]].concat();
    refused("a plot where nothing can be created", &plot, &["--plot /proc/nope/x.png", "/proc"]);
    let dump = "tests/data/nccl-topo-h200x2.xml";
    refused("an import under a file", &["topo", "import", dump, "--out", &format!("{under_afile}.toml")], &["--out", "not a folder"]);
    inputs.file("small.toml", SMALL_EXPERIMENT);
    let sweep = inputs.file("s.toml", "experiment = \"small.toml\"\n[[axis]]\nkey = \"query.batch\"\nvalues = [1, 2]\n");
    refused("sweep results under a file", &["sweep", &sweep, "--out", &under_afile], &["--out", "not a folder"]);
    let proc_sweep = inputs.file("p.toml", &format!("output_dir = \"/proc/nope\"\n{}", std::fs::read_to_string(&sweep).unwrap()));
    refused("a sweep output_dir nothing can create", &["sweep", &proc_sweep], &[&proc_sweep, "key `output_dir`"]);
    refused("merging shards that are not there", &["sweep", "merge", "/nonexistent/shard-1"], &["/nonexistent/shard-1"]);
}

#[test]
fn bad_sweeps_and_diffs_are_refused_by_file_and_key() {
    let inputs = Inputs::new("sweeps");
    let small = inputs.file("small.toml", SMALL_EXPERIMENT);
    let base = "experiment = \"small.toml\"\n";
    let sweep = |name: &str, text: &str| inputs.file(name, &format!("{base}{text}"));
    let two = sweep("two.toml", "[[axis]]\nkey = \"query.batch\"\nvalues = [1, 2]\n");
    refused("no threads", &["sweep", &two, "--jobs", "0"], &["--jobs", "1..=256"]);
    refused("ten thousand threads", &["sweep", &two, "--jobs", "10000"], &["--jobs", "1..=256"]);
    let rates = "[[axis]]\nkey = \"topology.nvlink_bandwidth\"\nfrom = \"1GB/s\"\nto = \"9999999GB/s\"\nstep = \"1GB/s\"\n";
    let huge = sweep("huge.toml", &format!("{rates}[[plot]]\nkind = \"lines\"\nx = \"nope\"\ny = \"ttft_ms\"\n"));
    refused("ten million values on an axis", &["sweep", &huge], &[&huge, "axis[0].to", "9999999 values", "1000000"]);
    let close = "[[axis]]\nkey = \"topology.nvlink_bandwidth\"\nfrom = \"1GB/s\"\nto = \"2GB/s\"\ntimes = 1.0000001\n";
    let close = sweep("close.toml", close);
    refused("a factor a hair above 1", &["sweep", &close], &[&close, "axis[0]", "1000000"]);
    let crossed =
        "[[axis]]\nkey = \"query.prompt\"\nfrom = 1\nto = 2000\nstep = 1\n[[axis]]\nkey = \"query.batch\"\nfrom = 1\nto = 1000\nstep = 1\n";
    let crossed = sweep("crossed.toml", crossed);
    refused("a cross product past the limit", &["sweep", &crossed], &[&crossed, "axis[1]", "2000000 points"]);
    let empty_dir = inputs.file("empty.toml", &format!("output_dir = \"\"\n{base}[[axis]]\nkey = \"tp\"\nvalues = [2]\n"));
    refused("a sweep's empty output_dir", &["sweep", &empty_dir], &[&empty_dir, "key `output_dir`", "empty"]);
    refused("a diff of nothing", &["diff", &small], &["nothing to compare", "--set"]);
    refused("a key set twice", &["diff", &small, "--set", "tp=4", "--set", "tp=8"], &["--set tp=8", "set twice"]);
    let nvlink = ["diff", &small, "--set", "transport=nvlink"];
    refused("a change no mode can run", &nvlink, &["--set transport=nvlink", "no mode can run after the change"]);
}

#[test]
fn repeated_and_empty_values_are_refused_by_key() {
    let inputs = Inputs::new("repeats");
    let storage = format!("{}\n[storage]\npaths = [\"gds\", \"gds\"]\n", experiment("", "", ""));
    for (what, text, expected) in [
        ("a storage path twice", storage, &["key `storage.paths`", "twice"][..]),
        ("an empty label", experiment("", "", "label = \"\""), &["mode[0].label", "empty"]),
        ("an empty output_dir", experiment("output_dir = \"\"", "", ""), &["key `output_dir`", "empty"]),
    ] {
        let path = inputs.file("exp.toml", &text);
        refused(what, &["run", &path], &[&[path.as_str()][..], expected].concat());
    }
    refused("an algorithm twice", &["collective", "--algo", "ring,ring"], &["--algo", "ring is listed twice"]);
    refused("an empty size", &["collective", "--sizes", "1MiB,,2MiB"], &["--sizes", "empty item"]);
    let rows = inputs.file("rows.jsonl", KERNEL_ROW);
    let allreduce =
        inputs.file("allreduce.jsonl", r#"{"schema":1,"op":"allreduce","bytes":1024,"time_us":10,"ranks":2,"transport":"nvswitch"}"#);
    let filtered = [&validate(&allreduce)[..], &["--min-bytes", "100GiB"]].concat();
    refused("a filter no row passes", &filtered, &["--min-bytes 100GiB", "no row passes", "1 rows"]);
    let fit = ["calibrate", "fit", &rows, "--topology", "hgx-h200", "--gpus", "2", "--out", "/proc/x.toml", "--evaluations", "0"];
    refused("no evaluations", &fit, &["--evaluations", "1..=1000000"]);
}

#[test]
fn hardware_models_and_measurements_out_of_range_are_refused_by_key() {
    let inputs = Inputs::new("ranges");
    for (what, text, key) in [
        ("a negative thread-block speedup", "[cta.sm80]\nspeedup = { ll = -1.0, ll128 = 0.5, simple = 0.5 }\n", "cta.sm80.speedup.ll"),
        (
            "a vanishing thread-block speedup",
            "[cta.sm80]\nspeedup = { ll = 1e-300, ll128 = 1e-300, simple = 1e-300 }\n",
            "cta.sm80.speedup",
        ),
        ("a straggler that leads", "[contention]\nstraggler = -5.0\n", "contention.straggler"),
        ("a one-byte NVLS chunk", "[nvls]\nchunk = \"1B\"\n", "nvls.chunk"),
        ("a GPU of one byte", "[gpu.h200]\nmemory = \"1B\"\n", "gpu.h200.memory"),
        ("a bare number for a rate", "[nvlink.gen4]\nlink_rate = 25\n", "nvlink.gen4.link_rate"),
        ("a generation without its fields", "[nvlink.gen9]\nlink_rate = \"25GB/s\"\n", "nvlink.gen9"),
    ] {
        let overlay = inputs.file("overlay.toml", text);
        let collective = ["collective", "--topology", "hgx-h200", "--sizes", "1MiB", "--hardware", &overlay];
        refused(what, &collective, &[&overlay, &format!("key `{key}")]);
    }
    inputs.file("leading.toml", "[contention]\nstraggler = -5.0\n");
    let experiment_with = inputs.file("with-overlay.toml", &experiment("models = [\"leading.toml\"]", "", ""));
    refused("an experiment's bad overlay", &["run", &experiment_with], &[&experiment_with, "key `models`", "contention.straggler"]);
    let no_bytes = inputs.file("nobytes.jsonl", r#"{"schema":1,"op":"allreduce","time_us":10,"ranks":2,"transport":"nvswitch"}"#);
    refused("a collective row without bytes", &validate(&no_bytes), &[&no_bytes, "line 1: bytes", "missing"]);
    let instant =
        inputs.file("instant.jsonl", r#"{"schema":1,"op":"allreduce","bytes":1024,"time_us":1e-30,"ranks":2,"transport":"nvswitch"}"#);
    refused("a time no timer resolves", &validate(&instant), &[&instant, "line 1: time_us"]);
    let huge = ["llm", "--model", "llama-3.1-405b", "--tp", "1", "--gpus", "1", "--transport", "nvswitch"];
    refused("weights no GPU of the group holds", &huge, &["--tp", "811.7 GB", "more than a NVIDIA H200"]);
    inputs.file("small-io.toml", "[storage]\nbounce_io = \"64KiB\"\ngds_io = \"64KiB\"\nraid_chunk = \"64KiB\"\n");
    let storage = "[storage]\ndrives = 8\ndrive = \"gen5\"\nload = \"shard\"\npaths = [\"gds\", \"bounce\"]\n";
    let load = inputs.file("load.toml", &format!("{}{storage}", experiment("models = [\"small-io.toml\"]", "", "")));
    refused("a load of millions of small I/Os", &["run", &load], &[&load, "2153416 I/Os", "storage.bounce_io", "at least 256KiB"]);
}

#[test]
fn collective_requests_the_algorithm_cannot_run_are_refused_saying_why() {
    // One line: the reason first, the call it stopped after it.
    let (_, stderr) = run_within(&["collective", "--sizes", "1MiB", "--algo", "nvls", "--proto", "ll"].map(String::from));
    let line = stderr.lines().next().unwrap_or_default();
    assert!(line.starts_with("error: nvls cannot run ll") && line.ends_with("(allreduce of 1MiB on hgx-h200)"), "{stderr}");
    for (what, args, expected) in [
        (
            "one-shot beyond one node",
            &["--topology", "nvlink-fabric", "--gpus", "16", "--algo", "oneshot"][..],
            &["at most 8 GPUs", "ring, tree or nvls"][..],
        ),
        (
            "two-shot beyond one node",
            &["--topology", "nvlink-fabric", "--gpus", "16", "--algo", "twoshot"],
            &["at most 8 GPUs", "ring, tree or nvls"],
        ),
        ("NVLS with LL", &["--algo", "nvls", "--proto", "ll"], &["nvls cannot run ll", "the simple protocol only", "--proto simple"]),
        ("one-shot with LL128", &["--algo", "oneshot", "--proto", "ll128"], &["oneshot cannot run ll128", "--proto simple"]),
    ] {
        refused(what, &[&["collective", "--sizes", "1MiB"][..], args].concat(), expected);
    }
    refused("more channels than NCCL has", &["collective", "--channels", "65"], &["--channels", "1 to 64", "MAXCHANNELS"]);
}

/// A schema-1 allreduce row the model predicts.
const ALLREDUCE_ROW: &str = r#"{"schema":1,"op":"allreduce","bytes":1024,"time_us":10,"ranks":2,"transport":"nvswitch"}"#;

#[test]
fn repeats_disagreements_and_rows_nothing_models_are_refused_by_key() {
    let inputs = Inputs::new("repeats-and-rows");
    refused("a size twice", &["collective", "--sizes", "1MiB,1MiB"], &["--sizes", "1MiB appears twice"]);
    inputs.file("small.toml", SMALL_EXPERIMENT);
    let plot = "[[plot]]\nkind = \"lines\"\nname = \"ttft\"\nx = \"query.batch\"\ny = \"ttft_ms\"\n";
    let sweep =
        inputs.file("plots.toml", &format!("experiment = \"small.toml\"\n[[axis]]\nkey = \"query.batch\"\nvalues = [1, 2]\n{plot}{plot}"));
    refused("two plots of one name", &["sweep", &sweep], &[&sweep, "plot[1].name", "\"ttft\" is plot[0]'s", "overwrite"]);
    for (index, (what, row, expected)) in [
        ("a key twice in a row", ALLREDUCE_ROW.replace(r#""bytes":1024"#, r#""bytes":1024,"bytes":2048"#), &["line 1: bytes", "twice"][..]),
        (
            "two times that disagree",
            ALLREDUCE_ROW.replace(r#""time_us":10"#, r#""time_us":10,"time_ms":1"#),
            &["line 1: time_ms", "disagrees"],
        ),
        ("a row without its time", ALLREDUCE_ROW.replace(r#","time_us":10"#, ""), &["line 1: time_us", "missing"]),
        ("a buffer of no bytes", ALLREDUCE_ROW.replace(r#""bytes":1024"#, r#""bytes":0"#), &["line 1: bytes", "at least one byte"]),
        (
            "an operation icsim does not model",
            ALLREDUCE_ROW.replace("allreduce", "alltoall"),
            &["line 1", "\"alltoall\"", "nothing to validate"],
        ),
        (
            "a transport icsim does not know",
            ALLREDUCE_ROW.replace("nvswitch", "pcie"),
            &["line 1", "unknown transport", "nothing to validate"],
        ),
        (
            "a kernel of no pass",
            KERNEL_ROW.replace("gemm_down", "gemm_nope"),
            &["line 1", "\"gemm_nope\"", "gemm_down", "nothing to validate"],
        ),
    ]
    .iter()
    .enumerate()
    {
        let path = inputs.file(&format!("row{index}.jsonl"), row);
        refused(what, &validate(&path), &[&[path.as_str()][..], expected].concat());
    }
    let table = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/all_reduce_perf_8gpu.txt")).unwrap();
    let four = inputs.file("all_reduce_perf.txt", &table.replacen("nGpus 8", "nGpus 4", 1));
    let eight = ["calibrate", "validate", &four, "--topology", "hgx-h200"];
    refused("nGpus the rank lines deny", &eight, &[&four, "line 5", "4 ranks a process", "list 8"]);
    let copy = inputs.file("copy.jsonl", r#"{"schema":1,"op":"copy","path":"h2d_pinned","bytes":4096,"time_us":5}"#);
    let fit =
        ["calibrate", "fit", &copy, "--topology", "hgx-h200", "--gpus", "2", "--out", &inputs.0.join("fit.toml").display().to_string()];
    refused("a fit with nothing to identify", &fit, &[&copy, "identifies"]);
}

#[test]
fn topology_files_and_captures_no_machine_gives_are_refused_by_key() {
    let inputs = Inputs::new("machines");
    for (what, text, key) in [
        ("an empty node name", topology("").replacen("name = \"GPU1\"", "name = \"\"", 1), &["node[3].name", "empty"][..]),
        (
            "a socket beyond any machine",
            topology("").replacen("kind = \"gpu\"", "kind = \"gpu\"\nsocket = 4000000000", 1),
            &["node[2].socket", "0 to 4095"],
        ),
        ("an NVSwitch with no links", topology("[[node]]\nname = \"nvswitch\"\nkind = \"nvswitch\"\n"), &["node[4]", "no links"]),
        ("a loop of PCIe links", topology("[[link]]\nfrom = \"GPU0\"\nto = \"GPU1\"\nkind = \"pcie\"\n"), &["link[3].to", "loop"]),
    ] {
        let path = inputs.file(&format!("{}.toml", key[0].replace(['[', ']', '.'], "-")), &text);
        refused(what, &["topo", "show", &path], &[&[path.as_str()][..], key].concat());
    }
    let matrix = |cpus: &str, numa: &str| {
        format!("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\t0-31\t0\nGPU1\tNV18\t X \t{cpus}\t{numa}\n")
    };
    for (what, text, expected) in [
        ("a NUMA node of a million", matrix("0-31", "999999"), "NUMA Affinity \"999999\""),
        ("a CPU affinity of letters", matrix("zz", "0"), "CPU Affinity \"zz\""),
    ] {
        let path = inputs.file("topo.txt", &text);
        refused(what, &["topo", "import", &path], &[&path, "line 3", expected]);
    }
    let xml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-topo-h200x2.xml")).unwrap();
    for (what, from, to, expected) in [
        ("a PCI device id of letters", "device=\"0x2335\"", "device=\"0xzz\"", &["line 3", "device=\"0xzz\""][..]),
        ("one rank twice", "rank=\"1\"", "rank=\"0\"", &["line 12", "a second GPU with rank 0"]),
    ] {
        let path = inputs.file("dump.xml", &xml.replacen(from, to, 1));
        refused(what, &["topo", "import", &path], &[&[path.as_str()][..], expected].concat());
    }
    let crawl = inputs.file("crawl.toml", "[cta.sm90.simple]\nload = \"1B/s\"\n");
    refused(
        "a thread block loading at 1 B/s",
        &["collective", "--hardware", &crawl],
        &[&crawl, "key `cta.sm90.simple.load`", "at least 1"],
    );
}

#[test]
fn folders_and_out_of_range_counts_are_called_what_they_are() {
    refused(
        "a folder as an overlay",
        &["collective", "--hardware", "models/hardware"],
        &["--hardware", "models/hardware is a directory", ".toml"],
    );
    refused(
        "a folder as an LLM",
        &["llm", "--tp", "8", "--model", "models/llm"],
        &["--model", "models/llm is a directory", "llama-3.1-70b"],
    );
    refused("four billion GPUs", &["collective", "--gpus", "4294967296"], &["--gpus", "1..=4096"]);
    refused("no GPUs", &["topo", "show", "hgx-h200", "--gpus", "0"], &["--gpus", "1..=4096"]);
    refused("a TP of four billion", &["llm", "--tp", "4294967296"], &["--tp", "1..=4096"]);
}

#[test]
fn the_model_page_counts_the_kinds_tried_here() {
    if std::env::var_os(COUNT_ONLY).is_some() {
        return;
    }
    // This file's tests again, in a process of their own (so that their
    // input folders are their own), each kind named and none run.
    let output = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["bad_input::", "--nocapture", "--test-threads", "1", "--skip", "the_model_page_counts_the_kinds_tried_here"])
        .env(COUNT_ONLY, "1")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "counting the kinds failed: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    // (The test harness writes each test's name on the line its first kind starts.)
    let kinds = stdout.matches(KIND).count();
    assert!(kinds > 100, "{kinds} kinds counted: {stdout}");
    page_says("docs/model.md", &format!("(`tests/integration/bad_input.rs` tries {kinds} kinds)"));
}
