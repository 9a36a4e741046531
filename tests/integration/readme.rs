//! The README's examples, run. Every command in its code blocks (`icsim ...`,
//! `$ icsim ...`, `cargo run --release -- ...`; usage synopses with `[` or
//! `|` and script templates with `${VAR}`, a glob or a continued line aside)
//! runs here, and where the README shows its output, the output's shape is compared with it: section titles, table headers (column names),
//! each table's row labels, other lines' first words; a `...` line in the
//! README stands for any lines. Placeholders are filled in: `$OUT` and
//! `--out` folders become temporary ones, measurement files that exist only
//! on a measured machine become the shared H200 file (a vLLM result, one
//! written here as vLLM writes it), and a fit runs 10
//! evaluations instead of its default. Without a GPU (as on CI) the runner's
//! commands must fail for want of a GPU, not of a flag.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{h200_measurements_path, icsim_in, stderr, stdout};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The README's fenced code blocks, in order, as lines.
fn code_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some(Vec::new()),
            }
        } else if let Some(block) = current.as_mut() {
            block.push(line.to_string());
        }
    }
    blocks
}

/// What a shown output looks like, line by line, to compare with a run's.
fn shape(text: &str) -> Vec<String> {
    let identifier =
        |w: &str| w.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines().map(str::trim_end) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            in_table = false;
        } else if line.trim() == "..." {
            out.push("...".to_string());
        } else if line.ends_with(':') {
            in_table = false;
            out.push(format!("title {line}"));
        } else if words.len() >= 3 && words.iter().all(|w| identifier(w)) {
            in_table = true;
            out.push(format!("header {}", words.join(" ")));
        } else if in_table {
            out.push(format!("row {}", words[0]));
        } else if words[0] == "wrote" || words[0] == "notice:" {
            out.push(words[0].to_string());
        } else {
            out.push(format!("line {}", words[0]));
        }
    }
    out
}

/// Whether `actual` matches `expected`, where "..." in `expected` matches
/// any run of lines.
fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => (0..=actual.len()).any(|skip| matches(rest, &actual[skip..])),
        Some((first, rest)) => actual.first() == Some(first) && matches(rest, &actual[1..]),
    }
}

/// A README command with its placeholders filled in.
struct Example {
    shown: String,
    args: Vec<String>,
    /// The runner measures GPUs: without one it must say so.
    needs_gpu: bool,
}

fn example(shown: &str, scratch: &Path) -> Example {
    let command = shown.split(" # ").next().unwrap_or(shown).trim();
    let command = command.strip_prefix("$ ").unwrap_or(command);
    let command = command.strip_prefix("cargo run --release -- ").or_else(|| command.strip_prefix("icsim ")).unwrap_or(command);
    let shared = h200_measurements_path();
    let fitted = scratch.join("fitted.toml");
    let mut args: Vec<String> = Vec::new();
    let mut words = command.split_whitespace().map(|w| w.replace("$OUT", scratch.to_str().unwrap())).peekable();
    while let Some(word) = words.next() {
        match word.as_str() {
            "--out" | "--plots" => {
                let _ = words.next();
                args.push(word.clone());
                let name = if command.starts_with("calibrate fit") { "fitted.toml" } else { "out" };
                args.push(scratch.join(name).to_str().unwrap().to_string());
            }
            "--hardware" => {
                let value = words.next().unwrap_or_default();
                let exists = value == "base" || Path::new(env!("CARGO_MANIFEST_DIR")).join(&value).is_file();
                args.push(word.clone());
                args.push(if exists { value } else { fitted.to_str().unwrap().to_string() });
            }
            result if result.ends_with(".json") && !Path::new(env!("CARGO_MANIFEST_DIR")).join(result).is_file() => {
                // A `vllm bench latency --output-json` result, as vLLM writes one.
                let path = scratch.join(result);
                std::fs::write(&path, r#"{"avg_latency": 2.5, "latencies": [2.4, 2.5, 2.6], "percentiles": {"50": 2.5, "99": 2.6}}"#)
                    .unwrap();
                args.push(path.to_str().unwrap().to_string());
            }
            measurements
                if measurements.ends_with("measurements.jsonl") && !Path::new(env!("CARGO_MANIFEST_DIR")).join(measurements).is_file() =>
            {
                args.push(shared.to_str().unwrap().to_string());
            }
            _ => args.push(word.clone()),
        }
    }
    if command.starts_with("calibrate fit") {
        args.extend(["--evaluations".to_string(), "10".to_string()]);
    }
    Example { shown: shown.to_string(), needs_gpu: command.starts_with("calibrate run"), args }
}

fn run(example: &Example) -> Output {
    icsim_in(&example.args.iter().map(String::as_str).collect::<Vec<_>>(), Path::new(env!("CARGO_MANIFEST_DIR")))
}

fn check(example: &Example, shown_output: Option<&str>) {
    let output = run(example);
    if example.needs_gpu {
        let error = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{}: without a GPU it must fail for want of one: {error}", example.shown);
        assert!(error.contains("GPU"), "{}: {error}", example.shown);
        return;
    }
    assert!(output.status.success(), "{} failed: {}", example.shown, stderr(&output));
    if let Some(shown) = shown_output {
        let (expected, actual) = (shape(shown), shape(&stdout(&output)));
        assert!(matches(&expected, &actual), "{}: the README shows\n{expected:#?}\nthe command prints\n{actual:#?}", example.shown);
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("icsim-readme-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_readme_example_runs_and_prints_what_the_readme_shows() {
    let text = readme();
    let blocks = code_blocks(&text);
    let dir = scratch("examples");
    let mut ran = 0;
    for (index, block) in blocks.iter().enumerate() {
        let Some(first) = block.first() else { continue };
        if let Some(command) = first.strip_prefix("$ ") {
            check(&example(command, &dir), Some(&block[1..].join("\n")));
            ran += 1;
            continue;
        }
        for line in block {
            let is_command = line.starts_with("icsim ") || line.starts_with("cargo run --release -- ");
            let is_template = line.contains('[') || line.contains('|') || line.contains("${") || line.contains('*') || line.ends_with('\\');
            if !is_command || is_template {
                continue;
            }
            check(&example(line, &dir), None);
            ran += 1;
        }
        // The default run's output is the block after the one that says
        // what `cargo run --release` prints.
        if block.iter().any(|l| l.starts_with("Llama-3.1-70B: one query")) && index > 0 {
            check(&example("icsim run", &dir), Some(&block.join("\n")));
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} README examples found");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_shape_comparison_sees_a_changed_column_or_a_missing_row() {
    let shown = "label  pass  time_us\nnvswitch  prefill  5\nnvlink  decode  6\n";
    assert!(matches(&shape(shown), &shape("label  pass  time_us\nnvswitch  prefill  7\nnvlink  decode  8\n")));
    assert!(!matches(&shape(shown), &shape("label  pass  time_ms\nnvswitch  prefill  7\nnvlink  decode  8\n")));
    assert!(!matches(&shape(shown), &shape("label  pass  time_us\nnvswitch  prefill  7\n")));
    assert!(matches(&shape("...\nfastest by size:\n  ring  from\n"), &shape("a  b  c\n1 2 3\n\nfastest by size:\n  ring  from\n")));
}
