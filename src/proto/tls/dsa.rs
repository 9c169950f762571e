//! TLS towards a DSA: LDAPS, or StartTLS on a plain connection, as the
//! DSA's knowledge says ([`crate::proto::tls::TlsMode`]), verifying the DSA's
//! certificate against the `--dsa-ca` roots and the host of its address.

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the router speaks TLS to one DSA.
#[derive(Clone)]
pub struct DsaTls {
    pub mode: crate::proto::tls::TlsMode,
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
            if self.mode == crate::proto::tls::TlsMode::StartTls {
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
    use crate::proto::wire::frame;
    // ExtendedRequest, message ID 1, requestName = StartTLS OID.
    let oid = crate::proto::wire::request::OID_START_TLS.as_bytes();
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
                return match crate::proto::wire::response::result_code(&resp, &h) {
                    Some(crate::proto::wire::response::rc::SUCCESS) => Ok(()),
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
