//! Identity through the router against real slapd: a client never acts
//! with more rights than the DSA would give it directly.
//!
//! * Unauthenticated binds (a name with an empty password, RFC 4513
//!   5.1.2) against a slapd that accepts them (`allow bind_anon_dn`):
//!   the client stays anonymous, whether the name is a user's or the
//!   router's own.
//! * Password policy (the ppolicy overlay): a user whose password was reset
//!   (`pwdReset`, `pwdMustChange`) is restricted by the DSA through the
//!   router exactly as directly, until the password is changed.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use support::knowledge::{Dsa, Knowledge};
use support::ldap::{search, show, whoami};
use support::router::Router;
use support::slapd::one_dsa_knowledge;
use support::slapd::{
    ldap_tool, router_dn, seed_ldif, user_dn, Slapd, SlapdConfig, ALICE_PW, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const OID_PPOLICY: &str = "1.3.6.1.4.1.42.2.27.8.5.1";
const RESET_PW: &str = "resetpw";
const NEW_PW: &str = "brand-new-pw";

/// The subtree of `base` as `bind` (None: anonymous): the LDIF
/// `ldapsearch` prints, comments and the result trailer dropped.
fn subtree(url: &str, bind: Option<(&str, &str)>, base: &str, attrs: &[&str]) -> String {
    let out = search(url, bind, &[], base, "sub", "(objectClass=*)", attrs);
    assert!(
        out.code == Some(0) || out.code == Some(32),
        "{}",
        show("ldapsearch", &out)
    );
    out.stdout
}

// ------------------------------------------------ unauthenticated binds

fn anon_cred_slapd() -> Slapd {
    Slapd::start(SlapdConfig {
        suffixes: vec![DEMOCORP.to_string()],
        ldif: seed_ldif(DEMOCORP, "D1"),
        name: "ANONCRED".to_string(),
        global: "allow bind_anon_dn\n".to_string(),
        ..SlapdConfig::default()
    })
}

#[test]
fn unauthenticated_binds_leave_the_client_anonymous() {
    let s = anon_cred_slapd();
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(
        &one_dsa_knowledge(dir.path(), s.port, ROUTER_PW),
        dir.path(),
    );
    let alice = user_dn(DEMOCORP, "alice");
    let me = router_dn(DEMOCORP);
    let restricted = format!("ou=restricted,{DEMOCORP}");

    for dn in [alice.as_str(), me.as_str()] {
        // Precondition: the DSA accepts the bind, as anonymous.
        let direct = whoami(&s.url, dn, "");
        assert_eq!(direct.code, Some(0), "{}", show("direct whoami", &direct));
        assert_eq!(direct.stdout.trim(), "anonymous", "direct, {dn}");
        // Through the router: the same answer.
        let via = whoami(&router.url, dn, "");
        assert_eq!(via.code, Some(0), "{}", show("whoami via router", &via));
        assert_eq!(via.stdout.trim(), "anonymous", "via router, {dn}");
    }

    // Reads: exactly what an anonymous client reads.
    let anon_alice = subtree(&router.url, None, &alice, &["*", "userPassword"]);
    let anon_secret = subtree(&router.url, None, &restricted, &["*"]);
    assert!(anon_alice.contains("uid: alice"), "{anon_alice}");
    assert!(!anon_alice.contains("userPassword"), "{anon_alice}");
    assert!(!anon_secret.contains("cn=secret"), "{anon_secret}");
    for dn in [alice.as_str(), me.as_str()] {
        let got = subtree(&router.url, Some((dn, "")), &alice, &["*", "userPassword"]);
        assert_eq!(got, anon_alice, "{dn} with an empty password reads alice");
        let got = subtree(&router.url, Some((dn, "")), &restricted, &["*"]);
        assert_eq!(
            got, anon_secret,
            "{dn} with an empty password reads restricted"
        );
    }

    // The same identities with their passwords do read more (so the
    // checks above would see a conveyed identity).
    let own = subtree(
        &router.url,
        Some((&alice, ALICE_PW)),
        &alice,
        &["userPassword"],
    );
    assert!(
        own.contains("userPassword"),
        "alice reads her password: {own}"
    );
    let secret = subtree(&router.url, Some((&me, ROUTER_PW)), &restricted, &["*"]);
    assert!(
        secret.contains("cn=secret"),
        "the router identity reads: {secret}"
    );
    let log = router.log_text();
    assert!(
        log.contains("the client stays anonymous"),
        "the router logs unauthenticated binds:\n{log}"
    );
}

// ------------------------------------------------ password policy

/// A slapd with the ppolicy overlay: the default policy has
/// `pwdMustChange`, and `uid=reset` had its password reset.
fn ppolicy_slapd() -> Slapd {
    let s = DEMOCORP;
    let mut ldif = seed_ldif(s, "D1");
    ldif.push_str(&format!(
        "dn: ou=policies,{s}\nobjectClass: organizationalUnit\nou: policies\n\n\
         dn: cn=default,ou=policies,{s}\nobjectClass: organizationalRole\n\
         objectClass: pwdPolicy\ncn: default\npwdAttribute: userPassword\n\
         pwdMustChange: TRUE\npwdAllowUserChange: TRUE\n\n\
         dn: uid=reset,ou=people,{s}\nobjectClass: inetOrgPerson\nuid: reset\n\
         cn: Reset User\nsn: User\nuserPassword: {RESET_PW}\npwdReset: TRUE\n\n"
    ));
    Slapd::start(SlapdConfig {
        suffixes: vec![s.to_string()],
        ldif,
        name: "PPOLICY".to_string(),
        global: "moduleload ppolicy\n".to_string(),
        database: "overlay ppolicy\nppolicy_default \"cn=default,ou=policies,{suffix}\"\n"
            .to_string(),
        ..SlapdConfig::default()
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What one client sees: bind (with or without the ppolicy request
/// control), search, change its password, search again.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// Bind: result code and the ppolicy response control's value, if any.
    bind: (u32, Option<Option<Vec<u8>>>),
    /// First search: result code and message.
    search: (u32, String),
    /// Password Modify: result code.
    passwd: u32,
    /// Search after the change: result code and entries.
    after: (u32, usize),
}

async fn must_change_session(url: &str, ask_ppolicy: bool, old: &str, new: &str) -> Seen {
    use ldap3::controls::RawControl;
    use ldap3::{LdapConnAsync, Scope};
    let dn = user_dn(DEMOCORP, "reset");
    let (conn, mut ldap) = LdapConnAsync::new(url).await.unwrap();
    ldap3::drive!(conn);
    if ask_ppolicy {
        ldap.with_controls(vec![RawControl {
            ctype: OID_PPOLICY.to_string(),
            crit: false,
            val: None,
        }]);
    }
    let b = ldap.simple_bind(&dn, old).await.unwrap();
    let ctrl = b
        .ctrls
        .iter()
        .find(|c| c.1.ctype == OID_PPOLICY)
        .map(|c| c.1.val.clone());
    let base = format!("ou=people,{DEMOCORP}");
    let ldap3::SearchResult(_, r) = ldap
        .search(&base, Scope::OneLevel, "(uid=alice)", vec!["cn"])
        .await
        .unwrap();
    let search = (r.rc, r.text.clone());
    let ldap3::result::ExopResult(_, p) = ldap
        .extended(ldap3::exop::PasswordModify {
            user_id: None,
            old_pass: Some(old),
            new_pass: Some(new),
        })
        .await
        .unwrap();
    let ldap3::SearchResult(entries, r) = ldap
        .search(&base, Scope::OneLevel, "(uid=alice)", vec!["cn"])
        .await
        .unwrap();
    let _ = ldap.unbind().await;
    Seen {
        bind: (b.rc, ctrl),
        search,
        passwd: p.rc,
        after: (r.rc, entries.len()),
    }
}

#[test]
fn password_policy_restrictions_hold_through_the_router() {
    let rt = rt();
    for ask_ppolicy in [true, false] {
        // Fresh DSAs each round: the first password change clears the reset.
        let direct_dsa = ppolicy_slapd();
        let routed_dsa = ppolicy_slapd();
        let dir = tempfile::tempdir().unwrap();
        let router = Router::start(
            &one_dsa_knowledge(dir.path(), routed_dsa.port, ROUTER_PW),
            dir.path(),
        );

        let direct = rt.block_on(must_change_session(
            &direct_dsa.url,
            ask_ppolicy,
            RESET_PW,
            NEW_PW,
        ));
        // Preconditions: slapd restricts the user until the change.
        assert_eq!(direct.bind.0, 0, "direct: {direct:?}");
        assert_eq!(direct.search.0, 50, "direct: {direct:?}");
        assert!(direct.search.1.contains("restricted"), "direct: {direct:?}");
        assert_eq!(direct.passwd, 0, "direct: {direct:?}");
        assert_eq!(direct.after, (0, 1), "direct: {direct:?}");
        assert_eq!(direct.bind.1.is_some(), ask_ppolicy, "direct: {direct:?}");

        let via = rt.block_on(must_change_session(
            &router.url,
            ask_ppolicy,
            RESET_PW,
            NEW_PW,
        ));
        // The same through the router: 50 with the DSA's message, the
        // response control unchanged (or absent, as directly), then the
        // change and a search that works.
        assert_eq!(via, direct, "ppolicy requested: {ask_ppolicy}");

        // The new password works, without restriction, for a new client.
        let w = whoami(&router.url, &user_dn(DEMOCORP, "reset"), NEW_PW);
        assert_eq!(
            w.stdout.trim(),
            format!("dn:{}", user_dn(DEMOCORP, "reset")),
            "{}",
            show("whoami after the change", &w)
        );
        let log = router.log_text();
        assert!(
            log.contains("changeAfterReset"),
            "the router logs the policy state:\n{log}"
        );
    }
}

/// `--own-connection always`: every bound client runs on a connection of
/// its own, bound as itself, never on the router's shared connection. Seen
/// with a router whose own bind the DSA refuses (a wrong
/// `ldap-dsa-password`): bound reads fail by default and work with
/// `always`, with the client's own identity.
#[test]
fn own_connection_always_runs_bound_clients_as_themselves() {
    let s = anon_cred_slapd();
    let alice = user_dn(DEMOCORP, "alice");
    let restricted = format!("ou=restricted,{DEMOCORP}");
    for always in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let k = one_dsa_knowledge(dir.path(), s.port, "wrong-router-pw");
        let extra: &[&str] = if always {
            &["--own-connection", "always"]
        } else {
            &[]
        };
        let router = Router::start_with(&k, dir.path(), extra);
        let mut args = vec!["-x", "-LLL", "-H", &router.url, "-b", &alice, "-s", "base"];
        args.extend([
            "-D",
            &alice,
            "-w",
            ALICE_PW,
            "(objectClass=*)",
            "userPassword",
        ]);
        let out = ldap_tool("ldapsearch", &args, None);
        if !always {
            assert_eq!(out.code, Some(50), "{}", show("proxied", &out));
            continue;
        }
        assert_eq!(out.code, Some(0), "{}", show("own connection", &out));
        assert!(out.stdout.contains("userPassword"), "{}", out.stdout);
        let w = whoami(&router.url, &alice, ALICE_PW);
        assert_eq!(
            w.stdout.trim(),
            format!("dn:{alice}"),
            "{}",
            show("whoami", &w)
        );
        let none = subtree(&router.url, Some((&alice, ALICE_PW)), &restricted, &["*"]);
        assert!(!none.contains("cn=secret"), "{none}");
    }
}

// ------------------------------------------------ password changes

/// A client bound on connections of its own changes its password: the
/// binds the router replays later, on a DSA of the group where it has no
/// connection yet, carry the new one (the DSAs replicate; here the
/// administrator sets it on the others by hand). The bind and the change
/// make connections on at most two of the three DSAs.
#[test]
fn a_changed_password_is_what_later_replays_carry() {
    let dsas: Vec<Slapd> = (1..=3)
        .map(|i| Slapd::start(SlapdConfig::seeded(&format!("PW{i}"), &[DEMOCORP])))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let k = Knowledge::new()
        .dsas(dsas.iter().enumerate().map(|(i, s)| {
            Dsa::new(&format!("D{}", i + 1), s.port)
                .prefix("<c AU><o DEMOCORP>")
                .router(ROUTER_PW)
                .flags("multi-write, load-share")
                .load_share_group("G")
        }))
        .write_precedence(&["D1"])
        .write(dir.path());
    // Reads spread over the group (no read-your-writes affinity after the
    // password change), so that the other DSAs replay the bind.
    let router = Router::start_with(
        &k,
        dir.path(),
        &["--own-connection", "always", "--read-your-writes", "0"],
    );
    let alice = user_dn(DEMOCORP, "alice");
    let new_pw = "alice-new-pw";
    let got = rt().block_on(async {
        use ldap3::{LdapConnAsync, Scope};
        let (conn, mut ldap) = LdapConnAsync::new(&router.url).await.unwrap();
        ldap3::drive!(conn);
        assert_eq!(ldap.simple_bind(&alice, ALICE_PW).await.unwrap().rc, 0);
        let ldap3::result::ExopResult(_, p) = ldap
            .extended(ldap3::exop::PasswordModify {
                user_id: None,
                old_pass: Some(ALICE_PW),
                new_pass: Some(new_pw),
            })
            .await
            .unwrap();
        assert_eq!(p.rc, 0, "password modify: {p:?}");
        // Replication, by hand: D2 and D3 learn the new password too.
        for s in &dsas[1..] {
            let (c, mut admin) = LdapConnAsync::new(&s.url).await.unwrap();
            ldap3::drive!(c);
            admin
                .simple_bind(&format!("cn=admin,{DEMOCORP}"), "secret")
                .await
                .unwrap();
            let r = admin
                .modify(
                    &alice,
                    vec![ldap3::Mod::Replace("userPassword", [new_pw].into())],
                )
                .await
                .unwrap();
            assert_eq!(r.rc, 0);
        }
        // Reads share the group's DSAs: both get one, each on alice's own
        // connection there, bound by replaying her bind.
        let mut codes = Vec::new();
        for _ in 0..9 {
            let ldap3::SearchResult(_, r) = ldap
                .search(&alice, Scope::Base, "(objectClass=*)", vec!["userPassword"])
                .await
                .unwrap();
            codes.push((r.rc, r.text));
        }
        codes
    });
    assert!(
        got.iter().all(|(rc, _)| *rc == 0),
        "{got:?}\n{}",
        router.log_text()
    );
    let log = router.log_text();
    for d in ["D1", "D2", "D3"] {
        assert!(
            log.contains(&format!("dsa={d}")),
            "no read went to {d}:\n{log}"
        );
    }
}

// ------------------------------------------------ log injection

/// A bind name holding a line feed, a carriage return or both (a client
/// may send any bytes) forges no log line: in the router's log lines
/// (`tracing`'s and the access log's, both on stderr here) the name is
/// quoted and escaped (`dn="cn=x\n..."`), as the access log quotes.
#[test]
fn bind_names_with_line_breaks_forge_no_log_line() {
    let s = anon_cred_slapd();
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(
        &one_dsa_knowledge(dir.path(), s.port, ROUTER_PW),
        dir.path(),
    );
    let forged = "2026-01-01T00:00:00.000000Z  INFO dsa_router: FORGED";
    let names = [
        (format!("cn=x\n{forged} lf,{DEMOCORP}"), ""),
        (format!("cn=x\r\n{forged} crlf,{DEMOCORP}"), "wrong"),
        (format!("cn=x\r{forged} cr,{DEMOCORP}"), ""),
    ];
    for (dn, pw) in &names {
        let out = whoami(&router.url, dn, pw);
        println!("{dn:?}: {}", show("whoami", &out));
    }
    let log = router.log_text();
    assert!(!log.contains('\r'), "a raw carriage return:\n{log}");
    for line in log.lines() {
        assert!(
            !line.starts_with(&forged[..10]),
            "forged line {line:?} in:\n{log}"
        );
    }
    for (dn, _) in &names {
        let escaped = format!("dn={dn:?}");
        assert!(log.contains(&escaped), "no {escaped} in:\n{log}");
    }
    // The unauthenticated binds' own log line (tracing) shows it too.
    assert!(
        log.lines().any(|l| l.contains("the client stays anonymous")
            && l.contains(&format!("dn={:?}", names[0].0))),
        "{log}"
    );
}
