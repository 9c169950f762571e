//! The one place where an operation meets a DSA.
//!
//! [`place`] chooses a DSA of the partition (architecture.md, "Reads" and "Writes" for reads and
//! writes, a sticky DSA first when given), takes its in-flight slot, gets a
//! connection that carries the right identity (architecture.md, "Identity"), builds the
//! pending operation and submits it. Plain forwarding, every part of a
//! spanning search and every re-send ([`super::resend`]) go through it, so
//! a policy about *where* an operation runs (connection pinning, hedging,
//! affinity) is one change here.
//!
//! Identity ([`Via`]): an anonymous client runs on the DSA's unbound shared
//! connection; a bound client on the router's shared connection with the
//! proxied-authorization control where the DSA trusts conveyed originators,
//! otherwise (or when it must keep a connection of its own) on a connection
//! of its own bound by replaying its bind, opened in a task of its own
//! while the operation waits ([`super::own`]).

use super::own::{Have, Own};
use super::send::{refusal, skip_unless_busy, Got, Next, Outgoing};
use super::{Bound, Identity};
use crate::backend::dsa_state::InFlight;
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pending::Pending;
use crate::backend::upstream::pool::Pool;
use crate::backend::upstream::Resend;
use crate::base::error::{Error, Kind};
use crate::directory::knowledge::{DsaId, DsaName};
use crate::directory::route::{
    message, select_read, select_write, Choice, DsaView, Excluding, Partition, ReadGate, RouteError,
};
use crate::proto::wire::frame::Pdu;
use crate::service::context::Routing;
use std::sync::Arc;

/// Attempts per operation, the first included.
pub(super) const MAX_ATTEMPTS: usize = 3;

/// Which connections an operation may run on.
pub(super) enum Via<'s> {
    /// Shared connections only (re-sends): anonymous (`None`) or the
    /// router's, with proxied authorization as `dn:...`.
    Shared(Option<String>),
    /// A new connection, not bound (binds: the connection becomes the
    /// client's own when the bind succeeds), for the client at this
    /// address.
    Fresh(std::net::SocketAddr),
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
    pub sticky: Option<DsaId>,
    /// DSAs already tried (they are skipped).
    pub tried: Vec<DsaId>,
    /// Only a DSA of the group this one belongs to (hedges).
    pub group_of: Option<DsaId>,
    /// The caller records the DSA it is placed on (state the DSA keeps
    /// per connection): once placed, it is never moved to another.
    pub pinned: bool,
    /// What places it again: given, a read on a shared connection may be
    /// re-sent, and an operation that could not be sent goes to the next
    /// DSA ([`super::resend`]).
    pub resend: Option<Box<dyn Replace>>,
    /// Only these DSAs (lower-case names), when given: a read kept by
    /// read-your-writes to those that have the client's write.
    pub only: Option<Arc<[DsaName]>>,
}

/// An operation's way to the next DSA before it is placed
/// ([`super::resend`]): told where it went, it becomes its [`Resend`].
pub(super) trait Replace: Send {
    /// It was placed with `via` on `at`; `name` names a DSA by index.
    fn placed(
        self: Box<Self>,
        via: &Via<'_>,
        at: &Placed,
        name: &dyn Fn(DsaId) -> String,
    ) -> Box<dyn Resend>;
}

impl Want {
    /// A first attempt: nothing tried yet.
    pub(super) fn first(is_write: bool, sticky: Option<DsaId>) -> Want {
        Want {
            is_write,
            sticky,
            tried: Vec::new(),
            group_of: None,
            pinned: false,
            resend: None,
            only: None,
        }
    }
}

impl super::Session {
    /// This client's way onto DSA connections; `own_conn` asks for a
    /// connection of its own whatever its identity.
    pub(super) fn via(&mut self, own_conn: bool) -> Via<'_> {
        Via::Client {
            identity: &self.who.identity,
            own: &self.who.private,
            own_conn,
        }
    }
}

/// Where an operation went.
pub(super) struct Placed {
    pub dsa: DsaId,
    /// Its connection; `None` while a shared connection to the DSA is
    /// being made (the operation is sent once it is, without holding up
    /// the client's other operations).
    pub conn: Option<Arc<Conn>>,
    /// The proxied-authorization identity it carries, if any.
    pub proxy: Option<String>,
    /// Whether the connection is shared (a read on it may be re-sent).
    pub shared: bool,
    /// DSAs that could not be reached on the way.
    pub tried: Vec<DsaId>,
    /// Its message ID on `conn`.
    pub id: i32,
}

/// Place one operation on a DSA of partition `p` and send it. `build`
/// makes the pending operation once the target is known (its in-flight
/// slot is added here); the request `sent` goes out with its message ID
/// rewritten and the proxied-authorization control appended where
/// identity needs it.
///
/// `Err` means nothing was built: the caller answers. Once built, the
/// operation is answered through its delivery whatever happens.
pub(super) async fn place(
    routing: &Arc<Routing>,
    p: &Partition,
    mut want: Want,
    mut via: Via<'_>,
    sent: &Pdu,
    build: impl FnOnce(&Placed) -> Pending,
) -> Result<Placed, Error> {
    let mut races = 0;
    let (dsa, guard, got, proxy, shared) = loop {
        let dsa = choose(routing, p, &want)?;
        let Some(guard) = slot(routing, dsa, &mut races)? else {
            continue;
        };
        let name = &routing.snap.dsas[dsa].name;
        match connection(&mut via, &routing.pools[dsa], name).await {
            Ok((got, proxy, shared)) => break (dsa, guard, got, proxy, shared),
            Err(Next::Fail(e)) => return Err(e),
            // Nothing was sent: writes too go to the next DSA.
            Err(Next::Skip(e)) => {
                tracing::warn!(dsa = %name, error = %crate::base::logsafe::esc(&e), "cannot reach DSA; trying the next target");
                want.tried.push(dsa);
            }
        }
    };
    let name = &routing.snap.dsas[dsa].name;
    // The operation's span is a debug one: below that level there is
    // nothing to record in, and `Span::current` costs a registry look-up
    // and a clone per operation.
    if tracing::level_enabled!(tracing::Level::DEBUG) {
        tracing::Span::current().record("dsa", name.as_str());
    }
    let mut placed = Placed {
        dsa,
        conn: None,
        proxy,
        shared,
        tried: std::mem::take(&mut want.tried),
        id: 0,
    };
    let is_write = want.is_write;
    let (pending, aside) = built(routing, &via, &placed, build, guard, want);
    let pool = &routing.pools[dsa];
    let state = &routing.states.0[dsa];
    let out = Outgoing::rewrite(pool, state, &mut placed.proxy, pending, aside, sent);
    if let Got::Now(conn) = &got {
        placed.conn = Some(conn.clone());
    }
    let routed = placed.proxy.is_some();
    placed.id = out.send(got, pool, routed, name, is_write).unwrap_or(0);
    Ok(placed)
}

/// Take DSA `dsa`'s in-flight slot atomically: `None` when a race for the
/// last slot was lost (select again, never in another group), `Err` when
/// that happened too often.
fn slot(routing: &Routing, dsa: DsaId, races: &mut u32) -> Result<Option<InFlight>, Error> {
    if let Some(guard) = routing.states.0[dsa].try_begin() {
        return Ok(Some(guard));
    }
    *races += 1;
    if *races > 8 {
        let msg = message::concurrency(&[routing.snap.dsas[dsa].name.as_str()]);
        return Err(Error::router(Kind::Busy, msg));
    }
    Ok(None)
}

/// The pending operation built for `placed`, holding its DSA's slot, and
/// its way to the next DSA (what `want` gives to place it again): carried
/// by a read on a shared connection (it may be re-sent until something
/// reached its client), else kept aside for when it cannot be sent at all
/// (a pinned operation has none).
fn built(
    routing: &Routing,
    via: &Via<'_>,
    placed: &Placed,
    build: impl FnOnce(&Placed) -> Pending,
    guard: InFlight,
    want: Want,
) -> (Pending, Option<Box<dyn Resend>>) {
    let mut pending = build(placed);
    pending.hold_slot(guard);
    let name = |i: DsaId| routing.snap.dsas[i].name.to_string();
    let again = want.resend.map(|r| r.placed(via, placed, &name));
    let (carried, aside) = match again {
        Some(a) if placed.shared && !want.is_write => (Some(a), None),
        a => (None, a.filter(|_| !want.pinned)),
    };
    pending.movable(carried);
    (pending, aside)
}

/// The DSA of partition `p` to try next as `want` says, skipping those
/// it tried: the sticky one first (the DSA holding the client's state),
/// else by the write order or the read groups. `Err` when none can take
/// it, or when the attempts are used up.
fn choose(routing: &Routing, p: &Partition, want: &Want) -> Result<DsaId, Error> {
    let (is_write, sticky, only) = (want.is_write, want.sticky, want.only.as_deref());
    let tried = &want.tried[..];
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
    // DSAs a read kept by read-your-writes may not go to count as tried.
    let first = tried.is_empty();
    let excluded: Vec<DsaId>;
    let tried = match only {
        Some(only) => {
            let barred = |i: &DsaId| !only.contains(&routing.snap.dsas[*i].name);
            let barred = p.order.iter().copied().filter(barred);
            excluded = tried.iter().copied().chain(barred).collect();
            &excluded[..]
        }
        None => tried,
    };
    let view = Excluding {
        inner: &routing.states,
        tried,
    };
    let chosen = match sticky {
        Some(i) if first && !tried.contains(&i) => Ok(Choice { group: 0, dsa: i }),
        _ if is_write => select_write(p, &view),
        _ => select_read(p, &view, p.tick()),
    };
    let dsa = match chosen {
        Ok(c) => c.dsa,
        Err(RouteError::Unavailable) => {
            let msg = match only {
                Some(only) => message::kept_unavailable(p, &routing.snap, &view, only),
                None => message::unavailable(p, &routing.snap, &view),
            };
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
    if let Some(first) = want.group_of {
        // A hedge goes only to another DSA of the group, and never to one
        // out of replication bound (--max-replication-lag,
        // --max-staleness): the read it races is served within bound.
        let same_group = p.group_of(first).is_some_and(|g| g.members.contains(&dsa));
        if !same_group || routing.states.read_gate(dsa) != ReadGate::Serve {
            let msg = format!(
                "dsa-router: no other DSA of {}'s group can take the read",
                routing.snap.dsas[first].name
            );
            return Err(Error::router(Kind::Unavailable, msg));
        }
    }
    Ok(dsa)
}

/// A connection to `pool`'s DSA for `via`: (connection, proxied identity,
/// shared).
async fn connection(
    via: &mut Via<'_>,
    pool: &Arc<Pool>,
    name: &DsaName,
) -> Result<(Got, Option<String>, bool), Next> {
    // A shared connection open now, else one to be made after placing.
    let shared = |routed: bool| match pool.shared_now(routed) {
        Some(c) => Got::Now(c),
        None => Got::Later,
    };
    match via {
        Via::Fresh(client) => {
            // Boxed: opening a connection (connect, TLS) is a large state,
            // and a rare one; inline it would be part of every operation's
            // future.
            let c = Box::pin(pool.private(crate::backend::upstream::pool::Own::ForBind, *client))
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
            let sasl_here =
                matches!(&**identity, Identity::Bound(Bound { bind: None, .. })) && own.has(name);
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

/// The client's own connection to a DSA, bound as the client (a simple
/// bind replayed; a SASL identity only where it was made): open, or being
/// opened in a task of its own.
fn own_connection(
    identity: &Identity,
    own: &Arc<Own>,
    name: &DsaName,
    pool: &Arc<Pool>,
) -> Result<Got, Error> {
    let have = own.get_or_open(name, pool, || match identity {
        Identity::Bound(Bound { bind: Some(b), .. }) => Ok(Some(b.clone())),
        // SASL: the identity lives on the connection it was made on.
        Identity::Bound(Bound { conveyed: false, authz, .. }) => Err(Error::new(
            Kind::BindRefused(crate::proto::wire::response::Code::InappropriateAuthentication as u8),
            format!("the SASL identity {authz} was established by a DSA that does not hold it; it is used on that DSA only, not on DSA {name}"),
        )),
        Identity::Bound(_) => Err(Error::new(
            Kind::BindRefused(crate::proto::wire::response::Code::InappropriateAuthentication as u8),
            format!("a SASL identity cannot be carried to DSA {name} on a connection of its own; bind with a simple bind for operations there"),
        )),
        Identity::Anonymous => Ok(None),
    })?;
    Ok(match have {
        Have::Open(c) => Got::Now(c),
        Have::Opening(o) => Got::Queued(o),
    })
}
