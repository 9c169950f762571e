//! Why `explain` could not answer from its arguments (`--after-write`,
//! `--position`, `--policy` and what it takes): the text after `error: `.

use super::after_csn::{CsnError, PositionError};
use crate::admission::policy::PolicyError;
use crate::proto::dn::DnError;
use std::fmt;

/// An `explain` argument that cannot be used.
#[derive(Debug)]
pub(super) enum ExplainError {
    /// `--after-write` names no DSA of the knowledge.
    UnknownDsa(String),
    /// `--after-write` is no position.
    AfterWrite(CsnError),
    /// `--positions-from`: the running router's `/status` could not be read.
    Status(crate::base::error::Error),
    /// A `--position` that is not one.
    Position(PositionError),
    /// `--policy`: the file.
    Policy(PolicyError),
    /// `--policy` without `--client`.
    NoClient,
    /// `--client` is no IP address.
    BadClient,
    /// `--identity` is no DN.
    Identity(DnError),
    /// The target DN does not parse.
    Dn { dn: String, error: DnError },
    /// A `--member-of` that is no DN.
    MemberOf(DnError),
    /// `--member-of` without `--identity`.
    MemberOfWithoutIdentity,
}

impl fmt::Display for ExplainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExplainError::UnknownDsa(w) => write!(f, "unknown DSA \"{w}\" in --after-write"),
            ExplainError::AfterWrite(e) => write!(f, "--after-write: {e}"),
            ExplainError::Status(e) => write!(f, "{e}"),
            ExplainError::Position(e) => write!(f, "{e}"),
            ExplainError::Policy(e) => write!(f, "{e}"),
            ExplainError::NoClient => {
                f.write_str("--policy needs --client ADDR (the client's address)")
            }
            ExplainError::BadClient => f.write_str("--client: not an IP address"),
            ExplainError::Identity(e) => write!(f, "--identity: {e}"),
            ExplainError::Dn { dn, error } => write!(f, "{dn}: {error}"),
            ExplainError::MemberOf(e) => write!(f, "--member-of: {e}"),
            ExplainError::MemberOfWithoutIdentity => {
                f.write_str("--member-of needs --identity DN (the member)")
            }
        }
    }
}

impl std::error::Error for ExplainError {}
