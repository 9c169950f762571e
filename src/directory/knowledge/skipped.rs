//! DXserver-only commands, skipped with one line per kind.
//!
//! A CA deployment's initialization file (`R1.dxi`) sources its logging,
//! schema, limits, access and TLS settings besides the knowledge: hundreds
//! of `schema set ...` and `set max-users = ...` lines the router has no use
//! for. The router reads the `.dxi` for what it does use (`source`, `set
//! dsa`, `set precedence`, `set write-precedence`, its own `set
//! dsa-router-...`) and counts the rest by kind, so that a load says once
//! what it skipped, pointing at the first of each kind, instead of a
//! warning per line.

use super::diag::Diagnostic;

/// Statements that start with these words are DXserver's alone (schema
/// definitions, log files opened and closed by the console).
pub(super) const DXSERVER_ONLY: &[&str] = &["schema", "close", "open", "dump", "logging"];

/// Names listed in a kind's line, at most.
const NAMES_SHOWN: usize = 8;

/// One kind of skipped command.
struct Kind {
    /// `schema`, `set`, `clear`, ...
    kind: String,
    count: usize,
    /// The first one, its message to be written at the end.
    first: Diagnostic,
    /// What was set or cleared (distinct, in first-seen order).
    names: Vec<String>,
}

/// The skipped commands of one load, by kind, in first-seen order.
#[derive(Default)]
pub(super) struct Skipped(Vec<Kind>);

impl Skipped {
    /// One more command of `kind` (naming `name`, for `set` and `clear`),
    /// at `at` (a warning whose message is replaced by the summary).
    pub(super) fn note(&mut self, kind: &str, name: Option<&str>, at: impl FnOnce() -> Diagnostic) {
        let i = match self.0.iter().position(|k| k.kind == kind) {
            Some(i) => i,
            None => {
                self.0.push(Kind {
                    kind: kind.to_string(),
                    count: 0,
                    first: at(),
                    names: Vec::new(),
                });
                self.0.len() - 1
            }
        };
        let k = &mut self.0[i];
        k.count += 1;
        if let Some(n) = name {
            if !k.names.iter().any(|m| m.eq_ignore_ascii_case(n)) {
                k.names.push(n.to_string());
            }
        }
    }

    /// One warning per kind.
    pub(super) fn summary(self) -> Vec<Diagnostic> {
        self.0.into_iter().map(Kind::line).collect()
    }
}

impl Kind {
    fn line(self) -> Diagnostic {
        let Kind {
            kind,
            count,
            mut first,
            names,
        } = self;
        first.message = match (count, names.first()) {
            (1, Some(n)) => format!("{kind} {n}: not used by the router, ignored"),
            (1, None) => format!("{kind}: a DXserver-only command, ignored"),
            _ => {
                let mut shown = names
                    .iter()
                    .take(NAMES_SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if names.len() > NAMES_SHOWN {
                    shown.push_str(&format!(", and {} more", names.len() - NAMES_SHOWN));
                }
                let what = if shown.is_empty() {
                    String::new()
                } else {
                    format!(" ({shown})")
                };
                format!("{kind}: {count} commands not used by the router{what}, ignored; the first is here")
            }
        };
        first
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(line: usize) -> impl FnOnce() -> Diagnostic {
        move || {
            Diagnostic::warning(
                String::new(),
                Some(crate::directory::knowledge::diag::Location {
                    file: std::sync::Arc::new("r.dxi".into()),
                    line,
                    column: 1,
                }),
                None,
            )
        }
    }

    #[test]
    fn each_kind_is_one_line_pointing_at_its_first_command() {
        let mut s = Skipped::default();
        s.note("set", Some("max-users"), at(1));
        s.note("schema", None, at(2));
        s.note("schema", None, at(3));
        s.note("clear", Some("access"), at(4));
        for (i, n) in ["trace", "max-users", "a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .enumerate()
        {
            s.note("set", Some(n), at(10 + i));
        }
        let got: Vec<(usize, String)> = s
            .summary()
            .into_iter()
            .map(|d| (d.location.unwrap().line, d.message))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "set: 11 commands not used by the router (max-users, trace, a, b, c, d, e, f, and 2 more), ignored; the first is here".to_string()),
                (2, "schema: 2 commands not used by the router, ignored; the first is here".to_string()),
                (4, "clear access: not used by the router, ignored".to_string()),
            ]
        );
    }
}
