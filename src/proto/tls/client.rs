//! A client connection, plain or TLS, split into halves the session reads
//! and writes independently, and joined again for StartTLS.
//!
//! Plain reads keep the readiness-then-`try_read` pattern, so an idle
//! plain client holds no read buffer.
//!
//! A session that moves to another worker takes its connection off the
//! first worker's reactor ([`ClientStream::detach`]) and onto the other's
//! ([`Detached::attach`]); under TLS the [`Transport`] below the rustls
//! state does that, so the TLS session goes along unchanged.

use super::ServerStream;
use bytes::BytesMut;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A client connection as accepted: plain, or TLS (LDAPS).
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<ServerStream>),
}

impl From<TcpStream> for ClientStream {
    fn from(s: TcpStream) -> ClientStream {
        ClientStream::Plain(s)
    }
}

impl ClientStream {
    pub fn is_tls(&self) -> bool {
        matches!(self, ClientStream::Tls(_))
    }

    pub fn split(self) -> (ClientRead, ClientWrite) {
        match self {
            ClientStream::Plain(s) => {
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                (ClientRead::Plain(r), ClientWrite::Plain(w))
            }
            ClientStream::Tls(s) => {
                if let Transport::On(t) = s.get_ref().0 {
                    let _ = t.set_nodelay(true);
                }
                let (r, w) = tokio::io::split(*s);
                (ClientRead::Tls(r), ClientWrite::Tls(w))
            }
        }
    }

    /// Take the connection off this worker's reactor (to move it to
    /// another worker's): a TLS connection keeps its rustls state.
    pub fn detach(self) -> io::Result<Detached> {
        match self {
            ClientStream::Plain(t) => Ok(Detached::Plain(t.into_std()?)),
            ClientStream::Tls(mut s) => {
                s.get_mut().0.detach()?;
                Ok(Detached::Tls(s))
            }
        }
    }
}

/// A client connection off any worker's reactor, on its way to another.
pub enum Detached {
    Plain(std::net::TcpStream),
    Tls(Box<ServerStream>),
}

impl Detached {
    /// Put the connection on the reactor of the runtime this runs on.
    pub fn attach(self) -> io::Result<ClientStream> {
        match self {
            Detached::Plain(t) => Ok(ClientStream::Plain(TcpStream::from_std(t)?)),
            Detached::Tls(mut s) => {
                s.get_mut().0.attach()?;
                Ok(ClientStream::Tls(s))
            }
        }
    }
}

/// The TCP connection under a client's TLS: on a worker's reactor, or off
/// every reactor while its session moves to another worker.
pub enum Transport {
    On(TcpStream),
    Off(std::net::TcpStream),
    /// A failed move left nothing.
    Gone,
}

impl Transport {
    fn detach(&mut self) -> io::Result<()> {
        *self = match std::mem::replace(self, Transport::Gone) {
            Transport::On(t) => Transport::Off(t.into_std()?),
            other => other,
        };
        Ok(())
    }

    fn attach(&mut self) -> io::Result<()> {
        *self = match std::mem::replace(self, Transport::Gone) {
            Transport::Off(t) => Transport::On(TcpStream::from_std(t)?),
            other => other,
        };
        Ok(())
    }

    fn on(&mut self) -> io::Result<&mut TcpStream> {
        match self {
            Transport::On(t) => Ok(t),
            _ => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection is moving between workers",
            )),
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().on() {
            Ok(t) => Pin::new(t).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().on() {
            Ok(t) => Pin::new(t).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().on() {
            Ok(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().on() {
            Ok(t) => Pin::new(t).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().on() {
            Ok(t) => Pin::new(t).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// The read side of a client connection.
pub enum ClientRead {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<ServerStream>),
    /// Lost (a failed StartTLS): reads see the end of the stream.
    Closed,
}

impl ClientRead {
    /// Read what is available into `buf` (0: end of stream). A plain
    /// connection takes buffer space only once data is there.
    pub async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            ClientRead::Plain(rd) => loop {
                // Wait with no buffer (readiness can be reported where
                // there is nothing to read, e.g. just after accept).
                rd.readable().await?;
                if buf.capacity() == 0 {
                    // No buffer yet: the first bytes go through the stack,
                    // so a connection that never sends holds none.
                    let mut first = [0u8; 1024];
                    match rd.try_read(&mut first) {
                        Ok(n) => {
                            buf.reserve(n.max(4096));
                            buf.extend_from_slice(&first[..n]);
                            return Ok(n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
                if buf.capacity() - buf.len() < 1024 {
                    buf.reserve(4096);
                }
                // Through `AsyncRead`, which takes a short read as
                // "drained" (no second `recv` that would only say EAGAIN).
                return rd.read_buf(buf).await;
            },
            ClientRead::Tls(rd) => {
                if buf.capacity() - buf.len() < 1024 {
                    buf.reserve(4096);
                }
                rd.read_buf(buf).await
            }
            ClientRead::Closed => Ok(0),
        }
    }
}

/// The write side of a client connection.
pub enum ClientWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<ServerStream>),
}

impl AsyncWrite for ClientWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientWrite::Plain(w) => Pin::new(w).poll_write(cx, buf),
            ClientWrite::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWrite::Plain(w) => Pin::new(w).poll_flush(cx),
            ClientWrite::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWrite::Plain(w) => Pin::new(w).poll_shutdown(cx),
            ClientWrite::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// Join the halves of a connection again (for StartTLS, or a session that
/// moves). `None` when the halves do not match.
pub fn reunite(rd: ClientRead, wr: ClientWrite) -> Option<ClientStream> {
    match (rd, wr) {
        (ClientRead::Plain(r), ClientWrite::Plain(w)) => r.reunite(w).ok().map(ClientStream::Plain),
        (ClientRead::Tls(r), ClientWrite::Tls(w)) if r.is_pair_of(&w) => {
            Some(ClientStream::Tls(Box::new(r.unsplit(w))))
        }
        _ => None,
    }
}
