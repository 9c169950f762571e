//! Searches that span partitions (spec 3.6), the session's side: paging
//! under the router's cookie, one re-based search per partition placed
//! through [`dispatch`](super::dispatch), merged by a [`Fan`].

use super::fanout::{self};
use super::logged::{LogCtx, Logged};
use super::{dispatch, refusal, Session};
use crate::context::Routing;
use crate::dn::Dn;
use crate::route::{Partition, Span};
use crate::upstream::pending::{Kind, Pending, Sink};
use crate::wire::frame::{self, Header};
use crate::wire::request::{Request, OID_PAGED_RESULTS, OID_PROXIED_AUTHZ};
use crate::wire::response::{self, Code};
use crate::wire::search;
use crate::wire::state;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

impl Session {
    /// A search spanning partitions (spec 3.6): one search per partition,
    /// merged by a [`fanout::Fan`].
    pub(super) async fn fan_out(
        &mut self,
        pdu: &Bytes,
        h: &Header,
        req: &Request,
        routing: &Arc<Routing>,
        base_text: &str,
        spans: Vec<Span<'_>>,
    ) {
        let sh = match search::head(pdu, h) {
            Ok(sh) => sh,
            Err(e) => {
                let msg = format!("dsa-router: {e}");
                return self.reply(req, Code::ProtocolError, "", &msg).await;
            }
        };
        let prefixes: Vec<String> = spans
            .iter()
            .map(|s| s.partition.prefix.normalized())
            .collect();
        // Controls whose state is one DSA's (sort, VLV, change streams, a
        // transaction): refused when critical, else the search runs
        // without them (RFC 4511 4.1.11).
        let mut strip: Vec<&str> = Vec::new();
        for c in req
            .controls
            .iter()
            .filter(|c| state::one_partition_only(&c.oid))
        {
            if c.critical {
                let msg = format!(
                    "dsa-router: the {} control cannot be honoured in a search that spans partitions ({}); search at or below one partition",
                    state::control_name(&c.oid),
                    prefixes.join("; ")
                );
                return self
                    .reply(req, Code::UnavailableCriticalExtension, "", &msg)
                    .await;
            }
            strip.push(c.oid.as_str());
        }
        // Paging: one partition per page request, under the router's cookie.
        let mut spans = spans;
        let mut paging = None;
        let mut page = (0u32, Vec::new());
        if let Some(c) = req.control(OID_PAGED_RESULTS) {
            let Some((size, cookie)) = c.value.as_deref().and_then(search::paged_value) else {
                let msg = "dsa-router: malformed paged results control";
                return self.reply(req, Code::ProtocolError, "", msg).await;
            };
            let norm_base = Dn::parse_ldap(base_text)
                .map(|d| d.normalized())
                .unwrap_or_default();
            let fp = fanout::fingerprint(&norm_base, sh.scope, &prefixes);
            let (index, dsa_cookie) = if cookie.is_empty() {
                (0, Vec::new())
            } else {
                match fanout::decode_cookie(&cookie) {
                    Some((f, i, c)) if f == fp && i < spans.len() => (i, c.to_vec()),
                    _ => {
                        let msg = "dsa-router: the paged results cookie does not belong to this search (or the partitions changed); start the search again";
                        return self.reply(req, Code::UnwillingToPerform, "", msg).await;
                    }
                }
            };
            if size == 0 {
                // The client ends the paged search (RFC 2696 3).
                let mut b = BytesMut::new();
                let ctl = search::paged_control(0, &[]);
                response::search_done_with_control(req.msgid, "", &ctl, &mut b);
                self.out.send(b.freeze()).await;
                return;
            }
            let partitions = spans.len();
            spans = spans.into_iter().skip(index).take(1).collect();
            paging = Some(fanout::Paging {
                fingerprint: fp,
                index,
                partitions,
            });
            page = (size, dsa_cookie);
        }
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
            self.out.clone(),
            req.msgid,
            sh.size_limit,
            self.router.cfg.fanout_policy,
            paging,
            self.router.metrics.clone(),
            parts,
        );
        self.out.track_fan(req.msgid, &fan);
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
        let own_conn = paged || req.control(OID_PROXIED_AUTHZ).is_some();
        let control = paged.then(|| search::paged_control(page.0, &page.1));
        for (i, s) in spans.iter().enumerate() {
            if fan.is_finished() {
                break;
            }
            let p = s.partition;
            // Paged: the DSA of the cookie; else read-your-writes affinity.
            let sticky = if paged {
                self.state_sticky(routing, p)
            } else {
                self.affinity_dsa(routing, p)
            };
            let base = s
                .base
                .map_or_else(|| base_text.to_string(), |b| b.to_string());
            let log = crate::access::enabled()
                .then(|| LogCtx::new(&self.log_client, "search", &base, &p.text, None));
            let mut sub = search::rebase(pdu, h, &sh, &base, s.scope, control.as_deref());
            if !strip.is_empty() {
                if let Ok(sh) = frame::header(&sub) {
                    sub = search::without_controls(&sub, &sh, sh.msgid, &strip);
                }
            }
            let sub = sub.freeze();
            let Ok(sub_h) = frame::header(&sub) else {
                fan.failed(i, "internal error re-basing the search".into());
                continue;
            };
            let want = dispatch::Want {
                // Its DSA is recorded as the one holding the pages.
                pinned: paged,
                ..dispatch::Want::first(false, sticky)
            };
            let part = fanout::FanPart {
                fan: fan.clone(),
                part: i,
            };
            // On a shared connection, a partition's search that has sent
            // nothing yet is re-sent elsewhere when its DSA fails.
            let resend = Dn::parse_ldap(&base).ok().map(|dn| {
                super::resend::Again::first(&self.router, Arc::new(dn), sub.clone(), sub_h, false)
            });
            let want = dispatch::Want { resend, ..want };
            let via = self.via(own_conn);
            let pending = Pending::new(Sink::To(Logged::new(part, log)), Kind::fixed());
            let placed = dispatch::place(routing, p, want, via, &sub, &sub_h, |_| pending).await;
            match placed {
                Ok(t) if paged => {
                    let name = routing.snap.dsas[t.dsa].name.clone();
                    self.state_dsa.insert(p.key.clone(), name);
                }
                Ok(_) => {}
                Err(e) => {
                    if let Some(why) = refusal(&e) {
                        self.router.metrics.refused(why);
                    }
                    fan.failed(i, e.to_string());
                }
            }
        }
    }

    /// The DSA that holds this client's state in partition `p` (its paged
    /// searches, VLV contexts, transaction), while it is still a target
    /// there.
    pub(super) fn state_sticky(&self, routing: &Routing, p: &Partition) -> Option<usize> {
        self.state_dsa
            .get(&p.key)
            .and_then(|n| routing.snap.dsa_index(n))
            .filter(|&i| p.order.contains(&i) && routing.states.0[i].status().eligible())
    }
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
