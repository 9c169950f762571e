//! `dsa-router demo`: the seed's setup on loopback, needing nothing but the
//! binary. It starts an in-memory test DSA at the address of every DSA in
//! the built-in `knowledge/demo/` knowledge, loaded with generated data, and
//! the router R1 in front of them, then prints commands to try.
//!
//! Only with the `dev-tools` feature (on by default): it needs the test DSA
//! crate, `dsa-testdsa`, which the production build leaves out.

use crate::context::{Config, Context};
use crate::knowledge::{self, Memory, Snapshot};
use dsa_testdsa::{seed_ldif, Directory, TestDsa};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::watch;

const FILES: &[(&str, &str)] = &[
    (
        "knowledge/demo/router.dxg",
        include_str!("../knowledge/demo/router.dxg"),
    ),
    ("knowledge/R1.dxc", include_str!("../knowledge/R1.dxc")),
    ("knowledge/D1.dxc", include_str!("../knowledge/D1.dxc")),
    ("knowledge/H1.dxc", include_str!("../knowledge/H1.dxc")),
    ("knowledge/H2.dxc", include_str!("../knowledge/H2.dxc")),
    ("knowledge/D2.dxc", include_str!("../knowledge/D2.dxc")),
    ("knowledge/C1.dxc", include_str!("../knowledge/C1.dxc")),
    ("knowledge/C2.dxc", include_str!("../knowledge/C2.dxc")),
];

/// The built-in demo knowledge.
pub fn demo_knowledge() -> Result<Snapshot, knowledge::LoadError> {
    let mut m = Memory::default();
    for (p, t) in FILES {
        m = m.with(p, t);
    }
    knowledge::load_from(Path::new("knowledge/demo/router.dxg"), &m)
}

/// Start a test DSA for every DSA of `snap` except `router`, at its first
/// address (port 0 addresses are not rewritten: tests use real knowledge).
pub async fn start_test_dsas(
    snap: &Snapshot,
    router: Option<&str>,
) -> Result<Vec<TestDsa>, String> {
    let mut out = Vec::new();
    for d in &snap.dsas {
        if router.is_some_and(|r| r.eq_ignore_ascii_case(&d.name)) {
            continue;
        }
        let addr = crate::upstream::pool::socket_addrs(d)
            .into_iter()
            .next()
            .ok_or_else(|| format!("DSA {} has no address", d.name))?;
        let dir = Directory::from_ldif(&seed_ldif(&d.prefix.to_string(), &d.name))?;
        let dsa = TestDsa::start(dir, &addr, &d.name)
            .await
            .map_err(|e| format!("cannot start test DSA {} on {addr}: {e}", d.name))?;
        out.push(dsa);
    }
    Ok(out)
}

/// The demo's knowledge files written under `dir` (so that `explain`,
/// `check` and `ctl reload` find them from any directory); the root.
fn write_knowledge(dir: &Path) -> Result<std::path::PathBuf, String> {
    for (p, t) in FILES {
        let path = dir.join(p);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, t).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(dir.join(FILES[0].0))
}

/// How to run this binary again, as a shell command prefix.
fn me() -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "dsa-router".into());
    if exe.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        format!("'{}'", exe.replace('\'', "'\\''"))
    } else {
        exe
    }
}

/// Run the demo until Ctrl-C.
pub async fn run(cfg: Config, listen: Option<String>) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("dsa-router-demo-{}", std::process::id()));
    let root = write_knowledge(&dir)?;
    let snap = knowledge::load(&root).map_err(|e| e.to_string())?;
    println!(
        "starting {} test DSAs and the router (knowledge in {})...",
        snap.dsas.len().saturating_sub(1),
        dir.display()
    );
    let dsas = start_test_dsas(&snap, Some("R1")).await?;
    let r1 = snap
        .dsa_index("R1")
        .map(|i| &snap.dsas[i])
        .ok_or("no R1 in demo knowledge")?;
    let listen = listen.unwrap_or_else(|| {
        crate::upstream::pool::socket_addrs(r1)
            .into_iter()
            .next()
            .unwrap_or_else(|| "127.0.0.1:3389".into())
    });
    let router = Arc::new(Context::new(cfg, snap, Some("R1".into())).map_err(|e| e.to_string())?);
    let listener = crate::server::listen(&listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    for d in &dsas {
        println!("test DSA {:<3} listening on {}", d.name, d.addr);
    }
    let url = format!("ldap://{addr}");
    println!("router R1 listening on {url}\n");
    println!("Try (reads share GROUP1: run the first one twice to see D1 and H1 take turns):");
    println!("  ldapsearch -x -H {url} -b \"cn=served-by,o=DEMOCORP,c=AU\" -s base description");
    println!("  ldapsearch -x -H {url} -b \"o=DEMOCORP,c=AU\" \"(uid=alice)\" cn mail");
    println!("  ldapsearch -x -H {url} -b \"o=CUSTOMER,c=AU\" -s one dn");
    println!("  ldapsearch -x -H {url} -b \"\" -s base namingContexts supportedLDAPVersion");
    println!("  ldapcompare -x -H {url} \"uid=alice,ou=People,o=DEMOCORP,c=AU\" \"mail:alice@example.com\"");
    println!("  ldapwhoami -x -H {url} -D \"uid=alice,ou=People,o=DEMOCORP,c=AU\" -w alicepw");
    let me = me();
    println!(
        "  {me} explain {} \"o=DEMOCORP,c=AU\" --name R1",
        root.display()
    );
    println!("  {me} ctl status");
    println!(
        "  cargo run --release --manifest-path {}/Cargo.toml -p dsa-bench -- --url {url} --users 20 --duration 5   # load: 20 users here",
        env!("CARGO_MANIFEST_DIR")
    );
    println!("\nThe access log is off in the demo (serve writes one line per operation).");
    println!("Ctrl-C stops everything.");
    let (tx, rx) = watch::channel(false);
    match tokio::net::TcpListener::bind(crate::admin::ctl::DEFAULT_ADMIN).await {
        Ok(admin) => {
            println!(
                "admin API and status page on http://{}/\n",
                crate::admin::ctl::DEFAULT_ADMIN
            );
            tokio::spawn(crate::admin::run(
                admin,
                crate::admin::ctl::DEFAULT_ADMIN.to_string(),
                router.clone(),
                None,
                rx.clone(),
            ));
        }
        Err(e) => tracing::warn!("admin API not started: {e}"),
    }
    let server = tokio::spawn(crate::server::run(listener, router, rx));
    let _ = tokio::signal::ctrl_c().await;
    let _ = tx.send(true);
    let _ = server.await;
    drop(dsas);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
