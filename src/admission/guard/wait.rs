//! Waiting for a place among a DN's binds in flight: a bind over the cap
//! (failures plus binds in flight at the limit) waits until one in flight
//! is answered, then is admitted, refused (the answer began a back-off)
//! or waits again; after `wait` it is answered busy.

use super::{Guard, Refused, Ticket};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Guard {
    /// [`Guard::admit`], waiting up to `wait` while it is
    /// [`Refused::Busy`]. Nothing is allocated unless it waits.
    pub async fn admit_within<K: std::hash::Hash + ?Sized>(
        self: &Arc<Self>,
        dn: &K,
        addr: IpAddr,
        wait: Duration,
    ) -> Result<Ticket, Refused> {
        match self.admit(dn, addr) {
            Err(Refused::Busy) => {}
            decided => return decided,
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the check, so an end between the check
            // and the wait is not missed.
            let mut freed = Box::pin(self.freed.notified());
            freed.as_mut().enable();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let decided = self.admit(dn, addr);
            let waited = match decided {
                Err(Refused::Busy) => tokio::time::timeout_at(deadline, freed).await.is_ok(),
                _ => false,
            };
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            match decided {
                Err(Refused::Busy) if waited => continue,
                Err(Refused::Busy) => {
                    self.busy.fetch_add(1, Ordering::Relaxed);
                    return Err(Refused::Busy);
                }
                decided => return decided,
            }
        }
    }
}
