//! Secrets kept out of diagnostics. The value of every attribute whose name
//! ends in `-password` (`ldap-dsa-password`, `dsa-password`,
//! `console-password`, any other, in any case) is shown as `***` in the
//! source lines and messages of diagnostics, which reach the terminal,
//! the log, reload responses and `/status`: whether the value is quoted or
//! bare, its string terminated or not, the `=` there or not, on the line of
//! its attribute or a later one, with blank or comment lines between.
//!
//! The secrets are found in the whole file, not around the diagnostic's
//! line: comments are blanked first (as the lexer skips them: `#` first on
//! its line or after whitespace, outside a quoted string), then every
//! value after a `-password` attribute is taken, whatever lies between.
//! Each secret is then masked wherever it stands in the shown line and in
//! the message. A file's secrets are kept for the next diagnostic of the
//! same text, so a file with many warnings is scanned once.
//!
//! The scan is textual, not the lexer's (a file that does not lex still
//! has its diagnostic): after an attribute name ending in `-password`
//! (and its `=`), the value runs to the end of its line, a `;`, a brace or
//! the next `name =`. A name ending in `-password` that is itself a value
//! (`trust-flags = allow-check-password`) is not an attribute: it follows
//! `=` or `,` and no `=` follows it.

use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

/// What a secret is shown as.
pub(super) const MASK: &str = "***";

const KEY: &[u8] = b"-password";

/// A character of a bare word (as the lexer has it).
fn is_word(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '=' | ';' | ',' | '{' | '}' | '"' | '<' | '>')
}

/// Whether `text` may hold a secret at all (the scans below are skipped
/// for the rest).
fn mentions_key(text: &str) -> bool {
    text.as_bytes()
        .windows(KEY.len())
        .any(|w| w.eq_ignore_ascii_case(KEY))
}

/// The first index at or after `from` where whitespace ends.
fn skip_space(chars: &[char], from: usize) -> usize {
    let mut i = from;
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// The index just after the next attribute name ending in `-password` at
/// or after `from`, and the index where that name starts.
fn next_key(chars: &[char], from: usize) -> Option<(usize, usize)> {
    let n = KEY.len();
    let mut i = from;
    while i + n <= chars.len() {
        let hit = chars[i..i + n]
            .iter()
            .zip(KEY)
            .all(|(c, k)| c.eq_ignore_ascii_case(&char::from(*k)));
        if hit && !chars.get(i + n).is_some_and(|c| is_word(*c)) {
            let mut start = i;
            while start > 0 && is_word(chars[start - 1]) {
                start -= 1;
            }
            return Some((start, i + n));
        }
        i += 1;
    }
    None
}

/// Where a value that starts at `from` ends (exclusive): at the end of its
/// line, a `;` or brace, or before the next `name =`.
fn value_end(chars: &[char], from: usize) -> usize {
    let (mut i, mut end) = (from, from);
    while let Some(&c) = chars.get(i) {
        match c {
            '\n' | ';' | '{' | '}' => break,
            '"' => {
                i += 1;
                while let Some(&c) = chars.get(i) {
                    if c == '"' || c == '\n' {
                        break;
                    }
                    if c == '\\' && matches!(chars.get(i + 1), Some('"' | '\\')) {
                        i += 1;
                    }
                    i += 1;
                }
                if chars.get(i) == Some(&'"') {
                    i += 1;
                }
                end = i;
            }
            c if is_word(c) => {
                let word_end = (i..chars.len())
                    .find(|&j| !is_word(chars[j]))
                    .unwrap_or(chars.len());
                let mut j = word_end;
                while chars.get(j).is_some_and(|c| *c == ' ' || *c == '\t') {
                    j += 1;
                }
                if chars.get(j) == Some(&'=') {
                    break; // the next attribute
                }
                i = word_end;
                end = i;
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                i += 1;
                end = i;
            }
        }
    }
    end
}

/// The spans `[start, end)` (in characters) of the secret values in
/// `chars`.
fn value_spans(chars: &[char]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while let Some((start, mut after)) = next_key(chars, i) {
        // A quoted name: `"ldap-dsa-password" = ...`.
        let quoted = start > 0 && chars[start - 1] == '"';
        if quoted && chars.get(after) == Some(&'"') {
            after += 1;
        }
        let name_start = if quoted { start - 1 } else { start };
        let before = chars[..name_start]
            .iter()
            .rev()
            .find(|c| !c.is_whitespace())
            .copied();
        let eq = skip_space(chars, after);
        let has_eq = chars.get(eq) == Some(&'=');
        if !has_eq && matches!(before, Some('=' | ',')) {
            i = after; // a flag value, not an attribute
            continue;
        }
        let from = skip_space(chars, if has_eq { eq + 1 } else { after });
        let end = value_end(chars, from);
        if end > from {
            spans.push((from, end));
        }
        i = end.max(after);
    }
    spans
}

/// The secrets of a file's `text`: each value whole, and each of its quoted
/// strings (as written and with escapes decoded) and bare words, as a
/// message may quote them. Longest first.
pub(super) fn secrets(text: &str) -> Vec<String> {
    if !mentions_key(text) {
        return Vec::new();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    for (s, e) in value_spans(&chars) {
        let value: String = chars[s..e].iter().collect();
        for part in parts(&value) {
            out.push(part);
        }
        out.push(value);
    }
    out.retain(|s| !s.trim().is_empty());
    out.sort_by(|a, b| b.chars().count().cmp(&a.chars().count()).then(a.cmp(b)));
    out.dedup();
    out
}

/// The quoted strings (raw and decoded) and bare words of a value.
fn parts(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let body = &rest[1..];
            let mut raw_end = body.len();
            let mut decoded = String::new();
            let mut it = body.char_indices();
            while let Some((k, ch)) = it.next() {
                match ch {
                    '"' => {
                        raw_end = k;
                        break;
                    }
                    '\\' if matches!(body[k + 1..].chars().next(), Some('"' | '\\')) => {
                        if let Some((_, esc)) = it.next() {
                            decoded.push(esc);
                        }
                    }
                    ch => decoded.push(ch),
                }
            }
            out.push(body[..raw_end].to_string());
            out.push(decoded);
            rest = body.get(raw_end + 1..).unwrap_or("");
        } else if is_word(c) {
            let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        } else {
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The spans of `secret` in `chars` that stand alone: not inside a longer
/// name (a short password does not mask part of a keyword or flag).
fn occurrences(chars: &[char], secret: &[char], spans: &mut Vec<(usize, usize)>) {
    let n = secret.len();
    if n == 0 || n > chars.len() {
        return;
    }
    let alnum = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || matches!(c, '-' | '_'));
    let starts_word = alnum(secret.first());
    let ends_word = alnum(secret.last());
    for i in 0..=chars.len() - n {
        if chars[i..i + n] != *secret {
            continue;
        }
        let glued_before = starts_word && i > 0 && alnum(chars.get(i - 1));
        let glued_after = ends_word && alnum(chars.get(i + n));
        if !glued_before && !glued_after {
            spans.push((i, i + n));
        }
    }
}

/// `chars` with `spans` masked, and where character index `at` went.
fn mask(chars: &[char], mut spans: Vec<(usize, usize)>, at: usize) -> (String, usize) {
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let (mut out, mut pos, mut new_at) = (String::new(), 0, None);
    for (s, e) in merged {
        if new_at.is_none() && at < e {
            let shown = out.chars().count();
            new_at = Some(if at < s {
                shown + (at - pos)
            } else {
                shown + (s - pos)
            });
        }
        out.extend(&chars[pos..s]);
        out.push_str(MASK);
        pos = e;
    }
    let shown = out.chars().count();
    let new_at = new_at.unwrap_or(shown + at.saturating_sub(pos));
    out.extend(&chars[pos..]);
    (out, new_at)
}

/// The line a diagnostic shows, masked.
pub(super) struct Shown {
    pub line: String,
    /// Where the diagnostic's column is in `line` (1-based characters).
    pub column: usize,
    /// The secrets its message may quote.
    pub secrets: Vec<String>,
}

/// `text` with its comments blanked: each character of a comment (from a
/// `#` first on its line or after whitespace, outside a quoted string, to
/// the end of its line) becomes a space, so that positions and lines stay.
fn blank_comments(text: &str) -> Vec<char> {
    let mut out: Vec<char> = text.chars().collect();
    let (mut i, mut quoted) = (0, false);
    while i < out.len() {
        match out[i] {
            '\n' => quoted = false,
            '"' => quoted = !quoted,
            '\\' if quoted => i += 1,
            '#' if !quoted && (i == 0 || out[i - 1].is_whitespace()) => {
                while out.get(i).is_some_and(|c| *c != '\n') {
                    out[i] = ' ';
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The secrets of a whole file (see [`secrets`]), comments blanked; the
/// last file's are kept, keyed by a hash of its text.
fn file_secrets(text: &str) -> Rc<Vec<String>> {
    thread_local! {
        static LAST: RefCell<Option<(u64, Rc<Vec<String>>)>> = const { RefCell::new(None) };
    }
    if !mentions_key(text) {
        return Rc::new(Vec::new());
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let key = h.finish();
    if let Some(hit) = LAST.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, s)| s.clone())
    }) {
        return hit;
    }
    let blanked: String = blank_comments(text).into_iter().collect();
    let found = Rc::new(secrets(&blanked));
    LAST.with(|l| *l.borrow_mut() = Some((key, found.clone())));
    found
}

/// Line `line` (1-based) of `text` with its secrets masked, and the
/// secrets of the file; `None` past the end of `text`.
pub(super) fn source_line(text: &str, line: usize, column: usize) -> Option<Shown> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let secrets = file_secrets(text).as_ref().clone();
    let (masked, column) = self::line(l, column, &secrets);
    Some(Shown {
        line: masked,
        column,
        secrets,
    })
}

/// A source line with its secrets masked (those written on it, and the
/// file's `secrets` wherever they stand), and where its 1-based `column`
/// is in the masked line (the caret of a diagnostic).
pub(super) fn line(text: &str, column: usize, secrets: &[String]) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    let mut spans = if mentions_key(text) {
        value_spans(&chars)
    } else {
        Vec::new()
    };
    for s in secrets {
        let s: Vec<char> = s.chars().collect();
        occurrences(&chars, &s, &mut spans);
    }
    let (out, at) = mask(&chars, spans, column.saturating_sub(1));
    (out, at + 1)
}

/// A message with the file's `secrets` masked.
pub(super) fn message(text: &str, secrets: &[String]) -> String {
    if secrets.is_empty() {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut spans = Vec::new();
    for s in secrets {
        let s: Vec<char> = s.chars().collect();
        occurrences(&chars, &s, &mut spans);
    }
    mask(&chars, spans, 0).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        line(text, 1, &secrets(text)).0
    }

    #[test]
    fn password_values_are_masked_however_they_are_written() {
        let rows = [
            (r#"ldap-dsa-password = "s3cret""#, "ldap-dsa-password = ***"),
            (r#"ldap-dsa-password = "s3cret"#, "ldap-dsa-password = ***"),
            (
                r#"LDAP-DSA-PASSWORD="s3cret" address = tcp"#,
                r#"LDAP-DSA-PASSWORD=*** address = tcp"#,
            ),
            ("dsa-password = s3cret two words;", "dsa-password = ***;"),
            (
                r#"ldap-dsa-password "s3cret" }"#,
                r#"ldap-dsa-password *** }"#,
            ),
            (r#""my-password" = "a\"b" }"#, r#""my-password" = *** }"#),
            (r#"x-password = <cn s3cret"#, "x-password = ***"),
            (
                r#"# ldap-dsa-password = "old""#,
                "# ldap-dsa-password = ***",
            ),
            (
                "trust-flags = allow-check-password, trust-conveyed-originator",
                "trust-flags = allow-check-password, trust-conveyed-originator",
            ),
            (
                "auth-levels = anonymous, clear-password, ssl-auth",
                "auth-levels = anonymous, clear-password, ssl-auth",
            ),
            (
                "dsa-password-required = true",
                "dsa-password-required = true",
            ),
            ("ldap-dsa-password = ", "ldap-dsa-password = "),
        ];
        for (text, want) in rows {
            assert_eq!(shown(text), want, "{text}");
        }
    }

    #[test]
    fn a_value_below_its_attribute_is_masked_too() {
        for text in [
            "set dsa D1 = { ldap-dsa-password =\n   \"s3cret\" address = tcp x port 1 };\n",
            "set dsa D1 = { ldap-dsa-password\n\n=\n\n   \"s3cret\" address = tcp x port 1 };\n",
        ] {
            let last = text.lines().count();
            let shown = source_line(text, last, 4).expect("line");
            assert_eq!(shown.line, "   *** address = tcp x port 1 };", "{text}");
            assert_eq!(shown.column, 4);
            assert!(
                shown.secrets.contains(&"s3cret".to_string()),
                "{:?}",
                shown.secrets
            );
        }
        assert!(source_line("one line", 2, 1).is_none());
    }

    #[test]
    fn the_caret_keeps_its_place_after_a_masked_value() {
        let text = r#"ldap-dsa-password = "a-long-secret" address = tcp "h" port x"#;
        let col = text.find(" x").unwrap_or(0) + 2;
        let (out, at) = line(text, col, &secrets(text));
        assert_eq!(out, r#"ldap-dsa-password = *** address = tcp "h" port x"#);
        assert_eq!(out.chars().nth(at - 1), Some('x'), "{out} {at}");
        // A caret inside the value points at the mask.
        let (out, at) = line(text, 25, &secrets(text));
        assert_eq!(&out[at - 1..at + 2], MASK);
    }

    #[test]
    fn messages_lose_the_secrets_around_their_line_but_keep_their_words() {
        let text = "set dsa D1 = { ldap-dsa-password \"pw\" };";
        let s = secrets(text);
        assert_eq!(
            message("expected '=' after 'ldap-dsa-password', found \"pw\"", &s),
            "expected '=' after 'ldap-dsa-password', found ***"
        );
        let s = secrets("dsa-password = word;");
        assert_eq!(
            message("a password word, passwords", &s),
            "a password ***, passwords"
        );
        assert_eq!(message("no secret here", &[]), "no secret here");
    }
}
