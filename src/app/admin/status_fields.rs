//! Every field of the `/status` JSON with what it means, for the
//! reference page. The paths and types come from serializing an example
//! [`Status`] (every optional field set, one element in each list and
//! map), so that a field added to the structures without a line here
//! fails this module's test, and the page is regenerated from here.

use super::status::{
    DsaReport, GroupStatus, PartitionStatus, PolicyCounts, PrefixNote, ReloadInfo, Status,
    Utilization,
};
use serde_json::Value;
use std::fmt::Write;

/// Path (`a.b`, `list[].c`, `map.*` for any key) and meaning.
pub const FIELDS: &[(&str, &str)] = &[
    (
        "router",
        "the router's own block (`--name`); null without one",
    ),
    ("version", "the running binary's version"),
    ("knowledge", "the root knowledge file"),
    ("partitions[].prefix", "the partition's prefix"),
    (
        "partitions[].slot",
        "the slot, in a horizontal partition; else null",
    ),
    ("partitions[].dsas[].name", "the DSA, in routing order"),
    (
        "partitions[].dsas[].group",
        "its load-share group; null outside one",
    ),
    (
        "partitions[].dsas[].state",
        "up, down, disabled, draining, ejected or lagging",
    ),
    ("partitions[].dsas[].health", "up or down, by its probes"),
    ("partitions[].dsas[].reason", "why it is in that state"),
    (
        "partitions[].dsas[].in_flight",
        "operations in flight to it",
    ),
    (
        "partitions[].dsas[].own_connections",
        "clients' own (dedicated) connections open to it",
    ),
    (
        "partitions[].dsas[].spare_connections",
        "dedicated connections kept open for later binds",
    ),
    (
        "partitions[].dsas[].persistent_searches",
        "persistent searches running on it",
    ),
    ("partitions[].dsas[].served", "operations it answered"),
    (
        "partitions[].dsas[].errors",
        "operations failed on it (lost connection, timeout)",
    ),
    (
        "partitions[].dsas[].out_of_scope_entries",
        "entries it returned outside their search's scope (dropped)",
    ),
    (
        "partitions[].dsas[].last_change_unix",
        "Unix seconds of its last health change",
    ),
    (
        "partitions[].dsas[].probe_latency_ms",
        "its last successful probe's latency, ms; null before one",
    ),
    (
        "partitions[].dsas[].failback_in_s",
        "seconds until a recovering DSA serves again; null otherwise",
    ),
    (
        "partitions[].dsas[].ejected",
        "why and how long it is ejected as an outlier; null when not",
    ),
    (
        "partitions[].dsas[].bind_ejected",
        "why and how long binds avoid it; null when they do not",
    ),
    (
        "partitions[].dsas[].latency_ms",
        "mean read latency over the last second with reads, ms",
    ),
    (
        "partitions[].dsas[].addresses",
        "its addresses, as knowledge gives them",
    ),
    (
        "partitions[].dsas[].replication.positions.*",
        "its newest CSN per server ID (3 hex digits)",
    ),
    (
        "partitions[].dsas[].replication.lag_s",
        "seconds behind its load-share group's newest; null while unknown",
    ),
    (
        "partitions[].dsas[].replication.staleness_s",
        "seconds behind the partition's newest; null while unknown",
    ),
    (
        "partitions[].dsas[].replication.reading_age_s",
        "seconds since its position was read",
    ),
    (
        "partitions[].dsas[].replication.out",
        "why it serves no reads, when it does not",
    ),
    (
        "last_reload.ok",
        "whether the last reload was applied (`last_reload` is null before one)",
    ),
    ("last_reload.at_unix", "Unix seconds of the last reload"),
    (
        "last_reload.message",
        "what it changed, or why it was rejected",
    ),
    ("client_connections", "client connections open"),
    (
        "utilization.cpu_avg_percent",
        "the router's CPU use over the window, percent",
    ),
    (
        "utilization.memory_avg_percent",
        "memory use over the window, percent",
    ),
    (
        "utilization.cpu_threshold_percent",
        "`--cpu-threshold` (0: off)",
    ),
    (
        "utilization.memory_threshold_percent",
        "`--memory-threshold` (0: off)",
    ),
    (
        "utilization.window_seconds",
        "`--utilization-window`, seconds",
    ),
    ("draining", "the router drains: no new connections"),
    (
        "binds_refused",
        "simple binds answered invalidCredentials by the failed-bind back-off",
    ),
    (
        "binds_busy",
        "simple binds answered busy by the failed-bind defence",
    ),
    ("policy.on", "whether a policy file is in force"),
    ("policy.refusals.*", "operations refused, per rule"),
    (
        "policy.rate_limited_address",
        "operations answered busy for the per-address rates",
    ),
    (
        "policy.rate_limited_identity",
        "operations answered busy for the per-identity rates",
    ),
    (
        "policy.groups[].group",
        "a group that rules name (`member_of`)",
    ),
    (
        "policy.groups[].members",
        "its members as last read; null when unreadable",
    ),
    (
        "policy.groups[].read_age_seconds",
        "seconds since its last good read",
    ),
    ("policy.groups[].dsa", "the DSA it was last read from"),
    ("policy.groups[].error", "why its last read failed"),
    ("clients.total", "client sessions open"),
    (
        "clients.listed[].address",
        "the client's address (the PROXY header's, behind a balancer)",
    ),
    (
        "clients.listed[].identity",
        "`anonymous`, or its identity as WhoAmI gives it",
    ),
    (
        "clients.listed[].tls",
        "whether the connection runs over TLS",
    ),
    (
        "clients.listed[].since_unix",
        "Unix seconds since this process serves it",
    ),
    (
        "clients.listed[].handed_over",
        "taken over from the previous process in a hot upgrade",
    ),
    (
        "prefix_warnings[].partition",
        "a partition whose prefix none of its DSAs holds",
    ),
    (
        "prefix_warnings[].suggestion",
        "the likely prefix, when one is near",
    ),
    ("prefix_warnings[].message", "the whole warning, as logged"),
    (
        "warnings",
        "other warnings, as logged: a knowledge block found to be this router itself (its root DSE carries this process's marker)",
    ),
];

/// A `/status` with every optional field set and one element in each list.
fn example() -> Status {
    let text = || Some(String::new());
    let dsa = DsaReport {
        name: String::new(),
        group: text(),
        state: String::new(),
        health: String::new(),
        reason: String::new(),
        in_flight: 0,
        own_connections: 0,
        spare_connections: 0,
        persistent_searches: 0,
        served: 0,
        errors: 0,
        out_of_scope_entries: 0,
        last_change_unix: 0,
        probe_latency_ms: Some(0.0),
        failback_in_s: Some(0.0),
        ejected: text(),
        bind_ejected: text(),
        latency_ms: Some(0.0),
        addresses: vec![String::new()],
        replication: Some(crate::backend::follow::report::Report {
            positions: [("*".to_string(), String::new())].into(),
            lag_s: Some(0.0),
            staleness_s: Some(0.0),
            reading_age_s: Some(0.0),
            out: text(),
        }),
    };
    Status {
        router: text(),
        version: String::new(),
        knowledge: String::new(),
        partitions: vec![PartitionStatus {
            prefix: String::new(),
            slot: Some(0),
            dsas: vec![dsa],
        }],
        last_reload: Some(ReloadInfo {
            ok: true,
            at_unix: 0,
            message: String::new(),
        }),
        client_connections: 0,
        utilization: Utilization {
            cpu_avg_percent: 0.0,
            memory_avg_percent: 0.0,
            cpu_threshold_percent: 0,
            memory_threshold_percent: 0,
            window_seconds: 0.0,
        },
        draining: false,
        binds_refused: 0,
        binds_busy: 0,
        policy: PolicyCounts {
            on: false,
            refusals: [("*".to_string(), 0)].into(),
            rate_limited_address: 0,
            rate_limited_identity: 0,
            groups: vec![GroupStatus {
                group: String::new(),
                members: Some(0),
                read_age_seconds: Some(0.0),
                dsa: text(),
                error: text(),
            }],
        },
        clients: crate::observe::clients::Listing {
            total: 0,
            listed: vec![crate::observe::clients::Client {
                address: String::new(),
                identity: String::new(),
                tls: false,
                since_unix: 0,
                handed_over: false,
            }],
        },
        prefix_warnings: vec![PrefixNote {
            suggestion: text(),
            ..PrefixNote::default()
        }],
        warnings: vec![String::new()],
    }
}

/// The JSON type of a leaf.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "boolean".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) => format!("array of {}", a.first().map_or("?".into(), kind)),
        Value::Object(_) => "object".into(),
    }
}

/// The leaves of `v` under `path`: (path, type).
fn leaves(path: &str, v: &Value, out: &mut Vec<(String, String)>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| leaves(&join(k), v, out)),
        Value::Array(a) if a.first().is_some_and(Value::is_object) => {
            if let Some(first) = a.first() {
                leaves(&format!("{path}[]"), first, out);
            }
        }
        _ => out.push((path.to_string(), kind(v))),
    }
}

/// The fields of the example, in its order.
fn example_fields() -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::to_value(example()) {
        leaves("", &v, &mut out);
    }
    out
}

/// The table as Markdown (the reference page).
pub fn markdown() -> String {
    let types = example_fields();
    let mut out = String::from("| field | type | what |\n|---|---|---|\n");
    for (path, what) in FIELDS {
        let kind = types
            .iter()
            .find(|(p, _)| p == path)
            .map_or("", |(_, k)| k.as_str());
        let _ = writeln!(out, "| `{path}` | {kind} | {what} |");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_field_of_status_has_a_line_and_every_line_a_field() {
        let fields: Vec<String> = super::example_fields().into_iter().map(|f| f.0).collect();
        let listed: Vec<String> = super::FIELDS.iter().map(|f| f.0.to_string()).collect();
        for f in &fields {
            assert!(listed.contains(f), "/status has {f}: describe it in FIELDS");
        }
        for l in &listed {
            assert!(
                fields.contains(l),
                "FIELDS names {l}, which /status does not have"
            );
        }
        assert!(fields.len() > 50, "{fields:?}");
    }
}
