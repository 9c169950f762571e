//! `check --online`: the DSAs are asked what they hold (their root DSEs'
//! `namingContexts`), and each partition's prefix is compared with it
//! ([`crate::backend::contexts`]): a prefix no DSA of its partition holds
//! is a warning, with the likely fix.

use crate::directory::knowledge::Snapshot;
use crate::directory::route::Table;

/// Ask the DSAs of `table` and print, on stderr, those that did not
/// answer and each prefix warning; the number of warnings.
pub(super) fn check(snap: &Snapshot, table: &Table) -> usize {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("online: cannot start the runtime: {e}");
            return 0;
        }
    };
    let mut limits = crate::service::config::Config::default().limits();
    limits.connect_timeout = limits
        .connect_timeout
        .min(std::time::Duration::from_secs(3));
    limits.op_timeout = limits.op_timeout.min(std::time::Duration::from_secs(5));
    let got = rt.block_on(crate::backend::contexts::read(snap, table, limits));
    let mut answered = 0;
    for (i, r) in &got {
        match r {
            Ok(_) => answered += 1,
            Err(e) => eprintln!(
                "online: DSA {} not read: {}",
                snap.dsas[*i].name,
                crate::base::logsafe::esc(e)
            ),
        }
    }
    let contexts_of = |i: crate::directory::knowledge::DsaId| {
        got.iter()
            .find(|(j, _)| *j == i)
            .and_then(|(_, r)| r.as_ref().ok().cloned())
    };
    let warnings = crate::backend::contexts::check(snap, table, contexts_of, |_| false);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    println!(
        "online: {answered} of {} DSA(s) answered; {} prefix warning(s)",
        got.len(),
        warnings.len()
    );
    warnings.len()
}
