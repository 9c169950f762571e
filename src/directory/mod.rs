//! What the directory looks like: the knowledge, the routing table built
//! from it and the replication positions of its DSAs. Pure data and pure
//! functions; nothing here opens a connection.
//!
//! * [`knowledge`]: the DXserver knowledge grammar, `source` resolution and
//!   validation into one immutable [`knowledge::Snapshot`].
//! * [`route`]: partitions, the ordered list, load-share groups and target
//!   selection for reads and writes: a function of the snapshot and the
//!   per-DSA run-time view.
//! * [`replication`]: replication positions (OpenLDAP CSNs, `contextCSN`
//!   per server ID), write marks and the per-DSA read gate
//!   (`--max-replication-lag`, `--max-staleness`).

pub mod knowledge;
pub mod replication;
pub mod route;
