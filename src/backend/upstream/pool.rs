//! Per-DSA connection pools.
//!
//! Each DSA has two shared connections, created on first use and replaced
//! when they die: an *anonymous* one (never bound: anonymous clients'
//! operations run there as anonymous) and, for DSAs that trust conveyed
//! originators, a *router* one bound as the DSA's `ldap-dsa-name`, on which
//! bound clients' operations carry the proxied-authorization control.
//! Binds never travel on either: they use connections of their own
//! ([`connect_bound`]).

use super::conn::Conn;
pub(crate) use super::connect::Target;
use super::pending::{Kind as Op, Pending, Sink};
use super::spare::Spares;
use crate::backend::dsa_state::DsaState;
pub(crate) use crate::backend::settings::Limits;
use crate::base::error::{Error, Kind};
use crate::directory::knowledge::{DsaDef, Secret};
use crate::proto::wire::dnmap::PrefixMap;
use crate::proto::wire::frame;
use crate::proto::wire::response::{self, Code};
use bytes::{Bytes, BytesMut};
use ldap3_proto::proto::{LdapBindCred, LdapBindRequest, LdapMsg, LdapOp};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Mutex};

#[derive(Default)]
struct Slot {
    cur: RwLock<Option<Arc<Conn>>>,
    connecting: Mutex<()>,
}

impl Slot {
    fn live(&self) -> Option<Arc<Conn>> {
        let g = self.cur.read().unwrap_or_else(|p| p.into_inner());
        g.as_ref().filter(|c| c.is_alive()).cloned()
    }

    fn set(&self, c: Arc<Conn>) {
        *self.cur.write().unwrap_or_else(|p| p.into_inner()) = Some(c);
    }

    fn take(&self) -> Option<Arc<Conn>> {
        self.cur.write().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// One worker thread's shared connections (see [`crate::base::workers`]).
#[derive(Default)]
struct Shared {
    anon: Slot,
    routed: Slot,
}

pub struct Pool {
    pub dsa: Arc<DsaState>,
    pub addrs: Vec<String>,
    /// The same, with the family each is to be reached over.
    pub(crate) targets: Vec<Target>,
    /// A bind as `ldap-dsa-name`/`ldap-dsa-password`, when the DSA trusts
    /// conveyed originators: the shared connection bound clients'
    /// operations run on, with proxied authorization.
    pub(crate) router_identity: Option<BindPdu>,
    /// The same bind wherever the knowledge gives the router's name,
    /// trusted or not: the router's own requests (health probes without
    /// `--probe-bind`, replication positions, policy group reads) run as
    /// it. Clients' operations never do where the DSA does not trust
    /// conveyed originators (anonymous clients stay anonymous).
    pub(crate) own_identity: Option<BindPdu>,
    /// The shared connections, a pair per worker thread: a session's
    /// operations run on its own thread's.
    shared: Box<[Shared]>,
    limits: Limits,
    /// Clients' own connections given back, for later binds.
    spares: Arc<Spares<Conn>>,
    /// TLS towards this DSA, when knowledge asks for it.
    pub tls: Option<crate::proto::tls::DsaTls>,
    /// The DSA holds the partition under its `native-prefix`.
    pub native: Option<Arc<PrefixMap>>,
    /// Its partition in its own naming, as the bound of searches that
    /// dereference aliases (`None`: the root).
    pub partition: Option<crate::proto::wire::scope_check::PartitionScope>,
}

/// `host:port` strings of a DSA's addresses, in order.
pub(crate) fn socket_addrs(d: &DsaDef) -> Vec<String> {
    targets(d).into_iter().map(|t| t.addr).collect()
}

/// A DSA's addresses, in order, each with its family.
pub(crate) fn targets(d: &DsaDef) -> Vec<Target> {
    d.addresses
        .iter()
        .map(|a| Target {
            addr: if a.host.contains(':') {
                format!("[{}]:{}", a.host, a.port)
            } else {
                format!("{}:{}", a.host, a.port)
            },
            family: a.family,
        })
        .collect()
}

impl Pool {
    pub fn new(
        dsa: Arc<DsaState>,
        def: &DsaDef,
        limits: Limits,
        tls: Option<crate::proto::tls::DsaTls>,
        workers: usize,
    ) -> Pool {
        let native = def
            .native_prefix
            .as_ref()
            .filter(|n| **n != def.prefix)
            .map(|n| {
                Arc::new(PrefixMap {
                    prefix: def.prefix.clone(),
                    native: n.clone(),
                })
            });
        let own_identity = match (&def.ldap_dsa_name, &def.ldap_dsa_password) {
            (Some(dn), pw) => {
                let pw = pw.clone().unwrap_or_else(|| Secret::new(""));
                // Under the partition's prefix, it names an entry of the
                // DSA's native tree.
                let dn = dn.to_string();
                let dn = native.as_ref().and_then(|m| m.to_native(&dn)).unwrap_or(dn);
                Some(BindPdu::new(
                    dn.clone(),
                    bind_pdu(&dn, pw.expose().as_bytes()).freeze(),
                ))
            }
            _ => None,
        };
        let router_identity = own_identity
            .clone()
            .filter(|_| def.trusts_conveyed_originator());
        let spares = Arc::new(Spares::new(dsa.clone(), workers, limits.spare_connections));
        Pool {
            dsa,
            addrs: socket_addrs(def),
            targets: targets(def),
            router_identity,
            own_identity,
            shared: (0..workers.max(1)).map(|_| Shared::default()).collect(),
            spares,
            limits,
            tls,
            partition: crate::proto::wire::scope_check::PartitionScope::new(
                native.as_ref().map_or(&def.prefix, |m| &m.native),
            ),
            native,
        }
    }

    /// Whether bound clients' operations may use the shared router
    /// connection with proxied authorization.
    pub fn proxies(&self) -> bool {
        self.router_identity.is_some()
    }

    /// This worker thread's shared connection slot.
    fn slot(&self, routed: bool) -> &Slot {
        let s = &self.shared[crate::base::workers::id() % self.shared.len()];
        if routed {
            &s.routed
        } else {
            &s.anon
        }
    }

    /// Every shared connection slot, of every worker.
    fn slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.shared.iter().flat_map(|s| [&s.anon, &s.routed])
    }

    /// The shared connection, if one is open now (no waiting).
    pub fn shared_now(&self, routed: bool) -> Option<Arc<Conn>> {
        self.slot(routed).live()
    }

    /// The shared connection: anonymous, or bound as the router.
    pub async fn shared(&self, routed: bool) -> Result<Arc<Conn>, Error> {
        let slot = self.slot(routed);
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        let _g = slot.connecting.lock().await;
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        let identity = if routed {
            self.router_identity.as_ref()
        } else {
            None
        };
        let c = connect_bound(
            &self.dsa,
            &self.targets,
            identity,
            self.limits,
            self.tls.as_ref(),
        )
        .await?;
        slot.set(c.clone());
        Ok(c)
    }

    /// A connection of the client's own, for its bind, bound by replaying
    /// its bind, or anonymous: for a bind, a spare one when there is one
    /// ([`super::spare`]), else a new one.
    pub async fn private(
        &self,
        is: Own<'_>,
        client: std::net::SocketAddr,
    ) -> Result<Arc<Conn>, Error> {
        let identity = match is {
            Own::Replay(b) => Some(b),
            Own::ForBind | Own::Anonymous => None,
        };
        // A replayed bind names the DSA's native tree.
        let mapped = identity.and_then(|b| {
            let m = self.native.as_ref()?;
            let h = frame::header(&b.pdu).ok()?;
            let pdu = m.request(&b.pdu, &h)?;
            Some(BindPdu::new(m.to_native(&b.dn)?, pdu.freeze()))
        });
        let identity = mapped.as_ref().or(identity);
        // A slot is reserved before connecting, so that concurrent clients
        // cannot overshoot the limit; the connection takes it over.
        let max = self.limits.max_own_connections;
        let reserved = crate::backend::dsa_state::Count::new(&self.dsa, |s| &s.own_conns);
        if max > 0
            && self
                .dsa
                .own_conns
                .load(std::sync::atomic::Ordering::Relaxed)
                > max as i64
        {
            return Err(Error::router(
                Kind::Busy,
                format!(
                    "DSA {} has {max} connections of clients' own (--max-own-connections)",
                    self.dsa.name
                ),
            ));
        }
        // A spare still carries its last client's bind: it only ever
        // serves a bind, which replaces that identity. An anonymous
        // connection is a new one. To a DSA that takes a PROXY header,
        // a connection names its client's address from its first byte:
        // it is never a spare.
        let proxied = self
            .dsa
            .send_proxy
            .load(std::sync::atomic::Ordering::Relaxed);
        let spares = !matches!(is, Own::Anonymous) && !proxied;
        while let Some(c) = spares.then(|| self.spares.take()).flatten() {
            let Some(bind) = identity else {
                // The client's own bind follows on it.
                c.count_as_own(reserved);
                return Ok(c);
            };
            match bind_on(&c, &self.dsa, bind, self.limits).await {
                Ok(()) => {
                    c.count_as_own(reserved);
                    return Ok(c);
                }
                Err(e) if matches!(e.kind, Kind::BindRefused(_)) => {
                    c.release();
                    return Err(e);
                }
                // Lost meanwhile (the DSA closed it while it was idle):
                // another spare, or a new connection.
                Err(e) if matches!(e.kind, Kind::ConnectionLost { .. }) => c.close(),
                Err(e) => {
                    c.close();
                    return Err(self.bind_failed(e));
                }
            }
        }
        let c = connect_for(
            &self.dsa,
            &self.targets,
            identity,
            self.limits,
            self.tls.as_ref(),
            Some(client),
        )
        .await
        .map_err(|e| self.bind_failed(e))?;
        c.count_as_own(reserved);
        if !proxied {
            c.belongs_to(&self.spares);
        }
        Ok(c)
    }

    /// A client's replayed bind failed with `e`: a DSA that did not answer
    /// it counts a failed probe, as for the client's own bind (architecture.md, "Reads").
    fn bind_failed(&self, e: Error) -> Error {
        if matches!(e.kind, Kind::Timeout { .. }) {
            let why = format!(
                "a replayed bind timed out after {} s",
                self.limits.bind_timeout.as_secs_f32()
            );
            self.dsa.probe_failed(&why, self.limits.fall);
        }
        e
    }

    /// Wait (up to `grace`) for the shared connections' operations to
    /// finish, then close them.
    pub async fn close_when_idle(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        loop {
            let busy = self
                .slots()
                .filter_map(Slot::live)
                .any(|c| c.pending_count() > 0);
            if !busy || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.close();
    }

    /// The shared connections open now (where reads that may be hedged
    /// wait).
    pub fn shared_conns(&self) -> impl Iterator<Item = Arc<Conn>> + '_ {
        self.slots().filter_map(Slot::live)
    }

    /// Close the shared and spare connections (DSA removed or
    /// readdressed).
    pub fn close(&self) {
        self.spares.close();
        for s in self.slots() {
            if let Some(c) = s.take() {
                c.close();
            }
        }
    }
}

/// Connect and, when an identity is given, bind as it before returning:
/// the router's connection.
pub(crate) async fn connect_bound(
    dsa: &Arc<DsaState>,
    addrs: &[Target],
    identity: Option<&BindPdu>,
    limits: Limits,
    tls: Option<&crate::proto::tls::DsaTls>,
) -> Result<Arc<Conn>, Error> {
    connect_for(dsa, addrs, identity, limits, tls, None).await
}

/// [`connect_bound`] for the client at `client` (a connection of its
/// own: its address goes in the PROXY header to `--send-proxy-to` DSAs).
pub(crate) async fn connect_for(
    dsa: &Arc<DsaState>,
    addrs: &[Target],
    identity: Option<&BindPdu>,
    limits: Limits,
    tls: Option<&crate::proto::tls::DsaTls>,
    client: Option<std::net::SocketAddr>,
) -> Result<Arc<Conn>, Error> {
    let conn = super::connect::open(dsa.clone(), addrs, limits, tls, client)
        .await
        .map_err(|e| {
            let reason = format!("cannot connect to DSA {}: {e}", dsa.name);
            dsa.passive_down(&reason);
            Error::new(Kind::Unreachable, reason)
        })?;
    if let Some(bind) = identity {
        if let Err(e) = bind_on(&conn, dsa, bind, limits).await {
            conn.close();
            return Err(e);
        }
    }
    Ok(conn)
}

/// Bind `conn` as `bind`.
async fn bind_on(
    conn: &Arc<Conn>,
    dsa: &DsaState,
    bind: &BindPdu,
    limits: Limits,
) -> Result<(), Error> {
    let resp = request(conn, &bind.pdu, limits.bind_timeout).await?;
    let h = frame::header(&resp).map_err(|e| Error::new(Kind::BadResponse, e.to_string()))?;
    let code = response::result_code(&resp, &h).unwrap_or(Code::Other as u8);
    if code == Code::Success as u8 {
        return Ok(());
    }
    Err(Error::new(
        Kind::BindRefused(code),
        format!(
            "DSA {} refused the bind as {}: result {code}",
            dsa.name, bind.dn
        ),
    ))
}

/// Send a PDU on `conn` and wait for its final response, unmodified.
pub(crate) async fn request(
    conn: &Arc<Conn>,
    pdu: &[u8],
    timeout: Duration,
) -> Result<Bytes, Error> {
    let h = frame::header(pdu).map_err(|e| Error::new(Kind::BadResponse, e.to_string()))?;
    let (tx, rx) = oneshot::channel();
    let id = conn
        .submit(
            Pending::new(Sink::Waiter(tx), Op::fixed()),
            pdu,
            &h,
            None,
            |_, _| true,
        )
        .map_err(|_| lost(&conn.dsa.name, "closed"))?;
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(_)) => Err(lost(&conn.dsa.name, "lost")),
        Err(_) => {
            conn.abandon(id);
            Err(Error::new(Kind::Timeout { write: false }, "timed out"))
        }
    }
}

fn lost(dsa: &str, how: &str) -> Error {
    Error::new(
        Kind::ConnectionLost { write: false },
        format!("connection to DSA {dsa} {how}"),
    )
}

/// A simple bind PDU (message ID 1; rewritten when sent).
pub(crate) fn bind_pdu(dn: &str, password: &[u8]) -> BytesMut {
    let msg = LdapMsg {
        msgid: 1,
        op: LdapOp::BindRequest(LdapBindRequest {
            version: 3,
            dn: dn.to_string(),
            cred: LdapBindCred::Simple(String::from_utf8_lossy(password).into_owned()),
        }),
        ctrl: Vec::new(),
    };
    let mut b = BytesMut::new();
    let tag: lber::structure::StructureTag = msg.into();
    let _ = lber::write::encode_into(&mut b, tag);
    b
}

/// A simple bind request, ready to replay: the PDU as the client sent it
/// (or as the router encoded it), password included. Never printed.
/// What a client's connection of its own is for.
#[derive(Clone, Copy)]
pub enum Own<'a> {
    /// The client's bind, sent on it next (a spare may serve).
    ForBind,
    /// The client's simple bind, replayed on it (a spare may serve).
    Replay(&'a BindPdu),
    /// An anonymous client's operations (never a spare: a spare carries
    /// its last client's bind).
    Anonymous,
}

#[derive(Clone)]
pub struct BindPdu {
    pub dn: String,
    pdu: Bytes,
}

impl BindPdu {
    pub fn new(dn: String, pdu: Bytes) -> BindPdu {
        BindPdu { dn, pdu }
    }

    /// The bind request as the client sent it (with its password: never
    /// logged), for a hot upgrade's handover of the session.
    pub fn pdu(&self) -> &Bytes {
        &self.pdu
    }
}

impl std::fmt::Debug for BindPdu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindPdu")
            .field("dn", &self.dn)
            .field("pdu", &"***")
            .finish()
    }
}
