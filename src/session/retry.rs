//! Transparent retry (spec 3.4, 5): a search or compare that failed before
//! any response reached the client (the DSA's connection died, the DSA went
//! down while the read waited on it, or the read timed out) is re-sent to
//! the next eligible target, within [`MAX_ATTEMPTS`]. Writes are never
//! re-sent once sent. Only reads on shared connections are retried here;
//! reads on a client's own connection fail with a clear error. The
//! per-partition searches of a spanning search are retried alike, until
//! their partition has sent an entry.

use crate::dn::Dn;
use crate::route::{message, select_read, Excluding, Lookup, RouteError};
use crate::router::Router;
use crate::upstream::conn::{Pending, Sink};
use crate::wire::frame::{self, Header};
use crate::wire::response::{self, Code};
use bytes::{Bytes, BytesMut};
use std::sync::Weak;

/// Attempts per read, the first included.
pub const MAX_ATTEMPTS: usize = 3;

/// What a read needs to be sent again.
pub struct Retry {
    pub router: Weak<Router>,
    pub pdu: Bytes,
    pub header: Header,
    /// `dn:...` for proxied authorization on the router's connection;
    /// `None` for an anonymous client.
    pub proxy_dn: Option<String>,
    pub dn: Dn,
    /// Names of the DSAs already tried.
    pub tried: Vec<String>,
}

/// Re-send `p` (whose DSA `failed` let it down) in a task of its own.
pub fn resend(mut p: Pending, failed: &str, why: String) {
    let Some(mut retry) = p.retry.take() else {
        return fail(p, Code::Unavailable, why);
    };
    retry.tried.push(failed.to_string());
    p._guard = None;
    if let Some(m) = &p.metrics {
        m.retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    tokio::spawn(async move {
        let outcome = send_again(&mut p, retry).await;
        if let Err((code, msg)) = outcome {
            fail(p, code, msg);
        }
    });
}

fn fail(p: Pending, code: Code, msg: String) {
    p.record(code.clone() as u8);
    if let Sink::Fan { fan, part } = &p.sink {
        return fan.failed(*part, msg);
    }
    if let Sink::Client { out, msgid } = p.sink {
        let mut b = BytesMut::new();
        response::result(msgid, p.resp_tag, code, "", &msg, &mut b);
        out.finish(msgid);
        let _ = out.deliver(b.freeze());
    }
}

async fn send_again(p: &mut Pending, mut retry: Box<Retry>) -> Result<(), (Code, String)> {
    let unavailable = |m: String| (Code::Unavailable, m);
    let router = retry
        .router
        .upgrade()
        .ok_or_else(|| unavailable("dsa-router: shutting down".into()))?;
    let routing = router.routing();
    let Lookup::Partition(part) = routing.table.lookup(&retry.dn) else {
        return Err((
            Code::NoSuchObject,
            format!("dsa-router: no partition holds {}", retry.dn),
        ));
    };
    let mut races = 0;
    loop {
        if retry.tried.len() >= MAX_ATTEMPTS {
            return Err(unavailable(format!(
                "dsa-router: no answer after {} attempts ({}); {}",
                retry.tried.len(),
                retry.tried.join(", "),
                message::unavailable(part, &routing.snap, &routing.states)
            )));
        }
        let tried: Vec<usize> = retry
            .tried
            .iter()
            .filter_map(|n| routing.snap.dsa_index(n))
            .collect();
        let view = Excluding {
            inner: &routing.states,
            tried: &tried,
        };
        let dsa = match select_read(part, &view, part.tick()) {
            Ok(c) => c.dsa,
            Err(RouteError::Unavailable) => {
                return Err(unavailable(message::unavailable(
                    part,
                    &routing.snap,
                    &view,
                )))
            }
            Err(RouteError::Busy { group }) => {
                return Err((Code::Busy, message::busy(part, group, &routing.snap, &view)))
            }
        };
        let Some(guard) = routing.states.0[dsa].try_begin() else {
            races += 1;
            if races > 8 {
                return Err((
                    Code::Busy,
                    message::concurrency(&[routing.snap.dsas[dsa].name.as_str()]),
                ));
            }
            continue;
        };
        let pool = routing.pools[dsa].clone();
        let name = routing.snap.dsas[dsa].name.clone();
        if retry.proxy_dn.is_some() && !pool.proxies() {
            retry.tried.push(name);
            continue;
        }
        let conn = match pool.shared(retry.proxy_dn.is_some()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(dsa = %name, error = %e, "retry target unreachable");
                retry.tried.push(name);
                continue;
            }
        };
        let proxy = retry.proxy_dn.as_deref().map(frame::proxy_authz_control);
        let (pdu, header) = (retry.pdu.clone(), retry.header);
        tracing::info!(dsa = %name, tried = ?retry.tried, "re-sending a read to the next target");
        let sink = match &p.sink {
            Sink::Client { out, msgid } => Sink::Client {
                out: out.clone(),
                msgid: *msgid,
            },
            Sink::Fan { fan, part } => Sink::Fan {
                fan: fan.clone(),
                part: *part,
            },
            _ => return Ok(()),
        };
        let moved = Pending {
            sink,
            resp_tag: p.resp_tag,
            is_write: false,
            started: p.started,
            log: p.log.take(),
            delivered: false,
            retry: Some(retry),
            hold: p.hold,
            held: Vec::new(),
            op: p.op,
            metrics: p.metrics.clone(),
            _guard: Some(guard),
        };
        let Some(id) = conn.register(moved) else {
            return Err(unavailable(format!(
                "dsa-router: connection to DSA {name} closed"
            )));
        };
        match &p.sink {
            Sink::Client { out, msgid } => out.track(*msgid, &conn, id),
            // The spanning search ended meanwhile.
            Sink::Fan { fan, part } if !fan.running(*part, &conn, id) => {
                conn.forget(id);
                p.sink = Sink::Detached;
                return Ok(());
            }
            _ => {}
        }
        let mut b = BytesMut::with_capacity(pdu.len() + 64);
        frame::rewrite(&pdu, &header, id, proxy.as_deref(), &mut b);
        conn.send(b.freeze());
        // The pending operation now lives on the new connection; make the
        // caller's copy inert.
        p.sink = Sink::Detached;
        return Ok(());
    }
}
