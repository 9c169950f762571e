//! The application context ([`Context`]), shared by every task: the
//! configuration, metrics, the throttle, the current routing snapshot
//! (knowledge + table + per-DSA state + pools, swapped whole on reload,
//! with the diff logged), and the per-DSA state registry that outlives
//! snapshots.

pub use crate::backend::routing::Routing;
use crate::backend::routing::{Backend, Shared};
use crate::base::error::{Error, Result};
use crate::directory::knowledge::Snapshot;
pub use crate::service::config::{Config, OwnConnection, DEFAULT_DSA_CONCURRENCY_LIMIT};
use std::sync::Arc;

/// Everything routing needs for one knowledge snapshot, indexed alike.
pub struct Context {
    pub cfg: Config,
    /// Whether an operation may go on: throttle, failed binds, policies,
    /// memory budgets.
    pub admission: crate::admission::Admission,
    pub name: Option<String>,
    /// The DSAs: the routing snapshot, their state, the tasks' shared
    /// data.
    pub backend: Arc<Backend>,
    /// Client-facing TLS, when configured.
    pub tls: Option<crate::proto::tls::ServerTls>,
    /// The outcome of the last reload, for `/status`.
    pub last_reload: std::sync::Mutex<Option<ReloadOutcome>>,
    /// Read-your-writes affinity of bound identities (`--affinity-scope
    /// identity`): (DN, partition) to the DSA that took the last write
    /// and when.
    pub affinity: dashmap::DashMap<(String, String), crate::directory::replication::mark::Affinity>,
    /// The worker threads, when the accept loop has them (for `/metrics`).
    pub workers: std::sync::OnceLock<Arc<crate::base::workers::Shared>>,
    /// Drain and hot upgrade.
    pub lifecycle: crate::lifecycle::Lifecycle,
    /// The client sessions `/status` lists.
    pub clients: Arc<crate::observe::clients::Clients>,
    /// The settings file `serve --config` read, re-read on reload.
    pub settings_file: std::sync::OnceLock<Box<dyn crate::service::settings_file::SettingsFile>>,
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
        let replication = Arc::new(crate::directory::replication::Replication::new(
            cfg.replication,
        ));
        let tls = cfg
            .tls
            .clone()
            .map(crate::proto::tls::ServerTls::new)
            .transpose()?;
        let dsa_ca = cfg
            .dsa_ca
            .as_deref()
            .map(crate::proto::tls::DsaCa::load)
            .transpose()?
            .map(Arc::new);
        let policies = Arc::new(crate::admission::policy::Policies::new(cfg.policy.clone())?);
        let metrics: Arc<crate::observe::metrics::Metrics> = Arc::default();
        let shared = Shared {
            metrics,
            replication,
            policies: policies.clone(),
        };
        let backend = Backend::new(cfg.backend(name.clone()), snap, dsa_ca, shared)?;
        let live = backend.settings.live.load_full();
        knowledge_notices(&live, &backend.routing().snap);
        let throttle = Arc::new(crate::admission::limits::Throttle::new(
            thresholds(&live, &backend.routing().snap)?,
            cfg.utilization_window,
        ));
        let response_memory = Arc::new(crate::base::outbox::Budget::new(cfg.max_response_memory));
        let cfg_failed_binds = cfg.failed_binds;
        Ok(Context {
            admission: crate::admission::Admission {
                throttle,
                failed_binds: Arc::new(crate::admission::guard::Guard::new(cfg_failed_binds)),
                policies,
                request_memory: std::sync::atomic::AtomicUsize::new(0),
                response_memory,
            },
            cfg,
            name,
            backend: Arc::new(backend),
            tls,
            last_reload: std::sync::Mutex::new(None),
            affinity: dashmap::DashMap::new(),
            workers: std::sync::OnceLock::new(),
            lifecycle: crate::lifecycle::Lifecycle::default(),
            clients: Arc::default(),
            settings_file: std::sync::OnceLock::new(),
        })
    }

    /// Bytes of responses queued for clients now (see
    /// `--max-response-memory`).
    pub fn queued_response_bytes(&self) -> usize {
        self.admission.response_memory.used()
    }

    /// Clients disconnected because of `--max-response-memory`.
    pub fn response_memory_disconnects(&self) -> u64 {
        self.admission.response_memory.refused()
    }

    /// The current snapshot.
    pub fn routing(&self) -> Arc<Routing> {
        self.backend.routing()
    }

    /// Validate and swap in new knowledge; operations in flight keep the
    /// snapshot they started with.
    pub fn reload(&self, snap: Snapshot) -> Result<String> {
        let new = self
            .backend
            .prepare(snap, self.backend.dsa_ca().as_deref())?;
        self.swap(new, None)
    }

    /// Swap in a prepared routing (and the DSA CA it was built with, when
    /// re-read); the throttle follows the new knowledge's thresholds.
    fn swap(&self, new: Routing, ca: Option<Arc<crate::proto::tls::DsaCa>>) -> Result<String> {
        let live = self.backend.settings.live.load_full();
        let thresholds = thresholds(&live, &new.snap)?;
        knowledge_notices(&live, &new.snap);
        let s = self.backend.swap(new, ca);
        self.admission.throttle.set_thresholds(thresholds);
        Ok(format!(
            "knowledge reloaded: {} DSA(s), {} partition(s); added [{}], removed [{}]",
            s.dsas,
            s.partitions,
            join(&s.added),
            join(&s.removed)
        ))
    }

    /// Reload from the current snapshot's root file, and re-read the TLS
    /// files; all or nothing (a bad certificate keeps the old knowledge and
    /// certificates alike). Records the outcome. A reload that would take
    /// every DSA, or every DSA of a partition in use, away is refused
    /// ([`crate::backend::shrink`]).
    pub fn reload_from_disk(&self) -> Result<String> {
        self.reload_from_disk_forced(false)
    }

    /// [`Context::reload_from_disk`]; with `force`, also a reload that
    /// takes the DSAs away.
    pub fn reload_from_disk_forced(&self, force: bool) -> Result<String> {
        let root = self.routing().snap.root.clone();
        self.lifecycle.notify.reloading();
        let result = self.reload_all(&root, force);
        let at_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let (ok, message) = match &result {
            Ok(m) => {
                self.backend
                    .metrics
                    .reloads_ok
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!("{m}");
                (true, m.clone())
            }
            Err(e) => {
                self.backend
                    .metrics
                    .reloads_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!("reload rejected; keeping the old knowledge:\n{e}");
                (false, e.to_string())
            }
        };
        let status = if ok {
            "serving; the last reload succeeded"
        } else {
            "serving; the last reload was rejected (the log says why)"
        };
        self.lifecycle.notify.ready(status);
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(ReloadOutcome {
            ok,
            at_unix,
            message,
        });
        result
    }
}

impl Context {
    fn reload_all(&self, root: &std::path::Path, force: bool) -> Result<String> {
        let server_tls = match &self.tls {
            Some(t) => Some(t.reread().map_err(|e| Error::config(format!("TLS: {e}")))?),
            None => None,
        };
        let old_ca = self.backend.dsa_ca();
        let new_ca = match &old_ca {
            Some(ca) => ca
                .reread()
                .map_err(|e| Error::config(format!("TLS: {e}")))?
                .map(Arc::new),
            None => None,
        };
        let snap = crate::directory::knowledge::load(root)?;
        // The policy file too: all or nothing with the knowledge.
        let policy = self.admission.policies.read()?;
        let ca = new_ca.clone().or(old_ca);
        let (mut summary, reread) =
            self.swap_with_settings(snap, ca.as_deref(), new_ca.clone(), force)?;
        if let Some(p) = self.admission.policies.store(policy) {
            summary += "; ";
            summary += &p;
        }
        if new_ca.is_some() {
            summary += "; DSA CA certificates re-read";
        }
        if let (Some(t), Some(cfg)) = (&self.tls, server_tls) {
            t.set(cfg);
            summary += "; TLS certificate and key re-read";
        }
        if let Some(r) = reread {
            summary += "; settings file re-read";
            if !r.restart.is_empty() {
                summary += &format!(
                    "; changed in the settings file but in force only after a restart: {}",
                    r.restart.join(", ")
                );
            }
        }
        Ok(summary)
    }

    /// Re-read the settings file (when serve has one), and swap in the
    /// routing of `snap` built with its settings; all or nothing.
    fn swap_with_settings(
        &self,
        snap: Snapshot,
        ca: Option<&crate::proto::tls::DsaCa>,
        new_ca: Option<Arc<crate::proto::tls::DsaCa>>,
        force: bool,
    ) -> Result<(String, Option<crate::service::settings_file::Reread>)> {
        let reread = self.settings_file.get().map(|f| f.reread()).transpose()?;
        let live = &self.backend.settings.live;
        let old = live.load_full();
        if let Some(r) = &reread {
            live.store(Arc::new(r.live.clone()));
        }
        let swapped = self.backend.prepare(snap, ca).and_then(|new| {
            if !force {
                self.refuse_shrink(&new)?;
            }
            self.swap(new, new_ca)
        });
        match swapped {
            Ok(summary) => Ok((summary, reread)),
            Err(e) => {
                live.store(old);
                Err(e)
            }
        }
    }
}

impl Context {
    /// Refuse knowledge `new` when it would take every DSA away, or every
    /// DSA of a partition that clients use (`ctl reload --force` takes it
    /// anyway).
    fn refuse_shrink(&self, new: &crate::backend::routing::Routing) -> Result<()> {
        let old = self.routing();
        let in_use = |i: crate::directory::knowledge::DsaId| {
            old.states.0.get(i.index()).is_some_and(|s| {
                s.served.load(std::sync::atomic::Ordering::Relaxed) > 0 || s.in_flight() > 0
            })
        };
        let shrink =
            crate::backend::shrink::check((&old.snap, &old.table), (&new.snap, &new.table), in_use);
        match shrink {
            Some(why) => Err(Error::config(why.to_string())),
            None => Ok(()),
        }
    }
}

/// The thresholds in force: knowledge's `set dsa-router-...-threshold`
/// over the defaults, the settings file and command line over both.
fn thresholds(
    live: &crate::backend::settings::Live,
    snap: &Snapshot,
) -> Result<crate::admission::limits::Thresholds> {
    let (cpu, memory) = live.thresholds(&snap.settings);
    crate::admission::limits::Thresholds::validate(cpu, memory)
}

/// Log what knowledge's `set dsa-router-*` lines do: in force, or
/// overridden by the settings file or the command line.
fn knowledge_notices(live: &crate::backend::settings::Live, snap: &Snapshot) {
    for n in crate::backend::settings::knowledge_notices(&snap.settings, &live.pinned) {
        tracing::info!("{n}");
    }
}

fn join(names: &[crate::directory::knowledge::DsaName]) -> String {
    names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
