//! Demultiplexing: one response PDU from a DSA to the operation it
//! answers, by this connection's message ID. Entries go to the operation's
//! delivery (held back for base-scope reads, so that they can still be
//! re-sent); the final response ends the operation: it is counted and
//! handed over (the client side logs it). A read its DSA answers `busy` or
//! `unavailable` goes to the next DSA, as if the DSA could not be reached.

use super::batch::Batch;
use super::conn::Conn;
use super::fault::Fault;
use super::pending::{Held, Pending, Sink};
use super::{Delivery, Source};
use crate::base::error::{Error, Kind};
use crate::proto::wire::dnmap::PrefixMap;
use crate::proto::wire::frame::{self, tag, Frame, Header, Pdu};
use crate::proto::wire::response::{self, rc, Code};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Route one response PDU from the DSA. What goes to clients is gathered
/// in `batch`, sent when the read's PDUs are all routed.
pub(super) fn dispatch(conn: &Conn, pdu: Bytes, batch: &mut Batch) -> Result<(), Fault> {
    let h = frame::header(&pdu).map_err(Fault::Garbage)?;
    if h.msgid == 0 {
        // Unsolicited notification (e.g. Notice of Disconnection): the
        // DSA is closing this connection.
        return Err(Fault::UnsolicitedNotification);
    }
    let is_final = tag::is_final_response(h.op_tag);
    let mut map_lock = conn.ops.lock();
    let Some(p) = map_lock.get_mut(&h.msgid) else {
        if conn.ops.never_sent(h.msgid) {
            // Not abandoned or timed out: never asked for.
            return Err(Fault::NeverSent);
        }
        return Ok(()); // abandoned or timed out: drop
    };
    if !is_final {
        if let Some(check) = p.scope() {
            if !super::scope_fault::admit(conn, check, &pdu, &h) {
                return Ok(());
            }
        }
        let Some((held, pdu)) = p.entry(pdu) else {
            return Ok(());
        };
        let Some(d) = p.delivery().cloned() else {
            return Ok(());
        };
        let map = p.map().cloned();
        // Delivered with the lock released: a delivery may end other
        // operations of this connection (a spanning search that reached
        // its size limit abandons its other parts, a client that
        // overflowed abandons all it has). Only this reader delivers,
        // so order is kept; an abandon racing this entry costs the
        // client one entry of an operation it gave up.
        drop(map_lock);
        deliver_held(&*d, map.as_deref(), held, batch);
        deliver(&*d, map.as_deref(), &pdu, &h, batch);
        return Ok(());
    }
    let Some(p) = map_lock.remove(&h.msgid) else {
        return Ok(());
    };
    drop(map_lock);
    complete(conn, p, pdu, h, batch);
    Ok(())
}

/// The final response `pdu` ends operation `p`: counted and handed over
/// (after the entries it held back). A read the DSA itself answered
/// `busy` or `unavailable` goes to the next DSA instead, when it may.
fn complete(conn: &Conn, p: Pending, pdu: Bytes, h: Header, batch: &mut Batch) {
    let map = p.map().cloned();
    let (pdu, h) = match map.as_deref().and_then(|m| native_back(m, &pdu, &h)) {
        Some(mapped) => mapped,
        None => (pdu, h),
    };
    let code = response::result_code(&pdu, &h);
    let p = match refused_by_dsa(conn, code, &pdu, &h) {
        Some(why) => match p.move_on(&conn.dsa.name, why) {
            Ok(()) => return,
            Err(p) => p,
        },
        None => p,
    };
    // One clock read for the metrics and the read latencies.
    let took = p.started().elapsed();
    account(conn, &p, code, took);
    let (sink, held) = p.end();
    match sink {
        Sink::Detached => {}
        Sink::Waiter(w) => {
            let _ = w.send(pdu);
        }
        Sink::To(d) => {
            deliver_held(&*d, map.as_deref(), held, batch);
            d.finish(Pdu::new(pdu, h), Source::dsa(&conn.dsa.name), batch);
        }
    }
}

/// The DSA's own `busy` (51) or `unavailable` (52), as the error a read
/// that goes elsewhere carries (what its client gets if no other DSA can
/// take it).
fn refused_by_dsa(conn: &Conn, code: Option<u8>, pdu: &[u8], h: &Header) -> Option<Error> {
    let (code, word) = match code? {
        rc::BUSY => (Code::Busy, "busy (51)"),
        rc::UNAVAILABLE => (Code::Unavailable, "unavailable (52)"),
        _ => return None,
    };
    let said = response::diagnostic(pdu, h).unwrap_or_default();
    let text = format!("DSA {} answered {word}: {said}", conn.dsa.name);
    Some(Error::new(Kind::Refused(code), text))
}

/// Count an operation that ended with `code` after `took`: its DSA's
/// served and read latencies, the router's metrics (not the router's own
/// requests: positions read ten times a second would show as operations).
fn account(conn: &Conn, p: &Pending, code: Option<u8>, took: Duration) {
    if p.for_client() && !p.is_own() {
        conn.dsa.served.fetch_add(1, Ordering::Relaxed);
        conn.dsa.latency.observe(took);
        p.record(code.unwrap_or(Code::Other as u8), took);
        if !p.is_write() && !p.is_persistent() {
            conn.dsa.reads.record(took.as_micros() as u64);
        }
    }
}

/// Deliver a non-final response, its DNs mapped back when its DSA holds
/// the partition under a native prefix.
fn deliver(d: &dyn Delivery, map: Option<&PrefixMap>, pdu: &[u8], h: &Header, batch: &mut Batch) {
    match map.and_then(|m| native_back(m, pdu, h)) {
        Some((b, bh)) => d.deliver(Frame::new(&b, &bh), batch),
        None => d.deliver(Frame::new(pdu, h), batch),
    }
}

/// Deliver the entries held back for a base-scope read.
fn deliver_held(d: &dyn Delivery, map: Option<&PrefixMap>, held: Held, batch: &mut Batch) {
    for pdu in held.into_vec() {
        if let Ok(h) = frame::header(&pdu) {
            deliver(d, map, &pdu, &h, batch);
        }
    }
}

/// A response from a DSA that holds its partition under a native prefix,
/// with its DNs moved back to the knowledge prefix.
/// `None` when nothing changes.
fn native_back(m: &PrefixMap, pdu: &[u8], h: &Header) -> Option<(Bytes, Header)> {
    let b = m.response(pdu, h)?.freeze();
    let bh = frame::header(&b).ok()?;
    Some((b, bh))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::backend::upstream::testing::*;
    use std::sync::{Arc, Mutex as StdMutex};
    use std::time::Duration;

    /// Gives up its operation on the first entry, from inside the delivery
    /// (as a spanning search does at its size limit).
    #[derive(Default)]
    struct Quitter {
        at: StdMutex<Option<(Arc<Conn>, i32)>>,
        abandoned: StdMutex<Option<bool>>,
    }

    impl Delivery for Quitter {
        fn deliver(&self, _r: Frame<'_>, _batch: &mut Batch) {
            if let Some((conn, id)) = self.at.lock().unwrap().take() {
                *self.abandoned.lock().unwrap() = Some(conn.abandon(id));
            }
        }
        fn finish(&self, _done: Pdu, _from: Source<'_>, _batch: &mut Batch) {}
        fn fail(&self, _e: &Error, _at: Source<'_>) {}
        fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
            *self.at.lock().unwrap() = Some((conn.clone(), id));
            true
        }
    }

    /// A delivery may abandon operations of the connection that delivers
    /// to it (it once deadlocked on the connection's lock, freezing the
    /// connection and a runtime thread). Run on a thread of its own so that
    /// a deadlock fails the test instead of hanging it.
    #[test]
    fn a_delivery_may_abandon_on_its_own_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (conn, mut dsa) = silent_dsa(Duration::from_secs(60));
                let pdu = search_pdu();
                let q = Arc::new(Quitter::default());
                let id = submit_search(&conn, q.clone());
                let mut req = vec![0u8; pdu.len()];
                dsa.read_exact(&mut req).await.unwrap();
                // A SearchResultEntry for it: empty DN, no attributes.
                let id = u8::try_from(id).unwrap();
                dsa.write_all(&[
                    0x30, 0x09, 0x02, 0x01, id, 0x64, 0x04, 0x04, 0x00, 0x30, 0x00,
                ])
                .await
                .unwrap();
                // The DSA is told to abandon it: [APPLICATION 16] naming id.
                let mut abandon = [0u8; 8];
                dsa.read_exact(&mut abandon).await.unwrap();
                assert_eq!(&abandon[5..], &[0x50, 0x01, id]);
                assert_eq!(*q.abandoned.lock().unwrap(), Some(true));
                assert_eq!(conn.pending_count(), 0);
            });
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "the connection deadlocked (or the test failed: see its panic)"
        );
    }
}
