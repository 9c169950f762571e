//! A session's part of a hot upgrade ([`crate::lifecycle::handover`]): once a new
//! process serves, each session leaves for it at its first moment between
//! operations, as a session moves between worker threads, but to another
//! process: its socket and its state ([`SessionState`]) go, and the new
//! process resumes it where it stopped. The client sees nothing.
//!
//! A session leaves when nothing of its own is in flight: no operation
//! outstanding, no response queued, no SASL exchange in progress, no
//! connection of its own to a DSA, no request partly read beyond
//! [`MAX_PARTIAL`]. Until then it keeps serving (an operation in progress
//! finishes, a SASL exchange completes). Those that cannot leave are
//! drained as on SIGTERM ([`super::drain`]): TLS sessions (rustls gives no
//! safe way to export a live session's keys and sequence numbers to
//! another process), sessions with connections of their own (bound on a
//! DSA as the client: that binding cannot be handed over; a SASL bind
//! cannot be replayed), persistent searches (they never end by
//! themselves), and any session still busy at `--drain-timeout`.

use super::reading::Reading;
use super::{Bound, Identity, Session};
use crate::backend::upstream::pool::BindPdu;
use crate::directory::knowledge::DsaName;
use crate::lifecycle::handover::state::{AffinityState, BoundState, SessionState, MAX_PARTIAL};
use crate::lifecycle::handover::Export;
use crate::service::context::Context;
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a session asked to leave does now.
pub(super) enum Leave {
    /// Go: nothing of its own is in flight.
    Now,
    /// Not yet: an operation or exchange is in progress.
    Wait,
    /// It cannot go: drain it (with what is left of the drain timeout).
    Drain(Duration),
}

impl Session {
    /// Whether the session, asked to leave at `since`, goes now.
    pub(super) fn leave_step(&self, r: &Reading<'_>, since: Instant) -> Leave {
        let left = self
            .router
            .cfg
            .drain_timeout
            .saturating_sub(since.elapsed());
        let idle = self.client.out.outstanding() == 0
            && self.client.out.ob.is_idle()
            && self.who.sasl.is_none();
        if self.client.tls
            || self.client.out.persistent() > 0
            || (idle && !self.who.private.is_empty())
        {
            return Leave::Drain(left);
        }
        if self.can_move() && r.between() && r.buf.len() <= MAX_PARTIAL {
            return Leave::Now;
        }
        if left.is_zero() {
            return Leave::Drain(left);
        }
        Leave::Wait
    }

    /// The session's state, for the new process.
    fn state(&self, partial: BytesMut) -> SessionState {
        let mut identity = self.who.identity.clone();
        // A password change the DSA accepted: the new one is replayed.
        if let (Some(slot), Identity::Bound(b)) = (&self.who.rebind, &mut identity) {
            let new = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(new) = new.filter(|n| b.bind.as_ref().is_some_and(|o| o.dn == n.dn)) {
                b.bind = Some(new);
            }
        }
        let bound = match identity {
            Identity::Anonymous => None,
            Identity::Bound(b) => Some(BoundState {
                dn: b.dn,
                authz: b.authz,
                conveyed: b.conveyed,
                own_conn: b.own_conn,
                policy: b.policy,
                bind: b.bind.map(|p| (p.dn.clone(), p.pdu().to_vec())),
            }),
        };
        let now = Instant::now();
        SessionState {
            peer: self.client.peer,
            bound,
            state_dsa: self
                .places
                .state_dsa
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect(),
            affinity: self
                .places
                .affinity
                .iter()
                .filter(|(_, a)| a.live(now))
                .map(|(k, a)| AffinityState {
                    key: k.clone(),
                    dsa: a.dsa.clone(),
                    age_ms: ms(now.saturating_duration_since(a.written)),
                    window_ms: ms(a.window),
                })
                .collect(),
            partial: partial.to_vec(),
        }
    }

    /// The session resumed from its state, and the bytes it had read.
    pub(super) fn from_state(router: Arc<Context>, st: SessionState) -> (Session, BytesMut) {
        let mut s = Session::new(router, st.peer, false, true);
        if let Some(b) = st.bound {
            s.client.listed.bound(&b.authz);
            s.who.identity = Identity::Bound(Bound {
                dn: b.dn,
                authz: b.authz,
                conveyed: b.conveyed,
                bind: b.bind.map(|(dn, pdu)| BindPdu::new(dn, Bytes::from(pdu))),
                own_conn: b.own_conn,
                policy: b.policy,
            });
        }
        s.places.state_dsa = st
            .state_dsa
            .into_iter()
            .map(|(k, v)| (k, DsaName::from(v)))
            .collect();
        let now = Instant::now();
        for a in st.affinity {
            let window = Duration::from_millis(a.window_ms);
            let mut x = crate::directory::replication::mark::Affinity::new(a.dsa, window, None);
            x.written = now
                .checked_sub(Duration::from_millis(a.age_ms))
                .unwrap_or(now);
            s.places.affinity.insert(a.key, x);
        }
        (s, BytesMut::from(&st.partial[..]))
    }

    /// Hand the session (its socket off every runtime) to the new process;
    /// when that fails, the client is told with a Notice of Disconnection.
    pub(super) async fn export(&self, sock: std::net::TcpStream, partial: BytesMut) {
        let back = match self.router.lifecycle.handover.exporting() {
            Some(tx) => {
                let (done, went) = tokio::sync::oneshot::channel();
                let state = self.state(partial);
                match tx.send(Export { sock, state, done }) {
                    Ok(()) => went.await.unwrap_or(Ok(())),
                    Err(e) => Err(e.0.sock),
                }
            }
            None => Err(sock),
        };
        match back {
            Ok(()) => {
                tracing::debug!(client = %self.client.peer, "session handed over to the new process")
            }
            Err(sock) => {
                tracing::warn!(client = %self.client.peer, "the session could not be handed over; closing it");
                notice(sock, self.client.peer).await;
            }
        }
        self.client.out.abandon_all();
        self.who.private.release_all();
        self.client.out.ob.close();
    }
}

/// Close a connection with a Notice of Disconnection (a handover failed).
async fn notice(sock: std::net::TcpStream, peer: SocketAddr) {
    use tokio::io::AsyncWriteExt;
    let Ok(mut s) = tokio::net::TcpStream::from_std(sock) else {
        return;
    };
    let mut b = BytesMut::new();
    crate::proto::wire::response::notice_of_disconnection(
        crate::proto::wire::response::Code::Unavailable,
        "dsa-router: shutting down",
        &mut b,
    );
    if tokio::time::timeout(Duration::from_secs(1), s.write_all(&b))
        .await
        .is_err()
    {
        tracing::debug!(client = %peer, "notice of disconnection not written");
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
