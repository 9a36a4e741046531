//! The documentation's examples, run: the front page (README.md) and every
//! page of docs/, each its own test, so that no command a page shows can
//! drift. Every command in a page's code blocks (`icsim ...`, `$ icsim ...`,
//! `cargo run --release -- ...`; usage synopses with `[` or `|` and script
//! templates with `${VAR}`, a glob or a continued line aside) runs here, and
//! where the page shows its output, the output is compared with it: section
//! titles, table headers (column names), every table row word for word (so
//! a shown number cannot drift), other lines' first words; a `...` line on
//! the page stands for any lines. Placeholders are filled in: `$OUT` and
//! `--out` folders become temporary ones, measurement files that exist only
//! on a measured machine become the shared H200 file (a vLLM result, one
//! written here as vLLM writes it), and a fit runs 10 evaluations instead of
//! its default. Without a GPU (as on CI) the runner's commands must fail for
//! want of a GPU, not of a flag. The figures the prose quotes from shipped
//! results are checked in `figures`, those it quotes from the hardware model
//! in `parameters`.

mod figures;
mod parameters;

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{h200_measurements_path, icsim_in, stderr, stdout};

/// The pages whose examples run: the front page, then every page of docs/
/// (`every_page_of_docs_is_checked` holds this list to the folder).
const PAGES: &[&str] = &[
    "README.md",
    "docs/guide.md",
    "docs/reference.md",
    "docs/model.md",
    "docs/validation.md",
    "docs/calibration.md",
    "docs/performance.md",
    "docs/serving.md",
];

/// A page of the documentation, by its path in the repository.
pub fn page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A page's fenced code blocks, in order, as lines.
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

/// What a shown output looks like, line by line, to compare with a run's:
/// titles, table headers and rows whole, the first word of other lines.
fn shape(text: &str) -> Vec<String> {
    let identifier = |w: &str| {
        w.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
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
            out.push(format!("row {}", words.join(" ")));
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

/// A page's command with its placeholders filled in.
struct Example {
    /// The page and the command as it shows it, for messages.
    shown: String,
    args: Vec<String>,
    /// The runner measures GPUs: without one it must say so.
    needs_gpu: bool,
}

fn example(page: &str, shown: &str, scratch: &Path) -> Example {
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
    Example { shown: format!("{page}: {shown}"), needs_gpu: command.starts_with("calibrate run"), args }
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
        assert!(matches(&expected, &actual), "{}: the page shows\n{expected:#?}\nthe command prints\n{actual:#?}", example.shown);
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("icsim-readme-{}-{}", name.replace('/', "-"), std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs every example of a page (checking what it prints where the page
/// shows it) and returns how many ran.
fn run_examples(name: &str) -> usize {
    let text = page(name);
    let blocks = code_blocks(&text);
    let dir = scratch(name);
    let mut ran = 0;
    for (index, block) in blocks.iter().enumerate() {
        let Some(first) = block.first() else { continue };
        if let Some(command) = first.strip_prefix("$ ") {
            check(&example(name, command, &dir), Some(&block[1..].join("\n")));
            ran += 1;
            continue;
        }
        for line in block {
            let is_command = line.starts_with("icsim ") || line.starts_with("cargo run --release -- ");
            let is_template = line.contains('[') || line.contains('|') || line.contains("${") || line.contains('*') || line.ends_with('\\');
            if !is_command || is_template {
                continue;
            }
            check(&example(name, line, &dir), None);
            ran += 1;
        }
        // The default run's output: a block that begins as `icsim run` does.
        if block.iter().any(|l| l.starts_with("Llama-3.1-70B: one query")) && index > 0 {
            check(&example(name, "icsim run", &dir), Some(&block.join("\n")));
            ran += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

#[test]
fn readme_examples_run_and_print_what_the_front_page_shows() {
    let ran = run_examples("README.md");
    assert!(ran >= 4, "README.md: only {ran} examples found (the default run and four questions)");
}

#[test]
fn readme_guide_examples_run_and_print_what_the_guide_shows() {
    let ran = run_examples("docs/guide.md");
    assert!(ran >= 6, "docs/guide.md: only {ran} examples found");
}

#[test]
fn readme_reference_model_and_performance_examples_run() {
    for name in ["docs/reference.md", "docs/model.md", "docs/performance.md"] {
        run_examples(name);
    }
}

#[test]
fn readme_serving_examples_run_and_print_what_the_page_shows() {
    let ran = run_examples("docs/serving.md");
    assert!(ran >= 1, "docs/serving.md: its example of a served load did not run");
}

#[test]
fn readme_validation_and_calibration_examples_run() {
    let ran: usize = ["docs/validation.md", "docs/calibration.md"].into_iter().map(run_examples).sum();
    assert!(ran >= 5, "docs/validation.md and docs/calibration.md: only {ran} examples found");
}

#[test]
fn readme_every_page_of_docs_is_checked() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut found: Vec<String> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    found.sort();
    let mut listed: Vec<String> = PAGES.iter().filter(|p| p.starts_with("docs/")).map(|p| p.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "every page of docs/ must be in PAGES, so that its examples run");
    for name in ["docs/reference.md", "docs/model.md", "docs/performance.md"] {
        assert!(PAGES.contains(&name), "{name} has a test that runs its examples");
    }
}

#[test]
fn readme_shape_comparison_sees_a_changed_column_a_changed_number_or_a_missing_row() {
    let shown = "label  pass  time_us\nnvswitch  prefill  5\nnvlink  decode  6\n";
    assert!(matches(&shape(shown), &shape("label  pass    time_us\nnvswitch  prefill   5\nnvlink  decode  6\n")));
    assert!(!matches(&shape(shown), &shape("label  pass  time_us\nnvswitch  prefill  7\nnvlink  decode  6\n")));
    assert!(!matches(&shape(shown), &shape("label  pass  time_ms\nnvswitch  prefill  5\nnvlink  decode  6\n")));
    assert!(!matches(&shape(shown), &shape("label  pass  time_us\nnvswitch  prefill  5\n")));
    assert!(matches(&shape("...\nfastest by size:\n  ring  from\n"), &shape("a  b  c\n1 2 3\n\nfastest by size:\n  ring  from\n")));
}

/// The anchor a heading gets on GitHub: lower case, punctuation dropped but
/// for `-` and `_`, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#').trim()));
        }
    }
    out
}

#[test]
fn readme_links_between_pages_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for name in PAGES.iter().copied().chain(["CHANGELOG.md"]) {
        let text = page(name);
        let folder = Path::new(name).parent().unwrap_or(Path::new(""));
        for link in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            if link.starts_with("http") {
                continue;
            }
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() { PathBuf::from(name) } else { folder.join(file) };
            if !root.join(&target).exists() {
                broken.push(format!("{name}: {link} (no {})", target.display()));
            } else if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(root.join(&target)).unwrap();
                if !anchors(&text).iter().any(|a| a == fragment) {
                    broken.push(format!("{name}: {link} (no heading #{fragment} in {})", target.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
}
