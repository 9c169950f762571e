//! A reload that would take the router's DSAs away: knowledge emptied or
//! cut short (a file truncated, or saved halfway), or a partition in use
//! whose every DSA is gone. Such a reload is refused unless forced: the
//! old knowledge keeps serving, and the answer says why and how to force.

use crate::directory::knowledge::Snapshot;
use crate::directory::route::{DsaId, Table};

/// Why a reload is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shrink {
    /// The new knowledge has no DSA to route to; the old one had these.
    Every { before: usize },
    /// Partitions that served operations and that no DSA of the new
    /// knowledge holds: (prefix, its DSAs before).
    Partitions(Vec<(String, Vec<String>)>),
}

impl std::fmt::Display for Shrink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shrink::Every { before } => write!(
                f,
                "reload refused: the new knowledge has no DSA to route to (it had {before}; \
                 is a file empty or cut short?); the old knowledge keeps serving"
            )?,
            Shrink::Partitions(ps) => {
                let list: Vec<String> = ps
                    .iter()
                    .map(|(p, d)| format!("{p} (was {})", d.join(", ")))
                    .collect();
                write!(
                    f,
                    "reload refused: it removes every DSA of partition(s) in use: {}; \
                     the old knowledge keeps serving",
                    list.join("; ")
                )?
            }
        }
        write!(
            f,
            ". To apply it anyway: dsa-router ctl reload --force (admin API: POST /reload?force=true)"
        )
    }
}

/// The DSAs of `table` the router may route to (its own block left out).
fn targets(table: &Table) -> usize {
    let mut all: Vec<DsaId> = table
        .partitions()
        .iter()
        .flat_map(|p| p.order.iter().copied())
        .collect();
    all.sort_unstable();
    all.dedup();
    all.len()
}

/// Whether going from (`old`, `old_table`) to (`new`, `new_table`) is to be
/// refused. `in_use` says whether an old DSA served operations (or has
/// some in flight).
pub fn check(
    old: (&Snapshot, &Table),
    new: (&Snapshot, &Table),
    in_use: impl Fn(DsaId) -> bool,
) -> Option<Shrink> {
    let (old_snap, old_table) = old;
    let (_, new_table) = new;
    let before = targets(old_table);
    if before > 0 && targets(new_table) == 0 {
        return Some(Shrink::Every { before });
    }
    let held = |key: &str| new_table.partitions().iter().any(|p| p.key == key);
    let gone: Vec<(String, Vec<String>)> = old_table
        .partitions_sorted()
        .into_iter()
        .filter(|p| !p.order.is_empty() && p.order.iter().any(|&i| in_use(i)) && !held(&p.key))
        .map(|p| {
            let names = p
                .order
                .iter()
                .map(|&i| old_snap.dsas[i].name.to_string())
                .collect();
            (p.text.clone(), names)
        })
        .collect();
    (!gone.is_empty()).then_some(Shrink::Partitions(gone))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::directory::knowledge::{load_from, Memory};
    use std::path::Path;

    fn table(text: &str) -> (Snapshot, Table) {
        let snap = load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", text)).unwrap();
        let own = snap.dsa_index("R").map(|_| "R");
        let t = Table::build(&snap, own).unwrap();
        (snap, t)
    }

    const R: &str = "set dsa R = { prefix = <o A> address = tcp h port 9 };\n";
    const A: &str = "set dsa A = { prefix = <o A> address = tcp h port 1 };\n";
    const A2: &str = "set dsa A2 = { prefix = <o A> address = tcp h port 3 };\n";
    const B: &str = "set dsa B = { prefix = <o B> address = tcp h port 2 };\n";

    #[test]
    fn reloads_that_take_the_dsas_away_are_refused() {
        // (old knowledge, new knowledge, old DSAs in use, refused because)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], Option<&'a str>);
        let cases: &[Case] = &[
            (&[R, A, B], &[], &[], Some("no DSA to route to (it had 2;")),
            (
                &[R, A, B],
                &[R],
                &["A"],
                Some("no DSA to route to (it had 2;"),
            ),
            (
                &[R, A, B],
                &[R, A],
                &["B"],
                Some("partition(s) in use: o=B (was B)"),
            ),
            // Not in use: removing it is an edit.
            (&[R, A, B], &[R, A], &["A"], None),
            // Still held, by another DSA.
            (&[R, A, B], &[R, A2, B], &["A", "B"], None),
            (&[R, A, B], &[R, A, A2, B], &["A", "B"], None),
            // Nothing to take away.
            (&[R], &[], &[], None),
        ];
        for (old, new, used, want) in cases {
            let (os, ot) = table(&old.concat());
            let (ns, nt) = table(&new.concat());
            let in_use = |i: DsaId| used.contains(&os.dsas[i].name.as_str());
            let got = check((&os, &ot), (&ns, &nt), in_use).map(|s| s.to_string());
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(g)) => {
                    assert!(g.contains(w), "{old:?} -> {new:?}: {g}");
                    assert!(g.contains("ctl reload --force"), "{g}");
                }
                _ => panic!("{old:?} -> {new:?}: want {want:?}, got {got:?}"),
            }
        }
    }
}
