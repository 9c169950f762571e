//! The position reader: every `--csn-interval`, for each partition and
//! each of its DSAs, one base-scope read of `contextCSN` on the
//! partition's suffix (under the DSA's native prefix when knowledge maps
//! one), on a long-lived connection of the poller's own per DSA, bound as
//! the router's identity on that DSA when knowledge gives one (else
//! anonymous). At most one reading per DSA and suffix is in flight; a DSA
//! that does not answer keeps its last reading, which turns unknown after
//! `Config::fresh_for`; one whose reading shows no position is read only
//! every 5 s. After each round, each DSA's lag against
//! its group and partition is assessed and its read read gate set.

use crate::backend::routing::{Backend, Routing};
use crate::backend::upstream::conn::Conn;
use crate::directory::knowledge::{DsaId, DsaName};
use crate::directory::replication::positions::{lags, staleness, Assessed, Lag, Position, Reading};
use crate::directory::replication::Replication;
use bytes::Bytes;
use dashmap::DashMap;
use ldap3_proto::proto::{LdapFilter, LdapSearchScope};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The `contextCSN` read of `base`.
pub fn request(base: &str) -> Bytes {
    // Operational: asked for by name.
    crate::proto::wire::search::own_search(
        base,
        LdapSearchScope::Base,
        (1, 0),
        LdapFilter::Present("objectClass".into()),
        &["contextCSN"],
    )
}

/// The position in the entries of a `contextCSN` read.
fn position_of(entries: &[Bytes]) -> Position {
    let attrs = entries
        .first()
        .and_then(|e| crate::proto::wire::response::entry_attrs(e))
        .unwrap_or_default();
    Position::from_values(
        attrs
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("contextCSN"))
            .flat_map(|(_, v)| v.iter())
            .filter_map(|v| std::str::from_utf8(v).ok()),
    )
}

/// The reader's state between rounds.
#[derive(Default)]
struct Poller {
    /// Latest reading per (DSA name, base).
    readings: DashMap<(DsaName, String), Reading>,
    busy: DashMap<(DsaName, String), ()>,
    conns: DashMap<DsaName, Arc<Conn>>,
    /// No new connection to this DSA before then (after a failed one).
    backoff: DashMap<DsaName, Instant>,
    /// No reading of (DSA name, base) before then: its last reading showed
    /// no position (it publishes none, e.g. not a syncprov provider or
    /// consumer), so it is read every [`QUIET_EVERY`] only.
    quiet: DashMap<(DsaName, String), Instant>,
}

/// How often a DSA whose last reading showed no position is read: a DSA
/// that starts publishing (syncprov added) is seen within this.
const QUIET_EVERY: Duration = Duration::from_secs(5);

/// What one DSA of one partition is read at.
fn targets(routing: &Routing) -> Vec<(DsaId, String)> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in routing.table.partitions() {
        for &i in &p.order {
            // The router's own block, or one found to be this router.
            if Some(i) == routing.table.router || routing.states.0[i].is_itself() {
                continue;
            }
            let base = base_of(routing, i, &p.prefix.to_string());
            if seen.insert((i, base.clone())) {
                out.push((i, base));
            }
        }
    }
    out
}

/// The suffix as DSA `i` names it.
fn base_of(routing: &Routing, i: DsaId, prefix: &str) -> String {
    routing.pools[i]
        .native
        .as_ref()
        .and_then(|m| m.to_native(prefix))
        .unwrap_or_else(|| prefix.to_string())
}

/// Read positions until shutdown (nothing when the interval is zero).
pub(crate) async fn run(router: Arc<Backend>, mut shutdown: watch::Receiver<bool>) {
    let rep = router.replication.clone();
    if rep.cfg.interval.is_zero() {
        return;
    }
    let poller = Arc::new(Poller::default());
    let mut tick = tokio::time::interval(rep.cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let routing = router.routing();
        let mut round = Vec::new();
        for (i, base) in targets(&routing) {
            let key = (routing.snap.dsas[i].name.clone(), base);
            if poller.quiet.get(&key).is_some_and(|t| *t > Instant::now()) {
                continue;
            }
            if poller.busy.insert(key.clone(), ()).is_some() {
                continue;
            }
            let (poller, router, routing) = (poller.clone(), router.clone(), routing.clone());
            round.push(tokio::spawn(async move {
                read_one(&poller, &router, &routing, i, &key).await;
                poller.busy.remove(&key);
            }));
        }
        // This round's readings are assessed as soon as they are in (those
        // that take longer than half an interval, at the next round).
        let half = rep.cfg.interval / 2;
        let _ = tokio::time::timeout(half, futures::future::join_all(round)).await;
        assess(&rep, &routing, &poller);
    }
    for c in poller.conns.iter() {
        c.close();
    }
}

/// One reading of DSA `i` at `key.1`.
async fn read_one(
    p: &Poller,
    router: &Backend,
    routing: &Routing,
    i: DsaId,
    key: &(DsaName, String),
) {
    let rep = &router.replication;
    let timeout = rep.cfg.fresh_for();
    let conn = match p
        .conns
        .get(&key.0)
        .filter(|c| c.is_alive())
        .map(|c| c.clone())
    {
        Some(c) => c,
        None => {
            if p.backoff.get(&key.0).is_some_and(|t| *t > Instant::now()) {
                return;
            }
            let pool = &routing.pools[i];
            let limits = crate::backend::settings::Limits {
                connect_timeout: timeout.max(Duration::from_secs(1)),
                bind_timeout: timeout.max(Duration::from_secs(1)),
                ..router.settings.limits
            };
            let st = &routing.states.0[i];
            let made = crate::backend::upstream::pool::connect_bound(
                st,
                &pool.targets,
                pool.own_identity.as_ref(),
                limits,
                pool.tls.as_ref(),
            )
            .await;
            match made {
                Ok(c) => {
                    p.conns.insert(key.0.clone(), c.clone());
                    c
                }
                Err(e) => {
                    tracing::debug!(dsa = %st.name, error = %crate::base::logsafe::esc(&e.to_string()), "position not read");
                    p.backoff
                        .insert(key.0.clone(), Instant::now() + Duration::from_secs(1));
                    return;
                }
            }
        }
    };
    let pdu = request(&key.1);
    let started = Instant::now();
    rep.requests.fetch_add(1, Ordering::Relaxed);
    match crate::backend::upstream::advertised::collect(&conn, &pdu, timeout).await {
        Ok(entries) => {
            // The final result (some 14 bytes) is not seen here: counted
            // as such.
            let bytes = pdu.len() + 14 + entries.iter().map(|e| e.len()).sum::<usize>();
            rep.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            let reading = Reading {
                position: position_of(&entries),
                started,
                finished: Instant::now(),
            };
            if reading.position.is_empty() {
                p.quiet.insert(key.clone(), reading.finished + QUIET_EVERY);
            } else {
                p.quiet.remove(key);
            }
            p.readings.insert(key.clone(), reading);
        }
        Err(e) if matches!(e.kind, crate::base::error::Kind::Timeout { .. }) => {}
        Err(_) => {
            conn.close();
            p.conns.remove(&key.0);
        }
    }
}

/// Lags of every DSA of every partition from the latest readings; the
/// read gates follow.
fn assess(rep: &Replication, routing: &Routing, p: &Poller) {
    let fresh_after = Instant::now()
        .checked_sub(rep.cfg.fresh_for())
        .unwrap_or_else(Instant::now);
    let now_micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let n = routing.snap.dsas.len();
    let mut gate: Vec<(bool, u32)> = vec![(false, 0); n];
    let mut keys = HashSet::new();
    for part in routing.table.partitions() {
        let members: Vec<DsaId> = part
            .order
            .iter()
            .copied()
            .filter(|&i| Some(i) != routing.table.router && !routing.states.0[i].is_itself())
            .collect();
        let prefix = part.prefix.to_string();
        let reading = |i: DsaId| {
            let k = (
                routing.snap.dsas[i].name.clone(),
                base_of(routing, i, &prefix),
            );
            p.readings.get(&k).map(|r| r.clone())
        };
        let readings: Vec<Option<Reading>> = members.iter().map(|&i| reading(i)).collect();
        let refs: Vec<Option<&Reading>> = readings.iter().map(Option::as_ref).collect();
        let staleness = staleness(&refs, fresh_after, now_micros);
        for (k, &i) in members.iter().enumerate() {
            let group: Vec<DsaId> = part
                .group_of(i)
                .map(|g| g.members.clone())
                .unwrap_or_else(|| vec![i]);
            let grefs: Vec<Option<&Reading>> = group
                .iter()
                .map(|g| members.iter().position(|m| m == g).and_then(|x| refs[x]))
                .collect();
            let me = group.iter().position(|&g| g == i).unwrap_or(0);
            let lag = lags(&grefs, fresh_after)
                .get(me)
                .copied()
                .unwrap_or(Lag::NoPosition);
            let out = why_out(rep, lag, staleness[k]);
            let g = &mut gate[i];
            g.0 |= out.is_some();
            g.1 = g.1.max(lag.millis().max(staleness[k].millis()));
            let name = &routing.snap.dsas[i].name;
            keys.insert((part.key.clone(), name.clone()));
            rep.positions.set(
                &part.key,
                name,
                Assessed {
                    reading: readings[k].clone(),
                    lag,
                    staleness: staleness[k],
                    out,
                },
            );
        }
    }
    for (i, (out, ms)) in gate.into_iter().enumerate() {
        routing.states.0[i].replication.set(out, ms);
    }
    rep.positions
        .retain(|part, dsa| keys.contains(&(part.to_string(), DsaName::from(dsa))));
}

/// Why a DSA with these lags serves no reads, if it does not.
fn why_out(rep: &Replication, lag: Lag, staleness: Lag) -> Option<String> {
    let show = |l: Lag| match l {
        Lag::Known(d) => format!("{:.3} s", d.as_secs_f64()),
        _ => "unknown".to_string(),
    };
    if let Some(max) = rep.cfg.max_lag.filter(|&m| lag.beyond(m)) {
        return Some(format!(
            "replication lag {} over --max-replication-lag {:.3} s",
            show(lag),
            max.as_secs_f64()
        ));
    }
    if let Some(max) = rep.cfg.max_staleness.filter(|&m| staleness.beyond(m)) {
        return Some(format!(
            "may lack changes {} old (behind the partition's newest), over --max-staleness {:.3} s",
            show(staleness),
            max.as_secs_f64()
        ));
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_a_base_read_of_context_csn() {
        let pdu = request("o=Example");
        let h = crate::proto::wire::frame::header(&pdu).unwrap();
        assert_eq!(h.op_tag, crate::proto::wire::frame::tag::SEARCH_REQUEST);
        assert!(pdu.windows(10).any(|w| w == b"contextCSN"));
    }
}
