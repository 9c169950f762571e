//! Sending an operation again, to the next DSA of its partition: the one
//! re-send of the router (architecture.md, "Reads", "Writes", "Availability and throttling").
//!
//! An operation goes to another DSA, within
//! [`MAX_ATTEMPTS`](super::dispatch::MAX_ATTEMPTS), when
//! * it was never sent: its DSA's connection could not be had (connect
//!   refused or timed out, the client's own connection could not be
//!   opened) or was closed before the request went out. Reads and writes
//!   alike: nothing reached the DSA;
//! * it is a read that failed before any response reached its client: its
//!   DSA's connection died, the DSA went down while the read waited on it,
//!   the read timed out, or the DSA itself answered `busy` or
//!   `unavailable`. Only reads on shared connections carry their [`Again`]
//!   (as their [`Resend`]); a write that may have reached a DSA never does,
//!   and so is never re-sent;
//! * it is a slow read, hedged: its hedge goes to another DSA of the group
//!   of the one the read waits on.
//!
//! The caller of [`place`] gives [`Again::first`]: what it knows of the
//! operation (its DN, the request as the client sent it); [`place`] tells
//! it where the operation went (the DSAs tried, the identity it ran with),
//! and it then places it once more when it must. [`place`] knows it only
//! as a [`Replace`], and the sending only as a [`Resend`], so that this
//! module alone depends on them.

use super::dispatch::{place, Placed, Replace, Via, Want};
use super::own::Own;
use super::Identity;
use crate::backend::upstream::pending::{Kind as OpKind, Pending, Sink};
use crate::backend::upstream::Resend;
use crate::base::error::{Error, Kind};
use crate::directory::knowledge::{DsaId, DsaName};
use crate::directory::route::Lookup;
use crate::proto::dn::Dn;
use crate::proto::wire::frame::Pdu;
use crate::service::context::Context;
use futures::FutureExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// What an operation needs to be placed again, whatever DSA it went to.
#[derive(Clone)]
struct Request {
    router: Weak<Context>,
    /// The DN whose partition it goes to, looked up again when it is
    /// re-sent (the knowledge may have been reloaded meanwhile).
    dn: Arc<Dn>,
    /// The request as the client sent it.
    pdu: Pdu,
    is_write: bool,
}

/// Which connections a re-sent operation may run on.
#[derive(Clone)]
enum Way {
    /// Shared connections only (it ran on one): anonymous (`None`) or the
    /// router's, with proxied authorization as `dn:...`.
    Shared(Option<String>),
    /// As the client's operations do (it waited for a connection of the
    /// client's own).
    Client {
        identity: Identity,
        own: Arc<Own>,
        own_conn: bool,
    },
}

/// An operation placed once, and what places it on the next DSA.
#[derive(Clone)]
pub(super) struct Again {
    req: Request,
    way: Way,
    /// Names of the DSAs already tried (names survive reloads).
    tried: Vec<String>,
    /// It places a hedge: only on a DSA of the group of the one the read
    /// waits on.
    hedge: bool,
    /// Only these DSAs (read-your-writes by position: those that have the
    /// client's write).
    only: Option<Arc<[DsaName]>>,
}

impl Again {
    /// The way to the next DSA of an operation on `dn` (`pdu` as the client
    /// sent it), given to [`place`]; it learns there where the operation
    /// went.
    pub(super) fn first(
        router: &Arc<Context>,
        dn: Arc<Dn>,
        pdu: Pdu,
        is_write: bool,
        only: Option<Arc<[DsaName]>>,
    ) -> Box<dyn Replace> {
        Box::new(Again {
            req: Request {
                router: Arc::downgrade(router),
                dn,
                pdu,
                is_write,
            },
            way: Way::Shared(None),
            tried: Vec::new(),
            hedge: false,
            only,
        })
    }
}

impl Replace for Again {
    /// Where it went: the DSAs tried, and the identity it ran with (before
    /// its conveyed identity is mapped to the DSA's native tree). A
    /// hedge, once placed, is re-sent as any read.
    fn placed(
        mut self: Box<Self>,
        via: &Via<'_>,
        at: &Placed,
        name: &dyn Fn(DsaId) -> String,
    ) -> Box<dyn Resend> {
        self.way = match via {
            Via::Client {
                identity,
                own,
                own_conn,
            } if !at.shared => Way::Client {
                identity: (*identity).clone(),
                own: (*own).clone(),
                own_conn: *own_conn,
            },
            _ => Way::Shared(at.proxy.clone()),
        };
        self.tried = at.tried.iter().map(|&i| name(i)).collect();
        self.hedge = false;
        self
    }
}

impl Resend for Again {
    fn resend(self: Box<Self>, p: Pending, failed: &str, why: Error) {
        self.elsewhere(p, failed, why);
    }

    fn hedger(&self) -> Box<dyn Resend> {
        Box::new(Again {
            hedge: true,
            ..self.clone()
        })
    }
}

impl Again {
    /// Place `p`, which DSA `failed` let down with `why` (or could not
    /// take), on the next DSA. Placing does not wait (a connection not open
    /// yet is waited for by the operation, not here), so it is done at
    /// once: reads that waited together keep their order. Were it ever to
    /// wait, it goes on in a task of its own.
    pub(super) fn elsewhere(mut self, mut p: Pending, failed: &str, why: Error) {
        if !self.hedge {
            let error = crate::base::logsafe::esc(&why);
            if self.req.is_write {
                tracing::info!(dsa = %failed, %error, "sending a write that was never sent to the next target");
            } else {
                tracing::info!(dsa = %failed, %error, tried = ?self.tried, "re-sending a read to the next target");
            }
            if let Some(m) = p.metrics() {
                m.retries.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !failed.is_empty() {
            self.tried.push(failed.to_string());
        }
        p.retarget(None);
        let mut moved = Some(p);
        let placed = self.place(&mut moved, &why).now_or_never();
        match (placed, moved) {
            (Some(Err(e)), Some(p)) => p.answer("", e),
            (None, Some(p)) => {
                tokio::spawn(async move {
                    let mut moved = Some(p);
                    if let (Err(e), Some(p)) = (self.place(&mut moved, &why).await, moved) {
                        p.answer("", e);
                    }
                });
            }
            // Placed, or built and answered through its delivery.
            _ => {}
        }
    }

    /// Place the operation in `moved` on a DSA of its partition not tried
    /// yet; it stays in `moved` when it was not built. When no DSA can
    /// take it, a DSA's own `busy`/`unavailable` (`why`) is its answer.
    async fn place(&self, moved: &mut Option<Pending>, why: &Error) -> Result<Placed, Error> {
        let Some(router) = self.req.router.upgrade() else {
            return Err(Error::new(Kind::ShuttingDown, "shutting down"));
        };
        let routing = router.routing();
        let Lookup::Partition(part) = routing.table.lookup(&self.req.dn) else {
            let msg = format!("no partition holds {}", self.req.dn);
            return Err(Error::new(Kind::NoSuchObject, msg));
        };
        let tried: Vec<DsaId> = self
            .tried
            .iter()
            .filter_map(|n| routing.snap.dsa_index(n))
            .collect();
        let want = Want {
            is_write: self.req.is_write,
            group_of: if self.hedge {
                tried.last().copied()
            } else {
                None
            },
            tried,
            resend: Some(Box::new(Again {
                req: self.req.clone(),
                way: Way::Shared(None),
                tried: Vec::new(),
                hedge: false,
                only: self.only.clone(),
            })),
            only: self.only.clone(),
            ..Want::default()
        };
        let via = match &self.way {
            Way::Shared(proxy) => Via::Shared(proxy.clone()),
            Way::Client {
                identity,
                own,
                own_conn,
            } => Via::Client {
                identity,
                own,
                own_conn: *own_conn,
            },
        };
        let build = |_: &Placed| {
            let p = moved.take();
            p.unwrap_or_else(|| Pending::new(Sink::Detached, OpKind::fixed()))
        };
        let placed = place(&routing, part, want, via, &self.req.pdu, build).await;
        if self.hedge && placed.is_ok() {
            router
                .backend
                .metrics
                .hedges_sent
                .fetch_add(1, Ordering::Relaxed);
        }
        // No other DSA for a read its DSA answered busy or unavailable:
        // the client gets that answer.
        placed.map_err(|e| match (&why.kind, &e.kind) {
            (Kind::Refused(_), Kind::Unavailable | Kind::Unreachable | Kind::Busy) => why.clone(),
            _ => e,
        })
    }
}
