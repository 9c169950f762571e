//! One sampled operation's trace: what it did, recorded as it happens
//! (a few pushes under a lock only this operation takes), turned into
//! spans when it ends ([`OpTrace::answered`], [`OpTrace::failed`]): the
//! operation's span, a child span per DSA attempt (the first, a hedge, a
//! re-send), and events for hedging and failover. The spans carry the
//! times they were recorded with, so building them at the end changes
//! nothing a trace viewer shows; their IDs are chosen when they start
//! ([`super::ids`]), so that a DSA told of its attempt's span
//! ([`OpTrace::control_for`]) names the span the collector gets.
//!
//! A search that spans partitions has an `OpTrace` for the whole search
//! and one per partition's share ([`OpTrace::leg`]), a child of it, with
//! that share's DSA attempts as its children.

use super::ids;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// Why a DSA was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The operation's first DSA.
    First,
    /// A hedge: the read was slow, a second DSA was asked too.
    Hedge,
    /// A re-send: the DSA before failed the operation before any response
    /// went out (failover).
    Resend,
}

impl Attempt {
    fn name(self) -> &'static str {
        match self {
            Attempt::First => "first",
            Attempt::Hedge => "hedge",
            Attempt::Resend => "re-send",
        }
    }
}

struct Try {
    span: [u8; 8],
    dsa: String,
    why: Attempt,
    start: Instant,
    end: Option<(Instant, &'static str)>,
}

struct Event {
    at: Instant,
    name: &'static str,
    attrs: Vec<KeyValue>,
}

struct Rec {
    tries: Vec<Try>,
    /// The span ID of the next attempt, told to its DSA before the
    /// attempt is recorded ([`OpTrace::control_for`]).
    next: [u8; 8],
    events: Vec<Event>,
    entries: u64,
    bytes: u64,
    done: bool,
}

/// Where a trace's span hangs.
#[derive(Clone, Copy)]
pub(super) struct Parent {
    pub span: [u8; 8],
    /// The caller's span (from the request's control), not the router's.
    pub remote: bool,
}

/// A sampled operation's trace (see the module documentation).
pub struct OpTrace {
    name: Cow<'static, str>,
    kind: SpanKind,
    attrs: Vec<KeyValue>,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<Parent>,
    /// The caller's `tracestate`, passed on.
    state: Option<String>,
    wall: SystemTime,
    start: Instant,
    rec: Mutex<Rec>,
}

impl OpTrace {
    /// The trace of operation `op` in trace `trace_id`, under `parent`.
    pub(super) fn new(
        op: &'static str,
        attrs: Vec<KeyValue>,
        trace_id: [u8; 16],
        parent: Option<Parent>,
        state: Option<String>,
    ) -> Self {
        Self::span(
            Cow::Owned(format!("ldap {op}")),
            SpanKind::Server,
            attrs,
            trace_id,
            parent,
            state,
        )
    }

    fn span(
        name: Cow<'static, str>,
        kind: SpanKind,
        attrs: Vec<KeyValue>,
        trace_id: [u8; 16],
        parent: Option<Parent>,
        state: Option<String>,
    ) -> Self {
        OpTrace {
            name,
            kind,
            attrs,
            trace_id,
            span_id: ids::span_id(),
            parent,
            state,
            wall: SystemTime::now(),
            start: Instant::now(),
            rec: Mutex::new(Rec {
                tries: Vec::new(),
                next: ids::span_id(),
                events: Vec::new(),
                entries: 0,
                bytes: 0,
                done: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rec> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The trace of one partition's share of this search (which spans
    /// partitions): a child span `search partition <partition>`.
    pub fn leg(&self, partition: &str, base: &str) -> Box<OpTrace> {
        let attrs = vec![
            KeyValue::new("ldap.operation", "search"),
            KeyValue::new("ldap.dn", base.to_string()),
            KeyValue::new("dsa_router.partition", partition.to_string()),
        ];
        Box::new(Self::span(
            Cow::Owned(format!("search partition {partition}")),
            SpanKind::Internal,
            attrs,
            self.trace_id,
            Some(Parent {
                span: self.span_id,
                remote: false,
            }),
            self.state.clone(),
        ))
    }

    /// The trace context control for the request about to go to a DSA:
    /// the span of the attempt that placing it records next (by
    /// [`OpTrace::placed`] or [`OpTrace::hedged`]) as the parent.
    pub fn control(&self) -> Vec<u8> {
        let span = self.lock().next;
        super::parent::control(self.trace_id, span, self.state.as_deref())
    }

    /// The operation now runs on DSA `dsa`: its first attempt, or a
    /// re-send after the DSA before failed it.
    pub fn placed(&self, dsa: &str) {
        let now = Instant::now();
        let mut r = self.lock();
        let first = r.tries.is_empty();
        let before = r
            .tries
            .iter_mut()
            .rev()
            .find(|t| t.why != Attempt::Hedge && t.end.is_none());
        let why = match before {
            None if first => Attempt::First,
            None => Attempt::Resend,
            Some(t) => {
                t.end = Some((now, "failed over"));
                let from = t.dsa.clone();
                r.events.push(Event {
                    at: now,
                    name: "failover",
                    attrs: vec![
                        KeyValue::new("dsa.from", from),
                        KeyValue::new("dsa.to", dsa.to_string()),
                    ],
                });
                Attempt::Resend
            }
        };
        let span = std::mem::replace(&mut r.next, ids::span_id());
        r.tries.push(Try {
            span,
            dsa: dsa.to_string(),
            why,
            start: now,
            end: None,
        });
    }

    /// The read was hedged: its second leg runs on `dsa`.
    pub fn hedged(&self, dsa: &str) {
        let now = Instant::now();
        let mut r = self.lock();
        r.events.push(Event {
            at: now,
            name: "hedged",
            attrs: vec![KeyValue::new("dsa.to", dsa.to_string())],
        });
        let span = std::mem::replace(&mut r.next, ids::span_id());
        r.tries.push(Try {
            span,
            dsa: dsa.to_string(),
            why: Attempt::Hedge,
            start: now,
            end: None,
        });
    }

    /// A DSA that served the operation was ejected as an outlier.
    pub fn ejected(&self, dsa: &str, reason: &str) {
        self.lock().events.push(Event {
            at: Instant::now(),
            name: "ejection",
            attrs: vec![
                KeyValue::new("dsa", dsa.to_string()),
                KeyValue::new("reason", reason.to_string()),
            ],
        });
    }

    /// An entry (or reference) of `len` bytes went to the client.
    pub fn entry(&self, len: usize) {
        let mut r = self.lock();
        r.entries += 1;
        r.bytes += len as u64;
    }

    /// DSA `dsa` (by its hedge when `hedge`) answered with `code`.
    pub fn answered(&self, dsa: &str, hedge: bool, code: u8) {
        self.end(Some((dsa, hedge)), code, None);
    }

    /// The router answered `code` itself, as it does for a search that
    /// spans partitions.
    pub fn ended(&self, code: u8) {
        self.end(None, code, None);
    }

    /// The router answered `code` with `message` (`dsa`, when not empty,
    /// let it down).
    pub fn failed(&self, dsa: &str, code: u8, message: &str) {
        let at = (!dsa.is_empty()).then_some((dsa, false));
        self.end(at, code, Some(message));
    }

    fn end(&self, from: Option<(&str, bool)>, code: u8, message: Option<&str>) {
        let now = Instant::now();
        let mut r = self.lock();
        if r.done {
            return;
        }
        r.done = true;
        let winner = from.and_then(|(dsa, hedge)| {
            r.tries.iter().rposition(|t| {
                t.end.is_none() && t.dsa == dsa && (t.why == Attempt::Hedge) == hedge
            })
        });
        for (i, t) in r.tries.iter_mut().enumerate() {
            if t.end.is_none() {
                let how = match (Some(i) == winner, message.is_some()) {
                    (true, false) => "answered",
                    (true, true) => "failed",
                    (false, _) => "abandoned",
                };
                t.end = Some((now, how));
            }
        }
        let Some(tracer) = super::tracer() else {
            return;
        };
        self.emit(tracer, &r, now, code, message);
    }

    fn wall(&self, t: Instant) -> SystemTime {
        self.wall + t.saturating_duration_since(self.start)
    }

    fn emit(
        &self,
        tracer: &opentelemetry_sdk::trace::SdkTracer,
        r: &Rec,
        now: Instant,
        code: u8,
        message: Option<&str>,
    ) {
        let state = self
            .state
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let parent_cx = match self.parent {
            Some(p) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from_bytes(self.trace_id),
                SpanId::from_bytes(p.span),
                TraceFlags::SAMPLED,
                p.remote,
                state,
            )),
            None => Context::new(),
        };
        let mut attrs = self.attrs.clone();
        attrs.push(KeyValue::new("ldap.result_code", i64::from(code)));
        attrs.push(KeyValue::new("ldap.entries", r.entries as i64));
        attrs.push(KeyValue::new("ldap.entry_bytes", r.bytes as i64));
        attrs.push(KeyValue::new("dsa.attempts", r.tries.len() as i64));
        let root = ids::with(self.trace_id, self.span_id, || {
            tracer
                .span_builder(self.name.clone())
                .with_kind(self.kind.clone())
                .with_start_time(self.wall)
                .with_attributes(attrs)
                .start_with_context(tracer, &parent_cx)
        });
        let cx = parent_cx.with_span(root);
        cx.span().set_status(match message {
            Some(m) => Status::error(m.to_string()),
            None if code == 0 => Status::Ok,
            None => Status::Unset,
        });
        for t in &r.tries {
            let (end, how) = t.end.unwrap_or((now, "abandoned"));
            let child = ids::with(self.trace_id, t.span, || {
                tracer
                    .span_builder(format!("dsa {}", t.dsa))
                    .with_kind(SpanKind::Client)
                    .with_start_time(self.wall(t.start))
                    .with_attributes(vec![
                        KeyValue::new("dsa", t.dsa.clone()),
                        KeyValue::new("dsa.attempt", t.why.name()),
                        KeyValue::new("dsa.outcome", how),
                    ])
                    .start_with_context(tracer, &cx)
            });
            let mut child = child;
            opentelemetry::trace::Span::end_with_timestamp(&mut child, self.wall(end));
        }
        let span = cx.span();
        for e in &r.events {
            span.add_event_with_timestamp(e.name, self.wall(e.at), e.attrs.clone());
        }
        span.end_with_timestamp(self.wall(now));
    }
}

#[cfg(test)]
impl OpTrace {
    /// A sampled trace of `op` with no parent, whatever the settings (a
    /// delivery's tests).
    pub fn for_test(op: &'static str) -> Box<OpTrace> {
        Box::new(OpTrace::new(op, Vec::new(), ids::trace_id(), None, None))
    }

    /// What was recorded so far: entries, their bytes, and the DSA
    /// attempts with why each was made.
    pub fn recorded(&self) -> (u64, u64, Vec<Attempt>) {
        let r = self.lock();
        (r.entries, r.bytes, r.tries.iter().map(|t| t.why).collect())
    }
}
