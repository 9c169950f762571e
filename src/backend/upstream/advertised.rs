//! What a DSA advertises in its root DSE: SASL mechanisms, extended
//! operations, controls, where its schema is, and its naming contexts
//! (compared with knowledge prefixes: `crate::backend::contexts`). The health task reads it
//! after a good probe when it is missing or older than [`REFRESH`]; the
//! router's own root DSE is built from it (architecture.md, "What the router answers itself").

use super::batch::Batch;
use super::conn::Conn;
use super::pending::{Kind as Op, Pending, Sink};
use super::Delivery;
use crate::backend::dsa_state::Advertised;
use crate::base::error::{Error, Kind};
use crate::proto::wire::frame::{self, tag, Frame, Pdu};
use bytes::Bytes;
use ldap3_proto::proto::{LdapFilter, LdapSearchScope};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long what a DSA advertised is trusted before it is read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(300);

/// The root DSE attributes the router takes from its DSAs.
const ATTRS: [&str; 6] = [
    "supportedSASLMechanisms",
    "supportedExtension",
    "supportedControl",
    "subschemaSubentry",
    "namingContexts",
    // A dsa-router's instance marker: the block is a router, perhaps
    // this one.
    crate::base::instance::ATTRIBUTE,
];

/// The root DSE read request.
fn request() -> Bytes {
    crate::proto::wire::search::own_search(
        "",
        LdapSearchScope::Base,
        (1, 0),
        LdapFilter::Present("objectClass".into()),
        &ATTRS,
    )
}

/// The entries of a search, or why it failed.
type Reply = Result<Vec<Bytes>, Error>;

/// Collects the entries of a search and wakes the reader at its end.
struct Collect {
    entries: Mutex<Vec<Bytes>>,
    done: Mutex<Option<oneshot::Sender<Reply>>>,
}

impl Collect {
    fn send(&self, r: Reply) {
        let tx = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(tx) = tx {
            let _ = tx.send(r);
        }
    }
}

impl Delivery for Collect {
    fn deliver(&self, r: Frame<'_>, _batch: &mut Batch) {
        let Frame { pdu, h } = r;
        if h.op_tag == tag::SEARCH_ENTRY {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Bytes::copy_from_slice(pdu));
        }
    }
    fn finish(&self, _done: Pdu, _from: super::Source<'_>, _batch: &mut Batch) {
        let e = std::mem::take(&mut *self.entries.lock().unwrap_or_else(|p| p.into_inner()));
        self.send(Ok(e));
    }
    fn fail(&self, e: &Error, _at: super::Source<'_>) {
        self.send(Err(e.clone()));
    }
    fn placed(&self, _conn: &Arc<Conn>, _id: i32) -> bool {
        true
    }
    fn expires(&self) -> bool {
        false
    }
}

/// Run the search `pdu` on `conn` and collect its entries, within
/// `timeout`.
pub(crate) async fn collect(
    conn: &Arc<Conn>,
    pdu: &[u8],
    timeout: Duration,
) -> Result<Vec<Bytes>, Error> {
    let h = frame::header(pdu).map_err(|e| Error::new(Kind::BadResponse, e.to_string()))?;
    let (tx, rx) = oneshot::channel();
    let c = Arc::new(Collect {
        entries: Mutex::new(Vec::new()),
        done: Mutex::new(Some(tx)),
    });
    let id = conn
        .submit(
            Pending::new(Sink::To(c), Op::fixed()).own(),
            pdu,
            &h,
            None,
            |_, _| true,
        )
        .map_err(|_| Error::new(Kind::ConnectionLost { write: false }, "connection closed"))?;
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Ok(Vec::new()),
        Err(_) => {
            conn.abandon(id);
            Err(Error::new(
                Kind::Timeout { write: false },
                "search timed out",
            ))
        }
    }
}

/// Read what `conn`'s DSA advertises, within `timeout`.
pub(crate) async fn read(conn: &Arc<Conn>, timeout: Duration) -> Result<Advertised, Error> {
    let entries = collect(conn, &request(), timeout).await?;
    let attrs = entries
        .first()
        .and_then(|e| crate::proto::wire::response::entry_attrs(e))
        .unwrap_or_default();
    Ok(Advertised::from_attrs(&attrs))
}

/// The DNs of the entries one level below `base` on `conn`'s DSA (the
/// `hash check` tool).
pub(crate) async fn one_level(
    conn: &Arc<Conn>,
    base: &str,
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let b = crate::proto::wire::search::own_search(
        base,
        LdapSearchScope::OneLevel,
        (0, 0),
        LdapFilter::Present("objectClass".into()),
        &["1.1"],
    );
    let entries = collect(conn, &b, timeout).await?;
    Ok(entries
        .iter()
        .filter_map(|e| crate::proto::wire::response::entry_dn(e))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_a_search() {
        let h = frame::header(&request()).unwrap();
        assert_eq!(h.op_tag, tag::SEARCH_REQUEST);
    }
}
