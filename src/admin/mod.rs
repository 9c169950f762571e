//! The admin HTTP API (axum), on loopback by default, optionally behind a
//! bearer token (without one, loopback only and same-origin only: see
//! [`guard`]):
//!
//! * `GET /status`: JSON, each partition with its DSAs in order.
//! * `GET /metrics`: Prometheus text format.
//! * `POST /dsas/{name}/disable|drain|enable`: administrative state.
//! * `POST /shutdown`: drain the router and exit ([`crate::drain`]).
//! * `POST /upgrade[?binary=PATH]`: hot upgrade ([`crate::upgrade`]).
//! * `POST /reload`: reload knowledge (validated whole; the old snapshot
//!   stays on error, and the response says why).

pub mod ctl;
pub mod guard;
pub mod status;

use crate::context::Context;
use crate::dsa_state::Admin;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::json;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone)]
struct App {
    router: Arc<Context>,
    token: Option<Arc<str>>,
    /// The `Host` values accepted without a token ([`guard`]).
    hosts: Arc<[String]>,
}

fn authorized(app: &App, headers: &HeaderMap) -> bool {
    match &app.token {
        None => true,
        Some(t) => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| same(v.as_bytes(), t.as_bytes())),
    }
}

/// Byte strings compared in time that depends on their lengths only, not
/// on where they differ (the admin token).
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

fn denied() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"ok": false, "error": "missing or wrong bearer token"})),
    )
        .into_response()
}

/// The live status page (`GET /`): one embedded HTML file (no outside
/// assets) that polls `/status` and posts to `/dsas/NAME/ACTION` with the
/// token the user enters. Served without the token: it holds no data. Its
/// script and style run under the Content-Security-Policy of [`guard`].
async fn get_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        guard::PAGE,
    )
        .into_response()
}

async fn get_status(State(app): State<App>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return denied();
    }
    Json(status::status(&app.router)).into_response()
}

/// The whole `/metrics` exposition (Prometheus text format).
pub fn metrics_text(router: &crate::context::Context) -> String {
    let mut out = String::with_capacity(8192);
    router.metrics.render(&mut out);
    if let Some(w) = router.workers.get() {
        w.render(&mut out);
    }
    status::dsa_metrics(router, &mut out);
    router.failed_binds.render(&mut out);
    router.policies.render(&mut out);
    let budget = &router.response_memory;
    out.push_str(&format!(
        "# HELP dsa_router_queued_response_bytes Responses queued for clients that do not keep up (--max-response-memory).\n\
         # TYPE dsa_router_queued_response_bytes gauge\n\
         dsa_router_queued_response_bytes {}\n\
         # HELP dsa_router_response_memory_disconnects_total Clients disconnected because the responses queued for all clients reached --max-response-memory.\n\
         # TYPE dsa_router_response_memory_disconnects_total counter\n\
         dsa_router_response_memory_disconnects_total {}\n",
        budget.used(),
        budget.refused()
    ));
    out
}

async fn get_metrics(State(app): State<App>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return denied();
    }
    let out = metrics_text(&app.router);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn post_dsa(
    State(app): State<App>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    if !authorized(&app, &headers) {
        return denied();
    }
    let admin = match action.as_str() {
        "disable" => Admin::Disabled,
        "drain" => Admin::Draining,
        "enable" => Admin::Enabled,
        other => {
            return (StatusCode::NOT_FOUND, Json(json!({"ok": false, "error": format!("unknown action {other}; use disable, drain or enable")})))
                .into_response()
        }
    };
    let routing = app.router.routing();
    let Some(i) = routing.snap.dsa_index(&name) else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"ok": false, "error": format!("no DSA named {name}")})),
        )
            .into_response();
    };
    let st = &routing.states.0[i];
    st.set_admin(admin);
    tracing::info!(dsa = %st.name, action = %action, "administrative state changed");
    Json(json!({"ok": true, "dsa": st.name, "state": st.status().as_str(), "in_flight": st.in_flight()})).into_response()
}

async fn post_reload(State(app): State<App>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return denied();
    }
    let router = app.router.clone();
    // Reading files is blocking work.
    let result = tokio::task::spawn_blocking(move || router.reload_from_disk()).await;
    match result {
        Ok(Ok(m)) => Json(json!({"ok": true, "message": m})).into_response(),
        Ok(Err(e)) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"ok": false, "error": e.to_string()})),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"ok": false, "error": e.to_string()})),
        )
            .into_response(),
    }
}

/// `POST /shutdown` (`ctl shutdown`): drain and exit, as on SIGTERM.
async fn post_shutdown(State(app): State<App>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return denied();
    }
    tracing::info!("admin API: shutdown asked");
    app.router.drain.ask();
    Json(json!({"ok": true, "draining": true})).into_response()
}

/// `POST /upgrade[?binary=PATH]` (`ctl upgrade`, issue 39): start the new
/// binary (default: the router's own) and hand it the listening sockets and
/// the client sessions ([`crate::upgrade`]); answered once the new process
/// serves (its process id) or refused (why: this router keeps serving).
async fn post_upgrade(
    State(app): State<App>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    if !authorized(&app, &headers) {
        return denied();
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    let ask = crate::handover::Ask {
        binary: q.get("binary").map(std::path::PathBuf::from),
        reply: Some(reply),
    };
    tracing::info!(binary = ?ask.binary, "admin API: upgrade asked");
    if app.router.handover.ask(ask).is_err() {
        let error = "an upgrade is already in progress";
        return (
            StatusCode::CONFLICT,
            Json(json!({"ok": false, "error": error})),
        )
            .into_response();
    }
    match answer.await {
        Ok(Ok(u)) => Json(json!({"ok": true, "pid": u.pid, "binary": u.binary})).into_response(),
        Ok(Err(error)) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"ok": false, "error": error})),
        )
            .into_response(),
        Err(_) => {
            let error = "the router is shutting down";
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"ok": false, "error": error})),
            )
                .into_response()
        }
    }
}

/// Bind `--admin ADDR` and serve the API there (a task) until shutdown.
/// Without a token an address off loopback is an error (the name resolved
/// to loopback before start, [`guard::admin_flag`]; the bound address is
/// what counts).
pub async fn start(
    addr: &str,
    token: Option<String>,
    router: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) -> crate::error::Result<std::os::fd::OwnedFd> {
    use crate::error::Error;
    let token = token.filter(|t| !t.is_empty());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::config(format!("cannot listen on --admin {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::config(e.to_string()))?;
    guard::exposure(bound, token.as_deref()).map_err(Error::config)?;
    tracing::info!(%addr, token = token.is_some(), "admin API listening");
    // A copy of the listening socket, for a hot upgrade to hand over.
    let copy = std::os::fd::AsFd::as_fd(&listener)
        .try_clone_to_owned()
        .map_err(|e| Error::config(format!("--admin {addr}: {e}")))?;
    tokio::spawn(run(listener, addr.to_string(), router, token, shutdown));
    Ok(copy)
}

/// Serve the admin API on `listener` (given as `given` on the command line)
/// until shutdown; an empty token is no token. Without a token `listener`
/// must be on loopback: [`guard::exposure`].
pub async fn run(
    listener: tokio::net::TcpListener,
    given: String,
    router: Arc<Context>,
    token: Option<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let token = token.filter(|t| !t.is_empty());
    let hosts = match listener.local_addr() {
        Ok(a) => match guard::exposure(a, token.as_deref()) {
            Ok(()) => guard::hosts(a, &given),
            Err(e) => {
                tracing::error!("admin API not started: {e}");
                return;
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "admin API not started");
            return;
        }
    };
    let drained = router.clone();
    let app = App {
        router,
        token: token.map(Arc::from),
        hosts: hosts.into(),
    };
    let svc = axum::Router::new()
        .route("/", get(get_page))
        .route("/status", get(get_status))
        .route("/metrics", get(get_metrics))
        .route("/dsas/{name}/{action}", post(post_dsa))
        .route("/reload", post(post_reload))
        .route("/shutdown", post(post_shutdown))
        .route("/upgrade", post(post_upgrade))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .with_state(app);
    // Up while the router drains (`/status` shows it), down once it ends;
    // after a hot upgrade at once: the new process answers on the socket.
    let stop = async move {
        let _ = shutdown.changed().await;
        if drained.handover.exporting().is_none() {
            drained.drain.ended().await;
        }
    };
    if let Err(e) = axum::serve(listener, svc)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "admin API stopped");
    }
}

#[cfg(test)]
mod token_tests {
    #[test]
    fn tokens_compare_equal_only_when_equal() {
        let rows: [(&[u8], &[u8], bool); 5] = [
            (b"secret", b"secret", true),
            (b"secret", b"secreT", false),
            (b"secret", b"secret2", false),
            (b"", b"", true),
            (b"s", b"", false),
        ];
        for (a, b, want) in rows {
            assert_eq!(super::same(a, b), want, "{a:?} {b:?}");
        }
    }
}
