//! Target selection (spec 3.4 and 3.5): pure, allocation-free.

use super::{DsaIdx, Partition};

/// A DSA's run-time state as selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DsaStatus {
    Up,
    Down,
    /// Taken out of service by an administrator.
    Disabled,
    /// Finishing its in-flight work; takes no new work.
    Draining,
}

impl DsaStatus {
    pub fn eligible(self) -> bool {
        self == DsaStatus::Up
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DsaStatus::Up => "up",
            DsaStatus::Down => "down",
            DsaStatus::Disabled => "disabled",
            DsaStatus::Draining => "draining",
        }
    }
}

/// Per-DSA run-time facts, indexed by knowledge position.
pub trait DsaView {
    fn status(&self, dsa: DsaIdx) -> DsaStatus;
    /// Operations in flight from this router to the DSA.
    fn in_flight(&self, dsa: DsaIdx) -> u32;
    /// The DSA's concurrency limit; `None` for no limit.
    fn limit(&self, dsa: DsaIdx) -> Option<u32>;

    fn saturated(&self, dsa: DsaIdx) -> bool {
        self.limit(dsa).is_some_and(|l| self.in_flight(dsa) >= l)
    }
}

/// The selected target and the group it was chosen from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Index into `Partition::groups`.
    pub group: usize,
    pub dsa: DsaIdx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No group has an eligible member (writes: no DSA is eligible).
    Unavailable,
    /// Every target of the chosen group (writes: the chosen DSA) is at its
    /// concurrency limit. Never spills into another group.
    Busy { group: usize },
}

/// Read selection (search, compare, bind): the first group with an eligible
/// member; within it, the least in-flight target not at its limit; `tick`
/// rotates among equals.
pub fn select_read(p: &Partition, view: &impl DsaView, tick: usize) -> Result<Choice, RouteError> {
    let Some((gi, group)) = p
        .groups
        .iter()
        .enumerate()
        .find(|(_, g)| g.members.iter().any(|&m| view.status(m).eligible()))
    else {
        return Err(RouteError::Unavailable);
    };
    let open = || {
        group
            .members
            .iter()
            .copied()
            .filter(|&m| view.status(m).eligible() && !view.saturated(m))
    };
    let Some(least) = open().map(|m| view.in_flight(m)).min() else {
        return Err(RouteError::Busy { group: gi });
    };
    let ties = open().filter(|&m| view.in_flight(m) == least).count();
    let pick = tick % ties.max(1);
    match open().filter(|&m| view.in_flight(m) == least).nth(pick) {
        Some(dsa) => Ok(Choice { group: gi, dsa }),
        None => Err(RouteError::Busy { group: gi }),
    }
}

/// Write selection (add, modify, delete, modify DN): the first eligible DSA
/// of the write order. Primary-with-failover, never load-shared.
pub fn select_write(p: &Partition, view: &impl DsaView) -> Result<Choice, RouteError> {
    let Some(&dsa) = p.write_order.iter().find(|&&m| view.status(m).eligible()) else {
        return Err(RouteError::Unavailable);
    };
    let group = p
        .groups
        .iter()
        .position(|g| g.members.contains(&dsa))
        .unwrap_or(0);
    if view.saturated(dsa) {
        return Err(RouteError::Busy { group });
    }
    Ok(Choice { group, dsa })
}

/// A view with some DSAs treated as down: the targets already tried by a
/// transparent retry.
pub struct Excluding<'a, V: DsaView> {
    pub inner: &'a V,
    pub tried: &'a [DsaIdx],
}

impl<V: DsaView> DsaView for Excluding<'_, V> {
    fn status(&self, dsa: DsaIdx) -> DsaStatus {
        if self.tried.contains(&dsa) {
            DsaStatus::Down
        } else {
            self.inner.status(dsa)
        }
    }

    fn in_flight(&self, dsa: DsaIdx) -> u32 {
        self.inner.in_flight(dsa)
    }

    fn limit(&self, dsa: DsaIdx) -> Option<u32> {
        self.inner.limit(dsa)
    }
}
