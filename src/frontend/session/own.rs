//! A client's connections of its own (architecture.md, "Identity"), by DSA: open, or being
//! opened while the operations that need them wait in order.
//!
//! Opening one (a connection, or a spare, and the replay of the client's
//! bind) runs in a task of its own, so a DSA slow to accept or to bind
//! holds up only the operations that go to it, never the client's others.
//! Operations that come for that DSA meanwhile wait behind the first one
//! and are sent in the order they came once it is open. When it cannot be
//! opened, each waiting operation is told why ([`Outcome::Failed`]) and
//! decides for itself (a read goes to the next DSA of its partition, a
//! write is answered); when the client binds again or leaves first, they
//! are told [`Outcome::Dropped`].

use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pool::{BindPdu, Pool};
use crate::base::error::Error;
use crate::directory::knowledge::DsaName;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// What became of the connection an operation waited for.
pub(super) enum Outcome<'a> {
    /// Open: send on it.
    Open(&'a Arc<Conn>),
    /// It could not be opened (or it closed before the operation's turn).
    Failed(&'a Error),
    /// The client bound again or left while it was being opened.
    Dropped,
}

/// An operation waiting for a connection being opened: called once, with
/// what became of it.
pub(super) type Waiter = Box<dyn FnOnce(Outcome<'_>) + Send>;

/// A client's connections of its own, by DSA (names compare without
/// case). Shared with
/// the tasks that open them and with re-sent reads.
pub(super) struct Own {
    /// The client's address (`--send-proxy-to` DSAs are told it).
    client: std::net::SocketAddr,
    map: Mutex<HashMap<DsaName, Slot>>,
    /// The client bound again or left: nothing more is opened or kept
    /// here (an operation of the old identity still being placed must
    /// never open a connection the new one would use).
    closed: AtomicBool,
    /// Paged searches, by partition key: the DSA (name) and the
    /// connection their cookie belongs to ([`super::paged_lost`]).
    paged: Mutex<HashMap<String, (DsaName, Held)>>,
}

enum Slot {
    Open(Arc<Conn>),
    Opening(Arc<Opening>),
}

/// The connection of the client's own that state a DSA keeps per
/// connection (a paged search's cookie) went on.
#[derive(Clone)]
pub(super) enum Held {
    Conn(Arc<Conn>),
    Opening(Arc<Opening>),
}

impl Held {
    /// That connection is gone (closed or lost, or it never opened): the
    /// state went with it.
    pub(super) fn lost(&self) -> bool {
        match self {
            Held::Conn(c) => !c.is_alive(),
            Held::Opening(o) if o.waiting() => false,
            Held::Opening(o) => o.opened().is_none_or(|c| !c.is_alive()),
        }
    }
}

/// A connection being opened, and the operations waiting for it.
///
/// Locks: the state's is never held while another of the client's locks
/// is taken (an operation told its connection failed may be placed again,
/// which looks at the client's connections); the map reads only the
/// atomics here.
pub(super) struct Opening {
    state: Mutex<State>,
    /// Still being opened: operations for its DSA wait for it.
    waiting: AtomicBool,
    /// Opened, and the operations that waited were sent on it.
    conn: OnceLock<Arc<Conn>>,
}

enum State {
    /// Being opened; the operations waiting for it, in the order they
    /// came.
    Waiting(Vec<Waiter>),
    /// Opened, or not; `None`: dropped by the client.
    Done(Option<Result<Arc<Conn>, Error>>),
}

/// A connection of the client's own, open or on its way.
pub(super) enum Have {
    Open(Arc<Conn>),
    Opening(Arc<Opening>),
}

impl Own {
    /// The connections of the client at `client`: none yet.
    pub(super) fn new(client: std::net::SocketAddr) -> Arc<Own> {
        Arc::new(Own {
            client,
            map: Mutex::default(),
            closed: AtomicBool::new(false),
            paged: Mutex::default(),
        })
    }

    fn map(&self) -> MutexGuard<'_, HashMap<DsaName, Slot>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open connection to DSA `key`, if there is one.
    pub(super) fn open(&self, key: &DsaName) -> Option<Arc<Conn>> {
        let c = match self.map().get(key)? {
            Slot::Open(c) => c.clone(),
            Slot::Opening(o) => o.opened()?,
        };
        c.is_alive().then_some(c)
    }

    /// Whether the client has no connection of its own, open or being
    /// opened.
    /// What holds the client's state on DSA `key` now: its connection
    /// there, open or being opened.
    pub(super) fn held(&self, key: &DsaName) -> Option<Held> {
        Some(match self.map().get(key)? {
            Slot::Open(c) => Held::Conn(c.clone()),
            Slot::Opening(o) => Held::Opening(o.clone()),
        })
    }

    /// Note that a paged search in partition `part` went to DSA `dsa` on
    /// the connection `held`.
    pub(super) fn note_paged(&self, part: &str, dsa: &DsaName, held: Held) {
        let mut m = self.paged.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(part.to_string(), (dsa.clone(), held));
    }

    /// Where the client's last paged search in partition `part` went.
    pub(super) fn paged(&self, part: &str) -> Option<(DsaName, Held)> {
        let m = self.paged.lock().unwrap_or_else(|p| p.into_inner());
        m.get(part).cloned()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Whether the client has an open connection to DSA `key`.
    pub(super) fn has(&self, key: &DsaName) -> bool {
        self.open(key).is_some()
    }

    /// Make `conn` the client's own connection to DSA `key` (the one its
    /// bind ran on).
    pub(super) fn insert(&self, key: DsaName, conn: Arc<Conn>) {
        let mut map = self.map();
        if self.closed.load(Ordering::Acquire) {
            drop(map);
            return conn.release();
        }
        map.insert(key, Slot::Open(conn));
    }

    /// Whether the client bound again or left since this was made.
    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The client's connection to DSA `key` on `pool`: the open one, the
    /// one being opened, or, when there is neither, one opened now in a
    /// task of its own (bound by replaying `bind()`, anonymous for `None`;
    /// an error from `bind` is returned as it is).
    pub(super) fn get_or_open(
        self: &Arc<Self>,
        key: &DsaName,
        pool: &Arc<Pool>,
        bind: impl FnOnce() -> Result<Option<BindPdu>, Error>,
    ) -> Result<Have, Error> {
        let mut map = self.map();
        if self.closed() {
            return Err(left());
        }
        match map.get(key) {
            Some(Slot::Open(c)) if c.is_alive() => return Ok(Have::Open(c.clone())),
            Some(Slot::Opening(o)) => {
                if o.waiting() {
                    return Ok(Have::Opening(o.clone()));
                }
                // Only the task that opened it makes it `Open` (and gives
                // it back if the client no longer wants it): it has one
                // owner, so it is never given back twice.
                if let Some(c) = o.opened().filter(|c| c.is_alive()) {
                    return Ok(Have::Open(c));
                }
            }
            _ => {}
        }
        let bind = bind()?;
        let opening = Arc::new(Opening {
            state: Mutex::new(State::Waiting(Vec::new())),
            waiting: AtomicBool::new(true),
            conn: OnceLock::new(),
        });
        map.insert(key.clone(), Slot::Opening(opening.clone()));
        drop(map);
        let client = self.client;
        let (own, key, pool, o) = (
            Arc::downgrade(self),
            key.clone(),
            pool.clone(),
            opening.clone(),
        );
        tokio::spawn(async move {
            let is = match &bind {
                Some(b) => crate::backend::upstream::pool::Own::Replay(b),
                None => crate::backend::upstream::pool::Own::Anonymous,
            };
            let res = pool.private(is, client).await;
            let kept = o.complete(res);
            // Still the client's (it did not bind again or leave)?
            let ours = own.upgrade().is_some_and(|own| {
                let mut map = own.map();
                match map.get(&key) {
                    Some(Slot::Opening(x)) if Arc::ptr_eq(x, &o) => {
                        match &kept {
                            Some(c) => map.insert(key.clone(), Slot::Open(c.clone())),
                            None => map.remove(&key),
                        };
                        true
                    }
                    _ => false,
                }
            });
            // The client bound again or left meanwhile: given back (the
            // only place it is, so that it is never given back twice).
            if let (false, Some(c)) = (ours, kept) {
                c.release();
            }
        });
        Ok(Have::Opening(opening))
    }

    /// The client bound again or leaves: its open connections go back
    /// (kept as spares where they may be), and operations waiting for one
    /// being opened are told [`Outcome::Dropped`].
    pub(super) fn release_all(&self) {
        let slots: Vec<Slot> = {
            let mut map = self.map();
            self.closed.store(true, Ordering::Release);
            map.drain().map(|(_, s)| s).collect()
        };
        self.paged.lock().unwrap_or_else(|p| p.into_inner()).clear();
        for s in slots {
            match s {
                Slot::Open(c) => c.release(),
                Slot::Opening(o) => o.drop_waiters(),
            }
        }
    }
}

impl Opening {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    fn opened(&self) -> Option<Arc<Conn>> {
        self.conn.get().cloned()
    }

    /// Wait for the connection; at once when it is already open, or
    /// failed.
    pub(super) fn enqueue(&self, w: Waiter) {
        let mut state = self.state();
        let done = match &mut *state {
            State::Waiting(q) => return q.push(w),
            // Sent under the lock, so that an operation that comes now is
            // sent after those that waited.
            State::Done(Some(Ok(c))) => return w(Outcome::Open(c)),
            State::Done(done) => done.clone(),
        };
        drop(state);
        run(w, done.as_ref());
    }

    /// The connection is open, or could not be: the waiting operations
    /// get it (or why not) in the order they came. The connection, when
    /// the client still wants it; `None` when it failed or was dropped.
    fn complete(&self, res: Result<Arc<Conn>, Error>) -> Option<Arc<Conn>> {
        let mut state = self.state();
        let q = match &mut *state {
            State::Waiting(q) => std::mem::take(q),
            // Dropped meanwhile.
            State::Done(_) => {
                drop(state);
                if let Ok(c) = res {
                    c.release();
                }
                return None;
            }
        };
        match res {
            Ok(c) => {
                // Sent on it in order, under the lock (sending takes no
                // other lock of the client's).
                for w in q {
                    w(Outcome::Open(&c));
                }
                let _ = self.conn.set(c.clone());
                *state = State::Done(Some(Ok(c.clone())));
                self.waiting.store(false, Ordering::Release);
                Some(c)
            }
            Err(e) => {
                *state = State::Done(Some(Err(e.clone())));
                self.waiting.store(false, Ordering::Release);
                drop(state);
                for w in q {
                    w(Outcome::Failed(&e));
                }
                None
            }
        }
    }

    /// The client no longer wants it: its waiters are told so.
    fn drop_waiters(&self) {
        let mut state = self.state();
        let q = match &mut *state {
            State::Waiting(q) => std::mem::take(q),
            // Opened (the task that opened it gives it back), or failed.
            State::Done(_) => return,
        };
        *state = State::Done(None);
        self.waiting.store(false, Ordering::Release);
        drop(state);
        for w in q {
            w(Outcome::Dropped);
        }
    }
}

/// Why an operation of an identity that has ended gets no connection.
pub(super) fn left() -> Error {
    Error::new(
        crate::base::error::Kind::ConnectionLost { write: false },
        "the client bound again or left before its operation was sent",
    )
}

/// Hand waiter `w` its outcome.
fn run(w: Waiter, done: Option<&Result<Arc<Conn>, Error>>) {
    match done {
        Some(Ok(c)) => w(Outcome::Open(c)),
        Some(Err(e)) => w(Outcome::Failed(e)),
        None => w(Outcome::Dropped),
    }
}
