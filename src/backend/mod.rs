//! The DSAs: connections to them, their run-time state and health, and
//! the background tasks that watch them.
//!
//! * `upstream`: connections to DSAs (multiplexed, message IDs remapped),
//!   per-DSA pools, and what each DSA's root DSE advertises.
//! * `dsa_state`: per-DSA run-time state (health, admin state, in-flight
//!   counts, read latencies, ejections, what its root DSE advertises),
//!   keyed by DSA name so it survives knowledge reloads.
//! * [`routing`]: the backend as the rest of the router sees it: the
//!   current routing snapshot and what the tasks watching the DSAs share.
//! * [`contexts`]: partition prefixes against the DSAs' naming contexts
//!   (a prefix no DSA holds is warned, with the likely fix).
//! * [`shrink`]: reloads that would take the DSAs away, refused unless
//!   forced.
//! * [`settings`]: connection limits, probes, hedging and ejection.
//! * `health`: active probes, rise/fall, passive signals.
//! * `tail`: hedged reads and outlier ejection, and ejection for binds.
//! * [`follow`]: the `contextCSN` poller and read-your-writes by position.
//! * `membership`: the member sets of the groups policy rules name
//!   (`member_of`), read from the DSAs holding them.

pub mod contexts;
pub(crate) mod dsa_state;
pub mod follow;
pub(crate) mod health;
pub(crate) mod membership;
pub mod routing;
pub mod settings;
pub mod shrink;
pub(crate) mod tail;
pub(crate) mod upstream;
