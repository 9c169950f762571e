//! The router's one error type.
//!
//! Every failure an operation can meet says who caused it ([`Origin`]: the
//! client, a DSA, or the router itself), whether the operation may be tried
//! on another DSA ([`Error::retryable`]), and how the client is told
//! ([`Error::code`] and [`Error::message`]): the mapping to an LDAP result
//! is written here once. Errors that never reach a client as an LDAP result
//! (bad knowledge, bad flags, TLS files) are [`Kind::Config`]; their text is
//! what the operator reads. Conversions from the other modules' own
//! errors live beside those errors, so this module depends on none.

// The LDAP result codes, from the protocol crate: this module is a leaf
// that every other one may use.
pub use ldap3_proto::proto::LdapResultCode as Code;
use std::fmt;

/// Who caused an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The client's request is wrong.
    Client,
    /// A DSA failed, refused or misbehaved.
    Dsa,
    /// The router declined (limits, state, configuration).
    Router,
}

/// What went wrong; the variants fix the origin, the retry rule and the
/// LDAP result code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    // ---- the client
    /// A PDU or request that does not decode.
    Protocol,
    /// A DN that does not parse.
    InvalidDn,
    /// No partition holds the DN.
    NoSuchObject,
    /// An operation or form the router does not support.
    Unsupported,
    /// The client asked for something it may not have (e.g. a password
    /// without TLS).
    Refused(Code),
    // ---- a DSA
    /// No connection could be made.
    Unreachable,
    /// The connection died with the operation outstanding; `write` says
    /// the outcome of an update is unknown.
    ConnectionLost { write: bool },
    /// No answer within the operation timeout.
    Timeout { write: bool },
    /// The DSA refused the bind that establishes the client's identity
    /// (or the router's), with this result code.
    BindRefused(u8),
    /// The DSA sent something that is not LDAP.
    BadResponse,
    // ---- the router
    /// No DSA of the partition is available.
    Unavailable,
    /// A limit was reached (concurrency, outstanding, CPU, memory).
    Busy,
    /// The router is shutting down.
    ShuttingDown,
    /// Configuration: knowledge, flags, TLS files. Not an LDAP result.
    Config,
}

/// An error with its kind and the text for the client or operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: Kind,
    /// What happened, without the `dsa-router: ` prefix.
    pub text: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, text: impl Into<String>) -> Error {
        Error {
            kind,
            text: text.into(),
        }
    }

    /// An error from a message the router already wrote for clients
    /// (`dsa-router: ...`, as the route messages are): the prefix is
    /// dropped, [`Error::message`] adds it back.
    pub fn router(kind: Kind, msg: String) -> Error {
        match msg.strip_prefix("dsa-router: ") {
            Some(rest) => Error::new(kind, rest),
            None => Error::new(kind, msg),
        }
    }

    pub fn config(text: impl Into<String>) -> Error {
        Error::new(Kind::Config, text)
    }

    pub fn origin(&self) -> Origin {
        match self.kind {
            Kind::Protocol
            | Kind::InvalidDn
            | Kind::NoSuchObject
            | Kind::Unsupported
            | Kind::Refused(_) => Origin::Client,
            Kind::Unreachable
            | Kind::ConnectionLost { .. }
            | Kind::Timeout { .. }
            | Kind::BindRefused(_)
            | Kind::BadResponse => Origin::Dsa,
            Kind::Unavailable | Kind::Busy | Kind::ShuttingDown | Kind::Config => Origin::Router,
        }
    }

    /// Whether the operation may be tried on another DSA: a DSA's failure
    /// before it could have acted on the operation, or with a read.
    pub fn retryable(&self) -> bool {
        match self.kind {
            Kind::Unreachable => true,
            Kind::ConnectionLost { write } | Kind::Timeout { write } => !write,
            _ => false,
        }
    }

    /// The LDAP result code the client gets.
    pub fn code(&self) -> Code {
        match &self.kind {
            Kind::Protocol => Code::ProtocolError,
            Kind::InvalidDn => Code::InvalidDNSyntax,
            Kind::NoSuchObject => Code::NoSuchObject,
            Kind::Unsupported => Code::UnwillingToPerform,
            Kind::Refused(c) => c.clone(),
            Kind::Unreachable | Kind::ConnectionLost { .. } => Code::Unavailable,
            Kind::Timeout { .. } => Code::TimeLimitExceeded,
            Kind::BindRefused(_) => Code::InsufficentAccessRights,
            Kind::BadResponse => Code::Other,
            Kind::Unavailable | Kind::ShuttingDown => Code::Unavailable,
            Kind::Busy => Code::Busy,
            Kind::Config => Code::Other,
        }
    }

    /// The diagnostic message the client gets.
    pub fn message(&self) -> String {
        format!("dsa-router: {self}")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        let rows: &[(Kind, Origin, bool, Code)] = &[
            (Kind::Protocol, Origin::Client, false, Code::ProtocolError),
            (
                Kind::InvalidDn,
                Origin::Client,
                false,
                Code::InvalidDNSyntax,
            ),
            (
                Kind::NoSuchObject,
                Origin::Client,
                false,
                Code::NoSuchObject,
            ),
            (Kind::Unreachable, Origin::Dsa, true, Code::Unavailable),
            (
                Kind::ConnectionLost { write: false },
                Origin::Dsa,
                true,
                Code::Unavailable,
            ),
            (
                Kind::ConnectionLost { write: true },
                Origin::Dsa,
                false,
                Code::Unavailable,
            ),
            (
                Kind::Timeout { write: false },
                Origin::Dsa,
                true,
                Code::TimeLimitExceeded,
            ),
            (
                Kind::Timeout { write: true },
                Origin::Dsa,
                false,
                Code::TimeLimitExceeded,
            ),
            (
                Kind::BindRefused(crate::proto::wire::response::rc::INVALID_CREDENTIALS),
                Origin::Dsa,
                false,
                Code::InsufficentAccessRights,
            ),
            (Kind::Unavailable, Origin::Router, false, Code::Unavailable),
            (Kind::Busy, Origin::Router, false, Code::Busy),
            (Kind::Config, Origin::Router, false, Code::Other),
        ];
        for (kind, origin, retry, code) in rows {
            let e = Error::new(kind.clone(), "x");
            assert_eq!(e.origin(), *origin, "{kind:?}");
            assert_eq!(e.retryable(), *retry, "{kind:?}");
            assert_eq!(e.code(), *code, "{kind:?}");
        }
        let w = Error::new(Kind::Timeout { write: true }, "DSA D1 did not answer");
        assert_eq!(w.message(), "dsa-router: DSA D1 did not answer");
        assert_eq!(w.to_string(), "DSA D1 did not answer");
    }
}
