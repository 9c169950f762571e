//! The delivery of a client's operation, as one stack built in one place
//! ([`build`]), in one order, from the outside in:
//!
//! 1. [`Watch`]: a watched write's result is learnt from (read-your-writes
//!    by position) and loses the router's post-read control; whether a
//!    write asks its DSA for post-read is answered here.
//! 2. [`Logged`]: the access log's line and the trace; the trace counts
//!    entries as the DSA sent them, before the policy's layer below
//!    strips or drops them. The trace context control is answered here.
//! 3. [`Hide`]: entries lose the attributes the client's rule hides, and
//!    those outside its subtrees are dropped.
//! 4. The operation's own delivery: a client's operation
//!    ([`ToClient`](super::out::ToClient)) or one partition's share of a
//!    spanning search ([`FanPart`](super::fanout::FanPart)); whether the
//!    operation expires, and whether it may be raced, are answered here.
//!
//! Each layer is a [`Layer`](crate::backend::upstream::layer::Layer): it
//! passes on whatever it does not change. The stack is one allocation,
//! its layers called statically.

use super::hide::{Hide, Keep};
use super::logged::{LogCtx, Logged};
use crate::backend::follow::ryw::{Watch, Watched};
use crate::backend::upstream::pending::Sink;
use crate::backend::upstream::Delivery;
use crate::directory::replication::mark::WriteMark;
use crate::observe::otel::OpTrace;
use std::sync::Arc;

/// A client operation's delivery round `D`.
pub(super) type Stack<D> = Watch<Logged<Hide<D>>>;

/// `inner` with the layers a client's operation has: `hide` (what the
/// client's rule keeps from it), `log` (the access log's line, when on),
/// `trace` (when sampled) and `watched` (a write the client's reads
/// follow); where its responses go, and the mark `watched` sets.
pub(super) fn build<D: Delivery + 'static>(
    inner: D,
    hide: Option<Keep>,
    log: Option<Box<LogCtx>>,
    trace: Option<Box<OpTrace>>,
    watched: Option<Watched>,
) -> (Sink, Option<Arc<WriteMark>>) {
    let mark = watched.as_ref().map(|w| w.mark().clone());
    (
        Sink::To(Arc::new(stack(inner, hide, log, trace, watched))),
        mark,
    )
}

/// The stack itself (see the module's documentation for its order).
fn stack<D: Delivery>(
    inner: D,
    hide: Option<Keep>,
    log: Option<Box<LogCtx>>,
    trace: Option<Box<OpTrace>>,
    watched: Option<Watched>,
) -> Stack<D> {
    Watch::new(Logged::new(Hide::wrap(inner, hide), log, trace), watched)
}

#[cfg(test)]
mod tests;
