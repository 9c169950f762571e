//! A client's outbound side: its bounded queue of response PDUs and the map
//! of its outstanding operations (for abandon and clean-up).
//!
//! The queue is bounded in PDUs and bytes. A client that stops reading fills it; the
//! router then abandons that client's operations upstream and disconnects
//! it, and nobody else waits: upstream readers never block on a client.

use crate::backend::upstream::batch::{Batch, Drained, Outlet};
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::hedge::Race;
use crate::backend::upstream::pool::BindPdu;
use crate::backend::upstream::{Delivery, Source};
use crate::base::error::Error;
use crate::base::fasthash::FastMap;
use crate::base::outbox::{Bound, Outbox, Push};
use crate::proto::wire::frame::{self, Frame, Header, Pdu};
use crate::proto::wire::response;
use bytes::{Bytes, BytesMut};
use std::sync::{Arc, Mutex, Weak};
use tokio_util::sync::CancellationToken;

/// How long the session waits for room in a client's full queue for an
/// answer of its own before it counts the client as stalled.
pub const LOCAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A search spanning partitions ([`super::fanout::Fan`]) as the client's
/// outstanding operations know it: through this, so that the fan-out
/// delivers to the client without the two modules importing each other.
pub trait Spanning: Send + Sync {
    /// The client abandoned it (or is gone): stop every part, answer
    /// nothing.
    fn abandon(&self);
    /// The client cancelled it: stop every part, answer `canceled`. False
    /// when it had already ended.
    fn cancel(self: Arc<Self>) -> bool;
}

/// Where an outstanding operation runs, for abandon.
enum Tracked {
    /// On one DSA connection, under that connection's message ID.
    Op(Weak<Conn>, i32),
    /// A search spanning partitions.
    Fan(Weak<dyn Spanning>),
    /// A hedged read, on two DSAs.
    Race(Weak<Race>),
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
            Tracked::Race(race) => {
                if let Some(race) = race.upgrade() {
                    race.abandon();
                }
            }
        }
    }
}

/// Where an outstanding operation runs (for Cancel).
pub enum Running {
    /// Counted, not yet on a DSA connection.
    Placing,
    /// On `conn` under that connection's message ID.
    Op(Arc<Conn>, i32),
    /// A search spanning partitions.
    Fan(Arc<dyn Spanning>),
    /// A hedged read.
    Race(Arc<Race>),
}

/// What became of a response handed to a client.
pub enum Handed {
    /// Written to the client, or queued for its writer.
    Queued,
    /// The client's queue is full: it is not reading.
    Full,
    /// The client is gone.
    Gone,
}

pub struct ClientOut {
    /// Responses to the client: written at once when nothing is queued.
    pub(super) ob: Outbox,
    /// What may wait in the queue for a client that does not read.
    bound: Bound,
    outstanding: Mutex<FastMap<i32, Tracked>>,
    /// Cancelled to disconnect the client (overflow, shutdown).
    pub kill: CancellationToken,
    /// The client's address, for the warnings.
    peer: std::net::SocketAddr,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientOut {
    pub(crate) fn new(
        max_pdus: usize,
        max_bytes: usize,
        budget: Arc<crate::base::outbox::Budget>,
        peer: std::net::SocketAddr,
    ) -> Arc<ClientOut> {
        Arc::new(ClientOut {
            ob: Outbox::with_budget(budget),
            bound: Bound {
                pdus: max_pdus.max(1),
                bytes: max_bytes.max(1),
            },
            outstanding: Mutex::new(FastMap::default()),
            kill: CancellationToken::new(),
            peer,
        })
    }

    /// Send a PDU to the client without waiting: written at once when
    /// nothing is queued, else queued within the client's limits.
    pub fn deliver(&self, pdu: Bytes) -> Handed {
        handed(self.ob.push(pdu, Some(self.bound)))
    }

    /// Send a PDU the router wrote itself (the session task's own
    /// answers), within the client's queue bounds: while the queue is full
    /// the session waits (reading no more requests, so a client that
    /// pipelines and never reads holds at most its queue); a client that
    /// reads nothing for [`LOCAL_WAIT`] is disconnected.
    pub async fn send(&self, pdu: Bytes) -> bool {
        let deadline = tokio::time::Instant::now() + LOCAL_WAIT;
        loop {
            let drained = self.ob.drained();
            tokio::pin!(drained);
            drained.as_mut().enable();
            match self.ob.push(pdu.clone(), Some(self.bound)) {
                Push::Written | Push::Queued => return true,
                Push::Closed => return false,
                Push::Full => {}
            }
            tokio::select! {
                _ = drained => {}
                _ = self.kill.cancelled() => return false,
                _ = tokio::time::sleep_until(deadline) => {
                    self.overflow();
                    return false;
                }
            }
        }
    }

    /// Count an operation as outstanding before it is registered upstream,
    /// so that a response racing the registration cannot leave a stale
    /// entry behind.
    pub fn track_placeholder(&self, msgid: i32) {
        lock(&self.outstanding).insert(msgid, Tracked::Op(Weak::new(), 0));
    }

    /// Record a search spanning partitions as outstanding.
    pub fn track_fan<F: Spanning + 'static>(&self, msgid: i32, fan: &Arc<F>) {
        let fan: Weak<dyn Spanning> = Arc::downgrade(fan) as Weak<F>;
        lock(&self.outstanding).insert(msgid, Tracked::Fan(fan));
    }

    /// Record where an outstanding operation went (if it is still
    /// outstanding).
    /// outstanding: false when the client abandoned it meanwhile, and then
    /// it is not to be sent).
    pub fn track(&self, msgid: i32, conn: &Arc<Conn>, upstream_id: i32) -> bool {
        match lock(&self.outstanding).get_mut(&msgid) {
            Some(e) => {
                *e = Tracked::Op(Arc::downgrade(conn), upstream_id);
                true
            }
            None => false,
        }
    }

    /// Record that operation `msgid`, running as `id` on `conn`, was
    /// hedged: false when it is no longer that operation (abandoned, or
    /// ended and its message ID used again), and then the hedge is not
    /// to be sent.
    pub fn track_race(&self, msgid: i32, race: &Arc<Race>, conn: &Arc<Conn>, id: i32) -> bool {
        let mut map = lock(&self.outstanding);
        match map.get_mut(&msgid) {
            Some(e @ Tracked::Op(..)) => {
                let same = matches!(&*e, Tracked::Op(c, i) if *i == id && std::ptr::eq(c.as_ptr(), Arc::as_ptr(conn)));
                if same {
                    *e = Tracked::Race(Arc::downgrade(race));
                }
                same
            }
            _ => false,
        }
    }

    /// The operation ended (its final response is being delivered).
    pub fn finish(&self, msgid: i32) {
        lock(&self.outstanding).remove(&msgid);
    }

    /// Where the outstanding operation `msgid` runs, if it does.
    pub fn running(&self, msgid: i32) -> Option<Running> {
        match lock(&self.outstanding).get(&msgid)? {
            Tracked::Op(conn, id) => Some(match conn.upgrade() {
                Some(c) => Running::Op(c, *id),
                None => Running::Placing,
            }),
            Tracked::Fan(fan) => fan.upgrade().map(Running::Fan),
            Tracked::Race(race) => race.upgrade().map(Running::Race),
        }
    }

    /// Whether the client's operation `msgid` is still outstanding.
    pub fn is_outstanding(&self, msgid: i32) -> bool {
        lock(&self.outstanding).contains_key(&msgid)
    }

    pub fn outstanding(&self) -> usize {
        lock(&self.outstanding).len()
    }

    /// How many of the outstanding operations are persistent searches on
    /// one DSA (a drain waits for the others).
    pub fn persistent(&self) -> usize {
        lock(&self.outstanding)
            .values()
            .filter(|t| matches!(t, Tracked::Op(c, id) if c.upgrade().is_some_and(|c| c.is_persistent(*id))))
            .count()
    }

    /// End the client's persistent searches (the router drains): each is
    /// abandoned on its DSA and answered `unavailable`. How many ended.
    pub fn end_persistent(&self) -> usize {
        let running: Vec<(Arc<Conn>, i32)> = lock(&self.outstanding)
            .values()
            .filter_map(|t| match t {
                Tracked::Op(c, id) => c.upgrade().map(|c| (c, *id)),
                _ => None,
            })
            .collect();
        let mut ended = 0;
        for (conn, id) in running {
            let e = Error::new(
                crate::base::error::Kind::ShuttingDown,
                "dsa-router: the router is shutting down; the persistent search ended",
            );
            if conn.end_persistent(id, e) {
                ended += 1;
            }
        }
        ended
    }

    /// The client's address.
    pub fn peer(&self) -> std::net::SocketAddr {
        self.peer
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
            tracing::warn!(client = %self.peer, "client output queue full (client not reading); abandoning its operations and disconnecting it");
            self.kill.cancel();
        }
        self.abandon_all();
    }
}

/// What a push to a client's queue means for the response.
fn handed(p: Push) -> Handed {
    match p {
        Push::Written | Push::Queued => Handed::Queued,
        Push::Full => Handed::Full,
        Push::Closed => Handed::Gone,
    }
}

impl Outlet for ClientOut {
    /// A client that is not reading (its queue full) is disconnected and
    /// its operations abandoned; so are the operations of a client that is
    /// gone.
    fn hand_over(&self, bytes: &mut BytesMut, ended: &[i32]) {
        for &msgid in ended {
            self.finish(msgid);
        }
        let pushed = match self.ob.push_buf(bytes, Some(self.bound)) {
            Push::Written | Push::Queued => Handed::Queued,
            Push::Full => Handed::Full,
            Push::Closed => Handed::Gone,
        };
        match pushed {
            Handed::Queued => {}
            Handed::Full => self.overflow(),
            Handed::Gone => self.abandon_all(),
        }
    }

    /// The soft mark: a quarter of the client's queue bound, at most
    /// [`crate::backend::upstream::pace::SOFT`].
    fn backlog(&self) -> (usize, usize) {
        let soft = (self.bound.bytes / 4).min(crate::backend::upstream::pace::SOFT);
        (self.ob.queued_bytes(), soft)
    }

    fn drained(&self) -> Drained<'_> {
        Box::pin(self.ob.drained())
    }
}

/// One client operation's responses: to the client's queue under the
/// client's message ID.
pub struct ToClient {
    pub out: Arc<ClientOut>,
    pub msgid: i32,
    /// The response tag for errors the router answers itself.
    pub resp_tag: u8,
    /// A bound client's change of its own password: on success, the bind
    /// the router replays on other DSAs carries the new password.
    pub rebind: Option<Rebind>,
}

/// Where a successful change of a client's own password leaves the simple
/// bind to replay from now on (the session picks it up).
pub struct Rebind {
    pub slot: Arc<Mutex<Option<BindPdu>>>,
    pub dn: String,
    /// The new password the request named; else the DSA generates one and
    /// returns it (genPasswd).
    pub new_password: Option<Vec<u8>>,
}

impl Rebind {
    /// After the Password Modify response `pdu`.
    fn done(&self, pdu: &[u8], h: &Header) {
        if response::result_code(pdu, h) != Some(response::rc::SUCCESS) {
            return;
        }
        let pw = self.new_password.clone().or_else(|| {
            response::extended_value(pdu)
                .as_deref()
                .and_then(crate::proto::wire::request::passwd_modify_generated)
        });
        if let Some(pw) = pw {
            let b = crate::backend::upstream::pool::bind_pdu(&self.dn, &pw).freeze();
            *lock(&self.slot) = Some(BindPdu::new(self.dn.clone(), b));
        }
    }
}

impl Delivery for ToClient {
    fn deliver(&self, r: Frame<'_>, batch: &mut Batch) {
        let Frame { pdu, h } = r;
        frame::rewrite(pdu, h, self.msgid, None, batch.to(&self.out));
    }

    fn finish(&self, done: Pdu, _from: Source<'_>, batch: &mut Batch) {
        let Pdu { bytes: pdu, h } = done;
        let h = &h;
        if let Some(r) = &self.rebind {
            r.done(&pdu, h);
        }
        // Ended when its result is handed over, not before (the shutdown
        // grace and StartTLS count what is outstanding).
        frame::rewrite(
            &pdu,
            h,
            self.msgid,
            None,
            batch.finishing(&self.out, self.msgid),
        );
    }

    fn fail(&self, e: &Error, _at: Source<'_>) {
        let mut b = BytesMut::new();
        response::result(
            self.msgid,
            self.resp_tag,
            e.code(),
            "",
            &e.message(),
            &mut b,
        );
        self.out.finish(self.msgid);
        match self.out.deliver(b.freeze()) {
            Handed::Queued => {}
            // Not reading: it cannot be told, so it is disconnected.
            Handed::Full => self.out.overflow(),
            Handed::Gone => self.out.abandon_all(),
        }
    }

    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        self.out.track(self.msgid, conn, id)
    }

    /// A client's operation times out at `--op-timeout`: the innermost
    /// delivery of its stack answers this for all of it.
    fn expires(&self) -> bool {
        true
    }

    fn raced(&self, race: &Arc<Race>, conn: &Arc<Conn>, id: i32) -> bool {
        self.out.track_race(self.msgid, race, conn, id)
    }
}
