//! The module graph, checked: `cargo test --lib layout -- --nocapture`
//! prints it (one `from -> to` line per arrow between top-level modules,
//! from the `crate::` paths each file names) and fails on a cycle between
//! top-level modules (folders or files of `src/`), or on an arrow into
//! `session` from the modules below it (`upstream`, `health`, `tls`,
//! `context`, `config`, `wire`, `route`, `knowledge`, `dsa_state`,
//! `error`). One level down, the files of each folder (`super::` and
//! `crate::folder::` paths) must not import each other in a circle
//! either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules that must not know the client side.
const BELOW_SESSION: &[&str] = &[
    "upstream",
    "health",
    "tls",
    "context",
    "config",
    "wire",
    "route",
    "knowledge",
    "dsa_state",
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

/// The modules of one folder (its files, and its sub-folders by their
/// `mod.rs`) and which of them each names through `super::` or
/// `crate::<folder>::` (tests and comments excluded).
fn folder_graph(src: &Path, dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    let mut mods: Vec<(String, std::path::PathBuf, &str)> = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        let name = p
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if p.is_dir() && p.join("mod.rs").exists() {
            mods.push((name, p.join("mod.rs"), "super::super::"));
        } else if p.extension().and_then(|x| x.to_str()) == Some("rs")
            && !["mod", "lib", "main", "layout"].contains(&name.as_str())
        {
            mods.push((name, p, "super::"));
        }
    }
    let rel = dir.strip_prefix(src).unwrap_or(dir);
    let mut crate_prefix = String::from("crate::");
    for c in rel.components() {
        crate_prefix.push_str(c.as_os_str().to_str().unwrap_or_default());
        crate_prefix.push_str("::");
    }
    let names: BTreeSet<&str> = mods.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, path, sup) in &mods {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or_default();
            for prefix in [*sup, crate_prefix.as_str()] {
                for (i, _) in line.match_indices(prefix) {
                    for n in named_after(&line[i + prefix.len()..]) {
                        if n != *m && names.contains(n.as_str()) {
                            g.entry(m.clone()).or_default().insert(n);
                        }
                    }
                }
            }
        }
    }
    g
}

/// The first path segment after a prefix: `x::...` names `x`;
/// `{a, b::c}` names `a` and `b`.
fn named_after(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    match rest.strip_prefix('{') {
        Some(group) => group
            .split('}')
            .next()
            .unwrap_or_default()
            .split(',')
            .map(ident)
            .filter(|n| !n.is_empty())
            .collect(),
        None => vec![ident(rest)],
    }
}

/// Every folder under `dir`, itself included.
fn folders(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                folders(&e.path(), out);
            }
        }
    }
}

#[test]
fn files_of_one_folder_do_not_import_each_other_in_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let session = folder_graph(&src, &src.join("session"));
    assert!(
        session.get("dispatch").is_some_and(|t| t.contains("own")),
        "the folder graph was read: {session:?}"
    );
    let mut dirs = Vec::new();
    folders(&src, &mut dirs);
    let mut found = Vec::new();
    for dir in dirs.iter().filter(|d| **d != src) {
        for c in cycles(&folder_graph(&src, dir)) {
            found.push(format!("{}: {c:?}", dir.display()));
        }
    }
    assert_eq!(found, Vec::<String>::new(), "circles inside a folder");
}

#[test]
fn the_folder_graph_reads_super_and_crate_paths_and_groups() {
    assert_eq!(named_after("x::Y"), ["x"]);
    assert_eq!(named_after("{a, b::c, self}"), ["a", "b", "self"]);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("a".into());
    assert_eq!(cycles(&g).len(), 1);
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
