//! Knowledge: CA Directory (DXserver) knowledge files, loaded into one
//! immutable, validated [`Snapshot`].
//!
//! The root file (conventionally `*.dxg`) is read; `source "file";` lines
//! include other files relative to the including file, depth-first, so the
//! order in which `set dsa` blocks are met is the *knowledge order* that
//! routing depends on. A cycle of `source` lines is an error.
//!
//! Loading is all-or-nothing: every file is lexed and parsed, every error is
//! collected with its file, line and column, and a snapshot is returned only
//! when there is none. Attributes, flags and `set` commands the router does
//! not know load with a warning, so that a real CA Directory deployment's
//! knowledge loads unchanged.
//!
//! The `.dxi` initialization files of CA Directory are not read by the
//! router; point it at the group file (`.dxg`) or any file that `source`s
//! the DSA knowledge.
//!
//! # Layout
//!
//! * `lexer`: the tokens of the knowledge syntax, with line and column.
//! * `file`: one file being read, a cursor over its tokens.
//! * `loader`: files along `source` lines, the statements, and whole-load
//!   validation.
//! * `dsa`: the `set dsa` block, a table of the attributes the router uses.
//! * `values`: attribute values (names, numbers, DNs, addresses, flags).
//! * `router_settings`: the router-only `set dsa-router-*` settings.
//! * `diag`: errors and warnings that point into the files.

mod diag;
mod dsa;
mod file;
pub mod hash;
mod lexer;
mod loader;
mod name;
mod redact;
mod router_settings;
mod skipped;
mod values;

pub use diag::{edit_distance, Diagnostic, LoadError, Location, Severity};
pub use name::{DsaId, DsaName};
pub use router_settings::{RouterSettings, SetDuration, EJECTION_TIME, HEDGE_FLOOR};

use crate::proto::dn::Dn;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A password from knowledge. It never prints: `Debug` and `Display` show a
/// placeholder, and the value is reachable only through [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Address family forced by the `address` keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Tcp,
    Ipv4,
    Ipv6,
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Tcp => "tcp",
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        })
    }
}

/// One `tcp "host" port N` of an `address` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub family: Family,
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{} [{}]:{}", self.family, self.host, self.port)
        } else {
            write!(f, "{} {}:{}", self.family, self.host, self.port)
        }
    }
}

/// One `set dsa` block.
#[derive(Debug, Clone)]
pub struct DsaDef {
    pub name: DsaName,
    pub prefix: Dn,
    /// A horizontal partition's part of `prefix` (`<uid "[hash1(3)=0]">`):
    /// the DSA holds the entries just below `prefix` whose value hashes to
    /// its slot.
    pub hash: Option<crate::directory::knowledge::hash::HashPart>,
    pub native_prefix: Option<Dn>,
    pub dsa_name: Option<Dn>,
    pub dsa_password: Option<Secret>,
    pub ldap_dsa_name: Option<Dn>,
    pub ldap_dsa_password: Option<Secret>,
    /// Tried in order.
    pub addresses: Vec<Address>,
    pub dsa_flags: Vec<String>,
    pub trust_flags: Vec<String>,
    pub link_flags: Vec<String>,
    pub load_share_group: Option<String>,
    /// Router-only `dsa-router-concurrency-limit = N`: operations in flight
    /// from this router to the DSA (0 = none).
    pub concurrency_limit: Option<u32>,
    /// Router-only `dsa-router-tls = ldaps | starttls | none`: how the
    /// router secures its connections to the DSA (overrides `link-flags`).
    pub tls: Option<TlsMode>,
    /// Attributes the router accepts but does not use, as written.
    pub other: Vec<(String, String)>,
    /// Where the block's name is.
    pub defined_at: Location,
}

impl DsaDef {
    pub fn has_dsa_flag(&self, flag: &str) -> bool {
        self.dsa_flags.iter().any(|f| f.eq_ignore_ascii_case(flag))
    }

    pub fn load_share(&self) -> bool {
        self.has_dsa_flag("load-share")
    }

    pub fn trusts_conveyed_originator(&self) -> bool {
        self.trust_flags
            .iter()
            .any(|f| f.eq_ignore_ascii_case("trust-conveyed-originator"))
    }

    /// How the router secures connections to this DSA: `dsa-router-tls`
    /// when given, else LDAPS when `link-flags` has `ssl-encryption`.
    pub fn tls_mode(&self) -> Option<TlsMode> {
        match self.tls {
            Some(TlsMode::Off) => None,
            Some(m) => Some(m),
            None => self
                .link_flags
                .iter()
                .any(|f| f.eq_ignore_ascii_case("ssl-encryption"))
                .then_some(TlsMode::Ldaps),
        }
    }

    /// The load-share group (architecture.md, "Ordered list and groups"): named group, the partition's
    /// unnamed load-share group, or (without `load-share`) a group of its own.
    pub fn group(&self) -> GroupKey {
        match (self.load_share(), &self.load_share_group) {
            (true, Some(g)) => GroupKey::Named(g.clone()),
            (true, None) => GroupKey::Unnamed,
            (false, _) => GroupKey::Solo,
        }
    }
}

pub use crate::proto::tls::TlsMode;

/// How a DSA belongs to a load-share group. Group names compare ignoring
/// ASCII case, as DXserver compares DSA names: `GROUP1` and `group1` are
/// one group (the loader warns about the two spellings).
#[derive(Debug, Clone)]
pub enum GroupKey {
    Named(String),
    /// `load-share` without a group name: the partition's unnamed group.
    Unnamed,
    /// No `load-share`: a group of its own.
    Solo,
}

impl PartialEq for GroupKey {
    fn eq(&self, other: &GroupKey) -> bool {
        match (self, other) {
            (GroupKey::Named(a), GroupKey::Named(b)) => a.eq_ignore_ascii_case(b),
            (GroupKey::Unnamed, GroupKey::Unnamed) | (GroupKey::Solo, GroupKey::Solo) => true,
            _ => false,
        }
    }
}

impl Eq for GroupKey {}

/// A validated knowledge load: DSAs in knowledge order plus the precedence
/// lists. Immutable; a reload builds a new one.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub root: PathBuf,
    /// Every file read, in the order first read.
    pub files: Vec<PathBuf>,
    pub dsas: Vec<DsaDef>,
    /// `set precedence`, names as in `dsas`.
    pub precedence: Vec<String>,
    /// `set write-precedence`, names as in `dsas`.
    pub write_precedence: Vec<String>,
    pub warnings: Vec<Diagnostic>,
    /// Router-only `set dsa-router-...` commands.
    pub settings: RouterSettings,
}

impl Snapshot {
    /// Index of the DSA with this name (names compare case-insensitively).
    pub fn dsa_index(&self, name: &str) -> Option<DsaId> {
        self.dsas
            .iter()
            .position(|d| d.name.eq_ignore_ascii_case(name))
            .map(DsaId::new)
    }
}

/// Where knowledge text comes from: the disk, or memory in tests.
pub trait Source {
    fn read(&self, path: &Path) -> io::Result<String>;
    /// A key that is equal for two paths naming the same file (cycle
    /// detection).
    fn identity(&self, path: &Path) -> PathBuf;
}

/// Files on disk.
pub struct Disk;

/// The largest knowledge file read (a DXserver file is kilobytes).
pub const MAX_FILE_BYTES: u64 = 16 << 20;

impl Source for Disk {
    /// Regular files only (a FIFO or a device, even behind a symlink,
    /// would block or never end), of at most [`MAX_FILE_BYTES`].
    fn read(&self, path: &Path) -> io::Result<String> {
        use std::io::Read;
        // Looked at before opening: opening a FIFO blocks until a writer
        // comes.
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {} MiB", MAX_FILE_BYTES >> 20),
            ));
        }
        let f = std::fs::File::open(path)?;
        let mut text = String::new();
        f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {} MiB", MAX_FILE_BYTES >> 20),
            ));
        }
        Ok(text)
    }

    fn identity(&self, path: &Path) -> PathBuf {
        std::fs::canonicalize(path).unwrap_or_else(|_| lexical_normalize(path))
    }
}

/// Files in memory, keyed by path; for tests and fuzzing.
#[derive(Default)]
pub struct Memory(pub HashMap<PathBuf, String>);

impl Memory {
    pub fn with(mut self, path: &str, text: &str) -> Memory {
        self.0
            .insert(lexical_normalize(Path::new(path)), text.to_string());
        self
    }
}

impl Source for Memory {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.0
            .get(&lexical_normalize(path))
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
    }

    fn identity(&self, path: &Path) -> PathBuf {
        lexical_normalize(path)
    }
}

fn lexical_normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Load knowledge from the root file on disk.
pub fn load(root: &Path) -> Result<Snapshot, LoadError> {
    load_from(root, &Disk)
}

/// Load knowledge from any [`Source`].
pub fn load_from(root: &Path, source: &dyn Source) -> Result<Snapshot, LoadError> {
    loader::load(root, source)
}
