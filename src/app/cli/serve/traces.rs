//! The flags of OpenTelemetry traces ([`TraceArgs`]), turned into
//! `crate::observe::otel`'s settings.

use super::values::{Dur, Ratio};
use crate::base::error::Result;
use crate::base::units::Span;
use std::time::Duration;

/// `--otlp-interval`.
const INTERVAL: Span = Span::secs(Duration::from_millis(10), Duration::from_secs(3600));

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = super::groups::TRACES)]
pub struct TraceArgs {
    /// Export OpenTelemetry traces over OTLP/HTTP (protobuf) to this
    /// collector: a base URL (`http://collector:4318`, to which
    /// `/v1/traces` is added) or the traces URL itself. Off by default. A
    /// span per sampled operation (operation, DN, partition, client
    /// address, result code, entries and bytes returned; never passwords
    /// or filters), a child span per DSA attempt (the first, a hedge, a
    /// re-send), events for hedging and failover.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The share of operations traced (0.0-1.0) when the request carries
    /// no trace context; an operation whose request carries the trace
    /// context control (OID 2.25.65172751917474745695309622528529703499,
    /// a W3C `traceparent` as its value) follows its caller's sampling
    /// decision and continues its trace.
    #[arg(long, default_value_t = 1.0, value_parser = Ratio, value_name = "RATIO")]
    pub otlp_sample: f64,
    /// At most this many operations a second are traced because their
    /// request's trace context asked (the caller sampled it); past it,
    /// such an operation is sampled at --otlp-sample like any other, so
    /// no client can have all its operations traced and exported (0: a
    /// caller's flag is never followed).
    #[arg(long, default_value_t = 100, value_name = "PER_SECOND")]
    pub otlp_caller_rate: u32,
    /// How often batches of spans are sent (a bare number is seconds).
    #[arg(long, default_value = "1s", value_parser = Dur(INTERVAL), value_name = "DURATION")]
    pub otlp_interval: Duration,
}

impl TraceArgs {
    /// Start exporting, when an endpoint is given.
    pub fn start(&self) -> Result<()> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Ok(());
        };
        crate::observe::otel::init(&crate::observe::otel::Settings {
            endpoint: endpoint.clone(),
            ratio: self.otlp_sample,
            every: self.otlp_interval,
            caller_rate: self.otlp_caller_rate,
        })?;
        tracing::info!(
            endpoint = %endpoint,
            sample = self.otlp_sample,
            "exporting OpenTelemetry traces"
        );
        Ok(())
    }
}
