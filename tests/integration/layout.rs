//! The source layout rule that the crate boundaries do not enforce, read
//! from src/ itself: no module cycle among the model library's layers. A
//! failure names the cycle, each step with the files that make it. (The
//! core crate cannot name the model, and only icsim-gpu may hold unsafe
//! code: Cargo and `forbid(unsafe_code)` enforce those; clippy's
//! `too_many_lines` keeps functions short.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of the model crate that must form no cycle, from the edge of
/// the data flow in. Other top-level modules (cli, sweep, storage, stack)
/// may depend on anything, but a cycle through one of them that passes a
/// layer counts. The layers below them (units, engine, network) are the
/// icsim-core crate, which cannot name the model: Cargo enforces that.
const LAYERS: [&str; 7] = ["config", "topology", "transport", "collective", "workload", "calibrate", "report"];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// `code` with comments, strings and character literals blanked out, so
/// that only paths written as code remain.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, c)| chars.get(i + k) == Some(&c));
    while i < chars.len() {
        let c = chars[i];
        if at(i, "//") {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if at(i, "/*") {
            let mut depth = 0;
            while i < chars.len() {
                if at(i, "/*") {
                    depth += 1;
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (at(i + 1, "\"") || at(i + 1, "#\"") || at(i + 1, "##\"")) && !ident_char(chars.get(i.wrapping_sub(1))) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            i += 2 + hashes;
            while i < chars.len() && !at(i, &close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (chars.get(i + 1) == Some(&'\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
}

fn ident(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The first names of the paths after `rest` (just past `crate::` or the
/// last `super::`): one name, or each item of a `{...}` group.
fn first_names(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest).to_string()];
    };
    let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items.iter().map(|i| ident(i.trim_start()).to_string()).filter(|i| !i.is_empty()).collect()
}

/// Names of the crate root's items that `code` reaches, for a file whose
/// module is `depth` below the root: `crate::x` anywhere, and `super::x`
/// where the `super`s climb to the root (inline `mod m { ... }` blocks,
/// tests among them, count one level more).
fn root_names(code: &str, depth: usize) -> Vec<String> {
    let bytes = code.as_bytes();
    let mut names = Vec::new();
    // Brace depths at which inline modules were opened.
    let mut inline_modules: Vec<usize> = Vec::new();
    let mut braces = 0usize;
    let mut i = 0;
    let word_start = |i: usize| i == 0 || !ident_char(Some(&(bytes[i - 1] as char)));
    while i < bytes.len() {
        let rest = &code[i..];
        match bytes[i] {
            b'{' => braces += 1,
            b'}' => {
                braces = braces.saturating_sub(1);
                if inline_modules.last() == Some(&braces) {
                    inline_modules.pop();
                }
            }
            _ => {}
        }
        if word_start(i) && rest.starts_with("mod ") {
            let after = rest[4..].trim_start();
            let name = ident(after);
            if after[name.len()..].trim_start().starts_with('{') {
                inline_modules.push(braces);
            }
        }
        if word_start(i) && rest.starts_with("crate::") {
            names.extend(first_names(&rest["crate::".len()..]));
        }
        if word_start(i) && rest.starts_with("super::") {
            let mut climbs = 0;
            let mut after = rest;
            while let Some(next) = after.strip_prefix("super::") {
                climbs += 1;
                after = next.trim_start();
            }
            if climbs == depth + inline_modules.len() {
                names.extend(first_names(after));
            }
            i += rest.len() - after.len();
            continue;
        }
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    names
}

/// Edges between top-level modules: from each to each it names, with the
/// files that name it.
fn module_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let relative: Vec<(PathBuf, Vec<String>)> = files
        .iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).unwrap().to_path_buf();
            let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
            (path.clone(), parts)
        })
        .collect();
    // The library's top-level modules: src/x.rs and src/x/ (the binary's
    // main.rs and cli/ are another crate).
    let modules: BTreeSet<String> =
        relative.iter().map(|(_, parts)| parts[0].clone()).filter(|m| !["lib", "main", "cli"].contains(&m.as_str())).collect();
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, parts) in &relative {
        let from = &parts[0];
        if !modules.contains(from) {
            continue;
        }
        // src/x/y.rs is module x::y; a mod.rs is its folder's module.
        let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod"));
        let code = code_only(&std::fs::read_to_string(path).unwrap());
        for name in root_names(&code, depth) {
            if modules.contains(&name) && &name != from {
                let file = format!("src/{}", path.strip_prefix(&root).unwrap().display());
                graph.entry(from.clone()).or_default().entry(name).or_default().insert(file);
            }
        }
    }
    graph
}

/// The shortest path of edges from `from` to `to`, if any.
fn path(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut before: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from.to_string()]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(&node).into_iter().flat_map(|edges| edges.keys()) {
            if next == to {
                let mut steps = vec![to.to_string(), node.clone()];
                while let Some(previous) = before.get(steps.last().unwrap()) {
                    steps.push(previous.clone());
                }
                steps.reverse();
                return Some(steps);
            }
            if next != from && !before.contains_key(next) {
                before.insert(next.clone(), node.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

#[test]
fn the_layers_form_no_module_cycle() {
    let graph = module_graph();
    let mut cycles = Vec::new();
    let mut in_a_cycle: BTreeSet<String> = BTreeSet::new();
    for layer in LAYERS {
        assert!(src().join(layer).exists() || src().join(format!("{layer}.rs")).exists(), "no module {layer} in src/");
        if in_a_cycle.contains(layer) {
            continue;
        }
        if let Some(steps) = path(&graph, layer, layer) {
            in_a_cycle.extend(steps.iter().cloned());
            let described: Vec<String> =
                steps.windows(2).map(|pair| format!("{} -> {} ({})", pair[0], pair[1], join(&graph[&pair[0]][&pair[1]]))).collect();
            cycles.push(format!("  {}", described.join(",\n    ")));
        }
    }
    assert!(cycles.is_empty(), "module cycles (each step with the files that make it):\n{}", cycles.join("\n"));
}

fn join(files: &BTreeSet<String>) -> String {
    files.iter().cloned().collect::<Vec<_>>().join(", ")
}

#[test]
fn the_graph_reader_sees_every_kind_of_path() {
    let code = code_only(
        "use crate::{units::Time, config::{a, b}};\n// crate::report in a comment\nlet s = \"crate::sweep\";\nfn f() { crate::engine::run(); }\nmod tests { use super::super::network; }\n",
    );
    assert_eq!(root_names(&code, 1), ["units", "config", "engine", "network"]);
    assert_eq!(root_names("use super::x;", 1), ["x"], "a top-level file's super is the root");
    assert!(root_names("use super::x;", 2).is_empty(), "a nested file's super is its parent");
    assert_eq!(code_only("let c = '\"'; let l: &'a str = r#\"crate::x\"#;"), "let c = ' '; let l: &'a str = \"\";");
    // The real tree: known edges are found, and the layers are all there.
    let graph = module_graph();
    assert!(graph["topology"].contains_key("config") && graph["workload"].contains_key("collective"), "{graph:?}");
}

#[test]
fn unsafe_code_is_forbidden_outside_the_gpu_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["src/lib.rs", "src/main.rs", "crates/core/src/lib.rs"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(text.contains("#![forbid(unsafe_code)]"), "{file} must say #![forbid(unsafe_code)]: only crates/gpu may hold unsafe code");
    }
}
