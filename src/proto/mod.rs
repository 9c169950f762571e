//! The protocols on the wire, decoded and written: DNs, LDAP messages,
//! the PROXY protocol and TLS.
//!
//! * [`dn`]: DN parsing (RFC 4514 strings and the knowledge `<type value>`
//!   form), RFC 4518 preparation, normalization and ancestry. Pure.
//! * [`wire`]: framing, message-ID rewriting, request decoding, the PDUs
//!   the router writes itself, and the connection-state model
//!   ([`wire::state`]: which requests need a DSA connection of the
//!   client's own).
//! * [`proxy_protocol`]: PROXY protocol v1/v2 headers from the load
//!   balancers listed in `--proxy-protocol-from` (the client's address),
//!   and the headers the router sends to DSAs.
//! * [`tls`]: rustls configuration (client-facing and towards DSAs), the
//!   client stream types, StartTLS.

pub mod dn;
pub mod proxy_protocol;
pub mod tls;
pub mod wire;
