//! One client connection.
//!
//! The session task reads PDUs, decodes each just enough to route it, and
//! forwards it at once to the DSA it belongs to, so a client may have many
//! operations outstanding across partitions; responses come back through the
//! upstream readers onto the client's bounded queue ([`out::ClientOut`]),
//! which a writer task drains. A bind is the one operation the session
//! awaits (RFC 4511 forbids other requests while a bind is in progress).
//!
//! Identity (architecture.md, "Identity"): an anonymous client's operations run on unbound
//! shared connections; a bound client's run on the router's shared
//! connection with the proxied-authorization control where the DSA trusts
//! conveyed originators, otherwise on a connection of its own bound by
//! replaying its bind. Binds never travel on shared connections.

mod bind;
mod dispatch;
mod drain;
mod extop;
pub mod fanout;
mod forward;
mod handover;
mod hide;
mod io;
mod local;
mod logged;
mod named;
mod operation;
pub mod out;
mod own;
mod paged_lost;
mod phases;
mod policy;
mod reading;
mod resend;
mod sasl;
mod send;
mod spanning;
mod stack;
mod traced;
mod writer;

pub use io::{resume, run, serve, serve_handed, Moving};

use crate::backend::upstream::pool::BindPdu;
use crate::observe::metrics::Refusal;
use crate::proto::wire::request::Request;
use crate::proto::wire::response::{self, Code};
use crate::service::context::Context;
use bytes::{Bytes, BytesMut};
use out::ClientOut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::Instrument;

/// Who the client is.
#[derive(Clone)]
enum Identity {
    Anonymous,
    /// Bound; the bind PDU is kept (in memory only) to replay it.
    Bound(Bound),
}

/// A bound client.
#[derive(Clone)]
struct Bound {
    /// Its DN: a simple bind's name; after SASL, the DN the DSA
    /// established (empty when the DSA named no DN).
    dn: String,
    /// Its authorization identity as WhoAmI gives it (`dn:...`, or `u:...`
    /// after SASL): conveyed by proxied authorization when `conveyed`.
    authz: String,
    /// Whether other DSAs may be told `authz` (proxied authorization): a
    /// simple bind's name, which its own partition's DSA verified; after
    /// SASL, only a `dn:` identity under a prefix the authenticating DSA
    /// holds ([`sasl::vouched`]). Otherwise the identity is used on the
    /// DSA that established it, and nowhere else.
    conveyed: bool,
    /// A simple bind, kept to replay it on other DSAs. `None` after SASL,
    /// which cannot be replayed: the client's operations then run on the
    /// connection it bound on for that DSA, and under proxied
    /// authorization on DSAs that trust the router.
    bind: Option<BindPdu>,
    /// Whether its operations run on connections of its own, bound as
    /// itself, on every DSA (never under proxied authorization): the DSA
    /// keeps state for it per connection (a password policy restriction),
    /// or the administrator asks for it (`--own-connection always`).
    own_conn: bool,
    /// Its bind response carried a password policy warning or error: the
    /// DSA may restrict it, so even WhoAmI is the DSA's to answer.
    policy: bool,
}

/// What to do after a request.
enum Flow {
    Continue,
    /// Close the connection, after a Notice of Disconnection if given.
    Close(Option<(Code, String)>),
    /// StartTLS accepted so far (message ID); the upgrade follows.
    StartTls(i32),
}

/// One client connection's state, by the phase that uses it; what one
/// operation needs travels with the operation ([`operation::Operation`]).
struct Session {
    router: Arc<Context>,
    /// The client's connection: read from, answered on.
    client: Client,
    /// Who the client is: made by the answer phase (binds), used by the
    /// choose phase (which connections carry its operations).
    who: Who,
    /// Where its operations went: used by the target and choose phases.
    places: Places,
    /// Client policies (the admit phase): the rule deciding, its rates.
    pol: policy::State,
}

/// The client's connection, as the respond and log phases see it.
struct Client {
    peer: SocketAddr,
    /// Whether the connection runs over TLS (LDAPS or after StartTLS).
    tls: bool,
    out: Arc<ClientOut>,
    /// `client=ADDRESS` for the access log, formatted once (empty when the
    /// log is off): writing the address was a third of each line's work.
    log_client: crate::observe::access::Head,
    /// Its line in `/status` ([`crate::observe::clients`]).
    listed: crate::observe::clients::Entry,
}

/// Who the client is, and the connections that carry its identity.
struct Who {
    identity: Identity,
    /// Connections of the client's own, by DSA, open or being opened.
    private: Arc<own::Own>,
    /// A SASL bind in progress (saslBindInProgress): its connection.
    sasl: Option<sasl::InProgress>,
    /// The bind to replay after a change of the client's own password,
    /// once the DSA accepted it.
    rebind: Option<Arc<std::sync::Mutex<Option<BindPdu>>>>,
}

/// Where the client's operations went, for the next ones.
struct Places {
    /// The DSA that holds this client's per-connection state (paged
    /// searches, VLV, transactions), by partition.
    state_dsa: HashMap<String, crate::directory::knowledge::DsaName>,
    /// Read-your-writes: partition key to the DSA that took this client's
    /// last write there, and when.
    affinity: HashMap<String, crate::directory::replication::mark::Affinity>,
    /// The last target DN this client named, parsed (see
    /// [`Session::parsed`]).
    last_dn: Option<(Box<str>, Arc<crate::proto::dn::Dn>)>,
}

impl Session {
    /// Whether nothing of the session's own is in flight or tied to its
    /// worker, so that it may move to another ([`crate::base::workers`]): no
    /// operation outstanding, no response queued, no connection of its
    /// own, no SASL exchange (a TLS session moves with its TLS state).
    fn can_move(&self) -> bool {
        self.who.sasl.is_none()
            && self.client.out.outstanding() == 0
            && self.client.out.ob.is_idle()
            && self.who.private.is_empty()
    }

    /// `text` parsed; the last DN parsed when the client names the same
    /// again (clients search one base over and over: parsing it was an
    /// eighth of the router's own work per operation).
    fn parsed(
        &mut self,
        text: &str,
    ) -> Result<Arc<crate::proto::dn::Dn>, crate::proto::dn::DnError> {
        if let Some((t, d)) = &self.places.last_dn {
            if **t == *text {
                return Ok(d.clone());
            }
        }
        let d = Arc::new(crate::proto::dn::Dn::parse_ldap(text)?);
        self.places.last_dn = Some((text.into(), d.clone()));
        Ok(d)
    }

    async fn handle(&mut self, pdu: Bytes) -> Flow {
        let op = match operation::Operation::read(pdu) {
            Ok(op) => op,
            Err(e) => return self.malformed(&e.to_string()),
        };
        // One span per operation (debug level: free unless asked for);
        // the DSA is recorded where the operation is placed.
        let span = tracing::debug_span!(
            "op",
            client = %self.client.peer,
            msgid = op.req.msgid,
            op = op.req.op.name(),
            dsa = tracing::field::Empty
        );
        self.run(op).instrument(span).await
    }

    fn malformed(&self, why: &str) -> Flow {
        tracing::warn!(client = %self.client.peer, error = %crate::base::logsafe::esc(why), "undecodable request; disconnecting");
        Flow::Close(Some((Code::ProtocolError, format!("dsa-router: {why}"))))
    }

    /// Refuse a request because a limit or the partition's state says so:
    /// counted by reason, answered with `busy` (limits) or `unavailable`.
    async fn refuse(&self, req: &Request, why: Refusal, msg: &str) {
        self.router.backend.metrics.refused(why);
        let code = match why {
            Refusal::Unavailable => Code::Unavailable,
            _ => Code::Busy,
        };
        self.reply(req, code, "", msg).await;
    }

    /// Answer a request with the router's error: refusals (no DSA
    /// available, a limit) are counted by reason.
    async fn answer(&self, req: &Request, e: &crate::base::error::Error) {
        self.answer_in(req, e, None).await;
    }

    /// [`Session::answer`] for an operation traced as `trace`.
    async fn answer_in(
        &self,
        req: &Request,
        e: &crate::base::error::Error,
        trace: Option<&crate::observe::otel::OpTrace>,
    ) {
        if let Some(why) = refusal(e) {
            self.router.backend.metrics.refused(why);
        }
        self.reply_in(req, e.code(), "", &e.message(), trace).await;
    }

    /// Answer a request with an LDAPResult of the router's own.
    async fn reply(&self, req: &Request, code: Code, matched: &str, msg: &str) {
        self.reply_in(req, code, matched, msg, None).await;
    }

    /// [`Session::reply`] for an operation traced as `trace` (else traced
    /// here, when traces are on and it is sampled).
    async fn reply_in(
        &self,
        req: &Request,
        code: Code,
        matched: &str,
        msg: &str,
        trace: Option<&crate::observe::otel::OpTrace>,
    ) {
        let Some(t) = req.op.response_tag() else {
            return;
        };
        self.trace_answer(req, code.clone() as u8, msg, trace);
        let mut b = BytesMut::new();
        self.router.backend.metrics.op(
            crate::observe::metrics::op_index(req.op.name()),
            code.clone() as u8,
            0,
        );
        crate::observe::access::line(|f| {
            f.head(&self.client.log_client)
                .quoted("op", req.op.name())
                .num("result", code.clone() as u64)
                .plain("dsa", "-")
                .quoted("note", &format!("answered by the router: {msg}"));
        });
        response::result(req.msgid, t, code, matched, msg, &mut b);
        self.client.out.send(b.freeze()).await;
    }
}

/// The refusal an error counts as, if it is one (the metrics of refusals).
fn refusal(e: &crate::base::error::Error) -> Option<Refusal> {
    match e.kind {
        crate::base::error::Kind::Unavailable => Some(Refusal::Unavailable),
        crate::base::error::Kind::Busy => Some(Refusal::Concurrency),
        _ => None,
    }
}
