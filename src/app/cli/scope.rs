//! `explain --scope`: the partitions a search reaches (architecture.md, "What the router answers itself"), and where
//! each part of it goes. A search below its base reaches every partition
//! whose prefix lies under the base, besides the one holding the base (if
//! any), as the router fans it out.

use crate::directory::knowledge::{DsaId, Snapshot};
use crate::directory::route::{select_read, DsaView, Table};
use crate::proto::dn::Dn;
use serde::Serialize;
use std::fmt::Write;

/// A search scope, as `ldapsearch -s` names it.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Base,
    One,
    Sub,
    Children,
}

impl Scope {
    /// The LDAP scope number (RFC 4511 4.5.1.2, RFC 4512's subordinates).
    pub fn ldap(self) -> u8 {
        match self {
            Scope::Base => 0,
            Scope::One => 1,
            Scope::Sub => 2,
            Scope::Children => 3,
        }
    }
}

fn scope_name(n: u8) -> &'static str {
    match n {
        0 => "base",
        1 => "one",
        2 => "sub",
        _ => "children",
    }
}

/// One partition's share of a spanning search.
#[derive(Debug, Serialize)]
pub struct SpanInfo {
    pub partition: String,
    /// Where that part is searched, and with which scope.
    pub base: String,
    pub scope: &'static str,
    /// The group chosen and its eligible members (`null` and empty when
    /// no DSA of the partition is eligible: that part is then missing from
    /// the answer, with a continuation of the partial result).
    pub group: Option<String>,
    pub targets: Vec<String>,
}

/// The partitions a search of `scope` at `base` reaches, with where each
/// part goes; empty when it reaches one partition or none (an ordinary
/// search, explained by its DN alone).
pub(super) fn spans(
    base: &Dn,
    snap: &Snapshot,
    table: &Table,
    view: &impl DsaView,
    scope: Scope,
) -> Vec<SpanInfo> {
    let name = |i: DsaId| snap.dsas[i].name.clone();
    table
        .spanning(base, scope.ldap())
        .iter()
        .map(|s| {
            let p = s.partition;
            let (group, targets) = match select_read(p, view, 0) {
                Ok(c) => {
                    let g = &p.groups[c.group];
                    let members = g
                        .members
                        .iter()
                        .filter(|&&m| view.status(m).eligible() && !view.saturated(m))
                        .map(|&m| name(m).to_string())
                        .collect();
                    (g.name.clone(), members)
                }
                Err(_) => (None, Vec::new()),
            };
            SpanInfo {
                partition: p.prefix.to_string(),
                base: s.base.unwrap_or(base).to_string(),
                scope: scope_name(s.scope),
                group,
                targets,
            }
        })
        .collect()
}

/// Why a search of `scope` goes to `n` partitions.
pub(super) fn reason(scope: Scope, n: usize, base_held: bool) -> String {
    let what = match scope {
        Scope::Base => "base",
        Scope::One => "one-level",
        Scope::Sub => "subtree",
        Scope::Children => "subordinates",
    };
    let mut why = format!(
        "a {what} search at this DN spans {n} partitions; the router sends each its part and merges the answers",
    );
    if !base_held {
        why.push_str(" (no partition holds the base itself)");
    }
    why
}

/// The spans as text, for [`Explanation::render`].
pub(super) fn render(spans: &[SpanInfo], out: &mut String) {
    if spans.is_empty() {
        return;
    }
    let _ = writeln!(out, "spans:");
    for (i, s) in spans.iter().enumerate() {
        let targets = if s.targets.is_empty() {
            "(none eligible)".to_string()
        } else {
            s.targets.join(", ")
        };
        let _ = writeln!(
            out,
            "  {}. {} ({} at {}): group {}: {targets}",
            i + 1,
            s.partition,
            s.scope,
            s.base,
            s.group.as_deref().unwrap_or("-"),
        );
    }
}
