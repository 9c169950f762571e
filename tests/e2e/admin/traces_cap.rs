//! A client cannot have every operation traced: requests whose trace
//! context says "sampled" are followed at most `--otlp-caller-rate` a
//! second; past it they are sampled at `--otlp-sample` (here 0: not at
//! all), so 30 such searches in a burst export a handful of traces.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::admin::traces::{control, ldapsearch_at, receiver, spans, testdsa, wait};
use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::router::Router;
use std::time::Duration;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

#[test]
fn a_caller_s_sampled_flag_is_followed_only_within_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_rx, endpoint) = receiver(dir.path(), &out);
    let (_d1, port) = testdsa("D1", 0);
    let root = Knowledge::new()
        .dsa(Dsa::new("D1", port).prefix("<c AU><o Traced>"))
        .write(dir.path());
    let r = Router::start_with(
        &root,
        dir.path(),
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-interval",
            "100ms",
            "--otlp-sample",
            "0",
            "--otlp-caller-rate",
            "1",
        ],
    );
    let tp = format!("00-{TRACE_ID}-00f067aa0ba902b7-01");
    let asked = 30;
    for _ in 0..asked {
        ldapsearch_at(&r.url, "cn=served-by,o=Traced,c=AU", &["-e", &control(&tp)]);
    }
    let traced = || {
        spans(&out)
            .iter()
            .filter(|s| s["name"] == "ldap search" && s["trace_id"] == TRACE_ID)
            .count()
    };
    wait("the first trace", Duration::from_secs(20), || {
        (traced() > 0).then_some(())
    });
    // Every batch is sent within --otlp-interval: wait a few.
    std::thread::sleep(Duration::from_millis(800));
    let n = traced();
    // One at once (a second's worth), then one a second while the
    // searches run (each ldapsearch takes some milliseconds).
    assert!(
        n < asked / 3,
        "{n} of {asked} searches traced at a caller rate of 1 a second"
    );
}
