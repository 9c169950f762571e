//! Reads that follow replication (architecture.md, "Replication positions"; README "Replication
//! positions"): the router polls each DSA's `contextCSN`, keeps
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

/// `serve` options of replication positions.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How often each DSA's replication position (`contextCSN` of each
    /// partition's suffix) is read: one base read per DSA and partition.
    /// `0` turns positions off (read-your-writes is then the time window
    /// alone).
    #[arg(long, default_value = "100ms")]
    pub csn_interval: String,
    /// A DSA whose position is older than its load-share group's newest by
    /// more than this serves no reads (never the last eligible DSA).
    /// Default: off.
    #[arg(long)]
    pub max_replication_lag: Option<String>,
    /// Reads go only to DSAs that may lack no change older than this: one
    /// that has the newest position this router knows for the partition,
    /// or one behind it whose own CSN is at most this old (when none is,
    /// the newest serves). Default: off.
    #[arg(long)]
    pub max_staleness: Option<String>,
    /// Do not ask the DSA that takes a write for the written entry's
    /// `entryCSN` (the post-read control, RFC 4527): a write's position is
    /// then the write DSA's first `contextCSN` reading after it, which can
    /// be older than the write while that DSA has other writes pending.
    #[arg(long)]
    pub no_post_read: bool,
}

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
    /// The defaults of [`Args`].
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

impl Args {
    pub fn config(
        &self,
        parse: impl Fn(&str) -> crate::base::error::Result<Duration>,
    ) -> crate::base::error::Result<Config> {
        let opt = |v: &Option<String>| -> crate::base::error::Result<Option<Duration>> {
            v.as_deref().map(&parse).transpose()
        };
        Ok(Config {
            interval: parse(&self.csn_interval)?,
            max_lag: opt(&self.max_replication_lag)?,
            max_staleness: opt(&self.max_staleness)?,
            post_read: !self.no_post_read,
        })
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
