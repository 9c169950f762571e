//! `dsa-router config --defaults`: a settings file with every setting at
//! its default, each with its help text, which `serve --config` loads
//! as it is. Settings without a default are there commented out.

use super::super::groups;
use super::file::{is_switch, settable};
use std::fmt::Write;

const HEAD: &str = "\
# dsa-router settings file: `dsa-router serve --config FILE`.
# Every setting at its default, in tables named like the headings of
# `dsa-router serve --help`, keys named like its flags. A flag given on
# the command line overrides this file; this file overrides knowledge's
# `set dsa-router-*` lines. Durations: 500ms, 15s, 15m, 2h (a bare number
# is in the unit the setting's help names); sizes: 4096, 64KiB, 4MiB, 1GiB
# (a bare number is bytes). Check it with `dsa-router check --config FILE`.
";

/// The text of `config --defaults`.
pub fn defaults() -> String {
    let cmd = super::command();
    let mut out = String::from(HEAD);
    for (_, table) in groups::GROUPS {
        let _ = write!(out, "\n[{table}]\n");
        for (_, a) in settable(&cmd).filter(|(t, _)| *t == table) {
            setting(&mut out, a);
        }
    }
    out
}

/// One setting: its help as comments, then `key = default` (commented out
/// without a default).
fn setting(out: &mut String, a: &clap::Arg) {
    let Some(key) = a.get_long() else {
        return;
    };
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    if !help.ends_with(['.', ')', ':']) {
        help.push('.');
    }
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|_| !is_switch(a))
        .map(|v| v.get_name().to_string())
        .collect();
    if !values.is_empty() {
        let _ = write!(help, " One of: {}.", values.join(", "));
    }
    out.push('\n');
    for line in wrap(&help, 74) {
        let _ = writeln!(out, "# {line}");
    }
    // A switch's default (false) is set when clap builds the command.
    let default = match is_switch(a) {
        true => Some("false".into()),
        false => a.get_default_values().first().map(|v| v.to_string_lossy()),
    };
    let placeholder = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_default();
    match default {
        Some(v) => {
            let _ = writeln!(out, "{key} = {}", value(&v));
        }
        None if a.is_required_set() => {
            let _ = writeln!(
                out,
                "# Required, here or on the command line.\n# {key} = \"{placeholder}\""
            );
        }
        None => {
            let _ = writeln!(out, "# {key} = \"{placeholder}\"");
        }
    }
}

/// A value in TOML: numbers and booleans bare, the rest a string.
fn value(v: &str) -> String {
    let number = !v.is_empty()
        && v.chars().all(|c| c.is_ascii_digit() || c == '.')
        && v.parse::<f64>().is_ok();
    if number || v == "true" || v == "false" {
        v.to_string()
    } else {
        serde_json::to_string(v).unwrap_or_else(|_| format!("{v:?}"))
    }
}

/// `text` in lines of at most `width` characters (a longer word alone).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_defaults_load_as_they_are_and_give_the_default_configuration() {
        let text = defaults();
        let entries = super::super::file::parse(&text, &super::super::command()).unwrap();
        // Every settable flag is in it, commented out or set.
        let cmd = super::super::command();
        for (table, a) in settable(&cmd) {
            let key = a.get_long().unwrap();
            let set = format!("\n{key} = ");
            let commented = format!("\n# {key} = ");
            assert!(
                text.contains(&set) || text.contains(&commented),
                "[{table}] {key}"
            );
        }
        // Loaded with a knowledge file, it configures what no file does.
        let origins = |file: Vec<super::super::file::Entry>| super::super::Origins {
            from_file: file,
            args: vec!["--knowledge".into(), "/k".into()],
            ..Default::default()
        };
        let (_, a) = super::super::reread::parse(&origins(entries)).unwrap();
        let (_, b) = super::super::reread::parse(&origins(Vec::new())).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn values() {
        let cases = [
            ("10000", "10000"),
            ("1", "1"),
            ("0.5", "0.5"),
            ("false", "false"),
            ("15m", "\"15m\""),
            ("", "\"\""),
            ("(objectClass=*)", "\"(objectClass=*)\""),
            ("127.0.0.1:8389", "\"127.0.0.1:8389\""),
        ];
        for (v, want) in cases {
            assert_eq!(value(v), want, "{v}");
        }
    }
}
