//! Traces (`crate::observe::otel`) of what the forwarding path does not trace:
//! binds, whose attempts the session awaits itself ([`super::bind`],
//! [`super::sasl`]), and the operations the router answers itself (its
//! refusals and errors, WhoAmI, StartTLS, the root DSE). Each is one span,
//! like a forwarded operation's: a bind's span has a child per DSA
//! attempt; an answer of the router's own has none and says so
//! (`dsa.attempts` 0, the router's message as the status).
//!
//! Tracing off, each costs one load of the switch.

use super::Session;
use crate::observe::otel::{OpTrace, OID_TRACE_CONTEXT};
use crate::proto::wire::request::{Op, Request};

impl Session {
    /// The trace of `req` on `dn` in `partition`, when traces are on and
    /// it is sampled (its own trace context control decides, if it has
    /// one).
    pub(super) fn trace_for(
        &self,
        req: &Request,
        dn: &str,
        partition: &str,
    ) -> Option<Box<OpTrace>> {
        if !crate::observe::otel::enabled() {
            return None;
        }
        let ctl = req.control(OID_TRACE_CONTEXT);
        let ctl = ctl.and_then(|c| c.value.as_deref());
        crate::observe::otel::start(
            req.op.name(),
            dn,
            partition,
            &self.client.peer.to_string(),
            ctl,
        )
    }

    /// The router answered `req` itself with `code` (`msg`): recorded in
    /// its trace `given`, else in a trace of its own (when sampled).
    pub(super) fn trace_answer(&self, req: &Request, code: u8, msg: &str, given: Option<&OpTrace>) {
        if !crate::observe::otel::enabled() {
            return;
        }
        let own;
        let t = match given {
            Some(t) => t,
            None => {
                own = self.trace_for(req, request_dn(req), "");
                match own.as_deref() {
                    Some(t) => t,
                    None => return,
                }
            }
        };
        ended_by_router(t, code, msg);
    }
}

/// End `t` with the router's own answer.
pub(super) fn ended_by_router(t: &OpTrace, code: u8, msg: &str) {
    if code == 0 || msg.is_empty() {
        t.ended(code);
    } else {
        t.failed("", code, msg);
    }
}

/// The DN a request names (a bind's name; none for an extended
/// operation).
fn request_dn(req: &Request) -> &str {
    match &req.op {
        Op::Search { base, .. } => base,
        Op::Bind { dn, .. }
        | Op::Compare { dn }
        | Op::Add { dn }
        | Op::Delete { dn }
        | Op::Modify { dn }
        | Op::ModDn { dn } => dn,
        _ => "",
    }
}
