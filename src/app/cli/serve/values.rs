//! The clap side of [`crate::base::units`]: value parsers for duration,
//! size and count flags, so that a bad value is refused while the command
//! line (or the settings file) is read, naming the flag and its range.

use crate::base::units::{Count, Size, Span};
use std::ffi::OsStr;
use std::time::Duration;

/// The error clap shows for a refused value.
fn refused(cmd: &clap::Command, arg: Option<&clap::Arg>, e: impl std::fmt::Display) -> clap::Error {
    let flag = arg
        .and_then(|a| a.get_long())
        .map(|l| format!("--{l}: "))
        .unwrap_or_default();
    clap::Error::raw(
        clap::error::ErrorKind::ValueValidation,
        format!("{flag}{e}\n"),
    )
    .with_cmd(cmd)
}

fn text<'a>(
    cmd: &clap::Command,
    arg: Option<&clap::Arg>,
    v: &'a OsStr,
) -> Result<&'a str, clap::Error> {
    v.to_str().ok_or_else(|| refused(cmd, arg, "not UTF-8"))
}

/// A duration flag: [`Span`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Dur(pub(super) Span);

impl clap::builder::TypedValueParser for Dur {
    type Value = Duration;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        v: &OsStr,
    ) -> Result<Duration, clap::Error> {
        self.0
            .parse(text(cmd, arg, v)?)
            .map_err(|e| refused(cmd, arg, e))
    }
}

/// A size flag in bytes: [`Size`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Bytes(pub(super) Size);

impl clap::builder::TypedValueParser for Bytes {
    type Value = usize;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        v: &OsStr,
    ) -> Result<usize, clap::Error> {
        let n = self
            .0
            .parse(text(cmd, arg, v)?)
            .map_err(|e| refused(cmd, arg, e))?;
        usize::try_from(n).map_err(|e| refused(cmd, arg, e))
    }
}

/// A count flag: [`Count`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Num(pub(super) Count);

impl clap::builder::TypedValueParser for Num {
    type Value = u64;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        v: &OsStr,
    ) -> Result<u64, clap::Error> {
        self.0
            .parse(text(cmd, arg, v)?)
            .map_err(|e| refused(cmd, arg, e))
    }
}

/// A ratio flag, from 0.0 to 1.0.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ratio;

impl clap::builder::TypedValueParser for Ratio {
    type Value = f64;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        v: &OsStr,
    ) -> Result<f64, clap::Error> {
        let s = text(cmd, arg, v)?.trim();
        match s.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
            Ok(_) => Err(refused(
                cmd,
                arg,
                format!("{s} is out of range: from 0.0 to 1.0"),
            )),
            Err(_) => Err(refused(
                cmd,
                arg,
                format!("{s:?} is not a ratio (0.0 to 1.0)"),
            )),
        }
    }
}
