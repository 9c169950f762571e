//! The LDAP wire, read and written as bytes.
//!
//! * `ber`: reading BER elements in place and writing lengths; the one TLV
//!   reader the other modules share.
//! * `frame`: a PDU's end, message ID and operation; rewriting the message
//!   ID and appending a control without re-encoding the rest.
//! * `request`: decoding a request just enough to route it.
//! * `scope_check`: whether an entry lies within the search it answers.
//! * `search`: re-basing a search onto one partition; paged results.
//! * `ppolicy`: the password policy controls on binds.
//! * `postread`: the post-read control that tells a write's `entryCSN`.
//! * `state`: which requests need a DSA connection of the client's own.
//! * `response`: the PDUs the router writes itself (with `ldap3_proto`).
//! * `sasl`, `sasl_name`: SASL mechanisms through the router; the user a
//!   SASL bind step names.

pub mod ber;
pub mod dnmap;
pub mod frame;
pub mod oid;
pub mod postread;
pub mod ppolicy;
pub mod request;
pub mod response;
pub mod sasl;
pub mod sasl_name;
pub mod scope_check;
pub mod search;
pub mod state;
