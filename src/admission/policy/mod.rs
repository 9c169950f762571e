//! Client policies (architecture.md, "Policies"): the router's own settings
//! file (`--policy FILE`, TOML; never in the CA knowledge files) of
//! ordered rules. A rule matches clients by address (CIDR; the PROXY
//! protocol header's address behind a balancer), bound identity (DN
//! subtrees, or membership of groups read from the DSAs holding them:
//! [`groups`]), TLS and SASL mechanism; the first that matches decides, else
//! the default rule. It allows operation types, target subtrees and
//! search scopes, clamps searches' size and time limits, hides attributes
//! from results under every name the DSAs' schema gives them (and refuses
//! filters, compares and controls naming them or their supertypes) and
//! refuses filters on other named attributes. `[rates]` sets token
//! buckets per client address and per bound identity, for binds apart.
//! The file is re-read with the knowledge (SIGHUP, `ctl reload`), all or
//! nothing. `docs/policy.md` is the administrator's description.
//!
//! [`rule`] is the pure matching, [`wire`] what is read and rewritten in
//! PDUs, [`controls`] what request controls name, [`schema`] the DSAs'
//! attribute types and what a `hide` list hides with them, [`shield`]
//! the schemas kept per DSA and each rule's view of them, [`rate`] the
//! buckets; the session's hooks are in `session::policy`.

pub mod controls;
mod error;
pub mod groups;
pub mod rate;
pub mod rule;
pub mod schema;
pub mod shield;
pub mod wire;

use crate::proto::dn::Dn;
pub use error::PolicyError;
use rule::{Client, OpType, Rule};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One `[[rule]]` (or `[default]`) as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    name: Option<String>,
    #[serde(default)]
    client: Vec<String>,
    #[serde(default)]
    identity: Vec<String>,
    #[serde(default)]
    member_of: Vec<String>,
    if_group_unreadable: Option<groups::Unreadable>,
    bound: Option<bool>,
    tls: Option<bool>,
    #[serde(default)]
    sasl: Vec<String>,
    allow: Option<Vec<String>>,
    #[serde(default)]
    subtrees: Vec<String>,
    #[serde(default)]
    scopes: Vec<String>,
    size_limit: Option<u32>,
    time_limit: Option<u32>,
    #[serde(default)]
    hide: Vec<String>,
    #[serde(default)]
    refuse_filters_on: Vec<String>,
}

/// The file as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default: Option<RuleFile>,
    #[serde(default)]
    rule: Vec<RuleFile>,
    #[serde(default)]
    rates: rate::Rates,
    #[serde(default)]
    groups: groups::Settings,
}

/// A policy file, compiled.
#[derive(Debug)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub default: Rule,
    pub rates: rate::Rates,
    /// How member sets are read (`[groups]`).
    pub groups: groups::Settings,
    /// Whether a rule names groups (made once: sessions ask per request).
    named_groups: bool,
}

fn dns(list: &[String], key: &'static str, name: &str) -> Result<Vec<Dn>, PolicyError> {
    list.iter()
        .map(|s| {
            Dn::parse_ldap(s).map_err(|error| PolicyError::Dn {
                rule: name.to_string(),
                key,
                value: s.clone(),
                error,
            })
        })
        .collect()
}

fn compile(r: RuleFile, name: String) -> Result<Rule, PolicyError> {
    let bad = |what: &'static str, w: &str| PolicyError::Unknown {
        rule: name.clone(),
        what,
        word: w.to_string(),
    };
    let mut ops = 0;
    for w in r.allow.as_deref().unwrap_or(&["all".to_string()]) {
        ops |= OpType::bits_of(w).ok_or_else(|| bad("operation", w))?;
    }
    let mut scopes = 0;
    for w in &r.scopes {
        scopes |= rule::scope_bit(w).ok_or_else(|| bad("scope", w))?;
    }
    let clients = r
        .client
        .iter()
        .map(|c| {
            c.parse().map_err(|error| PolicyError::Client {
                rule: name.clone(),
                error,
            })
        })
        .collect::<Result<_, _>>()?;
    let lower = |v: &[String]| v.iter().map(|a| rule::attr_base(a)).collect::<Vec<_>>();
    if r.if_group_unreadable.is_some() && r.member_of.is_empty() {
        return Err(PolicyError::UnreadableWithoutGroups(name));
    }
    Ok(Rule {
        clients,
        identities: dns(&r.identity, "identity", &name)?,
        member_of: dns(&r.member_of, "member_of", &name)?
            .iter()
            .map(Dn::normalized)
            .collect(),
        member_of_text: r.member_of.clone(),
        if_unreadable: r.if_group_unreadable.unwrap_or_default(),
        bound: r.bound,
        tls: r.tls,
        sasl: r.sasl.iter().map(|m| m.to_ascii_uppercase()).collect(),
        ops,
        subtrees: dns(&r.subtrees, "subtree", &name)?,
        scopes,
        size_limit: r.size_limit,
        time_limit: r.time_limit,
        hide: lower(&r.hide).into(),
        refuse_filters_on: lower(&r.refuse_filters_on),
        name,
    })
}

impl Policy {
    /// Parse a policy file's text.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let f: File = toml::from_str(text).map_err(PolicyError::Toml)?;
        let mut rules = Vec::with_capacity(f.rule.len());
        for (i, r) in f.rule.into_iter().enumerate() {
            let name = r.name.clone().unwrap_or_else(|| format!("rule {}", i + 1));
            if rules.iter().any(|x: &Rule| x.name == name) || name == "default" {
                return Err(PolicyError::DuplicateName(name));
            }
            rules.push(compile(r, name)?);
        }
        let d = f.default.unwrap_or_default();
        if d.name.as_ref().is_some_and(|n| n != "default") {
            return Err(PolicyError::DefaultRenamed);
        }
        let matching = !d.client.is_empty()
            || !d.identity.is_empty()
            || !d.member_of.is_empty()
            || d.bound.is_some()
            || d.tls.is_some()
            || !d.sasl.is_empty();
        if matching {
            return Err(PolicyError::DefaultMatches);
        }
        Ok(Policy {
            named_groups: rules.iter().any(|r| !r.member_of.is_empty()),
            rules,
            default: compile(d, "default".into())?,
            rates: f.rates,
            groups: f.groups,
        })
    }

    /// The groups rules name (`member_of`): (normalized DN, as written),
    /// each once.
    pub fn group_names(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for r in &self.rules {
            for (k, t) in r.member_of.iter().zip(&r.member_of_text) {
                if !out.iter().any(|(x, _)| x == k) {
                    out.push((k.clone(), t.clone()));
                }
            }
        }
        out
    }

    /// Whether a rule hides attributes or refuses filters on some (then
    /// the DSAs' schemas are read).
    pub fn hides(&self) -> bool {
        self.rules
            .iter()
            .chain([&self.default])
            .any(|r| !r.hide.is_empty() || !r.refuse_filters_on.is_empty())
    }

    /// Whether a rule names groups.
    pub fn uses_groups(&self) -> bool {
        self.named_groups
    }

    /// Read and parse a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|error| PolicyError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Policy::parse(&text).map_err(|e| PolicyError::File {
            path: path.to_path_buf(),
            error: Box::new(e),
        })
    }

    /// The rule that decides for `c`: the first that matches, else the
    /// default.
    pub fn decide(&self, c: &Client<'_>) -> &Rule {
        self.rules
            .iter()
            .find(|r| r.matches(c))
            .unwrap_or(&self.default)
    }
}

/// The policy in force and its counts, shared by every session.
#[derive(Default)]
pub struct Policies {
    path: Option<PathBuf>,
    current: arc_swap::ArcSwapOption<Policy>,
    /// Refusals by rule name (kept across reloads).
    refusals: Mutex<BTreeMap<String, u64>>,
    rate_refused: [AtomicU64; 4],
    pub meter: rate::Meter,
    /// The member sets of the groups rules name.
    pub groups: groups::Groups,
    /// The DSAs' schemas (hidden attributes' other names).
    pub schemas: shield::Schemas,
    /// Each rule's hidden attributes and subtrees, resolved.
    pub shields: shield::Shields,
}

impl Policies {
    /// Load `path` (none: no policy).
    pub fn new(path: Option<PathBuf>) -> Result<Policies, PolicyError> {
        let p = Policies {
            path,
            ..Default::default()
        };
        if let Some(new) = p.read()? {
            p.current.store(Some(Arc::new(new)));
        }
        Ok(p)
    }

    /// Whether `--policy` names a file (then requests are checked).
    pub fn configured(&self) -> bool {
        self.path.is_some()
    }

    /// The file read again (not yet in force: see [`Policies::store`]).
    pub fn read(&self) -> Result<Option<Policy>, PolicyError> {
        self.path.as_deref().map(Policy::load).transpose()
    }

    /// Put `p` (from [`Policies::read`]) in force; its summary.
    pub fn store(&self, p: Option<Policy>) -> Option<String> {
        let p = p?;
        let msg = format!("policy re-read: {} rule(s) and the default", p.rules.len());
        self.current.store(Some(Arc::new(p)));
        // Schemas are read again at the next probe, groups at once.
        self.schemas.refresh();
        self.groups.wake.notify_one();
        Some(msg)
    }

    /// The policy in force, if any.
    pub fn current(&self) -> Option<Arc<Policy>> {
        self.current.load_full()
    }

    /// Whether a policy file is in force.
    pub fn is_on(&self) -> bool {
        self.current.load().is_some()
    }

    /// What rule `rule` (index; past the end: the default) of `policy`
    /// keeps from results, with the schema in force.
    pub fn shield(&self, policy: &Arc<Policy>, rule: usize) -> Option<Arc<shield::Shield>> {
        self.shields.get(policy, &self.schemas.current(), rule)
    }

    /// Whether the policy in force hides attributes.
    pub fn hides(&self) -> bool {
        self.current.load().as_deref().is_some_and(Policy::hides)
    }

    /// Count a refusal by rule `name`.
    pub fn refused(&self, name: &str) {
        let mut m = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        match m.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                m.insert(name.to_string(), 1);
            }
        }
    }

    /// Count an operation answered busy for its rate.
    pub fn rate_refused(&self, bind: bool, over: rate::Over) {
        let i = usize::from(bind) * 2 + usize::from(over == rate::Over::Identity);
        self.rate_refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals by rule name.
    pub fn refusals(&self) -> BTreeMap<String, u64> {
        self.refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Operations answered busy for their rates: (per address, per
    /// identity), binds and others together.
    pub fn rate_refusals(&self) -> (u64, u64) {
        let n = |i: usize| self.rate_refused[i].load(Ordering::Relaxed);
        (n(0) + n(2), n(1) + n(3))
    }

    /// The `/metrics` lines.
    pub fn render(&self, out: &mut String) {
        use crate::observe::catalog::header;
        header(out, "dsa_router_policy_refusals_total");
        for (rule, n) in self.refusals() {
            let rule = rule.replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!(
                "dsa_router_policy_refusals_total{{rule=\"{rule}\"}} {n}\n"
            ));
        }
        header(out, "dsa_router_rate_limited_total");
        for (i, (of, op)) in [
            ("address", "other"),
            ("identity", "other"),
            ("address", "bind"),
            ("identity", "bind"),
        ]
        .iter()
        .enumerate()
        {
            let n = self.rate_refused[i].load(Ordering::Relaxed);
            out.push_str(&format!(
                "dsa_router_rate_limited_total{{of=\"{of}\",op=\"{op}\"}} {n}\n"
            ));
        }
    }
}

#[cfg(test)]
mod tests;
