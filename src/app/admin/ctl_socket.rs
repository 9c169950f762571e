//! `ctl`'s side of the control socket: one HTTP/1.0 request on a Unix
//! socket, its status and JSON body.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a request on the control socket failed.
#[derive(Debug)]
pub(super) enum CallError {
    /// No connection: no router there, or no permission.
    Connect(PathBuf, std::io::Error),
    /// The exchange failed (sending, reading, a timeout).
    Exchange(PathBuf, std::io::Error),
    /// The answer is not an HTTP response with a JSON body.
    Answer(PathBuf, String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connect(p, e) if e.kind() == std::io::ErrorKind::PermissionDenied => write!(
                f,
                "cannot reach the control socket {}: {e} (it is for root and the router's own user; \
                 from elsewhere give --token, the router's --admin-token)",
                p.display()
            ),
            CallError::Connect(p, e) => write!(
                f,
                "cannot reach the control socket {}: {e} (is the router running, and is this its \
                 --control-socket?)",
                p.display()
            ),
            CallError::Exchange(p, e) => write!(f, "control socket {}: {e}", p.display()),
            CallError::Answer(p, why) => {
                write!(f, "control socket {}: bad answer: {why}", p.display())
            }
        }
    }
}

impl std::error::Error for CallError {}

/// `method path` on the control socket at `path`, within `secs` seconds:
/// the HTTP status and the JSON body.
pub(super) fn call(
    path: &Path,
    method: &str,
    target: &str,
    secs: u64,
) -> Result<(u16, serde_json::Value), CallError> {
    let p = || path.to_path_buf();
    let mut s = UnixStream::connect(path).map_err(|e| CallError::Connect(p(), e))?;
    let limit = Some(Duration::from_secs(secs));
    let exchange = |e| CallError::Exchange(p(), e);
    s.set_read_timeout(limit).map_err(exchange)?;
    s.set_write_timeout(limit).map_err(exchange)?;
    let req = format!("{method} {target} HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(exchange)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(exchange)?;
    parse(&raw).map_err(|why| CallError::Answer(p(), why.to_string()))
}

/// An HTTP response's status and JSON body.
fn parse(raw: &[u8]) -> Result<(u16, serde_json::Value), &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8")?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no end of headers")?;
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or("no status line")?;
    let json = serde_json::from_str(body).map_err(|_| "the body is not JSON")?;
    Ok((status, json))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_response_reads_as_status_and_json() {
        let raw = b"HTTP/1.0 403 Forbidden\r\ncontent-type: application/json\r\n\r\n{\"ok\":false}";
        let (code, v) = super::parse(raw).expect("parse");
        assert_eq!(code, 403);
        assert_eq!(v["ok"], false);
        assert!(super::parse(b"HTTP/1.0 200 OK\r\n\r\nnot json").is_err());
        assert!(super::parse(b"garbage").is_err());
    }
}
