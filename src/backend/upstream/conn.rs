//! One TCP connection to a DSA, shared by many operations: the handle the
//! rest of the router holds ([`super::connect`] opens it).
//!
//! Operations are registered in its pending table ([`super::table`])
//! under a message ID of this connection's own and sent with only that ID
//! rewritten; the reader task ([`super::reader`]) demultiplexes responses
//! by it ([`super::demux`]), rewrites it back to the client's, and pushes
//! the PDU onto the client's bounded outbound queue. An operation is
//! complete at its final response (`SearchResultDone`, not the first
//! entry); its in-flight guard drops then. When the connection dies, every
//! pending operation gets an answer ([`super::evict`]).

use super::pending::Pending;
use super::spare::{Spare, Spares, Standing};
use super::table::Table;
use crate::backend::dsa_state::DsaState;
use crate::base::outbox::{Outbox, Push, Step, WriteEnd};
use crate::proto::wire::frame::{self, Header};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

pub struct Conn {
    pub dsa: Arc<DsaState>,
    /// Requests to the DSA, written by the sender when nothing is queued.
    pub(super) out: Outbox,
    /// Its operations by message ID; open while it is alive.
    pub(super) ops: Table<Pending>,
    /// Cancelled to close it: both its tasks stop.
    pub(super) stop: CancellationToken,
    /// Whether it is a client's own, kept as a spare when its client is
    /// done with it, and what it counts as on its DSA ([`super::spare`]).
    pub(super) standing: Standing<Conn>,
}

thread_local! {
    /// Where [`Conn::submit`] rewrites a request before writing it.
    static SCRATCH: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// A scratch buffer grown past this (a large request) is not kept.
const SCRATCH_KEEP: usize = 64 * 1024;

impl Conn {
    /// A connection to `dsa`, alive, with nothing pending (its tasks are
    /// started by [`super::connect`]).
    pub(super) fn new(dsa: Arc<DsaState>) -> Conn {
        Conn {
            dsa,
            out: Outbox::corked(),
            ops: Table::new(),
            stop: CancellationToken::new(),
            standing: Standing::new(),
        }
    }

    /// A connection to `dsa` whose tasks never start (nothing is sent):
    /// for tests of what is told about a connection.
    #[cfg(test)]
    pub(crate) fn unstarted(dsa: Arc<DsaState>) -> Arc<Conn> {
        Arc::new(Conn::new(dsa))
    }

    /// Count it as a client's own connection while it lives (with the
    /// count reserved for it), no longer as a spare.
    pub fn count_as_own(self: &Arc<Self>, count: crate::backend::dsa_state::Count) {
        self.standing.count_as_own(count);
    }

    pub fn is_alive(&self) -> bool {
        self.ops.is_open()
    }

    /// Make it a client's own connection that goes back to `spares` when
    /// its client is done with it.
    pub(crate) fn belongs_to(&self, spares: &Arc<Spares<Conn>>) {
        self.standing.belongs_to(spares);
    }

    /// Its client is done with it: kept among its DSA's spares for a later
    /// bind when nothing is outstanding on it and nothing sent on it may
    /// have left state behind; closed otherwise.
    pub fn release(self: &Arc<Self>) {
        if !self.standing.give_back(self) {
            self.close();
        }
    }

    /// It was a spare: it served an earlier client.
    pub fn reused(&self) -> bool {
        self.standing.reused()
    }

    /// Register `p` and send `pdu` under this connection's message ID for
    /// it, with `control` (one encoded control) appended when given: the one
    /// way an operation goes to a DSA. `placed` learns the ID before the
    /// request is sent; when it says the operation ended meanwhile, nothing
    /// is sent. `Err` gives the operation back when the connection is
    /// closed.
    pub fn submit(
        self: &Arc<Self>,
        p: Pending,
        pdu: &[u8],
        h: &Header,
        control: Option<&[u8]>,
        placed: impl FnOnce(&Arc<Conn>, i32) -> bool,
    ) -> Result<i32, Pending> {
        let id = self.ops.register(p)?;
        if !placed(self, id) {
            self.forget(id);
            return Ok(id);
        }
        self.standing
            .sent(|| control.is_some() || !frame::leaves_no_state(pdu, h));
        // Rewritten into this thread's scratch buffer and written from
        // there: no allocation per request unless it has to wait.
        SCRATCH.with(|s| {
            let mut b = s.borrow_mut();
            b.clear();
            b.reserve(pdu.len() + control.map_or(4, |c| c.len() + 8));
            frame::rewrite(pdu, h, id, control, &mut b);
            if self.is_alive() {
                // Refused only when closed: the connection's failure
                // reaches the operation through its reader.
                let _ = self.out.push_buf(&mut b, None);
            }
            if b.capacity() > SCRATCH_KEEP {
                *b = BytesMut::new();
            }
        });
        Ok(id)
    }

    /// Send a PDU: written at once when nothing is queued, else queued.
    pub fn send(&self, pdu: Bytes) -> bool {
        self.is_alive() && matches!(self.out.push(pdu, None), Push::Written | Push::Queued)
    }

    /// Forget an operation and abandon it on the DSA (client abandon,
    /// client gone, or overflow). Returns whether it was still pending.
    pub fn abandon(&self, id: i32) -> bool {
        let was = self.ops.remove(id).is_some();
        if was {
            // Its answer may still come, to nobody.
            self.standing.taint();
            self.send_abandon(id);
        }
        was
    }

    /// Whether operation `id` here is a persistent search.
    pub fn is_persistent(&self, id: i32) -> bool {
        self.ops.lock().get(&id).is_some_and(Pending::is_persistent)
    }

    /// End persistent search `id` (the router drains): abandoned on the
    /// DSA, its client answered with `e`. False when it is not one here.
    pub fn end_persistent(&self, id: i32, e: crate::base::error::Error) -> bool {
        let ended = self.ops.drain_where(|i, p| i == id && p.is_persistent());
        let Some((_, p)) = ended.into_iter().next() else {
            return false;
        };
        self.standing.taint();
        self.send_abandon(id);
        p.fail(&self.dsa.name, e);
        true
    }

    /// Tell the DSA to abandon operation `id` of this connection.
    pub(super) fn send_abandon(&self, id: i32) {
        let mut b = BytesMut::with_capacity(16);
        frame::abandon(self.ops.request_id(), id, &mut b);
        self.send(b.freeze());
    }

    /// Remove an operation without telling the DSA (it already answered or
    /// the waiter gave up).
    pub fn forget(&self, id: i32) -> Option<Pending> {
        self.ops.remove(id)
    }

    pub fn pending_count(&self) -> usize {
        self.ops.len()
    }

    /// Close the connection; pending operations are failed.
    pub fn close(&self) {
        self.stop.cancel();
    }
}

impl Spare for Conn {
    fn is_alive(&self) -> bool {
        Conn::is_alive(self)
    }

    fn is_idle(&self) -> bool {
        self.is_alive() && self.pending_count() == 0
    }

    fn close(&self) {
        Conn::close(self)
    }

    fn standing(&self) -> &Standing<Conn> {
        &self.standing
    }
}

/// The writer task: drain what senders could not write at once, in
/// batches.
pub(super) async fn writer<W: AsyncWrite + Unpin>(mut wire: WriteEnd<W>, conn: Arc<Conn>) {
    let mut buf = BytesMut::new();
    loop {
        match wire.drain_step(&conn.out, &mut buf, &conn.stop).await {
            Step::Wrote => continue,
            Step::Failed => {
                conn.stop.cancel();
                break;
            }
            Step::Idle => {}
        }
        tokio::select! {
            _ = conn.out.notified() => {}
            _ = conn.stop.cancelled() => break,
        }
    }
    conn.out.close();
    wire.shutdown().await;
}
