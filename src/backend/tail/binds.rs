//! Ejection for binds (architecture.md, "Tail latency"). A DSA whose binds time out
//! while it answers its probes stays up, and each bind would wait its bind
//! deadline there (`dsa_state::bind_deadline`) before going to the next
//! DSA. The third bind given up in a row, or one that waited the whole
//! `--bind-timeout`, ejects it for binds ([`bind_timed_out`]): later binds skip it
//! ([`skipped_for_binds`]) for the ejection time, longer after each
//! ejection in a row, as reads skip an outlier. As for reads, at most
//! `max_ejection` percent of a partition's DSAs are ejected for binds at
//! once and never the last one able to take them; `--max-ejection 0`
//! turns it off. Reads still go to it: it answers them.

use super::eject::may_eject;
use crate::backend::routing::{Backend, Routing};
use crate::directory::route::{DsaId, Partition};
use std::sync::atomic::Ordering;

/// A bind sent to DSA `dsa` of partition `p` timed out (`why`): eject it
/// for binds unless that would leave `p` without a DSA able to take them.
/// Whether it was ejected.
pub(crate) fn bind_timed_out(
    router: &Backend,
    routing: &Routing,
    p: &Partition,
    dsa: DsaId,
    why: &str,
) -> bool {
    let cfg = super::settings(&routing.snap.settings, &router.settings.live.load());
    if cfg.max_ejection == 0 {
        return false;
    }
    let states = &routing.states.0;
    let ejected: Vec<bool> = states.iter().map(|s| s.bind_ejected()).collect();
    let able: Vec<bool> = states
        .iter()
        .zip(&ejected)
        .map(|(s, &out)| s.status().eligible() && !out)
        .collect();
    // The ejection rules work on places in the DSA list.
    let order = [p.order.iter().map(|d| d.index()).collect()];
    if ejected[dsa] || !may_eject(dsa.index(), &order, &ejected, &able, cfg.max_ejection) {
        return false;
    }
    states[dsa].eject_for_binds(&format!("binds time out ({why})"), cfg.ejection_time);
    router
        .metrics
        .bind_ejections
        .fetch_add(1, Ordering::Relaxed);
    true
}

/// The DSAs of partition `p` a bind skips: those ejected for binds, while
/// another DSA of `p` can take it (else none: the last is never skipped).
pub(crate) fn skipped_for_binds(routing: &Routing, p: &Partition) -> Vec<DsaId> {
    let states = &routing.states.0;
    let out: Vec<DsaId> = p
        .order
        .iter()
        .copied()
        .filter(|&i| states[i].bind_ejected())
        .collect();
    if out.is_empty() {
        return out;
    }
    let another = p
        .order
        .iter()
        .any(|&i| !out.contains(&i) && states[i].status().eligible());
    if another {
        out
    } else {
        Vec::new()
    }
}
