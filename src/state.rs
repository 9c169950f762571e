//! Per-DSA run-time state: health, administrative state, in-flight count.
//!
//! State lives beside the knowledge snapshot, keyed by DSA name, so it
//! survives a reload: a new snapshot resolves its DSAs to the same
//! [`DsaState`] objects by name. *Healthy* and *administratively enabled*
//! are separate facts; selection sees them combined as a [`DsaStatus`].
//! In-flight counts are RAII guards: dropping the guard decrements, so an
//! operation cannot leak a count on any exit path.

use crate::knowledge::Snapshot;
use crate::route::{DsaIdx, DsaStatus, DsaView};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

const HEALTH_UP: u8 = 0;
const HEALTH_DOWN: u8 = 1;

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
    pub name: String,
    health: AtomicU8,
    admin: AtomicU8,
    in_flight: AtomicU32,
    /// Concurrency limit; 0 means none.
    limit: AtomicU32,
    pub served: AtomicU64,
    pub errors: AtomicU64,
}

impl DsaState {
    pub fn new(name: &str) -> DsaState {
        DsaState {
            name: name.to_string(),
            health: AtomicU8::new(HEALTH_UP),
            admin: AtomicU8::new(Admin::Enabled as u8),
            in_flight: AtomicU32::new(0),
            limit: AtomicU32::new(0),
            served: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    pub fn set_up(&self, up: bool) {
        self.health
            .store(if up { HEALTH_UP } else { HEALTH_DOWN }, Ordering::Relaxed);
    }

    pub fn is_up(&self) -> bool {
        self.health.load(Ordering::Relaxed) == HEALTH_UP
    }

    pub fn set_admin(&self, a: Admin) {
        self.admin.store(a as u8, Ordering::Relaxed);
    }

    pub fn admin(&self) -> Admin {
        match self.admin.load(Ordering::Relaxed) {
            1 => Admin::Disabled,
            2 => Admin::Draining,
            _ => Admin::Enabled,
        }
    }

    pub fn status(&self) -> DsaStatus {
        match self.admin() {
            Admin::Disabled => DsaStatus::Disabled,
            Admin::Draining => DsaStatus::Draining,
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

/// All DSAs' state by (lower-cased) name; outlives snapshots.
#[derive(Debug, Default)]
pub struct Registry {
    by_name: DashMap<String, Arc<DsaState>>,
}

impl Registry {
    pub fn get_or_create(&self, name: &str) -> Arc<DsaState> {
        self.by_name
            .entry(name.to_ascii_lowercase())
            .or_insert_with(|| Arc::new(DsaState::new(name)))
            .clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<DsaState>> {
        self.by_name
            .get(&name.to_ascii_lowercase())
            .map(|e| e.clone())
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
    fn status(&self, dsa: DsaIdx) -> DsaStatus {
        self.0
            .get(dsa)
            .map(|s| s.status())
            .unwrap_or(DsaStatus::Down)
    }

    fn in_flight(&self, dsa: DsaIdx) -> u32 {
        self.0.get(dsa).map(|s| s.in_flight()).unwrap_or(0)
    }

    fn limit(&self, dsa: DsaIdx) -> Option<u32> {
        self.0.get(dsa).and_then(|s| s.limit())
    }
}
