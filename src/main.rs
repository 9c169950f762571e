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
        /// The root knowledge file (e.g. knowledge/router.dxg); with
        /// --config, the file's `knowledge` unless given.
        #[arg(required_unless_present = "config")]
        root: Option<PathBuf>,
        /// The router's own DSA block, never a target. Without it, the
        /// block whose address is --listen is taken (said on stderr), else
        /// one at a listen-only address (0.0.0.0, ::); several such:
        /// refused.
        #[arg(long)]
        name: Option<String>,
        /// Where the router listens, for finding its own block without
        /// --name [default: the settings file's `listen`, else 127.0.0.1:3389].
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Also ask each DSA what it holds (its root DSE's namingContexts)
        /// and warn of a partition prefix no DSA of it holds.
        #[arg(long)]
        online: bool,
        /// Also check this settings file (`serve --config FILE`): unknown
        /// settings and bad values are errors.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Show where an operation on a DN would be routed, and why.
    Explain(Box<dsa_router::app::cli::ExplainArgs>),
    /// Run the router.
    #[command(args_override_self = true)]
    Serve(Box<dsa_router::app::cli::serve::ServeArgs>),
    /// Print a settings file with every setting at its default (--defaults).
    ///
    /// `dsa-router config --defaults > router.toml` gives a file that
    /// `serve --config router.toml` loads as it is: each setting with its
    /// help, settings without a default commented out.
    Config {
        /// Print every setting at its default, with its help, as a
        /// settings file (TOML).
        #[arg(long)]
        defaults: bool,
        /// Print the reference of every `serve` flag and setting as
        /// Markdown (the page docs/reference.md, regenerated from this).
        #[arg(long, conflicts_with = "defaults")]
        reference: bool,
    },
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
    use dsa_router::app::cli::serve::settings;
    // `serve --config FILE`: the file's settings are read as flags before
    // the command line's, which override them.
    let (argv, origins) = match settings::expand(std::env::args_os().collect()) {
        Ok(x) => x,
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(argv);
    match cli.cmd {
        Cmd::Check {
            root,
            name,
            listen,
            online,
            config,
        } => check(Check {
            root,
            name,
            listen,
            online,
            config,
        }),
        Cmd::Config {
            defaults,
            reference,
        } => {
            if reference {
                print!("{}", reference_page());
            } else if defaults {
                print!("{}", settings::defaults());
            } else {
                eprintln!(
                    "error: say what to print: dsa-router config --defaults (or --reference)"
                );
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Cmd::Explain(args) => dsa_router::app::cli::explain(&args),
        Cmd::Ctl(args) => dsa_router::app::admin::ctl::run(&args),
        Cmd::Hash(cmd) => dsa_router::app::cli::hash::run(&cmd),
        Cmd::Serve(mut args) => {
            args.origins = origins;
            dsa_router::app::cli::serve::serve(&args)
        }
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

/// `check`: the settings file first (with --config), then the knowledge
/// (ROOT, else the file's).
/// `check`'s arguments.
struct Check {
    root: Option<PathBuf>,
    name: Option<String>,
    listen: Option<String>,
    online: bool,
    config: Option<PathBuf>,
}

fn check(c: Check) -> ExitCode {
    let (root, name, listen) = match c.config {
        Some(f) => match dsa_router::app::cli::serve::settings::check(&f, c.root.as_deref()) {
            Some(args) => (
                args.knowledge,
                c.name.or(args.name),
                c.listen.or(args.listen),
            ),
            None => return ExitCode::from(1),
        },
        None => match c.root {
            Some(r) => (r, c.name, c.listen),
            None => return ExitCode::from(2),
        },
    };
    let listen = listen.unwrap_or_else(|| dsa_router::app::cli::DEFAULT_LISTEN.to_string());
    dsa_router::app::cli::check(&root, name.as_deref(), &listen, c.online)
}

/// The reference page of every `serve` flag and setting, generated from
/// the code (`dsa-router config --reference > docs/reference.md`; a test
/// fails when the page in the repository differs).
fn reference_page() -> String {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    // Built, so that the usage line names `dsa-router serve`.
    cli.build();
    let help = cli
        .find_subcommand_mut("serve")
        .map(|serve| serve.render_long_help().to_string())
        .unwrap_or_default();
    format!(
        "# Reference: `serve` flags and settings\n\n\
         <!-- Generated by `dsa-router config --reference > docs/reference.md`. \
         Do not edit: a test fails when this page and the binary differ. -->\n\n\
         Every setting can be given as a flag or in the settings file \
         (`serve --config FILE`, see [settings.md](settings.md)); a flag \
         overrides the file.\n\n\
         ## `dsa-router serve --help`\n\n```text\n{}\n```\n\n\
         ## The settings file, every setting at its default\n\n\
         `dsa-router config --defaults` prints this file.\n\n```toml\n{}\n```\n\n\
         ## Metrics\n\n\
         Every metric family of `GET /metrics` (Prometheus text format). \
         Per-DSA families leave out the router's own block; a value the \
         router does not know has no sample. See [monitoring.md](monitoring.md).\n\n{}\n\
         ## `GET /status`\n\n\
         The fields of the JSON `/status` answers (`ctl status --json`); \
         `[]` is each element of a list, `*` any key of a map.\n\n{}",
        help.trim_end(),
        dsa_router::app::cli::serve::settings::defaults().trim_end(),
        dsa_router::observe::catalog::markdown(),
        dsa_router::app::admin::status_fields::markdown()
    )
}
