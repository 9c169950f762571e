//! The values of `set dsa` attributes, as knowledge writes them: names and
//! quoted strings, numbers, DNs in either notation, address lists and flag
//! lists. Each parser takes the value's tokens and points its errors at
//! the token at fault.

use super::diag::Diagnostic;
use super::file::{text_of, File, PResult};
use super::lexer::{Tok, Token};
use super::{Address, Family, TlsMode};
use crate::proto::dn::Dn;

pub(super) const DSA_FLAGS: &[&str] = &[
    "load-share",
    "multi-write",
    "multi-write-group-hub",
    "no-service-while-recovering",
    "read-only",
];
pub(super) const TRUST_FLAGS: &[&str] = &[
    "trust-conveyed-originator",
    "allow-check-password",
    "trust-dsa-triggered-operations",
    "allow-downgrading",
    "allow-upgrading",
];
pub(super) const LINK_FLAGS: &[&str] = &[
    "dsp-ldap",
    "ssl-encryption",
    "ssl-encryption-remote",
    "dsp-idle",
];

/// One name or quoted string.
pub(super) fn single(f: &File, value: &[Token], attr: &str) -> PResult<String> {
    match value {
        [t @ Token {
            tok: Tok::Word(_) | Tok::Str(_),
            ..
        }] => Ok(text_of(t).to_string()),
        [t, ..] => Err(f.err_at(
            t.line,
            t.column,
            format!("'{attr}' takes one name or quoted string"),
        )),
        [] => Err(f.err_here(format!("missing value for '{attr}'"))),
    }
}

/// A whole number (`dsa-router-concurrency-limit`).
pub(super) fn number(f: &File, value: &[Token], attr: &str) -> PResult<u32> {
    let v = single(f, value, attr)?;
    v.parse().map_err(|_| {
        f.err_at(
            value[0].line,
            value[0].column,
            format!("'{attr}' takes a whole number, found '{v}'"),
        )
    })
}

/// `ldaps`, `starttls` or `none` (`dsa-router-tls`).
pub(super) fn tls_mode(f: &File, value: &[Token], attr: &str) -> PResult<TlsMode> {
    let v = single(f, value, attr)?;
    TlsMode::parse(&v).ok_or_else(|| {
        f.err_at(
            value[0].line,
            value[0].column,
            format!("'{attr}' is ldaps, starttls or none, found '{v}'"),
        )
    })
}

/// A value kept as written (an attribute the router does not use).
pub(super) fn raw(value: &[Token]) -> String {
    let words: Vec<&str> = value
        .iter()
        .map(|t| match &t.tok {
            Tok::Comma => ",",
            _ => text_of(t),
        })
        .collect();
    words.join(" ")
}

/// `<c AU><o DEMOCORP>`, `"o=DEMOCORP,c=AU"`, `""` or `<>`.
pub(super) fn dn(f: &File, value: &[Token]) -> PResult<Dn> {
    let Some(first) = value.first() else {
        return Err(f.err_here("missing DN".into()));
    };
    match &first.tok {
        Tok::Str(s) if value.len() == 1 => Dn::parse_any(s).map_err(|e| {
            // Point into the string, past the opening quote.
            f.err_at(
                first.line,
                first.column + 1 + e.offset,
                format!("invalid DN: {}", e.message),
            )
        }),
        Tok::Angle(_) => {
            let mut raw = String::new();
            let mut starts = Vec::new();
            for t in value {
                let Tok::Angle(a) = &t.tok else {
                    return Err(f.err_at(
                        t.line,
                        t.column,
                        format!("expected '<' continuing the DN, found {}", t.tok.describe()),
                    ));
                };
                starts.push((raw.chars().count(), t));
                raw.push_str(a);
            }
            Dn::parse_knowledge(&raw).map_err(|e| {
                let (base, t) = starts
                    .iter()
                    .rev()
                    .find(|(s, _)| *s <= e.offset)
                    .copied()
                    .unwrap_or((0, first));
                f.err_at(
                    t.line,
                    t.column + (e.offset - base),
                    format!("invalid DN: {}", e.message),
                )
            })
        }
        other => Err(f.err_at(
            first.line,
            first.column,
            format!(
                "expected a DN (<type value>... or a quoted string), found {}",
                other.describe()
            ),
        )),
    }
}

/// `tcp "host" port N [, ipv4 "host" port N ...]`
pub(super) fn addresses(
    f: &File,
    value: &[Token],
    warnings: &mut Vec<Diagnostic>,
) -> PResult<Vec<Address>> {
    value
        .split(|t| t.tok == Tok::Comma)
        .map(|part| address(f, part, value, warnings))
        .collect()
}

/// One `family host port N` of the address list `list`.
fn address(
    f: &File,
    part: &[Token],
    list: &[Token],
    warnings: &mut Vec<Diagnostic>,
) -> PResult<Address> {
    let Some(first) = part.first() else {
        let at = list.last().map(|t| (t.line, t.column)).unwrap_or((1, 1));
        return Err(f.err_at(at.0, at.1, "empty address in list".into()));
    };
    let family = match text_of(first).to_ascii_lowercase().as_str() {
        "tcp" => Family::Tcp,
        "ipv4" => Family::Ipv4,
        "ipv6" => Family::Ipv6,
        _ => {
            return Err(f.err_at(
                first.line,
                first.column,
                format!(
                    "expected 'tcp', 'ipv4' or 'ipv6', found {}",
                    first.tok.describe()
                ),
            ))
        }
    };
    let host = match part.get(1) {
        Some(
            t @ Token {
                tok: Tok::Word(_) | Tok::Str(_),
                ..
            },
        ) => {
            let written = text_of(t);
            let host = written.trim();
            if host.is_empty() {
                return Err(f.err_at(t.line, t.column, "empty host name".into()));
            }
            if host.len() != written.len() {
                // As printed in some CA knowledge-base articles.
                warnings.push(f.warn_at(
                    t,
                    format!("host \"{written}\" has spaces around it; using \"{host}\""),
                ));
            }
            host.to_string()
        }
        Some(t) => {
            return Err(f.err_at(
                t.line,
                t.column,
                format!("expected a host name, found {}", t.tok.describe()),
            ))
        }
        None => {
            return Err(f.err_at(
                first.line,
                first.column,
                "address needs a host and 'port N'".into(),
            ))
        }
    };
    match part.get(2) {
        Some(t) if text_of(t).eq_ignore_ascii_case("port") => {}
        Some(t) => {
            return Err(f.err_at(
                t.line,
                t.column,
                format!("expected 'port', found {}", t.tok.describe()),
            ))
        }
        None => {
            return Err(f.err_at(
                first.line,
                first.column,
                "address needs 'port N' after the host".into(),
            ))
        }
    }
    let port = match part.get(3) {
        Some(t) => match text_of(t).parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(f.err_at(
                    t.line,
                    t.column,
                    format!("expected a port number 1-65535, found {}", t.tok.describe()),
                ))
            }
        },
        None => {
            return Err(f.err_at(
                part[2].line,
                part[2].column,
                "missing port number after 'port'".into(),
            ))
        }
    };
    if let Some(t) = part.get(4) {
        return Err(f.err_at(
            t.line,
            t.column,
            format!("unexpected {} after the port number", t.tok.describe()),
        ));
    }
    Ok(Address { family, host, port })
}

/// How a list of flags treats a flag it does not know.
#[derive(Clone, Copy)]
pub(super) enum Unknown {
    /// The list is CA Directory's whole list: an unknown flag is an error
    /// (DXserver refuses it too), with the closest known flag.
    Error,
    /// CA Directory has more flags of this kind than the router knows: an
    /// unknown flag is kept with a warning, unless it is a near miss of a
    /// known one (a typo: an error).
    Warn,
}

/// `flag, flag, ...`: kept lowercase; a flag not in `known` is an error
/// or a warning, as `unknown` says. Errors and warnings go to `found`.
pub(super) fn flags(
    f: &File,
    value: &[Token],
    known: &[&str],
    kind: &str,
    unknown: Unknown,
    found: &mut Vec<Diagnostic>,
) -> PResult<Vec<String>> {
    let mut out = Vec::new();
    for (i, t) in value.iter().enumerate() {
        let want_word = i % 2 == 0;
        match (&t.tok, want_word) {
            (Tok::Word(w), true) => {
                if !known.iter().any(|k| k.eq_ignore_ascii_case(w)) {
                    found.push(unknown_flag(f, t, w, known, kind, unknown));
                }
                out.push(w.to_ascii_lowercase());
            }
            (Tok::Comma, false) => {}
            (other, true) => {
                return Err(f.err_at(
                    t.line,
                    t.column,
                    format!("expected a {kind}, found {}", other.describe()),
                ))
            }
            (other, false) => {
                return Err(f.err_at(
                    t.line,
                    t.column,
                    format!("expected ',' between flags, found {}", other.describe()),
                ))
            }
        }
    }
    if value.len().is_multiple_of(2) {
        if let Some(t) = value.last() {
            return Err(f.err_at(t.line, t.column, format!("expected a {kind} after ','")));
        }
    }
    Ok(out)
}

/// The diagnostic for the flag `w` (at `t`) that `known` does not have.
fn unknown_flag(
    f: &File,
    t: &Token,
    w: &str,
    known: &[&str],
    kind: &str,
    unknown: Unknown,
) -> Diagnostic {
    let near = super::diag::closest(w, known.iter().copied());
    match (unknown, near) {
        (_, Some(c)) => f.err_at(
            t.line,
            t.column,
            format!("unknown {kind} '{w}' (did you mean '{c}'?)"),
        ),
        (Unknown::Error, None) => f.err_at(
            t.line,
            t.column,
            format!(
                "unknown {kind} '{w}': CA Directory knows {}",
                known.join(", ")
            ),
        ),
        (Unknown::Warn, None) => f.warn_at(t, format!("unknown {kind} '{w}', kept but not used")),
    }
}
