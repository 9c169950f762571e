//! Identities as the DSA keys them, against real slapd: DN spellings
//! slapd takes for one entry (`uid=user１997`, `uid=uſer1997`,
//! `uid=ｕser1997`, a trailing NBSP, U+3000 or TAB, and their mixes) are
//! one DN to the failed-bind defence and to policy rules; SASL guesses
//! are counted; a guesser's back-off holds at its own address while the
//! per-DN ceiling holds everywhere.
//!
//! Each look-alike is first shown to be the entry's DN to slapd itself
//! (its right password binds directly). Counts are read at the DSA: the
//! ppolicy overlay's `pwdFailureTime` values (a failure the router let
//! through) and slapd's own log (SASL binds it answered).
//!
//! Needs slapd, ldap-utils and sasl2-bin (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::binds::failed_binds::dsa_failures;
use crate::policy::rules::{bind, connect, rt, search};
use crate::support;
use crate::support::ldap::get;

use ldap3_proto::proto::{LdapFilter, LdapResultCode, LdapSearchScope};
use support::router::Router;
use support::slapd::{
    ldap_tool, ldif_entry, one_dsa_knowledge, seed_ldif, Slapd, SlapdConfig, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const PW: &str = "pw-of-user1997";

/// `uid=<v>,ou=people,o=DEMOCORP,c=AU`.
fn dn(v: &str) -> String {
    format!("uid={v},ou=people,{DEMOCORP}")
}

/// Fifteen spellings of `user1997` slapd takes for it: the six the
/// attacker review found, and mixes.
fn lookalikes() -> Vec<String> {
    [
        "user\u{ff11}997",
        "u\u{17f}er1997",
        "\u{ff55}ser1997",
        "user1997\u{a0}",
        "user1997\u{3000}",
        "user1997\t",
        "u\u{17f}er\u{ff11}997",
        "\u{ff55}\u{17f}er1997",
        "\u{ff55}ser\u{ff11}997\u{a0}",
        "u\u{17f}er1997\u{3000}",
        "USER\u{ff11}997\t",
        "\u{ff55}\u{17f}er\u{ff11}\u{ff19}\u{ff19}\u{ff17}",
        "\u{ff35}\u{17f}er1997\t",
        "user1997\u{a0}\u{3000}",
        "u\u{17f}\u{ff45}r\u{ff11}997\t",
    ]
    .iter()
    .map(|v| dn(v))
    .collect()
}

/// Users `uid=user1997` and `uid=user1998` (password [`PW`]), group
/// `cn=blocked` with user1998, and a default password policy locking an
/// account after `max_failure` failures.
fn slapd(max_failure: u32, sasl: &[(&str, &str)]) -> Slapd {
    let cfg = slapd_config(max_failure, sasl);
    if sasl.is_empty() {
        Slapd::start(cfg)
    } else {
        // Listening for the PROXY protocol too only makes it log each
        // operation (`stats`): its SASL results are counted there.
        Slapd::start_proxied(cfg)
    }
}

fn slapd_config(max_failure: u32, sasl: &[(&str, &str)]) -> SlapdConfig {
    let s = DEMOCORP;
    let mut ldif = seed_ldif(s, "D1");
    for u in ["user1997", "user1998"] {
        ldif.push_str(&ldif_entry(
            &dn(u),
            &[
                ("objectClass", "inetOrgPerson"),
                ("uid", u),
                ("cn", u),
                ("sn", u),
                ("userPassword", PW),
            ],
        ));
    }
    ldif.push_str(&ldif_entry(
        &format!("cn=blocked,{s}"),
        &[
            ("objectClass", "groupOfNames"),
            ("cn", "blocked"),
            ("member", &dn("user1998")),
        ],
    ));
    ldif.push_str(&format!(
        "dn: ou=policies,{s}\nobjectClass: organizationalUnit\nou: policies\n\n\
         dn: cn=default,ou=policies,{s}\nobjectClass: organizationalRole\n\
         objectClass: pwdPolicy\ncn: default\npwdAttribute: userPassword\n\
         pwdLockout: TRUE\npwdMaxFailure: {max_failure}\npwdFailureCountInterval: 600\n\n"
    ));
    let authz = format!(
        "authz-regexp \"^uid=([^,@]+)(@[^,]+)?(,cn=[^,]+)?,cn=[^,]+,cn=auth$\" \"uid=$1,ou=people,{s}\"\n"
    );
    SlapdConfig {
        global: format!("moduleload ppolicy\nsasl-secprops none\n{authz}"),
        database: "overlay ppolicy\nppolicy_default \"cn=default,ou=policies,{suffix}\"\n"
            .to_string(),
        sasldb: sasl
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect(),
        ..SlapdConfig::new("LOOKALIKE", &[s], ldif)
    }
}

/// `ldapwhoami -x` as `dn` at `url`: its exit code, and what it printed.
fn whoami(url: &str, dn: &str, pw: &str) -> (Option<i32>, String) {
    let out = support::ldap::whoami(url, dn, pw);
    (out.code, out.stdout.trim().to_string())
}

#[test]
fn look_alike_guesses_are_counted_as_the_dn_and_never_lock_the_account() {
    let s = slapd(5, &[]);
    let real = dn("user1997");
    let variants = lookalikes();
    // slapd takes each for the entry: its right password binds directly.
    for v in &variants {
        let (code, who) = whoami(&s.url, v, PW);
        assert_eq!(code, Some(0), "slapd refused {v:?}");
        assert_eq!(who, format!("dn:{real}"), "{v:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let k = one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let args = ["--failed-bind-limit", "3", "--failed-bind-backoff", "60s"];
    let r = Router::start_with(&k, dir.path(), &args);
    rt().block_on(async {
        let mut c = connect([127, 0, 0, 2], &r.url).await;
        // Twelve guesses over look-alikes: the DSA sees three, and never
        // its lockout's five.
        for i in 0..12 {
            let v = &variants[i % variants.len()];
            let (code, _) = bind(&mut c, v, &format!("guess-{i}")).await;
            assert_eq!(code, LdapResultCode::InvalidCredentials, "guess {i} {v:?}");
        }
        assert_eq!(dsa_failures(&s, &real), 3, "failures at the DSA");
        // In the back-off the right password is refused through every
        // spelling: none reaches the DSA (one would reset its count).
        for v in variants.iter().chain([&real]) {
            let (code, _) = bind(&mut c, v, PW).await;
            assert_eq!(code, LdapResultCode::InvalidCredentials, "{v:?}");
        }
        // 45 more guesses over the fifteen.
        for i in 0..45 {
            let v = &variants[i % variants.len()];
            let (code, _) = bind(&mut c, v, &format!("more-{i}")).await;
            assert_eq!(code, LdapResultCode::InvalidCredentials, "{v:?}");
        }
    });
    assert_eq!(
        dsa_failures(&s, &real),
        3,
        "no look-alike guess reached the DSA"
    );
    // The account is not locked: its password binds at the DSA.
    assert_eq!(whoami(&s.url, &real, PW).0, Some(0));
    let log = r.log_text();
    assert_eq!(
        log.matches("failed-bind back-off begins for this DN from this client address")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("guess-0") && !log.contains(PW), "{log}");
}

const POLICY: &str = r#"
[[rule]]
name = "blocked-identity"
identity = ["uid=user1997,ou=people,o=DEMOCORP,c=AU"]
allow = []

[[rule]]
name = "blocked-group"
member_of = ["cn=blocked,o=DEMOCORP,c=AU"]
if_group_unreadable = "match"
allow = []
"#;

#[test]
fn rules_match_look_alikes_and_the_router_names_the_dsas_dn() {
    let s = slapd(5, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (r, admin) = crate::policy::rules::router(&s, dir.path(), POLICY);
    // The group is read (so the member_of rule matches by membership, not
    // because the group is unreadable).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !get(&admin, "/status").contains("\"members\":1") {
        assert!(std::time::Instant::now() < deadline, "group never read");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let people = format!("ou=people,{DEMOCORP}");
    let any = LdapFilter::Present("objectClass".into());
    for (user, rule) in [
        ("user1997", "blocked-identity"),
        ("user1998", "blocked-group"),
    ] {
        // user1998's: the last digit (ASCII or fullwidth) changed.
        let last = |v: String| match user {
            "user1998" => v.replace('7', "8").replace('\u{ff17}', "\u{ff18}"),
            _ => v,
        };
        let spellings = lookalikes().into_iter().map(last).chain([dn(user)]);
        for v in spellings {
            rt().block_on(async {
                let mut c = connect([127, 0, 0, 1], &r.url).await;
                let (code, msg) = bind(&mut c, &v, PW).await;
                assert_eq!(code, LdapResultCode::Success, "{v:?}: {msg}");
                let g = search(&mut c, &people, LdapSearchScope::Base, any.clone(), &[]).await;
                assert_eq!(
                    g.code,
                    LdapResultCode::InsufficentAccessRights,
                    "{v:?}: {}",
                    g.message
                );
                assert!(g.message.contains(rule), "{v:?}: {}", g.message);
                // /status lists the session as the DSA names the DN.
                let status = get(&admin, "/status");
                assert!(
                    status.contains(&format!("dn:{}", dn(user))),
                    "{v:?}: {status}"
                );
                let value = &v["uid=".len()..v.find(",ou=").unwrap()];
                if value != user {
                    assert!(!status.contains(value), "{v:?} shown: {status}");
                }
            });
            // WhoAmI through the router: the DSA's DN.
            let (code, who) = whoami(&r.url, &v, PW);
            assert_eq!(code, Some(0), "{v:?}");
            assert_eq!(who, format!("dn:{}", dn(user)), "{v:?}");
        }
    }
}

/// slapd's log lines answering SASL binds with invalidCredentials.
fn sasl_failures_at(s: &Slapd) -> usize {
    s.log()
        .lines()
        .filter(|l| l.contains("RESULT tag=97 err=49"))
        .count()
}

#[test]
fn sasl_plain_and_cram_md5_guesses_are_counted_and_backed_off() {
    const ALICE: &str = "alice-sasl-pw";
    const BOB: &str = "bob-sasl-pw";
    let s = slapd(5, &[("alice", ALICE), ("bob", BOB)]);
    let dir = tempfile::tempdir().unwrap();
    let k = one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let args = ["--failed-bind-limit", "2", "--failed-bind-backoff", "60s"];
    let r = Router::start_with(&k, dir.path(), &args);
    let sasl = |mech: &str, user: &str, pw: &str| {
        let args = [
            "-Q", "-O", "none", "-H", &r.url, "-Y", mech, "-U", user, "-w", pw,
        ];
        ldap_tool("ldapwhoami", &args, None).code
    };
    // The right passwords bind through the router.
    assert_eq!(sasl("PLAIN", "alice", ALICE), Some(0));
    assert_eq!(sasl("CRAM-MD5", "bob", BOB), Some(0));
    for (mech, user, pw) in [("PLAIN", "alice", ALICE), ("CRAM-MD5", "bob", BOB)] {
        let before = sasl_failures_at(&s);
        for i in 0..6 {
            assert_eq!(sasl(mech, user, &format!("guess-{i}")), Some(49), "{mech}");
        }
        // The user in another spelling is the same user.
        assert_eq!(sasl(mech, &user.to_uppercase(), "guess-x"), Some(49));
        // In the back-off the right password is refused too.
        assert_eq!(sasl(mech, user, pw), Some(49), "{mech} in back-off");
        let reached = sasl_failures_at(&s) - before;
        assert_eq!(reached, 2, "{mech}: guesses the DSA answered");
    }
    let log = r.log_text();
    assert_eq!(
        log.matches("failed-bind back-off begins after a SASL bind")
            .count(),
        2,
        "{log}"
    );
    assert!(!log.contains(ALICE) && !log.contains("guess-1"), "{log}");
}

#[test]
fn a_guesser_does_not_lock_the_user_out_from_another_address_and_the_ceiling_holds() {
    let s = slapd(5, &[]);
    let real = dn("user1997");
    let dir = tempfile::tempdir().unwrap();
    let k = one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let args = [
        "--failed-bind-limit",
        "2",
        "--failed-bind-limit-per-dn",
        "4",
        "--failed-bind-backoff",
        "60s",
    ];
    let r = Router::start_with(&k, dir.path(), &args);
    let variants = lookalikes();
    rt().block_on(async {
        let guess = |from: u8, n: usize| {
            let (url, real) = (r.url.clone(), real.clone());
            async move {
                let mut c = connect([127, 0, 0, from], &url).await;
                let mut codes = Vec::new();
                for _ in 0..n {
                    codes.push(bind(&mut c, &real, "wrong").await.0);
                }
                codes
            }
        };
        // Ten guesses from 127.0.0.2: two reach the DSA.
        let codes = guess(2, 10).await;
        assert!(codes
            .iter()
            .all(|c| *c == LdapResultCode::InvalidCredentials));
        assert_eq!(dsa_failures(&s, &real), 2);
        // The user, from 127.0.0.3, binds (in a look-alike spelling too).
        let mut user = connect([127, 0, 0, 3], &r.url).await;
        assert_eq!(bind(&mut user, &real, PW).await.0, LdapResultCode::Success);
        assert_eq!(
            bind(&mut user, &variants[3], PW).await.0,
            LdapResultCode::Success
        );
        // Still refused at the guesser's address.
        let mut again = connect([127, 0, 0, 2], &r.url).await;
        assert_eq!(
            bind(&mut again, &real, PW).await.0,
            LdapResultCode::InvalidCredentials
        );
        // Spread out over four more addresses: the DN's ceiling (4) is
        // reached, and then it is refused from everywhere, the user's
        // address included; the DSA saw four failures, below its five.
        for from in 4..8 {
            guess(from, 3).await;
        }
        assert_eq!(dsa_failures(&s, &real), 4, "the ceiling");
        assert_eq!(
            bind(&mut user, &real, PW).await.0,
            LdapResultCode::InvalidCredentials
        );
    });
    assert_eq!(dsa_failures(&s, &real), 4);
    assert_eq!(whoami(&s.url, &real, PW).0, Some(0), "never locked");
    let log = r.log_text();
    assert_eq!(
        log.matches("failed-bind back-off begins for this DN from every address")
            .count(),
        1,
        "{log}"
    );
}

/// A small deterministic generator (xorshift), so that a failure names
/// its seed and repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Characters RFC 4518 maps to nothing or to SPACE where slapd keeps
/// them: values differing by them alone are one DN to the router, two to
/// slapd (the documented, fail-safe difference).
const RFC4518_ONLY: [char; 7] = [
    '\u{ad}', '\u{200b}', '\u{200d}', '\u{feff}', '\u{b}', '\u{85}', '\u{1680}',
];

/// Whether `value` differs from another for slapd by what only RFC 4518
/// maps: one of [`RFC4518_ONLY`], or a TAB, CR or LF that slapd's DN
/// parser does not drop (it trims ASCII whitespace at the value's ends
/// only; RFC 4518 maps them to SPACE anywhere).
fn rfc4518_only(value: &str) -> bool {
    let ascii_ws = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n');
    value.contains(&RFC4518_ONLY[..]) || value.trim_matches(ascii_ws).contains(['\t', '\r', '\n'])
}

/// A random spelling of `user1997`: each character as it is, in upper
/// case, fullwidth, or `ſ` for `s`; now and then a random character
/// (Latin, Greek, Cyrillic, CJK, or one of [`RFC4518_ONLY`]) inserted;
/// spaces of every kind at the ends.
fn random_spelling(rng: &mut Rng) -> String {
    let mut v = String::new();
    let pads = [' ', '\u{a0}', '\u{3000}', '\t', '\r', '\n', '\u{2003}'];
    for _ in 0..rng.below(3) {
        v.push(pads[rng.below(pads.len())]);
    }
    for c in "user1997".chars() {
        match rng.below(5) {
            1 => v.push(c.to_ascii_uppercase()),
            2 => v.push(char::from_u32(c as u32 - 0x21 + 0xff01).unwrap()),
            3 if c == 's' => v.push('\u{17f}'),
            _ => v.push(c),
        }
        if rng.below(12) == 0 {
            let ranges: [(u32, u32); 4] = [
                (0xc0, 0x24f),
                (0x391, 0x3c9),
                (0x410, 0x44f),
                (0x4e00, 0x4e80),
            ];
            let inserted = match rng.below(3) {
                0 => RFC4518_ONLY[rng.below(RFC4518_ONLY.len())],
                _ => {
                    let (lo, hi) = ranges[rng.below(ranges.len())];
                    char::from_u32(lo + rng.below((hi - lo + 1) as usize) as u32).unwrap()
                }
            };
            v.push(inserted);
        }
    }
    for _ in 0..rng.below(3) {
        v.push(pads[rng.below(pads.len())]);
    }
    v
}

/// slapd is the oracle: for random spellings of `uid=user1997`, slapd
/// finds the entry at that DN (a base search) exactly when the router's
/// key is the entry's, except for spellings with characters RFC 4518
/// alone maps, which the router takes for the entry and slapd does not
/// (never the other way round).
#[test]
fn slapd_finds_the_entry_exactly_when_the_routers_key_is_the_entrys() {
    use dsa_router::proto::dn::Dn;
    let s = slapd(5, &[]);
    let real = Dn::parse_ldap(&dn("user1997")).unwrap();
    let seed = 0x5eed_1997_u64;
    let mut rng = Rng(seed);
    let (mut same, mut other, mut merged) = (0, 0, 0);
    rt().block_on(async {
        let url = s.url.trim_end_matches('/');
        let mut c = connect([127, 0, 0, 1], url).await;
        let any = LdapFilter::Present("objectClass".into());
        for i in 0..400 {
            let value = random_spelling(&mut rng);
            let v = dn(&value);
            let g = search(&mut c, &v, LdapSearchScope::Base, any.clone(), &["uid"]).await;
            let slapd_same = g.code == LdapResultCode::Success && g.entries.len() == 1;
            let key_same = Dn::parse_ldap(&v).is_ok_and(|d| d == real && d.key() == real.key());
            match (slapd_same, key_same) {
                (true, true) => same += 1,
                (false, false) => other += 1,
                (true, false) => panic!("seed {seed:#x} #{i}: slapd takes {v:?} for the entry, the router's key differs"),
                (false, true) => {
                    assert!(
                        rfc4518_only(&value),
                        "seed {seed:#x} #{i}: the router takes {v:?} for the entry, slapd does not ({:?})",
                        g.code
                    );
                    merged += 1;
                }
            }
        }
    });
    println!(
        "400 spellings: {same} the entry to both, {other} another DN to both, \
         {merged} the entry to the router only (RFC 4518 mappings slapd lacks)"
    );
    assert!(same > 100 && other > 50, "{same} {other}");
}
