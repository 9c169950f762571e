//! Who a bind names, as the router keys and shows it.
//!
//! * SASL binds meet the failed-bind defence as simple binds do, by the
//!   user the step authenticates ([`crate::proto::wire::sasl_name`]).
//! * A simple bind DN that preparation changes beyond ASCII case and
//!   spaces (`uid=ｕser1997`, a trailing NBSP: a spelling the DSA may
//!   take for another entry's DN) is shown as the DN the DSA bound
//!   (WhoAmI on the bind's connection, one round trip for these rare
//!   binds only), or else in its prepared form: WhoAmI, `/status` and the
//!   access log never show a look-alike as an identity of its own (a
//!   bind that failed made no identity: its access-log line has the name
//!   as sent, escaped).

use super::Session;
use crate::admission::guard::{Began, Refused, Ticket};
use crate::backend::upstream::conn::Conn;
use crate::proto::dn::Dn;
use crate::proto::wire::frame::Header;
use crate::proto::wire::response::Code;
use crate::proto::wire::sasl_name;
use bytes::Bytes;
use std::sync::Arc;

impl Session {
    /// The failed-bind defence's leave for a SASL step that names its
    /// user (`Ok(None)`: this step names none); else the answer, as for a
    /// simple bind.
    pub(super) async fn sasl_admit(
        &self,
        pdu: &Bytes,
        h: &Header,
        mech: &str,
    ) -> Result<Option<Ticket>, (Code, &'static str)> {
        let Some(creds) = crate::proto::wire::sasl::bind_credentials(pdu, h) else {
            return Ok(None);
        };
        let Some(who) = sasl_name::authenticates(mech, creds) else {
            return Ok(None);
        };
        let wait = self.router.cfg.limits().bind_timeout;
        let guard = &self.router.admission.failed_binds;
        match guard.admit_within(&who, self.client.peer.ip(), wait).await {
            Ok(t) => Ok(Some(t)),
            Err(Refused::Busy) => {
                tracing::info!(client = %self.client.peer, mech = %crate::base::logsafe::esc(mech), "SASL bind answered busy: its user's failures plus binds in flight stayed at --failed-bind-limit for --bind-timeout");
                Err((
                    Code::Busy,
                    "dsa-router: too many binds in flight for this name; retry",
                ))
            }
            Err(why) => {
                tracing::debug!(client = %self.client.peer, mech = %crate::base::logsafe::esc(mech), ?why, "SASL bind refused: failed-bind back-off");
                Err((Code::InvalidCredentials, ""))
            }
        }
    }

    /// Log the back-offs a SASL bind's answer began.
    pub(super) fn sasl_counted(&self, ticket: Option<Ticket>, code: u8, mech: &str) {
        let Some(began) = ticket.map(|t| t.answered(code)) else {
            return;
        };
        let Began {
            dn,
            ceiling,
            address,
        } = began;
        if dn || ceiling || address {
            tracing::info!(client = %self.client.peer, mech = %crate::base::logsafe::esc(mech), of_user_from_address = dn, of_user_everywhere = ceiling, of_address = address, "failed-bind back-off begins after a SASL bind: the router answers these binds invalidCredentials for --failed-bind-backoff");
        }
    }

    /// The DN a simple bind as `dn` (parsed: `parsed`) is shown and
    /// conveyed as: `dn` itself unless preparation changes it beyond
    /// ASCII case and spaces; then, after a success, the DN the DSA says
    /// it bound on `conn` when that is the same DN, else the prepared
    /// form.
    pub(super) async fn shown_dn(
        &self,
        dn: &str,
        parsed: &Dn,
        bound: Option<&Arc<Conn>>,
    ) -> String {
        let lookalike = parsed
            .rdns()
            .iter()
            .flat_map(|r| r.avas())
            .any(|a| crate::proto::dn::prep::beyond_ascii(a.value()));
        if !lookalike {
            return dn.to_string();
        }
        if let Some(conn) = bound {
            let who = self.who_am_i(conn).await;
            let named = who
                .strip_prefix("dn:")
                .and_then(|d| Dn::parse_ldap(d).ok().map(|p| (d, p)));
            if let Some((d, _)) = named.filter(|(_, p)| p == parsed) {
                return d.to_string();
            }
        }
        parsed.normalized()
    }
}
