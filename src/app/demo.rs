//! `dsa-router demo`: the example setup of `knowledge/` on loopback, needing nothing but the
//! binary. It starts an in-memory test DSA at the address of every DSA in
//! the built-in `knowledge/demo/` knowledge, loaded with generated data, and
//! the router R1 in front of them, then prints commands to try.
//!
//! Only with the `dev-tools` feature (on by default): it needs the test DSA
//! crate, `dsa-testdsa`, which the production build leaves out.

use crate::directory::knowledge::{self, Memory, Snapshot};
use crate::service::context::{Config, Context};
use dsa_testdsa::{seed_ldif, Directory, TestDsa};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::watch;

const FILES: &[(&str, &str)] = &[
    (
        "knowledge/demo/router.dxg",
        include_str!("../../knowledge/demo/router.dxg"),
    ),
    ("knowledge/R1.dxc", include_str!("../../knowledge/R1.dxc")),
    ("knowledge/D1.dxc", include_str!("../../knowledge/D1.dxc")),
    ("knowledge/H1.dxc", include_str!("../../knowledge/H1.dxc")),
    ("knowledge/H2.dxc", include_str!("../../knowledge/H2.dxc")),
    ("knowledge/D2.dxc", include_str!("../../knowledge/D2.dxc")),
    ("knowledge/C1.dxc", include_str!("../../knowledge/C1.dxc")),
    ("knowledge/C2.dxc", include_str!("../../knowledge/C2.dxc")),
];

/// Why the demo (or its test DSAs) could not start.
#[derive(Debug)]
pub enum DemoError {
    /// A DSA of the knowledge has no address to start a test DSA at.
    NoAddress(String),
    /// The generated data did not load (the test DSA's message).
    Seed(String),
    /// A test DSA could not listen.
    Start {
        dsa: String,
        addr: String,
        error: std::io::Error,
    },
    /// A directory for the knowledge files could not be made.
    Create {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// A knowledge file could not be written.
    Write {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The knowledge did not load.
    Knowledge(knowledge::LoadError),
    /// The demo knowledge has no router R1.
    NoRouter,
    /// The router could not be set up.
    Router(crate::base::error::Error),
    /// The router could not listen on this address.
    Listen { addr: String, error: std::io::Error },
    /// The listening socket has no address.
    Local(std::io::Error),
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::NoAddress(dsa) => write!(f, "DSA {dsa} has no address"),
            DemoError::Seed(e) => f.write_str(e),
            DemoError::Start { dsa, addr, error } => {
                write!(f, "cannot start test DSA {dsa} on {addr}: {error}")
            }
            DemoError::Create { path, error } => {
                write!(f, "cannot create {}: {error}", path.display())
            }
            DemoError::Write { path, error } => {
                write!(f, "cannot write {}: {error}", path.display())
            }
            DemoError::Knowledge(e) => write!(f, "{e}"),
            DemoError::NoRouter => f.write_str("no R1 in demo knowledge"),
            DemoError::Router(e) => write!(f, "{e}"),
            DemoError::Listen { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            DemoError::Local(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DemoError {}

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
) -> Result<Vec<TestDsa>, DemoError> {
    let mut out = Vec::new();
    for d in &snap.dsas {
        if router.is_some_and(|r| r.eq_ignore_ascii_case(&d.name)) {
            continue;
        }
        let addr = crate::backend::upstream::pool::socket_addrs(d)
            .into_iter()
            .next()
            .ok_or_else(|| DemoError::NoAddress(d.name.to_string()))?;
        let dir = Directory::from_ldif(&seed_ldif(&d.prefix.to_string(), &d.name))
            .map_err(DemoError::Seed)?;
        let dsa = TestDsa::start(dir, &addr, &d.name)
            .await
            .map_err(|error| DemoError::Start {
                dsa: d.name.to_string(),
                addr: addr.clone(),
                error,
            })?;
        out.push(dsa);
    }
    Ok(out)
}

/// The demo's knowledge files written under `dir` (so that `explain`,
/// `check` and `ctl reload` find them from any directory); the root.
fn write_knowledge(dir: &Path) -> Result<std::path::PathBuf, DemoError> {
    for (p, t) in FILES {
        let path = dir.join(p);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|error| DemoError::Create {
                path: parent.to_path_buf(),
                error,
            })?;
        }
        std::fs::write(&path, t).map_err(|error| DemoError::Write {
            path: path.clone(),
            error,
        })?;
    }
    Ok(dir.join(FILES[0].0))
}

/// `s` as one shell word: quoted when it holds a space or a quote.
fn shell_word(s: &str) -> String {
    if s.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        format!("'{}'", s.replace('\'', "'\\''"))
    } else {
        s.to_string()
    }
}

/// How to run this binary again, as a shell command prefix.
fn me() -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "dsa-router".into());
    shell_word(&exe)
}

/// The command that runs the load generator `dsa-bench` with `args`, for a
/// binary at `exe` with the search path `path` ($PATH). Decided at run
/// time, never from where the binary was compiled (a copied or installed
/// binary has no source tree there):
/// * `dsa-bench` on the search path: `dsa-bench ARGS`;
/// * this binary in a cargo target directory (`target/PROFILE/`, or
///   `target/TRIPLE/PROFILE/`, beside `CACHEDIR.TAG`) of a clone, the
///   directory holding `crates/bench`: `cargo run --release --manifest-path
///   CLONE/Cargo.toml -p dsa-bench -- ARGS`, which works from any directory;
/// * else (a target directory elsewhere, or no clone at all): the `cargo
///   run` line to give in a clone of dsa-router.
fn bench_command(exe: &Path, path: Option<&std::ffi::OsStr>, args: &str) -> String {
    let on_path = path.is_some_and(|p| {
        std::env::split_paths(p).any(|d| {
            let f = d.join("dsa-bench");
            f.is_file() && is_executable(&f)
        })
    });
    if on_path {
        return format!("dsa-bench {args}");
    }
    let clone = exe
        .ancestors()
        .skip(1)
        .take(3)
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .and_then(Path::parent)
        .filter(|root| root.join("crates/bench/Cargo.toml").is_file());
    match clone {
        Some(root) => format!(
            "cargo run --release --manifest-path {} -p dsa-bench -- {args}",
            shell_word(&root.join("Cargo.toml").display().to_string())
        ),
        None => format!("cargo run --release -p dsa-bench -- {args}   # in a clone of dsa-router"),
    }
}

/// Whether `f` may be executed by someone (any x bit).
fn is_executable(f: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(f).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

/// Run the demo until Ctrl-C.
pub async fn run(cfg: Config, listen: Option<String>) -> Result<(), DemoError> {
    let dir = std::env::temp_dir().join(format!("dsa-router-demo-{}", std::process::id()));
    let root = write_knowledge(&dir)?;
    let snap = knowledge::load(&root).map_err(DemoError::Knowledge)?;
    println!(
        "starting {} test DSAs and the router (knowledge in {})...",
        snap.dsas.len().saturating_sub(1),
        dir.display()
    );
    let dsas = start_test_dsas(&snap, Some("R1")).await?;
    let r1 = snap
        .dsa_index("R1")
        .map(|i| &snap.dsas[i])
        .ok_or(DemoError::NoRouter)?;
    let listen = listen.unwrap_or_else(|| {
        crate::backend::upstream::pool::socket_addrs(r1)
            .into_iter()
            .next()
            .unwrap_or_else(|| "127.0.0.1:3389".into())
    });
    let router = Arc::new(Context::new(cfg, snap, Some("R1".into())).map_err(DemoError::Router)?);
    let listener = crate::frontend::server::listen(&listen)
        .await
        .map_err(|error| DemoError::Listen {
            addr: listen.clone(),
            error,
        })?;
    let addr = listener.local_addr().map_err(DemoError::Local)?;
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
    let exe = std::env::current_exe().unwrap_or_default();
    let bench_args = format!("--url {url} --users 20 --duration 5");
    println!(
        "  {}   # load: 20 users",
        bench_command(&exe, std::env::var_os("PATH").as_deref(), &bench_args)
    );
    println!("\nThe access log is off in the demo (serve writes one line per operation).");
    println!("Ctrl-C stops everything.");
    let (tx, rx) = watch::channel(false);
    match tokio::net::TcpListener::bind(crate::app::admin::ctl::DEFAULT_ADMIN).await {
        Ok(admin) => {
            println!(
                "admin API and status page on http://{}/\n",
                crate::app::admin::ctl::DEFAULT_ADMIN
            );
            tokio::spawn(crate::app::admin::run(
                admin,
                crate::app::admin::ctl::DEFAULT_ADMIN.to_string(),
                router.clone(),
                crate::app::admin::Access::default(),
                rx.clone(),
            ));
        }
        Err(e) => tracing::warn!("admin API not started: {e}"),
    }
    // `ctl drain D2` and the like: the control socket at its default.
    let control = crate::app::admin::socket::Setting::from_flag(None);
    if let Err(e) = crate::app::admin::start_control(
        &control,
        false,
        router.clone(),
        Default::default(),
        rx.clone(),
    )
    .await
    {
        tracing::warn!("no control socket: {e}");
    }
    let server = tokio::spawn(crate::frontend::server::run(listener, router, rx));
    let _ = tokio::signal::ctrl_c().await;
    let _ = tx.send(true);
    let _ = server.await;
    drop(dsas);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::bench_command;
    use std::ffi::OsStr;
    use std::path::Path;

    fn touch(p: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The `dsa-bench` line is decided from where the binary runs, never
    /// from where it was compiled: on PATH, in a clone's target directory,
    /// elsewhere.
    #[test]
    fn bench_command_from_where_the_binary_runs() {
        let t = tempfile::tempdir().unwrap();
        let args = "--url ldap://127.0.0.1:3389 --users 20";
        // A clone somewhere else than the one this test was compiled in.
        let clone = t.path().join("moved clone");
        touch(&clone.join("Cargo.toml"), 0o644);
        touch(&clone.join("crates/bench/Cargo.toml"), 0o644);
        touch(&clone.join("target/CACHEDIR.TAG"), 0o644);
        let exe = clone.join("target/release/dsa-router");
        touch(&exe, 0o755);
        let manifest = clone.join("Cargo.toml").display().to_string();
        assert_eq!(
            bench_command(&exe, None, args),
            format!("cargo run --release --manifest-path '{manifest}' -p dsa-bench -- {args}")
        );
        // Cross builds: target/TRIPLE/PROFILE.
        let cross = clone.join("target/x86_64-unknown-linux-gnu/release/dsa-router");
        touch(&cross, 0o755);
        assert!(bench_command(&cross, None, args).contains(&manifest));

        // Installed: no target directory, no clone; the compile-time
        // directory is never named.
        let bin = t.path().join("usr/bin");
        touch(&bin.join("dsa-router"), 0o755);
        let line = bench_command(
            &bin.join("dsa-router"),
            Some(OsStr::new("/nonexistent")),
            args,
        );
        assert_eq!(
            line,
            format!("cargo run --release -p dsa-bench -- {args}   # in a clone of dsa-router")
        );
        assert!(!line.contains(env!("CARGO_MANIFEST_DIR")));
        // A target directory with no clone around it (CARGO_TARGET_DIR).
        touch(&t.path().join("tgt/CACHEDIR.TAG"), 0o644);
        touch(&t.path().join("tgt/release/dsa-router"), 0o755);
        assert_eq!(
            bench_command(&t.path().join("tgt/release/dsa-router"), None, args),
            line
        );

        // dsa-bench on PATH wins, also over a clone; a file without an x
        // bit is not a command.
        let tools = t.path().join("tools");
        touch(&tools.join("dsa-bench"), 0o644);
        let path = std::env::join_paths([Path::new("/nonexistent"), &tools]).unwrap();
        assert!(bench_command(&exe, Some(&path), args).starts_with("cargo run"));
        touch(&tools.join("dsa-bench"), 0o755);
        assert_eq!(
            bench_command(&exe, Some(&path), args),
            format!("dsa-bench {args}")
        );
    }
}
