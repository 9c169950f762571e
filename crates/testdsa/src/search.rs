//! Search: the root DSE, scope and filter evaluation over the store, size
//! limits, simple paged results (RFC 2696) and streaming with abandon.
//!
//! The matching keys are collected under the read lock; entries are then
//! built in chunks (re-taking the lock per chunk) and sent one at a time
//! through the connection's bounded response channel, checking the abandon
//! flag before each one. A paged search keeps its remaining keys in the
//! connection state under a numeric cookie.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{
    LdapMsg, LdapOp, LdapResult, LdapResultCode, LdapSearchRequest, LdapSearchScope,
};
use tracing::debug;

use super::directory::{Entry, OpError, Store};
use super::filter::{matches, Selection};
use super::names::Key;
use super::ops::{lock, parse_key, reply, visible, visible_entry, Conn, Ctx, Identity, Tx};
use super::{PAGED_RESULTS_OID, PROXY_AUTHZ_OID, WHOAMI_OID};

/// The remaining results of a paged search.
pub(crate) struct Paged {
    keys: VecDeque<Key>,
    total: usize,
    truncated: bool,
}

/// The root DSE, built from the current naming contexts.
fn root_dse(ctx: &Ctx) -> Entry {
    let mut e = Entry::new("");
    let mut add = |a: &str, v: &str| {
        e.add_value(a, v.as_bytes().to_vec());
    };
    add("objectClass", "top");
    for nc in ctx.dir.read(|s| {
        s.top_level()
            .iter()
            .map(|e| e.dn.clone())
            .collect::<Vec<_>>()
    }) {
        add("namingContexts", &nc);
    }
    add("supportedLDAPVersion", "3");
    add("supportedControl", PROXY_AUTHZ_OID);
    add("supportedControl", PAGED_RESULTS_OID);
    if ctx.trace.accepted() {
        add("supportedControl", crate::trace_context::TRACE_CONTEXT_OID);
    }
    add("supportedExtension", WHOAMI_OID);
    add("vendorName", "dsa-router testdsa");
    add("testDsaName", &ctx.name);
    e
}

/// The keys of the visible entries in scope that match the filter.
fn candidates(
    s: &Store,
    req: &LdapSearchRequest,
    base: &Key,
    ident: Option<&Identity>,
) -> Result<Vec<Key>, OpError> {
    if !base.is_empty() {
        visible_entry(s, base, &req.base, ident)?;
    }
    let depth = base.len();
    let mut top: Option<&Key> = None;
    let mut keys = Vec::new();
    for (k, e) in s.subtree(base) {
        let in_scope = match req.scope {
            LdapSearchScope::Base => k.len() == depth,
            // Below the root, "one level" means the top-level entries.
            LdapSearchScope::OneLevel if depth == 0 => {
                let below_top = top.is_some_and(|t| k.starts_with(t));
                if !below_top {
                    top = Some(k);
                }
                !below_top
            }
            LdapSearchScope::OneLevel => k.len() == depth + 1,
            LdapSearchScope::Subtree => true,
            LdapSearchScope::Children => k.len() > depth,
        };
        if in_scope && visible(e, ident) && matches(&req.filter, e) {
            keys.push(k.clone());
        }
        if req.scope == LdapSearchScope::Base {
            break;
        }
    }
    Ok(keys)
}

/// Takes the next page of a paged search: `(keys, final code, cookie, total)`.
fn next_page(
    conn: &Conn,
    size: i64,
    cookie: &[u8],
    fresh: impl FnOnce() -> Result<Paged, OpError>,
) -> Result<(Vec<Key>, LdapResultCode, Vec<u8>, usize), OpError> {
    let mut state = if cookie.is_empty() {
        fresh()?
    } else {
        let id = std::str::from_utf8(cookie)
            .ok()
            .and_then(|c| c.parse::<u64>().ok());
        id.and_then(|id| lock(&conn.paged).remove(&id))
            .ok_or_else(|| {
                OpError::new(
                    LdapResultCode::UnwillingToPerform,
                    "unknown paged results cookie",
                )
            })?
    };
    let total = state.total;
    if size <= 0 {
        // A zero page size abandons the paged search.
        return Ok((Vec::new(), LdapResultCode::Success, Vec::new(), total));
    }
    let n = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .min(state.keys.len());
    let page: Vec<Key> = state.keys.drain(..n).collect();
    if state.keys.is_empty() {
        let code = if state.truncated {
            LdapResultCode::SizeLimitExceeded
        } else {
            LdapResultCode::Success
        };
        return Ok((page, code, Vec::new(), total));
    }
    let id = conn.next_cookie.fetch_add(1, Ordering::Relaxed) + 1;
    lock(&conn.paged).insert(id, state);
    Ok((
        page,
        LdapResultCode::Success,
        id.to_string().into_bytes(),
        total,
    ))
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn search(
    ctx: &Ctx,
    conn: &Conn,
    msgid: i32,
    req: LdapSearchRequest,
    ctrl: &[LdapControl],
    ident: Option<&Identity>,
    tx: &Tx,
    cancel: &AtomicBool,
) {
    debug!(name = %ctx.name, msgid, base = %req.base, scope = ?req.scope, "testdsa search");
    let sel = Selection::new(&req.attrs, req.typesonly);
    let done = |res: LdapResult, ctrl: Vec<LdapControl>| LdapMsg {
        msgid,
        op: LdapOp::SearchResultDone(res),
        ctrl,
    };
    if req.base.trim().is_empty() && req.scope == LdapSearchScope::Base {
        let dse = root_dse(ctx);
        if matches(&req.filter, &dse) {
            let entry = reply(msgid, LdapOp::SearchResultEntry(sel.project(&dse)));
            if tx.send(entry).await.is_err() {
                return;
            }
        }
        let _ = tx.send(done(ctx.ok(), Vec::new())).await;
        return;
    }
    let limit = usize::try_from(req.sizelimit)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(usize::MAX);
    let fresh = || {
        let base = parse_key(&req.base)?;
        let mut keys = ctx.dir.read(|s| candidates(s, &req, &base, ident))?;
        let truncated = keys.len() > limit;
        keys.truncate(limit);
        Ok::<_, OpError>((keys, truncated))
    };
    let paged = ctrl.iter().find_map(|c| match c {
        LdapControl::SimplePagedResults { size, cookie } => Some((*size, cookie.as_slice())),
        _ => None,
    });
    let planned = match paged {
        Some((size, cookie)) => next_page(conn, size, cookie, || {
            let (keys, truncated) = fresh()?;
            Ok(Paged {
                total: keys.len(),
                keys: keys.into(),
                truncated,
            })
        })
        .map(|(keys, code, cookie, total)| {
            let size = i64::try_from(total).unwrap_or(i64::MAX);
            (
                keys,
                code,
                vec![LdapControl::SimplePagedResults { size, cookie }],
            )
        }),
        None => fresh().map(|(keys, truncated)| {
            let code = if truncated {
                LdapResultCode::SizeLimitExceeded
            } else {
                LdapResultCode::Success
            };
            (keys, code, Vec::new())
        }),
    };
    let (keys, code, resp_ctrl) = match planned {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(done(ctx.err(e), Vec::new())).await;
            return;
        }
    };
    'send: for chunk in keys.chunks(128) {
        let msgs: Vec<LdapMsg> = ctx.dir.read(|s| {
            chunk
                .iter()
                .filter_map(|k| s.entries.get(k))
                .map(|e| {
                    let e = ctx.faults.misanswer(sel.project(e));
                    reply(msgid, LdapOp::SearchResultEntry(e))
                })
                .collect()
        });
        for m in msgs {
            if cancel.load(Ordering::Relaxed) {
                break 'send;
            }
            if tx.send(m).await.is_err() {
                return;
            }
            ctx.stats.entry_sent();
        }
    }
    let res = match code {
        LdapResultCode::SizeLimitExceeded => ctx.err(OpError::new(code, "size limit exceeded")),
        code => ctx.result(code),
    };
    if cancel.load(Ordering::Relaxed) {
        ctx.stats.search_abandoned();
        debug!(name = %ctx.name, msgid, "testdsa search abandoned");
        return;
    }
    let _ = tx.send(done(res, resp_ctrl)).await;
}
