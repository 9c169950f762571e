//! Diagnostic messages for routing failures, shared by the data path and
//! `explain` so that both say the same thing.

use super::{DsaView, Partition};
use crate::directory::knowledge::Snapshot;

/// A write to a partition whose DSAs are all `read-only`.
pub fn read_only(p: &Partition, snap: &Snapshot) -> String {
    let names: Vec<&str> = p
        .read_only
        .iter()
        .map(|&i| snap.dsas[i].name.as_str())
        .collect();
    format!(
        "dsa-router: partition {} is read-only (knowledge marks {} read-only); updates are not accepted",
        p.prefix,
        names.join(", ")
    )
}

/// `unavailable` (52): names the partition and the state of each DSA.
pub fn unavailable(p: &Partition, snap: &Snapshot, view: &impl DsaView) -> String {
    let states: Vec<String> = p
        .order
        .iter()
        .map(|&i| format!("{} {}", snap.dsas[i].name, view.status(i).as_str()))
        .collect();
    format!(
        "dsa-router: no DSA available for partition {} ({})",
        p.prefix,
        states.join(", ")
    )
}

/// `unavailable` (52) for a read kept to the DSAs that have the client's
/// last write (`only`, lower-case names; read-your-writes): each other
/// DSA is named as not having it, each of those as `view` sees it.
pub fn kept_unavailable(
    p: &Partition,
    snap: &Snapshot,
    view: &impl DsaView,
    only: &[crate::directory::knowledge::DsaName],
) -> String {
    let states: Vec<String> = p
        .order
        .iter()
        .map(|&i| {
            let name = &snap.dsas[i].name;
            if only.contains(name) {
                format!("{name} {}", view.status(i).as_str())
            } else {
                format!("{name} has not reached the client's write")
            }
        })
        .collect();
    format!(
        "dsa-router: no DSA that has your last write is available for partition {} ({}); the read is not sent to a DSA without it",
        p.prefix,
        states.join(", ")
    )
}

/// `busy` (51): the concurrency message (architecture.md, "Availability and throttling"), naming the DSA(s) at
/// their limit in the chosen group.
pub fn busy(p: &Partition, group: usize, snap: &Snapshot, view: &impl DsaView) -> String {
    let names: Vec<&str> = p
        .groups
        .get(group)
        .map(|g| g.members.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|&&m| view.status(m).eligible() && view.saturated(m))
        .map(|&m| snap.dsas[m].name.as_str())
        .collect();
    concurrency(&names)
}

/// The concurrency-limit message for the named DSAs.
pub fn concurrency(names: &[&str]) -> String {
    match names {
        [one] => format!(
            "dsa-router: DSA {one} has exceeded the concurrency limit set by the administrator; try again later, or ask the administrator to raise the limit"
        ),
        many => format!(
            "dsa-router: DSAs {} have exceeded the concurrency limit set by the administrator; try again later, or ask the administrator to raise the limit",
            many.join(", ")
        ),
    }
}
