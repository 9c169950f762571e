//! A client connection's I/O: the read loop (framing, the idle and
//! incomplete-PDU timers, shutdown); the writer task that drains what
//! could not be written at once is [`super::writer`]. Requests go to
//! [`Session::handle`].

use super::{out::ClientOut, writer, Flow, Identity, Session};
use crate::context::Context;
use crate::wire::frame;
use crate::wire::response::{self, Code};
use crate::workers::Seat;
use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Serve one client until it leaves, misbehaves, or shutdown.
pub async fn run(
    router: Arc<Context>,
    stream: impl Into<crate::tls::ClientStream>,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
) {
    let stream = stream.into();
    let s = Session::new(router, peer, stream.is_tls());
    let _ = drive(Start::new(s, stream, shutdown, None)).await;
}

/// [`run`] for a session seated on a worker ([`crate::workers`]): when
/// that worker asks it to move, it returns what [`resume`] continues on
/// the worker it is now counted on (see [`Moving::handle`]).
pub async fn serve(
    router: Arc<Context>,
    stream: crate::tls::ClientStream,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
    seat: Option<Seat>,
) -> Option<Box<Moving>> {
    let s = Session::new(router, peer, stream.is_tls());
    drive(Start::new(s, stream, shutdown, seat)).await
}

/// What [`drive`] starts from, in one box: an async function's arguments
/// are kept in its future beside the locals they are moved into, so a
/// session passed by value would be held twice for the connection's life.
struct Start {
    s: Session,
    stream: crate::tls::ClientStream,
    /// Bytes already read (a session that moved).
    buf: BytesMut,
    shutdown: watch::Receiver<bool>,
    seat: Option<Seat>,
    /// It just came from another worker.
    moved: bool,
}

impl Start {
    fn unbox(b: Box<Start>) -> Start {
        *b
    }

    fn new(
        s: Session,
        stream: crate::tls::ClientStream,
        shutdown: watch::Receiver<bool>,
        seat: Option<Seat>,
    ) -> Box<Start> {
        Box::new(Start {
            s,
            stream,
            buf: BytesMut::new(),
            shutdown,
            seat,
            moved: false,
        })
    }
}

impl Session {
    fn new(router: Arc<Context>, peer: SocketAddr, tls: bool) -> Session {
        let out = ClientOut::new(
            router.cfg.client_queue,
            router.cfg.client_queue_bytes,
            router.response_memory.clone(),
            peer,
        );
        Session {
            router,
            peer,
            out,
            identity: Identity::Anonymous,
            private: Default::default(),
            state_dsa: HashMap::new(),
            last_dn: None,
            log_client: crate::access::Head::client(peer),
            sasl: None,
            affinity: HashMap::new(),
            rebind: None,
            next_rebind: None,
            tls,
        }
    }
}

/// A session on its way to another worker: its state, its connection (off
/// any runtime's reactor, with its TLS state if any), and the bytes it had
/// read.
pub struct Moving {
    s: Session,
    sock: crate::tls::Detached,
    buf: BytesMut,
    shutdown: watch::Receiver<bool>,
    seat: Seat,
}

impl Moving {
    /// The runtime of the worker it goes to.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.seat.handle()
    }
}

/// Continue a session that moved, on the runtime of the worker it went to.
pub async fn resume(m: Box<Moving>) -> Option<Box<Moving>> {
    let Moving {
        s,
        sock,
        buf,
        shutdown,
        seat,
    } = *m;
    match sock.attach() {
        Ok(stream) => {
            drive(Box::new(Start {
                s,
                stream,
                buf,
                shutdown,
                seat: Some(seat),
                moved: true,
            }))
            .await
        }
        Err(e) => {
            tracing::warn!(client = %s.peer, error = %e, "a worker cannot take the moving session; closing it");
            s.out.abandon_all();
            s.private.release_all();
            s.out.ob.close();
            None
        }
    }
}

/// The read loop of a session.
async fn drive(start: Box<Start>) -> Option<Box<Moving>> {
    // Unboxed by a call: moved out in place, the box would be freed only
    // when the session ends (its bytes held by every idle connection).
    let Start {
        mut s,
        stream,
        mut buf,
        mut shutdown,
        mut seat,
        mut moved,
    } = Start::unbox(start);
    let router = s.router.clone();
    let peer = s.peer;
    let out = s.out.clone();
    let (mut rd, wr) = stream.split();
    let done = CancellationToken::new();
    let mut pause = CancellationToken::new();
    let mut writer = tokio::spawn(writer::writer(wr, out.clone(), done.clone(), pause.clone()));
    let cfg = &router.cfg;
    // Buffers are taken only while data flows: an idle client holds none
    // (10,000 idle connections must stay small).
    // What this client's incomplete request counts in
    // `router.request_memory`; given back however the session ends.
    let mut counted = Counted(&router.request_memory, 0);
    // A large request still arriving: its bytes so far, in chunks.
    let mut large: Option<Large> = None;
    let mut notice: Option<(Code, String)> = None;
    let mut pdu_started: Option<tokio::time::Instant> = None;
    let mut last_read = tokio::time::Instant::now();
    // Made once, not per read. The timer is boxed: it would otherwise be
    // part of every idle connection's task.
    let mut timer = Box::pin(tokio::time::sleep_until(far_future()));
    let kill = out.kill.clone();
    let mut killed = std::pin::pin!(kill.cancelled());
    // The loop waits on `shutdown`; a session that moves takes a copy.
    let onward = shutdown.clone();
    let mut shut = std::pin::pin!(shutdown.changed());
    'conn: loop {
        // A request came in: its worker may ask the session to move
        // (not right after it did).
        let asked = !buf.is_empty()
            && !std::mem::take(&mut moved)
            && seat.as_mut().is_some_and(Seat::asked);
        if asked && large.is_none() && counted.1 == 0 && s.can_move() {
            if let Some(to) = seat.as_mut().and_then(Seat::leave) {
                // The writer hands the socket back once what it holds is
                // written (nothing is: the session is idle).
                pause.cancel();
                let sock = match (&mut writer).await {
                    Ok(Some(wr)) => {
                        crate::tls::reunite(rd, wr).map(crate::tls::ClientStream::detach)
                    }
                    _ => None,
                };
                match sock {
                    Some(Ok(sock)) => {
                        tracing::debug!(client = %peer, worker = to, "session moves to another worker");
                        drop(counted);
                        let seat = seat?;
                        return Some(Box::new(Moving {
                            s,
                            sock,
                            buf,
                            shutdown: onward,
                            seat,
                        }));
                    }
                    other => {
                        if let Some(Err(e)) = other {
                            tracing::warn!(client = %peer, error = %e, "cannot take the session off its worker; closing it");
                        }
                        // The writer ended: nothing is left to wait for.
                        writer = tokio::spawn(async { None });
                        break 'conn;
                    }
                }
            }
        }
        let mut handled = false;
        if let Some(l) = &mut large {
            match l.take(&mut buf) {
                Some(whole) => {
                    buf = whole;
                    large = None;
                }
                None => pdu_started = pdu_started.or_else(|| Some(tokio::time::Instant::now())),
            }
        }
        while large.is_none() {
            match frame::frame_len(&buf, cfg.max_request_pdu) {
                Ok(Some(len)) => {
                    let pdu = buf.split_to(len).freeze();
                    pdu_started = None;
                    handled = true;
                    // Boxed: the request path's state is large and would
                    // otherwise be part of every idle connection's task.
                    match Box::pin(s.handle(pdu)).await {
                        Flow::Continue => {}
                        Flow::Close(n) => {
                            notice = n;
                            break 'conn;
                        }
                        Flow::StartTls(msgid) => {
                            let link = (rd, writer, pause);
                            match Box::pin(s.start_tls(msgid, buf.is_empty(), link, &done)).await {
                                Ok(l) => (rd, writer, pause) = l,
                                Err(l) => {
                                    writer = l.1;
                                    break 'conn;
                                }
                            }
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(client = %peer, error = %e, "malformed PDU from client; disconnecting");
                    notice = Some((Code::ProtocolError, s.not_ldap(&e)));
                    break 'conn;
                }
            }
        }
        if handled {
            // Idle from the end of the last request's handling (a bind
            // may take long), not from its read.
            last_read = tokio::time::Instant::now();
            if buf.is_empty() && buf.capacity() > SMALL {
                // A large request is done: give its buffer back.
                buf = BytesMut::new();
            }
        }
        if large.is_none() {
            large = Large::start(&mut buf);
        }
        // A large incomplete request counts against every client's
        // budget; the client that would go beyond it is disconnected.
        let now = match &large {
            Some(l) => l.have + buf.capacity(),
            None if buf.capacity() > SMALL => buf.capacity(),
            None => 0,
        };
        if now != counted.1 {
            let before = counted.1;
            let total = counted.set(now);
            if now > before && total > cfg.max_request_memory {
                router
                    .metrics
                    .refused(crate::metrics::Refusal::RequestMemory);
                tracing::warn!(client = %peer, bytes = now, "incomplete requests hold more memory than --max-request-memory; disconnecting this client");
                notice = Some((Code::Busy, "dsa-router: the router holds too much of clients' incomplete requests; try again later".into()));
                break 'conn;
            }
        }
        // The PDU timeout runs from a PDU's first byte, however slowly
        // the rest trickles in; the idle timeout from the last read. The
        // timer is moved only when a deadline comes earlier than it is
        // set; when it fires early, it is set again (no timer work per
        // request).
        let due = if buf.is_empty() && large.is_none() {
            pdu_started = None;
            (!cfg.idle_timeout.is_zero()).then(|| after(last_read, cfg.idle_timeout))
        } else {
            let started = *pdu_started.get_or_insert_with(tokio::time::Instant::now);
            Some(after(started, cfg.pdu_timeout))
        };
        if let Some(due) = due {
            if due < timer.deadline() {
                timer.as_mut().reset(due);
            }
        }
        tokio::select! {
            // No clock read here: bytes that end a request restart the
            // idle time when it has been handled (below), and a request's
            // first bytes start the PDU timeout.
            r = rd.read_some(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = &mut timer => match due {
                Some(due) if due <= tokio::time::Instant::now() => {
                    let what = if buf.is_empty() && large.is_none() { "idle" } else { "incomplete PDU" };
                    tracing::info!(client = %peer, "{what} timeout; disconnecting");
                    notice = Some((Code::Unavailable, format!("dsa-router: {what} timeout")));
                    break;
                }
                Some(due) => timer.as_mut().reset(due),
                None => timer.as_mut().reset(far_future()),
            },
            _ = &mut killed => break,
            _ = &mut shut => {
                // Stop reading; let work in flight finish up to the grace.
                let deadline = Instant::now() + cfg.shutdown_grace;
                while out.outstanding() > 0 && Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                notice = Some((Code::Unavailable, "dsa-router: shutting down".into()));
                break;
            }
        }
    }
    if let Some((code, msg)) = notice {
        let mut b = BytesMut::new();
        response::notice_of_disconnection(code, &msg, &mut b);
        let _ = out.deliver(b.freeze());
    }
    drop(counted);
    drop(buf);
    out.abandon_all();
    s.private.release_all();
    if let Some(step) = s.sasl.take() {
        step.conn.close();
    }
    done.cancel();
    // The writer flushes what is queued; a client that does not read gets
    // a few seconds, then its connection is dropped.
    if tokio::time::timeout(std::time::Duration::from_secs(3), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
    // The writer closes it, unless a failed StartTLS took it away first.
    out.ob.close();
    None
}

/// Bytes a session counts in the router's request memory (`.1`),
/// returned when it drops, however the session ends.
struct Counted<'a>(&'a std::sync::atomic::AtomicUsize, usize);

impl Counted<'_> {
    /// Count `now` instead; the router-wide total after.
    fn set(&mut self, now: usize) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let total = if now > self.1 {
            self.0.fetch_add(now - self.1, Relaxed) + (now - self.1)
        } else {
            self.0.fetch_sub(self.1 - now, Relaxed) - (self.1 - now)
        };
        self.1 = now;
        total
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0
            .fetch_sub(self.1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A request buffer this small is not counted against
/// `--max-request-memory` (most requests are far smaller).
const SMALL: usize = 64 * 1024;

/// An incomplete request this large goes on arriving in chunks (see
/// [`Large`]).
const LARGE: usize = 32 * 1024;

/// The chunks a large incomplete request is read in: so large that the
/// allocator (mimalloc) gives each its own pages and returns them when freed
/// (measured with bench/floods.py: 40 clients holding 3 MiB each left RSS
/// +9% after they closed with 1 MiB chunks, +21% with 64 KiB ones, whose
/// pages it keeps). A client holds at most one chunk more than it sent.
const CHUNK: usize = 1024 * 1024;

/// A large request still arriving, kept in chunks of [`CHUNK`] bytes as
/// they come, and put together in one buffer of its exact length once its
/// last byte is in. The router holds what the client sent and at most one
/// chunk of room (never the length it announced, which costs the client
/// nothing to claim), all counted in `--max-request-memory`, and the
/// allocator sees buffers of one size while it arrives and one of the
/// exact size at the end, not a buffer doubled at each step, which copies
/// the request each time and leaves freed buffers of every size behind
/// (memory the allocator keeps after the client is gone).
struct Large {
    /// The whole PDU's length, as its header announces it (checked against
    /// `--max-request-pdu` by [`frame::frame_len`] before this starts).
    total: usize,
    chunks: Vec<bytes::Bytes>,
    /// Bytes in `chunks`.
    have: usize,
}

impl Large {
    /// When `buf` holds the start of a request of over [`LARGE`] bytes
    /// that is not all there, move what has come into chunks.
    fn start(buf: &mut BytesMut) -> Option<Large> {
        if buf.len() < LARGE {
            return None;
        }
        let total = frame::announced_len(buf).filter(|&t| t > buf.len())?;
        let mut l = Large {
            total,
            chunks: Vec::new(),
            have: 0,
        };
        l.stash(buf);
        Some(l)
    }

    /// Move what `buf` holds into chunks, and give `buf` a chunk's room
    /// for the next bytes.
    fn stash(&mut self, buf: &mut BytesMut) {
        if !buf.is_empty() {
            self.have += buf.len();
            self.chunks.push(buf.split().freeze());
        }
        *buf = BytesMut::with_capacity(CHUNK.min(self.total - self.have.min(self.total)).max(1024));
    }

    /// The whole request (with whatever came after it) once its last byte
    /// has come, else `None` with `buf`'s bytes stashed when it is full.
    fn take(&mut self, buf: &mut BytesMut) -> Option<BytesMut> {
        if self.have + buf.len() >= self.total {
            let mut whole = BytesMut::with_capacity(self.have + buf.len());
            for c in self.chunks.drain(..) {
                whole.extend_from_slice(&c);
            }
            whole.extend_from_slice(buf);
            *buf = BytesMut::new();
            return Some(whole);
        }
        if buf.capacity() - buf.len() < 1024 {
            self.stash(buf);
        }
        None
    }
}

/// A deadline that never comes (an hour is re-armed when it does).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(3600)
}

/// `t + d`, or the far future for a timeout too large to add.
fn after(t: tokio::time::Instant, d: std::time::Duration) -> tokio::time::Instant {
    t.checked_add(d).unwrap_or_else(far_future)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `have` bytes of an add whose PDU is `total` bytes long.
    fn partial_add(total: usize, have: usize) -> BytesMut {
        let body = total - 6;
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0x30, 0x84]);
        b.extend_from_slice(&u32::try_from(body).unwrap_or(0).to_be_bytes());
        b.resize(have, 0);
        for (i, x) in b.iter_mut().enumerate().skip(6) {
            *x = i as u8;
        }
        b
    }

    /// Feed `bytes` to a session's buffer at most `step` bytes per read,
    /// as the read loop does (a read fills the room there is, 4 KiB more
    /// when there is under 1 KiB); the buffer once whole, and the most
    /// bytes held.
    fn arrive(mut bytes: &[u8], step: usize) -> (BytesMut, usize) {
        let mut buf = BytesMut::new();
        let mut large: Option<Large> = None;
        let mut held = 0;
        while !bytes.is_empty() {
            if let Some(l) = &mut large {
                if let Some(whole) = l.take(&mut buf) {
                    buf = whole;
                    large = None;
                }
            }
            if large.is_none() {
                large = Large::start(&mut buf);
            }
            held = held.max(
                large
                    .as_ref()
                    .map_or(buf.capacity(), |l| l.have + buf.capacity()),
            );
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(4096);
            }
            let n = step.min(buf.capacity() - buf.len()).min(bytes.len());
            buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if let Some(l) = &mut large {
            if let Some(whole) = l.take(&mut buf) {
                buf = whole;
            }
        }
        (buf, held)
    }

    #[test]
    fn a_large_request_is_held_as_it_arrives_and_put_together_exactly() {
        let total = 3_000_000;
        let whole = partial_add(total, total);
        for step in [1000, 4096, 65_536, 100_000] {
            let (buf, held) = arrive(&whole, step);
            assert_eq!(&buf[..], &whole[..], "step {step}");
            assert_eq!(buf.capacity(), total, "step {step}: exact at the end");
            assert!(held <= total + 2 * CHUNK, "step {step}: held {held}");
        }
        // Part of it: what was sent, never the announced length.
        let (buf, held) = arrive(&whole[..200_000], 4096);
        assert!(
            buf.len() < 200_000 && held < 200_000 + 2 * CHUNK,
            "held {held}"
        );
        // A request that ends inside a read, the next one after it.
        let mut two = whole.clone();
        two.extend_from_slice(&[0x30, 0x03, 0x02, 0x01, 0x07]);
        let (buf, _) = arrive(&two, 70_000);
        assert_eq!(&buf[..], &two[..]);
    }

    #[test]
    fn small_or_unframed_requests_stay_in_one_buffer() {
        let mut small = partial_add(4_000_000, LARGE - 1);
        assert!(Large::start(&mut small).is_none());
        assert_eq!(small.len(), LARGE - 1);
        // Not a SEQUENCE (frame_len refuses it), or a header cut short.
        let mut junk = BytesMut::from(&vec![0x04; LARGE + 1][..]);
        assert!(Large::start(&mut junk).is_none());
        assert_eq!(frame::announced_len(&[0x30, 0x84, 0, 0]), None);
        assert_eq!(frame::announced_len(&[0x30, 0x03, 2, 1, 1]), Some(5));
        // Whole already: nothing to wait for.
        let mut whole = partial_add(40_000, 40_000);
        assert!(Large::start(&mut whole).is_none());
    }
}
