//! `icsim serve` end to end: its JSON holds together (percentiles in order,
//! throughput and goodput agreeing with the requests served), a seed
//! repeats a run, load and a slower transport raise latency, traces and
//! listed times are served, a full cache preempts (and swaps with swap
//! space), the output folder is written, a server split into prefill and
//! decode groups reports its KV moves (slower through PCIe and host memory
//! than over NVSwitch), a concurrency cap holds requests back until others
//! finish, and bad input is refused by flag with exit code 2.

use serde_json::Value;

use crate::bad_input::refused;
use crate::common::{Inputs, icsim, icsim_json, stdout, succeeded};

/// Llama-3.1-8B at TP=2 on the H200 board: quick to serve.
fn serve(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["serve", "--model", "llama-3.1-8b", "--tp", "2", "--json"].map(String::from).to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn serve_json(extra: &[&str]) -> Value {
    let args = serve(extra);
    icsim_json(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn ms(report: &Value, metric: &str, at: &str) -> f64 {
    report[metric][at].as_f64().unwrap_or_else(|| panic!("{metric}.{at} in {report}"))
}

#[test]
fn a_served_load_reports_percentiles_in_order_and_throughput_that_adds_up() {
    let report = serve_json(&["--rate", "20", "--requests", "400", "--output", "50..150", "--slo-ttft", "200ms", "--slo-tpot", "8ms"]);
    assert_eq!(report["requests"], 400);
    for metric in ["ttft", "tpot", "itl", "e2e"] {
        let (p50, p90, p99) = (ms(&report, metric, "p50_ms"), ms(&report, metric, "p90_ms"), ms(&report, metric, "p99_ms"));
        assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{metric}: {p50} {p90} {p99}");
    }
    assert!(ms(&report, "ttft", "p99_ms") < ms(&report, "e2e", "p99_ms"));
    let seconds = report["duration_s"].as_f64().unwrap();
    let throughput = &report["throughput"];
    assert!((throughput["requests_per_s"].as_f64().unwrap() * seconds - 400.0).abs() < 1e-6);
    let per_gpu = throughput["output_tokens_per_s_per_gpu"].as_f64().unwrap();
    assert!((per_gpu * 2.0 / throughput["output_tokens_per_s"].as_f64().unwrap() - 1.0).abs() < 1e-9, "two GPUs");
    let goodput = &report["goodput"];
    let met = goodput["met"].as_u64().unwrap();
    assert!(met <= 400 && (goodput["requests_per_s"].as_f64().unwrap() * seconds - met as f64).abs() < 1e-6);
    assert!(report["cost"]["usd_per_million_output_tokens"].as_f64().unwrap() > 0.0);
    assert!(report["iterations"]["reused"].as_u64().unwrap() > report["iterations"]["simulated"].as_u64().unwrap(), "iterations repeat");
    assert!(report["kv_cache"]["peak_use"].as_f64().unwrap() > 0.0);
    assert!(!report["timeline"].as_array().unwrap().is_empty());
}

#[test]
fn the_same_seed_serves_the_same_and_another_seed_differs() {
    let args = ["--rate", "30", "--requests", "200", "--prompt", "lognormal:700,1", "--burstiness", "2"];
    let run = |seed: &str| {
        let mut all = serve(&args);
        all.extend(["--seed".to_string(), seed.to_string()]);
        stdout(&icsim(&all.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    assert_eq!(run("5"), run("5"));
    assert_ne!(run("5"), run("6"));
}

#[test]
fn more_load_and_a_slower_transport_both_raise_latency() {
    let light = serve_json(&["--rate", "1", "--requests", "100"]);
    let heavy = serve_json(&["--rate", "400", "--requests", "400"]);
    assert!(ms(&heavy, "ttft", "p99_ms") > 2.0 * ms(&light, "ttft", "p99_ms"));
    assert!(ms(&heavy, "tpot", "p50_ms") > ms(&light, "tpot", "p50_ms"), "bigger batches take longer steps");
    assert!(heavy["throughput"]["requests_per_s"].as_f64().unwrap() < 400.0, "a saturated service takes less than it is offered");
    let pcie = |transport: &str| {
        let args = ["-t", "pcie-gen4-8gpu", "--gpu", "h100-pcie", "--rate", "5", "--requests", "100", "--transport", transport];
        serve_json(&args)
    };
    let (p2p, shm) = (pcie("p2p"), pcie("shm"));
    assert!(ms(&shm, "tpot", "p50_ms") > ms(&p2p, "tpot", "p50_ms"), "two copies through host memory cost more than one DMA");
    assert!(shm["iterations"]["comm_share"].as_f64().unwrap() > p2p["iterations"]["comm_share"].as_f64().unwrap());
}

#[test]
fn a_full_cache_preempts_and_swap_space_saves_the_recompute() {
    // Llama-3.1-70B at TP=2 on 80 GB cards: the weights leave 551 blocks.
    let tight = |preemption: &str| {
        let machine =
            ["serve", "--model", "llama-3.1-70b", "--tp", "2", "-t", "pcie-gen4-8gpu", "--gpu", "h100-pcie", "--transport", "p2p"];
        let load = ["--rate", "0.7", "--requests", "300", "--preemption", preemption, "--json"];
        icsim_json(&[&machine[..], &load[..]].concat())
    };
    let (recompute, swap) = (tight("recompute"), tight("swap"));
    let kv = |report: &Value, field: &str| report["kv_cache"][field].as_f64().unwrap();
    assert!(kv(&recompute, "preemptions") > 0.0 && kv(&recompute, "recomputed_tokens") > 0.0);
    assert_eq!(kv(&recompute, "swapped_blocks"), 0.0);
    assert!(kv(&swap, "preemptions") > 0.0 && kv(&swap, "swapped_blocks") > 0.0 && kv(&swap, "swap_share") > 0.0);
    assert_eq!(kv(&swap, "recomputed_tokens"), 0.0);
    assert_eq!(kv(&swap, "peak_use"), 1.0);
}

#[test]
fn traces_and_listed_times_are_served_and_the_folder_holds_every_file() {
    let inputs = Inputs::new("serve-trace");
    let trace = inputs.file(
        "trace.jsonl",
        "{\"timestamp\": 0, \"input_length\": 300, \"output_length\": 20}\n{\"timestamp\": 250, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [3]}\n{\"timestamp\": 500, \"input_length\": 40, \"output_length\": 64}\n",
    );
    let out = inputs.0.join("out");
    let report = serve_json(&["--trace", &trace, "--trace-time-unit", "ms", "--out", out.to_str().unwrap()]);
    assert_eq!(report["requests"], 3);
    let rows = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    let lines: Vec<&str> = rows.lines().collect();
    assert_eq!(lines.len(), 4, "a header and a row a request: {rows}");
    assert!(lines[0].starts_with("id,arrival_s,prompt,output,ttft_ms") && lines[2].starts_with("1,0.25,1000,5,"), "{rows}");
    for file in ["summary.json", "summary.csv", "timeline.csv"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary, report);
    // The same lengths at listed times; and the trace's lengths at a rate.
    let listed = serve_json(&["--at", "0,0.25,0.5", "--prompt", "300", "--output", "20"]);
    assert_eq!(listed["requests"], 3);
    let at_rate = serve_json(&["--trace", &trace, "--rate", "2", "--requests", "7"]);
    assert_eq!(at_rate["requests"], 7);
    let table = succeeded(&icsim(&["serve", "--model", "llama-3.1-8b", "--tp", "1", "--rate", "3", "--requests", "20"]));
    assert!(table.contains("latency per request") && table.contains("goodput") && table.contains("kv use"), "{table}");
}

#[test]
fn several_rates_each_serve_as_one_rate_does_and_the_knee_is_the_last_rate_meeting_the_objectives() {
    let inputs = Inputs::new("serve-rates");
    let out = inputs.0.join("load");
    let objectives = ["--slo-ttft", "400ms", "--slo-tpot", "15ms", "--requests", "150", "--prompt", "lognormal:1500,1"];
    let load = serve_json(&[&["--rates", "2,20,80,320", "--out", out.to_str().unwrap()][..], &objectives[..]].concat());
    let rates = load["rates"].as_array().unwrap();
    assert_eq!(rates.len(), 4);
    // Each rate is the same service as `--rate` alone gives.
    for row in rates {
        let rate = row["rate"].as_f64().unwrap().to_string();
        let alone = serve_json(&[&["--rate", rate.as_str()][..], &objectives[..]].concat());
        assert_eq!(row["ttft_p99_ms"], alone["ttft"]["p99_ms"], "at {rate}/s");
        assert_eq!(row["tpot_p50_ms"], alone["tpot"]["p50_ms"], "at {rate}/s");
        assert_eq!(row["goodput_requests_per_s"], alone["goodput"]["requests_per_s"], "at {rate}/s");
        let meets = ms(&alone, "ttft", "p99_ms") <= 400.0 && ms(&alone, "tpot", "p50_ms") <= 15.0;
        assert_eq!(row["meets_slo"], meets, "at {rate}/s");
    }
    let met: Vec<bool> = rates.iter().map(|r| r["meets_slo"] == true).collect();
    assert!(met[0] && met[1] && !met[3], "light load meets them, a flood does not: {met:?}");
    let knee = met.iter().take_while(|m| **m).count() - 1;
    assert_eq!(load["knee_rate"], rates[knee]["rate"]);
    assert_eq!(rates.iter().filter(|r| r["knee"] == true).count(), 1);
    for file in ["load.json", "load.csv", "latency-load.png", "latency-load.svg"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let svg = std::fs::read_to_string(out.join("latency-load.svg")).unwrap();
    assert!(svg.contains("objective: p99 TTFT &lt;= 400 ms") && svg.contains("knee:"), "the objectives and the knee drawn");
    let table = succeeded(&icsim(&["serve", "--model", "llama-3.1-8b", "--tp", "1", "--rates", "1,3", "--requests", "20"]));
    assert!(table.contains("against load") && table.contains("knee: give --slo-ttft or --slo-tpot"), "{table}");
    refused("falling rates", &serve(&["--rates", "4,2"]).iter().map(String::as_str).collect::<Vec<_>>(), &["--rates", "rising order"]);
    refused("a rate and rates", &serve(&["--rates", "1,2", "--rate", "3"]).iter().map(String::as_str).collect::<Vec<_>>(), &["--rate"]);
    refused("a rate of 0 among them", &serve(&["--rates", "0,2"]).iter().map(String::as_str).collect::<Vec<_>>(), &["--rate 0"]);
}

#[test]
fn a_concurrency_cap_sends_requests_as_others_finish_and_times_them_from_then() {
    let capped = |cap: &str| serve_json(&["--requests", "40", "--prompt", "512", "--output", "64", "--max-concurrency", cap]);
    let (one, eight) = (capped("1"), capped("8"));
    assert_eq!(one["setup"]["max_concurrency"], 1);
    assert!(one["setup"]["arrivals"].as_str().unwrap().contains("all at once, at most 1 in flight"), "{}", one["setup"]);
    // One at a time, every request is served as if alone: its time to the
    // first token does not grow down the queue, while eight share the GPUs
    // and serve more requests a second.
    assert!(ms(&one, "ttft", "p99_ms") < 1.01 * ms(&one, "ttft", "p50_ms"), "{}", one["ttft"]);
    let rate = |report: &Value| report["throughput"]["requests_per_s"].as_f64().unwrap();
    assert!(rate(&eight) > 3.0 * rate(&one), "{} against {}", rate(&eight), rate(&one));
    // Without a cap, a rate can be given with one, as vLLM's benchmark does.
    let rated = serve_json(&["--requests", "40", "--rate", "50", "--max-concurrency", "2"]);
    assert!(rated["setup"]["arrivals"].as_str().unwrap().starts_with("Poisson at 50/s, at most 2 in flight"));
    assert!(serve_json(&["--requests", "40", "--rate", "50"])["setup"].get("max_concurrency").is_none());
    // At several rates the words list them, and keep the cap.
    let rates = serve_json(&["--requests", "20", "--rates", "1,2", "--max-concurrency", "2"]);
    assert_eq!(rates["setup"]["arrivals"], "Poisson at 1, 2/s, at most 2 in flight", "{}", rates["setup"]);
}

#[test]
fn a_vllm_benchmark_result_is_served_as_the_benchmark_sent_its_requests() {
    let inputs = Inputs::new("serve-bench-result");
    let lens = r#""input_lens": [600, 900, 300, 800, 500, 700], "output_lens": [40, 30, 50, 20, 60, 10]"#;
    let capped = inputs.file("capped.json", &format!(r#"{{"request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2, {lens}}}"#));
    let rated = inputs.file("rated.json", &format!(r#"{{"request_rate": 3.0, "burstiness": 2.0, "max_concurrency": null, {lens}}}"#));
    let arrivals = |report: &Value| report["setup"]["arrivals"].as_str().unwrap().to_string();
    let report = serve_json(&["--trace", &capped]);
    assert_eq!((arrivals(&report), report["requests"].clone()), ("all at once, at most 2 in flight".to_string(), 6.into()));
    assert_eq!(arrivals(&serve_json(&["--trace", &rated])), "gamma at 3/s, burstiness 2");
    // Each flag changes what it names, and the rest stays the benchmark's.
    assert_eq!(arrivals(&serve_json(&["--trace", &capped, "--rate", "5"])), "Poisson at 5/s, at most 2 in flight");
    assert_eq!(arrivals(&serve_json(&["--trace", &capped, "--max-concurrency", "4"])), "all at once, at most 4 in flight");
    let run = icsim(&["serve", "--model", "llama-3.1-8b", "--tp", "1", "--trace", &capped]);
    let note = String::from_utf8_lossy(&run.stderr);
    assert!(note.contains("capped.json: served as the benchmark sent its requests, all at once, at most 2 in flight"), "{note}");
    let older = inputs.file("older.json", &format!("{{{lens}}}"));
    refused("an older result, no rate", &serve(&["--trace", &older]).iter().map(String::as_str).collect::<Vec<_>>(), &["--rate"]);
}

#[test]
fn several_caps_each_serve_as_one_cap_does_and_the_knee_is_the_most_clients_meeting_the_objectives() {
    let objectives = ["--slo-ttft", "300ms", "--requests", "60", "--prompt", "512", "--output", "32"];
    let load = serve_json(&[&["--max-concurrency", "1,4,60"][..], &objectives[..]].concat());
    assert_eq!(load["setup"]["arrivals"], "all at once, at most 1, 4, 60 in flight", "{}", load["setup"]);
    let rows = load["rates"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        let cap = row["max_concurrency"].as_u64().unwrap().to_string();
        let alone = serve_json(&[&["--max-concurrency", cap.as_str()][..], &objectives[..]].concat());
        assert_eq!(row["ttft_p99_ms"], alone["ttft"]["p99_ms"], "at most {cap}");
        assert_eq!(row["tpot_p50_ms"], alone["tpot"]["p50_ms"], "at most {cap}");
        assert!(row["rate"].is_null() && row["rate_per_usd_hour"].is_null(), "all at once: no rate offered");
    }
    let met: Vec<bool> = rows.iter().map(|r| r["meets_slo"] == true).collect();
    assert!(met[0] && !met[2], "one at a time meets it, all sixty at once do not: {met:?}");
    let knee = met.iter().take_while(|m| **m).count() - 1;
    assert_eq!(load["knee_max_concurrency"], rows[knee]["max_concurrency"]);
    assert!(load["knee_rate"].is_null());
    let table = succeeded(&icsim(
        &[&["serve", "--model", "llama-3.1-8b", "--tp", "1", "--max-concurrency", "1,4,60"][..], &objectives[..]].concat(),
    ));
    let knee_line = format!("knee: {} in flight, the most clients with p99 TTFT within 300 ms", rows[knee]["max_concurrency"]);
    assert!(table.contains(&knee_line) && !table.contains("rate_per_usd_hour"), "{table}");
    refused(
        "falling caps",
        &serve(&["--max-concurrency", "4,2"]).iter().map(String::as_str).collect::<Vec<_>>(),
        &["--max-concurrency", "rising order"],
    );
    refused(
        "rates and caps both listed",
        &serve(&["--max-concurrency", "2,4", "--rates", "1,2"]).iter().map(String::as_str).collect::<Vec<_>>(),
        &["--rates", "vary one of them"],
    );
}

#[test]
fn bad_serving_input_is_refused_by_flag() {
    let inputs = Inputs::new("serve-bad");
    fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        ["serve", "--model", "llama-3.1-70b", "--tp", "8"].into_iter().chain(extra.iter().copied()).collect()
    }
    refused("no arrivals", &with(&[]), &["--rate", "--at", "--trace", "--max-concurrency"]);
    refused("a cap of none in flight", &with(&["--max-concurrency", "0"]), &["--max-concurrency"]);
    refused("a rate of 0", &with(&["--rate", "0"]), &["--rate 0"]);
    refused("a negative burstiness", &with(&["--rate", "1", "--burstiness", "0"]), &["--burstiness"]);
    refused("a bad length", &with(&["--rate", "1", "--prompt", "10..2"]), &["--prompt", "LOW..HIGH"]);
    refused("a prompt beyond the context", &with(&["--rate", "1", "--prompt", "200000"]), &["--prompt", "context of 131072"]);
    refused("weights larger than a GPU", &["serve", "--tp", "1", "--rate", "1"], &["--tp", "at least 2"]);
    refused(
        "weights filling the memory",
        &["serve", "--tp", "2", "--rate", "1", "--gpu-memory-utilization", "0.3"],
        &["--gpu-memory-utilization 0.3", "raise it or --tp"],
    );
    refused("an unknown preemption", &with(&["--rate", "1", "--preemption", "drop"]), &["--preemption", "drop"]);
    refused("a graph of no sequences", &with(&["--rate", "1", "--cuda-graph-sizes", "8,0"]), &["--cuda-graph-sizes"]);
    refused("graphs told no keys", &with(&["--rate", "1", "--graph-keys", "0"]), &["--graph-keys"]);
    refused("an SLO of 0", &with(&["--rate", "1", "--slo-ttft", "0s"]), &["--slo-ttft"]);
    refused("a transport the board lacks", &with(&["--rate", "1", "--transport", "nvlink"]), &["--transport"]);
    refused("arrivals beyond the clock", &with(&["--rate", "0.000001", "--requests", "100"]), &["--requests 100", "days"]);
    refused("more requests than times", &with(&["--at", "0,1", "--requests", "3"]), &["--requests 3", "2 arrival times"]);
    let trace = inputs.file("bad.jsonl", "{\"input_length\": 3, \"output_length\": 1}\n{\"input_length\": 3}\n");
    refused("a trace row without its output", &with(&["--trace", &trace, "--rate", "1"]), &[&trace, "line 2", "output_tokens"]);
    refused("a missing trace", &with(&["--trace", "/nonexistent/t.jsonl", "--rate", "1"]), &["cannot read trace"]);
    let untimed = inputs.file("untimed.jsonl", "{\"input_length\": 3, \"output_length\": 1}\n");
    refused("a trace without times and no rate", &with(&["--trace", &untimed]), &["--rate", "no timestamps"]);
}

/// Llama-3.1-8B's KV cache of one token: 32 layers x K and V x 8 heads of
/// 128 x 2 bytes.
const EIGHT_B_TOKEN_KV: u64 = 32 * 2 * 8 * 128 * 2;

/// Llama-3.1-8B on a server split into a prefill group of `prefill` and a
/// decode group of `decode` GPUs, 60 requests of 1000 prompt and 50 output
/// tokens at 10 a second.
fn split(machine: &[&str], prefill: &str, decode: &str) -> Value {
    let args = ["serve", "--model", "llama-3.1-8b", "--prefill-tp", prefill, "--decode-tp", decode, "--json"];
    let load = ["--rate", "10", "--requests", "60", "--prompt", "1000", "--output", "50"];
    icsim_json(&[&args[..], machine, &load[..]].concat())
}

#[test]
fn a_split_server_moves_every_prompts_cache_and_says_how_much_of_ttft_it_takes() {
    let report = split(&[], "2", "2");
    assert_eq!(report["requests"], 60);
    assert_eq!(report["setup"]["prefill_tp"], 2);
    let groups = &report["split"];
    assert_eq!((groups["prefill"]["gpus"].as_str(), groups["decode"]["gpus"].as_str()), (Some("0,1"), Some("2,3")));
    let moves = &groups["kv_move"];
    assert_eq!(moves["bytes"].as_u64(), Some(60 * 1000 * EIGHT_B_TOKEN_KV), "every prompt's cache, once");
    assert_eq!(moves["transport"], "nvswitch");
    assert!(moves["busiest_link"].as_str().is_some_and(|l| l.contains("nvswitch")), "{moves}");
    let (p50, p99) = (moves["ttft_share_p50"].as_f64().unwrap(), moves["ttft_share_p99"].as_f64().unwrap());
    assert!(0.0 < p50 && p50 <= p99 && p99 < 1.0, "{moves}");
    assert!(moves["e2e_share_p50"].as_f64().unwrap() < p50, "a smaller part of the whole request");
    // Four GPUs serve: per-GPU throughput divides by four.
    let throughput = &report["throughput"];
    let per_gpu = throughput["output_tokens_per_s_per_gpu"].as_f64().unwrap();
    assert!((per_gpu * 4.0 / throughput["output_tokens_per_s"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    // The decode group decodes only; the prefill group's iterations are its own.
    assert!(report["iterations"]["mean_tokens"].as_f64() == report["iterations"]["mean_decodes"].as_f64(), "{}", report["iterations"]);
    assert!(groups["prefill"]["iterations"].as_u64().unwrap() < groups["decode"]["iterations"].as_u64().unwrap());
    // Listed GPUs are taken, and the other group the first ones left.
    let listed = icsim_json(&[
        "serve",
        "--model",
        "llama-3.1-8b",
        "--prefill-tp",
        "2",
        "--decode-tp",
        "1",
        "--prefill-gpus",
        "6,7",
        "--rate",
        "10",
        "--requests",
        "5",
        "--json",
    ]);
    assert_eq!((listed["split"]["prefill"]["gpus"].as_str(), listed["split"]["decode"]["gpus"].as_str()), (Some("6,7"), Some("0")));
    // The same request unsplit has no split section.
    assert!(serve_json(&["--rate", "10", "--requests", "5"]).get("split").is_none());
}

#[test]
fn the_kv_move_takes_longer_through_pcie_and_host_memory_than_over_nvswitch() {
    let nvswitch = split(&[], "4", "4");
    let pcie = split(&["-t", "pcie-gen5-8gpu"], "4", "4");
    let moves = |report: &Value| report["split"]["kv_move"].clone();
    let (fast, slow) = (moves(&nvswitch), moves(&pcie));
    assert_eq!(fast["bytes"], slow["bytes"], "the same caches move");
    // Every move is the same 1000 tokens: its time is the move's alone.
    assert!(slow["move_ms"]["p50_ms"].as_f64().unwrap() > 3.0 * fast["move_ms"]["p50_ms"].as_f64().unwrap(), "{slow} {fast}");
    assert_eq!(slow["transport"], "shm", "the groups sit on two sockets: the copies go through host memory");
    assert!(
        slow["busiest_link"].as_str().is_some_and(|l| l.contains("socket link") || l.contains("PCIe") || l.contains("memory")),
        "{slow}"
    );
    assert!(slow["ttft_share_p50"].as_f64().unwrap() > fast["ttft_share_p50"].as_f64().unwrap());
}

#[test]
fn a_split_is_written_in_every_output() {
    let inputs = Inputs::new("serve-split");
    let out = inputs.0.join("out");
    let machine = ["serve", "--model", "llama-3.1-8b", "--prefill-tp", "1", "--decode-tp", "2", "--rate", "10", "--requests", "20"];
    let table = succeeded(&icsim(&[&machine[..], &["--out", out.to_str().unwrap()]].concat()));
    assert!(table.contains("prefill TP=1 on GPUs 0, decode TP=2 on GPUs 1,2") && table.contains("KV cache moved"), "{table}");
    let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let header = summary.lines().next().unwrap();
    for column in
        ["setup_prefill_tp", "split_kv_move_bytes", "split_kv_move_busiest_link", "split_kv_move_ttft_share_p99", "split_prefill_kv_blocks"]
    {
        assert!(header.split(',').any(|c| c == column), "{column} in {header}");
    }
    let csv = stdout(&icsim(&[&machine[..], &["--format", "csv"]].concat()));
    assert_eq!(csv, summary, "stdout's CSV is the summary's");
}

#[test]
fn a_split_server_at_several_rates_serves_each_as_one_rate_does() {
    let split = ["serve", "--model", "llama-3.1-8b", "--prefill-tp", "1", "--decode-tp", "2", "--requests", "40", "--json"];
    let load = icsim_json(&[&split[..], &["--rates", "2,40", "--slo-ttft", "1s"]].concat());
    assert_eq!(load["setup"]["prefill_tp"], 1);
    assert_eq!((&load["split"]["prefill"]["gpus"], &load["split"]["decode"]["gpus"]), (&Value::from("0"), &Value::from("1,2")));
    for row in load["rates"].as_array().unwrap() {
        let rate = row["rate"].as_f64().unwrap().to_string();
        let alone = icsim_json(&[&split[..], &["--rate", rate.as_str(), "--slo-ttft", "1s"]].concat());
        assert_eq!(row["ttft_p99_ms"], alone["ttft"]["p99_ms"], "at {rate}/s");
        assert_eq!(row["output_tokens_per_s"], alone["throughput"]["output_tokens_per_s"], "at {rate}/s");
        // The three GPUs of both groups are paid for.
        let per_gpu = alone["cost"]["usd_per_gpu_hour"].as_f64().unwrap();
        assert!((row["usd_per_hour"].as_f64().unwrap() - 3.0 * per_gpu).abs() < 1e-9, "{row}");
    }
    let table = succeeded(&icsim(&[
        "serve",
        "--model",
        "llama-3.1-8b",
        "--prefill-tp",
        "1",
        "--decode-tp",
        "1",
        "--rates",
        "1,2",
        "--requests",
        "10",
    ]));
    assert!(table.contains("prefill TP=1 on GPUs 0, decode TP=1 on GPUs 1") && table.contains("KV cache of the decode group"), "{table}");
}

#[test]
fn bad_splits_are_refused_by_flag() {
    fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        ["serve", "--model", "llama-3.1-8b", "--rate", "1"].into_iter().chain(extra.iter().copied()).collect()
    }
    refused("more GPUs than the server has", &with(&["--prefill-tp", "4", "--decode-tp", "8"]), &["--decode-tp 8", "8 GPUs"]);
    refused("a split and --tp", &with(&["--tp", "2", "--prefill-tp", "2", "--decode-tp", "2"]), &["--tp", "cannot be used with"]);
    // clap names the missing flag on the line below its error.
    refused("half a split", &with(&["--prefill-tp", "2"]), &["required arguments"]);
    refused("neither", &with(&[]), &["required arguments"]);
    refused(
        "a GPU the server lacks",
        &with(&["--prefill-tp", "2", "--decode-tp", "2", "--prefill-gpus", "0,9"]),
        &["--prefill-gpus 0,9", "no GPU 9"],
    );
    refused(
        "a GPU in both groups",
        &with(&["--prefill-tp", "2", "--decode-tp", "2", "--prefill-gpus", "0,1", "--decode-gpus", "1,2"]),
        &["--decode-gpus", "GPU 1"],
    );
    refused(
        "a list of the wrong length",
        &with(&["--prefill-tp", "2", "--decode-tp", "2", "--decode-gpus", "4"]),
        &["--decode-gpus 4", "--decode-tp 2"],
    );
    refused("a degree the model cannot split", &with(&["--prefill-tp", "3", "--decode-tp", "2"]), &["--prefill-tp 3", "TP=3"]);
    refused(
        "a group too small for the weights",
        &["serve", "--model", "llama-3.1-70b", "--rate", "1", "--prefill-tp", "1", "--decode-tp", "4"],
        &["prefill", "--prefill-tp 1"],
    );
}

#[test]
fn decode_graphs_pad_their_batches_and_a_longer_capture_splits_keys_differently() {
    // Llama-3.1-8B at TP=1 as the validation's engine runs it: its varlen
    // attention over decodes is priced as FlashAttention launches it.
    let engine = |extra: &[&str]| {
        let mut args = vec!["serve", "--model", "llama-3.1-8b", "--tp", "1", "--fusion", "torch-varlen", "--stack", "torch-graph"];
        args.extend(["--rate", "4", "--requests", "60", "--prompt", "512", "--output", "64", "--json"]);
        args.extend(extra);
        icsim_json(&args)
    };
    let plain = ms(&engine(&[]), "tpot", "p50_ms");
    // Every batch padded to 64 sequences: each decode iteration does more work.
    let padded = ms(&engine(&["--cuda-graph-sizes", "64"]), "tpot", "p50_ms");
    assert!(padded > plain, "padding to 64 sequences: {padded} ms against {plain} ms");
    // Told 131072 keys, the library divides them into splits longer than
    // any sequence, so a split takes a whole sequence.
    let told_more = ms(&engine(&["--graph-keys", "131072"]), "tpot", "p50_ms");
    assert!(told_more > plain, "told 131072 keys: {told_more} ms against {plain} ms");
}
