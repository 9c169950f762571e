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
//! * Security layers: the router reads every PDU, so it cannot carry a SASL
//!   integrity or confidentiality layer; DSAs should offer none
//!   (`sasl-secprops maxssf=0` in slapd) and clients use TLS instead. A
//!   client that installs a layer anyway is disconnected with a protocol
//!   error at its next request.

use super::{dispatch, Bound, Flow, Identity, Session};
use crate::config::OwnConnection;
use crate::dn::Dn;
use crate::upstream::conn::Conn;
use crate::upstream::pending::{Pending, Sink};
use crate::upstream::pool;
use crate::wire::frame::{self, Header};
use crate::wire::request::{Request, OID_WHOAMI};
use crate::wire::response::{self, result_code, Code};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Result code saslBindInProgress.
const IN_PROGRESS: u8 = 14;

/// A SASL exchange waiting for the client's next step.
pub(super) struct InProgress {
    pub conn: Arc<Conn>,
    /// The DSA it runs on.
    pub dsa: String,
    pub mech: String,
}

impl Session {
    pub(super) async fn sasl_bind(
        &mut self,
        pdu: &Bytes,
        h: &Header,
        req: &Request,
        dn: &str,
        mech: &str,
        step: Option<InProgress>,
    ) -> Flow {
        let started = std::time::Instant::now();
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
        let (tx, rx) = oneshot::channel();
        let (conn, dsa, id) = match step {
            Some(s) => {
                let sent = s
                    .conn
                    .submit(Pending::new(Sink::Waiter(tx)), pdu, h, None, |_, _| true);
                match sent {
                    Ok(id) => (s.conn, s.dsa, id),
                    Err(_) => {
                        let msg = format!(
                            "dsa-router: the SASL exchange's connection to DSA {} was lost; start the bind again",
                            s.dsa
                        );
                        self.reply(req, Code::Unavailable, "", &msg).await;
                        return Flow::Continue;
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
                    self.reply(req, Code::Unavailable, "", msg).await;
                    return Flow::Continue;
                };
                let want = dispatch::Want::first(false, None);
                let placed =
                    dispatch::place(&routing, p, want, dispatch::Via::Fresh, pdu, h, |_| {
                        Pending::new(Sink::Waiter(tx))
                    })
                    .await;
                match placed {
                    // A fresh connection is always had before placing.
                    Ok(crate::session::dispatch::Placed {
                        conn: Some(conn),
                        dsa,
                        id,
                        ..
                    }) => (conn, routing.snap.dsas[dsa].name.clone(), id),
                    Ok(_) => {
                        let e = crate::error::Error::new(
                            crate::error::Kind::Unreachable,
                            "no connection for the bind",
                        );
                        self.answer(req, &e).await;
                        return Flow::Continue;
                    }
                    Err(e) => {
                        self.answer(req, &e).await;
                        return Flow::Continue;
                    }
                }
            }
        };
        let Some((resp, rh)) = self.bind_response(req, rx, &conn, id, &dsa).await else {
            return Flow::Continue;
        };
        let code = result_code(&resp, &rh).unwrap_or(80);
        let mut authz = None;
        match code {
            IN_PROGRESS => {
                self.sasl = Some(InProgress {
                    conn,
                    dsa: dsa.clone(),
                    mech: mech.to_string(),
                });
            }
            0 => {
                let who = self.who_am_i(&conn).await;
                let dn = who.strip_prefix("dn:").unwrap_or_default().to_string();
                self.private.insert(dsa.to_ascii_lowercase(), conn);
                self.identity = Identity::Bound(Bound {
                    dn,
                    authz: who.clone(),
                    bind: None,
                    own_conn: self.router.cfg.own_connection == OwnConnection::Always,
                    policy: false,
                });
                authz = Some(who);
            }
            _ => conn.close(),
        }
        crate::access::line(|f| {
            f.head(&self.log_client)
                .quoted("op", "bind")
                .plain("mech", mech)
                .quoted_opt("authz", authz.as_deref())
                .plain("dsa", &dsa)
                .num("result", u64::from(code))
                .num("latency_us", started.elapsed().as_micros() as u64);
        });
        let mut b = BytesMut::with_capacity(resp.len() + 4);
        frame::rewrite(&resp, &rh, req.msgid, None, &mut b);
        self.out.send(b.freeze()).await;
        Flow::Continue
    }

    /// Who the DSA says the client bound on `conn` is (`dn:...`, `u:...`),
    /// or empty when it cannot tell.
    async fn who_am_i(&self, conn: &Arc<Conn>) -> String {
        let mut b = BytesMut::new();
        response::extended_request(1, OID_WHOAMI, None, &mut b);
        match pool::request(conn, &b, self.router.cfg.op_timeout).await {
            Ok(resp) => response::extended_value(&resp)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_default(),
            Err(e) => {
                tracing::warn!(client = %self.peer, error = %crate::logsafe::esc(&e), "WhoAmI after a SASL bind failed; the identity is unknown to the router");
                String::new()
            }
        }
    }
}
