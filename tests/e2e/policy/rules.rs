//! Client policies and rates (`--policy FILE`)
//! against real slapd. Clients connect from 127.0.0.2 (the partners'
//! range) or 127.0.0.1 (everyone else):
//! * a rule allowing 127.0.0.2 only searches under `ou=people` with a
//!   size limit of 50: a subtree search at the suffix is refused (50,
//!   the rule named) from there and succeeds from 127.0.0.1; the size
//!   limit is clamped (50 entries and sizeLimitExceeded, 102 from
//!   elsewhere); `mail`, hidden, is absent from its results and a filter
//!   on it is refused (53); refusals are counted per rule on `/metrics`
//!   and `/status`; the file is re-read with the knowledge (`ctl
//!   reload`).
//! * rates: a client address over its rate gets busy (51) while another
//!   address is served; binds have their own rate; an identity over its
//!   rate is refused from any address while another identity is served.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use ldap3_proto::proto::{
    LdapBindCred, LdapBindRequest, LdapFilter, LdapMsg, LdapOp, LdapResultCode, LdapSearchScope,
};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};
use support::inproc::{compare_msg, encode, final_result, search_msg, Raw};
use support::ldap::get;
use support::router::Router;
use support::slapd::{
    one_dsa_knowledge, pick_port, user_dn, Slapd, SlapdConfig, ALICE_PW, BOB_PW, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// What a search got: the entries (DN and attribute names, lower case)
/// and the final result.
pub(crate) struct Got {
    pub(crate) entries: Vec<(String, Vec<String>)>,
    pub(crate) code: LdapResultCode,
    pub(crate) message: String,
}

/// A connection from `from` (127.0.0.x) to the router at `url`.
pub(crate) async fn connect(from: [u8; 4], url: &str) -> Raw {
    let to: SocketAddr = url.trim_start_matches("ldap://").parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::from((from, 0))).unwrap();
    Raw::from_stream(sock.connect(to).await.unwrap())
}

pub(crate) async fn search(
    c: &mut Raw,
    base: &str,
    scope: LdapSearchScope,
    filter: LdapFilter,
    attrs: &[&str],
) -> Got {
    c.send(&encode(search_msg(2, base, scope, filter, attrs)))
        .await
        .unwrap();
    let mut entries = Vec::new();
    loop {
        let m = c.msg("search").await;
        if let LdapOp::SearchResultEntry(e) = &m.op {
            let names = e
                .attributes
                .iter()
                .map(|a| a.atype.to_ascii_lowercase())
                .collect();
            entries.push((e.dn.clone(), names));
        } else if let Some((code, message)) = final_result(&m) {
            return Got {
                entries,
                code,
                message,
            };
        }
    }
}

pub(crate) async fn bind(c: &mut Raw, dn: &str, pw: &str) -> (LdapResultCode, String) {
    c.send(&encode(LdapMsg {
        msgid: 1,
        op: LdapOp::BindRequest(LdapBindRequest {
            version: 3,
            dn: dn.to_string(),
            cred: LdapBindCred::Simple(pw.to_string()),
        }),
        ctrl: vec![],
    }))
    .await
    .unwrap();
    final_result(&c.msg("bind").await).unwrap()
}

pub(crate) fn eq(a: &str, v: &str) -> LdapFilter {
    LdapFilter::Equality(a.into(), v.into())
}

pub(crate) fn any() -> LdapFilter {
    LdapFilter::Present("objectClass".into())
}

fn people() -> LdapFilter {
    eq("objectClass", "inetOrgPerson")
}

/// A router in front of `s` with `policy` (and its admin API), once the
/// API answers.
pub(crate) fn router(s: &Slapd, dir: &Path, policy: &str) -> (Router, String) {
    let file = dir.join("policy.toml");
    std::fs::write(&file, policy).unwrap();
    let k = one_dsa_knowledge(dir, s.port, ROUTER_PW);
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(
        &k,
        dir,
        &[
            "--policy",
            file.to_str().unwrap(),
            "--admin",
            &admin,
            "--csn-interval",
            "0",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&admin).is_err() {
        assert!(Instant::now() < deadline, "no admin API:\n{}", r.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    (r, admin)
}

pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const PARTNERS: &str = r#"
[[rule]]
name = "partners"
client = ["127.0.0.2/32"]
allow = ["search"]
subtrees = ["ou=people,o=DEMOCORP,c=AU"]
size_limit = SIZE
hide = ["mail"]
"#;

#[test]
fn a_rule_limits_one_address_range_to_people_with_clamped_size_and_hidden_mail() {
    let s = Slapd::start(SlapdConfig::seeded("POLICY", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let (r, admin) = router(&s, dir.path(), &PARTNERS.replace("SIZE", "50"));
    let people_ou = format!("ou=people,{DEMOCORP}");
    let alice = user_dn(DEMOCORP, "alice");
    rt().block_on(async {
        let mut partner = connect([127, 0, 0, 2], &r.url).await;
        let mut other = connect([127, 0, 0, 1], &r.url).await;
        let sub = LdapSearchScope::Subtree;

        // At the suffix: refused from 127.0.0.2, the rule named; served
        // from 127.0.0.1.
        let g = search(&mut partner, DEMOCORP, sub.clone(), people(), &["cn"]).await;
        assert_eq!(
            g.code,
            LdapResultCode::InsufficentAccessRights,
            "{}",
            g.message
        );
        assert!(
            g.message.contains("policy rule \"partners\""),
            "{}",
            g.message
        );
        assert!(g.entries.is_empty());
        let g = search(&mut other, DEMOCORP, sub.clone(), people(), &["cn"]).await;
        assert_eq!(g.code, LdapResultCode::Success, "{}", g.message);
        assert_eq!(g.entries.len(), 102, "alice, bob and 100 users");

        // Under ou=people: 50 entries at most from 127.0.0.2.
        let g = search(&mut partner, &people_ou, sub.clone(), people(), &["cn"]).await;
        assert_eq!(g.code, LdapResultCode::SizeLimitExceeded, "{}", g.message);
        assert_eq!(g.entries.len(), 50);
        let g = search(&mut other, &people_ou, sub.clone(), people(), &["cn"]).await;
        assert_eq!((g.code, g.entries.len()), (LdapResultCode::Success, 102));

        // mail is hidden from 127.0.0.2, asked for by name or with *.
        for attrs in [&["mail", "cn"][..], &["*"][..], &[][..]] {
            let g = search(&mut partner, &alice, LdapSearchScope::Base, people(), attrs).await;
            assert_eq!(g.code, LdapResultCode::Success, "{}", g.message);
            let names = &g.entries[0].1;
            assert!(names.contains(&"cn".to_string()), "{attrs:?}: {names:?}");
            assert!(!names.contains(&"mail".to_string()), "{attrs:?}: {names:?}");
        }
        let g = search(
            &mut other,
            &alice,
            LdapSearchScope::Base,
            people(),
            &["mail"],
        )
        .await;
        assert_eq!(g.entries[0].1, ["mail"]);

        // A filter naming mail is refused (53), not answered: its result
        // would tell who has which address.
        let f = LdapFilter::Or(vec![eq("uid", "nobody"), eq("mail", "alice@example.com")]);
        let g = search(&mut partner, &people_ou, sub.clone(), f, &["cn"]).await;
        assert_eq!(g.code, LdapResultCode::UnwillingToPerform, "{}", g.message);
        assert!(
            g.message.contains("\"partners\"") && g.message.contains("mail"),
            "{}",
            g.message
        );
        let g = search(
            &mut other,
            &people_ou,
            sub.clone(),
            eq("mail", "alice@example.com"),
            &["cn"],
        )
        .await;
        assert_eq!((g.code, g.entries.len()), (LdapResultCode::Success, 1));

        // Compares are not allowed from 127.0.0.2.
        partner
            .send(&compare_msg(3, &alice, "cn", "x"))
            .await
            .unwrap();
        let (code, msg) = final_result(&partner.msg("compare").await).unwrap();
        assert_eq!(code, LdapResultCode::InsufficentAccessRights, "{msg}");
    });

    // Refusals per rule: at the suffix, the filter, the compare.
    let metrics = get(&admin, "/metrics");
    assert!(
        metrics.contains("dsa_router_policy_refusals_total{rule=\"partners\"} 3"),
        "{metrics}"
    );
    let status: serde_json::Value = serde_json::from_str(&get(&admin, "/status")).unwrap();
    assert_eq!(status["policy"]["refusals"]["partners"], 3, "{status}");

    // `explain` names the rule that decides, and its verdict.
    let explain = |client: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .arg("explain")
            .arg(dir.path().join("router.dxg"))
            .args([
                DEMOCORP, "--op", "search", "--scope", "sub", "--client", client,
            ])
            .arg("--policy")
            .arg(dir.path().join("policy.toml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = explain("127.0.0.2");
    assert!(text.contains("policy rule: partners"), "{text}");
    assert!(
        text.contains("refused: 50 dsa-router: refused by policy rule \"partners\""),
        "{text}"
    );
    assert!(text.contains("hidden attributes: mail"), "{text}");
    let text = explain("127.0.0.1");
    assert!(text.contains("policy rule: default"), "{text}");
    assert!(
        text.contains("passed over: partners (its client address does not match)"),
        "{text}"
    );
    assert!(text.contains("  allowed"), "{text}");

    // Re-read with the knowledge: a size limit of 10 from now on.
    std::fs::write(
        dir.path().join("policy.toml"),
        PARTNERS.replace("SIZE", "10"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", &admin, "reload", "--control-socket"])
        .arg(&r.control)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rt().block_on(async {
        let mut partner = connect([127, 0, 0, 2], &r.url).await;
        let g = search(
            &mut partner,
            &people_ou,
            LdapSearchScope::Subtree,
            people(),
            &["cn"],
        )
        .await;
        assert_eq!(
            (g.code, g.entries.len()),
            (LdapResultCode::SizeLimitExceeded, 10)
        );
    });
}

#[test]
fn clients_over_their_rates_get_busy_while_others_are_served() {
    let s = Slapd::start(SlapdConfig::seeded("RATES", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    // Hardly any refill: the bursts are what each key gets in this test.
    let policy = r#"
[rates]
address = { per_second = 0.001, burst = 3 }
identity = { per_second = 0.001, burst = 2 }
address_binds = { per_second = 0.001, burst = 2 }
"#;
    let (r, admin) = router(&s, dir.path(), policy);
    let served = format!("cn=served-by,{DEMOCORP}");
    let base = LdapSearchScope::Base;
    rt().block_on(async {
        // 127.0.0.2: three operations, then busy; 127.0.0.1 is served.
        let mut a = connect([127, 0, 0, 2], &r.url).await;
        let mut b = connect([127, 0, 0, 1], &r.url).await;
        for i in 0..3 {
            let g = search(&mut a, &served, base.clone(), any(), &[]).await;
            assert_eq!(g.code, LdapResultCode::Success, "{i}: {}", g.message);
        }
        let g = search(&mut a, &served, base.clone(), any(), &[]).await;
        assert_eq!(g.code, LdapResultCode::Busy, "{}", g.message);
        assert!(g.message.contains("this client address"), "{}", g.message);
        let g = search(&mut b, &served, base.clone(), any(), &[]).await;
        assert_eq!(g.code, LdapResultCode::Success, "{}", g.message);

        // Binds have their own rate: 127.0.0.2 still binds twice, then
        // gets busy; alice binds from 127.0.0.1 meanwhile.
        let alice = user_dn(DEMOCORP, "alice");
        let bob = user_dn(DEMOCORP, "bob");
        for _ in 0..2 {
            assert_eq!(bind(&mut a, &bob, BOB_PW).await.0, LdapResultCode::Success);
        }
        let (code, msg) = bind(&mut a, &bob, BOB_PW).await;
        assert_eq!(code, LdapResultCode::Busy, "{msg}");
        assert!(msg.contains("binds"), "{msg}");
        assert_eq!(
            bind(&mut b, &alice, ALICE_PW).await.0,
            LdapResultCode::Success
        );

        // Identities: alice (bound on b, one address operation left there)
        // uses her two from a fresh address; bob is served.
        let mut c = connect([127, 0, 0, 3], &r.url).await;
        assert_eq!(
            bind(&mut c, &alice, ALICE_PW).await.0,
            LdapResultCode::Success
        );
        for i in 0..2 {
            let g = search(&mut c, &served, base.clone(), any(), &[]).await;
            assert_eq!(g.code, LdapResultCode::Success, "{i}: {}", g.message);
        }
        let g = search(&mut b, &served, base.clone(), any(), &[]).await;
        assert_eq!(
            g.code,
            LdapResultCode::Busy,
            "alice from elsewhere: {}",
            g.message
        );
        assert!(g.message.contains("this identity"), "{}", g.message);
        let mut d = connect([127, 0, 0, 4], &r.url).await;
        assert_eq!(bind(&mut d, &bob, BOB_PW).await.0, LdapResultCode::Success);
        let g = search(&mut d, &served, base.clone(), any(), &[]).await;
        assert_eq!(g.code, LdapResultCode::Success, "bob: {}", g.message);
    });
    let metrics = get(&admin, "/metrics");
    for line in [
        "dsa_router_rate_limited_total{of=\"address\",op=\"other\"} 1",
        "dsa_router_rate_limited_total{of=\"identity\",op=\"other\"} 1",
        "dsa_router_rate_limited_total{of=\"address\",op=\"bind\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
}
