//! The clap side of `serve` flags whose values are other layers' types:
//! enums with the same variants and help as the domain's (`--affinity-scope`,
//! `--access-log-format`, `--fanout-policy`, `--own-connection`) and
//! the option groups of replication positions, failed binds and client
//! policies. Each converts into the setting it stands for, so that only
//! this layer knows clap.

use super::groups::{POLICY, REPLICATION};
use super::values::Dur;
use crate::base::units::Span;
use std::path::PathBuf;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(86_400);
/// `--csn-interval`, `--max-replication-lag`, `--max-staleness`.
const POSITIONS: Span = Span::secs(Duration::from_millis(1), DAY).or_zero();
/// `--failed-bind-window`, `--failed-bind-backoff`.
const FAILED_BIND: Span = Span::secs(Duration::from_millis(100), DAY);

/// Whose writes read-your-writes affinity follows
/// ([`crate::service::config::AffinityScope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AffinityScope {
    /// The client connection's own writes.
    Connection,
    /// The bound identity's writes, from any of its connections (anonymous
    /// clients: their connection).
    Identity,
}

impl From<AffinityScope> for crate::service::config::AffinityScope {
    fn from(v: AffinityScope) -> Self {
        match v {
            AffinityScope::Connection => Self::Connection,
            AffinityScope::Identity => Self::Identity,
        }
    }
}

/// What a failed partition does to a search spanning partitions
/// ([`crate::service::config::FanoutPolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FanoutPolicy {
    /// Fail the whole search with `unavailable`, naming the partition.
    Fail,
    /// Return what the other partitions gave, plus a continuation
    /// reference (the missing partition's DSA addresses) for the missing
    /// one.
    Continuation,
}

impl From<FanoutPolicy> for crate::service::config::FanoutPolicy {
    fn from(v: FanoutPolicy) -> Self {
        match v {
            FanoutPolicy::Fail => Self::Fail,
            FanoutPolicy::Continuation => Self::Continuation,
        }
    }
}

/// Which bound clients get DSA connections of their own
/// ([`crate::service::config::OwnConnection`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OwnConnection {
    /// Clients whose bind response carried a password policy warning or
    /// error, and clients bound as the router's own identity.
    Policy,
    /// Every bound client.
    Always,
}

impl From<OwnConnection> for crate::service::config::OwnConnection {
    fn from(v: OwnConnection) -> Self {
        match v {
            OwnConnection::Policy => Self::Policy,
            OwnConnection::Always => Self::Always,
        }
    }
}

/// The access log's line format ([`crate::observe::access::Format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AccessLogFormat {
    /// `TIME  INFO access: key=value ...`
    Text,
    /// One JSON object per line.
    Json,
}

impl From<AccessLogFormat> for crate::observe::access::Format {
    fn from(v: AccessLogFormat) -> Self {
        match v {
            AccessLogFormat::Text => Self::Text,
            AccessLogFormat::Json => Self::Json,
        }
    }
}

/// `serve` options of replication positions
/// ([`crate::directory::replication::Config`]).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = REPLICATION)]
pub struct ReplicationArgs {
    /// How often each DSA's replication position (`contextCSN` of each
    /// partition's suffix) is read: one base read per DSA and partition.
    /// `0` turns positions off (read-your-writes is then the time window
    /// alone). A bare number is seconds.
    #[arg(long, default_value = "100ms", value_parser = Dur(POSITIONS))]
    pub csn_interval: Duration,
    /// A DSA whose position is older than its load-share group's newest by
    /// more than this serves no reads (never the last eligible DSA).
    /// Default: off. A bare number is seconds.
    #[arg(long, value_parser = Dur(POSITIONS))]
    pub max_replication_lag: Option<Duration>,
    /// Reads go only to DSAs that may lack no change older than this: one
    /// that has the newest position this router knows for the partition,
    /// or one behind it whose own CSN is at most this old (when none is,
    /// the newest serves). Default: off. A bare number is seconds.
    #[arg(long, value_parser = Dur(POSITIONS))]
    pub max_staleness: Option<Duration>,
    /// Do not ask the DSA that takes a write for the written entry's
    /// `entryCSN` (the post-read control, RFC 4527): a write's position is
    /// then the write DSA's first `contextCSN` reading after it, which can
    /// be older than the write while that DSA has other writes pending.
    #[arg(long)]
    pub no_post_read: bool,
}

impl ReplicationArgs {
    /// The settings.
    pub fn config(&self) -> crate::directory::replication::Config {
        crate::directory::replication::Config {
            interval: self.csn_interval,
            max_lag: self.max_replication_lag,
            max_staleness: self.max_staleness,
            post_read: !self.no_post_read,
        }
    }
}

/// The `serve` options of the failed-bind defence
/// ([`crate::admission::guard::Config`]).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = POLICY)]
pub struct FailedBindArgs {
    /// Failed binds (invalidCredentials from the DSA) for one bind DN from
    /// one client address within --failed-bind-window after which the
    /// router answers that DN's binds from that address itself,
    /// invalidCredentials, for --failed-bind-backoff, without reaching a
    /// DSA (0: off). Binds of the DN from other addresses go on. A
    /// successful bind resets the count. 0 also turns
    /// --failed-bind-limit-per-dn off.
    #[arg(long, default_value_t = 5)]
    pub failed_bind_limit: u32,
    /// The ceiling for one bind DN from all addresses together: reached,
    /// the DN's binds are refused from every address for
    /// --failed-bind-backoff. Set it below the DSAs' own lockout
    /// (ppolicy pwdMaxFailure) so that guesses spread over many addresses
    /// never lock the account (0: off).
    #[arg(long, default_value_t = 20)]
    pub failed_bind_limit_per_dn: u32,
    /// The same for all binds from one client address, whatever their DNs
    /// (0: off, the default: behind a load balancer without PROXY protocol
    /// or a NAT every user shares one address, and all would be refused).
    /// Other users of that address are refused too once it is reached:
    /// keep it well above --failed-bind-limit.
    #[arg(long, default_value_t = 0)]
    pub failed_bind_limit_per_address: u32,
    /// The window failures count in, from a DN's (address's) first failure
    /// (a bare number is seconds).
    #[arg(long, default_value = "5m", value_parser = Dur(FAILED_BIND))]
    pub failed_bind_window: Duration,
    /// How long binds are refused once a limit is reached (a bare number
    /// is seconds).
    #[arg(long, default_value = "5m", value_parser = Dur(FAILED_BIND))]
    pub failed_bind_backoff: Duration,
}

impl FailedBindArgs {
    /// The limits.
    pub fn config(&self) -> crate::admission::guard::Config {
        crate::admission::guard::Config::from_limits(
            self.failed_bind_limit,
            self.failed_bind_limit_per_dn,
            self.failed_bind_limit_per_address,
            self.failed_bind_window,
            self.failed_bind_backoff,
        )
    }
}

/// The `serve` option of client policies
/// ([`crate::admission::policy::Policies`]).
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = POLICY)]
pub struct PolicyArgs {
    /// Client policies: a TOML file of ordered rules (who may do what,
    /// where, and how often; see docs/policy.md), re-read on reload with
    /// the knowledge. Without it every client may do everything.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}
