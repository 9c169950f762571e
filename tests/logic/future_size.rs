//! Idle connections must stay small (10,000 idle connections in
//! at most 100 MiB): the per-connection task's future is allocated whole
//! for the connection's life, so rare, large states (StartTLS, spanning
//! searches) are boxed. This test fails when the future grows past a
//! budget, before a benchmark would show it.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::knowledge::{Dsa, Knowledge};
use dsa_router::service::context::{Config, Context};
use std::sync::Arc;

#[tokio::test]
async fn the_session_future_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let k = Knowledge::new()
        .dsa(Dsa::new("D1", 9).prefix("<c AU><o DEMOCORP>"))
        .write_to(&dir.path().join("r.dxg"));
    let snap = dsa_router::directory::knowledge::load(&k).unwrap();
    let router = Arc::new(Context::new(Config::default(), snap, None).unwrap());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
        .await
        .unwrap();
    let peer = c.local_addr().unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let fut = dsa_router::frontend::session::run(router, c, peer, rx);
    let size = std::mem::size_of_val(&fut);
    println!("session future: {size} bytes");
    assert!(size <= 1536, "the session future is {size} bytes");
}
