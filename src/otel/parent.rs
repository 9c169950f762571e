//! The W3C trace context a client sends in its request (the trace
//! context control, [`OID_TRACE_CONTEXT`]), and the one the router
//! conveys to DSAs: a `traceparent` header value
//! (`00-<trace id>-<parent id>-<flags>`, W3C Trace Context level 1) as
//! the control's value, in UTF-8, with no BER wrapping.

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
        let s = std::str::from_utf8(value).ok()?.trim();
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
