//! The TLS configuration from files: the client-facing certificate, key
//! and client CA ([`TlsFiles`], [`ServerTls`]), and the roots DSA
//! certificates are verified against ([`DsaCa`]). Both are re-read on
//! reload and swapped whole; a file that fails to read leaves the old
//! configuration in place.

use super::ServerStream;
use crate::base::error::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
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

/// An error about the file given with the flag `what`.
fn file_err(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::config(format!("{what} {}: {e}", path.display()))
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(what, path, pem_err(e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(what, path, pem_err(e)))?;
    if certs.is_empty() {
        return Err(file_err(what, path, "no PEM certificate found"));
    }
    Ok(certs)
}

fn read_roots(path: &Path, what: &str) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path, what)? {
        roots.add(c).map_err(|e| file_err(what, path, e))?;
    }
    Ok(roots)
}

/// `with_safe_default_protocol_versions` fails only when the provider
/// supports none of them.
fn versions_err(e: rustls::Error) -> Error {
    Error::config(e.to_string())
}

impl TlsFiles {
    /// Read the files and build an acceptor configuration.
    pub fn load(&self) -> Result<Arc<rustls::ServerConfig>> {
        let certs = read_certs(&self.cert, "--tls-cert")?;
        // The key's contents never reach an error message or a log.
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| file_err("--tls-key", &self.key, pem_err(e)))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(versions_err)?;
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
                    v.build().map_err(|e| file_err("--tls-client-ca", ca, e))?,
                )
            }
            None => builder.with_no_client_auth(),
        };
        let cfg = builder.with_single_cert(certs, key).map_err(|e| {
            Error::config(format!(
                "--tls-cert {} / --tls-key {}: {e}",
                self.cert.display(),
                self.key.display()
            ))
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
    pub fn new(files: TlsFiles) -> Result<ServerTls> {
        let cfg = files.load()?;
        Ok(ServerTls {
            files,
            current: arc_swap::ArcSwap::new(cfg),
        })
    }

    /// Re-read the files; the caller swaps the result in with [`Self::set`]
    /// (so that a reload applies all or nothing).
    pub fn reread(&self) -> Result<Arc<rustls::ServerConfig>> {
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
        match tokio::time::timeout(
            timeout,
            self.acceptor().accept(super::client::Transport::On(stream)),
        )
        .await
        {
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
    pub fn load(path: &Path) -> Result<DsaCa> {
        let pem = std::fs::read(path).map_err(|e| file_err("--dsa-ca", path, e))?;
        let roots = read_roots(path, "--dsa-ca")?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(versions_err)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(DsaCa {
            path: path.to_path_buf(),
            pem,
            config: Arc::new(config),
        })
    }

    /// Re-read the file; `None` when its contents did not change.
    pub fn reread(&self) -> Result<Option<DsaCa>> {
        let pem = std::fs::read(&self.path).map_err(|e| file_err("--dsa-ca", &self.path, e))?;
        if pem == self.pem {
            return Ok(None);
        }
        DsaCa::load(&self.path).map(Some)
    }
}
