//! Routing: from a target DN to the DSAs that may serve it.
//!
//! A [`Table`] is built once per knowledge snapshot (and router name):
//!
//! 1. **Partitions** (architecture.md, "Partitions and comparison"): DSAs are grouped by normalized prefix. The
//!    router's own block (`--name`) is left out: it is never a target and its
//!    prefix alone does not make a partition.
//! 2. **Ordered list** (3.2): a partition's DSAs in knowledge order, then the
//!    DSAs of `set precedence` moved to the front in that list's order. Writes
//!    use a second list, with `set write-precedence` moved to the front of
//!    the ordered list.
//! 3. **Groups** (3.3): named load-share groups, the partition's unnamed
//!    load-share group, and solo DSAs, ordered by the position of their first
//!    member in the ordered list.
//!
//! Selection (`select`) is then a pure function of the table, a view of
//! per-DSA run-time state and a rotation tick: no I/O, no locks, no
//! allocation on success, so it runs per request and is tested exhaustively
//! with plain values.

pub mod message;
pub mod own;
mod select;

pub use select::{
    select_read, select_write, Choice, DsaStatus, DsaView, Excluding, ReadGate, RouteError,
};

use crate::directory::knowledge::{GroupKey, Snapshot};
use crate::proto::dn::Dn;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use crate::directory::knowledge::DsaId;

/// A load-share group within one partition.
#[derive(Debug, Clone)]
pub struct Group {
    /// The group's name; `None` for the unnamed load-share group and for a
    /// DSA that is a group of its own.
    pub name: Option<String>,
    /// Members in ordered-list order.
    pub members: Vec<DsaId>,
}

/// One namespace partition and how to reach it.
#[derive(Debug)]
pub struct Partition {
    pub prefix: Dn,
    /// Ordered list (knowledge order, then precedence).
    pub order: Vec<DsaId>,
    /// Groups in group order.
    pub groups: Vec<Group>,
    /// Order for writes (ordered list, then write-precedence), without
    /// the DSAs knowledge marks `read-only` (CA routers send them no
    /// updates).
    pub write_order: Vec<DsaId>,
    /// DSAs marked `read-only`, in the ordered list's order.
    pub read_only: Vec<DsaId>,
    /// One slot of a horizontal partition of `prefix`: it holds the entries
    /// just below `prefix` (and their subtrees) whose RDN value hashes to
    /// it; slot 0 also answers for the `prefix` entry itself.
    pub hash: Option<crate::directory::knowledge::hash::HashPart>,
    /// Its key in per-client maps (state and read-your-writes affinity):
    /// the normalized prefix, with `#slot` in a horizontal partition.
    /// Made once, so that requests do not build it.
    pub key: String,
    /// `prefix` as the access log writes it, made once.
    pub text: String,
    /// Rotation among equally loaded targets.
    rotor: AtomicUsize,
}

impl Partition {
    /// The next rotation tick for this partition.
    pub fn tick(&self) -> usize {
        self.rotor.fetch_add(1, Ordering::Relaxed)
    }

    /// The group a DSA belongs to in this partition.
    pub fn group_of(&self, dsa: DsaId) -> Option<&Group> {
        self.groups.iter().find(|g| g.members.contains(&dsa))
    }
}

/// Where a target DN lies relative to the partitions.
#[derive(Debug)]
pub enum Lookup<'a> {
    /// Held by this partition (longest prefix that is an ancestor-or-self).
    Partition(&'a Partition),
    /// Under no partition. `below` lists partitions whose prefix lies under
    /// the DN (a search there would span them).
    NoPartition { below: Vec<&'a Partition> },
}

impl<'a> Lookup<'a> {
    /// The partition found, if any.
    pub fn partition(&self) -> Option<&'a Partition> {
        match self {
            Lookup::Partition(p) => Some(p),
            Lookup::NoPartition { .. } => None,
        }
    }
}

/// The routing table for one snapshot.
#[derive(Debug)]
pub struct Table {
    /// Sorted by prefix depth, deepest first, so the first match is the
    /// longest prefix.
    partitions: Vec<Partition>,
    /// With many partitions: their indexes by [`Dn::key`] of their prefix,
    /// so that a lookup costs a hash per level of the DN, not a scan.
    index: Option<crate::base::fasthash::FastMap<u64, Vec<usize>>>,
    /// The router's own DSA, never a target.
    pub router: Option<DsaId>,
}

/// Above this many partitions, lookups use the index.
const INDEXED: usize = 32;

impl Table {
    /// Build the table. `router` names the router's own block, if any.
    pub fn build(snap: &Snapshot, router: Option<&str>) -> crate::base::error::Result<Table> {
        let router_idx = match router {
            Some(name) => Some(snap.dsa_index(name).ok_or_else(|| {
                crate::base::error::Error::config(format!(
                    "--name {name}: no set dsa block has that name"
                ))
            })?),
            None => None,
        };
        let pos_of = |name: &str| snap.dsa_index(name);
        let precedence: Vec<DsaId> = snap.precedence.iter().filter_map(|n| pos_of(n)).collect();
        let write_prec: Vec<DsaId> = snap
            .write_precedence
            .iter()
            .filter_map(|n| pos_of(n))
            .collect();

        let mut partitions: Vec<Partition> = Vec::new();
        // Each partition's index by prefix and slot: linear in the DSAs.
        let mut index: std::collections::HashMap<(&crate::proto::dn::Dn, Option<u32>), usize> =
            std::collections::HashMap::new();
        for (i, d) in snap.dsas.iter().enumerate() {
            let i = DsaId::new(i);
            if Some(i) == router_idx {
                continue;
            }
            let slot = d.hash.as_ref().map(|h| h.slot);
            match index.entry((&d.prefix, slot)) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    partitions[*e.get()].order.push(i)
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(partitions.len());
                    partitions.push(Partition {
                        key: match &d.hash {
                            Some(h) => format!("{}#{}", d.prefix.normalized(), h.slot),
                            None => d.prefix.normalized(),
                        },
                        hash: d.hash.clone(),
                        text: d.prefix.to_string(),
                        prefix: d.prefix.clone(),
                        order: vec![i],
                        groups: Vec::new(),
                        write_order: Vec::new(),
                        read_only: Vec::new(),
                        rotor: AtomicUsize::new(0),
                    })
                }
            }
        }
        for p in &mut partitions {
            p.order = move_to_front(&p.order, &precedence);
            let ro = |i: &DsaId| snap.dsas[*i].has_dsa_flag("read-only");
            p.read_only = p.order.iter().copied().filter(ro).collect();
            p.write_order = move_to_front(&p.order, &write_prec)
                .into_iter()
                .filter(|i| !ro(i))
                .collect();
            let mut keys: Vec<GroupKey> = Vec::new();
            for &i in &p.order {
                let key = snap.dsas[i].group();
                let existing = match &key {
                    GroupKey::Solo => None,
                    k => keys.iter().position(|g| g == k),
                };
                match existing {
                    Some(g) => p.groups[g].members.push(i),
                    None => {
                        let name = match &key {
                            GroupKey::Named(n) => Some(n.clone()),
                            _ => None,
                        };
                        keys.push(key);
                        p.groups.push(Group {
                            name,
                            members: vec![i],
                        });
                    }
                }
            }
        }
        partitions.sort_by_key(|p| std::cmp::Reverse(p.prefix.depth()));
        let index = (partitions.len() > INDEXED).then(|| {
            let mut ix: crate::base::fasthash::FastMap<u64, Vec<usize>> = Default::default();
            for (i, p) in partitions.iter().enumerate() {
                ix.entry(p.prefix.key()).or_default().push(i);
            }
            ix
        });
        Ok(Table {
            partitions,
            index,
            router: router_idx,
        })
    }

    /// The home partition: the first in knowledge order. Requests that
    /// name no entry go there (extended operations the router does not
    /// know, SASL binds, the schema).
    pub fn home(&self) -> Option<&Partition> {
        self.partitions
            .iter()
            .min_by_key(|p| p.order.iter().min().map_or(usize::MAX, |d| d.index()))
    }

    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Partitions in a stable, readable order (by prefix string, then
    /// slot).
    pub fn partitions_sorted(&self) -> Vec<&Partition> {
        let mut v: Vec<&Partition> = self.partitions.iter().collect();
        v.sort_by_key(|p| (p.prefix.normalized(), p.hash.as_ref().map(|h| h.slot)));
        v
    }

    /// The partition that holds `dn` (architecture.md, "Partitions and comparison"), or what lies below it. In
    /// a horizontal partition, the slot of the RDN just below the prefix
    /// (the prefix entry itself: slot 0).
    pub fn lookup(&self, dn: &Dn) -> Lookup<'_> {
        let longest = match &self.index {
            None => self
                .partitions
                .iter()
                .find(|p| p.prefix.is_ancestor_or_self_of(dn)),
            // The deepest ancestor (or the DN) that is a prefix; the first
            // partition of that prefix, as the scan finds it.
            Some(ix) => dn.ancestor_keys().find_map(|k| {
                ix.get(&k)?
                    .iter()
                    .map(|&i| &self.partitions[i])
                    .find(|p| p.prefix.is_ancestor_or_self_of(dn))
            }),
        };
        match longest {
            Some(p) if p.hash.is_some() => {
                let want = self.slot_of(p, dn).unwrap_or(0);
                let is_slot = |q: &&Partition| {
                    q.prefix == p.prefix && q.hash.as_ref().is_some_and(|h| h.slot == want)
                };
                let slot = match &self.index {
                    None => self.partitions.iter().find(is_slot),
                    Some(ix) => ix
                        .get(&p.prefix.key())
                        .into_iter()
                        .flatten()
                        .map(|&i| &self.partitions[i])
                        .find(is_slot),
                }
                .unwrap_or(p);
                Lookup::Partition(slot)
            }
            Some(p) => Lookup::Partition(p),
            None => Lookup::NoPartition {
                below: self
                    .partitions
                    .iter()
                    .filter(|p| dn.is_ancestor_or_self_of(&p.prefix))
                    .collect(),
            },
        }
    }
}

impl Table {
    /// The slot `dn` hashes to in `p`'s horizontal partition: `None` for
    /// the prefix entry itself, or when its RDN at that level lacks the
    /// hashed attribute.
    pub fn slot_of(&self, p: &Partition, dn: &Dn) -> Option<u32> {
        let h = p.hash.as_ref()?;
        let depth = dn.depth().checked_sub(p.prefix.depth() + 1)?;
        h.slot_of(&dn.rdns()[depth])
    }
}

/// One partition's share of a search that spans partitions.
#[derive(Debug)]
pub struct Span<'a> {
    pub partition: &'a Partition,
    /// The base to search there; `None` keeps the request's own base.
    pub base: Option<&'a Dn>,
    /// LDAP scope: 0 base, 1 one level, 2 subtree, 3 subordinates.
    pub scope: u8,
}

impl Table {
    /// The partitions a search at `base` with `scope` reaches, when it
    /// reaches more than the one holding `base` (architecture.md, "What the router answers itself"); empty when the
    /// search is an ordinary one (one partition, or none).
    ///
    /// * The partition holding the base, if any, is searched as asked.
    /// * Each partition whose prefix lies below the base is searched at its
    ///   prefix: with subtree scope for a subtree or subordinates search;
    ///   for a one-level search only a partition whose prefix is a child of
    ///   the base, with base scope (its prefix entry is the child).
    pub fn spanning(&self, base: &Dn, scope: u8) -> Vec<Span<'_>> {
        self.spanning_from(base, scope, self.lookup(base).partition())
    }

    /// [`Table::spanning`] when the caller has looked `base` up already
    /// (`holder`: what [`Table::lookup`] found): a search's route costs one
    /// lookup, not two.
    pub fn spanning_from<'a>(
        &'a self,
        base: &Dn,
        scope: u8,
        holder: Option<&'a Partition>,
    ) -> Vec<Span<'a>> {
        // Below the base: deeper partitions, and the slots of a horizontal
        // partition whose prefix is the base (their entries are children
        // of the base).
        let below = |q: &Partition| {
            (q.prefix.depth() > base.depth() && base.is_ancestor_or_self_of(&q.prefix))
                || (q.hash.is_some() && q.prefix == *base)
        };
        let others = |q: &Partition| below(q) && !holder.is_some_and(|h| std::ptr::eq(q, h));
        // The common case, on every search: nothing below the base.
        if scope == 0 || !self.partitions.iter().any(others) {
            return Vec::new();
        }
        let mut spans: Vec<Span<'_>> = self
            .partitions_sorted()
            .into_iter()
            .filter(|q| !holder.is_some_and(|h| std::ptr::eq(*q, h)))
            .filter(|q| below(q))
            .filter_map(|q| {
                // Every slot of a horizontal partition holds its prefix
                // entry: only slot 0 returns it.
                let sibling_slot = q.hash.as_ref().is_some_and(|h| h.slot != 0);
                match scope {
                    1 if q.prefix == *base => Some(Span {
                        partition: q,
                        base: Some(&q.prefix),
                        scope: 1,
                    }),
                    1 if q.prefix.depth() == base.depth() + 1 && !sibling_slot => Some(Span {
                        partition: q,
                        base: Some(&q.prefix),
                        scope: 0,
                    }),
                    1 => None,
                    _ => Some(Span {
                        partition: q,
                        base: Some(&q.prefix),
                        scope: if sibling_slot { 3 } else { 2 },
                    }),
                }
            })
            .collect();
        if spans.is_empty() {
            return spans;
        }
        if let Some(h) = holder {
            spans.insert(
                0,
                Span {
                    partition: h,
                    base: None,
                    scope,
                },
            );
        }
        spans
    }
}

/// `list` with the members of `front` that it contains moved to the front,
/// in `front`'s order.
fn move_to_front(list: &[DsaId], front: &[DsaId]) -> Vec<DsaId> {
    let mut out: Vec<DsaId> = Vec::with_capacity(list.len());
    for &i in front.iter().chain(list) {
        if list.contains(&i) && !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::knowledge::{load_from, Memory};
    use std::path::Path;

    fn table() -> Table {
        let mut k = String::new();
        for (name, prefix) in [
            ("A", "<c AU><o ACME>"),
            ("B", "<c AU><o BETA>"),
            ("BX", "<c AU><o BETA><ou X>"),
            ("C", "<c AU><o CHARLIE><ou DEEP>"),
            ("N", "<c NZ>"),
        ] {
            k.push_str(&format!(
                "set dsa \"{name}\" = {{\n prefix = {prefix}\n address = tcp \"h\" port 1\n}};\n"
            ));
        }
        let snap = load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", &k))
            .expect("knowledge loads");
        Table::build(&snap, None).expect("table")
    }

    /// (partition prefix, base searched there or "=" for the request's, scope)
    fn spans(t: &Table, base: &str, scope: u8) -> Vec<(String, String, u8)> {
        let dn = Dn::parse_ldap(base).expect("dn");
        t.spanning(&dn, scope)
            .iter()
            .map(|s| {
                (
                    s.partition.prefix.to_string(),
                    s.base.map_or("=".to_string(), |b| b.to_string()),
                    s.scope,
                )
            })
            .collect()
    }

    #[test]
    fn spanning_searches_reach_exactly_the_partitions_in_scope() {
        let t = table();
        let s = |p: &str, b: &str, sc: u8| (p.to_string(), b.to_string(), sc);
        // Subtree at c=AU (held by nobody): every partition below it.
        assert_eq!(
            spans(&t, "c=AU", 2),
            vec![
                s("o=ACME,c=AU", "o=ACME,c=AU", 2),
                s("o=BETA,c=AU", "o=BETA,c=AU", 2),
                s("ou=DEEP,o=CHARLIE,c=AU", "ou=DEEP,o=CHARLIE,c=AU", 2),
                s("ou=X,o=BETA,c=AU", "ou=X,o=BETA,c=AU", 2),
            ]
        );
        // Subordinates scope spans the same partitions.
        assert_eq!(spans(&t, "c=AU", 3).len(), 4);
        // One level at c=AU: only children of c=AU, each with base scope.
        assert_eq!(
            spans(&t, "C=au", 1),
            vec![
                s("o=ACME,c=AU", "o=ACME,c=AU", 0),
                s("o=BETA,c=AU", "o=BETA,c=AU", 0),
            ]
        );
        // Base held by BETA with a partition below: BETA as asked, then BX.
        assert_eq!(
            spans(&t, "o=BETA,c=AU", 2),
            vec![
                s("o=BETA,c=AU", "=", 2),
                s("ou=X,o=BETA,c=AU", "ou=X,o=BETA,c=AU", 2),
            ]
        );
        assert_eq!(
            spans(&t, "o=BETA,c=AU", 1),
            vec![
                s("o=BETA,c=AU", "=", 1),
                s("ou=X,o=BETA,c=AU", "ou=X,o=BETA,c=AU", 0),
            ]
        );
        // Ordinary searches: one partition, none, or base scope.
        assert!(spans(&t, "o=ACME,c=AU", 2).is_empty());
        assert!(spans(&t, "ou=X,o=BETA,c=AU", 2).is_empty());
        assert!(spans(&t, "c=NZ", 2).is_empty());
        assert!(spans(&t, "c=US", 2).is_empty());
        assert!(spans(&t, "c=AU", 0).is_empty());
        // Base held by nobody, one partition below: still searched there.
        assert_eq!(
            spans(&t, "o=CHARLIE,c=AU", 1),
            vec![s("ou=DEEP,o=CHARLIE,c=AU", "ou=DEEP,o=CHARLIE,c=AU", 0)]
        );
        assert_eq!(spans(&t, "o=CHARLIE,c=AU", 2).len(), 1);
        // One level where only deeper partitions lie below: nothing to ask.
        assert!(spans(&t, "c=AU", 1)
            .iter()
            .all(|(p, _, _)| !p.contains("DEEP")));
    }

    /// Many partitions: nested organisations, units under some, and a
    /// horizontal partition (three slots) under one.
    fn many() -> String {
        let mut k = String::new();
        let mut dsa = |name: String, prefix: String| {
            k.push_str(&format!(
                "set dsa \"{name}\" = {{\n prefix = {prefix}\n address = tcp \"h\" port 1\n}};\n"
            ));
        };
        for o in 0..30 {
            dsa(format!("O{o}"), format!("<c AU><o O{o}>"));
            if o % 3 == 0 {
                for u in 0..3 {
                    dsa(format!("O{o}U{u}"), format!("<c AU><o O{o}><ou U{u}>"));
                }
            }
        }
        for slot in 0..3 {
            dsa(
                format!("H{slot}"),
                format!("<c AU><o O1><ou People><uid \"[hash1(3)={slot}]\">"),
            );
        }
        dsa("NZ".into(), "<c NZ>".into());
        k
    }

    /// What a lookup found, comparable across tables.
    fn found(t: &Table, dn: &Dn) -> Vec<String> {
        match t.lookup(dn) {
            Lookup::Partition(p) => vec![p.key.clone()],
            Lookup::NoPartition { below } => {
                let mut v: Vec<String> = below.iter().map(|p| format!("below {}", p.key)).collect();
                v.sort();
                v
            }
        }
    }

    proptest::proptest! {
        /// With many partitions the lookup goes by the index; it finds
        /// exactly what scanning every partition finds.
        #[test]
        fn the_indexed_lookup_finds_what_the_scan_finds(
            c in proptest::sample::select(vec!["AU", "au", "NZ", "UK"]),
            o in proptest::option::of(0..34u32),
            ou in proptest::option::of(proptest::sample::select(vec!["U0", "u1", "U2", "U7", "People"])),
            uid in proptest::option::of("[a-z]{1,6}"),
            cn in proptest::option::of("[a-z]{1,3}"),
        ) {
            let text = many();
            let snap = load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", &text))
                .expect("knowledge loads");
            let indexed = Table::build(&snap, None).expect("table");
            proptest::prop_assert!(indexed.index.is_some());
            let mut scan = Table::build(&snap, None).expect("table");
            scan.index = None;
            let mut parts = Vec::new();
            if let Some(cn) = cn { parts.push(format!("cn={cn}")); }
            if let Some(u) = uid { parts.push(format!("uid={u}")); }
            if let Some(u) = ou { parts.push(format!("ou={u}")); }
            if let Some(o) = o { parts.push(format!("o=O{o}")); }
            parts.push(format!("c={c}"));
            let dn = Dn::parse_ldap(&parts.join(",")).expect("dn");
            proptest::prop_assert_eq!(found(&indexed, &dn), found(&scan, &dn), "{}", dn);
        }
    }
}
