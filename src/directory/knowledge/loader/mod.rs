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
//! The files: this one holds the `Loader` (the state of one load and its
//! bounds: files read, errors) and reads files; `statement` handles each
//! statement (`source`, `set`, `clear`); `validate` checks the whole load
//! once every file is read.

mod statement;
mod validate;

use super::diag::{Diagnostic, LoadError, Location};
use super::dsa;
use super::file::File;
use super::lexer::lex;
use super::{DsaDef, Snapshot, Source};
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
}
