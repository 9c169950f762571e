//! Smoke test of `dsa-bench`: it runs against a real router and test
//! DSA and reports well-formed figures. How fast is not checked here
//! (benchmarks are never timed tests); `bench/compare.sh` measures.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use common::{args, bench, Router};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_throughput_latency_and_errors_by_code() {
    let router = Router::start(None).await;
    let url = format!("ldap://{}", router.addr);
    let run = |mix: &str, users: &str| {
        let mut a = args(&["--url", &url, "--connections", "2", "--depth", "2"]);
        a.extend(args(&[
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--mix",
            mix,
        ]));
        a.extend(args(&["--users", users]));
        bench(a)
    };
    let (ok, good) = run("eq=60,base=20,compare=20", "20").await;
    assert!(ok, "{good}");
    assert!(good["ok"].as_u64().unwrap() > 0, "{good}");
    assert!(good["ops_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(good["errors"], serde_json::json!({}), "{good}");
    assert_eq!(good["tls"]["mode"], "none", "{good}");
    let l = &good["latency_ms"];
    assert!(l["p50"].as_f64().unwrap() <= l["p99"].as_f64().unwrap());
    assert!(l["p99"].as_f64().unwrap() <= l["p999"].as_f64().unwrap());
    // Users that do not exist: base searches fail with noSuchObject (32),
    // reported by code and never counted as throughput.
    let (_, bad) = run("base=100", "5000").await;
    let errors = bad["errors"]["32"].as_u64().unwrap_or(0);
    assert!(errors > 0, "{bad}");
    assert!(
        bad["ok"].as_u64().unwrap() < errors,
        "{bad}: most users do not exist"
    );
    router.stop().await;
}
