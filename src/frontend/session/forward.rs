//! Forwarding one operation to the DSA that holds its DN (architecture.md, "Reads" and "Writes"):
//! the DN is parsed and looked up; a search whose scope reaches other
//! partitions goes to [`spanning`](super::spanning); everything else is
//! placed on one DSA through [`dispatch`](super::dispatch).

use super::logged::LogCtx;
use super::operation::Operation;
use super::resend::Again;
use super::{dispatch, out, stack, Session};
use crate::backend::follow::ryw::Kept;
use crate::backend::upstream::pending::{Hedge, Kind, Pending};
use crate::directory::replication::mark::WriteMark;
use crate::directory::route::{DsaId, Lookup, Partition};
use crate::observe::metrics::Refusal;
use crate::observe::otel::OpTrace;
use crate::proto::dn::Dn;
use crate::proto::wire::frame::{Frame, Pdu};
use crate::proto::wire::request::{Op, Request};
use crate::proto::wire::response::Code;
use crate::proto::wire::state;
use crate::service::context::Routing;
use std::sync::Arc;

impl Session {
    /// Whether `dn` is the schema entry the router's root DSE names.
    fn is_subschema(&self, routing: &Routing, dn: &Dn) -> bool {
        Dn::parse_ldap(&super::local::subschema(routing)).is_ok_and(|s| s == *dn)
    }

    /// The target phase, then on to choose, rewrite and send: the DN
    /// parsed and looked up; a search whose scope reaches other partitions
    /// goes to every one ([`spanning`](super::spanning)), anything else to
    /// one DSA of its partition.
    pub(super) async fn forward(&mut self, op: Operation) {
        let req = &op.req;
        let limit = self.router.cfg.max_outstanding;
        if self.client.out.outstanding() >= limit {
            let msg = format!(
                "dsa-router: too many outstanding operations on this connection (limit {limit})"
            );
            return self.refuse(req, Refusal::Outstanding, &msg).await;
        }
        let dn = match self.parsed(op.dn()) {
            Ok(d) => d,
            Err(e) => {
                let msg = format!("dsa-router: invalid DN: {e}");
                return self.reply(req, Code::InvalidDNSyntax, "", &msg).await;
            }
        };
        let routing = self.router.routing();
        let found = routing.table.lookup(&dn);
        if let (&Op::Search { scope, .. }, true) = (&req.op, op.named()) {
            let spans = routing.table.spanning_from(&dn, scope, found.partition());
            if !spans.is_empty() {
                return Box::pin(self.fan_out(&op, &routing, spans)).await;
            }
        }
        let p = match self.partition_of(&routing, found, &dn, &op.req, &op.pdu) {
            Ok(p) => p,
            Err((code, msg)) => return self.reply(&op.req, code, "", &msg).await,
        };
        self.send_one(&routing, p, op, dn).await;
    }

    /// The partition an operation on `dn` goes to (`found` by the
    /// lookup), or the router's answer when none can take it.
    fn partition_of<'r>(
        &self,
        routing: &'r Routing,
        found: Lookup<'r>,
        dn: &Dn,
        req: &Request,
        sent: &Pdu,
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
            if let Some(msg) = moves_between_dsas(routing, p, dn, sent.frame()) {
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
    ) -> (Option<DsaId>, Option<Kept>) {
        // Reads after this client's write go where it is (read-your-writes).
        let kept = (!is_write && !needs.sticky)
            .then(|| self.affinity_dsa(routing, p))
            .flatten();
        let affine = kept.as_ref().and_then(|k| k.dsa);
        // A SASL identity lives on the connection it was made on: in that
        // DSA's partition, operations go to that DSA.
        let sasl_home = match &self.who.identity {
            super::Identity::Bound(b) if b.bind.is_none() => p.order.iter().copied().find(|&i| {
                self.who.private.has(&routing.snap.dsas[i].name)
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

    /// Choose a DSA of partition `p` for `op` (on `dn`), rewrite and
    /// send it there, and note where it went; the router's answer when it
    /// could not be placed.
    async fn send_one(
        &mut self,
        routing: &Arc<Routing>,
        p: &Partition,
        mut op: Operation,
        dn: Arc<Dn>,
    ) {
        let is_write = op.is_write();
        // State the DSA keeps per connection (wire::state): such requests
        // run on a connection of the client's own, and those that continue
        // earlier state (pages, VLV windows, a transaction) go to the DSA
        // that holds it: paged results cookies are opaque and may repeat
        // across DSAs.
        let needs = state::needs(&op.req);
        if let Some(msg) = self.paged_lost(routing, p, &op.req) {
            let e = crate::base::error::Error::router(crate::base::error::Kind::Unavailable, msg);
            self.answer(&op.req, &e).await;
            return;
        }
        let (sticky, kept) = self.sticky(routing, p, &needs, is_write);
        let affine = kept.is_some();
        let only = kept.and_then(|k| k.only);
        let want = dispatch::Want {
            // Its DSA is recorded as the one holding the state.
            pinned: needs.sticky,
            // Password Modify and WhoAmI name another DSN than the
            // request: they are not re-sent.
            resend: op
                .named()
                .then(|| Again::first(&self.router, dn, op.pdu.clone(), is_write, only.clone())),
            only,
            ..dispatch::Want::first(is_write, sticky)
        };
        op.trace = self.start_trace(&op, p);
        let (pending, mark) = self.pending_for(&mut op, p, &needs, affine);
        let req = &op.req;
        self.client.out.track_placeholder(req.msgid);
        let via = self.via(needs.own_conn);
        let placed = dispatch::place(routing, p, want, via, &op.pdu, |_| pending).await;
        match placed {
            Ok(t) => {
                let name = &routing.snap.dsas[t.dsa].name;
                if is_write {
                    self.note_write(p.key.clone(), name.to_string(), mark);
                }
                if needs.sticky {
                    self.places.state_dsa.insert(p.key.clone(), name.clone());
                    self.note_paged(p, req, name);
                }
            }
            Err(e) => {
                self.client.out.finish(req.msgid);
                self.answer(req, &e).await;
            }
        }
    }

    /// The operation's trace in partition `p`, when traces are on and it
    /// is sampled.
    fn start_trace(&self, op: &Operation, p: &Partition) -> Option<Box<OpTrace>> {
        if !crate::observe::otel::enabled() {
            return None;
        }
        let req = &op.req;
        let ctl = req.control(crate::observe::otel::OID_TRACE_CONTEXT);
        let ctl = ctl.and_then(|c| c.value.as_deref());
        let client = self.client.peer.to_string();
        crate::observe::otel::start(req.op.name(), op.dn(), &p.text, &client, ctl)
    }

    /// The pending operation of `op` in partition `p`: its kind, where its
    /// responses go (logged when the access log is on), how it is counted;
    /// and for a write, the mark its acknowledgement sets (read-your-writes
    /// by position).
    fn pending_for(
        &self,
        op: &mut Operation,
        p: &Partition,
        needs: &state::Needs,
        affine: bool,
    ) -> (Pending, Option<Arc<WriteMark>>) {
        let is_write = op.is_write();
        let req = &op.req;
        let log = crate::observe::access::enabled().then(|| {
            let affinity = affine.then_some("read-your-writes");
            LogCtx::new(
                &self.client.log_client,
                req.op.name(),
                op.dn(),
                &p.text,
                affinity,
            )
        });
        let to_client = out::ToClient {
            out: self.client.out.clone(),
            msgid: req.msgid,
            resp_tag: req.op.response_tag().unwrap_or(0x78),
            rebind: op.then.take(),
        };
        let ryw = !self.router.cfg.read_your_writes.is_zero();
        let watched = crate::backend::follow::ryw::watched(
            &self.router.backend.replication,
            ryw,
            is_write,
            op.pdu.frame(),
        );
        let hide = op.rights.hide.take();
        let (sink, mark) = stack::build(to_client, hide, log, op.trace.take(), watched);
        // A read may be hedged (when it may be re-sent: see
        // `Pending::movable`), unless it keeps to the DSA that took the
        // client's write.
        let kind = if is_write {
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

/// Why a modify DN of `dn` (in partition `p`) cannot be done by one DSA,
/// if it cannot: its new DN lies in another partition or slot.
fn moves_between_dsas(
    routing: &crate::service::context::Routing,
    p: &crate::directory::route::Partition,
    dn: &Dn,
    sent: Frame<'_>,
) -> Option<String> {
    let (newrdn, sup) = crate::proto::wire::request::moddn_target(sent.pdu, sent.h)?;
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
                .places
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
                self.places.affinity.insert(key, a);
            }
        }
    }

    /// The identity affinity follows across connections, with
    /// `--affinity-scope identity` and a bound client.
    fn identity_key(&self) -> Option<String> {
        match (&self.router.cfg.affinity_scope, &self.who.identity) {
            (crate::service::config::AffinityScope::Identity, super::Identity::Bound(b))
                if !b.dn.is_empty() =>
            {
                Dn::parse_ldap(&b.dn).ok().map(|d| d.normalized())
            }
            _ => None,
        }
    }
}
