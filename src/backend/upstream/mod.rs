//! Connections to DSAs: a [`conn::Conn`] multiplexes many operations on
//! one TCP connection with message-ID remapping; a [`pool::Pool`] holds
//! each DSA's shared connections and makes private (client-bound) ones,
//! kept as [`spare`]s for later binds once their clients are done with
//! them.
//!
//! A connection knows no clients. An operation registered on it is a
//! [`pending::Pending`] that carries a [`Delivery`], implemented by the
//! client side (one client operation), by the fan-out (one partition's
//! share of a spanning search) and by a hedged read's legs, and, when it
//! may be sent again elsewhere, a [`Resend`] that the connection hands it
//! back through when its DSA fails it. Responses for the same client
//! gathered over one read from a DSA go out in one write, through the
//! [`batch::Batch`].
//!
//! # Layout
//! * `conn`: the handle: submit, send, abandon, close; the writer task.
//! * `connect`: TCP and TLS connect, and starting the connection's tasks.
//! * `table`: the pending table: operations by message ID, the IDs handed
//!   out, and `drain_where`, the one way operations leave it unanswered.
//! * `reader`: the reader task: reads, sweeps, ends on a `fault`.
//! * `demux`: one response to the operation it answers; completion counted
//!   (the client side writes the access log, told the DSA by [`Source`]).
//! * [`scope_fault`]: entries outside the search's scope, dropped and
//!   counted against the DSA.
//! * `evict`: operations the router ends itself (connection lost, timed
//!   out, DSA down).
//! * [`hedge`]: hedged reads: the race and the scan for reads to hedge.
//! * [`spare`]: spare connections, leased while they wait.
//! * [`self_conn`]: the guard against the router connecting to itself.
//! * [`pending`], [`batch`]: an operation as a connection holds it; the
//!   responses of one read, per client.
//! * [`pool`], [`advertised`]: per-DSA pools and binds; what a DSA's root
//!   DSE advertises.
//! * [`layer`]: a delivery that wraps another, passing on what it does not
//!   change.
//!
//! The two traits below are the contract between a connection and whoever
//! receives its responses; they live here, at the module's root, because
//! they name the connection, the operation and the hedge race, each of
//! which a file of its own holds.

pub(crate) mod advertised;
pub(crate) mod batch;
pub(crate) mod conn;
mod connect;
mod demux;
mod evict;
mod fault;
pub(crate) mod hedge;
pub(crate) mod layer;
pub(crate) mod pace;
pub(crate) mod pending;
pub(crate) mod pool;
mod reader;
pub(crate) mod scope_fault;
pub(crate) mod self_conn;
pub(crate) mod spare;
pub(crate) mod subschema;
mod table;
#[cfg(test)]
mod testing;

use crate::base::error::Error;
use crate::proto::wire::frame::{Frame, Pdu};
use batch::Batch;
use conn::Conn;
use hedge::Race;
use pending::Pending;
use std::sync::Arc;

/// Which DSA an operation's outcome comes from, as the client side logs
/// it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The DSA's name (empty when none was reached).
    pub dsa: &'a str,
    /// It came by a hedge (the read's second leg).
    pub hedge: bool,
}

impl Source<'_> {
    /// From DSA `name` (empty: none).
    pub fn dsa(name: &str) -> Source<'_> {
        Source {
            dsa: name,
            hedge: false,
        }
    }
}

/// The receiving end of an operation's responses.
pub trait Delivery: Send + Sync {
    /// A response that is not the last (entry, reference, intermediate).
    /// Called with no lock of the connection held: it may abandon
    /// operations on the same connection.
    fn deliver(&self, r: Frame<'_>, batch: &mut Batch);
    /// The final response, from `from`: the operation ends with it.
    fn finish(&self, done: Pdu, from: Source<'_>, batch: &mut Batch);
    /// The router answers instead of the DSA: the operation ends with `e`
    /// (`at` names the DSA that let it down, if one did).
    fn fail(&self, e: &Error, at: Source<'_>);
    /// The operation now runs as `id` on `conn` (first sent, or re-sent
    /// elsewhere). False when it ended meanwhile: it is then not sent.
    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool;
    /// Whether the operation is a client's (times out at `--op-timeout`);
    /// the router's own requests (binds, probes) time out on their own.
    fn expires(&self) -> bool {
        true
    }
    /// The operation, running as `id` on `conn`, was hedged: it now runs
    /// as `race` (which the client side abandons or cancels as a whole).
    /// False when it is no longer that operation: the hedge is not sent.
    fn raced(&self, _race: &Arc<Race>, _conn: &Arc<Conn>, _id: i32) -> bool {
        true
    }
    /// The operation's hedge was sent to `conn` (its trace records the
    /// attempt). Deliveries that wrap another pass it on.
    fn hedge_placed(&self, _conn: &Arc<Conn>) {}
    /// The trace context control for the request about to be placed on
    /// `conn` (its attempt's span, which placing it records), when the
    /// operation is traced and the DSA accepts it (`crate::observe::otel`).
    /// Deliveries that wrap another pass it on.
    fn trace_control(&self, _conn: &Arc<Conn>) -> Option<Vec<u8>> {
        None
    }
    /// Whether the write about to be placed on `conn` asks its DSA for the
    /// written entry's `entryCSN` (`crate::proto::wire::postread`). Only the
    /// outermost delivery of a write answers (`crate::backend::follow::ryw`).
    fn post_read(&self, _conn: &Arc<Conn>) -> bool {
        false
    }
}

/// An operation that may be sent to another DSA: the connection hands the
/// pending operation back through it when its DSA fails it before any
/// response went out.
pub trait Resend: Send + Sync {
    /// Send `p` again; `failed` names the DSA that let it down and `why`
    /// is what the client gets if no other DSA can take it.
    fn resend(self: Box<Self>, p: Pending, failed: &str, why: Error);
    /// A copy that sends the hedge of this read: to another DSA of the
    /// same group as the one it waits on.
    fn hedger(&self) -> Box<dyn Resend>;
}
