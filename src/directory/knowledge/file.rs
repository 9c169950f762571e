//! One knowledge file being read: a cursor over its tokens, and the
//! diagnostics that point into it.

use super::diag::{Diagnostic, Location};
use super::lexer::{Tok, Token};
use std::path::PathBuf;
use std::sync::Arc;

/// One knowledge file being read: its path and text, and a cursor over its
/// tokens.
pub(super) struct File<'t> {
    pub path: Arc<PathBuf>,
    pub text: Arc<String>,
    pub toks: &'t [Token],
    pub pos: usize,
}

/// A statement's outcome: an error ends the statement (the loader then
/// skips to its `;` and reads on).
pub(super) type PResult<T> = Result<T, Diagnostic>;

impl File<'_> {
    pub(super) fn loc(&self, line: usize, column: usize) -> Location {
        Location {
            file: self.path.clone(),
            line,
            column,
        }
    }

    pub(super) fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    pub(super) fn peek2(&self) -> Option<&Token> {
        self.toks.get(self.pos + 1)
    }

    pub(super) fn next(&mut self) -> Option<&Token> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }

    /// An error at the current token, or at the end of the file.
    pub(super) fn err_here(&self, message: String) -> Diagnostic {
        match self.peek() {
            Some(t) => self.err_at(t.line, t.column, message),
            None => self.err_eof(message),
        }
    }

    pub(super) fn err_at(&self, line: usize, column: usize, message: String) -> Diagnostic {
        Diagnostic::error(message, Some(self.loc(line, column)), Some(&self.text))
    }

    pub(super) fn err_eof(&self, message: String) -> Diagnostic {
        let line = self.text.lines().count().max(1);
        let column = self
            .text
            .lines()
            .last()
            .map(|l| l.chars().count() + 1)
            .unwrap_or(1);
        self.err_at(line, column, format!("{message} (at end of file)"))
    }

    pub(super) fn warn_at(&self, t: &Token, message: String) -> Diagnostic {
        Diagnostic::warning(message, Some(self.loc(t.line, t.column)), Some(&self.text))
    }

    pub(super) fn expect(&mut self, want: Tok, what: &str) -> PResult<()> {
        match self.peek() {
            Some(t) if t.tok == want => {
                self.pos += 1;
                Ok(())
            }
            Some(t) => Err(self.err_at(
                t.line,
                t.column,
                format!("expected {what}, found {}", t.tok.describe()),
            )),
            None => Err(self.err_eof(format!("expected {what}"))),
        }
    }

    /// A name: quoted or bare.
    pub(super) fn name(&mut self, what: &str) -> PResult<Token> {
        match self.peek() {
            Some(
                t @ Token {
                    tok: Tok::Word(_) | Tok::Str(_),
                    ..
                },
            ) => {
                let t = t.clone();
                self.pos += 1;
                Ok(t)
            }
            Some(t) => Err(self.err_at(
                t.line,
                t.column,
                format!("expected {what}, found {}", t.tok.describe()),
            )),
            None => Err(self.err_eof(format!("expected {what}"))),
        }
    }

    /// Skip the value of an ignored `set` command, braces included, to
    /// its `;`.
    pub(super) fn skip_statement(&mut self) -> PResult<()> {
        let mut depth = 0usize;
        loop {
            let Some(t) = self.next() else {
                return Err(self.err_eof("missing ';'".to_string()));
            };
            match t.tok {
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth = depth.saturating_sub(1),
                Tok::Semi if depth == 0 => return Ok(()),
                _ => {}
            }
        }
    }

    /// Skip to just after the next `;` (error recovery).
    pub(super) fn recover(&mut self) {
        while let Some(t) = self.next() {
            if t.tok == Tok::Semi {
                break;
            }
        }
    }
}

/// The text of a word, string or angle token; empty for punctuation.
pub(super) fn text_of(t: &Token) -> &str {
    match &t.tok {
        Tok::Word(s) | Tok::Str(s) | Tok::Angle(s) => s,
        _ => "",
    }
}
