#![forbid(unsafe_code)]
use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;
use std::process::ExitCode;

/// dsa-router: an LDAP router DSA driven by CA Directory knowledge files.
#[derive(Parser)]
#[command(name = "dsa-router", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load knowledge, print the partitions and their DSAs, report errors.
    Check {
        /// The root knowledge file (e.g. knowledge/router.dxg).
        root: PathBuf,
        /// The router's own DSA block, never a target. Without it, the
        /// block whose address is --listen is taken (said on stderr), else
        /// one at a listen-only address (0.0.0.0, ::); several such:
        /// refused.
        #[arg(long)]
        name: Option<String>,
        /// Where the router listens, for finding its own block without
        /// --name.
        #[arg(long, value_name = "ADDR", default_value = dsa_router::app::cli::DEFAULT_LISTEN)]
        listen: String,
        /// Also ask each DSA what it holds (its root DSE's namingContexts)
        /// and warn of a partition prefix no DSA of it holds.
        #[arg(long)]
        online: bool,
    },
    /// Show where an operation on a DN would be routed, and why.
    Explain(Box<dsa_router::app::cli::ExplainArgs>),
    /// Run the router.
    Serve(Box<dsa_router::app::cli::serve::ServeArgs>),
    /// Control a running router through its admin API.
    Ctl(dsa_router::app::admin::ctl::CtlArgs),
    /// Horizontal partitions: split LDIF per slot, check placement.
    #[command(subcommand)]
    Hash(dsa_router::app::cli::hash::HashCmd),
    /// Run one in-memory test DSA (for tests and experiments).
    #[cfg(feature = "dev-tools")]
    #[command(hide = true)]
    Testdsa {
        /// Listen address.
        #[arg(long)]
        listen: String,
        /// DSA name (reported in result messages).
        #[arg(long)]
        name: String,
        /// Suffix for the generated sample data (repeatable).
        #[arg(long)]
        suffix: Vec<String>,
        /// LDIF file to load instead of, or besides, generated data.
        #[arg(long)]
        ldif: Option<PathBuf>,
        /// Delay every response by this many milliseconds.
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        /// Advertise and accept the router's trace context control.
        #[arg(long)]
        trace_context: bool,
        /// Append the value of each trace context control received here.
        #[arg(long)]
        trace_context_log: Option<PathBuf>,
    },
    /// Run the example setup on loopback: test DSAs and router R1.
    #[cfg(feature = "dev-tools")]
    Demo {
        /// Router listen address (default: R1's, 127.0.0.1:3389).
        #[arg(long)]
        listen: Option<String>,
        #[command(flatten)]
        limits: Box<dsa_router::app::cli::serve::LimitArgs>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check {
            root,
            name,
            listen,
            online,
        } => dsa_router::app::cli::check(&root, name.as_deref(), &listen, online),
        Cmd::Explain(args) => dsa_router::app::cli::explain(&args),
        Cmd::Ctl(args) => dsa_router::app::admin::ctl::run(&args),
        Cmd::Hash(cmd) => dsa_router::app::cli::hash::run(&cmd),
        Cmd::Serve(args) => dsa_router::app::cli::serve::serve(&args),
        #[cfg(feature = "dev-tools")]
        Cmd::Testdsa {
            listen,
            name,
            suffix,
            ldif,
            delay_ms,
            trace_context,
            trace_context_log,
        } => dsa_testdsa::process::run(
            &listen,
            &name,
            &suffix,
            ldif.as_deref(),
            delay_ms,
            trace_context,
            trace_context_log.as_deref(),
        ),
        #[cfg(feature = "dev-tools")]
        Cmd::Demo { listen, limits } => dsa_router::app::cli::serve::demo(&limits, listen),
    }
}
