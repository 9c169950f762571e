//! A paged search (RFC 2696) whose connection to its DSA was lost between
//! pages. The DSA's cookie belongs to that connection: sent on a new one,
//! or to another DSA, it gets the DSA's `protocolError` ("paged results
//! cookie is invalid"), or worse, pages of another search. RFC 2696 says a
//! server that cannot resume a paged search returns an error, after which
//! client and server treat the result set as closed: the router answers
//! the next page itself with `unavailable` (52), naming the DSA, and the
//! client starts the search again from the first page (an empty cookie).
//! The stale cookie never leaves the router. The same holds for a search
//! spanning partitions, which the router pages itself: its cookie carries
//! the DSA's cookie of the partition being read, checked here the same
//! way ([`Session::paged_lost_in`]).

use super::Session;
use crate::directory::knowledge::DsaName;
use crate::directory::route::Partition;
use crate::proto::wire::request::{Request, OID_PAGED_RESULTS};
use crate::proto::wire::search;
use crate::service::context::Routing;

/// A request's paged results cookie, when it continues a paged search.
fn continued(req: &Request) -> bool {
    req.control(OID_PAGED_RESULTS)
        .and_then(|c| c.value.as_deref())
        .and_then(search::paged_value)
        .is_some_and(|(_, cookie)| !cookie.is_empty())
}

impl Session {
    /// `req` continues a paged search in partition `p` whose DSA
    /// connection is gone (or whose DSA no longer takes it): the router's
    /// answer, in words.
    pub(super) fn paged_lost(
        &self,
        routing: &Routing,
        p: &Partition,
        req: &Request,
    ) -> Option<String> {
        if !continued(req) {
            return None;
        }
        self.paged_lost_in(routing, p)
    }

    /// A page that resumes a DSA's cookie in partition `p` (the client's
    /// own cookie, or the DSA's inside the router's cookie of a search
    /// spanning partitions, [`super::spanning`]): the router's answer, in
    /// words, when the connection that cookie belongs to is gone.
    pub(super) fn paged_lost_in(&self, routing: &Routing, p: &Partition) -> Option<String> {
        let (dsa, held) = self.who.private.paged(&p.key)?;
        let same_dsa = self
            .state_sticky(routing, p)
            .is_some_and(|i| routing.snap.dsas[i].name == dsa);
        (held.lost() || !same_dsa).then(|| {
            format!(
                "dsa-router: the paged search's connection to DSA {dsa} was lost; its pages cannot be resumed: start the search again from the first page"
            )
        })
    }

    /// A paged search in partition `p` went to DSA `name`: note the
    /// connection of the client's own it went on.
    pub(super) fn note_paged(&self, p: &Partition, req: &Request, name: &DsaName) {
        if req.control(OID_PAGED_RESULTS).is_none() {
            return;
        }
        if let Some(held) = self.who.private.held(name) {
            self.who.private.note_paged(&p.key, name, held);
        }
    }
}
