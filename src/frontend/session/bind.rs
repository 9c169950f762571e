//! Binds (architecture.md, "Identity"): routed like a read by the bind DN, sent on a fresh
//! connection of the client's own (never a shared one), verified by that
//! DSA. Success makes that connection the client's own for that DSA and
//! keeps the bind (in memory) for replay to other DSAs; failure leaves the
//! client anonymous (RFC 4513).
//!
//! Two binds never make an identity the router conveys:
//! * an *unauthenticated* bind (a name with an empty password, RFC 4513
//!   5.1.2) goes to the DSA, which answers it as it would directly (slapd:
//!   unwillingToPerform unless `allow bind_anon_dn`); on success the
//!   client stays anonymous, and the name is never conveyed or replayed;
//! * a bind as the router's own identity (any DSA's `ldap-dsa-name`) runs
//!   every later operation on the client's own connection, bound as itself.
//!
//! A bind response with a password policy warning or error (the router
//! asks for the control on every bind, [`crate::proto::wire::ppolicy`]) puts the
//! client on connections of its own on every DSA, bound as itself, so the
//! DSA enforces what it keeps per connection (`pwdMustChange`: only a
//! password change until then); `--own-connection always` does this for
//! every bound client.

use super::operation::Operation;
use super::{dispatch, Bound, Flow, Identity, Session};
use crate::backend::dsa_state::bind_deadline::Missed;
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pending::{Kind, Pending, Sink};
use crate::backend::upstream::pool::BindPdu;
use crate::directory::knowledge::{DsaId, DsaName};
use crate::directory::route::{Lookup, Partition};
use crate::proto::dn::Dn;
use crate::proto::wire::frame::{self, Header, Pdu};
use crate::proto::wire::ppolicy;
use crate::proto::wire::request::{Op, Request};
use crate::proto::wire::response::Code;
use crate::proto::wire::response::{rc, result_code};
use crate::service::config::OwnConnection;
use crate::service::context::Routing;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::sync::oneshot;

/// A bind the DSA answered: where, and its response.
struct Answered {
    dsa: DsaId,
    name: String,
    conn: Arc<Conn>,
    resp: Bytes,
    rh: Header,
}

/// A bind on its way to a DSA of partition `p`: the client's request, the
/// PDU sent for it (asking for the password policy response) and the
/// bind's trace, when sampled.
#[derive(Clone, Copy)]
struct Sending<'a> {
    req: &'a Request,
    routing: &'a Arc<Routing>,
    p: &'a Partition,
    sent: &'a Pdu,
    trace: Option<&'a crate::observe::otel::OpTrace>,
}

/// How one attempt at a bind on one DSA ended.
enum Attempt {
    Answered(Answered),
    /// The DSA did not answer within its bind deadline (`missed`), or
    /// lost the connection: the next DSA is tried.
    Failed {
        dsa: DsaId,
        why: String,
        missed: Option<Missed>,
    },
    /// A spare connection the DSA had closed: once more.
    SpareLost,
    /// The client was answered (nothing could be placed, or the response
    /// was malformed).
    Done,
}

impl Session {
    pub(super) async fn bind(&mut self, op: &Operation) -> Flow {
        let (pdu, h, req) = (&op.pdu.bytes, &op.pdu.h, &op.req);
        let Op::Bind {
            version,
            dn,
            simple,
            sasl,
        } = &req.op
        else {
            return Flow::Continue;
        };
        // Whatever happens next, the old identity ends here (a SASL
        // exchange in progress is continued or ended by this bind).
        let step = self.who.sasl.take();
        self.become_anonymous();
        if let (3, Some(mech)) = (*version, sasl) {
            return self.sasl_bind(op, dn, mech, step).await;
        }
        if let Some(s) = step {
            s.conn.close();
        }
        let password = match self.simple_bind_allowed(*version, dn, simple.as_deref()) {
            Ok(password) => password,
            Err((code, msg)) => {
                self.reply(req, code, "", msg).await;
                return Flow::Continue;
            }
        };
        let routing = self.router.routing();
        let (parsed, p) = match bind_partition(&routing, dn) {
            Ok(found) => found,
            Err((code, msg)) => {
                self.reply(req, code, "", &msg).await;
                return Flow::Continue;
            }
        };
        // The router asks every DSA for the password policy response (not
        // critical: DSAs without the overlay ignore it), so it learns of a
        // restriction whether or not the client asked.
        let trace = self.trace_for(req, dn, &p.text);
        let ticket = match self.admit_bind(&parsed, dn, password).await {
            Ok(ticket) => ticket,
            Err((code, msg)) => {
                if let Some(t) = &trace {
                    let why = if msg.is_empty() {
                        "failed-bind back-off"
                    } else {
                        msg
                    };
                    t.failed("", code.clone() as u8, why);
                }
                self.reply_in(req, code, "", msg, trace.as_deref()).await;
                return Flow::Continue;
            }
        };
        let client_ppolicy = req.control(ppolicy::OID_PPOLICY).is_some();
        let sent = with_ppolicy_request(pdu, h, client_ppolicy);
        let Ok(sent) = Pdu::read(sent) else {
            return self.malformed("bind request");
        };
        let started = std::time::Instant::now();
        let placed = self.place_bind(Sending {
            req,
            routing: &routing,
            p,
            sent: &sent,
            trace: trace.as_deref(),
        });
        let Some(a) = placed.await else {
            return Flow::Continue;
        };
        let code = result_code(&a.resp, &a.rh).unwrap_or(rc::OTHER);
        if let Some(t) = &trace {
            t.answered(&a.name, false, code);
        }
        let policy = ppolicy::Policy::of_response(&a.resp, &a.rh);
        let bound = (code == rc::SUCCESS && !password.is_empty()).then_some(&a.conn);
        let shown = self.shown_dn(dn, &parsed, bound).await;
        self.bind_counted(ticket, code, &shown);
        // A bind that made no identity is logged with the name as sent
        // (escaped); one that did, with the name it is known by.
        let logged = if bound.is_some() { shown.as_str() } else { dn };
        self.log_bind(logged, p, &a.name, code, policy.as_ref(), started);
        let conn = a.conn.clone();
        if code == rc::SUCCESS && password.is_empty() {
            // An unauthenticated bind (RFC 4513 5.1.2): the DSA took it as
            // anonymous, and so does the router. Its name is never
            // conveyed or replayed.
            tracing::info!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), dsa = %a.name, "unauthenticated bind (a name with an empty password): the client stays anonymous");
            conn.release();
        } else if code == rc::SUCCESS {
            let notable = policy.as_ref().filter(|p| p.is_notable()).cloned();
            self.become_bound(&routing, &a, (dn, &shown), &parsed, notable, sent.bytes);
        } else {
            conn.release();
        }
        let mut b = if policy.is_some() && !client_ppolicy {
            ppolicy::strip(&a.resp, &a.rh, req.msgid)
        } else {
            let mut b = BytesMut::with_capacity(a.resp.len() + 4);
            frame::rewrite(&a.resp, &a.rh, req.msgid, None, &mut b);
            b
        };
        self.client.out.send(b.split().freeze()).await;
        Flow::Continue
    }

    /// Whether a simple bind may go to a DSA: its password, or the answer
    /// the client gets at once (success for an anonymous bind).
    fn simple_bind_allowed<'a>(
        &self,
        version: i64,
        dn: &str,
        simple: Option<&'a [u8]>,
    ) -> Result<&'a [u8], (Code, &'static str)> {
        if version != 3 {
            return Err((
                Code::ProtocolError,
                "dsa-router: only LDAP version 3 is supported",
            ));
        }
        let Some(password) = simple else {
            return Err((
                Code::AuthMethodNotSupported,
                "dsa-router: only simple and SASL binds are supported",
            ));
        };
        if !password.is_empty() && !self.client.tls && self.router.cfg.require_tls_for_bind {
            tracing::info!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), "simple bind refused: the connection is not protected by TLS");
            return Err((
                Code::ConfidentialityRequired,
                "dsa-router: simple binds with a password need TLS (use LDAPS or StartTLS)",
            ));
        }
        match (dn.is_empty(), password.is_empty()) {
            (true, true) => Err((Code::Success, "")),
            (true, false) => Err((
                Code::InvalidCredentials,
                "dsa-router: a password without a bind name is not accepted",
            )),
            _ => Ok(password),
        }
    }

    /// The failed-bind defence's leave for a bind with a password (an
    /// unauthenticated bind is not counted), waiting up to --bind-timeout
    /// for a place among the DN's binds in flight; else the answer: in
    /// back-off invalidCredentials as from a DSA, busy after the wait.
    async fn admit_bind(
        &self,
        parsed: &Dn,
        dn: &str,
        password: &[u8],
    ) -> Result<Option<crate::admission::guard::Ticket>, (Code, &'static str)> {
        if password.is_empty() {
            return Ok(None);
        }
        let wait = self.router.cfg.limits().bind_timeout;
        match self
            .router
            .admission
            .failed_binds
            .admit_within(parsed, self.client.peer.ip(), wait)
            .await
        {
            Ok(t) => Ok(Some(t)),
            Err(crate::admission::guard::Refused::Busy) => {
                tracing::info!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), "bind answered busy: its DN's (address's) failures plus binds in flight stayed at --failed-bind-limit for --bind-timeout");
                Err((
                    Code::Busy,
                    "dsa-router: too many binds in flight for this name; retry",
                ))
            }
            Err(why) => {
                tracing::debug!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), ?why, "bind refused: failed-bind back-off");
                Err((Code::InvalidCredentials, ""))
            }
        }
    }

    /// The DSA's answer to a counted bind; a back-off it begins is logged.
    fn bind_counted(&self, ticket: Option<crate::admission::guard::Ticket>, code: u8, dn: &str) {
        let Some(began) = ticket.map(|t| t.answered(code)) else {
            return;
        };
        if began.dn {
            tracing::info!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), "failed-bind back-off begins for this DN from this client address: its binds from there are answered invalidCredentials by the router for --failed-bind-backoff");
        }
        if began.ceiling {
            tracing::info!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), "failed-bind back-off begins for this DN from every address (--failed-bind-limit-per-dn): its binds are answered invalidCredentials by the router for --failed-bind-backoff");
        }
        if began.address {
            tracing::info!(client = %self.client.peer, "failed-bind back-off begins for this client address: its binds are answered invalidCredentials by the router for --failed-bind-backoff");
        }
    }

    /// Place the bind like a read, on a fresh connection of the client's
    /// own, skipping the DSAs ejected for binds; a DSA that does not
    /// answer within its bind deadline (learned from its bind times, at
    /// most --bind-timeout: `bind_deadline`) or loses the connection has
    /// the bind given up, its connection closed, and the bind goes to the
    /// next DSA, like a read: one DSA at a time. A lost connection or the
    /// whole --bind-timeout counts as a failed probe; binds given up in a
    /// row may eject it for binds. `None`: the client was answered.
    async fn place_bind(&self, b: Sending<'_>) -> Option<Answered> {
        let Sending {
            req,
            routing,
            p,
            trace,
            ..
        } = b;
        let skipped = crate::backend::tail::skipped_for_binds(routing, p);
        let mut tried: Vec<DsaId> = Vec::new();
        let mut spare_lost = false;
        loop {
            let skip: Vec<DsaId> = skipped.iter().chain(&tried).copied().collect();
            let (dsa, why, missed) = match self.try_bind(b, skip, spare_lost).await {
                Attempt::Answered(a) => return Some(a),
                Attempt::Done => return None,
                Attempt::SpareLost => {
                    spare_lost = true;
                    continue;
                }
                Attempt::Failed { dsa, why, missed } => (dsa, why, missed),
            };
            let name = &routing.snap.dsas[dsa].name;
            let fall = self.router.cfg.health.as_ref().map_or(3, |h| h.fall);
            // A bind given up before --bind-timeout is no failed probe.
            if missed.is_none_or(|m| m.full) {
                routing.states.0[dsa].probe_failed(&format!("a bind {why}"), fall);
            }
            if missed.is_some_and(|m| m.eject) {
                crate::backend::tail::bind_timed_out(&self.router.backend, routing, p, dsa, &why);
            }
            tracing::warn!(client = %self.client.peer, dsa = %name, "bind {why}; trying the next DSA");
            tried.push(dsa);
            if tried.len() >= dispatch::MAX_ATTEMPTS {
                let names: Vec<&str> = tried
                    .iter()
                    .map(|&i| routing.snap.dsas[i].name.as_str())
                    .collect();
                let msg = format!(
                    "dsa-router: bind: no DSA answered ({}; last: {why})",
                    names.join(", ")
                );
                self.reply_in(req, Code::Unavailable, "", &msg, trace).await;
                return None;
            }
        }
    }

    /// Send the bind `b` to the DSA of its partition selection gives,
    /// skipping `skip`, and wait its bind deadline for its answer
    /// (`spare_lost`: a spare connection was lost once already).
    async fn try_bind(&self, b: Sending<'_>, skip: Vec<DsaId>, spare_lost: bool) -> Attempt {
        let Sending {
            req,
            routing,
            p,
            sent,
            trace,
        } = b;
        let (tx, rx) = oneshot::channel();
        let want = dispatch::Want {
            tried: skip,
            ..dispatch::Want::first(false, None)
        };
        let placed = dispatch::place(
            routing,
            p,
            want,
            dispatch::Via::Fresh(self.client.peer),
            sent,
            |_| Pending::new(Sink::Waiter(tx), Kind::fixed()),
        )
        .await;
        // A fresh connection is always had before placing.
        let (dsa, conn, id) = match placed.and_then(|t| match t.conn {
            Some(ref c) => Ok((t.dsa, c.clone(), t.id)),
            None => Err(crate::base::error::Error::new(
                crate::base::error::Kind::Unreachable,
                "no connection for the bind",
            )),
        }) {
            Ok(t) => t,
            Err(e) => {
                self.answer_in(req, &e, trace).await;
                return Attempt::Done;
            }
        };
        let name = routing.snap.dsas[dsa].name.clone();
        if let Some(t) = trace {
            t.placed(&name);
        }
        let ceiling = self.router.cfg.bind_timeout.min(self.router.cfg.op_timeout);
        let times = &routing.states.0[dsa].bind_times;
        let wait = times.deadline(ceiling);
        let sent_at = std::time::Instant::now();
        let (why, missed) = match tokio::time::timeout(wait, rx).await {
            Ok(Ok(resp)) => match frame::header(&resp) {
                Ok(rh) => {
                    times.answered(sent_at.elapsed());
                    return Attempt::Answered(Answered {
                        dsa,
                        name: name.to_string(),
                        conn,
                        resp,
                        rh,
                    });
                }
                Err(_) => {
                    conn.close();
                    let msg = "dsa-router: malformed bind response from DSA";
                    self.reply_in(req, Code::Other, "", msg, trace).await;
                    return Attempt::Done;
                }
            },
            Err(_) => (
                format!("timed out after {} s", wait.as_secs_f32()),
                Some(times.gave_up(wait, ceiling)),
            ),
            // A spare the DSA closed while it waited (an idle timeout):
            // not the DSA's fault; once more, on a new connection or
            // another spare.
            Ok(Err(_)) if conn.reused() && !spare_lost => return Attempt::SpareLost,
            Ok(Err(_)) => ("connection lost".to_string(), None),
        };
        conn.abandon(id);
        conn.close();
        Attempt::Failed { dsa, why, missed }
    }

    /// The bind's metrics and access-log line.
    fn log_bind(
        &self,
        dn: &str,
        p: &Partition,
        dsa: &str,
        code: u8,
        policy: Option<&ppolicy::Policy>,
        started: std::time::Instant,
    ) {
        self.router.backend.metrics.op(
            crate::observe::metrics::op_index("bind"),
            code,
            started.elapsed().as_micros() as u64,
        );
        if crate::observe::access::enabled() {
            let policy = policy.map(|p| p.to_string());
            crate::observe::access::line(|f| {
                f.head(&self.client.log_client)
                    .quoted("op", "bind")
                    .display("dn", &dn)
                    .plain("partition", &p.text)
                    .plain("dsa", dsa)
                    .num("result", u64::from(code))
                    .quoted_opt("ppolicy", policy.as_deref())
                    .num("latency_us", started.elapsed().as_micros() as u64);
            });
        }
    }

    /// A successful bind as `dn`: the client's identity (`shown`: the DN
    /// as the DSA names it, [`Session::shown_dn`]), kept for replay to
    /// other DSAs, and the bind's connection kept as its own there where
    /// its operations need one.
    fn become_bound(
        &mut self,
        routing: &Routing,
        a: &Answered,
        (dn, shown): (&str, &str),
        parsed: &Dn,
        notable: Option<ppolicy::Policy>,
        sent: Bytes,
    ) {
        let as_router = routing
            .snap
            .dsas
            .iter()
            .any(|d| d.ldap_dsa_name.as_ref() == Some(parsed));
        let own_conn = notable.is_some()
            || as_router
            || self.router.cfg.own_connection == OwnConnection::Always;
        if let Some(p) = &notable {
            tracing::info!(client = %self.client.peer, dn = %crate::base::logsafe::esc(&dn), dsa = %a.name, "password policy ({p}): the client's operations run on connections of its own");
        }
        // The bind's connection stays the client's own only where its
        // operations need one; on a DSA that trusts the router they run
        // on the shared connection, so idle bound clients pin nothing.
        if own_conn || !routing.pools[a.dsa].proxies() {
            self.who
                .private
                .insert(DsaName::new(&a.name), a.conn.clone());
        } else {
            a.conn.release();
        }
        let authz = format!("dn:{shown}");
        self.client.listed.bound(&authz);
        self.who.identity = Identity::Bound(Bound {
            dn: shown.to_string(),
            authz,
            conveyed: true,
            bind: Some(BindPdu::new(dn.to_string(), sent)),
            own_conn,
            policy: notable.is_some(),
        });
    }

    /// Wait for the DSA's answer to a bind step sent as `id` on `conn`.
    /// `None` when there is none to pass on: the client was answered (the
    /// DSA did not answer in time, the connection was lost, the response
    /// was malformed) and the connection closed.
    pub(super) async fn bind_response(
        &self,
        req: &Request,
        rx: oneshot::Receiver<Bytes>,
        conn: &Arc<Conn>,
        id: i32,
        dsa: &str,
        trace: Option<&crate::observe::otel::OpTrace>,
    ) -> Option<(Bytes, Header)> {
        let resp = match tokio::time::timeout(self.router.cfg.op_timeout, rx).await {
            Ok(Ok(r)) => r,
            waited => {
                let why = match waited {
                    Err(_) => "timed out",
                    _ => "connection lost",
                };
                conn.abandon(id);
                conn.close();
                let msg = format!("dsa-router: bind on DSA {dsa}: {why}");
                self.reply_in(req, Code::Unavailable, "", &msg, trace).await;
                return None;
            }
        };
        match frame::header(&resp) {
            Ok(h) => Some((resp, h)),
            Err(_) => {
                conn.close();
                let msg = "dsa-router: malformed bind response from DSA";
                self.reply_in(req, Code::Other, "", msg, trace).await;
                None
            }
        }
    }

    pub(super) fn become_anonymous(&mut self) {
        if matches!(self.who.identity, Identity::Bound(_)) {
            self.client.listed.anonymous();
        }
        self.who.identity = Identity::Anonymous;
        if let Some(s) = self.who.sasl.take() {
            s.conn.close();
        }
        // Operations of the old identity still placing (a read going to
        // another DSA) hold the old map: closed, it opens nothing more.
        self.who.private.release_all();
        self.who.private = super::own::Own::new(self.client.peer);
    }
}

/// The bind DN, parsed, and the partition holding it; else the answer
/// (a bind name in no partition cannot be verified: invalid credentials).
fn bind_partition<'r>(
    routing: &'r Routing,
    dn: &str,
) -> Result<(Dn, &'r Partition), (Code, String)> {
    let parsed = Dn::parse_ldap(dn).map_err(|e| {
        (
            Code::InvalidDNSyntax,
            format!("dsa-router: invalid bind DN: {e}"),
        )
    })?;
    match routing.table.lookup(&parsed) {
        Lookup::Partition(p) => Ok((parsed, p)),
        Lookup::NoPartition { .. } => Err((Code::InvalidCredentials, String::new())),
    }
}

/// The bind as sent to the DSA: asking for the password policy response
/// unless the client did.
fn with_ppolicy_request(pdu: &Bytes, h: &Header, client_ppolicy: bool) -> Bytes {
    if client_ppolicy {
        return pdu.clone();
    }
    let mut b = BytesMut::with_capacity(pdu.len() + 32);
    frame::rewrite(pdu, h, h.msgid, Some(&ppolicy::request_control()), &mut b);
    b.freeze()
}
