//! The LDAP wire: framing, message-ID rewriting and control appending on raw
//! PDUs (`frame`), request decoding for routing (`request`), and the PDUs
//! the router writes itself (`response`).

pub mod frame;
pub mod ppolicy;
pub mod request;
pub mod response;
pub mod search;
