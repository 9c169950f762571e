//! `dsa-router ctl`: the admin API for people (a table) and scripts
//! (`--json`); exit status non-zero on any failure. `status` and `ready`
//! read over TCP (`--admin`); state changes go through the control socket
//! (`--control-socket`, [`super::socket`]: root and the router's user),
//! or over TCP with `--token`.

use super::status::Status;
use crate::base::error::Error;
use std::process::ExitCode;

/// Default admin address of `serve` and `ctl`.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:8389";

#[derive(clap::Args, Debug)]
pub struct CtlArgs {
    /// Admin API address of the router (before or after the command):
    /// `status` reads it; with --token the other commands use it too.
    #[arg(long, default_value = DEFAULT_ADMIN, global = true)]
    pub admin: String,
    /// The router's control socket, for every command but `status`
    /// (default: $RUNTIME_DIRECTORY/control.sock, else
    /// /run/dsa-router/control.sock when that directory exists, else
    /// $XDG_RUNTIME_DIR/dsa-router/control.sock or
    /// /tmp/dsa-router-UID/control.sock; `serve --control-socket`).
    #[arg(long, value_name = "PATH", global = true)]
    pub control_socket: Option<std::path::PathBuf>,
    /// Bearer token (default: $DSA_ROUTER_ADMIN_TOKEN): state changes go
    /// to --admin with it instead of the control socket.
    #[arg(
        long,
        env = "DSA_ROUTER_ADMIN_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    /// Print the API's JSON.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum CtlCmd {
    /// Partitions and DSAs: state, in-flight, served, errors.
    Status,
    /// Whether the router is ready to route (`GET /readyz` on --admin):
    /// exit 0 when it is, 1 naming each partition with no DSA up (or when
    /// the router cannot be reached). For health checks where no HTTP
    /// client is at hand (the container image).
    Ready,
    /// Take a DSA out of service now.
    Disable { name: String },
    /// Drain a DSA: it takes no new operations (reads go to the rest of
    /// its group, writes to the next DSA of the write order) while those
    /// in flight complete; `enable` puts it back.
    Drain { name: String },
    /// Put a DSA back in service.
    Enable { name: String },
    /// Reload knowledge. A reload that would leave no DSA, or take away
    /// every DSA of a partition that is in use (an empty or cut-short
    /// file), is refused and the old knowledge keeps serving.
    Reload {
        /// Apply such a reload anyway.
        #[arg(long)]
        force: bool,
    },
    /// Reopen the access log's file, as on SIGUSR1: after logrotate moved
    /// it, the next lines go to a new file of that name.
    ReopenLogs,
    /// Drain the router and exit, as on SIGTERM: no new connections,
    /// operations in flight finish (`--drain-timeout`), each client
    /// connection closes between operations.
    Shutdown,
    /// Hot upgrade: start the binary at the router's own path (as at its
    /// start: install the new version there first) with the same
    /// arguments, and hand it the listening sockets and every plain-LDAP
    /// client session between operations; the rest drain as on shutdown.
    /// Fails, and the router keeps serving, when the new one cannot load
    /// its knowledge.
    Upgrade,
}

fn call(args: &CtlArgs, method: &str, path: &str) -> crate::base::error::Result<serde_json::Value> {
    // An upgrade waits for the new process to load its knowledge.
    let secs = if path.starts_with("/upgrade") {
        120
    } else {
        10
    };
    let token = args.token.as_deref().filter(|t| !t.is_empty());
    if method == "GET" || token.is_some() {
        return fetch_within(&args.admin, token, method, path, secs);
    }
    let socket = args
        .control_socket
        .clone()
        .unwrap_or_else(super::socket::default_path);
    let (code, body) = super::ctl_socket::call(&socket, method, path, secs)
        .map_err(|e| Error::config(e.to_string()))?;
    if code != 200 {
        let msg = body.get("error").and_then(|e| e.as_str()).unwrap_or("");
        return Err(Error::config(format!(
            "{method} {path}: HTTP {code}: {msg}"
        )));
    }
    Ok(body)
}

/// `method path` on the admin API at `admin`, its JSON answer.
pub(crate) fn fetch(
    admin: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
) -> crate::base::error::Result<serde_json::Value> {
    fetch_within(admin, token, method, path, 10)
}

/// [`fetch`] within `secs` seconds.
fn fetch_within(
    admin: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    secs: u64,
) -> crate::base::error::Result<serde_json::Value> {
    let url = format!("http://{admin}{path}");
    let agent = ureq::AgentBuilder::new()
        .timeout(std::time::Duration::from_secs(secs))
        .build();
    let mut req = agent.request(method, &url);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            let body: serde_json::Value = r.into_json().unwrap_or_default();
            let msg = body
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("")
                .to_string();
            return Err(Error::config(format!(
                "{method} {path}: HTTP {code}: {msg}"
            )));
        }
        Err(e) => {
            return Err(Error::config(format!(
                "cannot reach the admin API at {admin}: {e}"
            )))
        }
    };
    resp.into_json()
        .map_err(|e| Error::config(format!("bad JSON from {url}: {e}")))
}

/// A DSA name as one URL path segment: everything but unreserved
/// characters percent-encoded (`../reload#` stays a name).
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn run(args: &CtlArgs) -> ExitCode {
    let (method, path) = match &args.cmd {
        CtlCmd::Status => ("GET", "/status".to_string()),
        CtlCmd::Ready => ("GET", "/readyz".to_string()),
        CtlCmd::Disable { name } => ("POST", format!("/dsas/{}/disable", escape(name))),
        CtlCmd::Drain { name } => ("POST", format!("/dsas/{}/drain", escape(name))),
        CtlCmd::Enable { name } => ("POST", format!("/dsas/{}/enable", escape(name))),
        CtlCmd::Reload { force: false } => ("POST", "/reload".to_string()),
        CtlCmd::Reload { force: true } => ("POST", "/reload?force=true".to_string()),
        CtlCmd::ReopenLogs => ("POST", "/reopen-logs".to_string()),
        CtlCmd::Shutdown => ("POST", "/shutdown".to_string()),
        CtlCmd::Upgrade => ("POST", "/upgrade".to_string()),
    };
    let v = match call(args, method, &path) {
        Ok(v) => v,
        Err(e) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"ok": false, "error": e.to_string()})
                );
            }
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    match &args.cmd {
        CtlCmd::Status => match serde_json::from_value::<Status>(v) {
            Ok(s) => print!("{}", render(&s)),
            Err(e) => {
                eprintln!("error: unexpected status format: {e}");
                return ExitCode::from(1);
            }
        },
        CtlCmd::Ready => println!("ready"),
        CtlCmd::Shutdown => println!("draining: the router exits once its clients' operations end"),
        CtlCmd::Upgrade => println!(
            "upgraded: process {} ({}) serves; this one hands over its sessions and exits",
            v.get("pid").and_then(|m| m.as_u64()).unwrap_or(0),
            v.get("binary").and_then(|m| m.as_str()).unwrap_or("?")
        ),
        CtlCmd::Reload { .. } | CtlCmd::ReopenLogs => println!(
            "{}",
            v.get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("reloaded")
        ),
        _ => println!(
            "{}: {} ({} in flight)",
            v.get("dsa").and_then(|m| m.as_str()).unwrap_or("?"),
            v.get("state").and_then(|m| m.as_str()).unwrap_or("?"),
            v.get("in_flight").and_then(|m| m.as_u64()).unwrap_or(0)
        ),
    }
    ExitCode::SUCCESS
}

/// The status table for people.
pub fn render(s: &Status) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "router {} (dsa-router {}), knowledge {}, {} client connection(s)",
        s.router.as_deref().unwrap_or("-"),
        s.version,
        s.knowledge,
        s.client_connections
    );
    if s.draining {
        let _ = writeln!(
            out,
            "DRAINING: no new connections; exits once operations in flight end"
        );
    }
    let u = &s.utilization;
    let _ = writeln!(
        out,
        "machine (or container) utilization over {:.0} s: CPU {:.1}% (threshold {}), memory {:.1}% (threshold {})",
        u.window_seconds,
        u.cpu_avg_percent,
        if u.cpu_threshold_percent == 0 {
            "off".to_string()
        } else {
            format!("{}%", u.cpu_threshold_percent)
        },
        u.memory_avg_percent,
        if u.memory_threshold_percent == 0 {
            "off".to_string()
        } else {
            format!("{}%", u.memory_threshold_percent)
        },
    );
    for w in &s.prefix_warnings {
        let _ = writeln!(out, "WARNING: {}", w.message);
    }
    for w in &s.warnings {
        let _ = writeln!(out, "WARNING: {w}");
    }
    if let Some(r) = &s.last_reload {
        let _ = writeln!(
            out,
            "last reload: {} {}",
            if r.ok { "ok:" } else { "FAILED:" },
            r.message.lines().next().unwrap_or("")
        );
    }
    for p in &s.partitions {
        let _ = writeln!(out, "\npartition {}", p.prefix);
        let _ = writeln!(
            out,
            "  {:<8} {:<10} {:<9} {:>9} {:>9} {:>7} {:>9}  REASON",
            "DSA", "GROUP", "STATE", "IN-FLIGHT", "SERVED", "ERRORS", "PROBE-MS"
        );
        for d in &p.dsas {
            let _ = writeln!(
                out,
                "  {:<8} {:<10} {:<9} {:>9} {:>9} {:>7} {:>9}  {}",
                d.name,
                d.group.as_deref().unwrap_or("-"),
                d.state,
                d.in_flight,
                d.served,
                d.errors,
                d.probe_latency_ms
                    .map(|l| format!("{l:.2}"))
                    .unwrap_or_else(|| "-".into()),
                d.reason
            );
        }
    }
    clients(&s.clients, &mut out);
    out
}

/// The client sessions' table (the first listed of the total).
fn clients(c: &crate::observe::clients::Listing, out: &mut String) {
    use std::fmt::Write;
    if c.total == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "\nclient sessions: {} (the {} oldest listed)",
        c.total,
        c.listed.len()
    );
    let _ = writeln!(
        out,
        "  {:<40} {:<5} {:<8} {:<20}  IDENTITY",
        "ADDRESS", "TLS", "HANDED", "SINCE (UTC)"
    );
    for s in &c.listed {
        let _ = writeln!(
            out,
            "  {:<40} {:<5} {:<8} {:<20}  {}",
            s.address,
            if s.tls { "yes" } else { "no" },
            if s.handed_over { "yes" } else { "no" },
            utc(s.since_unix),
            crate::base::logsafe::esc(&s.identity)
        );
    }
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS`.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = crate::directory::replication::csn::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod utc_tests {
    #[test]
    fn unix_seconds_read_as_utc() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(super::utc(1_796_392_380), "2026-12-04 13:53:00");
    }
}

#[cfg(test)]
mod escape_tests {
    #[test]
    fn names_are_one_path_segment() {
        let rows = [
            ("D1", "D1"),
            ("../reload#", "%2E%2E%2Freload%23"),
            ("a b/c?d", "a%20b%2Fc%3Fd"),
            ("dsa-1_x~", "dsa-1_x~"),
            ("é", "%C3%A9"),
        ];
        for (name, want) in rows {
            assert_eq!(super::escape(name), want, "{name}");
        }
    }
}
