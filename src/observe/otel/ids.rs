//! Span and trace IDs chosen before a span is built: an attempt's span ID
//! goes to its DSA in the trace context control when the request is sent,
//! long before the spans are built at the operation's end. The SDK's span
//! builder takes no IDs, so the provider's ID generator ([`Preset`])
//! hands out the ones [`with`] set on this thread, and random ones
//! otherwise.

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::IdGenerator;
use std::cell::Cell;

thread_local! {
    static SPAN: Cell<Option<[u8; 8]>> = const { Cell::new(None) };
    static TRACE: Cell<Option<[u8; 16]>> = const { Cell::new(None) };
}

/// A new span ID (random, never all zero).
pub(crate) fn span_id() -> [u8; 8] {
    (super::random() | 1).to_be_bytes()
}

/// A new trace ID (random, never all zero).
pub(crate) fn trace_id() -> [u8; 16] {
    let hi = super::random();
    let lo = super::random() | 1;
    (u128::from(hi) << 64 | u128::from(lo)).to_be_bytes()
}

/// Build one span with `f`, which gets span ID `span` and, when it has
/// no parent, trace ID `trace`.
pub(crate) fn with<T>(trace: [u8; 16], span: [u8; 8], f: impl FnOnce() -> T) -> T {
    SPAN.with(|c| c.set(Some(span)));
    TRACE.with(|c| c.set(Some(trace)));
    let t = f();
    SPAN.with(|c| c.set(None));
    TRACE.with(|c| c.set(None));
    t
}

/// The provider's ID generator: the IDs [`with`] set, else random ones.
#[derive(Debug, Default)]
pub(crate) struct Preset;

impl IdGenerator for Preset {
    fn new_trace_id(&self) -> TraceId {
        TraceId::from_bytes(TRACE.with(|c| c.take()).unwrap_or_else(trace_id))
    }

    fn new_span_id(&self) -> SpanId {
        SpanId::from_bytes(SPAN.with(|c| c.take()).unwrap_or_else(span_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_ids_are_handed_out_once_then_random_ones() {
        let g = Preset;
        let (t, s) = ([7u8; 16], [9u8; 8]);
        let (gs, gt) = with(t, s, || (g.new_span_id(), g.new_trace_id()));
        assert_eq!((gs.to_bytes(), gt.to_bytes()), (s, t));
        assert_ne!(g.new_span_id().to_bytes(), s);
        assert_ne!(g.new_span_id(), SpanId::INVALID);
        assert_ne!(g.new_trace_id(), TraceId::INVALID);
    }
}
