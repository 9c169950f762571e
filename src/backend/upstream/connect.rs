//! Opening a connection to a DSA: the first of its addresses that answers
//! within the connect timeout, from a port the self-connection guard
//! knows ([`super::self_conn`]), secured with TLS when knowledge asks for
//! it (LDAPS or StartTLS), after a PROXY protocol header where
//! `--send-proxy-to` asks for one; then its two tasks start, the reader
//! ([`super::reader`]) and the writer ([`super::conn::writer`]).

use super::conn::{self, Conn};
use super::reader;
use super::self_conn::{self, Registered};
use crate::backend::dsa_state::DsaState;
use crate::backend::settings::Limits;
use crate::base::outbox::{Outbox, WriteEnd};
use crate::directory::knowledge::Family;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// Connect to the first address that answers within the connect timeout
/// (Happy Eyeballs, RFC 8305: [`ATTEMPT_DELAY`] apart, first to connect
/// wins); with `tls`, secure the connection before use (an address whose
/// handshake fails gives way to the next). To a DSA of `--send-proxy-to`,
/// the connection starts with a PROXY v2 header: `client`'s address on a
/// client's own connection, LOCAL on the router's (`None`).
pub(crate) async fn open(
    dsa: Arc<DsaState>,
    addrs: &[Target],
    limits: Limits,
    tls: Option<&crate::proto::tls::DsaTls>,
    client: Option<SocketAddr>,
) -> io::Result<Arc<Conn>> {
    let timeout = limits.connect_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut cands, mut last) = resolve(addrs).await;
    loop {
        let raced = tokio::time::timeout_at(deadline, race(&cands, &dsa.name)).await;
        let (s, local, i) = match raced {
            Ok(Ok(won)) => won,
            Ok(Err(e)) => return Err(last.unwrap_or(e)),
            Err(_) => {
                let all: Vec<String> = cands.iter().map(|c| c.0.to_string()).collect();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect to {} timed out", all.join(", ")),
                ));
            }
        };
        let _ = s.set_nodelay(true);
        let s = if dsa.send_proxy.load(std::sync::atomic::Ordering::Relaxed) {
            proxy_header(s, client, deadline).await?
        } else {
            s
        };
        let Some(tls) = tls else {
            return Ok(start(dsa, s, limits, local));
        };
        let name = &addrs[cands[i].1].addr;
        match tls.connect(s, name, timeout).await {
            Ok(t) => {
                let (rd, wr) = tokio::io::split(t);
                return Ok(start_halves(
                    dsa,
                    rd,
                    |_| WriteEnd::Stream(wr),
                    limits,
                    local,
                ));
            }
            // Logged by the caller, once, as the reason the DSA is down.
            Err(e) => {
                last = Some(e);
                cands.remove(i);
            }
        }
    }
}

/// Write the PROXY v2 header first on `s` (before TLS, before LDAP).
async fn proxy_header(
    mut s: TcpStream,
    client: Option<SocketAddr>,
    deadline: tokio::time::Instant,
) -> io::Result<TcpStream> {
    use tokio::io::AsyncWriteExt;
    let to = s.peer_addr()?;
    let header = crate::proto::proxy_protocol::send::v2(client, to);
    match tokio::time::timeout_at(deadline, s.write_all(&header)).await {
        Ok(Ok(())) => Ok(s),
        Ok(Err(e)) => Err(io::Error::new(
            e.kind(),
            format!("{to}: writing the PROXY protocol header: {e}"),
        )),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{to}: writing the PROXY protocol header timed out"),
        )),
    }
}

/// Every socket address of `addrs` of its family, in order (each name's
/// addresses interleaved by family, [`interleave`]), with the index of
/// the address it came from; the last resolution error.
async fn resolve(addrs: &[Target]) -> (Vec<(SocketAddr, usize)>, Option<io::Error>) {
    let mut out: Vec<(SocketAddr, usize)> = Vec::new();
    let mut last = None;
    for (i, t) in addrs.iter().enumerate() {
        match tokio::net::lookup_host(&t.addr).await {
            Ok(found) => {
                let found: Vec<SocketAddr> = found.collect();
                let before = out.len();
                for a in interleave(found, t.family) {
                    if !out.iter().any(|(b, _)| *b == a) {
                        out.push((a, i));
                    }
                }
                if out.len() == before {
                    last = Some(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{} has no {} address", t.addr, t.family),
                    ));
                }
            }
            Err(e) => last = Some(io::Error::new(e.kind(), format!("{}: {e}", t.addr))),
        }
    }
    (out, last)
}

/// The addresses of `family` among `found`; for `tcp`, both families
/// alternating, the resolver's first family first (RFC 8305, 4).
pub(crate) fn interleave(found: Vec<SocketAddr>, family: Family) -> Vec<SocketAddr> {
    let keep = |a: &SocketAddr| match family {
        Family::Ipv4 => a.is_ipv4(),
        Family::Ipv6 => a.is_ipv6(),
        Family::Tcp => true,
    };
    let found: Vec<SocketAddr> = found.into_iter().filter(keep).collect();
    let first_v6 = found.first().is_some_and(SocketAddr::is_ipv6);
    let (mut a, mut b): (Vec<_>, Vec<_>) = found.into_iter().partition(|s| s.is_ipv6() == first_v6);
    let mut out = Vec::with_capacity(a.len() + b.len());
    a.reverse();
    b.reverse();
    loop {
        match (a.pop(), b.pop()) {
            (None, None) => return out,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
}

/// Connection attempts to `cands`, one started every [`ATTEMPT_DELAY`] or
/// as soon as the one before fails; the first to connect wins (the others
/// are dropped, their sockets closed). Its stream, and its index.
async fn race(
    cands: &[(SocketAddr, usize)],
    dsa: &str,
) -> io::Result<(TcpStream, Option<Registered>, usize)> {
    let mut running = tokio::task::JoinSet::new();
    let mut next = 0;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    loop {
        if let Some(&(to, _)) = cands.get(next) {
            let (i, dsa) = (next, dsa.to_string());
            running.spawn(async move { (i, self_conn::connect(to, &dsa).await) });
            next += 1;
        }
        if running.is_empty() {
            return Err(last);
        }
        let more = next < cands.len();
        tokio::select! {
            done = running.join_next() => match done {
                Some(Ok((i, Ok((s, local))))) => return Ok((s, local, i)),
                Some(Ok((i, Err(e)))) => {
                    last = io::Error::new(e.kind(), format!("{}: {e}", cands[i].0));
                }
                Some(Err(e)) => last = io::Error::other(e.to_string()),
                None => {}
            },
            _ = tokio::time::sleep(ATTEMPT_DELAY), if more => {}
        }
    }
}

/// How long an attempt has before the next address is tried beside it
/// (RFC 8305's recommended Connection Attempt Delay).
pub(crate) const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// One address of a DSA: `host:port` and the family it is to be reached
/// over (`tcp`: either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub addr: String,
    pub family: Family,
}

fn start(
    dsa: Arc<DsaState>,
    stream: TcpStream,
    limits: Limits,
    local: Option<Registered>,
) -> Arc<Conn> {
    // TCP_NODELAY is set where it connected.
    let (rd, wr) = stream.into_split();
    start_halves::<_, OwnedWriteHalf>(dsa, rd, |ob| WriteEnd::direct(wr, ob), limits, local)
}

/// Start the reader and writer tasks; `wire` makes the writer's end,
/// given the outbox (a plain socket is shared with it). The reader holds
/// `local` (the registered port) while the connection lives.
pub(super) fn start_halves<R, W>(
    dsa: Arc<DsaState>,
    rd: R,
    wire: impl FnOnce(&Outbox) -> WriteEnd<W>,
    limits: Limits,
    local: Option<Registered>,
) -> Arc<Conn>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let conn = Arc::new(Conn::new(dsa));
    let wire = wire(&conn.out);
    tokio::spawn(conn::writer(wire, conn.clone()));
    tokio::spawn(reader::run(rd, conn.clone(), limits, local));
    conn
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn addrs(v: &[&str]) -> Vec<SocketAddr> {
        v.iter().map(|a| a.parse().unwrap()).collect()
    }

    /// A name's addresses: its family only for ipv4/ipv6, both families
    /// alternating for tcp (the resolver's first family first).
    #[test]
    fn the_family_picks_and_orders_the_addresses() {
        let found = addrs(&[
            "[::1]:1",
            "[::2]:1",
            "10.0.0.1:1",
            "10.0.0.2:1",
            "10.0.0.3:1",
        ]);
        let rows: [(Family, &[&str]); 3] = [
            (Family::Ipv4, &["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]),
            (Family::Ipv6, &["[::1]:1", "[::2]:1"]),
            (
                Family::Tcp,
                &[
                    "[::1]:1",
                    "10.0.0.1:1",
                    "[::2]:1",
                    "10.0.0.2:1",
                    "10.0.0.3:1",
                ],
            ),
        ];
        for (family, want) in rows {
            assert_eq!(interleave(found.clone(), family), addrs(want), "{family}");
        }
        let v4_first = addrs(&["10.0.0.1:1", "[::1]:1"]);
        assert_eq!(interleave(v4_first.clone(), Family::Tcp), v4_first);
        assert!(interleave(addrs(&["10.0.0.1:1"]), Family::Ipv6).is_empty());
    }
}
