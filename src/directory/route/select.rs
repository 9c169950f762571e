//! Target selection (architecture.md, "Reads" and "Writes"): pure, allocation-free.

use super::{DsaId, Partition};

/// A DSA's run-time state as selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DsaStatus {
    Up,
    Down,
    /// Taken out of service by an administrator.
    Disabled,
    /// Finishing its in-flight work; takes no new work.
    Draining,
    /// Taken out of selection for a while as an outlier (its reads stalled
    /// or ran far slower than its group's).
    Ejected,
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
            DsaStatus::Ejected => "ejected",
        }
    }
}

/// Per-DSA run-time facts, indexed by knowledge position.
pub trait DsaView {
    fn status(&self, dsa: DsaId) -> DsaStatus;
    /// Operations in flight from this router to the DSA.
    fn in_flight(&self, dsa: DsaId) -> u32;
    /// The DSA's concurrency limit; `None` for no limit.
    fn limit(&self, dsa: DsaId) -> Option<u32>;

    fn saturated(&self, dsa: DsaId) -> bool {
        self.limit(dsa).is_some_and(|l| self.in_flight(dsa) >= l)
    }

    /// Whether the DSA may serve reads by its replication position
    /// (`--max-replication-lag`, `--max-staleness`; see
    /// `crate::directory::replication`). Writes ignore it.
    fn read_gate(&self, _dsa: DsaId) -> ReadGate {
        ReadGate::Serve
    }
}

/// A DSA's replication position as read selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadGate {
    Serve,
    /// Too far behind to serve reads, by this many milliseconds
    /// (`u32::MAX`: unknown); it serves only when no eligible DSA of the
    /// partition is in bound, and then the one least behind.
    Behind(u32),
}

impl ReadGate {
    fn behind(self) -> Option<u32> {
        match self {
            ReadGate::Serve => None,
            ReadGate::Behind(ms) => Some(ms),
        }
    }
}

/// The selected target and the group it was chosen from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Index into `Partition::groups`.
    pub group: usize,
    pub dsa: DsaId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No group has an eligible member (writes: no DSA is eligible).
    Unavailable,
    /// Every target of the chosen group (writes: the chosen DSA) is at its
    /// concurrency limit. Never spills into another group.
    Busy { group: usize },
    /// A write to a partition whose DSAs are all `read-only`.
    ReadOnly,
}

/// Read selection (search, compare, bind): the first group with an eligible
/// member in replication bound (when none is: with an eligible member, and
/// in it only the least behind); within it, the least in-flight target not
/// at its limit; `tick` rotates among equals.
pub fn select_read(p: &Partition, view: &impl DsaView, tick: usize) -> Result<Choice, RouteError> {
    let in_bound = |m: DsaId| view.status(m).eligible() && view.read_gate(m) == ReadGate::Serve;
    let fresh = p
        .groups
        .iter()
        .enumerate()
        .find(|(_, g)| g.members.iter().any(|&m| in_bound(m)));
    let Some((gi, group)) = fresh.or_else(|| {
        p.groups
            .iter()
            .enumerate()
            .find(|(_, g)| g.members.iter().any(|&m| view.status(m).eligible()))
    }) else {
        return Err(RouteError::Unavailable);
    };
    // Out of bound: only the least behind serves.
    let floor = match fresh {
        Some(_) => None,
        None => group
            .members
            .iter()
            .filter(|&&m| view.status(m).eligible())
            .filter_map(|&m| view.read_gate(m).behind())
            .min(),
    };
    // Read each member's in-flight count once: the counters move while we
    // look, and every decision below must see the same numbers. A fixed
    // array keeps this allocation-free; groups beyond 64 members are cut.
    let mut open: [(DsaId, u32); 64] = [(DsaId::new(0), 0); 64];
    let mut n = 0;
    for &m in group.members.iter() {
        if n == open.len() {
            break;
        }
        if !view.status(m).eligible() || view.read_gate(m).behind() > floor {
            continue;
        }
        let load = view.in_flight(m);
        if view.limit(m).is_some_and(|l| load >= l) {
            continue;
        }
        open[n] = (m, load);
        n += 1;
    }
    let open = &open[..n];
    let Some(least) = open.iter().map(|&(_, l)| l).min() else {
        return Err(RouteError::Busy { group: gi });
    };
    let ties = open.iter().filter(|&&(_, l)| l == least).count();
    let pick = tick % ties.max(1);
    match open.iter().filter(|&&(_, l)| l == least).nth(pick) {
        Some(&(dsa, _)) => Ok(Choice { group: gi, dsa }),
        None => Err(RouteError::Busy { group: gi }),
    }
}

/// Write selection (add, modify, delete, modify DN): the first eligible DSA
/// of the write order. Primary-with-failover, never load-shared.
pub fn select_write(p: &Partition, view: &impl DsaView) -> Result<Choice, RouteError> {
    if p.write_order.is_empty() && !p.read_only.is_empty() {
        return Err(RouteError::ReadOnly);
    }
    // Ejection judges reads (their latency): a write DSA ejected as an
    // outlier still takes writes when no other write DSA is eligible,
    // rather than the partition refusing every write.
    let Some(&dsa) = p
        .write_order
        .iter()
        .find(|&&m| view.status(m).eligible())
        .or_else(|| {
            p.write_order
                .iter()
                .find(|&&m| view.status(m) == DsaStatus::Ejected)
        })
    else {
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
    pub tried: &'a [DsaId],
}

impl<V: DsaView> DsaView for Excluding<'_, V> {
    fn status(&self, dsa: DsaId) -> DsaStatus {
        if self.tried.contains(&dsa) {
            DsaStatus::Down
        } else {
            self.inner.status(dsa)
        }
    }

    fn in_flight(&self, dsa: DsaId) -> u32 {
        self.inner.in_flight(dsa)
    }

    fn limit(&self, dsa: DsaId) -> Option<u32> {
        self.inner.limit(dsa)
    }

    fn read_gate(&self, dsa: DsaId) -> ReadGate {
        self.inner.read_gate(dsa)
    }
}
