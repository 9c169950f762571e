//! The W3C trace context a client sends in its request (the trace
//! context control, [`OID_TRACE_CONTEXT`]), and the one the router
//! conveys to DSAs: a `traceparent` header value
//! (`00-<trace id>-<parent id>-<flags>`, W3C Trace Context level 1) as
//! the control's value, in UTF-8, with no BER wrapping, optionally
//! followed by a line feed and a W3C `tracestate` (passed on as it came).

/// The trace context control's OID. No LDAP control for W3C trace
/// context is registered; this OID is under the UUID arc `2.25` (ITU-T
/// X.667: an OID made from a UUID needs no registration), from the UUID
/// `3107d0c1-2c7f-44e3-852c-00bdcd94a24b`.
pub const OID_TRACE_CONTEXT: &str = "2.25.65172751917474745695309622528529703499";

/// A `traceparent`'s fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    /// The caller sampled this trace (flag bit 0).
    pub sampled: bool,
}

/// Hex digits to bytes; `None` unless exactly `2 * N` lower-case hex
/// digits.
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

impl TraceParent {
    /// Read a `traceparent` value. Version 00 must have exactly four
    /// fields; a later version may have more (ignored), as the
    /// specification asks. All-zero trace or parent IDs, version `ff` and
    /// anything malformed: `None` (the operation then starts a trace of
    /// its own, if it is sampled).
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let s = std::str::from_utf8(value).ok()?;
        let s = s.split('\n').next().unwrap_or_default().trim();
        let mut f = s.split('-');
        let version = hex::<1>(f.next()?)?[0];
        let trace_id = hex::<16>(f.next()?)?;
        let parent_id = hex::<8>(f.next()?)?;
        let flags = hex::<1>(f.next()?)?[0];
        if version == 0xff || (version == 0 && f.next().is_some()) {
            return None;
        }
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` value (version 00).
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        for b in self.trace_id {
            s.push_str(&format!("{b:02x}"));
        }
        s.push('-');
        for b in self.parent_id {
            s.push_str(&format!("{b:02x}"));
        }
        s.push_str(if self.sampled { "-01" } else { "-00" });
        s
    }
}

/// The `tracestate` after the `traceparent` in a control's `value`, if
/// any: at most 512 characters of printable ASCII (W3C Trace Context's
/// limit); anything else is dropped.
pub(super) fn tracestate(value: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(value).ok()?;
    let (_, state) = s.split_once('\n')?;
    let state = state.trim();
    let printable = state.bytes().all(|b| (0x20..0x7f).contains(&b));
    (!state.is_empty() && state.len() <= 512 && printable).then_some(state)
}

/// The trace context control (not critical) conveying trace `trace_id`
/// with span `span_id` as the parent, sampled, and `state` after it,
/// encoded as a control for a request's controls.
pub(super) fn control(trace_id: [u8; 16], span_id: [u8; 8], state: Option<&str>) -> Vec<u8> {
    let mut value = TraceParent {
        trace_id,
        parent_id: span_id,
        sampled: true,
    }
    .format();
    if let Some(st) = state {
        value.push('\n');
        value.push_str(st);
    }
    crate::proto::wire::frame::control(OID_TRACE_CONTEXT, false, value.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_values_are_read_as_w3c_trace_context_says() {
        // (value, expected: (trace id's first byte, parent id's last byte,
        // sampled) or None)
        type Want = Option<(u8, u8, bool)>;
        let cases: &[(&str, Want)] = &[
            (GOOD, Some((0x4b, 0xb7, true))),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
                Some((0x4b, 0xb7, false)),
            ),
            // Other flag bits are ignored.
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
                Some((0x4b, 0xb7, true)),
            ),
            // A later version may carry more fields.
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                Some((0x4b, 0xb7, true)),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                None,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                None,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                None,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                None,
            ),
            // Upper case, wrong lengths, missing fields, not hex.
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                None,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                None,
            ),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", None),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
                None,
            ),
            ("", None),
            ("-", None),
        ];
        for (v, want) in cases {
            let got = TraceParent::parse(v.as_bytes())
                .map(|t| (t.trace_id[0], t.parent_id[7], t.sampled));
            assert_eq!(got, *want, "{v:?}");
        }
        assert_eq!(TraceParent::parse(&[0xff, 0xfe]), None, "not UTF-8");
    }

    #[test]
    fn a_tracestate_after_the_traceparent_is_kept_and_conveyed() {
        let v = format!("{GOOD}\nrojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
        let t = TraceParent::parse(v.as_bytes()).unwrap();
        assert_eq!(t.format(), GOOD);
        let st = tracestate(v.as_bytes());
        assert_eq!(st, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
        assert_eq!(tracestate(GOOD.as_bytes()), None);
        assert_eq!(tracestate(format!("{GOOD}\n\u{7}").as_bytes()), None);
        // Short enough for one-octet lengths.
        let c = control(t.trace_id, [1, 2, 3, 4, 5, 6, 7, 8], Some("rojo=1"));
        let want = "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01\nrojo=1";
        let oid = OID_TRACE_CONTEXT.as_bytes();
        // SEQUENCE { OCTET STRING oid, OCTET STRING value }: not critical.
        let seq = (4 + oid.len() + want.len()) as u8;
        assert_eq!(&c[..4], &[0x30, seq, 0x04, oid.len() as u8]);
        assert_eq!(&c[4..4 + oid.len()], oid);
        let v = &c[4 + oid.len()..];
        assert_eq!(&v[..2], &[0x04, want.len() as u8]);
        assert_eq!(&v[2..], want.as_bytes());
        // Longer: long-form lengths.
        let long = control(t.trace_id, [1; 8], st);
        assert_eq!(&long[..2], &[0x30, 0x81]);
        assert_eq!(long.len(), 3 + long[2] as usize);
    }

    #[test]
    fn a_traceparent_formats_back_to_its_value() {
        let t = TraceParent::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(t.format(), GOOD);
        let u = TraceParent {
            sampled: false,
            ..t
        };
        assert_eq!(TraceParent::parse(u.format().as_bytes()), Some(u));
    }
}
