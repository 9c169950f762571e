//! Client- and DSA-supplied text in log lines: a bind DN, a filter, an
//! OID, a DSA's diagnostic message may hold a line break, and written raw it
//! would forge a log line of its own.
//!
//! [`esc`] wraps a value for a `tracing` field (`dn = %esc(&dn)`) or a
//! message argument; the access log ([`crate::observe::access`]) writes its unquoted
//! fields the same way. A value is written as it is when it has no control
//! character (line feed, carriage return, tab, escape, NUL, DEL, C1, the
//! Unicode line and paragraph separators, bidirectional overrides) and does
//! not start with `"`; otherwise it is quoted and escaped as Rust's `{:?}`
//! writes a string (the access log's quoted fields): `"cn=a\nb,o=x"`. A
//! value written as it is therefore never looks like a quoted one, and no
//! control character reaches the log raw.

use std::fmt::{self, Write as _};

/// `value`, written safely into a log line (see the module comment).
pub fn esc<T: fmt::Display>(value: T) -> Esc<T> {
    Esc(value)
}

/// See [`esc`].
#[derive(Debug, Clone, Copy)]
pub struct Esc<T>(pub T);

impl<T: fmt::Display> fmt::Display for Esc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write!(s, "{}", self.0)?;
        write_str(f, &s)
    }
}

/// Whether `s` must be quoted and escaped to go into a log line.
pub fn needs_quoting(s: &str) -> bool {
    // Printable ASCII (the common case) needs nothing but the check for a
    // leading quote.
    s.starts_with('"')
        || (!s.bytes().all(|b| (b' '..=b'~').contains(&b)) && s.chars().any(unsafe_char))
}

/// Characters that never go into a log line raw.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` into `out`, as it is or quoted and escaped.
pub fn write_str(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    if needs_quoting(s) {
        write!(out, "{s:?}")
    } else {
        out.write_str(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_with_control_characters_are_quoted_and_escaped() {
        for (value, logged) in [
            ("cn=alice,o=DEMOCORP,c=AU", "cn=alice,o=DEMOCORP,c=AU"),
            ("cn=J\\, Smith,o=x", "cn=J\\, Smith,o=x"),
            ("cn=Émile,o=x", "cn=Émile,o=x"),
            ("", ""),
            ("a \"quoted\" word", "a \"quoted\" word"),
            (
                "cn=x\n2026-01-01T00:00:00Z  INFO forged",
                "\"cn=x\\n2026-01-01T00:00:00Z  INFO forged\"",
            ),
            ("cn=x\r\nINFO forged", "\"cn=x\\r\\nINFO forged\""),
            ("tab\there", "\"tab\\there\""),
            ("nul\0", "\"nul\\0\""),
            ("esc\u{1b}[31mred", "\"esc\\u{1b}[31mred\""),
            ("del\u{7f}", "\"del\\u{7f}\""),
            ("nel\u{85}x", "\"nel\\u{85}x\""),
            ("ls\u{2028}x", "\"ls\\u{2028}x\""),
            ("ps\u{2029}x", "\"ps\\u{2029}x\""),
            ("rlo\u{202e}x", "\"rlo\\u{202e}x\""),
            ("\"cn=x\"", "\"\\\"cn=x\\\"\""),
            ("back\\slash\n", "\"back\\\\slash\\n\""),
        ] {
            assert_eq!(esc(value).to_string(), logged, "{value:?}");
            assert_eq!(needs_quoting(value), value != logged, "{value:?}");
        }
        // Any Display, not only strings.
        let dn = crate::proto::dn::Dn::parse_ldap("cn=a\\0Ab,o=x").expect("dn");
        assert_eq!(esc(&dn).to_string(), "\"cn=a\\nb,o=x\"");
        assert_eq!(esc(42).to_string(), "42");
    }

    proptest::proptest! {
        /// Whatever the value, what is logged is one line of printable
        /// characters, and it reads back as the value.
        #[test]
        fn logged_values_are_one_printable_line_that_reads_back(value in "\\PC{0,8}|[\\x00-\\x7f\u{85}\u{2028}\u{202e}é]{0,12}") {
            let logged = esc(&value).to_string();
            proptest::prop_assert!(!logged.chars().any(unsafe_char), "{:?}", logged);
            if needs_quoting(&value) {
                proptest::prop_assert!(logged.starts_with('"') && logged.ends_with('"'));
                proptest::prop_assert_eq!(unquote(&logged), value);
            } else {
                proptest::prop_assert_eq!(logged, value);
            }
        }
    }

    /// The reverse of `{:?}` for the escapes it writes.
    fn unquote(s: &str) -> String {
        let mut out = String::new();
        let mut it = s[1..s.len() - 1].chars();
        while let Some(c) = it.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match it.next() {
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('t') => out.push('\t'),
                Some('0') => out.push('\0'),
                Some('u') => {
                    let hex: String = it.by_ref().skip(1).take_while(|&c| c != '}').collect();
                    out.extend(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32));
                }
                Some(c) => out.push(c),
                None => {}
            }
        }
        out
    }
}
