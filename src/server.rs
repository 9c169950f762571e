//! The accept loop: one entry point shared by `serve`, `demo` and the tests.
//! A connection slot is taken before a client is served; when none is free
//! the client gets a Notice of Disconnection. One shutdown signal reaches
//! every loop; in-flight operations get a grace period.

use crate::router::Router;
use crate::wire::response::{self, Code};
use bytes::BytesMut;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Serve clients on `listener` until `shutdown` turns true.
pub async fn run(listener: TcpListener, router: Arc<Router>, mut shutdown: watch::Receiver<bool>) {
    if let Some(h) = router.cfg.health.clone() {
        tokio::spawn(crate::health::run(router.clone(), h, shutdown.clone()));
    }
    let slots = Arc::new(Semaphore::new(router.cfg.max_clients));
    let mut sessions = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
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
        let Ok(permit) = slots.clone().try_acquire_owned() else {
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
        sessions.spawn(async move {
            let m = router.metrics.clone();
            m.clients.fetch_add(1, Ordering::Relaxed);
            m.clients_total.fetch_add(1, Ordering::Relaxed);
            crate::session::run(router, stream, peer, shutdown).await;
            m.clients.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    drop(listener);
    let grace = router.cfg.shutdown_grace + std::time::Duration::from_secs(1);
    let _ = tokio::time::timeout(grace, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    sessions.abort_all();
}
