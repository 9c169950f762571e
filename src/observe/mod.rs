//! What the router tells its operators: the access log, the counters of
//! `/metrics`, OpenTelemetry traces and the client sessions `/status`
//! lists. Written off the operations' path.
//!
//! * [`access`]: the access log, formatted on the operation's thread and
//!   written by a thread of its own.
//! * `metrics`: the counters of `/metrics`, fixed arrays of atomics.
//! * [`catalog`]: every metric family of `/metrics` (name, type, help,
//!   labels) in one table, which the renderers and the reference page use.
//! * [`histogram`]: duration histograms (buckets up to the operation
//!   timeout).
//! * [`process`]: the `process_*` series, read from `/proc/self`.
//! * [`otel`]: traces (`--otlp-endpoint`): a span per sampled operation, a
//!   child per DSA attempt, exported in batches; the W3C trace context
//!   control.
//! * [`clients`]: the client sessions `/status` lists (address, identity,
//!   TLS, since when, handed over).

pub mod access;
pub mod catalog;
pub mod clients;
pub mod histogram;
pub(crate) mod metrics;
pub mod otel;
pub mod process;
