//! The router's side of replication positions (architecture.md, "Replication positions"): the task that
//! reads them ([`poll`]), read-your-writes by position ([`ryw`]) and what
//! `/status` and `/metrics` show ([`report`]). The state they share is
//! `crate::directory::replication`.

pub mod poll;
pub mod report;
pub mod ryw;
