//! Entries a DSA returned outside the search they answer
//! ([`ScopeCheck`]): dropped, counted against the DSA (`/status`, the
//! metrics) and logged; a DSA that does it [`STRIKES`] times within
//! [`WINDOW`] is taken down as broken, as one that sends malformed
//! responses is (the probes bring it back).

use super::conn::Conn;
use crate::wire::frame::Header;
use crate::wire::scope_check::{self, ScopeCheck};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Out-of-scope entries within [`WINDOW`] that take the DSA down.
pub(crate) const STRIKES: u32 = 3;
/// See [`STRIKES`].
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// One DSA's out-of-scope entries.
#[derive(Debug, Default)]
pub struct OutOfScope {
    /// Entries dropped since start.
    pub entries: AtomicU64,
    /// Those of the current window: how many, since when.
    window: Mutex<(u32, Option<Instant>)>,
}

impl OutOfScope {
    /// Count one; the number within the window when it reaches
    /// [`STRIKES`] (the window then starts again).
    fn strike(&self, now: Instant) -> Option<u32> {
        self.entries.fetch_add(1, Ordering::Relaxed);
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        match w.1 {
            Some(since) if now.duration_since(since) <= WINDOW => w.0 += 1,
            _ => *w = (1, Some(now)),
        }
        if w.0 >= STRIKES {
            let n = w.0;
            *w = (0, None);
            return Some(n);
        }
        None
    }

    pub fn count(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }
}

/// Whether the response `pdu` from `conn`'s DSA goes on to the client: an
/// entry outside `check` does not, and counts against the DSA.
pub(super) fn admit(conn: &Conn, check: &ScopeCheck, pdu: &[u8], h: &Header) -> bool {
    if check.admits(pdu, h) {
        return true;
    }
    let dsa = &conn.dsa;
    let dn = scope_check::entry_dn(pdu, h)
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    tracing::warn!(dsa = %dsa.name, entry = %crate::logsafe::esc(&dn), "DSA returned an entry outside the search's base and scope; dropped");
    if let Some(n) = dsa.out_of_scope.strike(Instant::now()) {
        dsa.passive_down(&format!(
            "returned {n} entries outside their searches' base and scope within {} s",
            WINDOW.as_secs()
        ));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_strike_within_the_window_counts() {
        let o = OutOfScope::default();
        let t = Instant::now();
        assert_eq!(o.strike(t), None);
        // The window has passed: counting starts again.
        assert_eq!(o.strike(t + WINDOW + Duration::from_secs(1)), None);
        let t = t + WINDOW + Duration::from_secs(1);
        assert_eq!(o.strike(t + Duration::from_secs(1)), None);
        assert_eq!(o.strike(t + Duration::from_secs(2)), Some(3));
        assert_eq!(o.strike(t + Duration::from_secs(3)), None);
        assert_eq!(o.count(), 5);
    }
}
