//! Anonymous clients on a DSA whose knowledge gives the router an identity
//! (`ldap-dsa-name`, with `ldap-dsa-password`).
//!
//! A DSA that refuses anonymous operations (slapd's `require authc`, an
//! ACL with `by anonymous none`, Active Directory) refuses anonymous
//! clients' operations sent on an unbound connection. Where the knowledge
//! names the router on a DSA that does not trust conveyed originators
//! (`dsp-ldap` to a directory that cannot take a conveyed identity), their
//! searches and compares go on the router's shared connection instead,
//! bound as that name: the rights the DSA gives the router's name are what
//! anonymous clients read with there, as under CA Directory. Their writes
//! and extended operations stay on the unbound connection: the router's
//! name is never lent for a change.
//!
//! On a DSA that trusts conveyed originators, anonymous clients stay on the
//! unbound connection, as anonymous: the router's name there may assume
//! any identity and read what the router needs, and anonymous clients
//! never gain that. (The proxied-authorization control for the anonymous
//! identity on the router's connection would serve DSAs that only want a
//! bind first, slapd's `require bind`, but it makes the first read wait
//! for the router's bind where the unbound connection is hedged at once.)
//!
//! Without a name and password, anonymous clients stay unbound. Operations
//! on a connection of the client's own (paged, sorted and VLV searches, a
//! client's own proxied authorization, transactions) are never sent under
//! the router's name.

use super::pool::Pool;
use crate::wire::frame::tag;

/// How an anonymous client's operation runs on one DSA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anonymous {
    /// On the unbound shared connection.
    Unbound,
    /// On the router's shared connection, as the router.
    Lent,
}

impl Anonymous {
    /// The shared connection it runs on is the router's.
    pub(crate) fn routed(self) -> bool {
        self == Anonymous::Lent
    }
}

impl Pool {
    /// How an anonymous client's operation (protocol op `op_tag`, a write
    /// or not) runs on this DSA.
    pub(crate) fn anonymous(&self, op_tag: u8, is_write: bool) -> Anonymous {
        let read = !is_write && matches!(op_tag, tag::SEARCH_REQUEST | tag::COMPARE_REQUEST);
        if read && self.router_identity.is_some() && !self.proxies() {
            Anonymous::Lent
        } else {
            Anonymous::Unbound
        }
    }
}
