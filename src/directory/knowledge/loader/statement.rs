//! The statements of a knowledge file: `source`, `set` (`dsa`, the
//! precedence lists, the router's own settings; others counted or warned
//! about) and `clear`.

use super::Loader;
use super::Named;
use super::MAX_ERRORS;
use crate::directory::knowledge::diag;
use crate::directory::knowledge::dsa;
use crate::directory::knowledge::file::{text_of, File, PResult};
use crate::directory::knowledge::lexer::{Tok, Token};
use crate::directory::knowledge::router_settings;
use crate::directory::knowledge::skipped::DXSERVER_ONLY;
use std::path::Path;

/// The `set` commands the router reads (for "did you mean" hints).
const KNOWN_SETS: &[&str] = &["dsa", "dsa-router-dsa", "precedence", "write-precedence"];

impl Loader<'_> {
    /// One statement (a lone `;` is one).
    pub(super) fn statement(&mut self, f: &mut File) -> PResult<()> {
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
                        self.errors.extend(e)
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
            k if router_settings::KEYS.contains(&k) => self.set_router_setting(f, &key),
            _ => {
                // A near miss of a command the router reads is likely a
                // typo: said on its own line. The rest (DXserver's own
                // settings: a .dxi's limits, logging, ...) count by kind.
                let known = KNOWN_SETS.iter().chain(router_settings::KEYS);
                match diag::closest(&key, known.copied()) {
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
    /// settings ([`router_settings`]).
    fn set_router_setting(&mut self, f: &mut File, key: &str) -> PResult<()> {
        f.expect(Tok::Eq, "'='")?;
        let v = f.name("a value")?;
        self.settings
            .set(key, text_of(&v))
            .map_err(|e| f.err_at(v.line, v.column, e.0))?;
        f.expect(Tok::Semi, "';'")
    }
}
