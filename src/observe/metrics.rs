//! Counters for `/metrics`, handed to the parts that count (never global,
//! so tests can assert them). Fixed arrays of atomics: recording an
//! operation is a few relaxed increments, no locks, no allocation.

use super::catalog::{header, single};
use super::histogram::Histogram;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Operations whose caller asked for a trace past `--otlp-caller-rate`
/// (counted by `otel`, which has no `Metrics` at hand).
pub(crate) static TRACES_CALLER_CAPPED: AtomicU64 = AtomicU64::new(0);

/// Operation kinds, in metric label order.
pub(crate) const OPS: &[&str] = &[
    "bind", "unbind", "search", "modify", "add", "delete", "moddn", "compare", "abandon",
    "extended",
];

/// Why the router refused work.
#[derive(Debug, Clone, Copy)]
pub enum Refusal {
    Concurrency = 0,
    Cpu = 1,
    Memory = 2,
    Outstanding = 3,
    Connections = 4,
    Unavailable = 5,
    /// Incomplete requests held more memory than allowed.
    RequestMemory = 6,
}

const REFUSALS: &[&str] = &[
    "concurrency",
    "cpu",
    "memory",
    "outstanding",
    "connections",
    "unavailable",
    "request_memory",
];

pub(crate) fn op_index(name: &str) -> usize {
    OPS.iter().position(|o| *o == name).unwrap_or(OPS.len() - 1)
}

pub struct Metrics {
    ops: Vec<AtomicU64>,
    /// Latency per operation kind.
    hist: Vec<Histogram>,
    refusals: Vec<AtomicU64>,
    pub retries: AtomicU64,
    /// Hedged reads: hedges sent, hedges that answered first, slow reads
    /// the hedge budget left unhedged.
    pub hedges_sent: AtomicU64,
    pub hedges_won: AtomicU64,
    pub hedge_refusals: AtomicU64,
    /// DSAs taken out of selection as outliers.
    pub ejections: AtomicU64,
    /// DSAs taken out of selection for binds (their binds time out).
    pub bind_ejections: AtomicU64,
    pub clients: AtomicI64,
    pub clients_total: AtomicU64,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
}

fn zeros(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            ops: zeros(OPS.len() * 256),
            hist: (0..OPS.len()).map(|_| Histogram::default()).collect(),
            refusals: zeros(REFUSALS.len()),
            retries: AtomicU64::new(0),
            hedges_sent: AtomicU64::new(0),
            hedges_won: AtomicU64::new(0),
            hedge_refusals: AtomicU64::new(0),
            ejections: AtomicU64::new(0),
            bind_ejections: AtomicU64::new(0),
            clients: AtomicI64::new(0),
            clients_total: AtomicU64::new(0),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// One completed operation: its result code and latency.
    pub fn op(&self, op: usize, code: u8, micros: u64) {
        let op = op.min(OPS.len() - 1);
        self.ops[op * 256 + code as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(h) = self.hist.get(op) {
            h.observe_us(micros);
        }
    }

    pub fn refused(&self, why: Refusal) {
        self.refusals[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn refusals(&self, why: Refusal) -> u64 {
        self.refusals[why as usize].load(Ordering::Relaxed)
    }

    pub fn ops_count(&self, op: &str, code: u8) -> u64 {
        self.ops[op_index(op) * 256 + code as usize].load(Ordering::Relaxed)
    }

    /// Prometheus text exposition of the router-wide counters; per-DSA
    /// series are appended by the admin module.
    pub fn render(&self, out: &mut String) {
        self.render_operations(out);
        self.render_latency(out);
        self.render_refusals(out);
        for (name, v) in self.singles() {
            single(out, name, v);
        }
    }

    /// `dsa_router_operations_total`: one series per operation type and
    /// result code seen.
    fn render_operations(&self, out: &mut String) {
        header(out, "dsa_router_operations_total");
        for (oi, op) in OPS.iter().enumerate() {
            for code in 0..256 {
                let v = self.ops[oi * 256 + code].load(Ordering::Relaxed);
                if v > 0 {
                    let _ = writeln!(
                        out,
                        "dsa_router_operations_total{{op=\"{op}\",result=\"{code}\"}} {v}"
                    );
                }
            }
        }
    }

    /// `dsa_router_operation_duration_seconds`: a histogram per operation
    /// type seen.
    fn render_latency(&self, out: &mut String) {
        let name = "dsa_router_operation_duration_seconds";
        header(out, name);
        for (op, h) in OPS.iter().zip(&self.hist) {
            if h.count() > 0 {
                h.render(out, name, &format!("op=\"{op}\""));
            }
        }
    }

    /// `dsa_router_refusals_total`, by reason.
    fn render_refusals(&self, out: &mut String) {
        header(out, "dsa_router_refusals_total");
        for (i, r) in REFUSALS.iter().enumerate() {
            let _ = writeln!(
                out,
                "dsa_router_refusals_total{{reason=\"{r}\"}} {}",
                self.refusals[i].load(Ordering::Relaxed)
            );
        }
    }

    /// The single-valued series: (name, value); their help is in the
    /// catalog.
    fn singles(&self) -> Vec<(&'static str, i64)> {
        vec![
            (
                "dsa_router_access_log_lines_total",
                crate::observe::access::written() as i64,
            ),
            (
                "dsa_router_access_log_dropped_total",
                crate::observe::access::dropped() as i64,
            ),
            (
                "dsa_router_traces_caller_capped_total",
                TRACES_CALLER_CAPPED.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_hedges_total",
                self.hedges_sent.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_hedges_won_total",
                self.hedges_won.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_hedge_budget_refusals_total",
                self.hedge_refusals.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_ejections_total",
                self.ejections.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_bind_ejections_total",
                self.bind_ejections.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_retries_total",
                self.retries.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_client_connections_open",
                self.clients.load(Ordering::Relaxed),
            ),
            (
                "dsa_router_client_connections_total",
                self.clients_total.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_reloads_total",
                self.reloads_ok.load(Ordering::Relaxed) as i64,
            ),
            (
                "dsa_router_reload_failures_total",
                self.reloads_failed.load(Ordering::Relaxed) as i64,
            ),
        ]
    }
}
