//! Where an operation's responses go, as seen from a DSA connection.
//!
//! The upstream side knows no clients: an operation registered on a
//! [`Conn`](super::conn::Conn) carries a [`Delivery`], implemented by the
//! client side (one client operation) and by the fan-out (one partition's
//! share of a spanning search), and, when it may be sent again elsewhere, a
//! [`Resend`] that the connection hands it back through when its DSA fails
//! it. Responses for the same client gathered over one read from a DSA go
//! out in one write, through the [`Batch`] and the client's [`Outlet`].

use super::pending::Pending;
use crate::error::Error;
use crate::wire::frame::Header;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// The receiving end of an operation's responses.
pub trait Delivery: Send + Sync {
    /// A response that is not the last (entry, reference, intermediate).
    /// Called with no lock of the connection held: it may abandon
    /// operations on the same connection.
    fn deliver(&self, pdu: &[u8], h: &Header, batch: &mut Batch);
    /// The final response: the operation ends with it.
    fn finish(&self, pdu: Bytes, h: &Header, batch: &mut Batch);
    /// The router answers instead of the DSA: the operation ends with `e`.
    fn fail(&self, e: &Error);
    /// The operation now runs as `id` on `conn` (first sent, or re-sent
    /// elsewhere). False when it ended meanwhile: it is then not sent.
    fn placed(&self, conn: &Arc<super::conn::Conn>, id: i32) -> bool;
    /// Whether the operation is a client's (times out at `--op-timeout`);
    /// the router's own requests (binds, probes) time out on their own.
    fn expires(&self) -> bool {
        true
    }
    /// The operation, running as `id` on `conn`, was hedged: it now runs
    /// as `race` (which the client side abandons or cancels as a whole).
    /// False when it is no longer that operation: the hedge is not sent.
    fn raced(
        &self,
        _race: &Arc<super::hedge::Race>,
        _conn: &Arc<super::conn::Conn>,
        _id: i32,
    ) -> bool {
        true
    }
}

/// An operation that may be sent to another DSA: the connection hands the
/// pending operation back through it when its DSA fails it before any
/// response went out.
pub trait Resend: Send + Sync {
    /// Send `p` again; `failed` names the DSA that let it down and `why`
    /// is what the client gets if no other DSA can take it.
    fn resend(self: Box<Self>, p: Pending, failed: &str, why: Error);
    /// A copy that sends the hedge of this read: to another DSA of the
    /// same group as the one it waits on.
    fn hedger(&self) -> Box<dyn Resend>;
}

/// A client's write side, as the batch sees it.
pub trait Outlet: Send + Sync {
    /// Hand the client `bytes`; `ended` are the message IDs of operations
    /// whose final response is among them.
    fn hand_over(&self, bytes: &mut BytesMut, ended: &[i32]);
}

/// Responses gathered over one read from a DSA, a buffer per client: a
/// client whose entry and result came in together gets them in one write.
#[derive(Default)]
pub struct Batch {
    to: Vec<(Arc<dyn Outlet>, BytesMut, Vec<i32>)>,
    /// Buffers of earlier flushes, kept for the next (a reader's batches
    /// allocate nothing once warm).
    spare: Vec<(BytesMut, Vec<i32>)>,
}

/// Spare buffers a batch keeps, and the largest it keeps.
const SPARES: usize = 8;
const SPARE_BYTES: usize = 64 * 1024;

impl Batch {
    /// The index of the buffer for `out` (the last few clients are looked
    /// up; a read rarely holds responses for more).
    fn index<O: Outlet + 'static>(&mut self, out: &Arc<O>) -> usize {
        let n = self.to.len();
        let from = n.saturating_sub(8);
        let key = Arc::as_ptr(out) as *const ();
        match self.to[from..]
            .iter()
            .position(|(o, _, _)| Arc::as_ptr(o) as *const () == key)
        {
            Some(i) => from + i,
            None => {
                let o: Arc<dyn Outlet> = out.clone();
                let (b, ended) = self.spare.pop().unwrap_or_default();
                self.to.push((o, b, ended));
                n
            }
        }
    }

    /// The buffer for `out`.
    pub fn to<O: Outlet + 'static>(&mut self, out: &Arc<O>) -> &mut BytesMut {
        let i = self.index(out);
        &mut self.to[i].1
    }

    /// The buffer for `out`, for the final response of operation `msgid`
    /// (ended as the buffer is handed over).
    pub fn finishing<O: Outlet + 'static>(&mut self, out: &Arc<O>, msgid: i32) -> &mut BytesMut {
        let i = self.index(out);
        self.to[i].2.push(msgid);
        &mut self.to[i].1
    }

    /// Hand each client its responses.
    pub fn flush(&mut self) {
        for (out, mut b, mut ended) in self.to.drain(..) {
            out.hand_over(&mut b, &ended);
            if self.spare.len() < SPARES && b.capacity() <= SPARE_BYTES {
                b.clear();
                ended.clear();
                self.spare.push((b, ended));
            }
        }
    }
}
