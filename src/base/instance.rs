//! This process's instance marker: 128 random bits, drawn once, that the
//! router's root DSE carries when a search asks for [`ATTRIBUTE`] by
//! name. A health probe or `check --online` that reads it back from a
//! knowledge block's address has reached a dsa-router, and when it is
//! this process's own marker, this router itself: that block is the
//! router's own, whatever its address says.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// The root DSE attribute that carries the marker (asked for by name
/// only: not among `*` or `+`).
pub const ATTRIBUTE: &str = "dsaRouterInstance";

/// This process's marker: 32 hex digits.
pub fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| {
        // `RandomState` keys are drawn from the operating system's random
        // source; two of them give 128 bits, mixed with the process id and
        // the time so that a fork could not repeat them.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let half = |salt: u64| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(salt);
            h.write_u32(std::process::id());
            h.write_u128(now);
            h.finish()
        };
        format!("{:016x}{:016x}", half(1), half(2))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_fixed_for_the_process_and_not_trivial() {
        let m = marker();
        assert_eq!(m.len(), 32);
        assert!(m.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(marker(), m);
        assert_ne!(&m[..16], &m[16..]);
    }
}
