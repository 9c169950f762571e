//! Diagnostic messages for routing failures, shared by the data path and
//! `explain` so that both say the same thing.

use super::{DsaView, Partition};
use crate::knowledge::Snapshot;

/// `unavailable` (52): names the partition and the state of each DSA.
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

/// `busy` (51): the concurrency message of spec 5, naming the DSA(s) at
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
