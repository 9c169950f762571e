//! The client side: accepting connections and serving each one.
//!
//! * [`server`]: the accept loop, `run(listener, router, shutdown)`.
//! * [`session`]: one client connection: routing each request, identity
//!   (simple and SASL binds), extended operations, the bounded outbound
//!   queue.

pub mod server;
pub mod session;
