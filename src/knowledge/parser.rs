//! The statement grammar: `source`, `set dsa`, `set precedence`,
//! `set write-precedence`, other `set` commands; then whole-load validation.

use super::diag::{Diagnostic, LoadError, Location};
use super::lexer::{lex, Tok, Token};
use super::{Address, DsaDef, Family, Secret, Snapshot, Source};
use crate::dn::Dn;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const KNOWN_DSA_FLAGS: &[&str] = &[
    "load-share",
    "multi-write",
    "multi-write-group-hub",
    "no-service-while-recovering",
    "read-only",
];
const KNOWN_TRUST_FLAGS: &[&str] = &[
    "trust-conveyed-originator",
    "allow-check-password",
    "trust-dsa-triggered-operations",
    "allow-downgrading",
    "allow-upgrading",
];
const KNOWN_LINK_FLAGS: &[&str] = &[
    "dsp-ldap",
    "ssl-encryption",
    "ssl-encryption-remote",
    "dsp-idle",
];
/// CA attributes accepted and kept without effect on routing.
const PASSIVE_ATTRS: &[&str] = &[
    "disp-psap",
    "snmp-port",
    "console-port",
    "auth-levels",
    "dsp-idle-time",
    "ssl-auth-port",
    "cluster-name",
    "dsa-password-required",
];
/// Nesting bound for `source`, far beyond real deployments; stops runaway
/// generated knowledge.
const MAX_SOURCE_DEPTH: usize = 64;

/// A name with where it was written.
struct Named {
    name: String,
    at: Location,
    line_text: Arc<String>,
}

struct Loader<'a> {
    source: &'a dyn Source,
    files: Vec<PathBuf>,
    stack: Vec<PathBuf>,
    dsas: Vec<(DsaDef, Arc<String>)>,
    precedence: Option<Vec<Named>>,
    write_precedence: Option<Vec<Named>>,
    settings: super::RouterSettings,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

pub(super) fn load(root: &Path, source: &dyn Source) -> Result<Snapshot, LoadError> {
    let mut l = Loader {
        source,
        files: Vec::new(),
        stack: Vec::new(),
        dsas: Vec::new(),
        precedence: None,
        write_precedence: None,
        settings: super::RouterSettings::default(),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    l.file(root, None);
    l.validate();
    if !l.errors.is_empty() {
        return Err(LoadError { errors: l.errors });
    }
    let names = |v: Option<Vec<Named>>| v.unwrap_or_default().into_iter().map(|n| n.name).collect();
    Ok(Snapshot {
        root: root.to_path_buf(),
        files: l.files,
        dsas: l.dsas.into_iter().map(|(d, _)| d).collect(),
        precedence: names(l.precedence),
        write_precedence: names(l.write_precedence),
        warnings: l.warnings,
        settings: l.settings,
    })
}

/// Cursor over one file's tokens.
struct File<'t> {
    path: Arc<PathBuf>,
    text: Arc<String>,
    toks: &'t [Token],
    pos: usize,
}

type PResult<T> = Result<T, Diagnostic>;

impl File<'_> {
    fn loc(&self, line: usize, column: usize) -> Location {
        Location {
            file: self.path.clone(),
            line,
            column,
        }
    }

    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn peek2(&self) -> Option<&Token> {
        self.toks.get(self.pos + 1)
    }

    fn next(&mut self) -> Option<&Token> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }

    /// An error at the current token, or at the end of the file.
    fn err_here(&self, message: String) -> Diagnostic {
        match self.peek() {
            Some(t) => self.err_at(t.line, t.column, message),
            None => self.err_eof(message),
        }
    }

    fn err_at(&self, line: usize, column: usize, message: String) -> Diagnostic {
        Diagnostic::error(message, Some(self.loc(line, column)), Some(&self.text))
    }

    fn err_eof(&self, message: String) -> Diagnostic {
        let line = self.text.lines().count().max(1);
        let column = self
            .text
            .lines()
            .last()
            .map(|l| l.chars().count() + 1)
            .unwrap_or(1);
        self.err_at(line, column, format!("{message} (at end of file)"))
    }

    fn warn_at(&self, t: &Token, message: String) -> Diagnostic {
        Diagnostic::warning(message, Some(self.loc(t.line, t.column)), Some(&self.text))
    }

    fn expect(&mut self, want: Tok, what: &str) -> PResult<()> {
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
    fn name(&mut self, what: &str) -> PResult<Token> {
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

    /// Skip to just after the next `;` (error recovery).
    fn recover(&mut self) {
        while let Some(t) = self.next() {
            if t.tok == Tok::Semi {
                break;
            }
        }
    }
}

fn text_of(t: &Token) -> &str {
    match &t.tok {
        Tok::Word(s) | Tok::Str(s) | Tok::Angle(s) => s,
        _ => "",
    }
}

impl Loader<'_> {
    fn file(&mut self, path: &Path, included_at: Option<Diagnostic>) {
        let id = self.source.identity(path);
        if self.stack.contains(&id) {
            let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
            d.message = format!("source cycle: {} is already being read", path.display());
            self.errors.push(d);
            return;
        }
        if self.stack.len() >= MAX_SOURCE_DEPTH {
            let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
            d.message = format!("source nesting deeper than {MAX_SOURCE_DEPTH} files");
            self.errors.push(d);
            return;
        }
        let text = match self.source.read(path) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                let mut d = included_at.unwrap_or_else(|| Diagnostic::error("", None, None));
                d.message = format!("cannot read {}: {e}", path.display());
                self.errors.push(d);
                return;
            }
        };
        if !self.files.iter().any(|f| self.source.identity(f) == id) {
            self.files.push(path.to_path_buf());
        }
        let ppath = Arc::new(path.to_path_buf());
        let toks = match lex(&text) {
            Ok(t) => t,
            Err(e) => {
                let loc = Location {
                    file: ppath,
                    line: e.line,
                    column: e.column,
                };
                self.errors
                    .push(Diagnostic::error(e.message, Some(loc), Some(&text)));
                return;
            }
        };
        self.stack.push(id);
        let mut f = File {
            path: ppath,
            text,
            toks: &toks,
            pos: 0,
        };
        while f.peek().is_some() {
            if let Err(d) = self.statement(&mut f) {
                self.errors.push(d);
                f.recover();
            }
        }
        self.stack.pop();
    }

    fn statement(&mut self, f: &mut File) -> PResult<()> {
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
            other => Err(f.err_at(
                t.line,
                t.column,
                format!("expected 'set' or 'source', found {}", other.describe()),
            )),
        }
    }

    fn set(&mut self, f: &mut File) -> PResult<()> {
        let what = f.name("what to set after 'set'")?;
        let key = text_of(&what).to_ascii_lowercase();
        match key.as_str() {
            "dsa" => self.set_dsa(f),
            "precedence" | "write-precedence" => {
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
                let slot = if key == "precedence" {
                    &mut self.precedence
                } else {
                    &mut self.write_precedence
                };
                if slot.is_some() {
                    self.warnings.push(f.warn_at(
                        &what,
                        format!("set {key} given again; this one replaces the earlier one"),
                    ));
                }
                *slot = Some(names);
                Ok(())
            }
            "dsa-router-cpu-threshold"
            | "dsa-router-memory-threshold"
            | "dsa-router-concurrency-limit" => {
                f.expect(Tok::Eq, "'='")?;
                let v = f.name("a number")?;
                let n: u32 = text_of(&v).parse().map_err(|_| {
                    f.err_at(
                        v.line,
                        v.column,
                        format!("set {key} takes a whole number, found {}", v.tok.describe()),
                    )
                })?;
                if key != "dsa-router-concurrency-limit" && n > 100 {
                    return Err(f.err_at(
                        v.line,
                        v.column,
                        format!("set {key} is a percentage 0-100 (0 = off)"),
                    ));
                }
                f.expect(Tok::Semi, "';'")?;
                let s = &mut self.settings;
                match key.as_str() {
                    "dsa-router-cpu-threshold" => s.cpu_threshold = Some(n),
                    "dsa-router-memory-threshold" => s.memory_threshold = Some(n),
                    _ => s.concurrency_limit = Some(n),
                }
                Ok(())
            }
            _ => {
                self.warnings
                    .push(f.warn_at(&what, format!("set {key}: not used by the router, ignored")));
                skip_statement(f)
            }
        }
    }

    fn set_dsa(&mut self, f: &mut File) -> PResult<()> {
        let name_tok = f.name("a DSA name")?;
        let name = text_of(&name_tok).to_string();
        f.expect(Tok::Eq, "'=' after the DSA name")?;
        f.expect(Tok::LBrace, "'{'")?;
        let mut attrs: HashMap<String, Token> = HashMap::new();
        let mut d = DsaDef {
            name: name.clone(),
            prefix: Dn::root(),
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
            defined_at: f.loc(name_tok.line, name_tok.column),
        };
        let mut has_prefix = false;
        loop {
            let Some(t) = f.peek().cloned() else {
                return Err(f.err_eof(format!("missing '}}' closing set dsa \"{name}\"")));
            };
            if t.tok == Tok::RBrace {
                f.pos += 1;
                break;
            }
            let attr_tok = f.name("an attribute name or '}'")?;
            let attr = text_of(&attr_tok).to_ascii_lowercase();
            f.expect(Tok::Eq, &format!("'=' after '{attr}'"))?;
            let start = f.pos;
            // A value runs to the next `word =` or the closing brace.
            while let Some(t) = f.peek() {
                let next_is_attr =
                    matches!(t.tok, Tok::Word(_)) && f.peek2().is_some_and(|n| n.tok == Tok::Eq);
                if t.tok == Tok::RBrace || next_is_attr || t.tok == Tok::Semi {
                    break;
                }
                f.pos += 1;
            }
            let value = &f.toks[start..f.pos];
            if value.is_empty() {
                return Err(f.err_here(format!("missing value for '{attr}'")));
            }
            if attrs.insert(attr.clone(), attr_tok.clone()).is_some() {
                return Err(f.err_at(
                    attr_tok.line,
                    attr_tok.column,
                    format!("'{attr}' given twice in set dsa \"{name}\""),
                ));
            }
            match attr.as_str() {
                "prefix" => {
                    d.prefix = dn_value(f, value)?;
                    has_prefix = true;
                }
                "native-prefix" => d.native_prefix = Some(dn_value(f, value)?),
                "dsa-name" => d.dsa_name = Some(dn_value(f, value)?),
                "ldap-dsa-name" => d.ldap_dsa_name = Some(dn_value(f, value)?),
                "dsa-password" => d.dsa_password = Some(Secret::new(single(f, value, &attr)?)),
                "ldap-dsa-password" => {
                    d.ldap_dsa_password = Some(Secret::new(single(f, value, &attr)?))
                }
                "address" => d.addresses = address_value(f, value)?,
                "dsa-flags" => d.dsa_flags = self.flags(f, value, KNOWN_DSA_FLAGS, "dsa-flag")?,
                "trust-flags" => {
                    d.trust_flags = self.flags(f, value, KNOWN_TRUST_FLAGS, "trust-flag")?
                }
                "link-flags" => {
                    d.link_flags = self.flags(f, value, KNOWN_LINK_FLAGS, "link-flag")?
                }
                "load-share-group" => d.load_share_group = Some(single(f, value, &attr)?),
                "dsa-router-concurrency-limit" => {
                    let v = single(f, value, &attr)?;
                    let n: u32 = v.parse().map_err(|_| {
                        f.err_at(
                            value[0].line,
                            value[0].column,
                            format!("'{attr}' takes a whole number, found '{v}'"),
                        )
                    })?;
                    d.concurrency_limit = Some(n);
                }
                "dsa-router-tls" => {
                    let v = single(f, value, &attr)?;
                    d.tls = Some(crate::knowledge::TlsMode::parse(&v).ok_or_else(|| {
                        f.err_at(
                            value[0].line,
                            value[0].column,
                            format!("'{attr}' is ldaps, starttls or none, found '{v}'"),
                        )
                    })?);
                }
                _ => {
                    if !PASSIVE_ATTRS.contains(&attr.as_str()) {
                        self.warnings.push(f.warn_at(
                            &attr_tok,
                            format!("unknown attribute '{attr}' in set dsa \"{name}\", ignored"),
                        ));
                    }
                    let raw: Vec<&str> = value
                        .iter()
                        .map(|t| match &t.tok {
                            Tok::Comma => ",",
                            _ => text_of(t),
                        })
                        .collect();
                    d.other.push((attr.clone(), raw.join(" ")));
                }
            }
        }
        f.expect(Tok::Semi, "';' after '}'")?;
        // The statement parsed to its ';': report and go on with the next.
        if !has_prefix {
            self.errors.push(f.err_at(
                name_tok.line,
                name_tok.column,
                format!("set dsa \"{name}\" has no prefix"),
            ));
            return Ok(());
        }
        if d.addresses.is_empty() {
            self.errors.push(f.err_at(
                name_tok.line,
                name_tok.column,
                format!("set dsa \"{name}\" has no address"),
            ));
            return Ok(());
        }
        if d.load_share_group.is_some() && !d.load_share() {
            self.warnings.push(f.warn_at(
                &name_tok,
                format!("DSA \"{name}\" names a load-share-group but has no 'load-share' dsa-flag: it is a group of its own"),
            ));
        }
        self.dsas.push((d, f.text.clone()));
        Ok(())
    }

    fn flags(
        &mut self,
        f: &File,
        value: &[Token],
        known: &[&str],
        kind: &str,
    ) -> PResult<Vec<String>> {
        let mut out = Vec::new();
        for (i, t) in value.iter().enumerate() {
            let want_word = i % 2 == 0;
            match (&t.tok, want_word) {
                (Tok::Word(w), true) => {
                    if !known.iter().any(|k| k.eq_ignore_ascii_case(w)) {
                        self.warnings
                            .push(f.warn_at(t, format!("unknown {kind} '{w}', kept but not used")));
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

    fn validate(&mut self) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, (d, text)) in self.dsas.iter().enumerate() {
            let key = d.name.to_ascii_lowercase();
            if let Some(&first) = seen.get(&key) {
                let prev = &self.dsas[first].0.defined_at;
                self.errors.push(Diagnostic::error(
                    format!(
                        "duplicate DSA name \"{}\" (first defined at {prev})",
                        d.name
                    ),
                    Some(d.defined_at.clone()),
                    Some(text),
                ));
            } else {
                seen.insert(key, i);
            }
        }
        for (list, what) in [
            (&self.precedence, "set precedence"),
            (&self.write_precedence, "set write-precedence"),
        ] {
            for n in list.iter().flatten() {
                if !seen.contains_key(&n.name.to_ascii_lowercase()) {
                    self.errors.push(Diagnostic::error(
                        format!(
                            "unknown DSA \"{}\" in {what}: no set dsa block has that name",
                            n.name
                        ),
                        Some(n.at.clone()),
                        Some(&n.line_text),
                    ));
                }
            }
        }
        // Errors in file order.
        self.errors.sort_by(|a, b| {
            let key = |d: &Diagnostic| {
                d.location.as_ref().map(|l| {
                    (
                        self.files.iter().position(|f| **f == *l.file),
                        l.line,
                        l.column,
                    )
                })
            };
            key(a).cmp(&key(b))
        });
    }
}

/// Skip the value of an ignored `set` command, braces included, to its `;`.
fn skip_statement(f: &mut File) -> PResult<()> {
    let mut depth = 0usize;
    loop {
        let Some(t) = f.next() else {
            return Err(f.err_eof("missing ';'".to_string()));
        };
        match t.tok {
            Tok::LBrace => depth += 1,
            Tok::RBrace => depth = depth.saturating_sub(1),
            Tok::Semi if depth == 0 => return Ok(()),
            _ => {}
        }
    }
}

fn single(f: &File, value: &[Token], attr: &str) -> PResult<String> {
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

/// `<c AU><o DEMOCORP>`, `"o=DEMOCORP,c=AU"`, `""` or `<>`.
fn dn_value(f: &File, value: &[Token]) -> PResult<Dn> {
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
fn address_value(f: &File, value: &[Token]) -> PResult<Vec<Address>> {
    let mut out = Vec::new();
    for part in value.split(|t| t.tok == Tok::Comma) {
        let Some(first) = part.first() else {
            let at = value.last().map(|t| (t.line, t.column)).unwrap_or((1, 1));
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
            ) => text_of(t).to_string(),
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
        out.push(Address { family, host, port });
    }
    Ok(out)
}
