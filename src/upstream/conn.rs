//! One TCP connection to a DSA, shared by many operations.
//!
//! Operations are registered in a pending table under a message ID of this
//! connection's own; the reader task demultiplexes responses by that ID,
//! rewrites it back to the client's, and pushes the PDU onto the client's
//! bounded outbound queue. An operation is complete at its final response
//! (`SearchResultDone`, not the first entry); its in-flight guard drops
//! then. When the connection dies, every pending operation gets an answer.
//!
//! (Some 770 lines of code, the hedge scan and the reader's fault checks
//! among them; the rest of the file is its paused-time tests, which need
//! the private connection set-up.)

use super::delivery::{Batch, Delivery};
use super::fault::Fault;
use super::pending::{Pending, Sink};
use super::self_conn::{self, Registered};
use super::spare::{self, Spares};
use super::table::Table;
use crate::config::Limits;
use crate::dsa_state::DsaState;
use crate::error::{Error, Kind};
use crate::outbox::{Outbox, Push, Step, WriteEnd};
use crate::wire::frame::{self, tag, Header};
use crate::wire::response;
use bytes::{Bytes, BytesMut};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// A read to hedge: its race, the hedge leg's pending operation and what
/// places it.
pub struct Hedged {
    pub race: Arc<super::hedge::Race>,
    pub hedge: Pending,
    pub plan: Box<dyn super::delivery::Resend>,
}

pub struct Conn {
    pub dsa: Arc<DsaState>,
    /// Requests to the DSA, written by the sender when nothing is queued.
    out: Outbox,
    /// Its operations by message ID; open while it is alive.
    ops: Table<Pending>,
    stop: CancellationToken,
    /// Counts it as a client's own connection on its DSA.
    own: Mutex<Option<crate::dsa_state::Count>>,
    /// Its local port, registered while it lives ([`super::self_conn`]).
    local: Mutex<Option<Registered>>,
    /// A client's own connection: where it goes back when its client is
    /// done with it ([`super::spare`]).
    home: std::sync::OnceLock<std::sync::Weak<Spares>>,
    /// Nothing sent on it may have left state on the DSA's side.
    reusable: AtomicBool,
    /// It was taken from the spares.
    reused: AtomicBool,
    /// Since when it has waited among the spares, unused.
    spare_since: Mutex<Option<tokio::time::Instant>>,
}

thread_local! {
    /// Where [`Conn::submit`] rewrites a request before writing it.
    static SCRATCH: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// A scratch buffer grown past this (a large request) is not kept.
const SCRATCH_KEEP: usize = 64 * 1024;

/// Connect to the first address `a` (`host:port`) resolves to that
/// answers.
async fn connect_any(a: &str, dsa: &str) -> io::Result<(TcpStream, Option<Registered>)> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{a}: no address"));
    for to in tokio::net::lookup_host(a).await? {
        match self_conn::connect(to, dsa).await {
            Ok(c) => return Ok(c),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl Conn {
    /// Connect to the first address that answers within `timeout`; with
    /// `tls`, secure the connection (LDAPS or StartTLS) before use.
    pub async fn connect(
        dsa: Arc<DsaState>,
        addrs: &[String],
        limits: Limits,
        tls: Option<&crate::tls::DsaTls>,
    ) -> io::Result<Arc<Conn>> {
        let timeout = limits.connect_timeout;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for a in addrs {
            match tokio::time::timeout(timeout, connect_any(a, &dsa.name)).await {
                Ok(Ok((s, reg))) => {
                    let _ = s.set_nodelay(true);
                    let local = reg;
                    let Some(tls) = tls else {
                        return Ok(Self::start(dsa, s, limits, local));
                    };
                    match tls.connect(s, a, timeout).await {
                        Ok(t) => {
                            let (rd, wr) = tokio::io::split(t);
                            return Ok(Self::start_halves(
                                dsa,
                                rd,
                                |_| WriteEnd::Stream(wr),
                                limits,
                                local,
                            ));
                        }
                        // Logged by the caller, once, as the reason the DSA
                        // is down.
                        Err(e) => last = e,
                    }
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last =
                        io::Error::new(io::ErrorKind::TimedOut, format!("connect to {a} timed out"))
                }
            }
        }
        Err(last)
    }

    fn start(
        dsa: Arc<DsaState>,
        stream: TcpStream,
        limits: Limits,
        local: Option<Registered>,
    ) -> Arc<Conn> {
        // TCP_NODELAY is set where it connected.
        let (rd, wr) = stream.into_split();
        Self::start_halves::<_, OwnedWriteHalf>(
            dsa,
            rd,
            |ob| WriteEnd::direct(wr, ob),
            limits,
            local,
        )
    }

    /// Start the reader and writer tasks; `wire` makes the writer's end,
    /// given the outbox (a plain socket is shared with it).
    fn start_halves<R, W>(
        dsa: Arc<DsaState>,
        rd: R,
        wire: impl FnOnce(&Outbox) -> WriteEnd<W>,
        limits: Limits,
        local: Option<Registered>,
    ) -> Arc<Conn>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let conn = Arc::new(Conn {
            dsa,
            out: Outbox::corked(),
            ops: Table::new(),
            stop: CancellationToken::new(),
            own: Mutex::new(None),
            local: Mutex::new(local),
            home: std::sync::OnceLock::new(),
            reusable: AtomicBool::new(true),
            reused: AtomicBool::new(false),
            spare_since: Mutex::new(None),
        });
        let wire = wire(&conn.out);
        tokio::spawn(writer(wire, conn.clone()));
        tokio::spawn(reader(rd, conn.clone(), limits));
        conn
    }

    /// Count it as a client's own connection while it lives (with the
    /// count reserved for it), no longer as a spare.
    pub fn count_as_own(self: &Arc<Self>, count: crate::dsa_state::Count) {
        *self.own.lock().unwrap_or_else(|p| p.into_inner()) = Some(count);
    }

    /// Count it as a spare while it waits for a bind.
    pub(crate) fn count_as_spare(&self) {
        let spare = crate::dsa_state::Count::new(&self.dsa, |s| &s.spare_conns);
        *self.own.lock().unwrap_or_else(|p| p.into_inner()) = Some(spare);
    }

    pub fn is_alive(&self) -> bool {
        self.ops.is_open()
    }

    /// Make it a client's own connection that goes back to `spares` when
    /// its client is done with it.
    pub(crate) fn belongs_to(&self, spares: &Arc<Spares>) {
        let _ = self.home.set(Arc::downgrade(spares));
    }

    /// Its client is done with it: kept among its DSA's spares for a later
    /// bind when nothing is outstanding on it and nothing sent on it may
    /// have left state behind; closed otherwise.
    pub fn release(self: &Arc<Self>) {
        let home = self.home.get().and_then(std::sync::Weak::upgrade);
        let kept = match home {
            Some(spares)
                if self.reusable.load(Ordering::Relaxed)
                    && self.is_alive()
                    && self.pending_count() == 0 =>
            {
                *self.spare_lock() = Some(tokio::time::Instant::now());
                spares.put(self.clone())
            }
            _ => false,
        };
        if !kept {
            self.close();
        }
    }

    /// Taken from the spares for a bind.
    pub(crate) fn unspare(&self) {
        *self.spare_lock() = None;
        self.reused.store(true, Ordering::Relaxed);
    }

    /// It was a spare: it served an earlier client.
    pub fn reused(&self) -> bool {
        self.reused.load(Ordering::Relaxed)
    }

    /// Whether it has waited among the spares, unused, for over
    /// [`spare::IDLE`].
    fn spare_expired(&self) -> bool {
        self.spare_lock().is_some_and(|t| t.elapsed() > spare::IDLE)
    }

    fn spare_lock(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        self.spare_since.lock().unwrap_or_else(|p| p.into_inner())
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
        if self.home.get().is_some() && (control.is_some() || !frame::leaves_no_state(pdu, h)) {
            self.reusable.store(false, Ordering::Relaxed);
        }
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
            self.reusable.store(false, Ordering::Relaxed);
            self.send_abandon(id);
        }
        was
    }

    /// Tell the DSA to abandon operation `id` of this connection.
    fn send_abandon(&self, id: i32) {
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

    /// Mark dead and answer every pending operation.
    fn fail_all(&self, why: &Fault) {
        self.ops.close();
        self.stop.cancel();
        // The socket is closed: its port is no longer ours.
        drop(self.local.lock().unwrap_or_else(|p| p.into_inner()).take());
        // Nor does it count as a client's own or a spare connection (one
        // that was a spare may wait in its list until the list is next
        // used).
        drop(self.own.lock().unwrap_or_else(|p| p.into_inner()).take());
        let drained = self.ops.drain_where(|_, _| true);
        let name = &self.dsa.name;
        for (_, p) in drained {
            if !p.retryable() && matches!(p.sink, Sink::To(_)) {
                self.dsa.errors.fetch_add(1, Ordering::Relaxed);
            }
            let text = if p.is_write {
                format!("connection to DSA {name} lost before it answered; the outcome of this update is unknown ({why})")
            } else {
                format!("connection to DSA {name} lost ({why})")
            };
            let write = p.is_write;
            p.fail(name, Error::new(Kind::ConnectionLost { write }, text));
        }
    }

    /// Fail operations on which the DSA has been silent longer than
    /// `timeout` (or that ran longer than `total`, when not zero) with
    /// timeLimitExceeded and abandon them on the DSA. Waiters (binds) time
    /// out on their own.
    fn expire(&self, timeout: Duration, total: Duration, fall: u32) {
        let expired = self.ops.drain_where(|_, p| match &p.sink {
            Sink::To(d) => d.expires() && !p.persistent && p.overdue(timeout, total),
            _ => false,
        });
        if !expired.is_empty() {
            self.dsa.probe_failed("operation timeout", fall);
        }
        let name = &self.dsa.name;
        let secs = timeout.as_secs_f32();
        for (id, p) in expired {
            self.send_abandon(id);
            self.dsa.errors.fetch_add(1, Ordering::Relaxed);
            if !p.retryable() {
                tracing::warn!(dsa = %name, "operation timed out after {:?}", timeout);
            }
            let outcome = if p.is_write {
                "; the outcome of this update is unknown"
            } else {
                ""
            };
            let capped = !total.is_zero() && p.started.elapsed() > total;
            let text = if capped {
                format!(
                    "the operation ran longer than {} s (--op-total-timeout) on DSA {name}; it was abandoned{outcome}",
                    total.as_secs_f32()
                )
            } else {
                format!(
                    "DSA {name} sent nothing for this operation for {secs} s; it was abandoned{outcome}"
                )
            };
            let write = p.is_write;
            p.fail(name, Error::new(Kind::Timeout { write }, text));
        }
    }

    /// Hedge the reads waiting here longer than `after` (see
    /// [`super::hedge`]), while `budget` has a whole hedge left (each
    /// costs one). Returns the hedges to place (with what places them)
    /// and how many reads the budget refused; reads that have waited
    /// longer than `stall` with nothing sent to their client are counted
    /// in `stuck`.
    pub fn hedge_scan(
        self: &Arc<Self>,
        after: Duration,
        budget: &mut f64,
        stall: Duration,
        stuck: &mut usize,
    ) -> (Vec<Hedged>, u64) {
        use super::pending::Hedge;
        let mut out = Vec::new();
        let mut refused = 0;
        let mut map = self.ops.lock();
        for (&id, p) in map.iter_mut() {
            if p.is_write || p.persistent || !matches!(p.sink, Sink::To(_)) {
                continue;
            }
            if p.delivered || !p.held.is_empty() {
                continue;
            }
            // Since it was placed here (re-sent reads keep their start).
            let age = p.quiet();
            if age >= stall {
                *stuck += 1;
            }
            if age < after || !matches!(p.hedge, Hedge::Eligible | Hedge::Refused) {
                continue;
            }
            let Some(retry) = p.retry.as_ref() else {
                continue;
            };
            if *budget < 1.0 {
                if p.hedge == Hedge::Eligible {
                    p.hedge = Hedge::Refused;
                    refused += 1;
                }
                continue;
            }
            *budget -= 1.0;
            let plan = retry.hedger();
            let Sink::To(inner) = std::mem::replace(&mut p.sink, Sink::Detached) else {
                continue;
            };
            let (race, leg0, leg1) =
                super::hedge::Race::start(inner, self, id, p.metrics.take(), p.op, p.started);
            p.sink = Sink::To(leg0);
            p.hedge = Hedge::Raced;
            let mut hedge = Pending::new(Sink::To(leg1));
            hedge.hold = p.hold;
            hedge.hedge = Hedge::Raced;
            hedge.op = p.op;
            hedge.log = p.log.as_ref().map(|l| {
                let mut l = l.clone();
                l.affinity = Some("hedge");
                l
            });
            out.push(Hedged { race, hedge, plan });
        }
        (out, refused)
    }

    /// End the persistent searches running here (connection lost).
    fn fail_persistent(&self) {
        let ended = self.ops.drain_where(|_, p| p.persistent);
        let name = &self.dsa.name;
        for (_, p) in ended {
            let e = Error::new(
                Kind::ConnectionLost { write: false },
                format!("DSA {name} went down; the persistent search ended"),
            );
            p.fail(name, e);
        }
    }

    /// The DSA went down: re-send the reads waiting here that have sent
    /// nothing to their client yet, and abandon them on this DSA.
    fn evacuate(&self) {
        let moved = self.ops.drain_where(|_, p| p.retryable());
        let name = &self.dsa.name;
        for (id, p) in moved {
            self.send_abandon(id);
            let e = Error::new(Kind::Unreachable, format!("DSA {name} went down"));
            p.fail(name, e);
        }
    }

    /// Route one response PDU from the DSA. What goes to clients is
    /// gathered in `batch`, sent when the read's PDUs are all routed.
    fn dispatch(self: &Arc<Self>, pdu: Bytes, batch: &mut Batch) -> Result<(), Fault> {
        let h = frame::header(&pdu).map_err(Fault::Garbage)?;
        if h.msgid == 0 {
            // Unsolicited notification (e.g. Notice of Disconnection): the
            // DSA is closing this connection.
            return Err(Fault::UnsolicitedNotification);
        }
        let is_final = tag::is_final_response(h.op_tag);
        let mut map_lock = self.ops.lock();
        let Some(p) = map_lock.get_mut(&h.msgid) else {
            if self.ops.never_sent(h.msgid) {
                // Not abandoned or timed out: never asked for.
                return Err(Fault::NeverSent);
            }
            return Ok(()); // abandoned or timed out: drop
        };
        if !is_final {
            if p.hold && p.held.len() < 4 {
                // A base-scope read: keep its entry until the done arrives,
                // so that the read can still be re-sent if the DSA dies.
                p.held.push(pdu);
                return Ok(());
            }
            p.delivered = true;
            p.heard();
            let Sink::To(d) = &p.sink else {
                return Ok(());
            };
            let d = d.clone();
            let held = std::mem::take(&mut p.held);
            let map = p.map().cloned();
            // Delivered with the lock released: a delivery may end other
            // operations of this connection (a spanning search that reached
            // its size limit abandons its other parts, a client that
            // overflowed abandons all it has). Only this reader delivers,
            // so order is kept; an abandon racing this entry costs the
            // client one entry of an operation it gave up.
            drop(map_lock);
            deliver_held(&*d, map.as_deref(), held, batch);
            deliver(&*d, map.as_deref(), &pdu, &h, batch);
            return Ok(());
        }
        let Some(p) = map_lock.remove(&h.msgid) else {
            return Ok(());
        };
        drop(map_lock);
        let map = p.map().cloned();
        let (pdu, h) = match map.as_deref().and_then(|m| native_back(m, &pdu, &h)) {
            Some(mapped) => mapped,
            None => (pdu, h),
        };
        let code = response::result_code(&pdu, &h);
        // One clock read for the metrics, the read latencies and the log.
        let took = p.started.elapsed();
        if matches!(p.sink, Sink::To(_)) {
            self.dsa.served.fetch_add(1, Ordering::Relaxed);
            p.record(code.unwrap_or(80), took);
            if !p.is_write && !p.persistent {
                self.dsa.reads.record(took.as_micros() as u64);
            }
        }
        if let Some(log) = &p.log {
            crate::access::line(|f| {
                f.head(&log.head)
                    .plain("dsa", &self.dsa.name)
                    .quoted_opt("affinity", log.affinity)
                    .num("result", u64::from(code.unwrap_or(255)))
                    .num("latency_us", took.as_micros() as u64);
            });
        }
        match p.sink {
            Sink::Detached => {}
            Sink::Waiter(w) => {
                let _ = w.send(pdu);
            }
            Sink::To(d) => {
                deliver_held(&*d, map.as_deref(), p.held, batch);
                d.finish(pdu, &h, batch);
            }
        }
        Ok(())
    }
}

/// Deliver a non-final response, its DNs mapped back when its DSA holds
/// the partition under a native prefix.
fn deliver(
    d: &dyn Delivery,
    map: Option<&crate::wire::dnmap::PrefixMap>,
    pdu: &[u8],
    h: &Header,
    batch: &mut Batch,
) {
    match map.and_then(|m| native_back(m, pdu, h)) {
        Some((b, bh)) => d.deliver(&b, &bh, batch),
        None => d.deliver(pdu, h, batch),
    }
}

/// Deliver the entries held back for a base-scope read.
fn deliver_held(
    d: &dyn Delivery,
    map: Option<&crate::wire::dnmap::PrefixMap>,
    held: super::pending::Held,
    batch: &mut Batch,
) {
    for pdu in held.into_vec() {
        if let Ok(h) = frame::header(&pdu) {
            deliver(d, map, &pdu, &h, batch);
        }
    }
}

/// A response from a DSA that holds its partition under a native prefix,
/// with its DNs moved back to the knowledge prefix.
/// `None` when nothing changes.
fn native_back(
    m: &crate::wire::dnmap::PrefixMap,
    pdu: &[u8],
    h: &Header,
) -> Option<(Bytes, Header)> {
    let b = m.response(pdu, h)?.freeze();
    let bh = frame::header(&b).ok()?;
    Some((b, bh))
}

/// Drain what senders could not write at once, in batches.
async fn writer<W: AsyncWrite + Unpin>(mut wire: WriteEnd<W>, conn: Arc<Conn>) {
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

async fn reader<R: AsyncRead + Unpin>(mut rd: R, conn: Arc<Conn>, limits: Limits) {
    let max_pdu = limits.max_response_pdu;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut batch = Batch::default();
    let sweep_every =
        (limits.op_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut sweep = tokio::time::interval(sweep_every);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut epoch = conn.dsa.down_epoch();
    // Made once, not per read.
    let stop = conn.stop.clone();
    let mut stopped = std::pin::pin!(stop.cancelled());
    let dsa = conn.dsa.clone();
    let mut down = std::pin::pin!(dsa.down_signal.notified());
    // Since when part of a PDU has waited in `buf` with no byte more.
    let mut partial_since: Option<tokio::time::Instant> = None;
    let fault = loop {
        let n = tokio::select! {
            r = rd.read_buf(&mut buf) => r,
            _ = sweep.tick() => {
                if conn.spare_expired() {
                    conn.ops.close();
                    break Fault::IdleSpare;
                }
                conn.expire(limits.op_timeout, limits.op_total_timeout, limits.fall);
                if partial_since.is_some_and(|t| t.elapsed() > limits.connect_timeout) {
                    // Stalled in the middle of a PDU: broken, not slow.
                    break Fault::Stalled(limits.connect_timeout);
                }
                Ok(usize::MAX)
            }
            _ = &mut down => {
                down.set(dsa.down_signal.notified());
                Ok(usize::MAX)
            }
            _ = &mut stopped => break Fault::Closed,
        };
        if conn.dsa.down_epoch() != epoch {
            epoch = conn.dsa.down_epoch();
            conn.evacuate();
            if !conn.dsa.is_up() {
                // Down (not merely ejected): this connection may be stale
                // (a peer gone without a reset). It takes no new work; the
                // pool connects afresh, and it closes once what runs on it
                // has ended. Persistent searches never end by themselves:
                // they end here, so that their clients hear of it.
                conn.ops.close();
                conn.fail_persistent();
            }
        }
        if !conn.is_alive() && conn.pending_count() == 0 {
            break Fault::Retired;
        }
        match n {
            Ok(usize::MAX) => continue,
            // A closed or reset connection alone does not mark the DSA
            // down (a DSA drops one connection on a protocol error, or
            // when idle): its reads are re-sent, and a DSA that is really
            // gone refuses the reconnect, which does mark it down.
            Ok(0) => break Fault::HungUp,
            Err(e) => break Fault::Read(e),
            Ok(_) => {}
        }
        let bad = dispatch_all(&conn, &mut buf, max_pdu, &mut batch);
        batch.flush();
        // A partial PDU waits for the rest: time it from the last byte
        // (a DSA streaming a large result steadily is not stalled).
        partial_since = (!buf.is_empty()).then(tokio::time::Instant::now);
        if let Some(fault) = bad {
            break fault;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
    };
    if fault.bad_response() {
        tracing::warn!(dsa = %conn.dsa.name, error = %fault, "bad response from DSA; closing the connection");
    }
    if let Some(why) = fault.takes_the_dsa_down() {
        // Broken, not slow: down at once, its reads re-sent to its group.
        conn.dsa.passive_down(&why);
    }
    conn.fail_all(&fault);
}

/// Route the whole PDUs at the front of `buf`; the fault that ends the
/// connection, if one does (what is not LDAP, a Notice of Disconnection,
/// a response over `--max-response-pdu`).
fn dispatch_all(
    conn: &Arc<Conn>,
    buf: &mut BytesMut,
    max_pdu: usize,
    batch: &mut Batch,
) -> Option<Fault> {
    loop {
        match frame::frame_len(buf, max_pdu) {
            Ok(Some(len)) => {
                let pdu = buf.split_to(len).freeze();
                if let Err(fault) = conn.dispatch(pdu, batch) {
                    return Some(fault);
                }
            }
            Ok(None) => return None,
            Err(e) => return Some(e.into()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::upstream::delivery::Delivery;
    use std::sync::Mutex as StdMutex;

    /// Records what the connection hands an operation.
    #[derive(Default)]
    struct Recorder {
        failed: StdMutex<Vec<Error>>,
        finished: StdMutex<usize>,
    }

    impl Delivery for Recorder {
        fn deliver(&self, _pdu: &[u8], _h: &Header, _batch: &mut Batch) {}
        fn finish(&self, _pdu: Bytes, _h: &Header, _batch: &mut Batch) {
            *self.finished.lock().unwrap() += 1;
        }
        fn fail(&self, e: &Error) {
            self.failed.lock().unwrap().push(e.clone());
        }
        fn placed(&self, _conn: &Arc<Conn>, _id: i32) -> bool {
            true
        }
    }

    fn limits(op_timeout: Duration) -> Limits {
        Limits {
            connect_timeout: Duration::from_secs(1),
            op_timeout,
            op_total_timeout: Duration::ZERO,
            bind_timeout: op_timeout,
            max_response_pdu: 1 << 20,
            fall: 3,
            max_own_connections: 0,
            spare_connections: 0,
        }
    }

    /// A connection to a DSA that reads requests and never answers.
    fn silent_dsa(op_timeout: Duration) -> (Arc<Conn>, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (rd, wr) = tokio::io::split(ours);
        let dsa = Arc::new(DsaState::new("D1"));
        let conn = Conn::start_halves(dsa, rd, |_| WriteEnd::Stream(wr), limits(op_timeout), None);
        (conn, theirs)
    }

    fn search_pdu() -> Vec<u8> {
        // A base search of the root DSE, message ID 7.
        let mut b = vec![0x30, 0x25, 0x02, 0x01, 0x07, 0x63, 0x20, 0x04, 0x00];
        b.extend_from_slice(&[0x0a, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x02, 0x01, 0x00]);
        b.extend_from_slice(&[0x02, 0x01, 0x00, 0x01, 0x01, 0x00, 0x87, 0x0b]);
        b.extend_from_slice(b"objectClass");
        b.extend_from_slice(&[0x30, 0x00]);
        b
    }

    /// Paused time: an operation the DSA never answers is failed with
    /// timeLimitExceeded once `op_timeout` has passed, not before, through
    /// its delivery; a write's message says its outcome is unknown.
    #[tokio::test(start_paused = true)]
    async fn unanswered_operations_expire_through_their_delivery() {
        let (conn, _dsa) = silent_dsa(Duration::from_secs(10));
        let pdu = search_pdu();
        let h = frame::header(&pdu).unwrap();
        let mut sent = Vec::new();
        for write in [false, true] {
            let rec = Arc::new(Recorder::default());
            let mut p = Pending::new(Sink::To(rec.clone()));
            p.is_write = write;
            conn.submit(p, &pdu, &h, None, |_, _| true).ok().unwrap();
            sent.push(rec);
        }
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(sent.iter().all(|r| r.failed.lock().unwrap().is_empty()));
        tokio::time::sleep(Duration::from_secs(3)).await;
        for (rec, write) in sent.iter().zip([false, true]) {
            let failed = rec.failed.lock().unwrap();
            assert_eq!(failed.len(), 1, "write {write}");
            assert_eq!(failed[0].kind, Kind::Timeout { write });
            assert_eq!(
                failed[0].code(),
                crate::wire::response::Code::TimeLimitExceeded
            );
            assert_eq!(
                failed[0].text.contains("outcome of this update is unknown"),
                write
            );
            assert_eq!(*rec.finished.lock().unwrap(), 0);
        }
        assert_eq!(conn.pending_count(), 0);
    }

    /// A connection that dies fails what is pending on it, once, and
    /// refuses new operations (handing them back).
    #[tokio::test(start_paused = true)]
    async fn a_lost_connection_fails_its_operations_once() {
        let (conn, dsa) = silent_dsa(Duration::from_secs(60));
        let pdu = search_pdu();
        let h = frame::header(&pdu).unwrap();
        let rec = Arc::new(Recorder::default());
        conn.submit(
            Pending::new(Sink::To(rec.clone())),
            &pdu,
            &h,
            None,
            |_, _| true,
        )
        .ok()
        .unwrap();
        drop(dsa);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let failed = rec.failed.lock().unwrap().clone();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].kind, Kind::ConnectionLost { write: false });
        assert!(!conn.is_alive());
        let again = conn.submit(Pending::new(Sink::Detached), &pdu, &h, None, |_, _| true);
        assert!(again.is_err());
    }

    /// A root DSE search submitted on `conn`, answered to a recorder; its
    /// message ID there.
    fn watch(conn: &Arc<Conn>) -> (Arc<Recorder>, i32) {
        let rec = Arc::new(Recorder::default());
        let id = submit_search(conn, rec.clone());
        (rec, id)
    }

    /// A root DSE search submitted on `conn` for delivery `d` (which
    /// learns where it runs); its message ID there.
    fn submit_search(conn: &Arc<Conn>, d: Arc<dyn Delivery>) -> i32 {
        let pdu = search_pdu();
        let h = frame::header(&pdu).unwrap();
        conn.submit(
            Pending::new(Sink::To(d.clone())),
            &pdu,
            &h,
            None,
            |c, id| d.placed(c, id),
        )
        .ok()
        .unwrap()
    }

    /// One search entry for message `id`: empty DN, no attributes.
    fn entry(id: i32) -> Vec<u8> {
        let id = u8::try_from(id).unwrap();
        vec![
            0x30, 0x09, 0x02, 0x01, id, 0x64, 0x04, 0x04, 0x00, 0x30, 0x00,
        ]
    }

    /// The timeout counts the DSA's silence on an operation, not its whole
    /// time: a search whose entries keep coming is never cut by it, one
    /// that goes silent is; `--op-total-timeout` caps the whole time.
    #[tokio::test(start_paused = true)]
    async fn the_operation_timeout_counts_silence_and_the_cap_total_time() {
        use tokio::io::AsyncWriteExt;
        for cap in [Duration::ZERO, Duration::from_secs(5)] {
            let (ours, mut dsa) = tokio::io::duplex(1 << 16);
            let (rd, wr) = tokio::io::split(ours);
            let mut lim = limits(Duration::from_secs(2));
            lim.op_total_timeout = cap;
            let st = Arc::new(DsaState::new("D1"));
            let conn = Conn::start_halves(st, rd, |_| WriteEnd::Stream(wr), lim, None);
            let (rec, id) = watch(&conn);
            // An entry every second for 8 s: four times the timeout.
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                dsa.write_all(&entry(id)).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let failed = rec.failed.lock().unwrap().clone();
            if cap.is_zero() {
                assert!(failed.is_empty(), "cut while entries came: {failed:?}");
                // Then silence: cut after the timeout.
                tokio::time::sleep(Duration::from_secs(3)).await;
                let failed = rec.failed.lock().unwrap().clone();
                assert_eq!(failed.len(), 1, "{failed:?}");
                assert!(failed[0].text.contains("sent nothing"), "{}", failed[0]);
            } else {
                assert_eq!(failed.len(), 1, "{failed:?}");
                assert!(
                    failed[0].text.contains("--op-total-timeout"),
                    "{}",
                    failed[0]
                );
            }
        }
    }

    /// A DSA that answers a message ID never sent, sends bytes that are
    /// not LDAP, or stalls in the middle of a PDU is broken: its connection
    /// is closed, its reads get a retryable error, and it is marked down
    /// at once (not after the probes).
    #[tokio::test(start_paused = true)]
    async fn a_dsa_that_sends_garbage_or_stalls_mid_pdu_is_marked_down() {
        use tokio::io::AsyncWriteExt;
        let entry_99 = entry(99);
        let half = entry(7)[..5].to_vec();
        let rows: [(&str, &[u8], &str); 3] = [
            ("unknown message ID", &entry_99, "never sent"),
            ("garbage", b"\x04\x02hi", "malformed"),
            ("stalled mid-PDU", &half, "stalled in the middle"),
        ];
        for (what, bytes, why) in rows {
            let (conn, mut dsa) = silent_dsa(Duration::from_secs(60));
            let st = conn.dsa.clone();
            let (rec, _) = watch(&conn);
            dsa.write_all(bytes).await.unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert!(!conn.is_alive(), "{what}: connection still open");
            assert!(!st.is_up(), "{what}: DSA not marked down");
            let reason = st.health_track().reason;
            assert!(reason.contains(why), "{what}: {reason}");
            let failed = rec.failed.lock().unwrap().clone();
            assert_eq!(failed.len(), 1, "{what}");
            assert!(failed[0].retryable(), "{what}: {:?}", failed[0]);
        }
    }

    /// A DSA that streams steadily, every read ending inside a PDU, is not
    /// stalled: the stall counts from the last byte (it once counted from
    /// the first partial read and took a healthy DSA down after 1 s).
    #[tokio::test(start_paused = true)]
    async fn a_dsa_streaming_with_pdus_split_across_reads_is_not_stalled() {
        use tokio::io::AsyncWriteExt;
        let (conn, mut dsa) = silent_dsa(Duration::from_secs(60));
        let (rec, id) = watch(&conn);
        let e = entry(id);
        let (head, tail) = e.split_at(5);
        dsa.write_all(head).await.unwrap();
        // 30 entries, each write finishing one and starting the next, 0.2 s
        // apart: 6 s with a partial PDU always waiting (connect timeout 1 s).
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut b = tail.to_vec();
            b.extend_from_slice(head);
            dsa.write_all(&b).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(conn.is_alive(), "closed as stalled");
        assert!(conn.dsa.is_up(), "{}", conn.dsa.health_track().reason);
        assert!(rec.failed.lock().unwrap().is_empty());
    }

    /// A hedged read cancelled by its client: undecided, both legs stop and
    /// the client hears `canceled` once (a leg's late entry is dropped);
    /// decided, the cancel goes to the winner's DSA, so that `canceled`
    /// comes after the entries already sent.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_hedged_read_is_answered_once_and_in_order() {
        use super::super::hedge::{Cancelled, Race};
        let (c0, _d0) = silent_dsa(Duration::from_secs(60));
        let (c1, _d1) = silent_dsa(Duration::from_secs(60));
        for decided in [false, true] {
            let rec = Arc::new(Recorder::default());
            let (_r0, id0) = watch(&c0);
            let (race, leg0, leg1) =
                Race::start(rec.clone(), &c0, id0, None, 0, tokio::time::Instant::now());
            let (_r1, id1) = watch(&c1);
            assert!(leg1.placed(&c1, id1));
            let e = entry(id1);
            let h = frame::header(&e).unwrap();
            let mut batch = Batch::default();
            if decided {
                leg1.deliver(&e, &h, &mut batch);
                match race.cancel() {
                    Cancelled::Forward(c, id) => {
                        assert!(Arc::ptr_eq(&c, &c1) && id == id1, "forwarded to the loser")
                    }
                    _ => panic!("a decided race is cancelled by its winner's DSA"),
                }
                assert!(rec.failed.lock().unwrap().is_empty());
            } else {
                assert!(matches!(race.cancel(), Cancelled::Done));
                assert!(matches!(race.cancel(), Cancelled::TooLate));
                leg0.deliver(&e, &h, &mut batch);
                let failed = rec.failed.lock().unwrap().clone();
                assert_eq!(failed.len(), 1);
                assert_eq!(failed[0].code(), crate::wire::response::Code::Canceled);
            }
        }
    }

    /// Gives up its operation on the first entry, from inside the delivery
    /// (as a spanning search does at its size limit).
    #[derive(Default)]
    struct Quitter {
        at: StdMutex<Option<(Arc<Conn>, i32)>>,
        abandoned: StdMutex<Option<bool>>,
    }

    impl Delivery for Quitter {
        fn deliver(&self, _pdu: &[u8], _h: &Header, _batch: &mut Batch) {
            if let Some((conn, id)) = self.at.lock().unwrap().take() {
                *self.abandoned.lock().unwrap() = Some(conn.abandon(id));
            }
        }
        fn finish(&self, _pdu: Bytes, _h: &Header, _batch: &mut Batch) {}
        fn fail(&self, _e: &Error) {}
        fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
            *self.at.lock().unwrap() = Some((conn.clone(), id));
            true
        }
    }

    /// A delivery may abandon operations of the connection that delivers
    /// to it (it once deadlocked on the connection's lock, freezing the
    /// connection and a runtime thread). Run on a thread of its own so that
    /// a deadlock fails the test instead of hanging it.
    #[test]
    fn a_delivery_may_abandon_on_its_own_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (conn, mut dsa) = silent_dsa(Duration::from_secs(60));
                let pdu = search_pdu();
                let q = Arc::new(Quitter::default());
                let id = submit_search(&conn, q.clone());
                let mut req = vec![0u8; pdu.len()];
                dsa.read_exact(&mut req).await.unwrap();
                // A SearchResultEntry for it: empty DN, no attributes.
                let id = u8::try_from(id).unwrap();
                dsa.write_all(&[
                    0x30, 0x09, 0x02, 0x01, id, 0x64, 0x04, 0x04, 0x00, 0x30, 0x00,
                ])
                .await
                .unwrap();
                // The DSA is told to abandon it: [APPLICATION 16] naming id.
                let mut abandon = [0u8; 8];
                dsa.read_exact(&mut abandon).await.unwrap();
                assert_eq!(&abandon[5..], &[0x50, 0x01, id]);
                assert_eq!(*q.abandoned.lock().unwrap(), Some(true));
                assert_eq!(conn.pending_count(), 0);
            });
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "the connection deadlocked (or the test failed: see its panic)"
        );
    }
}
