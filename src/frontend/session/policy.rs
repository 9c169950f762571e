//! The session's hooks for client policies and rates ([`crate::admission::policy`]):
//! each request is checked against the rule that decides for this client
//! (cached until its identity, TLS, the policy or, with `member_of` rules,
//! a group's member set changes: group membership is looked up once per
//! bind, never per operation) and against the
//! rates, before it is dispatched; a search goes on with its limits
//! clamped, and its entries lose the attributes the rule hides, under
//! every name the DSAs' schema gives them, and entries outside the rule's
//! subtrees (reached through aliases) are not returned ([`Hide`], wrapped
//! round the search's delivery). For a rule that hides attributes,
//! filters, compares and request controls are checked by the names they
//! use ([`crate::admission::policy::shield`]).

use super::hide::Keep;
use super::operation::Operation;
use super::{Identity, Session};
use crate::admission::policy::rate::Over;
use crate::admission::policy::rule::{
    Ask, Client, OpType, Refusal, Rule, INSUFFICIENT_ACCESS, UNWILLING,
};
use crate::admission::policy::shield::Shield;
use crate::admission::policy::{wire, Policy};
use crate::proto::wire::frame::{self, Header, Pdu};
use crate::proto::wire::request::{Op, Request, OID_START_TLS, OID_WHOAMI};
use crate::proto::wire::response::Code;
use bytes::Bytes;
use std::sync::Arc;

/// What a session keeps for policies.
#[derive(Default)]
pub(super) struct State {
    /// The SASL mechanism of the last bind (`None`: simple).
    mech: Option<String>,
    /// The rule that decided last, and for whom.
    /// Boxed: most sessions never have one (no policy file), and the
    /// session is part of its future (tests/logic future_size).
    cached: Option<Box<Cached>>,
}

struct Cached {
    policy: Arc<Policy>,
    /// Index into the rules; `usize::MAX`: the default.
    rule: usize,
    dn: String,
    tls: bool,
    mech: Option<String>,
    /// The bound identity, normalized (rates per identity).
    key: Option<String>,
    /// The member sets' generation the rule was chosen with (0 when
    /// no rule names groups).
    groups: u64,
}

fn rule_at(p: &Policy, i: usize) -> &Rule {
    p.rules.get(i).unwrap_or(&p.default)
}

/// What the rule of a request says: the request to go on with when its
/// limits are clamped, and what a search's results lose.
type Judged = (Option<(Bytes, Header)>, Option<Keep>);

/// What the policy says of one request.
pub(super) enum Policed {
    /// Go on (the operation's PDU and rights as the policy set them).
    Go,
    /// The router answers it itself ([`Session::answer_policy`]).
    Answer(Answer),
}

/// How a request the policy stops is answered.
pub(super) enum Answer {
    /// Over a rate (`bind`: a bind's rate; the session is then anonymous).
    Rate { bind: bool, over: Over },
    /// Refused by the rule named `rule`.
    Refused { rule: String, refusal: Refusal },
}

impl Session {
    /// Check the operation against the policy and rates (the admit
    /// phase): go on, its PDU clamped and its rights set as the rule says,
    /// or how the router answers it. No await and no allocation on the way
    /// through (a request allowed as it came costs a few comparisons):
    /// the answer, rare, is the async part.
    pub(super) fn police(&mut self, op: &mut Operation) -> Policed {
        let req = &op.req;
        // No policy file: every request goes on as it came.
        let Some(policy) = self.router.admission.policies.current() else {
            return Policed::Go;
        };
        match &req.op {
            Op::Unbind | Op::Abandon { .. } => return Policed::Go,
            Op::Bind { dn, sasl, .. } => {
                self.pol.mech = sasl.clone();
                if let Err(over) = self.bind_rate(&policy, dn) {
                    return Policed::Answer(Answer::Rate { bind: true, over });
                }
                return Policed::Go;
            }
            _ => {}
        }
        let idx = self.decided(&policy);
        // Rates for operations: only when the file sets them (no clock
        // read, no identity copied per request otherwise).
        let r = &policy.rates;
        if r.address.is_some() || r.identity.is_some() {
            let key = self.pol.cached.as_ref().and_then(|c| c.key.as_deref());
            let now = std::time::Instant::now();
            let taken = self.router.admission.policies.meter.take(
                r,
                false,
                self.client.peer.ip(),
                key,
                now,
            );
            if let Err(over) = taken {
                return Policed::Answer(Answer::Rate { bind: false, over });
            }
        }
        let rule = rule_at(&policy, idx);
        if rule.is_open() {
            return Policed::Go;
        }
        match self.judge(&policy, idx, &op.pdu.bytes, &op.pdu.h, req) {
            Ok((clamped, hide)) => {
                op.rights.hide = hide;
                if let Some((b, h)) = clamped {
                    op.pdu = Pdu::new(b, h);
                }
                Policed::Go
            }
            Err(refusal) => Policed::Answer(Answer::Refused {
                rule: rule.name.clone(),
                refusal,
            }),
        }
    }

    /// Answer a request the policy stopped.
    pub(super) async fn answer_policy(&mut self, req: &Request, a: Answer) {
        match a {
            Answer::Rate { bind, over } => {
                if bind {
                    self.become_anonymous();
                }
                self.over_rate(req, bind, over).await;
            }
            Answer::Refused { rule, refusal } => {
                self.router.admission.policies.refused(&rule);
                tracing::debug!(client = %self.client.peer, rule = %rule, "refused by policy");
                let code = if refusal.code == INSUFFICIENT_ACCESS {
                    Code::InsufficentAccessRights
                } else {
                    Code::UnwillingToPerform
                };
                self.reply(req, code, "", &refusal.message).await;
            }
        }
    }

    /// The rule deciding for this client now (index); the session keeps
    /// it, with its identity normalized (for the rates).
    fn decided(&mut self, policy: &Arc<Policy>) -> usize {
        let (dn, bound) = match &self.who.identity {
            Identity::Anonymous => ("", false),
            Identity::Bound(b) => (b.dn.as_str(), true),
        };
        let mech = if bound {
            self.pol.mech.as_deref()
        } else {
            None
        };
        let groups = &self.router.admission.policies.groups;
        let generation = if policy.uses_groups() {
            groups.generation()
        } else {
            0
        };
        if let Some(c) = &self.pol.cached {
            if Arc::ptr_eq(&c.policy, policy)
                && c.dn == dn
                && c.tls == self.client.tls
                && c.mech.as_deref() == mech
                && c.groups == generation
            {
                return c.rule;
            }
        }
        let sets = policy.uses_groups().then(|| groups.sets());
        let parsed = (!dn.is_empty())
            .then(|| crate::proto::dn::Dn::parse_ldap(dn).ok())
            .flatten();
        let client = Client {
            addr: self.client.peer.ip(),
            identity: parsed.as_ref(),
            bound,
            tls: self.client.tls,
            sasl: mech,
            groups: sets.as_deref(),
        };
        let rule = policy
            .rules
            .iter()
            .position(|r| r.matches(&client))
            .unwrap_or(usize::MAX);
        let key = bound.then(|| {
            parsed
                .as_ref()
                .map_or_else(|| dn.to_string(), |d| d.normalized())
        });
        self.pol.cached = Some(Box::new(Cached {
            policy: policy.clone(),
            rule,
            dn: dn.to_string(),
            tls: self.client.tls,
            mech: mech.map(str::to_string),
            key,
            groups: generation,
        }));
        rule
    }

    /// Whether rule `idx` of `policy` allows `req`; the PDU rewritten
    /// when its limits are clamped. Sets what a search's results lose.
    fn judge(
        &mut self,
        policy: &Arc<Policy>,
        idx: usize,
        pdu: &Bytes,
        h: &Header,
        req: &Request,
    ) -> Result<Judged, Refusal> {
        let rule = rule_at(policy, idx);
        let (op, dn, scope) = match &req.op {
            // The root DSE is the router's own, for every client.
            Op::Search { base, scope: 0, .. } if base.is_empty() => return Ok((None, None)),
            Op::Search { base, scope, .. } => (OpType::Search, base.as_str(), Some(*scope)),
            Op::Compare { dn } => (OpType::Compare, dn.as_str(), None),
            Op::Add { dn } => (OpType::Add, dn.as_str(), None),
            Op::Delete { dn } => (OpType::Delete, dn.as_str(), None),
            Op::Modify { dn } => (OpType::Modify, dn.as_str(), None),
            Op::ModDn { dn } => (OpType::ModDn, dn.as_str(), None),
            Op::Extended { oid, .. } if oid == OID_START_TLS || oid == OID_WHOAMI => {
                return Ok((None, None))
            }
            Op::Extended { .. } => (OpType::Extended, "", None),
            _ => return Ok((None, None)),
        };
        // An unparsable DN is the forwarding's to answer (invalidDNSyntax).
        let parsed = match op {
            OpType::Extended => None,
            _ => match self.parsed(dn) {
                Ok(d) => Some(d),
                Err(_) => return Ok((None, None)),
            },
        };
        rule.check(&Ask {
            op,
            dn: parsed.as_deref(),
            scope,
        })?;
        if let (OpType::ModDn, Some(d)) = (op, parsed.as_deref()) {
            rule.check_moved(wire::moddn_new_dn(d, pdu, h).as_ref())?;
        }
        let resolved = !rule.hide.is_empty()
            || !rule.subtrees.is_empty()
            || !rule.refuse_filters_on.is_empty();
        let shield = resolved
            .then(|| self.router.admission.policies.shield(policy, idx))
            .flatten();
        names_allowed(rule, shield.as_deref(), op, pdu, h, req)?;
        if op != OpType::Search {
            return Ok((None, None));
        }
        let hide = shield.and_then(|shield| {
            // Without dereferencing, entries are under the base, which is
            // within the subtrees.
            let dns = !shield.subtrees.is_empty() && wire::search_deref(pdu, h) != Some(0);
            (dns || shield.hidden.any()).then_some(Keep::new(shield, dns))
        });
        Ok((clamped(rule, pdu, h), hide))
    }

    /// Take a bind's token; which rate it was over, if any.
    fn bind_rate(&mut self, policy: &Policy, dn: &str) -> Result<(), Over> {
        let r = &policy.rates;
        if r.address_binds.is_none() && r.identity_binds.is_none() {
            return Ok(());
        }
        let key = crate::proto::dn::Dn::parse_ldap(dn)
            .map_or_else(|_| dn.to_ascii_lowercase(), |d| d.normalized());
        let key = (!dn.is_empty()).then_some(key);
        let now = std::time::Instant::now();
        self.router.admission.policies.meter.take(
            r,
            true,
            self.client.peer.ip(),
            key.as_deref(),
            now,
        )
    }

    /// Answer an operation over its rate: busy, saying which rate.
    async fn over_rate(&self, req: &Request, bind: bool, over: Over) {
        self.router.admission.policies.rate_refused(bind, over);
        let (what, of) = match (bind, over) {
            (true, Over::Address) => ("binds", "this client address"),
            (true, Over::Identity) => ("binds", "this bind DN"),
            (false, Over::Address) => ("operations", "this client address"),
            (false, Over::Identity) => ("operations", "this identity"),
        };
        let msg = format!("dsa-router: too many {what} from {of}: over the policy file's rate; slow down and retry");
        self.reply(req, Code::Busy, "", &msg).await;
    }
}

/// Whether the attributes `req` names (its filter or compare, its
/// controls) are allowed by `rule` and its `shield`.
fn names_allowed(
    rule: &Rule,
    shield: Option<&Shield>,
    op: OpType,
    pdu: &[u8],
    h: &Header,
    req: &Request,
) -> Result<(), Refusal> {
    let hides = shield.is_some_and(|s| s.hidden.any());
    if !hides && rule.refuse_filters_on.is_empty() {
        return Ok(());
    }
    let named = match op {
        OpType::Search => match wire::filter_names(pdu, h) {
            Some(n) => n,
            None if hides => return Err(rule.refuse(UNWILLING, "the filter cannot be read".into())),
            None => wire::Names::default(),
        },
        OpType::Compare => match wire::compare_attr(pdu, h) {
            Some(a) => wire::Names {
                attrs: vec![a],
                typeless: false,
            },
            None if hides => {
                return Err(rule.refuse(UNWILLING, "the compare cannot be read".into()))
            }
            None => wire::Names::default(),
        },
        OpType::Modify if hides => match wire::modify_tests(pdu, h) {
            Some(attrs) => {
                let n = wire::Names {
                    attrs,
                    typeless: false,
                };
                if let Some(sh) = shield {
                    sh.check_names(rule, &n, "modify (adding or deleting values)")?;
                }
                wire::Names::default()
            }
            None => return Err(rule.refuse(UNWILLING, "the modify cannot be read".into())),
        },
        _ => wire::Names::default(),
    };
    for a in &named.attrs {
        rule.check_attr(a)?;
        if let Some(sh) = shield.filter(|_| !rule.refuse_filters_on.is_empty()) {
            sh.check_refused(rule, a)?;
        }
    }
    let Some(sh) = shield.filter(|_| hides) else {
        return Ok(());
    };
    sh.check_names(rule, &named, op.name())?;
    for c in &req.controls {
        sh.check_control(rule, &c.oid, c.value.as_deref())?;
    }
    Ok(())
}

/// A search's PDU with its limits clamped to `rule`'s, when they change.
fn clamped(rule: &Rule, pdu: &Bytes, h: &Header) -> Option<(Bytes, Header)> {
    if rule.size_limit.is_none() && rule.time_limit.is_none() {
        return None;
    }
    let (size, time) = wire::search_limits(pdu, h)?;
    let (s, t) = rule.clamp(size, time);
    if (s, t) == (size, time) {
        return None;
    }
    let b = wire::with_limits(pdu, h, s, t)?.freeze();
    let bh = frame::header(&b).ok()?;
    Some((b, bh))
}
