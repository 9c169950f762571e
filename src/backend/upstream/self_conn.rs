//! The self-connection guard: a router whose knowledge names one of its own
//! addresses as a DSA's would connect to itself, and loop.
//!
//! The local ports of this process's connections to DSAs are registered
//! (with the DSA's name) before they connect, whenever the destination is a
//! port this process listens on for clients; a client connection from one
//! of them, from this host, is the router talking to itself, and is
//! refused ([`own_outbound`]). Registering before `connect()` means that
//! accepting the connection can never win the race.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use tokio::net::TcpStream;

/// Local ports of this process's connections to DSAs, with the DSA's
/// name, registered before they connect: a client connection from one of
/// them is the router talking to itself (knowledge that makes it a target
/// of its own).
static OUTBOUND: LazyLock<dashmap::DashMap<u16, (String, u64)>> =
    LazyLock::new(dashmap::DashMap::new);

/// The ports this process listens on for clients: only a connection to one
/// of them can reach the router itself.
static LISTENING: LazyLock<dashmap::DashSet<u16>> = LazyLock::new(dashmap::DashSet::new);

/// Tells registrations of the same port apart.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Whether `port` is the local port of one of this process's registered
/// connections to DSAs (cheap: most often there are none).
pub(crate) fn outbound_port(port: u16) -> bool {
    OUTBOUND.contains_key(&port)
}

/// Note a port this process listens on for clients.
pub(crate) fn listening_on(port: u16) {
    LISTENING.insert(port);
}

/// The DSA this process connected to as `peer`, if `peer` is one of its
/// own outbound connections: from this host (`local` is the accepting
/// socket's address) and from a port of ours.
pub(crate) fn own_outbound(peer: &SocketAddr, local: &SocketAddr) -> Option<String> {
    if !outbound_port(peer.port()) {
        return None;
    }
    let same_host =
        peer.ip() == local.ip() || (peer.ip().is_loopback() && local.ip().is_loopback());
    if !same_host {
        return None;
    }
    OUTBOUND.get(&peer.port()).map(|n| n.value().0.clone())
}

/// A port registered in [`OUTBOUND`], unregistered when dropped (only its
/// own registration: the port may have been taken again since).
pub(crate) struct Registered(u16, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        OUTBOUND.remove_if(&self.0, |_, v| v.1 == self.1);
    }
}

/// Connect to `to`; when `to` is a port this process listens on, from a
/// port registered in [`OUTBOUND`] before the connection exists (so that
/// accepting it can never win the race).
pub(crate) async fn connect(
    to: SocketAddr,
    dsa: &str,
) -> io::Result<(TcpStream, Option<Registered>)> {
    let sock = if to.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    let any: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    // Binding first picks the port before connect() would. Only where the
    // destination port is one this process listens on: elsewhere the
    // connection cannot reach the router itself, and connect() picks a port
    // far more cheaply (with thousands of connections in TIME_WAIT, as
    // connection churn leaves, bind() scans for a free port at a cost of
    // milliseconds). SO_REUSEADDR lets the scan take a port whose earlier
    // connection is in TIME_WAIT.
    if !LISTENING.contains(&to.port()) {
        let s = sock.connect(to).await?;
        return Ok((s, None));
    }
    sock.set_reuseaddr(true)?;
    sock.bind(any)?;
    let port = sock.local_addr()?.port();
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    OUTBOUND.insert(port, (dsa.to_string(), serial));
    let reg = Registered(port, serial);
    let s = sock.connect(to).await?;
    Ok((s, Some(reg)))
}
