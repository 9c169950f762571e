//! The phases of one operation, run in order ([`super::operation`] says
//! what each does): admit and answer here, then target, choose, rewrite
//! and send on the way to a DSA ([`Session::forward`]), respond and log on
//! the way back through the delivery stack.

use super::operation::Operation;
use super::policy::Policed;
use super::{Flow, Identity, Session};
use crate::observe::metrics::Refusal;
use crate::proto::wire::request::Op;
use std::ops::ControlFlow;

/// What the answer phase did with an operation: `Break`, the router
/// answered or carried it out itself; `Continue`, it goes on to a DSA
/// (perhaps aimed at another entry).
pub(super) type Answered = ControlFlow<Flow, Operation>;

impl Session {
    /// Run one operation through its phases.
    pub(super) async fn run(&mut self, mut op: Operation) -> Flow {
        self.take_new_password();
        if let Some(flow) = self.admit(&mut op).await {
            return flow;
        }
        match self.answer_phase(op).await {
            ControlFlow::Break(flow) => flow,
            ControlFlow::Continue(op) => {
                self.forward(op).await;
                Flow::Continue
            }
        }
    }

    /// A password change of the client's own that the DSA accepted: later
    /// replays of its bind carry the new password.
    fn take_new_password(&mut self) {
        let Some(slot) = &self.who.rebind else {
            return;
        };
        let new = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(new), Identity::Bound(b)) = (new, &mut self.who.identity) {
            if b.bind.as_ref().is_some_and(|old| old.dn == new.dn) {
                tracing::debug!(client = %self.client.peer, "password changed: later replays carry the new one");
                b.bind = Some(new);
            }
        }
    }

    /// The admit phase: the throttle, the message ID, the client policy
    /// (which sets the operation's rights). `Some` when the operation ends
    /// here.
    async fn admit(&mut self, op: &mut Operation) -> Option<Flow> {
        let req = &op.req;
        let ends = matches!(req.op, Op::Unbind | Op::Abandon { .. });
        if !ends {
            if let Err(over) = self.router.admission.throttle.admit() {
                if matches!(req.op, Op::Bind { .. }) {
                    // A failed bind leaves the client anonymous (RFC 4513).
                    self.become_anonymous();
                }
                let why = match over {
                    crate::admission::limits::Over::Cpu => Refusal::Cpu,
                    crate::admission::limits::Over::Memory => Refusal::Memory,
                };
                self.refuse(req, why, over.message()).await;
                return Some(Flow::Continue);
            }
        }
        // RFC 4511 4.1.1.1: a request must not reuse the message ID of
        // one still outstanding. The client could not tell their responses
        // apart, and the router would lose track of the first: it is a
        // protocol error, and the client is disconnected.
        if !ends && self.client.out.is_outstanding(req.msgid) {
            let msg = format!(
                "message ID {} is already used by a request still outstanding on this connection",
                req.msgid
            );
            return Some(self.malformed(&msg));
        }
        // Only with a policy file. The check itself is synchronous; the
        // answer to a refused request is boxed, so that its state is not
        // carried by every session's future (tests/logic future_size).
        if self.router.admission.policies.configured() {
            if let Policed::Answer(a) = self.police(op) {
                Box::pin(self.answer_policy(&op.req, a)).await;
                return Some(Flow::Continue);
            }
        }
        None
    }

    /// The answer phase: what the router answers or carries out itself,
    /// and what goes on to a DSA.
    async fn answer_phase(&mut self, op: Operation) -> Answered {
        match &op.req.op {
            Op::Unbind => ControlFlow::Break(Flow::Close(None)),
            Op::Abandon { target } => {
                self.client.out.abandon(*target);
                ControlFlow::Break(Flow::Continue)
            }
            // Boxed: binds and extended operations may open a connection
            // of the client's own (a large state); inline, every request's
            // future would be that large (io.rs boxes it per request).
            Op::Bind { .. } => ControlFlow::Break(Box::pin(self.bind(&op)).await),
            Op::Extended { .. } => Box::pin(self.extended(op)).await,
            Op::Search { base, scope: 0, .. } if base.is_empty() => {
                self.root_dse(&op.req).await;
                ControlFlow::Break(Flow::Continue)
            }
            _ => ControlFlow::Continue(op),
        }
    }
}
