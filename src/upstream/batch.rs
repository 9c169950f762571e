//! Responses on their way out of a DSA connection's reader: gathered per
//! client over one read from a DSA, so that a client whose entry and
//! result came in together gets them in one write, through its
//! [`Outlet`].

use bytes::BytesMut;
use std::sync::Arc;

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
