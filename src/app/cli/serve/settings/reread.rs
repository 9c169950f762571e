//! The settings file read again on reload (SIGHUP, `ctl reload`,
//! `--watch`): the settings a running router changes take their new
//! values; the others, changed in the file, are named as needing a
//! restart.

use super::{command, origins, Origins};
use crate::app::cli::serve::ServeArgs;
use crate::base::error::{Error, Result};
use crate::service::config::Config;
use crate::service::settings_file::{Reread, SettingsFile};
use clap::FromArgMatches;
use std::path::Path;

/// The settings a reload changes (those knowledge may also set).
const LIVE: [&str; 7] = [
    "cpu-threshold",
    "memory-threshold",
    "dsa-concurrency-limit",
    "hedge-budget",
    "hedge-floor",
    "max-ejection",
    "ejection-time",
];

/// `serve`'s settings from `o`, checked whole: the flags, and the
/// configuration they make.
pub(super) fn parse(o: &Origins) -> Result<(ServeArgs, Config)> {
    let m = command()
        .try_get_matches_from(o.argv())
        .map_err(|e| Error::config(clap_text(&e)))?;
    let args = ServeArgs::from_arg_matches(&m).map_err(|e| Error::config(clap_text(&e)))?;
    let mut cfg = args.limits.config(o)?;
    args.tls.apply(&mut cfg, o)?;
    cfg.pinned = o.pinned();
    Ok((args, cfg))
}

/// A clap error's text without its `error: ` and hints.
fn clap_text(e: &clap::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = text.split("\n\n").next().unwrap_or(text);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The settings file of a running router, with the settings it gave at
/// startup.
pub struct FileSource {
    start: Origins,
}

impl FileSource {
    /// `start`: the settings as `serve` started with them (`None` without
    /// a settings file).
    pub fn new(start: &Origins) -> Option<FileSource> {
        start.file.as_ref()?;
        Some(FileSource {
            start: start.clone(),
        })
    }
}

impl SettingsFile for FileSource {
    fn path(&self) -> &Path {
        self.start.file.as_deref().unwrap_or(Path::new(""))
    }

    fn reread(&self) -> Result<Reread> {
        let now = origins(self.start.args.clone())
            .map_err(|e| Error::config(e.to_string().trim_end().to_string()))?;
        let (_, cfg) = parse(&now)
            .map_err(|e| Error::config(format!("settings file {}: {e}", self.path().display())))?;
        Ok(Reread {
            live: cfg.live(),
            restart: restart(&self.start, &now),
        })
    }
}

/// The settings changed in the file since `start` that a reload does not
/// change (and the command line does not override): `[table] key`.
fn restart(start: &Origins, now: &Origins) -> Vec<String> {
    let value = |o: &Origins, key: &str| {
        o.from_file
            .iter()
            .find(|e| e.key == key)
            .map(|e| (e.table, e.value.clone()))
    };
    let mut out: Vec<String> = Vec::new();
    for e in start.from_file.iter().chain(now.from_file.iter()) {
        let key = e.key.as_str();
        if LIVE.contains(&key) || now.from_flags.iter().any(|f| f == key) {
            continue;
        }
        let name = format!("[{}] {key}", e.table);
        if value(start, key) != value(now, key) && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use std::ffi::OsString;

    fn write(dir: &Path, text: &str) -> std::path::PathBuf {
        let p = dir.join("router.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn start(path: &Path, flags: &[&str]) -> Origins {
        let mut args: Vec<OsString> = vec!["--config".into(), path.into()];
        args.extend(flags.iter().map(OsString::from));
        origins(args).unwrap()
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults_and_knowledge() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "[router]\nknowledge = \"/k/r.dxg\"\n[listen]\nidle-timeout = \"20m\"\npdu-timeout = 7\n[dsas]\nhedge-budget = 9\nmax-ejection = 20\n",
        );
        let o = start(&p, &["--pdu-timeout", "3s", "--max-ejection", "10"]);
        let (args, cfg) = parse(&o).unwrap();
        let s = std::time::Duration::from_secs;
        // The file over the default; the command line over the file.
        assert_eq!(cfg.idle_timeout, s(1200));
        assert_eq!(cfg.pdu_timeout, s(3));
        assert_eq!((cfg.tail.hedge_budget, cfg.tail.max_ejection), (9, 10));
        // Untouched: the default.
        assert_eq!(cfg.connect_timeout, s(3));
        assert_eq!(args.knowledge, Path::new("/k/r.dxg"));
        // Both pin their settings against knowledge, saying where from.
        let by = |f: &str| cfg.pinned.by(f).map(str::to_string);
        assert_eq!(by("max-ejection").as_deref(), Some("the command line"));
        assert!(by("hedge-budget").unwrap().starts_with("[dsas] in "));
        assert_eq!(by("cpu-threshold"), None);
    }

    #[test]
    fn a_reread_changes_live_settings_and_names_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let base = "[router]\nknowledge = \"/k/r.dxg\"\n";
        let p = write(
            dir.path(),
            &format!("{base}[listen]\nidle-timeout = \"20m\"\n[dsas]\nhedge-budget = 9\n"),
        );
        let o = start(&p, &["--listen", "127.0.0.1:1"]);
        let src = FileSource::new(&o).unwrap();
        write(
            dir.path(),
            &format!("{base}[listen]\nidle-timeout = \"30m\"\nlisten = \"127.0.0.1:2\"\n[dsas]\nhedge-budget = 3\n[limits]\nmax-outstanding = 9\n"),
        );
        let r = src.reread().unwrap();
        assert_eq!(r.live.tail.hedge_budget, 3);
        // listen: the command line's anyway; hedge-budget: changed live.
        assert_eq!(
            r.restart,
            vec!["[listen] idle-timeout", "[limits] max-outstanding"]
        );
        // A bad file: an error naming it, nothing changed.
        write(
            dir.path(),
            &format!("{base}[listen]\nidle-timeout = \"soon\"\n"),
        );
        let e = src.reread().unwrap_err().to_string();
        assert!(
            e.contains("router.toml") && e.contains("[listen] idle-timeout"),
            "{e}"
        );
    }
}
