//! TLS with rustls (ring provider; no OpenSSL).
//!
//! Client side: one [`ServerTls`] holds the certificate, key and optional
//! client CA read from PEM files, as an acceptor configuration swapped whole
//! on reload (connections already established keep the configuration they
//! were accepted with). It serves the LDAPS listener and StartTLS on the
//! plain listener.
//!
//! DSA side: a [`DsaTls`] per DSA whose knowledge asks for TLS (see
//! [`crate::knowledge::TlsMode`]): LDAPS, or StartTLS on a plain connection,
//! verifying the DSA's certificate against the `--dsa-ca` roots and the
//! host of the address (DNS name or IP address).
//!
//! The client stream types ([`ClientRead`], [`ClientWrite`]) let a session
//! run on a plain TCP connection or a TLS one and upgrade one to the other
//! (StartTLS). Plain reads keep the readiness-then-`try_read` pattern, so an
//! idle plain client holds no read buffer.

use bytes::BytesMut;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM files of the client-facing TLS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Verify client certificates against this CA.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: refuse clients without a certificate (otherwise
    /// a certificate is optional, but verified when presented).
    pub require_client_cert: bool,
}

/// A PEM error in words (the library's own shows raw bytes).
fn pem_err(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => e.to_string(),
        Error::NoItemsFound => "no PEM item of the expected kind found".into(),
        _ => "malformed PEM".into(),
    }
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {}", path.display(), pem_err(e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: {}", path.display(), pem_err(e)))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {}: no PEM certificate found",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_roots(path: &Path, what: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path, what)? {
        roots
            .add(c)
            .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    }
    Ok(roots)
}

impl TlsFiles {
    /// Read the files and build an acceptor configuration.
    pub fn load(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let certs = read_certs(&self.cert, "--tls-cert")?;
        // The key's contents never reach an error message or a log.
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| format!("--tls-key {}: {}", self.key.display(), pem_err(e)))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match &self.client_ca {
            Some(ca) => {
                let roots = read_roots(ca, "--tls-client-ca")?;
                let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                );
                let v = if self.require_client_cert {
                    v
                } else {
                    v.allow_unauthenticated()
                };
                builder.with_client_cert_verifier(
                    v.build()
                        .map_err(|e| format!("--tls-client-ca {}: {e}", ca.display()))?,
                )
            }
            None => builder.with_no_client_auth(),
        };
        let cfg = builder.with_single_cert(certs, key).map_err(|e| {
            format!(
                "--tls-cert {} / --tls-key {}: {e}",
                self.cert.display(),
                self.key.display()
            )
        })?;
        Ok(Arc::new(cfg))
    }
}

/// The client-facing TLS configuration, reloadable.
pub struct ServerTls {
    pub files: TlsFiles,
    current: arc_swap::ArcSwap<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    pub fn new(files: TlsFiles) -> Result<ServerTls, String> {
        let cfg = files.load()?;
        Ok(ServerTls {
            files,
            current: arc_swap::ArcSwap::new(cfg),
        })
    }

    /// Re-read the files; the caller swaps the result in with [`Self::set`]
    /// (so that a reload applies all or nothing).
    pub fn reread(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        self.files.load()
    }

    pub fn set(&self, cfg: Arc<rustls::ServerConfig>) {
        self.current.store(cfg);
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.load_full())
    }

    /// Accept a TLS handshake on `stream` within `timeout`.
    pub async fn accept(&self, stream: TcpStream, timeout: Duration) -> io::Result<ServerStream> {
        match tokio::time::timeout(timeout, self.acceptor().accept(stream)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }
}

/// The roots DSA certificates are verified against (`--dsa-ca`).
pub struct DsaCa {
    pub path: PathBuf,
    /// The file's bytes when read: a reload that finds them unchanged keeps
    /// this configuration (and the DSA connections made with it).
    pem: Vec<u8>,
    pub config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for DsaCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DsaCa")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl DsaCa {
    pub fn load(path: &Path) -> Result<DsaCa, String> {
        let pem = std::fs::read(path).map_err(|e| format!("--dsa-ca {}: {e}", path.display()))?;
        let roots = read_roots(path, "--dsa-ca")?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(DsaCa {
            path: path.to_path_buf(),
            pem,
            config: Arc::new(config),
        })
    }

    /// Re-read the file; `None` when its contents did not change.
    pub fn reread(&self) -> Result<Option<DsaCa>, String> {
        let pem = std::fs::read(&self.path)
            .map_err(|e| format!("--dsa-ca {}: {e}", self.path.display()))?;
        if pem == self.pem {
            return Ok(None);
        }
        DsaCa::load(&self.path).map(Some)
    }
}

/// How the router speaks TLS to one DSA.
#[derive(Clone)]
pub struct DsaTls {
    pub mode: crate::knowledge::TlsMode,
    pub config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for DsaTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DsaTls")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl PartialEq for DsaTls {
    fn eq(&self, o: &DsaTls) -> bool {
        self.mode == o.mode && Arc::ptr_eq(&self.config, &o.config)
    }
}

/// The host part of `host:port` or `[v6]:port`.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr)
}

impl DsaTls {
    /// Secure a fresh connection to `addr` (`host:port`): StartTLS first
    /// when the mode says so, then the handshake, within `timeout`.
    pub async fn connect(
        &self,
        mut stream: TcpStream,
        addr: &str,
        timeout: Duration,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let host = host_of(addr).to_string();
        let name = ServerName::try_from(host.clone()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host} is not a valid TLS server name: {e}"),
            )
        })?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let secure = async {
            if self.mode == crate::knowledge::TlsMode::StartTls {
                start_tls_request(&mut stream).await?;
            }
            connector.connect(name, stream).await
        };
        match tokio::time::timeout(timeout, secure).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(io::Error::new(
                e.kind(),
                format!("TLS to {addr} failed: {e}"),
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS to {addr} timed out"),
            )),
        }
    }
}

/// Send a StartTLS extended request on a fresh connection and wait for a
/// successful answer.
async fn start_tls_request(stream: &mut TcpStream) -> io::Result<()> {
    use crate::wire::frame;
    // ExtendedRequest, message ID 1, requestName = StartTLS OID.
    let oid = crate::wire::request::OID_START_TLS.as_bytes();
    let mut req = vec![0x80, oid.len() as u8];
    req.extend_from_slice(oid);
    let mut op = vec![0x77, req.len() as u8];
    op.extend_from_slice(&req);
    let mut pdu = vec![0x30, (op.len() + 3) as u8, 0x02, 0x01, 0x01];
    pdu.extend_from_slice(&op);
    stream.write_all(&pdu).await?;
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        match frame::frame_len(&buf, 64 * 1024) {
            Ok(Some(len)) => {
                let resp = buf.split_to(len);
                let h = frame::header(&resp).map_err(|e| bad(e.to_string()))?;
                if h.msgid != 1 || h.op_tag != 0x78 {
                    return Err(bad("unexpected answer to StartTLS".into()));
                }
                return match crate::wire::response::result_code(&resp, &h) {
                    Some(0) => Ok(()),
                    Some(c) => Err(bad(format!("the DSA refused StartTLS (result {c})"))),
                    None => Err(bad("malformed StartTLS response".into())),
                };
            }
            Ok(None) => {}
            Err(e) => return Err(bad(e.to_string())),
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the DSA closed the connection during StartTLS",
            ));
        }
    }
}

// ---------------------------------------------------------------- client streams

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

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn hosts() {
        assert_eq!(host_of("127.0.0.1:389"), "127.0.0.1");
        assert_eq!(host_of("[::1]:636"), "::1");
        assert_eq!(host_of("ldap.example.com:636"), "ldap.example.com");
    }
}
