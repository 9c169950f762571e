//! Forwarding one operation to the DSA that holds its DN (architecture.md, "Reads" and "Writes"):
//! the DN is parsed and looked up; a search whose scope reaches other
//! partitions goes to [`spanning`](super::spanning); everything else is
//! placed on one DSA through [`dispatch`](super::dispatch).

use super::logged::LogCtx;
use super::resend::Again;
use super::{dispatch, out, stack, Session};
use crate::backend::follow::ryw::Kept;
use crate::backend::upstream::pending::{Hedge, Kind, Pending};
use crate::directory::replication::mark::WriteMark;
use crate::directory::route::{Lookup, Partition};
use crate::observe::metrics::Refusal;
use crate::proto::dn::Dn;
use crate::proto::wire::frame::{Frame, Header};
use crate::proto::wire::request::{Op, Request};
use crate::proto::wire::response::Code;
use crate::proto::wire::state;
use crate::service::context::Routing;
use bytes::Bytes;
use std::sync::Arc;

impl Session {
    /// Whether `dn` is the schema entry the router's root DSE names.
    fn is_subschema(&self, routing: &Routing, dn: &Dn) -> bool {
        Dn::parse_ldap(&super::local::subschema(routing)).is_ok_and(|s| s == *dn)
    }

    /// Route and forward one operation. `target` overrides the DN the
    /// request names (Password Modify, WhoAmI with proxied authorization);
    /// `write` marks it an update.
    pub(super) async fn forward(
        &mut self,
        pdu: &Bytes,
        h: &Header,
        req: &Request,
        target: Option<&str>,
        write: bool,
    ) {
        // Set for this request only (a Password Modify of the client's own).
        let rebind = self.next_rebind.take();
        let limit = self.router.cfg.max_outstanding;
        if self.out.outstanding() >= limit {
            let msg = format!(
                "dsa-router: too many outstanding operations on this connection (limit {limit})"
            );
            return self.refuse(req, Refusal::Outstanding, &msg).await;
        }
        let dn_text = target.unwrap_or_else(|| named_dn(req));
        let is_write = write || is_update(&req.op);
        let dn = match self.parsed(dn_text) {
            Ok(d) => d,
            Err(e) => {
                let msg = format!("dsa-router: invalid DN: {e}");
                return self.reply(req, Code::InvalidDNSyntax, "", &msg).await;
            }
        };
        let routing = self.router.routing();
        let found = routing.table.lookup(&dn);
        if let (Op::Search { scope, .. }, None) = (&req.op, target) {
            let spans = routing.table.spanning_from(&dn, *scope, found.partition());
            if !spans.is_empty() {
                return Box::pin(self.fan_out(pdu, h, req, &routing, dn_text, spans)).await;
            }
        }
        let p = match self.partition_of(&routing, found, &dn, req, pdu, h) {
            Ok(p) => p,
            Err((code, msg)) => return self.reply(req, code, "", &msg).await,
        };
        let op = One {
            pdu,
            h,
            req,
            dn,
            dn_text,
            is_write,
            // Password Modify and WhoAmI name another DN than the request:
            // they are not re-sent.
            resend: target.is_none(),
            rebind,
        };
        self.send_one(&routing, p, op).await;
    }

    /// The partition an operation on `dn` goes to (`found` by the
    /// lookup), or the router's answer when none can take it.
    fn partition_of<'r>(
        &self,
        routing: &'r Routing,
        found: Lookup<'r>,
        dn: &Dn,
        req: &Request,
        pdu: &[u8],
        h: &Header,
    ) -> Result<&'r Partition, (Code, String)> {
        let no_partition = || {
            (
                Code::NoSuchObject,
                format!("dsa-router: no partition holds {dn}"),
            )
        };
        let p = match found {
            Lookup::Partition(p) => p,
            // The schema (subschemaSubentry of the router's root DSE) is
            // the home partition's DSAs' to answer.
            Lookup::NoPartition { .. } if self.is_subschema(routing, dn) => {
                routing.table.home().ok_or_else(no_partition)?
            }
            // A one-level search above partitions that all lie deeper: no
            // entry one level down exists anywhere.
            Lookup::NoPartition { below }
                if !below.is_empty() && matches!(req.op, Op::Search { .. }) =>
            {
                return Err((Code::Success, String::new()));
            }
            Lookup::NoPartition { .. } => return Err(no_partition()),
        };
        // A modify DN that would move the entry to another partition (or
        // slot of a horizontal partition): no one DSA can do it.
        if let Op::ModDn { .. } = req.op {
            if let Some(msg) = moves_between_dsas(routing, p, dn, pdu, h) {
                return Err((Code::AffectsMultipleDSAs, msg));
            }
        }
        Ok(p)
    }

    /// The DSA an operation of partition `p` goes to first, when one is
    /// given (the DSA holding the client's state, the one that took its
    /// write, the one its SASL identity lives on), and where it is kept by
    /// read-your-writes.
    fn sticky(
        &self,
        routing: &Routing,
        p: &Partition,
        needs: &state::Needs,
        is_write: bool,
    ) -> (Option<usize>, Option<Kept>) {
        // Reads after this client's write go where it is (read-your-writes).
        let kept = (!is_write && !needs.sticky)
            .then(|| self.affinity_dsa(routing, p))
            .flatten();
        let affine = kept.as_ref().and_then(|k| k.dsa);
        // A SASL identity lives on the connection it was made on: in that
        // DSA's partition, operations go to that DSA.
        let sasl_home = match &self.identity {
            super::Identity::Bound(b) if b.bind.is_none() => p.order.iter().copied().find(|&i| {
                self.private
                    .has(&routing.snap.dsas[i].name.to_ascii_lowercase())
                    && routing.states.0[i].status().eligible()
            }),
            _ => None,
        };
        let sticky = needs
            .sticky
            .then(|| self.state_sticky(routing, p))
            .flatten()
            .or(affine)
            .or(sasl_home);
        (sticky, kept)
    }

    /// Place one operation on a DSA of partition `p`, and note where it
    /// went; the router's answer when it could not be placed.
    async fn send_one(&mut self, routing: &Arc<Routing>, p: &Partition, mut op: One<'_>) {
        let (req, is_write, rebind) = (op.req, op.is_write, op.rebind.take());
        // State the DSA keeps per connection (wire::state): such requests
        // run on a connection of the client's own, and those that continue
        // earlier state (pages, VLV windows, a transaction) go to the DSA
        // that holds it: paged results cookies are opaque and may repeat
        // across DSAs.
        let needs = state::needs(req);
        if let Some(msg) = self.paged_lost(routing, p, req) {
            let e = crate::base::error::Error::router(crate::base::error::Kind::Unavailable, msg);
            self.answer(req, &e).await;
            return;
        }
        let (sticky, kept) = self.sticky(routing, p, &needs, is_write);
        let affine = kept.is_some();
        let only = kept.and_then(|k| k.only);
        let want = dispatch::Want {
            // Its DSA is recorded as the one holding the state.
            pinned: needs.sticky,
            resend: op.resend.then(|| {
                let (dn, pdu) = (op.dn.clone(), op.pdu.clone());
                Again::first(&self.router, dn, pdu, *op.h, is_write, only.clone())
            }),
            only,
            ..dispatch::Want::first(is_write, sticky)
        };
        let (pending, mark) = self.pending_for(&op, rebind, p, &needs, affine);
        self.out.track_placeholder(req.msgid);
        let via = self.via(needs.own_conn);
        let placed =
            dispatch::place(routing, p, want, via, Frame::new(op.pdu, op.h), |_| pending).await;
        match placed {
            Ok(t) => {
                let name = &routing.snap.dsas[t.dsa].name;
                if is_write {
                    self.note_write(p.key.clone(), name.to_string(), mark);
                }
                if needs.sticky {
                    self.state_dsa.insert(p.key.clone(), name.to_string());
                    self.note_paged(p, req, name);
                }
            }
            Err(e) => {
                self.out.finish(req.msgid);
                self.answer(req, &e).await;
            }
        }
    }

    /// The pending operation of `op` in partition `p`: its kind, where its
    /// responses go (logged when the access log is on), how it is counted;
    /// and for a write, the mark its acknowledgement sets (read-your-writes
    /// by position).
    fn pending_for(
        &self,
        op: &One<'_>,
        rebind: Option<out::Rebind>,
        p: &Partition,
        needs: &state::Needs,
        affine: bool,
    ) -> (Pending, Option<Arc<WriteMark>>) {
        let req = op.req;
        let log = crate::observe::access::enabled().then(|| {
            let affinity = affine.then_some("read-your-writes");
            LogCtx::new(
                &self.log_client,
                req.op.name(),
                op.dn_text,
                &p.text,
                affinity,
            )
        });
        let trace = crate::observe::otel::enabled()
            .then(|| {
                let ctl = req.control(crate::observe::otel::OID_TRACE_CONTEXT);
                let ctl = ctl.and_then(|c| c.value.as_deref());
                let client = self.peer.to_string();
                crate::observe::otel::start(req.op.name(), op.dn_text, &p.text, &client, ctl)
            })
            .flatten();
        let to_client = out::ToClient {
            out: self.out.clone(),
            msgid: req.msgid,
            resp_tag: req.op.response_tag().unwrap_or(0x78),
            rebind,
        };
        let ryw = !self.router.cfg.read_your_writes.is_zero();
        let watched = crate::backend::follow::ryw::watched(
            &self.router.backend.replication,
            ryw,
            op.is_write,
            Frame::new(op.pdu, op.h),
        );
        let hide = self.pol.hide.clone();
        let (sink, mark) = stack::build(to_client, hide, log, trace, watched);
        // A read may be hedged (when it may be re-sent: see
        // `Pending::movable`), unless it keeps to the DSA that took the
        // client's write.
        let kind = if op.is_write {
            Kind::Write
        } else if needs.persistent {
            Kind::Persistent { resend: None }
        } else {
            Kind::Read {
                resend: None,
                hedge: if affine { Hedge::No } else { Hedge::Eligible },
                hold: matches!(req.op, Op::Search { scope: 0, .. }),
            }
        };
        let op_index = crate::observe::metrics::op_index(req.op.name()) as u8;
        let pending =
            Pending::new(sink, kind).counted(op_index, self.router.backend.metrics.clone());
        (pending, mark)
    }
}

/// One operation on its way to one DSA.
struct One<'a> {
    pdu: &'a Bytes,
    h: &'a Header,
    req: &'a Request,
    dn: Arc<Dn>,
    dn_text: &'a str,
    is_write: bool,
    /// Whether it may go to another DSA.
    resend: bool,
    rebind: Option<out::Rebind>,
}

/// The DN a request names.
fn named_dn(req: &Request) -> &str {
    match &req.op {
        Op::Search { base, .. } => base,
        Op::Compare { dn }
        | Op::Add { dn }
        | Op::Delete { dn }
        | Op::Modify { dn }
        | Op::ModDn { dn } => dn,
        _ => "",
    }
}

/// Whether `op` is an update.
fn is_update(op: &Op) -> bool {
    matches!(
        op,
        Op::Add { .. } | Op::Delete { .. } | Op::Modify { .. } | Op::ModDn { .. }
    )
}

/// Why a modify DN of `dn` (in partition `p`) cannot be done by one DSA,
/// if it cannot: its new DN lies in another partition or slot.
fn moves_between_dsas(
    routing: &crate::service::context::Routing,
    p: &crate::directory::route::Partition,
    dn: &Dn,
    pdu: &[u8],
    h: &Header,
) -> Option<String> {
    let (newrdn, sup) = crate::proto::wire::request::moddn_target(pdu, h)?;
    let parent = match sup {
        Some(s) => Dn::parse_ldap(&s).ok()?,
        None => dn.ancestor(dn.depth().saturating_sub(1)),
    };
    let rdn = Dn::parse_ldap(&newrdn).ok()?;
    let mut rdns = rdn.rdns().to_vec();
    rdns.extend_from_slice(parent.rdns());
    let new = Dn::from_rdns(rdns);
    match routing.table.lookup(&new) {
        Lookup::Partition(q) if std::ptr::eq(p, q) => None,
        Lookup::Partition(q) => Some(format!(
            "dsa-router: the new DN {new} belongs to {}, not to {} where {dn} is: a modify DN cannot move an entry between DSAs",
            describe(q),
            describe(p)
        )),
        Lookup::NoPartition { .. } => Some(format!(
            "dsa-router: no partition holds the new DN {new}"
        )),
    }
}

/// A partition, with its slot when it is one of a horizontal partition.
pub(super) fn describe(p: &crate::directory::route::Partition) -> String {
    match &p.hash {
        Some(h) => format!(
            "partition {} slot {} ({} of {})",
            p.prefix,
            h.slot,
            h.algo.name(),
            h.total
        ),
        None => format!("partition {}", p.prefix),
    }
}

impl Session {
    /// The DSA a read of partition `p` keeps to after this client's write
    /// there (read-your-writes: see `crate::directory::replication::ryw`).
    pub(super) fn affinity_dsa(
        &self,
        routing: &crate::service::context::Routing,
        p: &crate::directory::route::Partition,
    ) -> Option<Kept> {
        if self.router.cfg.read_your_writes.is_zero() {
            return None;
        }
        let rep = &self.router.backend.replication;
        match self.identity_key() {
            Some(dn) => self
                .router
                .affinity
                .get(&(dn, p.key.clone()))
                .and_then(|a| crate::backend::follow::ryw::affine(rep, routing, p, &a)),
            None => self
                .affinity
                .get(&p.key)
                .and_then(|a| crate::backend::follow::ryw::affine(rep, routing, p, a)),
        }
    }

    /// A write of partition `key` went to DSA `dsa`.
    fn note_write(&mut self, key: String, dsa: String, mark: Option<Arc<WriteMark>>) {
        let window = self.router.cfg.read_your_writes;
        if window.is_zero() {
            return;
        }
        let a = crate::directory::replication::mark::Affinity::new(dsa, window, mark);
        match self.identity_key() {
            Some(dn) => {
                let map = &self.router.affinity;
                if map.len() > 100_000 {
                    let now = std::time::Instant::now();
                    map.retain(|_, v| v.live(now));
                }
                map.insert((dn, key), a);
            }
            None => {
                self.affinity.insert(key, a);
            }
        }
    }

    /// The identity affinity follows across connections, with
    /// `--affinity-scope identity` and a bound client.
    fn identity_key(&self) -> Option<String> {
        match (&self.router.cfg.affinity_scope, &self.identity) {
            (crate::service::config::AffinityScope::Identity, super::Identity::Bound(b))
                if !b.dn.is_empty() =>
            {
                Dn::parse_ldap(&b.dn).ok().map(|d| d.normalized())
            }
            _ => None,
        }
    }
}
