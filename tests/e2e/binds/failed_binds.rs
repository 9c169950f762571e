//! The failed-bind defence against real slapd with the ppolicy overlay
//! and lockout (`pwdLockout TRUE`, `pwdMaxFailure 3`): a client guessing
//! a password is stopped by the router after `--failed-bind-limit` (2)
//! failures, so the DSA counts no more failures than that and never
//! locks the account; the real user binds after the back-off, and a
//! success resets the count; another user of the same address binds
//! meanwhile, until the address's own limit. A flood of 1,000 guesses in
//! a few seconds reaches the DSA no more often than the limit.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};
use support::router::Router;
use support::slapd::{
    admin_dn, ldap_tool, seed_ldif, user_dn, Slapd, SlapdConfig, ADMIN_PW, ALICE_PW, BOB_PW,
    ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
/// The router's limit, below the DSA's `pwdMaxFailure` (3).
const LIMIT: usize = 2;

/// A slapd whose default policy locks an account after 3 failures.
fn lockout_slapd() -> Slapd {
    let s = DEMOCORP;
    let mut ldif = seed_ldif(s, "D1");
    ldif.push_str(&format!(
        "dn: ou=policies,{s}\nobjectClass: organizationalUnit\nou: policies\n\n\
         dn: cn=default,ou=policies,{s}\nobjectClass: organizationalRole\n\
         objectClass: pwdPolicy\ncn: default\npwdAttribute: userPassword\n\
         pwdLockout: TRUE\npwdMaxFailure: 3\npwdFailureCountInterval: 600\n\n"
    ));
    Slapd::start(SlapdConfig {
        suffixes: vec![s.to_string()],
        ldif,
        name: "LOCKOUT".to_string(),
        global: "moduleload ppolicy\n".to_string(),
        database: "overlay ppolicy\nppolicy_default \"cn=default,ou=policies,{suffix}\"\n"
            .to_string(),
        ..SlapdConfig::default()
    })
}

/// `ldapwhoami` as `dn`: its exit code (the bind's result code on failure).
fn bind(url: &str, dn: &str, pw: &str) -> Option<i32> {
    ldap_tool("ldapwhoami", &["-x", "-H", url, "-D", dn, "-w", pw], None).code
}

/// The failures the DSA keeps on `dn` (`pwdFailureTime` values), read
/// directly as the DSA's administrator.
pub(crate) fn dsa_failures(s: &Slapd, dn: &str) -> usize {
    let admin = admin_dn(DEMOCORP);
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            &s.url,
            "-D",
            &admin,
            "-w",
            ADMIN_PW,
            "-b",
            dn,
            "-s",
            "base",
            "(objectClass=*)",
            "pwdFailureTime",
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout
        .lines()
        .filter(|l| l.starts_with("pwdFailureTime:"))
        .count()
}

fn router(s: &Slapd, dir: &std::path::Path, extra: &[&str]) -> Router {
    let k = support::slapd::one_dsa_knowledge(dir, s.port, ROUTER_PW);
    Router::start_with(&k, dir, extra)
}

#[test]
fn a_guessing_client_is_stopped_by_the_router_before_the_dsa_locks_the_account() {
    let s = lockout_slapd();
    let dir = tempfile::tempdir().unwrap();
    let backoff = Duration::from_secs(2);
    let r = router(
        &s,
        dir.path(),
        &["--failed-bind-limit", "2", "--failed-bind-backoff", "2s"],
    );
    let alice = user_dn(DEMOCORP, "alice");
    let bob = user_dn(DEMOCORP, "bob");

    // Twenty guesses: every one answered invalidCredentials, by the DSA
    // for the first two, then by the router. The DN in another spelling
    // is the same DN.
    let spelled = alice.to_uppercase().replace(',', ", ");
    // The back-off starts when the guess that reaches the limit fails
    // (guess 1), not at the last guess: on a loaded machine the eighteen
    // after it took 0.3 s and more, and alice bound 1.7 s after the last.
    let mut limit_sent_at = Instant::now();
    for i in 0..20 {
        if i + 1 == LIMIT {
            limit_sent_at = Instant::now();
        }
        let dn = if i % 2 == 0 { &alice } else { &spelled };
        assert_eq!(
            bind(&r.url, dn, &format!("guess-{i}")),
            Some(49),
            "guess {i}"
        );
    }
    assert_eq!(
        dsa_failures(&s, &alice),
        LIMIT,
        "the DSA saw as many failures as the router's limit, not 20"
    );
    // Another user of the same address (127.0.0.1) binds meanwhile.
    assert_eq!(bind(&r.url, &bob, BOB_PW), Some(0), "bob binds");
    // During the back-off even alice's own password gets 49 from the
    // router (the DSA sees nothing more).
    assert_eq!(bind(&r.url, &alice, ALICE_PW), Some(49));
    assert_eq!(dsa_failures(&s, &alice), LIMIT);

    // After the back-off she binds (the account was never locked), and
    // the DSA's failures are cleared by the success.
    let deadline = Instant::now() + Duration::from_secs(30);
    while bind(&r.url, &alice, ALICE_PW) != Some(0) {
        assert!(Instant::now() < deadline, "alice never bound again");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        limit_sent_at.elapsed() >= backoff - Duration::from_millis(300),
        "bound {:?} after the guess that reached the limit, before the back-off ended",
        limit_sent_at.elapsed()
    );
    assert_eq!(dsa_failures(&s, &alice), 0);

    // A success resets the router's count: one failure, a success, one
    // failure: still below the limit, her password works at once.
    assert_eq!(bind(&r.url, &alice, "typo-1"), Some(49));
    assert_eq!(bind(&r.url, &alice, ALICE_PW), Some(0));
    assert_eq!(bind(&r.url, &alice, "typo-2"), Some(49));
    assert_eq!(
        bind(&r.url, &alice, ALICE_PW),
        Some(0),
        "the count was reset"
    );

    let log = r.log_text();
    let began = log
        .matches("failed-bind back-off begins for this DN")
        .count();
    assert_eq!(began, 1, "one back-off logged once:\n{log}");
    for pw in ["guess-0", "guess-19", "typo-1", ALICE_PW] {
        assert!(!log.contains(pw), "password {pw} in the log:\n{log}");
    }
}

#[test]
fn one_address_guessing_many_dns_is_stopped_at_its_own_limit() {
    let s = lockout_slapd();
    let dir = tempfile::tempdir().unwrap();
    let r = router(
        &s,
        dir.path(),
        &[
            "--failed-bind-limit",
            "2",
            "--failed-bind-limit-per-address",
            "4",
            "--failed-bind-backoff",
            "60s",
        ],
    );
    let bob = user_dn(DEMOCORP, "bob");
    // One guess at each of ten users: the DSA sees the first four.
    let users: Vec<String> = (0..10)
        .map(|i| user_dn(DEMOCORP, &format!("user{i:04}")))
        .collect();
    // Below the address's limit another user of the address binds.
    for u in &users[..3] {
        assert_eq!(bind(&r.url, u, "guess"), Some(49));
    }
    assert_eq!(bind(&r.url, &bob, BOB_PW), Some(0), "bob, below the limit");
    for u in &users[3..] {
        assert_eq!(bind(&r.url, u, "guess"), Some(49));
    }
    let seen: Vec<usize> = users.iter().map(|u| dsa_failures(&s, u)).collect();
    assert_eq!(seen, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0], "failures on the DSA");
    // The address is in back-off: everyone from it is refused (the
    // documented choice), bob included.
    assert_eq!(bind(&r.url, &bob, BOB_PW), Some(49), "bob, past the limit");
    let log = r.log_text();
    assert_eq!(
        log.matches("failed-bind back-off begins for this client address")
            .count(),
        1,
        "{log}"
    );
}

/// A thousand wrong passwords for one DN within 10 s, as fast as two
/// connections carry them: all answered invalidCredentials, the DSA counts
/// no more failures than the router's limit and never locks the account,
/// and the real password binds once the back-off ends.
///
/// Two connections, one bind at a time each: no more than the limit (2).
/// Guesses sent at once on many connections reach the DSA no more often
/// than guesses in a row: failures plus binds in flight for one DN stay
/// within the limit, from the first guess on (docs/failed-binds.md); a
/// bind over it waits for one in flight, then is refused
/// (49, the back-off began) or, after the bind timeout, answered busy.
#[test]
fn a_thousand_guesses_in_ten_seconds_reach_the_dsa_at_most_limit_times() {
    const GUESSES: usize = 1_000;
    const CONNECTIONS: usize = 100;
    let s = lockout_slapd();
    let dir = tempfile::tempdir().unwrap();
    let backoff = Duration::from_secs(2);
    let r = router(
        &s,
        dir.path(),
        &["--failed-bind-limit", "2", "--failed-bind-backoff", "2s"],
    );
    let alice = user_dn(DEMOCORP, "alice");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (codes, began, took) = rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..CONNECTIONS {
            conns.push(support::inproc::ldap(&r.url).await);
        }
        let began = Instant::now();
        let per = GUESSES / CONNECTIONS;
        let floods = conns.into_iter().enumerate().map(|(c, mut l)| {
            let alice = alice.clone();
            async move {
                let mut codes = Vec::with_capacity(per);
                for i in 0..per {
                    let pw = format!("guess-{c}-{i}");
                    let res = support::inproc::within("guess", l.simple_bind(&alice, &pw));
                    codes.push(res.await.expect("bind I/O").rc);
                }
                codes
            }
        });
        let codes: Vec<u32> = futures::future::join_all(floods)
            .await
            .into_iter()
            .flatten()
            .collect();
        (codes, began, began.elapsed())
    });
    let seen = dsa_failures(&s, &alice);
    println!(
        "failed-bind flood: {} wrong-password binds for one DN on {CONNECTIONS} connections \
         in {took:?}; the DSA recorded {seen} failures (router limit {LIMIT})",
        codes.len()
    );
    assert_eq!(codes.len(), GUESSES);
    assert!(
        took < Duration::from_secs(10),
        "{GUESSES} guesses took {took:?}"
    );
    let others: Vec<_> = codes.iter().filter(|&&rc| rc != 49 && rc != 51).collect();
    assert!(
        others.is_empty(),
        "answers other than 49 and 51: {others:?}"
    );
    assert!(
        seen <= LIMIT,
        "the DSA recorded {seen} failures of {GUESSES} guesses, above the router's limit {LIMIT}"
    );

    // The account is not locked: once the back-off ends, her password
    // binds (a locked account answers 49 to it as well).
    let deadline = Instant::now() + Duration::from_secs(30);
    while bind(&r.url, &alice, ALICE_PW) != Some(0) {
        assert!(
            Instant::now() < deadline,
            "alice never bound again: the DSA recorded {} failures\n{}",
            dsa_failures(&s, &alice),
            r.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        began.elapsed() >= backoff - Duration::from_millis(300),
        "bound {:?} after the flood began, before the back-off ended",
        began.elapsed()
    );
    println!(
        "failed-bind flood: alice bound {:?} after the flood began (back-off {backoff:?})",
        began.elapsed()
    );
    assert_eq!(
        dsa_failures(&s, &alice),
        0,
        "her success cleared the DSA's count"
    );
}
