//! The router as one service: its settings and the context every task
//! shares.
//!
//! * [`config`]: the configuration, plain data filled by the command line.
//! * [`context`]: the application context ([`context::Context`]): the
//!   configuration, metrics and the routing snapshot, swapped whole.
//! * [`settings_file`]: what a reload asks of `serve`'s settings file.

pub mod config;
pub mod context;
pub mod settings_file;
