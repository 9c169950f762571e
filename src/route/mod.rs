//! Routing: from a target DN to the DSAs that may serve it.
//!
//! A [`Table`] is built once per knowledge snapshot (and router name):
//!
//! 1. **Partitions** (spec 3.1): DSAs are grouped by normalized prefix. The
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
//! Selection ([`select`]) is then a pure function of the table, a view of
//! per-DSA run-time state and a rotation tick: no I/O, no locks, no
//! allocation on success, so it runs per request and is tested exhaustively
//! with plain values.

pub mod message;
mod select;

pub use select::{select_read, select_write, Choice, DsaStatus, DsaView, Excluding, RouteError};

use crate::dn::Dn;
use crate::knowledge::{GroupKey, Snapshot};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Index of a DSA in the snapshot's knowledge order.
pub type DsaIdx = usize;

/// A load-share group within one partition.
#[derive(Debug, Clone)]
pub struct Group {
    /// The group's name; `None` for the unnamed load-share group and for a
    /// DSA that is a group of its own.
    pub name: Option<String>,
    /// Members in ordered-list order.
    pub members: Vec<DsaIdx>,
}

/// One namespace partition and how to reach it.
#[derive(Debug)]
pub struct Partition {
    pub prefix: Dn,
    /// Ordered list (knowledge order, then precedence).
    pub order: Vec<DsaIdx>,
    /// Groups in group order.
    pub groups: Vec<Group>,
    /// Order for writes (ordered list, then write-precedence).
    pub write_order: Vec<DsaIdx>,
    /// Rotation among equally loaded targets.
    rotor: AtomicUsize,
}

impl Partition {
    /// The next rotation tick for this partition.
    pub fn tick(&self) -> usize {
        self.rotor.fetch_add(1, Ordering::Relaxed)
    }

    /// The group a DSA belongs to in this partition.
    pub fn group_of(&self, dsa: DsaIdx) -> Option<&Group> {
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

/// The routing table for one snapshot.
#[derive(Debug)]
pub struct Table {
    /// Sorted by prefix depth, deepest first, so the first match is the
    /// longest prefix.
    partitions: Vec<Partition>,
    /// The router's own DSA, never a target.
    pub router: Option<DsaIdx>,
}

impl Table {
    /// Build the table. `router` names the router's own block, if any.
    pub fn build(snap: &Snapshot, router: Option<&str>) -> Result<Table, String> {
        let router_idx = match router {
            Some(name) => Some(
                snap.dsa_index(name)
                    .ok_or_else(|| format!("--name {name}: no set dsa block has that name"))?,
            ),
            None => None,
        };
        let pos_of = |name: &str| snap.dsa_index(name);
        let precedence: Vec<DsaIdx> = snap.precedence.iter().filter_map(|n| pos_of(n)).collect();
        let write_prec: Vec<DsaIdx> = snap
            .write_precedence
            .iter()
            .filter_map(|n| pos_of(n))
            .collect();

        let mut partitions: Vec<Partition> = Vec::new();
        for (i, d) in snap.dsas.iter().enumerate() {
            if Some(i) == router_idx {
                continue;
            }
            match partitions.iter_mut().find(|p| p.prefix == d.prefix) {
                Some(p) => p.order.push(i),
                None => partitions.push(Partition {
                    prefix: d.prefix.clone(),
                    order: vec![i],
                    groups: Vec::new(),
                    write_order: Vec::new(),
                    rotor: AtomicUsize::new(0),
                }),
            }
        }
        for p in &mut partitions {
            p.order = move_to_front(&p.order, &precedence);
            p.write_order = move_to_front(&p.order, &write_prec);
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
        Ok(Table {
            partitions,
            router: router_idx,
        })
    }

    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Partitions in a stable, readable order (by prefix string).
    pub fn partitions_sorted(&self) -> Vec<&Partition> {
        let mut v: Vec<&Partition> = self.partitions.iter().collect();
        v.sort_by_key(|p| p.prefix.normalized());
        v
    }

    /// The partition that holds `dn` (spec 3.1), or what lies below it.
    pub fn lookup(&self, dn: &Dn) -> Lookup<'_> {
        match self
            .partitions
            .iter()
            .find(|p| p.prefix.is_ancestor_or_self_of(dn))
        {
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

/// `list` with the members of `front` that it contains moved to the front,
/// in `front`'s order.
fn move_to_front(list: &[DsaIdx], front: &[DsaIdx]) -> Vec<DsaIdx> {
    let mut out: Vec<DsaIdx> = Vec::with_capacity(list.len());
    for &i in front.iter().chain(list) {
        if list.contains(&i) && !out.contains(&i) {
            out.push(i);
        }
    }
    out
}
