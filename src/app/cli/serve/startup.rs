//! The startup sequence of `serve`, step by step: the admin flag, the
//! knowledge, the router's own block and listen address, the context, the
//! access log, the runtime and worker threads, the listeners; then serving
//! until shutdown, and the flush on the way out.

use super::{runtime, start_access_log, ServeArgs};
use crate::base::error::{Error, Result};
use crate::directory::knowledge::{self, Snapshot};
use crate::service::context::Context;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Why `serve` stopped with exit code 1: the text for stderr, ending in a
/// newline.
pub(super) struct Stop(pub(super) String);

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop(format!("error: {e}\n"))
    }
}

/// Start, serve until shutdown, stop.
pub(super) fn run(args: &ServeArgs) -> std::result::Result<(), Stop> {
    let upgrader = crate::lifecycle::upgrade::Upgrader::at_start();
    // Started by a hot upgrade: whatever stops this process before it
    // serves is told to the old one, which keeps serving.
    let incoming = match args.handover_fd {
        Some(fd) => Some(
            crate::lifecycle::upgrade::Incoming::open(fd)
                .map_err(|e| Stop(format!("error: {e}\n")))?,
        ),
        None => None,
    };
    let refused = |Stop(text): Stop| {
        if let Some(i) = &incoming {
            i.refuse(&text);
        }
        Stop(text)
    };
    let admin_token = admin_token(args).map_err(refused)?;
    let snap = load_knowledge(args).map_err(refused)?;
    let router = Arc::new(context(args, snap).map_err(|e| refused(e.into()))?);
    start_access_log(&router.cfg).map_err(|e| refused(e.into()))?;
    args.traces.start().map_err(|e| refused(e.into()))?;
    // Worker 0 is this thread's single-threaded runtime; the others are
    // threads of their own (crate::base::workers).
    let rt = runtime(1).map_err(|e| refused(e.into()))?;
    let workers = crate::base::workers::Workers::start(
        router.cfg.workers,
        rt.handle().clone(),
        f64::from(router.cfg.spread_above) / 100.0,
    )
    .map_err(|e| {
        refused(Stop(format!(
            "error: cannot start the worker threads: {e}\n"
        )))
    })?;
    let inherited = match &incoming {
        Some(i) => Some(i.ready().map_err(|e| Stop(format!("error: {e}\n")))?),
        None => None,
    };
    let taking = Taking {
        upgrader,
        incoming,
        inherited: inherited.unwrap_or_default(),
    };
    let result = rt.block_on(listen_and_serve(
        args,
        admin_token,
        router,
        &workers,
        taking,
    ));
    // A reload still reading knowledge (a slow or hostile file) does not
    // keep the process from exiting.
    rt.shutdown_timeout(Duration::from_secs(1));
    workers.stop();
    crate::observe::access::flush();
    crate::observe::otel::shutdown();
    result.map_err(Stop::from)
}

/// The admin API's tokens, checked against --admin: an empty token is no
/// token; without one, the admin API stays on loopback (refused before
/// anything listens).
fn admin_token(args: &ServeArgs) -> std::result::Result<crate::app::admin::Access, Stop> {
    let token = args.admin_token.clone().filter(|t| !t.is_empty());
    let read_token = args.admin_read_token.clone().filter(|t| !t.is_empty());
    if args.admin != "none" {
        let any = token.as_deref().or(read_token.as_deref());
        crate::app::admin::guard::admin_flag(&args.admin, any)
            .map_err(|e| Stop(format!("error: {e}\n")))?;
    }
    Ok(crate::app::admin::Access {
        token,
        read_token,
        ready: args.ready_when,
    })
}

/// The knowledge, its warnings logged.
fn load_knowledge(args: &ServeArgs) -> std::result::Result<Snapshot, Stop> {
    let snap = knowledge::load(&args.knowledge).map_err(|e| Stop(e.to_string()))?;
    for w in &snap.warnings {
        tracing::warn!("{}", w.to_string().trim_end());
    }
    Ok(snap)
}

/// The application context: the configuration from the flags, the listen
/// address and the router's own block.
fn context(args: &ServeArgs, snap: Snapshot) -> Result<Context> {
    let own = args
        .name
        .as_deref()
        .and_then(|n| snap.dsa_index(n))
        .map(|i| snap.dsas[i].clone());
    let listen = args
        .listen
        .clone()
        .or_else(|| {
            own.as_ref().and_then(|d| {
                crate::backend::upstream::pool::socket_addrs(d)
                    .into_iter()
                    .next()
            })
        })
        .unwrap_or_else(|| crate::app::cli::DEFAULT_LISTEN.to_string());
    let mut c = args.limits.config(&args.origins)?;
    args.tls.apply(&mut c, &args.origins)?;
    let name = match &args.name {
        Some(n) => Some(n.clone()),
        None => own_block(&snap, &listen, c.ldaps_listen.as_deref())?,
    };
    c.listen = listen;
    c.workers = crate::base::workers::resolve(args.threads);
    c.spread_above = args.spread_above;
    c.pinned = args.origins.pinned();
    let router = Context::new(c, snap, name)?;
    if let Some(file) = super::settings::FileSource::new(&args.origins) {
        tracing::info!(file = %file_name(&args.origins), "settings file read");
        let _ = router.settings_file.set(Box::new(file));
    }
    Ok(router)
}

/// The settings file's name, for the log.
fn file_name(o: &super::settings::Origins) -> String {
    o.file
        .as_deref()
        .map(|f| f.display().to_string())
        .unwrap_or_default()
}

/// Without --name, the router's own block: the one whose address is one
/// of this router's listen addresses (LDAP, LDAPS), else one at a
/// listen-only address (0.0.0.0, ::); never a target, never
/// health-checked. Several alike: `serve` does not start.
fn own_block(snap: &Snapshot, listen: &str, ldaps: Option<&str>) -> Result<Option<String>> {
    use crate::directory::route::own::{self, Own};
    let (ldap, ldaps) = (listens_at(listen), ldaps.map(listens_at));
    let found = own::find(snap, None, |a| {
        ldap(a) || ldaps.as_ref().is_some_and(|l| l(a))
    });
    let note = found.note(snap);
    match (&found, note) {
        (Own::Ambiguous(_), Some(n)) => Err(Error::config(n)),
        (_, Some(n)) => {
            tracing::warn!(%listen, "{n}");
            Ok(found.name(snap).map(str::to_string))
        }
        _ => Ok(None),
    }
}

/// Whether a knowledge address is `listen` on this host: the same port,
/// and an address of this host that `listen` covers (the same address,
/// any address for `0.0.0.0`/`::`, loopback for loopback).
fn listens_at(listen: &str) -> impl Fn(&crate::directory::knowledge::Address) -> bool {
    use std::net::{ToSocketAddrs, UdpSocket};
    let l = listen.to_socket_addrs().ok().and_then(|mut l| l.next());
    // An address of this host can be bound to.
    let local = |ip: std::net::IpAddr| ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok();
    move |a| {
        let Some(l) = l else {
            return false;
        };
        let covers = |a: std::net::SocketAddr| {
            a.port() == l.port()
                && local(a.ip())
                && (l.ip().is_unspecified()
                    || a.ip() == l.ip()
                    || (a.ip().is_loopback() && l.ip().is_loopback()))
        };
        // A listen-only address is no place this router listens at (but
        // looks like the router's all the same: `own::find`).
        !crate::directory::route::own::wildcard(a)
            && (a.host.as_str(), a.port)
                .to_socket_addrs()
                .map(|mut it| it.any(covers))
                .unwrap_or(false)
    }
}

/// A hot upgrade's part in serving: what a later upgrade needs, and, in a
/// process started by one, the old process and its listeners.
struct Taking {
    upgrader: crate::lifecycle::upgrade::Upgrader,
    incoming: Option<crate::lifecycle::upgrade::Incoming>,
    inherited: crate::lifecycle::upgrade::Inherited,
}

/// A listening socket handed over by the old process, on this runtime.
fn inherited(l: std::net::TcpListener) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::from_std(l).map_err(|e| Error::config(format!("handover: {e}")))
}

/// A copy of a listening socket, for a later upgrade to hand over.
fn copy(l: &tokio::net::TcpListener) -> Result<std::os::fd::OwnedFd> {
    std::os::fd::AsFd::as_fd(l)
        .try_clone_to_owned()
        .map_err(|e| Error::config(format!("listener: {e}")))
}

/// The listeners (LDAP, and LDAPS with --ldaps-listen; or those the old
/// process handed over), the admin API, `--watch` and the signals; then
/// the accept loop until shutdown.
async fn listen_and_serve(
    args: &ServeArgs,
    admin_token: crate::app::admin::Access,
    router: Arc<Context>,
    pool: &crate::base::workers::Workers,
    taking: Taking,
) -> Result<()> {
    let Taking {
        mut upgrader,
        incoming,
        inherited: handed,
    } = taking;
    let (tx, rx) = watch::channel(false);
    // The control socket first: once the router says it listens, `ctl`
    // works. A new process of a hot upgrade replaces the old one's.
    let control = crate::app::admin::socket::Setting::from_flag(args.control_socket.as_deref());
    crate::app::admin::start_control(
        &control,
        incoming.is_some(),
        router.clone(),
        args.ready_when,
        rx.clone(),
    )
    .await?;
    let listen = &router.cfg.listen;
    let listener = match handed.ldap {
        Some(l) => inherited(l)?,
        None => crate::frontend::server::listen(listen)
            .await
            .map_err(|e| Error::config(format!("cannot listen on {listen}: {e}")))?,
    };
    let addr = listener
        .local_addr()
        .map_err(|e| Error::config(e.to_string()))?;
    let root = args.knowledge.clone();
    tracing::info!(%addr, knowledge = %root.display(), "dsa-router listening");
    let ldaps = match (handed.ldaps, &router.cfg.ldaps_listen) {
        (Some(l), Some(_)) => Some(inherited(l)?),
        (_, Some(a)) => Some(listen_ldaps(a).await?),
        (_, None) => None,
    };
    let mut admin = None;
    if args.admin != "none" {
        admin = Some(match handed.admin {
            Some(l) => {
                let l = inherited(l)?;
                let c = copy(&l)?;
                let (r, t) = (router.clone(), admin_token);
                tokio::spawn(crate::app::admin::run(
                    l,
                    args.admin.clone(),
                    r,
                    t,
                    rx.clone(),
                ));
                c
            }
            None => {
                crate::app::admin::start(&args.admin, admin_token, router.clone(), rx.clone())
                    .await?
            }
        });
    }
    let ldaps_copy = ldaps.as_ref().map(copy).transpose()?;
    upgrader.listening(copy(&listener)?, ldaps_copy, admin);
    let upgraded = incoming.is_some();
    if let Some(i) = incoming {
        tracing::info!("upgrade: took over the listeners from the old process");
        i.serving(&router.lifecycle.handover);
    }
    if args.watch {
        tokio::spawn(super::signals::watch_files(router.clone(), rx.clone()));
    }
    tokio::spawn(super::signals::signals(tx, router.clone(), root, upgrader));
    // A new process of a hot upgrade is not the service's main process
    // yet: the old one tells the service manager when it serves.
    if !upgraded {
        router.lifecycle.notify.ready(&status_line(&router, addr));
    }
    tracing::info!(
        threads = router.cfg.workers,
        spread_above = router.cfg.spread_above,
        "worker threads"
    );
    crate::frontend::server::run_on(listener, ldaps, router.clone(), rx, Some(pool)).await;
    // After an upgrade: no session is left to hand over.
    router.lifecycle.handover.finish();
    tracing::info!("dsa-router stopped");
    Ok(())
}

/// The service manager's status line once the router listens.
fn status_line(router: &Context, addr: std::net::SocketAddr) -> String {
    let snap = &router.routing().snap;
    format!(
        "serving on {addr}: {} DSA(s) in the knowledge",
        snap.dsas.len()
    )
}

/// The LDAPS listener of --ldaps-listen.
async fn listen_ldaps(a: &str) -> Result<tokio::net::TcpListener> {
    let l = crate::frontend::server::listen(a)
        .await
        .map_err(|e| Error::config(format!("cannot listen on --ldaps-listen {a}: {e}")))?;
    let addr = l.local_addr().map_err(|e| Error::config(e.to_string()))?;
    tracing::info!(%addr, "dsa-router listening for LDAPS");
    Ok(l)
}
