//! Responses on their way out of a DSA connection's reader: gathered per
//! client over one read from a DSA, so that a client whose entry and
//! result came in together gets them in one write, through its
//! [`Outlet`].

use bytes::BytesMut;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A wait for a client's writer to take from its queue.
pub(crate) type Drained<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A client's write side, as the batch sees it.
pub trait Outlet: Send + Sync {
    /// Hand the client `bytes`; `ended` are the message IDs of operations
    /// whose final response is among them.
    fn hand_over(&self, bytes: &mut BytesMut, ended: &[i32]);

    /// Bytes waiting in the client's queue (what it has not read yet),
    /// and the backlog over which its DSA connection's reader paces
    /// itself to it (`upstream::pace`).
    fn backlog(&self) -> (usize, usize) {
        (0, usize::MAX)
    }

    /// Resolves when the client's writer next takes from its queue.
    fn drained(&self) -> Drained<'_> {
        Box::pin(std::future::pending())
    }
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

    /// Hand each client its responses; a client whose backlog is over its
    /// soft mark after it, if one is (see `upstream::pace`).
    pub fn flush(&mut self) -> Option<Arc<dyn Outlet>> {
        let mut pressing: Option<Arc<dyn Outlet>> = None;
        for (out, mut b, mut ended) in self.to.drain(..) {
            out.hand_over(&mut b, &ended);
            let (queued, soft) = out.backlog();
            if queued > soft && pressing.is_none() {
                pressing = Some(out.clone());
            }
            if self.spare.len() < SPARES && b.capacity() <= SPARE_BYTES {
                b.clear();
                ended.clear();
                self.spare.push((b, ended));
            }
        }
        pressing
    }
}
