//! The admin HTTP API (axum), served twice:
//!
//! * over TCP (`--admin`, loopback by default): reads for anyone who
//!   reaches it (same-origin only, see [`guard`]), or with a read-only
//!   token (`--admin-read-token`) for those who hold it or the control
//!   token; state changes only with the bearer token (`--admin-token`), so
//!   without one it is read-only;
//! * on the control socket ([`socket`]): everything, for root and the
//!   router's own user (the kernel names the peer); what `ctl` uses.
//!
//! Reads:
//! * `GET /`: the status page; `GET /status`: JSON, each partition with
//!   its DSAs in order; `GET /metrics`: Prometheus text format
//!   ([`exposition`]).
//! * `GET /healthz`, `GET /readyz`: liveness and readiness ([`health`]),
//!   for anyone who reaches the API (no token, no names of clients).
//!
//! State changes (POST):
//! * `/dsas/{name}/disable|drain|enable`: administrative state.
//! * `/shutdown`: drain the router and exit ([`crate::lifecycle::drain`]).
//! * `/upgrade`: hot upgrade to the binary at the router's own path
//!   ([`crate::lifecycle::upgrade`]); a request cannot name another binary.
//! * `/reload`: reload knowledge (validated whole; the old snapshot
//!   stays on error, and the response says why); a reload that takes
//!   the DSAs away only with `?force=true`.
//! * `/reopen-logs`: reopen the access log's file, as on SIGUSR1.

pub mod ctl;
mod ctl_socket;
pub mod exposition;
pub mod guard;
pub mod health;
pub mod socket;
pub mod status;
pub mod status_fields;

use crate::backend::dsa_state::Admin;
use crate::service::context::Context;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::json;
use std::sync::Arc;
use tokio::sync::watch;

pub use exposition::metrics_text;
pub use health::ReadyWhen;

/// Who may do what over TCP, and what `/readyz` asks.
#[derive(Clone, Default)]
pub struct Access {
    /// The token that allows state changes (`--admin-token`).
    pub token: Option<String>,
    /// The token that allows reads only (`--admin-read-token`): with one,
    /// `/status` and `/metrics` need it (or the control token).
    pub read_token: Option<String>,
    pub ready: ReadyWhen,
}

/// Written by hand: the tokens are secrets.
impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("read_token", &self.read_token.as_ref().map(|_| "<set>"))
            .field("ready", &self.ready)
            .finish()
    }
}

impl Access {
    /// Empty tokens are no tokens.
    fn cleaned(self) -> Access {
        Access {
            token: self.token.filter(|t| !t.is_empty()),
            read_token: self.read_token.filter(|t| !t.is_empty()),
            ready: self.ready,
        }
    }

    /// Whether any token guards the API (then it may listen off
    /// loopback: [`guard::exposure`]).
    fn any_token(&self) -> Option<&str> {
        self.token.as_deref().or(self.read_token.as_deref())
    }
}

#[derive(Clone)]
struct App {
    router: Arc<Context>,
    /// Over TCP: the token that allows state changes (none: read-only).
    token: Option<Arc<str>>,
    /// Over TCP: the token that allows reads only.
    read_token: Option<Arc<str>>,
    /// The `Host` values accepted without a token ([`guard`]).
    hosts: Arc<[String]>,
    ready: ReadyWhen,
}

/// The live status page (`GET /`): one embedded HTML file (no outside
/// assets) that polls `/status` and posts to `/dsas/NAME/ACTION` with the
/// token the user enters (without one its buttons say control needs the
/// token or `ctl`). Its
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

/// `/status` names client sessions (addresses, bound DNs): with a token
/// (control or read-only), only for those who hold one (the control
/// socket is checked by its own peer credentials).
async fn get_status(State(app): State<App>, headers: axum::http::HeaderMap) -> Response {
    if let Some(refused) = guard::reader(
        &app,
        &headers,
        "/status needs an admin token (it lists client sessions)",
    ) {
        return refused;
    }
    Json(status::status(&app.router)).into_response()
}

/// `/metrics` holds no names of clients: with a read-only token set, it
/// needs that token (or the control token); else none.
async fn get_metrics(State(app): State<App>, headers: axum::http::HeaderMap) -> Response {
    if app.read_token.is_some() {
        if let Some(refused) = guard::reader(
            &app,
            &headers,
            "/metrics needs the read-only token or the admin token",
        ) {
            return refused;
        }
    }
    let out = metrics_text(&app.router);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn get_readyz(State(app): State<App>) -> Response {
    health::readyz(&app.router, app.ready)
}

async fn post_dsa(
    State(app): State<App>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
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

/// `POST /reload` (`ctl reload`); `?force=true` (`ctl reload --force`)
/// also applies a reload that takes every DSA, or every DSA of a
/// partition in use, away.
async fn post_reload(
    State(app): State<App>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let force = query.as_deref().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "force" | "force=true" | "force=1" | "force=yes"))
    });
    let router = app.router.clone();
    // Reading files is blocking work.
    let result = tokio::task::spawn_blocking(move || router.reload_from_disk_forced(force)).await;
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

/// `POST /reopen-logs` (`ctl reopen-logs`): reopen the access log's
/// file, as on SIGUSR1 (after logrotate moved it); which file, if any.
async fn post_reopen_logs() -> Response {
    let file = crate::observe::access::file();
    crate::observe::access::reopen();
    let message = match &file {
        Some(f) => format!("the access log {} is reopened", f.display()),
        None => "the access log goes to no file: nothing to reopen".to_string(),
    };
    Json(json!({"ok": true, "file": file, "message": message})).into_response()
}

/// `POST /shutdown` (`ctl shutdown`): drain and exit, as on SIGTERM.
async fn post_shutdown(State(app): State<App>) -> Response {
    tracing::info!("admin API: shutdown asked");
    app.router.lifecycle.drain.ask();
    Json(json!({"ok": true, "draining": true})).into_response()
}

/// `POST /upgrade` (`ctl upgrade`): start the binary at the router's own
/// path and hand it the listening sockets and the client sessions
/// ([`crate::lifecycle::upgrade`]); answered once the new process serves (its
/// process id) or refused (why: this router keeps serving). Which binary
/// runs is the router's own choice, never the request's.
async fn post_upgrade(State(app): State<App>) -> Response {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let ask = crate::lifecycle::handover::Ask { reply: Some(reply) };
    tracing::info!("admin API: upgrade asked");
    if app.router.lifecycle.handover.ask(ask).is_err() {
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
            Json(json!({"ok": false, "error": error.to_string()})),
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
    access: Access,
    router: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) -> crate::base::error::Result<std::os::fd::OwnedFd> {
    use crate::base::error::Error;
    let access = access.cleaned();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::config(format!("cannot listen on --admin {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::config(e.to_string()))?;
    guard::exposure(bound, access.any_token())?;
    tracing::info!(
        %addr,
        token = access.token.is_some(),
        read_token = access.read_token.is_some(),
        "admin API listening"
    );
    // A copy of the listening socket, for a hot upgrade to hand over.
    let copy = std::os::fd::AsFd::as_fd(&listener)
        .try_clone_to_owned()
        .map_err(|e| Error::config(format!("--admin {addr}: {e}")))?;
    tokio::spawn(run(listener, addr.to_string(), router, access, shutdown));
    Ok(copy)
}

/// Serve the admin API on `listener` (given as `given` on the command line)
/// until shutdown; an empty token is no token. Without a token `listener`
/// must be on loopback: [`guard::exposure`].
pub async fn run(
    listener: tokio::net::TcpListener,
    given: String,
    router: Arc<Context>,
    access: Access,
    shutdown: watch::Receiver<bool>,
) {
    let access = access.cleaned();
    let hosts = match listener.local_addr() {
        Ok(a) => match guard::exposure(a, access.any_token()) {
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
        token: access.token.map(Arc::from),
        read_token: access.read_token.map(Arc::from),
        hosts: hosts.into(),
        ready: access.ready,
    };
    // State changes need the token over TCP.
    let controls = controls().route_layer(axum::middleware::from_fn_with_state(
        app.clone(),
        guard::control,
    ));
    let svc = reads()
        .merge(controls)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .with_state(app);
    if let Err(e) = axum::serve(listener, svc)
        .with_graceful_shutdown(stopped(drained, shutdown))
        .await
    {
        tracing::error!(error = %e, "admin API stopped");
    }
}

/// The routes that read: the page, `/status`, `/metrics`, `/healthz`,
/// `/readyz`.
fn reads() -> axum::Router<App> {
    axum::Router::new()
        .route("/", get(get_page))
        .route("/status", get(get_status))
        .route("/metrics", get(get_metrics))
        .route("/healthz", get(health::get_healthz))
        .route("/readyz", get(get_readyz))
}

/// The routes that change state.
fn controls() -> axum::Router<App> {
    axum::Router::new()
        .route("/dsas/{name}/{action}", post(post_dsa))
        .route("/reload", post(post_reload))
        .route("/reopen-logs", post(post_reopen_logs))
        .route("/shutdown", post(post_shutdown))
        .route("/upgrade", post(post_upgrade))
}

/// When an API listener stops: up while the router drains (`/status`
/// shows it), down once it ends; after a hot upgrade at once (the new
/// process answers).
async fn stopped(router: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.changed().await;
    if router.lifecycle.handover.exporting().is_none() {
        router.lifecycle.drain.ended().await;
    }
}

/// Serve the whole API on the control socket of `setting` (a task) until
/// shutdown: every request from root or the router's own user, none from
/// anyone else ([`socket`]). `takeover`: a hot upgrade's new process,
/// which replaces the old one's socket. Without a socket (`none`, or the
/// default's directory missing) state changes need the token over TCP.
pub async fn start_control(
    setting: &socket::Setting,
    takeover: bool,
    router: Arc<Context>,
    ready: ReadyWhen,
    shutdown: watch::Receiver<bool>,
) -> crate::base::error::Result<()> {
    use crate::base::error::Error;
    let Some(path) = setting.path() else {
        return Ok(());
    };
    let own = socket::own_uid().map_err(|e| {
        Error::config(format!(
            "control socket: cannot learn this process's user: {e}"
        ))
    })?;
    let default = matches!(setting, socket::Setting::Default(_));
    let user_dir = socket::user_dir();
    let made = match path.parent() {
        Some(dir) if default && dir == user_dir => socket::make_user_dir(dir, own),
        _ => Ok(()),
    };
    let bound = made.and_then(|()| socket::bind(path, takeover));
    let bound = match bound {
        Ok(b) => b,
        Err(e) if default => {
            tracing::warn!("no control socket: {e}; state changes need --admin-token (or --control-socket PATH)");
            return Ok(());
        }
        Err(e) => return Err(Error::config(e.to_string())),
    };
    tracing::info!(socket = %path.display(), "control socket listening (root and this process's user)");
    tokio::spawn(serve_control(bound, own, router, ready, shutdown));
    Ok(())
}

/// The control socket's server.
async fn serve_control(
    bound: (tokio::net::UnixListener, socket::Placed),
    own: u32,
    router: Arc<Context>,
    ready: ReadyWhen,
    shutdown: watch::Receiver<bool>,
) {
    let app = App {
        router: router.clone(),
        token: None,
        read_token: None,
        hosts: Arc::from(Vec::new()),
        ready,
    };
    let svc = reads()
        .merge(controls())
        .layer(axum::middleware::from_fn_with_state(
            own,
            socket::check_peer,
        ))
        .with_state(app)
        .into_make_service_with_connect_info::<socket::Peer>();
    let (listener, placed) = bound;
    let serving = axum::serve(listener, svc)
        .with_graceful_shutdown(stopped(router, shutdown))
        .await;
    if let Err(e) = serving {
        tracing::error!(error = %e, "control socket stopped");
    }
    placed.remove();
}
