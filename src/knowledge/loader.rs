//! Loading a knowledge tree: reading files depth-first along `source`
//! lines, the statements (`source`, `set dsa`, `set precedence`,
//! `set write-precedence`, the router's own `set dsa-router-...`; other
//! `set` commands and DXserver-only ones, such as a `.dxi`'s `schema`
//! lines, counted by kind in [`super::skipped`]), then whole-load
//! validation (names unique, the precedence lists naming defined DSAs).
//!
//! A statement that fails to parse is reported and skipped to its `;`, so
//! one load reports every error. `set dsa` blocks are read in `dsa`, their
//! attribute values in `values`.
//!
//! (Over 500 lines: the statement handlers and the bounds on a load (files
//! read, sizes, errors) read one shared `Loader`; split, they would pass
//! it around field by field.)

use super::diag::{self, Diagnostic, LoadError, Location};
use super::dsa;
use super::file::{text_of, File, PResult};
use super::lexer::{lex, Tok, Token};
use super::skipped::DXSERVER_ONLY;
use super::{DsaDef, Snapshot, Source};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Nesting bound for `source`, far beyond real deployments; stops runaway
/// generated knowledge.
const MAX_SOURCE_DEPTH: usize = 64;
/// File reads per load (a file sourced twice is read twice: a diamond of
/// sources cannot multiply without end).
pub(crate) const MAX_FILE_READS: usize = 2_000;
/// Errors reported per load; loading stops after them.
pub(crate) const MAX_ERRORS: usize = 200;

/// A name with where it was written.
struct Named {
    name: String,
    at: Location,
    line_text: Arc<String>,
}

struct Loader<'a> {
    source: &'a dyn Source,
    files: Vec<PathBuf>,
    stack: Vec<PathBuf>,
    dsas: Vec<(DsaDef, Arc<String>)>,
    precedence: Option<Vec<Named>>,
    write_precedence: Option<Vec<Named>>,
    settings: super::RouterSettings,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    /// Names (lower case) of `set dsa` blocks that failed to load.
    broken: Vec<String>,
    /// `set dsa-router-dsa` blocks, applied once every DSA is loaded.
    router_dsas: Vec<dsa::RouterDsa>,
    /// Files read so far (each read counted).
    reads: usize,
    /// Warnings beyond [`MAX_ERRORS`], not kept.
    suppressed: usize,
    /// DXserver-only commands, reported once per kind at the end.
    skipped: super::skipped::Skipped,
}

/// The `set` commands the router reads (for "did you mean" hints).
const KNOWN_SETS: &[&str] = &[
    "dsa",
    "dsa-router-dsa",
    "precedence",
    "write-precedence",
    "dsa-router-cpu-threshold",
    "dsa-router-memory-threshold",
    "dsa-router-concurrency-limit",
    "dsa-router-hedge-budget",
    "dsa-router-hedge-floor-ms",
    "dsa-router-max-ejection",
    "dsa-router-ejection-time",
];

pub(super) fn load(root: &Path, source: &dyn Source) -> Result<Snapshot, LoadError> {
    let mut l = Loader {
        source,
        files: Vec::new(),
        stack: Vec::new(),
        dsas: Vec::new(),
        precedence: None,
        write_precedence: None,
        settings: super::RouterSettings::default(),
        errors: Vec::new(),
        warnings: Vec::new(),
        broken: Vec::new(),
        router_dsas: Vec::new(),
        reads: 0,
        suppressed: 0,
        skipped: Default::default(),
    };
    l.file(root, None);
    l.validate();
    let skipped = std::mem::take(&mut l.skipped).summary();
    l.warnings.extend(skipped);
    if l.suppressed > 0 {
        let n = l.suppressed;
        l.warnings.push(Diagnostic::warning(
            format!("{n} more warnings not shown (the first {MAX_ERRORS} are)"),
            None,
            None,
        ));
    }
    if !l.errors.is_empty() {
        return Err(LoadError { errors: l.errors });
    }
    let names = |v: Option<Vec<Named>>| v.unwrap_or_default().into_iter().map(|n| n.name).collect();
    Ok(Snapshot {
        root: root.to_path_buf(),
        files: l.files,
        dsas: l.dsas.into_iter().map(|(d, _)| d).collect(),
        precedence: names(l.precedence),
        write_precedence: names(l.write_precedence),
        warnings: l.warnings,
        settings: l.settings,
    })
}

impl Loader<'_> {
    /// A warning, kept up to [`MAX_ERRORS`] (then one line says how many
    /// more there were).
    fn warn(&mut self, d: Diagnostic) {
        self.suppressed += usize::from(self.warnings.len() >= MAX_ERRORS);
        if self.warnings.len() < MAX_ERRORS {
            self.warnings.push(d);
        }
    }
}

/// Where the last error was, if it says.
fn d_location(errors: &[Diagnostic]) -> Option<Location> {
    errors.last().and_then(|d| d.location.clone())
}

impl Loader<'_> {
    fn file(&mut self, path: &Path, included_at: Option<Diagnostic>) {
        let id = self.source.identity(path);
        if self.stack.contains(&id) {
            let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
            d.message = format!("source cycle: {} is already being read", path.display());
            self.errors.push(d);
            return;
        }
        if self.stack.len() >= MAX_SOURCE_DEPTH {
            let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
            d.message = format!("source nesting deeper than {MAX_SOURCE_DEPTH} files");
            self.errors.push(d);
            return;
        }
        if self.errors.len() >= MAX_ERRORS {
            return;
        }
        self.reads += 1;
        if self.reads > MAX_FILE_READS {
            let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
            d.message = format!(
                "more than {MAX_FILE_READS} files read (each `source` of a file reads it again); loading stopped"
            );
            self.errors.push(d);
            return;
        }
        let text = match self.source.read(path) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
                d.message = format!("cannot read {}: {e}", path.display());
                self.errors.push(d);
                return;
            }
        };
        if !self.files.iter().any(|f| self.source.identity(f) == id) {
            self.files.push(path.to_path_buf());
        }
        let ppath = Arc::new(path.to_path_buf());
        let toks = match lex(&text) {
            Ok(t) => t,
            Err(e) => {
                let loc = Location {
                    file: ppath,
                    line: e.line,
                    column: e.column,
                };
                self.errors
                    .push(Diagnostic::error(e.message, Some(loc), Some(&text)));
                return;
            }
        };
        self.stack.push(id);
        let mut f = File {
            path: ppath,
            text,
            toks: &toks,
            pos: 0,
        };
        while f.peek().is_some() && self.errors.len() < MAX_ERRORS && self.reads <= MAX_FILE_READS {
            if let Err(d) = self.statement(&mut f) {
                self.errors.push(d);
                if self.errors.len() == MAX_ERRORS {
                    let at = d_location(&self.errors);
                    self.errors.push(Diagnostic::error(
                        format!("{MAX_ERRORS} errors; loading stopped here"),
                        at,
                        None,
                    ));
                    break;
                }
                f.recover();
            }
        }
        self.stack.pop();
    }

    fn statement(&mut self, f: &mut File) -> PResult<()> {
        let Some(t) = f.peek().cloned() else {
            return Ok(());
        };
        match &t.tok {
            Tok::Semi => {
                f.pos += 1;
                Ok(())
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("source") => {
                f.pos += 1;
                let target = f.name("a file name after 'source'")?;
                f.expect(Tok::Semi, "';' after the source file name")?;
                let rel = Path::new(text_of(&target));
                let full = if rel.is_absolute() {
                    rel.to_path_buf()
                } else {
                    f.path
                        .parent()
                        .map(|p| p.join(rel))
                        .unwrap_or_else(|| rel.to_path_buf())
                };
                let at = f.err_at(target.line, target.column, String::new());
                self.file(&full, Some(at));
                Ok(())
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("set") => {
                f.pos += 1;
                self.set(f)
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("clear") => {
                f.pos += 1;
                self.clear(f)
            }
            Tok::Word(w) if DXSERVER_ONLY.iter().any(|k| w.eq_ignore_ascii_case(k)) => {
                let kind = w.to_ascii_lowercase();
                self.skipped
                    .note(&kind, None, || f.warn_at(&t, String::new()));
                f.skip_statement()
            }
            other => {
                let hint = match other {
                    Tok::Word(w) => diag::closest(w, ["set", "source", "clear", "schema"])
                        .map(|c| format!(" (did you mean '{c}'?)"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                Err(f.err_at(
                    t.line,
                    t.column,
                    format!(
                        "expected 'set', 'source' or 'clear', found {}{hint}",
                        other.describe()
                    ),
                ))
            }
        }
    }

    /// `clear dsas;`: CA's DSA initialization files start with it before
    /// sourcing knowledge; it forgets the DSA knowledge loaded so far.
    fn clear(&mut self, f: &mut File) -> PResult<()> {
        let what = f.name("what to clear after 'clear'")?;
        let key = text_of(&what).to_ascii_lowercase();
        f.expect(Tok::Semi, &format!("';' after 'clear {key}'"))?;
        if key == "dsas" {
            if !self.dsas.is_empty() {
                self.warn(f.warn_at(
                    &what,
                    format!(
                        "clear dsas: forgets the {} DSA block(s) loaded before it",
                        self.dsas.len()
                    ),
                ));
            }
            self.dsas.clear();
        } else {
            self.skipped
                .note("clear", Some(&key), || f.warn_at(&what, String::new()));
        }
        Ok(())
    }

    fn set(&mut self, f: &mut File) -> PResult<()> {
        let what = f.name("what to set after 'set'")?;
        let key = text_of(&what).to_ascii_lowercase();
        match key.as_str() {
            "dsa" => {
                // Its name, so that errors naming it elsewhere can be
                // marked as following from this block's error.
                let name = f.peek().map(|t| text_of(t).to_ascii_lowercase());
                let block = match dsa::block(f, &mut self.warnings) {
                    Ok(b) => b,
                    Err(e) => {
                        self.broken.extend(name);
                        return Err(e);
                    }
                };
                // The statement parsed to its ';': an incomplete block is
                // reported, and loading goes on with the next statement.
                match block.check(f, &mut self.warnings) {
                    Ok(d) => self.dsas.push((d, f.text.clone())),
                    Err(e) => {
                        self.broken.extend(name);
                        self.errors.push(e)
                    }
                }
                Ok(())
            }
            "precedence" | "write-precedence" => self.set_precedence(f, &what, &key),
            "dsa-router-dsa" => {
                let r = dsa::router_block(f)?;
                self.router_dsas.push(r);
                Ok(())
            }
            "dsa-router-cpu-threshold"
            | "dsa-router-memory-threshold"
            | "dsa-router-concurrency-limit"
            | "dsa-router-hedge-budget"
            | "dsa-router-hedge-floor-ms"
            | "dsa-router-max-ejection"
            | "dsa-router-ejection-time" => self.set_router_setting(f, &key),
            _ => {
                // A near miss of a command the router reads is likely a
                // typo: said on its own line. The rest (DXserver's own
                // settings: a .dxi's limits, logging, ...) count by kind.
                match diag::closest(&key, KNOWN_SETS.iter().copied()) {
                    // Counted, not made: a flood of them stays linear.
                    Some(_) if self.warnings.len() >= MAX_ERRORS => self.suppressed += 1,
                    Some(c) => self.warn(f.warn_at(
                        &what,
                        format!(
                            "set {key}: not used by the router, ignored (did you mean 'set {c}'?)"
                        ),
                    )),
                    None => self
                        .skipped
                        .note("set", Some(&key), || f.warn_at(&what, String::new())),
                }
                f.skip_statement()
            }
        }
    }

    /// `set precedence = NAME, ...;` (or `write-precedence`).
    fn set_precedence(&mut self, f: &mut File, what: &Token, key: &str) -> PResult<()> {
        f.expect(Tok::Eq, "'='")?;
        let mut names = Vec::new();
        loop {
            let n = f.name("a DSA name")?;
            names.push(Named {
                name: text_of(&n).to_string(),
                at: f.loc(n.line, n.column),
                line_text: f.text.clone(),
            });
            match f.peek().map(|t| &t.tok) {
                Some(Tok::Comma) => f.pos += 1,
                _ => break,
            }
        }
        f.expect(Tok::Semi, "',' or ';' after a DSA name")?;
        let given = if key == "precedence" {
            self.precedence.is_some()
        } else {
            self.write_precedence.is_some()
        };
        if given {
            self.warn(f.warn_at(
                what,
                format!("set {key} given again; this one replaces the earlier one"),
            ));
        }
        if key == "precedence" {
            self.precedence = Some(names);
        } else {
            self.write_precedence = Some(names);
        }
        Ok(())
    }

    /// `set dsa-router-cpu-threshold = PCT;` and the other router-only
    /// settings.
    fn set_router_setting(&mut self, f: &mut File, key: &str) -> PResult<()> {
        f.expect(Tok::Eq, "'='")?;
        let v = f.name("a number")?;
        let n: u32 = text_of(&v).parse().map_err(|_| {
            f.err_at(
                v.line,
                v.column,
                format!("set {key} takes a whole number, found {}", v.tok.describe()),
            )
        })?;
        let percent = !matches!(
            key,
            "dsa-router-concurrency-limit"
                | "dsa-router-hedge-floor-ms"
                | "dsa-router-ejection-time"
        );
        if percent && n > 100 {
            return Err(f.err_at(
                v.line,
                v.column,
                format!("set {key} is a percentage 0-100 (0 = off)"),
            ));
        }
        f.expect(Tok::Semi, "';'")?;
        let s = &mut self.settings;
        match key {
            "dsa-router-cpu-threshold" => s.cpu_threshold = Some(n),
            "dsa-router-memory-threshold" => s.memory_threshold = Some(n),
            "dsa-router-hedge-budget" => s.hedge_budget = Some(n),
            "dsa-router-hedge-floor-ms" => s.hedge_floor_ms = Some(n),
            "dsa-router-max-ejection" => s.max_ejection = Some(n),
            "dsa-router-ejection-time" => s.ejection_time_s = Some(n),
            _ => s.concurrency_limit = Some(n),
        }
        Ok(())
    }

    fn validate(&mut self) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, (d, text)) in self.dsas.iter().enumerate() {
            let key = d.name.to_ascii_lowercase();
            if let Some(&first) = seen.get(&key) {
                let prev = &self.dsas[first].0.defined_at;
                self.errors.push(Diagnostic::error(
                    format!(
                        "duplicate DSA name \"{}\" (first defined at {prev})",
                        d.name
                    ),
                    Some(d.defined_at.clone()),
                    Some(text),
                ));
            } else {
                seen.insert(key, i);
            }
        }
        // Root causes first, in file order; then the errors that may only
        // follow from them (a precedence list naming a block that did not
        // load, or that a missing ';' swallowed), marked as such.
        let mut errors = std::mem::take(&mut self.errors);
        errors.sort_by_key(|d| self.position(d));
        self.errors = errors;
        let caused = !self.errors.is_empty();
        let names: Vec<String> = self.dsas.iter().map(|(d, _)| d.name.clone()).collect();
        for (list, what) in [
            (&self.precedence, "set precedence"),
            (&self.write_precedence, "set write-precedence"),
        ] {
            for n in list.iter().flatten() {
                let key = n.name.to_ascii_lowercase();
                if seen.contains_key(&key) {
                    continue;
                }
                let mut msg = format!(
                    "unknown DSA \"{}\" in {what}: no set dsa block has that name",
                    n.name
                );
                if let Some(c) = diag::closest(&n.name, names.iter().map(String::as_str)) {
                    msg += &format!(" (did you mean \"{c}\"?)");
                }
                if self.broken.contains(&key) {
                    msg += " (its set dsa block did not load: see the error above)";
                } else if caused {
                    msg += " (this may follow from an error above)";
                }
                self.errors.push(Diagnostic::error(
                    msg,
                    Some(n.at.clone()),
                    Some(&n.line_text),
                ));
            }
        }
        self.apply_router_dsas(caused);
        self.horizontal_sets();
        self.near_duplicates();
    }

    /// Horizontal partitions: the DSAs sharing a prefix with a hash part
    /// are one set; it needs one algorithm, one total and one attribute,
    /// every slot covered, and no DSA of that prefix without a part.
    fn horizontal_sets(&mut self) {
        let mut sets: Vec<(String, Vec<usize>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, (d, _)) in self.dsas.iter().enumerate() {
            let key = d.prefix.normalized();
            match index.get(&key) {
                Some(&at) => sets[at].1.push(i),
                None => {
                    index.insert(key.clone(), sets.len());
                    sets.push((key, vec![i]));
                }
            }
        }
        for (_, members) in sets {
            let parts: Vec<(usize, &crate::knowledge::hash::HashPart)> = members
                .iter()
                .filter_map(|&i| self.dsas[i].0.hash.as_ref().map(|h| (i, h)))
                .collect();
            let Some(&(first_i, first)) = parts.first() else {
                continue;
            };
            let mut errs = Vec::new();
            let at = |i: usize| (self.dsas[i].0.defined_at.clone(), self.dsas[i].1.clone());
            let prefix = self.dsas[first_i].0.prefix.to_string();
            for &i in &members {
                let d = &self.dsas[i].0;
                match &d.hash {
                    None => errs.push((i, format!(
                        "DSA \"{}\" holds {prefix} whole, but DSA \"{}\" holds it as a horizontal partition ({}): a prefix is partitioned by hash on all its DSAs or on none",
                        d.name, self.dsas[first_i].0.name, first.describe()
                    ))),
                    Some(h) if (h.algo, h.total, &h.attr) != (first.algo, first.total, &first.attr) => {
                        errs.push((i, format!(
                            "DSA \"{}\" partitions {prefix} as {}, but DSA \"{}\" as {}: one set has one attribute, algorithm and total",
                            d.name, h.describe(), self.dsas[first_i].0.name, first.describe()
                        )))
                    }
                    Some(_) => {}
                }
            }
            if errs.is_empty() {
                let missing: Vec<String> = (0..first.total)
                    .filter(|s| !parts.iter().any(|(_, h)| h.slot == *s))
                    .map(|s| s.to_string())
                    .collect();
                if !missing.is_empty() {
                    errs.push((
                        first_i,
                        format!(
                            "horizontal partition of {prefix} ({} of {}): no DSA holds slot(s) {}",
                            first.algo.name(),
                            first.total,
                            missing.join(", ")
                        ),
                    ));
                }
            }
            for (i, msg) in errs {
                let (loc, text) = at(i);
                self.errors
                    .push(Diagnostic::error(msg, Some(loc), Some(&text)));
            }
        }
    }

    /// The router's own settings for DSAs, kept apart from CA knowledge.
    fn apply_router_dsas(&mut self, caused: bool) {
        for r in std::mem::take(&mut self.router_dsas) {
            let key = r.name.to_ascii_lowercase();
            let names: Vec<String> = self.dsas.iter().map(|(d, _)| d.name.clone()).collect();
            let Some((d, _)) = self
                .dsas
                .iter_mut()
                .find(|(d, _)| d.name.eq_ignore_ascii_case(&r.name))
            else {
                let mut msg = format!(
                    "unknown DSA \"{}\" in set dsa-router-dsa: no set dsa block has that name",
                    r.name
                );
                if let Some(c) = diag::closest(&r.name, names.iter().map(String::as_str)) {
                    msg += &format!(" (did you mean \"{c}\"?)");
                }
                if self.broken.contains(&key) {
                    msg += " (its set dsa block did not load: see the error above)";
                } else if caused {
                    msg += " (this may follow from an error above)";
                }
                self.errors
                    .push(Diagnostic::error(msg, Some(r.at), Some(&r.line_text)));
                continue;
            };
            if r.tls.is_some() {
                d.tls = r.tls;
            }
            if r.concurrency_limit.is_some() {
                d.concurrency_limit = r.concurrency_limit;
            }
        }
    }

    /// A diagnostic's place: file (in load order), line, column.
    fn position(&self, d: &Diagnostic) -> Option<(Option<usize>, usize, usize)> {
        d.location.as_ref().map(|l| {
            (
                self.files.iter().position(|f| **f == *l.file),
                l.line,
                l.column,
            )
        })
    }

    /// A prefix or a load-share group with one member whose name is close
    /// to another's: likely a typo that made a partition or group of its
    /// own. Pairwise, so only while the pairs stay under
    /// [`NEAR_DUPLICATE_PAIRS`]: beyond, knowledge this large is generated,
    /// not typed, and the check is skipped (said in a warning) so that
    /// loading stays linear.
    fn near_duplicates(&mut self) {
        let mut found = Vec::new();
        for (label, key) in [
            (
                "partition",
                (|d: &DsaDef| Some(d.prefix.to_string())) as fn(&DsaDef) -> Option<String>,
            ),
            ("load-share group", |d: &DsaDef| d.load_share_group.clone()),
        ] {
            // Each name (case-insensitive): as first written, how many
            // DSAs, the first DSA's index, its letters (digits removed).
            let mut index: HashMap<String, usize> = HashMap::new();
            let mut count: Vec<(String, usize, usize, String)> = Vec::new();
            for (i, (d, _)) in self.dsas.iter().enumerate() {
                let Some(k) = key(d) else {
                    continue;
                };
                let lower = k.to_ascii_lowercase();
                match index.get(&lower) {
                    Some(&at) => {
                        count[at].1 += 1;
                        if k != count[at].0 && label == "load-share group" {
                            let (d, text) = &self.dsas[i];
                            found.push(Diagnostic::warning(
                                format!(
                                    "{label} \"{k}\" of DSA {} is also written \"{}\": names are compared ignoring case, so they are one group",
                                    d.name, count[at].0
                                ),
                                Some(d.defined_at.clone()),
                                Some(text),
                            ));
                        }
                    }
                    None => {
                        index.insert(lower, count.len());
                        // Names that differ only in their digits are a
                        // series (GROUP1, GROUP2), not a typo.
                        let letters = k
                            .chars()
                            .filter(|c| !c.is_ascii_digit())
                            .collect::<String>()
                            .to_ascii_lowercase();
                        count.push((k, 1, i, letters));
                    }
                }
            }
            let singles = count.iter().filter(|c| c.1 == 1).count();
            if singles.saturating_mul(count.len()) > NEAR_DUPLICATE_PAIRS {
                found.push(Diagnostic::warning(
                    format!(
                        "{} {label}s: the check for names close to another's (typos) is skipped above {NEAR_DUPLICATE_PAIRS} pairs",
                        count.len()
                    ),
                    None,
                    None,
                ));
                continue;
            }
            for (k, n, i, letters) in &count {
                if *n != 1 {
                    continue;
                }
                let others = count
                    .iter()
                    .filter(|(o, _, _, l)| o != k && l != letters)
                    .map(|(o, _, _, _)| o.as_str());
                if let Some(c) = diag::closest(k, others) {
                    let (d, text) = &self.dsas[*i];
                    found.push(Diagnostic::warning(
                        format!(
                            "{label} \"{k}\" has one DSA ({}) and is close to {label} \"{c}\": a typo?",
                            d.name
                        ),
                        Some(d.defined_at.clone()),
                        Some(text),
                    ));
                }
            }
        }
        self.warnings.extend(found);
    }
}

/// Pairs of names the typo check of [`Loader::near_duplicates`] compares
/// at most (some four million: well under a second).
const NEAR_DUPLICATE_PAIRS: usize = 4_000_000;
