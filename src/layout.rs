//! The module graph, checked (`cargo test --lib layout -- --nocapture`
//! prints it). Every `.rs` file is read whole, leaving out only what is
//! compiled for tests (`#[cfg(test)]` items, and files declared as
//! `#[cfg(test)] mod x;`), comments and string literals; each `crate::`,
//! `super::` and `self::` path it names is an arrow from its module to the
//! deepest module the path reaches. An arrow between two modules is drawn
//! between their ancestors that are siblings (`backend::upstream::conn`
//! naming `backend::dsa_state::Count` is `upstream -> dsa_state` inside
//! `backend`), so a circle through sub-folders is seen as well.
//!
//! Checked: no circle among the modules of any folder, top level
//! included, and every arrow between layers points down [`LAYERS`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers under `src/`, from the bottom up: a module may name its own
/// layer's modules (without a circle) and the layers before its own.
const LAYERS: &[&str] = &[
    "base",
    "proto",
    "directory",
    "observe",
    "admission",
    "backend",
    "lifecycle",
    "service",
    "frontend",
    "app",
];

type Module = Vec<String>;
/// Per folder (module path), arrows between its children, with a file
/// that draws each.
type Graph = BTreeMap<Module, BTreeMap<(String, String), String>>;

/// Source text without comments and string or char literals (replaced by
/// spaces; line breaks kept).
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or(' ');
        if c == '/' && next == '/' {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == '*' {
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                out.push(blank(b[i]));
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == '"' || next == '#') && !prev_ident(&b, i) {
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            while j < b.len() {
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                out.push(blank(b[j]));
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                out.push(blank(b.get(i).copied().unwrap_or(' ')));
                i += 1;
            }
            i += 1;
        } else if c == '\'' && (next == '\\' || b.get(i + 2) == Some(&'\'')) {
            i += if next == '\\' { 2 } else { 1 };
            while i < b.len() && b[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == '_')
}

/// Code without the items under `#[cfg(test)]`, and the names of the
/// module files it declares for tests only.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(code.len());
    let mut test_mods = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        rest = &rest[at + "#[cfg(test)]".len()..];
        let semi = rest.find(';').unwrap_or(rest.len());
        let brace = rest.find('{').unwrap_or(rest.len());
        if semi < brace {
            let item = &rest[..semi];
            if let Some(name) = item.split_whitespace().skip_while(|w| *w != "mod").nth(1) {
                test_mods.push(name.to_string());
            }
            rest = &rest[(semi + 1).min(rest.len())..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = rest.len();
        for (k, ch) in rest.char_indices().skip(brace) {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.extend(rest[..end].chars().filter(|c| *c == '\n'));
        rest = &rest[end..];
    }
    out.push_str(rest);
    (out, test_mods)
}

/// Every module file under `src/` with its module path and its code (test
/// items out); files declared for tests only are left out.
fn modules(src: &Path) -> Vec<(Module, String, String)> {
    let mut found = Vec::new();
    walk(src, src, &mut found);
    let mut test_files: BTreeSet<Module> = BTreeSet::new();
    let mut out = Vec::new();
    for (m, file, text) in found {
        let (code, tests) = without_tests(&code_only(&text));
        for t in tests {
            let mut p = m.clone();
            p.push(t);
            test_files.insert(p);
        }
        out.push((m, file, code));
    }
    out.retain(|(m, _, _)| !(1..=m.len()).any(|n| test_files.contains(&m[..n])));
    out
}

fn walk(src: &Path, dir: &Path, out: &mut Vec<(Module, String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(src, &p, out);
            continue;
        }
        if p.extension().and_then(|x| x.to_str()) != Some("rs") {
            continue;
        }
        let Ok(rel) = p.strip_prefix(src) else {
            continue;
        };
        let mut m: Module = rel
            .iter()
            .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if m.last().is_some_and(|l| l == "mod") {
            m.pop();
        }
        if m == ["lib"] || m == ["main"] || m == ["layout"] {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&p) {
            out.push((m, rel.display().to_string(), text));
        }
    }
}

/// The module paths a file names: each `crate::`, `super::` or `self::`
/// path, resolved from module `m`, with a `{a, b::c}` group read as one
/// path per item.
fn named(m: &Module, code: &str) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(k) = code[at..].find(['c', 's']) {
        let i = at + k;
        at = i + 1;
        if i > 0 && code[..i].ends_with(|c: char| is_ident(c) || c == ':') {
            continue;
        }
        let word: String = code[i..].chars().take_while(|c| is_ident(*c)).collect();
        let mut rest = &code[i + word.len()..];
        let mut base: Module = match word.as_str() {
            "crate" => Vec::new(),
            "self" => m.clone(),
            "super" => m[..m.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let Some(r) = rest.strip_prefix("::") else {
            continue;
        };
        rest = r;
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let heads: Vec<&str> = match rest.strip_prefix('{') {
            Some(g) => g.split('}').next().unwrap_or_default().split(',').collect(),
            None => vec![rest],
        };
        for h in heads {
            let mut p = base.clone();
            let mut h = h.trim_start();
            loop {
                let seg: String = h.chars().take_while(|c| is_ident(*c)).collect();
                if seg.is_empty() || seg == "self" {
                    break;
                }
                h = &h[seg.len()..];
                p.push(seg);
                match h.strip_prefix("::") {
                    Some(r) => h = r,
                    None => break,
                }
            }
            out.push(p);
        }
    }
    out
}

/// The arrows between sibling modules, folder by folder.
fn graph(src: &Path) -> Graph {
    let mods = modules(src);
    let known: BTreeSet<Module> = mods.iter().map(|(m, _, _)| m.clone()).collect();
    let mut g: Graph = BTreeMap::new();
    for (m, file, code) in &mods {
        for mut p in named(m, code) {
            while !p.is_empty() && !known.contains(&p) {
                p.pop();
            }
            let common = m.iter().zip(&p).take_while(|(a, b)| a == b).count();
            if common == m.len() || common == p.len() {
                continue; // an ancestor or a descendant
            }
            let arrow = (m[common].clone(), p[common].clone());
            g.entry(m[..common].to_vec())
                .or_default()
                .entry(arrow)
                .or_insert_with(|| file.clone());
        }
    }
    g
}

/// The cycles (strongly connected components of more than one module).
fn cycles(arrows: &BTreeMap<(String, String), String>) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = arrows.keys().flat_map(|(a, b)| [a, b]).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for (_, to) in arrows.keys().filter(|(a, _)| *a == n) {
                if seen.insert(to.clone()) {
                    todo.push(to.clone());
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

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn layers_point_down_and_no_folder_has_a_circle() {
    let g = graph(&src());
    for (folder, arrows) in &g {
        for ((a, b), file) in arrows {
            println!("{}: {a} -> {b} ({file})", folder.join("::"));
        }
    }
    let backend = g.get(&vec!["backend".to_string()]);
    assert!(
        backend.is_some_and(|a| a.contains_key(&("upstream".into(), "dsa_state".into()))),
        "the graph was read through sub-folders: {backend:?}"
    );
    let mut found = Vec::new();
    for (folder, arrows) in &g {
        for c in cycles(arrows) {
            let ties: Vec<&String> = arrows
                .iter()
                .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                .map(|(_, f)| f)
                .collect();
            found.push(format!("{}: {c:?} ({ties:?})", folder.join("::")));
        }
    }
    assert_eq!(found, Vec::<String>::new(), "circles");
    let top = g.get(&Vec::new()).cloned().unwrap_or_default();
    let rank = |l: &str| LAYERS.iter().position(|x| *x == l);
    for ((a, b), file) in &top {
        let (ra, rb) = (rank(a), rank(b));
        assert!(
            ra.is_some() && rb.is_some(),
            "{a} or {b} is not a layer of LAYERS ({file})"
        );
        assert!(ra > rb, "{a} names {b}, a layer above it ({file})");
    }
    let entries: Vec<String> = std::fs::read_dir(src())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for e in &entries {
        assert!(rank(e).is_some(), "src/{e} is not a layer of LAYERS");
    }
}

#[test]
fn paths_are_read_from_code_only() {
    let m: Module = vec!["backend".into(), "upstream".into(), "conn".into()];
    let code = code_only(
        "use super::{pool, x::Y};\n// crate::app::x\nlet s = \"crate::app\";\nuse crate::proto::wire::Header;\nuse super::super::dsa_state::Count;",
    );
    let names = named(&m, &code);
    let want: Vec<Vec<&str>> = vec![
        vec!["backend", "upstream", "pool"],
        vec!["backend", "upstream", "x", "Y"],
        vec!["proto", "wire", "Header"],
        vec!["backend", "dsa_state", "Count"],
    ];
    assert_eq!(names, want);
    let (code, tests) =
        without_tests("fn a() {}\n#[cfg(test)]\nmod tests {\n use crate::app;\n}\n#[cfg(test)]\nmod more;\nfn b() {}");
    assert!(!code.contains("crate::app"));
    assert!(code.contains("fn b"));
    assert_eq!(tests, ["more"]);
}

#[test]
fn cycle_finder_finds_cycles() {
    let mut g = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.insert((a.to_string(), b.to_string()), String::new());
    }
    let c = cycles(&g);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0],
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    );
}
