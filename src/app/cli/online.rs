//! `check --online`: the DSAs are asked what they hold (their root DSEs'
//! `namingContexts`), and each partition's prefix is compared with it
//! ([`crate::backend::contexts`]): a prefix no DSA of its partition holds
//! is a warning, with the likely fix. A block whose root DSE carries a
//! dsa-router's instance marker ([`crate::base::instance`]) is a router,
//! not a DSA: most likely the router's own block at an address that does
//! not say so; a warning names it, and it is left out of the comparison.

use crate::directory::knowledge::Snapshot;
use crate::directory::route::Table;

/// Ask the DSAs of `table` and print, on stderr, those that did not
/// answer, the blocks that are routers and each prefix warning; the
/// number of warnings.
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
    let mut routers = 0;
    for (i, r) in &got {
        let name = &snap.dsas[*i].name;
        match r {
            Ok(r) if r.router_instance.is_some() => {
                answered += 1;
                routers += 1;
                eprintln!("warning: {}", router_note(name.as_str()));
            }
            Ok(_) => answered += 1,
            Err(e) => eprintln!(
                "online: DSA {name} not read: {}",
                crate::base::logsafe::esc(e)
            ),
        }
    }
    let contexts_of = |i: crate::directory::knowledge::DsaId| {
        got.iter()
            .find(|(j, _)| *j == i)
            .and_then(|(_, r)| r.as_ref().ok())
            .filter(|r| r.router_instance.is_none())
            .map(|r| r.contexts.clone())
    };
    let warnings = crate::backend::contexts::check(snap, table, contexts_of, |_| false);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let routers_said = match routers {
        0 => String::new(),
        n => format!(", {n} of them a dsa-router"),
    };
    println!(
        "online: {answered} of {} DSA(s) answered{routers_said}; {} prefix warning(s)",
        got.len(),
        warnings.len()
    );
    warnings.len() + routers
}

/// What `check --online` says of block `name` that answered as a
/// dsa-router.
fn router_note(name: &str) -> String {
    format!(
        "DSA {name} answers as a dsa-router (its root DSE carries a {} marker): not a DSA to route to; if it is this router, pass --name {name} (serve finds it by itself: the probe that meets its own marker takes the block as its own)",
        crate::base::instance::ATTRIBUTE
    )
}
