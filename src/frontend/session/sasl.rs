//! SASL binds (RFC 4513 5.2, RFC 4422), forwarded to a DSA step by step on
//! one new connection: every step of an exchange goes to the connection
//! the first step went to (the DSA keeps the exchange there); success makes
//! that connection the client's own for that DSA.
//!
//! * Where: the partition of the bind name when it names one, else the
//!   home partition (the first in knowledge order), whose DSAs' mechanisms
//!   the router's root DSE lists.
//! * Identity: after success the router asks the DSA who the client is
//!   (WhoAmI on that connection). A SASL exchange cannot be replayed, so
//!   the client's operations run on that connection on that DSA, and under
//!   proxied authorization with that identity on DSAs that trust the
//!   router; a DSA that does neither refuses them.
//! * Conveyed only where vouched for: a `dn:` identity in a partition of
//!   the DSA that established it ([`vouched`]). Any other is used on that
//!   DSA only; other partitions refuse the client's operations.
//! * Failed binds: a step that names the user (PLAIN's first, CRAM-MD5's
//!   and DIGEST-MD5's response, SCRAM's client-first) takes its place in
//!   the failed-bind defence by that user ([`crate::proto::wire::sasl_name`]),
//!   refused as a simple bind is in back-off; the exchange's last answer
//!   counts (invalidCredentials a failure, success a reset).
//! * Security layers: the router reads every PDU, so it cannot carry a SASL
//!   integrity or confidentiality layer; it keeps one from being
//!   negotiated ([`crate::proto::wire::sasl`]: mechanisms it cannot strip of
//!   layers are refused, DIGEST-MD5's offer is rewritten), so DSAs keep
//!   their default settings. A client that wraps its traffic anyway is
//!   disconnected with a notice saying why.

use super::{dispatch, Bound, Flow, Identity, Session};
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pending::{Kind, Pending, Sink};
use crate::backend::upstream::pool;
use crate::directory::knowledge::DsaName;
use crate::proto::dn::Dn;
use crate::proto::wire::frame::{self, Header, Pdu};
use crate::proto::wire::request::{Request, OID_WHOAMI};
use crate::proto::wire::response::{self, rc, result_code, Code};
use crate::proto::wire::sasl as wsasl;
use crate::service::config::OwnConnection;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::sync::oneshot;

/// One step of a SASL bind as the client sent it: the PDU, the request
/// (answered in the bind's trace, when sampled), the bind name and the
/// mechanism.
#[derive(Clone, Copy)]
struct ClientStep<'a> {
    sent: &'a Pdu,
    req: &'a Request,
    dn: &'a str,
    mech: &'a str,
    trace: Option<&'a crate::observe::otel::OpTrace>,
}

/// A SASL exchange waiting for the client's next step.
pub(super) struct InProgress {
    pub conn: Arc<Conn>,
    /// The DSA it runs on.
    pub dsa: String,
    pub mech: String,
    /// The failed-bind defence's count of this exchange, once a step
    /// named its user; answered with the exchange's last step.
    pub ticket: Option<crate::admission::guard::Ticket>,
}

impl Session {
    pub(super) async fn sasl_bind(
        &mut self,
        op: &super::operation::Operation,
        dn: &str,
        mech: &str,
        mut step: Option<InProgress>,
    ) -> Flow {
        let (pdu, h, req) = (&op.pdu.bytes, &op.pdu.h, &op.req);
        let started = std::time::Instant::now();
        let trace = self.trace_for(req, dn, "");
        let trace = trace.as_deref();
        let refused = match self.refusal(pdu, h, mech) {
            Some(r) => Err(r),
            None => self
                .sasl_admit(pdu, h, mech)
                .await
                .map_err(|(c, m)| (c, m.to_string())),
        };
        let ticket = match refused {
            Ok(t) => t,
            Err((code, msg)) => {
                if let Some(s) = step {
                    s.conn.close();
                }
                self.reply_in(req, code, "", &msg, trace).await;
                return Flow::Continue;
            }
        };
        // The exchange's ticket: this step's if it names the user, else
        // the one an earlier step of the same exchange took.
        let carried = step
            .as_mut()
            .filter(|s| s.mech.eq_ignore_ascii_case(mech))
            .and_then(|s| s.ticket.take());
        let ticket = ticket.or(carried);
        let (tx, rx) = oneshot::channel();
        let asked = ClientStep {
            sent: &op.pdu,
            req,
            dn,
            mech,
            trace,
        };
        let sent = self.send_step(asked, step, tx);
        let Some((conn, dsa, id)) = sent.await else {
            return Flow::Continue;
        };
        if let Some(t) = trace {
            t.placed(&dsa);
        }
        let answered = self.bind_response(req, rx, &conn, id, &dsa, trace);
        let Some((resp, rh)) = answered.await else {
            return Flow::Continue;
        };
        let code = result_code(&resp, &rh).unwrap_or(rc::OTHER);
        let (resp, rh) = match no_layer_offered(mech, code, resp, rh) {
            Ok(r) => r,
            Err(msg) => {
                conn.close();
                let msg = format!("dsa-router: DSA {dsa} {msg}");
                self.reply_in(req, Code::AuthMethodNotSupported, "", &msg, trace)
                    .await;
                return Flow::Continue;
            }
        };
        if let Some(t) = trace {
            t.answered(&dsa, false, code);
        }
        let mut authz = None;
        match code {
            rc::SASL_IN_PROGRESS => {
                self.who.sasl = Some(InProgress {
                    conn,
                    dsa: dsa.clone(),
                    mech: mech.to_string(),
                    ticket,
                });
            }
            rc::SUCCESS => {
                self.sasl_counted(ticket, code, mech);
                authz = Some(self.established(conn, &dsa).await);
            }
            _ => {
                self.sasl_counted(ticket, code, mech);
                conn.close();
            }
        }
        crate::observe::access::line(|f| {
            f.head(&self.client.log_client)
                .quoted("op", "bind")
                .plain("mech", mech)
                .quoted_opt("authz", authz.as_deref())
                .plain("dsa", &dsa)
                .num("result", u64::from(code))
                .num("latency_us", started.elapsed().as_micros() as u64);
        });
        let mut b = BytesMut::with_capacity(resp.len() + 4);
        frame::rewrite(&resp, &rh, req.msgid, None, &mut b);
        self.client.out.send(b.freeze()).await;
        Flow::Continue
    }

    /// Send this step of a SASL exchange (`asked`): the next step of the
    /// one in progress (`step`) with the same mechanism, else the first of
    /// a new one on a fresh connection; its response goes to `tx`. `None`
    /// when the client was answered (no DSA).
    async fn send_step(
        &mut self,
        asked: ClientStep<'_>,
        step: Option<InProgress>,
        tx: oneshot::Sender<Bytes>,
    ) -> Option<(Arc<Conn>, String, i32)> {
        let ClientStep {
            sent: frame,
            req,
            dn,
            mech,
            trace,
        } = asked;
        // The next step of this client's exchange, if one is in progress
        // with the same mechanism; anything else starts afresh.
        let step = match step {
            Some(s) if s.conn.is_alive() && s.mech.eq_ignore_ascii_case(mech) => Some(s),
            Some(s) => {
                s.conn.close();
                None
            }
            None => None,
        };
        match step {
            Some(s) => {
                let sent = s.conn.submit(
                    Pending::new(Sink::Waiter(tx), Kind::fixed()),
                    &frame.bytes,
                    &frame.h,
                    None,
                    |_, _| true,
                );
                match sent {
                    Ok(id) => Some((s.conn, s.dsa, id)),
                    Err(_) => {
                        let msg = format!(
                            "dsa-router: the SASL exchange's connection to DSA {} was lost; start the bind again",
                            s.dsa
                        );
                        self.reply_in(req, Code::Unavailable, "", &msg, trace).await;
                        None
                    }
                }
            }
            None => {
                let routing = self.router.routing();
                let by_name = Dn::parse_ldap(dn)
                    .ok()
                    .filter(|d| !d.is_root())
                    .and_then(|d| routing.table.lookup(&d).partition());
                let Some(p) = by_name.or_else(|| routing.table.home()) else {
                    let msg = "dsa-router: no partition to send the SASL bind to";
                    self.reply_in(req, Code::Unavailable, "", msg, trace).await;
                    return None;
                };
                let want = dispatch::Want::first(false, None);
                let placed = dispatch::place(
                    &routing,
                    p,
                    want,
                    dispatch::Via::Fresh(self.client.peer),
                    frame,
                    |_| Pending::new(Sink::Waiter(tx), Kind::fixed()),
                )
                .await;
                match placed {
                    // A fresh connection is always had before placing.
                    Ok(crate::frontend::session::dispatch::Placed {
                        conn: Some(conn),
                        dsa,
                        id,
                        ..
                    }) => Some((conn, routing.snap.dsas[dsa].name.to_string(), id)),
                    Ok(_) => {
                        let e = crate::base::error::Error::new(
                            crate::base::error::Kind::Unreachable,
                            "no connection for the bind",
                        );
                        self.answer_in(req, &e, trace).await;
                        None
                    }
                    Err(e) => {
                        self.answer_in(req, &e, trace).await;
                        None
                    }
                }
            }
        }
    }

    /// The client's identity after its SASL bind on `conn` to DSA `dsa`
    /// succeeded, as the DSA says (WhoAmI): conveyed where [`vouched`].
    async fn established(&mut self, conn: Arc<Conn>, dsa: &str) -> String {
        let who = self.who_am_i(&conn).await;
        let dn = who.strip_prefix("dn:").unwrap_or_default().to_string();
        let conveyed = vouched(&self.router.routing(), dsa, &who);
        if !conveyed && !who.is_empty() {
            tracing::warn!(client = %self.client.peer, dsa = %dsa, authz = %crate::base::logsafe::esc(&who), "SASL identity not under a prefix its DSA holds: used on that DSA only, never conveyed");
        }
        self.who.private.insert(DsaName::new(dsa), conn);
        self.client.listed.bound(&who);
        self.who.identity = Identity::Bound(Bound {
            dn,
            authz: who.clone(),
            conveyed,
            bind: None,
            own_conn: self.router.cfg.own_connection == OwnConnection::Always,
            policy: false,
        });
        who
    }

    /// Why the router refuses this step of a SASL bind with `mech`, if it
    /// does: a mechanism it cannot carry, a password in the clear where
    /// `--require-tls-for-bind` asks for TLS, a DIGEST-MD5 response that
    /// chose a security layer.
    fn refusal(&self, pdu: &Bytes, h: &Header, mech: &str) -> Option<(Code, String)> {
        let kind = wsasl::classify(mech);
        if kind == wsasl::Mech::Refused {
            tracing::info!(client = %self.client.peer, mech = %crate::base::logsafe::esc(mech), "SASL bind refused: a mechanism the router does not carry");
            return Some((
                Code::AuthMethodNotSupported,
                format!("dsa-router: the SASL mechanism {mech:?} is not offered through the router (it may negotiate a security layer, or authenticate the router instead of the client); use PLAIN, SCRAM-* or DIGEST-MD5, over TLS for protection"),
            ));
        }
        if wsasl::sends_password(mech) && !self.client.tls && self.router.cfg.require_tls_for_bind {
            tracing::info!(client = %self.client.peer, mech = %crate::base::logsafe::esc(mech), "SASL bind refused: the connection is not protected by TLS");
            return Some((
                Code::ConfidentialityRequired,
                format!(
                    "dsa-router: {} binds send the password and need TLS (use LDAPS or StartTLS)",
                    mech.to_ascii_uppercase()
                ),
            ));
        }
        let creds = wsasl::bind_credentials(pdu, h).filter(|c| !c.is_empty());
        if let (wsasl::Mech::Digest, Some(c)) = (kind, creds) {
            if let Ok(qop) = wsasl::digest_qop(c) {
                if qop != "auth" {
                    return Some((
                        Code::AuthMethodNotSupported,
                        format!("dsa-router: a SASL security layer (qop={qop}) cannot be carried through the router; use qop=auth, and TLS for protection"),
                    ));
                }
            }
        }
        None
    }

    /// The notice for a client whose bytes are not LDAP (`e`): after a SASL
    /// bind, wrapped traffic (a security layer, RFC 4422 3.7: a 4-octet
    /// length first) gets its own explanation.
    pub(super) fn not_ldap(&self, e: &frame::FrameError) -> String {
        let sasl = matches!(
            &self.who.identity,
            Identity::Bound(Bound { bind: None, .. })
        );
        if sasl && *e == frame::FrameError::NotSequence(0) {
            "dsa-router: the client wrapped its requests in a SASL security layer, which the router cannot carry; bind with qop=auth (no layer) and use TLS for protection".to_string()
        } else {
            format!("dsa-router: {e}")
        }
    }

    /// Who the DSA says the client bound on `conn` is (`dn:...`, `u:...`),
    /// or empty when it cannot tell.
    pub(super) async fn who_am_i(&self, conn: &Arc<Conn>) -> String {
        let mut b = BytesMut::new();
        response::extended_request(1, OID_WHOAMI, None, &mut b);
        match pool::request(conn, &b, self.router.cfg.op_timeout).await {
            Ok(resp) => response::extended_value(&resp)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_default(),
            Err(e) => {
                tracing::warn!(client = %self.client.peer, error = %crate::base::logsafe::esc(&e), "WhoAmI after a SASL bind failed; the identity is unknown to the router");
                String::new()
            }
        }
    }
}

/// Whether DSA `dsa` may vouch for the identity `who` it established by
/// SASL, so that the router conveys it to other DSAs: only a `dn:`
/// identity held by a partition `dsa` serves (as a simple bind is routed
/// by its name to a DSA that holds it). A DSA's SASL configuration is its
/// own administrator's (`authz-regexp`, `authzTo`): one partition's DSA
/// could otherwise name any DN of another partition and have the router
/// act as it there. `u:` identities and unparsable DNs are never conveyed.
pub(super) fn vouched(routing: &crate::service::context::Routing, dsa: &str, who: &str) -> bool {
    let Some(dn) = who.strip_prefix("dn:").filter(|d| !d.is_empty()) else {
        return false;
    };
    let Ok(dn) = Dn::parse_ldap(dn) else {
        return false;
    };
    let Some(p) = routing.table.lookup(&dn).partition() else {
        return false;
    };
    p.order.iter().any(|&i| {
        routing
            .snap
            .dsas
            .get(i.index())
            .is_some_and(|d| d.name.eq_ignore_ascii_case(dsa))
    })
}

/// The DSA's answer to a SASL bind step with the security layers taken out
/// of a DIGEST-MD5 offer ([`wsasl::digest_auth_only`]); `Err` with why
/// when the DSA offers nothing else.
fn no_layer_offered(
    mech: &str,
    code: u8,
    resp: Bytes,
    rh: Header,
) -> Result<(Bytes, Header), &'static str> {
    if code != rc::SASL_IN_PROGRESS || wsasl::classify(mech) != wsasl::Mech::Digest {
        return Ok((resp, rh));
    }
    let Some(challenge) = wsasl::server_creds(&resp, &rh) else {
        return Ok((resp, rh));
    };
    match wsasl::digest_auth_only(challenge) {
        Ok(None) => Ok((resp, rh)),
        Ok(Some(auth)) => {
            let new = wsasl::with_server_creds(&resp, &rh, &auth)
                .ok_or("sent a bind response the router cannot read")?
                .freeze();
            let h = frame::header(&new).map_err(|_| "sent a bind response the router cannot read")?;
            Ok((new, h))
        }
        Err(wsasl::DigestError::LayerRequired) => {
            Err("offers DIGEST-MD5 only with a security layer (its minssf is above 0), which the router cannot carry")
        }
        Err(wsasl::DigestError::Malformed) => Err("sent a DIGEST-MD5 challenge the router cannot read"),
    }
}
