//! `explain --policy FILE --client ADDR [--identity DN]`: the client
//! policy rule that decides for a client and an operation, the rules
//! passed over on the way (and the criterion each missed), the verdict as
//! the router would give it, and what the rule clamps and hides. Groups
//! of `member_of` are not read here: explain names the DSAs that hold
//! each (where the router reads it at run time) and takes membership from
//! `--member-of`.

use super::error::ExplainError;
use super::{ExplainArgs, OpKind};
use crate::admission::policy::groups::{Group, Sets};
use crate::admission::policy::rule::{Ask, Client, OpType, Rule};
use crate::admission::policy::Policy;
use crate::directory::knowledge::Snapshot;
use crate::directory::route::Table;
use crate::proto::dn::Dn;
use serde::Serialize;
use std::fmt::Write;
use std::sync::Arc;

/// The `policy` part of an explanation.
#[derive(Debug, Serialize)]
pub(super) struct PolicyExplained {
    /// The rule that decides (`default` when none matched).
    pub rule: String,
    /// Earlier rules and the criterion each did not meet.
    pub passed_over: Vec<(String, &'static str)>,
    /// Whether the operation is allowed.
    pub allowed: bool,
    /// The LDAP result code of a refusal.
    pub code: Option<u8>,
    /// The diagnostic message a refused client gets.
    pub message: Option<String>,
    pub size_limit: Option<u32>,
    pub time_limit: Option<u32>,
    pub hidden: Vec<String>,
    pub refused_filters_on: Vec<String>,
    /// The groups rules name (`member_of`).
    pub groups: Vec<GroupExplained>,
}

/// One group of `member_of`, as explain sees it.
#[derive(Debug, Serialize)]
pub(super) struct GroupExplained {
    pub group: String,
    /// The DSAs of the partition that holds it, in read order (the router
    /// reads it from one of them at run time).
    pub held_by: Vec<String>,
    /// Whether the identity is a member, as `--member-of` says (`None`:
    /// not given; the router reads it at run time).
    pub member: Option<bool>,
}

fn op_type(op: OpKind) -> Option<OpType> {
    Some(match op {
        OpKind::Search => OpType::Search,
        OpKind::Compare => OpType::Compare,
        OpKind::Add => OpType::Add,
        OpKind::Delete => OpType::Delete,
        OpKind::Modify => OpType::Modify,
        OpKind::Moddn => OpType::ModDn,
        OpKind::Bind => return None,
    })
}

/// Explain the policy file `args.policy` for the client the arguments
/// describe; `Ok(None)` without `--policy`.
pub(super) fn explain(
    args: &ExplainArgs,
    snap: &Snapshot,
    table: &Table,
) -> Result<Option<PolicyExplained>, ExplainError> {
    let Some(path) = &args.policy else {
        return Ok(None);
    };
    let policy = Policy::load(path).map_err(ExplainError::Policy)?;
    let addr = args
        .client
        .as_deref()
        .ok_or(ExplainError::NoClient)?
        .parse()
        .map_err(|_| ExplainError::BadClient)?;
    let identity = args
        .identity
        .as_deref()
        .map(Dn::parse_any)
        .transpose()
        .map_err(ExplainError::Identity)?;
    let (sets, groups) = groups(&policy, args, identity.as_ref(), snap, table)?;
    let client = Client {
        addr,
        identity: identity.as_ref(),
        bound: identity.is_some() || args.sasl.is_some(),
        tls: args.tls,
        sasl: args.sasl.as_deref(),
        groups: sets.as_ref(),
    };
    let mut passed_over = Vec::new();
    let mut decided = &policy.default;
    for r in &policy.rules {
        match r.mismatch(&client) {
            Some(why) => passed_over.push((r.name.clone(), why)),
            None => {
                decided = r;
                break;
            }
        }
    }
    let dn = Dn::parse_any(&args.dn).map_err(|error| ExplainError::Dn {
        dn: args.dn.clone(),
        error,
    })?;
    let verdict = match op_type(args.op) {
        // Binds are never refused by rules: only rates apply to them.
        None => Ok(()),
        Some(op) => decided.check(&Ask {
            op,
            dn: Some(&dn),
            scope: (op == OpType::Search).then(|| args.scope.ldap()),
        }),
    };
    let mut x = explained(decided, passed_over, verdict);
    x.groups = groups;
    Ok(Some(x))
}

/// The member sets `--member-of` describes (`None` without it), and what
/// explain says of each group rules name.
fn groups(
    policy: &Policy,
    args: &ExplainArgs,
    identity: Option<&Dn>,
    snap: &Snapshot,
    table: &Table,
) -> Result<(Option<Sets>, Vec<GroupExplained>), ExplainError> {
    let given = args
        .member_of
        .iter()
        .map(|g| Dn::parse_any(g).map(|d| d.normalized()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ExplainError::MemberOf)?;
    if !given.is_empty() && identity.is_none() {
        return Err(ExplainError::MemberOfWithoutIdentity);
    }
    let who = identity.map(Dn::normalized);
    let mut sets = Sets::new();
    let mut out = Vec::new();
    for (key, text) in policy.group_names() {
        let member = given.contains(&key);
        let members = who.iter().filter(|_| member).cloned().collect();
        sets.insert(
            key.clone(),
            Group {
                name: text.clone(),
                members: Some(Arc::new(members)),
                ..Group::default()
            },
        );
        let held_by = Dn::parse_any(&text)
            .ok()
            .and_then(|d| table.lookup(&d).partition().map(|p| p.order.clone()))
            .unwrap_or_default()
            .into_iter()
            .filter(|&i| Some(i) != table.router)
            .map(|i| snap.dsas[i].name.to_string())
            .collect();
        out.push(GroupExplained {
            group: text,
            held_by,
            member: (!given.is_empty()).then_some(member),
        });
    }
    Ok(((!given.is_empty()).then_some(sets), out))
}

fn explained(
    r: &Rule,
    passed_over: Vec<(String, &'static str)>,
    verdict: Result<(), crate::admission::policy::rule::Refusal>,
) -> PolicyExplained {
    let (code, message) = match &verdict {
        Ok(()) => (None, None),
        Err(e) => (Some(e.code), Some(e.message.clone())),
    };
    PolicyExplained {
        rule: r.name.clone(),
        passed_over,
        allowed: verdict.is_ok(),
        code,
        message,
        size_limit: r.size_limit,
        time_limit: r.time_limit,
        hidden: r.hide.to_vec(),
        refused_filters_on: r.refuse_filters_on.clone(),
        groups: Vec::new(),
    }
}

impl PolicyExplained {
    /// The text `explain` prints.
    pub(super) fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "policy rule: {}", self.rule);
        for (name, why) in &self.passed_over {
            let _ = writeln!(s, "  passed over: {name} (its {why} does not match)");
        }
        match (&self.code, &self.message) {
            (Some(c), Some(m)) => {
                let _ = writeln!(s, "  refused: {c} {m}");
            }
            _ => s.push_str("  allowed\n"),
        }
        if let Some(n) = self.size_limit {
            let _ = writeln!(s, "  size limit clamped to {n}");
        }
        if let Some(n) = self.time_limit {
            let _ = writeln!(s, "  time limit clamped to {n} s");
        }
        if !self.hidden.is_empty() {
            let _ = writeln!(s, "  hidden attributes: {}", self.hidden.join(", "));
        }
        if !self.refused_filters_on.is_empty() {
            let _ = writeln!(
                s,
                "  filters refused on: {}",
                self.refused_filters_on.join(", ")
            );
        }
        for g in &self.groups {
            let at = if g.held_by.is_empty() {
                "no partition of the knowledge holds it".to_string()
            } else {
                format!("read from DSA {}", g.held_by.join(" or "))
            };
            let _ = match g.member {
                Some(true) => writeln!(s, "  group {}: the identity is a member (--member-of); at run time membership is read ({at})", g.group),
                Some(false) => writeln!(s, "  group {}: the identity is not a member (not in --member-of); at run time membership is read ({at})", g.group),
                None => writeln!(s, "  group {}: membership is read at run time ({at}), not by explain: --member-of GROUP says the identity is a member", g.group),
            };
        }
        s
    }
}
