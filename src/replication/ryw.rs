//! Read-your-writes by position (issue 38, point 2). A client's write is
//! watched on its way back ([`watch`]): when it is acknowledged, the time
//! is noted. The write's position is then the first `contextCSN` reading
//! of the DSA that took it which was *sent* after that acknowledgement
//! (the write is in it, maybe with later ones: never too old). The
//! client's later reads of the partition go to any eligible DSA whose
//! known position has reached it, by the usual least-busy rule, and to no
//! DSA in particular once all have; only while none has (or the write's
//! position is not known yet), to the DSA that took the write. A write DSA
//! that publishes no position keeps the time window.

use super::positions::Position;
use super::Replication;
use crate::context::Routing;
use crate::route::{select_read, DsaIdx, DsaStatus, DsaView, Partition, ReadGate};
use crate::upstream::batch::Batch;
use crate::upstream::conn::Conn;
use crate::upstream::Delivery;
use crate::wire::frame::Header;
use bytes::Bytes;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a write whose position is known is remembered: its reads
/// keep to the DSAs that have it until every DSA has, or this long.
pub const HOLD: Duration = Duration::from_secs(60);

/// What the router learns of one write.
#[derive(Debug, Default)]
pub struct WriteMark {
    acked: OnceLock<Instant>,
    position: OnceLock<Position>,
}

impl WriteMark {
    /// The write's position, once a reading after its acknowledgement
    /// shows one.
    fn position(&self, rep: &Replication, partition: &str, dsa: &str) -> Option<&Position> {
        if let Some(p) = self.position.get() {
            return Some(p);
        }
        let acked = *self.acked.get()?;
        let p = rep
            .positions
            .read_after(partition, dsa, acked)
            .filter(|p| !p.is_empty())?;
        Some(self.position.get_or_init(|| p))
    }
}

/// A client's last write to one partition.
#[derive(Debug, Clone)]
pub struct Affinity {
    /// The DSA that took it.
    pub dsa: String,
    pub written: Instant,
    /// `--read-your-writes`.
    pub window: Duration,
    pub mark: Option<Arc<WriteMark>>,
}

impl Affinity {
    pub fn new(dsa: String, window: Duration, mark: Option<Arc<WriteMark>>) -> Affinity {
        Affinity {
            dsa,
            written: Instant::now(),
            window,
            mark,
        }
    }

    /// Whether it still matters at `now`.
    pub fn live(&self, now: Instant) -> bool {
        let keep = if self.mark.is_some() {
            self.window.max(HOLD)
        } else {
            self.window
        };
        now < self.written + keep
    }
}

/// Reached DSAs only.
struct Reached<'a> {
    inner: &'a crate::dsa_state::States,
    ok: &'a [bool],
}

impl DsaView for Reached<'_> {
    fn status(&self, dsa: DsaIdx) -> DsaStatus {
        match self.ok.get(dsa) {
            Some(true) => self.inner.status(dsa),
            _ => DsaStatus::Down,
        }
    }
    fn in_flight(&self, dsa: DsaIdx) -> u32 {
        self.inner.in_flight(dsa)
    }
    fn limit(&self, dsa: DsaIdx) -> Option<u32> {
        self.inner.limit(dsa)
    }
    fn read_gate(&self, dsa: DsaIdx) -> ReadGate {
        self.inner.read_gate(dsa)
    }
}

impl Replication {
    /// The DSA a read of partition `p` keeps to after the client's write
    /// `a`; `None`: any DSA (by the usual selection).
    pub fn affine(&self, routing: &Routing, p: &Partition, a: &Affinity) -> Option<usize> {
        let now = Instant::now();
        let eligible = |i: usize| routing.states.0[i].status().eligible();
        let w = routing
            .snap
            .dsa_index(&a.dsa)
            .filter(|&i| p.order.contains(&i) && eligible(i));
        let target = a
            .mark
            .as_ref()
            .and_then(|m| m.position(self, &p.key, &a.dsa));
        let Some(target) = target else {
            // No position (yet): the time window.
            return w.filter(|_| now < a.written + a.window);
        };
        if !a.live(now) {
            return None;
        }
        let mut ok = vec![false; routing.snap.dsas.len()];
        let mut all = true;
        for &i in &p.order {
            let reached = self
                .positions
                .position(&p.key, &routing.snap.dsas[i].name)
                .is_some_and(|pos| pos.reached(target));
            ok[i] = reached;
            all &= reached || !eligible(i);
        }
        if all {
            return None;
        }
        let view = Reached {
            inner: &routing.states,
            ok: &ok,
        };
        select_read(p, &view, p.tick()).ok().map(|c| c.dsa).or(w)
    }
}

/// A write's responses on their way to the client: a successful result
/// notes when it was acknowledged.
struct Watch {
    inner: Arc<dyn Delivery>,
    mark: Arc<WriteMark>,
}

impl Delivery for Watch {
    fn deliver(&self, pdu: &[u8], h: &Header, batch: &mut Batch) {
        self.inner.deliver(pdu, h, batch)
    }
    fn finish(&self, pdu: Bytes, h: &Header, batch: &mut Batch) {
        if crate::wire::response::result_code(&pdu, h) == Some(0) {
            let _ = self.mark.acked.set(Instant::now());
        }
        self.inner.finish(pdu, h, batch)
    }
    fn fail(&self, e: &crate::error::Error) {
        self.inner.fail(e)
    }
    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        self.inner.placed(conn, id)
    }
    fn expires(&self) -> bool {
        self.inner.expires()
    }
    fn raced(&self, race: &Arc<crate::upstream::hedge::Race>, conn: &Arc<Conn>, id: i32) -> bool {
        self.inner.raced(race, conn, id)
    }
}

/// `delivery`, watched when it carries a write and positions are read;
/// the mark to keep with the client's affinity.
pub(crate) fn watch(
    rep: &Replication,
    is_write: bool,
    delivery: Arc<dyn Delivery>,
) -> (Arc<dyn Delivery>, Option<Arc<WriteMark>>) {
    if !is_write || rep.cfg.interval.is_zero() {
        return (delivery, None);
    }
    let mark = Arc::new(WriteMark::default());
    let w = Watch {
        inner: delivery,
        mark: mark.clone(),
    };
    (Arc::new(w), Some(mark))
}
