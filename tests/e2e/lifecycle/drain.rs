//! Graceful drain: on SIGTERM or `ctl shutdown` the
//! router stops accepting, lets every operation in flight finish, closes
//! each client connection between operations with a Notice of
//! Disconnection, ends persistent searches with a result, then exits.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::inproc_checks::until;
use crate::support::inproc::*;
use crate::support::router::Router;
use crate::support::slapd::{
    one_dsa_knowledge, pick_port, seed_ldif, Slapd, SlapdConfig, ROUTER_PW,
};
use ldap3_proto::proto::{LdapFilter, LdapOp, LdapResultCode, LdapSearchScope};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Client operations the router has on its DSAs now.
fn in_flight(h: &Harness) -> u32 {
    dsa_router::app::admin::status::status(&h.router)
        .partitions
        .iter()
        .flat_map(|p| &p.dsas)
        .map(|d| d.in_flight)
        .sum()
}

#[tokio::test]
async fn a_drain_answers_the_operations_in_flight_then_closes_every_connection_with_a_notice() {
    let mut b = Builder::default();
    b.cfg.drain_timeout = Duration::from_secs(20);
    let h = b.start().await;
    let slow = Duration::from_millis(1500);
    for d in &h.dsas {
        d.faults.set_delay(slow);
    }
    let mut busy = Raw::connect(h.addr).await;
    let mut idle = Raw::connect(h.addr).await;
    busy.send(&base_search(1, DEMOCORP)).await.unwrap();
    // The router took the search: it runs on a DSA, answered in 1.5 s.
    until("the search in flight", || in_flight(&h) > 0).await;
    let t0 = Instant::now();
    h.drain();
    until("draining in /status", || {
        dsa_router::app::admin::status::status(&h.router).draining
    })
    .await;
    // No new connections.
    assert!(
        tokio::net::TcpStream::connect(h.addr).await.is_err(),
        "a connection was accepted while draining"
    );
    // The idle client is told at once, then closed.
    match expect_disconnect(&mut idle, WAIT, "idle client").await {
        (
            End::Notice {
                code,
                message,
                closed,
            },
            at,
        ) => {
            assert_eq!(code, LdapResultCode::Unavailable, "{message}");
            assert!(message.contains("shutting down"), "{message}");
            assert!(closed, "the idle connection stayed open after its notice");
            assert!(
                at < slow,
                "the idle client waited for another's operation: {at:?}"
            );
        }
        other => panic!("idle client: {other:?}"),
    }
    // The busy client gets its whole answer first, then the notice.
    let mut entries = 0;
    loop {
        let m = busy.msg("busy client").await;
        match &m.op {
            LdapOp::SearchResultEntry(_) => entries += 1,
            LdapOp::SearchResultDone(r) => {
                assert_eq!(r.code, LdapResultCode::Success, "{}", r.message);
                break;
            }
            _ => panic!("busy client: before its answer: {m:?}"),
        }
    }
    assert_eq!(entries, 1);
    assert!(t0.elapsed() + Duration::from_millis(200) >= slow / 2);
    match expect_disconnect(&mut busy, WAIT, "busy client").await {
        (End::Notice { code, closed, .. }, _) => {
            assert_eq!(code, LdapResultCode::Unavailable);
            assert!(closed);
        }
        other => panic!("busy client: {other:?}"),
    }
    // Every session is gone: the accept loop returns.
    until("the drain's end", || !h.serving()).await;
}

#[tokio::test]
async fn operations_still_running_at_the_drain_timeout_are_cut_and_the_client_told() {
    let mut b = Builder::default();
    b.cfg.drain_timeout = Duration::from_millis(500);
    let h = b.start().await;
    for d in &h.dsas {
        d.faults.set_blackhole(true);
    }
    let mut stuck = Raw::connect(h.addr).await;
    stuck.send(&base_search(1, DEMOCORP)).await.unwrap();
    until("the search in flight", || in_flight(&h) > 0).await;
    let t0 = Instant::now();
    h.drain();
    match expect_disconnect(&mut stuck, WAIT, "client of a DSA that never answers").await {
        (End::Notice { code, closed, .. }, at) => {
            assert_eq!(code, LdapResultCode::Unavailable);
            assert!(closed);
            assert!(
                at >= Duration::from_millis(400),
                "cut before the timeout: {at:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    until("the drain's end", || !h.serving()).await;
    assert!(t0.elapsed() < Duration::from_secs(5));
}

/// A slow reader of large answers: two clients each pipeline eight
/// subtree searches of 9,300 entries (about 1.2 MB each, 9.6 MB in all) and
/// read them at about 650 kB/s; the drain starts while they read. Every answer already
/// begun runs to its end, paced by its client, within the drain timeout;
/// then the notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_slow_readers_finish_the_answers_they_are_reading() {
    let _heavy = HEAVY.lock().await;
    const N: usize = 9_300;
    const SEARCHES: i32 = 8;
    let mut b = Builder::default()
        .democorp(&["D1"])
        .extra("B1", BIG, big_directory(BIG, "B1", N));
    b.cfg.drain_timeout = Duration::from_secs(30);
    let h = b.start().await;
    let mut readers = Vec::new();
    for _ in 0..2 {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(16 * 1024).unwrap();
        let mut c = Raw::from_stream(within("connect", sock.connect(h.addr)).await.unwrap());
        for id in 1..=SEARCHES {
            let search = search_msg(
                id,
                &format!("ou=Bulk,{BIG}"),
                LdapSearchScope::Subtree,
                LdapFilter::Present("objectClass".into()),
                &[],
            );
            c.send(&encode(search)).await.unwrap();
        }
        readers.push(tokio::spawn(async move {
            let (mut entries, mut done, mut bytes) = (0usize, 0, 0usize);
            loop {
                let m = c.msg("slow reader").await;
                bytes += encode(m.clone()).len();
                match &m.op {
                    LdapOp::SearchResultEntry(_) => entries += 1,
                    LdapOp::SearchResultDone(r) => {
                        assert_eq!(r.code, LdapResultCode::Success, "{}", r.message);
                        done += 1;
                        if done == SEARCHES {
                            break;
                        }
                    }
                    _ => panic!("slow reader, before its answers' end: {m:?}"),
                }
                // About 650 kB/s.
                if entries.is_multiple_of(50) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            let end = expect_disconnect(&mut c, WAIT, "slow reader").await;
            (entries, bytes, end)
        }));
    }
    // They are reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    h.drain();
    for r in readers {
        let (entries, bytes, end) = r.await.unwrap();
        println!(
            "slow reader: {entries} entries, {bytes} bytes, done {:?} after the drain began",
            t0.elapsed()
        );
        assert_eq!(entries, (N + 1) * SEARCHES as usize);
        match end {
            (End::Notice { code, closed, .. }, _) => {
                assert_eq!(code, LdapResultCode::Unavailable);
                assert!(closed);
            }
            other => panic!("slow reader's end: {other:?}"),
        }
    }
    // Well beyond the 3 s a closing connection gets outside a drain.
    assert!(
        t0.elapsed() > Duration::from_secs(8),
        "the readers were not slow: {:?}",
        t0.elapsed()
    );
    until("the drain's end", || !h.serving()).await;
}

/// slapd with syncprov (persistent searches: sync refreshAndPersist).
fn syncprov_slapd() -> Slapd {
    Slapd::start(SlapdConfig {
        suffixes: vec![DEMOCORP.to_string()],
        ldif: seed_ldif(DEMOCORP, "D1"),
        name: "DRAIN".to_string(),
        global: "moduleload syncprov\n".to_string(),
        database: "index entryCSN,entryUUID eq\noverlay syncprov\n".to_string(),
        sasldb: Vec::new(),
    })
}

/// `ctl shutdown` drains a `serve` process: a sync search running through
/// it ends with `unavailable` (ldapsearch prints it), and the process
/// exits on its own well before `--drain-timeout`.
#[test]
fn ctl_shutdown_ends_a_sync_search_with_a_result_and_the_router_exits() {
    let slapd = syncprov_slapd();
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", pick_port());
    let mut router = Router::start_with(
        &one_dsa_knowledge(dir.path(), slapd.port, ROUTER_PW),
        dir.path(),
        &["--admin", &admin, "--drain-timeout", "30"],
    );
    let out = dir.path().join("sync.ldif");
    let err = dir.path().join("sync.err");
    let mut sync = Command::new("ldapsearch")
        .args([
            "-x",
            "-LLL",
            "-H",
            &router.url,
            "-b",
            DEMOCORP,
            "-E",
            "sync=rp",
        ])
        .args(["(uid=bob)", "description"])
        .env("LDAPNOINIT", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    // The refresh phase is done once bob came back: the search persists.
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&out).unwrap().contains("uid=bob") {
        assert!(
            Instant::now() < deadline,
            "the sync search returned nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let ctl = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", &admin, "shutdown", "--control-socket"])
        .arg(&router.control)
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(
        ctl.status.success(),
        "{}{}",
        String::from_utf8_lossy(&ctl.stdout),
        String::from_utf8_lossy(&ctl.stderr)
    );
    let status = router.wait_exit(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "the router did not exit cleanly: {status:?}\n{}",
        router.log_text()
    );
    assert!(t0.elapsed() < Duration::from_secs(15));
    let deadline = Instant::now() + WAIT;
    let text = loop {
        if let Ok(Some(_)) = sync.try_wait() {
            break std::fs::read_to_string(&err).unwrap();
        }
        assert!(Instant::now() < deadline, "ldapsearch still runs");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(text.contains("Server is unavailable (52)"), "{text}");
    assert!(text.contains("shutting down"), "{text}");
    let log = router.log_text();
    assert!(log.contains("draining"), "{log}");
}

/// SIGTERM drains the same way: an idle pooled connection gets the notice
/// and the process exits 0.
#[test]
fn sigterm_drains_and_the_router_exits() {
    let slapd = syncprov_slapd();
    let dir = tempfile::tempdir().unwrap();
    let mut router = Router::start_with(
        &one_dsa_knowledge(dir.path(), slapd.port, ROUTER_PW),
        dir.path(),
        &[],
    );
    let addr: std::net::SocketAddr = router.url.trim_start_matches("ldap://").parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut idle = Raw::connect(addr).await;
        assert_serves(addr, "before SIGTERM").await;
        let kill = Command::new("kill")
            .args(["-TERM", &router.pid().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        match expect_disconnect(&mut idle, WAIT, "idle client").await {
            (
                End::Notice {
                    code,
                    message,
                    closed,
                },
                _,
            ) => {
                assert_eq!(code, LdapResultCode::Unavailable, "{message}");
                assert!(closed);
            }
            other => panic!("{other:?}"),
        }
    });
    let status = router.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}
