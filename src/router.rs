//! The router's shared state: configuration, the current routing snapshot
//! (knowledge + table + per-DSA state + pools, swapped whole), and the
//! per-DSA state registry that outlives snapshots.

use crate::knowledge::Snapshot;
use crate::route::Table;
use crate::state::{Registry, States};
use crate::upstream::pool::{Limits, Pool};
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::Duration;

/// Run-time settings of `serve`; every limit has a sane default.
#[derive(Debug, Clone)]
pub struct Config {
    /// Maximum client connections at once.
    pub max_clients: usize,
    /// Largest request PDU accepted from a client.
    pub max_request_pdu: usize,
    /// Largest response PDU accepted from a DSA.
    pub max_response_pdu: usize,
    /// Outstanding operations per client connection (`busy` beyond).
    pub max_outstanding: usize,
    /// Response PDUs queued for one client before it counts as stalled.
    pub client_queue: usize,
    /// Close a client connection idle this long (zero: never).
    pub idle_timeout: Duration,
    /// Close a client that leaves a PDU incomplete this long.
    pub pdu_timeout: Duration,
    pub connect_timeout: Duration,
    /// Per-operation timeout towards DSAs.
    pub op_timeout: Duration,
    /// How long shutdown waits for in-flight operations.
    pub shutdown_grace: Duration,
    pub access_log: bool,
    /// Active health probes; `None` turns them off.
    pub health: Option<crate::health::HealthConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_clients: 10_000,
            max_request_pdu: 4 << 20,
            max_response_pdu: 16 << 20,
            max_outstanding: 256,
            client_queue: 1024,
            idle_timeout: Duration::from_secs(900),
            pdu_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            op_timeout: Duration::from_secs(120),
            shutdown_grace: Duration::from_secs(10),
            access_log: true,
            health: Some(crate::health::HealthConfig::default()),
        }
    }
}

impl Config {
    pub fn limits(&self) -> Limits {
        Limits {
            connect_timeout: self.connect_timeout,
            op_timeout: self.op_timeout,
            max_response_pdu: self.max_response_pdu,
            fall: self.health.as_ref().map(|h| h.fall).unwrap_or(3),
        }
    }
}

/// Everything routing needs for one knowledge snapshot, indexed alike.
pub struct Routing {
    pub snap: Snapshot,
    pub table: Table,
    pub states: States,
    pub pools: Vec<Arc<Pool>>,
}

pub struct Router {
    pub cfg: Config,
    pub name: Option<String>,
    pub registry: Registry,
    routing: ArcSwap<Routing>,
}

impl Router {
    pub fn new(cfg: Config, snap: Snapshot, name: Option<String>) -> Result<Router, String> {
        let registry = Registry::default();
        let routing = build(&cfg, &registry, snap, name.as_deref(), None)?;
        Ok(Router {
            cfg,
            name,
            registry,
            routing: ArcSwap::from_pointee(routing),
        })
    }

    /// The current snapshot.
    pub fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// Validate and swap in new knowledge; operations in flight keep the
    /// snapshot they started with.
    pub fn reload(&self, snap: Snapshot) -> Result<(), String> {
        let old = self.routing();
        let new = build(
            &self.cfg,
            &self.registry,
            snap,
            self.name.as_deref(),
            Some(&old),
        )?;
        self.routing.store(Arc::new(new));
        Ok(())
    }
}

fn build(
    cfg: &Config,
    registry: &Registry,
    snap: Snapshot,
    name: Option<&str>,
    old: Option<&Routing>,
) -> Result<Routing, String> {
    let table = Table::build(&snap, name)?;
    let states = registry.resolve(&snap);
    let pools = snap
        .dsas
        .iter()
        .zip(states.0.iter())
        .map(|(d, st)| {
            let addrs = crate::upstream::pool::socket_addrs(d);
            // Keep a pool (and its connections) when the DSA is unchanged.
            let reuse = old.and_then(|o| {
                o.snap
                    .dsa_index(&d.name)
                    .and_then(|i| o.pools.get(i))
                    .filter(|p| {
                        p.addrs == addrs
                            && o.snap
                                .dsas
                                .iter()
                                .any(|od| od.name == d.name && same_identity(od, d))
                    })
                    .cloned()
            });
            reuse.unwrap_or_else(|| Arc::new(Pool::new(st.clone(), d, cfg.limits())))
        })
        .collect();
    Ok(Routing {
        snap,
        table,
        states,
        pools,
    })
}

fn same_identity(a: &crate::knowledge::DsaDef, b: &crate::knowledge::DsaDef) -> bool {
    a.ldap_dsa_name == b.ldap_dsa_name
        && a.ldap_dsa_password == b.ldap_dsa_password
        && a.trust_flags == b.trust_flags
}
