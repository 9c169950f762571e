//! Diagnostics that point into knowledge files: file, line, column, and the
//! offending line with a caret under the column.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// A position in a knowledge file. Lines and columns count from 1; columns
/// count characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: Arc<PathBuf>,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One error or warning, with the source line it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub location: Option<Location>,
    /// The text of the line `location` points at, secrets masked
    /// (`super::redact`).
    pub source_line: Option<String>,
    /// The column of `location` in `source_line` (1-based characters):
    /// where the caret goes, left of `location.column` when a longer secret
    /// before it was masked.
    pub source_column: usize,
}

impl Diagnostic {
    pub fn error(
        message: impl Into<String>,
        location: Option<Location>,
        text: Option<&str>,
    ) -> Self {
        Self::new(Severity::Error, message.into(), location, text)
    }

    pub fn warning(
        message: impl Into<String>,
        location: Option<Location>,
        text: Option<&str>,
    ) -> Self {
        Self::new(Severity::Warning, message.into(), location, text)
    }

    fn new(
        severity: Severity,
        message: String,
        location: Option<Location>,
        text: Option<&str>,
    ) -> Self {
        // A password never shows, in the line or the message.
        let shown = match (&location, text) {
            (Some(loc), Some(text)) => super::redact::source_line(text, loc.line, loc.column),
            _ => None,
        };
        let message = match &shown {
            Some(s) => super::redact::message(&message, &s.secrets),
            None => message,
        };
        let source_column = match &shown {
            Some(s) => s.column,
            None => location.as_ref().map_or(0, |l| l.column),
        };
        Diagnostic {
            severity,
            message,
            location,
            source_line: shown.map(|s| s.line),
            source_column,
        }
    }
}

impl fmt::Display for Diagnostic {
    /// ```text
    /// error: unknown DSA "H3" in set precedence
    ///   --> knowledge/router.dxg:7:22
    ///    |
    ///  7 | set precedence = H1, H3;
    ///    |                      ^
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        writeln!(f, "{kind}: {}", self.message)?;
        if let Some(loc) = &self.location {
            let num = loc.line.to_string();
            let pad = " ".repeat(num.len());
            writeln!(f, "{pad}--> {loc}")?;
            if let Some(line) = &self.source_line {
                let line = line.replace('\t', " ");
                writeln!(f, "{pad} |")?;
                writeln!(f, "{num} | {line}")?;
                let caret = " ".repeat(self.source_column.saturating_sub(1));
                writeln!(f, "{pad} | {caret}^")?;
            }
        }
        Ok(())
    }
}

/// A knowledge load that failed: every error found, in file order.
#[derive(Debug, Clone)]
pub struct LoadError {
    pub errors: Vec<Diagnostic>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.errors {
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// A failed load is a configuration error; its text is every diagnostic,
/// as the operator reads them.
impl From<LoadError> for crate::base::error::Error {
    fn from(e: LoadError) -> crate::base::error::Error {
        crate::base::error::Error::config(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_load_is_a_config_error() {
        let e = LoadError {
            errors: vec![Diagnostic::error(
                "set dsa \"D1\" has no prefix",
                None,
                None,
            )],
        };
        let e = crate::base::error::Error::from(e);
        assert_eq!(e.kind, crate::base::error::Kind::Config);
        assert_eq!(e.text, "error: set dsa \"D1\" has no prefix\n");
    }
}

/// The candidate closest to `word` (case-insensitive edit distance of at
/// most 2, and less than half the word), for "did you mean" hints.
pub(super) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .filter(|c| !c.eq_ignore_ascii_case(word))
        .map(|c| (edit_distance(&w, &c.to_ascii_lowercase()), c))
        .filter(|&(d, _)| d <= 2 && d * 2 < w.chars().count().max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, by characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod closest_tests {
    use super::*;

    #[test]
    fn near_names_are_suggested_and_far_ones_not() {
        let attrs = ["address", "prefix", "dsa-flags", "load-share-group"];
        for (typo, want) in [
            ("adress", Some("address")),
            ("ADDRES", Some("address")),
            ("prefx", Some("prefix")),
            ("dsa-flag", Some("dsa-flags")),
            ("load-share-grp", Some("load-share-group")),
            ("lsg", None),
            ("colour", None),
            ("address", None),
        ] {
            assert_eq!(closest(typo, attrs), want, "{typo}");
        }
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
