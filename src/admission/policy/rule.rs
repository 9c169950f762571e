//! One compiled rule: what it matches (client address, bound identity,
//! group membership as last read, TLS, SASL mechanism) and what it allows (operation types, target
//! subtrees, search scopes), clamps (size and time limits) and hides
//! (attributes). Pure: no I/O, no clock.

use super::groups::{membership, Sets, Unreadable};
use crate::proto::dn::Dn;
use crate::proto::proxy_protocol::Cidr;
use std::net::IpAddr;
use std::sync::Arc;

/// LDAP result codes a policy refusal carries.
pub const INSUFFICIENT_ACCESS: u8 = 50;
pub const UNWILLING: u8 = 53;

/// The operation types a rule allows, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpType {
    Search = 1,
    Compare = 2,
    Add = 4,
    Delete = 8,
    Modify = 16,
    ModDn = 32,
    Extended = 64,
}

impl OpType {
    pub const ALL: u8 = 127;

    pub fn name(self) -> &'static str {
        match self {
            OpType::Search => "search",
            OpType::Compare => "compare",
            OpType::Add => "add",
            OpType::Delete => "delete",
            OpType::Modify => "modify",
            OpType::ModDn => "moddn",
            OpType::Extended => "extended",
        }
    }

    /// The bits a word of the policy file's `allow` list stands for.
    pub fn bits_of(word: &str) -> Option<u8> {
        Some(match word.to_ascii_lowercase().as_str() {
            "search" => OpType::Search as u8,
            "compare" => OpType::Compare as u8,
            "add" => OpType::Add as u8,
            "delete" => OpType::Delete as u8,
            "modify" => OpType::Modify as u8,
            "moddn" | "modrdn" => OpType::ModDn as u8,
            "extended" => OpType::Extended as u8,
            "read" => OpType::Search as u8 | OpType::Compare as u8,
            "write" => {
                OpType::Add as u8
                    | OpType::Delete as u8
                    | OpType::Modify as u8
                    | OpType::ModDn as u8
            }
            "all" => OpType::ALL,
            _ => return None,
        })
    }
}

/// Search scopes by their wire value (base 0, one 1, sub 2, children 3).
pub fn scope_bit(word: &str) -> Option<u8> {
    Some(match word.to_ascii_lowercase().as_str() {
        "base" => 1,
        "one" | "onelevel" => 2,
        "sub" | "subtree" => 4,
        "children" | "subordinates" => 8,
        _ => return None,
    })
}

fn scope_name(scope: u8) -> &'static str {
    match scope {
        0 => "base",
        1 => "one",
        2 => "sub",
        3 => "children",
        _ => "unknown",
    }
}

/// Who the client is, as rules match it.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// Its address (the PROXY protocol header's, behind a balancer).
    pub addr: IpAddr,
    /// Its bound DN (`None`: anonymous, or a SASL identity without DN).
    pub identity: Option<&'a Dn>,
    /// Whether it is bound at all.
    pub bound: bool,
    pub tls: bool,
    /// The SASL mechanism it bound with (`None`: simple or anonymous).
    pub sasl: Option<&'a str>,
    /// The groups' member sets as last read (`None`: none read, as in
    /// `explain`).
    pub groups: Option<&'a Sets>,
}

/// What the client asks.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub op: OpType,
    /// The DN it targets (search base, entry), parsed; `None` for
    /// extended operations.
    pub dn: Option<&'a Dn>,
    /// A search's scope.
    pub scope: Option<u8>,
}

/// A refusal: the result code and the diagnostic message naming the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u8,
    pub message: String,
}

/// One rule, compiled.
#[derive(Debug, Default)]
pub struct Rule {
    pub name: String,
    // Matching (empty / None: any).
    pub clients: Vec<Cidr>,
    pub identities: Vec<Dn>,
    /// Groups (normalized DNs) the bound DN must be a member of, one
    /// at least.
    pub member_of: Vec<String>,
    /// The same, as the file writes them.
    pub member_of_text: Vec<String>,
    /// What the rule does when a group of `member_of` is unreadable.
    pub if_unreadable: Unreadable,
    pub bound: Option<bool>,
    pub tls: Option<bool>,
    /// Upper case.
    pub sasl: Vec<String>,
    // Acting.
    pub ops: u8,
    pub subtrees: Vec<Dn>,
    /// Scope bits (see [`scope_bit`]); 0 = any.
    pub scopes: u8,
    pub size_limit: Option<u32>,
    pub time_limit: Option<u32>,
    /// Attribute names hidden from results (lower case, no options);
    /// filters and compares on them are refused too.
    pub hide: Arc<[String]>,
    /// Attribute names filters and compares may not name (lower case).
    pub refuse_filters_on: Vec<String>,
}

impl Rule {
    /// Whether the rule applies to `c`.
    pub fn matches(&self, c: &Client<'_>) -> bool {
        self.mismatch(c).is_none()
    }

    /// The first criterion `c` does not meet (`None`: the rule applies).
    pub fn mismatch(&self, c: &Client<'_>) -> Option<&'static str> {
        if !(self.clients.is_empty() || self.clients.iter().any(|n| n.contains(c.addr))) {
            return Some("client address");
        }
        if self.bound.is_some_and(|b| b != c.bound) {
            return Some("bound");
        }
        if self.tls.is_some_and(|t| t != c.tls) {
            return Some("tls");
        }
        let under = |d: &Dn| self.identities.iter().any(|s| s.is_ancestor_or_self_of(d));
        if !(self.identities.is_empty() || c.identity.is_some_and(under)) {
            return Some("identity");
        }
        let mech = |m: &str| self.sasl.iter().any(|s| s.eq_ignore_ascii_case(m));
        if !(self.sasl.is_empty() || c.sasl.is_some_and(mech)) {
            return Some("sasl");
        }
        if !self.member_of.is_empty() {
            let who = c.identity.map(Dn::normalized);
            match membership(c.groups, &self.member_of, who.as_deref()) {
                Some(true) => {}
                Some(false) => return Some("member_of"),
                None if self.if_unreadable == Unreadable::Match => {}
                None => return Some("member_of (a group not read)"),
            }
        }
        None
    }

    /// Whether the rule lets everything through untouched (the check per
    /// operation is then skipped).
    pub fn is_open(&self) -> bool {
        self.ops == OpType::ALL
            && self.subtrees.is_empty()
            && self.scopes == 0
            && self.size_limit.is_none()
            && self.time_limit.is_none()
            && self.hide.is_empty()
            && self.refuse_filters_on.is_empty()
    }

    /// A refusal by this rule, its message naming it.
    pub fn refuse(&self, code: u8, why: String) -> Refusal {
        Refusal {
            code,
            message: format!(
                "dsa-router: refused by policy rule \"{}\": {why}",
                self.name
            ),
        }
    }

    /// Whether the rule allows `ask`.
    pub fn check(&self, ask: &Ask<'_>) -> Result<(), Refusal> {
        if self.ops & ask.op as u8 == 0 {
            return Err(self.refuse(
                INSUFFICIENT_ACCESS,
                format!("{} operations are not allowed", ask.op.name()),
            ));
        }
        if let (false, Some(dn)) = (self.subtrees.is_empty(), ask.dn) {
            if !self.subtrees.iter().any(|s| s.is_ancestor_or_self_of(dn)) {
                let list: Vec<String> = self.subtrees.iter().map(|s| s.to_string()).collect();
                let at = if dn.is_root() {
                    "the root".to_string()
                } else {
                    dn.to_string()
                };
                return Err(self.refuse(
                    INSUFFICIENT_ACCESS,
                    format!(
                        "{} at {at} is outside the subtrees it allows ({})",
                        ask.op.name(),
                        list.join("; ")
                    ),
                ));
            }
        }
        if let (true, Some(s)) = (self.scopes != 0, ask.scope) {
            if s > 3 || self.scopes & (1 << s) == 0 {
                return Err(self.refuse(
                    UNWILLING,
                    format!("{} searches are not allowed", scope_name(s)),
                ));
            }
        }
        Ok(())
    }

    /// Whether a modify DN may land its entry at `new` (`None`: a new
    /// DN that cannot be read): within the subtrees, as the entry was.
    pub fn check_moved(&self, new: Option<&Dn>) -> Result<(), Refusal> {
        if self.subtrees.is_empty() {
            return Ok(());
        }
        let Some(new) = new else {
            return Err(self.refuse(UNWILLING, "the new DN of a modify DN cannot be read".into()));
        };
        if self.subtrees.iter().any(|s| s.is_ancestor_or_self_of(new)) {
            return Ok(());
        }
        let list: Vec<String> = self.subtrees.iter().map(|s| s.to_string()).collect();
        Err(self.refuse(
            INSUFFICIENT_ACCESS,
            format!(
                "moddn to {new} is outside the subtrees it allows ({})",
                list.join("; ")
            ),
        ))
    }

    /// The size and time limits a search goes on with: the client's
    /// (0 = none) clamped to the rule's.
    pub fn clamp(&self, size: u32, time: u32) -> (u32, u32) {
        let c = |asked: u32, max: Option<u32>| match max {
            Some(m) if m > 0 && (asked == 0 || asked > m) => m,
            _ => asked,
        };
        (c(size, self.size_limit), c(time, self.time_limit))
    }

    /// Whether a filter or compare may name attribute `attr` (as sent:
    /// options are ignored, case is not significant); the refusal when
    /// not.
    pub fn check_attr(&self, attr: &str) -> Result<(), Refusal> {
        let base = attr_base(attr);
        if self.hide.contains(&base) {
            return Err(self.refuse(
                UNWILLING,
                format!("attribute {attr} is hidden: filters and compares may not name it"),
            ));
        }
        if self.refuse_filters_on.contains(&base) {
            return Err(self.refuse(
                UNWILLING,
                format!("filters and compares on attribute {attr} are not allowed"),
            ));
        }
        Ok(())
    }
}

/// Whether attribute `attr` (an entry's attribute type, options and all)
/// is one of `hide` (lower case, without options).
pub fn hidden(hide: &[String], attr: &[u8]) -> bool {
    let base = attr.split(|&b| b == b';').next().unwrap_or_default();
    hide.iter().any(|h| h.as_bytes().eq_ignore_ascii_case(base))
}

/// An attribute description without its options, lower case.
pub fn attr_base(attr: &str) -> String {
    attr.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}
