//! Every metric family of `/metrics` in one table: its name, type, help
//! and label names. The renderers write each family's `# HELP` and
//! `# TYPE` lines from here ([`header`]), and the reference page lists the
//! table ([`markdown`]), so the page cannot drift from what the router
//! exports; a test compares a live router's families with the table.
//!
//! Names follow the Prometheus conventions: base units (seconds, bytes),
//! ratios 0..1 (`_ratio`), `_total` on counters only, no gauge named like a
//! counter without its `_total`, no sample for a value the router does not
//! know.

use std::fmt::Write;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Its label names (a histogram's `le` not included).
    pub labels: &'static [&'static str],
}

const fn f(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Family {
    Family {
        name,
        kind,
        help,
        labels,
    }
}

use Kind::{Counter as C, Gauge as G, Histogram as H};

const DSA: &[&str] = &["dsa", "partition"];

/// Every family, in the order `/metrics` writes them.
pub const ALL: &[Family] = &[
    f("dsa_router_build_info", G, &["version"], "Always 1; the version of the running binary in its label."),
    f("dsa_router_operations_total", C, &["op", "result"], "Operations completed, by type and LDAP result code."),
    f("dsa_router_operation_duration_seconds", H, &["op"], "Operation latency through the router, by type."),
    f("dsa_router_refusals_total", C, &["reason"], "Operations or connections refused, by reason."),
    f("dsa_router_access_log_lines_total", C, &[], "Access-log lines written."),
    f("dsa_router_access_log_dropped_total", C, &[], "Access-log lines dropped because their destination did not keep up."),
    f("dsa_router_traces_caller_capped_total", C, &[], "Operations whose caller asked for a trace past --otlp-caller-rate (sampled at --otlp-sample instead)."),
    f("dsa_router_hedges_total", C, &[], "Slow reads also sent to another DSA of their group."),
    f("dsa_router_hedges_won_total", C, &[], "Hedges that answered before the read they hedged."),
    f("dsa_router_hedge_budget_refusals_total", C, &[], "Slow reads left unhedged because the hedge budget was spent."),
    f("dsa_router_ejections_total", C, &[], "DSAs taken out of selection as outliers."),
    f("dsa_router_bind_ejections_total", C, &[], "DSAs taken out of selection for binds (their binds time out)."),
    f("dsa_router_retries_total", C, &[], "Reads re-sent to another DSA."),
    f("dsa_router_client_connections_open", G, &[], "Client connections open."),
    f("dsa_router_client_connections_total", C, &[], "Client connections accepted."),
    f("dsa_router_reloads_total", C, &[], "Knowledge reloads applied."),
    f("dsa_router_reload_failures_total", C, &[], "Knowledge reloads rejected."),
    f("dsa_router_last_reload_timestamp_seconds", G, &[], "Unix time of the last knowledge reload, applied or rejected (no sample before the first)."),
    f("dsa_router_last_reload_success", G, &[], "1 when the last knowledge reload was applied, 0 when it was rejected (no sample before the first)."),
    f("dsa_router_workers_in_use", G, &[], "Worker threads taking new clients (--spread-above)."),
    f("dsa_router_worker_sessions", G, &["worker"], "Client sessions on each worker thread."),
    f("dsa_router_session_moves_total", C, &[], "Client sessions moved to another worker thread."),
    f("dsa_router_cpu_average_ratio", G, &[], "Router CPU use averaged over the utilization window, 0..1 of the CPUs it may use."),
    f("dsa_router_memory_average_ratio", G, &[], "Memory use averaged over the utilization window, 0..1 of the memory limit."),
    f("dsa_router_cpu_threshold_ratio", G, &[], "CPU threshold above which new operations are refused busy, 0..1 (0: off)."),
    f("dsa_router_memory_threshold_ratio", G, &[], "Memory threshold above which new operations are refused busy, 0..1 (0: off)."),
    f("dsa_router_dsa_in_flight", G, DSA, "Operations in flight from this router to the DSA."),
    f("dsa_router_dsa_own_connections", G, DSA, "Dedicated connections open to the DSA: each serves one client only (stateful clients)."),
    f("dsa_router_dsa_spare_connections", G, DSA, "Idle dedicated connections to the DSA, kept open for later clients' binds (--spare-connections)."),
    f("dsa_router_dsa_persistent_searches", G, DSA, "Persistent searches (sync refreshAndPersist) running on the DSA."),
    f("dsa_router_dsa_up", G, DSA, "1 when the DSA is up by health, else 0."),
    f("dsa_router_dsa_eligible", G, DSA, "1 when the DSA takes new work (up, not disabled or draining)."),
    f("dsa_router_dsa_operations_total", C, DSA, "Operations the DSA answered."),
    f("dsa_router_dsa_errors_total", C, DSA, "Operations failed on the DSA (lost connection, timeout)."),
    f("dsa_router_dsa_out_of_scope_entries_total", C, DSA, "Entries the DSA returned outside their search's base and scope (dropped)."),
    f("dsa_router_dsa_operation_duration_seconds", H, &["dsa"], "Latency of the operations the DSA answered, from sending to its final response."),
    f("dsa_router_dsa_probe_duration_seconds", H, &["dsa"], "Latency of the DSA's successful health probes."),
    f("dsa_router_partition_available", G, &["partition"], "1 when at least one DSA of the partition is up, else 0."),
    f("dsa_router_dsa_replication_lag_seconds", G, DSA, "Seconds the DSA's replication position (contextCSN) is behind its load-share group's newest (no sample while unknown)."),
    f("dsa_router_dsa_replication_reading_age_seconds", G, DSA, "Seconds since the DSA's replication position was last read (no sample before the first reading)."),
    f("dsa_router_dsa_replication_out", G, DSA, "1 when the DSA serves no reads for its replication lag or staleness."),
    f("dsa_router_replication_readings_total", C, &[], "contextCSN readings sent to DSAs."),
    f("dsa_router_replication_reading_bytes_total", C, &[], "Bytes of contextCSN readings (requests and answers)."),
    f("dsa_router_replication_entry_csn_writes_total", C, &[], "Writes whose position the router took from the written entry's entryCSN (post-read control)."),
    f("dsa_router_binds_refused_total", C, &[], "Simple binds the router answered invalidCredentials itself (a DN or address in failed-bind back-off)."),
    f("dsa_router_bind_backoffs_total", C, &[], "Failed-bind back-offs begun (--failed-bind-limit, --failed-bind-limit-per-dn, --failed-bind-limit-per-address)."),
    f("dsa_router_binds_in_flight_busy_total", C, &[], "Simple binds answered busy (51): their DN's (address's) failures plus binds in flight stayed at its limit for the whole --bind-timeout."),
    f("dsa_router_failed_bind_keys", G, &["of"], "Bind DNs (from one client address, and from all) and client addresses the failed-bind defence counts now."),
    f("dsa_router_policy_refusals_total", C, &["rule"], "Operations refused by a policy rule (--policy), by rule."),
    f("dsa_router_rate_limited_total", C, &["of", "op"], "Operations answered busy for the policy file's rates, by key and operation."),
    f("dsa_router_queued_response_bytes", G, &[], "Responses queued for clients that do not keep up (--max-response-memory)."),
    f("dsa_router_response_memory_disconnects_total", C, &[], "Clients disconnected because the responses queued for all clients reached --max-response-memory."),
    f("process_cpu_seconds_total", C, &[], "User and system CPU time the process used, seconds."),
    f("process_resident_memory_bytes", G, &[], "Resident memory size, bytes."),
    f("process_virtual_memory_bytes", G, &[], "Virtual memory size, bytes."),
    f("process_open_fds", G, &[], "Open file descriptors."),
    f("process_max_fds", G, &[], "The limit on open file descriptors."),
    f("process_start_time_seconds", G, &[], "Unix time the process started, seconds."),
];

/// The family named `name`.
pub fn family(name: &str) -> Option<&'static Family> {
    ALL.iter().find(|f| f.name == name)
}

/// The `# HELP` and `# TYPE` lines of `name`, from [`ALL`]. A name not in
/// the table gets none (and the test of every family fails).
pub fn header(out: &mut String, name: &str) {
    if let Some(f) = family(name) {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
    }
}

/// A family without labels: its header and its one sample.
pub fn single(out: &mut String, name: &str, value: impl std::fmt::Display) {
    header(out, name);
    let _ = writeln!(out, "{name} {value}");
}

/// The table as Markdown (the reference page).
pub fn markdown() -> String {
    let mut out = String::from("| metric | type | labels | help |\n|---|---|---|---|\n");
    for f in ALL {
        let labels = f
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            f.name,
            f.kind.as_str(),
            labels,
            f.help.replace('|', "\\|")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_follow_the_conventions() {
        let mut seen = std::collections::BTreeSet::new();
        for f in ALL {
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert_eq!(
                f.kind == Kind::Counter,
                f.name.ends_with("_total"),
                "{}",
                f.name
            );
            assert!(!f.name.contains("percent"), "{}: use a _ratio", f.name);
            assert!(
                !f.help.contains('\n') && !f.help.contains('\\'),
                "{}",
                f.name
            );
        }
        // Under OpenMetrics a counter `x_total` is the family `x`: no other
        // family may be named `x`.
        for f in ALL.iter().filter(|f| f.kind == Kind::Counter) {
            let base = f.name.trim_end_matches("_total");
            assert!(family(base).is_none(), "{base} collides with {}", f.name);
        }
    }
}
