//! The module graph, checked: `cargo test --lib layout -- --nocapture`
//! prints it (one `from -> to` line per arrow between top-level modules,
//! from the `crate::` paths each file names) and fails on a cycle between
//! top-level modules (folders or files of `src/`), or on an arrow into
//! `session` from the modules below it (`upstream`, `health`, `tls`, the
//! context in `router`, `config`, `wire`, `route`, `knowledge`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules that must not know the client side.
const BELOW_SESSION: &[&str] = &[
    "upstream",
    "health",
    "tls",
    "router",
    "config",
    "wire",
    "route",
    "knowledge",
    "state",
    "error",
];

/// `crate::` paths named by each top-level module (tests and comments
/// excluded).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    collect(src, src, &mut files);
    let tops: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in &files {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or_default();
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if &name != m && tops.contains(&name) {
                    g.entry(m.clone()).or_default().insert(name);
                }
            }
        }
    }
    g
}

/// (top-level module, file text) for every `.rs` file under `dir`.
fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
            continue;
        }
        if p.extension().and_then(|x| x.to_str()) != Some("rs") {
            continue;
        }
        let Ok(rel) = p.strip_prefix(root) else {
            continue;
        };
        let first = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        if first == "lib" || first == "main" || first == "layout" {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&p) {
            out.push((first, text));
        }
    }
}

/// The cycles (strongly connected components of more than one module).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flatten()).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for n in &nodes {
        let scc: BTreeSet<String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if scc.len() > 1 && !out.contains(&scc) {
            out.push(scc);
        }
    }
    out
}

#[test]
fn module_graph_has_no_cycle_and_nothing_below_session_imports_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    for (from, tos) in &g {
        for to in tos {
            println!("{from} -> {to}");
        }
    }
    assert!(g.contains_key("session"), "the graph was read: {g:?}");
    assert_eq!(cycles(&g), Vec::<BTreeSet<String>>::new(), "cycles");
    for m in BELOW_SESSION {
        let up = g.get(*m).is_some_and(|t| t.contains("session"));
        assert!(!up, "{m} imports session");
    }
}

#[test]
fn cycle_finder_finds_cycles() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut edge = |a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
    };
    edge("a", "b");
    edge("b", "c");
    edge("c", "a");
    edge("c", "d");
    let c = cycles(&g);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0],
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    );
}
