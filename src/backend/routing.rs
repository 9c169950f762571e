//! The DSAs as the rest of the router sees them ([`Backend`]): the
//! current [`Routing`] (knowledge, table, per-DSA state and pools, swapped
//! whole on reload), the per-DSA state registry that outlives snapshots,
//! and what the background tasks share (replication positions, the
//! policies whose groups and schemas they read, the counters).

use super::dsa_state::{Registry, States};
use super::settings::Settings;
use super::upstream::pool::Pool;
use crate::admission::policy::Policies;
use crate::base::error::{Error, Result};
use crate::directory::knowledge::{DsaDef, DsaName, Snapshot};
use crate::directory::replication::Replication;
use crate::directory::route::Table;
use crate::observe::metrics::Metrics;
use crate::proto::tls::DsaCa;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::sync::Arc;

/// Everything routing needs for one knowledge snapshot, indexed alike.
pub struct Routing {
    pub snap: Snapshot,
    pub table: Table,
    pub states: States,
    pub pools: Vec<Arc<Pool>>,
}

/// The DSAs and what the tasks that watch them share.
pub struct Backend {
    pub settings: Settings,
    /// The router's own DSA name in the knowledge (`settings.name`).
    name: Option<String>,
    pub registry: Registry,
    routing: ArcSwap<Routing>,
    /// The roots DSA certificates are verified against.
    dsa_ca: ArcSwapOption<DsaCa>,
    pub metrics: Arc<Metrics>,
    /// Replication positions of the DSAs.
    pub replication: Arc<Replication>,
    /// Client policies: the health probes read the DSAs' schemas for the
    /// attributes they hide, the membership task the groups they name.
    pub policies: Arc<Policies>,
}

/// What the backend shares with the rest of the router.
pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub replication: Arc<Replication>,
    pub policies: Arc<Policies>,
}

/// What a swap of knowledge changed.
pub struct Swapped {
    pub added: Vec<DsaName>,
    pub removed: Vec<DsaName>,
    pub dsas: usize,
    pub partitions: usize,
}

impl Backend {
    pub fn new(
        settings: Settings,
        snap: Snapshot,
        dsa_ca: Option<Arc<DsaCa>>,
        shared: Shared,
    ) -> Result<Backend> {
        let registry = Registry::default();
        let name = settings.name.clone();
        let routing = build(
            &settings,
            &registry,
            snap,
            name.as_deref(),
            None,
            dsa_ca.as_deref(),
        )?;
        Ok(Backend {
            settings,
            name,
            registry,
            routing: ArcSwap::from_pointee(routing),
            dsa_ca: ArcSwapOption::new(dsa_ca),
            metrics: shared.metrics,
            replication: shared.replication,
            policies: shared.policies,
        })
    }

    /// The current snapshot.
    pub fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// The DSA CA certificates in use.
    pub fn dsa_ca(&self) -> Option<Arc<DsaCa>> {
        self.dsa_ca.load_full()
    }

    /// Build the routing of `snap` (pools of unchanged DSAs kept) without
    /// swapping it in yet.
    pub fn prepare(&self, snap: Snapshot, dsa_ca: Option<&DsaCa>) -> Result<Routing> {
        let old = self.routing();
        build(
            &self.settings,
            &self.registry,
            snap,
            self.name.as_deref(),
            Some(&old),
            dsa_ca,
        )
    }

    /// Swap in `new` (and the CA certificates it was built with, when
    /// they were re-read); pools no longer used (removed or readdressed
    /// DSAs) finish their in-flight work, then close.
    pub fn swap(&self, new: Routing, ca: Option<Arc<DsaCa>>) -> Swapped {
        let old = self.routing();
        let names =
            |r: &Routing| -> Vec<DsaName> { r.snap.dsas.iter().map(|d| d.name.clone()).collect() };
        let (before, after) = (names(&old), names(&new));
        let added: Vec<DsaName> = after
            .iter()
            .filter(|n| !before.contains(n))
            .cloned()
            .collect();
        let removed: Vec<DsaName> = before
            .iter()
            .filter(|n| !after.contains(n))
            .cloned()
            .collect();
        for n in &added {
            tracing::info!(dsa = %n, "reload: DSA added");
        }
        for n in &removed {
            tracing::info!(dsa = %n, "reload: DSA removed; draining its connections");
        }
        for p in &old.pools {
            if !new.pools.iter().any(|q| Arc::ptr_eq(p, q)) {
                let p = p.clone();
                let grace = self.settings.limits.op_timeout;
                tokio::spawn(async move { p.close_when_idle(grace).await });
            }
        }
        let swapped = Swapped {
            added,
            removed,
            dsas: new.snap.dsas.len(),
            partitions: new.table.partitions().len(),
        };
        self.routing.store(Arc::new(new));
        if let Some(ca) = ca {
            self.dsa_ca.store(Some(ca));
        }
        swapped
    }
}

fn build(
    settings: &Settings,
    registry: &Registry,
    snap: Snapshot,
    name: Option<&str>,
    old: Option<&Routing>,
    dsa_ca: Option<&DsaCa>,
) -> Result<Routing> {
    let table = Table::build(&snap, name)?;
    let states = registry.resolve(&snap);
    for (d, st) in snap.dsas.iter().zip(states.0.iter()) {
        let limit = d
            .concurrency_limit
            .or(snap.settings.concurrency_limit)
            .unwrap_or(settings.dsa_concurrency_limit);
        st.set_limit((limit > 0).then_some(limit));
        let proxy = settings.send_proxy_to.iter().any(|n| d.name.is(n));
        st.send_proxy
            .store(proxy, std::sync::atomic::Ordering::Relaxed);
    }
    for n in &settings.send_proxy_to {
        if snap.dsa_index(n).is_none() && !snap.dsas.iter().any(|d| d.name.is(n)) {
            tracing::warn!(dsa = %crate::base::logsafe::esc(n), "--send-proxy-to names a DSA the knowledge does not hold");
        }
    }
    let pools = snap
        .dsas
        .iter()
        .zip(states.0.iter())
        .map(|(d, st)| pool_of(settings, d, st, name, old, dsa_ca))
        .collect::<Result<_>>()?;
    Ok(Routing {
        snap,
        table,
        states,
        pools,
    })
}

/// DSA `d`'s pool: its old one when the DSA is unchanged.
fn pool_of(
    settings: &Settings,
    d: &DsaDef,
    st: &Arc<super::dsa_state::DsaState>,
    name: Option<&str>,
    old: Option<&Routing>,
    dsa_ca: Option<&DsaCa>,
) -> Result<Arc<Pool>> {
    let is_router = name.is_some_and(|n| d.name.is(n));
    let tls = match (d.tls_mode(), dsa_ca) {
        (None, _) => None,
        (Some(_), _) if is_router => None,
        (Some(mode), Some(ca)) => Some(crate::proto::tls::DsaTls {
            mode,
            config: ca.config.clone(),
        }),
        (Some(_), None) => {
            return Err(Error::config(format!(
                "DSA {} is to be reached over TLS (link-flags ssl-encryption or dsa-router-tls), but no --dsa-ca file is given to verify its certificate",
                d.name
            )))
        }
    };
    let addrs = super::upstream::pool::targets(d);
    let reuse = old.and_then(|o| {
        o.snap
            .dsa_index(&d.name)
            .and_then(|i| o.pools.get(i.index()))
            .filter(|p| {
                p.targets == addrs
                    && p.tls == tls
                    && o.snap
                        .dsas
                        .iter()
                        .any(|od| od.name == d.name && same_identity(od, d))
            })
            .cloned()
    });
    Ok(reuse.unwrap_or_else(|| {
        Arc::new(Pool::new(
            st.clone(),
            d,
            settings.limits,
            tls,
            settings.workers,
        ))
    }))
}

fn same_identity(a: &DsaDef, b: &DsaDef) -> bool {
    a.ldap_dsa_name == b.ldap_dsa_name
        && a.ldap_dsa_password == b.ldap_dsa_password
        && a.trust_flags == b.trust_flags
}
