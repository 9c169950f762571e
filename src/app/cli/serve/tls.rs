//! The TLS flags of `serve`: towards clients (LDAPS, StartTLS, client
//! certificates) and towards DSAs.

use crate::base::error::{Error, Result};
use crate::service::context::Config;
use std::path::PathBuf;

/// TLS towards clients and DSAs (`serve`).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = super::groups::TLS)]
pub struct TlsArgs {
    /// Also listen for LDAPS (TLS from the first byte) on this address;
    /// needs --tls-cert and --tls-key.
    #[arg(long, help_heading = super::groups::LISTEN)]
    pub ldaps_listen: Option<String>,
    /// Server certificate chain (PEM) for LDAPS and StartTLS; re-read on
    /// reload (SIGHUP, `ctl reload`, --watch).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Verify client certificates against these CA certificates (PEM);
    /// clients without a certificate are still admitted unless
    /// --tls-require-client-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse TLS clients without a valid
    /// certificate.
    #[arg(long, requires = "tls_client_ca")]
    pub tls_require_client_cert: bool,
    /// Refuse binds that send a password (simple with a password, SASL
    /// PLAIN and LOGIN) on connections without TLS
    /// (result confidentialityRequired).
    #[arg(long)]
    pub require_tls_for_bind: bool,
    /// CA certificates (PEM) that DSA certificates are verified against,
    /// for DSAs reached over TLS (`link-flags = ssl-encryption` or
    /// `dsa-router-tls`); re-read on reload.
    #[arg(long)]
    pub dsa_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// Add the TLS settings to `cfg`.
    pub fn apply(&self, cfg: &mut Config) -> Result<()> {
        cfg.tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::proto::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                require_client_cert: self.tls_require_client_cert,
            }),
            _ => None,
        };
        if self.ldaps_listen.is_some() && cfg.tls.is_none() {
            return Err(Error::config(
                "--ldaps-listen needs --tls-cert and --tls-key",
            ));
        }
        cfg.ldaps_listen = self.ldaps_listen.clone();
        cfg.require_tls_for_bind = self.require_tls_for_bind;
        cfg.dsa_ca = self.dsa_ca.clone();
        Ok(())
    }
}
