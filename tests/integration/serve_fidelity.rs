//! `icsim serve` against a continuously batched engine measured on one H200
//! (`tools/serve_engine.py`: Llama-3.1-8B shapes at TP=1, random weights,
//! the scheduler's rules; `models/hardware/measurements/h200-serve-1gpu/`).
//! Each measured run's requests (their arrival times and lengths) are
//! served again with the engine's settings, the `torch-varlen` fusion (the
//! engine's kernels, as its source launches them) and the torch-graph
//! stack (decode-only iterations replayed from the graph, the others
//! launched by torch-eager, as the engine runs them), and their latencies
//! and throughput compared; the engine's
//! profiled iterations are compared one by one with the simulated forward,
//! and their kernels kind by kind with the model's; the products are priced
//! against the project's own cuBLAS measurements. Nothing here was
//! fitted to these runs but the host's time an iteration
//! (`--step-overhead`), the mean the engine logged over its fixed-length
//! runs: those are in sample for it, the runs of other lengths are not.
//! Each figure is held at today's; the issue's bound on p50 TPOT is met in
//! the median, not at the worst; docs/serving.md's table must say what
//! this prints.

use std::path::{Path, PathBuf};

use serde_json::Value;

use icsim::calibrate::compute::measured_kernel;
use icsim::calibrate::profile::{kind_of, model_kind};
use icsim::calibrate::read_measurements;
use icsim::calibrate::schema::Measurement;
use icsim::config::llm::{LlmModel, Scope};
use icsim::serve::iteration::{DecodeGraphs, IterationTimes, SimulatedIterations};
use icsim::stack::Stack;
use icsim::transport::Mode;
use icsim::units::{Bytes, Time};
use icsim::workload::compute::{Clock, KernelClass};
use icsim::workload::forward::{PassTokens, Step, pass_program};
use icsim::workload::tp::{CollectiveCache, TensorParallel};

use crate::common::{Inputs, extremes, icsim_json, json_lines, listed, page_quotes, page_says, preset, span};

/// The host's time before each iteration's forward: the mean over the
/// 15,783 iterations of the engine's fixed-length runs (wall clock less
/// the GPU's CUDA-event time, and the gap to the next iteration).
const STEP_OVERHEAD: &str = "562us";

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements/h200-serve-1gpu")
}

fn rows(name: &str) -> Vec<Value> {
    json_lines(&folder().join(name))
}

fn number(row: &Value, path: &str) -> f64 {
    path.split('.').fold(row, |v, key| &v[key]).as_f64().unwrap_or_else(|| panic!("{path} in {row}"))
}

/// One measured run and its prediction.
struct Compared {
    label: String,
    /// Its lengths and limits: the label without the operands' suffix.
    lengths: String,
    /// Whether the engine drew its token ids at random; the first runs
    /// (rows without `token_ids`) fed one repeated id, on which the
    /// products run faster than on text's.
    random_ids: bool,
    rate: f64,
    /// The engine's clients' cap, where its run had one.
    max_concurrency: Option<u64>,
    /// Whether the engine kept up with the rate (served within 5% of it).
    below_knee: bool,
    /// (metric, measured, predicted).
    metrics: Vec<(&'static str, f64, f64)>,
}

impl Compared {
    fn error(&self, metric: &str) -> f64 {
        let &(_, measured, predicted) = self.metrics.iter().find(|m| m.0 == metric).expect("a compared metric");
        predicted / measured - 1.0
    }
}

/// The sets made after the decode model was built, each predicted before
/// it was looked at: its label, and the rates at which the engine kept up.
const BLIND_SETS: [(&str, &[f64]); 2] =
    [("decode-heavy-budget1024-random-ids", &[5.0, 10.0]), ("large-batch-budget2048-random-ids", &[8.0, 16.0, 24.0])];

/// Whether a run's label is one of [`BLIND_SETS`].
fn blind(label: &str) -> bool {
    BLIND_SETS.iter().any(|(set, _)| *set == label)
}

/// Whether a run's clients were capped: the runs labelled `capN-...`
/// ([`CAPPED_SETS`]).
fn capped(label: &str) -> bool {
    label.starts_with("cap")
}

/// Every measured run of the sets `chosen` picks by label, served again by
/// `icsim serve` (its traces written under a folder of the test's `name`).
fn compared(name: &str, chosen: impl Fn(&str) -> bool) -> Vec<Compared> {
    let requests = rows("requests.jsonl");
    let inputs = Inputs::new(name);
    rows("runs.jsonl")
        .iter()
        .filter(|run| chosen(run["label"].as_str().expect("a label")))
        .map(|run| {
            let label = run["label"].as_str().expect("a label").to_string();
            assert_ne!(run["dist_backend"], "gloo", "{label}: a run through gloo (every rank on one GPU) times nothing worth comparing");
            let rate = number(run, "rate");
            let trace: String = requests
                .iter()
                .filter(|r| r["label"] == run["label"] && number(r, "rate") == rate)
                .map(|r| {
                    format!(
                        "{{\"timestamp\": {}, \"prompt_tokens\": {}, \"output_tokens\": {}}}\n",
                        r["arrival"], r["prompt_tokens"], r["output_tokens"]
                    )
                })
                .collect();
            let trace = inputs.file(&format!("{label}-{rate}.jsonl"), &trace);
            let (seqs, budget) = (run["max_num_seqs"].to_string(), run["max_num_batched_tokens"].to_string());
            // The engine's decode graphs: the sizes it captured, and the
            // slot length its attention was told at capture.
            let sizes =
                run["graph_batches"].as_array().expect("the graphs' sizes").iter().map(Value::to_string).collect::<Vec<_>>().join(",");
            let keys = run["max_len"].to_string();
            // The engine's clients' cap, where its run had one.
            let max_concurrency = run.get("max_concurrency").and_then(Value::as_u64);
            let cap = max_concurrency.map(|cap| cap.to_string());
            // The engine's model and TP, its collectives as NCCL picks them,
            // through host memory where it ran with NCCL's P2P off.
            let (model, tp) = (run["model"].as_str().expect("a model"), run.get("tp").map_or("1".to_string(), Value::to_string));
            let transport = if run["env"]["NCCL_P2P_DISABLE"] == "1" { "shm" } else { "auto" };
            let mut args = vec![
                "serve",
                "--model",
                model,
                "--tp",
                &tp,
                "--transport",
                transport,
                "--allreduce",
                "nccl",
                "--trace",
                &trace,
                "--max-num-seqs",
                &seqs,
                "--max-num-batched-tokens",
                &budget,
                "--fusion",
                "torch-varlen",
                "--stack",
                "torch-graph",
                "--step-overhead",
                STEP_OVERHEAD,
                "--cuda-graph-sizes",
                &sizes,
                "--graph-keys",
                &keys,
                "--json",
            ];
            if let Some(cap) = &cap {
                args.extend(["--max-concurrency", cap.as_str()]);
            }
            let predicted = icsim_json(&args);
            let measured = &run["measured"];
            let metrics = vec![
                ("ttft_p50", number(measured, "ttft_p50_ms"), number(&predicted, "ttft.p50_ms")),
                ("ttft_p99", number(measured, "ttft_p99_ms"), number(&predicted, "ttft.p99_ms")),
                ("tpot_p50", number(measured, "tpot_p50_ms"), number(&predicted, "tpot.p50_ms")),
                ("tpot_p99", number(measured, "tpot_p99_ms"), number(&predicted, "tpot.p99_ms")),
                ("throughput", number(measured, "requests_per_s"), number(&predicted, "throughput.requests_per_s")),
            ];
            let random_ids = run["token_ids"] == "random";
            let lengths = label.trim_end_matches("-random-ids").to_string();
            let below_knee = number(measured, "requests_per_s") >= 0.95 * rate;
            Compared { label, lengths, random_ids, rate, max_concurrency, below_knee, metrics }
        })
        .collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// The median and the worst absolute error of `metric` over `runs`.
fn spread(runs: &[&Compared], metric: &str) -> (f64, f64) {
    let errors: Vec<f64> = runs.iter().map(|c| c.error(metric).abs()).collect();
    (median(errors.clone()), errors.into_iter().fold(0.0, f64::max))
}

/// Today's median and worst absolute error below the knee of one metric,
/// over a set of runs: (metric, the issue's bound on the median, held
/// figures over the set, held figures over its runs of drawn lengths).
type Held = (&'static str, f64, (f64, f64), (f64, f64));

/// The runs with token ids drawn at random: every one out of sample (the
/// host time came from the repeated-id runs).
const RANDOM_IDS_TODAY: [Held; 5] = [
    ("throughput", 0.10, (0.01, 0.01), (0.01, 0.01)),
    ("tpot_p50", 0.10, (0.05, 0.08), (0.05, 0.08)),
    ("ttft_p50", 0.15, (0.04, 0.08), (0.04, 0.04)),
    ("ttft_p99", f64::INFINITY, (0.03, 0.17), (0.03, 0.17)),
    ("tpot_p99", f64::INFINITY, (0.04, 0.09), (0.06, 0.09)),
];

/// The first runs, one token id repeated: their products ran faster than
/// the model (fitted on varied operands) prices them, so they are held
/// further off than the random-id runs, on the long side.
const REPEATED_ID_TODAY: [Held; 5] = [
    ("throughput", 0.10, (0.01, 0.01), (0.01, 0.01)),
    ("tpot_p50", 0.10, (0.06, 0.09), (0.07, 0.09)),
    ("ttft_p50", 0.15, (0.11, 0.17), (0.10, 0.14)),
    ("ttft_p99", f64::INFINITY, (0.20, 0.43), (0.18, 0.32)),
    ("tpot_p99", f64::INFINITY, (0.09, 0.21), (0.11, 0.15)),
];

#[test]
fn a_measured_engine_is_served_again_within_todays_errors_and_the_issue_says_how_far_that_is() {
    let runs = compared("serve-fidelity", |label| !blind(label) && !capped(label));
    println!("\nicsim serve against tools/serve_engine.py on one H200 (Llama-3.1-8B, TP=1), measured / predicted, error:");
    println!("{:<34} {:>5} {:>5}  metrics", "run", "rate", "knee");
    for c in &runs {
        let metrics: Vec<String> =
            c.metrics.iter().map(|(name, m, p)| format!("{name} {m:.2}/{p:.2} {:+.0}%", (p / m - 1.0) * 100.0)).collect();
        println!("{:<34} {:>5} {:>5}  {}", c.label, c.rate, if c.below_knee { "below" } else { "past" }, metrics.join("  "));
    }
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/serving.md")).expect("docs/serving.md");
    let mut figures = Vec::new();
    for (random_ids, today, name) in
        [(true, RANDOM_IDS_TODAY, "token ids drawn at random"), (false, REPEATED_ID_TODAY, "one token id repeated")]
    {
        let set: Vec<&Compared> = runs.iter().filter(|c| c.random_ids == random_ids).collect();
        let below: Vec<&Compared> = set.iter().copied().filter(|c| c.below_knee).collect();
        let drawn: Vec<&Compared> = below.iter().copied().filter(|c| c.lengths != "fixed-1024-128").collect();
        assert_eq!((set.len(), below.len(), drawn.len()), (13, 8, 5), "{name}: the runs and which kept up");
        println!("\n{name}, below the knee: median / worst absolute error (all eight runs; the five of drawn lengths)");
        let (mut grown, mut unquoted) = (Vec::new(), Vec::new());
        for (metric, issue, held, held_drawn) in today {
            let (median_all, worst_all) = spread(&below, metric);
            let (median_drawn, worst_drawn) = spread(&drawn, metric);
            let verdict = match issue {
                i if i.is_infinite() => "the issue gives no bound".to_string(),
                i if median_all <= i => format!("meets the issue's {:.0}%", i * 100.0),
                i => format!("misses the issue's {:.0}%", i * 100.0),
            };
            println!(
                "{metric:<11} {:>5.1}% / {:>5.1}%   {:>5.1}% / {:>5.1}%   ({verdict})",
                median_all * 100.0,
                worst_all * 100.0,
                median_drawn * 100.0,
                worst_drawn * 100.0
            );
            if median_all > held.0 || worst_all > held.1 || median_drawn > held_drawn.0 || worst_drawn > held_drawn.1 {
                grown.push(metric);
            }
            for (median, worst) in [(median_all, worst_all), (median_drawn, worst_drawn)] {
                let quoted = format!("{:.1}% / {:.1}%", median * 100.0, worst * 100.0);
                if !page.contains(&quoted) {
                    unquoted.push(format!("{metric} {quoted}"));
                }
            }
        }
        assert!(grown.is_empty(), "{name}: grew past today's figures: {grown:?}");
        assert!(unquoted.is_empty(), "{name}: docs/serving.md's validation table does not say {unquoted:?}");
        // Past the knee the engine serves what it can: its rate there is
        // the knee's, within 15% in the issue.
        let past: Vec<&Compared> = set.iter().copied().filter(|c| !c.below_knee).collect();
        for c in &past {
            println!("past the knee: {} at {}/s serves {:+.1}% of the measured rate", c.label, c.rate, c.error("throughput") * 100.0);
        }
        let knee: Vec<f64> = past.iter().map(|c| c.error("throughput").abs()).collect();
        // The issue's 15% on the knee's rate, run by run.
        for c in &past {
            let error = c.error("throughput").abs();
            assert!(error <= 0.15, "{} at {}/s: the knee's rate is {:.1}% off, past the issue's 15%", c.label, c.rate, error * 100.0);
        }
        let median = |metric: &str| spread(&below, metric).0 * 100.0;
        let worst = |metric: &str| spread(&below, metric).1 * 100.0;
        for quoted in [
            format!(
                "Below the knee icsim's throughput is within {:.1}% and p50 TTFT within {:.0}% in the median (worst {:.0}%), and p50 TPOT within **{:.1}%** in the median",
                worst("throughput"),
                median("ttft_p50"),
                worst("ttft_p50"),
                median("tpot_p50"),
            ),
            format!("{:.0}% at worst", worst("tpot_p50")),
            format!("the knee's rate within {:.1}%", knee.iter().cloned().fold(0.0, f64::max) * 100.0),
            past_the_knee(&past),
        ] {
            page_says("docs/serving.md", &quoted);
        }
        figures.push((random_ids, median("throughput"), median("ttft_p50"), median("tpot_p50"), worst("tpot_p50"), knee));
    }
    // The README's and validation.md's row quote the runs fed as text is.
    let (_, throughput, ttft, tpot, tpot_worst, knee) = figures.into_iter().find(|f| f.0).expect("the random-id runs");
    page_quotes(
        "`icsim serve` against",
        &format!(
            "throughput {throughput:.1}%, p50 TTFT {ttft:.1}%, p50 TPOT **{tpot:.1}%** (issue: 10%; worst {tpot_worst:.0}%); the knee's rate {}",
            span(knee, 1)
        ),
    );
}

/// docs/serving.md's sentence on the runs past the knee: by how much the
/// predicted rate passes the measured, run by run, grouped by lengths.
fn past_the_knee(past: &[&Compared]) -> String {
    let mut groups: Vec<(&str, Vec<String>, Vec<String>)> = Vec::new();
    for c in past {
        let error = c.error("throughput");
        let lengths = match c.lengths.as_str() {
            "fixed-1024-128" => "fixed lengths",
            "uniform-budget8192" => "128..2048",
            "uniform-long-budget4096" => "512..4096",
            other => panic!("a run of lengths docs/serving.md does not name: {other}"),
        };
        if groups.last().is_none_or(|g| g.0 != lengths) {
            groups.push((lengths, Vec::new(), Vec::new()));
        }
        let group = groups.last_mut().unwrap();
        group.1.push(format!("{:+.1}%", error * 100.0));
        group.2.push(format!("{}", c.rate));
    }
    let parts: Vec<String> =
        groups.iter().map(|(lengths, errors, rates)| format!("{} ({lengths}, at {} a second)", listed(errors), listed(rates))).collect();
    format!("the predicted rate the engine sustains is off the measured by {}", listed(&parts))
}

/// docs/serving.md's figures from the engine's kernels timed alone
/// (`engine-kernels.jsonl`): the decode graphs replayed without inputs
/// built against the simulated `iterations`, the gap between their kernels,
/// the prompt fed one repeated id and random ids, and FlashAttention-2's
/// causal kernel over one prompt against the model's attention of the
/// simulated prompt (`prompt-1024`'s attention kind, 32 layers).
fn kernels_alone_say(
    iterations: &[(String, f64, f64, f64, f64)],
    llm: &LlmModel,
    gpu: &icsim::config::hardware::GpuModel,
    graph_launches: &[(String, Time)],
) {
    let rows = rows("engine-kernels.jsonl");
    let of = |what: &'static str| rows.iter().filter(move |r| r["what"] == what);
    let mut errors = Vec::new();
    let (mut gaps, mut times) = (Vec::new(), Vec::new());
    for row in of("graph_gap") {
        let replayed = number(row, "iteration_us") / 1e3;
        let case = format!("decode-{}", row["batch"]);
        // Replayed back to back, each replay's launch hidden behind the last.
        let launch = graph_launches.iter().find(|l| l.0 == case).expect("a profiled decode of that batch").1;
        let simulated = iterations.iter().find(|i| i.0 == case).expect("a profiled decode of that batch").2 - launch.as_ms();
        errors.push(simulated / replayed - 1.0);
        gaps.push((number(row, "iteration_us") - number(row, "kernel_us")) / number(row, "kernels"));
        times.push(format!("{replayed:.2}"));
    }
    let gap_range = extremes(gaps);
    let prompt = |ids: &str| of("prompt_inputs").find(|r| r["token_ids"] == ids).expect("a prompt row");
    let (repeated, random) = (prompt("repeated"), prompt("random"));
    let prompt_simulated = iterations.iter().find(|i| i.0 == "prompt-1024").expect("the profiled prompt").2;
    // The model's products of that prompt, at the clock a pass runs.
    let mut tokens = PassTokens::empty(1);
    tokens.add(1024, 0);
    let program = pass_program(llm, llm.fusion("torch-varlen").unwrap(), Scope::Full, tokens);
    let products: f64 = program
        .counted()
        .filter_map(|(step, n)| match step {
            Step::Kernel { kernel, .. } if kernel.class == KernelClass::Matmul => {
                Some(n as f64 * kernel.time(gpu, Clock::Sustained).as_ms())
            }
            _ => None,
        })
        .sum();
    let random_products = number(random, "products_us") / 1e3;
    // Products 300 back to back: how long they keep their first calls' rate
    // (until ten calls' median is 5% slower) and, where it fell, the rate
    // of the last 50.
    let (mut onsets, mut late) = (Vec::new(), Vec::new());
    for row in of("gemm_stream") {
        let times = times_us(row);
        let (first, kept) = rate_kept(&times, 30);
        let slowed = (10..times.len()).find(|&i| median(times[i - 9..=i].to_vec()) > 1.05 * first);
        if let Some(i) = slowed {
            onsets.push(times[..=i].iter().sum::<f64>() / 1e3);
            late.push(kept);
        }
    }
    let (onset, late) = (extremes(onsets), extremes(late));
    // The product between copies: the rate it keeps at each mix.
    let kept = |share: f64| {
        let row = of("duty").find(|r| number(r, "share") == share).expect("a duty row");
        (rate_kept(&times_us(row), 20).1, number(row, "products_share") * 100.0)
    };
    let mixes: Vec<String> =
        [0.8, 0.7, 0.5, 0.4].into_iter().map(kept).map(|(rate, percent)| format!("{rate:.3} at {percent:.0}%")).collect();
    assert!((prompt_simulated / (number(random, "iteration_us") / 1e3) - 1.0).abs() <= 0.05, "the prompt fed random ids");
    let flash = |rows_: u64| number(of("op").find(|r| r["op"] == "flash_prefill" && r["rows"] == rows_).expect("a flash row"), "time_us");
    for quoted in [
        {
            let (low, high) = extremes(errors);
            format!("the model's decode-only iteration without the graph's launch comes out {:+.0}% to {:+.0}%", low * 100.0, high * 100.0)
        },
        format!("({} ms at 1, 8, 32 and 64 sequences", listed(&times)),
        format!("measured there at {:.2}-{:.2} us a kernel", gap_range.0, gap_range.1),
        format!(
            "a 1024-token prompt took {:.1} ms with one repeated id and {:.1} ms with random ids, its products {:.1} and {:.1} ms",
            number(repeated, "iteration_us") / 1e3,
            number(random, "iteration_us") / 1e3,
            number(repeated, "products_us") / 1e3,
            number(random, "products_us") / 1e3
        ),
        format!("takes {:.0} us at 1,024 tokens and {:.0} us at 4,096", flash(1024), flash(4096)),
        format!("products at the burst rate ({random_products:.1} ms with random ids, where the model gives {products:.1})"),
        format!("the products' {:+.0}% less the kernels still short", (products / random_products - 1.0) * 100.0),
        format!("kept their first rate for {:.0}-{:.0} ms and then ran at {:.2}-{:.2} of it", onset.0, onset.1, late.0, late.1),
        format!("kept {:.3} of its first rate with products alone, {} of the GPU's time", kept(1.0).0, listed(&mixes)),
        format!(
            "the model's 1024-token prompt takes {:.2} ms, {:+.1}% from the prompt fed random ids",
            prompt_simulated,
            (prompt_simulated / (number(random, "iteration_us") / 1e3) - 1.0) * 100.0
        ),
    ] {
        page_says("docs/serving.md", &quoted);
    }
}

/// A row's product times, us.
fn times_us(row: &Value) -> Vec<f64> {
    row["times_us"].as_array().expect("times").iter().map(|t| t.as_f64().expect("a time")).collect()
}

/// Of products timed one after another: the first `calls`' median time
/// (after the first call) and the share of that rate the last 50 keep.
fn rate_kept(times: &[f64], calls: usize) -> (f64, f64) {
    let first = median(times[1..calls].to_vec());
    (first, first / median(times[times.len() - 50..].to_vec()))
}

/// The engine's profiled iterations, each simulated as the pass it ran.
#[test]
fn the_engines_profiled_iterations_are_predicted_within_todays_errors() {
    let (topo, model) = preset("hgx-h200", None, &[]);
    let llm = LlmModel::load("llama-3.1-8b").unwrap();
    let context = 1088;
    let mut errors = Vec::new();
    let (mut iterations, mut graph_launches) = (Vec::new(), Vec::new());
    println!("\nthe engine's iterations (tools/serve_engine.py --profile), measured / simulated ms:");
    for row in rows("profile.jsonl") {
        let case = row["case"].as_str().expect("a case").to_string();
        let mut tokens = PassTokens::empty(1);
        let decodes_only = case.starts_with("decode-");
        let stack = if decodes_only { Stack::TorchGraph } else { Stack::TorchEager };
        if let Some(batch) = case.strip_prefix("decode-") {
            (0..batch.parse::<u64>().unwrap()).for_each(|_| tokens.add(1, context));
        } else {
            tokens.add(1024, 0);
            if case.contains("64-decodes") {
                (0..64).for_each(|_| tokens.add(1, context));
            }
        }
        let setup =
            TensorParallel::new(&topo, &model, &llm, 1, Mode::Nvswitch).unwrap().with_forward(stack, Scope::Full, "torch-varlen").unwrap();
        let mut times = SimulatedIterations::new(&setup, CollectiveCache::new(&topo, &model), Bytes(1));
        let simulated = times.simulate(tokens, decodes_only).unwrap().total;
        let measured = Time::from_us((number(&row, "iteration_ms") * 1000.0) as u64);
        let error = simulated.as_ms() / measured.as_ms() - 1.0;
        println!("{case:<28} {:>8.2} {:>8.2} {:+6.1}%", measured.as_ms(), simulated.as_ms(), error * 100.0);
        let program = pass_program(&llm, llm.fusion("torch-varlen").unwrap(), Scope::Full, tokens);
        graph_launches.push((case.clone(), setup.graph_launch(&program).unwrap()));
        let (kinds, kernels_measured, kernels_modelled) = kinds_beside(&row, &program, model.gpu("h200").unwrap());
        println!("    {}", kinds.join("  "));
        errors.push((case.clone(), error));
        iterations.push((case, measured.as_ms(), simulated.as_ms(), kernels_measured, kernels_modelled));
    }
    profile_prose_says(&iterations);
    kernels_alone_say(&iterations, &llm, model.gpu("h200").unwrap(), &graph_launches);
    // Decodes come out -11% to +1% (held at 12%): the profile timed ten
    // replays back to back, which hides part of each replay's launch that
    // a served iteration waits for (docs/serving.md, Validation).
    for (case, error) in &errors {
        // The profiled prompt fed one repeated token id, on which its
        // products ran 15% faster than on varied operands: the model comes
        // out 17% over it, and within 5% of the same prompt fed random ids
        // (`kernels_alone_say`).
        let today = match case.as_str() {
            decode if decode.starts_with("decode-") => 0.12,
            "prompt-1024" => 0.17,
            _ => 0.10,
        };
        assert!(error.abs() <= today, "{case}: {:+.1}% is past today's {:.0}%", error * 100.0, today * 100.0);
    }
}

/// The engine's products against the project's own cuBLAS measurements
/// (`h200-kernels`: Llama-3.1-8B's four products and its LM head at 1 to
/// 64 rows), each priced as the served forward prices it (the compute
/// model alone, no launch gap), and a layer's four at 8 rows beside the
/// engine's profile of 8 decodes (its products and their split-K
/// reductions a layer): docs/serving.md, Validation.
#[test]
fn the_products_are_priced_as_cublas_runs_them() {
    let (_, model) = preset("hgx-h200", None, &[]);
    let gpu = model.gpu("h200").unwrap();
    let llm = LlmModel::load("llama-3.1-8b").unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements/h200-kernels/measurements.jsonl");
    let products: Vec<Measurement> = read_measurements(&path, &Default::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|m| {
            m.model.as_deref() == Some("llama-3.1-8b") && m.tp == Some(1) && m.kernel.as_deref().is_some_and(|k| k.starts_with("gemm_"))
        })
        .filter(|m| m.m.is_some_and(|rows| (1..=64).contains(&rows)))
        .collect();
    assert_eq!(products.len(), 5 * 7, "five products at TP=1 and 1, 2, 4, ... 64 rows");
    let priced = |m: &Measurement| measured_kernel(m).expect("a product").time(gpu, Clock::Sustained).as_us();
    // The errors of `kernel`'s rows (every product's where empty) of `rows`.
    let errors = |kernel: &str, rows: std::ops::RangeInclusive<u64>| -> Vec<f64> {
        let chosen = products.iter().filter(|m| kernel.is_empty() || m.kernel.as_deref() == Some(kernel));
        chosen.filter(|m| m.m.is_some_and(|m| rows.contains(&m))).map(|m| priced(m) / m.time_us - 1.0).collect()
    };
    let signed = errors("", 1..=64);
    let all: Vec<f64> = signed.iter().map(|e| e.abs()).collect();
    let worst = all.iter().copied().fold(0.0, f64::max);
    let (o, gate_up) = (errors("gemm_o", 1..=32), errors("gemm_gate_up", 1..=32));
    assert!(o.iter().all(|e| *e < 0.0) && gate_up.iter().all(|e| *e > 0.0), "gemm_o fast {o:?}, gate/up slow {gate_up:?}");
    let at_64 = |kernel: &str| format!("{:+.0}%", errors(kernel, 64..=64)[0] * 100.0);
    // A layer's four products at 8 rows, and the weights they read.
    let layer: Vec<&Measurement> = products.iter().filter(|m| m.m == Some(8) && m.kernel.as_deref() != Some("gemm_lm_head")).collect();
    assert_eq!(layer.len(), 4, "a layer's four products at 8 rows");
    let weights: f64 = layer.iter().map(|m| (m.n.unwrap() * m.k.unwrap() * 2) as f64).sum();
    let (modelled, cublas): (f64, f64) = (layer.iter().map(|m| priced(m)).sum(), layer.iter().map(|m| m.time_us).sum());
    let decode_8 = rows("profile.jsonl").into_iter().find(|r| r["case"] == "decode-8").expect("the profile of 8 decodes");
    let engine: f64 = decode_8["kernels"]
        .as_array()
        .expect("a kernel list")
        .iter()
        .filter(|k| kind_of(k["name"].as_str().unwrap_or_default()) == Some("matmul") && number(k, "calls") >= llm.layers as f64)
        .map(|k| number(k, "total_us"))
        .sum::<f64>()
        / llm.layers as f64;
    let share = |us: f64| weights / us / 1e3 / gpu.memory_bandwidth.as_gbps();
    page_says(
        "docs/serving.md",
        &format!(
            "the compute model (a {:.1} us floor, then the weights at {:.3} of the HBM rate) is within {:.1}% of them in the median (signed; {:.1}% absolute) and {:.0}% at worst (`gemm_o` {} fast and gate/up {} slow to 32 rows, {} and {} at 64); a layer's four products at 8 rows take {modelled:.1} us in the model, {cublas:.1} us in cuBLAS and {engine:.1} us in the engine's profile. Bytes over time without the floor read as {:.2} of the HBM rate in cuBLAS and {:.2} in the profile;",
            gpu.compute.matmul_floor.as_us(),
            gpu.compute.matmul_memory,
            median(signed).abs() * 100.0,
            median(all) * 100.0,
            worst * 100.0,
            span(o.iter().map(|e| -e), 0),
            span(gate_up, 0),
            at_64("gemm_o"),
            at_64("gemm_gate_up"),
            share(cublas),
            share(engine)
        ),
    );
}

/// docs/serving.md's Validation on the profiled iterations, from
/// (case, measured ms, simulated ms, the profile's kernels' ms, the
/// model's kernels' ms).
fn profile_prose_says(iterations: &[(String, f64, f64, f64, f64)]) {
    let decodes: Vec<&(String, f64, f64, f64, f64)> = iterations.iter().filter(|i| i.0.starts_with("decode-")).collect();
    let at = |case: &str| iterations.iter().find(|i| i.0 == case).unwrap_or_else(|| panic!("profile.jsonl has no {case}"));
    let (low, high) = extremes(decodes.iter().map(|i| i.2 / i.1 - 1.0));
    let (kernels_low, kernels_high) = extremes(decodes.iter().map(|i| (i.4 / i.3 - 1.0).abs()));
    let (eight, chunk) = (at("decode-8"), at("chunk-1024-with-64-decodes"));
    for quoted in [
        format!(
            "A decode iteration comes out {:+.0}% to {:+.0}% against the profile's (8 sequences: {:.2} ms measured, {:.2} simulated)",
            low * 100.0,
            high * 100.0,
            eight.1,
            eight.2
        ),
        format!(
            "Its kernels add up within {:.0}-{:.0}% of the profile's ({:.2} ms and {:.2} ms at 8 sequences)",
            kernels_low * 100.0,
            kernels_high * 100.0,
            eight.3,
            eight.4
        ),
        format!(
            "the rest is time between kernels, {:.1} ms an iteration in the profile against {:.1} ms in the model",
            eight.1 - eight.3,
            eight.2 - eight.4
        ),
        format!(
            "a 1024-token chunk beside 64 decodes comes out {:.0}% {} ({:.1} ms measured)",
            (chunk.2 / chunk.1 - 1.0).abs() * 100.0,
            if chunk.2 < chunk.1 { "short" } else { "long" },
            chunk.1
        ),
    ] {
        page_says("docs/serving.md", &quoted);
    }
}

/// The iteration's kernels by kind, the profile's (launches, GPU ms) beside
/// the model's (kernels, ms at a forward's clock, no launch gaps), as
/// `kind launches/kernels measured/modelled`; and both totals, ms.
fn kinds_beside(
    row: &Value,
    program: &icsim::workload::forward::PassProgram,
    gpu: &icsim::config::hardware::GpuModel,
) -> (Vec<String>, f64, f64) {
    type Kind = (String, f64, f64, u64, f64);
    fn entry<'k>(kinds: &'k mut Vec<Kind>, kind: &str) -> &'k mut Kind {
        let index = kinds.iter().position(|k| k.0 == kind).unwrap_or_else(|| {
            kinds.push((kind.to_string(), 0.0, 0.0, 0, 0.0));
            kinds.len() - 1
        });
        &mut kinds[index]
    }
    let mut kinds: Vec<Kind> = Vec::new();
    for kernel in row["kernels"].as_array().expect("a kernel list") {
        let kind = entry(&mut kinds, kind_of(kernel["name"].as_str().expect("a name")).unwrap_or("other"));
        kind.1 += number(kernel, "calls");
        kind.2 += number(kernel, "total_us") / 1e3;
    }
    for (step, count) in program.counted() {
        let Step::Kernel { kernel, .. } = step else { continue };
        let kind = entry(&mut kinds, model_kind(kernel));
        kind.3 += count;
        kind.4 += count as f64 * kernel.time(gpu, Clock::Sustained).as_ms();
    }
    let shown =
        kinds.iter().map(|(kind, launches, ms, kernels, modelled)| format!("{kind} {launches}/{kernels} {ms:.2}/{modelled:.2}")).collect();
    (shown, kinds.iter().map(|k| k.2).sum(), kinds.iter().map(|k| k.4).sum())
}

/// Two more sets of runs, made once the decode model was in place and
/// predicted before anyone looked at them: prompts of 64..1024 and outputs
/// of 128..512 tokens, 1024 tokens and 64 sequences an iteration (prompts
/// cut into chunks beside many decodes), at 5, 10, 15 and 20 a second; and
/// prompts of 128..512 and outputs of 256..1024 tokens, 2048 tokens and 256
/// sequences an iteration (decode batches of up to 256), at 8, 16, 24 and
/// 32. Their long outputs drain for seconds after the last arrival, so the
/// rule of the other sets (served within 5% of the rate) would call nearly
/// every run past the knee; here the engine kept up where its p90 TTFT
/// stayed within three times the lowest rate's. Each run held to the
/// issue's bounds.
#[test]
fn sets_made_after_the_model_are_predicted_within_the_issue() {
    let settings = rows("runs.jsonl");
    for (set, kept) in BLIND_SETS {
        let runs = compared(&format!("serve-fidelity-{set}"), |label| label == set);
        let ttft_p90 = |rate: f64| {
            let run = settings.iter().find(|r| r["label"] == set && number(r, "rate") == rate).expect("the run");
            number(&run["measured"], "ttft_p90_ms")
        };
        let lowest = runs.iter().map(|c| c.rate).fold(f64::INFINITY, f64::min);
        println!(
            "
a set predicted blind ({set}), measured / predicted, error:"
        );
        let mut kept_up = Vec::new();
        for c in &runs {
            let keeps_up = ttft_p90(c.rate) <= 3.0 * ttft_p90(lowest);
            let metrics: Vec<String> =
                c.metrics.iter().map(|(name, m, p)| format!("{name} {m:.2}/{p:.2} {:+.1}%", (p / m - 1.0) * 100.0)).collect();
            println!("{:>5} {:>5}  {}", c.rate, if keeps_up { "below" } else { "past" }, metrics.join("  "));
            let bounds: &[(&str, f64)] =
                if keeps_up { &[("throughput", 0.10), ("tpot_p50", 0.10), ("ttft_p50", 0.15)] } else { &[("throughput", 0.15)] };
            for &(metric, bound) in bounds {
                let error = c.error(metric);
                assert!(
                    error.abs() <= bound,
                    "{set} at {}/s: {metric} {:+.1}%, past the issue's {:.0}%",
                    c.rate,
                    error * 100.0,
                    bound * 100.0
                );
            }
            if keeps_up {
                kept_up.push(c);
            }
        }
        assert_eq!(kept_up.iter().map(|c| c.rate).collect::<Vec<_>>(), kept.to_vec(), "{set}: where the engine kept up");
        let signed = |runs: &[&Compared], metric: &str| {
            listed(&runs.iter().map(|c| format!("{:+.1}%", c.error(metric) * 100.0)).collect::<Vec<_>>())
        };
        let rates = |runs: &[&Compared]| listed(&runs.iter().map(|c| c.rate.to_string()).collect::<Vec<_>>());
        let past: Vec<&Compared> = runs.iter().filter(|c| !kept.contains(&c.rate)).collect();
        page_says(
            "docs/serving.md",
            &format!(
                "p50 TPOT {}, p50 TTFT {} and throughput {} where it kept up ({} a second), and the rate it served {} past the knee ({})",
                signed(&kept_up, "tpot_p50"),
                signed(&kept_up, "ttft_p50"),
                signed(&kept_up, "throughput"),
                rates(&kept_up),
                signed(&past, "throughput"),
                rates(&past)
            ),
        );
    }
}

/// The runs whose clients were capped, as `vllm bench serve
/// --max-concurrency` runs them: 300 requests arriving within a third of a
/// second, the engine's clients keeping at most N in flight. Each set has
/// the lengths and limits of a set run at rates (its label after `capN-`):
/// 1024 prompt and 128 output tokens at 4, 16 and 64 clients; prompts of
/// 128..2048 and outputs of 32..256 tokens (seed 5), 8192 tokens and 256
/// sequences an iteration, at 8, 32 and 128.
const CAPPED_SETS: [(&str, &str, [u64; 3]); 2] =
    [("fixed-1024-128-random-ids", "fixed lengths", [4, 16, 64]), ("uniform-budget8192-random-ids", "drawn lengths", [8, 32, 128])];

/// The capped runs, made once the cap was built and predicted before they
/// were looked at. The cap paces the load, so no run is past a knee: each
/// is held to the issue's bounds below the knee, and docs/serving.md says
/// every error.
#[test]
fn runs_of_capped_clients_are_predicted_within_the_issue() {
    let (mut missed, mut worst_p99, mut worst_of_all) = (Vec::new(), 0.0_f64, 0.0_f64);
    for (set, words, caps) in CAPPED_SETS {
        let runs = compared(&format!("serve-fidelity-capped-{set}"), |label| {
            label.strip_prefix("cap").and_then(|rest| rest.split_once('-')).is_some_and(|(_, rest)| rest == set)
        });
        println!("\ncapped clients, predicted blind ({set}), measured / predicted, error:");
        for c in &runs {
            let metrics: Vec<String> =
                c.metrics.iter().map(|(name, m, p)| format!("{name} {m:.2}/{p:.2} {:+.1}%", (p / m - 1.0) * 100.0)).collect();
            println!("{:>4} clients  {}", c.max_concurrency.expect("a cap"), metrics.join("  "));
        }
        assert_eq!(runs.iter().filter_map(|c| c.max_concurrency).collect::<Vec<_>>(), caps, "{set}: the capped runs");
        for c in &runs {
            for (metric, bound) in [("throughput", 0.10), ("tpot_p50", 0.10), ("ttft_p50", 0.15)] {
                let error = c.error(metric);
                if error.abs() > bound {
                    missed.push(format!("{} {metric} {:+.1}% (issue: {:.0}%)", c.label, error * 100.0, bound * 100.0));
                }
            }
        }
        worst_of_all = runs.iter().flat_map(|c| c.metrics.iter().map(|&(name, ..)| c.error(name).abs())).fold(worst_of_all, f64::max);
        worst_p99 = runs.iter().flat_map(|c| [c.error("ttft_p99"), c.error("tpot_p99")]).fold(worst_p99, |w, e| w.max(e.abs()));
        let signed = |metric: &str| listed(&runs.iter().map(|c| format!("{:+.1}%", c.error(metric) * 100.0)).collect::<Vec<_>>());
        let caps = listed(&caps.iter().map(u64::to_string).collect::<Vec<_>>());
        page_says(
            "docs/serving.md",
            &format!(
                "{words} at caps of {caps} clients: p50 TPOT {}, p50 TTFT {} and throughput {}",
                signed("tpot_p50"),
                signed("ttft_p50"),
                signed("throughput")
            ),
        );
    }
    page_says("docs/serving.md", &format!("Every p99 TTFT and TPOT is within {:.0}% too", (worst_p99 * 100.0).ceil()));
    let worst = format!("{:.1}%", worst_of_all * 100.0);
    page_says("docs/serving.md", &format!("six runs under client caps of 4 to 128, predicted blind, within {worst} in every metric"));
    page_says("docs/validation.md", &format!("six runs made after the cap was built and predicted blind, within {worst} in every metric"));
    page_says("README.md", &format!("Under caps of 4 to 128 clients it came within {worst} of our own engine on one H200"));
    page_quotes("`icsim serve` against", &format!("six runs under client caps of 4-128, predicted blind: within {worst} in every metric"));
    assert!(missed.is_empty(), "past the issue's bounds: {missed:?}");
}

/// FlashAttention-2's varlen kernel over decodes alone, timed alone as the
/// engine calls it (`engine-kernels.jsonl`, `decode_attention`), against
/// the model's waves of blocks (`src/workload/flash.rs`). In sample: each
/// kernel's floor and block rate were fitted on these points
/// (`h200-forward.toml`); this holds the fit where it is.
#[test]
fn flash_attentions_decode_kernels_timed_alone_are_priced_as_waves_of_blocks() {
    let (_, model) = preset("hgx-h200", None, &[]);
    let llm = LlmModel::load("llama-3.1-8b").unwrap();
    let gpu = model.gpu("h200").unwrap();
    let mut errors: Vec<(&'static str, f64)> = Vec::new();
    for row in rows("engine-kernels.jsonl").iter().filter(|r| r["what"] == "decode_attention") {
        let (sequences, context) = (number(row, "batch") as u64, number(row, "context") as u64);
        let mut tokens = PassTokens::empty(1);
        (0..sequences).for_each(|_| tokens.add(1, context));
        tokens.key_limit = number(row, "max_len") as u64;
        let program = pass_program(&llm, llm.fusion("torch-varlen").unwrap(), Scope::Full, tokens);
        let attention = program.layer.iter().find_map(|step| match step {
            Step::Kernel { kernel, .. } if kernel.class == KernelClass::Attention => Some(kernel.clone()),
            _ => None,
        });
        let kernel = attention.expect("a layer's attention");
        let split = row["kernel"].as_str().expect("a kernel name").contains("splitkv");
        let kind = if split { "flash_varlen_splitkv" } else { "flash_varlen_decodes" };
        assert_eq!(kernel.own(gpu), gpu.compute.aten.get(kind), "{sequences} sequences: the model runs the kernel the library ran");
        errors.push((kind, kernel.time(gpu, Clock::Burst).as_us() / number(row, "time_us") - 1.0));
    }
    println!("\nFlashAttention-2 over decodes alone, timed alone: median / worst absolute error");
    for (kind, held_median, held_worst) in [("flash_varlen_splitkv", 0.10, 0.46), ("flash_varlen_decodes", 0.04, 0.10)] {
        let of_kind: Vec<f64> = errors.iter().filter(|e| e.0 == kind).map(|e| e.1.abs()).collect();
        let (median_error, worst) = (median(of_kind.clone()), of_kind.iter().cloned().fold(0.0, f64::max));
        println!("{kind:<22} {} points  {:.1}% / {:.1}%", of_kind.len(), median_error * 100.0, worst * 100.0);
        assert!(median_error <= held_median && worst <= held_worst, "{kind}: past today's fit");
        page_says("docs/serving.md", &format!("{} points, {:.0}% / {:.0}%", of_kind.len(), median_error * 100.0, worst * 100.0));
    }
}

/// Every iteration of three runs the engine logged (a repeat of three
/// random-id runs, `iterations.jsonl`), priced as the engine ran it: its
/// sequences' new and cached tokens, decodes alone from its graphs (padded
/// to the sizes it captured, its attention told the slot length) and the
/// rest launched eagerly. Out of sample: nothing was fitted to them. The
/// GPU's time of each (CUDA events around the forward) is what is
/// compared; the host's time before it is the step overhead, apart.
#[test]
fn every_iteration_the_engine_logged_is_priced_as_it_ran() {
    let (topo, model) = preset("hgx-h200", None, &[]);
    let llm = LlmModel::load("llama-3.1-8b").unwrap();
    let runs = rows("runs.jsonl");
    let logged = rows("iterations.jsonl");
    let setup = |stack| {
        TensorParallel::new(&topo, &model, &llm, 1, Mode::Nvswitch).unwrap().with_forward(stack, Scope::Full, "torch-varlen").unwrap()
    };
    let (graphed, eager) = (setup(Stack::TorchGraph), setup(Stack::TorchEager));
    println!("\nevery iteration the engine logged, its GPU time against the model's, summed:");
    let mut quoted = Vec::new();
    for (label, rate, held) in [
        ("uniform-budget8192-random-ids", 12.0, (0.03, 0.04)),
        ("fixed-1024-128-random-ids", 16.0, (0.03, 0.03)),
        ("uniform-long-budget4096-random-ids", 4.0, (0.07, 0.02)),
    ] {
        let run = runs.iter().find(|r| r["label"] == label && number(r, "rate") == rate).expect("the run's settings");
        let sizes: Vec<u64> = run["graph_batches"].as_array().expect("graph sizes").iter().filter_map(Value::as_u64).collect();
        let graphs = DecodeGraphs::new(sizes, run["max_len"].as_u64());
        let mut times =
            SimulatedIterations::new(&graphed, CollectiveCache::new(&topo, &model), Bytes(1)).with_graphs(graphs).with_eager(&eager);
        // (measured, modelled) ms, of graph replays and of eager iterations.
        let (mut replayed, mut launched) = ((0.0, 0.0), (0.0, 0.0));
        for row in logged.iter().filter(|r| r["label"] == label && number(r, "rate") == rate) {
            let mut tokens = PassTokens::empty(1);
            for part in row["parts"].as_array().expect("the sequences") {
                tokens.add(part[0].as_u64().expect("new tokens"), part[1].as_u64().expect("cached tokens"));
            }
            let graph = row["graph"].as_bool().expect("graph or eager");
            let modelled = times.time(tokens, graph).unwrap().total.as_ms();
            let sum = if graph { &mut replayed } else { &mut launched };
            *sum = (sum.0 + number(row, "gpu_ms"), sum.1 + modelled);
        }
        let (graph_error, eager_error) = (replayed.1 / replayed.0 - 1.0, launched.1 / launched.0 - 1.0);
        println!("{label:<36} {rate:>4}/s  decode graphs {:+.1}%  eager {:+.1}%", graph_error * 100.0, eager_error * 100.0);
        assert!(graph_error.abs() <= held.0 && eager_error.abs() <= held.1, "{label}: past today's errors");
        quoted.push(format!("{:+.1}% ({:+.1}% eager)", graph_error * 100.0, eager_error * 100.0));
    }
    page_says("docs/serving.md", &format!("the decode graphs' GPU time comes out {}", listed(&quoted)));
}

/// vLLM 0.8.3's V1 engine at TP=8 on eight A100s (the one published V1
/// sweep, `public-serving/llm-k8s-a100-tp8.jsonl`, replayed with the
/// commands of `predicted-by-icsim.jsonl`): the host's time an iteration,
/// which icsim takes as 0 unless told, fitted on the lightest load's
/// median TPOT (1 a second) and then held for the other three loads. Their
/// TTFT is not compared (the server may have cached the prompts' prefixes
/// from the runs before: README there).
#[test]
fn a_v1_engines_host_time_fitted_at_its_lightest_load_predicts_its_other_loads() {
    let rows: Vec<Value> =
        json_lines(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models/hardware/measurements/public-serving/predicted-by-icsim.jsonl"))
            .into_iter()
            .filter(|r| r["source"] == "llm-k8s (A100 40GB)")
            .collect();
    assert_eq!(rows.len(), 4, "the sweep's four loads");
    let served = |row: &Value, host_ms: f64| {
        let command = row["command"].as_str().expect("a command");
        let overhead = format!("{host_ms:.3}ms");
        let args: Vec<&str> = command.split_whitespace().skip(1).chain(["--step-overhead", &overhead]).collect();
        let json = icsim_json(&args);
        (number(&json, "tpot.p50_ms"), number(&json, "throughput.output_tokens_per_s"))
    };
    // TPOT grows one for one with the host's time at this load: a secant
    // through none and 8 ms, then once more through the answer.
    let lightest = &rows[0];
    assert_eq!(lightest["run"], "70B TP8 rate 1");
    let target = number(lightest, "measured.tpot_median_ms");
    let secant = |(a, ta): (f64, f64), (b, tb): (f64, f64)| a + (target - ta) * (b - a) / (tb - ta);
    let (none, eight) = ((0.0, served(lightest, 0.0).0), (8.0, served(lightest, 8.0).0));
    let first = secant(none, eight);
    let host_ms = (secant(none, (first, served(lightest, first).0)) * 100.0).round() / 100.0;
    let fitted = served(lightest, host_ms).0 / target - 1.0;
    assert!(fitted.abs() < 0.01, "the host's time {host_ms} ms gives the lightest load's TPOT {:+.1}% off", fitted * 100.0);
    let (mut held, mut worst) = (Vec::new(), 0.0f64);
    for row in &rows[1..] {
        let (tpot, output) = served(row, host_ms);
        let tpot_error = tpot / number(row, "measured.tpot_median_ms") - 1.0;
        let output_error = output / number(row, "measured.output_throughput") - 1.0;
        println!("{}: p50 TPOT {:+.1}%, output tokens a second {:+.1}%", row["run"], tpot_error * 100.0, output_error * 100.0);
        // The issue's bounds for throughput and p50 TPOT, on loads not fitted.
        assert!(tpot_error.abs() <= 0.10 && output_error.abs() <= 0.10, "{}: {tpot_error:+.3} / {output_error:+.3}", row["run"]);
        held.push(format!("{:+.1}% / {:+.1}%", tpot_error * 100.0, output_error * 100.0));
        worst = worst.max(tpot_error.abs()).max(output_error.abs());
    }
    page_says(
        "docs/serving.md",
        &format!("comes out within {:.0}% in p50 TPOT and output throughput at its three other loads", (worst * 100.0).ceil()),
    );
    page_says(
        "docs/serving.md",
        &format!(
            "a host time of {host_ms} ms an iteration, fitted on the median TPOT at 1 request a second, gives at 4 and 16 a second and at once {} (p50 TPOT / output tokens a second)",
            held.join(", ")
        ),
    );
    // The trust row (README.md quotes validation.md's), each figure without its %.
    let (tpots, outputs): (Vec<&str>, Vec<&str>) = held
        .iter()
        .map(|h| h.split_once(" / ").expect("two errors"))
        .map(|(t, o)| (t.trim_end_matches('%'), o.trim_end_matches('%')))
        .unzip();
    page_says(
        "docs/validation.md",
        &format!(
            "p50 TPOT {}%, output tokens a second {}% (issue: 10%) | one constant fitted ({host_ms} ms,",
            tpots.join(" / "),
            outputs.join(" / ")
        ),
    );
}
