//! Whether an operation may go on: the failed-bind defence, client
//! policies and rates, and the CPU and memory throttle.
//!
//! * [`guard`]: bounded counts of failed binds per bind DN and client
//!   address, and their back-off.
//! * [`policy`]: client policies and rates (`--policy FILE`): ordered rules
//!   of who may do what where, hidden attributes, rate buckets. Pure
//!   matching; the session's hooks are in the front end.
//! * `limits`: CPU and memory thresholds over a window, cgroup-aware
//!   sampling.

pub mod guard;
pub(crate) mod limits;
pub mod policy;

use std::sync::Arc;

/// What decides whether a client's operation may go on, shared by every
/// session: the throttle, the failed-bind defence, the policies and the
/// memory budgets of requests and responses.
pub struct Admission {
    pub throttle: Arc<limits::Throttle>,
    /// Failed binds per DN and client address (`--failed-bind-limit`).
    pub failed_binds: Arc<guard::Guard>,
    /// Client policies and rates (`--policy`), swapped on reload (shared
    /// with the backend, which reads the groups and schemas they name).
    pub policies: Arc<policy::Policies>,
    /// Bytes held by clients' large incomplete requests (see
    /// `--max-request-memory`).
    pub request_memory: std::sync::atomic::AtomicUsize,
    /// Responses queued for all clients (see `--max-response-memory`).
    pub(crate) response_memory: Arc<crate::base::outbox::Budget>,
}
