//! The routing decision for one DN and operation, with the reasons.

use super::scope::{self, Scope, SpanInfo};
use crate::directory::knowledge::hash::HashPart;
use crate::directory::knowledge::{DsaId, Snapshot};
use crate::directory::route::{
    message, select_read, select_write, DsaView, Lookup, Partition, RouteError, Table,
};
use crate::proto::dn::Dn;
use serde::Serialize;
use std::fmt::Write;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Search,
    Compare,
    Bind,
    Add,
    Delete,
    Modify,
    Moddn,
}

impl OpKind {
    pub fn is_write(self) -> bool {
        matches!(
            self,
            OpKind::Add | OpKind::Delete | OpKind::Modify | OpKind::Moddn
        )
    }
}

/// One DSA of the ordered list, as `explain` shows it.
#[derive(Debug, Serialize)]
pub struct ListedDsa {
    pub name: String,
    pub group: Option<String>,
    pub state: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Explanation {
    pub dn: String,
    pub op: OpKind,
    /// The partition's prefix, LDAP string form.
    pub partition: Option<String>,
    /// The ordered list (writes: the write order), names.
    pub order: Vec<String>,
    pub dsas: Vec<ListedDsa>,
    /// The group chosen (reads), or `null` for a DSA with no group name.
    pub group: Option<String>,
    /// The DSAs the request may go to, in ordered-list order.
    pub targets: Vec<String>,
    pub reason: String,
    /// `null`, or the LDAP result name (`noSuchObject`, `unavailable`, ...).
    pub error: Option<&'static str>,
    /// The diagnostic message a client would get with `error`.
    pub message: Option<String>,
    /// In a horizontal partition: how the slot was computed.
    pub slot: Option<SlotInfo>,
    /// Read-your-writes: whether affinity to the DSA that took the
    /// client's write chose the target (`--after-write`).
    pub affinity: Option<String>,
    /// A search that spans partitions (`--scope`): each partition's part.
    pub spans: Vec<SpanInfo>,
}

/// The slot computation of a horizontal partition.
#[derive(Debug, Serialize)]
pub struct SlotInfo {
    /// The attribute hashed (`*`: the RDN's).
    pub attribute: String,
    /// The value as normalised for hashing (`null` for the prefix entry).
    pub value: Option<String>,
    pub algorithm: &'static str,
    pub hash: Option<u64>,
    pub total: u32,
    pub slot: u32,
}

impl Explanation {
    fn new(dn: &str, op: OpKind) -> Explanation {
        Explanation {
            dn: dn.to_string(),
            op,
            partition: None,
            order: Vec::new(),
            dsas: Vec::new(),
            group: None,
            targets: Vec::new(),
            reason: String::new(),
            error: None,
            slot: None,
            message: None,
            affinity: None,
            spans: Vec::new(),
        }
    }

    /// Text for people.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "dn:        {}",
            if self.dn.is_empty() {
                "(root)"
            } else {
                &self.dn
            }
        );
        let _ = writeln!(out, "operation: {:?}", self.op);
        let _ = writeln!(
            out,
            "partition: {}",
            self.partition.as_deref().unwrap_or("(none)")
        );
        if let Some(s) = &self.slot {
            match (&s.value, s.hash) {
                (Some(v), Some(h)) => {
                    let _ = writeln!(
                        out,
                        "slot:      {} of {}({}): {}(\"{v}\") = {h}, mod {} = {}",
                        s.slot, s.algorithm, s.total, s.algorithm, s.total, s.slot
                    );
                }
                _ => {
                    let _ = writeln!(
                        out,
                        "slot:      {} of {}({}) (the partition's own entry: slot 0 answers)",
                        s.slot, s.algorithm, s.total
                    );
                }
            }
        }
        if !self.dsas.is_empty() {
            let _ = writeln!(
                out,
                "{}:",
                if self.op.is_write() {
                    "write order"
                } else {
                    "ordered list"
                }
            );
            for (i, d) in self.dsas.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  {}. {:<8} group {:<12} {}",
                    i + 1,
                    d.name,
                    d.group.as_deref().unwrap_or("-"),
                    d.state
                );
            }
        }
        let _ = writeln!(out, "why:       {}", self.reason);
        if let Some(a) = &self.affinity {
            let _ = writeln!(out, "affinity:  {a}");
        }
        super::scope::render(&self.spans, &mut out);
        match self.error {
            None if !self.spans.is_empty() => {}
            None => {
                let _ = writeln!(out, "targets:   {}", self.targets.join(", "));
            }
            Some(e) => {
                let _ = writeln!(
                    out,
                    "result:    {e}: {}",
                    self.message.as_deref().unwrap_or("")
                );
            }
        }
        out
    }
}

/// Explain routing of `op` on `dn` under `view`.
pub fn explain_route(
    snap: &Snapshot,
    table: &Table,
    view: &impl DsaView,
    dn: &str,
    op: OpKind,
) -> Explanation {
    let mut x = Explanation::new(dn, op);
    let Some(parsed) = parse(&mut x, dn) else {
        return x;
    };
    if parsed.is_root() && matches!(op, OpKind::Search | OpKind::Bind) {
        x.reason = match op {
            OpKind::Bind => {
                "an anonymous bind (empty name) is answered by the router; no DSA is contacted"
            }
            _ => "a base search of the root DSE is answered by the router",
        }
        .into();
        return x;
    }
    let p = match table.lookup(&parsed) {
        Lookup::Partition(p) => p,
        Lookup::NoPartition { below } => {
            no_partition(&mut x, &parsed, &below);
            return x;
        }
    };
    x.partition = Some(p.prefix.to_string());
    x.slot = p.hash.as_ref().map(|h| slot_info(h, p, &parsed));
    let list = if op.is_write() {
        &p.write_order
    } else {
        &p.order
    };
    for &i in list {
        x.order.push(snap.dsas[i].name.to_string());
        x.dsas.push(ListedDsa {
            name: snap.dsas[i].name.to_string(),
            group: p.group_of(i).and_then(|g| g.name.clone()),
            state: view.status(i).as_str(),
        });
    }
    let chosen = if op.is_write() {
        select_write(p, view).map(|c| explain_write(&mut x, p, snap, view, c.dsa))
    } else {
        select_read(p, view, 0).map(|c| explain_read(&mut x, p, snap, view, c.group))
    };
    if let Err(e) = chosen {
        fail(&mut x, e, p, snap, view);
    }
    x
}

/// The DN, parsed; `None` (and `x` says why) when it does not parse.
fn parse(x: &mut Explanation, dn: &str) -> Option<Dn> {
    match Dn::parse_any(dn) {
        Ok(d) => Some(d),
        Err(e) => {
            x.error = Some("invalidDNSyntax");
            x.message = Some(format!("invalid DN: {e}"));
            x.reason = "the DN does not parse".into();
            None
        }
    }
}

/// No partition holds the DN: `noSuchObject`, naming the partitions
/// below it.
fn no_partition(x: &mut Explanation, parsed: &Dn, below: &[&Partition]) {
    x.error = Some("noSuchObject");
    x.message = Some(format!("dsa-router: no partition holds {parsed}"));
    x.reason = if below.is_empty() {
        "no partition prefix is an ancestor of the DN".into()
    } else {
        let names: Vec<String> = below.iter().map(|p| p.prefix.to_string()).collect();
        format!(
            "no partition holds the DN; partitions below it: {}",
            names.join("; ")
        )
    };
}

/// How the slot of a horizontal partition is computed for the DN.
fn slot_info(h: &HashPart, p: &Partition, parsed: &Dn) -> SlotInfo {
    let rdn = parsed
        .depth()
        .checked_sub(p.prefix.depth() + 1)
        .map(|d| &parsed.rdns()[d]);
    let ava = rdn.and_then(|r| match &h.attr {
        Some(a) => r.avas().iter().find(|v| v.attr().eq_ignore_ascii_case(a)),
        None => r.avas().first(),
    });
    SlotInfo {
        attribute: h.attr.clone().unwrap_or_else(|| "*".into()),
        value: ava.map(|v| crate::directory::knowledge::hash::normalise(v.value())),
        algorithm: h.algo.name(),
        hash: ava.map(|v| crate::directory::knowledge::hash::hash(h.algo, v.value())),
        total: h.total,
        slot: h.slot,
    }
}

/// A write went to `dsa`: why (the DSAs skipped before it, the read-only
/// ones).
fn explain_write(
    x: &mut Explanation,
    p: &Partition,
    snap: &Snapshot,
    view: &impl DsaView,
    dsa: DsaId,
) {
    let name = |i: DsaId| snap.dsas[i].name.to_string();
    x.targets = vec![name(dsa)];
    let skipped: Vec<String> = p
        .write_order
        .iter()
        .take_while(|&&i| i != dsa)
        .map(|&i| format!("{} {}", name(i), view.status(i).as_str()))
        .collect();
    x.reason = if skipped.is_empty() {
        format!(
            "writes are not load-shared: {} is the first eligible DSA of the write order",
            name(dsa)
        )
    } else {
        format!(
            "writes are not load-shared: {} is the first eligible DSA of the write order (skipped: {})",
            name(dsa),
            skipped.join(", ")
        )
    };
    if !p.read_only.is_empty() {
        let ro: Vec<String> = p.read_only.iter().map(|&i| name(i)).collect();
        let _ = write!(
            x.reason,
            "; read-only DSAs take no writes: {}",
            ro.join(", ")
        );
    }
}

/// A read went to group `group`: its eligible members, and why (the
/// groups passed before it).
fn explain_read(
    x: &mut Explanation,
    p: &Partition,
    snap: &Snapshot,
    view: &impl DsaView,
    group: usize,
) {
    let name = |i: DsaId| snap.dsas[i].name.to_string();
    let g = &p.groups[group];
    x.group = g.name.clone();
    x.targets = g
        .members
        .iter()
        .filter(|&&m| view.status(m).eligible() && !view.saturated(m))
        .map(|&m| name(m))
        .collect();
    let label = |gi: usize| {
        let g = &p.groups[gi];
        g.name.clone().unwrap_or_else(|| {
            let members: Vec<String> = g.members.iter().map(|&m| name(m)).collect();
            format!("the group of {}", members.join(", "))
        })
    };
    let passed: Vec<String> = (0..group)
        .map(|gi| format!("{} has no eligible member", label(gi)))
        .collect();
    let first = g.members[0];
    let mut why = String::new();
    if !passed.is_empty() {
        let _ = write!(why, "{}; ", passed.join("; "));
    }
    let _ = write!(
        why,
        "{} is the first group with an eligible member (its first member in the ordered list is {}); targets are its eligible members, least in-flight first, rotating among equals; a read not answered within the group's usual time (95th percentile, at least --hedge-floor) is also sent to another of them, within the hedge budget",
        label(group),
        name(first)
    );
    x.reason = why;
}

/// A search of `scope` at `x`'s DN: the partitions it reaches when more
/// than one (`explain --scope`).
pub(super) fn with_scope(
    x: &mut Explanation,
    snap: &Snapshot,
    table: &Table,
    view: &impl DsaView,
    scope: Scope,
) {
    let Ok(base) = Dn::parse_any(&x.dn) else {
        return;
    };
    let spans = scope::spans(&base, snap, table, view, scope);
    if spans.is_empty() {
        return;
    }
    // A base under no partition (a search at c=AU) is still answered, from
    // the partitions below it.
    if x.error == Some("noSuchObject") {
        x.error = None;
        x.message = None;
    }
    x.reason = scope::reason(scope, spans.len(), x.partition.is_some());
    x.targets.clear();
    x.group = None;
    x.spans = spans;
}

/// A read after the client's write that DSA `w` took: read-your-writes
/// affinity sends it there while `w` is an eligible DSA of the partition.
pub(super) fn after_write(
    x: &mut Explanation,
    snap: &Snapshot,
    table: &Table,
    view: &impl DsaView,
    w: DsaId,
) {
    if x.op.is_write() || x.partition.is_none() || x.error.is_some() {
        return;
    }
    let Ok(dn) = Dn::parse_any(&x.dn) else {
        return;
    };
    let Lookup::Partition(p) = table.lookup(&dn) else {
        return;
    };
    let name = &snap.dsas[w].name;
    x.affinity = Some(if !p.order.contains(&w) {
        format!("none: {name} holds no copy of this partition, so its write says nothing here")
    } else if !view.status(w).eligible() {
        format!(
            "none: {name} took the client's write but is {}; the read goes by the usual selection",
            view.status(w).as_str()
        )
    } else {
        x.targets = vec![name.to_string()];
        x.group = p.group_of(w).and_then(|g| g.name.clone());
        format!("read-your-writes: the client's write went to {name} within the window (--read-your-writes), so its reads of this partition go there while it is eligible; such reads are never hedged")
    });
}

fn fail(
    x: &mut Explanation,
    e: RouteError,
    p: &crate::directory::route::Partition,
    snap: &Snapshot,
    view: &impl DsaView,
) {
    match e {
        RouteError::Unavailable => {
            x.error = Some("unavailable");
            x.message = Some(message::unavailable(p, snap, view));
            x.reason = "no DSA of the partition is eligible".into();
        }
        RouteError::Busy { group } => {
            x.error = Some("busy");
            x.message = Some(message::busy(p, group, snap, view));
            x.reason = "every target of the chosen group is at its concurrency limit".into();
        }
        RouteError::ReadOnly => {
            x.error = Some("unwillingToPerform");
            x.message = Some(message::read_only(p, snap));
            x.reason = "every DSA of the partition is read-only: writes go nowhere".into();
        }
    }
}
