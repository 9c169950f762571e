//! Connections to DSAs: [`conn::Conn`] multiplexes many operations on one
//! TCP connection with message-ID remapping; [`pool::Pool`] holds each DSA's
//! shared connections and makes private (client-bound) ones, kept as
//! [`spare`]s for later binds once their clients are done with them;
//! [`delivery`] is how responses leave a connection without it knowing
//! who receives them (clients, fan-outs, the router's own waiters).

pub(crate) mod advertised;
pub(crate) mod conn;
mod connect;
pub(crate) mod delivery;
mod demux;
mod evict;
mod fault;
pub(crate) mod hedge;
pub(crate) mod pending;
pub(crate) mod pool;
mod reader;
pub(crate) mod self_conn;
pub(crate) mod spare;
mod table;
#[cfg(test)]
mod testing;
