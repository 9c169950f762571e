//! Positions as `/status` and `/metrics` show them.

use crate::backend::routing::Backend;
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

/// The replication series of `/metrics`.
pub fn metrics(router: &Backend, out: &mut String, label: fn(&str) -> String) {
    let r = router.routing();
    let rep = &router.replication;
    let series = [
        (
            "dsa_router_dsa_replication_lag_seconds",
            "Seconds the DSA's replication position (contextCSN) is behind its load-share group's newest (-1: unknown).",
        ),
        (
            "dsa_router_dsa_replication_reading_age_seconds",
            "Seconds since the DSA's replication position was last read.",
        ),
        (
            "dsa_router_dsa_replication_out",
            "1 when the DSA serves no reads for its replication lag or staleness.",
        ),
    ];
    for (name, help) in series {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for p in r.table.partitions_sorted() {
            for &i in &p.order {
                let d = &r.snap.dsas[i];
                let Some(x) = of(router, &p.key, &d.name) else {
                    continue;
                };
                let v = match name {
                    "dsa_router_dsa_replication_lag_seconds" => x.lag_s.unwrap_or(-1.0),
                    "dsa_router_dsa_replication_reading_age_seconds" => {
                        x.reading_age_s.unwrap_or(-1.0)
                    }
                    _ => f64::from(u8::from(x.out.is_some())),
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
    for (name, help, v) in [
        (
            "dsa_router_replication_readings_total",
            "contextCSN readings sent to DSAs.",
            rep.requests.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (
            "dsa_router_replication_reading_bytes_total",
            "Bytes of contextCSN readings (requests and answers).",
            rep.bytes.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (
            "dsa_router_replication_entry_csn_writes_total",
            "Writes whose position the router took from the written entry's entryCSN (post-read control).",
            rep.entry_csns.load(std::sync::atomic::Ordering::Relaxed),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {v}");
    }
}
