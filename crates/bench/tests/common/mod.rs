//! A router in process in front of a test DSA, for the `dsa-bench` tests,
//! and a way to run the `dsa-bench` binary and read its JSON.
#![allow(clippy::unwrap_used, clippy::panic, dead_code)]

use dsa_testdsa::{Directory, TestDsa};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

/// A router serving `o=DEMOCORP,c=AU` (users under `ou=people`, password
/// `pw`) from a test DSA; `ldaps` is its LDAPS address when TLS is given.
pub struct Router {
    pub addr: SocketAddr,
    pub ldaps: Option<SocketAddr>,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    _dsa: TestDsa,
    _dir: tempfile::TempDir,
}

impl Router {
    pub async fn start(tls: Option<dsa_router::proto::tls::TlsFiles>) -> Router {
        let ldif =
            dsa_testdsa::seed_ldif("o=DEMOCORP,c=AU", "D1").replace("ou=People", "ou=people");
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
        let snap = dsa_router::directory::knowledge::load(&root).unwrap();
        let with_tls = tls.is_some();
        let cfg = dsa_router::service::context::Config {
            access_log: false,
            tls,
            ..Default::default()
        };
        let router = Arc::new(dsa_router::service::context::Context::new(cfg, snap, None).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ldaps_l = if with_tls {
            Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
        } else {
            None
        };
        let ldaps = ldaps_l.as_ref().map(|l| l.local_addr().unwrap());
        let (stop, rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(dsa_router::frontend::server::run_with_ldaps(
            listener, ldaps_l, router, rx,
        ));
        Router {
            addr,
            ldaps,
            stop,
            server,
            _dsa: dsa,
            _dir: dir,
        }
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
    }
}

/// Run `dsa-bench ARGS --json` (off the async runtime): its exit status
/// and JSON output.
pub async fn bench(args: Vec<String>) -> (bool, serde_json::Value) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_dsa-bench"))
            .args(&args)
            .arg("--json")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("bench JSON: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        (out.status.success(), v)
    })
    .await
    .unwrap()
}

/// `args` as owned strings.
pub fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}
