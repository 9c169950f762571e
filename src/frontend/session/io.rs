//! A client connection's I/O: the read loop (framing, the idle and
//! incomplete-PDU timers, shutdown); the writer task that drains what
//! could not be written at once is [`super::writer`]. Requests go to
//! [`Session::handle`].

use super::drain::drain;
use super::handover::Leave;
use super::reading::{far_future, Reading};
use super::{out::ClientOut, writer, Flow, Identity, Session};
use crate::base::workers::Seat;
use crate::proto::wire::response::{self, Code};
use crate::service::context::Context;
use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// Serve one client until it leaves, misbehaves, or shutdown.
pub async fn run(
    router: Arc<Context>,
    stream: impl Into<crate::proto::tls::ClientStream>,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
) {
    let stream = stream.into();
    let s = Session::new(router, peer, stream.is_tls(), false);
    let _ = drive(Start::new(s, stream, shutdown, None)).await;
}

/// [`run`] for a session seated on a worker ([`crate::base::workers`]): when
/// that worker asks it to move, it returns what [`resume`] continues on
/// the worker it is now counted on (see [`Moving::handle`]).
pub async fn serve(
    router: Arc<Context>,
    stream: crate::proto::tls::ClientStream,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
    seat: Option<Seat>,
) -> Option<Box<Moving>> {
    let s = Session::new(router, peer, stream.is_tls(), false);
    drive(Start::new(s, stream, shutdown, seat)).await
}

/// Resume a session handed over by the old process in a hot upgrade
/// ([`crate::lifecycle::handover`]) from its state, on this process's worker.
pub async fn serve_handed(
    router: Arc<Context>,
    stream: crate::proto::tls::ClientStream,
    state: crate::lifecycle::handover::state::SessionState,
    shutdown: watch::Receiver<bool>,
    seat: Option<Seat>,
) -> Option<Box<Moving>> {
    let (s, buf) = Session::from_state(router, state);
    drive(Box::new(Start {
        s,
        stream,
        buf,
        shutdown,
        seat,
        moved: true,
    }))
    .await
}

/// What [`drive`] starts from, in one box: an async function's arguments
/// are kept in its future beside the locals they are moved into, so a
/// session passed by value would be held twice for the connection's life.
struct Start {
    s: Session,
    stream: crate::proto::tls::ClientStream,
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
        stream: crate::proto::tls::ClientStream,
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
    /// A session starting (`handed`: handed over by the previous process).
    pub(super) fn new(router: Arc<Context>, peer: SocketAddr, tls: bool, handed: bool) -> Session {
        let out = ClientOut::new(
            router.cfg.client_queue,
            router.cfg.client_queue_bytes,
            router.admission.response_memory.clone(),
            peer,
        );
        let listed = router.clients.enter(peer, tls, handed);
        Session {
            router,
            client: super::Client {
                peer,
                tls,
                out,
                log_client: crate::observe::access::Head::client(peer),
                listed,
            },
            who: super::Who {
                identity: Identity::Anonymous,
                private: super::own::Own::new(peer),
                sasl: None,
                rebind: None,
            },
            places: super::Places {
                state_dsa: HashMap::new(),
                affinity: HashMap::new(),
                last_dn: None,
            },
            pol: Default::default(),
        }
    }
}

/// A session on its way to another worker: its state, its connection (off
/// any runtime's reactor, with its TLS state if any), and the bytes it had
/// read.
pub struct Moving {
    s: Session,
    sock: crate::proto::tls::Detached,
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
            tracing::warn!(client = %s.client.peer, error = %e, "a worker cannot take the moving session; closing it");
            s.client.out.abandon_all();
            s.who.private.release_all();
            s.client.out.ob.close();
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
        buf,
        mut shutdown,
        mut seat,
        mut moved,
    } = Start::unbox(start);
    let router = s.router.clone();
    let peer = s.client.peer;
    let out = s.client.out.clone();
    let (mut rd, wr) = stream.split();
    let done = CancellationToken::new();
    let mut pause = CancellationToken::new();
    let mut writer = tokio::spawn(writer::writer(wr, out.clone(), done.clone(), pause.clone()));
    let cfg = &router.cfg;
    let mut r = Reading::new(&router.admission.request_memory, buf);
    // Made once, not per read; boxed, not in every idle connection's task.
    let mut timer = Box::pin(tokio::time::sleep_until(far_future()));
    let (kill, mut flush) = (out.kill.clone(), CLOSE_FLUSH);
    let mut killed = std::pin::pin!(kill.cancelled());
    // The loop waits on `shutdown`; a session that moves takes a copy.
    let onward = shutdown.clone();
    let mut shut = std::pin::pin!(shutdown.changed());
    // Hot upgrade: since when it is asked to leave (session::handover).
    let mut leaving: Option<std::time::Instant> = None;
    let notice = 'conn: loop {
        if let Some(since) = leaving {
            match s.leave_step(&r, since) {
                Leave::Wait => {}
                Leave::Drain(left) => break Some(drain(&out, left, &mut flush).await),
                Leave::Now => {
                    match Box::pin(leave_now(&s, rd, &mut writer, &pause, &mut r.buf)).await {
                        true => return None,
                        false => break None,
                    }
                }
            }
        }
        // A request came in: its worker may ask the session to move
        // (not right after it did).
        let asked = !r.buf.is_empty()
            && !std::mem::take(&mut moved)
            && seat.as_mut().is_some_and(Seat::asked);
        if asked && r.between() && s.can_move() {
            if let Some(to) = seat.as_mut().and_then(Seat::leave) {
                // The writer hands the socket back once what it holds is
                // written (nothing is: the session is idle).
                pause.cancel();
                let Some(sock) = detach(rd, &mut writer, peer).await else {
                    // The writer ended: nothing is left to wait for.
                    writer = tokio::spawn(async { None });
                    break None;
                };
                tracing::debug!(client = %peer, worker = to, "session moves to another worker");
                let (seat, buf) = (seat?, r.into_buf());
                let shutdown = onward;
                return Some(Box::new(Moving {
                    s,
                    sock,
                    buf,
                    shutdown,
                    seat,
                }));
            }
        }
        r.gather();
        let mut handled = false;
        loop {
            match requests(&mut s, &mut r, &mut handled).await {
                Framed::Wait => break,
                Framed::Close(n) => break 'conn n,
                Framed::StartTls(msgid) => {
                    let link = (rd, writer, pause);
                    match Box::pin(s.start_tls(msgid, r.buf.is_empty(), link, &done)).await {
                        Ok(l) => (rd, writer, pause) = l,
                        Err(l) => {
                            writer = l.1;
                            break 'conn None;
                        }
                    }
                }
            }
        }
        if handled {
            r.handled();
        }
        if let Err(bytes) = r.count(cfg.max_request_memory) {
            break 'conn Some(over_memory(&router, peer, bytes));
        }
        let due = r.due(cfg.idle_timeout, cfg.pdu_timeout);
        arm(&mut timer, due);
        tokio::select! {
            // No clock read here: bytes that end a request restart the
            // idle time when it has been handled (above), and a request's
            // first bytes start the PDU timeout.
            got = rd.read_some(&mut r.buf) => match got {
                Ok(0) | Err(_) => break None,
                Ok(_) => {}
            },
            _ = &mut timer => if let Some(n) = fired(&mut timer, due, r.idle(), peer) {
                break Some(n);
            },
            _ = &mut killed => break None,
            _ = &mut shut, if leaving.is_none() => match router.lifecycle.handover.exporting() {
                None => break Some(drain(&out, cfg.drain_timeout, &mut flush).await),
                Some(_) => leaving = Some(std::time::Instant::now()),
            },
            // Leaving: look again soon whether the session may go.
            _ = leave_tick(leaving.is_some()), if leaving.is_some() => {}
        }
    };
    drop(r);
    close(&mut s, notice, done, &mut writer, flush).await;
    None
}

/// How long a closing connection's queued answers may take to be written,
/// outside a drain (in one, what is left of its timeout: `flush` in
/// [`drive`]).
const CLOSE_FLUSH: std::time::Duration = std::time::Duration::from_secs(3);

/// Where [`requests`] stopped.
enum Framed {
    /// No whole request is left: read on.
    Wait,
    /// StartTLS accepted so far (message ID): the upgrade follows.
    StartTls(i32),
    /// Close the connection, after a Notice of Disconnection if given.
    Close(Option<(Code, String)>),
}

/// Handle each whole request read, in order (`handled` set when one
/// was).
async fn requests(s: &mut Session, r: &mut Reading<'_>, handled: &mut bool) -> Framed {
    loop {
        let pdu = match r.next(s.router.cfg.max_request_pdu) {
            Ok(Some(pdu)) => pdu,
            Ok(None) => return Framed::Wait,
            Err(e) => {
                tracing::warn!(client = %s.client.peer, error = %e, "malformed PDU from client; disconnecting");
                return Framed::Close(Some((Code::ProtocolError, s.not_ldap(&e))));
            }
        };
        *handled = true;
        // Boxed: the request path's state is large and would otherwise be
        // part of every idle connection's task.
        match Box::pin(s.handle(pdu)).await {
            Flow::Continue => {}
            Flow::Close(n) => return Framed::Close(n),
            Flow::StartTls(msgid) => return Framed::StartTls(msgid),
        }
    }
}

/// While a session is leaving, 10 ms before it looks again whether it
/// may go. An async fn, so the loop's `select!` builds no timer (nor reads
/// the clock) for a session that is not leaving, and the timer is boxed:
/// it is not carried in every session's future (tests/logic future_size).
async fn leave_tick(leaving: bool) {
    if leaving {
        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(10))).await
    }
}

/// A hot upgrade: the idle session's writer paused, it leaves for the new
/// process (true), or its writer ended first (false: closed).
async fn leave_now(
    s: &Session,
    rd: crate::proto::tls::ClientRead,
    writer: &mut JoinHandle<writer::Paused>,
    pause: &CancellationToken,
    buf: &mut BytesMut,
) -> bool {
    pause.cancel();
    match detach(rd, writer, s.client.peer).await {
        Some(crate::proto::tls::Detached::Plain(sock)) => {
            s.export(sock, std::mem::take(buf)).await;
            true
        }
        _ => {
            *writer = tokio::spawn(async { None });
            false
        }
    }
}

/// The socket of a session whose writer was paused, off the runtime,
/// once the writer handed its half back; `None` when it ended instead.
async fn detach(
    rd: crate::proto::tls::ClientRead,
    writer: &mut JoinHandle<writer::Paused>,
    peer: SocketAddr,
) -> Option<crate::proto::tls::Detached> {
    let wr = writer.await.ok().flatten()?;
    match crate::proto::tls::reunite(rd, wr).map(crate::proto::tls::ClientStream::detach)? {
        Ok(sock) => Some(sock),
        Err(e) => {
            tracing::warn!(client = %peer, error = %e, "cannot take the session off its worker; closing it");
            None
        }
    }
}

/// A client whose incomplete request would take the router beyond
/// `--max-request-memory`: counted, logged, and told why it is cut.
fn over_memory(router: &Context, peer: SocketAddr, bytes: usize) -> (Code, String) {
    router
        .backend
        .metrics
        .refused(crate::observe::metrics::Refusal::RequestMemory);
    tracing::warn!(client = %peer, bytes, "incomplete requests hold more memory than --max-request-memory; disconnecting this client");
    (
        Code::Busy,
        "dsa-router: the router holds too much of clients' incomplete requests; try again later"
            .into(),
    )
}

/// The session's timer moved to `due` when that comes earlier than it is
/// set; when it fires early, it is set again (no timer work per request).
fn arm(timer: &mut Pin<Box<Sleep>>, due: Option<tokio::time::Instant>) {
    if let Some(due) = due {
        if due < timer.deadline() {
            timer.as_mut().reset(due);
        }
    }
}

/// The session's timer fired: the notice to close with when `due` has
/// come (idle, or a request incomplete for too long), else it is set again.
fn fired(
    timer: &mut Pin<Box<Sleep>>,
    due: Option<tokio::time::Instant>,
    idle: bool,
    peer: SocketAddr,
) -> Option<(Code, String)> {
    match due {
        Some(due) if due <= tokio::time::Instant::now() => {
            let what = if idle { "idle" } else { "incomplete PDU" };
            tracing::info!(client = %peer, "{what} timeout; disconnecting");
            return Some((Code::Unavailable, format!("dsa-router: {what} timeout")));
        }
        Some(due) => timer.as_mut().reset(due),
        None => timer.as_mut().reset(far_future()),
    }
    None
}

/// The end of a session: its notice, if any, queued; what it holds
/// upstream given back, and what is queued flushed.
async fn close(
    s: &mut Session,
    notice: Option<(Code, String)>,
    done: CancellationToken,
    writer: &mut JoinHandle<writer::Paused>,
    flush: std::time::Duration,
) {
    let out = &s.client.out;
    if let Some((code, msg)) = notice {
        let mut b = BytesMut::new();
        response::notice_of_disconnection(code, &msg, &mut b);
        let _ = out.deliver(b.freeze());
    }
    out.abandon_all();
    s.who.private.release_all();
    if let Some(step) = s.who.sasl.take() {
        step.conn.close();
    }
    done.cancel();
    // The writer flushes what is queued; a client that does not read gets
    // `flush` (a few seconds; in a drain, what is left of its timeout), then
    // its connection is dropped.
    if tokio::time::timeout(flush, &mut *writer).await.is_err() {
        writer.abort();
    }
    // The writer closes it, unless a failed StartTLS took it away first.
    s.client.out.ob.close();
}
