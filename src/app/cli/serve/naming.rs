//! How an error that weighs two settings against each other names them:
//! by where each value came from, so the operator edits the right place.
//! A value from the settings file is `[table] key = VALUE in FILE`, one
//! from the command line (or left at its default) `--key VALUE`.
//! [`super::settings::Origins`] knows where each came from.

/// Names settings for messages.
pub trait Naming {
    /// Setting `flag` with `value` (empty: a switch, on), as it was
    /// given.
    fn show(&self, flag: &str, value: &str) -> String;
    /// Settings that were not given, as they could be: `--a and --b`,
    /// with a settings file also `[table] a and b in FILE`.
    fn missing(&self, flags: &[&str]) -> String;
}

/// Every setting as a flag (no settings file): `demo`, and tests.
pub struct Flags;

impl Naming for Flags {
    fn show(&self, flag: &str, value: &str) -> String {
        as_flag(flag, value)
    }

    fn missing(&self, flags: &[&str]) -> String {
        as_flags(flags)
    }
}

/// `--a and --b`.
pub fn as_flags(flags: &[&str]) -> String {
    let v: Vec<String> = flags.iter().map(|f| format!("--{f}")).collect();
    v.join(" and ")
}

/// `--key VALUE`, or `--key` for a switch (an empty value).
pub fn as_flag(flag: &str, value: &str) -> String {
    if value.is_empty() {
        format!("--{flag}")
    } else {
        format!("--{flag} {value}")
    }
}
