//! OpenTelemetry traces (`--otlp-endpoint`, off by default): a span per
//! sampled operation with a child span per DSA attempt, exported over
//! OTLP/HTTP (protobuf) in batches by the SDK's batch processor, on a
//! thread of its own, never on an operation's path.
//!
//! **Sampling** is decided when an operation starts, before anything is
//! recorded: an operation whose request carries the trace context control
//! ([`OID_TRACE_CONTEXT`]) follows its caller's decision (the
//! `traceparent`'s sampled flag) and continues its trace, as long as
//! such operations stay within `--otlp-caller-rate` (`cap`: past it, a
//! caller's "sampled" counts for nothing, so no client can make the
//! router trace all its operations); any other is sampled at
//! `--otlp-sample` (a ratio, default 1.0 once an endpoint is given). An operation that is not sampled costs one load and, at a
//! ratio below 1, one random number: no span, no allocation.
//!
//! **What a span says:** the operation, its partition, DN, client
//! address, result code, entries and bytes returned, DSA attempts; never
//! a password or a filter (a filter's values are often what a user
//! typed).
//!
//! **Conveyed to DSAs:** a traced operation's request to a DSA that
//! advertises the trace context control (`supportedControl` in its root
//! DSE) carries it, not critical, with the attempt's span as the parent
//! (and the caller's `tracestate`); the caller's own control is replaced.
//! Other DSAs get the request as the client sent it. An operation that is
//! not traced costs one branch here.
//!
//! # Layout
//! * `mod.rs`: the switch, the sampling decision, [`start`].
//! * `op`: one operation's recording and its spans.
//! * `cap`: the rate of operations traced because their caller asked.
//! * `parent`: the W3C `traceparent` in the trace context control, read
//!   from a client's request and written into a DSA's.
//! * `ids`: span and trace IDs chosen when an operation or attempt starts.
//! * `export`: the exporter (OTLP/HTTP over `ureq`, already linked for
//!   `ctl`) and the tracer provider.

mod cap;
mod export;
mod ids;
mod op;
mod parent;

pub use export::Settings;
pub use op::{Attempt, OpTrace};
pub use parent::{TraceParent, OID_TRACE_CONTEXT};

use opentelemetry::KeyValue;
use std::cell::Cell;
use std::sync::OnceLock;

struct Otel {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
    /// Operations sampled out of 2^64 (ratio * 2^64).
    threshold: u64,
    /// Operations traced because their caller asked, per second.
    cap: cap::Cap,
}

static OTEL: OnceLock<Otel> = OnceLock::new();

/// Start exporting traces as `s` says (once; later calls do nothing).
pub fn init(s: &Settings) -> crate::base::error::Result<()> {
    if OTEL.get().is_some() {
        return Ok(());
    }
    let provider = export::provider(s)?;
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "dsa-router");
    let threshold = if s.ratio >= 1.0 {
        u64::MAX
    } else {
        (s.ratio.max(0.0) * u64::MAX as f64) as u64
    };
    let _ = OTEL.set(Otel {
        provider,
        tracer,
        threshold,
        cap: cap::Cap::new(s.caller_rate),
    });
    Ok(())
}

/// Whether traces are exported.
pub fn enabled() -> bool {
    OTEL.get().is_some()
}

fn tracer() -> Option<&'static opentelemetry_sdk::trace::SdkTracer> {
    OTEL.get().map(|o| &o.tracer)
}

/// Send what is batched and stop the exporter (at exit).
pub fn shutdown() {
    if let Some(o) = OTEL.get() {
        let _ = o.provider.shutdown();
    }
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// A random number per call (xorshift64*, seeded per thread).
fn random() -> u64 {
    RNG.with(|c| {
        let mut x = c.get();
        if x == 0 {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1);
            let id = &x as *const u64 as u64;
            x = (t ^ id.rotate_left(32)) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// The sampling decision for an operation whose request carried the
/// trace context `control` (its value), if any: the caller's, while `cap`
/// lets its "sampled" through, else the ratio's. The trace is continued
/// (the caller's trace ID and parent) either way, when sampled.
fn sampled(threshold: u64, cap: &cap::Cap, control: Option<&[u8]>) -> (bool, Option<TraceParent>) {
    let ours = || threshold == u64::MAX || random() < threshold;
    match control.and_then(TraceParent::parse) {
        Some(p) if !p.sampled => (false, Some(p)),
        Some(p) => (ours() || cap.take(std::time::Instant::now()), Some(p)),
        None => (ours(), None),
    }
}

/// The trace of an operation about to be placed, when traces are on and
/// it is sampled: `op` (its name) on `dn` in `partition`, from `client`.
pub fn start(
    op: &'static str,
    dn: &str,
    partition: &str,
    client: &str,
    control: Option<&[u8]>,
) -> Option<Box<OpTrace>> {
    let o = OTEL.get()?;
    let (yes, parent) = sampled(o.threshold, &o.cap, control);
    if !yes {
        return None;
    }
    let attrs = vec![
        KeyValue::new("ldap.operation", op),
        KeyValue::new("ldap.dn", dn.to_string()),
        KeyValue::new("dsa_router.partition", partition.to_string()),
        KeyValue::new("client.address", client.to_string()),
    ];
    let (trace_id, parent) = match parent {
        Some(p) => (
            p.trace_id,
            Some(op::Parent {
                span: p.parent_id,
                remote: true,
            }),
        ),
        None => (ids::trace_id(), None),
    };
    let state = parent
        .and(control)
        .and_then(parent::tracestate)
        .map(str::to_string);
    Some(Box::new(OpTrace::new(op, attrs, trace_id, parent, state)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_s_decision_is_followed_and_the_ratio_holds_otherwise() {
        let yes = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let no = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let cap = cap::Cap::new(1000);
        assert!(
            sampled(0, &cap, Some(yes)).0,
            "sampled by the caller, ratio 0"
        );
        assert!(
            !sampled(u64::MAX, &cap, Some(no)).0,
            "not sampled by the caller"
        );
        assert!(
            sampled(u64::MAX, &cap, Some(b"junk")).0,
            "malformed: own decision"
        );
        assert!(!sampled(0, &cap, None).0);
        // 1% of 100,000: within 5 standard deviations (about 157).
        let n = (0..100_000)
            .filter(|_| sampled(u64::MAX / 100, &cap, None).0)
            .count();
        assert!((840..=1160).contains(&n), "{n} sampled of 100,000 at 1%");
    }

    #[test]
    fn a_caller_cannot_have_every_operation_traced() {
        let yes = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        // Ratio 0, a cap of 50 per second: 100,000 operations asking at
        // once get 50 traces (the burst), and carry the caller's trace.
        let cap = cap::Cap::new(50);
        let t0 = std::time::Instant::now();
        let n = (0..100_000)
            .filter(|_| sampled(0, &cap, Some(yes)).0)
            .count();
        // The burst, and one per 20 ms the loop took.
        let refilled = (t0.elapsed().as_secs_f64() * 50.0).ceil() as usize;
        assert!((50..=51 + refilled).contains(&n), "{n} traced");
        // At ratio 1% past the cap, about 1% of them.
        let n = (0..100_000)
            .filter(|_| sampled(u64::MAX / 100, &cap, Some(yes)).0)
            .count();
        assert!((840..=1200).contains(&n), "{n} traced past the cap at 1%");
        let (_, parent) = sampled(0, &cap, Some(yes));
        assert!(parent.is_some(), "the caller's trace is kept");
    }
}
