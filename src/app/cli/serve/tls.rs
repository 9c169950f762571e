//! The TLS flags of `serve`: towards clients (LDAPS, StartTLS, client
//! certificates) and towards DSAs.

use super::naming::Naming;
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
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Verify client certificates against these CA certificates (PEM);
    /// clients without a certificate are still admitted unless
    /// --tls-require-client-cert.
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse TLS clients without a valid
    /// certificate.
    #[arg(long)]
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
    /// The settings TLS towards clients needs beside those given: the
    /// first missing, said as `naming` names them.
    fn check(&self, naming: &dyn Naming) -> Result<()> {
        let path = |p: &PathBuf| p.display().to_string();
        let missing = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), None) => Some((
                naming.show("tls-cert", &path(cert)),
                "its key",
                vec!["tls-key"],
            )),
            (None, Some(key)) => Some((
                naming.show("tls-key", &path(key)),
                "its certificate",
                vec!["tls-cert"],
            )),
            (None, None) => match (&self.ldaps_listen, &self.tls_client_ca) {
                (Some(l), _) => Some((
                    naming.show("ldaps-listen", l),
                    "a certificate and its key",
                    vec!["tls-cert", "tls-key"],
                )),
                (None, Some(ca)) => Some((
                    naming.show("tls-client-ca", &path(ca)),
                    "a server certificate and its key",
                    vec!["tls-cert", "tls-key"],
                )),
                (None, None) => None,
            },
            (Some(_), Some(_)) => None,
        };
        let missing = missing.or_else(|| {
            (self.tls_require_client_cert && self.tls_client_ca.is_none()).then(|| {
                (
                    naming.show("tls-require-client-cert", ""),
                    "the CA certificates to verify clients against",
                    vec!["tls-client-ca"],
                )
            })
        });
        match missing {
            Some((given, what, flags)) => Err(Error::config(format!(
                "{given} needs {what}: {}",
                naming.missing(&flags)
            ))),
            None => Ok(()),
        }
    }

    /// Add the TLS settings to `cfg`; `naming` names the settings in an
    /// error that weighs two.
    pub fn apply(&self, cfg: &mut Config, naming: &dyn Naming) -> Result<()> {
        self.check(naming)?;
        cfg.tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::proto::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                require_client_cert: self.tls_require_client_cert,
            }),
            _ => None,
        };
        cfg.ldaps_listen = self.ldaps_listen.clone();
        cfg.require_tls_for_bind = self.require_tls_for_bind;
        cfg.dsa_ca = self.dsa_ca.clone();
        Ok(())
    }
}
