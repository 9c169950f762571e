//! Connections of `dsa-bench`: plain LDAP, LDAPS (`ldaps://`, TLS from the
//! first byte) or StartTLS (`--starttls`: the extended operation, then the
//! handshake), as client libraries make them.
//!
//! One rustls client configuration serves every connection of a run, so
//! its session cache is shared between them as in a client library's
//! process: with `--tls-resume` a new connection resumes a session an
//! earlier one got (TLS 1.3 tickets or a TLS 1.2 session ID); without it
//! the cache is off and every connection makes a full handshake. Each
//! handshake reports whether rustls resumed it.

use dsa_router::proto::wire::frame;
use dsa_router::proto::wire::response::result_code;
use ldap3_proto::proto::{LdapExtendedRequest, LdapMsg, LdapOp};
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::HandshakeKind;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The StartTLS extended operation (RFC 4511 4.14.1).
const STARTTLS_OID: &str = "1.3.6.1.4.1.1466.20037";

/// A byte stream to the server, with or without TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How connections are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Ldaps,
    StartTls,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "none",
            Mode::Ldaps => "ldaps",
            Mode::StartTls => "starttls",
        }
    }
}

/// Makes the connections of one run.
pub struct Connector {
    addr: String,
    mode: Mode,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

/// One connection; `resumed` is `Some` when a TLS handshake was made.
pub struct Conn {
    pub io: Box<dyn Io>,
    pub resumed: Option<bool>,
}

impl Connector {
    /// From `--url` (`ldap://HOST:PORT` or `ldaps://HOST:PORT`),
    /// `--starttls`, `--ca-file` and `--tls-resume`.
    pub fn new(
        url: &str,
        starttls: bool,
        ca_file: Option<&Path>,
        resume: bool,
    ) -> Result<Self, String> {
        let (mode, rest) = if let Some(r) = url.strip_prefix("ldaps://") {
            if starttls {
                return Err("--starttls needs an ldap:// URL (ldaps:// is TLS already)".into());
            }
            (Mode::Ldaps, r)
        } else if let Some(r) = url.strip_prefix("ldap://") {
            (
                if starttls {
                    Mode::StartTls
                } else {
                    Mode::Plain
                },
                r,
            )
        } else {
            return Err("--url must be ldap://HOST:PORT or ldaps://HOST:PORT".into());
        };
        let addr = rest.trim_end_matches('/').to_string();
        if mode == Mode::Plain {
            if ca_file.is_some() || resume {
                return Err("--ca-file and --tls-resume need ldaps:// or --starttls".into());
            }
            return Ok(Connector {
                addr,
                mode,
                tls: None,
            });
        }
        let ca = ca_file.ok_or("TLS (ldaps:// or --starttls) needs --ca-file PATH")?;
        let host = match addr.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
            None => return Err(format!("no port in {url}")),
        };
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("server name {host}: {e}"))?;
        Ok(Connector {
            addr,
            mode,
            tls: Some((client_config(ca, resume)?.into(), name)),
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Connect, and for TLS send StartTLS (when asked) and shake hands.
    pub async fn connect(&self) -> Result<Conn, String> {
        let mut s = TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", self.addr))?;
        let _ = s.set_nodelay(true);
        let Some((connector, name)) = &self.tls else {
            return Ok(Conn {
                io: Box::new(s),
                resumed: None,
            });
        };
        if self.mode == Mode::StartTls {
            starttls(&mut s).await?;
        }
        let t = connector
            .connect(name.clone(), s)
            .await
            .map_err(|e| format!("TLS handshake with {}: {e}", self.addr))?;
        let resumed = t.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
        Ok(Conn {
            io: Box::new(t),
            resumed: Some(resumed),
        })
    }
}

/// A client configuration trusting the CAs in `ca` (PEM); session
/// resumption on (an in-memory cache, as rustls has by default) or off.
fn client_config(ca: &Path, resume: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .map_err(|e| format!("--ca-file {}: {e}", ca.display()))?;
    for c in certs {
        let c = c.map_err(|e| format!("--ca-file {}: {e}", ca.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("--ca-file {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("--ca-file {}: no certificate", ca.display()));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.resumption = if resume {
        Resumption::in_memory_sessions(256)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(cfg))
}

/// Send StartTLS as message 1 and wait for its success.
async fn starttls(s: &mut TcpStream) -> Result<(), String> {
    let mut out = bytes::BytesMut::new();
    let tag: lber::structure::StructureTag = LdapMsg {
        msgid: 1,
        op: LdapOp::ExtendedRequest(LdapExtendedRequest {
            name: STARTTLS_OID.into(),
            value: None,
        }),
        ctrl: Vec::new(),
    }
    .into();
    let _ = lber::write::encode_into(&mut out, tag);
    s.write_all(&out)
        .await
        .map_err(|e| format!("StartTLS: {e}"))?;
    let mut buf = bytes::BytesMut::with_capacity(512);
    loop {
        if let Ok(Some(len)) = frame::frame_len(&buf, 1 << 20) {
            let pdu = buf.split_to(len);
            let h = frame::header(&pdu).map_err(|_| "StartTLS: bad response")?;
            return match result_code(&pdu, &h) {
                Some(0) => Ok(()),
                code => Err(format!("StartTLS refused: result code {code:?}")),
            };
        }
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf));
        match read.await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err("StartTLS: no response".into()),
        }
    }
}
