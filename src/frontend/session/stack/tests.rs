#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;
use crate::admission::policy::schema::Schema;
use crate::admission::policy::shield::Shield;
use crate::backend::dsa_state::{Advertised, DsaState};
use crate::backend::upstream::batch::Batch;
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::hedge::Race;
use crate::backend::upstream::Source;
use crate::base::error::{Error, Kind};
use crate::directory::replication::{Config, Replication};
use crate::observe::otel::{Attempt, OID_TRACE_CONTEXT};
use crate::proto::wire::frame::{self, Frame, Header, Pdu};
use crate::proto::wire::postread::OID_POST_READ;
use crate::proto::wire::response::{self, Code};
use bytes::{Bytes, BytesMut};
use std::sync::Mutex;

/// What reached the innermost delivery.
#[derive(Default)]
struct Seen {
    entries: Mutex<Vec<Vec<u8>>>,
    calls: Mutex<Vec<&'static str>>,
}

impl Seen {
    fn note(&self, call: &'static str) {
        self.calls.lock().unwrap().push(call);
    }

    fn calls(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

/// The innermost delivery: records what reaches it, and answers what it
/// is asked otherwise than the defaults would (so that an answer through
/// the stack says which layer gave it).
struct Probe(Arc<Seen>);

impl Delivery for Probe {
    fn deliver(&self, r: Frame<'_>, _batch: &mut Batch) {
        let Frame { pdu, h: _ } = r;
        self.0.entries.lock().unwrap().push(pdu.to_vec());
    }
    fn finish(&self, _done: Pdu, _from: Source<'_>, _batch: &mut Batch) {
        self.0.note("finish");
    }
    fn fail(&self, _e: &Error, _at: Source<'_>) {
        self.0.note("fail");
    }
    fn placed(&self, _conn: &Arc<Conn>, _id: i32) -> bool {
        self.0.note("placed");
        true
    }
    fn expires(&self) -> bool {
        self.0.note("expires");
        false
    }
    fn raced(&self, _race: &Arc<Race>, _conn: &Arc<Conn>, _id: i32) -> bool {
        self.0.note("raced");
        false
    }
    fn hedge_placed(&self, _conn: &Arc<Conn>) {
        self.0.note("hedge_placed");
    }
    fn trace_control(&self, _conn: &Arc<Conn>) -> Option<Vec<u8>> {
        self.0.note("trace_control");
        Some(b"inner".to_vec())
    }
    fn post_read(&self, _conn: &Arc<Conn>) -> bool {
        self.0.note("post_read");
        true
    }
}

/// What a rule hiding `mail` keeps.
fn hiding_mail() -> Keep {
    let schema = Arc::new(Schema::new(Vec::new(), true));
    Keep::hiding(Shield {
        hidden: schema.hidden(&["mail".to_string()]),
        refused: Default::default(),
        subtrees: Vec::new(),
    })
}

/// A connection to a DSA that advertises `controls`.
fn conn(controls: &[&str]) -> Arc<Conn> {
    let dsa = Arc::new(DsaState::new("D1"));
    dsa.set_advertised(Advertised {
        controls: controls.iter().map(|c| c.to_string()).collect(),
        ..Advertised::default()
    });
    Conn::unstarted(dsa)
}

fn pdu(b: BytesMut) -> (Bytes, Header) {
    let b = b.freeze();
    let h = frame::header(&b).unwrap();
    (b, h)
}

/// An add request (which a DSA may be asked to read back).
fn add_request() -> (Bytes, Header) {
    let op = [&[0x68, 0x08, 0x04, 0x04][..], b"cn=x", &[0x30, 0x00]].concat();
    let msg = [&[0x30, op.len() as u8 + 3, 0x02, 0x01, 0x01][..], &op].concat();
    pdu(BytesMut::from(&msg[..]))
}

/// The trace of a stack's [`Logged`] layer.
fn trace_of<D: Delivery>(s: &Stack<D>) -> &OpTrace {
    // The layer's own methods are not in scope here: a call on a stack
    // is its delivery's.
    crate::backend::upstream::layer::Layer::inner(s)
        .trace()
        .unwrap()
}

/// The order of the two layers an entry passes: the trace (outside)
/// counts it as its DSA sent it; the policy (inside) strips it on its way
/// to the client.
#[test]
fn the_trace_counts_an_entry_as_sent_and_the_client_gets_it_stripped() {
    let seen = Arc::new(Seen::default());
    let trace = Some(OpTrace::for_test("search"));
    let s = stack(Probe(seen.clone()), Some(hiding_mail()), None, trace, None);
    let mut b = BytesMut::new();
    let attrs = vec![
        ("cn".to_string(), vec![b"a".to_vec()]),
        ("mail".to_string(), vec![b"a@example.com".to_vec()]),
    ];
    response::entry(1, "cn=a,dc=example", attrs, &mut b);
    let (entry, h) = pdu(b);
    s.deliver(Frame::new(&entry, &h), &mut Batch::default());
    let got = seen.entries.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let has = |pdu: &[u8], what: &[u8]| pdu.windows(what.len()).any(|w| w == what);
    assert!(has(&entry, b"mail") && !has(&got[0], b"mail"), "stripped");
    assert!(has(&got[0], b"cn"), "the rest kept");
    let (entries, bytes, _) = trace_of(&s).recorded();
    assert_eq!(entries, 1);
    assert_eq!(bytes, entry.len() as u64, "counted before the policy");
}

#[test]
fn each_question_reaches_the_layer_that_answers_it() {
    let seen = Arc::new(Seen::default());
    let trace = Some(OpTrace::for_test("search"));
    let s = stack(Probe(seen.clone()), Some(hiding_mail()), None, trace, None);
    let c = conn(&[OID_TRACE_CONTEXT, OID_POST_READ]);
    // Placing: the innermost delivery's answer, recorded by the trace.
    assert!(s.placed(&c, 1));
    assert_eq!(seen.calls(), ["placed"]);
    // The trace context control is the trace's; the inner's is not asked.
    let tc = s.trace_control(&c).unwrap();
    assert_ne!(tc, b"inner".to_vec());
    // A read asks for no post-read, and nothing below the outermost
    // layer is asked.
    assert!(!s.post_read(&c));
    assert_eq!(seen.calls(), Vec::<&str>::new());
    // The hedge is recorded by the trace and passed on.
    s.hedge_placed(&c);
    assert_eq!(seen.calls(), ["hedge_placed"]);
    let (_, _, tries) = trace_of(&s).recorded();
    assert_eq!(tries, [Attempt::First, Attempt::Hedge]);
    // Whether it was raced and whether it expires: the innermost's.
    let (race, _, _) = Race::start(
        Arc::new(Probe(Arc::default())),
        &c,
        1,
        None,
        0,
        tokio::time::Instant::now(),
    );
    assert!(!s.raced(&race, &c, 1));
    assert!(!s.expires());
    assert_eq!(seen.calls(), ["raced", "expires"]);
    // The end goes through to the client.
    let (done, dh) = pdu({
        let mut b = BytesMut::new();
        response::result(1, 0x65, Code::Success, "", "", &mut b);
        b
    });
    s.finish(Pdu::new(done, dh), Source::dsa("D1"), &mut Batch::default());
    s.fail(&Error::new(Kind::Unreachable, "x"), Source::dsa(""));
    assert_eq!(seen.calls(), ["finish", "fail"]);
}

#[test]
fn untraced_the_trace_context_control_is_not_asked_below() {
    let seen = Arc::new(Seen::default());
    let s = stack(Probe(seen.clone()), None, None, None, None);
    let c = conn(&[OID_TRACE_CONTEXT]);
    assert_eq!(s.trace_control(&c), None);
    s.hedge_placed(&c);
    assert_eq!(seen.calls(), ["hedge_placed"]);
}

#[test]
fn a_watched_write_asks_for_post_read_where_its_dsa_has_it_and_sets_its_mark() {
    let seen = Arc::new(Seen::default());
    let rep = Arc::new(Replication::new(Config::standard()));
    let (req, rh) = add_request();
    let watched = crate::backend::follow::ryw::watched(&rep, true, true, Frame::new(&req, &rh));
    assert!(watched.is_some());
    let (sink, mark) = build(Probe(seen.clone()), None, None, None, watched);
    let (Sink::To(d), Some(mark)) = (sink, mark) else {
        panic!("a delivery and a mark");
    };
    assert!(d.post_read(&conn(&[OID_POST_READ])));
    assert!(
        !d.post_read(&conn(&[])),
        "not where the DSA lacks the control"
    );
    assert_eq!(seen.calls(), Vec::<&str>::new(), "answered outermost");
    let (done, dh) = pdu({
        let mut b = BytesMut::new();
        response::result(1, 0x69, Code::Success, "", "", &mut b);
        b
    });
    d.finish(Pdu::new(done, dh), Source::dsa("D1"), &mut Batch::default());
    assert!(mark.acked.get().is_some(), "acknowledged");
    assert_eq!(seen.calls(), ["finish"]);
    // A read is not watched: no mark.
    let unwatched = crate::backend::follow::ryw::watched(&rep, true, false, Frame::new(&req, &rh));
    assert!(unwatched.is_none());
}
