//! OpenTelemetry traces (`--otlp-endpoint`): a router process exports to
//! a real OTLP/HTTP receiver (tests/support/otlp_receiver.py, on the
//! opentelemetry-proto package); a hedged search's trace has the search's
//! span with its two DSA attempts as children, and a search carrying the
//! W3C trace context control continues the caller's trace. The trace
//! context goes to a test DSA that accepts it (the attempt's span as the
//! parent), not to one that does not, nor to slapd, whose answers are
//! unchanged; a search spanning partitions has a child span per
//! partition.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::router::Router;
use crate::support::slapd::{pick_port, run_tool, Slapd, SlapdConfig};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SUFFIX: &str = "o=Traced,c=AU";
const KPREFIX: &str = "<c AU><o Traced>";
const OID: &str = "2.25.65172751917474745695309622528529703499";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// A child process killed on drop.
pub(crate) struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait until `f` gives something, at most `within`.
pub(crate) fn wait<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + within;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The receiver, and the URL it listens at.
pub(crate) fn receiver(dir: &Path, out: &Path) -> (Proc, String) {
    let port_file = dir.join("otlp.port");
    let child = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/otlp_receiver.py"
        ))
        .arg(&port_file)
        .arg(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    let port = wait("the OTLP receiver", Duration::from_secs(20), || {
        std::fs::read_to_string(&port_file).ok()
    });
    (p, format!("http://127.0.0.1:{}", port.trim()))
}

/// A test DSA process answering after `delay_ms`.
pub(crate) fn testdsa(name: &str, delay_ms: u64) -> (Proc, u16) {
    testdsa_with(name, SUFFIX, &["--delay-ms", &delay_ms.to_string()])
}

/// A test DSA process for `suffix`, with more `testdsa` options.
fn testdsa_with(name: &str, suffix: &str, extra: &[&str]) -> (Proc, u16) {
    let port = pick_port();
    let child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args([
            "testdsa",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            name,
        ])
        .args(["--suffix", suffix])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait(&format!("test DSA {name}"), Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    (p, port)
}

pub(crate) fn spans(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A search's span and its children, once the receiver has them: the
/// first search span whose children satisfy `want`.
fn tree(out: &Path, want: impl Fn(&Value, &[Value]) -> bool) -> Option<(Value, Vec<Value>)> {
    let all = spans(out);
    all.iter()
        .filter(|s| s["name"] == "ldap search")
        .map(|root| {
            let kids: Vec<Value> = all
                .iter()
                .filter(|s| s["parent_span_id"] == root["span_id"])
                .cloned()
                .collect();
            (root.clone(), kids)
        })
        .find(|(root, kids)| want(root, kids))
}

/// ldapsearch's `-e` for the trace context control with `traceparent`
/// (ldapsearch takes a generic control's value in base64).
pub(crate) fn control(traceparent: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(traceparent);
    format!("{OID}={b64}")
}

fn ldapsearch(url: &str, extra: &[&str]) {
    ldapsearch_at(url, "cn=served-by,o=Traced,c=AU", extra);
}

/// A base search of `base` (then `extra`: more options, a filter,
/// attributes); its output.
pub(crate) fn ldapsearch_at(url: &str, base: &str, extra: &[&str]) -> String {
    let mut args = vec!["-x", "-LLL", "-H", url, "-b", base, "-s", "base"];
    args.extend_from_slice(extra);
    let out = run_tool("ldapsearch", &args, None, Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "ldapsearch {args:?}: {}", out.stderr);
    out.stdout
}

#[test]
fn a_hedged_search_s_trace_has_its_dsa_attempts_as_children() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_rx, endpoint) = receiver(dir.path(), &out);
    // D1 answers after 1.5 s, H1 at once: a read that goes to D1 first is
    // hedged to H1 after the floor and H1 wins. No probes, positions or
    // ejection, so D1 stays a target.
    let (_d1, p1) = testdsa("D1", 1500);
    let (_h1, p2) = testdsa("H1", 0);
    let block = |n: &str, p: u16| {
        Dsa::new(n, p)
            .prefix(KPREFIX)
            .flags("load-share")
            .load_share_group("G")
    };
    let root = Knowledge::new()
        .dsa(block("D1", p1))
        .dsa(block("H1", p2))
        .write(dir.path());
    let r = Router::start_with(
        &root,
        dir.path(),
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-interval",
            "100ms",
            "--hedge-floor",
            "50ms",
            "--max-ejection",
            "0",
            "--probe-interval",
            "0",
            "--csn-interval",
            "0",
        ],
    );
    // Reads rotate between D1 and H1: within a few, one starts on D1.
    let hedged = |_: &Value, kids: &[Value]| {
        kids.len() == 2
            && kids
                .iter()
                .any(|k| k["attributes"]["dsa.attempt"] == "hedge")
    };
    for _ in 0..6 {
        ldapsearch(&r.url, &[]);
    }
    let (root_span, kids) = wait("a hedged search's trace", Duration::from_secs(20), || {
        tree(&out, hedged)
    });
    println!("hedged search: {root_span}\nchildren: {kids:#?}");
    assert_eq!(root_span["service"], "dsa-router");
    assert_eq!(root_span["attributes"]["ldap.result_code"], 0);
    assert_eq!(root_span["attributes"]["dsa.attempts"], 2);
    assert_eq!(root_span["attributes"]["dsa_router.partition"], SUFFIX);
    assert!(
        root_span["events"]
            .as_array()
            .unwrap()
            .contains(&"hedged".into()),
        "{root_span}"
    );
    let first = kids
        .iter()
        .find(|k| k["attributes"]["dsa.attempt"] == "first")
        .unwrap();
    let hedge = kids
        .iter()
        .find(|k| k["attributes"]["dsa.attempt"] == "hedge")
        .unwrap();
    assert_eq!(first["attributes"]["dsa"], "D1");
    assert_eq!(first["attributes"]["dsa.outcome"], "abandoned");
    assert_eq!(hedge["attributes"]["dsa"], "H1");
    assert_eq!(hedge["attributes"]["dsa.outcome"], "answered");
    for k in &kids {
        assert_eq!(k["trace_id"], root_span["trace_id"]);
        assert!(k["start"].as_u64() >= root_span["start"].as_u64(), "{k}");
        assert!(k["end"].as_u64() <= root_span["end"].as_u64(), "{k}");
    }
    assert!(hedge["start"].as_u64() > first["start"].as_u64());

    // A caller's trace context (sampled) is continued: same trace ID, the
    // caller's span as parent.
    let tp = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    ldapsearch(&r.url, &["-e", &control(&tp)]);
    let (cont, _) = wait("the continued trace", Duration::from_secs(20), || {
        tree(&out, |root, _| root["trace_id"] == TRACE_ID)
    });
    assert_eq!(cont["parent_span_id"], PARENT_ID);
    // Not sampled by the caller: no span for that trace.
    let other = "0af7651916cd43dd8448eb211c80319c";
    let n = spans(&out).len();
    ldapsearch(
        &r.url,
        &["-e", &control(&format!("00-{other}-{PARENT_ID}-00"))],
    );
    ldapsearch(&r.url, &[]);
    wait("the last search's spans", Duration::from_secs(20), || {
        (spans(&out).len() > n).then_some(())
    });
    assert!(
        spans(&out).iter().all(|s| s["trace_id"] != other),
        "a trace the caller did not sample was exported"
    );
}

/// The lines a test DSA's `--trace-context-log` holds: (trace ID, parent
/// ID, the rest: flags and tracestate).
fn received(log: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, '-').collect();
            assert_eq!(f.len(), 4, "{l:?}");
            (f[1].to_string(), f[2].to_string(), f[3].to_string())
        })
        .collect()
}

/// Knowledge with one DSA per `(name, prefix, port)`.
fn plain_dsas(dir: &Path, dsas: &[(&str, &str, u16)]) -> std::path::PathBuf {
    Knowledge::new()
        .dsas(
            dsas.iter()
                .map(|(n, prefix, p)| Dsa::new(n, *p).prefix(prefix)),
        )
        .write(dir)
}

/// The router's root DSE lists `oid` among its supported controls (it
/// has read its DSAs' root DSEs).
fn router_advertises(url: &str, oid: &str) -> bool {
    ldapsearch_at(url, "", &["(objectClass=*)", "supportedControl"]).contains(oid)
}

const PLAIN: &str = "o=Plain,c=AU";

#[test]
fn the_trace_context_goes_to_dsas_that_accept_it_with_the_attempt_s_span() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_rx, endpoint) = receiver(dir.path(), &out);
    // T1 accepts the control; N1 does not (both record what they get).
    let t1_log = dir.path().join("t1.log");
    let n1_log = dir.path().join("n1.log");
    let t1_args = [
        "--trace-context",
        "--trace-context-log",
        t1_log.to_str().unwrap(),
    ];
    let (_t1, p1) = testdsa_with("T1", SUFFIX, &t1_args);
    let (_n1, p2) = testdsa_with(
        "N1",
        PLAIN,
        &["--trace-context-log", n1_log.to_str().unwrap()],
    );
    let root = plain_dsas(
        dir.path(),
        &[("T1", KPREFIX, p1), ("N1", "<c AU><o Plain>", p2)],
    );
    let r = Router::start_with(
        &root,
        dir.path(),
        &["--otlp-endpoint", &endpoint, "--otlp-interval", "100ms"],
    );
    wait(
        "the router to read T1's root DSE",
        Duration::from_secs(30),
        || router_advertises(&r.url, OID).then_some(()),
    );

    // Traced by the router: T1 gets the trace, its attempt's span as the
    // parent.
    let answer = ldapsearch_at(&r.url, "cn=served-by,o=Traced,c=AU", &[]);
    assert!(answer.contains("description: T1"), "{answer}");
    let got = received(&t1_log);
    assert_eq!(got.len(), 1, "{got:?}");
    let (trace_id, parent, rest) = &got[0];
    assert_eq!(rest, "01", "sampled, no tracestate");
    let (root_span, kids) = wait("the search's trace", Duration::from_secs(20), || {
        tree(&out, |root, _| root["trace_id"] == trace_id.as_str())
    });
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0]["attributes"]["dsa"], "T1");
    assert_eq!(&kids[0]["span_id"], parent.as_str(), "the attempt's span");
    assert_ne!(&root_span["span_id"], parent.as_str());

    // A caller's context: its trace goes on, the router's attempt span is
    // the parent, its tracestate passed on; its own control replaced.
    let state = "rojo=00f067aa0ba902b7";
    let tp = format!("00-{TRACE_ID}-{PARENT_ID}-01\n{state}");
    ldapsearch_at(&r.url, "cn=served-by,o=Traced,c=AU", &["-e", &control(&tp)]);
    let got = received(&t1_log);
    assert_eq!(got.len(), 2, "one control per request: {got:?}");
    let (trace_id, parent, rest) = &got[1];
    assert_eq!(trace_id, TRACE_ID);
    assert_ne!(
        parent, PARENT_ID,
        "the caller's control was passed as it came"
    );
    assert_eq!(rest, &format!("01\t{state}"));
    let (cont, kids) = wait("the continued trace", Duration::from_secs(20), || {
        tree(&out, |root, kids| {
            root["trace_id"] == TRACE_ID && kids.len() == 1
        })
    });
    assert_eq!(cont["parent_span_id"], PARENT_ID);
    assert_eq!(&kids[0]["span_id"], parent.as_str());

    // N1 does not advertise it: nothing added; a caller's control goes
    // through as the client sent it.
    let answer = ldapsearch_at(&r.url, "cn=served-by,o=Plain,c=AU", &[]);
    assert!(answer.contains("description: N1"), "{answer}");
    assert_eq!(received(&n1_log), vec![], "a control was added for N1");
    let tp = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    ldapsearch_at(&r.url, "cn=served-by,o=Plain,c=AU", &["-e", &control(&tp)]);
    let want = (
        TRACE_ID.to_string(),
        PARENT_ID.to_string(),
        "01".to_string(),
    );
    assert_eq!(received(&n1_log), vec![want]);
}

#[test]
fn a_search_spanning_partitions_has_a_child_span_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_rx, endpoint) = receiver(dir.path(), &out);
    let t1_log = dir.path().join("t1.log");
    let t1_args = [
        "--trace-context",
        "--trace-context-log",
        t1_log.to_str().unwrap(),
    ];
    let (_t1, p1) = testdsa_with("T1", SUFFIX, &t1_args);
    let (_n1, p2) = testdsa_with("N1", PLAIN, &[]);
    let root = plain_dsas(
        dir.path(),
        &[("T1", KPREFIX, p1), ("N1", "<c AU><o Plain>", p2)],
    );
    let r = Router::start_with(
        &root,
        dir.path(),
        &["--otlp-endpoint", &endpoint, "--otlp-interval", "100ms"],
    );
    wait(
        "the router to read T1's root DSE",
        Duration::from_secs(30),
        || router_advertises(&r.url, OID).then_some(()),
    );
    let args = [
        "-x",
        "-LLL",
        "-H",
        &r.url,
        "-b",
        "c=AU",
        "(cn=served-by)",
        "description",
    ];
    let found = run_tool("ldapsearch", &args, None, Duration::from_secs(30));
    assert_eq!(found.code, Some(0), "{}", found.stderr);
    assert!(
        found.stdout.contains("description: T1") && found.stdout.contains("description: N1"),
        "{}",
        found.stdout
    );
    let (root_span, legs) = wait(
        "the spanning search's trace",
        Duration::from_secs(20),
        || {
            tree(&out, |root, kids| {
                root["attributes"]["ldap.dn"] == "c=AU" && kids.len() == 2
            })
        },
    );
    println!("spanning search: {root_span}\nlegs: {legs:#?}");
    assert_eq!(root_span["attributes"]["ldap.result_code"], 0);
    assert_eq!(root_span["attributes"]["ldap.entries"], 2);
    let all = spans(&out);
    let mut names: Vec<String> = Vec::new();
    for leg in &legs {
        assert_eq!(leg["trace_id"], root_span["trace_id"]);
        let dsa: Vec<&Value> = all
            .iter()
            .filter(|s| s["parent_span_id"] == leg["span_id"])
            .collect();
        assert_eq!(dsa.len(), 1, "one DSA attempt under {leg}");
        assert_eq!(leg["attributes"]["ldap.result_code"], 0, "{leg}");
        assert_eq!(leg["attributes"]["ldap.entries"], 1, "{leg}");
        let name = dsa[0]["attributes"]["dsa"].as_str().unwrap().to_string();
        names.push(format!("{} {name}", leg["name"].as_str().unwrap()));
        if name == "T1" {
            // T1's request carried its attempt's span as the parent.
            let got = received(&t1_log);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(&root_span["trace_id"], got[0].0.as_str());
            assert_eq!(&dsa[0]["span_id"], got[0].1.as_str());
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            format!("search partition {PLAIN} N1"),
            format!("search partition {SUFFIX} T1"),
        ]
    );
}

#[test]
fn slapd_s_answers_are_unchanged_when_traced() {
    Slapd::require();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let (_rx, endpoint) = receiver(dir.path(), &out);
    let slapd = Slapd::start(SlapdConfig::seeded("S1", &[SUFFIX]));
    let root = plain_dsas(dir.path(), &[("S1", KPREFIX, slapd.port)]);
    let r = Router::start_with(
        &root,
        dir.path(),
        &["--otlp-endpoint", &endpoint, "--otlp-interval", "100ms"],
    );
    // The router has read slapd's root DSE (its controls show in the
    // router's): slapd does not advertise the trace context control.
    wait(
        "the router to read slapd's root DSE",
        Duration::from_secs(30),
        || router_advertises(&r.url, "2.16.840.1.113730.3.4.2").then_some(()),
    );
    assert!(!router_advertises(&r.url, OID));
    let base = "o=Traced,c=AU";
    let args = |url: &str| {
        let mut a = vec!["-x", "-LLL", "-H"];
        a.push(url);
        a.extend(["-b", base, "(objectClass=*)"]);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let direct_url = format!("ldap://127.0.0.1:{}", slapd.port);
    let run = |url: &str| {
        let a = args(url);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = run_tool("ldapsearch", &a, None, Duration::from_secs(30));
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        o.stdout
    };
    let direct = run(&direct_url);
    let routed = run(&r.url);
    assert!(direct.contains("cn=served-by"), "{direct}");
    assert_eq!(
        routed, direct,
        "slapd answered otherwise through the router"
    );
    let (root_span, kids) = wait("the search's trace", Duration::from_secs(20), || {
        tree(&out, |root, kids| {
            root["attributes"]["ldap.dn"] == base && kids.len() == 1
        })
    });
    assert_eq!(kids[0]["attributes"]["dsa"], "S1");
    assert_eq!(root_span["attributes"]["ldap.result_code"], 0);
}
