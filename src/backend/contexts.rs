//! Knowledge prefixes against what the DSAs hold: each partition's prefix
//! is compared with the `namingContexts` of its DSAs' root DSEs. A prefix
//! that no DSA of its partition holds (a prefix written leaf first, `<dc
//! example><dc com>`, the natural slip for LDAP hands; or a typo) routes
//! every request to DSAs that answer noSuchObject: a warning, with the
//! likely fix (the reversed prefix, or the closest naming context).
//!
//! The health task reads the root DSEs (`upstream::advertised`); `run`
//! logs the warnings once per knowledge snapshot, at start and after each
//! reload, as soon as the partition's DSAs have answered; `/status` and
//! `check --online` ([`read`]) show them too.

use crate::backend::routing::{Backend, Routing};
use crate::directory::knowledge::{DsaDef, Snapshot};
use crate::directory::route::{DsaId, DsaStatus, DsaView, Table};
use crate::proto::dn::Dn;
use std::sync::Arc;
use std::time::Duration;

/// A partition whose prefix no DSA of it holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefixWarning {
    /// The partition's prefix (LDAP form).
    pub partition: String,
    /// What its DSAs hold: (DSA, its naming contexts).
    pub held: Vec<(String, Vec<String>)>,
    /// The likely prefix (LDAP form), when one is near.
    pub suggestion: Option<String>,
    /// The suggestion as knowledge writes it, root first.
    pub suggestion_knowledge: Option<String>,
}

impl std::fmt::Display for PrefixWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held: Vec<String> = self
            .held
            .iter()
            .map(|(d, c)| {
                if c.is_empty() {
                    format!("{d} names no naming context")
                } else {
                    format!("{d} holds {}", c.join(", "))
                }
            })
            .collect();
        write!(
            f,
            "partition {}: no DSA of it holds this prefix ({})",
            self.partition,
            held.join("; ")
        )?;
        if let (Some(s), Some(k)) = (&self.suggestion, &self.suggestion_knowledge) {
            write!(
                f,
                "; did you mean {s}? (prefix = {k}: knowledge writes DNs root first)"
            )?;
        }
        Ok(())
    }
}

/// The knowledge form of `dn`, root first: `<dc com><dc example>`.
fn knowledge_form(dn: &Dn) -> String {
    dn.rdns()
        .iter()
        .rev()
        .map(|r| {
            let avas: Vec<String> = r
                .avas()
                .iter()
                .map(|a| {
                    let v = a.value();
                    if v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                        format!("{} {v}", a.attr())
                    } else {
                        format!("{} \"{}\"", a.attr(), v.replace('"', "\\\""))
                    }
                })
                .collect();
            format!("<{}>", avas.join(" + "))
        })
        .collect()
}

/// Whether a DSA holding `contexts` holds `prefix`: a context at or above
/// it, or (a partition's prefix above the DSA's trees) below it.
fn holds(prefix: &Dn, contexts: &[Dn]) -> bool {
    contexts
        .iter()
        .any(|c| c.is_ancestor_or_self_of(prefix) || prefix.is_ancestor_or_self_of(c))
}

/// The likely prefix for `prefix` among `contexts`: the reversed prefix
/// when a DSA holds it, else the closest context by spelling.
fn suggest(prefix: &Dn, contexts: &[Dn]) -> Option<Dn> {
    let reversed = Dn::from_rdns(prefix.rdns().iter().rev().cloned().collect());
    if let Some(c) = contexts
        .iter()
        .find(|c| holds(&reversed, std::slice::from_ref(c)))
    {
        return Some(if c.is_ancestor_or_self_of(&reversed) {
            reversed
        } else {
            c.clone()
        });
    }
    let p = prefix.normalized();
    contexts
        .iter()
        .filter(|c| !c.is_root())
        .map(|c| {
            (
                crate::directory::knowledge::edit_distance(&p, &c.normalized()),
                c,
            )
        })
        .filter(|(d, _)| *d <= p.chars().count() / 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.clone())
}

/// The partitions of `table` whose prefix no DSA holds. `contexts_of`
/// gives a DSA's naming contexts once read (`None`: not read); a
/// partition is judged once each DSA of it is read or `judged` says not to
/// wait for it (it is down), and one at least is read.
pub fn check(
    snap: &Snapshot,
    table: &Table,
    contexts_of: impl Fn(DsaId) -> Option<Vec<String>>,
    wait_for: impl Fn(DsaId) -> bool,
) -> Vec<PrefixWarning> {
    let mut out = Vec::new();
    for p in table.partitions_sorted() {
        let read: Vec<(DsaId, Vec<String>)> = p
            .order
            .iter()
            .filter_map(|&i| contexts_of(i).map(|c| (i, c)))
            .collect();
        let waiting = p
            .order
            .iter()
            .any(|&i| wait_for(i) && !read.iter().any(|(j, _)| *j == i));
        if read.is_empty() || waiting {
            continue;
        }
        let mut all: Vec<Dn> = Vec::new();
        let mut held_any = false;
        for (i, cs) in &read {
            let d = &snap.dsas[*i];
            let prefix = d.native_prefix.as_ref().unwrap_or(&p.prefix);
            let dns: Vec<Dn> = cs.iter().filter_map(|c| Dn::parse_ldap(c).ok()).collect();
            // A DSA that names no context (some do not) is not judged.
            held_any |= dns.is_empty() || holds(prefix, &dns);
            all.extend(dns);
        }
        if held_any {
            continue;
        }
        let s = suggest(&p.prefix, &all);
        out.push(PrefixWarning {
            partition: p.prefix.to_string(),
            held: read
                .iter()
                .map(|(i, c)| (snap.dsas[*i].name.to_string(), c.clone()))
                .collect(),
            suggestion_knowledge: s.as_ref().map(knowledge_form),
            suggestion: s.map(|d| d.to_string()),
        });
    }
    out
}

/// The warnings for the current routing, from what the health task read.
pub fn of(routing: &Routing) -> Vec<PrefixWarning> {
    let st = &routing.states;
    check(
        &routing.snap,
        &routing.table,
        |i| {
            st.0.get(i.index())
                .and_then(|s| s.advertised())
                .map(|a| a.naming_contexts.clone())
        },
        |i| st.status(i) == DsaStatus::Up,
    )
}

/// Log each partition's warning once per knowledge snapshot: at start and
/// after each reload, once its DSAs have answered.
pub(crate) async fn run(backend: Arc<Backend>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut seen: Option<Arc<Routing>> = None;
    let mut logged: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = shutdown.changed() => return,
        }
        let routing = backend.routing();
        if !seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &routing)) {
            logged.clear();
            seen = Some(routing.clone());
        }
        for w in of(&routing) {
            if !logged.contains(&w.partition) {
                tracing::warn!("{w}");
                logged.push(w.partition);
            }
        }
    }
}

/// What `check --online` reads of one DSA's root DSE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// Its `namingContexts`.
    pub contexts: Vec<String>,
    /// A dsa-router's instance marker ([`crate::base::instance`]): the
    /// block is a router, not a DSA.
    pub router_instance: Option<String>,
}

/// `check --online`: read each DSA's naming contexts (anonymously, within
/// `limits`' connect and operation timeouts): (DSA index, what it said,
/// or why not).
pub async fn read(
    snap: &Snapshot,
    table: &Table,
    limits: crate::backend::settings::Limits,
) -> Vec<(DsaId, crate::base::error::Result<Read>)> {
    let mut idx: Vec<DsaId> = table
        .partitions()
        .iter()
        .flat_map(|p| p.order.iter().copied())
        .collect();
    idx.sort_unstable();
    idx.dedup();
    let reads = idx.iter().map(|&i| read_one(&snap.dsas[i], limits));
    let got = futures::future::join_all(reads).await;
    idx.into_iter().zip(got).collect()
}

/// One DSA's naming contexts and router marker.
async fn read_one(
    d: &DsaDef,
    limits: crate::backend::settings::Limits,
) -> crate::base::error::Result<Read> {
    let state = Arc::new(crate::backend::dsa_state::DsaState::new(d.name.clone()));
    let addrs = crate::backend::upstream::pool::targets(d);
    let conn =
        crate::backend::upstream::pool::connect_bound(&state, &addrs, None, limits, None).await?;
    let got = crate::backend::upstream::advertised::read(&conn, limits.op_timeout).await;
    conn.close();
    let got = got?;
    Ok(Read {
        contexts: got.naming_contexts,
        router_instance: got.router_instance,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::directory::knowledge::{load_from, Memory};
    use std::path::Path;

    #[test]
    fn prefixes_no_dsa_holds_are_warned_with_the_likely_fix() {
        // (prefix, the DSA's naming contexts, warned with this suggestion:
        // None = no warning, Some("") = warned without one)
        let cases: &[(&str, &[&str], Option<&str>)] = &[
            ("<dc com><dc example>", &["dc=example,dc=com"], None),
            (
                "<dc example><dc com>",
                &["dc=example,dc=com"],
                Some("dc=example,dc=com|<dc com><dc example>"),
            ),
            // Under a context the DSA holds: held.
            (
                "<dc com><dc example><ou People>",
                &["dc=example,dc=com"],
                None,
            ),
            ("<dc com>", &["dc=example,dc=com"], None),
            // Reversed, below what the DSA holds.
            (
                "<ou People><dc example><dc com>",
                &["dc=example,dc=com"],
                Some("ou=People,dc=example,dc=com|<dc com><dc example><ou People>"),
            ),
            (
                "<c AU><o DEMOCORPS>",
                &["o=DEMOCORP,c=AU", "cn=config"],
                Some("o=DEMOCORP,c=AU|<c AU><o DEMOCORP>"),
            ),
            ("<c NZ><o Elsewhere>", &["o=DEMOCORP,c=AU"], Some("")),
            // A DSA that names no context is not judged.
            ("<c NZ>", &[], None),
        ];
        for (prefix, ncs, want) in cases {
            let text = format!("set dsa D = {{ prefix = {prefix} address = tcp h port 1 }};\n");
            let snap =
                load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", &text)).unwrap();
            let table = Table::build(&snap, None).unwrap();
            let ncs: Vec<String> = ncs.iter().map(|s| s.to_string()).collect();
            let got = check(&snap, &table, |_| Some(ncs.clone()), |_| true);
            let got = got
                .first()
                .map(|w| match (&w.suggestion, &w.suggestion_knowledge) {
                    (Some(s), Some(k)) => format!("{s}|{k}"),
                    _ => String::new(),
                });
            assert_eq!(got.as_deref(), *want, "{prefix} against {ncs:?}");
        }
    }

    #[test]
    fn a_partition_is_judged_once_its_dsas_have_answered() {
        let text = "set dsa A = { prefix = <dc example><dc com> address = tcp h port 1 };\n\
                    set dsa B = { prefix = <dc example><dc com> address = tcp h port 2 };\n";
        let snap = load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", text)).unwrap();
        let table = Table::build(&snap, None).unwrap();
        let nc = || Some(vec!["dc=example,dc=com".to_string()]);
        // B not read yet, and up: wait for it.
        let only_a = |i: DsaId| if i.index() == 0 { nc() } else { None };
        assert!(check(&snap, &table, only_a, |_| true).is_empty());
        // B down: judged on A alone.
        let w = check(&snap, &table, only_a, |i| i.index() == 0);
        assert_eq!(w.len(), 1);
        let text = w[0].to_string();
        assert!(
            text.contains("partition dc=com,dc=example: no DSA of it holds this prefix (A holds dc=example,dc=com)")
                && text.contains("did you mean dc=example,dc=com? (prefix = <dc com><dc example>"),
            "{text}"
        );
    }
}
