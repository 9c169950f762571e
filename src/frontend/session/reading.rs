//! What a session has read of its client's requests: the buffer, a large
//! request arriving in chunks ([`Large`]), the bytes counted against
//! `--max-request-memory`, and the clocks of the idle and incomplete-PDU
//! timeouts. The read loop that fills it is [`super::io`].

use crate::proto::wire::frame;
use bytes::{Bytes, BytesMut};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use tokio::time::Instant;

/// The read loop's state besides the session and the connection.
pub(super) struct Reading<'a> {
    /// Bytes read and not yet handled. Taken only while data flows: an
    /// idle client holds none (10,000 idle connections must stay small).
    pub(super) buf: BytesMut,
    /// A large request still arriving: its bytes so far, in chunks.
    large: Option<Large>,
    /// What this client's incomplete request counts in the router's
    /// request memory; given back however the session ends.
    counted: Counted<'a>,
    /// When the request being read started to arrive.
    pdu_started: Option<Instant>,
    /// When the session was last busy (idle from then).
    last_read: Instant,
}

impl<'a> Reading<'a> {
    /// Start from `buf` (bytes a moved session had read), counting in
    /// `memory`.
    pub(super) fn new(memory: &'a AtomicUsize, buf: BytesMut) -> Reading<'a> {
        Reading {
            buf,
            large: None,
            counted: Counted(memory, 0),
            pdu_started: None,
            last_read: Instant::now(),
        }
    }

    /// No request is partly read and counted: the session may move.
    pub(super) fn between(&self) -> bool {
        self.large.is_none() && self.counted.1 == 0
    }

    /// Nothing of a request is here.
    pub(super) fn idle(&self) -> bool {
        self.buf.is_empty() && self.large.is_none()
    }

    /// What a session that moves carries on (nothing is counted then).
    pub(super) fn into_buf(self) -> BytesMut {
        self.buf
    }

    /// A large request whose last byte came is put together in `buf`.
    pub(super) fn gather(&mut self) {
        if let Some(l) = &mut self.large {
            match l.take(&mut self.buf) {
                Some(whole) => {
                    self.buf = whole;
                    self.large = None;
                }
                None => self.pdu_started = self.pdu_started.or_else(|| Some(Instant::now())),
            }
        }
    }

    /// The next whole request in `buf`, if one is (none while a large one
    /// is still arriving).
    pub(super) fn next(&mut self, max: usize) -> Result<Option<Bytes>, frame::FrameError> {
        if self.large.is_some() {
            return Ok(None);
        }
        let Some(len) = frame::frame_len(&self.buf, max)? else {
            return Ok(None);
        };
        self.pdu_started = None;
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Requests were handled: idle from the end of the last one's
    /// handling (a bind may take long), not from its read; the buffer of
    /// a large request given back.
    pub(super) fn handled(&mut self) {
        self.last_read = Instant::now();
        if self.buf.is_empty() && self.buf.capacity() > SMALL {
            self.buf = BytesMut::new();
        }
    }

    /// After the whole requests were taken: a large one arriving goes
    /// into chunks, and what this client holds is counted. A large
    /// incomplete request counts against every client's budget; `Err`
    /// (the bytes this client holds) when counting it takes the router
    /// beyond `max`.
    pub(super) fn count(&mut self, max: usize) -> Result<(), usize> {
        if self.large.is_none() {
            self.large = Large::start(&mut self.buf);
        }
        let now = match &self.large {
            Some(l) => l.have + self.buf.capacity(),
            None if self.buf.capacity() > SMALL => self.buf.capacity(),
            None => 0,
        };
        if now != self.counted.1 {
            let before = self.counted.1;
            let total = self.counted.set(now);
            if now > before && total > max {
                return Err(now);
            }
        }
        Ok(())
    }

    /// When the session times out if nothing comes: the PDU timeout runs
    /// from a PDU's first byte, however slowly the rest trickles in; the
    /// idle timeout (none when zero) from the last request.
    pub(super) fn due(&mut self, idle: Duration, pdu: Duration) -> Option<Instant> {
        if self.idle() {
            self.pdu_started = None;
            (!idle.is_zero()).then(|| after(self.last_read, idle))
        } else {
            let started = *self.pdu_started.get_or_insert_with(Instant::now);
            Some(after(started, pdu))
        }
    }
}

/// Bytes a session counts in the router's request memory (`.1`),
/// returned when it drops, however the session ends.
struct Counted<'a>(&'a AtomicUsize, usize);

impl Counted<'_> {
    /// Count `now` instead; the router-wide total after.
    fn set(&mut self, now: usize) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let total = if now > self.1 {
            self.0.fetch_add(now - self.1, Relaxed) + (now - self.1)
        } else {
            self.0.fetch_sub(self.1 - now, Relaxed) - (self.1 - now)
        };
        self.1 = now;
        total
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0
            .fetch_sub(self.1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A request buffer this small is not counted against
/// `--max-request-memory` (most requests are far smaller).
const SMALL: usize = 64 * 1024;

/// An incomplete request this large goes on arriving in chunks (see
/// [`Large`]).
const LARGE: usize = 32 * 1024;

/// The chunks a large incomplete request is read in: so large that the
/// allocator (mimalloc) gives each its own pages and returns them when freed
/// (measured with bench/floods.py: 40 clients holding 3 MiB each left RSS
/// +9% after they closed with 1 MiB chunks, +21% with 64 KiB ones, whose
/// pages it keeps). A client holds at most one chunk more than it sent.
const CHUNK: usize = 1024 * 1024;

/// A large request still arriving, kept in chunks of [`CHUNK`] bytes as
/// they come, and put together in one buffer of its exact length once its
/// last byte is in. The router holds what the client sent and at most one
/// chunk of room (never the length it announced, which costs the client
/// nothing to claim), all counted in `--max-request-memory`, and the
/// allocator sees buffers of one size while it arrives and one of the
/// exact size at the end, not a buffer doubled at each step, which copies
/// the request each time and leaves freed buffers of every size behind
/// (memory the allocator keeps after the client is gone).
struct Large {
    /// The whole PDU's length, as its header announces it (checked against
    /// `--max-request-pdu` by [`frame::frame_len`] before this starts).
    total: usize,
    chunks: Vec<bytes::Bytes>,
    /// Bytes in `chunks`.
    have: usize,
}

impl Large {
    /// When `buf` holds the start of a request of over [`LARGE`] bytes
    /// that is not all there, move what has come into chunks.
    fn start(buf: &mut BytesMut) -> Option<Large> {
        if buf.len() < LARGE {
            return None;
        }
        let total = frame::announced_len(buf).filter(|&t| t > buf.len())?;
        let mut l = Large {
            total,
            chunks: Vec::new(),
            have: 0,
        };
        l.stash(buf);
        Some(l)
    }

    /// Move what `buf` holds into chunks, and give `buf` a chunk's room
    /// for the next bytes.
    fn stash(&mut self, buf: &mut BytesMut) {
        if !buf.is_empty() {
            self.have += buf.len();
            self.chunks.push(buf.split().freeze());
        }
        *buf = BytesMut::with_capacity(CHUNK.min(self.total - self.have.min(self.total)).max(1024));
    }

    /// The whole request (with whatever came after it) once its last byte
    /// has come, else `None` with `buf`'s bytes stashed when it is full.
    fn take(&mut self, buf: &mut BytesMut) -> Option<BytesMut> {
        if self.have + buf.len() >= self.total {
            let mut whole = BytesMut::with_capacity(self.have + buf.len());
            for c in self.chunks.drain(..) {
                whole.extend_from_slice(&c);
            }
            whole.extend_from_slice(buf);
            *buf = BytesMut::new();
            return Some(whole);
        }
        if buf.capacity() - buf.len() < 1024 {
            self.stash(buf);
        }
        None
    }
}

/// A deadline that never comes (an hour is re-armed when it does).
pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// `t + d`, or the far future for a timeout too large to add.
pub(super) fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).unwrap_or_else(far_future)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `have` bytes of an add whose PDU is `total` bytes long.
    fn partial_add(total: usize, have: usize) -> BytesMut {
        let body = total - 6;
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0x30, 0x84]);
        b.extend_from_slice(&u32::try_from(body).unwrap_or(0).to_be_bytes());
        b.resize(have, 0);
        for (i, x) in b.iter_mut().enumerate().skip(6) {
            *x = i as u8;
        }
        b
    }

    /// Feed `bytes` to a session's buffer at most `step` bytes per read,
    /// as the read loop does (a read fills the room there is, 4 KiB more
    /// when there is under 1 KiB); the buffer once whole, and the most
    /// bytes held.
    fn arrive(mut bytes: &[u8], step: usize) -> (BytesMut, usize) {
        let mut buf = BytesMut::new();
        let mut large: Option<Large> = None;
        let mut held = 0;
        while !bytes.is_empty() {
            if let Some(l) = &mut large {
                if let Some(whole) = l.take(&mut buf) {
                    buf = whole;
                    large = None;
                }
            }
            if large.is_none() {
                large = Large::start(&mut buf);
            }
            held = held.max(
                large
                    .as_ref()
                    .map_or(buf.capacity(), |l| l.have + buf.capacity()),
            );
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(4096);
            }
            let n = step.min(buf.capacity() - buf.len()).min(bytes.len());
            buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if let Some(l) = &mut large {
            if let Some(whole) = l.take(&mut buf) {
                buf = whole;
            }
        }
        (buf, held)
    }

    #[test]
    fn a_large_request_is_held_as_it_arrives_and_put_together_exactly() {
        let total = 3_000_000;
        let whole = partial_add(total, total);
        for step in [1000, 4096, 65_536, 100_000] {
            let (buf, held) = arrive(&whole, step);
            assert_eq!(&buf[..], &whole[..], "step {step}");
            assert_eq!(buf.capacity(), total, "step {step}: exact at the end");
            assert!(held <= total + 2 * CHUNK, "step {step}: held {held}");
        }
        // Part of it: what was sent, never the announced length.
        let (buf, held) = arrive(&whole[..200_000], 4096);
        assert!(
            buf.len() < 200_000 && held < 200_000 + 2 * CHUNK,
            "held {held}"
        );
        // A request that ends inside a read, the next one after it.
        let mut two = whole.clone();
        two.extend_from_slice(&[0x30, 0x03, 0x02, 0x01, 0x07]);
        let (buf, _) = arrive(&two, 70_000);
        assert_eq!(&buf[..], &two[..]);
    }

    #[test]
    fn small_or_unframed_requests_stay_in_one_buffer() {
        let mut small = partial_add(4_000_000, LARGE - 1);
        assert!(Large::start(&mut small).is_none());
        assert_eq!(small.len(), LARGE - 1);
        // Not a SEQUENCE (frame_len refuses it), or a header cut short.
        let mut junk = BytesMut::from(&vec![0x04; LARGE + 1][..]);
        assert!(Large::start(&mut junk).is_none());
        assert_eq!(frame::announced_len(&[0x30, 0x84, 0, 0]), None);
        assert_eq!(frame::announced_len(&[0x30, 0x03, 2, 1, 1]), Some(5));
        // Whole already: nothing to wait for.
        let mut whole = partial_add(40_000, 40_000);
        assert!(Large::start(&mut whole).is_none());
    }
}
