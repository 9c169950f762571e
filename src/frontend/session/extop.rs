//! Extended operations the router does not answer itself: forwarded to a
//! DSA, on the client's own connection (the DSA may keep state for them: a
//! transaction does), and Cancel (RFC 3909), which goes to the connection
//! that runs the operation it names, under that connection's message ID.
//!
//! An extended operation names no entry, so it goes to the partition of the
//! client's bind DN when it is bound and that DN lies in a partition, else
//! to the home partition (the first in knowledge order), and is treated as
//! an update there (the partition's write DSA, never re-sent): an unknown
//! operation may change data, and a transaction's end commits it.

use super::operation::Operation;
use super::out::{Running, ToClient};
use super::phases::Answered;
use super::{Identity, Session};
use crate::backend::upstream::pending::{Kind, Pending, Sink};
use crate::proto::dn::Dn;
use crate::proto::wire::frame;
use crate::proto::wire::request::Request;
use crate::proto::wire::response::{self, Code};
use crate::proto::wire::state::{self, OID_CANCEL};
use bytes::BytesMut;
use std::ops::ControlFlow;
use std::sync::Arc;

impl Session {
    /// Forward an extended operation the router does not know.
    pub(super) async fn forward_extended(&mut self, op: Operation) -> Answered {
        let routing = self.router.routing();
        let by_identity = match &self.who.identity {
            Identity::Bound(b) => {
                Dn::parse_ldap(&b.dn)
                    .ok()
                    // The identity's own DN: in a horizontal partition,
                    // its slot.
                    .and_then(|dn| routing.table.lookup(&dn).partition().map(|_| b.dn.clone()))
            }
            Identity::Anonymous => None,
        };
        let target = by_identity.or_else(|| routing.table.home().map(|p| p.prefix.to_string()));
        drop(routing);
        match target {
            Some(t) => ControlFlow::Continue(op.aimed_at(t, true)),
            None => {
                let msg = "dsa-router: no partition to send the extended operation to";
                self.reply(&op.req, Code::Unavailable, "", msg).await;
                ControlFlow::Break(super::Flow::Continue)
            }
        }
    }

    /// Cancel (RFC 3909): the operation it names is cancelled where it
    /// runs. On a DSA connection, the DSA answers both (the cancelled
    /// operation with `canceled`); a spanning search is ended by the
    /// router.
    pub(super) async fn cancel(&mut self, req: &Request, value: Option<&[u8]>) {
        let Some(id) = value.and_then(state::cancel_id) else {
            let msg = "dsa-router: malformed cancel request value";
            return self.reply(req, Code::ProtocolError, "", msg).await;
        };
        let running = match self.client.out.running(id) {
            // A hedged read whose winner already answers: its DSA cancels
            // it, so that the canceled result follows every entry.
            Some(Running::Race(race)) => match race.cancel() {
                crate::backend::upstream::hedge::Cancelled::Forward(conn, upstream) => {
                    Some(Running::Op(conn, upstream))
                }
                crate::backend::upstream::hedge::Cancelled::Done => {
                    return self.reply(req, Code::Success, "", "").await
                }
                crate::backend::upstream::hedge::Cancelled::TooLate => {
                    let msg = format!("dsa-router: operation {id} has ended; too late to cancel");
                    return self.reply(req, Code::TooLate, "", &msg).await;
                }
            },
            other => other,
        };
        match running {
            None => {
                let msg = format!("dsa-router: no outstanding operation with message ID {id}");
                self.reply(req, Code::NoSuchOperation, "", &msg).await
            }
            Some(Running::Placing) => {
                let msg = format!(
                    "dsa-router: operation {id} is not yet placed on a DSA; abandon it instead"
                );
                self.reply(req, Code::CannotCancel, "", &msg).await
            }
            // The router stops a spanning search itself (every part) and
            // answers canceled.
            Some(Running::Race(_)) => {}
            Some(Running::Fan(fan)) => {
                if fan.cancel() {
                    self.reply(req, Code::Success, "", "").await
                } else {
                    let msg = format!("dsa-router: operation {id} has ended; too late to cancel");
                    self.reply(req, Code::TooLate, "", &msg).await
                }
            }
            Some(Running::Op(conn, upstream)) => {
                let mut b = BytesMut::new();
                let value = state::cancel_value(upstream);
                response::extended_request(0, OID_CANCEL, Some(value), &mut b);
                let Ok(ch) = frame::header(&b) else {
                    return;
                };
                let delivery = Arc::new(ToClient {
                    out: self.client.out.clone(),
                    msgid: req.msgid,
                    resp_tag: 0x78,
                    rebind: None,
                });
                let op = crate::observe::metrics::op_index("extended") as u8;
                let p = Pending::new(Sink::To(delivery.clone()), Kind::fixed())
                    .counted(op, self.router.backend.metrics.clone());
                self.client.out.track_placeholder(req.msgid);
                let sent = conn.submit(p, &b, &ch, None, |c, i| {
                    crate::backend::upstream::Delivery::placed(&*delivery, c, i)
                });
                if sent.is_err() {
                    self.client.out.finish(req.msgid);
                    let msg = format!("dsa-router: operation {id} is ending; too late to cancel");
                    self.reply(req, Code::TooLate, "", &msg).await
                }
            }
        }
    }
}
