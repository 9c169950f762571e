//! State a DSA keeps per connection, through the router, against a real
//! slapd with the overlays real sites use: sssvlv (server-side sort and
//! VLV), syncprov (syncrepl), SASL (DIGEST-MD5, SCRAM-SHA-256), Cancel and
//! transactions; and the schema. Each check runs the same client call
//! directly against slapd and through the router and wants the same
//! outcome, with three client implementations: OpenLDAP's tools, Python
//! `ldap3` (`tests/interop/stateful.py`) and JNDI (`tests/interop/Jndi.java`,
//! run by the JDK's single-file launcher).
//!
//! slapd is set up so that sharing a DSA connection between clients shows:
//! `sssvlv-maxperconn 1` (a second VLV context on one connection gets
//! `busy`), and SASL with slapd's default security properties (DIGEST-MD5
//! offers security layers; the router takes them out of the offer), users'
//! SASL passwords in a sasldb of the test's own.
//!
//! Needs slapd, ldap-utils, Python ldap3 and a JDK
//! (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::ldap::show;
use support::router::Router;
use support::slapd::{
    admin_dn, ldap_tool, one_dsa_knowledge, pick_port, run_tool, seed_ldif, user_dn, Slapd,
    SlapdConfig, ToolOutput, ADMIN_PW, ALICE_PW, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
/// alice's password in slapd's sasldb (her directory password differs:
/// a SASL bind that works proves the sasldb is what checks it).
const SASL_PW: &str = "alice-in-sasldb";

/// slapd with sssvlv, syncprov and SASL.
fn stateful_slapd() -> Slapd {
    Slapd::start(SlapdConfig {
        suffixes: vec![DEMOCORP.to_string()],
        ldif: seed_ldif(DEMOCORP, "D1"),
        name: "STATEFUL".to_string(),
        global: format!(
            "moduleload syncprov\nmoduleload sssvlv\n\
             authz-regexp \"^uid=([^,]+)(,cn=[^,]+)?,cn=[^,]+,cn=auth$\" \"uid=$1,ou=people,{DEMOCORP}\"\n"
        ),
        database: "index entryCSN,entryUUID eq\noverlay syncprov\n\
                   overlay sssvlv\nsssvlv-maxperconn 1\n"
            .to_string(),
        sasldb: vec![("alice".to_string(), SASL_PW.to_string())],
    })
}

struct Setup {
    slapd: Slapd,
    router: Router,
    admin: String,
    _dir: tempfile::TempDir,
}

fn setup(extra: &[&str]) -> Setup {
    let slapd = stateful_slapd();
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", pick_port());
    let mut args = vec!["--admin", admin.as_str(), "--probe-interval", "0.2"];
    args.extend_from_slice(extra);
    let router = Router::start_with(
        &one_dsa_knowledge(dir.path(), slapd.port, ROUTER_PW),
        dir.path(),
        &args,
    );
    let s = Setup {
        slapd,
        router,
        admin,
        _dir: dir,
    };
    // The router learns what the DSA advertises from its health probes.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !root_dse(&s.router.url).contains("supportedSASLMechanisms: SCRAM-SHA-256") {
        assert!(
            Instant::now() < deadline,
            "the router's root DSE never listed the DSA's SASL mechanisms:\n{}",
            root_dse(&s.router.url)
        );
        thread::sleep(Duration::from_millis(100));
    }
    s
}

impl Setup {
    /// Both URLs: (label, url).
    fn both(&self) -> [(&'static str, String); 2] {
        [
            ("direct", self.slapd.url.clone()),
            ("router", self.router.url.clone()),
        ]
    }

    fn status(&self) -> serde_json::Value {
        support::ldap::status(&self.admin)
    }

    /// A per-DSA figure of D1 in `/status`.
    fn d1(&self, field: &str) -> i64 {
        self.status()["partitions"][0]["dsas"][0][field]
            .as_i64()
            .unwrap()
    }
}

fn root_dse(url: &str) -> String {
    ldap_tool(
        "ldapsearch",
        &["-x", "-LLL", "-H", url, "-b", "", "-s", "base", "+"],
        None,
    )
    .stdout
}

fn interop(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(file)
        .to_str()
        .unwrap()
        .to_string()
}

/// `tests/interop/stateful.py CHECK URL ARGS`.
fn python(check: &str, url: &str, args: &[&str]) -> ToolOutput {
    let script = interop("stateful.py");
    let url = url.trim_end_matches('/');
    let mut all = vec![script.as_str(), check, url];
    all.extend_from_slice(args);
    run_tool("python3", &all, None, Duration::from_secs(120))
}

/// `java tests/interop/Jndi.java CHECK URL ARGS`.
fn jndi(check: &str, url: &str, args: &[&str]) -> ToolOutput {
    let source = interop("Jndi.java");
    let url = format!("{}/", url.trim_end_matches('/'));
    let mut all = vec![source.as_str(), check, url.as_str()];
    all.extend_from_slice(args);
    run_tool("java", &all, None, Duration::from_secs(120))
}

// ------------------------------------------------------------ SASL

#[test]
fn sasl_binds_through_the_router() {
    let s = setup(&[]);
    let dse = root_dse(&s.router.url);
    assert!(dse.contains("supportedSASLMechanisms: DIGEST-MD5"), "{dse}");
    let alice = user_dn(DEMOCORP, "alice").to_ascii_lowercase();
    for (label, url) in s.both() {
        // ldap-utils: each mechanism, and a wrong password.
        for mech in ["DIGEST-MD5", "SCRAM-SHA-256"] {
            let out = ldap_tool(
                "ldapwhoami",
                &["-Q", "-H", &url, "-Y", mech, "-U", "alice", "-w", SASL_PW],
                None,
            );
            assert!(out.success(), "{label} {}", show(mech, &out));
            assert_eq!(out.stdout.trim(), format!("dn:{alice}"), "{label} {mech}");
        }
        let out = ldap_tool(
            "ldapwhoami",
            &[
                "-Q",
                "-H",
                &url,
                "-Y",
                "SCRAM-SHA-256",
                "-U",
                "alice",
                "-w",
                ALICE_PW,
            ],
            None,
        );
        // Her directory password is not her SASL password.
        assert_eq!(
            out.code,
            Some(49),
            "{label} {}",
            show("wrong password", &out)
        );
        // ldapsearch without -x picks a mechanism from the root DSE.
        let out = ldap_tool(
            "ldapsearch",
            &[
                "-Q",
                "-LLL",
                "-H",
                &url,
                "-U",
                "alice",
                "-w",
                SASL_PW,
                "-b",
                DEMOCORP,
                "(uid=alice)",
                "uid",
            ],
            None,
        );
        assert!(out.success(), "{label} {}", show("ldapsearch (SASL)", &out));
        assert!(out.stdout.contains("uid: alice"), "{label}: {}", out.stdout);
        // Python ldap3 and JNDI with DIGEST-MD5.
        let out = python("sasl", &url, &["alice", SASL_PW]);
        assert!(out.success(), "{label} {}", show("ldap3 SASL", &out));
        assert!(
            out.stdout.contains(&format!("\"whoami\": \"dn:{alice}\"")),
            "{label}: {}",
            out.stdout
        );
        let out = jndi("sasl", &url, &["alice", SASL_PW]);
        assert!(out.success(), "{label} {}", show("JNDI SASL", &out));
    }
    // The access log shows the identity the DSA established.
    let log = s.router.log_text();
    assert!(
        log.contains("mech=SCRAM-SHA-256") && log.contains(&format!("authz=\"dn:{alice}\"")),
        "{log}"
    );
}

// ------------------------------------------------------------ schema

#[test]
fn the_schema_is_read_through_the_router() {
    let s = setup(&[]);
    let dse = root_dse(&s.router.url);
    assert!(dse.contains("subschemaSubentry: cn=Subschema"), "{dse}");
    let mut seen = Vec::new();
    for (label, url) in s.both() {
        let out = ldap_tool(
            "ldapsearch",
            &[
                "-x",
                "-LLL",
                "-H",
                &url,
                "-b",
                "cn=Subschema",
                "-s",
                "base",
                "(objectClass=subschema)",
                "objectClasses",
            ],
            None,
        );
        assert!(out.success(), "{label} {}", show("ldapsearch schema", &out));
        let classes = out.stdout.matches("objectClasses:").count();
        assert!(classes > 20, "{label}: {classes} object classes");
        let py = python("schema", &url, &[]);
        assert!(py.success(), "{label} {}", show("ldap3 get_info=ALL", &py));
        let java = jndi("schema", &url, &[]);
        assert!(java.success(), "{label} {}", show("JNDI getSchema", &java));
        let py_classes = py
            .stdout
            .split("\"object_classes\": ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or("?")
            .to_string();
        seen.push((classes, py_classes, java.stdout.trim().to_string()));
    }
    assert_eq!(seen[0], seen[1], "direct vs router");
}

// ------------------------------------------------------------ sort and VLV

#[test]
fn clients_scroll_with_vlv_at_once_then_sort() {
    let s = setup(&[]);
    for (label, url) in s.both() {
        // Three ldap3 clients scroll at once (each window continues its
        // VLV context), then a fourth sorts.
        let out = python("vlv", &url, &["3", "8"]);
        assert!(out.success(), "{label} {}", show("VLV clients", &out));
        // ldap-utils: a sorted search and one VLV window, after them.
        let out = ldap_tool(
            "ldapsearch",
            &[
                "-x",
                "-LLL",
                "-H",
                &url,
                "-b",
                "ou=people,o=DEMOCORP,c=AU",
                "-E",
                "!sss=cn:2.5.13.3",
                "(objectClass=inetOrgPerson)",
                "cn",
            ],
            None,
        );
        assert!(out.success(), "{label} {}", show("sorted ldapsearch", &out));
        let names: Vec<String> = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("cn: "))
            .map(str::to_ascii_lowercase)
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert!(names.len() > 100 && names == sorted, "{label}: {names:?}");
        let out = ldap_tool(
            "ldapsearch",
            &[
                "-x",
                "-H",
                &url,
                "-b",
                "ou=people,o=DEMOCORP,c=AU",
                "-E",
                "sss=cn:2.5.13.3",
                "-E",
                "vlv=1/2/5/0",
                "(objectClass=inetOrgPerson)",
                "cn",
            ],
            Some("q\n"),
        );
        assert!(
            out.stdout.contains("vlvResult: pos=5") && out.stdout.contains("result: 0 Success"),
            "{label} {}",
            show("VLV ldapsearch", &out)
        );
        // JNDI: sorted and paged searches as a bound user (each on the
        // user's own connection through the router).
        let out = jndi("search", &url, &["alice", ALICE_PW]);
        assert!(out.success(), "{label} {}", show("JNDI sort/paging", &out));
    }
    // The VLV clients' connections closed with them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.d1("own_connections") != 0 {
        assert!(
            Instant::now() < deadline,
            "own connections left: {}",
            s.status()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------ sync

/// `ldapsearch -E sync=rp` in the background.
fn sync_rp(url: &str, out: &Path) -> Child {
    Command::new("ldapsearch")
        .args([
            "-x",
            "-LLL",
            "-H",
            url,
            "-b",
            DEMOCORP,
            "-E",
            "sync=rp",
            "(uid=bob)",
            "description",
        ])
        .env("LDAPNOINIT", "1")
        .stdin(Stdio::null())
        .stdout(fs::File::create(out).unwrap())
        .stderr(fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .unwrap()
}

fn modify_bob(url: &str, value: &str) {
    let ldif = format!(
        "dn: uid=bob,ou=people,{DEMOCORP}\nchangetype: modify\nreplace: description\ndescription: {value}\n"
    );
    let admin = admin_dn(DEMOCORP);
    let out = ldap_tool(
        "ldapmodify",
        &["-x", "-H", url, "-D", &admin, "-w", ADMIN_PW],
        Some(&ldif),
    );
    assert!(out.success(), "{}", show("ldapmodify", &out));
}

#[test]
fn a_sync_search_outlives_the_operation_timeout_and_ends_when_its_dsa_dies() {
    let mut s = setup(&["--op-timeout", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sync.ldif");
    let mut child = sync_rp(&s.router.url, &out);
    // Five times --op-timeout: still running, counted, the DSA still up.
    thread::sleep(Duration::from_secs(5));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the sync search ended early"
    );
    let err = fs::read_to_string(out.with_extension("err")).unwrap();
    assert!(err.trim().is_empty(), "the sync search got: {err}");
    assert_eq!(s.d1("persistent_searches"), 1, "{}", s.status());
    assert_eq!(s.status()["partitions"][0]["dsas"][0]["health"], "up");
    // A change made through the router reaches it.
    modify_bob(&s.router.url, "changed through the router");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fs::read_to_string(&out)
        .unwrap()
        .contains("description: changed through the router")
    {
        assert!(
            Instant::now() < deadline,
            "no change: {}",
            fs::read_to_string(&out).unwrap()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let log = s.router.log_text();
    assert!(!log.contains("DSA down"), "{log}");
    let metrics = ureq::get(&format!("http://{}/metrics", s.admin))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.lines().any(
            |l| l.starts_with("dsa_router_dsa_persistent_searches{dsa=\"D1\"") && l.ends_with(" 1")
        ),
        "{metrics}"
    );
    // Its DSA dies: the client gets an answer it can act on (unavailable;
    // directly, ldapsearch sees the connection drop). ldapsearch in
    // refreshAndPersist mode prints it and waits on.
    s.slapd.kill9();
    let err = out.with_extension("err");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fs::read_to_string(&err)
        .unwrap()
        .contains("Server is unavailable (52)")
    {
        assert!(
            Instant::now() < deadline,
            "the sync search did not end: {}\n{}",
            fs::read_to_string(&err).unwrap(),
            s.router.log_text()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(s.d1("persistent_searches"), 0);
}

// ------------------------------------------------------------ cancel, transactions

#[test]
fn cancel_and_transactions_through_the_router() {
    let s = setup(&[]);
    for (label, url) in s.both() {
        let out = python("cancel", &url, &[]);
        assert!(out.success(), "{label} {}", show("cancel", &out));
        let out = python("txn", &url, &[]);
        assert!(out.success(), "{label} {}", show("transaction", &out));
    }
}

// ------------------------------------------------------------ limits

#[test]
fn own_connections_are_limited_per_dsa() {
    let s = setup(&["--max-own-connections", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sync.ldif");
    let mut holder = sync_rp(&s.router.url, &out);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.d1("own_connections") != 1 {
        assert!(Instant::now() < deadline, "{}", s.status());
        thread::sleep(Duration::from_millis(50));
    }
    let sorted = |url: &str| {
        ldap_tool(
            "ldapsearch",
            &[
                "-x",
                "-LLL",
                "-H",
                url,
                "-b",
                "ou=people,o=DEMOCORP,c=AU",
                "-E",
                "!sss=cn:2.5.13.3",
                "(uid=alice)",
                "cn",
            ],
            None,
        )
    };
    // The one own connection is taken: busy, naming the limit.
    let got = sorted(&s.router.url);
    assert_eq!(
        got.code,
        Some(51),
        "{}",
        show("sorted search at the limit", &got)
    );
    assert!(
        got.stderr.contains("--max-own-connections"),
        "{}",
        got.stderr
    );
    // Plain reads share connections: unaffected.
    let plain = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            &s.router.url,
            "-b",
            DEMOCORP,
            "(uid=alice)",
            "1.1",
        ],
        None,
    );
    assert!(plain.success(), "{}", show("plain search", &plain));
    // The holder leaves: its connection closes, and the next one fits.
    let _ = holder.kill();
    let _ = holder.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.d1("own_connections") != 0 {
        assert!(Instant::now() < deadline, "{}", s.status());
        thread::sleep(Duration::from_millis(50));
    }
    let got = sorted(&s.router.url);
    assert!(got.success(), "{}", show("sorted search after", &got));
}
