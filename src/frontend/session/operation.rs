//! One client operation, and the phases it goes through (architecture.md,
//! "One operation").
//!
//! A request is read into an [`Operation`]: its PDU and header together,
//! the decoded request, and what the phases decide for it. The session runs
//! the phases in this order ([`Session::run`](super::Session)):
//!
//! 1. **admit** (`phases.rs`): the throttle, the message ID, the client
//!    policy, which sets the operation's [`Rights`].
//! 2. **answer** (`phases.rs`, `local.rs`, `bind.rs`, `sasl.rs`): what the
//!    router answers or carries out itself (unbind, abandon, binds, the
//!    root DSE, StartTLS, WhoAmI, Cancel). Password Modify, WhoAmI under
//!    proxied authorization and the extended operations the router does
//!    not know come back aimed at an entry ([`Target::Entry`]): they are
//!    the phase's answer, and go on like any other operation.
//! 3. **target** (`forward.rs`): the DN parsed and looked up: one
//!    partition, several (`spanning.rs`), or the router's answer.
//! 4. **choose** (`dispatch.rs`): a DSA of the partition, its in-flight
//!    slot, a connection that carries the client's identity.
//! 5. **rewrite** (`send.rs`, `Outgoing::rewrite`): the request in the
//!    DSA's tree, with the controls the router adds.
//! 6. **send** (`send.rs`, `Outgoing::send`): the one send path.
//! 7. **respond** (`stack.rs`): the DSA's responses back through the
//!    delivery stack to the client's queue, the rights applied (hidden
//!    attributes).
//! 8. **log** (`logged.rs`, `traced.rs`): the access log line, the
//!    metrics and the trace, when the operation ends.

use super::hide::Keep;
use super::out::Rebind;
use crate::observe::otel::OpTrace;
use crate::proto::wire::frame::{FrameError, Pdu};
use crate::proto::wire::request::{self, Op, Request};
use bytes::Bytes;

/// One client operation on its way through the phases.
pub(super) struct Operation {
    /// The request as the client sent it (the admit phase may clamp a
    /// search's limits).
    pub pdu: Pdu,
    pub req: Request,
    /// What it acts on.
    pub target: Target,
    /// What the client may see of the answer (set by the admit phase).
    pub rights: Rights,
    /// Its trace, when traced (set once its partition is known).
    pub trace: Option<Box<OpTrace>>,
    /// What follows the DSA's success: the client's new password replayed
    /// on its other connections (a Password Modify of its own).
    pub then: Option<Rebind>,
}

/// The entry an operation acts on.
pub(super) enum Target {
    /// The one its request names (a search's base, an update's entry); it
    /// updates when its request does, and may be re-sent.
    Named,
    /// One an answering phase chose (Password Modify: the user; WhoAmI
    /// under proxied authorization: the proxied identity; an unknown
    /// extended operation: the partition of the client's bind DN): it
    /// goes to that DSA only, never to several, never re-sent.
    Entry { dn: String, write: bool },
}

/// What the client may see of an operation's answer.
#[derive(Default)]
pub(super) struct Rights {
    /// What a search's results lose (the policy rule's hidden attributes).
    pub hide: Option<Keep>,
}

/// Why a request could not be read.
#[derive(Debug)]
pub(super) enum Unreadable {
    Frame(FrameError),
    Request(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Frame(e) => e.fmt(f),
            Unreadable::Request(why) => f.write_str(why),
        }
    }
}

impl Operation {
    /// The operation a client's PDU asks for.
    pub(super) fn read(bytes: Bytes) -> Result<Operation, Unreadable> {
        let pdu = Pdu::read(bytes).map_err(Unreadable::Frame)?;
        let req = request::decode(&pdu.bytes).map_err(|e| Unreadable::Request(e.message))?;
        Ok(Operation {
            pdu,
            req,
            target: Target::Named,
            rights: Rights::default(),
            trace: None,
            then: None,
        })
    }

    /// This operation aimed at `dn` (an update when `write`): an answering
    /// phase's way of sending it on.
    pub(super) fn aimed_at(mut self, dn: String, write: bool) -> Operation {
        self.target = Target::Entry { dn, write };
        self
    }

    /// The DN it acts on.
    pub(super) fn dn(&self) -> &str {
        match &self.target {
            Target::Named => named_dn(&self.req),
            Target::Entry { dn, .. } => dn,
        }
    }

    /// Whether it is an update (it goes to the partition's write DSA).
    pub(super) fn is_write(&self) -> bool {
        match &self.target {
            Target::Named => is_update(&self.req.op),
            Target::Entry { write, .. } => *write,
        }
    }

    /// Whether the entry it acts on is the one its request names (it may
    /// span partitions and be re-sent).
    pub(super) fn named(&self) -> bool {
        matches!(self.target, Target::Named)
    }
}

/// The DN a request names.
fn named_dn(req: &Request) -> &str {
    match &req.op {
        Op::Search { base, .. } => base,
        Op::Compare { dn }
        | Op::Add { dn }
        | Op::Delete { dn }
        | Op::Modify { dn }
        | Op::ModDn { dn } => dn,
        _ => "",
    }
}

/// Whether `op` is an update.
fn is_update(op: &Op) -> bool {
    matches!(
        op,
        Op::Add { .. } | Op::Delete { .. } | Op::Modify { .. } | Op::ModDn { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldap3_proto::proto::{
        LdapDerefAliases, LdapFilter, LdapMsg, LdapOp, LdapSearchRequest, LdapSearchScope,
    };
    use ldap3_proto::proto::{LdapExtendedRequest, LdapModify, LdapModifyRequest};

    fn encode(op: LdapOp) -> Bytes {
        let msg = LdapMsg {
            msgid: 7,
            op,
            ctrl: vec![],
        };
        let tag: lber::structure::StructureTag = msg.into();
        let mut b = bytes::BytesMut::new();
        lber::write::encode_into(&mut b, tag).expect("encodes");
        b.freeze()
    }

    fn search(base: &str) -> LdapOp {
        LdapOp::SearchRequest(LdapSearchRequest {
            base: base.into(),
            scope: LdapSearchScope::Subtree,
            aliases: LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: LdapFilter::Present("objectClass".into()),
            attrs: vec![],
        })
    }

    fn modify(dn: &str) -> LdapOp {
        LdapOp::ModifyRequest(LdapModifyRequest {
            dn: dn.into(),
            changes: Vec::<LdapModify>::new(),
        })
    }

    fn extended(oid: &str) -> LdapOp {
        LdapOp::ExtendedRequest(LdapExtendedRequest {
            name: oid.into(),
            value: None,
        })
    }

    /// A request, the entry a phase aimed it at (if one did), and what
    /// the operation then acts on: its DN, whether it updates, whether it
    /// is the entry the request names.
    type Case = (
        LdapOp,
        Option<(&'static str, bool)>,
        &'static str,
        bool,
        bool,
    );

    #[test]
    fn an_operation_acts_on_what_its_request_names_until_a_phase_aims_it() {
        let cases: Vec<Case> = vec![
            (search("o=a,c=GB"), None, "o=a,c=GB", false, true),
            (modify("cn=x,o=a,c=GB"), None, "cn=x,o=a,c=GB", true, true),
            (extended("1.2.3"), None, "", false, true),
            // Password Modify: the user's entry, an update.
            (
                extended("1.3.6.1.4.1.4203.1.11.1"),
                Some(("cn=u,c=GB", true)),
                "cn=u,c=GB",
                true,
                false,
            ),
            // WhoAmI under proxied authorization: the proxied identity.
            (
                extended("1.3.6.1.4.1.4203.1.11.3"),
                Some(("cn=p,c=GB", false)),
                "cn=p,c=GB",
                false,
                false,
            ),
            // A search aimed elsewhere never spans, never re-sent.
            (
                search("c=GB"),
                Some(("o=b,c=GB", false)),
                "o=b,c=GB",
                false,
                false,
            ),
        ];
        for (req, aim, dn, write, named) in cases {
            let mut op = Operation::read(encode(req)).expect("reads");
            assert_eq!(op.req.msgid, 7);
            assert_eq!(op.pdu.h.msgid, 7);
            if let Some((to, w)) = aim {
                op = op.aimed_at(to.to_string(), w);
            }
            assert_eq!((op.dn(), op.is_write(), op.named()), (dn, write, named));
            assert!(op.rights.hide.is_none() && op.trace.is_none() && op.then.is_none());
        }
    }

    #[test]
    fn damaged_requests_say_why() {
        let bytes = encode(search("c=GB"));
        let cut = bytes.slice(..bytes.len() - 3);
        assert!(matches!(Operation::read(cut), Err(Unreadable::Frame(_))));
        // A whole PDU whose operation cannot be decoded.
        let junk = Bytes::from_static(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x7f, 0x00]);
        let e = Operation::read(junk).err().expect("refused");
        assert!(!e.to_string().is_empty());
    }
}
