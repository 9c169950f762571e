//! `dsa-router-manpage OUTDIR`: writes the router's man page and shell
//! completions from its clap definitions, for the Debian package
//! (scripts/package.sh):
//!
//! * `OUTDIR/dsa-router.1`: one page with every command's options (`man
//!   dsa-router` shows `serve`'s), plus FILES, ENVIRONMENT and SIGNALS for
//!   the packaged service;
//! * `OUTDIR/completions/dsa-router.bash`, `_dsa-router` (zsh) and
//!   `dsa-router.fish`.
//!
//! The command line is the router binary's own (`src/main.rs`, copied in by
//! build.rs), as the production build has it: no `demo`, no `testdsa`.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The router's `src/main.rs`, whole: its `Cli` is private, and this
/// module, holding the text, can name it.
#[allow(dead_code, unused_imports, clippy::all)]
mod router {
    include!(concat!(env!("OUT_DIR"), "/router_main.rs"));

    /// The router's command line, as `dsa-router --help` shows it.
    pub fn command() -> clap::Command {
        <Cli as clap::CommandFactory>::command()
    }
}

/// The router package's description (the workspace's root Cargo.toml):
/// `#[command(about)]` in src/main.rs takes the compiling crate's, which
/// here would be this generator's.
fn router_description() -> String {
    let manifest = include_str!("../../../Cargo.toml");
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("description") {
                let v = v.trim_start().trim_start_matches('=').trim();
                return v.trim_matches('"').to_string();
            }
        }
    }
    "an LDAP router DSA".to_string()
}

/// The man page's DESCRIPTION.
const LONG_ABOUT: &str = "LDAP clients connect to dsa-router as if it were one directory \
server. For each operation it decodes the target DN, finds the namespace partition that \
holds it in knowledge files written in CA Directory's DXserver syntax, and forwards the \
operation to the least-busy live DSA of the first available load-share group, following \
knowledge order and precedence; writes go to one DSA, with failover. `serve` runs the \
router; `check` and `explain` read knowledge; `ctl` controls a running router through its \
admin API.";

/// The command line with the router's own description.
fn command() -> clap::Command {
    router::command()
        .about(router_description())
        .long_about(LONG_ABOUT)
}

/// `help` subcommands left out, at every level: the page shows each
/// command's options itself.
fn without_help(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help)
}

/// clap_mangen names subcommands as pages of their own
/// (`dsa\-router\-ctl\-status(1)`): here they are sections of this page,
/// so the name is written as the command (`dsa\-router ctl status`).
fn subcommand_names(roff: &str) -> String {
    roff.lines()
        .map(|l| {
            match l
                .strip_prefix("dsa\\-router\\-")
                .and_then(|r| r.strip_suffix("(1)"))
            {
                Some(rest) => format!("\\fBdsa\\-router {}\\fR\n", rest.replace("\\-", " ")),
                None => format!("{l}\n"),
            }
        })
        .collect()
}

/// Sections the clap definitions do not hold: what the package installs
/// and how the service is run.
const EXTRA: &str = r#".SH FILES
.TP
\fI/etc/dsa-router/router.dxg\fR
The root knowledge file of the packaged service (CA Directory DXserver
syntax); its \fBsource\fR lines name the other files of the tree. The
package installs an example: router R1 in front of one DSA at
127.0.0.1:1389 holding dc=example,dc=com.
.TP
\fI/etc/dsa-router/router.toml\fR
The service's settings file (\fBserve \-\-config\fR): every \fBserve\fR
setting in TOML, in tables named like the option groups ([router],
[listen], [tls], [dsas], [limits], [replication], [policy], [admin],
[logs], [traces]), keys named like the options. Options on the command
line override it; it overrides knowledge's \fBset dsa\-router\-*\fR lines.
\fBdsa\-router config \-\-defaults\fR prints every setting at its default;
\fBdsa\-router check \-\-config FILE\fR checks one.
.TP
\fI/etc/default/dsa-router\fR
The service's environment: further \fBserve\fR options
(DSA_ROUTER_OPTS), the log filter and the admin token, read by
\fBdsa-router.service\fR through EnvironmentFile=.
.TP
\fI/usr/lib/systemd/system/dsa-router.service\fR
The systemd unit: the system user dsa-router, a read-only file system, listening on
port 389 with CAP_NET_BIND_SERVICE and no other capability.
\fBsystemctl reload dsa-router\fR reloads the knowledge
(\fBdsa-router ctl reload\fR); logs go to the journal
(\fBjournalctl -u dsa-router\fR).
.TP
\fI/run/dsa-router/control.sock\fR
The control socket (systemd's RuntimeDirectory=): \fBdsa-router ctl\fR
changes state through it; only root and the service's user may use it.
.SH ENVIRONMENT
.TP
\fBDSA_ROUTER_LOG\fR
Log filter (tracing EnvFilter syntax, e.g. \fBinfo\fR, \fBdebug\fR,
\fBdsa_router::health=debug\fR); default \fBinfo,ldap3_proto=error\fR.
Logs are written to standard error, without colours unless it is a
terminal.
.TP
\fBDSA_ROUTER_ADMIN_TOKEN\fR
Bearer token that allows state changes over the admin API's TCP address,
for \fBserve\fR (--admin-token) and \fBctl\fR (--token). Without it the
TCP API is read-only; \fBctl\fR uses the control socket.
.TP
\fBNOTIFY_SOCKET\fR
Set by systemd for \fBType=notify\fR: the router says there when it
listens, reloads and drains, and which process serves after a hot upgrade.
.SH SIGNALS
.TP
\fBSIGHUP\fR
Reload the knowledge, the TLS files and the settings file; invalid
knowledge or settings are refused and the old stay in force. Settings
changed in the file that need a restart are named in the log.
.TP
\fBSIGUSR1\fR
Reopen the access log's file (logrotate; \fBdsa-router ctl reopen-logs\fR).
.TP
\fBSIGUSR2\fR
Hot upgrade to the binary at the router's own path (\fBdsa-router ctl upgrade\fR).
Under systemd: \fBsystemctl kill -s USR2 --kill-whom=main dsa-router\fR;
the new process becomes the unit's main process.
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Stop accepting, let operations in flight finish (--drain-timeout), exit.
.PP
As a container's first process (PID 1), \fBserve\fR stays as a small
supervisor that runs the router as its child and passes these signals on,
so a hot upgrade keeps the container running.
.SH SEE ALSO
\fBldapsearch\fR(1), \fBsystemctl\fR(1), \fBjournalctl\fR(1)
"#;

/// The man page: the top command's page, then for each visible
/// subcommand (depth first) its synopsis, description, options and
/// subcommands under a heading of its own.
fn man_page(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let mut cmd = without_help(cmd.clone());
    cmd.build();
    let cmd = &cmd;
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    man.render_subcommands_section(&mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        subcommand_sections(sub, &mut out)?;
    }
    out.extend_from_slice(EXTRA.as_bytes());
    man.render_version_section(&mut out)?;
    Ok(subcommand_names(&String::from_utf8_lossy(&out)).into_bytes())
}

/// One subcommand's sections: headed by its full name (`DSA-ROUTER
/// SERVE`), its synopsis, description, options and own subcommands as
/// subsections.
fn subcommand_sections(cmd: &clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    let name = cmd
        .get_bin_name()
        .map(str::to_string)
        .unwrap_or_else(|| cmd.get_name().to_string());
    writeln!(out, ".SH \"{}\"", name.to_uppercase())?;
    let man = clap_mangen::Man::new(cmd.clone());
    let mut part = Vec::new();
    man.render_synopsis_section(&mut part)?;
    man.render_description_section(&mut part)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut part)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut part)?;
    }
    // clap_mangen heads each part with `.SH NAME`: here they are
    // subsections of the command's section.
    let text = String::from_utf8_lossy(&part).replace("\n.SH ", "\n.SS ");
    let text = text
        .strip_prefix(".SH ")
        .map_or(text.clone(), |t| format!(".SS {t}"));
    out.extend_from_slice(text.as_bytes());
    // A nested command gets a section when it has arguments of its own
    // (`ctl disable NAME`), not only its parent's (`ctl status`).
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let own = sub.get_arguments().any(|a| {
            !a.is_hide_set()
                && a.get_id() != "help"
                && !cmd.get_arguments().any(|p| p.get_id() == a.get_id())
        });
        if own {
            subcommand_sections(sub, out)?;
        }
    }
    Ok(())
}

/// Writes the page and the completions under `dir`.
fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    let mut cmd = command();
    let comp = dir.join("completions");
    std::fs::create_dir_all(&comp)?;
    let page = dir.join("dsa-router.1");
    std::fs::write(&page, man_page(&cmd)?)?;
    let mut written = vec![page];
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        written.push(clap_complete::generate_to(
            shell,
            &mut cmd,
            "dsa-router",
            &comp,
        )?);
    }
    Ok(written)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: dsa-router-manpage OUTDIR   (writes OUTDIR/dsa-router.1 and OUTDIR/completions/)");
        return ExitCode::from(2);
    };
    match write_all(Path::new(&dir)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dsa-router-manpage: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The page names every visible command and `serve`'s flags, and the
    /// production command line has no `demo`.
    #[test]
    fn page_has_the_commands_and_serve_options() {
        let cmd = command();
        let page = String::from_utf8(man_page(&cmd).unwrap()).unwrap();
        for want in [
            ".TH dsa-router 1",
            ".SH \"DSA-ROUTER SERVE\"",
            "\\-\\-knowledge",
            "\\-\\-max\\-clients",
            ".SH \"DSA-ROUTER CTL\"",
            "An LDAP router DSA",
            ".SH FILES",
        ] {
            assert!(page.contains(want), "missing {want:?} in the page");
        }
        // Sections of this page, not pages of their own.
        assert!(page.contains("\\fBdsa\\-router ctl\\fR"), "{page}");
        assert!(!page.contains("router\\-ctl(1)"), "{page}");
        assert!(cmd.find_subcommand("demo").is_none());
        assert!(!page.contains("testdsa"));
    }
}
