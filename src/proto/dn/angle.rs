//! The knowledge notation, root first, one RDN per angle-bracket pair:
//! `<c AU><o DEMOCORP><ou "Human Resources">`. Inside the brackets an AVA
//! is `type value` or `type=value`, `+` joins the AVAs of one RDN, and a
//! value with spaces or specials is quoted (`\` escapes the next
//! character). `<>`, `""` and the empty string are the null DN.

use super::{check_attr, is_attr_char, Ava, Dn, DnError, Rdn};

fn err(offset: usize, m: &str) -> DnError {
    DnError {
        offset,
        message: m.to_string(),
    }
}

fn skip_spaces(chars: &[char], pos: &mut usize) {
    while chars.get(*pos).is_some_and(|c| c.is_whitespace()) {
        *pos += 1;
    }
}

/// Parse a DN in the knowledge notation.
pub(super) fn parse(s: &str) -> Result<Dn, DnError> {
    let chars: Vec<char> = s.chars().collect();
    let mut pos = 0;
    let mut root_first: Vec<Rdn> = Vec::new();
    skip_spaces(&chars, &mut pos);
    if pos == chars.len() || (chars.len() - pos == 2 && chars[pos] == '"' && chars[pos + 1] == '"')
    {
        return Ok(Dn::root());
    }
    while pos < chars.len() {
        if chars[pos] != '<' {
            return Err(err(pos, "expected '<'"));
        }
        pos += 1;
        skip_spaces(&chars, &mut pos);
        if chars.get(pos) == Some(&'>') {
            pos += 1;
            skip_spaces(&chars, &mut pos);
            if root_first.is_empty() && pos == chars.len() {
                return Ok(Dn::root());
            }
            return Err(err(pos.saturating_sub(1), "empty RDN '<>' inside a DN"));
        }
        root_first.push(rdn(&chars, &mut pos)?);
        skip_spaces(&chars, &mut pos);
    }
    root_first.reverse();
    Ok(Dn { rdns: root_first })
}

/// The AVAs of one RDN, from just inside its `<` to just after its `>`.
fn rdn(chars: &[char], pos: &mut usize) -> Result<Rdn, DnError> {
    let mut avas = Vec::new();
    loop {
        skip_spaces(chars, pos);
        let start = *pos;
        while chars.get(*pos).is_some_and(|&c| is_attr_char(c)) {
            *pos += 1;
        }
        let attr: String = chars[start..*pos].iter().collect();
        if attr.is_empty() {
            return Err(err(*pos, "expected an attribute type"));
        }
        check_attr(&attr, start)?;
        skip_spaces(chars, pos);
        if chars.get(*pos) == Some(&'=') {
            *pos += 1;
            skip_spaces(chars, pos);
        }
        let value = value(chars, pos)?;
        if value.is_empty() {
            return Err(err(*pos, "empty attribute value"));
        }
        avas.push(Ava::new(&attr, &value));
        skip_spaces(chars, pos);
        match chars.get(*pos) {
            Some('+') => *pos += 1,
            Some('>') => {
                *pos += 1;
                return Ok(Rdn::new(avas));
            }
            None => return Err(err(*pos, "missing '>'")),
            Some(_) => return Err(err(*pos, "expected '>' or '+'")),
        }
    }
}

/// A value: quoted, or bare up to the next `>`, `+`, `<` or `"` and
/// trimmed.
fn value(chars: &[char], pos: &mut usize) -> Result<String, DnError> {
    if chars.get(*pos) != Some(&'"') {
        let start = *pos;
        while chars
            .get(*pos)
            .is_some_and(|&c| c != '>' && c != '+' && c != '<' && c != '"')
        {
            *pos += 1;
        }
        let v: String = chars[start..*pos].iter().collect();
        return Ok(v.trim().to_string());
    }
    *pos += 1;
    let mut v = String::new();
    loop {
        match chars.get(*pos) {
            None => return Err(err(*pos, "unterminated quoted value")),
            Some('"') => {
                *pos += 1;
                return Ok(v);
            }
            Some('\\') if *pos + 1 < chars.len() => {
                v.push(chars[*pos + 1]);
                *pos += 2;
            }
            Some(&c) => {
                v.push(c);
                *pos += 1;
            }
        }
    }
}
