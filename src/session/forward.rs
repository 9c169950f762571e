//! Forwarding one operation to the DSA that holds its DN (spec 3.4, 3.5):
//! the DN is parsed and looked up; a search whose scope reaches other
//! partitions goes to [`spanning`](super::spanning); everything else is
//! placed on one DSA through [`dispatch`](super::dispatch).

use super::{dispatch, out, Session};
use crate::dn::Dn;
use crate::metrics::Refusal;
use crate::replication::mark::WriteMark;
use crate::route::Lookup;
use crate::upstream::pending::{Hedge, LogCtx, Pending, Sink};
use crate::wire::frame::Header;
use crate::wire::request::{Op, Request};
use crate::wire::response::Code;
use crate::wire::state;
use bytes::Bytes;
use std::sync::Arc;

impl Session {
    /// Whether `dn` is the schema entry the router's root DSE names.
    fn is_subschema(&self, routing: &crate::context::Routing, dn: &Dn) -> bool {
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
        let router = self.router.clone();
        let cfg = &router.cfg;
        // Set for this request only (a Password Modify of the client's own).
        let rebind = self.next_rebind.take();
        if self.out.outstanding() >= cfg.max_outstanding {
            let msg = format!(
                "dsa-router: too many outstanding operations on this connection (limit {})",
                cfg.max_outstanding
            );
            return self.refuse(req, Refusal::Outstanding, &msg).await;
        }
        let dn_text = target.unwrap_or(match &req.op {
            Op::Search { base, .. } => base,
            Op::Compare { dn }
            | Op::Add { dn }
            | Op::Delete { dn }
            | Op::Modify { dn }
            | Op::ModDn { dn } => dn,
            _ => "",
        });
        let is_write = write
            || matches!(
                req.op,
                Op::Add { .. } | Op::Delete { .. } | Op::Modify { .. } | Op::ModDn { .. }
            );
        let dn = match self.parsed(dn_text) {
            Ok(d) => d,
            Err(e) => {
                return self
                    .reply(
                        req,
                        Code::InvalidDNSyntax,
                        "",
                        &format!("dsa-router: invalid DN: {e}"),
                    )
                    .await
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
        let p = match found {
            Lookup::Partition(p) => p,
            // The schema (subschemaSubentry of the router's root DSE) is
            // the home partition's DSAs' to answer.
            Lookup::NoPartition { .. } if self.is_subschema(&routing, &dn) => {
                match routing.table.home() {
                    Some(home) => home,
                    None => {
                        let msg = format!("dsa-router: no partition holds {dn}");
                        return self.reply(req, Code::NoSuchObject, "", &msg).await;
                    }
                }
            }
            Lookup::NoPartition { below } => {
                if !below.is_empty() && matches!(req.op, Op::Search { .. }) {
                    // A one-level search above partitions that all lie
                    // deeper: no entry one level down exists anywhere.
                    return self.reply(req, Code::Success, "", "").await;
                }
                let msg = format!("dsa-router: no partition holds {dn}");
                return self.reply(req, Code::NoSuchObject, "", &msg).await;
            }
        };
        // A modify DN that would move the entry to another partition (or
        // slot of a horizontal partition): no one DSA can do it.
        if let Op::ModDn { .. } = req.op {
            if let Some(msg) = moves_between_dsas(&routing, p, &dn, pdu, h) {
                return self.reply(req, Code::AffectsMultipleDSAs, "", &msg).await;
            }
        }
        // State the DSA keeps per connection (wire::state): such requests
        // run on a connection of the client's own, and those that continue
        // earlier state (pages, VLV windows, a transaction) go to the DSA
        // that holds it: paged results cookies are opaque and may repeat
        // across DSAs.
        let needs = state::needs(req);
        // Reads after this client's write go to the DSA that took it
        // (read-your-writes), while it is eligible.
        let affine = (!is_write && !needs.sticky)
            .then(|| self.affinity_dsa(&routing, p))
            .flatten();
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
            .then(|| self.state_sticky(&routing, p))
            .flatten()
            .or(affine)
            .or(sasl_home);
        let log = crate::access::enabled().then(|| {
            LogCtx::new(
                &self.log_client,
                req.op.name(),
                dn_text,
                &p.text,
                affine.map(|_| "read-your-writes"),
            )
        });
        let delivery = Arc::new(out::ToClient {
            out: self.out.clone(),
            msgid: req.msgid,
            resp_tag: req.op.response_tag().unwrap_or(0x78),
            rebind,
        });
        // A write's acknowledgement is noted (read-your-writes by position).
        let (delivery, mark) = crate::follow::ryw::watch(&router.replication, is_write, delivery);
        let want = dispatch::Want {
            // Its DSA is recorded as the one holding the state.
            pinned: needs.sticky,
            ..dispatch::Want::first(is_write, sticky)
        };
        let metrics = router.metrics.clone();
        self.out.track_placeholder(req.msgid);
        let via = self.via(needs.own_conn);
        let placed = dispatch::place(&routing, p, want, via, pdu, h, |t| {
            let retry = (!is_write && t.shared && target.is_none()).then(|| {
                Box::new(dispatch::Retry {
                    router: Arc::downgrade(&router),
                    pdu: pdu.clone(),
                    header: *h,
                    proxy_dn: t.proxy.clone(),
                    dn,
                    tried: t
                        .tried
                        .iter()
                        .map(|&i| routing.snap.dsas[i].name.clone())
                        .collect(),
                    hedge: false,
                }) as Box<dyn crate::upstream::Resend>
            });
            // A read on a shared connection may be hedged, unless it keeps
            // to the DSA that took the client's write.
            let hedge = if retry.is_some() && affine.is_none() && !needs.persistent {
                Hedge::Eligible
            } else {
                Hedge::No
            };
            Pending {
                sink: Sink::To(delivery),
                is_write,
                started: tokio::time::Instant::now(),
                log,
                delivered: false,
                hold: retry.is_some() && matches!(req.op, Op::Search { scope: 0, .. }),
                held: Default::default(),
                persistent: needs.persistent,
                hedge,
                heard_ms: 0,
                extra: None,
                retry,
                op: crate::metrics::op_index(req.op.name()) as u8,
                metrics: Some(metrics),
                _guard: None,
            }
        })
        .await;
        match placed {
            Ok(t) => {
                if is_write {
                    let name = routing.snap.dsas[t.dsa].name.clone();
                    self.note_write(p.key.clone(), name, mark);
                }
                if needs.sticky {
                    self.state_dsa
                        .insert(p.key.clone(), routing.snap.dsas[t.dsa].name.clone());
                }
            }
            Err(e) => {
                self.out.finish(req.msgid);
                self.answer(req, &e).await;
            }
        }
    }
}

/// Why a modify DN of `dn` (in partition `p`) cannot be done by one DSA,
/// if it cannot: its new DN lies in another partition or slot.
fn moves_between_dsas(
    routing: &crate::context::Routing,
    p: &crate::route::Partition,
    dn: &Dn,
    pdu: &[u8],
    h: &Header,
) -> Option<String> {
    let (newrdn, sup) = crate::wire::request::moddn_target(pdu, h)?;
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
pub(super) fn describe(p: &crate::route::Partition) -> String {
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
    /// there (read-your-writes: see `crate::replication::ryw`).
    pub(super) fn affinity_dsa(
        &self,
        routing: &crate::context::Routing,
        p: &crate::route::Partition,
    ) -> Option<usize> {
        if self.router.cfg.read_your_writes.is_zero() {
            return None;
        }
        let rep = &self.router.replication;
        match self.identity_key() {
            Some(dn) => self
                .router
                .affinity
                .get(&(dn, p.key.clone()))
                .and_then(|a| crate::follow::ryw::affine(rep, routing, p, &a)),
            None => self
                .affinity
                .get(&p.key)
                .and_then(|a| crate::follow::ryw::affine(rep, routing, p, a)),
        }
    }

    /// A write of partition `key` went to DSA `dsa`.
    fn note_write(&mut self, key: String, dsa: String, mark: Option<Arc<WriteMark>>) {
        let window = self.router.cfg.read_your_writes;
        if window.is_zero() {
            return;
        }
        let a = crate::replication::mark::Affinity::new(dsa, window, mark);
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
            (crate::config::AffinityScope::Identity, super::Identity::Bound(b))
                if !b.dn.is_empty() =>
            {
                Dn::parse_ldap(&b.dn).ok().map(|d| d.normalized())
            }
            _ => None,
        }
    }
}
