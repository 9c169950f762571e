//! What the upstream unit tests share: a DSA connection over an in-memory
//! pipe to a DSA that never answers unless the test writes for it, a
//! delivery that records what it is handed, and a few PDUs.

#![allow(clippy::unwrap_used)]

use super::batch::Batch;
use super::conn::Conn;
use super::pending::{Kind, Pending, Sink};
use super::{Delivery, Resend, Source};
use crate::backend::dsa_state::DsaState;
use crate::backend::settings::Limits;
use crate::base::error::Error;
use crate::base::outbox::WriteEnd;
use crate::proto::wire::frame::{self, Frame, Pdu};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Records what the connection hands an operation.
#[derive(Default)]
pub(super) struct Recorder {
    pub failed: Mutex<Vec<Error>>,
    pub finished: Mutex<usize>,
}

impl Delivery for Recorder {
    fn deliver(&self, _r: Frame<'_>, _batch: &mut Batch) {}
    fn finish(&self, _done: Pdu, _from: Source<'_>, _batch: &mut Batch) {
        *self.finished.lock().unwrap() += 1;
    }
    fn fail(&self, e: &Error, _at: Source<'_>) {
        self.failed.lock().unwrap().push(e.clone());
    }
    fn placed(&self, _conn: &Arc<Conn>, _id: i32) -> bool {
        true
    }
}

/// A way to re-send that never finds another DSA: the operation is failed
/// as it would be with nowhere else to go.
pub(super) struct NoResend;

impl Resend for NoResend {
    fn resend(self: Box<Self>, p: Pending, failed: &str, why: Error) {
        p.answer(failed, why);
    }
    fn hedger(&self) -> Box<dyn Resend> {
        Box::new(NoResend)
    }
}

pub(super) fn limits(op_timeout: Duration) -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(1),
        op_timeout,
        op_total_timeout: Duration::ZERO,
        bind_timeout: op_timeout,
        max_response_pdu: 1 << 20,
        fall: 3,
        max_own_connections: 0,
        spare_connections: 0,
    }
}

/// A connection to a DSA that reads requests and never answers.
pub(super) fn silent_dsa(op_timeout: Duration) -> (Arc<Conn>, tokio::io::DuplexStream) {
    silent_dsa_with(limits(op_timeout))
}

/// [`silent_dsa`] with `limits`.
pub(super) fn silent_dsa_with(limits: Limits) -> (Arc<Conn>, tokio::io::DuplexStream) {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (rd, wr) = tokio::io::split(ours);
    let dsa = Arc::new(DsaState::new("D1"));
    let conn = super::connect::start_halves(dsa, rd, |_| WriteEnd::Stream(wr), limits, None);
    (conn, theirs)
}

pub(super) fn search_pdu() -> Vec<u8> {
    // A base search of the root DSE, message ID 7.
    let mut b = vec![0x30, 0x25, 0x02, 0x01, 0x07, 0x63, 0x20, 0x04, 0x00];
    b.extend_from_slice(&[0x0a, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x02, 0x01, 0x00]);
    b.extend_from_slice(&[0x02, 0x01, 0x00, 0x01, 0x01, 0x00, 0x87, 0x0b]);
    b.extend_from_slice(b"objectClass");
    b.extend_from_slice(&[0x30, 0x00]);
    b
}

/// A root DSE search submitted on `conn`, answered to a recorder; its
/// message ID there.
pub(super) fn watch(conn: &Arc<Conn>) -> (Arc<Recorder>, i32) {
    let rec = Arc::new(Recorder::default());
    let id = submit_search(conn, rec.clone());
    (rec, id)
}

/// A root DSE search submitted on `conn` for delivery `d` (which
/// learns where it runs); its message ID there.
pub(super) fn submit_search(conn: &Arc<Conn>, d: Arc<dyn Delivery>) -> i32 {
    let pdu = search_pdu();
    let h = frame::header(&pdu).unwrap();
    conn.submit(
        Pending::new(Sink::To(d.clone()), Kind::fixed()),
        &pdu,
        &h,
        None,
        |c, id| d.placed(c, id),
    )
    .ok()
    .unwrap()
}

/// One search entry for message `id`: empty DN, no attributes.
pub(super) fn entry(id: i32) -> Vec<u8> {
    let id = u8::try_from(id).unwrap();
    vec![
        0x30, 0x09, 0x02, 0x01, id, 0x64, 0x04, 0x04, 0x00, 0x30, 0x00,
    ]
}
