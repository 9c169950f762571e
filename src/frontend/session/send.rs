//! The last step of placing an operation: the request as it goes to the
//! chosen DSA ([`Outgoing`]: mapped to the DSA's native tree where it has
//! one, with the proxied-authorization control where identity needs it),
//! and its sending: inline on an open connection, in a task of its own
//! when the DSA's shared connection is still being made, or behind the
//! client's earlier operations when its own connection is being opened.
//! An operation that could not be sent at all goes to the next DSA when
//! it may ([`unsent`]).

use super::own::{Opening, Outcome};
use crate::backend::dsa_state::{Count, DsaState};
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pending::Pending;
use crate::backend::upstream::pool::Pool;
use crate::backend::upstream::Resend;
use crate::base::error::{Error, Kind};
use crate::proto::wire::frame::{self, Frame, Header};
use crate::proto::wire::scope_check::ScopeCheck;
use bytes::Bytes;
use std::sync::Arc;

/// Where an operation's responses go, when they go somewhere it is told
/// of being placed.
type Deliver = Arc<dyn crate::backend::upstream::Delivery>;

/// An operation as it goes to one DSA: its request, its pending
/// operation, and its way to the next DSA should it not be sent at all.
pub(super) struct Outgoing {
    /// The request in the DSA's native tree, when it differs.
    mapped: Option<(Bytes, Header)>,
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
    pub(super) fn prepare(
        pool: &Pool,
        state: &Arc<DsaState>,
        proxy: &mut Option<String>,
        mut pending: Pending,
        again: Option<Box<dyn Resend>>,
        sent: Frame<'_>,
    ) -> Outgoing {
        let Frame { pdu, h } = sent;
        let native = pool.native.clone();
        let mapped = native
            .as_ref()
            .and_then(|m| m.request(pdu, h))
            .map(|b| b.freeze())
            .and_then(|b| {
                let mh = frame::header(&b).ok()?;
                Some((b, mh))
            });
        if let (Some(m), Some(p)) = (&native, proxy.as_mut()) {
            if let Some(n) = p.strip_prefix("dn:").and_then(|d| m.to_native(d)) {
                *p = format!("dn:{n}");
            }
        }
        if h.op_tag == frame::tag::SEARCH_REQUEST {
            let (out, oh) = mapped.as_ref().map_or((pdu, *h), |(b, mh)| (&b[..], *mh));
            pending.set_scope(ScopeCheck::of_search(out, &oh, pool.partition.as_ref()));
        }
        if let Some(m) = native {
            pending.set_map(m);
        }
        if pending.is_persistent() {
            pending.set_count(Count::new(state, |s| &s.persistent));
        }
        let delivery = pending.delivery().cloned();
        Outgoing {
            mapped,
            control: proxy.as_deref().map(frame::proxy_authz_control),
            delivery,
            pending,
            again,
        }
    }

    /// The PDU to send: the mapped one, else the client's `sent`.
    pub(super) fn pdu<'a>(&'a self, sent: Frame<'a>) -> Frame<'a> {
        as_sent(&self.mapped, sent)
    }

    /// Send it on `conn` (`sent`, unless mapped): its message ID there, or
    /// `None` when the connection was closed (the request did not go out:
    /// it goes to the next DSA, or is failed or re-sent as it may be).
    /// `name` names the DSA.
    pub(super) fn submit(self, conn: &Arc<Conn>, sent: Frame<'_>, name: &str) -> Option<i32> {
        let Outgoing {
            mapped,
            control,
            delivery,
            pending,
            again,
        } = self;
        let Frame { pdu, h } = as_sent(&mapped, sent);
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
            (None, false) => conn.submit(pending, pdu, h, control, placed),
            (Some(tc), _) => {
                let (pdu, h, ctl) = with_trace_control(pdu, h, control, tc, post_read);
                conn.submit(pending, &pdu, &h, Some(&ctl), placed)
            }
            (None, true) => {
                let ctl = added(control, &[], true);
                conn.submit(pending, pdu, h, Some(&ctl), placed)
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
    pub(super) fn after_connect(
        self,
        pool: Arc<Pool>,
        routed: bool,
        sent: Frame<'_>,
        name: String,
    ) {
        // The client's request is copied only when it is what goes out.
        let (pdu, h) = match self.mapped {
            Some(_) => (Bytes::new(), *sent.h),
            None => (Bytes::copy_from_slice(sent.pdu), *sent.h),
        };
        tokio::spawn(async move {
            match pool.shared(routed).await {
                Ok(conn) => {
                    self.submit(&conn, Frame::new(&pdu, &h), &name);
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

/// The PDU that goes out: `mapped`, else `sent`.
fn as_sent<'a>(mapped: &'a Option<(Bytes, Header)>, sent: Frame<'a>) -> Frame<'a> {
    match mapped {
        Some((b, mh)) => Frame::new(b, mh),
        None => sent,
    }
}

/// `pdu` without the client's trace context control, if it had one, and
/// the controls to add: `control` (if any), the router's trace context
/// control `tc` (which replaces the client's) and, with `post_read`, the
/// post-read control.
fn with_trace_control(
    pdu: &[u8],
    h: &Header,
    control: Option<&[u8]>,
    tc: Vec<u8>,
    post_read: bool,
) -> (Bytes, Header, Vec<u8>) {
    use crate::proto::wire::search;
    let oid = crate::observe::otel::OID_TRACE_CONTEXT;
    let stripped = search::has_control(pdu, h, oid)
        .then(|| search::without_controls(pdu, h, h.msgid, &[oid]).freeze())
        .and_then(|b| Some((frame::header(&b).ok()?, b)));
    let (pdu, h) = match stripped {
        Some((sh, b)) => (b, sh),
        None => (Bytes::copy_from_slice(pdu), *h),
    };
    (pdu, h, added(control, &tc, post_read))
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
/// operation `out` (`sent`, unless mapped; an update when `is_write`)
/// waits for it behind the client's earlier ones there, without holding
/// up its others; it goes elsewhere when it cannot have it.
pub(super) fn wait_for_own(
    o: Arc<Opening>,
    out: Outgoing,
    sent: Frame<'_>,
    name: &str,
    is_write: bool,
) {
    let (pdu, h, name) = {
        let f = out.pdu(sent);
        (Bytes::copy_from_slice(f.pdu), *f.h, name.to_string())
    };
    o.enqueue(Box::new(move |outcome| match outcome {
        Outcome::Open(conn) => {
            // Its silence counts from here, not from its wait.
            let mut out = out;
            out.pending.heard();
            out.submit(conn, Frame::new(&pdu, &h), &name);
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
