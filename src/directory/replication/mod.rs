//! Reads that follow replication (architecture.md, "Replication positions";
//! docs/replication.md): the router polls each DSA's `contextCSN`, keeps
//! per DSA and server ID the newest CSN ([`positions`]), takes DSAs too far
//! behind out of reads (`--max-replication-lag`, `--max-staleness`: a
//! [`Gate`] read selection consults) and sends a client's reads after its
//! write to DSAs whose position has reached it ([`mark`]). The tasks and
//! hooks that need the router's context are in `crate::backend::follow`.

pub mod csn;
pub mod mark;
pub mod positions;

use positions::Positions;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Replication settings (`serve` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Config {
    /// Zero: positions are not read.
    pub interval: Duration,
    pub max_lag: Option<Duration>,
    pub max_staleness: Option<Duration>,
    /// A write's position is its entry's `entryCSN` where the DSA reads
    /// it back (post-read control).
    pub post_read: bool,
}

impl Config {
    /// The defaults of `serve`'s flags.
    pub fn standard() -> Config {
        Config {
            interval: Duration::from_millis(100),
            max_lag: None,
            max_staleness: None,
            post_read: true,
        }
    }

    /// A reading older than this counts as unknown: five intervals, at
    /// least half a second.
    pub fn fresh_for(&self) -> Duration {
        (self.interval * 5).max(Duration::from_millis(500))
    }
}

/// Whether a DSA serves reads by its position; set by the poller, read by
/// selection (one relaxed load per candidate).
#[derive(Debug, Default)]
pub struct Gate {
    out: AtomicBool,
    lag_ms: AtomicU32,
}

impl Gate {
    pub fn set(&self, out: bool, lag_ms: u32) {
        self.lag_ms.store(lag_ms, Ordering::Relaxed);
        self.out.store(out, Ordering::Relaxed);
    }

    pub fn read_gate(&self) -> crate::directory::route::ReadGate {
        if self.out.load(Ordering::Relaxed) {
            crate::directory::route::ReadGate::Behind(self.lag_ms.load(Ordering::Relaxed))
        } else {
            crate::directory::route::ReadGate::Serve
        }
    }
}

/// The router's replication state.
#[derive(Debug, Default)]
pub struct Replication {
    pub cfg: Config,
    pub positions: Positions,
    /// Position readings sent and bytes exchanged (probe traffic).
    pub requests: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
    /// Writes whose position is their entry's `entryCSN` (post-read).
    pub entry_csns: std::sync::atomic::AtomicU64,
}

impl Replication {
    pub fn new(cfg: Config) -> Replication {
        Replication {
            cfg,
            ..Replication::default()
        }
    }
}
