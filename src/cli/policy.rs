//! `explain --policy FILE --client ADDR [--identity DN]`: the client
//! policy rule that decides for a client and an operation, the rules
//! passed over on the way (and the criterion each missed), the verdict as
//! the router would give it, and what the rule clamps and hides.

use super::{ExplainArgs, OpKind};
use crate::dn::Dn;
use crate::policy::rule::{Ask, Client, OpType, Rule};
use crate::policy::Policy;
use serde::Serialize;
use std::fmt::Write;

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
pub(super) fn explain(args: &ExplainArgs) -> Result<Option<PolicyExplained>, String> {
    let Some(path) = &args.policy else {
        return Ok(None);
    };
    let policy = Policy::load(path)?;
    let addr = args
        .client
        .as_deref()
        .ok_or("--policy needs --client ADDR (the client's address)")?
        .parse()
        .map_err(|_| "--client: not an IP address".to_string())?;
    let identity = args
        .identity
        .as_deref()
        .map(Dn::parse_any)
        .transpose()
        .map_err(|e| format!("--identity: {e}"))?;
    let client = Client {
        addr,
        identity: identity.as_ref(),
        bound: identity.is_some() || args.sasl.is_some(),
        tls: args.tls,
        sasl: args.sasl.as_deref(),
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
    let dn = Dn::parse_any(&args.dn).map_err(|e| format!("{}: {e}", args.dn))?;
    let verdict = match op_type(args.op) {
        // Binds are never refused by rules: only rates apply to them.
        None => Ok(()),
        Some(op) => decided.check(&Ask {
            op,
            dn: Some(&dn),
            scope: (op == OpType::Search).then(|| args.scope.ldap()),
        }),
    };
    Ok(Some(explained(decided, passed_over, verdict)))
}

fn explained(
    r: &Rule,
    passed_over: Vec<(String, &'static str)>,
    verdict: Result<(), crate::policy::rule::Refusal>,
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
        s
    }
}
