//! The whole `/metrics` exposition (Prometheus text format): each part of
//! the router writes its own series, every family's help and type from
//! [`crate::observe::catalog`].

use crate::directory::knowledge::DsaId;
use crate::observe::catalog::{header, single};
use crate::service::context::Context;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

/// The whole `/metrics` exposition.
pub fn metrics_text(router: &Context) -> String {
    let mut out = String::with_capacity(16384);
    header(&mut out, "dsa_router_build_info");
    let _ = writeln!(
        out,
        "dsa_router_build_info{{version=\"{}\"}} 1",
        label(env!("CARGO_PKG_VERSION"))
    );
    router.backend.metrics.render(&mut out);
    reload(router, &mut out);
    workers(router, &mut out);
    utilization(router, &mut out);
    dsa_metrics(router, &mut out);
    crate::backend::follow::report::metrics(&router.backend, &mut out, label);
    router.admission.failed_binds.render(&mut out);
    router.admission.policies.render(&mut out);
    let budget = &router.admission.response_memory;
    single(&mut out, "dsa_router_queued_response_bytes", budget.used());
    single(
        &mut out,
        "dsa_router_response_memory_disconnects_total",
        budget.refused(),
    );
    crate::observe::process::Process::read().render(&mut out);
    out
}

/// The worker threads (no samples where the router runs on none of its
/// own: an embedded router).
fn workers(router: &Context, out: &mut String) {
    let Some(w) = router.workers.get() else {
        for name in [
            "dsa_router_workers_in_use",
            "dsa_router_worker_sessions",
            "dsa_router_session_moves_total",
        ] {
            header(out, name);
        }
        return;
    };
    single(out, "dsa_router_workers_in_use", w.in_use());
    header(out, "dsa_router_worker_sessions");
    for (i, n) in w.sessions().iter().enumerate() {
        let _ = writeln!(out, "dsa_router_worker_sessions{{worker=\"{i}\"}} {n}");
    }
    single(out, "dsa_router_session_moves_total", w.moves());
}

/// When the last reload was, and whether it was applied (no samples
/// before the first).
fn reload(router: &Context, out: &mut String) {
    let last = router
        .last_reload
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    for name in [
        "dsa_router_last_reload_timestamp_seconds",
        "dsa_router_last_reload_success",
    ] {
        header(out, name);
        if let Some(r) = &last {
            let v = match name {
                "dsa_router_last_reload_success" => u64::from(r.ok),
                _ => r.at_unix,
            };
            let _ = writeln!(out, "{name} {v}");
        }
    }
}

/// CPU and memory averages and thresholds, as ratios 0..1.
fn utilization(router: &Context, out: &mut String) {
    let (cpu, mem) = router.admission.throttle.averages();
    let t = router.admission.throttle.thresholds();
    single(out, "dsa_router_cpu_average_ratio", cpu / 100.0);
    single(out, "dsa_router_memory_average_ratio", mem / 100.0);
    single(
        out,
        "dsa_router_cpu_threshold_ratio",
        f64::from(t.cpu) / 100.0,
    );
    single(
        out,
        "dsa_router_memory_threshold_ratio",
        f64::from(t.memory) / 100.0,
    );
}

/// The per-DSA series (not the router's own block), their histograms and
/// each partition's availability.
fn dsa_metrics(router: &Context, out: &mut String) {
    let r = router.routing();
    let dsas: Vec<(DsaId, &_)> = r
        .snap
        .dsas
        .iter()
        .enumerate()
        .map(|(i, d)| (DsaId::new(i), d))
        .filter(|(i, _)| Some(*i) != r.table.router)
        .collect();
    for name in [
        "dsa_router_dsa_in_flight",
        "dsa_router_dsa_own_connections",
        "dsa_router_dsa_spare_connections",
        "dsa_router_dsa_persistent_searches",
        "dsa_router_dsa_up",
        "dsa_router_dsa_eligible",
        "dsa_router_dsa_operations_total",
        "dsa_router_dsa_errors_total",
        "dsa_router_dsa_out_of_scope_entries_total",
    ] {
        header(out, name);
        for (i, d) in &dsas {
            let st = &r.states.0[*i];
            let v = match name {
                "dsa_router_dsa_in_flight" => u64::from(st.in_flight()),
                "dsa_router_dsa_own_connections" => st.own_conns.load(Relaxed).max(0) as u64,
                "dsa_router_dsa_spare_connections" => st.spare_conns.load(Relaxed).max(0) as u64,
                "dsa_router_dsa_persistent_searches" => st.persistent.load(Relaxed).max(0) as u64,
                "dsa_router_dsa_up" => u64::from(st.is_up()),
                "dsa_router_dsa_eligible" => u64::from(st.status().eligible()),
                "dsa_router_dsa_operations_total" => st.served.load(Relaxed),
                "dsa_router_dsa_out_of_scope_entries_total" => st.out_of_scope.count(),
                _ => st.errors.load(Relaxed),
            };
            let _ = writeln!(
                out,
                "{name}{{dsa=\"{}\",partition=\"{}\"}} {v}",
                label(&d.name),
                label(&d.prefix.to_string())
            );
        }
    }
    for name in [
        "dsa_router_dsa_operation_duration_seconds",
        "dsa_router_dsa_probe_duration_seconds",
    ] {
        header(out, name);
        for (i, d) in &dsas {
            let st = &r.states.0[*i];
            let h = match name {
                "dsa_router_dsa_probe_duration_seconds" => &st.probe_latency,
                _ => &st.latency,
            };
            h.render(out, name, &format!("dsa=\"{}\"", label(&d.name)));
        }
    }
    header(out, "dsa_router_partition_available");
    for (name, up) in super::health::partitions(router) {
        let _ = writeln!(
            out,
            "dsa_router_partition_available{{partition=\"{}\"}} {}",
            label(&name),
            u8::from(up)
        );
    }
}

/// A label value as the Prometheus text format writes it: backslash,
/// double quote and line feed escaped (DSA names may hold the first two).
pub fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod label_tests {
    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        let rows = [
            ("D1", "D1"),
            ("q\"uote", "q\\\"uote"),
            ("back\\slash", "back\\\\slash"),
            ("two\nlines", "two\\nlines"),
            ("\\\"", "\\\\\\\""),
        ];
        for (raw, want) in rows {
            assert_eq!(super::label(raw), want, "{raw:?}");
        }
    }
}
