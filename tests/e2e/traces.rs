//! OpenTelemetry traces (`--otlp-endpoint`): a router process exports to
//! a real OTLP/HTTP receiver (tests/support/otlp_receiver.py, on the
//! opentelemetry-proto package); a hedged search's trace has the search's
//! span with its two DSA attempts as children, and a search carrying the
//! W3C trace context control continues the caller's trace.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::router::Router;
use crate::support::slapd::{pick_port, run_tool};
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
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait until `f` gives something, at most `within`.
fn wait<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
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
fn receiver(dir: &Path, out: &Path) -> (Proc, String) {
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
fn testdsa(name: &str, delay_ms: u64) -> (Proc, u16) {
    let port = pick_port();
    let child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args([
            "testdsa",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            name,
        ])
        .args(["--suffix", SUFFIX, "--delay-ms", &delay_ms.to_string()])
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

fn spans(out: &Path) -> Vec<Value> {
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
fn control(traceparent: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(traceparent);
    format!("{OID}={b64}")
}

fn ldapsearch(url: &str, extra: &[&str]) {
    let mut args = vec![
        "-x",
        "-LLL",
        "-H",
        url,
        "-b",
        "cn=served-by,o=Traced,c=AU",
        "-s",
        "base",
    ];
    args.extend_from_slice(extra);
    let out = run_tool("ldapsearch", &args, None, Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "ldapsearch {args:?}: {}", out.stderr);
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
        format!(
            "set dsa {n} = {{ prefix = {KPREFIX} address = tcp \"127.0.0.1\" port {p} \
             dsa-flags = load-share load-share-group = \"G\" }};\n"
        )
    };
    let root = dir.path().join("router.dxg");
    std::fs::write(&root, block("D1", p1) + &block("H1", p2)).unwrap();
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
