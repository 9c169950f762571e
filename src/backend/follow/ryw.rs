//! Read-your-writes by position (architecture.md, "Replication positions"). A client's write is
//! watched on its way back (`Watch`, the outermost layer of its
//! delivery). Its position is the written entry's `entryCSN` where the
//! DSA supports the post-read control (RFC 4527): an
//! add, modify or modify DN asks it for that attribute
//! (`crate::proto::wire::postread`), and the control is taken out of the
//! response unless the client asked for one. Otherwise (a delete, a write
//! inside a transaction, a DSA without the control) the time of the
//! acknowledgement is noted and the position is the first `contextCSN`
//! reading of the write DSA *sent* after it; that reading can be older
//! than the write while the DSA has older changes of the same server ID
//! pending. The client's later reads of the partition go to any eligible
//! DSA whose known position has reached it, by the usual least-busy rule,
//! and to no DSA in particular once all have; only while none has (or the
//! write's position is not known yet), to the DSA that took the write,
//! even when it is ejected as an outlier (slow beats stale). A write DSA
//! that publishes no position, or a write never acknowledged, keeps the
//! time window.

use crate::backend::routing::Routing;
use crate::backend::upstream::batch::Batch;
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::layer::Layer;
use crate::backend::upstream::{Delivery, Source};
use crate::directory::knowledge::DsaName;
use crate::directory::replication::mark::{Affinity, WriteMark};
use crate::directory::replication::positions::Position;
use crate::directory::replication::Replication;
use crate::directory::route::{select_read, DsaId, DsaStatus, DsaView, Partition, ReadGate};
use crate::proto::wire::frame::{self, Frame, Header, Pdu};
use crate::proto::wire::postread::{self, Plan};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Reached DSAs only.
struct Reached<'a> {
    inner: &'a crate::backend::dsa_state::States,
    ok: &'a [bool],
}

impl DsaView for Reached<'_> {
    fn status(&self, dsa: DsaId) -> DsaStatus {
        match self.ok.get(dsa.index()) {
            Some(true) => self.inner.status(dsa),
            _ => DsaStatus::Down,
        }
    }
    fn in_flight(&self, dsa: DsaId) -> u32 {
        self.inner.in_flight(dsa)
    }
    fn limit(&self, dsa: DsaId) -> Option<u32> {
        self.inner.limit(dsa)
    }
    fn read_gate(&self, dsa: DsaId) -> ReadGate {
        self.inner.read_gate(dsa)
    }
}

/// Where a read after the client's write goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// This DSA first.
    pub dsa: Option<DsaId>,
    /// By position: the DSAs that may serve it at all,
    /// first or when it is sent again (its DSA failed): those that have
    /// the write. `None`: any (the time window).
    pub only: Option<Arc<[DsaName]>>,
}

/// Where a read of partition `p` goes after the client's write `a`;
/// `None`: anywhere (by the usual selection).
pub fn affine(rep: &Replication, routing: &Routing, p: &Partition, a: &Affinity) -> Option<Kept> {
    let now = Instant::now();
    let status = |i: DsaId| routing.states.0[i].status();
    let at = routing
        .snap
        .dsa_index(&a.dsa)
        .filter(|&i| p.order.contains(&i));
    // The time window: the DSA that took the write while it answers (even
    // when ejected as an outlier: slow beats stale), else anywhere.
    let window = || {
        at.filter(|&i| matches!(status(i), DsaStatus::Up | DsaStatus::Ejected))
            .filter(|_| now < a.written + a.window)
            .map(|i| Kept {
                dsa: Some(i),
                only: None,
            })
    };
    let Some(mark) = &a.mark else {
        // Positions are not read.
        return window();
    };
    if !a.live(now) {
        return None;
    }
    // By position, the DSA that took the write has it whatever its health
    // (marked down under load, it may still answer; if it does not, the
    // read fails rather than go to a DSA without the write).
    let w = at.filter(|&i| status(i) != DsaStatus::Disabled);
    let name = |i: DsaId| routing.snap.dsas[i].name.clone();
    let Some(target) = mark.position(rep, &p.key, &a.dsa) else {
        // The write's position is not known yet: its DSA only, while that
        // DSA publishes positions (the next reading will tell); one that
        // publishes none keeps the time window.
        let publishes = rep
            .positions
            .position(&p.key, &a.dsa)
            .is_some_and(|pos| !pos.is_empty());
        if publishes && mark.acked.get().is_some() {
            let only: Vec<DsaName> = w.into_iter().map(name).collect();
            return Some(Kept {
                dsa: w,
                only: Some(only.into()),
            });
        }
        return window();
    };
    let mut ok = vec![false; routing.snap.dsas.len()];
    let mut all = true;
    for &i in &p.order {
        let reached = rep
            .positions
            .position(&p.key, &routing.snap.dsas[i].name)
            .is_some_and(|pos| pos.reached(target));
        ok[i] = reached;
        all &= reached || !status(i).eligible();
    }
    if all {
        return None;
    }
    let view = Reached {
        inner: &routing.states,
        ok: &ok,
    };
    let only: Vec<DsaName> = p
        .order
        .iter()
        .copied()
        .filter(|&i| ok[i] || Some(i) == w)
        .map(name)
        .collect();
    Some(Kept {
        dsa: select_read(p, &view, p.tick()).ok().map(|c| c.dsa).or(w),
        only: Some(only.into()),
    })
}

/// What a client's write is watched for on its way back: the mark its
/// acknowledgement sets, and whether the router asks its DSA for the
/// entry's `entryCSN` ([`watched`]).
pub(crate) struct Watched {
    mark: Arc<WriteMark>,
    plan: Plan,
    rep: Arc<Replication>,
}

/// The outermost layer of a client operation's delivery: a watched
/// write's successful result notes when it was acknowledged, and the
/// entry's `entryCSN` when the DSA read it back; anything else passes
/// through.
pub(crate) struct Watch<D> {
    inner: D,
    watched: Option<Watched>,
}

impl<D: Delivery> Watch<D> {
    /// `inner`, watched as `watched` says (`None`: not a watched write).
    pub(crate) fn new(inner: D, watched: Option<Watched>) -> Watch<D> {
        Watch { inner, watched }
    }
}

impl Watched {
    /// The mark to keep with the client's affinity.
    pub(crate) fn mark(&self) -> &Arc<WriteMark> {
        &self.mark
    }

    /// What the router learns from the write's result `pdu`; the result
    /// as the client gets it (without the router's post-read control).
    fn learn(&self, pdu: Bytes, h: &Header) -> (Bytes, Header) {
        if crate::proto::wire::response::result_code(&pdu, h) == Some(0) {
            let at = postread::response_csn(&pdu, h).map(|c| Position::from_values([c]));
            if let Some(p) = at.filter(|p| !p.is_empty()) {
                self.mark.written_at(p);
                self.rep.entry_csns.fetch_add(1, Ordering::Relaxed);
            }
            let _ = self.mark.acked.set(Instant::now());
        }
        if self.plan != Plan::Router {
            return (pdu, *h);
        }
        match postread::strip(&pdu, h).map(|b| b.freeze()) {
            Some(b) => match frame::header(&b) {
                Ok(sh) => (b, sh),
                Err(_) => (pdu, *h),
            },
            None => (pdu, *h),
        }
    }
}

/// The result is learnt from; whether a write asks for post-read is
/// answered here, the outermost layer, for every operation (no other
/// layer asks). The rest passes through.
impl<D: Delivery> Layer for Watch<D> {
    type Inner = D;

    fn inner(&self) -> &D {
        &self.inner
    }

    fn finish(&self, done: Pdu, from: Source<'_>, batch: &mut Batch) {
        match &self.watched {
            Some(w) => {
                let (pdu, h) = w.learn(done.bytes, &done.h);
                self.inner.finish(Pdu::new(pdu, h), from, batch)
            }
            None => self.inner.finish(done, from, batch),
        }
    }

    fn post_read(&self, conn: &Arc<Conn>) -> bool {
        self.watched
            .as_ref()
            .is_some_and(|w| w.plan == Plan::Router)
            && conn
                .dsa
                .advertised()
                .is_some_and(|a| a.controls.iter().any(|c| c == postread::OID_POST_READ))
    }
}

/// How a client operation's responses are watched: when it is a write
/// (the request `pdu`), the client's reads follow its writes (`ryw`) and
/// positions are read; else `None`.
pub(crate) fn watched(
    rep: &Arc<Replication>,
    ryw: bool,
    is_write: bool,
    pdu: Frame<'_>,
) -> Option<Watched> {
    if !ryw || !is_write || rep.cfg.interval.is_zero() {
        return None;
    }
    Some(Watched {
        mark: Arc::new(WriteMark::default()),
        plan: match rep.cfg.post_read {
            true => postread::plan(pdu.pdu, pdu.h),
            false => Plan::None,
        },
        rep: rep.clone(),
    })
}
