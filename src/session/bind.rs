//! Binds (spec 4.1): routed like a read by the bind DN, sent on a fresh
//! connection of the client's own (never a shared one), verified by that
//! DSA. Success makes that connection the client's own for that DSA and
//! keeps the bind (in memory) for replay to other DSAs; failure leaves the
//! client anonymous (RFC 4513).

use super::{Flow, Identity, Session};
use crate::dn::Dn;
use crate::metrics::Refusal;
use crate::route::{message, select_read, Lookup, RouteError};
use crate::upstream::conn::result_code;
use crate::upstream::pool::{request as upstream_request, BindPdu};
use crate::wire::frame::{self, Header};
use crate::wire::request::{Op, Request};
use crate::wire::response::Code;
use bytes::{Bytes, BytesMut};

impl Session {
    pub(super) async fn bind(&mut self, pdu: &Bytes, h: &Header, req: &Request) -> Flow {
        let Op::Bind {
            version,
            dn,
            simple,
        } = &req.op
        else {
            return Flow::Continue;
        };
        // Whatever happens next, the old identity ends here.
        self.become_anonymous();
        if *version != 3 {
            self.reply(
                req,
                Code::ProtocolError,
                "",
                "dsa-router: only LDAP version 3 is supported",
            )
            .await;
            return Flow::Continue;
        }
        let Some(password) = simple else {
            self.reply(
                req,
                Code::AuthMethodNotSupported,
                "",
                "dsa-router: only simple binds are supported",
            )
            .await;
            return Flow::Continue;
        };
        if !password.is_empty() && !self.tls && self.router.cfg.require_tls_for_bind {
            tracing::info!(client = %self.peer, dn = %dn, "simple bind refused: the connection is not protected by TLS");
            self.reply(
                req,
                Code::ConfidentialityRequired,
                "",
                "dsa-router: simple binds with a password need TLS (use LDAPS or StartTLS)",
            )
            .await;
            return Flow::Continue;
        }
        if dn.is_empty() {
            if password.is_empty() {
                self.reply(req, Code::Success, "", "").await;
            } else {
                self.reply(
                    req,
                    Code::InvalidCredentials,
                    "",
                    "dsa-router: a password without a bind name is not accepted",
                )
                .await;
            }
            return Flow::Continue;
        }
        let parsed = match Dn::parse_ldap(dn) {
            Ok(d) => d,
            Err(e) => {
                self.reply(
                    req,
                    Code::InvalidDNSyntax,
                    "",
                    &format!("dsa-router: invalid bind DN: {e}"),
                )
                .await;
                return Flow::Continue;
            }
        };
        let routing = self.router.routing();
        let p = match routing.table.lookup(&parsed) {
            Lookup::Partition(p) => p,
            Lookup::NoPartition { .. } => {
                self.reply(req, Code::InvalidCredentials, "", "").await;
                return Flow::Continue;
            }
        };
        let dsa = match select_read(p, &routing.states, p.tick()) {
            Ok(c) => c.dsa,
            Err(RouteError::Unavailable) => {
                let msg = message::unavailable(p, &routing.snap, &routing.states);
                self.refuse(req, Refusal::Unavailable, &msg).await;
                return Flow::Continue;
            }
            Err(RouteError::Busy { group }) => {
                let msg = message::busy(p, group, &routing.snap, &routing.states);
                self.refuse(req, Refusal::Concurrency, &msg).await;
                return Flow::Continue;
            }
        };
        let pool = routing.pools[dsa].clone();
        let Some(_guard) = routing.states.0[dsa].try_begin() else {
            let msg = message::concurrency(&[routing.snap.dsas[dsa].name.as_str()]);
            self.refuse(req, Refusal::Concurrency, &msg).await;
            return Flow::Continue;
        };
        let conn = match pool.private(None).await {
            Ok(c) => c,
            Err(e) => {
                self.reply(
                    req,
                    Code::Unavailable,
                    "",
                    &format!("dsa-router: DSA {}: {e}", pool.dsa.name),
                )
                .await;
                return Flow::Continue;
            }
        };
        let started = std::time::Instant::now();
        let resp = match upstream_request(&conn, pdu, self.router.cfg.op_timeout).await {
            Ok(r) => r,
            Err(e) => {
                conn.close();
                self.reply(
                    req,
                    Code::Unavailable,
                    "",
                    &format!("dsa-router: bind on DSA {}: {e}", pool.dsa.name),
                )
                .await;
                return Flow::Continue;
            }
        };
        let Ok(rh) = frame::header(&resp) else {
            conn.close();
            self.reply(
                req,
                Code::Other,
                "",
                "dsa-router: malformed bind response from DSA",
            )
            .await;
            return Flow::Continue;
        };
        let code = result_code(&resp, &rh).unwrap_or(80);
        if self.router.cfg.access_log {
            tracing::info!(target: "access", client = %self.peer, op = "bind", dn = %dn, partition = %p.prefix, dsa = %pool.dsa.name, result = code, latency_us = started.elapsed().as_micros() as u64);
        }
        if code == 0 {
            let key = routing.snap.dsas[dsa].name.to_ascii_lowercase();
            self.private.insert(key, conn);
            self.identity = Identity::Bound(BindPdu::new(dn.clone(), pdu.clone()));
        } else {
            conn.close();
        }
        let _ = h;
        let mut b = BytesMut::with_capacity(resp.len() + 4);
        frame::rewrite(&resp, &rh, req.msgid, None, &mut b);
        self.out.send(b.freeze()).await;
        Flow::Continue
    }

    pub(super) fn become_anonymous(&mut self) {
        self.identity = Identity::Anonymous;
        for (_, c) in self.private.drain() {
            c.close();
        }
    }
}
