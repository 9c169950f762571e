//! Per-DSA run-time state: health, administrative state, in-flight count.
//!
//! State lives beside the knowledge snapshot, keyed by DSA name, so it
//! survives a reload: a new snapshot resolves its DSAs to the same
//! [`DsaState`] objects by name. *Healthy* and *administratively enabled*
//! are separate facts; selection sees them combined as a [`DsaStatus`].
//! In-flight counts are RAII guards: dropping the guard decrements, so an
//! operation cannot leak a count on any exit path.
//!
//! By job: this file holds the state, the administrative state and the
//! counting (in-flight, held things, the registry); `health` the probes'
//! view (rise, fall, failback hold-down); `reads` the read latencies the
//! tail-latency task takes; `ejection` why it is out of selection for a
//! while (an outlier for reads, a DSA whose binds time out for binds);
//! `bind_deadline` how long its binds are waited for, learned from their
//! times;
//! `advertised` what its root DSE says.

mod advertised;
pub(crate) mod bind_deadline;
mod ejection;
mod health;
mod reads;
pub(crate) mod scope;

pub(crate) use advertised::Advertised;
pub(crate) use health::Track;
#[cfg(test)]
pub(crate) use reads::latency_bucket;
pub(crate) use reads::ReadStats;
pub(crate) use reads::{bucket_upper_us, LATENCY_BUCKETS};

use crate::directory::knowledge::{DsaName, Snapshot};
use crate::directory::route::{DsaId, DsaStatus, DsaView};
use dashmap::DashMap;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Administrative state set by an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    Enabled = 0,
    Disabled = 1,
    Draining = 2,
}

/// One DSA's run-time state.
#[derive(Debug)]
pub struct DsaState {
    pub name: DsaName,
    health: AtomicU8,
    admin: AtomicU8,
    in_flight: AtomicU32,
    /// Concurrency limit; 0 means none.
    limit: AtomicU32,
    pub served: AtomicU64,
    pub errors: AtomicU64,
    /// Connections of clients' own open to it (stateful clients).
    pub own_conns: AtomicI64,
    /// Spare connections: clients' own ones kept for later binds
    /// (`upstream::spare`).
    pub spare_conns: AtomicI64,
    /// Persistent searches (sync refreshAndPersist) running on it.
    pub persistent: AtomicI64,
    /// Entries it returned outside their searches' scope.
    pub out_of_scope: scope::OutOfScope,
    /// Bumped each time the DSA goes down; connections watch it to re-send
    /// the reads waiting on a DSA that stopped answering.
    down_epoch: AtomicU64,
    pub down_signal: tokio::sync::Notify,
    track: Mutex<Track>,
    /// Latency of its reads, gathered by the tail-latency task.
    pub reads: ReadStats,
    /// Latency of the operations it answered, and of its successful
    /// health probes (`/metrics`).
    pub latency: crate::observe::histogram::Histogram,
    pub probe_latency: crate::observe::histogram::Histogram,
    /// Taken out of selection as an outlier (see `tail`), and why.
    ejected: std::sync::atomic::AtomicBool,
    ejection: Mutex<Option<String>>,
    /// Whether its replication position lets it serve reads.
    pub replication: crate::directory::replication::Gate,
    /// Taken out of selection for binds (its binds time out), and why.
    bind_out: std::sync::atomic::AtomicBool,
    binds: Mutex<ejection::BindEjection>,
    /// What its binds took lately: their deadline (`bind_deadline`).
    pub(crate) bind_times: bind_deadline::BindTimes,
    /// What its root DSE advertised, and when it was read.
    advertised: Mutex<Option<(std::time::Instant, Arc<Advertised>)>>,
    /// Each connection to it starts with a PROXY protocol v2 header
    /// (`--send-proxy-to`): [`crate::proto::proxy_protocol::send`].
    pub send_proxy: std::sync::atomic::AtomicBool,
    /// It turned out to be this router itself ([`DsaState::found_itself`]):
    /// out of selection, not probed again.
    itself: std::sync::atomic::AtomicBool,
}

/// One thing held on a DSA, counted while it lives (a persistent search,
/// a client's own connection): dropping it uncounts it.
pub struct Count {
    st: Arc<DsaState>,
    field: fn(&DsaState) -> &AtomicI64,
}

impl Count {
    pub fn new(st: &Arc<DsaState>, field: fn(&DsaState) -> &AtomicI64) -> Count {
        field(st).fetch_add(1, Ordering::Relaxed);
        Count {
            st: st.clone(),
            field,
        }
    }
}

impl Drop for Count {
    fn drop(&mut self) {
        (self.field)(&self.st).fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Count({})", self.st.name)
    }
}

impl DsaState {
    pub fn new(name: impl Into<DsaName>) -> DsaState {
        DsaState {
            name: name.into(),
            health: AtomicU8::new(health::HEALTH_UP),
            admin: AtomicU8::new(Admin::Enabled as u8),
            in_flight: AtomicU32::new(0),
            limit: AtomicU32::new(0),
            served: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            own_conns: AtomicI64::new(0),
            spare_conns: AtomicI64::new(0),
            persistent: AtomicI64::new(0),
            out_of_scope: Default::default(),
            down_epoch: AtomicU64::new(0),
            down_signal: tokio::sync::Notify::new(),
            track: Mutex::new(Track {
                oks: 0,
                fails: 0,
                recovering_since: None,
                hold_waived: false,
                reason: "not probed yet".into(),
                since: SystemTime::now(),
                probe_latency: None,
            }),
            advertised: Mutex::new(None),
            send_proxy: std::sync::atomic::AtomicBool::new(false),
            itself: std::sync::atomic::AtomicBool::new(false),
            reads: ReadStats::default(),
            latency: Default::default(),
            probe_latency: Default::default(),
            ejected: std::sync::atomic::AtomicBool::new(false),
            ejection: Mutex::new(None),
            replication: Default::default(),
            bind_out: std::sync::atomic::AtomicBool::new(false),
            binds: Mutex::new(ejection::BindEjection::default()),
            bind_times: Default::default(),
        }
    }

    pub fn set_admin(&self, a: Admin) {
        self.admin.store(a as u8, Ordering::Relaxed);
        if a == Admin::Enabled {
            self.waive_hold();
        }
    }

    pub fn admin(&self) -> Admin {
        match self.admin.load(Ordering::Relaxed) {
            1 => Admin::Disabled,
            2 => Admin::Draining,
            _ => Admin::Enabled,
        }
    }

    pub fn status(&self) -> DsaStatus {
        if self.is_itself() {
            return DsaStatus::Disabled;
        }
        match self.admin() {
            Admin::Disabled => DsaStatus::Disabled,
            Admin::Draining => DsaStatus::Draining,
            Admin::Enabled if self.is_up() && self.ejected.load(Ordering::Relaxed) => {
                DsaStatus::Ejected
            }
            Admin::Enabled if self.is_up() => DsaStatus::Up,
            Admin::Enabled => DsaStatus::Down,
        }
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn set_limit(&self, limit: Option<u32>) {
        self.limit.store(limit.unwrap_or(0), Ordering::Relaxed);
    }

    pub fn limit(&self) -> Option<u32> {
        match self.limit.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Count one operation in flight unless the DSA is at its concurrency
    /// limit (atomically: concurrent callers never overshoot the limit).
    pub fn try_begin(self: &Arc<Self>) -> Option<InFlight> {
        let limit = self.limit();
        let ok = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match limit {
                Some(l) if n >= l => None,
                _ => Some(n + 1),
            })
            .is_ok();
        ok.then(|| InFlight(self.clone()))
    }

    /// Count one operation in flight until the guard drops.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }
}

/// An operation in flight to a DSA; dropping it ends the count.
#[derive(Debug)]
pub struct InFlight(Arc<DsaState>);

impl InFlight {
    pub fn dsa(&self) -> &Arc<DsaState> {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// All DSAs' state by name; outlives snapshots.
#[derive(Debug, Default)]
pub struct Registry {
    by_name: DashMap<DsaName, Arc<DsaState>>,
}

impl Registry {
    pub fn get_or_create(&self, name: &DsaName) -> Arc<DsaState> {
        self.by_name
            .entry(name.clone())
            .or_insert_with(|| Arc::new(DsaState::new(name.clone())))
            .clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<DsaState>> {
        self.by_name.get(&DsaName::from(name)).map(|e| e.clone())
    }

    /// The states of a snapshot's DSAs, in knowledge order.
    pub fn resolve(&self, snap: &Snapshot) -> States {
        States(
            snap.dsas
                .iter()
                .map(|d| self.get_or_create(&d.name))
                .collect(),
        )
    }
}

/// A snapshot's DSA states, indexed like the snapshot: the hot path's view,
/// with no map look-up.
#[derive(Debug, Clone)]
pub struct States(pub Vec<Arc<DsaState>>);

impl DsaView for States {
    fn status(&self, dsa: DsaId) -> DsaStatus {
        self.0
            .get(dsa.index())
            .map(|s| s.status())
            .unwrap_or(DsaStatus::Down)
    }

    fn in_flight(&self, dsa: DsaId) -> u32 {
        self.0.get(dsa.index()).map(|s| s.in_flight()).unwrap_or(0)
    }

    fn limit(&self, dsa: DsaId) -> Option<u32> {
        self.0.get(dsa.index()).and_then(|s| s.limit())
    }

    fn read_gate(&self, dsa: DsaId) -> crate::directory::route::ReadGate {
        self.0
            .get(dsa.index())
            .map_or(crate::directory::route::ReadGate::Serve, |s| {
                s.replication.read_gate()
            })
    }
}
