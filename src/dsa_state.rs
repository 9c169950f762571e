//! Per-DSA run-time state: health, administrative state, in-flight count.
//!
//! State lives beside the knowledge snapshot, keyed by DSA name, so it
//! survives a reload: a new snapshot resolves its DSAs to the same
//! [`DsaState`] objects by name. *Healthy* and *administratively enabled*
//! are separate facts; selection sees them combined as a [`DsaStatus`].
//! In-flight counts are RAII guards: dropping the guard decrements, so an
//! operation cannot leak a count on any exit path.
//!
//! (Some 560 lines of code: health, administrative state, in-flight
//! counts, read latency and ejection are all facts of one DSA that
//! selection reads together; the rest is tests.)

use crate::knowledge::Snapshot;
use crate::logsafe::esc;
use crate::route::{DsaIdx, DsaStatus, DsaView};
use dashmap::DashMap;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

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
    /// Connections of clients' own open to it (stateful clients).
    pub own_conns: AtomicI64,
    /// Spare connections: clients' own ones kept for later binds
    /// ([`crate::upstream::spare`]).
    pub spare_conns: AtomicI64,
    /// Persistent searches (sync refreshAndPersist) running on it.
    pub persistent: AtomicI64,
    /// Bumped each time the DSA goes down; connections watch it to re-send
    /// the reads waiting on a DSA that stopped answering.
    down_epoch: AtomicU64,
    pub down_signal: tokio::sync::Notify,
    track: Mutex<Track>,
    /// Latency of its reads, gathered by the tail-latency task.
    pub reads: ReadStats,
    /// Taken out of selection as an outlier (see `tail`), and why.
    ejected: std::sync::atomic::AtomicBool,
    ejection: Mutex<Option<String>>,
    /// What its root DSE advertised, and when it was read.
    advertised: Mutex<Option<(std::time::Instant, Arc<Advertised>)>>,
    /// Whether its replication position lets it serve reads.
    pub replication: crate::replication::Gate,
}

/// What one DSA's root DSE said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub sasl_mechanisms: Vec<String>,
    pub extensions: Vec<String>,
    pub controls: Vec<String>,
    pub subschema: Option<String>,
}

impl Advertised {
    /// From the attributes of a root DSE entry.
    pub fn from_attrs(attrs: &[(String, Vec<Vec<u8>>)]) -> Advertised {
        let mut a = Advertised::default();
        for (name, values) in attrs {
            let values: Vec<String> = values
                .iter()
                .filter_map(|v| std::str::from_utf8(v).ok())
                .map(str::to_string)
                .collect();
            match name.to_ascii_lowercase().as_str() {
                "supportedsaslmechanisms" => a.sasl_mechanisms = values,
                "supportedextension" => a.extensions = values,
                "supportedcontrol" => a.controls = values,
                "subschemasubentry" => a.subschema = values.into_iter().next(),
                _ => {}
            }
        }
        a
    }
}

/// Buckets of [`ReadStats`]: bucket `i` holds latencies below
/// `50 µs × 2^((i+1)/2)` (the last holds everything above).
pub(crate) const LATENCY_BUCKETS: usize = 32;

/// Read latencies of one DSA since the tail-latency task last took them:
/// a histogram in half-octave buckets and the sum (for the mean). One
/// relaxed add each per completed read.
#[derive(Debug)]
pub struct ReadStats {
    buckets: [AtomicU32; LATENCY_BUCKETS],
    sum_us: AtomicU64,
    /// Its reads' races lost to their hedges.
    lost: AtomicU32,
    /// Mean read latency of the last window with reads, µs (0: none yet).
    recent_us: AtomicU64,
}

impl Default for ReadStats {
    fn default() -> ReadStats {
        ReadStats {
            buckets: std::array::from_fn(|_| AtomicU32::new(0)),
            sum_us: AtomicU64::new(0),
            lost: AtomicU32::new(0),
            recent_us: AtomicU64::new(0),
        }
    }
}

/// The bucket of a latency of `us` microseconds.
pub(crate) fn latency_bucket(us: u64) -> usize {
    if us < 50 {
        return 0;
    }
    let halves = ((us as f64 / 50.0).log2() * 2.0) as usize;
    halves.min(LATENCY_BUCKETS - 1)
}

/// The upper bound of bucket `i`, in microseconds.
pub(crate) fn bucket_upper_us(i: usize) -> u64 {
    (50.0 * 2f64.powf((i + 1) as f64 / 2.0)).ceil() as u64
}

impl ReadStats {
    /// One read answered after `us` microseconds.
    pub fn record(&self, us: u64) {
        self.buckets[latency_bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The mean read latency of the last window with reads.
    pub fn recent_mean(&self) -> Option<std::time::Duration> {
        match self.recent_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(std::time::Duration::from_micros(us)),
        }
    }

    /// Set by the tail-latency task at each window's end.
    pub fn set_recent_mean(&self, us: u64) {
        self.recent_us.store(us.max(1), Ordering::Relaxed);
    }

    /// One of its reads was answered first by its hedge, elsewhere.
    pub fn lose(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Races lost since last taken.
    pub fn take_lost(&self) -> u32 {
        self.lost.swap(0, Ordering::Relaxed)
    }

    /// Take what was gathered (the counts start again from zero): the
    /// bucket counts and the sum of latencies.
    pub fn take(&self) -> ([u32; LATENCY_BUCKETS], u64) {
        let b = std::array::from_fn(|i| self.buckets[i].swap(0, Ordering::Relaxed));
        (b, self.sum_us.swap(0, Ordering::Relaxed))
    }
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

/// Health bookkeeping: consecutive probe results, why, since when.
#[derive(Debug, Clone)]
pub struct Track {
    pub oks: u32,
    pub fails: u32,
    /// Down, with probes succeeding since then: the failback hold-down
    /// runs from here.
    pub recovering_since: Option<std::time::Instant>,
    /// Remaining hold-down waived by an administrator (`ctl enable`).
    pub hold_waived: bool,
    pub reason: String,
    pub since: SystemTime,
    pub probe_latency: Option<Duration>,
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
            own_conns: AtomicI64::new(0),
            spare_conns: AtomicI64::new(0),
            persistent: AtomicI64::new(0),
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
            reads: ReadStats::default(),
            ejected: std::sync::atomic::AtomicBool::new(false),
            ejection: Mutex::new(None),
            replication: Default::default(),
        }
    }

    /// Take it out of selection as an outlier: reads waiting on it are
    /// re-sent elsewhere, as when it goes down.
    pub fn eject(&self, reason: String) {
        tracing::warn!(dsa = %self.name, reason = %esc(&reason), "DSA ejected as an outlier");
        *self.ejection.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        self.ejected.store(true, Ordering::Relaxed);
        self.down_epoch.fetch_add(1, Ordering::Relaxed);
        self.down_signal.notify_waiters();
    }

    /// Back in selection after its ejection time.
    pub fn readmit(&self) {
        if self.ejected.swap(false, Ordering::Relaxed) {
            tracing::info!(dsa = %self.name, "DSA back in selection after its ejection time");
        }
        *self.ejection.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Why it is ejected, if it is.
    pub fn ejection(&self) -> Option<String> {
        if !self.ejected.load(Ordering::Relaxed) {
            return None;
        }
        self.ejection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn track(&self) -> std::sync::MutexGuard<'_, Track> {
        self.track.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the DSA's root DSE advertised, if it was read.
    pub fn advertised(&self) -> Option<Arc<Advertised>> {
        let a = self.advertised.lock().unwrap_or_else(|p| p.into_inner());
        a.as_ref().map(|(_, a)| a.clone())
    }

    /// Whether its root DSE should be read (again): never read, or read
    /// longer than `refresh` ago.
    pub fn advertised_stale(&self, refresh: Duration) -> bool {
        let a = self.advertised.lock().unwrap_or_else(|p| p.into_inner());
        a.as_ref().is_none_or(|(at, _)| at.elapsed() > refresh)
    }

    pub fn set_advertised(&self, a: Advertised) {
        *self.advertised.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((std::time::Instant::now(), Arc::new(a)));
    }

    pub fn health_track(&self) -> Track {
        self.track().clone()
    }

    pub fn set_up(&self, up: bool) {
        self.health
            .store(if up { HEALTH_UP } else { HEALTH_DOWN }, Ordering::Relaxed);
    }

    pub fn down_epoch(&self) -> u64 {
        self.down_epoch.load(Ordering::Relaxed)
    }

    fn go_down(&self, t: &mut Track, reason: String) {
        self.set_up(false);
        tracing::warn!(dsa = %self.name, reason = %esc(&reason), "DSA down");
        t.reason = reason;
        t.since = SystemTime::now();
        t.oks = 0;
        t.recovering_since = None;
        t.hold_waived = false;
        self.down_epoch.fetch_add(1, Ordering::Relaxed);
        self.down_signal.notify_waiters();
    }

    /// A probe succeeded; up again after `rise` in a row and, once it has
    /// been down, after probes have succeeded for `hold` (the failback
    /// hold-down) unless an administrator waived it.
    pub fn probe_ok(&self, latency: Duration, rise: u32, hold: Duration) {
        let mut t = self.track();
        t.fails = 0;
        t.probe_latency = Some(latency);
        if self.is_up() {
            if t.reason == "not probed yet" {
                t.reason = "probes succeed".into();
            }
            return;
        }
        t.oks += 1;
        let since = *t
            .recovering_since
            .get_or_insert_with(std::time::Instant::now);
        let left = hold.saturating_sub(since.elapsed());
        if t.oks < rise.max(1) {
            if !hold.is_zero() && !t.hold_waived {
                t.reason = format!(
                    "answering again; back in service after the failback hold-down ({} s left)",
                    left.as_secs().max(1)
                );
            }
            return;
        }
        if left.is_zero() || t.hold_waived {
            self.set_up(true);
            t.reason = if hold.is_zero() || t.hold_waived {
                format!("{} probe(s) succeeded", t.oks)
            } else {
                format!(
                    "probes succeeded for the failback hold-down ({} s)",
                    hold.as_secs()
                )
            };
            t.since = SystemTime::now();
            t.recovering_since = None;
            t.hold_waived = false;
            tracing::info!(dsa = %self.name, reason = %esc(&t.reason), "DSA up");
        } else {
            t.reason = format!(
                "answering again; back in service after the failback hold-down ({} s left)",
                left.as_secs().max(1)
            );
        }
    }

    /// Time left before a recovering DSA serves again (failback
    /// hold-down), if it is recovering.
    pub fn failback_left(&self, hold: Duration) -> Option<Duration> {
        let t = self.track();
        if self.is_up() || t.hold_waived {
            return None;
        }
        t.recovering_since.map(|s| hold.saturating_sub(s.elapsed()))
    }

    /// A probe (or an operation timeout) failed; down after `fall` in a row.
    pub fn probe_failed(&self, reason: &str, fall: u32) {
        let mut t = self.track();
        t.oks = 0;
        t.recovering_since = None;
        if !self.is_up() {
            return;
        }
        t.fails += 1;
        if t.fails >= fall.max(1) {
            let r = format!("{} probe(s) failed, last: {reason}", t.fails);
            self.go_down(&mut t, r);
        }
    }

    /// A passive signal (refused or timed-out connect, reset connection):
    /// down at once.
    pub fn passive_down(&self, reason: &str) {
        let mut t = self.track();
        t.oks = 0;
        t.recovering_since = None;
        if self.is_up() {
            self.go_down(&mut t, reason.to_string());
        }
    }

    pub fn is_up(&self) -> bool {
        self.health.load(Ordering::Relaxed) == HEALTH_UP
    }

    pub fn set_admin(&self, a: Admin) {
        self.admin.store(a as u8, Ordering::Relaxed);
        if a == Admin::Enabled {
            self.waive_hold();
        }
    }

    /// An administrator enabled the DSA: a DSA answering its probes again
    /// serves at once, whatever is left of the failback hold-down; one
    /// still failing serves after its next good probes.
    fn waive_hold(&self) {
        let mut t = self.track();
        if self.is_up() {
            return;
        }
        if t.recovering_since.is_some() {
            self.set_up(true);
            t.reason =
                "enabled by an administrator while answering probes (failback hold-down waived)"
                    .into();
            t.since = SystemTime::now();
            t.recovering_since = None;
            tracing::info!(dsa = %self.name, reason = %esc(&t.reason), "DSA up");
        } else {
            t.hold_waived = true;
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

    fn read_gate(&self, dsa: DsaIdx) -> crate::route::ReadGate {
        self.0
            .get(dsa)
            .map_or(crate::route::ReadGate::Serve, |s| s.replication.read_gate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_dse_attributes_are_read_whatever_their_case() {
        let attrs = vec![
            (
                "supportedSASLMechanisms".to_string(),
                vec![b"SCRAM-SHA-256".to_vec(), b"DIGEST-MD5".to_vec()],
            ),
            (
                "SUPPORTEDEXTENSION".to_string(),
                vec![b"1.3.6.1.1.8".to_vec()],
            ),
            ("supportedcontrol".to_string(), vec![b"1.2.3".to_vec()]),
            (
                "subschemaSubentry".to_string(),
                vec![b"cn=Subschema".to_vec()],
            ),
            ("namingContexts".to_string(), vec![b"o=A".to_vec()]),
        ];
        let a = Advertised::from_attrs(&attrs);
        assert_eq!(a.sasl_mechanisms, ["SCRAM-SHA-256", "DIGEST-MD5"]);
        assert_eq!(a.extensions, ["1.3.6.1.1.8"]);
        assert_eq!(a.controls, ["1.2.3"]);
        assert_eq!(a.subschema.as_deref(), Some("cn=Subschema"));
        let st = DsaState::new("D1");
        assert!(st.advertised_stale(Duration::from_secs(300)));
        st.set_advertised(a.clone());
        assert!(!st.advertised_stale(Duration::from_secs(300)));
        assert_eq!(st.advertised().as_deref(), Some(&a));
    }
}
