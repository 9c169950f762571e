//! Reading the settings file: TOML tables named like the help headings
//! (`[listen]`, `[dsas]`...), keys named like the long flags. Every key is
//! checked against its flag (its table, its value's type, its value
//! parser), so that a mistake is reported naming the file, the table, the
//! key and what it takes, with a suggestion for a misspelt name.

use super::super::groups;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// One setting of the file, as the flag it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub table: &'static str,
    /// The flag's long name (the key).
    pub key: String,
    /// The value as the command line would give it; `None`: a switch
    /// (`--watch`) set to false, which adds nothing.
    pub value: Option<String>,
    /// A switch (no value on the command line).
    pub switch: bool,
}

impl Entry {
    /// The command-line arguments this setting stands for.
    pub fn args(&self) -> Vec<OsString> {
        match (&self.value, self.switch) {
            (Some(_), true) => vec![format!("--{}", self.key).into()],
            (Some(v), false) => vec![format!("--{}={v}", self.key).into()],
            (None, _) => Vec::new(),
        }
    }
}

/// One thing wrong in a settings file, naming the setting and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem(pub String);

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A settings file that cannot be used: what is wrong, each naming the
/// file and the setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub path: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "error: settings file {}: {p}", self.path.display())?;
        }
        Ok(())
    }
}

impl std::error::Error for FileError {}

/// The settings of the file at `path`, checked against `cmd` (`serve`).
pub(super) fn load(path: &Path, cmd: &clap::Command) -> Result<Vec<Entry>, FileError> {
    let fail = |p: String| FileError {
        path: path.to_path_buf(),
        problems: vec![Problem(p)],
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    parse(&text, cmd).map_err(|problems| FileError {
        path: path.to_path_buf(),
        problems,
    })
}

/// The settings of a file's text; every problem found.
pub(super) fn parse(text: &str, cmd: &clap::Command) -> Result<Vec<Entry>, Vec<Problem>> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| {
        vec![Problem(format!(
            "not TOML: {}",
            e.to_string().trim_end().replace('\n', "\n  ")
        ))]
    })?;
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (name, value) in &doc {
        let table = groups::GROUPS.iter().find(|(_, t)| t == name);
        let (Some(&(_, table)), toml::Value::Table(keys)) = (table, value) else {
            problems.push(Problem(unknown_table(name, value, cmd)));
            continue;
        };
        for (key, v) in keys {
            match entry(table, key, v, cmd) {
                Ok(e) => out.push(e),
                Err(p) => problems.push(p),
            }
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// A table that is not one of the groups: a misspelling, or a setting
/// written outside its table.
fn unknown_table(name: &str, value: &toml::Value, cmd: &clap::Command) -> String {
    if !matches!(value, toml::Value::Table(_)) {
        if let Some((table, _)) = settable(cmd).find(|(_, a)| a.get_long() == Some(name)) {
            return format!("{name} is outside its table: put it under [{table}]");
        }
    }
    let tables: Vec<&str> = groups::GROUPS.iter().map(|(_, t)| *t).collect();
    if tables.contains(&name) {
        return format!("{name} is not a table: write [{name}] and its settings under it");
    }
    match suggest(name, tables.iter().copied()) {
        Some(s) => format!("unknown table [{name}]: did you mean [{s}]?"),
        None => format!(
            "unknown table [{name}]: the tables are [{}]",
            tables.join("], [")
        ),
    }
}

/// The flags a settings file may set, with their tables.
pub(super) fn settable(cmd: &clap::Command) -> impl Iterator<Item = (&'static str, &clap::Arg)> {
    cmd.get_arguments().filter_map(|a| {
        let long = a.get_long()?;
        if a.is_hide_set() || long == "config" || long == "help" {
            return None;
        }
        Some((groups::table(a.get_help_heading()?)?, a))
    })
}

/// Whether `a` is a switch (`--watch`: true or false in the file).
pub(super) fn is_switch(a: &clap::Arg) -> bool {
    matches!(a.get_action(), clap::ArgAction::SetTrue)
}

/// One key of table `table`, checked.
fn entry(
    table: &'static str,
    key: &str,
    v: &toml::Value,
    cmd: &clap::Command,
) -> Result<Entry, Problem> {
    let shown = match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        other => other.type_str().to_string(),
    };
    let Some((home, arg)) = settable(cmd).find(|(_, a)| a.get_long() == Some(key)) else {
        let keys = settable(cmd).filter_map(|(t, a)| Some((t, a.get_long()?)));
        let all: Vec<(&str, &str)> = keys.collect();
        let near = suggest(
            key,
            all.iter().filter(|(t, _)| *t == table).map(|(_, k)| *k),
        )
        .map(|k| format!("did you mean {k}?"))
        .or_else(|| {
            let names = all.iter().map(|(_, k)| *k);
            let k = suggest(key, names)?;
            let t = all.iter().find(|(_, n)| *n == k)?.0;
            Some(format!("did you mean [{t}] {k}?"))
        })
        .unwrap_or_else(|| "`dsa-router config --defaults` lists every setting".to_string());
        return Err(Problem(format!("[{table}] {key}: unknown setting; {near}")));
    };
    if home != table {
        return Err(Problem(format!(
            "[{table}] {key}: {key} belongs in [{home}]; move it there"
        )));
    }
    let here = format!("[{table}] {key}");
    let switch = is_switch(arg);
    let value = match (v, switch) {
        (toml::Value::Boolean(b), true) => b.then(|| "true".to_string()),
        (_, true) => return Err(Problem(format!("{here}: takes true or false"))),
        (toml::Value::String(s), false) => Some(s.clone()),
        (toml::Value::Integer(n), false) => Some(n.to_string()),
        (toml::Value::Float(x), false) => Some(x.to_string()),
        (other, false) => {
            return Err(Problem(format!(
                "{here}: takes a string or a number, not {}",
                other.type_str()
            )))
        }
    };
    if let (Some(s), false) = (&value, switch) {
        check_value(arg, s).map_err(|e| Problem(format!("{here} = {shown}: {e}")))?;
    }
    Ok(Entry {
        table,
        key: key.to_string(),
        value,
        switch,
    })
}

/// `s` through the flag's own value parser; the error in words.
fn check_value(arg: &clap::Arg, s: &str) -> Result<(), Problem> {
    let Some(long) = arg.get_long() else {
        return Ok(());
    };
    let alone = arg
        .clone()
        .required(false)
        .requires(clap::builder::Resettable::Reset);
    let one = clap::Command::new("serve").arg(alone);
    match one.try_get_matches_from(["serve".to_string(), format!("--{long}={s}")]) {
        Ok(_) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            let text = text
                .split("\n\nFor more information")
                .next()
                .unwrap_or(text);
            let flag = format!("--{long}: ");
            let text = text.trim().trim_start_matches(&flag);
            Err(Problem(
                text.split_whitespace().collect::<Vec<_>>().join(" "),
            ))
        }
    }
}

/// The candidate nearest `word` by edit distance, when near enough to be
/// a misspelling.
pub(super) fn suggest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, case-insensitive, `-` and `_` alike.
fn distance(a: &str, b: &str) -> usize {
    let norm = |s: &str| -> Vec<char> {
        s.chars()
            .map(|c| {
                if c == '_' {
                    '-'
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    };
    let (a, b) = (norm(a), norm(b));
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            row.push(sub.min(prev[j + 1] + 1).min(row[j] + 1));
        }
        prev = row;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn cmd() -> clap::Command {
        super::super::command()
    }

    #[test]
    fn good_settings_become_flags() {
        let text = "[router]\nknowledge = \"/k/r.dxg\"\nwatch = true\n\
                    [listen]\nidle-timeout = \"15m\"\nmax-clients = 5\n\
                    [limits]\nmax-request-pdu = \"4MiB\"\n[logs]\nno-access-log = false\n\
                    [traces]\notlp-sample = 0.5\n";
        let mut got: Vec<Vec<OsString>> = parse(text, &cmd())
            .unwrap()
            .iter()
            .map(Entry::args)
            .collect();
        let mut want: Vec<Vec<OsString>> = [
            vec!["--knowledge=/k/r.dxg"],
            vec!["--watch"],
            vec!["--idle-timeout=15m"],
            vec!["--max-clients=5"],
            vec!["--max-request-pdu=4MiB"],
            vec![],
            vec!["--otlp-sample=0.5"],
        ]
        .iter()
        .map(|v| v.iter().map(OsString::from).collect())
        .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn mistakes_name_the_setting_and_the_fix() {
        let cases: &[(&str, &str)] = &[
            (
                "[listen]\nidle-timout = \"15m\"\n",
                "[listen] idle-timout: unknown setting; did you mean idle-timeout?",
            ),
            (
                "[listen]\nprobe-intervall = \"1s\"\n",
                "did you mean [dsas] probe-interval?",
            ),
            (
                "[listen]\nprobe-interval = \"1s\"\n",
                "[listen] probe-interval: probe-interval belongs in [dsas]",
            ),
            (
                "[lisen]\nlisten = \"x\"\n",
                "unknown table [lisen]: did you mean [listen]?",
            ),
            (
                "listen = \"x\"\n",
                "listen is outside its table: put it under [listen]",
            ),
            (
                "[listen]\nidle-timeout = \"15x\"\n",
                "[listen] idle-timeout = \"15x\": \"15x\" is not a duration",
            ),
            (
                "[limits]\nmax-request-pdu = \"2GiB\"\n",
                "2GiB is out of range: from 64 bytes to 1GiB",
            ),
            (
                "[router]\nwatch = \"yes\"\n",
                "[router] watch: takes true or false",
            ),
            (
                "[listen]\nmax-clients = [1]\n",
                "takes a string or a number, not array",
            ),
            (
                "[dsas]\nfanout-policy = \"maybe\"\n",
                "[dsas] fanout-policy = \"maybe\": invalid value 'maybe'",
            ),
            ("[router\n", "not TOML"),
            (
                "[router]\nconfig = \"x\"\n",
                "[router] config: unknown setting",
            ),
        ];
        for (text, want) in cases {
            let e: Vec<String> = parse(text, &cmd())
                .expect_err(text)
                .iter()
                .map(|p| p.0.clone())
                .collect();
            let e = e.join("\n");
            assert!(e.contains(want), "{text}: {e}");
        }
        // Every problem, not only the first.
        let e = parse("[listen]\nidle-timeout = \"x\"\nmax-clients = 0\n", &cmd()).unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
    }

    /// The packaged settings file loads, and so do its examples once
    /// uncommented.
    #[test]
    fn the_packaged_file_and_its_examples_load() {
        let text = include_str!("../../../../../packaging/router.toml");
        let keys: Vec<String> = parse(text, &cmd())
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys, ["admin", "access-log", "knowledge", "name"]);
        let examples: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(x)
                    if x.split_once(" = ").is_some_and(|(k, _)| {
                        k.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    }) =>
                {
                    x
                }
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let n = parse(&examples, &cmd()).unwrap().len();
        assert_eq!(n, 23, "{n} settings in the examples:\n{examples}");
    }

    /// docs/settings.md's example of every table loads.
    #[test]
    fn the_documented_example_loads() {
        let doc = include_str!("../../../../../docs/settings.md");
        let example = doc
            .split("## One example per table")
            .nth(1)
            .and_then(|s| s.split("```toml\n").nth(1))
            .and_then(|s| s.split("```").next())
            .unwrap();
        let entries = parse(example, &cmd()).unwrap();
        let mut tables: Vec<&str> = entries.iter().map(|e| e.table).collect();
        tables.dedup();
        tables.sort_unstable();
        tables.dedup();
        assert_eq!(tables.len(), groups::GROUPS.len(), "{tables:?}");
    }

    #[test]
    fn suggestions() {
        let keys = ["idle-timeout", "pdu-timeout", "listen"];
        let cases: &[(&str, Option<&str>)] = &[
            ("idle-timout", Some("idle-timeout")),
            ("idle_timeout", Some("idle-timeout")),
            ("Listen", Some("listen")),
            ("zzz", None),
        ];
        for (w, want) in cases {
            assert_eq!(suggest(w, keys.iter().copied()), *want, "{w}");
        }
    }
}
