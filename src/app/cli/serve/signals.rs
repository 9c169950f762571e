//! What reaches a running router from outside its sockets: signals
//! (shutdown, reload, reopening the access log) and, with `--watch`,
//! changed knowledge and TLS files.

use crate::service::context::Context;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a changed file must stay unchanged before `--watch` reads it.
const SETTLE: Duration = Duration::from_millis(500);
/// How long SIGTERM waits for an upgrade it abandons to stop its new
/// process and answer whoever asked for it.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// `--watch`: reload when any knowledge, TLS or settings file's
/// modification time or size changes, once it has stopped changing
/// ([`SETTLE`]).
pub(super) async fn watch_files(router: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    // The TLS files too: a renewed certificate is picked up like knowledge.
    let tls_files: Vec<PathBuf> = router
        .cfg
        .tls
        .iter()
        .flat_map(|t| {
            [
                Some(t.cert.clone()),
                Some(t.key.clone()),
                t.client_ca.clone(),
            ]
        })
        .flatten()
        .chain(router.cfg.dsa_ca.clone())
        .chain(router.settings_file.get().map(|f| f.path().to_path_buf()))
        .collect();
    let stamp = |router: &Context| -> Vec<(PathBuf, Option<std::time::SystemTime>, u64)> {
        router
            .routing()
            .snap
            .files
            .iter()
            .chain(tls_files.iter())
            .map(|f| {
                let m = std::fs::metadata(f).ok();
                (
                    f.clone(),
                    m.as_ref().and_then(|m| m.modified().ok()),
                    m.map(|m| m.len()).unwrap_or(0),
                )
            })
            .collect()
    };
    let mut last = stamp(&router);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        let mut now = stamp(&router);
        if now != last {
            // A file being written is read once it stops changing: the
            // same size and modification time for SETTLE.
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(SETTLE) => {}
                    _ = shutdown.changed() => return,
                }
                let again = stamp(&router);
                if again == now {
                    break;
                }
                now = again;
            }
            tracing::info!("a knowledge, TLS or settings file changed; reloading");
            let r = router.clone();
            let _ = tokio::task::spawn_blocking(move || r.reload_from_disk()).await;
            last = stamp(&router);
        }
    }
}

/// SIGINT/SIGTERM, or `ctl shutdown`: drain and shut down. SIGHUP: reload
/// knowledge. SIGUSR1: reopen the access log's file. SIGUSR2 or `ctl
/// upgrade`: a hot upgrade, run beside this loop, so that SIGTERM ends
/// the router even while a new process never answers (the upgrade is
/// abandoned and the new process stopped).
pub(super) async fn signals(
    tx: watch::Sender<bool>,
    router: Arc<Context>,
    root: PathBuf,
    upgrader: crate::lifecycle::upgrade::Upgrader,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    let upgrader = Arc::new(upgrader);
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    let mut upgrading: Option<tokio::task::JoinHandle<bool>> = None;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = router.lifecycle.drain.asked() => break,
            took = finished(&mut upgrading) => {
                upgrading = None;
                if took {
                    break;
                }
            }
            _ = usr2.recv() => {
                let ask = crate::lifecycle::handover::Ask { reply: None };
                begin(&router, &upgrader, &mut upgrading, ask);
            }
            Some(ask) = router.lifecycle.handover.asked() => begin(&router, &upgrader, &mut upgrading, ask),
            _ = usr1.recv() => crate::observe::access::reopen(),
            _ = hup.recv() => {
                // Off the runtime's threads: with --threads 1 a reload
                // would otherwise stall every connection while it reads.
                // Not awaited here: a reload in progress never delays
                // SIGTERM; one at a time.
                if running.as_ref().is_some_and(|h| !h.is_finished()) {
                    tracing::warn!("SIGHUP: a reload is still running; this one is skipped");
                    continue;
                }
                let (r, p) = (router.clone(), root.clone());
                running = Some(tokio::task::spawn_blocking(move || reload(&r, &p)));
            }
        }
    }
    if let Some(h) = upgrading.take() {
        tracing::warn!(
            "shutting down: the upgrade under way is abandoned; its new process is stopped"
        );
        upgrader.cancel();
        // The new process stopped and whoever asked answered (bounded: a
        // stop never delays the drain for long).
        let _ = tokio::time::timeout(CANCEL_WAIT, h).await;
    }
    if router.lifecycle.handover.exporting().is_some() {
        tracing::info!(
            timeout_s = router.cfg.drain_timeout.as_secs(),
            "upgrade: the new process accepts; sessions leave for it between operations, the rest drain"
        );
    } else {
        router.lifecycle.notify.stopping();
        tracing::info!(
            timeout_s = router.cfg.drain_timeout.as_secs(),
            "draining: no new connections; operations in flight finish, then each client connection closes"
        );
    }
    let _ = tx.send(true);
}

/// Whether the upgrade under way took over (never, without one).
async fn finished(upgrading: &mut Option<tokio::task::JoinHandle<bool>>) -> bool {
    match upgrading {
        Some(h) => h.await.unwrap_or(false),
        None => std::future::pending().await,
    }
}

/// Start the upgrade `ask` asks for, beside the signal loop; one at a
/// time (another ask meanwhile is told so).
fn begin(
    router: &Arc<Context>,
    upgrader: &Arc<crate::lifecycle::upgrade::Upgrader>,
    upgrading: &mut Option<tokio::task::JoinHandle<bool>>,
    ask: crate::lifecycle::handover::Ask,
) {
    if upgrading.is_some() {
        tracing::warn!("upgrade asked while one is under way; ignored");
        if let Some(r) = ask.reply {
            let _ = r.send(Err(crate::lifecycle::handover::UpgradeError::InProgress));
        }
        return;
    }
    let (r, u) = (router.clone(), upgrader.clone());
    *upgrading = Some(tokio::spawn(async move { upgrade(&r, &u, ask).await }));
}

/// Start the new process and hand it the listeners (off the runtime: it
/// waits for the new process); true when it serves, and this process's
/// sessions are to leave for it. On failure this process keeps serving.
async fn upgrade(
    router: &Context,
    upgrader: &Arc<crate::lifecycle::upgrade::Upgrader>,
    ask: crate::lifecycle::handover::Ask,
) -> bool {
    let crate::lifecycle::handover::Ask { reply } = ask;
    let up = upgrader.clone();
    let started = tokio::task::spawn_blocking(move || up.start())
        .await
        .unwrap_or_else(|e| Err(crate::lifecycle::handover::UpgradeError::Task(e)));
    let answer = match started {
        Ok(s) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let sock = s.sock;
            let sending = std::thread::Builder::new()
                .name("dsa-router-handover".into())
                .spawn(move || crate::lifecycle::upgrade::old::send_sessions(sock, rx));
            match sending {
                Ok(_) => {
                    router.lifecycle.handover.export_to(tx);
                    // The service manager follows the new process (this
                    // one says nothing more).
                    router.lifecycle.notify.hand_main_to(s.pid);
                    tracing::info!(pid = s.pid, binary = %s.binary, "upgrade: the new process serves");
                    Ok(crate::lifecycle::handover::Upgraded {
                        pid: s.pid,
                        binary: s.binary,
                    })
                }
                Err(e) => Err(crate::lifecycle::handover::UpgradeError::Thread(e)),
            }
        }
        Err(e) => {
            tracing::error!(error = %crate::base::logsafe::esc(&e), "upgrade failed; this process keeps serving");
            Err(e)
        }
    };
    let ok = answer.is_ok();
    if let Some(r) = reply {
        let _ = r.send(answer);
    }
    ok
}

/// Reload knowledge: validated whole; on error the old snapshot stays.
pub fn reload(router: &Context, _root: &std::path::Path) {
    let _ = router.reload_from_disk();
}
