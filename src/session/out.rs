//! A client's outbound side: its bounded queue of response PDUs and the map
//! of its outstanding operations (for abandon and clean-up).
//!
//! The queue is bounded in PDUs and bytes. A client that stops reading fills it; the
//! router then abandons that client's operations upstream and disconnects
//! it, and nobody else waits: upstream readers never block on a client.

use super::fanout::Fan;
use crate::upstream::conn::Conn;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Where an outstanding operation runs, for abandon.
enum Tracked {
    /// On one DSA connection, under that connection's message ID.
    Op(Weak<Conn>, i32),
    /// A search spanning partitions.
    Fan(Weak<Fan>),
}

impl Tracked {
    fn abandon(self) {
        match self {
            Tracked::Op(conn, id) => {
                if let Some(conn) = conn.upgrade() {
                    conn.abandon(id);
                }
            }
            Tracked::Fan(fan) => {
                if let Some(fan) = fan.upgrade() {
                    fan.abandon();
                }
            }
        }
    }
}

pub enum Delivery {
    Queued,
    /// The client's queue is full: it is not reading.
    Full,
    /// The client is gone.
    Gone,
}

/// The queue itself: a plain deque, which allocates nothing until the first
/// PDU (an idle connection's queue costs no heap; a channel would hold a
/// block of slots for every connection).
struct Queue {
    items: VecDeque<Bytes>,
    /// The writer is gone: nothing more is taken.
    closed: bool,
}

/// The writer's end of a client's queue.
pub struct OutRx(Arc<ClientOut>);

/// Nothing queued.
#[derive(Debug)]
pub struct Empty;

impl OutRx {
    /// The next PDU, waiting for one; `None` once closed.
    pub async fn recv(&mut self) -> Option<Bytes> {
        loop {
            match self.try_recv() {
                Ok(b) => return Some(b),
                Err(Empty) if lock(&self.0.q).closed => return None,
                Err(Empty) => self.0.ready.notified().await,
            }
        }
    }

    /// The next PDU if one is queued.
    pub fn try_recv(&mut self) -> Result<Bytes, Empty> {
        let mut q = lock(&self.0.q);
        match q.items.pop_front() {
            Some(b) => {
                if q.items.is_empty() && q.items.capacity() > 256 {
                    // A burst is over: give its memory back.
                    q.items = VecDeque::new();
                }
                Ok(b)
            }
            None => Err(Empty),
        }
    }

    pub fn is_empty(&self) -> bool {
        lock(&self.0.q).items.is_empty()
    }
}

impl Drop for OutRx {
    fn drop(&mut self) {
        let mut q = lock(&self.0.q);
        q.closed = true;
        q.items = VecDeque::new();
    }
}

pub struct ClientOut {
    q: Mutex<Queue>,
    /// Wakes the writer when a PDU is queued.
    ready: Notify,
    /// PDUs and bytes queued and not yet written, against the limits.
    queued_pdus: AtomicUsize,
    queued_bytes: AtomicUsize,
    max_pdus: usize,
    max_bytes: usize,
    outstanding: Mutex<HashMap<i32, Tracked>>,
    /// Cancelled to disconnect the client (overflow, shutdown).
    pub kill: CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientOut {
    pub fn new(max_pdus: usize, max_bytes: usize) -> (Arc<ClientOut>, OutRx) {
        let out = Arc::new(ClientOut {
            q: Mutex::new(Queue {
                items: VecDeque::new(),
                closed: false,
            }),
            ready: Notify::new(),
            queued_pdus: AtomicUsize::new(0),
            queued_bytes: AtomicUsize::new(0),
            max_pdus: max_pdus.max(1),
            max_bytes: max_bytes.max(1),
            outstanding: Mutex::new(HashMap::new()),
            kill: CancellationToken::new(),
        });
        (out.clone(), OutRx(out))
    }

    /// Append a PDU; false when the writer is gone.
    fn push(&self, pdu: Bytes) -> bool {
        {
            let mut q = lock(&self.q);
            if q.closed {
                return false;
            }
            q.items.push_back(pdu);
        }
        self.ready.notify_one();
        true
    }

    /// Queue a PDU for the client without waiting.
    pub fn deliver(&self, pdu: Bytes) -> Delivery {
        let len = pdu.len();
        if self.queued_pdus.load(Ordering::Relaxed) >= self.max_pdus
            || self.queued_bytes.load(Ordering::Relaxed) + len > self.max_bytes
        {
            return Delivery::Full;
        }
        self.queued_pdus.fetch_add(1, Ordering::Relaxed);
        self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        if self.push(pdu) {
            Delivery::Queued
        } else {
            Delivery::Gone
        }
    }

    /// Queue a PDU the router wrote itself, waiting for room (the session
    /// task's own answers; bounded by the client's outstanding limit).
    pub async fn send(&self, pdu: Bytes) -> bool {
        self.queued_pdus.fetch_add(1, Ordering::Relaxed);
        self.queued_bytes.fetch_add(pdu.len(), Ordering::Relaxed);
        self.push(pdu)
    }

    /// Count an operation as outstanding before it is registered upstream,
    /// so that a response racing the registration cannot leave a stale
    /// entry behind.
    /// The writer took a PDU of `len` bytes off the queue.
    pub fn dequeued(&self, len: usize) {
        self.queued_pdus.fetch_sub(1, Ordering::Relaxed);
        self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
    }

    pub fn track_placeholder(&self, msgid: i32) {
        lock(&self.outstanding).insert(msgid, Tracked::Op(Weak::new(), 0));
    }

    /// Record a search spanning partitions as outstanding.
    pub fn track_fan(&self, msgid: i32, fan: &Arc<Fan>) {
        lock(&self.outstanding).insert(msgid, Tracked::Fan(Arc::downgrade(fan)));
    }

    /// Record where an outstanding operation went (if it is still
    /// outstanding).
    pub fn track(&self, msgid: i32, conn: &Arc<Conn>, upstream_id: i32) {
        if let Some(e) = lock(&self.outstanding).get_mut(&msgid) {
            *e = Tracked::Op(Arc::downgrade(conn), upstream_id);
        }
    }

    /// The operation ended (its final response is being delivered).
    pub fn finish(&self, msgid: i32) {
        lock(&self.outstanding).remove(&msgid);
    }

    pub fn outstanding(&self) -> usize {
        lock(&self.outstanding).len()
    }

    /// Abandon one outstanding operation upstream (client's AbandonRequest).
    pub fn abandon(&self, msgid: i32) {
        let entry = lock(&self.outstanding).remove(&msgid);
        if let Some(t) = entry {
            t.abandon();
        }
    }

    /// Abandon everything outstanding (disconnect, overflow).
    pub fn abandon_all(&self) {
        let all: Vec<Tracked> = lock(&self.outstanding).drain().map(|(_, v)| v).collect();
        for t in all {
            t.abandon();
        }
    }

    /// The client is not reading: abandon its work and disconnect it.
    pub fn overflow(&self) {
        if !self.kill.is_cancelled() {
            tracing::warn!("client output queue full (client not reading); abandoning its operations and disconnecting it");
            self.kill.cancel();
        }
        self.abandon_all();
    }
}
