//! `dsa-bench` over TLS against a router terminating it: LDAPS and
//! StartTLS, persistent connections and churn, with a full handshake per
//! connection or resumed sessions (counted in the JSON output from what
//! rustls reports of each handshake).
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use common::{args, bench, Router};
use std::path::Path;

/// A CA (PEM written to `dir/ca.pem`) and a server certificate for
/// 127.0.0.1 issued by it; returns the router's TLS files.
fn certs(dir: &Path) -> dsa_router::proto::tls::TlsFiles {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "dsa-bench test CA");
    let ca = p.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    dsa_router::proto::tls::TlsFiles {
        cert: c,
        key: k,
        client_ca: None,
        require_client_cert: false,
    }
}

/// Run a short load of `mix` with `extra` arguments; checks it succeeded
/// without errors and returns (handshakes, resumed, ok).
async fn run(url: &str, ca: &Path, mix: &str, extra: &[&str]) -> (u64, u64, u64) {
    // A short run first; on a machine whose other jobs hold the CPUs a
    // handshake per connection can take longer than that, so a run that
    // finished no operation is repeated, longer (state, not time: at
    // least one operation through).
    let mut last = None;
    for secs in ["0.6", "3", "15"] {
        let mut a = args(&["--url", url, "--ca-file", ca.to_str().unwrap()]);
        a.extend(args(&[
            "--connections",
            "2",
            "--duration",
            secs,
            "--warmup",
            "0.2",
        ]));
        a.extend(args(&["--mix", mix, "--users", "20"]));
        a.extend(args(extra));
        let (ok, v) = bench(a).await;
        let done = v["ok"].as_u64().unwrap_or(0) > 0;
        last = Some((ok, v));
        if done {
            break;
        }
    }
    let (ok, v) = last.unwrap();
    assert!(ok, "{extra:?}: {v}");
    assert_eq!(v["errors"], serde_json::json!({}), "{extra:?}: {v}");
    assert_eq!(v["io_errors"], 0, "{extra:?}: {v}");
    let mode = if extra.contains(&"--starttls") {
        "starttls"
    } else {
        "ldaps"
    };
    assert_eq!(v["tls"]["mode"], mode, "{v}");
    let t = &v["tls"];
    (
        t["handshakes"].as_u64().unwrap(),
        t["resumed"].as_u64().unwrap(),
        v["ok"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_speaks_ldaps_and_starttls_with_and_without_resumption() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(Some(certs(dir.path()))).await;
    let ca = dir.path().join("ca.pem");
    let ldaps = format!("ldaps://{}", router.ldaps.unwrap());
    let plain = format!("ldap://{}", router.addr);

    // Persistent connections: one full handshake each, then operations.
    for (url, extra) in [(&ldaps, vec![]), (&plain, vec!["--starttls"])] {
        let (hs, resumed, ok) = run(url, &ca, "eq=80,base=20", &extra).await;
        assert_eq!((hs, resumed), (2, 0), "{extra:?}");
        assert!(ok > 0, "{extra:?}");
    }
    // Churn, a full handshake per connection: one per operation, none resumed.
    for (url, extra) in [
        (&ldaps, vec!["--churn"]),
        (&plain, vec!["--churn", "--starttls"]),
    ] {
        let (hs, resumed, ok) = run(url, &ca, "eq=100", &extra).await;
        assert!(ok > 0, "{extra:?}");
        assert_eq!(hs, ok, "{extra:?}: a handshake per measured operation");
        assert_eq!(resumed, 0, "{extra:?}: resumption is off");
    }
    // Churn resuming sessions: after each connection task's first
    // handshake (in the warm-up), every connection resumes.
    for (url, extra) in [
        (&ldaps, vec!["--churn", "--tls-resume"]),
        (&plain, vec!["--churn", "--starttls", "--tls-resume"]),
    ] {
        let (hs, resumed, ok) = run(url, &ca, "eq=100", &extra).await;
        assert!(ok > 0, "{extra:?}");
        assert_eq!(hs, ok, "{extra:?}");
        assert!(
            resumed + 2 >= hs && resumed > 0,
            "{extra:?}: {resumed} of {hs} resumed"
        );
    }
    router.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_refuses_a_server_certificate_from_another_ca() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(Some(certs(dir.path()))).await;
    let other = tempfile::tempdir().unwrap();
    certs(other.path());
    let url = format!("ldaps://{}", router.ldaps.unwrap());
    let mut a = args(&[
        "--url",
        &url,
        "--ca-file",
        other.path().join("ca.pem").to_str().unwrap(),
    ]);
    a.extend(args(&[
        "--connections",
        "1",
        "--duration",
        "0.3",
        "--warmup",
        "0",
    ]));
    let (ok, v) = bench(a).await;
    assert!(!ok, "{v}");
    assert_eq!(v["ok"], 0, "{v}");
    assert!(v["io_errors"].as_u64().unwrap() > 0, "{v}");
    router.stop().await;
}
