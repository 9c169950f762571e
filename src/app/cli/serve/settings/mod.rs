//! The settings file of `serve --config FILE`: every `serve` setting in
//! TOML, in tables named like the headings of `serve --help`, keys named
//! like the long flags. The file's settings are read as flags given before
//! the command line's, so that each is checked by its flag's own parser
//! and the command line overrides the file; the file overrides
//! knowledge's `set dsa-router-*` lines ([`Origins::pinned`]).
//!
//! * `file`: reading and checking the file.
//! * `defaults`: `dsa-router config --defaults`, every setting at its
//!   default.
//! * `reread`: the file read again on reload.

mod defaults;
mod file;
mod reread;

pub use defaults::defaults;
pub use file::FileError;
pub use reread::FileSource;

use super::ServeArgs;
use crate::service::config::Pinned;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `serve`'s flags as clap sees them: a flag given twice (in the file,
/// then on the command line) takes the last.
pub fn command() -> clap::Command {
    <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve")).args_override_self(true)
}

/// Where `serve`'s settings came from: the settings file and its
/// settings, and the flags of the command line.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    /// The settings file, when `--config` named one.
    pub file: Option<PathBuf>,
    /// The file's settings (flags' long names).
    pub from_file: Vec<file::Entry>,
    /// The command line after `serve`, as given.
    pub args: Vec<OsString>,
    /// The flags it gives (long names).
    pub from_flags: Vec<String>,
}

impl Origins {
    /// The settings the file or the command line gives, and where.
    pub fn pinned(&self) -> Pinned {
        let mut out: Vec<(String, String)> = self
            .from_flags
            .iter()
            .map(|f| (f.clone(), "the command line".to_string()))
            .collect();
        if let Some(path) = &self.file {
            for e in &self.from_file {
                if e.value.is_some() && !self.from_flags.contains(&e.key) {
                    let by = format!("[{}] in {}", e.table, path.display());
                    out.push((e.key.clone(), by));
                }
            }
        }
        Pinned(out)
    }

    /// The arguments clap reads: the file's settings, then the command
    /// line's (`serve` first).
    pub fn argv(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec!["serve".into()];
        out.extend(self.from_file.iter().flat_map(file::Entry::args));
        out.extend(self.args.iter().cloned());
        out
    }
}

impl super::naming::Naming for Origins {
    /// `[table] key = VALUE in FILE` when the settings file gave it (and
    /// the command line did not), else `--key VALUE`.
    fn show(&self, flag: &str, value: &str) -> String {
        let in_file = self
            .from_file
            .iter()
            .find(|e| e.key == flag && e.value.is_some());
        match (&self.file, in_file) {
            (Some(path), Some(e)) if !self.from_flags.iter().any(|f| f == flag) => {
                let value = if value.is_empty() { "true" } else { value };
                format!("[{}] {flag} = {value} in {}", e.table, path.display())
            }
            _ => super::naming::as_flag(flag, value),
        }
    }

    /// With a settings file, `[table] a and b in FILE, or --a and --b`;
    /// else `--a and --b`.
    fn missing(&self, flags: &[&str]) -> String {
        let as_flags = super::naming::as_flags(flags);
        let Some(path) = &self.file else {
            return as_flags;
        };
        let cmd = command();
        let table = |f: &str| {
            file::settable(&cmd)
                .find(|(_, a)| a.get_long() == Some(f))
                .map(|(t, _)| t)
        };
        let first = flags.first().and_then(|f| table(f));
        match first {
            Some(t) if flags.iter().all(|f| table(f) == Some(t)) => format!(
                "[{t}] {} in {}, or {as_flags}",
                flags.join(" and "),
                path.display()
            ),
            _ => as_flags,
        }
    }
}

/// The settings file of a command line (`--config FILE`,
/// `--config=FILE`).
fn config_flag(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    let mut found = None;
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        if a == "--" {
            break;
        }
        if a == "--config" {
            found = it.next().map(PathBuf::from);
        } else if let Some(v) = a.strip_prefix("--config=") {
            found = Some(PathBuf::from(v));
        }
    }
    found
}

/// The long names of the flags a command line gives (aliases as their
/// flag's name).
fn flags_given(cmd: &clap::Command, args: &[OsString]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in args {
        let a = a.to_string_lossy();
        if a == "--" {
            break;
        }
        let Some(name) = a.strip_prefix("--") else {
            continue;
        };
        let name = name.split('=').next().unwrap_or(name);
        let flag = cmd.get_arguments().find(|x| {
            x.get_long() == Some(name) || x.get_all_aliases().is_some_and(|v| v.contains(&name))
        });
        if let Some(long) = flag.and_then(|x| x.get_long()) {
            if !out.iter().any(|o| o == long) {
                out.push(long.to_string());
            }
        }
    }
    out
}

/// Where the settings of `serve ARGS` come from: the settings file
/// `--config` names, read and checked, and the command line.
pub fn origins(args: Vec<OsString>) -> Result<Origins, FileError> {
    let cmd = command();
    let file = config_flag(&args);
    let from_file = match &file {
        Some(f) => file::load(f, &cmd)?,
        None => Vec::new(),
    };
    Ok(Origins {
        from_flags: flags_given(&cmd, &args),
        file,
        from_file,
        args,
    })
}

/// The program's arguments with a `serve` command line's settings file
/// read in: `(argv, origins)`; other commands' unchanged.
pub fn expand(argv: Vec<OsString>) -> Result<(Vec<OsString>, Origins), FileError> {
    if argv.get(1).is_none_or(|a| a != "serve") {
        return Ok((argv, Origins::default()));
    }
    let mut it = argv.into_iter();
    let program = it.next().unwrap_or_else(|| "dsa-router".into());
    let o = origins(it.skip(1).collect())?;
    let mut out = vec![program];
    out.extend(o.argv());
    Ok((out, o))
}

/// `check --config FILE`: the file checked as `serve` would read it (with
/// `knowledge`, when given, in place of the file's). The settings it
/// gives; the problems printed.
pub fn check(path: &Path, knowledge: Option<&Path>) -> Option<ServeArgs> {
    let mut args: Vec<OsString> = vec!["--config".into(), path.into()];
    if let Some(k) = knowledge {
        args.extend(["--knowledge".into(), k.into()]);
    }
    let o = match origins(args) {
        Ok(o) => o,
        Err(e) => {
            eprint!("{e}");
            return None;
        }
    };
    if knowledge.is_none() && !o.from_file.iter().any(|e| e.key == "knowledge") {
        eprintln!(
            "error: settings file {}: no knowledge file: set knowledge in [router], or name it: dsa-router check --config FILE ROOT",
            path.display()
        );
        return None;
    }
    let parsed = reread::parse(&o).map_err(|e| {
        format!(
            "error: settings file {}: {}\n",
            path.display(),
            e.to_string().trim_end()
        )
    });
    match parsed {
        Ok((args, _)) => {
            println!(
                "settings file {}: {} setting(s), valid",
                path.display(),
                o.from_file.len()
            );
            Some(args)
        }
        Err(text) => {
            eprint!("{text}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_command_line_says_which_flags_it_gives() {
        let cases: &[(&[&str], &[&str], Option<&str>)] = &[
            (
                &["--knowledge", "k", "--watch"],
                &["knowledge", "watch"],
                None,
            ),
            (
                &["--idle-timeout=5m", "--shutdown-grace", "3"],
                &["idle-timeout", "drain-timeout"],
                None,
            ),
            (
                &["--config", "a.toml", "--config=b.toml"],
                &["config"],
                Some("b.toml"),
            ),
            (&["--unknown", "x", "--", "--watch"], &[], None),
        ];
        for (args, flags, file) in cases {
            let args = os(args);
            assert_eq!(flags_given(&command(), &args), *flags, "{args:?}");
            assert_eq!(
                config_flag(&args).as_deref(),
                file.map(Path::new),
                "{args:?}"
            );
        }
    }

    #[test]
    fn errors_between_two_settings_name_where_each_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("router.toml");
        let f = file.display().to_string();
        // (settings file, command line, the error)
        let cases: &[(&str, &[&str], String)] = &[
            (
                "[limits]\nmax-request-memory = \"1MiB\"\n",
                &["--max-request-pdu", "2MiB"],
                format!("[limits] max-request-memory = 1MiB in {f} is below --max-request-pdu 2MiB: it must hold at least one request"),
            ),
            (
                "[limits]\nmax-request-pdu = \"2MiB\"\n",
                &["--max-request-memory", "1MiB"],
                format!("--max-request-memory 1MiB is below [limits] max-request-pdu = 2MiB in {f}: it must hold at least one request"),
            ),
            (
                "[listen]\nldaps-listen = \"127.0.0.1:1636\"\n",
                &[],
                format!("[listen] ldaps-listen = 127.0.0.1:1636 in {f} needs a certificate and its key: [tls] tls-cert and tls-key in {f}, or --tls-cert and --tls-key"),
            ),
            (
                "[listen]\nldaps-listen = \"127.0.0.1:1636\"\n",
                &["--ldaps-listen", "127.0.0.1:2636"],
                format!("--ldaps-listen 127.0.0.1:2636 needs a certificate and its key: [tls] tls-cert and tls-key in {f}, or --tls-cert and --tls-key"),
            ),
            (
                "[tls]\ntls-cert = \"/c.pem\"\n",
                &[],
                format!("[tls] tls-cert = /c.pem in {f} needs its key: [tls] tls-key in {f}, or --tls-key"),
            ),
            (
                "[tls]\ntls-require-client-cert = true\n",
                &["--tls-cert", "/c.pem", "--tls-key", "/k.pem"],
                format!("[tls] tls-require-client-cert = true in {f} needs the CA certificates to verify clients against: [tls] tls-client-ca in {f}, or --tls-client-ca"),
            ),
        ];
        for (text, args, want) in cases {
            std::fs::write(&file, format!("[router]\nknowledge = \"k.dxg\"\n{text}")).unwrap();
            let mut argv = os(&["--config", &f]);
            argv.extend(os(args));
            let o = origins(argv).unwrap();
            let e = reread::parse(&o).err().unwrap().to_string();
            assert_eq!(e, *want, "{text} {args:?}");
        }
        // Without a settings file: the flags.
        let o = origins(os(&["--knowledge", "k", "--tls-key", "/k.pem"])).unwrap();
        let e = reread::parse(&o).err().unwrap().to_string();
        assert_eq!(e, "--tls-key /k.pem needs its certificate: --tls-cert");
        let o = origins(os(&["--knowledge", "k", "--tls-client-ca", "/ca.pem"])).unwrap();
        let e = reread::parse(&o).err().unwrap().to_string();
        assert_eq!(e, "--tls-client-ca /ca.pem needs a server certificate and its key: --tls-cert and --tls-key");
    }

    #[test]
    fn only_serve_reads_a_settings_file() {
        let argv = os(&["dsa-router", "check", "--config", "/nonexistent.toml", "k"]);
        let (out, o) = expand(argv.clone()).unwrap();
        assert_eq!(out, argv);
        assert!(o.file.is_none());
        let e = expand(os(&[
            "dsa-router",
            "serve",
            "--config",
            "/nonexistent.toml",
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("error: settings file /nonexistent.toml: cannot read it"),
            "{e}"
        );
        let (out, o) = expand(os(&["dsa-router", "serve", "--knowledge", "k"])).unwrap();
        assert_eq!(out, os(&["dsa-router", "serve", "--knowledge", "k"]));
        assert_eq!(o.pinned().by("knowledge"), Some("the command line"));
    }
}
