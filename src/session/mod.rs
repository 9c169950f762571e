//! One client connection.
//!
//! The session task reads PDUs, decodes each just enough to route it, and
//! forwards it at once to the DSA it belongs to, so a client may have many
//! operations outstanding across partitions; responses come back through the
//! upstream readers onto the client's bounded queue ([`out::ClientOut`]),
//! which a writer task drains. A bind is the one operation the session
//! awaits (RFC 4511 forbids other requests while a bind is in progress).
//!
//! Identity (spec 4.1): an anonymous client's operations run on unbound
//! shared connections; a bound client's run on the router's shared
//! connection with the proxied-authorization control where the DSA trusts
//! conveyed originators, otherwise on a connection of its own bound by
//! replaying its bind. Binds never travel on shared connections.

mod bind;
pub mod fanout;
mod local;
pub mod out;
pub mod retry;

use crate::dn::Dn;
use crate::metrics::Refusal;
use crate::route::{
    message, select_read, select_write, Excluding, Lookup, Partition, RouteError, Span,
};
use crate::router::{Router, Routing};
use crate::upstream::conn::{Conn, LogCtx, Pending, Sink};
use crate::upstream::pool::BindPdu;
use crate::wire::frame::{self, Header};
use crate::wire::request::{self, Op, Request, OID_PAGED_RESULTS, OID_PROXIED_AUTHZ};
use crate::wire::response::{self, Code};
use crate::wire::search;
use bytes::{Bytes, BytesMut};
use out::ClientOut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Who the client is.
enum Identity {
    Anonymous,
    /// Bound; the bind PDU is kept (in memory only) to replay it.
    Bound(Bound),
}

/// A bound client.
struct Bound {
    bind: BindPdu,
    /// Whether its operations run on connections of its own, bound as
    /// itself, on every DSA (never under proxied authorization): the DSA
    /// keeps state for it per connection (a password policy restriction),
    /// or the administrator asks for it (`--own-connection always`).
    own_conn: bool,
    /// Its bind response carried a password policy warning or error: the
    /// DSA may restrict it, so even WhoAmI is the DSA's to answer.
    policy: bool,
}

/// What to do after a request.
enum Flow {
    Continue,
    /// Close the connection, after a Notice of Disconnection if given.
    Close(Option<(Code, String)>),
    /// StartTLS accepted so far (message ID); the upgrade follows.
    StartTls(i32),
}

/// A DSA chosen for an operation, with its slot and connection.
struct Target {
    dsa: usize,
    conn: Arc<Conn>,
    /// The proxied-authorization identity to append, if any.
    proxy: Option<String>,
    /// Whether the connection is shared (reads on it may be re-sent).
    shared: bool,
    guard: crate::state::InFlight,
    /// DSAs that could not be reached on the way.
    tried: Vec<usize>,
}

/// Why an operation got no DSA.
enum NoTarget {
    /// Refused by the partition's state or a limit (counted by reason).
    Refused(Refusal, String),
    /// Answered with this result.
    Reply(Code, String),
}

struct Session {
    router: Arc<Router>,
    peer: SocketAddr,
    out: Arc<ClientOut>,
    identity: Identity,
    /// Connections of the client's own, by DSA name (lower case).
    private: HashMap<String, Arc<Conn>>,
    /// The DSA of this client's paged searches, by partition.
    paged_dsa: HashMap<String, String>,
    /// Whether the connection runs over TLS (LDAPS or after StartTLS).
    tls: bool,
}

/// Serve one client until it leaves, misbehaves, or shutdown.
pub async fn run(
    router: Arc<Router>,
    stream: impl Into<crate::tls::ClientStream>,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let stream = stream.into();
    let tls = stream.is_tls();
    let (mut rd, wr) = stream.split();
    let out = ClientOut::new(router.cfg.client_queue, router.cfg.client_queue_bytes);
    let done = CancellationToken::new();
    let mut pause = CancellationToken::new();
    let mut writer = tokio::spawn(writer(wr, out.clone(), done.clone(), pause.clone()));
    let mut s = Session {
        router: router.clone(),
        peer,
        out: out.clone(),
        identity: Identity::Anonymous,
        private: HashMap::new(),
        paged_dsa: HashMap::new(),
        tls,
    };
    let cfg = &router.cfg;
    // Buffers are taken only while data flows: an idle client holds none
    // (10,000 idle connections must stay small).
    let mut buf = BytesMut::new();
    let mut notice: Option<(Code, String)> = None;
    let mut pdu_started: Option<tokio::time::Instant> = None;
    let mut last_read = tokio::time::Instant::now();
    // Made once, not per read. The timer is boxed: it would otherwise be
    // part of every idle connection's task.
    let mut timer = Box::pin(tokio::time::sleep_until(far_future()));
    let kill = out.kill.clone();
    let mut killed = std::pin::pin!(kill.cancelled());
    let mut shut = std::pin::pin!(shutdown.changed());
    'conn: loop {
        let mut handled = false;
        loop {
            match frame::frame_len(&buf, cfg.max_request_pdu) {
                Ok(Some(len)) => {
                    let pdu = buf.split_to(len).freeze();
                    pdu_started = None;
                    handled = true;
                    // Boxed: the request path's state is large and would
                    // otherwise be part of every idle connection's task.
                    match Box::pin(s.handle(pdu)).await {
                        Flow::Continue => {}
                        Flow::Close(n) => {
                            notice = n;
                            break 'conn;
                        }
                        Flow::StartTls(msgid) => {
                            let link = (rd, writer, pause);
                            match Box::pin(s.start_tls(msgid, buf.is_empty(), link, &done)).await {
                                Ok(l) => (rd, writer, pause) = l,
                                Err(l) => {
                                    writer = l.1;
                                    break 'conn;
                                }
                            }
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(client = %peer, error = %e, "malformed PDU from client; disconnecting");
                    notice = Some((Code::ProtocolError, format!("dsa-router: {e}")));
                    break 'conn;
                }
            }
        }
        if handled {
            // Idle from the end of the last request's handling (a bind
            // may take long), not from its read.
            last_read = tokio::time::Instant::now();
        }
        // The PDU timeout runs from a PDU's first byte, however slowly
        // the rest trickles in; the idle timeout from the last read. The
        // timer is moved only when a deadline comes earlier than it is
        // set; when it fires early, it is set again (no timer work per
        // request).
        let due = if buf.is_empty() {
            pdu_started = None;
            (!cfg.idle_timeout.is_zero()).then(|| after(last_read, cfg.idle_timeout))
        } else {
            let started = *pdu_started.get_or_insert_with(tokio::time::Instant::now);
            Some(after(started, cfg.pdu_timeout))
        };
        if let Some(due) = due {
            if due < timer.deadline() {
                timer.as_mut().reset(due);
            }
        }
        tokio::select! {
            r = rd.read_some(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(_) => last_read = tokio::time::Instant::now(),
            },
            _ = &mut timer => match due {
                Some(due) if due <= tokio::time::Instant::now() => {
                    let what = if buf.is_empty() { "idle" } else { "incomplete PDU" };
                    tracing::info!(client = %peer, "{what} timeout; disconnecting");
                    notice = Some((Code::Unavailable, format!("dsa-router: {what} timeout")));
                    break;
                }
                Some(due) => timer.as_mut().reset(due),
                None => timer.as_mut().reset(far_future()),
            },
            _ = &mut killed => break,
            _ = &mut shut => {
                // Stop reading; let work in flight finish up to the grace.
                let deadline = Instant::now() + cfg.shutdown_grace;
                while out.outstanding() > 0 && Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                notice = Some((Code::Unavailable, "dsa-router: shutting down".into()));
                break;
            }
        }
    }
    if let Some((code, msg)) = notice {
        let mut b = BytesMut::new();
        response::notice_of_disconnection(code, &msg, &mut b);
        let _ = out.deliver(b.freeze());
    }
    out.abandon_all();
    for (_, c) in s.private.drain() {
        c.close();
    }
    done.cancel();
    // The writer flushes what is queued; a client that does not read gets
    // a few seconds, then its connection is dropped.
    if tokio::time::timeout(std::time::Duration::from_secs(3), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
    // The writer closes it, unless a failed StartTLS took it away first.
    out.ob.close();
}

/// A deadline that never comes (an hour is re-armed when it does).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(3600)
}

/// `t + d`, or the far future for a timeout too large to add.
fn after(t: tokio::time::Instant, d: std::time::Duration) -> tokio::time::Instant {
    t.checked_add(d).unwrap_or_else(far_future)
}

/// Drain what could not be written to the client at once, in batches.
/// On `pause` (StartTLS), flush and hand the write half back.
async fn writer(
    wr: crate::tls::ClientWrite,
    out: Arc<ClientOut>,
    done: CancellationToken,
    pause: CancellationToken,
) -> local::Paused {
    use crate::outbox::{Step, Wire};
    use crate::tls::ClientWrite;
    let mut wire = match wr {
        ClientWrite::Plain(w) => Wire::direct(w, &out.ob),
        tls => Wire::Stream(tls),
    };
    let kill = out.kill.clone();
    let mut buf = BytesMut::new();
    loop {
        match wire.drain_step(&out.ob, &mut buf, &kill).await {
            Step::Wrote => continue,
            Step::Failed => {
                kill.cancel();
                break;
            }
            Step::Idle => {}
        }
        tokio::select! {
            biased;
            _ = out.ob.notified() => {}
            _ = kill.cancelled() => break,
            _ = done.cancelled() => {
                // Flush what is queued (a final notice), then close.
                while out.ob.take(&mut buf) {
                    if wire.write_all(&buf).await.is_err() {
                        break;
                    }
                    buf.clear();
                }
                break;
            }
            _ = pause.cancelled() => {
                out.ob.detach();
                while out.ob.take(&mut buf) {
                    if wire.write_all(&buf).await.is_err() {
                        out.ob.close();
                        return None;
                    }
                    buf.clear();
                }
                return match wire.into_inner() {
                    Some(Ok(w)) => Some(ClientWrite::Plain(w)),
                    Some(Err(w)) => Some(w),
                    None => None,
                };
            }
        }
    }
    out.ob.close();
    wire.shutdown().await;
    None
}

impl Session {
    async fn handle(&mut self, pdu: Bytes) -> Flow {
        let h = match frame::header(&pdu) {
            Ok(h) => h,
            Err(e) => return self.malformed(&e.to_string()),
        };
        let req = match request::decode(&pdu) {
            Ok(r) => r,
            Err(e) => return self.malformed(&e.message),
        };
        if !matches!(req.op, Op::Unbind | Op::Abandon { .. }) {
            if let Err(over) = self.router.throttle.admit() {
                if matches!(req.op, Op::Bind { .. }) {
                    // A failed bind leaves the client anonymous (RFC 4513).
                    self.become_anonymous();
                }
                let why = match over {
                    crate::limits::Over::Cpu => Refusal::Cpu,
                    crate::limits::Over::Memory => Refusal::Memory,
                };
                self.refuse(&req, why, over.message()).await;
                return Flow::Continue;
            }
        }
        match &req.op {
            Op::Unbind => Flow::Close(None),
            Op::Abandon { target } => {
                self.out.abandon(*target);
                Flow::Continue
            }
            Op::Bind { .. } => self.bind(&pdu, &h, &req).await,
            Op::Extended { .. } => self.extended(&pdu, &h, &req).await,
            Op::Search { base, scope: 0, .. } if base.is_empty() => {
                self.root_dse(&req).await;
                Flow::Continue
            }
            _ => {
                self.forward(&pdu, &h, &req, None, false).await;
                Flow::Continue
            }
        }
    }

    fn malformed(&self, why: &str) -> Flow {
        tracing::warn!(client = %self.peer, error = %why, "undecodable request; disconnecting");
        Flow::Close(Some((Code::ProtocolError, format!("dsa-router: {why}"))))
    }

    /// Refuse a request because a limit or the partition's state says so:
    /// counted by reason, answered with `busy` (limits) or `unavailable`.
    async fn refuse(&self, req: &Request, why: Refusal, msg: &str) {
        self.router.metrics.refused(why);
        let code = match why {
            Refusal::Unavailable => Code::Unavailable,
            _ => Code::Busy,
        };
        self.reply(req, code, "", msg).await;
    }

    /// Answer a request with an LDAPResult of the router's own.
    async fn reply(&self, req: &Request, code: Code, matched: &str, msg: &str) {
        let Some(t) = req.op.response_tag() else {
            return;
        };
        let mut b = BytesMut::new();
        self.router.metrics.op(
            crate::metrics::op_index(req.op.name()),
            code.clone() as u8,
            0,
        );
        if self.router.cfg.access_log {
            let result = code.clone() as u32;
            tracing::info!(target: "access", client = %self.peer, op = req.op.name(), result, dsa = "-", "answered by the router: {msg}");
        }
        response::result(req.msgid, t, code, matched, msg, &mut b);
        self.out.send(b.freeze()).await;
    }

    /// Route and forward one operation. `target` overrides the DN the
    /// request names (Password Modify).
    /// Route and forward one operation. `target` overrides the DN the
    /// request names (Password Modify, WhoAmI with proxied authorization);
    /// `write` marks it an update.
    async fn forward(
        &mut self,
        pdu: &Bytes,
        h: &Header,
        req: &Request,
        target: Option<&str>,
        write: bool,
    ) {
        let router = self.router.clone();
        let cfg = &router.cfg;
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
        let dn = match Dn::parse_ldap(dn_text) {
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
        if let (Op::Search { scope, .. }, None) = (&req.op, target) {
            let spans = routing.table.spanning(&dn, *scope);
            if !spans.is_empty() {
                return Box::pin(self.fan_out(pdu, h, req, &routing, dn_text, spans)).await;
            }
        }
        let p = match routing.table.lookup(&dn) {
            Lookup::Partition(p) => p,
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
        // Paged results: servers keep paging state per connection (OpenLDAP
        // does), and cookies are opaque and may repeat across DSAs. So a
        // client's paged searches run on a connection of its own, and all
        // of them in one partition go to one DSA: the pages of a search
        // reach the DSA that issued the cookie.
        let paged = req.control(OID_PAGED_RESULTS);
        let sticky = paged.and_then(|_| self.paged_sticky(&routing, p));
        let own_conn = paged.is_some() || req.control(OID_PROXIED_AUTHZ).is_some();
        let t = match self.acquire(&routing, p, is_write, sticky, own_conn).await {
            Ok(t) => t,
            Err(NoTarget::Refused(why, msg)) => return self.refuse(req, why, &msg).await,
            Err(NoTarget::Reply(code, msg)) => return self.reply(req, code, "", &msg).await,
        };
        let Target {
            dsa,
            conn,
            proxy,
            shared,
            guard,
            tried,
        } = t;
        if paged.is_some() {
            self.paged_dsa
                .insert(p.prefix.normalized(), routing.snap.dsas[dsa].name.clone());
        }
        let log = cfg.access_log.then(|| {
            Box::new(LogCtx {
                client: self.peer,
                op: req.op.name(),
                dn: dn_text.to_string(),
                partition: p.prefix.to_string(),
            })
        });
        let retry = (!is_write && shared && target.is_none()).then(|| {
            Box::new(retry::Retry {
                router: Arc::downgrade(&self.router),
                pdu: pdu.clone(),
                header: *h,
                proxy_dn: proxy.clone(),
                dn,
                tried: tried
                    .iter()
                    .map(|&i| routing.snap.dsas[i].name.clone())
                    .collect(),
            })
        });
        self.out.track_placeholder(req.msgid);
        let pending = Pending {
            sink: Sink::Client {
                out: self.out.clone(),
                msgid: req.msgid,
            },
            resp_tag: req.op.response_tag().unwrap_or(0x78),
            is_write,
            started: Instant::now(),
            log,
            delivered: false,
            hold: retry.is_some() && matches!(req.op, Op::Search { scope: 0, .. }),
            held: Vec::new(),
            retry,
            op: crate::metrics::op_index(req.op.name()) as u8,
            metrics: Some(self.router.metrics.clone()),
            _guard: Some(guard),
        };
        let Some(id) = conn.register(pending) else {
            self.out.finish(req.msgid);
            let name = &routing.snap.dsas[dsa].name;
            return self
                .reply(
                    req,
                    Code::Unavailable,
                    "",
                    &format!("dsa-router: connection to DSA {name} closed"),
                )
                .await;
        };
        self.out.track(req.msgid, &conn, id);
        let proxy = proxy.as_deref().map(frame::proxy_authz_control);
        let mut b = BytesMut::with_capacity(pdu.len() + 64);
        frame::rewrite(pdu, h, id, proxy.as_deref(), &mut b);
        conn.send(b.freeze());
    }

    /// A search spanning partitions (spec 3.6): one search per partition,
    /// merged by a [`fanout::Fan`].
    async fn fan_out(
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
                fanout::Part::new(
                    s.partition.prefix.to_string(),
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
            let sticky = if paged {
                self.paged_sticky(routing, p)
            } else {
                None
            };
            let t = match self.acquire(routing, p, false, sticky, own_conn).await {
                Ok(t) => t,
                Err(NoTarget::Refused(why, msg)) => {
                    self.router.metrics.refused(why);
                    fan.failed(i, msg);
                    continue;
                }
                Err(NoTarget::Reply(_, msg)) => {
                    fan.failed(i, msg);
                    continue;
                }
            };
            let name = &routing.snap.dsas[t.dsa].name;
            if paged {
                self.paged_dsa.insert(p.prefix.normalized(), name.clone());
            }
            let base = s
                .base
                .map_or_else(|| base_text.to_string(), |b| b.to_string());
            let log = self.router.cfg.access_log.then(|| {
                Box::new(LogCtx {
                    client: self.peer,
                    op: "search",
                    dn: base.clone(),
                    partition: p.prefix.to_string(),
                })
            });
            let sub = search::rebase(pdu, h, &sh, &base, s.scope, control.as_deref()).freeze();
            let Ok(sub_h) = frame::header(&sub) else {
                fan.failed(i, "dsa-router: internal error re-basing the search".into());
                continue;
            };
            // On a shared connection, a partition's search that has sent
            // nothing yet is re-sent elsewhere when its DSA fails.
            let retry = match (t.shared, Dn::parse_ldap(&base)) {
                (true, Ok(dn)) => Some(Box::new(retry::Retry {
                    router: Arc::downgrade(&self.router),
                    pdu: sub.clone(),
                    header: sub_h,
                    proxy_dn: t.proxy.clone(),
                    dn,
                    tried: t
                        .tried
                        .iter()
                        .map(|&d| routing.snap.dsas[d].name.clone())
                        .collect(),
                })),
                _ => None,
            };
            let pending = Pending {
                sink: Sink::Fan {
                    fan: fan.clone(),
                    part: i,
                },
                resp_tag: crate::wire::frame::tag::SEARCH_DONE,
                is_write: false,
                started: Instant::now(),
                log,
                delivered: false,
                hold: false,
                held: Vec::new(),
                retry,
                op: crate::metrics::op_index("search") as u8,
                metrics: None,
                _guard: Some(t.guard),
            };
            let Some(id) = t.conn.register(pending) else {
                fan.failed(i, format!("dsa-router: connection to DSA {name} closed"));
                continue;
            };
            if !fan.running(i, &t.conn, id) {
                t.conn.forget(id);
                break;
            }
            let proxy = t.proxy.as_deref().map(frame::proxy_authz_control);
            let mut b = BytesMut::with_capacity(sub.len() + 64);
            frame::rewrite(&sub, &sub_h, id, proxy.as_deref(), &mut b);
            t.conn.send(b.freeze());
        }
    }

    /// The DSA of this client's paged searches in partition `p`, while it
    /// is still a target there.
    fn paged_sticky(&self, routing: &Routing, p: &Partition) -> Option<usize> {
        self.paged_dsa
            .get(&p.prefix.normalized())
            .and_then(|n| routing.snap.dsa_index(n))
            .filter(|&i| p.order.contains(&i) && routing.states.0[i].status().eligible())
    }

    /// Choose a DSA of partition `p` (spec 3.4 for reads, 3.5 for writes;
    /// `sticky` first if given), take its in-flight slot and get a
    /// connection with the client's identity (spec 4.1): a target that
    /// cannot be reached is marked down (passively) and the next one tried.
    /// `own_conn` asks for the client's own connection (paging, or a
    /// proxied-authorization control of the client's).
    async fn acquire(
        &mut self,
        routing: &Routing,
        p: &Partition,
        is_write: bool,
        sticky: Option<usize>,
        own_conn: bool,
    ) -> Result<Target, NoTarget> {
        let mut tried: Vec<usize> = Vec::new();
        let mut races = 0;
        loop {
            let view = Excluding {
                inner: &routing.states,
                tried: &tried,
            };
            let chosen = match sticky {
                Some(i) if tried.is_empty() => Ok(crate::route::Choice { group: 0, dsa: i }),
                _ if is_write => select_write(p, &view),
                _ => select_read(p, &view, p.tick()),
            };
            let dsa = match chosen {
                Ok(c) => c.dsa,
                Err(RouteError::Unavailable) => {
                    return Err(NoTarget::Refused(
                        Refusal::Unavailable,
                        message::unavailable(p, &routing.snap, &view),
                    ))
                }
                Err(RouteError::Busy { group }) => {
                    return Err(NoTarget::Refused(
                        Refusal::Concurrency,
                        message::busy(p, group, &routing.snap, &view),
                    ))
                }
            };
            // Take the in-flight slot atomically; losing a race for the
            // last slot means selecting again (never another group).
            let Some(guard) = routing.states.0[dsa].try_begin() else {
                races += 1;
                if races > 8 {
                    let msg = message::concurrency(&[routing.snap.dsas[dsa].name.as_str()]);
                    return Err(NoTarget::Refused(Refusal::Concurrency, msg));
                }
                continue;
            };
            let pool = routing.pools[dsa].clone();
            let (conn, proxy, shared) = match (&self.identity, own_conn) {
                (Identity::Anonymous, false) => (pool.shared(false).await, None, true),
                (Identity::Bound(b), false) if pool.proxies() && !b.own_conn => (
                    pool.shared(true).await,
                    Some(format!("dn:{}", b.bind.dn)),
                    true,
                ),
                _ => (
                    self.private_conn(&routing.snap.dsas[dsa].name, &pool).await,
                    None,
                    false,
                ),
            };
            match conn {
                Ok(conn) => {
                    return Ok(Target {
                        dsa,
                        conn,
                        proxy,
                        shared,
                        guard,
                        tried,
                    })
                }
                Err(crate::upstream::pool::UpstreamError::BindRefused { code, message }) => {
                    let msg = format!("dsa-router: your identity could not be established on DSA {} ({message}, result {code})", pool.dsa.name);
                    return Err(NoTarget::Reply(Code::InsufficentAccessRights, msg));
                }
                Err(e) => {
                    tracing::warn!(dsa = %pool.dsa.name, error = %e, "cannot reach DSA; trying the next target");
                    tried.push(dsa);
                    if is_write || tried.len() >= retry::MAX_ATTEMPTS {
                        let msg = format!("dsa-router: DSA {}: {e}", pool.dsa.name);
                        return Err(NoTarget::Reply(Code::Unavailable, msg));
                    }
                }
            }
        }
    }

    /// The client's own connection to a DSA, bound as the client.
    async fn private_conn(
        &mut self,
        name: &str,
        pool: &crate::upstream::pool::Pool,
    ) -> Result<Arc<Conn>, crate::upstream::pool::UpstreamError> {
        let key = name.to_ascii_lowercase();
        if let Some(c) = self.private.get(&key).filter(|c| c.is_alive()) {
            return Ok(c.clone());
        }
        let identity = match &self.identity {
            Identity::Bound(b) => Some(&b.bind),
            Identity::Anonymous => None,
        };
        let c = pool.private(identity).await?;
        self.private.insert(key, c.clone());
        Ok(c)
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
