//! The subcommands. `check` and `explain`: knowledge and routing, shown
//! to people (text) and scripts (`--json`); both use the same routing code
//! as the data path, on a run-time view made from the command line.
//! [`serve`]: `serve` and `demo`, their flags and startup.

mod after_csn;
mod error;
mod explain;
pub mod hash;
mod online;
mod policy;
mod scope;
pub mod serve;

pub use explain::{explain_route, Explanation, OpKind};
pub use scope::Scope;

use crate::directory::knowledge::{self, Snapshot};
use crate::directory::route::{DsaId, DsaStatus, DsaView, Table};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `dsa-router explain`.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The root knowledge file.
    pub root: PathBuf,
    /// The target DN (LDAP string form, or knowledge `<type value>` form).
    pub dn: String,
    /// The operation.
    #[arg(long, value_enum, default_value_t = OpKind::Search)]
    pub op: OpKind,
    /// A search's scope: with one or sub (or children), the partitions a
    /// search at the DN reaches, as the router fans it out.
    #[arg(long, value_enum, default_value_t = Scope::Base)]
    pub scope: Scope,
    /// The router's own DSA block, never a target. Without it, the block
    /// whose address is --listen is taken (said on stderr), else one at
    /// a listen-only address (0.0.0.0, ::); several such: refused.
    #[arg(long)]
    pub name: Option<String>,
    /// Where the router listens, for finding its own block without
    /// --name.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// DSAs to treat as down (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub down: Vec<String>,
    /// DSAs to treat as disabled by an administrator.
    #[arg(long, value_delimiter = ',')]
    pub disabled: Vec<String>,
    /// DSAs to treat as draining.
    #[arg(long, value_delimiter = ',')]
    pub draining: Vec<String>,
    /// DSAs to treat as ejected as outliers.
    #[arg(long, value_delimiter = ',')]
    pub ejected: Vec<String>,
    /// A read after the client's write: the DSA that took it
    /// (read-your-writes affinity, within its window), or the write's
    /// position as `CSN[;CSN...]` (the DSAs whose position has reached it
    /// may serve: give positions with --position or --positions-from).
    #[arg(long, value_name = "DSA|CSN")]
    pub after_write: Option<String>,
    /// A DSA's replication position, for `--after-write CSN`:
    /// `DSA=CSN[;CSN...]` (repeatable).
    #[arg(long, value_name = "DSA=CSN")]
    pub position: Vec<String>,
    /// Read the DSAs' positions from a running router's admin API
    /// (`/status`), for `--after-write CSN`.
    #[arg(long, value_name = "ADMIN")]
    pub positions_from: Option<String>,
    /// A client policy file (`serve --policy`): also show the rule that
    /// decides for the client --client, --identity, --tls, --sasl
    /// describe, and its verdict on this operation.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The client's address (with --policy).
    #[arg(long, value_name = "ADDR")]
    pub client: Option<String>,
    /// The client's bound DN (with --policy; none: anonymous).
    #[arg(long, value_name = "DN")]
    pub identity: Option<String>,
    /// The client is on TLS (with --policy).
    #[arg(long)]
    pub tls: bool,
    /// The SASL mechanism the client bound with (with --policy).
    #[arg(long, value_name = "MECH")]
    pub sasl: Option<String>,
    /// With --policy and --identity: the client is a member of this
    /// group (repeatable); then it is a member of no other group rules
    /// name. Without it, explain says membership is read at run time.
    #[arg(long, value_name = "GROUP_DN")]
    pub member_of: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A run-time view built from names on the command line: every DSA up with
/// nothing in flight unless listed.
pub struct StaticView {
    pub status: Vec<DsaStatus>,
}

impl StaticView {
    pub fn all_up(snap: &Snapshot) -> StaticView {
        StaticView {
            status: vec![DsaStatus::Up; snap.dsas.len()],
        }
    }

    /// Mark the named DSAs; an unknown name is an error.
    pub fn mark(
        &mut self,
        snap: &Snapshot,
        names: &[String],
        status: DsaStatus,
    ) -> crate::base::error::Result<()> {
        for n in names.iter().filter(|n| !n.is_empty()) {
            let i = snap.dsa_index(n).ok_or_else(|| {
                crate::base::error::Error::config(format!("no DSA named \"{n}\" in the knowledge"))
            })?;
            self.status[i] = status;
        }
        Ok(())
    }
}

impl DsaView for StaticView {
    fn status(&self, dsa: DsaId) -> DsaStatus {
        self.status
            .get(dsa.index())
            .copied()
            .unwrap_or(DsaStatus::Down)
    }

    fn in_flight(&self, _dsa: DsaId) -> u32 {
        0
    }

    fn limit(&self, _dsa: DsaId) -> Option<u32> {
        None
    }
}

/// Where `serve` listens without --listen and --name.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3389";

/// The router's own block for `check` and `explain`: --name, else the
/// block at `listen` or at a listen-only address, said on stderr. Several
/// alike: refused (`Err`, said on stderr).
fn router_name(snap: &Snapshot, name: Option<&str>, listen: &str) -> Result<Option<String>, ()> {
    use crate::directory::route::own;
    let found = own::find(snap, name, |a| same_place(a, listen));
    if let Some(note) = found.note(snap) {
        let kind = match found {
            own::Own::Ambiguous(_) => "error",
            _ => "note",
        };
        eprintln!("{kind}: {note}");
    }
    match found {
        own::Own::Ambiguous(_) => Err(()),
        // An unknown --name is the table's error.
        own::Own::None => Ok(name.map(str::to_string)),
        f => Ok(f.name(snap).map(str::to_string)),
    }
}

/// Whether knowledge address `a` is `listen` (`host:port`): the same port,
/// and the same host, or loopback both.
fn same_place(a: &crate::directory::knowledge::Address, listen: &str) -> bool {
    let Some((host, port)) = listen.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = |h: &str| {
        h.eq_ignore_ascii_case("localhost")
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    port.parse::<u16>() == Ok(a.port)
        && (a.host.eq_ignore_ascii_case(host) || (loopback(&a.host) && loopback(host)))
}

fn load_or_report(root: &Path) -> Option<Snapshot> {
    match knowledge::load(root) {
        Ok(s) => Some(s),
        Err(e) => {
            eprint!("{e}");
            eprintln!(
                "dsa-router: {} error(s); knowledge {} not loaded",
                e.errors.len(),
                root.display()
            );
            None
        }
    }
}

/// `dsa-router check ROOT`: exit 0 when the knowledge is valid. With
/// `online`, the DSAs are asked what they hold too (warnings only).
pub fn check(root: &Path, name: Option<&str>, listen: &str, online: bool) -> ExitCode {
    let Some(snap) = load_or_report(root) else {
        return ExitCode::from(1);
    };
    let Ok(name) = router_name(&snap, name, listen) else {
        return ExitCode::from(1);
    };
    let table = match Table::build(&snap, name.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    print!("{}", render_check(&snap, &table));
    for w in &snap.warnings {
        eprint!("{w}");
    }
    if online {
        online::check(&snap, &table);
    }
    ExitCode::SUCCESS
}

/// The human-readable summary printed by `check`.
pub fn render_check(snap: &Snapshot, table: &Table) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "knowledge {}: {} file(s), {} DSA(s), {} partition(s), {} warning(s)",
        snap.root.display(),
        snap.files.len(),
        snap.dsas.len(),
        table.partitions().len(),
        snap.warnings.len()
    );
    if let Some(r) = table.router {
        let d = &snap.dsas[r];
        let _ = writeln!(
            out,
            "router {} (prefix {}): never a target",
            d.name, d.prefix
        );
    }
    if !snap.precedence.is_empty() {
        let _ = writeln!(out, "set precedence = {}", snap.precedence.join(", "));
    }
    if !snap.write_precedence.is_empty() {
        let _ = writeln!(
            out,
            "set write-precedence = {}",
            snap.write_precedence.join(", ")
        );
    }
    for p in table.partitions_sorted() {
        match &p.hash {
            Some(h) => {
                let _ = writeln!(
                    out,
                    "partition {} slot {} of {} over {} ({})",
                    p.prefix,
                    h.slot,
                    h.total,
                    h.attr.as_deref().unwrap_or("*"),
                    h.algo.name()
                );
            }
            None => {
                let _ = writeln!(out, "partition {}", p.prefix);
            }
        }
        for (pos, &i) in p.order.iter().enumerate() {
            let d = &snap.dsas[i];
            let group = match p.group_of(i).and_then(|g| g.name.as_deref()) {
                Some(g) => g.to_string(),
                None if d.load_share() => "(unnamed load-share)".to_string(),
                None => "(own)".to_string(),
            };
            let addrs: Vec<String> = d.addresses.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(
                out,
                "  {}. {:<8} group {:<20} {:<24} dsa-flags {}",
                pos + 1,
                d.name,
                group,
                addrs.join(", "),
                if d.dsa_flags.is_empty() {
                    "-".to_string()
                } else {
                    d.dsa_flags.join(",")
                },
            );
        }
        match p.write_order.first() {
            Some(&i) => {
                let _ = write!(
                    out,
                    "  writes: {} first, then the ordered list",
                    snap.dsas[i].name
                );
            }
            None => {
                let _ = write!(out, "  writes: none (the partition is read-only)");
            }
        }
        if !p.read_only.is_empty() {
            let ro: Vec<&str> = p
                .read_only
                .iter()
                .map(|&i| snap.dsas[i].name.as_str())
                .collect();
            let _ = write!(out, "; read-only, never written: {}", ro.join(", "));
        }
        let _ = writeln!(out);
    }
    out
}

/// `--after-write DSA|CSN` on `x`.
fn after_write(
    args: &ExplainArgs,
    w: &str,
    x: &mut Explanation,
    snap: &Snapshot,
    table: &Table,
    view: &StaticView,
) -> Result<(), error::ExplainError> {
    use error::ExplainError;
    if !after_csn::is_csn(w) {
        let i = snap
            .dsa_index(w)
            .ok_or_else(|| ExplainError::UnknownDsa(w.to_string()))?;
        explain::after_write(x, snap, table, view, i);
        return Ok(());
    }
    let target = after_csn::parse_csns(w).map_err(ExplainError::AfterWrite)?;
    let known = match &args.positions_from {
        Some(admin) => {
            let token = std::env::var("DSA_ROUTER_ADMIN_TOKEN").ok();
            let st = crate::app::admin::ctl::fetch(admin, token.as_deref(), "GET", "/status")
                .map_err(ExplainError::Status)?;
            after_csn::Known::from_status(&st, x.partition.as_deref().unwrap_or(""))
        }
        None => after_csn::Known::from_args(&args.position).map_err(ExplainError::Position)?,
    };
    after_csn::after_csn(x, snap, table, view, &target, &known);
    Ok(())
}

/// `dsa-router explain ROOT DN ...`
pub fn explain(args: &ExplainArgs) -> ExitCode {
    let Some(snap) = load_or_report(&args.root) else {
        return ExitCode::from(1);
    };
    let Ok(name) = router_name(&snap, args.name.as_deref(), &args.listen) else {
        return ExitCode::from(2);
    };
    let table = match Table::build(&snap, name.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut view = StaticView::all_up(&snap);
    for (names, status) in [
        (&args.down, DsaStatus::Down),
        (&args.disabled, DsaStatus::Disabled),
        (&args.draining, DsaStatus::Draining),
        (&args.ejected, DsaStatus::Ejected),
    ] {
        if let Err(e) = view.mark(&snap, names, status) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let mut x = explain_route(&snap, &table, &view, &args.dn, args.op);
    if args.op == OpKind::Search {
        explain::with_scope(&mut x, &snap, &table, &view, args.scope);
    } else if args.scope != Scope::Base {
        eprintln!("error: --scope is for searches (--op search)");
        return ExitCode::from(2);
    }
    if let Some(w) = &args.after_write {
        if let Err(e) = after_write(args, w, &mut x, &snap, &table, &view) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let pol = match policy::explain(args, &snap, &table) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        let mut v = serde_json::to_value(&x).unwrap_or_default();
        if let (Some(p), Some(o)) = (&pol, v.as_object_mut()) {
            o.insert("policy".into(), serde_json::to_value(p).unwrap_or_default());
        }
        match serde_json::to_string_pretty(&v) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", x.render());
        if let Some(p) = &pol {
            print!("{}", p.render());
        }
    }
    ExitCode::SUCCESS
}
