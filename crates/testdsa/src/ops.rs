//! Operation dispatch and handlers: bind, compare, the write operations and
//! extended operations, plus identity, proxied authorization and access
//! control. Search lives in [`super::search`].
//!
//! Each operation works on a snapshot of the connection's identity (after
//! proxied authorization) and sends its response through the connection's
//! bounded response channel unless it was abandoned.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{
    LdapBindCred, LdapBindRequest, LdapBindResponse, LdapCompareRequest, LdapExtendedRequest,
    LdapExtendedResponse, LdapMsg, LdapOp, LdapResult, LdapResultCode,
};
use tokio::sync::mpsc;
use tracing::debug;

use super::directory::{Entry, OpError, Store};
use super::names::{dn_key, Key};
use super::search::{self, Paged};
use super::{Directory, Faults, Stats, PROXY_AUTHZ_OID, WHOAMI_OID};

/// What every connection of one server shares.
pub(crate) struct Ctx {
    pub dir: Directory,
    pub faults: Faults,
    pub stats: Stats,
    pub trace: crate::TraceContext,
    pub name: String,
}

/// An authenticated (or proxied) identity; `None` elsewhere means anonymous.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub dn: String,
    pub key: Key,
}

/// Per-connection state.
#[derive(Default)]
pub(crate) struct Conn {
    bound: Mutex<Option<Identity>>,
    pub paged: Mutex<HashMap<u64, Paged>>,
    pub next_cookie: AtomicU64,
    /// Abandon flags of the operations in progress, by message id.
    pub running: Mutex<HashMap<i32, Arc<AtomicBool>>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) type Tx = mpsc::Sender<LdapMsg>;

pub(crate) fn reply(msgid: i32, op: LdapOp) -> LdapMsg {
    LdapMsg {
        msgid,
        op,
        ctrl: Vec::new(),
    }
}

impl Ctx {
    pub(crate) fn result(&self, code: LdapResultCode) -> LdapResult {
        LdapResult {
            code,
            matcheddn: String::new(),
            message: format!("testdsa {}", self.name),
            referral: Vec::new(),
        }
    }

    pub(crate) fn ok(&self) -> LdapResult {
        self.result(LdapResultCode::Success)
    }

    pub(crate) fn err(&self, e: OpError) -> LdapResult {
        LdapResult {
            code: e.code,
            matcheddn: e.matched,
            message: format!("testdsa {}: {}", self.name, e.msg),
            referral: Vec::new(),
        }
    }

    fn outcome(&self, r: Result<(), OpError>) -> LdapResult {
        r.map_or_else(|e| self.err(e), |()| self.ok())
    }
}

/// True when `ident` may see `entry`: entries with `testAclReaders` are
/// visible only to the listed DNs.
pub(crate) fn visible(entry: &Entry, ident: Option<&Identity>) -> bool {
    match entry.get("testAclReaders") {
        None => true,
        Some(readers) => ident.is_some_and(|id| {
            readers
                .vals
                .iter()
                .any(|v| dn_key(&String::from_utf8_lossy(v)).is_ok_and(|k| k == id.key))
        }),
    }
}

/// The visible entry at `key`, or noSuchObject.
pub(crate) fn visible_entry<'a>(
    s: &'a Store,
    key: &Key,
    dn: &str,
    ident: Option<&Identity>,
) -> Result<&'a Entry, OpError> {
    s.entries
        .get(key)
        .filter(|e| visible(e, ident))
        .ok_or_else(|| s.no_such_object(key, dn))
}

pub(crate) fn parse_key(dn: &str) -> Result<Key, OpError> {
    dn_key(dn).map_err(|e| OpError::new(LdapResultCode::InvalidDNSyntax, e))
}

/// Simple bind. The connection becomes anonymous first; a successful bind
/// sets its identity to the entry's DN.
pub(crate) fn bind(ctx: &Ctx, conn: &Conn, req: LdapBindRequest) -> LdapOp {
    *lock(&conn.bound) = None;
    let res = (|| {
        if req.version != 3 {
            return Err(OpError::new(
                LdapResultCode::ProtocolError,
                "only LDAPv3 is supported",
            ));
        }
        let LdapBindCred::Simple(pw) = req.cred else {
            return Err(OpError::new(
                LdapResultCode::AuthMethodNotSupported,
                "only simple bind",
            ));
        };
        let invalid = || OpError::new(LdapResultCode::InvalidCredentials, "invalid credentials");
        if req.dn.trim().is_empty() {
            return if pw.is_empty() {
                Ok(None)
            } else {
                Err(invalid())
            };
        }
        if pw.is_empty() {
            return Err(OpError::new(
                LdapResultCode::UnwillingToPerform,
                "unauthenticated bind",
            ));
        }
        let key = parse_key(&req.dn)?;
        let dn = ctx.dir.read(|s| {
            s.entries
                .get(&key)
                .filter(|e| {
                    e.get("userPassword")
                        .is_some_and(|a| a.vals.iter().any(|v| v == pw.as_bytes()))
                })
                .map(|e| e.dn.clone())
        });
        dn.map(|dn| Some(Identity { dn, key })).ok_or_else(invalid)
    })();
    debug!(name = %ctx.name, dn = %req.dn, ok = res.is_ok(), "testdsa bind");
    let res = match res {
        Ok(ident) => {
            *lock(&conn.bound) = ident;
            ctx.ok()
        }
        Err(e) => ctx.err(e),
    };
    LdapOp::BindResponse(LdapBindResponse {
        res,
        saslcreds: None,
    })
}

/// The identity an operation runs as: the bound one, or the one named by a
/// proxied authorization control when the bound user may proxy.
fn effective_identity(
    ctx: &Ctx,
    conn: &Conn,
    ctrl: &[LdapControl],
) -> Result<Option<Identity>, OpError> {
    let bound = lock(&conn.bound).clone();
    let mut ident = bound.clone();
    for c in ctrl {
        let LdapControl::Unknown {
            oid,
            criticality,
            value,
        } = c
        else {
            continue;
        };
        let known = oid == crate::trace_context::TRACE_CONTEXT_OID && ctx.trace.accepted();
        if oid != PROXY_AUTHZ_OID {
            if *criticality && !known {
                return Err(OpError::new(
                    LdapResultCode::UnavailableCriticalExtension,
                    format!("unsupported critical control {oid}"),
                ));
            }
            continue;
        }
        if !criticality {
            return Err(OpError::new(
                LdapResultCode::ProtocolError,
                "proxied authorization must be critical",
            ));
        }
        let denied = |m: String| OpError::new(LdapResultCode::AuthorizationError, m);
        let may_proxy = bound.as_ref().is_some_and(|b| {
            ctx.dir.read(|s| {
                s.entries
                    .get(&b.key)
                    .is_some_and(|e| e.has_value("testAclProxy", b"TRUE"))
            })
        });
        if !may_proxy {
            let who = bound.as_ref().map_or("anonymous", |b| b.dn.as_str());
            return Err(denied(format!("{who} may not use proxied authorization")));
        }
        let authz = String::from_utf8_lossy(value.as_deref().unwrap_or_default()).into_owned();
        ident = if authz.is_empty() {
            None
        } else if let Some(dn) = authz
            .strip_prefix("dn:")
            .or_else(|| authz.strip_prefix("DN:"))
        {
            if dn.trim().is_empty() {
                None
            } else {
                let key =
                    dn_key(dn).map_err(|e| denied(format!("invalid proxied identity: {e}")))?;
                let dn = ctx.dir.read(|s| s.entries.get(&key).map(|e| e.dn.clone()));
                let dn = dn.ok_or_else(|| denied(format!("unknown proxied identity {authz:?}")))?;
                Some(Identity { dn, key })
            }
        } else {
            return Err(denied(format!(
                "unsupported authorization identity {authz:?}"
            )));
        };
    }
    Ok(ident)
}

/// The response PDU carrying `res` for a request, for early failures.
fn error_response(op: &LdapOp, res: LdapResult) -> Option<LdapOp> {
    Some(match op {
        LdapOp::SearchRequest(_) => LdapOp::SearchResultDone(res),
        LdapOp::ModifyRequest(_) => LdapOp::ModifyResponse(res),
        LdapOp::AddRequest(_) => LdapOp::AddResponse(res),
        LdapOp::DelRequest(_) => LdapOp::DelResponse(res),
        LdapOp::ModifyDNRequest(_) => LdapOp::ModifyDNResponse(res),
        LdapOp::CompareRequest(_) => LdapOp::CompareResult(res),
        LdapOp::ExtendedRequest(_) => LdapOp::ExtendedResponse(LdapExtendedResponse {
            res,
            name: None,
            value: None,
        }),
        _ => return None,
    })
}

/// Runs one (non-bind) operation and sends its response(s), unless it is
/// abandoned first.
pub(crate) async fn run(
    ctx: Arc<Ctx>,
    conn: Arc<Conn>,
    msg: LdapMsg,
    tx: Tx,
    cancel: Arc<AtomicBool>,
) {
    let LdapMsg { msgid, op, ctrl } = msg;
    let _running = Running(&conn, msgid);
    let delay = ctx.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(code) = ctx.faults.answer() {
        if let Some(resp) = error_response(&op, ctx.result(code)) {
            let _ = tx.send(reply(msgid, resp)).await;
        }
        return;
    }
    ctx.trace.record(&ctrl);
    let ident = match effective_identity(&ctx, &conn, &ctrl) {
        Ok(ident) => ident,
        Err(e) => {
            debug!(name = %ctx.name, msgid, msg = %e.msg, "testdsa control rejected");
            if let Some(resp) = error_response(&op, ctx.err(e)) {
                let _ = tx.send(reply(msgid, resp)).await;
            }
            return;
        }
    };
    let id = ident.as_ref();
    let resp = match op {
        LdapOp::SearchRequest(req) => {
            search::search(&ctx, &conn, msgid, req, &ctrl, id, &tx, &cancel).await;
            None
        }
        LdapOp::CompareRequest(req) => Some(LdapOp::CompareResult(compare(&ctx, &req, id))),
        LdapOp::AddRequest(req) => {
            debug!(name = %ctx.name, dn = %req.dn, "testdsa add");
            Some(LdapOp::AddResponse(
                ctx.outcome(ctx.dir.write(|s| s.add(&req.dn, req.attributes))),
            ))
        }
        LdapOp::ModifyRequest(req) => {
            debug!(name = %ctx.name, dn = %req.dn, "testdsa modify");
            let r = ctx.dir.write(|s| {
                visible_entry(s, &parse_key(&req.dn)?, &req.dn, id)?;
                s.modify(&req.dn, req.changes)
            });
            Some(LdapOp::ModifyResponse(ctx.outcome(r)))
        }
        LdapOp::DelRequest(dn) => {
            debug!(name = %ctx.name, %dn, "testdsa delete");
            let r = ctx.dir.write(|s| {
                visible_entry(s, &parse_key(&dn)?, &dn, id)?;
                s.delete(&dn)
            });
            Some(LdapOp::DelResponse(ctx.outcome(r)))
        }
        LdapOp::ModifyDNRequest(req) => {
            debug!(name = %ctx.name, dn = %req.dn, newrdn = %req.newrdn, "testdsa modify DN");
            let r = ctx.dir.write(|s| {
                visible_entry(s, &parse_key(&req.dn)?, &req.dn, id)?;
                s.modify_dn(
                    &req.dn,
                    &req.newrdn,
                    req.deleteoldrdn,
                    req.new_superior.as_deref(),
                )
            });
            Some(LdapOp::ModifyDNResponse(ctx.outcome(r.map(|_| ()))))
        }
        LdapOp::ExtendedRequest(req) => Some(extended(&ctx, &req, id)),
        other => {
            debug!(name = %ctx.name, msgid, ?other, "testdsa ignoring unexpected PDU");
            None
        }
    };
    if let Some(resp) = resp {
        if !cancel.load(Ordering::Relaxed) {
            let _ = tx.send(reply(msgid, resp)).await;
        }
    }
}

/// Removes an operation's abandon flag when it ends (or is aborted).
struct Running<'a>(&'a Conn, i32);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.0.running).remove(&self.1);
    }
}

fn compare(ctx: &Ctx, req: &LdapCompareRequest, ident: Option<&Identity>) -> LdapResult {
    debug!(name = %ctx.name, dn = %req.dn, atype = %req.atype, "testdsa compare");
    let r = parse_key(&req.dn).and_then(|key| {
        ctx.dir.read(|s| {
            let e = visible_entry(s, &key, &req.dn, ident)?;
            if e.get(&req.atype).is_none() {
                return Err(OpError::new(
                    LdapResultCode::NoSuchAttribute,
                    format!("no attribute {}", req.atype),
                ));
            }
            Ok(e.has_value(&req.atype, &req.val))
        })
    });
    match r {
        Ok(true) => ctx.result(LdapResultCode::CompareTrue),
        Ok(false) => ctx.result(LdapResultCode::CompareFalse),
        Err(e) => ctx.err(e),
    }
}

fn extended(ctx: &Ctx, req: &LdapExtendedRequest, ident: Option<&Identity>) -> LdapOp {
    debug!(name = %ctx.name, oid = %req.name, "testdsa extended");
    let (res, value) = if req.name == WHOAMI_OID {
        let authz = ident.map_or(String::new(), |i| format!("dn:{}", i.dn));
        (ctx.ok(), Some(authz.into_bytes()))
    } else {
        let e = OpError::new(
            LdapResultCode::ProtocolError,
            format!("unsupported extended operation {}", req.name),
        );
        (ctx.err(e), None)
    };
    LdapOp::ExtendedResponse(LdapExtendedResponse {
        res,
        name: None,
        value,
    })
}
