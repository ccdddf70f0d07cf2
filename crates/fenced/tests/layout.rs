//! The library's layout as `docs/internals.md` states it, read from the sources themselves:
//! no two files import each other, directly or through others; every file lies in a stated
//! layer, and no import runs back up the layers; the layout block names every file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Every source file of the library, by module path (`core::notify`, `lib` as the root "").
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            let code = without_tests(&std::fs::read_to_string(&path).unwrap());
            out.insert(parts.join("::"), code);
        }
    }
    out
}

/// A file's code without its comments and its tests: a one-line test item where it stands
/// (`#[cfg(test)] mod differential;`, whose file is read on its own, or a test helper's
/// re-export) is skipped, a test module written out (`#[cfg(test)] mod tests { … }`, at the
/// end) ends the code. `#[cfg(feature =
/// "testing")]` is code.
fn without_tests(text: &str) -> String {
    let mut lines = text.lines().peekable();
    let mut code = Vec::new();
    while let Some(line) = lines.next() {
        if line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test") {
            match lines.peek() {
                Some(next) if next.trim_end().ends_with(';') => {
                    lines.next();
                    continue;
                }
                _ => break,
            }
        }
        if !line.trim_start().starts_with("//") {
            code.push(line);
        }
    }
    code.join("\n")
}

/// Every `use` statement of `code`, whole (over several lines), with what precedes `use`.
fn use_statements(code: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("use ") {
        let line_start = code[..i].rfind('\n').map_or(0, |n| n + 1);
        let before = code[line_start..i].trim();
        if !matches!(before, "" | "pub" | "pub(crate)" | "pub(super)") {
            continue;
        }
        let rest = &code[i + "use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        out.push((before, rest[..end].to_owned()));
    }
    out
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let path: String = path.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = path.find('{') else {
        return vec![path];
    };
    if !path.ends_with('}') {
        return vec![path];
    }
    let (prefix, body) = (&path[..open], &path[open + 1..path.len() - 1]);
    let (mut parts, mut depth, mut current) = (Vec::new(), 0, String::new());
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

/// The identifier path that starts at `text` (`core::notify::LocalWaiters`).
fn path_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    text[..end].trim_end_matches(':')
}

/// Which module uses which (each pair once), from the `use` statements and the paths written
/// out in the code.
fn import_edges(modules: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let join = |m: &str, child: &str| {
        if m.is_empty() {
            child.to_owned()
        } else {
            format!("{m}::{child}")
        }
    };
    // Names a module re-exports from a file of its own: a use of them is a use of that file.
    let mut aliases: HashMap<(String, String), String> = HashMap::new();
    for (m, code) in modules {
        for (before, rest) in use_statements(code) {
            if before.is_empty() {
                continue;
            }
            for full in expand(&rest) {
                let mut parts = full.split("::");
                let child = join(m, parts.next().unwrap_or(""));
                if modules.contains_key(&child) {
                    let name = full.rsplit("::").next().unwrap_or("").to_owned();
                    aliases.insert((m.clone(), name), child);
                }
            }
        }
    }
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        // From the longest prefix down to the crate root's own re-exports (`crate::Client`).
        for i in (0..parts.len()).rev() {
            if let Some(child) = aliases.get(&(parts[..i].join("::"), parts[i].to_owned())) {
                return Some(child.clone());
            }
        }
        (1..=parts.len())
            .rev()
            .map(|i| parts[..i].join("::"))
            .find(|m| modules.contains_key(m))
    };
    let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
    for (m, code) in modules {
        let mut uses = Vec::new();
        let up = m.rsplit_once("::").map_or("", |(parent, _)| parent);
        for (before, rest) in use_statements(code) {
            for path in expand(&rest) {
                if let Some(p) = path.strip_prefix("crate::") {
                    uses.push(p.to_owned());
                } else if let Some(p) = path.strip_prefix("super::") {
                    uses.push(join(up, p));
                } else if before.is_empty() {
                    // A file's private use of its own files (`use renew::Renewer`).
                    uses.push(join(m, &path));
                }
            }
        }
        // Paths written out in the code (`crate::kind::wrong_type(..)`).
        for (i, _) in code.match_indices("crate::") {
            uses.push(path_at(&code[i + "crate::".len()..]).to_owned());
        }
        for (i, _) in code.match_indices("super::") {
            uses.push(join(up, path_at(&code[i + "super::".len()..])));
        }
        for used in uses {
            if let Some(target) = resolve(&used)
                && target != *m
                && !target.is_empty()
            {
                edges.insert((m.clone(), target));
            }
        }
    }
    edges.into_iter().collect()
}

/// An import circle among `modules`, as the path that closes it; `None` when there is none.
fn circle(modules: &BTreeMap<String, String>) -> Option<String> {
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let pairs = import_edges(modules);
    for (m, target) in &pairs {
        edges.entry(m.as_str()).or_default().insert(target.clone());
    }
    for start in modules.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(at.as_str()).into_iter().flatten() {
                if next == start {
                    return Some(format!("{} -> {start}", path.join(" -> ")));
                }
                if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    None
}

#[test]
fn no_two_files_of_the_library_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&root);
    if let Some(circle) = circle(&modules) {
        panic!("an import circle: {circle}");
    }
    let edges = import_edges(&modules);
    assert!(edges.len() > 30, "the sources were not read: {edges:?}");
}

#[test]
fn no_two_files_of_the_tools_import_each_other() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for tool in [
        "fenced-cli",
        "fenced-bench",
        "fenced-chaos",
        "fenced-model",
        "fenced-testkit",
        "fenced-macros",
    ] {
        let modules = modules(&crates.join(tool).join("src"));
        assert!(
            modules.len() > 1 || tool == "fenced-macros",
            "{tool}: no sources read"
        );
        if let Some(circle) = circle(&modules) {
            panic!("{tool}: an import circle: {circle}");
        }
    }
}

/// The layers `docs/internals.md` states ("Which file may use which"), bottom first: each
/// module path (`core::lease`) or folder prefix (`scripts`) with its layer's number.
fn stated_layers(internals: &str) -> Vec<(String, usize)> {
    let section = internals
        .split("## Which file may use which")
        .nth(1)
        .expect("docs/internals.md states the layers");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut out = Vec::new();
    let mut layer = 0;
    for line in section.lines() {
        let trimmed = line.trim_start();
        if let Some((n, _)) = trimmed.split_once(". **")
            && let Ok(n) = n.parse::<usize>()
        {
            layer = n;
        }
        if layer == 0 {
            continue;
        }
        // The list ends at its first blank line; what follows explains it.
        if trimmed.is_empty() {
            break;
        }
        for (i, quoted) in line.split('`').enumerate() {
            if i % 2 == 0 || !(quoted.ends_with(".rs") || quoted.ends_with('/')) {
                continue;
            }
            // `core/mod.rs` is `core`; a bare `mod.rs` names no file of its own.
            let module = quoted
                .trim_end_matches('/')
                .trim_end_matches(".rs")
                .trim_end_matches("mod")
                .trim_end_matches('/')
                .replace('/', "::");
            match module.as_str() {
                "" => {}
                // Where a file is named again (a layer "over `core/held.rs`"), its first
                // mention places it.
                _ if out.iter().any(|(m, _)| *m == module) => {}
                "lib" => out.push((String::new(), layer)),
                _ => out.push((module, layer)),
            }
        }
    }
    out
}

/// The layer of `module`: that of the longest stated path it is or lies under.
fn layer_of(layers: &[(String, usize)], module: &str) -> Option<usize> {
    layers
        .iter()
        .filter(|(path, _)| {
            module == path || (!path.is_empty() && module.starts_with(&format!("{path}::")))
        })
        .max_by_key(|(path, _)| path.len())
        .map(|(_, layer)| *layer)
}

#[test]
fn every_file_lies_in_a_stated_layer_and_no_import_runs_back_up() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let internals = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/internals.md"),
    )
    .unwrap();
    let layers = stated_layers(&internals);
    let modules = modules(&root);
    let unplaced: Vec<&String> = modules
        .keys()
        .filter(|m| layer_of(&layers, m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "files docs/internals.md places in no layer: {unplaced:?}"
    );
    let mut up = Vec::new();
    for (m, target) in import_edges(&modules) {
        let (from, to) = (layer_of(&layers, &m), layer_of(&layers, &target));
        if let (Some(from), Some(to)) = (from, to)
            && to > from
        {
            up.push(format!("{m} ({from}) -> {target} ({to})"));
        }
    }
    // Each arrow up is a lower layer reaching for a higher one's item.
    assert!(
        up.is_empty(),
        "{} imports run back up the layers:\n{}",
        up.len(),
        up.join("\n")
    );
}

#[test]
fn the_layout_in_docs_names_every_file_and_folder_of_the_library() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let internals = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/internals.md"),
    )
    .unwrap();
    let layout = internals
        .split("## Layout")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("docs/internals.md has a layout block");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let shown = if path.is_dir() {
            format!("{name}/")
        } else {
            name.clone()
        };
        if name != "lib.rs" && !layout.contains(&shown) {
            missing.push(shown);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/internals.md's layout does not name: {missing:?}"
    );
}
