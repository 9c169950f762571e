//! Smoke test of `dsa-bench`: it runs against a real router and test
//! DSA and reports well-formed figures. How fast is not checked here
//! (benchmarks are never timed tests); `bench/compare.sh` measures.
#![allow(clippy::unwrap_used, clippy::panic)]

use dsa_testdsa::{Directory, TestDsa};
use std::process::Command;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_throughput_latency_and_errors_by_code() {
    let mut ldif = dsa_testdsa::seed_ldif("o=DEMOCORP,c=AU", "D1");
    ldif = ldif.replace("ou=People", "ou=people");
    let dsa = TestDsa::start(Directory::from_ldif(&ldif).unwrap(), "127.0.0.1:0", "D1")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("k.dxg");
    std::fs::write(
        &root,
        format!(
            "set dsa D1 = {{ prefix = <c AU><o DEMOCORP> address = tcp \"127.0.0.1\" port {} dsa-flags = load-share }};\n",
            dsa.addr.port()
        ),
    )
    .unwrap();
    let snap = dsa_router::knowledge::load(&root).unwrap();
    let cfg = dsa_router::context::Config {
        access_log: false,
        ..Default::default()
    };
    let router = Arc::new(dsa_router::context::Context::new(cfg, snap, None).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(dsa_router::server::run(listener, router, rx));

    let run = move |mix: &str, users: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_dsa-bench"))
            .args([
                "--url",
                &format!("ldap://{addr}"),
                "--connections",
                "2",
                "--depth",
                "2",
            ])
            .args([
                "--duration",
                "0.5",
                "--warmup",
                "0.2",
                "--mix",
                mix,
                "--users",
                users,
                "--json",
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("bench JSON: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        (out.status.success(), v)
    };
    let (ok, good) = tokio::task::spawn_blocking(move || run("eq=60,base=20,compare=20", "20"))
        .await
        .unwrap();
    assert!(ok, "{good}");
    assert!(good["ok"].as_u64().unwrap() > 0, "{good}");
    assert!(good["ops_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(good["errors"], serde_json::json!({}), "{good}");
    let l = &good["latency_ms"];
    assert!(l["p50"].as_f64().unwrap() <= l["p99"].as_f64().unwrap());
    assert!(l["p99"].as_f64().unwrap() <= l["p999"].as_f64().unwrap());
    // Users that do not exist: base searches fail with noSuchObject (32),
    // reported by code and never counted as throughput.
    let (ok, bad) = tokio::task::spawn_blocking(move || run("base=100", "5000"))
        .await
        .unwrap();
    let errors = bad["errors"]["32"].as_u64().unwrap_or(0);
    assert!(errors > 0, "{bad}");
    assert!(
        bad["ok"].as_u64().unwrap() < errors,
        "{bad}: most users do not exist"
    );
    let _ = ok;
    let _ = tx.send(true);
    let _ = server.await;
}
