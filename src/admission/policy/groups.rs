//! Group membership for rules' `member_of`: the member sets last read
//! from the DSAs holding the groups (`membership` reads them, off the
//! operations' path), swapped whole, and a generation that moves when a
//! set changes (sessions re-decide their rule then). Pure state: no I/O.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The policy file's `[groups]`: how often member sets are read, and how
/// long one read may take.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Seconds between reads of every group (at least 1).
    #[serde(default = "default_refresh")]
    pub refresh: u64,
    /// Seconds one group's read may take, connecting and binding
    /// included (at least 1).
    #[serde(default = "default_timeout")]
    pub timeout: u64,
}

fn default_refresh() -> u64 {
    60
}

fn default_timeout() -> u64 {
    5
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            refresh: default_refresh(),
            timeout: default_timeout(),
        }
    }
}

impl Settings {
    pub fn refresh(&self) -> Duration {
        Duration::from_secs(self.refresh.max(1))
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }

    /// How long a set read once is kept while reads of it fail: five
    /// refresh intervals; then the group is unreadable.
    pub fn keep(&self) -> Duration {
        self.refresh() * 5
    }
}

/// What a rule does with a client when one of its `member_of` groups
/// cannot be read (and no group read shows the client a member).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unreadable {
    /// The criterion does not match: the client goes on to the next rules
    /// (safe for rules that grant more than the later ones).
    #[default]
    Skip,
    /// The criterion matches every bound client: the rule applies (safe
    /// for rules that restrict: a deny list fails closed).
    Match,
}

/// One group as last read.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// The group's DN as the policy file writes it.
    pub name: String,
    /// Its members' DNs, normalized; `None`: not read (yet), or its last
    /// good read is older than [`Settings::keep`].
    pub members: Option<Arc<HashSet<String>>>,
    /// When it was last read successfully.
    pub read_at: Option<SystemTime>,
    /// Why the last read failed (`None`: it did not).
    pub error: Option<String>,
    /// The DSA it was last read from.
    pub dsa: Option<String>,
}

/// Every group, by normalized DN.
pub type Sets = HashMap<String, Group>;

/// The member sets in force, shared by every session.
#[derive(Default)]
pub struct Groups {
    sets: arc_swap::ArcSwap<Sets>,
    generation: AtomicU64,
    /// Wakes the reader (a policy file was (re-)read).
    pub wake: tokio::sync::Notify,
}

impl Groups {
    /// The sets in force.
    pub fn sets(&self) -> Arc<Sets> {
        self.sets.load_full()
    }

    /// Moves whenever a member set changes, or a group turns readable or
    /// unreadable.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Put `new` in force (the generation moves when what a rule can see
    /// changed).
    pub fn store(&self, new: Sets) {
        let old = self.sets.load();
        let same = old.len() == new.len()
            && new
                .iter()
                .all(|(k, g)| old.get(k).is_some_and(|o| o.members == g.members));
        self.sets.store(Arc::new(new));
        if !same {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Whether the client whose normalized DN is `who` is a member of one of
/// `groups` (normalized DNs): `Some(true)` a member, `Some(false)` not (every
/// group read), `None` not a member of those read and some not read.
pub fn membership(sets: Option<&Sets>, groups: &[String], who: Option<&str>) -> Option<bool> {
    let Some(who) = who else {
        return Some(false);
    };
    let mut unknown = false;
    for g in groups {
        match sets.and_then(|s| s.get(g)).and_then(|g| g.members.as_ref()) {
            Some(m) if m.contains(who) => return Some(true),
            Some(_) => {}
            None => unknown = true,
        }
    }
    (!unknown).then_some(false)
}

/// A `member` or `uniqueMember` value as a DN string: `uniqueMember`'s
/// optional `#'0101'B` UID is left out.
pub fn member_dn(value: &str) -> &str {
    match value.rfind("#'") {
        Some(i) if value.ends_with("'B") => &value[..i],
        _ => value,
    }
}
