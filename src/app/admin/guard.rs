//! What keeps other local users, web pages and other machines from
//! changing the router through the admin API over TCP.
//!
//! State changes (every POST) need `Authorization: Bearer TOKEN`
//! (`--admin-token`), which no other site or local account has
//! (`control`); without a token the TCP API is read-only, and control
//! goes through the control socket (`ctl`, [`super::socket`]). Anyone who
//! can connect to a loopback port is any local user: a header or an
//! address is no credential.
//!
//! Reads need no token (Prometheus holds no key that could stop the
//! router) unless a read-only token is set (`--admin-read-token`): then
//! `/status` and `/metrics` need it or the control token, and the read-only
//! token is refused (403) for every state change (`reader`, `control`).
//! `/healthz` and `/readyz` never need one. A request without a token must
//! come from a page of the API's own:
//! * a request's `Host` must name the address it listens on
//!   (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`, the `--admin`
//!   address as given, or any IP address with the port): a page on another
//!   site whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own
//!   name and is refused;
//! * an `Origin`, when sent, must be `http://` and one of those.
//!
//! Without a token the API listens on loopback only ([`exposure`] refuses
//! anything else at start). Every response, refused or not, carries the
//! headers of `secure`: a Content-Security-Policy that lets the page run
//! its own script and style only (by hash) and be framed by nobody.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::OnceLock;

/// The status page.
pub(super) const PAGE: &str = include_str!("page.html");

/// An admin API without a token on an address off loopback (`--admin`
/// as given, or the address bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposed(pub String);

impl std::fmt::Display for Exposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--admin {} is not a loopback address and the admin API has no token: \
             keep --admin on 127.0.0.1 or [::1], or set --admin-token (or \
             $DSA_ROUTER_ADMIN_TOKEN) to control the router from other machines (then \
             /status and /metrics are readable by whoever reaches the port: a firewall decides), \
             or --admin-read-token (or $DSA_ROUTER_ADMIN_READ_TOKEN) to let other machines \
             read /status and /metrics with it",
            self.0
        )
    }
}

impl std::error::Error for Exposed {}

/// Refused at start: a configuration error.
impl From<Exposed> for crate::base::error::Error {
    fn from(e: Exposed) -> crate::base::error::Error {
        crate::base::error::Error::config(e.to_string())
    }
}

/// Whether an admin API on `addr` may start: without a token, only on
/// loopback.
pub fn exposure(addr: SocketAddr, token: Option<&str>) -> Result<(), Exposed> {
    if token.is_some() || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(Exposed(addr.to_string()))
}

/// Whether `--admin ADDR` may start (before anything listens): every
/// address the name resolves to is loopback, or the API has a token. A
/// name that does not resolve is left to the bind to report.
pub fn admin_flag(addr: &str, token: Option<&str>) -> Result<(), Exposed> {
    use std::net::ToSocketAddrs;
    if token.is_some() {
        return Ok(());
    }
    match addr.to_socket_addrs() {
        Ok(addrs) => addrs
            .into_iter()
            .try_for_each(|a| exposure(a, None).map_err(|_| Exposed(addr.to_string()))),
        Err(_) => Ok(()),
    }
}

/// The `Host` values (lower case) of an API listening on `local`, given
/// as `given` on the command line.
pub(super) fn hosts(local: SocketAddr, given: &str) -> Vec<String> {
    let port = local.port();
    let mut names = vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "[::1]".to_string(),
        match local {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        },
    ];
    if let Some((host, p)) = given.rsplit_once(':') {
        if p.parse::<u16>().is_ok() {
            names.push(host.to_ascii_lowercase());
        }
    }
    let mut out: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
    // A browser leaves out the default port.
    if port == 80 {
        out.extend(names);
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `host` (lower case) names this API: one of `hosts`, or an IP
/// address with the API's port (no DNS name: nothing to rebind).
fn own_host(hosts: &[String], host: &str) -> bool {
    if hosts.iter().any(|h| h == host) {
        return true;
    }
    let port = hosts
        .first()
        .and_then(|h| h.rsplit_once(':'))
        .map(|(_, p)| p);
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    let ip = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .map_or_else(
            || name.parse::<std::net::Ipv4Addr>().is_ok(),
            |n| n.parse::<std::net::Ipv6Addr>().is_ok(),
        );
    ip && Some(p) == port
}

/// Why a request without the token is refused, if it is.
fn refusal(hosts: &[String], headers: &HeaderMap) -> Option<String> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    let Some(host) = host.filter(|h| own_host(hosts, h)) else {
        return Some(format!(
            "the Host header does not name this admin API (it answers {}; set --admin-token to reach it by other names)",
            hosts.join(", ")
        ));
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = origin
            .to_str()
            .ok()
            .and_then(|o| {
                o.to_ascii_lowercase()
                    .strip_prefix("http://")
                    .map(String::from)
            })
            .is_some_and(|o| own_host(hosts, &o));
        if !same {
            return Some(format!(
                "cross-origin request refused: Origin {} is not http://{host}",
                String::from_utf8_lossy(origin.as_bytes())
            ));
        }
    }
    None
}

/// Whether `headers` carry the API's token (`Authorization: Bearer`).
pub(super) fn authorized(token: Option<&str>, headers: &HeaderMap) -> bool {
    token.is_some_and(|t| {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| same(v.as_bytes(), t.as_bytes()))
    })
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

/// Refuses what [`refusal`] says (a request without the token) and adds
/// the headers of [`secure`] to every response.
pub(super) async fn guard(State(app): State<super::App>, req: Request, next: Next) -> Response {
    let refused = if authorized(app.token.as_deref(), req.headers())
        || authorized(app.read_token.as_deref(), req.headers())
    {
        None
    } else {
        refusal(&app.hosts, req.headers())
    };
    let mut resp = match refused {
        Some(why) => {
            tracing::warn!(method = %req.method(), uri = %req.uri(), reason = %why, "admin request refused");
            (
                StatusCode::FORBIDDEN,
                Json(json!({"ok": false, "error": why})),
            )
                .into_response()
        }
        None => next.run(req).await,
    };
    secure(resp.headers_mut());
    resp
}

/// Allows a state change over TCP only with the token: without one
/// configured the TCP API is read-only (403); with one, a request without
/// it gets 401.
pub(super) async fn control(State(app): State<super::App>, req: Request, next: Next) -> Response {
    if authorized(app.token.as_deref(), req.headers()) {
        return next.run(req).await;
    }
    let read_only = authorized(app.read_token.as_deref(), req.headers());
    let (status, why) = match app.token {
        _ if read_only => (
            StatusCode::FORBIDDEN,
            "the read-only token (--admin-read-token) allows reads only: state changes need \
             --admin-token, or `dsa-router ctl` on the router's host",
        ),
        None => (
            StatusCode::FORBIDDEN,
            "the admin API over TCP is read-only without --admin-token: change state with \
             `dsa-router ctl` on the router's host (its control socket, for root and the \
             router's user)",
        ),
        Some(_) => (StatusCode::UNAUTHORIZED, "missing or wrong bearer token"),
    };
    tracing::warn!(method = %req.method(), uri = %req.uri(), "admin request refused: {why}");
    (status, Json(json!({"ok": false, "error": why}))).into_response()
}

/// Refuses a read (401, `why`) when the API has a token (control or
/// read-only) and the request carries neither; `None`: it may read.
pub(super) fn reader(app: &super::App, headers: &HeaderMap, why: &str) -> Option<Response> {
    if app.token.is_none() && app.read_token.is_none() {
        return None;
    }
    if authorized(app.token.as_deref(), headers) || authorized(app.read_token.as_deref(), headers) {
        return None;
    }
    Some(
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"ok": false, "error": why})),
        )
            .into_response(),
    )
}

/// The security headers of every response.
fn secure(h: &mut HeaderMap) {
    let csp = HeaderValue::from_str(csp()).unwrap_or(HeaderValue::from_static(
        "default-src 'none'; frame-ancestors 'none'",
    ));
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
}

/// The Content-Security-Policy: nothing from anywhere, but the page's own
/// inline script and style (by their SHA-256) and `fetch` to the API.
fn csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            source_hash(inline(PAGE, "script")),
            source_hash(inline(PAGE, "style")),
        )
    })
}

/// The text of the page's one `<tag>` element, as the browser hashes it.
fn inline<'a>(page: &'a str, tag: &str) -> Option<&'a str> {
    let (_, rest) = page.split_once(&format!("<{tag}>"))?;
    let (body, _) = rest.split_once(&format!("</{tag}>"))?;
    Some(body)
}

/// A CSP hash source (`'sha256-BASE64'`), `'none'` without a body.
fn source_hash(body: Option<&str>) -> String {
    use base64::Engine;
    match body {
        Some(b) => {
            let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b.as_bytes());
            format!(
                "'sha256-{}'",
                base64::engine::general_purpose::STANDARD.encode(d.as_ref())
            )
        }
        None => "'none'".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_the_hashes_of_the_page_script_and_style() {
        let policy = csp();
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        for tag in ["script", "style"] {
            let body = inline(PAGE, tag).expect(tag);
            assert!(body.len() > 100, "{tag}");
            assert!(policy.contains(&source_hash(Some(body))), "{tag}: {policy}");
        }
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    #[test]
    fn only_loopback_addresses_start_without_a_token() {
        let addr = |s: &str| s.parse::<SocketAddr>().expect(s);
        assert!(exposure(addr("127.0.0.1:8389"), None).is_ok());
        assert!(exposure(addr("[::1]:8389"), None).is_ok());
        assert!(exposure(addr("0.0.0.0:8389"), Some("t")).is_ok());
        for a in ["0.0.0.0:8389", "[::]:8389", "192.0.2.1:8389"] {
            let e = exposure(addr(a), None).expect_err(a).to_string();
            assert!(e.contains("--admin-token"), "{e}");
        }
    }

    #[test]
    fn hosts_are_the_loopback_names_and_the_given_address_with_the_port() {
        let local = "127.0.1.1:8389".parse().expect("addr");
        assert_eq!(
            hosts(local, "MyHost:8389"),
            [
                "127.0.0.1:8389",
                "127.0.1.1:8389",
                "[::1]:8389",
                "localhost:8389",
                "myhost:8389"
            ]
        );
        let web = hosts("127.0.0.1:80".parse().expect("addr"), "127.0.0.1:80");
        assert!(web.contains(&"localhost".to_string()), "{web:?}");
    }

    #[test]
    fn foreign_hosts_and_origins_are_refused() {
        let hosts = hosts("127.0.0.1:8389".parse().expect("addr"), "127.0.0.1:8389");
        let req = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            refusal(&hosts, &h)
        };
        assert_eq!(req(&[("host", "127.0.0.1:8389")]), None);
        assert_eq!(req(&[("host", "LOCALHOST:8389")]), None);
        assert_eq!(req(&[("host", "192.0.2.7:8389")]), None, "an IP address");
        assert_eq!(req(&[("host", "[2001:db8::1]:8389")]), None);
        assert!(req(&[]).is_some());
        assert!(req(&[("host", "evil.example:8389")]).is_some());
        assert!(req(&[("host", "127.0.0.1:8390")]).is_some());
        assert!(req(&[("host", "192.0.2.7")]).is_some());
        let from = |origin: &'static str| req(&[("host", "127.0.0.1:8389"), ("origin", origin)]);
        assert_eq!(from("http://127.0.0.1:8389"), None);
        assert_eq!(from("http://localhost:8389"), None);
        for o in [
            "http://evil.example",
            "https://127.0.0.1:8389",
            "http://127.0.0.1:8390",
            "null",
        ] {
            assert!(from(o).is_some(), "{o}");
        }
    }

    #[test]
    fn only_the_configured_token_authorizes() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            h
        };
        assert!(authorized(Some("t0k"), &with("Bearer t0k")));
        assert!(!authorized(Some("t0k"), &with("Bearer t0K")));
        assert!(!authorized(Some("t0k"), &with("t0k")));
        assert!(!authorized(Some("t0k"), &HeaderMap::new()));
        // No token configured: nothing authorizes a state change over TCP.
        assert!(!authorized(None, &with("Bearer ")));
        assert!(!authorized(None, &HeaderMap::new()));
    }

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
            assert_eq!(same(a, b), want, "{a:?} {b:?}");
        }
    }
}
