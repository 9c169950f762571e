//! The last step of placing an operation: the request as it goes to the
//! chosen DSA ([`Outgoing`]: mapped to the DSA's native tree where it has
//! one, with the proxied-authorization control where identity needs it),
//! and its sending, inline on an open connection or, when the DSA's shared
//! connection is still being made, in a task of its own.

use crate::dsa_state::Count;
use crate::error::{Error, Kind};
use crate::upstream::conn::Conn;
use crate::upstream::pending::{Pending, Sink};
use crate::upstream::pool::Pool;
use crate::wire::frame::{self, Header};
use crate::wire::scope_check::ScopeCheck;
use bytes::Bytes;
use std::sync::Arc;

/// Where an operation's responses go, when they go somewhere it is told
/// of being placed.
type Deliver = Arc<dyn crate::upstream::Delivery>;

/// A request as it goes to one DSA.
pub(super) struct Outgoing {
    /// The request in the DSA's native tree, when it differs.
    mapped: Option<(Bytes, Header)>,
    /// The proxied-authorization control, encoded.
    pub(super) control: Option<Vec<u8>>,
    delivery: Option<Deliver>,
}

impl Outgoing {
    /// Prepare `pending` (built for DSA `dsa` of `states`) and the request
    /// `pdu` for `pool`'s DSA: its native-prefix map (which also maps the
    /// conveyed identity `proxy`), the count of persistent searches, the
    /// control conveying `proxy`.
    pub(super) fn prepare(
        pool: &Pool,
        states: &crate::dsa_state::States,
        dsa: usize,
        proxy: &mut Option<String>,
        pending: &mut Pending,
        pdu: &[u8],
        h: &Header,
    ) -> Outgoing {
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
            pending.extra().scope = ScopeCheck::of_search(out, &oh, Some(&pool.partition));
        }
        if native.is_some() {
            pending.extra().map = native;
        }
        if pending.persistent {
            pending.extra().count = Some(Count::new(&states.0[dsa], |s| &s.persistent));
        }
        let delivery = match &pending.sink {
            Sink::To(d) => Some(d.clone()),
            _ => None,
        };
        Outgoing {
            mapped,
            control: proxy.as_deref().map(frame::proxy_authz_control),
            delivery,
        }
    }

    /// The PDU to send: the mapped one, else the client's `pdu`.
    pub(super) fn pdu<'a>(&'a self, pdu: &'a [u8], h: &Header) -> (&'a [u8], Header) {
        match &self.mapped {
            Some((b, mh)) => (&b[..], *mh),
            None => (pdu, *h),
        }
    }

    /// Send `pending` on `conn`: its message ID there, or `None` when the
    /// connection was closed (the operation is then answered through its
    /// delivery, or re-sent).
    pub(super) fn submit(
        &self,
        conn: &Arc<Conn>,
        pending: Pending,
        pdu: &[u8],
        h: &Header,
        name: &str,
    ) -> Option<i32> {
        let (pdu, h) = self.pdu(pdu, h);
        let delivery = &self.delivery;
        let sent = conn.submit(pending, pdu, &h, self.control.as_deref(), |conn, id| {
            delivery.as_ref().is_none_or(|d| d.placed(conn, id))
        });
        match sent {
            Ok(id) => Some(id),
            Err(pending) => {
                let write = pending.is_write;
                let e = Error::new(
                    Kind::ConnectionLost { write },
                    format!("connection to DSA {name} closed"),
                );
                pending.fail(name, e);
                None
            }
        }
    }

    /// The DSA's shared connection is being made: send once it is, in a
    /// task of its own, so that a DSA slow to accept or to bind the router
    /// holds up only this operation.
    pub(super) fn after_connect(
        self,
        pool: Arc<Pool>,
        routed: bool,
        pending: Pending,
        pdu: &[u8],
        h: &Header,
        name: String,
    ) {
        // The client's request is copied only when it is what goes out.
        let (pdu, h) = match self.mapped {
            Some(_) => (Bytes::new(), *h),
            None => (Bytes::copy_from_slice(pdu), *h),
        };
        tokio::spawn(async move {
            match pool.shared(routed).await {
                Ok(conn) => {
                    self.submit(&conn, pending, &pdu, &h, &name);
                }
                // The DSA refused the router's own bind: the client's
                // identity cannot be conveyed there.
                Err(Error {
                    kind: Kind::BindRefused(code),
                    text,
                }) => pending.fail(
                    &name,
                    Error::new(
                        Kind::BindRefused(code),
                        format!("your identity could not be established on DSA {name} ({text}, result {code})"),
                    ),
                ),
                Err(e) => pending.fail(
                    &name,
                    Error::new(Kind::Unreachable, format!("DSA {name}: {e}")),
                ),
            }
        });
    }
}
