//! A line's fields, formatted as `key=value` (text) or `"key":value`
//! (JSON) straight into the line's buffer; [`Head`], the fields an
//! operation knows when it is placed, formatted once.

use super::{enabled, Format, LOG};
use std::fmt::Write as _;
use std::net::SocketAddr;

/// Fields formatted once when an operation is placed, written into its line
/// when it ends.
// A vector, not a boxed slice: making one would shrink it, a second
// allocator call per operation.
#[derive(Clone)]
pub struct Head(Vec<u8>);

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl Head {
    /// `fields` formatted in the log's format (empty when the log is off).
    pub fn new(fields: impl FnOnce(&mut Fields<'_>)) -> Head {
        let json = LOG.get().is_some_and(|l| l.format == Format::Json);
        let mut buf = Vec::with_capacity(96);
        let mut f = Fields {
            buf: &mut buf,
            json,
            first: true,
        };
        fields(&mut f);
        Head(buf)
    }

    /// `client=ADDRESS`, formatted once for every line of a client's
    /// session (empty when the log is off).
    pub fn client(peer: SocketAddr) -> Head {
        if !enabled() {
            return Head(Vec::new());
        }
        let mut h = Head::new(|f| {
            f.addr("client", peer);
        });
        h.0.shrink_to_fit();
        h
    }
}

/// A line's fields, written as `key=value` (text) or `"key":value` (JSON).
pub struct Fields<'a> {
    buf: &'a mut Vec<u8>,
    json: bool,
    first: bool,
}

impl<'a> Fields<'a> {
    /// Fields written into `buf`, in JSON or text.
    pub(super) fn new(buf: &'a mut Vec<u8>, json: bool) -> Fields<'a> {
        Fields {
            buf,
            json,
            first: true,
        }
    }

    // Inlined, with the field writers that call it: their keys are
    // constants, so copying one becomes a store or two, not a call.
    #[inline(always)]
    fn key(&mut self, key: &str) {
        if self.json {
            self.buf
                .extend_from_slice(if self.first { b"\"" } else { b",\"" });
            self.buf.extend_from_slice(key.as_bytes());
            self.buf.extend_from_slice(b"\":");
        } else {
            if !self.first {
                self.buf.push(b' ');
            }
            self.buf.extend_from_slice(key.as_bytes());
            self.buf.push(b'=');
        }
        self.first = false;
    }

    /// A value written as it is in text (a DN, a name), quoted in JSON;
    /// in text, one with a control character (or a leading quote) is
    /// quoted and escaped as [`Fields::quoted`] writes
    /// ([`crate::base::logsafe`]): a client's line break never starts a line.
    #[inline]
    pub fn plain(&mut self, key: &str, v: &str) -> &mut Self {
        self.key(key);
        if self.json {
            json_string(self.buf, v);
        } else if crate::base::logsafe::needs_quoting(v) {
            let _ = write!(Adapter(self.buf), "{v:?}");
        } else {
            self.buf.extend_from_slice(v.as_bytes());
        }
        self
    }

    /// A value quoted in both formats (an operation name, a message).
    #[inline]
    pub fn quoted(&mut self, key: &str, v: &str) -> &mut Self {
        self.key(key);
        if self.json {
            json_string(self.buf, v);
        } else if v
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
        {
            // What `{v:?}` writes for printable ASCII without quotes or
            // backslashes (operation names), without the formatter.
            self.buf.push(b'"');
            self.buf.extend_from_slice(v.as_bytes());
            self.buf.push(b'"');
        } else {
            let _ = write!(Adapter(self.buf), "{v:?}");
        }
        self
    }

    /// A value's `Display`, written as [`Fields::plain`] writes.
    pub fn display(&mut self, key: &str, v: &dyn std::fmt::Display) -> &mut Self {
        self.key(key);
        if self.json {
            let mut s = String::new();
            let _ = write!(s, "{v}");
            json_string(self.buf, &s);
        } else {
            let _ = write!(Adapter(self.buf), "{}", crate::base::logsafe::esc(v));
        }
        self
    }

    /// [`Fields::plain`] when present.
    #[inline]
    pub fn plain_opt(&mut self, key: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.plain(key, v);
        }
        self
    }

    /// [`Fields::quoted`] when present.
    #[inline]
    pub fn quoted_opt(&mut self, key: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.quoted(key, v);
        }
        self
    }

    #[inline]
    pub fn num(&mut self, key: &str, v: u64) -> &mut Self {
        self.key(key);
        decimal(self.buf, v);
        self
    }

    pub fn addr(&mut self, key: &str, v: SocketAddr) -> &mut Self {
        self.key(key);
        if self.json {
            self.buf.push(b'"');
        }
        match v {
            // `a.b.c.d:port`, as `Display` writes it, without the
            // formatter (a client's address is in every line).
            SocketAddr::V4(a) => {
                for (i, o) in a.ip().octets().into_iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b'.');
                    }
                    decimal(self.buf, u64::from(o));
                }
                self.buf.push(b':');
                decimal(self.buf, u64::from(a.port()));
            }
            SocketAddr::V6(_) => {
                let _ = write!(Adapter(self.buf), "{v}");
            }
        }
        if self.json {
            self.buf.push(b'"');
        }
        self
    }

    /// Fields formatted earlier.
    pub fn head(&mut self, h: &Head) -> &mut Self {
        if h.0.is_empty() {
            return self;
        }
        if !self.first {
            self.buf.push(if self.json { b',' } else { b' ' });
        }
        self.buf.extend_from_slice(&h.0);
        self.first = false;
        self
    }
}

/// `n` in decimal.
fn decimal(buf: &mut Vec<u8>, n: u64) {
    let mut b = [0u8; 20];
    let mut i = b.len();
    let mut n = n;
    loop {
        i -= 1;
        b[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&b[i..]);
}

/// `fmt::Write` into a byte buffer.
struct Adapter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Adapter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn json_string(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    for c in s.chars() {
        match c {
            '"' => buf.extend_from_slice(b"\\\""),
            '\\' => buf.extend_from_slice(b"\\\\"),
            '\n' => buf.extend_from_slice(b"\\n"),
            '\r' => buf.extend_from_slice(b"\\r"),
            '\t' => buf.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(Adapter(buf), "\\u{:04x}", c as u32);
            }
            c => {
                let mut b = [0u8; 4];
                buf.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    buf.push(b'"');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fields(json: bool, f: impl FnOnce(&mut Fields<'_>)) -> String {
        let mut buf = Vec::new();
        let mut fl = Fields {
            buf: &mut buf,
            json,
            first: true,
        };
        f(&mut fl);
        String::from_utf8(buf).unwrap()
    }

    /// The formatter-free paths write what the formatter would.
    #[test]
    fn fast_paths_write_what_the_formatter_writes() {
        for v in [
            "search",
            "",
            "a b~!",
            "with \"quotes\"",
            "back\\slash",
            "tab\there",
            "new\nline",
            "\u{7f}",
            "é",
            "answered by the router: no such partition",
        ] {
            let got = fields(false, |f| {
                f.quoted("k", v);
            });
            assert_eq!(got, format!("k={v:?}"), "{v:?}");
        }
        for a in [
            "0.0.0.0:0",
            "127.0.0.1:4000",
            "10.20.30.40:65535",
            "255.255.255.255:389",
            "192.168.1.9:1",
            "[::1]:389",
            "[fe80::1%2]:636",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            for json in [false, true] {
                let got = fields(json, |f| {
                    f.addr("client", addr);
                });
                let want = if json {
                    format!("\"client\":\"{addr}\"")
                } else {
                    format!("client={addr}")
                };
                assert_eq!(got, want);
            }
        }
    }

    /// A client's line break (or other control character) in an unquoted
    /// field never reaches a text line raw: the value is quoted and
    /// escaped as quoted fields are.
    #[test]
    fn unquoted_fields_with_control_characters_are_escaped_in_text() {
        let forged = "cn=x\n2026-01-01T00:00:00Z  INFO access: forged\r,o=x";
        let text = fields(false, |f| {
            f.plain("dn", forged)
                .display("dn", &forged)
                .plain("mech", "\"PLAIN\"")
                .plain("dsa", "D1");
        });
        let escaped = format!("{forged:?}");
        assert_eq!(
            text,
            format!("dn={escaped} dn={escaped} mech=\"\\\"PLAIN\\\"\" dsa=D1")
        );
        assert!(!text.contains(['\n', '\r']), "{text}");
        let json = fields(true, |f| {
            f.plain("dn", forged).display("dn2", &forged);
        });
        let v: serde_json::Value = serde_json::from_str(&format!("{{{json}}}")).unwrap();
        assert_eq!(
            (v["dn"].as_str(), v["dn2"].as_str()),
            (Some(forged), Some(forged))
        );
    }

    #[test]
    fn text_and_json_fields() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let head = |json| {
            let mut buf = Vec::new();
            Fields {
                buf: &mut buf,
                json,
                first: true,
            }
            .addr("client", addr)
            .quoted("op", "search")
            .plain("dn", "cn=a \"b\",o=x");
            Head(buf)
        };
        let whole = |json| {
            let h = head(json);
            fields(json, |f| {
                f.head(&h)
                    .plain("dsa", "D1")
                    .quoted_opt("affinity", None)
                    .num("result", 0)
                    .num("latency_us", 1234567);
            })
        };
        assert_eq!(
            whole(false),
            "client=127.0.0.1:4000 op=\"search\" dn=cn=a \"b\",o=x dsa=D1 result=0 latency_us=1234567"
        );
        let j = format!("{{{}}}", whole(true));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["client"], "127.0.0.1:4000");
        assert_eq!(v["dn"], "cn=a \"b\",o=x");
        assert_eq!(v["result"], 0);
        assert_eq!(v["latency_us"], 1234567);
        assert!(v.get("affinity").is_none());
        let ctl = fields(true, |f| {
            f.plain("dn", "a\u{1}\n\\é");
        });
        let v: serde_json::Value = serde_json::from_str(&format!("{{{ctl}}}")).unwrap();
        assert_eq!(v["dn"], "a\u{1}\n\\é");
    }
}
