//! Entries a DSA returned outside the search they answer
//! ([`ScopeCheck`]): dropped, counted against the DSA (`/status`, the
//! metrics) and logged; a DSA that does it `STRIKES` times within
//! [`WINDOW`] is taken down as broken, as one that sends malformed
//! responses is (the probes bring it back).

use super::conn::Conn;
use crate::backend::dsa_state::scope::WINDOW;
use crate::proto::wire::frame::Header;
use crate::proto::wire::scope_check::{self, ScopeCheck};
use std::time::Instant;

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
    tracing::warn!(dsa = %dsa.name, entry = %crate::base::logsafe::esc(&dn), "DSA returned an entry outside the search's base and scope; dropped");
    if let Some(n) = dsa.out_of_scope.strike(Instant::now()) {
        dsa.passive_down(&format!(
            "returned {n} entries outside their searches' base and scope within {} s",
            WINDOW.as_secs()
        ));
    }
    false
}
