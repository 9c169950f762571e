//! A small LDIF (RFC 2849) content-record parser.
//!
//! Supported: `version: 1`, comments (`#` lines, also folded ones), line
//! folding (a line starting with one space continues the previous line),
//! `attr: value`, `attr:: base64`, blank-line separated records and
//! `changetype: add`. Not supported (reported as errors): URL values
//! (`attr:< file://...`), controls and change records other than add.

/// One parsed record: the DN and its `(attribute, value)` pairs in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The 1-based line number where the record starts.
    pub line: usize,
    pub dn: String,
    pub attrs: Vec<(String, Vec<u8>)>,
}

/// Parses LDIF text into records.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    // Unfold lines first: a comment may itself be folded.
    let mut logical: Vec<(usize, String)> = Vec::new();
    let mut last_blank = true;
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.trim().is_empty() {
            logical.push((lineno, String::new()));
            last_blank = true;
        } else if let Some(rest) = raw.strip_prefix(' ') {
            match logical.last_mut() {
                Some((_, prev)) if !last_blank => prev.push_str(rest),
                _ => {
                    return Err(format!(
                        "line {lineno}: continuation line without a line to continue"
                    ))
                }
            }
        } else {
            logical.push((lineno, raw.to_string()));
            last_blank = false;
        }
    }

    let mut records = Vec::new();
    let mut current: Vec<(usize, String)> = Vec::new();
    let mut first = true;
    for (lineno, line) in logical
        .into_iter()
        .chain(std::iter::once((0, String::new())))
    {
        if line.starts_with('#') {
            continue;
        }
        if !line.is_empty() {
            current.push((lineno, line));
            continue;
        }
        if current.is_empty() {
            continue;
        }
        let lines = std::mem::take(&mut current);
        let lines = if first && lines[0].1.to_ascii_lowercase().starts_with("version:") {
            let (n, v) = &lines[0];
            let (_, value) = parse_line(*n, v)?;
            if value != b"1" {
                return Err(format!("line {n}: unsupported LDIF version"));
            }
            &lines[1..]
        } else {
            &lines[..]
        };
        first = false;
        if !lines.is_empty() {
            records.push(parse_record(lines)?);
        }
    }
    Ok(records)
}

fn parse_record(lines: &[(usize, String)]) -> Result<Record, String> {
    let (start, first) = &lines[0];
    let (name, value) = parse_line(*start, first)?;
    if !name.eq_ignore_ascii_case("dn") {
        return Err(format!(
            "line {start}: record must start with 'dn:', got {name:?}"
        ));
    }
    let dn = String::from_utf8(value).map_err(|_| format!("line {start}: DN is not UTF-8"))?;
    let mut attrs = Vec::new();
    for (n, line) in &lines[1..] {
        let (name, value) = parse_line(*n, line)?;
        if name.eq_ignore_ascii_case("changetype") {
            if value.eq_ignore_ascii_case(b"add") {
                continue;
            }
            return Err(format!(
                "line {n}: only content records and 'changetype: add' are supported"
            ));
        }
        if name.eq_ignore_ascii_case("control") {
            return Err(format!("line {n}: LDIF controls are not supported"));
        }
        attrs.push((name, value));
    }
    Ok(Record {
        line: *start,
        dn,
        attrs,
    })
}

/// Splits `name: value`, `name:: base64` or `name:< url` into name and value.
fn parse_line(lineno: usize, line: &str) -> Result<(String, Vec<u8>), String> {
    let (name, rest) = line
        .split_once(':')
        .ok_or_else(|| format!("line {lineno}: expected 'attribute: value'"))?;
    let name = name.trim();
    if name.is_empty() || name.contains(' ') {
        return Err(format!(
            "line {lineno}: invalid attribute description {name:?}"
        ));
    }
    let value = if let Some(b64) = rest.strip_prefix(':') {
        base64_decode(b64.trim()).map_err(|e| format!("line {lineno}: {e}"))?
    } else if rest.starts_with('<') {
        return Err(format!("line {lineno}: URL values are not supported"));
    } else {
        rest.trim_start_matches(' ').as_bytes().to_vec()
    };
    Ok((name.to_string(), value))
}

/// Decodes standard base64 (with or without padding; whitespace ignored).
pub fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    fn sextet(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut padding = false;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            padding = true;
            continue;
        }
        if padding {
            return Err("invalid base64: data after padding".to_string());
        }
        let v = sextet(c).ok_or_else(|| format!("invalid base64 character {:?}", c as char))?;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    if bits >= 6 {
        return Err("invalid base64: truncated input".to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_values() {
        assert_eq!(base64_decode("aGVsbG8=").expect("ok"), b"hello");
        assert_eq!(base64_decode("aGVsbG8").expect("ok"), b"hello");
        assert_eq!(base64_decode("w6lj").expect("ok"), "éc".as_bytes());
        assert_eq!(base64_decode("").expect("ok"), b"");
        assert!(base64_decode("a$==").is_err());
        assert!(base64_decode("a").is_err());
    }

    #[test]
    fn parses_records_folding_comments_base64() {
        let text = "version: 1\n# a comment\n#  folded\n  comment\ndn: o=Acme\nobjectClass: organization\no: Acme\n\n\
                    \n# next\ndn:: Y249w6lsb2Rp\n  ZSxvPUFjbWU=\ncn: long\n  value\ndescription:: aGVsbG8=\nchangetype: add\n";
        let recs = parse(text).expect("parse");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].dn, "o=Acme");
        assert_eq!(recs[0].line, 5);
        assert_eq!(recs[0].attrs[1], ("o".to_string(), b"Acme".to_vec()));
        assert_eq!(recs[1].dn, "cn=élodie,o=Acme");
        assert_eq!(recs[1].attrs[0], ("cn".to_string(), b"long value".to_vec()));
        assert_eq!(recs[1].attrs[1].1, b"hello");
        assert_eq!(recs[1].attrs.len(), 2);
    }

    #[test]
    fn reports_errors_with_line_numbers() {
        for (text, needle) in [
            ("cn: x\n", "line 1: record must start"),
            ("dn: o=x\nbad line\n", "line 2:"),
            ("dn: o=x\ncn:< file:///etc/passwd\n", "URL"),
            ("dn: o=x\nchangetype: delete\n", "changetype"),
            (" folded\n", "continuation"),
            ("dn: o=x\njpeg:: !!!\n", "base64"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
