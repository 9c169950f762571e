//! A DSA connection's reader task: it reads responses and hands each whole
//! PDU to [`super::demux`], gathering what goes to clients in a
//! [`Batch`] sent once per read; between reads it sweeps (operation
//! timeouts, an idle spare's expiry, a PDU stalled half-way), and when its
//! DSA goes down it evacuates the reads waiting here ([`super::evict`]).
//!
//! It ends on a [`Fault`]: then the connection is dead, its DSA marked
//! down when the fault says it is broken, and every operation left on it
//! answered.

use super::batch::Batch;
use super::conn::Conn;
use super::demux;
use super::evict;
use super::fault::Fault;
use super::self_conn::Registered;
use crate::backend::settings::Limits;
use crate::proto::wire::frame;
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The reader task of `conn`, which holds `local` (its registered port)
/// until the connection is dead.
pub(super) async fn run<R: AsyncRead + Unpin>(
    mut rd: R,
    conn: Arc<Conn>,
    limits: Limits,
    local: Option<Registered>,
) {
    let max_pdu = limits.max_response_pdu;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut batch = Batch::default();
    let sweep_every =
        (limits.op_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut sweep = tokio::time::interval(sweep_every);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut epoch = conn.dsa.down_epoch();
    // Made once, not per read.
    let stop = conn.stop.clone();
    let mut stopped = std::pin::pin!(stop.cancelled());
    let dsa = conn.dsa.clone();
    let mut down = std::pin::pin!(dsa.down_signal.notified());
    // Since when part of a PDU has waited in `buf` with no byte more.
    let mut partial_since: Option<tokio::time::Instant> = None;
    let mut paced = super::pace::Memo::default();
    let fault = loop {
        let n = tokio::select! {
            r = rd.read_buf(&mut buf) => r,
            _ = sweep.tick() => {
                if conn.standing.expired() {
                    conn.ops.close();
                    break Fault::IdleSpare;
                }
                evict::expire(&conn, limits.op_timeout, limits.op_total_timeout, limits.fall);
                if partial_since.is_some_and(|t| t.elapsed() > limits.connect_timeout) {
                    // Stalled in the middle of a PDU: broken, not slow.
                    break Fault::Stalled(limits.connect_timeout);
                }
                Ok(usize::MAX)
            }
            _ = &mut down => {
                down.set(dsa.down_signal.notified());
                Ok(usize::MAX)
            }
            _ = &mut stopped => break Fault::Closed,
        };
        if conn.dsa.down_epoch() != epoch {
            epoch = conn.dsa.down_epoch();
            dsa_went_down(&conn);
        }
        if !conn.is_alive() && conn.pending_count() == 0 {
            break Fault::Retired;
        }
        match n {
            Ok(usize::MAX) => continue,
            // A closed or reset connection alone does not mark the DSA
            // down (a DSA drops one connection on a protocol error, or
            // when idle): its reads are re-sent, and a DSA that is really
            // gone refuses the reconnect, which does mark it down.
            Ok(0) => break Fault::HungUp,
            Err(e) => break Fault::Read(e),
            Ok(_) => {}
        }
        let bad = dispatch_all(&conn, &mut buf, max_pdu, &mut batch);
        if let Some(out) = batch.flush() {
            // A client reading slower than its DSA sends: wait for it
            // rather than queue without end (see `pace`).
            if bad.is_none() {
                super::pace::pace(&conn, out, &mut paced).await;
            }
        }
        // A partial PDU waits for the rest: time it from the last byte
        // (a DSA streaming a large result steadily is not stalled).
        partial_since = (!buf.is_empty()).then(tokio::time::Instant::now);
        if let Some(fault) = bad {
            break fault;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
    };
    end(&conn, &fault, local);
}

/// Its DSA went down, or was ejected: the reads waiting here are re-sent.
fn dsa_went_down(conn: &Conn) {
    evict::evacuate(conn);
    if !conn.dsa.is_up() {
        // Down (not merely ejected): this connection may be stale (a peer
        // gone without a reset). It takes no new work; the pool connects
        // afresh, and it closes once what runs on it has ended. Persistent
        // searches never end by themselves: they end here, so that their
        // clients hear of it.
        conn.ops.close();
        evict::end_persistent(conn);
    }
}

/// The connection ends on `fault`: its DSA is marked down when the fault
/// says it is broken, and every operation left on it is answered.
fn end(conn: &Conn, fault: &Fault, local: Option<Registered>) {
    if fault.bad_response() {
        tracing::warn!(dsa = %conn.dsa.name, error = %fault, "bad response from DSA; closing the connection");
    }
    if let Some(why) = fault.takes_the_dsa_down() {
        // Broken, not slow: down at once, its reads re-sent to its group.
        conn.dsa.passive_down(&why);
    }
    // Dead: it takes nothing more and its writer stops; the socket is
    // closed, so its port is no longer ours.
    conn.ops.close();
    conn.stop.cancel();
    drop(local);
    evict::lost(conn, fault);
}

/// Route the whole PDUs at the front of `buf`; the fault that ends the
/// connection, if one does (what is not LDAP, a Notice of Disconnection,
/// a response over `--max-response-pdu`).
fn dispatch_all(
    conn: &Conn,
    buf: &mut BytesMut,
    max_pdu: usize,
    batch: &mut Batch,
) -> Option<Fault> {
    loop {
        match frame::frame_len(buf, max_pdu) {
            Ok(Some(len)) => {
                let pdu = buf.split_to(len).freeze();
                if let Err(fault) = demux::dispatch(conn, pdu, batch) {
                    return Some(fault);
                }
            }
            Ok(None) => return None,
            Err(e) => return Some(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use crate::backend::upstream::testing::*;
    use std::time::Duration;

    /// A DSA that answers a message ID never sent, sends bytes that are
    /// not LDAP, or stalls in the middle of a PDU is broken: its connection
    /// is closed, its reads get a retryable error, and it is marked down
    /// at once (not after the probes).
    #[tokio::test(start_paused = true)]
    async fn a_dsa_that_sends_garbage_or_stalls_mid_pdu_is_marked_down() {
        use tokio::io::AsyncWriteExt;
        let entry_99 = entry(99);
        let half = entry(7)[..5].to_vec();
        let rows: [(&str, &[u8], &str); 3] = [
            ("unknown message ID", &entry_99, "never sent"),
            ("garbage", b"\x04\x02hi", "malformed"),
            ("stalled mid-PDU", &half, "stalled in the middle"),
        ];
        for (what, bytes, why) in rows {
            let (conn, mut dsa) = silent_dsa(Duration::from_secs(60));
            let st = conn.dsa.clone();
            let (rec, _) = watch(&conn);
            dsa.write_all(bytes).await.unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert!(!conn.is_alive(), "{what}: connection still open");
            assert!(!st.is_up(), "{what}: DSA not marked down");
            let reason = st.health_track().reason;
            assert!(reason.contains(why), "{what}: {reason}");
            let failed = rec.failed.lock().unwrap().clone();
            assert_eq!(failed.len(), 1, "{what}");
            assert!(failed[0].retryable(), "{what}: {:?}", failed[0]);
        }
    }

    /// A DSA that streams steadily, every read ending inside a PDU, is not
    /// stalled: the stall counts from the last byte (it once counted from
    /// the first partial read and took a healthy DSA down after 1 s).
    #[tokio::test(start_paused = true)]
    async fn a_dsa_streaming_with_pdus_split_across_reads_is_not_stalled() {
        use tokio::io::AsyncWriteExt;
        let (conn, mut dsa) = silent_dsa(Duration::from_secs(60));
        let (rec, id) = watch(&conn);
        let e = entry(id);
        let (head, tail) = e.split_at(5);
        dsa.write_all(head).await.unwrap();
        // 30 entries, each write finishing one and starting the next, 0.2 s
        // apart: 6 s with a partial PDU always waiting (connect timeout 1 s).
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut b = tail.to_vec();
            b.extend_from_slice(head);
            dsa.write_all(&b).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(conn.is_alive(), "closed as stalled");
        assert!(conn.dsa.is_up(), "{}", conn.dsa.health_track().reason);
        assert!(rec.failed.lock().unwrap().is_empty());
    }
}
