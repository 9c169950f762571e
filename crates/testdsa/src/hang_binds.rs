//! A fault switch of its own: binds are read and never answered, while
//! every other operation is (a DSA whose bind back end hangs, yet answers
//! searches, the router's probes among them, so it stays up).

use crate::Faults;
use std::sync::atomic::Ordering;

impl Faults {
    /// Reads bind requests but never answers them; other operations are
    /// answered as usual.
    pub fn set_hang_binds(&self, on: bool) {
        self.state.hang_binds.store(on, Ordering::Relaxed);
    }

    pub fn hang_binds(&self) -> bool {
        self.state.hang_binds.load(Ordering::Relaxed)
    }
}
