//! Giving freed memory back to the system.
//!
//! The allocator (mimalloc) keeps the pages a thread freed until that
//! thread allocates again and finds them due: a worker that a flood of
//! large requests (or of large answers) left idle, or that serves only
//! small operations from pages it already holds, would keep the flood's
//! memory for good (measured with bench/floods.py: 40 clients each holding
//! an incomplete 4 MiB request left RSS at 110 MiB, from 13 MiB before,
//! long after they closed). Each worker thread therefore asks the
//! allocator once a [`PERIOD`] to free its empty pages and to return the
//! memory whose purge delay has passed (a normal, not forced, collection:
//! it walks the thread's non-full pages, a few microseconds).

#![allow(unsafe_code)]

use std::time::Duration;

/// How often each worker thread gives its freed memory back.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Run on a worker thread's runtime (a single-threaded one: the collection
/// is the calling thread's): give freed memory back every [`PERIOD`].
pub async fn give_back() {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        collect();
    }
}

/// One normal collection of the calling thread's allocator heap.
pub fn collect() {
    // SAFETY: mi_collect takes no pointers and only touches the calling
    // thread's heap and the allocator's own state; it may be called at any
    // time, whether or not mimalloc is the global allocator.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
