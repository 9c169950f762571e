//! Operations the router ends on a DSA connection without their DSA's
//! answer, each one [`Table::drain_where`](super::table::Table::drain_where)
//! of the connection's pending table and a failure per operation (re-sent
//! elsewhere when it may be, see [`Pending::fail`]):
//! * [`lost`]: the connection died; everything on it;
//! * [`expire`]: the DSA has been silent on it too long (or it ran past
//!   `--op-total-timeout`): timeLimitExceeded, abandoned on the DSA;
//! * [`evacuate`]: its DSA went down: the reads that can still be re-sent;
//! * [`end_persistent`]: its DSA went down: the persistent searches, which
//!   never end by themselves.
//!
//! What each picks is a plain predicate on a [`Pending`], tested here
//! without sockets.

use super::conn::Conn;
use super::fault::Fault;
use super::pending::Pending;
use crate::base::error::{Error, Kind};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Whether a lost connection's operation counts as an error of its DSA:
/// one the client hears of (not re-sent, not the router's own).
fn counts_as_error(p: &Pending) -> bool {
    !p.retryable() && p.for_client()
}

/// Whether the operation has timed out: a client's (the router's own
/// requests time out on their own), not persistent, and its DSA silent on
/// it longer than `timeout` or it ran longer than `total` (when not zero).
fn expired(p: &Pending, timeout: Duration, total: Duration) -> bool {
    match p.delivery() {
        Some(d) => d.expires() && !p.is_persistent() && p.overdue(timeout, total),
        None => false,
    }
}

/// Whether the operation may leave a DSA that went down: a read that has
/// sent nothing to its client yet and may be re-sent.
fn evacuable(p: &Pending) -> bool {
    p.retryable()
}

/// The connection is dead: it no longer counts as anything on its DSA,
/// and every operation on it is answered.
pub(super) fn lost(conn: &Conn, why: &Fault) {
    conn.standing.uncount();
    let drained = conn.ops.drain_where(|_, _| true);
    let name = &conn.dsa.name;
    for (_, p) in drained {
        if counts_as_error(&p) {
            conn.dsa.errors.fetch_add(1, Ordering::Relaxed);
        }
        let text = if p.is_write() {
            format!("connection to DSA {name} lost before it answered; the outcome of this update is unknown ({why})")
        } else {
            format!("connection to DSA {name} lost ({why})")
        };
        let write = p.is_write();
        p.fail(name, Error::new(Kind::ConnectionLost { write }, text));
    }
}

/// Fail operations on which the DSA has been silent longer than `timeout`
/// (or that ran longer than `total`, when not zero) with
/// timeLimitExceeded and abandon them on the DSA. Waiters (binds) time out
/// on their own.
pub(super) fn expire(conn: &Conn, timeout: Duration, total: Duration, fall: u32) {
    let expired = conn.ops.drain_where(|_, p| expired(p, timeout, total));
    if !expired.is_empty() {
        conn.dsa.probe_failed("operation timeout", fall);
    }
    let name = &conn.dsa.name;
    let secs = timeout.as_secs_f32();
    for (id, p) in expired {
        conn.send_abandon(id);
        conn.dsa.errors.fetch_add(1, Ordering::Relaxed);
        if !p.retryable() {
            tracing::warn!(dsa = %name, "operation timed out after {:?}", timeout);
        }
        let outcome = if p.is_write() {
            "; the outcome of this update is unknown"
        } else {
            ""
        };
        let capped = !total.is_zero() && p.started().elapsed() > total;
        let text = if capped {
            format!(
                "the operation ran longer than {} s (--op-total-timeout) on DSA {name}; it was abandoned{outcome}",
                total.as_secs_f32()
            )
        } else {
            format!(
                "DSA {name} sent nothing for this operation for {secs} s; it was abandoned{outcome}"
            )
        };
        let write = p.is_write();
        p.fail(name, Error::new(Kind::Timeout { write }, text));
    }
}

/// End the persistent searches running here (their DSA went down).
pub(super) fn end_persistent(conn: &Conn) {
    let ended = conn.ops.drain_where(|_, p| p.is_persistent());
    let name = &conn.dsa.name;
    for (_, p) in ended {
        let e = Error::new(
            Kind::ConnectionLost { write: false },
            format!("DSA {name} went down; the persistent search ended"),
        );
        p.fail(name, e);
    }
}

/// The DSA went down: re-send the reads waiting here that have sent
/// nothing to their client yet, and abandon them on this DSA.
pub(super) fn evacuate(conn: &Conn) {
    let moved = conn.ops.drain_where(|_, p| evacuable(p));
    let name = &conn.dsa.name;
    for (id, p) in moved {
        conn.send_abandon(id);
        let e = Error::new(Kind::Unreachable, format!("DSA {name} went down"));
        p.fail(name, e);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::backend::upstream::pending::{Hedge, Kind as PKind, Sink};
    use crate::backend::upstream::testing::*;
    use crate::proto::wire::frame;
    use std::sync::Arc;

    /// Paused time: an operation the DSA never answers is failed with
    /// timeLimitExceeded once `op_timeout` has passed, not before, through
    /// its delivery; a write's message says its outcome is unknown.
    #[tokio::test(start_paused = true)]
    async fn unanswered_operations_expire_through_their_delivery() {
        let (conn, _dsa) = silent_dsa(Duration::from_secs(10));
        let pdu = search_pdu();
        let h = frame::header(&pdu).unwrap();
        let mut sent = Vec::new();
        for write in [false, true] {
            let rec = Arc::new(Recorder::default());
            let kind = if write { PKind::Write } else { PKind::fixed() };
            let p = Pending::new(Sink::To(rec.clone()), kind);
            conn.submit(p, &pdu, &h, None, |_, _| true).ok().unwrap();
            sent.push(rec);
        }
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(sent.iter().all(|r| r.failed.lock().unwrap().is_empty()));
        tokio::time::sleep(Duration::from_secs(3)).await;
        for (rec, write) in sent.iter().zip([false, true]) {
            let failed = rec.failed.lock().unwrap();
            assert_eq!(failed.len(), 1, "write {write}");
            assert_eq!(failed[0].kind, Kind::Timeout { write });
            assert_eq!(
                failed[0].code(),
                crate::proto::wire::response::Code::TimeLimitExceeded
            );
            assert_eq!(
                failed[0].text.contains("outcome of this update is unknown"),
                write
            );
            assert_eq!(*rec.finished.lock().unwrap(), 0);
        }
        assert_eq!(conn.pending_count(), 0);
    }

    /// A connection that dies fails what is pending on it, once, and
    /// refuses new operations (handing them back).
    #[tokio::test(start_paused = true)]
    async fn a_lost_connection_fails_its_operations_once() {
        let (conn, dsa) = silent_dsa(Duration::from_secs(60));
        let pdu = search_pdu();
        let h = frame::header(&pdu).unwrap();
        let rec = Arc::new(Recorder::default());
        conn.submit(
            Pending::new(Sink::To(rec.clone()), PKind::fixed()),
            &pdu,
            &h,
            None,
            |_, _| true,
        )
        .ok()
        .unwrap();
        drop(dsa);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let failed = rec.failed.lock().unwrap().clone();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].kind, Kind::ConnectionLost { write: false });
        assert!(!conn.is_alive());
        let again = conn.submit(
            Pending::new(Sink::Detached, PKind::fixed()),
            &pdu,
            &h,
            None,
            |_, _| true,
        );
        assert!(again.is_err());
    }

    /// The timeout counts the DSA's silence on an operation, not its whole
    /// time: a search whose entries keep coming is never cut by it, one
    /// that goes silent is; `--op-total-timeout` caps the whole time.
    #[tokio::test(start_paused = true)]
    async fn the_operation_timeout_counts_silence_and_the_cap_total_time() {
        use tokio::io::AsyncWriteExt;
        for cap in [Duration::ZERO, Duration::from_secs(5)] {
            let mut lim = limits(Duration::from_secs(2));
            lim.op_total_timeout = cap;
            let (conn, mut dsa) = silent_dsa_with(lim);
            let (rec, id) = watch(&conn);
            // An entry every second for 8 s: four times the timeout.
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                dsa.write_all(&entry(id)).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let failed = rec.failed.lock().unwrap().clone();
            if cap.is_zero() {
                assert!(failed.is_empty(), "cut while entries came: {failed:?}");
                // Then silence: cut after the timeout.
                tokio::time::sleep(Duration::from_secs(3)).await;
                let failed = rec.failed.lock().unwrap().clone();
                assert_eq!(failed.len(), 1, "{failed:?}");
                assert!(failed[0].text.contains("sent nothing"), "{}", failed[0]);
            } else {
                assert_eq!(failed.len(), 1, "{failed:?}");
                assert!(
                    failed[0].text.contains("--op-total-timeout"),
                    "{}",
                    failed[0]
                );
            }
        }
    }

    /// A read that may be re-sent (a client's, with a way to re-send it).
    fn resendable() -> Pending {
        let kind = PKind::Read {
            resend: Some(Box::new(NoResend)),
            hedge: Hedge::No,
            hold: false,
        };
        Pending::new(Sink::To(Arc::new(Recorder::default())), kind)
    }

    /// The operations of every kind the drains tell apart, in a table (no
    /// socket): what each drain picks and what it leaves.
    #[tokio::test(start_paused = true)]
    async fn each_drain_picks_its_operations_and_leaves_the_rest() {
        use crate::backend::upstream::table::Table;
        let t: Table<Pending> = Table::new();
        let read = t.register(resendable()).ok().unwrap();
        let mut p = resendable();
        assert!(p.entry(bytes::Bytes::from(entry(1))).is_some());
        let delivered = t.register(p).ok().unwrap();
        let client = || Sink::To(Arc::new(Recorder::default()));
        let write = t
            .register(Pending::new(client(), PKind::Write))
            .ok()
            .unwrap();
        let p = Pending::new(client(), PKind::Persistent { resend: None });
        let persistent = t.register(p).ok().unwrap();
        let (tx, _rx) = tokio::sync::oneshot::channel();
        let p = Pending::new(Sink::Waiter(tx), PKind::fixed());
        let waiter = t.register(p).ok().unwrap();
        let ids = |v: Vec<(i32, Pending)>| {
            let mut ids: Vec<i32> = v.into_iter().map(|(id, _)| id).collect();
            ids.sort();
            ids
        };

        // Nothing has waited yet; then everything has, 10 s.
        let (timeout, cap) = (Duration::from_secs(5), Duration::ZERO);
        assert!(t.drain_where(|_, p| expired(p, timeout, cap)).is_empty());
        tokio::time::advance(Duration::from_secs(10)).await;
        // Lost connection: only what the client hears of counts as the
        // DSA's error (not a re-sent read, not the router's own waiter).
        let errors: Vec<bool> = [read, delivered, write, persistent, waiter]
            .iter()
            .map(|id| counts_as_error(&t.lock()[id]))
            .collect();
        assert_eq!(errors, [false, true, true, true, false]);
        assert_eq!(ids(t.drain_where(|_, p| evacuable(p))), [read]);
        let timed_out = t.drain_where(|_, p| expired(p, timeout, cap));
        assert_eq!(ids(timed_out), [delivered, write]);
        assert_eq!(ids(t.drain_where(|_, p| p.is_persistent())), [persistent]);
        assert_eq!(ids(t.drain_where(|_, _| true)), [waiter]);
        assert_eq!(t.len(), 0);
    }
}
