//! Hot upgrade: `ctl upgrade` starts the router's binary
//! (rebuilt: a new file at the same path) with the same arguments and hands
//! it the listening sockets and every plain-LDAP session between
//! operations. Under load from persistent ldap3 clients (bound and
//! anonymous; pipelined reads, binds, writes) no operation fails and no
//! client reconnects; WhoAmI on each handed-over connection names the
//! identity it bound as, and the new process's `/status` lists each
//! client as handed over, with that identity (anonymous ones as
//! anonymous). A new process that cannot load its knowledge is
//! refused and the old one keeps serving.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::slapd::{one_dsa_knowledge, pick_port, Slapd, SlapdConfig, ROUTER_PW};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const CLIENTS: usize = 50;

/// Processes killed when the test ends, however it ends.
struct Kill(Vec<u32>);

impl Drop for Kill {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `dsa-router ctl ARGS` against `admin`.
fn ctl(admin: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", admin])
        .arg("--control-socket")
        .arg(crate::support::control_socket(admin))
        .args(args)
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Copy the router's binary to `to` as a new file (a rebuilt binary: the
/// running process keeps the old one).
fn install(to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(env!("CARGO_BIN_EXE_dsa-router"), &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

fn start_router(bin: &Path, knowledge: &Path, port: u16, admin: &str, log: &Path) -> Child {
    start_router_with(bin, knowledge, port, admin, log, &[])
}

fn start_router_with(
    bin: &Path,
    knowledge: &Path,
    port: u16,
    admin: &str,
    log: &Path,
    extra: &[&str],
) -> Child {
    // A binary just written may be busy for a moment: a process another
    // test forks meanwhile holds the write descriptor until its exec.
    let mut tries = 0;
    let child = loop {
        let spawned = Command::new(bin)
            .args(["serve", "--knowledge", knowledge.to_str().unwrap()])
            .args(extra)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--admin", admin])
            .args(control_socket_args(admin))
            .args(["--failback-hold", "0", "--drain-timeout", "20"])
            .env("DSA_ROUTER_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("DSA_ROUTER_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn();
        match spawned {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    until("the router listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    child
}

/// `--control-socket PATH` (each router its own), when the router has it
/// (a build from before the control socket runs without).
fn control_socket_args(admin: &str) -> Vec<String> {
    let help = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["serve", "--help"])
        .output();
    let has = help.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--control-socket"));
    if !has {
        return Vec::new();
    }
    let path = crate::support::control_socket(admin);
    vec![
        "--control-socket".into(),
        path.to_string_lossy().into_owned(),
    ]
}

/// Process `pid` ended (gone, or a zombie not yet reaped: it is not this
/// test's child).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn read_num(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn ctl_upgrade_hands_over_every_plain_session_under_load_and_refuses_a_binary_without_knowledge() {
    let slapd = Slapd::start(SlapdConfig::seeded("UPG", &["o=DEMOCORP,c=AU"]));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let knowledge = one_dsa_knowledge(d, slapd.port, ROUTER_PW);
    let bin: PathBuf = d.join("dsa-router");
    install(&bin);
    let (port, admin) = (pick_port(), format!("127.0.0.1:{}", pick_port()));
    let log = d.join("router.log");
    let mut old = start_router(&bin, &knowledge, port, &admin, &log);
    let mut kill = Kill(vec![old.id()]);
    let f = |n: &str| d.join(n);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/e2e/lifecycle/upgrade_load.py"
    );
    let mut load = Command::new("python3")
        .arg(script)
        .arg(format!("ldap://127.0.0.1:{port}"))
        .args([f("stop"), f("ready"), f("progress"), f("out")])
        .arg(CLIENTS.to_string())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    kill.0.push(load.id());
    until("every client connected and working", || f("ready").exists());
    let mut idle = Idle::connect(&format!("ldap://127.0.0.1:{port}"));
    let sessions = CLIENTS + 2;

    // A new process that cannot load its knowledge is refused; the old
    // one keeps serving.
    let good = std::fs::read_to_string(&knowledge).unwrap();
    std::fs::write(&knowledge, "set dsa \"D1\" = { prefix = <c AU> ").unwrap();
    let refused = ctl(&admin, &["upgrade"]);
    std::fs::write(&knowledge, &good).unwrap();
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("refused the handover"),
        "{}",
        text(&refused)
    );
    assert!(old.try_wait().unwrap().is_none(), "the old router exited");
    let seen = read_num(&f("progress"));
    until("the old router serves on", || {
        read_num(&f("progress")) > seen + 100
    });

    // A rebuilt binary at the same path takes over.
    install(&bin);
    let up = ctl(&admin, &["--json", "upgrade"]);
    assert!(
        up.status.success(),
        "{}\n{}",
        text(&up),
        std::fs::read_to_string(&log).unwrap()
    );
    let v: serde_json::Value = serde_json::from_slice(&up.stdout).unwrap();
    let pid = v["pid"].as_u64().unwrap() as u32;
    kill.0.push(pid);
    assert_ne!(pid, old.id());
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = old.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the old router did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    // The new process serves the same clients on.
    let seen = read_num(&f("progress"));
    until("the new router serves the clients", || {
        read_num(&f("progress")) > seen + 300
    });
    let st = ctl(&admin, &["--json", "status"]);
    assert!(st.status.success(), "{}", text(&st));
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(
        st["client_connections"].as_i64(),
        Some(sessions as i64),
        "{st}"
    );
    // Its /status lists every client as handed over, bound ones by the
    // identity they bound as, the others as anonymous (polled: a bound
    // client is anonymous while its rebind is in progress).
    let mut want: Vec<String> = (0..CLIENTS)
        .map(|i| match i % 2 {
            0 => format!("dn:uid=user{i:04},ou=people,o=DEMOCORP,c=AU"),
            _ => "anonymous".to_string(),
        })
        .collect();
    want.extend([format!("dn:{IDLE_DN}"), "anonymous".to_string()]);
    let mut listed = Vec::new();
    until(
        "the new process's /status lists the handed-over clients",
        || {
            listed = handed_over(&admin);
            listed == sorted(want.clone())
        },
    );
    // The idle bound client bound nothing since: its identity in /status
    // came with its session, and WhoAmI on it names the same.
    assert_eq!(idle.who_am_i(), format!("dn:{IDLE_DN}"));

    // SIGUSR2 upgrades the new process in turn (the listeners it inherited
    // go on; its own handover flag is not passed on twice).
    let serves = "upgrade: the new process serves pid=";
    let usr2 = Command::new("kill")
        .args(["-USR2", &pid.to_string()])
        .status()
        .unwrap();
    assert!(usr2.success());
    let mut third = 0;
    until("a third process serves", || {
        let logs = std::fs::read_to_string(&log).unwrap();
        third = logs
            .rsplit(serves)
            .next()
            .filter(|_| logs.matches(serves).count() == 2)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        third != 0
    });
    kill.0.push(third);
    until("the second process exits", || gone(pid));
    let seen = read_num(&f("progress"));
    until("the third router serves the clients", || {
        read_num(&f("progress")) > seen + 300
    });

    std::fs::write(f("stop"), "").unwrap();
    let deadline = Instant::now() + WAIT;
    while load.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the load did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    let out: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f("out")).unwrap()).unwrap();
    assert_eq!(out["failed"], serde_json::json!([]), "{out}\n{logs}");
    assert_eq!(out["reconnects"], 0, "{out}");
    assert!(out["ops"].as_u64().unwrap() > 500, "{out}");
    println!("upgrade under load from {CLIENTS} clients: {out}");
    // WhoAmI on each handed-over connection: the identity it bound as.
    let (before, after) = (&out["before"], &out["after"]);
    assert_eq!(before.as_object().unwrap().len(), CLIENTS / 2, "{out}");
    assert_eq!(before, after, "{out}");
    assert_eq!(
        before["0"], "dn:uid=user0000,ou=people,o=DEMOCORP,c=AU",
        "{out}"
    );
    // /status named each handed-over client as WhoAmI on it does.
    for who in after.as_object().unwrap().values() {
        let who = who.as_str().unwrap();
        assert!(listed.iter().any(|l| l == who), "{who}: {listed:?}");
    }
    assert!(
        logs.matches(&format!(
            "sessions taken over from the old process sessions={sessions}"
        ))
        .count()
            == 2,
        "{logs}"
    );
}

/// A bound client beside the load that stays idle across an upgrade (the
/// load's bound clients bind again now and then), and an anonymous one
/// that never sends a request.
struct Idle {
    rt: tokio::runtime::Runtime,
    bound: ldap3::Ldap,
    _anonymous: ldap3::Ldap,
}

const IDLE_DN: &str = "uid=user0077,ou=people,o=DEMOCORP,c=AU";

impl Idle {
    fn connect(url: &str) -> Idle {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let conn = |url: String| async move {
            let (conn, ldap) = ldap3::LdapConnAsync::new(&url).await.unwrap();
            ldap3::drive!(conn);
            ldap
        };
        let (mut bound, anonymous) =
            rt.block_on(async { (conn(url.to_string()).await, conn(url.to_string()).await) });
        rt.block_on(bound.simple_bind(IDLE_DN, "pw"))
            .unwrap()
            .success()
            .unwrap();
        Idle {
            rt,
            bound,
            _anonymous: anonymous,
        }
    }

    /// WhoAmI on the bound connection.
    fn who_am_i(&mut self) -> String {
        let (exop, _) = self
            .rt
            .block_on(self.bound.extended(ldap3::exop::WhoAmI))
            .unwrap()
            .success()
            .unwrap();
        exop.parse::<ldap3::exop::WhoAmIResp>().authzid
    }
}

/// The identities of the client sessions `admin`'s /status lists, sorted,
/// when it lists all and each as handed over (else empty).
fn handed_over(admin: &str) -> Vec<String> {
    let st = ctl(admin, &["--json", "status"]);
    let Ok(st) = serde_json::from_slice::<serde_json::Value>(&st.stdout) else {
        return Vec::new();
    };
    let c = &st["clients"];
    let listed = c["listed"].as_array().cloned().unwrap_or_default();
    let all_handed = listed.iter().all(|s| {
        s["handed_over"] == true
            && s["tls"] == false
            && s["address"]
                .as_str()
                .is_some_and(|a| a.starts_with("127.0.0.1:"))
    });
    if c["total"].as_u64() != Some(listed.len() as u64) || !all_handed {
        return Vec::new();
    }
    sorted(
        listed
            .iter()
            .map(|s| s["identity"].as_str().unwrap_or("").to_string())
            .collect(),
    )
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Wait until the child exits; its status.
fn exited(c: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the old router did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// TLS sessions cannot move (rustls has no safe export of a live session
/// to another process): an LDAPS client is drained with a Notice of
/// Disconnection and reconnects to the LDAPS listener, which the new
/// process took over; a plain client beside it moves and goes on on the
/// same connection.
#[test]
fn ldaps_sessions_drain_and_reconnect_to_the_listener_the_new_process_took_over() {
    use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Scope};
    let slapd = Slapd::start(SlapdConfig::seeded("UPGTLS", &["o=DEMOCORP,c=AU"]));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let knowledge = one_dsa_knowledge(d, slapd.port, ROUTER_PW);
    let bin: PathBuf = d.join("dsa-router");
    install(&bin);
    let ca = crate::support::certs::Ca::new(d, "upgrade");
    let (cert, key) = ca.server_files(d, "router");
    let (port, tls_port) = (pick_port(), pick_port());
    let admin = format!("127.0.0.1:{}", pick_port());
    let log = d.join("router.log");
    let ldaps_at = format!("127.0.0.1:{tls_port}");
    let extra = [
        "--ldaps-listen",
        &ldaps_at,
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let mut old = start_router_with(&bin, &knowledge, port, &admin, &log, &extra);
    let mut kill = Kill(vec![old.id()]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let user = "uid=user0001,ou=people,o=DEMOCORP,c=AU";
    let connect = |url: String| async move {
        let s = LdapConnSettings::new()
            .set_no_tls_verify(true)
            .set_conn_timeout(Duration::from_secs(10));
        let (conn, mut ldap) = LdapConnAsync::with_settings(s, &url).await.unwrap();
        ldap3::drive!(conn);
        ldap.simple_bind(user, "pw")
            .await
            .unwrap()
            .success()
            .unwrap();
        ldap
    };
    async fn search(c: &mut Ldap, user: &str) -> ldap3::result::Result<usize> {
        let r = c
            .search(user, Scope::Base, "(objectClass=*)", vec!["cn"])
            .await?;
        Ok(r.success()?.0.len())
    }
    let ldaps_url = format!("ldaps://127.0.0.1:{tls_port}");
    let mut tls = rt.block_on(connect(ldaps_url.clone()));
    let mut plain = rt.block_on(connect(format!("ldap://127.0.0.1:{port}")));
    assert_eq!(rt.block_on(search(&mut tls, user)).unwrap(), 1);
    assert_eq!(rt.block_on(search(&mut plain, user)).unwrap(), 1);

    let up = ctl(&admin, &["--json", "upgrade"]);
    assert!(up.status.success(), "{}", text(&up));
    let v: serde_json::Value = serde_json::from_slice(&up.stdout).unwrap();
    kill.0.push(v["pid"].as_u64().unwrap() as u32);
    assert!(exited(&mut old).success());
    // The plain session moved: same connection, same identity.
    assert_eq!(rt.block_on(search(&mut plain, user)).unwrap(), 1);
    // The LDAPS one was closed between operations; a new one is served.
    assert!(
        rt.block_on(search(&mut tls, user)).is_err(),
        "the TLS session was not drained"
    );
    let mut again = rt.block_on(connect(ldaps_url));
    assert_eq!(rt.block_on(search(&mut again, user)).unwrap(), 1);
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(
        logs.contains("sessions taken over from the old process sessions=1"),
        "{logs}"
    );
}

/// SIGTERM under the same load: the router drains; each client sees its
/// idle connection closed (a Notice of Disconnection), reconnects to the
/// other router of its pool and retries; no operation fails.
#[test]
fn sigterm_under_load_fails_no_operation_clients_reconnect_to_the_other_router() {
    let slapd = Slapd::start(SlapdConfig::seeded("UPGTERM", &["o=DEMOCORP,c=AU"]));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let knowledge = one_dsa_knowledge(d, slapd.port, ROUTER_PW);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_dsa-router"));
    let (pa, pb) = (pick_port(), pick_port());
    let (aa, ab) = (
        format!("127.0.0.1:{}", pick_port()),
        format!("127.0.0.1:{}", pick_port()),
    );
    let mut a = start_router(&bin, &knowledge, pa, &aa, &d.join("a.log"));
    let mut b = start_router(&bin, &knowledge, pb, &ab, &d.join("b.log"));
    let mut kill = Kill(vec![a.id(), b.id()]);
    let f = |n: &str| d.join(n);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/e2e/lifecycle/upgrade_load.py"
    );
    let mut load = Command::new("python3")
        .arg(script)
        .arg(format!("ldap://127.0.0.1:{pa},ldap://127.0.0.1:{pb}"))
        .args([f("stop"), f("ready"), f("progress"), f("out")])
        .args([CLIENTS.to_string().as_str(), "retry"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    kill.0.push(load.id());
    until("every client connected and working", || f("ready").exists());
    let term = Command::new("kill")
        .args(["-TERM", &a.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(exited(&mut a).success());
    let seen = read_num(&f("progress"));
    until("the other router serves the clients", || {
        read_num(&f("progress")) > seen + 300
    });
    std::fs::write(f("stop"), "").unwrap();
    let deadline = Instant::now() + WAIT;
    while load.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the load did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f("out")).unwrap()).unwrap();
    assert_eq!(out["failed"], serde_json::json!([]), "{out}");
    // Every client was on the router that drained: each reconnected once.
    assert_eq!(out["reconnects"], CLIENTS, "{out}");
    assert_eq!(out["before"], out["after"], "{out}");
    let _ = b.kill();
    let _ = b.wait();
}

/// SIGTERM ends a router whose upgrade never completes: the binary at the
/// router's path is, this time, a program that takes the handover socket
/// and never answers. SIGUSR2 starts it; SIGTERM then abandons the
/// upgrade (the program is stopped) and the router exits at once, well
/// within its drain timeout, not after the handover's 60 s wait for the
/// new process.
#[test]
fn sigterm_ends_a_router_whose_upgrade_child_never_answers() {
    sigterm_during_an_upgrade_that_never_answers(false);
}

/// The same, the upgrade asked by `ctl upgrade` (which is answered that
/// the upgrade failed, and returns).
#[test]
fn sigterm_ends_a_router_whose_ctl_upgrade_child_never_answers() {
    sigterm_during_an_upgrade_that_never_answers(true);
}

fn sigterm_during_an_upgrade_that_never_answers(by_ctl: bool) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let knowledge = Knowledge::new()
        .dsa(Dsa::new("D1", pick_port()).prefix("<c AU>"))
        .write(d);
    let bin: PathBuf = d.join("dsa-router");
    install(&bin);
    let (port, admin) = (pick_port(), format!("127.0.0.1:{}", pick_port()));
    let log = d.join("router.log");
    let mut router = start_router(&bin, &knowledge, port, &admin, &log);
    let mut kill = Kill(vec![router.id()]);
    // The fake new process: says who it is, holds its end of the handover
    // socket (inherited) and never speaks.
    let started = d.join("started");
    let fake = d.join("fake");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho $$ >{0}.tmp && mv {0}.tmp {0}\nexec sleep 300\n",
            started.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&fake, &bin).unwrap();
    let pid = router.id().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success(), "kill {sig}");
    };
    let mut asked = if by_ctl {
        let c = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .args(["ctl", "--admin", &admin, "--control-socket"])
            .arg(crate::support::control_socket(&admin))
            .arg("upgrade")
            .env_remove("DSA_ROUTER_ADMIN_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        kill.0.push(c.id());
        Some(c)
    } else {
        signal("-USR2");
        None
    };
    until("the fake new process started", || started.exists());
    let child: u32 = read_num(&started).try_into().unwrap();
    assert!(child > 0);
    kill.0.push(child);
    std::thread::sleep(Duration::from_millis(300));
    assert!(router.try_wait().unwrap().is_none(), "the router exited");
    let t0 = Instant::now();
    signal("-TERM");
    // start_router's --drain-timeout.
    let drain_timeout = Duration::from_secs(20);
    let status = loop {
        if let Some(s) = router.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < drain_timeout,
            "the router ignored SIGTERM while its upgrade waited:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status:?}\n{text}");
    assert!(text.contains("upgrade under way is abandoned"), "{text}");
    until("the fake new process is stopped", || gone(child));
    let stopped = t0.elapsed();
    let answer = asked.take().map(|c| text_of(c.wait_with_output().unwrap()));
    println!(
        "upgrade by {}: the router exited {} ms after SIGTERM (drain timeout {} s); its never-answering new process was gone {} ms after SIGTERM; ctl said: {:?}",
        if by_ctl { "ctl upgrade" } else { "SIGUSR2" },
        took.as_millis(),
        drain_timeout.as_secs(),
        stopped.as_millis(),
        answer
    );
    if let Some(a) = answer {
        assert!(a.contains("the router is shutting down"), "{a}");
    }
}

fn text_of(o: Output) -> String {
    text(&o).trim().to_string()
}
