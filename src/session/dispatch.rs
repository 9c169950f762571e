//! The one place where an operation meets a DSA.
//!
//! [`place`] chooses a DSA of the partition (spec 3.4 for reads, 3.5 for
//! writes, a sticky DSA first when given), takes its in-flight slot, gets a
//! connection that carries the right identity (spec 4.1), builds the
//! pending operation and submits it. Plain forwarding, every part of a
//! spanning search and every re-send ([`Retry`]) go through it, so a policy
//! about *where* an operation runs (connection pinning, hedging, affinity)
//! is one change here.
//!
//! Identity ([`Via`]): an anonymous client runs on the DSA's unbound shared
//! connection; a bound client on the router's shared connection with the
//! proxied-authorization control where the DSA trusts conveyed originators,
//! otherwise (or when it must keep a connection of its own) on a connection
//! of its own bound by replaying its bind, opened in a task of its own
//! while the operation waits ([`super::own`]). Re-sends use shared
//! connections only.
//!
//! (Over 500 lines by design: the choice, the slot, the connection and the
//! submission, and the re-send that goes through them again, are one path
//! that is easier to check whole.)

use super::own::{Have, Opening, Outcome, Own};
use super::send::Outgoing;
use super::{Bound, Identity};
use crate::context::{Context, Routing};
use crate::dn::Dn;
use crate::error::{Error, Kind};
use crate::route::{
    message, select_read, select_write, Choice, Excluding, Lookup, Partition, RouteError,
};
use crate::upstream::conn::Conn;
use crate::upstream::pending::{Pending, Sink};
use crate::upstream::pool::Pool;
use crate::upstream::Resend;
use crate::wire::frame::Header;
use bytes::Bytes;
use futures::FutureExt;
use std::sync::{Arc, Weak};

/// Attempts per operation, the first included.
pub(super) const MAX_ATTEMPTS: usize = 3;

/// Which connections an operation may run on.
pub(super) enum Via<'s> {
    /// Shared connections only (re-sends): anonymous (`None`) or the
    /// router's, with proxied authorization as `dn:...`.
    Shared(Option<String>),
    /// A new connection, not bound (binds: the connection becomes the
    /// client's own when the bind succeeds).
    Fresh,
    /// A client's operation: by its identity, on connections of its own
    /// (`own`, by lower-case DSA name) where needed; `own_conn` asks for
    /// one whatever the identity (paging, a client's own proxied
    /// authorization control).
    Client {
        identity: &'s Identity,
        own: &'s Arc<Own>,
        own_conn: bool,
    },
}

/// How to choose among the partition's DSAs.
#[derive(Default)]
pub(super) struct Want {
    pub is_write: bool,
    /// This DSA first, while it is eligible (paged searches).
    pub sticky: Option<usize>,
    /// DSAs already tried (they are skipped).
    pub tried: Vec<usize>,
    /// Only a DSA of the group this one belongs to (hedges).
    pub group_of: Option<usize>,
    /// The caller records the DSA it is placed on (state the DSA keeps
    /// per connection): once placed, it is never moved to another.
    pub pinned: bool,
}

impl Want {
    /// A first attempt: nothing tried yet.
    pub(super) fn first(is_write: bool, sticky: Option<usize>) -> Want {
        Want {
            is_write,
            sticky,
            tried: Vec::new(),
            group_of: None,
            pinned: false,
        }
    }
}

impl super::Session {
    /// This client's way onto DSA connections; `own_conn` asks for a
    /// connection of its own whatever its identity.
    pub(super) fn via(&mut self, own_conn: bool) -> Via<'_> {
        Via::Client {
            identity: &self.identity,
            own: &self.private,
            own_conn,
        }
    }
}

/// Where an operation went.
pub(super) struct Placed {
    pub dsa: usize,
    /// Its connection; `None` while a shared connection to the DSA is
    /// being made (the operation is sent once it is, without holding up
    /// the client's other operations).
    pub conn: Option<Arc<Conn>>,
    /// The proxied-authorization identity it carries, if any.
    pub proxy: Option<String>,
    /// Whether the connection is shared (a read on it may be re-sent).
    pub shared: bool,
    /// DSAs that could not be reached on the way.
    pub tried: Vec<usize>,
    /// Its message ID on `conn`.
    pub id: i32,
}

/// Place one operation on a DSA of partition `p` and send it. `build`
/// makes the pending operation once the target is known (its in-flight
/// slot is added here); the PDU goes out with its message ID rewritten and
/// the proxied-authorization control appended where identity needs it.
///
/// `Err` means nothing was built: the caller answers. Once built, the
/// operation is answered through its delivery whatever happens.
pub(super) async fn place(
    routing: &Arc<Routing>,
    p: &Partition,
    want: Want,
    mut via: Via<'_>,
    pdu: &[u8],
    h: &Header,
    build: impl FnOnce(&Placed) -> Pending,
) -> Result<Placed, Error> {
    let Want {
        is_write,
        sticky,
        mut tried,
        group_of,
        pinned,
    } = want;
    let mut races = 0;
    loop {
        let dsa = choose(routing, p, is_write, sticky, group_of, &tried)?;
        // Take the in-flight slot atomically; losing a race for the last
        // slot means selecting again (never another group).
        let Some(guard) = routing.states.0[dsa].try_begin() else {
            races += 1;
            if races > 8 {
                let msg = message::concurrency(&[routing.snap.dsas[dsa].name.as_str()]);
                return Err(Error::router(Kind::Busy, msg));
            }
            continue;
        };
        let pool = &routing.pools[dsa];
        let name = &routing.snap.dsas[dsa].name;
        let mut opening = None;
        let (conn, proxy, shared) = match connection(&mut via, pool, name).await {
            Ok((Got::Now(c), proxy, shared)) => (Some(c), proxy, shared),
            Ok((Got::Later, proxy, shared)) => (None, proxy, shared),
            Ok((Got::Queued(o), proxy, shared)) => {
                opening = Some(o);
                (None, proxy, shared)
            }
            Err(Next::Fail(e)) => return Err(e),
            Err(Next::Skip(e)) => {
                tracing::warn!(dsa = %name, error = %crate::logsafe::esc(&e), "cannot reach DSA; trying the next target");
                tried.push(dsa);
                if is_write {
                    return Err(Error::new(Kind::Unreachable, format!("DSA {name}: {e}")));
                }
                continue;
            }
        };
        // The operation's span is a debug one: below that level there is
        // nothing to record in, and `Span::current` costs a registry
        // look-up and a clone per operation.
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            tracing::Span::current().record("dsa", name.as_str());
        }
        let mut placed = Placed {
            dsa,
            conn,
            proxy,
            shared,
            tried,
            id: 0,
        };
        let mut pending = build(&placed);
        pending._guard = Some(guard);
        let out = Outgoing::prepare(
            pool,
            &routing.states,
            dsa,
            &mut placed.proxy,
            &mut pending,
            pdu,
            h,
        );
        if let Some(o) = opening {
            // A read that cannot have the client's connection goes to the
            // next DSA of its partition, as it would have inline.
            let again = match &via {
                Via::Client {
                    identity,
                    own,
                    own_conn,
                } if !(is_write || pinned) => {
                    Again::new(routing, p, identity, own, *own_conn, &placed.tried, pdu, h)
                }
                _ => None,
            };
            wait_for_own(o, again, out, pending, pdu, h, dsa, name, is_write);
            return Ok(placed);
        }
        match placed.conn.clone() {
            Some(conn) => placed.id = out.submit(&conn, pending, pdu, h, name).unwrap_or(0),
            None => out.after_connect(
                pool.clone(),
                placed.proxy.is_some(),
                pending,
                pdu,
                h,
                name.clone(),
            ),
        }
        return Ok(placed);
    }
}

/// The DSA of partition `p` to try next, skipping those `tried`: the
/// sticky one first (the DSA holding the client's state), else by the
/// write order or the read groups. `Err` when none can take it, or when
/// the attempts are used up.
fn choose(
    routing: &Routing,
    p: &Partition,
    is_write: bool,
    sticky: Option<usize>,
    group_of: Option<usize>,
    tried: &[usize],
) -> Result<usize, Error> {
    if tried.len() >= MAX_ATTEMPTS {
        let names: Vec<&str> = tried
            .iter()
            .map(|&i| routing.snap.dsas[i].name.as_str())
            .collect();
        let msg = message::unavailable(p, &routing.snap, &routing.states);
        return Err(Error::router(
            Kind::Unreachable,
            format!(
                "no answer after {} attempts ({}); {}",
                tried.len(),
                names.join(", "),
                msg.strip_prefix("dsa-router: ").unwrap_or(&msg)
            ),
        ));
    }
    let view = Excluding {
        inner: &routing.states,
        tried,
    };
    let chosen = match sticky {
        Some(i) if tried.is_empty() => Ok(Choice { group: 0, dsa: i }),
        _ if is_write => select_write(p, &view),
        _ => select_read(p, &view, p.tick()),
    };
    let dsa = match chosen {
        Ok(c) => c.dsa,
        Err(RouteError::Unavailable) => {
            let msg = message::unavailable(p, &routing.snap, &view);
            return Err(Error::router(Kind::Unavailable, msg));
        }
        Err(RouteError::Busy { group }) => {
            let msg = message::busy(p, group, &routing.snap, &view);
            return Err(Error::router(Kind::Busy, msg));
        }
        Err(RouteError::ReadOnly) => {
            let msg = message::read_only(p, &routing.snap);
            return Err(Error::router(Kind::Unsupported, msg));
        }
    };
    if let Some(first) = group_of {
        if !p.group_of(first).is_some_and(|g| g.members.contains(&dsa)) {
            let msg = format!(
                "dsa-router: no other DSA of {}'s group can take the read",
                routing.snap.dsas[first].name
            );
            return Err(Error::router(Kind::Unavailable, msg));
        }
    }
    Ok(dsa)
}

/// The client's own connection to DSA `name` is being opened: the
/// operation waits for it behind the client's earlier ones there, without
/// holding up its others; `again` places a read elsewhere when it cannot
/// have it.
#[allow(clippy::too_many_arguments)]
fn wait_for_own(
    o: Arc<Opening>,
    again: Option<Again>,
    out: Outgoing,
    pending: Pending,
    pdu: &[u8],
    h: &Header,
    dsa: usize,
    name: &str,
    is_write: bool,
) {
    let (pdu, h, name) = {
        let (b, h) = out.pdu(pdu, h);
        (Bytes::copy_from_slice(b), h, name.to_string())
    };
    o.enqueue(Box::new(move |outcome| match outcome {
        Outcome::Open(conn) => {
            // Its silence counts from here, not from its wait.
            let mut pending = pending;
            pending.heard();
            out.submit(conn, pending, &pdu, &h, &name);
        }
        Outcome::Failed(e) => match (refusal(&name, e.clone()), again) {
            (Next::Skip(e), Some(a)) => a.elsewhere(pending, dsa, &name, e),
            (Next::Skip(e), None) => pending.fail(
                &name,
                Error::new(Kind::Unreachable, format!("DSA {name}: {e}")),
            ),
            (Next::Fail(e), _) => pending.fail(&name, e),
        },
        Outcome::Dropped => pending.fail(
            &name,
            Error::new(
                Kind::ConnectionLost { write: is_write },
                format!(
                    "the client bound again or left before its connection to DSA {name} was open"
                ),
            ),
        ),
    }));
}

/// A connection had at once, or one being made.
enum Got {
    Now(Arc<Conn>),
    /// A shared connection being made.
    Later,
    /// The client's own connection being opened.
    Queued(Arc<Opening>),
}

/// Why a DSA's connection could not be had.
enum Next {
    /// Try the next DSA (unreachable, or not usable for this identity).
    Skip(Error),
    /// Give up: the client's identity was refused.
    Fail(Error),
}

/// A connection to `pool`'s DSA for `via`: (connection, proxied identity,
/// shared).
async fn connection(
    via: &mut Via<'_>,
    pool: &Arc<Pool>,
    name: &str,
) -> Result<(Got, Option<String>, bool), Next> {
    // A shared connection open now, else one to be made after placing.
    let shared = |routed: bool| match pool.shared_now(routed) {
        Some(c) => Got::Now(c),
        None => Got::Later,
    };
    match via {
        Via::Fresh => {
            // Boxed: opening a connection (connect, TLS) is a large state,
            // and a rare one; inline it would be part of every operation's
            // future.
            let c = Box::pin(pool.private(crate::upstream::pool::Own::ForBind))
                .await
                .map_err(skip_unless_busy)?;
            Ok((Got::Now(c), None, false))
        }
        Via::Shared(proxy) => {
            if proxy.is_some() && !pool.proxies() {
                return Err(Next::Skip(Error::new(
                    Kind::Unreachable,
                    format!("DSA {name} does not trust the router's conveyed identities"),
                )));
            }
            Ok((shared(proxy.is_some()), proxy.clone(), true))
        }
        Via::Client {
            identity,
            own,
            own_conn,
        } => {
            if own.closed() {
                // An operation of an identity that has ended (a read
                // going to another DSA after the client bound again).
                return Err(Next::Fail(super::own::left()));
            }
            // A SASL identity is used where it was made, on its DSA.
            let sasl_here = matches!(&**identity, Identity::Bound(Bound { bind: None, .. }))
                && own.has(&name.to_ascii_lowercase());
            let got = match (&**identity, *own_conn) {
                (Identity::Anonymous, false) => Ok((shared(false), None, true)),
                // An identity the router does not know (a SASL bind whose
                // WhoAmI failed) or that its DSA could not vouch for is
                // never conveyed.
                (Identity::Bound(b), false)
                    if pool.proxies()
                        && !b.own_conn
                        && !sasl_here
                        && b.conveyed
                        && !b.authz.is_empty() =>
                {
                    Ok((shared(true), Some(b.authz.clone()), true))
                }
                (identity, _) => {
                    own_connection(identity, own, name, pool).map(|g| (g, None, false))
                }
            };
            got.map_err(|e| refusal(name, e))
        }
    }
}

/// What a failure to have the client's connection to DSA `name` means: a
/// refused identity ends the operation, like a DSA at its limit of
/// clients' own connections; any other failure skips the DSA.
fn refusal(name: &str, e: Error) -> Next {
    match e {
        Error {
            kind: Kind::BindRefused(code),
            text,
        } => Next::Fail(Error::new(
            Kind::BindRefused(code),
            format!("your identity could not be established on DSA {name} ({text}, result {code})"),
        )),
        e => skip_unless_busy(e),
    }
}

/// A DSA that cannot be reached is skipped; one at its limit of clients'
/// own connections answers `busy` (the limit is the administrator's).
fn skip_unless_busy(e: Error) -> Next {
    if e.kind == Kind::Busy {
        Next::Fail(e)
    } else {
        Next::Skip(e)
    }
}

/// The client's own connection to a DSA, bound as the client (a simple
/// bind replayed; a SASL identity only where it was made): open, or being
/// opened in a task of its own.
fn own_connection(
    identity: &Identity,
    own: &Arc<Own>,
    name: &str,
    pool: &Arc<Pool>,
) -> Result<Got, Error> {
    let have = own.get_or_open(&name.to_ascii_lowercase(), pool, || match identity {
        Identity::Bound(Bound { bind: Some(b), .. }) => Ok(Some(b.clone())),
        // SASL: the identity lives on the connection it was made on.
        Identity::Bound(Bound { conveyed: false, authz, .. }) => Err(Error::new(
            Kind::BindRefused(crate::wire::response::Code::InappropriateAuthentication as u8),
            format!("the SASL identity {authz} was established by a DSA that does not hold it; it is used on that DSA only, not on DSA {name}"),
        )),
        Identity::Bound(_) => Err(Error::new(
            Kind::BindRefused(crate::wire::response::Code::InappropriateAuthentication as u8),
            format!("a SASL identity cannot be carried to DSA {name} on a connection of its own; bind with a simple bind for operations there"),
        )),
        Identity::Anonymous => Ok(None),
    })?;
    Ok(match have {
        Have::Open(c) => Got::Now(c),
        Have::Opening(o) => Got::Queued(o),
    })
}

/// What a read waiting for the client's own connection to a DSA needs to
/// go to the next DSA of its partition when that connection cannot be
/// opened.
struct Again {
    routing: Arc<Routing>,
    /// Its partition, by index in the routing table.
    part: usize,
    identity: Identity,
    own: Arc<Own>,
    own_conn: bool,
    /// DSAs already tried.
    tried: Vec<usize>,
    /// The client's request, as it came.
    pdu: Bytes,
    h: Header,
}

impl Again {
    /// What a read placed on partition `p` for `identity` needs to be
    /// placed again elsewhere (`None` when `p` is not in `routing`).
    #[allow(clippy::too_many_arguments)]
    fn new(
        routing: &Arc<Routing>,
        p: &Partition,
        identity: &Identity,
        own: &Arc<Own>,
        own_conn: bool,
        tried: &[usize],
        pdu: &[u8],
        h: &Header,
    ) -> Option<Again> {
        let part = routing
            .table
            .partitions()
            .iter()
            .position(|q| std::ptr::eq(q, p))?;
        Some(Again {
            routing: routing.clone(),
            part,
            identity: identity.clone(),
            own: own.clone(),
            own_conn,
            tried: tried.to_vec(),
            pdu: Bytes::copy_from_slice(pdu),
            h: *h,
        })
    }

    /// Place `p` (failed on DSA `failed`, `name`, with `why`) on the next
    /// DSA, as [`place`] would have had the connection failed inline.
    /// Placing on a client's connections does not wait (a connection not
    /// open yet is waited for by the operation, not here), so it is done
    /// at once: reads that waited together keep their order. Were it ever
    /// to wait, it goes on in a task of its own.
    fn elsewhere(self, mut p: Pending, failed: usize, name: &str, why: Error) {
        tracing::warn!(dsa = %name, error = %crate::logsafe::esc(&why), "cannot reach DSA; trying the next target");
        p._guard = None;
        p.heard();
        // The failed DSA's native tree is not the next one's.
        if let Some(e) = p.extra.as_mut() {
            e.map = None;
        }
        let mut moved = Some(p);
        let placed = self.place(failed, &mut moved).now_or_never();
        match (placed, moved) {
            (Some(Err(e)), Some(p)) => p.fail("", e),
            (None, Some(p)) => {
                tokio::spawn(async move {
                    let mut moved = Some(p);
                    if let (Err(e), Some(p)) = (self.place(failed, &mut moved).await, moved) {
                        p.fail("", e);
                    }
                });
            }
            // Placed, or built and answered through its delivery.
            _ => {}
        }
    }

    /// Place the pending operation in `moved` on a DSA of its partition
    /// not tried yet (nor `failed`); it stays in `moved` when it was not
    /// built.
    async fn place(&self, failed: usize, moved: &mut Option<Pending>) -> Result<Placed, Error> {
        let Some(partition) = self.routing.table.partitions().get(self.part) else {
            return Err(Error::router(
                Kind::Unavailable,
                "dsa-router: no such partition".into(),
            ));
        };
        let mut tried = self.tried.clone();
        tried.push(failed);
        let want = Want {
            is_write: false,
            sticky: None,
            tried,
            group_of: None,
            pinned: false,
        };
        let via = Via::Client {
            identity: &self.identity,
            own: &self.own,
            own_conn: self.own_conn,
        };
        place(
            &self.routing,
            partition,
            want,
            via,
            &self.pdu,
            &self.h,
            |_| moved.take().unwrap_or_else(|| Pending::new(Sink::Detached)),
        )
        .await
    }
}

/// What a read needs to be sent again (spec 3.4, 5): a search or compare
/// that failed before any response reached the client (its DSA's
/// connection died, the DSA went down while the read waited on it, or the
/// read timed out) goes to the next eligible DSA, within
/// [`MAX_ATTEMPTS`]. Only reads on shared connections are re-sent; writes
/// never are once sent.
pub(super) struct Retry {
    pub router: Weak<Context>,
    pub pdu: Bytes,
    pub header: Header,
    /// `dn:...` for proxied authorization on the router's connection;
    /// `None` for an anonymous client.
    pub proxy_dn: Option<String>,
    /// Shared with the session's last parsed DN and with hedges.
    pub dn: Arc<Dn>,
    /// Names of the DSAs already tried (names survive reloads).
    pub tried: Vec<String>,
    /// It places a hedge: only on a DSA of the group of the one the read
    /// waits on.
    pub hedge: bool,
}

impl Resend for Retry {
    fn hedger(&self) -> Box<dyn Resend> {
        Box::new(Retry {
            router: self.router.clone(),
            pdu: self.pdu.clone(),
            header: self.header,
            proxy_dn: self.proxy_dn.clone(),
            dn: self.dn.clone(),
            tried: self.tried.clone(),
            hedge: true,
        })
    }

    fn resend(mut self: Box<Self>, mut p: Pending, failed: &str, _why: Error) {
        self.tried.push(failed.to_string());
        p._guard = None;
        if let Some(m) = &p.metrics {
            m.retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        tokio::spawn(async move {
            let hedge = self.hedge;
            let metrics = self.router.upgrade().map(|r| r.metrics.clone());
            let res = self.send_again(p).await;
            if let (true, Ok(()), Some(m)) = (hedge, &res, metrics) {
                m.hedges_sent
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if let Err((p, e)) = res {
                // Its retry is spent: answered, not re-sent.
                p.fail("", e);
            }
        });
    }
}

impl Retry {
    async fn send_again(self: Box<Self>, p: Pending) -> Result<(), (Pending, Error)> {
        let Some(router) = self.router.upgrade() else {
            return Err((p, Error::new(Kind::ShuttingDown, "shutting down")));
        };
        let routing = router.routing();
        let Lookup::Partition(part) = routing.table.lookup(&self.dn) else {
            let e = Error::new(
                Kind::NoSuchObject,
                format!("no partition holds {}", self.dn),
            );
            return Err((p, e));
        };
        let tried: Vec<usize> = self
            .tried
            .iter()
            .filter_map(|n| routing.snap.dsa_index(n))
            .collect();
        let want = Want {
            is_write: false,
            sticky: None,
            group_of: if self.hedge {
                tried.last().copied()
            } else {
                None
            },
            tried,
            pinned: false,
        };
        if !self.hedge {
            tracing::info!(tried = ?self.tried, "re-sending a read to the next target");
        }
        let (pdu, header) = (self.pdu.clone(), self.header);
        let via = Via::Shared(self.proxy_dn.clone());
        let mut retry = Some(self);
        let mut moved = Some(p);
        let res = place(&routing, part, want, via, &pdu, &header, |t| {
            let mut m = moved.take().unwrap_or_else(|| Pending::new(Sink::Detached));
            if let Some(mut r) = retry.take() {
                // Sent: if it must be sent again, that is a re-send.
                r.hedge = false;
                r.tried = t
                    .tried
                    .iter()
                    .map(|&d| routing.snap.dsas[d].name.clone())
                    .collect();
                m.retry = Some(r);
            }
            m.delivered = false;
            m.held.clear();
            // Silence counts from here on its new DSA.
            m.heard();
            m
        })
        .await;
        match (res, moved) {
            (Ok(_), _) => Ok(()),
            // Not built: the operation is still ours to answer.
            (Err(e), Some(p)) => Err((p, e)),
            (Err(_), None) => Ok(()),
        }
    }
}
