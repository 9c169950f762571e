//! The program: its subcommands, the admin API and `ctl`, `demo`.
//!
//! * [`cli`]: the subcommands: `check` and `explain` (their output), and
//!   `serve` and `demo` ([`cli::serve`]: the flags, the startup sequence,
//!   signals and `--watch`).
//! * [`admin`]: the admin HTTP API (status, metrics, control), the control
//!   socket and `ctl`.
//! * `demo`: `dsa-router demo`, a ready setup on loopback with test DSAs
//!   (feature `dev-tools`).
//! * [`fuzzing`]: what the fuzz targets run (`fuzz/`, `scripts/fuzz.sh`).

pub mod admin;
pub mod cli;
#[cfg(feature = "dev-tools")]
pub mod demo;
#[doc(hidden)]
pub mod fuzzing;
