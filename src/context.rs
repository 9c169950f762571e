//! The application context ([`Context`]), shared by every task: the
//! configuration, metrics, the throttle, the current routing snapshot
//! (knowledge + table + per-DSA state + pools, swapped whole on reload,
//! with the diff logged), and the per-DSA state registry that outlives
//! snapshots.

pub use crate::config::{Config, OwnConnection, DEFAULT_DSA_CONCURRENCY_LIMIT};
use crate::dsa_state::{Registry, States};
use crate::error::{Error, Result};
use crate::knowledge::Snapshot;
use crate::route::Table;
use crate::upstream::pool::Pool;
use arc_swap::ArcSwap;
use std::sync::Arc;

/// Everything routing needs for one knowledge snapshot, indexed alike.
pub struct Routing {
    pub snap: Snapshot,
    pub table: Table,
    pub states: States,
    pub pools: Vec<Arc<Pool>>,
}

pub struct Context {
    pub cfg: Config,
    pub throttle: Arc<crate::limits::Throttle>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub name: Option<String>,
    pub registry: Registry,
    routing: ArcSwap<Routing>,
    /// Client-facing TLS, when configured.
    pub tls: Option<crate::tls::ServerTls>,
    /// The roots DSA certificates are verified against.
    dsa_ca: arc_swap::ArcSwapOption<crate::tls::DsaCa>,
    /// The outcome of the last reload, for `/status`.
    pub last_reload: std::sync::Mutex<Option<ReloadOutcome>>,
    /// Read-your-writes affinity of bound identities (`--affinity-scope
    /// identity`): (DN, partition) to the DSA that took the last write
    /// and when.
    pub affinity: dashmap::DashMap<(String, String), crate::replication::mark::Affinity>,
    /// Replication positions of the DSAs (spec 10).
    pub replication: Arc<crate::replication::Replication>,
    /// Failed binds per DN and client address (`--failed-bind-limit`).
    pub failed_binds: Arc<crate::guard::Guard>,
    /// Client policies and rates (`--policy`), swapped on reload.
    pub policies: crate::policy::Policies,
    /// Bytes held by clients' large incomplete requests (see
    /// `--max-request-memory`).
    pub request_memory: std::sync::atomic::AtomicUsize,
    /// Responses queued for all clients (see `--max-response-memory`).
    pub(crate) response_memory: Arc<crate::outbox::Budget>,
    /// The worker threads, when the accept loop has them (for `/metrics`).
    pub workers: std::sync::OnceLock<Arc<crate::workers::Shared>>,
    /// Graceful drain: whether one runs, `ctl shutdown`'s request.
    pub drain: crate::drain::Drain,
    /// Hot upgrade: `ctl upgrade`'s request, where sessions leave to.
    pub handover: crate::handover::Handover,
    /// The client sessions `/status` lists.
    pub clients: Arc<crate::clients::Clients>,
}

/// What the last reload did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReloadOutcome {
    pub ok: bool,
    pub at_unix: u64,
    pub message: String,
}

impl Context {
    pub fn new(cfg: Config, snap: Snapshot, name: Option<String>) -> Result<Context> {
        let registry = Registry::default();
        let replication = Arc::new(crate::replication::Replication::new(cfg.replication));
        let tls = cfg
            .tls
            .clone()
            .map(crate::tls::ServerTls::new)
            .transpose()?;
        let dsa_ca = cfg
            .dsa_ca
            .as_deref()
            .map(crate::tls::DsaCa::load)
            .transpose()?
            .map(Arc::new);
        let routing = build(
            &cfg,
            &registry,
            snap,
            name.as_deref(),
            None,
            dsa_ca.as_deref(),
        )?;
        let throttle = Arc::new(crate::limits::Throttle::new(
            thresholds(&cfg, &routing.snap)?,
            cfg.utilization_window,
        ));
        let response_memory = Arc::new(crate::outbox::Budget::new(cfg.max_response_memory));
        let cfg_failed_binds = cfg.failed_binds;
        let policies = crate::policy::Policies::new(cfg.policy.clone()).map_err(Error::config)?;
        Ok(Context {
            throttle,
            cfg,
            metrics: Arc::default(),
            name,
            registry,
            routing: ArcSwap::from_pointee(routing),
            tls,
            dsa_ca: arc_swap::ArcSwapOption::new(dsa_ca),
            last_reload: std::sync::Mutex::new(None),
            affinity: dashmap::DashMap::new(),
            replication,
            failed_binds: Arc::new(crate::guard::Guard::new(cfg_failed_binds)),
            policies,
            request_memory: std::sync::atomic::AtomicUsize::new(0),
            response_memory,
            workers: std::sync::OnceLock::new(),
            drain: crate::drain::Drain::default(),
            handover: crate::handover::Handover::default(),
            clients: Arc::default(),
        })
    }

    /// Bytes of responses queued for clients now (see
    /// `--max-response-memory`).
    pub fn queued_response_bytes(&self) -> usize {
        self.response_memory.used()
    }

    /// Clients disconnected because of `--max-response-memory`.
    pub fn response_memory_disconnects(&self) -> u64 {
        self.response_memory.refused()
    }

    /// The current snapshot.
    pub fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// Validate and swap in new knowledge; operations in flight keep the
    /// snapshot they started with.
    pub fn reload(&self, snap: Snapshot) -> Result<String> {
        let dsa_ca = self.dsa_ca.load_full();
        self.reload_with(snap, dsa_ca.as_deref())
    }

    fn reload_with(&self, snap: Snapshot, dsa_ca: Option<&crate::tls::DsaCa>) -> Result<String> {
        let old = self.routing();
        let new = build(
            &self.cfg,
            &self.registry,
            snap,
            self.name.as_deref(),
            Some(&old),
            dsa_ca,
        )?;
        let names =
            |r: &Routing| -> Vec<String> { r.snap.dsas.iter().map(|d| d.name.clone()).collect() };
        let (before, after) = (names(&old), names(&new));
        let added: Vec<&String> = after
            .iter()
            .filter(|n| !before.iter().any(|b| b.eq_ignore_ascii_case(n)))
            .collect();
        let removed: Vec<&String> = before
            .iter()
            .filter(|n| !after.iter().any(|a| a.eq_ignore_ascii_case(n)))
            .collect();
        for n in &added {
            tracing::info!(dsa = %n, "reload: DSA added");
        }
        for n in &removed {
            tracing::info!(dsa = %n, "reload: DSA removed; draining its connections");
        }
        // Pools no longer used (removed or readdressed DSAs) finish their
        // in-flight work, then close.
        for p in &old.pools {
            if !new.pools.iter().any(|q| Arc::ptr_eq(p, q)) {
                let p = p.clone();
                let grace = self.cfg.op_timeout;
                tokio::spawn(async move { p.close_when_idle(grace).await });
            }
        }
        let join = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        let summary = format!(
            "knowledge reloaded: {} DSA(s), {} partition(s); added [{}], removed [{}]",
            new.snap.dsas.len(),
            new.table.partitions().len(),
            join(&added),
            join(&removed)
        );
        self.throttle
            .set_thresholds(thresholds(&self.cfg, &new.snap)?);
        self.routing.store(Arc::new(new));
        Ok(summary)
    }

    /// Reload from the current snapshot's root file, and re-read the TLS
    /// files; all or nothing (a bad certificate keeps the old knowledge and
    /// certificates alike). Records the outcome.
    pub fn reload_from_disk(&self) -> Result<String> {
        let root = self.routing().snap.root.clone();
        let result = self.reload_all(&root);
        let at_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let (ok, message) = match &result {
            Ok(m) => {
                self.metrics
                    .reloads_ok
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!("{m}");
                (true, m.clone())
            }
            Err(e) => {
                self.metrics
                    .reloads_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!("reload rejected; keeping the old knowledge:\n{e}");
                (false, e.to_string())
            }
        };
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(ReloadOutcome {
            ok,
            at_unix,
            message,
        });
        result
    }
}

impl Context {
    fn reload_all(&self, root: &std::path::Path) -> Result<String> {
        let server_tls = match &self.tls {
            Some(t) => Some(t.reread().map_err(|e| Error::config(format!("TLS: {e}")))?),
            None => None,
        };
        let old_ca = self.dsa_ca.load_full();
        let new_ca = match &old_ca {
            Some(ca) => ca
                .reread()
                .map_err(|e| Error::config(format!("TLS: {e}")))?
                .map(Arc::new),
            None => None,
        };
        let snap = crate::knowledge::load(root)?;
        // The policy file too: all or nothing with the knowledge.
        let policy = self.policies.read().map_err(Error::config)?;
        let ca = new_ca.clone().or(old_ca);
        let mut summary = self.reload_with(snap, ca.as_deref())?;
        if let Some(p) = self.policies.store(policy) {
            summary += "; ";
            summary += &p;
        }
        if let Some(ca) = new_ca {
            self.dsa_ca.store(Some(ca));
            summary += "; DSA CA certificates re-read";
        }
        if let (Some(t), Some(cfg)) = (&self.tls, server_tls) {
            t.set(cfg);
            summary += "; TLS certificate and key re-read";
        }
        Ok(summary)
    }
}

fn build(
    cfg: &Config,
    registry: &Registry,
    snap: Snapshot,
    name: Option<&str>,
    old: Option<&Routing>,
    dsa_ca: Option<&crate::tls::DsaCa>,
) -> Result<Routing> {
    let table = Table::build(&snap, name)?;
    let states = registry.resolve(&snap);
    for (d, st) in snap.dsas.iter().zip(states.0.iter()) {
        let limit = d
            .concurrency_limit
            .or(snap.settings.concurrency_limit)
            .unwrap_or(cfg.dsa_concurrency_limit);
        st.set_limit((limit > 0).then_some(limit));
        let proxy = cfg
            .send_proxy_to
            .iter()
            .any(|n| n.eq_ignore_ascii_case(&d.name));
        st.send_proxy
            .store(proxy, std::sync::atomic::Ordering::Relaxed);
    }
    for n in &cfg.send_proxy_to {
        if snap.dsa_index(n).is_none() && !snap.dsas.iter().any(|d| d.name.eq_ignore_ascii_case(n))
        {
            tracing::warn!(dsa = %crate::logsafe::esc(n), "--send-proxy-to names a DSA the knowledge does not hold");
        }
    }
    let pools = snap
        .dsas
        .iter()
        .zip(states.0.iter())
        .map(|(d, st)| {
            let is_router = name.is_some_and(|n| n.eq_ignore_ascii_case(&d.name));
            let tls = match (d.tls_mode(), dsa_ca) {
                (None, _) => None,
                (Some(_), _) if is_router => None,
                (Some(mode), Some(ca)) => Some(crate::tls::DsaTls {
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
            let addrs = crate::upstream::pool::targets(d);
            // Keep a pool (and its connections) when the DSA is unchanged.
            let reuse = old.and_then(|o| {
                o.snap
                    .dsa_index(&d.name)
                    .and_then(|i| o.pools.get(i))
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
            Ok(reuse.unwrap_or_else(|| Arc::new(Pool::new(st.clone(), d, cfg.limits(), tls, cfg.workers))))
        })
        .collect::<Result<_>>()?;
    Ok(Routing {
        snap,
        table,
        states,
        pools,
    })
}

/// The thresholds in force: knowledge's `set dsa-router-...-threshold`
/// over the command line.
fn thresholds(cfg: &Config, snap: &Snapshot) -> Result<crate::limits::Thresholds> {
    crate::limits::Thresholds::validate(
        snap.settings
            .cpu_threshold
            .unwrap_or(cfg.thresholds.cpu as u32),
        snap.settings
            .memory_threshold
            .unwrap_or(cfg.thresholds.memory as u32),
    )
}

fn same_identity(a: &crate::knowledge::DsaDef, b: &crate::knowledge::DsaDef) -> bool {
    a.ldap_dsa_name == b.ldap_dsa_name
        && a.ldap_dsa_password == b.ldap_dsa_password
        && a.trust_flags == b.trust_flags
}
