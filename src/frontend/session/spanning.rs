//! Searches that span partitions (architecture.md, "What the router answers itself"), the session's side: paging
//! under the router's cookie, one re-based search per partition placed
//! through [`dispatch`](super::dispatch), merged by a [`Fan`].

use super::fanout::{self};
use super::logged::LogCtx;
use super::operation::Operation;
use super::{dispatch, refusal, Session};
use crate::backend::upstream::pending::{Kind, Pending};
use crate::directory::knowledge::DsaId;
use crate::directory::route::{Partition, Span};
use crate::proto::dn::Dn;
use crate::proto::wire::frame::{self, Header, Pdu};
use crate::proto::wire::request::{Request, OID_PAGED_RESULTS, OID_PROXIED_AUTHZ};
use crate::proto::wire::response::{self, Code};
use crate::proto::wire::search;
use crate::proto::wire::state;
use crate::service::context::Routing;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

impl Session {
    /// A search spanning partitions (architecture.md, "What the router answers itself"): one search per partition,
    /// merged by a [`fanout::Fan`].
    pub(super) async fn fan_out(
        &mut self,
        op: &Operation,
        routing: &Arc<Routing>,
        spans: Vec<Span<'_>>,
    ) {
        let (pdu, h, req, base_text) = (&op.pdu.bytes, &op.pdu.h, &op.req, op.dn());
        let Some(FanPlan {
            sh,
            strip,
            spans,
            paging,
            page,
        }) = self.fan_plan(pdu, h, req, base_text, spans).await
        else {
            return;
        };
        let paged = paging.is_some();
        if let Some(msg) = self.resumed_lost(routing, &spans, &page.1) {
            let e = crate::base::error::Error::router(crate::base::error::Kind::Unavailable, msg);
            self.answer(req, &e).await;
            return;
        }
        let fan = self.fan_for(req, routing, base_text, &spans, &sh, paging);
        self.trace_fan(req, base_text, &spans, &fan);
        let own_conn = paged || req.control(OID_PROXIED_AUTHZ).is_some();
        let control = paged.then(|| search::paged_control(page.0, &page.1));
        for (i, s) in spans.iter().enumerate() {
            if fan.is_finished() {
                break;
            }
            let p = s.partition;
            // Paged: the DSA of the cookie; else read-your-writes affinity.
            let (sticky, only) = if paged {
                (self.state_sticky(routing, p), None)
            } else {
                let kept = self.affinity_dsa(routing, p);
                let only = kept.as_ref().and_then(|k| k.only.clone());
                (kept.and_then(|k| k.dsa), only)
            };
            let base = s
                .base
                .map_or_else(|| base_text.to_string(), |b| b.to_string());
            let log = crate::observe::access::enabled()
                .then(|| LogCtx::new(&self.client.log_client, "search", &base, &p.text, None));
            let sub = search::rebase(pdu, h, &sh, &base, s.scope, control.as_deref());
            let Some((sub, sub_h)) = without(sub, &strip) else {
                fan.failed(i, "internal error re-basing the search".into());
                continue;
            };
            let want = dispatch::Want {
                // Its DSA is recorded as the one holding the pages.
                pinned: paged,
                only: only.clone(),
                ..dispatch::Want::first(false, sticky)
            };
            let part = fanout::FanPart {
                fan: fan.clone(),
                part: i,
            };
            // On a shared connection, a partition's search that has sent
            // nothing yet is re-sent elsewhere when its DSA fails.
            let resend = Dn::parse_ldap(&base).ok().map(|dn| {
                let (dn, sub) = (Arc::new(dn), Pdu::new(sub.clone(), sub_h));
                super::resend::Again::first(&self.router, dn, sub, false, only)
            });
            let want = dispatch::Want { resend, ..want };
            let trace = fan.trace.get().map(|t| t.leg(&p.text, &base));
            let hide = op.rights.hide.clone();
            let (sink, _) = super::stack::build(part, hide, log, trace, None);
            let via = self.via(own_conn);
            let pending = Pending::new(sink, Kind::fixed());
            let placed =
                dispatch::place(routing, p, want, via, &Pdu::new(sub, sub_h), |_| pending).await;
            match placed {
                Ok(t) if paged => {
                    let name = routing.snap.dsas[t.dsa].name.clone();
                    self.note_paged(p, req, &name);
                    self.places.state_dsa.insert(p.key.clone(), name);
                }
                Ok(_) => {}
                Err(e) => {
                    if let Some(why) = refusal(&e) {
                        self.router.backend.metrics.refused(why);
                    }
                    fan.failed(i, e.to_string());
                }
            }
        }
    }

    /// A page of a paged spanning search that resumes the DSA's cookie
    /// (`dsa_cookie`) of its one partition, whose connection is gone:
    /// the router's answer ([`super::paged_lost`]), also when this
    /// connection never read those pages. A page that starts a partition
    /// carries no cookie of a DSA and goes anywhere.
    fn resumed_lost(
        &self,
        routing: &Routing,
        spans: &[Span<'_>],
        dsa_cookie: &[u8],
    ) -> Option<String> {
        if dsa_cookie.is_empty() {
            return None;
        }
        let p = spans.first()?.partition;
        if self.who.private.paged(&p.key).is_none() {
            // The router's cookie, but not this connection's pages (another
            // connection's, or from before a bind, which closed the
            // client's own connections): the DSA's cookie is not valid on
            // any connection this client has.
            return Some(format!(
                "dsa-router: the paged search's pages in {} were read on another connection (or before a bind) and cannot be resumed on this one: start the search again from the first page",
                p.prefix
            ));
        }
        self.paged_lost_in(routing, p)
    }

    /// The search's head, the controls to strip and the page to read;
    /// `None` when the client was answered (a malformed search, a critical
    /// control that cannot span partitions, a bad cookie, the end of a
    /// paged search).
    async fn fan_plan<'r, 'p>(
        &self,
        pdu: &Bytes,
        h: &Header,
        req: &'r Request,
        base_text: &str,
        spans: Vec<Span<'p>>,
    ) -> Option<FanPlan<'r, 'p>> {
        let sh = match search::head(pdu, h) {
            Ok(sh) => sh,
            Err(e) => {
                let msg = format!("dsa-router: {e}");
                self.reply(req, Code::ProtocolError, "", &msg).await;
                return None;
            }
        };
        let prefixes: Vec<String> = spans
            .iter()
            .map(|s| s.partition.prefix.normalized())
            .collect();
        let strip = match one_partition_controls(req, &prefixes) {
            Ok(strip) => strip,
            Err(e) => {
                self.reply(req, e.code(), "", &e.message()).await;
                return None;
            }
        };
        match page_of(req, base_text, sh.scope, &prefixes, spans) {
            Ok(Some((spans, paging, page))) => Some(FanPlan {
                sh,
                strip,
                spans,
                paging,
                page,
            }),
            Ok(None) => {
                // The client ends the paged search (RFC 2696 3).
                let mut b = BytesMut::new();
                let ctl = search::paged_control(0, &[]);
                response::search_done_with_control(req.msgid, "", &ctl, &mut b);
                self.client.out.send(b.freeze()).await;
                None
            }
            Err((code, msg)) => {
                self.reply(req, code, "", msg).await;
                None
            }
        }
    }

    /// Trace the spanning search `fan` when traces are on and it is
    /// sampled: a span for the search (its partitions' shares are
    /// children of it).
    fn trace_fan(&self, req: &Request, base: &str, spans: &[Span<'_>], fan: &fanout::Fan) {
        if !crate::observe::otel::enabled() {
            return;
        }
        let ctl = req.control(crate::observe::otel::OID_TRACE_CONTEXT);
        let ctl = ctl.and_then(|c| c.value.as_deref());
        let partitions: Vec<&str> = spans.iter().map(|s| s.partition.text.as_str()).collect();
        let client = self.client.peer.to_string();
        if let Some(t) =
            crate::observe::otel::start("search", base, &partitions.join("; "), &client, ctl)
        {
            let _ = fan.trace.set(t);
        }
    }

    /// The [`fanout::Fan`] merging the partitions' searches, one part per
    /// span, tracked for abandon and expired at the search's time limit.
    fn fan_for(
        &self,
        req: &Request,
        routing: &Routing,
        base_text: &str,
        spans: &[Span<'_>],
        sh: &search::SearchHead,
        paging: Option<fanout::Paging>,
    ) -> Arc<fanout::Fan> {
        let paged = paging.is_some();
        let parts = spans
            .iter()
            .map(|s| {
                let base = s
                    .base
                    .map_or_else(|| base_text.to_string(), |b| b.to_string());
                // A slot of a horizontal partition is named with its slot.
                let label = match &s.partition.hash {
                    Some(h) => format!("{} slot {}", s.partition.prefix, h.slot),
                    None => s.partition.prefix.to_string(),
                };
                fanout::Part::new(
                    label,
                    continuation_urls(routing, s.partition, &base, s.scope),
                )
            })
            .collect();
        let fan = fanout::Fan::new(
            self.client.out.clone(),
            req.msgid,
            sh.size_limit,
            self.router.cfg.fanout_policy,
            paging,
            self.router.backend.metrics.clone(),
            parts,
        );
        self.client.out.track_fan(req.msgid, &fan);
        if sh.time_limit > 0 && !paged {
            let weak = Arc::downgrade(&fan);
            let secs = sh.time_limit;
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_secs(secs as u64)).await;
                if let Some(fan) = weak.upgrade() {
                    fan.expire(secs);
                }
            });
        }
        fan
    }

    /// The DSA that holds this client's state in partition `p` (its paged
    /// searches, VLV contexts, transaction), while it is still a target
    /// there.
    pub(super) fn state_sticky(&self, routing: &Routing, p: &Partition) -> Option<DsaId> {
        self.places
            .state_dsa
            .get(&p.key)
            .and_then(|n| routing.snap.dsa_index(n))
            .filter(|&i| p.order.contains(&i) && routing.states.0[i].status().eligible())
    }
}

/// A spanning search ready to go out: its head, the controls stripped
/// from the partitions' searches, the spans this request reads, and the
/// paging state with the DSA's page size and cookie.
struct FanPlan<'r, 'p> {
    sh: search::SearchHead,
    strip: Vec<&'r str>,
    spans: Vec<Span<'p>>,
    paging: Option<fanout::Paging>,
    page: (u32, Vec<u8>),
}

/// Controls whose state is one DSA's (sort, VLV, change streams, a
/// transaction): their OIDs, stripped from the partitions' searches (RFC
/// 4511 4.1.11); `Err`, the refusal (unavailableCriticalExtension), when
/// one is critical.
fn one_partition_controls<'r>(
    req: &'r Request,
    prefixes: &[String],
) -> crate::base::error::Result<Vec<&'r str>> {
    let mut strip: Vec<&str> = Vec::new();
    for c in req
        .controls
        .iter()
        .filter(|c| state::one_partition_only(&c.oid))
    {
        if c.critical {
            return Err(crate::base::error::Error::new(
                crate::base::error::Kind::Refused(Code::UnavailableCriticalExtension),
                format!(
                    "the {} control cannot be honoured in a search that spans partitions ({}); search at or below one partition",
                    state::control_name(&c.oid),
                    prefixes.join("; ")
                ),
            ));
        }
        strip.push(c.oid.as_str());
    }
    Ok(strip)
}

/// A page of a paged search and the spans it reads.
type Page<'p> = (Vec<Span<'p>>, Option<fanout::Paging>, (u32, Vec<u8>));

/// Paging: one partition per page request, under the router's cookie.
/// The spans to search (all of them when the search is not paged), the
/// paging state and the DSA's page size and cookie; `None` when the
/// client ends the paged search; `Err`, the answer, for a bad control or
/// a cookie of another search.
fn page_of<'p>(
    req: &Request,
    base_text: &str,
    scope: u8,
    prefixes: &[String],
    spans: Vec<Span<'p>>,
) -> Result<Option<Page<'p>>, (Code, &'static str)> {
    let Some(c) = req.control(OID_PAGED_RESULTS) else {
        return Ok(Some((spans, None, (0, Vec::new()))));
    };
    let Some((size, cookie)) = c.value.as_deref().and_then(search::paged_value) else {
        return Err((
            Code::ProtocolError,
            "dsa-router: malformed paged results control",
        ));
    };
    let norm_base = Dn::parse_ldap(base_text)
        .map(|d| d.normalized())
        .unwrap_or_default();
    let fp = fanout::fingerprint(&norm_base, scope, prefixes);
    let (index, dsa_cookie) = if cookie.is_empty() {
        (0, Vec::new())
    } else {
        match fanout::decode_cookie(&cookie) {
            Some((f, i, c)) if f == fp && i < spans.len() => (i, c.to_vec()),
            _ => {
                return Err((Code::UnwillingToPerform, "dsa-router: the paged results cookie does not belong to this search (or the partitions changed); start the search again"));
            }
        }
    };
    if size == 0 {
        return Ok(None);
    }
    let partitions = spans.len();
    let spans = spans.into_iter().skip(index).take(1).collect();
    let paging = fanout::Paging {
        fingerprint: fp,
        index,
        partitions,
    };
    Ok(Some((spans, Some(paging), (size, dsa_cookie))))
}

/// A partition's search without the `strip` controls, with its header.
fn without(sub: BytesMut, strip: &[&str]) -> Option<(Bytes, Header)> {
    let mut sub = sub;
    if !strip.is_empty() {
        if let Ok(sh) = frame::header(&sub) {
            sub = search::without_controls(&sub, &sh, sh.msgid, strip);
        }
    }
    let sub = sub.freeze();
    let sub_h = frame::header(&sub).ok()?;
    Some((sub, sub_h))
}

/// LDAP URLs (RFC 4516) for a continuation reference to partition `p`:
/// one per address of each of its DSAs, in its ordered list.
fn continuation_urls(routing: &Routing, p: &Partition, base: &str, scope: u8) -> Vec<String> {
    let scope = match scope {
        0 => "base",
        1 => "one",
        _ => "sub",
    };
    let dn = url_escape(base);
    p.order
        .iter()
        .flat_map(|&i| routing.snap.dsas[i].addresses.iter())
        .map(|a| {
            if a.host.contains(':') {
                format!("ldap://[{}]:{}/{dn}??{scope}", a.host, a.port)
            } else {
                format!("ldap://{}:{}/{dn}??{scope}", a.host, a.port)
            }
        })
        .collect()
}

/// Percent-encode a DN for an LDAP URL (RFC 4516 2.1).
fn url_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"=,+-._~;".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
