//! The accept loop: one entry point shared by `serve`, `demo` and the tests.
//! A connection slot is taken before a client is served; when none is free
//! the client gets a Notice of Disconnection. One shutdown signal reaches
//! every loop; then the router drains ([`crate::lifecycle::drain`]).

use crate::proto::wire::response::{self, Code};
use crate::service::context::Context;
use bytes::BytesMut;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// Serve clients on `listener` until `shutdown` turns true.
pub async fn run(listener: TcpListener, router: Arc<Context>, shutdown: watch::Receiver<bool>) {
    run_with_ldaps(listener, None, router, shutdown).await
}

/// Accept on `listener`, or forever when there is none.
async fn accept_on(
    listener: Option<&TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Serve clients on `listener` (plain LDAP, StartTLS when TLS is
/// configured) and on `ldaps` (TLS from the first byte; needs the router's
/// TLS configuration) until `shutdown` turns true. Both share the
/// connection limits.
pub async fn run_with_ldaps(
    listener: TcpListener,
    ldaps: Option<TcpListener>,
    router: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    run_on(listener, ldaps, router, shutdown, None).await
}

/// [`run_with_ldaps`], handing each client connection to the least busy of
/// `workers` (and this runtime, worker 0): see [`crate::base::workers`].
pub async fn run_on(
    listener: TcpListener,
    ldaps: Option<TcpListener>,
    router: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    workers: Option<&crate::base::workers::Workers>,
) {
    start_tasks(&listener, ldaps.as_ref(), &router, &shutdown, workers);
    let per_ip: PerIp = Arc::default();
    let slots = Arc::new(Semaphore::new(router.cfg.max_clients));
    let mut sessions = JoinSet::new();
    // Connections from --proxy-protocol-from, once their header is read,
    // with the client's address.
    let (relay, mut relayed) = tokio::sync::mpsc::channel(64);
    // After a hot upgrade: the sessions the old process hands over.
    let mut adopted = router.lifecycle.handover.take_adopted();
    loop {
        let (accepted, is_ldaps, header_read) = tokio::select! {
            a = listener.accept() => (a, false, false),
            a = accept_on(ldaps.as_ref()) => (a, true, false),
            Some((s, peer, l)) = relayed.recv() => (Ok((s, peer)), l, true),
            Some(a) = next_adopted(&mut adopted) => {
                let client = (&router, &per_ip, &slots, &shutdown);
                adopt(client, a, &mut sessions, workers);
                continue;
            }
            _ = shutdown.changed() => break,
        };
        while sessions.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(a) => {
                crate::backend::upstream::pace::tune_client(&a.0);
                a
            }
            Err(e) => {
                // Out of file descriptors and the like: back off briefly.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let proxied = &router.cfg.proxy_protocol_from;
        if !header_read && proxied.iter().any(|c| c.contains(peer.ip())) {
            // Its header first: admitted (and limited) by the client's
            // address, when that comes back through `relayed`.
            tokio::spawn(read_header(
                router.clone(),
                stream,
                peer,
                is_ldaps,
                relay.clone(),
            ));
            continue;
        }
        let Some((stream, ip, permit)) = admit(&router, stream, peer, &per_ip, &slots) else {
            continue;
        };
        let client = Client {
            router: router.clone(),
            peer,
            is_ldaps,
            shutdown: shutdown.clone(),
            ip,
            permit,
            state: None,
        };
        hand_over(&mut sessions, client, stream, workers);
    }
    // The drain (crate::lifecycle::drain): no new connections; each session ends
    // at an operation boundary.
    drop(listener);
    drop(ldaps);
    router.lifecycle.drain.begin();
    let grace = router.cfg.drain_timeout + std::time::Duration::from_secs(1);
    let _ = tokio::time::timeout(grace, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    sessions.abort_all();
    router.lifecycle.drain.end();
}

/// The next session handed over by the old process, if any come.
async fn next_adopted(
    rx: &mut Option<tokio::sync::mpsc::Receiver<crate::lifecycle::handover::Adopted>>,
) -> Option<crate::lifecycle::handover::Adopted> {
    match rx {
        Some(r) => match r.recv().await {
            Some(a) => Some(a),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Serve a session handed over by the old process ([`crate::lifecycle::handover`]):
/// admitted and counted like a new connection, resumed from its state.
fn adopt(
    (router, per_ip, slots, shutdown): (
        &Arc<Context>,
        &PerIp,
        &Arc<Semaphore>,
        &watch::Receiver<bool>,
    ),
    a: crate::lifecycle::handover::Adopted,
    sessions: &mut JoinSet<()>,
    workers: Option<&crate::base::workers::Workers>,
) {
    let peer = a.state.peer;
    let stream = a
        .sock
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(a.sock));
    let stream = match stream {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(client = %peer, error = %e, "cannot take a session handed over");
            return;
        }
    };
    let Some((stream, ip, permit)) = admit(router, stream, peer, per_ip, slots) else {
        return;
    };
    let client = Client {
        router: router.clone(),
        peer,
        is_ldaps: false,
        shutdown: shutdown.clone(),
        ip,
        permit,
        state: Some(Box::new(a.state)),
    };
    hand_over(sessions, client, stream, workers);
}

/// A connection from a `--proxy-protocol-from` source, with the client's
/// address (the header's source), for the accept loop.
type Relayed = (tokio::net::TcpStream, std::net::SocketAddr, bool);

/// Read the PROXY protocol header of a connection from a listed source
/// (within `--pdu-timeout`), then hand it back to the accept loop with the
/// client's address; a connection without a valid header is refused.
async fn read_header(
    router: Arc<Context>,
    mut stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    is_ldaps: bool,
    relay: tokio::sync::mpsc::Sender<Relayed>,
) {
    use crate::proto::proxy_protocol::{read, Header};
    match read(&mut stream, router.cfg.pdu_timeout).await {
        Ok(Header::Proxied { src, .. }) => {
            tracing::debug!(client = %src, via = %peer, "PROXY protocol header read");
            let _ = relay.send((stream, src, is_ldaps)).await;
        }
        Ok(Header::Local) => {
            let _ = relay.send((stream, peer, is_ldaps)).await;
        }
        Err(e) => {
            tracing::warn!(via = %peer, error = %e, "connection from a --proxy-protocol-from source without a valid PROXY header; closing it");
            router
                .backend
                .metrics
                .refused(crate::observe::metrics::Refusal::Connections);
            refuse_with(
                stream,
                Code::ProtocolError,
                "dsa-router: a PROXY protocol header is required from this address",
            );
        }
    }
}

/// The router's own tasks beside the accept loop: loop detection's
/// ports, the probes, the tail-latency task, the workers' balancer and
/// the throttle's sampler.
fn start_tasks(
    listener: &TcpListener,
    ldaps: Option<&TcpListener>,
    router: &Arc<Context>,
    shutdown: &watch::Receiver<bool>,
    workers: Option<&crate::base::workers::Workers>,
) {
    // Loop detection watches connections to these ports.
    for l in std::iter::once(listener).chain(ldaps) {
        if let Ok(a) = l.local_addr() {
            crate::backend::upstream::self_conn::listening_on(a.port());
        }
    }
    if let Some(h) = router.cfg.health.clone() {
        tokio::spawn(crate::backend::health::run(
            router.backend.clone(),
            h,
            shutdown.clone(),
        ));
    }
    tokio::spawn(crate::backend::tail::run(
        router.backend.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(crate::backend::follow::poll::run(
        router.backend.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(crate::backend::membership::run(
        router.backend.clone(),
        shutdown.clone(),
    ));
    if let Some(w) = workers {
        tokio::spawn(crate::base::workers::balance(
            w.shared().clone(),
            shutdown.clone(),
        ));
        let _ = router.workers.set(w.shared().clone());
    }
    let throttle = router.admission.throttle.clone();
    let rx = shutdown.clone();
    let every = (router.cfg.utilization_window / 60).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(5),
    );
    tokio::spawn(async move {
        throttle
            .run(
                Box::new(crate::admission::limits::sampler::System::detect()),
                every,
                rx,
            )
            .await;
    });
}

/// Connections open from each client address.
type PerIp = Arc<dashmap::DashMap<std::net::IpAddr, usize>>;

/// One connection counted against its address's limit, until it drops.
struct IpSlot {
    per_ip: PerIp,
    ip: std::net::IpAddr,
    /// The limit applies (`--max-clients-per-ip` is not 0).
    counted: bool,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        if self.counted {
            if let Some(mut n) = self.per_ip.get_mut(&self.ip) {
                *n = n.saturating_sub(1);
            }
            self.per_ip.remove_if(&self.ip, |_, n| *n == 0);
        }
    }
}

/// Whether a client connection is served: not this router connected to
/// itself, its address under its limit, and a connection slot free.
/// Refused connections get a Notice of Disconnection.
fn admit(
    router: &Context,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    per_ip: &PerIp,
    slots: &Arc<Semaphore>,
) -> Option<(tokio::net::TcpStream, IpSlot, OwnedSemaphorePermit)> {
    // Only a peer port this process connected from needs the local
    // address (a system call) to tell.
    let looped = crate::backend::upstream::self_conn::outbound_port(peer.port())
        .then(|| stream.local_addr().ok())
        .flatten()
        .and_then(|l| crate::backend::upstream::self_conn::own_outbound(&peer, &l));
    if let Some(dsa) = looped {
        // This router connected to itself: its knowledge names it as
        // DSA `dsa`. Refused, so that nothing loops.
        tracing::error!(client = %peer, dsa = %dsa, "loop: DSA {dsa}'s address is this router's own; refusing the connection (give serve --name {dsa}, or fix the address)");
        router
            .backend
            .metrics
            .refused(crate::observe::metrics::Refusal::Connections);
        refuse_with(
            stream,
            Code::LoopDetect,
            "dsa-router: loop detected: this router connected to itself",
        );
        return None;
    }
    let ip = peer.ip();
    let per_ip_limit = router.cfg.max_clients_per_ip;
    if per_ip_limit > 0 {
        let mut n = per_ip.entry(ip).or_insert(0);
        if *n >= per_ip_limit {
            drop(n);
            tracing::warn!(client = %peer, limit = per_ip_limit, "connection refused: too many connections from this address");
            router
                .backend
                .metrics
                .refused(crate::observe::metrics::Refusal::Connections);
            refuse(stream, "dsa-router: too many connections from your address");
            return None;
        }
        *n += 1;
    }
    let ip = IpSlot {
        per_ip: per_ip.clone(),
        ip,
        counted: per_ip_limit > 0,
    };
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        drop(ip);
        tracing::warn!(client = %peer, limit = router.cfg.max_clients, "connection refused: too many client connections");
        router
            .backend
            .metrics
            .refused(crate::observe::metrics::Refusal::Connections);
        refuse(stream, "dsa-router: too many client connections");
        return None;
    };
    Some((stream, ip, permit))
}

/// An admitted client connection, with the slots it holds.
struct Client {
    router: Arc<Context>,
    peer: std::net::SocketAddr,
    is_ldaps: bool,
    shutdown: watch::Receiver<bool>,
    ip: IpSlot,
    permit: OwnedSemaphorePermit,
    /// A session handed over by the old process: its state.
    state: Option<Box<crate::lifecycle::handover::state::SessionState>>,
}

/// Serve the client on the least busy worker: another worker's session
/// leaves this runtime's reactor and joins that worker's, where all its
/// I/O happens.
fn hand_over(
    sessions: &mut JoinSet<()>,
    client: Client,
    stream: tokio::net::TcpStream,
    workers: Option<&crate::base::workers::Workers>,
) {
    let seat = workers.map(crate::base::workers::Workers::place);
    let handle = seat
        .as_ref()
        .filter(|s| s.worker() != 0)
        .map(|s| s.handle());
    let stream = match &handle {
        Some(_) => match stream.into_std() {
            Ok(s) => Handoff::Moved(s),
            Err(e) => {
                tracing::warn!(client = %client.peer, error = %e, "cannot hand the connection to a worker");
                return;
            }
        },
        None => Handoff::Here(stream),
    };
    let session = serve_client(client, stream, seat);
    match &handle {
        Some(h) => sessions.spawn_on(session, h),
        None => sessions.spawn(session),
    };
}

/// One client's task: its TLS handshake (LDAPS), then its session,
/// following it when it moves to another worker; its slots are given
/// back when it ends.
async fn serve_client(c: Client, stream: Handoff, seat: Option<crate::base::workers::Seat>) {
    let Client {
        router,
        peer,
        is_ldaps,
        shutdown,
        ip,
        permit,
        state,
    } = c;
    let stream = match stream {
        Handoff::Here(s) => Some(s),
        Handoff::Moved(s) => match tokio::net::TcpStream::from_std(s) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(client = %peer, error = %e, "a worker cannot take the connection");
                None
            }
        },
    };
    let Some(stream) = stream else {
        drop(seat);
        drop(ip);
        drop(permit);
        return;
    };
    let m = router.backend.metrics.clone();
    m.clients.fetch_add(1, Ordering::Relaxed);
    m.clients_total.fetch_add(1, Ordering::Relaxed);
    // One call of `run`: each call site would hold its own copy
    // of the session's state in this task.
    let stream = match (&router.tls, is_ldaps) {
        (_, false) => Some(crate::proto::tls::ClientStream::Plain(stream)),
        (Some(tls), true) => match Box::pin(tls.accept(stream, router.cfg.pdu_timeout)).await {
            Ok(s) => Some(crate::proto::tls::ClientStream::Tls(Box::new(s))),
            Err(e) => {
                tracing::warn!(client = %peer, error = %crate::base::logsafe::esc(&e), "LDAPS: TLS handshake failed; closing the connection");
                None
            }
        },
        (None, true) => None,
    };
    if let Some(s) = stream {
        // No span per client connection: making one formatted the
        // address for the subscriber (a twentieth of a connection's
        // work), and entering it cost every poll. The session's
        // events name the client themselves (`client = ...`).
        let mut moving = match state {
            Some(st) => {
                crate::frontend::session::serve_handed(router.clone(), s, *st, shutdown, seat).await
            }
            None => crate::frontend::session::serve(router.clone(), s, peer, shutdown, seat).await,
        };
        // It moved to another worker: this task waits for it
        // there, holding the connection's slots.
        while let Some(m) = moving {
            let there = m.handle();
            moving = there
                .spawn(crate::frontend::session::resume(m))
                .await
                .ok()
                .flatten();
        }
    }
    m.clients.fetch_sub(1, Ordering::Relaxed);
    drop(ip);
    drop(permit);
}

/// A client connection on the accepting runtime, or taken off it for
/// another worker.
enum Handoff {
    Here(tokio::net::TcpStream),
    Moved(std::net::TcpStream),
}

/// Send a Notice of Disconnection and close, without holding up the loop.
fn refuse(stream: tokio::net::TcpStream, msg: &'static str) {
    refuse_with(stream, Code::Unavailable, msg)
}

fn refuse_with(mut stream: tokio::net::TcpStream, code: Code, msg: &'static str) {
    tokio::spawn(async move {
        let mut b = BytesMut::new();
        response::notice_of_disconnection(code, msg, &mut b);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.write_all(&b)).await;
    });
}

/// Bind a listener with a deep accept backlog, so that bursts of thousands
/// of connections are not dropped by the kernel's listen queue.
pub async fn listen(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("cannot resolve {addr}"),
    );
    for a in tokio::net::lookup_host(addr).await? {
        let sock = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        sock.set_reuseaddr(true)?;
        match sock.bind(a).and_then(|_| sock.listen(8192)) {
            Ok(l) => return Ok(l),
            Err(e) => last = e,
        }
    }
    Err(last)
}
