//! TLS with rustls (aws-lc-rs provider; no OpenSSL).
//!
//! Client side: one [`ServerTls`] holds the certificate, key and optional
//! client CA read from PEM files, as an acceptor configuration swapped whole
//! on reload (connections already established keep the configuration they
//! were accepted with). It serves the LDAPS listener and StartTLS on the
//! plain listener.
//!
//! DSA side: a [`DsaTls`] per DSA whose knowledge asks for TLS (see
//! [`crate::proto::tls::TlsMode`]): LDAPS, or StartTLS on a plain connection,
//! verifying the DSA's certificate against the `--dsa-ca` roots ([`DsaCa`])
//! and the host of the address (DNS name or IP address).
//!
//! The client stream types ([`ClientRead`], [`ClientWrite`]) let a session
//! run on a plain TCP connection or a TLS one and upgrade one to the other
//! (StartTLS).
//!
//! # Layout
//!
//! * `config`: the PEM files, the rustls configurations built from them,
//!   and their reload.
//! * `client`: the client connection's stream halves and their reunion, and
//!   the connection taken off one worker's reactor for another's.
//! * `dsa`: connecting to a DSA over TLS, StartTLS included.

mod client;
mod config;
mod dsa;

pub use client::{reunite, ClientRead, ClientStream, ClientWrite, Detached};
pub use config::{DsaCa, ServerTls, TlsFiles};
pub use dsa::DsaTls;

type ServerStream = tokio_rustls::server::TlsStream<client::Transport>;

/// TLS towards a DSA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// TLS from the first byte (LDAPS) on the DSA's address.
    Ldaps,
    /// A plain connection upgraded with the StartTLS extended operation.
    StartTls,
    /// No TLS, whatever `link-flags` says.
    Off,
}

impl TlsMode {
    pub fn parse(s: &str) -> Option<TlsMode> {
        match s.to_ascii_lowercase().as_str() {
            "ldaps" => Some(TlsMode::Ldaps),
            "starttls" | "start-tls" => Some(TlsMode::StartTls),
            "none" | "off" => Some(TlsMode::Off),
            _ => None,
        }
    }
}
