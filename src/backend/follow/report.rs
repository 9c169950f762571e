//! Positions as `/status` and `/metrics` show them.

use crate::backend::routing::Backend;
use crate::observe::catalog::{header, single};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One DSA's position in one partition (`/status`).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Report {
    /// Per server ID (3 hex digits) the newest CSN.
    pub positions: BTreeMap<String, String>,
    /// Behind its load-share group's newest, seconds (`None`: unknown).
    pub lag_s: Option<f64>,
    /// Behind its partition's newest, seconds (`None`: unknown).
    pub staleness_s: Option<f64>,
    /// Age of the last reading, seconds.
    pub reading_age_s: Option<f64>,
    /// Why it serves no reads, when it does not.
    pub out: Option<String>,
}

/// DSA `dsa`'s report in partition `key`; `None` when it publishes no
/// position or positions are off.
pub fn of(router: &Backend, key: &str, dsa: &str) -> Option<Report> {
    let a = router.replication.positions.get(key, dsa)?;
    let r = a.reading.as_ref().filter(|r| !r.position.is_empty())?;
    Some(Report {
        positions: r
            .position
            .csns()
            .iter()
            .map(|c| (format!("{:03x}", c.sid), c.to_string()))
            .collect(),
        lag_s: a.lag.seconds(),
        staleness_s: a.staleness.seconds(),
        reading_age_s: Some(r.finished.elapsed().as_secs_f64()),
        out: a.out,
    })
}

/// The replication series of `/metrics` (help and type from
/// [`crate::observe::catalog`]).
pub fn metrics(router: &Backend, out: &mut String, label: fn(&str) -> String) {
    let r = router.routing();
    let rep = &router.replication;
    for name in [
        "dsa_router_dsa_replication_lag_seconds",
        "dsa_router_dsa_replication_reading_age_seconds",
        "dsa_router_dsa_replication_out",
    ] {
        header(out, name);
        for p in r.table.partitions_sorted() {
            for &i in &p.order {
                let d = &r.snap.dsas[i];
                let Some(x) = of(router, &p.key, &d.name) else {
                    continue;
                };
                // An unknown value has no sample (not a -1 that graphs
                // and alerts would read as a value).
                let v = match name {
                    "dsa_router_dsa_replication_lag_seconds" => x.lag_s,
                    "dsa_router_dsa_replication_reading_age_seconds" => x.reading_age_s,
                    _ => Some(f64::from(u8::from(x.out.is_some()))),
                };
                let Some(v) = v else {
                    continue;
                };
                let _ = writeln!(
                    out,
                    "{name}{{dsa=\"{}\",partition=\"{}\"}} {v}",
                    label(&d.name),
                    label(&p.text)
                );
            }
        }
    }
    for (name, v) in [
        (
            "dsa_router_replication_readings_total",
            rep.requests.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (
            "dsa_router_replication_reading_bytes_total",
            rep.bytes.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (
            "dsa_router_replication_entry_csn_writes_total",
            rep.entry_csns.load(std::sync::atomic::Ordering::Relaxed),
        ),
    ] {
        single(out, name, v);
    }
}
