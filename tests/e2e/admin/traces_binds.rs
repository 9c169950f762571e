//! Traces of binds and of the operations the router answers itself
//! (one span per operation): a simple bind's span has its DSA
//! attempt as a child; a bind the failed-bind back-off answers and a
//! WhoAmI the router answers have a span with no attempt; no span carries
//! a password.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::admin::traces::{receiver, spans, testdsa, wait};
use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::ldap::whoami;
use crate::support::router::Router;
use serde_json::Value;
use std::time::Duration;

const SUFFIX: &str = "o=Traced,c=AU";
const KPREFIX: &str = "<c AU><o Traced>";
const ALICE: &str = "uid=alice,ou=People,o=Traced,c=AU";

/// The spans named `name`, and each one's children.
fn with_children(all: &[Value], name: &str) -> Vec<(Value, Vec<Value>)> {
    all.iter()
        .filter(|s| s["name"] == name)
        .map(|s| {
            let kids = all
                .iter()
                .filter(|k| k["parent_span_id"] == s["span_id"])
                .cloned()
                .collect();
            (s.clone(), kids)
        })
        .collect()
}

#[test]
fn binds_and_the_router_s_own_answers_have_a_span_each() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_rx, endpoint) = receiver(dir.path(), &out);
    let (_d1, port) = testdsa("D1", 0);
    let root = Knowledge::new()
        .dsa(Dsa::new("D1", port).prefix(KPREFIX))
        .write(dir.path());
    let r = Router::start_with(
        &root,
        dir.path(),
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-interval",
            "100ms",
            "--failed-bind-limit",
            "1",
            "--failed-bind-backoff",
            "60s",
            "--probe-interval",
            "0",
            "--csn-interval",
            "0",
        ],
    );
    // A good bind, then WhoAmI answered by the router (ldapwhoami does both).
    assert_eq!(whoami(&r.url, ALICE, "alicepw").code, Some(0));
    // A wrong password reaches D1 (49); the next is the back-off's (49,
    // from the router).
    assert_eq!(whoami(&r.url, ALICE, "wrong-guess-1").code, Some(49));
    assert_eq!(whoami(&r.url, ALICE, "wrong-guess-2").code, Some(49));
    let all = wait("three bind spans", Duration::from_secs(20), || {
        let all = spans(&out);
        let binds = all.iter().filter(|s| s["name"] == "ldap bind").count();
        (binds >= 3).then_some(all)
    });
    let binds = with_children(&all, "ldap bind");
    println!("bind spans: {binds:#?}");
    let at = |code: i64, kids: usize| {
        binds
            .iter()
            .find(|(s, k)| s["attributes"]["ldap.result_code"] == code && k.len() == kids)
    };
    let (good, kids) = at(0, 1).expect("a successful bind with one DSA attempt");
    assert_eq!(good["attributes"]["ldap.dn"], ALICE);
    assert_eq!(good["attributes"]["dsa_router.partition"], SUFFIX);
    assert_eq!(kids[0]["name"], "dsa D1");
    assert_eq!(kids[0]["attributes"]["dsa.attempt"], "first");
    assert_eq!(kids[0]["attributes"]["dsa.outcome"], "answered");
    assert_eq!(kids[0]["trace_id"], good["trace_id"]);
    let (wrong, kids) = at(49, 1).expect("a wrong password answered by D1");
    assert_eq!(kids[0]["attributes"]["dsa.outcome"], "answered");
    assert_eq!(wrong["attributes"]["dsa.attempts"], 1);
    let (backoff, _) = at(49, 0).expect("a bind the back-off answered, no DSA attempt");
    assert_eq!(backoff["attributes"]["dsa.attempts"], 0);
    assert_eq!(backoff["status_message"], "failed-bind back-off");
    // WhoAmI, answered by the router: a span without attempts.
    let who = with_children(&all, "ldap extended");
    assert!(
        who.iter().any(|(s, k)| k.is_empty()
            && s["attributes"]["ldap.result_code"] == 0
            && s["attributes"]["dsa.attempts"] == 0),
        "no span for WhoAmI: {who:#?}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    for pw in ["alicepw", "wrong-guess-1", "wrong-guess-2"] {
        assert!(!text.contains(pw), "a password in the spans: {pw}");
    }
}
