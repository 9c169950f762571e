//! Opening a connection to a DSA: the first of its addresses that answers
//! within the connect timeout, from a port the self-connection guard
//! knows ([`super::self_conn`]), secured with TLS when knowledge asks for
//! it (LDAPS or StartTLS); then its two tasks start, the reader
//! ([`super::reader`]) and the writer ([`super::conn::writer`]).

use super::conn::{self, Conn};
use super::reader;
use super::self_conn::{self, Registered};
use crate::config::Limits;
use crate::dsa_state::DsaState;
use crate::outbox::{Outbox, WriteEnd};
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// Connect to the first address that answers within the connect timeout;
/// with `tls`, secure the connection before use.
pub(crate) async fn open(
    dsa: Arc<DsaState>,
    addrs: &[String],
    limits: Limits,
    tls: Option<&crate::tls::DsaTls>,
) -> io::Result<Arc<Conn>> {
    let timeout = limits.connect_timeout;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match tokio::time::timeout(timeout, connect_any(a, &dsa.name)).await {
            Ok(Ok((s, local))) => {
                let _ = s.set_nodelay(true);
                let Some(tls) = tls else {
                    return Ok(start(dsa, s, limits, local));
                };
                match tls.connect(s, a, timeout).await {
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
                    // Logged by the caller, once, as the reason the DSA
                    // is down.
                    Err(e) => last = e,
                }
            }
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = io::Error::new(io::ErrorKind::TimedOut, format!("connect to {a} timed out"))
            }
        }
    }
    Err(last)
}

/// Connect to the first address `a` (`host:port`) resolves to that
/// answers.
async fn connect_any(a: &str, dsa: &str) -> io::Result<(TcpStream, Option<Registered>)> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{a}: no address"));
    for to in tokio::net::lookup_host(a).await? {
        match self_conn::connect(to, dsa).await {
            Ok(c) => return Ok(c),
            Err(e) => last = e,
        }
    }
    Err(last)
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
