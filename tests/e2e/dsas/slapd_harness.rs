//! Proves the real-slapd test harness (tests/support/slapd.rs) with the
//! OpenLDAP command line tools: data, ACLs, proxied authorization, writes,
//! kill -9/restart and SIGSTOP/SIGCONT.
//!
//! Needs the Debian packages slapd and ldap-utils (`scripts/install-deps.sh`);
//! without them these tests fail, they do not skip.

use crate::support;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::ldap::{dns, search, whoami_with};
use support::slapd::{
    admin_dn, bulk_ldif, ldap_tool, router_dn, run_tool, seed_ldif, served_by_dn, user_dn,
    writer_dn, Slapd, SlapdConfig, ADMIN_PW, ALICE_PW, ROUTER_PW, SEED_USERS, WRITER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const CUSTOMER: &str = "o=CUSTOMER,c=AU";

fn start(name: &str, suffix: &str) -> Slapd {
    Slapd::start(SlapdConfig {
        suffixes: vec![suffix.to_string()],
        ldif: seed_ldif(suffix, name),
        name: name.to_string(),
        ..SlapdConfig::default()
    })
}

fn modify(s: &Slapd, bind: Option<(&str, &str)>, ldif: &str) -> support::slapd::ToolOutput {
    let mut args = vec!["-x", "-H", &s.url];
    if let Some((dn, pw)) = bind {
        args.extend(["-D", dn, "-w", pw]);
    }
    ldap_tool("ldapmodify", &args, Some(ldif))
}

fn served_by(s: &Slapd, suffix: &str) -> String {
    let out = search(
        &s.url,
        None,
        &[],
        &served_by_dn(suffix),
        "base",
        "(objectClass=*)",
        &["description"],
    );
    assert!(out.success(), "{}: {out:?}", s.name);
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("description: "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn slapd_is_installed() {
    assert!(
        Slapd::available(),
        "slapd/ldap-utils missing: run `sudo scripts/install-deps.sh` (Debian packages slapd, ldap-utils)"
    );
}

#[test]
fn three_dsas_two_suffixes() {
    let t = Instant::now();
    let d1 = start("D1", DEMOCORP);
    eprintln!("one slapd (seed data) up in {:?}", t.elapsed());
    let d2 = start("D2", DEMOCORP);
    let c1 = start("C1", CUSTOMER);
    eprintln!("three slapd up in {:?}", t.elapsed());
    let ports = [d1.port, d2.port, c1.port];
    assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);

    assert_eq!(served_by(&d1, DEMOCORP), "D1");
    assert_eq!(served_by(&d2, DEMOCORP), "D2");
    assert_eq!(served_by(&c1, CUSTOMER), "C1");

    // Root DSE names the suffix.
    let rd = search(
        &c1.url,
        None,
        &[],
        "",
        "base",
        "(objectClass=*)",
        &["namingContexts"],
    );
    assert!(rd.success(), "{rd:?}");
    assert!(
        rd.stdout.contains(&format!("namingContexts: {CUSTOMER}")),
        "{}",
        rd.stdout
    );

    // A DSA does not hold the other suffix.
    let other = search(
        &d1.url,
        None,
        &[],
        CUSTOMER,
        "base",
        "(objectClass=*)",
        &["dn"],
    );
    assert_eq!(other.code, Some(32), "{other:?}");

    for (s, suffix) in [(&d1, DEMOCORP), (&d2, DEMOCORP), (&c1, CUSTOMER)] {
        let people = search(
            &s.url,
            None,
            &[],
            &format!("ou=people,{suffix}"),
            "one",
            "(objectClass=inetOrgPerson)",
            &["1.1"],
        );
        assert!(people.success(), "{people:?}");
        assert_eq!(dns(&people).len(), SEED_USERS + 2, "{}", s.name);
        let alice = search(&s.url, None, &[], suffix, "sub", "(uid=alice)", &["mail"]);
        assert!(alice.success(), "{alice:?}");
        assert_eq!(dns(&alice), vec![user_dn(suffix, "alice")]);
        assert!(alice.stdout.contains("mail: alice@example.com"));
    }
}

#[test]
fn acl_restricted_subtree_and_passwords() {
    let d = start("D1", DEMOCORP);
    let restricted = format!("ou=restricted,{DEMOCORP}");
    let alice = user_dn(DEMOCORP, "alice");
    let router = router_dn(DEMOCORP);
    let writer = writer_dn(DEMOCORP);
    let admin = admin_dn(DEMOCORP);

    // Anonymous and alice see nothing there (noSuchObject, no disclosure).
    let anon = search(
        &d.url,
        None,
        &[],
        &restricted,
        "sub",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(anon.code, Some(32), "{anon:?}");
    assert!(dns(&anon).is_empty());
    let by_alice = search(
        &d.url,
        Some((&alice, ALICE_PW)),
        &[],
        &restricted,
        "sub",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(by_alice.code, Some(32), "{by_alice:?}");
    // A subtree search from the suffix silently omits them.
    let all = search(
        &d.url,
        None,
        &[],
        DEMOCORP,
        "sub",
        "(objectClass=*)",
        &["1.1"],
    );
    assert!(all.success(), "{all:?}");
    assert!(!all.stdout.to_lowercase().contains("ou=restricted"));

    // Router, writer and admin read them.
    for (who, pw) in [
        (&router, ROUTER_PW),
        (&writer, WRITER_PW),
        (&admin, ADMIN_PW),
    ] {
        let out = search(
            &d.url,
            Some((who, pw)),
            &[],
            &restricted,
            "sub",
            "(objectClass=*)",
            &["description"],
        );
        assert!(out.success(), "{who}: {out:?}");
        assert_eq!(dns(&out).len(), 2, "{who}: {}", out.stdout);
        assert!(out.stdout.contains("description: top secret"));
    }

    // userPassword: self reads it, anonymous and router do not.
    let own = search(
        &d.url,
        Some((&alice, ALICE_PW)),
        &[],
        &alice,
        "base",
        "(objectClass=*)",
        &["userPassword"],
    );
    assert!(
        own.success() && own.stdout.contains("userPassword"),
        "{own:?}"
    );
    for bind in [None, Some((router.as_str(), ROUTER_PW))] {
        let out = search(
            &d.url,
            bind,
            &[],
            &alice,
            "base",
            "(objectClass=*)",
            &["userPassword", "cn"],
        );
        assert!(out.success(), "{out:?}");
        assert!(out.stdout.contains("cn: Alice Example"));
        assert!(!out.stdout.contains("userPassword"), "{}", out.stdout);
    }

    // Wrong password: invalidCredentials (49).
    let bad = whoami_with(&d.url, &alice, "nope", &[]);
    assert_eq!(bad.code, Some(49), "{bad:?}");
}

#[test]
fn proxied_authorization() {
    let d = start("D1", DEMOCORP);
    let alice = user_dn(DEMOCORP, "alice");
    let router = router_dn(DEMOCORP);
    let restricted = format!("ou=restricted,{DEMOCORP}");

    // The router may assume alice (slapd answers with the normalized DN).
    let as_alice = format!("!authzid=dn:{alice}");
    let w = whoami_with(&d.url, &router, ROUTER_PW, &["-e", &as_alice]);
    assert!(w.success(), "{w:?}");
    assert_eq!(
        w.stdout.trim().to_lowercase(),
        format!("dn:{}", alice.to_lowercase())
    );

    // ... and anonymous (empty authzId).
    let w = whoami_with(&d.url, &router, ROUTER_PW, &["-e", "!authzid="]);
    assert!(w.success(), "{w:?}");
    assert_eq!(w.stdout.trim(), "anonymous");

    // ACLs then apply to the assumed identity.
    for authz in [as_alice.as_str(), "!authzid="] {
        let out = search(
            &d.url,
            Some((&router, ROUTER_PW)),
            &["-e", authz],
            &restricted,
            "sub",
            "(objectClass=*)",
            &["1.1"],
        );
        assert_eq!(out.code, Some(32), "{authz}: {out:?}");
    }
    let own = search(
        &d.url,
        Some((&router, ROUTER_PW)),
        &[],
        &restricted,
        "sub",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(dns(&own).len(), 2, "{own:?}");
    let pw = search(
        &d.url,
        Some((&router, ROUTER_PW)),
        &["-e", &as_alice],
        &alice,
        "base",
        "(objectClass=*)",
        &["userPassword"],
    );
    assert!(pw.success() && pw.stdout.contains("userPassword"), "{pw:?}");

    // Alice may not proxy anyone else: proxiedAuthzDenied (123); ldapwhoami
    // exits 1 and prints the result code.
    for target in [router.as_str(), &user_dn(DEMOCORP, "bob")] {
        let authz = format!("!authzid=dn:{target}");
        let w = whoami_with(&d.url, &alice, ALICE_PW, &["-e", &authz]);
        assert!(!w.success() && w.stderr.contains("(123)"), "{authz}: {w:?}");
    }
    // slapd lets anyone drop to anonymous (an empty authzId needs no
    // authzTo), as RFC 4370 permits.
    let w = whoami_with(&d.url, &alice, ALICE_PW, &["-e", "!authzid="]);
    assert_eq!((w.code, w.stdout.trim()), (Some(0), "anonymous"), "{w:?}");
}

#[test]
fn compare_and_writes() {
    let d = start("D1", DEMOCORP);
    let alice = user_dn(DEMOCORP, "alice");
    let bob = user_dn(DEMOCORP, "bob");
    let writer = writer_dn(DEMOCORP);

    // ldapcompare exits 6 for compareTrue, 5 for compareFalse.
    let t = ldap_tool(
        "ldapcompare",
        &["-x", "-H", &d.url, &alice, "mail:alice@example.com"],
        None,
    );
    assert_eq!(t.code, Some(6), "{t:?}");
    let f = ldap_tool(
        "ldapcompare",
        &["-x", "-H", &d.url, &alice, "mail:bob@example.com"],
        None,
    );
    assert_eq!(f.code, Some(5), "{f:?}");

    let change = |dn: &str, text: &str| {
        format!("dn: {dn}\nchangetype: modify\nreplace: description\ndescription: {text}\n")
    };

    // Anonymous cannot write (slapd: strongerAuthRequired, 8, "modifications
    // require authentication"); alice cannot write bob
    // (insufficientAccessRights, 50).
    let out = modify(&d, None, &change(&alice, "anon"));
    assert_eq!(out.code, Some(8), "{out:?}");
    let out = modify(&d, Some((&alice, ALICE_PW)), &change(&bob, "by alice"));
    assert_eq!(out.code, Some(50), "{out:?}");
    // Alice writes herself; the writer writes anything, adds and deletes.
    let out = modify(&d, Some((&alice, ALICE_PW)), &change(&alice, "by alice"));
    assert!(out.success(), "{out:?}");
    let out = modify(&d, Some((&writer, WRITER_PW)), &change(&bob, "by writer"));
    assert!(out.success(), "{out:?}");
    let carol = user_dn(DEMOCORP, "carol");
    let add = format!(
        "dn: {carol}\nchangetype: add\nobjectClass: inetOrgPerson\nuid: carol\ncn: Carol\nsn: C\n"
    );
    let out = modify(&d, Some((&writer, WRITER_PW)), &add);
    assert!(out.success(), "{out:?}");
    let out = search(
        &d.url,
        None,
        &[],
        DEMOCORP,
        "sub",
        "(description=by *)",
        &["description"],
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(dns(&out).len(), 2, "{}", out.stdout);
    let out = modify(
        &d,
        Some((&writer, WRITER_PW)),
        &format!("dn: {carol}\nchangetype: delete\n"),
    );
    assert!(out.success(), "{out:?}");
    let out = search(
        &d.url,
        None,
        &[],
        &carol,
        "base",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(out.code, Some(32), "{out:?}");
}

#[test]
fn kill9_and_restart_keep_port_and_data() {
    let mut d = start("D1", DEMOCORP);
    let port = d.port;
    let pid = d.pid();
    let writer = writer_dn(DEMOCORP);
    let alice = user_dn(DEMOCORP, "alice");
    let out = modify(
        &d,
        Some((&writer, WRITER_PW)),
        &format!(
            "dn: {alice}\nchangetype: modify\nreplace: description\ndescription: before crash\n"
        ),
    );
    assert!(out.success(), "{out:?}");

    d.kill9();
    assert!(!d.is_running());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port still open after kill -9"
    );
    let out = search(
        &d.url,
        None,
        &["-o", "nettimeout=2"],
        DEMOCORP,
        "base",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(out.code, Some(255), "{out:?}"); // can't contact LDAP server

    let t = Instant::now();
    d.restart();
    eprintln!("restart after kill -9 took {:?}", t.elapsed());
    assert_eq!(d.port, port);
    assert_ne!(d.pid(), pid);
    let out = search(
        &d.url,
        None,
        &[],
        &alice,
        "base",
        "(objectClass=*)",
        &["description"],
    );
    assert!(out.stdout.contains("description: before crash"), "{out:?}");

    // A graceful restart too.
    d.restart();
    assert_eq!(served_by(&d, DEMOCORP), "D1");
}

#[test]
fn sigstop_hangs_and_sigcont_resumes() {
    let d = start("D1", DEMOCORP);
    d.stop_signal();
    // The kernel still accepts connections; nothing answers.
    let args = [
        "-x",
        "-LLL",
        "-H",
        d.url.as_str(),
        "-b",
        DEMOCORP,
        "-s",
        "base",
        "1.1",
    ];
    let out = run_tool("ldapsearch", &args, None, Duration::from_millis(700));
    assert!(out.timed_out, "{out:?}");
    d.cont_signal();
    let out = ldap_tool("ldapsearch", &args, None);
    assert!(out.success(), "{out:?}");
}

#[test]
fn several_suffixes_in_one_slapd_and_suffix_kinds() {
    let suffixes = [
        DEMOCORP,
        CUSTOMER,
        "dc=example,dc=com",
        "ou=Sales,o=ACME",
        "c=NZ",
    ];
    let s = Slapd::start(SlapdConfig::seeded("M1", &suffixes));
    for suffix in suffixes {
        assert_eq!(served_by(&s, suffix), "M1", "{suffix}");
        let w = whoami_with(&s.url, &user_dn(suffix, "bob"), support::slapd::BOB_PW, &[]);
        assert!(w.success(), "{suffix}: {w:?}");
    }
}

#[test]
fn bulk_100k_entries() {
    let n = 100_000;
    let t = Instant::now();
    let mut ldif = seed_ldif(DEMOCORP, "B1");
    ldif.push_str(&bulk_ldif(DEMOCORP, n));
    let s = Slapd::start(SlapdConfig {
        suffixes: vec![DEMOCORP.to_string()],
        ldif,
        name: "B1".to_string(),
        ..SlapdConfig::default()
    });
    eprintln!("slapd with {n} bulk entries up in {:?}", t.elapsed());
    let base = format!("ou=bulk,{DEMOCORP}");
    let one = search(&s.url, None, &[], &base, "one", "(uid=bulk099999)", &["cn"]);
    assert!(one.success(), "{one:?}");
    assert!(one.stdout.contains("cn: Bulk 099999"), "{}", one.stdout);
    let all = search(
        &s.url,
        None,
        &[],
        &base,
        "one",
        "(objectClass=inetOrgPerson)",
        &["1.1"],
    );
    assert!(all.success(), "{:?} {}", all.code, all.stderr);
    assert_eq!(dns(&all).len(), n);
}
