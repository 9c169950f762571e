//! Searches that span partitions (architecture.md, "What the router answers itself"): one search per partition, to
//! one DSA of each (chosen as any read is), base and scope adjusted for
//! that partition; entries stream to the client as they arrive from all of
//! them, and the router writes the one `SearchResultDone`.
//!
//! * **Limits**: the client's size limit counts merged entries; when one
//!   more entry arrives past it, the other searches are abandoned upstream
//!   and the client gets `sizeLimitExceeded`. Its time limit runs from the
//!   request; when it passes, the same with `timeLimitExceeded`.
//! * **A partition's error is the search's error**: a DSA that answers with
//!   an error the merge cannot absorb (anything but success, noSuchObject,
//!   the limits, a referral, busy and unavailable) ends the whole search
//!   with that answer, under the client's message ID (an unknown critical
//!   control gives `unavailableCriticalExtension`, as directly).
//! * **A partition that cannot be searched** (no eligible DSA, its DSA lost,
//!   busy or unavailable): with [`Policy::Fail`] (the default) the whole
//!   search ends with `unavailable` naming the partition; with
//!   [`Policy::Continuation`], which the administrator chooses because it
//!   shows DSA addresses to clients, the client gets what the others
//!   returned plus a continuation reference (an LDAP URL per DSA of the
//!   missing partition).
//! * **Referrals** a DSA returns become continuation references (there is
//!   only one result to carry them); continuation references pass through.
//! * **Paging** (RFC 2696): the router pages through the partitions one
//!   after another with a cookie of its own: a fingerprint of the search,
//!   the partition index and that DSA's cookie. Pages may be short at a
//!   partition boundary, as RFC 2696 allows.
//!
//! * **Traces**: a traced search has its span here ([`Fan::trace`]),
//!   ended with the client's result; each partition's share is a child
//!   span of it (`crate::observe::otel::OpTrace::leg`), with its DSA attempts.

use super::out::{ClientOut, Handed, Spanning};
use crate::backend::upstream::batch::Batch;
use crate::backend::upstream::conn::Conn;
use crate::base::error::Error;
use crate::observe::metrics::Metrics;
use crate::observe::otel::OpTrace;
use crate::proto::wire::frame::{self, tag, Frame, Header, Pdu};
use crate::proto::wire::response::{self, Code};
use crate::proto::wire::response::{rc, result_code};
use crate::proto::wire::search;
use crate::service::config::FanoutPolicy as Policy;
use bytes::{Bytes, BytesMut};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

/// One partition's share of a spanning search.
pub struct Part {
    /// The partition's prefix, as written in knowledge (for messages).
    pub prefix: String,
    /// LDAP URLs of its DSAs, for a continuation reference.
    pub urls: Vec<String>,
    state: PartState,
}

impl Part {
    pub fn new(prefix: String, urls: Vec<String>) -> Part {
        Part {
            prefix,
            urls,
            state: PartState::Starting,
        }
    }
}

enum PartState {
    Starting,
    Running(Weak<Conn>, i32),
    Done,
    Failed(String),
}

/// Paging context of a paged spanning search.
pub struct Paging {
    pub fingerprint: u32,
    /// The partition this page reads.
    pub index: usize,
    pub partitions: usize,
}

struct State {
    parts: Vec<Part>,
    entries: u32,
    finished: bool,
}

/// A search spanning partitions, shared by its upstream operations.
pub struct Fan {
    out: Arc<ClientOut>,
    msgid: i32,
    size_limit: u32,
    policy: Policy,
    paging: Option<Paging>,
    started: Instant,
    metrics: Arc<Metrics>,
    st: Mutex<State>,
    /// The search's trace, when it is traced (set once, at its start).
    pub trace: OnceLock<Box<OpTrace>>,
}

impl Fan {
    pub fn new(
        out: Arc<ClientOut>,
        msgid: i32,
        size_limit: u32,
        policy: Policy,
        paging: Option<Paging>,
        metrics: Arc<Metrics>,
        parts: Vec<Part>,
    ) -> Arc<Fan> {
        Arc::new(Fan {
            out,
            msgid,
            size_limit,
            policy,
            paging,
            started: Instant::now(),
            metrics,
            st: Mutex::new(State {
                parts,
                entries: 0,
                finished: false,
            }),
            trace: OnceLock::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_finished(&self) -> bool {
        self.lock().finished
    }

    /// Part `i`'s search is registered as `id` on `conn`. False when the
    /// search already ended (the caller then drops that operation).
    pub fn running(&self, i: usize, conn: &Arc<Conn>, id: i32) -> bool {
        let mut st = self.lock();
        if st.finished {
            return false;
        }
        if let Some(p) = st.parts.get_mut(i) {
            // A part that already ended stays ended (its answer may come
            // in before this is called).
            if matches!(p.state, PartState::Starting | PartState::Running(..)) {
                p.state = PartState::Running(Arc::downgrade(conn), id);
            }
        }
        true
    }

    /// An entry, reference or intermediate response of a part. A client
    /// whose queue is full is disconnected, as for any search.
    pub fn response(self: &Arc<Self>, pdu: &[u8], h: &Header) {
        let mut st = self.lock();
        if st.finished {
            return;
        }
        if h.op_tag == tag::SEARCH_ENTRY && self.paging.is_none() {
            if self.size_limit > 0 && st.entries >= self.size_limit {
                // One entry more than the client allowed: stop here.
                let msg = format!(
                    "dsa-router: size limit of {} entries reached across partitions",
                    self.size_limit
                );
                drop(st);
                self.finish(Code::SizeLimitExceeded, &msg);
                return;
            }
            st.entries += 1;
        }
        if let Some(t) = self.trace.get() {
            t.entry(pdu.len());
        }
        let mut b = BytesMut::with_capacity(pdu.len() + 4);
        frame::rewrite(pdu, h, self.msgid, None, &mut b);
        if !matches!(self.out.deliver(b.freeze()), Handed::Queued) {
            drop(st);
            self.out.overflow();
            self.abandon();
        }
    }

    /// Part `i`'s final response.
    pub fn done(self: &Arc<Self>, i: usize, pdu: &[u8], h: &Header) {
        let code = result_code(pdu, h).unwrap_or(rc::OTHER);
        if let Some(pg) = &self.paging {
            return self.page_done(pg, code, pdu, h);
        }
        match code {
            rc::SUCCESS | rc::NO_SUCH_OBJECT => self.settle(i, None),
            // The DSA's own limit on this partition: more entries exist
            // than the client allowed.
            rc::TIME_LIMIT => self.finish(Code::TimeLimitExceeded, &diagnostic(pdu, h)),
            rc::SIZE_LIMIT => self.finish(Code::SizeLimitExceeded, &diagnostic(pdu, h)),
            rc::REFERRAL => {
                self.pass_referral(pdu, h);
                self.settle(i, None);
            }
            // The partition could not be searched now.
            rc::BUSY | rc::UNAVAILABLE => {
                let why = format!("result {code}: {}", diagnostic(pdu, h));
                self.settle(i, Some(why));
            }
            // The DSA's answer is the search's answer.
            _ => {
                let mut b = BytesMut::with_capacity(pdu.len());
                frame::rewrite(pdu, h, self.msgid, None, &mut b);
                self.end(b.freeze(), code);
            }
        }
    }

    /// Part `i` could not be run or its DSA was lost.
    pub fn failed(self: &Arc<Self>, i: usize, why: String) {
        if let Some(pg) = &self.paging {
            let (prefix, urls) = self.part_info(i);
            return self.page_failed(pg, &prefix, &urls, &why);
        }
        self.settle(i, Some(why));
    }

    /// Record part `i`'s outcome; end the search when every part is in.
    fn settle(self: &Arc<Self>, i: usize, failure: Option<String>) {
        let mut st = self.lock();
        if st.finished {
            return;
        }
        if let Some(p) = st.parts.get_mut(i) {
            p.state = match failure {
                Some(w) => PartState::Failed(w),
                None => PartState::Done,
            };
        }
        let failed: Vec<(String, String)> = st
            .parts
            .iter()
            .filter_map(|p| match &p.state {
                PartState::Failed(w) => Some((p.prefix.clone(), w.clone())),
                _ => None,
            })
            .collect();
        if self.policy == Policy::Fail && !failed.is_empty() {
            drop(st);
            let names: Vec<String> = failed
                .iter()
                .map(|(p, w)| format!("partition {p} ({w})"))
                .collect();
            let msg = format!(
                "dsa-router: the search spans partitions and {} could not be searched",
                names.join(", ")
            );
            return self.finish(Code::Unavailable, &msg);
        }
        let open = st
            .parts
            .iter()
            .any(|p| matches!(p.state, PartState::Starting | PartState::Running(..)));
        if open {
            return;
        }
        // Every part is in: continuation references for the missing ones.
        let refs: Vec<(String, Vec<String>)> = st
            .parts
            .iter()
            .filter(|p| matches!(p.state, PartState::Failed(_)))
            .map(|p| (p.prefix.clone(), p.urls.clone()))
            .collect();
        drop(st);
        for (prefix, urls) in &refs {
            tracing::warn!(partition = %prefix, "spanning search: partition unavailable; continuation reference returned");
            self.reference(urls);
        }
        let msg = if refs.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = refs.iter().map(|(p, _)| p.as_str()).collect();
            format!(
                "dsa-router: partition(s) {} could not be searched; continuation references returned",
                names.join(", ")
            )
        };
        self.finish(Code::Success, &msg);
    }

    /// The search's time limit passed.
    pub fn expire(self: &Arc<Self>, secs: u32) {
        self.finish(
            Code::TimeLimitExceeded,
            &format!("dsa-router: time limit of {secs} s reached across partitions"),
        );
    }

    /// The client cancelled the search (RFC 3909): stop every part, answer
    /// `canceled`.
    /// False when it had already ended.
    pub fn cancel(self: &Arc<Self>) -> bool {
        if self.is_finished() {
            return false;
        }
        self.finish(Code::Canceled, "dsa-router: cancelled by the client");
        true
    }

    /// The client abandoned the search (or is gone): stop every part,
    /// answer nothing.
    pub fn abandon(&self) {
        let Some(running) = self.close() else {
            return;
        };
        if let Some(t) = self.trace.get() {
            t.failed("", rc::OTHER, "abandoned by the client");
        }
        for (conn, id) in running {
            conn.abandon(id);
        }
    }

    /// Mark finished; the parts still running, to abandon. `None` when it
    /// had already finished.
    fn close(&self) -> Option<Vec<(Arc<Conn>, i32)>> {
        let mut st = self.lock();
        if st.finished {
            return None;
        }
        st.finished = true;
        Some(
            st.parts
                .iter_mut()
                .filter_map(|p| match std::mem::replace(&mut p.state, PartState::Done) {
                    PartState::Running(c, id) => c.upgrade().map(|c| (c, id)),
                    _ => None,
                })
                .collect(),
        )
    }

    /// End the search with `code`: abandon what still runs, send the done.
    fn finish(self: &Arc<Self>, code: Code, msg: &str) {
        let c = code.clone() as u8;
        let mut b = BytesMut::new();
        response::result(self.msgid, tag::SEARCH_DONE, code, "", msg, &mut b);
        self.end(b.freeze(), c);
    }

    /// End the search with the done `pdu` (result `code`): abandon what
    /// still runs, send it.
    fn end(self: &Arc<Self>, pdu: Bytes, code: u8) {
        let Some(running) = self.close() else {
            return;
        };
        for (conn, id) in running {
            conn.abandon(id);
        }
        self.send_final(pdu, code);
    }

    fn send_final(&self, pdu: Bytes, code: u8) {
        if let Some(t) = self.trace.get() {
            t.ended(code);
        }
        self.metrics.op(
            crate::observe::metrics::op_index("search"),
            code,
            self.started.elapsed().as_micros() as u64,
        );
        self.out.finish(self.msgid);
        if let Handed::Full = self.out.deliver(pdu) {
            self.out.overflow();
        }
    }

    /// A continuation reference to `urls`.
    fn reference(&self, urls: &[String]) {
        let mut b = BytesMut::new();
        response::search_reference(self.msgid, urls, &mut b);
        let _ = self.out.deliver(b.freeze());
    }

    /// A referral result from a DSA, passed on as a continuation reference.
    fn pass_referral(&self, pdu: &[u8], h: &Header) {
        let urls = response::referral_urls(pdu, h);
        if !urls.is_empty() {
            self.reference(&urls);
        }
    }

    /// Part `i`'s prefix and continuation URLs (for a failure).
    fn part_info(&self, i: usize) -> (String, Vec<String>) {
        self.lock()
            .parts
            .get(i)
            .map(|p| (p.prefix.clone(), p.urls.clone()))
            .unwrap_or_default()
    }

    /// A page of a paged spanning search (whose one part is the partition
    /// of this page) ended.
    fn page_done(self: &Arc<Self>, pg: &Paging, code: u8, pdu: &[u8], h: &Header) {
        if !matches!(
            code,
            rc::SUCCESS | rc::NO_SUCH_OBJECT | rc::BUSY | rc::UNAVAILABLE
        ) {
            // The DSA's answer is the search's answer.
            let mut b = BytesMut::with_capacity(pdu.len());
            frame::rewrite(pdu, h, self.msgid, None, &mut b);
            return self.end(b.freeze(), code);
        }
        if code != rc::SUCCESS && code != rc::NO_SUCH_OBJECT {
            let (prefix, urls) = self.part_info(0);
            let why = format!("result {code}: {}", diagnostic(pdu, h));
            return self.page_failed(pg, &prefix, &urls, &why);
        }
        let dsa_cookie =
            search::control_value(pdu, h, crate::proto::wire::request::OID_PAGED_RESULTS)
                .and_then(search::paged_value)
                .map(|(_, c)| c)
                .unwrap_or_default();
        let next = next_cookie(pg, &dsa_cookie);
        let ctl = search::paged_control(0, &next);
        // The part that answered is already off its connection.
        if self.close().is_none() {
            return;
        }
        let out = search::with_paged(pdu, h, self.msgid, Some(&ctl));
        self.send_final(out.freeze(), code);
    }

    /// Partition `i` of a paged spanning search failed.
    fn page_failed(&self, pg: &Paging, prefix: &str, urls: &[String], why: &str) {
        let Some(running) = self.close() else {
            return;
        };
        for (conn, id) in running {
            conn.abandon(id);
        }
        let mut b = BytesMut::new();
        match self.policy {
            Policy::Fail => {
                let msg = format!("dsa-router: the search spans partitions and partition {prefix} could not be searched ({why})");
                response::result(
                    self.msgid,
                    tag::SEARCH_DONE,
                    Code::Unavailable,
                    "",
                    &msg,
                    &mut b,
                );
                self.send_final(b.freeze(), Code::Unavailable as u8);
            }
            Policy::Continuation => {
                tracing::warn!(partition = %prefix, "paged spanning search: partition unavailable; continuation reference returned");
                self.reference(urls);
                let next = next_cookie(pg, &[]);
                let ctl = search::paged_control(0, &next);
                let msg = format!("dsa-router: partition {prefix} could not be searched ({why}); continuation reference returned");
                response::search_done_with_control(self.msgid, &msg, &ctl, &mut b);
                self.send_final(b.freeze(), 0);
            }
        }
    }
}

/// The router's cookie after a page of partition `pg.index` that ended
/// with the DSA cookie `dsa_cookie`: the same partition while the DSA has
/// more, else the next partition, else empty (the search is complete).
fn next_cookie(pg: &Paging, dsa_cookie: &[u8]) -> Vec<u8> {
    if !dsa_cookie.is_empty() {
        encode_cookie(pg.fingerprint, pg.index, dsa_cookie)
    } else if pg.index + 1 < pg.partitions {
        encode_cookie(pg.fingerprint, pg.index + 1, &[])
    } else {
        Vec::new()
    }
}

const COOKIE_MAGIC: &[u8; 4] = b"DSRF";

/// The router's paging cookie: magic, fingerprint, partition index, and the
/// DSA's own cookie.
pub fn encode_cookie(fingerprint: u32, index: usize, dsa_cookie: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(10 + dsa_cookie.len());
    v.extend_from_slice(COOKIE_MAGIC);
    v.extend_from_slice(&fingerprint.to_be_bytes());
    v.extend_from_slice(&(index.min(u16::MAX as usize) as u16).to_be_bytes());
    v.extend_from_slice(dsa_cookie);
    v
}

/// (fingerprint, partition index, DSA cookie) from a router cookie.
pub fn decode_cookie(c: &[u8]) -> Option<(u32, usize, &[u8])> {
    if c.len() < 10 || &c[..4] != COOKIE_MAGIC {
        return None;
    }
    let fp = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
    let idx = u16::from_be_bytes([c[8], c[9]]) as usize;
    Some((fp, idx, &c[10..]))
}

/// A fingerprint of what a paged spanning search covers (its base, scope
/// and partitions), so that a cookie is not used against another search or
/// after knowledge changed the partitions.
pub fn fingerprint(base: &str, scope: u8, prefixes: &[String]) -> u32 {
    // FNV-1a: stable across runs and builds, which the cookie needs.
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= x as u32;
            h = h.wrapping_mul(0x0100_0193);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0193);
    };
    eat(base.as_bytes());
    eat(&[scope]);
    for p in prefixes {
        eat(p.as_bytes());
    }
    h
}

/// The diagnosticMessage of a response PDU, if it can be read.
fn diagnostic(pdu: &[u8], h: &Header) -> String {
    response::diagnostic(pdu, h).unwrap_or_default()
}

/// One partition's share of a spanning search, as its DSA connection sees
/// it.
pub struct FanPart {
    pub fan: Arc<Fan>,
    pub part: usize,
}

impl crate::backend::upstream::Delivery for FanPart {
    fn deliver(&self, r: Frame<'_>, _batch: &mut Batch) {
        let Frame { pdu, h } = r;
        // The fan's own lock is taken with the connection's released.
        self.fan.response(pdu, h);
    }

    fn finish(&self, done: Pdu, _from: crate::backend::upstream::Source<'_>, _batch: &mut Batch) {
        self.fan.done(self.part, &done.bytes, &done.h);
    }

    fn fail(&self, e: &Error, _at: crate::backend::upstream::Source<'_>) {
        self.fan.failed(self.part, e.to_string());
    }

    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        self.fan.running(self.part, conn, id)
    }

    /// A client's operation: it times out at `--op-timeout`.
    fn expires(&self) -> bool {
        true
    }
}

impl Spanning for Fan {
    fn abandon(&self) {
        Fan::abandon(self);
    }

    fn cancel(self: Arc<Self>) -> bool {
        Fan::cancel(&self)
    }
}

#[cfg(test)]
mod tests;
