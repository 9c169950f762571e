//! Why a policy file was not taken: its text as the operator reads it (at
//! start, on reload, in `explain --policy`).

use crate::proto::dn::DnError;
use crate::proto::proxy_protocol::CidrError;
use std::fmt;
use std::path::PathBuf;

/// A policy file that cannot be read or compiled.
#[derive(Debug)]
pub enum PolicyError {
    /// The text is not TOML of the file's form.
    Toml(toml::de::Error),
    /// Two rules have this name (or a rule is named `default`).
    DuplicateName(String),
    /// `[default]` has a name other than `default`.
    DefaultRenamed,
    /// `[default]` says which clients it is for.
    DefaultMatches,
    /// A DN of a rule's `key` that does not parse.
    Dn {
        rule: String,
        key: &'static str,
        value: String,
        error: DnError,
    },
    /// A word of `allow` (`what`: operation) or `scopes` (scope) that is
    /// none.
    Unknown {
        rule: String,
        what: &'static str,
        word: String,
    },
    /// A `client` that is no address or CIDR block.
    Client { rule: String, error: CidrError },
    /// `if_group_unreadable` in this rule without `member_of`.
    UnreadableWithoutGroups(String),
    /// The file cannot be read.
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file's text is wrong.
    File {
        path: PathBuf,
        error: Box<PolicyError>,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Toml(e) => write!(f, "{e}"),
            PolicyError::DuplicateName(name) => write!(f, "two rules are named \"{name}\""),
            PolicyError::DefaultRenamed => f.write_str("the default rule is named \"default\""),
            PolicyError::DefaultMatches => f.write_str(
                "the default rule matches every client: it takes no client, identity, member_of, bound, tls or sasl",
            ),
            PolicyError::Dn {
                rule,
                key,
                value,
                error,
            } => write!(f, "rule \"{rule}\": {key} {value:?}: {error}"),
            PolicyError::Unknown { rule, what, word } => {
                write!(f, "rule \"{rule}\": unknown {what} {word:?}")
            }
            PolicyError::Client { rule, error } => write!(f, "rule \"{rule}\": client {error}"),
            PolicyError::UnreadableWithoutGroups(rule) => {
                write!(f, "rule \"{rule}\": if_group_unreadable without member_of")
            }
            PolicyError::Read { path, error } => write!(f, "{}: {error}", path.display()),
            PolicyError::File { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for PolicyError {}

/// A policy file that cannot be taken is a configuration error.
impl From<PolicyError> for crate::base::error::Error {
    fn from(e: PolicyError) -> crate::base::error::Error {
        crate::base::error::Error::config(e.to_string())
    }
}
