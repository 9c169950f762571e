//! What the router keeps of a client's write (read-your-writes by
//! position, see `crate::backend::follow::ryw`).

use super::positions::Position;
use super::Replication;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a write whose position is known is remembered: its reads
/// keep to the DSAs that have it until every DSA has, or this long.
pub const HOLD: Duration = Duration::from_secs(60);

/// What the router learns of one write.
#[derive(Debug, Default)]
pub struct WriteMark {
    pub(crate) acked: OnceLock<Instant>,
    position: OnceLock<Position>,
}

impl WriteMark {
    /// The write's own position: the written entry's `entryCSN` (read
    /// back with the post-read control), which no reading can improve on.
    pub fn written_at(&self, p: Position) {
        if !p.is_empty() {
            let _ = self.position.set(p);
        }
    }

    /// The write's position: its entry's `entryCSN` when the DSA told it,
    /// else once a reading after its acknowledgement shows one.
    pub fn position(&self, rep: &Replication, partition: &str, dsa: &str) -> Option<&Position> {
        if let Some(p) = self.position.get() {
            return Some(p);
        }
        let acked = *self.acked.get()?;
        let p = rep
            .positions
            .read_after(partition, dsa, acked)
            .filter(|p| !p.is_empty())?;
        Some(self.position.get_or_init(|| p))
    }
}

/// A client's last write to one partition.
#[derive(Debug, Clone)]
pub struct Affinity {
    /// The DSA that took it.
    pub dsa: String,
    pub written: Instant,
    /// `--read-your-writes`.
    pub window: Duration,
    pub mark: Option<Arc<WriteMark>>,
}

impl Affinity {
    pub fn new(dsa: String, window: Duration, mark: Option<Arc<WriteMark>>) -> Affinity {
        Affinity {
            dsa,
            written: Instant::now(),
            window,
            mark,
        }
    }

    /// Whether it still matters at `now`.
    pub fn live(&self, now: Instant) -> bool {
        let keep = if self.mark.is_some() {
            self.window.max(HOLD)
        } else {
            self.window
        };
        now < self.written + keep
    }
}
