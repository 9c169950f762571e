//! Hedged reads (architecture.md, "Tail latency"): a read that has not answered within its
//! partition's usual time is also sent to another DSA of its group; the
//! first leg to answer wins the [`Race`] and the other is abandoned.
//!
//! A race is made only when a read is hedged (rare by design: a budget caps
//! hedges as a share of reads), by turning the read's delivery into leg 0
//! of a race where it waits on its DSA; leg 1 is placed like a re-sent read.
//! The first response of either leg (entry or result) decides the race:
//! from then on only the winner's responses reach the client, so entries
//! are never duplicated.
//!
//! The tail task ([`crate::backend::tail`]) decides when and how much to hedge; it
//! finds the reads to hedge on each shared connection with [`scan`].

use super::batch::Batch;
use super::conn::Conn;
use super::pending::{Hedge, Pending};
use super::{Delivery, Resend, Source};
use crate::base::error::{Error, Kind};
use crate::observe::metrics::Metrics;
use crate::proto::wire::frame::{Frame, Pdu};
use crate::proto::wire::response::{self, Code};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// A read to hedge: its race, the hedge leg's pending operation and what
/// places it.
pub(crate) struct Hedged {
    pub(crate) race: Arc<Race>,
    pub(crate) hedge: Pending,
    pub(crate) plan: Box<dyn Resend>,
}

/// Hedge the reads waiting on `conn` longer than `after`, while `budget`
/// has a whole hedge left (each costs one). Returns the hedges to place
/// (with what places them) and how many reads the budget refused; reads
/// that have waited longer than `stall` with nothing sent to their client
/// are counted in `stuck`.
pub(crate) fn scan(
    conn: &Arc<Conn>,
    after: Duration,
    budget: &mut f64,
    stall: Duration,
    stuck: &mut usize,
) -> (Vec<Hedged>, u64) {
    let mut out = Vec::new();
    let mut refused = 0;
    let mut map = conn.ops.lock();
    for (&id, p) in map.iter_mut() {
        if !p.for_client() || p.is_write() || p.is_persistent() {
            continue;
        }
        if p.delivered() || p.holds_entries() {
            continue;
        }
        // Since it was placed here (re-sent reads keep their start).
        let age = p.quiet();
        if age >= stall {
            *stuck += 1;
        }
        if age < after || !matches!(p.hedge(), Hedge::Eligible | Hedge::Refused) {
            continue;
        }
        let Some(retry) = p.resend() else {
            continue;
        };
        if *budget < 1.0 {
            if p.hedge() == Hedge::Eligible {
                p.hedge_refused();
                refused += 1;
            }
            continue;
        }
        *budget -= 1.0;
        let plan = retry.hedger();
        let (op, started) = (p.op(), p.started());
        let mut legs = None;
        let hold = p.race(|inner, metrics| {
            let (race, leg0, leg1) = Race::start(inner, conn, id, metrics, op, started);
            legs = Some((race, leg1));
            leg0
        });
        let (Some(hold), Some((race, leg1))) = (hold, legs) else {
            continue;
        };
        let hedge = Pending::hedge_leg(leg1, op, hold);
        out.push(Hedged { race, hedge, plan });
    }
    (out, refused)
}

/// One hedged read: the original (leg 0) and its hedge (leg 1).
pub struct Race {
    inner: Arc<dyn Delivery>,
    st: Mutex<State>,
    /// Where the read's outcome is counted (once, for the winner).
    metrics: Option<Arc<Metrics>>,
    op: u8,
    started: Instant,
    /// The DSA the read first went to (it loses when the hedge wins).
    first: Arc<crate::backend::dsa_state::DsaState>,
}

/// Where a leg runs: its connection and message ID there.
type At = Option<(Weak<Conn>, i32)>;

#[derive(Default)]
struct State {
    /// The leg whose responses reach the client.
    winner: Option<u8>,
    /// Answered, abandoned or cancelled: nothing more goes out.
    ended: bool,
    /// Where each leg runs.
    legs: [At; 2],
    /// Legs that failed before the race was decided.
    failed: [bool; 2],
}

/// One leg's delivery.
pub struct Leg {
    race: Arc<Race>,
    n: u8,
}

impl Race {
    /// A race for a read delivered to `inner`, running as `id` on `conn`;
    /// its two legs' deliveries.
    pub fn start(
        inner: Arc<dyn Delivery>,
        conn: &Arc<Conn>,
        id: i32,
        metrics: Option<Arc<Metrics>>,
        op: u8,
        started: Instant,
    ) -> (Arc<Race>, Arc<Leg>, Arc<Leg>) {
        let race = Arc::new(Race {
            inner,
            st: Mutex::new(State {
                legs: [Some((Arc::downgrade(conn), id)), None],
                ..State::default()
            }),
            metrics,
            op,
            started,
            first: conn.dsa.clone(),
        });
        let leg = |n| {
            Arc::new(Leg {
                race: race.clone(),
                n,
            })
        };
        (race.clone(), leg(0), leg(1))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The client's delivery learns that its operation runs as a race:
    /// false when it no longer waits for it (abandoned meanwhile); then
    /// the race is ended and the hedge is not to be sent.
    pub fn announce(self: &Arc<Self>) -> bool {
        let first = self.lock().legs[0]
            .as_ref()
            .and_then(|(c, id)| Some((c.upgrade()?, *id)));
        let Some((conn, id)) = first else {
            // Leg 0 already ended (answered or failed): nothing to hedge.
            return false;
        };
        if self.inner.raced(self, &conn, id) {
            return true;
        }
        self.abandon();
        false
    }

    /// Whether leg `n` may send to the client: it won, or wins now (the
    /// other leg is then abandoned).
    fn claim(&self, n: u8) -> bool {
        let loser = {
            let mut st = self.lock();
            if st.ended {
                return false;
            }
            match st.winner {
                Some(w) => return w == n,
                None => {
                    st.winner = Some(n);
                    st.legs[1 - n as usize].take()
                }
            }
        };
        if n == 1 {
            self.first.reads.lose();
            if let Some(m) = &self.metrics {
                m.hedges_won.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(conn) = loser.and_then(|(c, id)| Some((c.upgrade()?, id))) {
            conn.0.abandon(conn.1);
        }
        true
    }

    fn record(&self, code: u8) {
        if let Some(m) = &self.metrics {
            m.op(
                self.op as usize,
                code,
                self.started.elapsed().as_micros() as u64,
            );
        }
    }

    /// Mark it ended; the legs still running.
    fn end(&self) -> Option<[At; 2]> {
        let mut st = self.lock();
        if st.ended {
            return None;
        }
        st.ended = true;
        Some([st.legs[0].take(), st.legs[1].take()])
    }

    /// The client abandoned the read (or is gone): stop both legs.
    pub fn abandon(&self) {
        for (conn, id) in self.end().into_iter().flatten().flatten() {
            if let Some(c) = conn.upgrade() {
                c.abandon(id);
            }
        }
    }

    /// The client cancelled the read. Undecided: both legs are stopped
    /// and the client gets `canceled` (no entry of it can be on the way:
    /// none was claimed). Decided: the winner's DSA is to cancel it, so
    /// that `canceled` comes after the entries it already sent.
    pub fn cancel(&self) -> Cancelled {
        let winner = {
            let st = self.lock();
            if st.ended {
                return Cancelled::TooLate;
            }
            st.winner.map(|w| st.legs[w as usize].clone())
        };
        if let Some(at) = winner {
            return match at.and_then(|(c, id)| Some((c.upgrade()?, id))) {
                Some((conn, id)) => Cancelled::Forward(conn, id),
                None => Cancelled::TooLate,
            };
        }
        let Some(legs) = self.end() else {
            return Cancelled::TooLate;
        };
        for (conn, id) in legs.into_iter().flatten() {
            if let Some(c) = conn.upgrade() {
                c.abandon(id);
            }
        }
        let e = Error::new(
            Kind::Refused(Code::Canceled),
            "cancelled by the client".to_string(),
        );
        self.record(e.code() as u8);
        self.inner.fail(&e, Source::dsa(""));
        Cancelled::Done
    }
}

/// What a client's Cancel of a hedged read comes to.
pub enum Cancelled {
    /// Stopped; the client was answered `canceled`.
    Done,
    /// It had ended.
    TooLate,
    /// The winning leg runs as this ID on this connection: cancel it there.
    Forward(Arc<Conn>, i32),
}

impl Delivery for Leg {
    fn deliver(&self, r: Frame<'_>, batch: &mut Batch) {
        if self.race.claim(self.n) {
            self.race.inner.deliver(r, batch);
        }
    }

    fn finish(&self, done: Pdu, from: Source<'_>, batch: &mut Batch) {
        if !self.race.claim(self.n) || self.race.end().is_none() {
            return;
        }
        self.race
            .record(response::result_code(&done.bytes, &done.h).unwrap_or(Code::Other as u8));
        let from = Source {
            hedge: self.n == 1,
            ..from
        };
        self.race.inner.finish(done, from, batch);
    }

    /// A leg that fails before the race is decided leaves it to the other
    /// leg; the client hears of a failure only when both failed, or when
    /// the winner fails.
    fn fail(&self, e: &Error, at: Source<'_>) {
        let n = self.n as usize;
        {
            let mut st = self.race.lock();
            if st.ended {
                return;
            }
            match st.winner {
                Some(w) if w as usize != n => return,
                Some(_) => {}
                None => {
                    st.failed[n] = true;
                    st.legs[n] = None;
                    if !st.failed[1 - n] {
                        return;
                    }
                }
            }
            st.ended = true;
        }
        self.race.record(e.code() as u8);
        self.race.inner.fail(
            e,
            Source {
                hedge: n == 1,
                ..at
            },
        );
    }

    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        let mut st = self.race.lock();
        if st.ended || st.winner.is_some_and(|w| w != self.n) {
            return false;
        }
        st.legs[self.n as usize] = Some((Arc::downgrade(conn), id));
        drop(st);
        if self.n == 1 {
            self.race.inner.hedge_placed(conn);
        }
        true
    }

    fn trace_control(&self, conn: &Arc<Conn>) -> Option<Vec<u8>> {
        self.race.inner.trace_control(conn)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::backend::upstream::testing::*;
    use crate::proto::wire::frame;
    use std::time::Duration;

    /// A hedged read cancelled by its client: undecided, both legs stop and
    /// the client hears `canceled` once (a leg's late entry is dropped);
    /// decided, the cancel goes to the winner's DSA, so that `canceled`
    /// comes after the entries already sent.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_hedged_read_is_answered_once_and_in_order() {
        let (c0, _d0) = silent_dsa(Duration::from_secs(60));
        let (c1, _d1) = silent_dsa(Duration::from_secs(60));
        for decided in [false, true] {
            let rec = Arc::new(Recorder::default());
            let (_r0, id0) = watch(&c0);
            let (race, leg0, leg1) =
                Race::start(rec.clone(), &c0, id0, None, 0, tokio::time::Instant::now());
            let (_r1, id1) = watch(&c1);
            assert!(leg1.placed(&c1, id1));
            let e = entry(id1);
            let h = frame::header(&e).unwrap();
            let mut batch = Batch::default();
            if decided {
                leg1.deliver(Frame::new(&e, &h), &mut batch);
                match race.cancel() {
                    Cancelled::Forward(c, id) => {
                        assert!(Arc::ptr_eq(&c, &c1) && id == id1, "forwarded to the loser")
                    }
                    _ => panic!("a decided race is cancelled by its winner's DSA"),
                }
                assert!(rec.failed.lock().unwrap().is_empty());
            } else {
                assert!(matches!(race.cancel(), Cancelled::Done));
                assert!(matches!(race.cancel(), Cancelled::TooLate));
                leg0.deliver(Frame::new(&e, &h), &mut batch);
                let failed = rec.failed.lock().unwrap().clone();
                assert_eq!(failed.len(), 1);
                assert_eq!(
                    failed[0].code(),
                    crate::proto::wire::response::Code::Canceled
                );
            }
        }
    }
}
