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
