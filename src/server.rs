//! The accept loop: one entry point shared by `serve`, `demo` and the tests.
//! A connection slot is taken before a client is served; when none is free
//! the client gets a Notice of Disconnection. One shutdown signal reaches
//! every loop; in-flight operations get a grace period.

use crate::context::Context;
use crate::wire::response::{self, Code};
use bytes::BytesMut;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
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
/// `workers` (and this runtime, worker 0): see [`crate::workers`].
pub async fn run_on(
    listener: TcpListener,
    ldaps: Option<TcpListener>,
    router: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    workers: Option<&crate::workers::Workers>,
) {
    // Loop detection watches connections to these ports.
    for l in std::iter::once(&listener).chain(ldaps.as_ref()) {
        if let Ok(a) = l.local_addr() {
            crate::upstream::self_conn::listening_on(a.port());
        }
    }
    if let Some(h) = router.cfg.health.clone() {
        tokio::spawn(crate::health::run(router.clone(), h, shutdown.clone()));
    }
    tokio::spawn(crate::tail::run(router.clone(), shutdown.clone()));
    tokio::spawn(crate::follow::poll::run(router.clone(), shutdown.clone()));
    if let Some(w) = workers {
        tokio::spawn(crate::workers::balance(
            w.shared().clone(),
            shutdown.clone(),
        ));
        let _ = router.workers.set(w.shared().clone());
    }
    {
        let throttle = router.throttle.clone();
        let rx = shutdown.clone();
        let every = (router.cfg.utilization_window / 60).clamp(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_secs(5),
        );
        tokio::spawn(async move {
            throttle
                .run(
                    Box::new(crate::limits::sampler::System::detect()),
                    every,
                    rx,
                )
                .await;
        });
    }
    let per_ip: Arc<dashmap::DashMap<std::net::IpAddr, usize>> = Arc::default();
    let slots = Arc::new(Semaphore::new(router.cfg.max_clients));
    let mut sessions = JoinSet::new();
    loop {
        let (accepted, is_ldaps) = tokio::select! {
            a = listener.accept() => (a, false),
            a = accept_on(ldaps.as_ref()) => (a, true),
            _ = shutdown.changed() => break,
        };
        while sessions.try_join_next().is_some() {}
        let (mut stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Only a peer port this process connected from needs the local
        // address (a system call) to tell.
        let looped = crate::upstream::self_conn::outbound_port(peer.port())
            .then(|| stream.local_addr().ok())
            .flatten()
            .and_then(|l| crate::upstream::self_conn::own_outbound(&peer, &l));
        if let Some(dsa) = looped {
            // This router connected to itself: its knowledge names it as
            // DSA `dsa`. Refused, so that nothing loops.
            tracing::error!(client = %peer, dsa = %dsa, "loop: DSA {dsa}'s address is this router's own; refusing the connection (give serve --name {dsa}, or fix the address)");
            router.metrics.refused(crate::metrics::Refusal::Connections);
            refuse_with(
                stream,
                Code::LoopDetect,
                "dsa-router: loop detected: this router connected to itself",
            );
            continue;
        }
        let ip = peer.ip();
        let per_ip_limit = router.cfg.max_clients_per_ip;
        if per_ip_limit > 0 {
            let mut n = per_ip.entry(ip).or_insert(0);
            if *n >= per_ip_limit {
                drop(n);
                tracing::warn!(client = %peer, limit = per_ip_limit, "connection refused: too many connections from this address");
                router.metrics.refused(crate::metrics::Refusal::Connections);
                refuse(stream, "dsa-router: too many connections from your address");
                continue;
            }
            *n += 1;
        }
        let release_ip = {
            let per_ip = per_ip.clone();
            move || {
                if per_ip_limit > 0 {
                    if let Some(mut n) = per_ip.get_mut(&ip) {
                        *n = n.saturating_sub(1);
                    }
                    per_ip.remove_if(&ip, |_, n| *n == 0);
                }
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            release_ip();
            tracing::warn!(client = %peer, limit = router.cfg.max_clients, "connection refused: too many client connections");
            router.metrics.refused(crate::metrics::Refusal::Connections);
            tokio::spawn(async move {
                let mut b = BytesMut::new();
                response::notice_of_disconnection(
                    Code::Unavailable,
                    "dsa-router: too many client connections",
                    &mut b,
                );
                let _ =
                    tokio::time::timeout(std::time::Duration::from_secs(1), stream.write_all(&b))
                        .await;
            });
            continue;
        };
        let router = router.clone();
        let shutdown = shutdown.clone();
        // Another worker's session: the socket leaves this runtime's
        // reactor and joins that worker's, where all its I/O happens.
        let seat = workers.map(crate::workers::Workers::place);
        let handle = seat
            .as_ref()
            .filter(|s| s.worker() != 0)
            .map(|s| s.handle());
        let stream = match &handle {
            Some(_) => match stream.into_std() {
                Ok(s) => Handoff::Moved(s),
                Err(e) => {
                    tracing::warn!(client = %peer, error = %e, "cannot hand the connection to a worker");
                    release_ip();
                    continue;
                }
            },
            None => Handoff::Here(stream),
        };
        let session = async move {
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
                release_ip();
                drop(permit);
                return;
            };
            let m = router.metrics.clone();
            m.clients.fetch_add(1, Ordering::Relaxed);
            m.clients_total.fetch_add(1, Ordering::Relaxed);
            // One call of `run`: each call site would hold its own copy
            // of the session's state in this task.
            let stream = match (&router.tls, is_ldaps) {
                (_, false) => Some(crate::tls::ClientStream::Plain(stream)),
                (Some(tls), true) => {
                    match Box::pin(tls.accept(stream, router.cfg.pdu_timeout)).await {
                        Ok(s) => Some(crate::tls::ClientStream::Tls(Box::new(s))),
                        Err(e) => {
                            tracing::warn!(client = %peer, error = %crate::logsafe::esc(&e), "LDAPS: TLS handshake failed; closing the connection");
                            None
                        }
                    }
                }
                (None, true) => None,
            };
            if let Some(s) = stream {
                // No span per client connection: making one formatted the
                // address for the subscriber (a twentieth of a connection's
                // work), and entering it cost every poll. The session's
                // events name the client themselves (`client = ...`).
                let mut moving =
                    crate::session::serve(router.clone(), s, peer, shutdown, seat).await;
                // It moved to another worker: this task waits for it
                // there, holding the connection's slots.
                while let Some(m) = moving {
                    let there = m.handle();
                    moving = there.spawn(crate::session::resume(m)).await.ok().flatten();
                }
            }
            m.clients.fetch_sub(1, Ordering::Relaxed);
            release_ip();
            drop(permit);
        };
        match &handle {
            Some(h) => sessions.spawn_on(session, h),
            None => sessions.spawn(session),
        };
    }
    drop(listener);
    drop(ldaps);
    let grace = router.cfg.shutdown_grace + std::time::Duration::from_secs(1);
    let _ = tokio::time::timeout(grace, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    sessions.abort_all();
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
