//! # dsa-testdsa: an in-memory LDAP directory server for tests and `demo`
//!
//! A [`TestDsa`] is a small but real LDAPv3 server over TCP, loaded from
//! LDIF ([`Directory::from_ldif`]). Integration tests start several of them
//! on `127.0.0.1:0` to stand in for the DSAs of a namespace, and `demo` runs
//! them behind the router. It is not a conforming directory: there is no
//! schema, matching is case-insensitive for everything, and access control
//! is two test attributes. It does implement the parts a router must carry
//! faithfully: search scopes, filters, size limits, paged results, abandon,
//! compare, bind identity, proxied authorization, WhoAmI and the write
//! operations.
//!
//! ## Design
//! * [`names`]: DN splitting and normalization; the store key of a DN is its
//!   normalized RDNs suffix first.
//! * [`ldif`]: the LDIF parser.
//! * [`directory`]: the store, a `BTreeMap` from key to entry behind
//!   `Arc<RwLock<..>>`, so a subtree is one range scan (100,000 entries load
//!   and stream quickly) and clones of a [`Directory`] share updates.
//! * [`filter`]: filter evaluation and attribute selection.
//! * `ops`: operation dispatch, bind, compare, writes, extended operations,
//!   identity, proxied authorization and access control.
//! * `search`: the root DSE, scopes, size limits, paged results and
//!   streaming with abandon.
//! * `server`: the accept loop and connection I/O with `LdapCodec`. Each
//!   operation other than bind runs in its own task and sends its responses
//!   through a bounded channel to the connection's writer; a search sends one
//!   entry at a time and checks its abandon flag in between.
//! * [`seed`]: the seed's data for one DSA ([`seed_ldif`]).
//! * [`process`]: one test DSA as a process (`dsa-router testdsa`).
//!
//! It is a crate of its own so that the router's production build
//! (`--no-default-features`) does not contain it; the router links it only
//! for its `demo` and `testdsa` subcommands (feature `dev-tools`).
//!
//! ## Telling DSAs apart
//! Every successful result (search done, compare true/false, bind, writes,
//! extended) carries the diagnostic message `testdsa <name>`; errors carry
//! `testdsa <name>: <reason>`. The root DSE has `testDsaName: <name>`.
//!
//! ## Test access control
//! * `testAclReaders: <DN>` (any number): the entry is visible (search,
//!   compare, writes) only to those identities.
//! * `testAclProxy: TRUE` on a user entry lets that user send the proxied
//!   authorization control (RFC 4370); otherwise authorizationDenied (123).
//!
//! ## Faults
//! [`Faults`] are switches shared with the running server: a response delay,
//! refusing connections (closed right after accept), a blackhole (read
//! requests, never answer), hanging binds only
//! ([`Faults::set_hang_binds`]), answering searches with entries renamed
//! (`set_answer_as`) and one result code for every answer. [`Stats`] counts
//! what the server did.
//!
//! ## Trace context
//! [`TraceContext`]: a switch that makes it advertise and accept the
//! router's trace context control, and the record of the values it
//! received (`dsa-router testdsa --trace-context --trace-context-log
//! FILE`).

pub mod directory;
pub mod filter;
mod hang_binds;
pub mod ldif;
mod misanswer;
pub mod names;
mod ops;
pub mod process;
mod search;
pub mod seed;
mod server;
pub mod trace_context;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use directory::Directory;
pub use seed::seed_ldif;
pub use trace_context::TraceContext;

/// Proxied authorization control (RFC 4370).
pub const PROXY_AUTHZ_OID: &str = "2.16.840.1.113730.3.4.18";
/// Simple paged results control (RFC 2696).
pub const PAGED_RESULTS_OID: &str = "1.2.840.113556.1.4.319";
/// "Who am I?" extended operation (RFC 4532).
pub const WHOAMI_OID: &str = "1.3.6.1.4.1.4203.1.11.3";

#[derive(Debug, Default)]
struct FaultState {
    delay_ms: AtomicU64,
    refuse: AtomicBool,
    blackhole: AtomicBool,
    answer_as: misanswer::AnswerAs,
    hang_binds: AtomicBool,
    /// A result code every operation but bind is answered with.
    answer: std::sync::Mutex<Option<ldap3_proto::proto::LdapResultCode>>,
}

/// Fault switches, shared by all clones and read by the server on every
/// connection and operation, so they can be flipped while it runs.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    state: Arc<FaultState>,
}

impl Faults {
    /// Delays every operation's response(s) by `d` (zero: no delay).
    pub fn set_delay(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.state.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Closes new connections right after accepting them.
    pub fn set_refuse(&self, on: bool) {
        self.state.refuse.store(on, Ordering::Relaxed);
    }

    /// Reads requests but never answers them.
    pub fn set_blackhole(&self, on: bool) {
        self.state.blackhole.store(on, Ordering::Relaxed);
    }

    /// Answers every operation but bind with `code` (`busy` while
    /// starting, `unavailable` while recovering...); `None`: as usual.
    pub fn set_answer(&self, code: Option<ldap3_proto::proto::LdapResultCode>) {
        *self.state.answer.lock().unwrap_or_else(|p| p.into_inner()) = code;
    }

    pub fn answer(&self) -> Option<ldap3_proto::proto::LdapResultCode> {
        self.state
            .answer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.state.delay_ms.load(Ordering::Relaxed))
    }

    pub fn refuse(&self) -> bool {
        self.state.refuse.load(Ordering::Relaxed)
    }

    pub fn blackhole(&self) -> bool {
        self.state.blackhole.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    open: AtomicU64,
    refused: AtomicU64,
    operations: AtomicU64,
    entries_sent: AtomicU64,
    abandoned: AtomicU64,
    binds: AtomicU64,
}

/// An open connection, counted until dropped.
pub(crate) struct OpenGuard(Stats);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.c.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counters of what a server did, shared by all clones.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    c: Arc<Counters>,
}

impl Stats {
    /// Connections accepted and served.
    pub fn connections(&self) -> u64 {
        self.c.connections.load(Ordering::Relaxed)
    }
    /// Connections open now.
    pub fn open_connections(&self) -> u64 {
        self.c.open.load(Ordering::Relaxed)
    }
    /// Connections closed at once because of [`Faults::set_refuse`].
    pub fn refused_connections(&self) -> u64 {
        self.c.refused.load(Ordering::Relaxed)
    }
    /// Requests received (including abandon and unbind).
    pub fn operations(&self) -> u64 {
        self.c.operations.load(Ordering::Relaxed)
    }
    /// Search result entries sent.
    pub fn entries_sent(&self) -> u64 {
        self.c.entries_sent.load(Ordering::Relaxed)
    }
    /// Searches stopped by an abandon request.
    pub fn searches_abandoned(&self) -> u64 {
        self.c.abandoned.load(Ordering::Relaxed)
    }

    /// Bind requests received (answered or not).
    pub fn binds(&self) -> u64 {
        self.c.binds.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn connected(&self) {
        Self::bump(&self.c.connections);
    }
    /// Count a connection open until the guard drops.
    pub(crate) fn open(&self) -> OpenGuard {
        Self::bump(&self.c.open);
        OpenGuard(self.clone())
    }
    pub(crate) fn refused(&self) {
        Self::bump(&self.c.refused);
    }
    pub(crate) fn operation(&self) {
        Self::bump(&self.c.operations);
    }
    pub(crate) fn entry_sent(&self) {
        Self::bump(&self.c.entries_sent);
    }
    pub(crate) fn bind(&self) {
        Self::bump(&self.c.binds);
    }
    pub(crate) fn search_abandoned(&self) {
        Self::bump(&self.c.abandoned);
    }
}

/// Serves `dir` on `listener` until the future is dropped (for example by
/// aborting its task); each connection runs in a task owned by this one.
pub async fn serve(listener: TcpListener, dir: Directory, faults: Faults, name: String) {
    serve_with_stats(listener, dir, faults, Stats::default(), name).await;
}

/// [`serve`], counting into `stats`.
pub async fn serve_with_stats(
    listener: TcpListener,
    dir: Directory,
    faults: Faults,
    stats: Stats,
    name: String,
) {
    serve_traced(listener, dir, faults, stats, TraceContext::default(), name).await;
}

/// [`serve_with_stats`], with the trace context control as `trace` says.
pub async fn serve_traced(
    listener: TcpListener,
    dir: Directory,
    faults: Faults,
    stats: Stats,
    trace: TraceContext,
    name: String,
) {
    let ctx = Arc::new(ops::Ctx {
        dir,
        faults,
        stats,
        trace,
        name,
    });
    server::accept_loop(listener, ctx).await;
}

/// A running test DSA. Dropping it (or [`TestDsa::shutdown`]) stops the
/// server and closes its connections.
#[derive(Debug)]
pub struct TestDsa {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its fault switches.
    pub faults: Faults,
    /// Its counters.
    pub stats: Stats,
    /// Its trace context switch and what it received.
    pub trace: TraceContext,
    /// The name given at start.
    pub name: String,
    /// Its directory (shared with the server: updates show here).
    pub dir: Directory,
    task: Option<JoinHandle<()>>,
}

impl TestDsa {
    /// Binds `listen` (e.g. `127.0.0.1:0`) and serves `dir` in a background
    /// task.
    pub async fn start(dir: Directory, listen: &str, name: &str) -> std::io::Result<TestDsa> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let faults = Faults::default();
        let stats = Stats::default();
        let trace = TraceContext::default();
        let task = tokio::spawn(serve_traced(
            listener,
            dir.clone(),
            faults.clone(),
            stats.clone(),
            trace.clone(),
            name.to_string(),
        ));
        tracing::debug!(%name, %addr, entries = dir.len(), "testdsa started");
        Ok(TestDsa {
            addr,
            faults,
            stats,
            trace,
            name: name.to_string(),
            dir,
            task: Some(task),
        })
    }

    /// `ldap://<addr>`.
    pub fn url(&self) -> String {
        format!("ldap://{}", self.addr)
    }

    /// Stops the server and waits until its listener and connections are
    /// closed, so the port can be reused.
    pub async fn shutdown(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for TestDsa {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
