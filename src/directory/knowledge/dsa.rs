//! The `set dsa NAME = { attribute = value ... };` block.
//!
//! Each attribute the router uses is one row of [`ATTRIBUTES`]: the form of
//! its value (parsed in `values`) and where it goes in the [`DsaDef`].
//! Attributes CA Directory has and the router does not use are kept as
//! written, without effect; an attribute CA Directory does not have is an
//! error (DXserver refuses the block too), with the closest known name.
//! A block that parsed is then checked whole: it needs a prefix and an
//! address.

use super::diag::{Diagnostic, Location};
use super::file::{text_of, File, PResult};
use super::lexer::{Tok, Token};
use super::{values, Address, DsaDef, Secret, TlsMode};
use crate::proto::dn::Dn;
use std::collections::HashSet;

/// The form of an attribute's value, and where the parsed value goes.
enum Form {
    Dn(fn(&mut DsaDef, Dn)),
    Secret(fn(&mut DsaDef, Secret)),
    /// One name or quoted string.
    Name(fn(&mut DsaDef, String)),
    Number(fn(&mut DsaDef, u32)),
    Tls(fn(&mut DsaDef, TlsMode)),
    Addresses(fn(&mut DsaDef, Vec<Address>)),
    /// The flags known, what one is called in messages, and what an
    /// unknown one is.
    Flags(
        &'static [&'static str],
        &'static str,
        values::Unknown,
        fn(&mut DsaDef, Vec<String>),
    ),
}

/// The attributes the router uses.
const ATTRIBUTES: &[(&str, Form)] = &[
    ("prefix", Form::Dn(|d, v| d.prefix = v)),
    ("native-prefix", Form::Dn(|d, v| d.native_prefix = Some(v))),
    ("dsa-name", Form::Dn(|d, v| d.dsa_name = Some(v))),
    ("ldap-dsa-name", Form::Dn(|d, v| d.ldap_dsa_name = Some(v))),
    (
        "dsa-password",
        Form::Secret(|d, v| d.dsa_password = Some(v)),
    ),
    (
        "ldap-dsa-password",
        Form::Secret(|d, v| d.ldap_dsa_password = Some(v)),
    ),
    ("address", Form::Addresses(|d, v| d.addresses = v)),
    (
        "dsa-flags",
        Form::Flags(
            values::DSA_FLAGS,
            "dsa-flag",
            values::Unknown::Error,
            |d, v| d.dsa_flags = v,
        ),
    ),
    (
        "trust-flags",
        Form::Flags(
            values::TRUST_FLAGS,
            "trust-flag",
            values::Unknown::Error,
            |d, v| d.trust_flags = v,
        ),
    ),
    (
        "link-flags",
        Form::Flags(
            values::LINK_FLAGS,
            "link-flag",
            values::Unknown::Warn,
            |d, v| d.link_flags = v,
        ),
    ),
    (
        "load-share-group",
        Form::Name(|d, v| d.load_share_group = Some(v)),
    ),
    // Router-only attributes.
    (
        "dsa-router-concurrency-limit",
        Form::Number(|d, v| d.concurrency_limit = Some(v)),
    ),
    ("dsa-router-tls", Form::Tls(|d, v| d.tls = Some(v))),
];

/// CA attributes accepted and kept without effect on routing: the rest of
/// CA's `set dsa` reference (OSI addresses, consoles, SNMP, DSP idle time,
/// authentication levels), and a few seen in CA deployments.
pub(super) const PASSIVE_ATTRS: &[&str] = &[
    "tsap",
    "ssap",
    "osi-psap",
    "disp-psap",
    "cmip-psap",
    "snmp-port",
    "console-port",
    "remote-console-port",
    "remote-console-ssl",
    "console-password",
    "auth-levels",
    "dsp-idle-time",
    "ssl-auth-port",
    "cluster-name",
    "dsa-password-required",
];

/// Passive attributes whose value is a secret: kept as `***`.
const SECRET_ATTRS: &[&str] = &["console-password"];

/// Every attribute name a `set dsa` block knows.
pub(super) fn known_attributes() -> impl Iterator<Item = &'static str> {
    ATTRIBUTES
        .iter()
        .map(|(a, _)| *a)
        .chain(PASSIVE_ATTRS.iter().copied())
}

/// `set dsa-router-dsa NAME = { tls = ... concurrency-limit = N };`: the
/// router's own settings for a DSA, in a file only the router reads, so
/// that the DSA's CA knowledge stays as a DXserver reads it.
pub(super) struct RouterDsa {
    pub name: String,
    pub at: Location,
    pub line_text: std::sync::Arc<String>,
    pub tls: Option<TlsMode>,
    pub concurrency_limit: Option<u32>,
}

/// Parse a block after `set dsa-router-dsa`, to its `;`.
pub(super) fn router_block(f: &mut File) -> PResult<RouterDsa> {
    let name_tok = f.name("a DSA name")?;
    let name = text_of(&name_tok).to_string();
    f.expect(Tok::Eq, "'=' after the DSA name")?;
    f.expect(Tok::LBrace, "'{'")?;
    let mut r = RouterDsa {
        name: name.clone(),
        at: f.loc(name_tok.line, name_tok.column),
        line_text: f.text.clone(),
        tls: None,
        concurrency_limit: None,
    };
    while let Some((attr_tok, value)) = attribute(f, &name)? {
        let attr = text_of(&attr_tok).to_ascii_lowercase();
        match attr.trim_start_matches("dsa-router-") {
            "tls" => r.tls = Some(values::tls_mode(f, value, &attr)?),
            "concurrency-limit" => r.concurrency_limit = Some(values::number(f, value, &attr)?),
            other => {
                let hint = super::diag::closest(other, ["tls", "concurrency-limit"])
                    .map(|c| format!(" (did you mean '{c}'?)"))
                    .unwrap_or_default();
                return Err(f.err_at(
                    attr_tok.line,
                    attr_tok.column,
                    format!("unknown setting '{attr}' in set dsa-router-dsa \"{name}\": it takes tls and concurrency-limit{hint}"),
                ));
            }
        }
    }
    f.expect(Tok::Semi, "';' after '}'")?;
    Ok(r)
}

/// A block that parsed to its `;`, not yet checked whole.
pub(super) struct Block {
    def: DsaDef,
    /// The block's name, where errors about the whole block point.
    name: Token,
    has_prefix: bool,
    /// Unknown attributes and flags: errors, the block is not loaded.
    errors: Vec<Diagnostic>,
}

/// Parse a block after `set dsa`, to its `;`.
pub(super) fn block(f: &mut File, warnings: &mut Vec<Diagnostic>) -> PResult<Block> {
    let name_tok = f.name("a DSA name")?;
    let name = text_of(&name_tok).to_string();
    f.expect(Tok::Eq, "'=' after the DSA name")?;
    f.expect(Tok::LBrace, "'{'")?;
    let mut d = empty(name.clone(), f.loc(name_tok.line, name_tok.column));
    let mut seen = HashSet::new();
    // This block's diagnostics: warnings go on, errors stay with the block.
    let mut found = Vec::new();
    while let Some((attr_tok, value)) = attribute(f, &name)? {
        let attr = text_of(&attr_tok).to_ascii_lowercase();
        if !seen.insert(attr.clone()) {
            return Err(f.err_at(
                attr_tok.line,
                attr_tok.column,
                format!("'{attr}' given twice in set dsa \"{name}\""),
            ));
        }
        if attr == "prefix" {
            let (dn, hash) = split_hash(f, value)?;
            d.prefix = values::dn(f, dn)?;
            d.hash = hash;
            continue;
        }
        match ATTRIBUTES.iter().find(|(a, _)| *a == attr) {
            Some((_, form)) => apply(&mut d, form, f, &attr, value, &mut found)?,
            None => {
                // Any other password attribute, or a misspelt one: its value
                // is a secret too, and the error does not show its line.
                let secretish = attr.ends_with("-password")
                    || SECRET_ATTRS
                        .iter()
                        .chain(&["dsa-password", "ldap-dsa-password"])
                        .any(|s| super::diag::closest(&attr, [*s]).is_some());
                if !PASSIVE_ATTRS.contains(&attr.as_str()) {
                    let mut e = unknown_attribute(f, &attr_tok, &attr, &name);
                    if secretish {
                        e.source_line = None;
                    }
                    found.push(e);
                }
                let kept = if secretish {
                    "***".to_string()
                } else {
                    values::raw(value)
                };
                d.other.push((attr, kept));
            }
        }
    }
    f.expect(Tok::Semi, "';' after '}'")?;
    let (errors, warned): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|d| d.severity == super::diag::Severity::Error);
    warnings.extend(warned);
    Ok(Block {
        def: d,
        name: name_tok,
        has_prefix: seen.contains("prefix"),
        errors,
    })
}

/// An attribute CA Directory's `set dsa` does not have: an error, with
/// the closest attribute it has.
fn unknown_attribute(f: &File, at: &Token, attr: &str, name: &str) -> Diagnostic {
    let hint = match super::diag::closest(attr, known_attributes()) {
        Some(c) => format!(" (did you mean '{c}'?)"),
        None => " (CA Directory does not know it: see the set dsa attributes in docs/knowledge.md)"
            .to_string(),
    };
    f.err_at(
        at.line,
        at.column,
        format!("unknown attribute '{attr}' in set dsa \"{name}\"{hint}"),
    )
}

/// A prefix's trailing horizontal-partition part, `<uid "[hash1(3)=0]">`,
/// apart from the DN before it.
fn split_hash<'t>(
    f: &File,
    value: &'t [Token],
) -> PResult<(
    &'t [Token],
    Option<crate::directory::knowledge::hash::HashPart>,
)> {
    let Some((last, dn)) = value.split_last() else {
        return Ok((value, None));
    };
    let Tok::Angle(a) = &last.tok else {
        return Ok((value, None));
    };
    let inner = a.trim().trim_start_matches('<').trim_end_matches('>');
    match crate::directory::knowledge::hash::HashPart::parse(inner) {
        None => Ok((value, None)),
        Some(Ok(h)) => Ok((dn, Some(h))),
        Some(Err(e)) => Err(f.err_at(last.line, last.column, e.to_string())),
    }
}

/// The next `attribute = value` of the block (`None` after its `}`). A
/// value runs to the next `word =`, the closing brace or a `;`.
fn attribute<'t>(f: &mut File<'t>, name: &str) -> PResult<Option<(Token, &'t [Token])>> {
    match f.peek() {
        None => return Err(f.err_eof(format!("missing '}}' closing set dsa \"{name}\""))),
        Some(t) if t.tok == Tok::RBrace => {
            f.pos += 1;
            return Ok(None);
        }
        Some(_) => {}
    }
    let attr_tok = f.name("an attribute name or '}'")?;
    let attr = text_of(&attr_tok).to_ascii_lowercase();
    f.expect(Tok::Eq, &format!("'=' after '{attr}'"))?;
    let start = f.pos;
    while let Some(t) = f.peek() {
        let next_is_attr =
            matches!(t.tok, Tok::Word(_)) && f.peek2().is_some_and(|n| n.tok == Tok::Eq);
        if t.tok == Tok::RBrace || next_is_attr || t.tok == Tok::Semi {
            break;
        }
        f.pos += 1;
    }
    let toks = f.toks;
    let value = &toks[start..f.pos];
    if value.is_empty() {
        return Err(f.err_here(format!("missing value for '{attr}'")));
    }
    Ok(Some((attr_tok, value)))
}

/// Parse `value` in the attribute's form into `d`.
fn apply(
    d: &mut DsaDef,
    form: &Form,
    f: &File,
    attr: &str,
    value: &[Token],
    warnings: &mut Vec<Diagnostic>,
) -> PResult<()> {
    match *form {
        Form::Dn(set) => set(d, values::dn(f, value)?),
        Form::Secret(set) => set(d, Secret::new(values::single(f, value, attr)?)),
        Form::Name(set) => set(d, values::single(f, value, attr)?),
        Form::Number(set) => set(d, values::number(f, value, attr)?),
        Form::Tls(set) => set(d, values::tls_mode(f, value, attr)?),
        Form::Addresses(set) => set(d, values::addresses(f, value, warnings)?),
        Form::Flags(known, kind, unknown, set) => {
            set(d, values::flags(f, value, known, kind, unknown, warnings)?)
        }
    }
    Ok(())
}

fn empty(name: String, defined_at: Location) -> DsaDef {
    DsaDef {
        name: name.into(),
        prefix: Dn::root(),
        hash: None,
        native_prefix: None,
        dsa_name: None,
        dsa_password: None,
        ldap_dsa_name: None,
        ldap_dsa_password: None,
        addresses: Vec::new(),
        dsa_flags: Vec::new(),
        trust_flags: Vec::new(),
        link_flags: Vec::new(),
        load_share_group: None,
        concurrency_limit: None,
        tls: None,
        other: Vec::new(),
        defined_at,
    }
}

impl Block {
    /// The definition, when the block is complete: it has a prefix and an
    /// address, and no attribute or flag CA Directory does not know (else
    /// every error found in it).
    pub(super) fn check(
        self,
        f: &File,
        warnings: &mut Vec<Diagnostic>,
    ) -> Result<DsaDef, Vec<Diagnostic>> {
        let Block {
            def: d,
            name: at,
            has_prefix,
            errors,
        } = self;
        if !errors.is_empty() {
            return Err(errors);
        }
        let name = &d.name;
        // A required attribute missing, perhaps misspelt among the unknown.
        let missing = |attr: &str| {
            let typo = d
                .other
                .iter()
                .map(|(a, _)| a.as_str())
                .find(|a| super::diag::closest(a, [attr]).is_some());
            let hint = match typo {
                Some(t) => format!(" (is '{t}' a typo for '{attr}'?)"),
                None => String::new(),
            };
            f.err_at(
                at.line,
                at.column,
                format!("set dsa \"{name}\" has no {attr}{hint}"),
            )
        };
        if !has_prefix {
            return Err(vec![missing("prefix")]);
        }
        if d.addresses.is_empty() {
            return Err(vec![missing("address")]);
        }
        if d.load_share_group.is_some() && !d.load_share() {
            warnings.push(f.warn_at(
                &at,
                format!("DSA \"{name}\" names a load-share-group but has no 'load-share' dsa-flag: it is a group of its own"),
            ));
        }
        Ok(d)
    }
}
