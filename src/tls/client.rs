//! A client connection, plain or TLS, split into halves the session reads
//! and writes independently, and joined again for StartTLS.
//!
//! Plain reads keep the readiness-then-`try_read` pattern, so an idle
//! plain client holds no read buffer.

use super::ServerStream;
use bytes::BytesMut;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncReadExt, AsyncWrite, ReadHalf, WriteHalf};
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
                let _ = s.get_ref().0.set_nodelay(true);
                let (r, w) = tokio::io::split(*s);
                (ClientRead::Tls(r), ClientWrite::Tls(w))
            }
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

/// Join the halves of a plain connection again (for StartTLS). `None`
/// when the connection is already TLS or the halves do not match.
pub fn reunite_plain(rd: ClientRead, wr: ClientWrite) -> Option<TcpStream> {
    match (rd, wr) {
        (ClientRead::Plain(r), ClientWrite::Plain(w)) => r.reunite(w).ok(),
        _ => None,
    }
}
