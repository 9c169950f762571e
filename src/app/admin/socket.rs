//! The control socket: the admin API on a Unix socket, where the kernel
//! says who connected (SO_PEERCRED), as slapd's `ldapi://` and HAProxy's
//! stats socket do. State changes (disable, drain, enable, reload,
//! shutdown, upgrade) are allowed here to root and to the router's own
//! user, nobody else; the socket file is made mode 0600 as well, so other
//! local accounts cannot even connect. `dsa-router ctl` uses it by
//! default: no token to set up or keep.
//!
//! Where it is ([`Setting`]): `--control-socket PATH`, or by default
//! `$RUNTIME_DIRECTORY/control.sock` (systemd's `RuntimeDirectory=`),
//! else `/run/dsa-router/control.sock` when that directory exists, else
//! `control.sock` in a directory of the user's own (`$XDG_RUNTIME_DIR/
//! dsa-router`, else `/tmp/dsa-router-UID`, made mode 0700). The default
//! is skipped, with a warning, when it cannot be bound; a path given
//! explicitly that cannot be bound stops `serve`.

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use axum::Json;
use serde_json::json;
use std::fmt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

/// The directory of the default socket when systemd does not name one.
pub const DEFAULT_DIR: &str = "/run/dsa-router";
/// The socket's file name in that directory.
pub const FILE: &str = "control.sock";

/// Where the control socket is, from `--control-socket` (absent: the
/// default; `none`: no socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    Default(PathBuf),
    Given(PathBuf),
    Off,
}

impl Setting {
    /// The setting of `--control-socket VALUE`.
    pub fn from_flag(value: Option<&str>) -> Setting {
        match value {
            None | Some("") => Setting::Default(default_path()),
            Some("none") => Setting::Off,
            Some(p) => Setting::Given(PathBuf::from(p)),
        }
    }

    /// The socket's path, unless off.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Setting::Default(p) | Setting::Given(p) => Some(p),
            Setting::Off => None,
        }
    }
}

/// `$RUNTIME_DIRECTORY/control.sock` (its first directory, when systemd
/// names several), else `/run/dsa-router/control.sock` when that
/// directory exists (the package's), else one in a directory of the
/// user's own ([`user_dir`]): a router started by hand, `demo` among
/// them, and `ctl` run by the same user meet there.
pub fn default_path() -> PathBuf {
    let systemd = std::env::var_os("RUNTIME_DIRECTORY").and_then(|d| {
        d.to_str()
            .and_then(|s| s.split(':').next())
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    let dir = match systemd {
        Some(d) => d,
        None if Path::new(DEFAULT_DIR).is_dir() => PathBuf::from(DEFAULT_DIR),
        None => user_dir(),
    };
    dir.join(FILE)
}

/// A directory of this user's own for the socket (as tmux keeps its
/// sockets): `$XDG_RUNTIME_DIR/dsa-router`, else `/tmp/dsa-router-UID`.
pub fn user_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("dsa-router"),
        None => {
            let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
            std::env::temp_dir().join(format!("dsa-router-{uid}"))
        }
    }
}

/// Make [`user_dir`] (mode 0700) when it is missing, and check that it is
/// a directory of `own`'s that nobody else may enter, not a link:
/// another user may have made it first, in `/tmp`.
pub fn make_user_dir(dir: &Path, own: u32) -> Result<(), SocketError> {
    use std::os::unix::fs::DirBuilderExt;
    let io = |what, e| SocketError::Io(dir.to_path_buf(), what, e);
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(io("create its directory", e));
        }
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| io("read its directory", e))?;
    if !m.is_dir() || m.uid() != own || m.mode() & 0o077 != 0 {
        return Err(SocketError::Io(
            dir.to_path_buf(),
            "use its directory",
            std::io::Error::other("not a directory of this user's own with mode 0700"),
        ));
    }
    Ok(())
}

/// Why the control socket could not be set up.
#[derive(Debug)]
pub enum SocketError {
    /// Another process answers on the path.
    Live(PathBuf),
    /// Something that is not a socket is at the path.
    NotSocket(PathBuf),
    /// Binding, securing or moving the socket into place failed.
    Io(PathBuf, &'static str, std::io::Error),
}

impl fmt::Display for SocketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SocketError::Live(p) => write!(
                f,
                "another process serves the control socket {}; give each router its own --control-socket",
                p.display()
            ),
            SocketError::NotSocket(p) => write!(
                f,
                "--control-socket {}: a file that is not a socket is in the way",
                p.display()
            ),
            SocketError::Io(p, what, e) => {
                write!(f, "control socket {}: cannot {what}: {e}", p.display())
            }
        }
    }
}

impl std::error::Error for SocketError {}

/// The file a control socket was bound as (removed at exit if the path
/// still names it).
pub struct Placed {
    path: PathBuf,
    id: (u64, u64),
}

impl Placed {
    /// Remove the socket file, unless another process (a new one after a
    /// hot upgrade) put its own at the path since.
    pub fn remove(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Bind the control socket at `path`, mode 0600. A stale socket file
/// (nothing answers) is replaced; one that answers is an error unless
/// `takeover` (a hot upgrade: the new process replaces the old one's).
/// The socket is bound under a temporary name and renamed into place, so
/// the path never names a socket with looser permissions.
pub fn bind(path: &Path, takeover: bool) -> Result<(UnixListener, Placed), SocketError> {
    let io = |what, e| SocketError::Io(path.to_path_buf(), what, e);
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(SocketError::NotSocket(path.to_path_buf()));
        }
        if !takeover && std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(SocketError::Live(path.to_path_buf()));
        }
    }
    let name = path.file_name().map_or_else(
        || std::ffi::OsString::from(FILE),
        std::ffi::OsStr::to_os_string,
    );
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(&name);
    tmp_name.push(format!(".{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(|e| io("bind", e))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io("set its mode", e))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| io("move it into place", e)));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let m = std::fs::symlink_metadata(path).map_err(|e| io("read it back", e))?;
    let placed = Placed {
        path: path.to_path_buf(),
        id: (m.dev(), m.ino()),
    };
    Ok((listener, placed))
}

/// Who connected to the control socket (the kernel's word, SO_PEERCRED).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub uid: Option<u32>,
    pub pid: Option<i32>,
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Peer {
        match stream.io().peer_cred() {
            Ok(c) => Peer {
                uid: Some(c.uid()),
                pid: c.pid(),
            },
            Err(_) => Peer {
                uid: None,
                pid: None,
            },
        }
    }
}

/// This process's effective user id, as the kernel reports it for a
/// socket it made (no `unsafe` call to `geteuid`).
pub fn own_uid() -> std::io::Result<u32> {
    let (a, _b) = tokio::net::UnixStream::pair()?;
    Ok(a.peer_cred()?.uid())
}

/// Whether a peer of uid `peer` may use the control socket of a router
/// running as `own`: root and the router's own user only.
pub fn allowed(peer: Option<u32>, own: u32) -> bool {
    peer.is_some_and(|u| u == 0 || u == own)
}

/// Middleware of the control socket: refuses every request of a peer
/// that is neither root nor the router's user.
pub(super) async fn check_peer(
    State(own): State<u32>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    req: Request,
    next: Next,
) -> Response {
    if allowed(peer.uid, own) {
        return next.run(req).await;
    }
    tracing::warn!(
        uid = ?peer.uid,
        pid = ?peer.pid,
        method = %req.method(),
        uri = %req.uri(),
        "control socket: request refused (not root or the router's user)"
    );
    let why = "the control socket is for root and the router's own user";
    (
        StatusCode::FORBIDDEN,
        Json(json!({"ok": false, "error": why})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_directory_is_made_private_and_a_foreign_one_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let own = std::fs::metadata(tmp.path()).expect("meta").uid();
        let dir = tmp.path().join("dsa-router-x");
        make_user_dir(&dir, own).expect("made");
        let m = std::fs::symlink_metadata(&dir).expect("meta");
        assert_eq!(m.mode() & 0o777, 0o700);
        make_user_dir(&dir, own).expect("made again: kept");
        // Opened to others, or another user's, or a link: refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(make_user_dir(&dir, own).is_err());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(make_user_dir(&dir, own + 1).is_err());
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        assert!(make_user_dir(&link, own).is_err());
    }

    #[test]
    fn only_root_and_the_routers_own_user_are_allowed() {
        assert!(allowed(Some(0), 998));
        assert!(allowed(Some(998), 998));
        assert!(!allowed(Some(65534), 998));
        assert!(!allowed(Some(1000), 998));
        assert!(!allowed(None, 998));
        assert!(allowed(Some(0), 0));
        assert!(!allowed(Some(65534), 0));
    }

    #[test]
    fn the_flag_names_a_path_none_or_the_default() {
        assert_eq!(Setting::from_flag(Some("none")), Setting::Off);
        assert_eq!(
            Setting::from_flag(Some("/x/c.sock")).path(),
            Some(Path::new("/x/c.sock"))
        );
        assert!(matches!(Setting::from_flag(None), Setting::Default(p) if p.ends_with(FILE)));
    }

    #[tokio::test]
    async fn a_socket_is_bound_0600_a_stale_one_replaced_a_live_one_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        let (_l1, first) = bind(&path, false).expect("bind");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(bind(&path, false), Err(SocketError::Live(_))));
        let (l2, _second) = bind(&path, true).expect("takeover");
        // The first one's file is gone from the path: it leaves it.
        first.remove();
        assert!(path.exists());
        drop(l2);
        let (_l3, third) = bind(&path, false).expect("a stale socket is replaced");
        third.remove();
        assert!(!path.exists());
        std::fs::write(&path, "x").expect("write");
        assert!(matches!(bind(&path, false), Err(SocketError::NotSocket(_))));
    }
}
