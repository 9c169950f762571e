//! Shared helpers of the integration tests, the one support module of
//! every test crate under `tests/` (each includes it with
//! `#[path = "../support/mod.rs"] mod support;`). Not every test crate uses
//! every helper, hence the `dead_code` allowance.
//!
//! * [`inproc`]: a router in process in front of in-memory test DSAs, raw
//!   and `ldap3` clients.
//! * [`router`]: a `dsa-router serve` process.
//! * [`slapd`]: a real OpenLDAP slapd, and the OpenLDAP command line tools.
//! * [`certs`]: certificates for the TLS tests.
//! * [`ldap`]: OpenLDAP's tools and `ldap3` as clients; the admin API's
//!   `/status`.
//! * [`knowledge`]: knowledge files (`set dsa` blocks) for routers.
#![allow(dead_code)]

pub mod certs;
pub mod inproc;
pub mod knowledge;
pub mod ldap;
pub mod replica;
pub mod router;
pub mod slapd;

/// Tests that burn CPU or measure timing hold this for their whole run, so
/// that in one test binary they run one at a time (`tests/serial`: the
/// availability and throttling tests, each of which used to serialize only
/// against the tests of its own file, when each file was a binary of its
/// own).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A control socket for the router whose admin API is `admin`
/// (`127.0.0.1:PORT`): `serve --control-socket` and `ctl
/// --control-socket` for tests that start routers themselves (each its
/// own, where parallel routers would share the default path).
#[allow(dead_code)]
pub fn control_socket(admin: &str) -> std::path::PathBuf {
    let port = admin.rsplit_once(':').map_or(admin, |(_, p)| p);
    std::env::temp_dir().join(format!("dsa-router-test-control-{port}.sock"))
}
