//! A [`Delivery`] that wraps another ([`Layer`]): every method passes on
//! to the wrapped delivery unless the layer says otherwise, so a layer
//! states only what it changes and cannot forget to pass the rest on
//! (a method added to [`Delivery`] is added here, passed on, once).
//!
//! The two answers that are not passed on anywhere but decide what
//! happens to the operation are given by one layer each, explicitly: the
//! innermost delivery says whether the operation [`expires`](Delivery::expires),
//! the outermost whether a write asks for the
//! [`post-read`](Delivery::post_read) control.

use super::batch::Batch;
use super::conn::Conn;
use super::hedge::Race;
use super::{Delivery, Source};
use crate::base::error::Error;
use crate::proto::wire::frame::{Frame, Pdu};
use std::sync::Arc;

/// A delivery wrapped round [`Layer::inner`]: each method, unless the
/// layer overrides it, is the inner delivery's. Every `Layer` is a
/// [`Delivery`] (by the implementation below), with the wrapped delivery
/// called statically.
pub trait Layer: Send + Sync {
    /// The delivery this one wraps.
    type Inner: Delivery;

    /// The wrapped delivery.
    fn inner(&self) -> &Self::Inner;

    /// [`Delivery::deliver`].
    fn deliver(&self, r: Frame<'_>, batch: &mut Batch) {
        self.inner().deliver(r, batch)
    }
    /// [`Delivery::finish`].
    fn finish(&self, done: Pdu, from: Source<'_>, batch: &mut Batch) {
        self.inner().finish(done, from, batch)
    }
    /// [`Delivery::fail`].
    fn fail(&self, e: &Error, at: Source<'_>) {
        self.inner().fail(e, at)
    }
    /// [`Delivery::placed`].
    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        self.inner().placed(conn, id)
    }
    /// [`Delivery::expires`]: the innermost delivery's answer.
    fn expires(&self) -> bool {
        self.inner().expires()
    }
    /// [`Delivery::raced`].
    fn raced(&self, race: &Arc<Race>, conn: &Arc<Conn>, id: i32) -> bool {
        self.inner().raced(race, conn, id)
    }
    /// [`Delivery::hedge_placed`].
    fn hedge_placed(&self, conn: &Arc<Conn>) {
        self.inner().hedge_placed(conn)
    }
    /// [`Delivery::trace_control`].
    fn trace_control(&self, conn: &Arc<Conn>) -> Option<Vec<u8>> {
        self.inner().trace_control(conn)
    }
    /// [`Delivery::post_read`].
    fn post_read(&self, conn: &Arc<Conn>) -> bool {
        self.inner().post_read(conn)
    }
}

impl<L: Layer> Delivery for L {
    #[inline]
    fn deliver(&self, r: Frame<'_>, batch: &mut Batch) {
        Layer::deliver(self, r, batch)
    }
    #[inline]
    fn finish(&self, done: Pdu, from: Source<'_>, batch: &mut Batch) {
        Layer::finish(self, done, from, batch)
    }
    #[inline]
    fn fail(&self, e: &Error, at: Source<'_>) {
        Layer::fail(self, e, at)
    }
    #[inline]
    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        Layer::placed(self, conn, id)
    }
    #[inline]
    fn expires(&self) -> bool {
        Layer::expires(self)
    }
    #[inline]
    fn raced(&self, race: &Arc<Race>, conn: &Arc<Conn>, id: i32) -> bool {
        Layer::raced(self, race, conn, id)
    }
    #[inline]
    fn hedge_placed(&self, conn: &Arc<Conn>) {
        Layer::hedge_placed(self, conn)
    }
    #[inline]
    fn trace_control(&self, conn: &Arc<Conn>) -> Option<Vec<u8>> {
        Layer::trace_control(self, conn)
    }
    #[inline]
    fn post_read(&self, conn: &Arc<Conn>) -> bool {
        Layer::post_read(self, conn)
    }
}
