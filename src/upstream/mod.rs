//! Connections to DSAs: [`conn::Conn`] multiplexes many operations on one
//! TCP connection with message-ID remapping; [`pool::Pool`] holds each DSA's
//! shared connections and makes private (client-bound) ones.

pub mod conn;
pub mod pool;
