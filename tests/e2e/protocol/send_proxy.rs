//! The PROXY protocol towards DSAs: with
//! `--send-proxy-to D1`, a client's own connection to D1 starts with a v2
//! header naming the client's address, so that a real slapd on a
//! `pldap://` listener logs (and would apply ACLs by) the client's
//! address, not the router's; the router's own connections (shared,
//! probes) send a LOCAL header. A router not configured for it finds the
//! DSA down, and says why.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::{encode, final_result, Raw, DEMOCORP};
use crate::support::router::Router;
use crate::support::slapd::{
    one_dsa_knowledge, pick_port, user_dn, Slapd, SlapdConfig, ROUTER_PW, USER_PW,
};
use ldap3_proto::proto::{LdapBindCred, LdapBindRequest, LdapMsg, LdapOp, LdapResultCode};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bind_msg(msgid: i32, dn: &str, pw: &str) -> Vec<u8> {
    encode(LdapMsg {
        msgid,
        op: LdapOp::BindRequest(LdapBindRequest {
            version: 3,
            dn: dn.to_string(),
            cred: LdapBindCred::Simple(pw.to_string()),
        }),
        ctrl: Vec::new(),
    })
}

/// A client at 127.0.0.2 binds as `dn` through the router at `router`
/// and reads its own entry; its address, and the two results.
fn bind_and_read(router: &str, dn: &str) -> (SocketAddr, LdapResultCode, LdapResultCode) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let to: SocketAddr = router.trim_start_matches("ldap://").parse().unwrap();
    rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let s = sock.connect(to).await.unwrap();
        let me = s.local_addr().unwrap();
        let mut c = Raw::from_stream(s);
        c.send(&bind_msg(1, dn, USER_PW)).await.unwrap();
        let bound = final_result(&c.msg("bind").await).unwrap().0;
        c.send(&crate::support::inproc::base_search(2, dn))
            .await
            .unwrap();
        let read = loop {
            let m = c.msg("search").await;
            if let Some((code, _)) = final_result(&m) {
                break code;
            }
        };
        (me, bound, read)
    })
}

/// `dsa-router ctl status --json` of the router with admin `admin`.
fn ctl_status(admin: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", admin, "--json", "status"])
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn d1(st: &serde_json::Value) -> &serde_json::Value {
    &st["partitions"][0]["dsas"][0]
}

#[test]
fn a_clients_own_connection_names_its_address_to_a_pldap_slapd_and_without_the_header_the_dsa_is_down(
) {
    let slapd = Slapd::start_proxied(SlapdConfig::seeded("PLDAP", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let knowledge = one_dsa_knowledge(dir.path(), slapd.proxied_port.unwrap(), ROUTER_PW);
    let admin = format!("127.0.0.1:{}", pick_port());
    let router = Router::start_with(
        &knowledge,
        dir.path(),
        &["--send-proxy-to", "D1", "--admin", &admin],
    );
    let user = user_dn(DEMOCORP, "user0001");
    let (me, bound, read) = bind_and_read(&router.url, &user);
    assert_eq!(
        (bound, read),
        (LdapResultCode::Success, LdapResultCode::Success),
        "{}",
        slapd.log()
    );
    // slapd took the connection the bind went on as the client's, from
    // the header: its address and port, and the bind on that connection.
    let accepted = format!("ACCEPT from IP={me} ");
    let conn = until("slapd logs the client's connection", || {
        let log = slapd.log();
        let line = log.lines().find(|l| l.contains(&accepted))?;
        let conn = line.split_whitespace().find(|w| w.starts_with("conn="))?;
        let bind = format!("{conn} op=0 BIND dn=\"{user}\"");
        log.contains(&bind).then(|| conn.to_string())
    });
    let log = slapd.log();
    // The router's own connections (probes, shared) carry no client's
    // address: a LOCAL header, slapd sees the router's.
    assert!(
        log.lines()
            .any(|l| l.contains("ACCEPT from IP=127.0.0.1:") && l.contains("conn=")),
        "{log}"
    );
    assert_eq!(
        log.matches("ACCEPT from IP=127.0.0.2:").count(),
        1,
        "only the client's own connection names it ({conn}):\n{log}"
    );
    assert_eq!(d1(&ctl_status(&admin))["health"], "up");

    // A router that sends no header: slapd refuses its connections, the
    // DSA is down, and the reason says what to look at.
    let dir2 = tempfile::tempdir().unwrap();
    let admin2 = format!("127.0.0.1:{}", pick_port());
    let plain = Router::start_with(&knowledge, dir2.path(), &["--admin", &admin2]);
    let reason = until("the router without --send-proxy-to finds D1 down", || {
        let st = ctl_status(&admin2);
        let d = d1(&st);
        (d["health"] == "down").then(|| d["reason"].as_str().unwrap_or("").to_string())
    });
    assert!(reason.contains("--send-proxy-to"), "{reason}");
    let (_, bound, _) = bind_and_read(&plain.url, &user);
    assert_ne!(bound, LdapResultCode::Success);
    assert!(slapd.log().contains("proxyp failed"), "{}", slapd.log());
}
