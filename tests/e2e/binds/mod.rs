//! Binds and identity: simple and SASL binds, failed-bind limits and
//! look-alike DNs, bind timeouts, the identity conveyed to the DSAs and
//! proxied authorization.

mod bind_deadline;
mod bind_ejection;
mod failed_binds;
mod identity;
mod lookalikes;
mod proxied_authorization;
mod rights;
mod sasl;
