//! The fault switch [`Faults::set_answer_as`]: every search entry goes out
//! under another DN, as a confused DSA would answer a search with an entry
//! it was not asked for.

use super::Faults;
use ldap3_proto::proto::LdapSearchResultEntry;
use std::sync::Mutex;

/// The DN entries go out as, while the switch is on.
#[derive(Debug, Default)]
pub(crate) struct AnswerAs(Mutex<Option<String>>);

impl Faults {
    /// Sends every search entry under `dn` instead of its own (`None`:
    /// its own).
    pub fn set_answer_as(&self, dn: Option<&str>) {
        *self
            .state
            .answer_as
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = dn.map(str::to_string);
    }

    /// `entry` as it goes out: renamed while [`Faults::set_answer_as`] is on.
    pub(crate) fn misanswer(&self, mut entry: LdapSearchResultEntry) -> LdapSearchResultEntry {
        let g = self
            .state
            .answer_as
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(dn) = g.as_ref() {
            entry.dn = dn.clone();
        }
        entry
    }
}
