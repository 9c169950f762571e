//! `serve` and `demo`: the flags ([`LimitArgs`], [`TlsArgs`],
//! [`ServeArgs`]; `flags`: the clap forms of other layers' settings;
//! `values`: durations, sizes and counts; [`groups`]: the help headings;
//! [`naming`]: settings named in errors by where they came from),
//! the settings file ([`settings`]), the
//! startup sequence (`startup`: knowledge, context, workers, listeners),
//! and what reaches a running router from outside (`signals`: signals and
//! `--watch`).

mod flags;
pub mod groups;
mod limits;
pub mod naming;
pub mod settings;
mod signals;
mod startup;
mod tls;
mod traces;
mod values;

pub use flags::{
    AccessLogFormat, AffinityScope, FailedBindArgs, FanoutPolicy, OwnConnection, PolicyArgs,
    ReplicationArgs,
};
pub use limits::LimitArgs;
pub use signals::reload;
pub use tls::TlsArgs;
pub use traces::TraceArgs;

use crate::base::error::{Error, Result};
use crate::service::context::Config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The settings file (TOML, tables named like these headings: see
    /// `dsa-router config --defaults`); flags given here override it.
    #[arg(long, value_name = "FILE", help_heading = groups::ROUTER)]
    pub config: Option<PathBuf>,
    /// The root knowledge file.
    #[arg(long, help_heading = groups::ROUTER)]
    pub knowledge: PathBuf,
    /// The router's own DSA block: never a target; its address is the
    /// default listen address.
    #[arg(long, help_heading = groups::ROUTER)]
    pub name: Option<String>,
    /// Reload when a knowledge, settings or TLS file changes (polled every
    /// second).
    #[arg(long, help_heading = groups::ROUTER)]
    pub watch: bool,
    /// Worker threads, each a single-threaded runtime serving its share of
    /// the clients on DSA connections of its own. 0 (the default): one per
    /// CPU this process may use (cgroup quota aware); 1 for the smallest
    /// footprint.
    #[arg(long, default_value_t = 0, help_heading = groups::ROUTER)]
    pub threads: usize,
    /// Pack clients onto as few of the worker threads as their CPU use
    /// needs: one more worker is taken into use when a worker in use was
    /// busier than PERCENT of a CPU for half a second, and the last one is
    /// left when the others could carry its load at half that; sessions
    /// move between workers at their next request. Fewer, busier workers
    /// sleep and wake less often per operation (the cheapest CPU per
    /// operation). 0: every worker takes clients from the start.
    #[arg(long, default_value_t = 60, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100), help_heading = groups::ROUTER)]
    pub spread_above: u8,
    /// Listen address (default: the router's own block's address, else
    /// 127.0.0.1:3389).
    #[arg(long, help_heading = groups::LISTEN)]
    pub listen: Option<String>,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Admin API address (the status page, `/status`, `/metrics`); `none`
    /// turns it off. Read-only without --admin-token; it must then be
    /// loopback (else serve does not start), and it refuses other Host
    /// names and other origins.
    #[arg(long, default_value = crate::app::admin::ctl::DEFAULT_ADMIN, help_heading = groups::ADMIN)]
    pub admin: String,
    /// Bearer token that allows state changes (drain, reload, shutdown,
    /// upgrade...) over --admin (default: $DSA_ROUTER_ADMIN_TOKEN; none or
    /// empty: none over TCP, use `ctl` on this host).
    #[arg(long, env = "DSA_ROUTER_ADMIN_TOKEN", hide_env_values = true, help_heading = groups::ADMIN)]
    pub admin_token: Option<String>,
    /// Bearer token that allows reads only over --admin (`/status`,
    /// `/metrics`, the status page; every state change is refused), for a
    /// monitoring system (default: $DSA_ROUTER_ADMIN_READ_TOKEN). With one,
    /// `/status` and `/metrics` need it or --admin-token, and --admin may
    /// listen off loopback. `/healthz` and `/readyz` need no token.
    #[arg(long, env = "DSA_ROUTER_ADMIN_READ_TOKEN", hide_env_values = true, help_heading = groups::ADMIN)]
    pub admin_read_token: Option<String>,
    /// When `/readyz` (and `ctl ready`) says the router is ready:
    /// `every-partition`, its knowledge is loaded and every partition has
    /// at least one DSA up; `knowledge`, its knowledge is loaded. Never
    /// while it drains.
    #[arg(long, value_enum, default_value = "every-partition", value_name = "WHEN", help_heading = groups::ADMIN)]
    pub ready_when: crate::app::admin::ReadyWhen,
    /// The control socket `ctl` uses: the admin API for root and this
    /// process's user only (the kernel names who connects); `none` turns
    /// it off. Default: $RUNTIME_DIRECTORY/control.sock (systemd's
    /// RuntimeDirectory=), else /run/dsa-router/control.sock when that
    /// directory exists, else in a directory of the user's own, made
    /// mode 0700: $XDG_RUNTIME_DIR/dsa-router/control.sock, else
    /// /tmp/dsa-router-UID/control.sock.
    #[arg(long, value_name = "PATH|none", help_heading = groups::ADMIN)]
    pub control_socket: Option<String>,
    #[command(flatten)]
    pub traces: TraceArgs,
    /// Internal: the hot upgrade's handover socket, given by the router
    /// this one takes over from (`ctl upgrade`).
    #[arg(long, hide = true)]
    pub handover_fd: Option<i32>,
    /// Where the settings came from: the settings file and the command
    /// line ([`settings::expand`] fills it).
    #[arg(skip)]
    pub origins: settings::Origins,
}

/// The log lines to stderr, filtered by `$DSA_ROUTER_LOG`.
pub fn init_logging() {
    // ldap3_proto warns about every control it does not model (proxied
    // authorization among them) where the test DSA decodes requests: noise
    // for a router that forwards controls as bytes.
    let filter = tracing_subscriber::EnvFilter::try_from_env("DSA_ROUTER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,ldap3_proto=error"));
    // Colours only on a terminal: logs written to files stay plain text.
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// The runtime: single-threaded for one thread.
fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    // One thread: tokio's single-threaded scheduler (no work stealing, no
    // cross-thread wake-ups).
    let mut b = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if threads > 1 {
        b.worker_threads(threads);
    }
    b.enable_all()
        .build()
        .map_err(|e| Error::config(format!("cannot start the runtime: {e}")))
}

/// `dsa-router serve`: runs until SIGTERM or SIGINT; exit 1 when it cannot
/// start or stops on an error.
pub fn serve(args: &ServeArgs) -> ExitCode {
    init_logging();
    // A container's first process: stay, and run the router as a child
    // that hot upgrades may replace.
    if crate::lifecycle::supervisor::wanted(args.handover_fd.is_some()) {
        return crate::lifecycle::supervisor::run();
    }
    match startup::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(startup::Stop(text)) => {
            eprint!("{text}");
            ExitCode::from(1)
        }
    }
}

/// The access log's writer, when the log is on.
fn start_access_log(cfg: &Config) -> Result<()> {
    if !cfg.access_log {
        return Ok(());
    }
    crate::observe::access::start(cfg.access_log_format, cfg.access_log_target.clone()).map_err(
        |e| {
            Error::config(format!(
                "cannot open the access log {:?}: {e}",
                cfg.access_log_target
            ))
        },
    )
}

/// `dsa-router demo` (feature `dev-tools`).
#[cfg(feature = "dev-tools")]
pub fn demo(limits: &LimitArgs, listen: Option<String>) -> ExitCode {
    init_logging();
    let rt = match runtime(0) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut cfg = match limits.config(&naming::Flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // The terminal is the demo's: no line per operation (serve logs them),
    // unless --access-log names a file.
    cfg.access_log = matches!(
        cfg.access_log_target,
        crate::observe::access::Target::File(_)
    );
    if let Err(e) = start_access_log(&cfg) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    match rt.block_on(crate::app::demo::run(cfg, listen)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
