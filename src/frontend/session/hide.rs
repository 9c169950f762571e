//! The respond phase's rights: what a search's results lose under the
//! client policy's rule ([`Keep`], decided by the admit phase), and the
//! delivery layer that applies it ([`Hide`]).

use crate::admission::policy::shield::Shield;
use crate::admission::policy::wire;
use crate::backend::upstream::batch::Batch;
use crate::backend::upstream::layer::Layer;
use crate::backend::upstream::Delivery;
use crate::proto::wire::frame::{self, Frame};
use std::sync::Arc;

/// What a search's results lose: the rule's hidden attributes, and with
/// `dns` (a search that dereferences aliases) entries outside its
/// subtrees.
#[derive(Clone)]
pub(crate) struct Keep {
    shield: Arc<Shield>,
    dns: bool,
}

impl Keep {
    /// What a rule keeps: outside `shield`'s hidden attributes, and with
    /// `dns` only entries within its subtrees.
    pub(super) fn new(shield: Arc<Shield>, dns: bool) -> Keep {
        Keep { shield, dns }
    }
}

/// A delivery whose search entries lose the attributes a rule hides, and
/// where entries outside the rule's subtrees are not delivered.
pub(super) struct Hide<D> {
    inner: D,
    hide: Option<Keep>,
}

impl<D: Delivery> Hide<D> {
    pub(super) fn wrap(inner: D, hide: Option<Keep>) -> Hide<D> {
        Hide { inner, hide }
    }
}

/// Only entries change; everything else is the wrapped delivery's.
impl<D: Delivery> Layer for Hide<D> {
    type Inner = D;

    fn inner(&self) -> &D {
        &self.inner
    }

    fn deliver(&self, r: Frame<'_>, batch: &mut Batch) {
        let Frame { pdu, h } = r;
        if let Some(k) = self.hide.as_ref().filter(|k| k.dns) {
            if h.op_tag == frame::tag::SEARCH_ENTRY
                && !wire::entry_name(pdu, h).is_some_and(|dn| k.shield.admits(dn))
            {
                return;
            }
        }
        let hidden = self.hide.as_ref().map(|k| &k.shield.hidden);
        let stripped = hidden.filter(|hd| hd.any()).and_then(|hd| {
            let b = wire::strip_entry(pdu, h, |a| hd.strips(a))?.freeze();
            let bh = frame::header(&b).ok()?;
            Some((b, bh))
        });
        match stripped {
            Some((b, bh)) => self.inner.deliver(Frame::new(&b, &bh), batch),
            None => self.inner.deliver(Frame::new(pdu, h), batch),
        }
    }
}

#[cfg(test)]
impl Keep {
    /// What a rule hiding `shield`'s attributes keeps (no subtrees).
    pub(super) fn hiding(shield: Shield) -> Keep {
        Keep {
            shield: Arc::new(shield),
            dns: false,
        }
    }
}
