//! The last two phases of placing an operation (architecture.md, "One
//! operation"): *rewrite*, the request as it goes to the chosen DSA
//! ([`Outgoing::rewrite`]: mapped to the DSA's native tree where it has
//! one, with the proxied-authorization control where identity needs it),
//! and *send* ([`Outgoing::send`], the one send path): inline on an open
//! connection, in a task of its own when the DSA's shared connection is
//! still being made, or behind the client's earlier operations when its
//! own connection is being opened. The request travels as a [`Pdu`]
//! (shared bytes): it is never copied on the way. An operation that could
//! not be sent at all goes to the next DSA when it may ([`unsent`]).

use super::own::{Opening, Outcome};
use crate::backend::dsa_state::{Count, DsaState};
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pending::Pending;
use crate::backend::upstream::pool::Pool;
use crate::backend::upstream::Resend;
use crate::base::error::{Error, Kind};
use crate::proto::wire::frame::{self, Pdu};
use crate::proto::wire::scope_check::ScopeCheck;
use std::sync::Arc;

/// Where an operation's responses go, when they go somewhere it is told
/// of being placed.
type Deliver = Arc<dyn crate::backend::upstream::Delivery>;

/// An operation as it goes to one DSA: its request, its pending
/// operation, and its way to the next DSA should it not be sent at all.
pub(super) struct Outgoing {
    /// The request as it goes: in the DSA's native tree, when it differs,
    /// else the client's.
    pdu: Pdu,
    /// The proxied-authorization control, encoded.
    pub(super) control: Option<Vec<u8>>,
    delivery: Option<Deliver>,
    pending: Pending,
    /// Where it goes when it cannot be sent (see [`unsent`]).
    again: Option<Box<dyn Resend>>,
}

impl Outgoing {
    /// Prepare `pending` (built for DSA `state`, going to the next with
    /// `again` if it cannot be sent) and the request `sent` for `pool`'s
    /// DSA: its native-prefix map (which also maps the conveyed identity
    /// `proxy`), the count of persistent searches, the control conveying
    /// `proxy`.
    pub(super) fn rewrite(
        pool: &Pool,
        state: &Arc<DsaState>,
        proxy: &mut Option<String>,
        mut pending: Pending,
        again: Option<Box<dyn Resend>>,
        sent: &Pdu,
    ) -> Outgoing {
        let native = pool.native.clone();
        let mapped = native
            .as_ref()
            .and_then(|m| m.request(&sent.bytes, &sent.h))
            .and_then(|b| Pdu::read(b.freeze()).ok());
        if let (Some(m), Some(p)) = (&native, proxy.as_mut()) {
            if let Some(n) = p.strip_prefix("dn:").and_then(|d| m.to_native(d)) {
                *p = format!("dn:{n}");
            }
        }
        let pdu = mapped.unwrap_or_else(|| sent.clone());
        if pdu.h.op_tag == frame::tag::SEARCH_REQUEST {
            let scope = ScopeCheck::of_search(&pdu.bytes, &pdu.h, pool.partition.as_ref());
            pending.set_scope(scope);
        }
        if let Some(m) = native {
            pending.set_map(m);
        }
        if pending.is_persistent() {
            pending.set_count(Count::new(state, |s| &s.persistent));
        }
        let delivery = pending.delivery().cloned();
        Outgoing {
            pdu,
            control: proxy.as_deref().map(frame::proxy_authz_control),
            delivery,
            pending,
            again,
        }
    }

    /// Send it (the one send path) on the connection `got` to `pool`'s
    /// DSA `name` (`routed`: the shared connection for conveyed
    /// identities; an update when `is_write`): its message ID there when
    /// it went out at once.
    pub(super) fn send(
        self,
        got: Got,
        pool: &Arc<Pool>,
        routed: bool,
        name: &str,
        is_write: bool,
    ) -> Option<i32> {
        match got {
            Got::Now(conn) => self.submit(&conn, name),
            Got::Later => {
                self.after_connect(pool.clone(), routed, name.to_string());
                None
            }
            Got::Queued(o) => {
                wait_for_own(o, self, name, is_write);
                None
            }
        }
    }

    /// Send it on `conn`: its message ID there, or `None` when the
    /// connection was closed (the request did not go out: it goes to the
    /// next DSA, or is failed or re-sent as it may be). `name` names the
    /// DSA.
    fn submit(self, conn: &Arc<Conn>, name: &str) -> Option<i32> {
        let Outgoing {
            pdu,
            control,
            delivery,
            pending,
            again,
        } = self;
        let delivery = &delivery;
        let control = control.as_deref();
        let placed = |conn: &Arc<Conn>, id| delivery.as_ref().is_none_or(|d| d.placed(conn, id));
        // Tracing off: one branch; a read: two.
        let traced = match (crate::observe::otel::enabled(), delivery) {
            (true, Some(d)) => d.trace_control(conn),
            _ => None,
        };
        let post_read = pending.is_write() && delivery.as_ref().is_some_and(|d| d.post_read(conn));
        let sent = match (traced, post_read) {
            (None, false) => conn.submit(pending, &pdu.bytes, &pdu.h, control, placed),
            (Some(tc), _) => {
                let (pdu, ctl) = with_trace_control(pdu, control, tc, post_read);
                conn.submit(pending, &pdu.bytes, &pdu.h, Some(&ctl), placed)
            }
            (None, true) => {
                let ctl = added(control, &[], true);
                conn.submit(pending, &pdu.bytes, &pdu.h, Some(&ctl), placed)
            }
        };
        match sent {
            Ok(id) => Some(id),
            Err(pending) => {
                let write = pending.is_write();
                let e = Error::new(
                    Kind::ConnectionLost { write },
                    format!("connection to DSA {name} closed"),
                );
                unsent(pending, again, name, e);
                None
            }
        }
    }

    /// The DSA's shared connection is being made: send once it is, in a
    /// task of its own, so that a DSA slow to accept or to bind the router
    /// (`routed`: for conveyed identities) holds up only this operation.
    fn after_connect(self, pool: Arc<Pool>, routed: bool, name: String) {
        tokio::spawn(async move {
            match pool.shared(routed).await {
                Ok(conn) => {
                    self.submit(&conn, &name);
                }
                // The DSA refused the router's own bind: the client's
                // identity cannot be conveyed there.
                Err(Error {
                    kind: Kind::BindRefused(code),
                    text,
                }) => self.pending.fail(
                    &name,
                    Error::new(
                        Kind::BindRefused(code),
                        format!("your identity could not be established on DSA {name} ({text}, result {code})"),
                    ),
                ),
                Err(e) => {
                    let e = Error::new(Kind::Unreachable, format!("DSA {name}: {e}"));
                    unsent(self.pending, self.again, &name, e);
                }
            }
        });
    }
}

/// `pdu` without the client's trace context control, if it had one, and
/// the controls to add: `control` (if any), the router's trace context
/// control `tc` (which replaces the client's) and, with `post_read`, the
/// post-read control.
fn with_trace_control(
    pdu: Pdu,
    control: Option<&[u8]>,
    tc: Vec<u8>,
    post_read: bool,
) -> (Pdu, Vec<u8>) {
    use crate::proto::wire::search;
    let oid = crate::observe::otel::OID_TRACE_CONTEXT;
    let (b, h) = (&pdu.bytes[..], &pdu.h);
    let stripped = search::has_control(b, h, oid)
        .then(|| search::without_controls(b, h, h.msgid, &[oid]).freeze())
        .and_then(|b| Pdu::read(b).ok());
    (stripped.unwrap_or(pdu), added(control, &tc, post_read))
}

/// The controls the router adds to a request, encoded one after another:
/// `control` (proxied authorization), `tc` (trace context) and the
/// post-read control.
fn added(control: Option<&[u8]>, tc: &[u8], post_read: bool) -> Vec<u8> {
    let pr: &[u8] = if post_read {
        crate::proto::wire::postread::REQUEST
    } else {
        &[]
    };
    [control.unwrap_or(&[]), tc, pr].concat()
}

/// `pending` could not be sent to DSA `name` (`e`): nothing reached the
/// DSA, so it goes to the next DSA with `again`; without, it is failed (a
/// read that carries its re-send is re-sent by that).
pub(super) fn unsent(pending: Pending, again: Option<Box<dyn Resend>>, name: &str, e: Error) {
    match again {
        Some(a) => a.resend(pending, name, e),
        None => pending.fail(name, e),
    }
}

/// The client's own connection to DSA `name` is being opened: the
/// operation `out` (an update when `is_write`) waits for it behind the
/// client's earlier ones there, without holding up its others; it goes
/// elsewhere when it cannot have it.
fn wait_for_own(o: Arc<Opening>, out: Outgoing, name: &str, is_write: bool) {
    let name = name.to_string();
    o.enqueue(Box::new(move |outcome| match outcome {
        Outcome::Open(conn) => {
            // Its silence counts from here, not from its wait.
            let mut out = out;
            out.pending.heard();
            out.submit(conn, &name);
        }
        Outcome::Failed(e) => match refusal(&name, e.clone()) {
            Next::Skip(e) => {
                let e = Error::new(Kind::Unreachable, format!("DSA {name}: {e}"));
                unsent(out.pending, out.again, &name, e);
            }
            Next::Fail(e) => out.pending.fail(&name, e),
        },
        Outcome::Dropped => out.pending.fail(
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
pub(super) enum Got {
    Now(Arc<Conn>),
    /// A shared connection being made.
    Later,
    /// The client's own connection being opened.
    Queued(Arc<Opening>),
}

/// Why a DSA's connection could not be had.
pub(super) enum Next {
    /// Try the next DSA (unreachable, or not usable for this identity).
    Skip(Error),
    /// Give up: the client's identity was refused.
    Fail(Error),
}

/// What a failure to have the client's connection to DSA `name` means: a
/// refused identity ends the operation, like a DSA at its limit of
/// clients' own connections; any other failure skips the DSA.
pub(super) fn refusal(name: &str, e: Error) -> Next {
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
pub(super) fn skip_unless_busy(e: Error) -> Next {
    if e.kind == Kind::Busy {
        Next::Fail(e)
    } else {
        Next::Skip(e)
    }
}
