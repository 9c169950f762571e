//! The `/status` view: each partition with its DSAs in order.

use crate::backend::dsa_state::Admin;
use crate::service::context::{Context, ReloadOutcome};
use serde::{Deserialize, Serialize};
use std::time::UNIX_EPOCH;

#[derive(Debug, Serialize, Deserialize)]
pub struct DsaReport {
    pub name: String,
    pub group: Option<String>,
    /// up, down, disabled, draining or ejected (an outlier, for a while).
    pub state: String,
    pub health: String,
    pub reason: String,
    pub in_flight: u32,
    /// Connections of clients' own (stateful clients) open to it.
    #[serde(default)]
    pub own_connections: i64,
    /// Clients' own connections kept open for later binds.
    pub spare_connections: i64,
    /// Persistent searches (sync refreshAndPersist) running on it.
    #[serde(default)]
    pub persistent_searches: i64,
    pub served: u64,
    pub errors: u64,
    /// Entries it returned outside their searches' scope (dropped).
    #[serde(default)]
    pub out_of_scope_entries: u64,
    /// Unix seconds of the last health state change.
    pub last_change_unix: u64,
    pub probe_latency_ms: Option<f64>,
    /// Seconds until a recovering DSA serves again (failback hold-down).
    #[serde(default)]
    pub failback_in_s: Option<f64>,
    /// Why it is ejected as an outlier, and for how long, while it is.
    #[serde(default)]
    pub ejected: Option<String>,
    /// Why it is out of selection for binds (its binds time out), and for
    /// how long, while it is.
    #[serde(default)]
    pub bind_ejected: Option<String>,
    /// Mean latency of its reads over the last second with reads, ms.
    #[serde(default)]
    pub latency_ms: Option<f64>,
    pub addresses: Vec<String>,
    /// Its replication position in this partition, when it publishes one.
    #[serde(default)]
    pub replication: Option<crate::backend::follow::report::Report>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PartitionStatus {
    pub prefix: String,
    /// The slot, in a horizontal partition (its DSAs grouped by slot).
    #[serde(default)]
    pub slot: Option<u32>,
    pub dsas: Vec<DsaReport>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    pub router: Option<String>,
    pub version: String,
    pub knowledge: String,
    pub partitions: Vec<PartitionStatus>,
    pub last_reload: Option<ReloadInfo>,
    pub client_connections: i64,
    pub utilization: Utilization,
    /// The router drains (SIGTERM, `ctl shutdown`): it accepts no new
    /// connections and closes each client's once its operations end.
    #[serde(default)]
    pub draining: bool,
    /// Simple binds the router answered invalidCredentials itself
    /// (failed-bind back-off).
    #[serde(default)]
    pub binds_refused: u64,
    /// Simple binds answered busy: their DN's failures plus binds in
    /// flight stayed at its limit for --bind-timeout.
    #[serde(default)]
    pub binds_busy: u64,
    /// Client policies (`--policy`): refusals per rule, rates.
    #[serde(default)]
    pub policy: PolicyCounts,
    /// Client sessions: the total and the first
    /// [`crate::observe::clients::LISTED`], the oldest first.
    #[serde(default)]
    pub clients: crate::observe::clients::Listing,
    /// Partitions whose prefix no DSA of theirs holds (their root DSEs'
    /// `namingContexts`), with the likely prefix.
    #[serde(default)]
    pub prefix_warnings: Vec<PrefixNote>,
    /// Other warnings: knowledge blocks found to be this router itself
    /// (at an address that did not say so).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// A partition's prefix that no DSA of it holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PrefixNote {
    pub partition: String,
    /// The likely prefix (LDAP form), when one is near.
    pub suggestion: Option<String>,
    /// The whole warning, as logged.
    pub message: String,
}

impl From<crate::backend::contexts::PrefixWarning> for PrefixNote {
    fn from(w: crate::backend::contexts::PrefixWarning) -> PrefixNote {
        PrefixNote {
            message: w.to_string(),
            partition: w.partition,
            suggestion: w.suggestion,
        }
    }
}

/// What client policies refused (`--policy`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PolicyCounts {
    /// Whether a policy file is in force.
    pub on: bool,
    /// Operations refused, by rule name.
    pub refusals: std::collections::BTreeMap<String, u64>,
    /// Operations answered busy for the file's rates, per client address
    /// and per identity (binds included).
    pub rate_limited_address: u64,
    pub rate_limited_identity: u64,
    /// The groups rules name (`member_of`), as last read.
    #[serde(default)]
    pub groups: Vec<GroupStatus>,
}

/// One group of `member_of`, as last read.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct GroupStatus {
    pub group: String,
    /// Its members (`None`: unreadable: never read, or its last good
    /// read is too old).
    pub members: Option<usize>,
    /// Seconds since its last good read.
    pub read_age_seconds: Option<f64>,
    /// The DSA it was last read from.
    pub dsa: Option<String>,
    /// Why the last read failed.
    pub error: Option<String>,
}

impl PolicyCounts {
    fn of(router: &Context) -> PolicyCounts {
        let p = &router.admission.policies;
        let (address, identity) = p.rate_refusals();
        PolicyCounts {
            on: p.is_on(),
            refusals: p.refusals(),
            rate_limited_address: address,
            rate_limited_identity: identity,
            groups: groups(p),
        }
    }
}

fn groups(p: &crate::admission::policy::Policies) -> Vec<GroupStatus> {
    let sets = p.groups.sets();
    let mut out: Vec<GroupStatus> = sets
        .values()
        .map(|g| GroupStatus {
            group: g.name.clone(),
            members: g.members.as_ref().map(|m| m.len()),
            read_age_seconds: g
                .read_at
                .and_then(|t| t.elapsed().ok())
                .map(|d| d.as_secs_f64()),
            dsa: g.dsa.clone(),
            error: g.error.clone(),
        })
        .collect();
    out.sort_by(|a, b| a.group.cmp(&b.group));
    out
}

/// Router CPU and memory: windowed averages and thresholds (0 = off).
#[derive(Debug, Serialize, Deserialize)]
pub struct Utilization {
    pub cpu_avg_percent: f64,
    pub memory_avg_percent: f64,
    pub cpu_threshold_percent: u8,
    pub memory_threshold_percent: u8,
    pub window_seconds: f64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ReloadInfo {
    pub ok: bool,
    pub at_unix: u64,
    pub message: String,
}

impl From<ReloadOutcome> for ReloadInfo {
    fn from(r: ReloadOutcome) -> Self {
        ReloadInfo {
            ok: r.ok,
            at_unix: r.at_unix,
            message: r.message,
        }
    }
}

pub fn status(router: &Context) -> Status {
    let r = router.routing();
    let hold = router
        .cfg
        .health
        .as_ref()
        .map_or(std::time::Duration::ZERO, |h| h.failback_hold);
    let partitions = r
        .table
        .partitions_sorted()
        .into_iter()
        .map(|p| PartitionStatus {
            prefix: p.prefix.to_string(),
            slot: p.hash.as_ref().map(|h| h.slot),
            dsas: p
                .order
                .iter()
                .map(|&i| {
                    let st = &r.states.0[i];
                    let t = st.health_track();
                    let replication = crate::backend::follow::report::of(
                        &router.backend,
                        &p.key,
                        &r.snap.dsas[i].name,
                    );
                    let lagging = replication
                        .as_ref()
                        .and_then(|x| x.out.clone())
                        .filter(|_| st.status().eligible());
                    DsaReport {
                        name: r.snap.dsas[i].name.to_string(),
                        group: p.group_of(i).and_then(|g| g.name.clone()),
                        state: if lagging.is_some() {
                            "lagging"
                        } else {
                            st.status().as_str()
                        }
                        .to_string(),
                        health: if st.is_up() { "up" } else { "down" }.to_string(),
                        reason: reason(st, &t, lagging.as_deref()),
                        in_flight: st.in_flight(),
                        own_connections: st.own_conns.load(std::sync::atomic::Ordering::Relaxed),
                        spare_connections: st
                            .spare_conns
                            .load(std::sync::atomic::Ordering::Relaxed),
                        persistent_searches: st
                            .persistent
                            .load(std::sync::atomic::Ordering::Relaxed),
                        served: st.served.load(std::sync::atomic::Ordering::Relaxed),
                        errors: st.errors.load(std::sync::atomic::Ordering::Relaxed),
                        out_of_scope_entries: st.out_of_scope.count(),
                        last_change_unix: t
                            .since
                            .duration_since(UNIX_EPOCH)
                            .map(|d| d.as_secs())
                            .unwrap_or(0),
                        probe_latency_ms: t.probe_latency.map(|d| d.as_secs_f64() * 1000.0),
                        failback_in_s: st.failback_left(hold).map(|d| d.as_secs_f64()),
                        ejected: st.ejection(),
                        bind_ejected: st.bind_ejection(),
                        latency_ms: st.reads.recent_mean().map(|d| d.as_secs_f64() * 1000.0),
                        addresses: r.pools[i].addrs.clone(),
                        replication,
                    }
                })
                .collect(),
        })
        .collect();
    Status {
        router: router.name.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        knowledge: r.snap.root.display().to_string(),
        partitions,
        last_reload: router
            .last_reload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(ReloadInfo::from),
        client_connections: router
            .backend
            .metrics
            .clients
            .load(std::sync::atomic::Ordering::Relaxed),
        utilization: Utilization::of(&router.admission.throttle),
        draining: router.lifecycle.drain.is_draining(),
        binds_refused: router.admission.failed_binds.refused(),
        binds_busy: router.admission.failed_binds.busy(),
        policy: PolicyCounts::of(router),
        clients: router.clients.list(crate::observe::clients::LISTED),
        prefix_warnings: crate::backend::contexts::of(&r)
            .into_iter()
            .map(PrefixNote::from)
            .collect(),
        warnings: itself(&r.states),
    }
}

/// Why a DSA is in its state, as `/status` says it.
fn reason(
    st: &crate::backend::dsa_state::DsaState,
    t: &crate::backend::dsa_state::Track,
    lagging: Option<&str>,
) -> String {
    match st.admin() {
        _ if st.is_itself() => t.reason.clone(),
        Admin::Enabled if lagging.is_some() => {
            format!(
                "serves no reads: {}; health: {}",
                lagging.unwrap_or_default(),
                t.reason
            )
        }
        Admin::Enabled => match (st.ejection(), st.bind_ejection()) {
            (Some(e), _) if st.is_up() => {
                format!("ejected as an outlier: {e}; health: {}", t.reason)
            }
            (_, Some(b)) if st.is_up() => {
                format!("{b}; health: {}", t.reason)
            }
            _ => t.reason.clone(),
        },
        Admin::Disabled => {
            format!("disabled by an administrator; health: {}", t.reason)
        }
        Admin::Draining => {
            format!("draining by an administrator; health: {}", t.reason)
        }
    }
}

/// The warnings for knowledge blocks found to be this router itself.
fn itself(states: &crate::backend::dsa_state::States) -> Vec<String> {
    states
        .0
        .iter()
        .filter(|st| st.is_itself())
        .map(|st| format!("knowledge block {} is this router itself (its root DSE carries this process's instance marker): taken as the router's own block, never a target; pass --name {} to say so", st.name, st.name))
        .collect()
}

impl Utilization {
    fn of(throttle: &crate::admission::limits::Throttle) -> Utilization {
        let (cpu, mem) = throttle.averages();
        let t = throttle.thresholds();
        Utilization {
            cpu_avg_percent: cpu,
            memory_avg_percent: mem,
            cpu_threshold_percent: t.cpu,
            memory_threshold_percent: t.memory,
            window_seconds: throttle.window().as_secs_f64(),
        }
    }
}
