//! The RFC 4514 string notation, leaf first: `cn=J\, Smith,o=DEMOCORP,c=AU`.
//! Legacy RFC 2253/1779 forms are accepted where unambiguous.

use super::{check_attr, is_attr_char, Ava, Dn, DnError, Rdn};

/// Parse an LDAP DN string.
pub(super) fn parse(s: &str) -> Result<Dn, DnError> {
    match parse_plain(s) {
        Some(dn) => Ok(dn),
        None => LdapDnParser::new(s).parse(),
    }
}

/// The common case, read in place: ASCII with no escapes, quotes, `#`
/// values, legacy `;` separators or `<`/`>` (every DN the router routes on
/// in practice). `None` for anything else, including every DN that is not
/// valid: the general parser then decides, and words the error. Gives what
/// the general parser gives for the same string (property-tested): one
/// `Ava` per `type=value`, spaces around types, `=`, `,` and `+` and at
/// either end of a value insignificant, an `=` inside a value kept.
fn parse_plain(s: &str) -> Option<Dn> {
    let b = s.as_bytes();
    if b.iter().all(|&c| c == b' ') {
        return Some(Dn::root());
    }
    let mut rdns = Vec::with_capacity(b.iter().filter(|&&c| c == b',').count() + 1);
    // The RDN's AVAs so far: the first, and any after a '+'.
    let mut first = None;
    let mut more = Vec::new();
    // Where the current AVA starts, and its '=' once seen.
    let (mut start, mut eq) = (0, None);
    for i in 0..=b.len() {
        let c = b.get(i).copied().unwrap_or(b',');
        match c {
            b',' | b'+' => {
                let e = eq?;
                let attr = s.get(start..e)?.trim_matches(' ');
                // Empty, a character no type has, a bad OID: the general
                // parser words it.
                if check_attr(attr, 0).is_err() {
                    return None;
                }
                let ava = Ava::new(attr, s.get(e + 1..i)?.trim_matches(' '));
                if first.is_none() {
                    first = Some(ava);
                } else {
                    more.push(ava);
                }
                if c == b',' {
                    let one = first.take()?;
                    rdns.push(if more.is_empty() {
                        Rdn::one(one)
                    } else {
                        more.insert(0, one);
                        Rdn::new(std::mem::take(&mut more))
                    });
                }
                (start, eq) = (i + 1, None);
            }
            b'=' if eq.is_none() => eq = Some(i),
            0 | b'\\' | b'"' | b'#' | b';' | b'<' | b'>' => return None,
            c if !c.is_ascii() => return None,
            _ => {}
        }
    }
    Some(Dn { rdns })
}

/// The general parser alone (tests compare [`parse_plain`] with it).
#[cfg(test)]
fn parse_general(s: &str) -> Result<Dn, DnError> {
    LdapDnParser::new(s).parse()
}

struct LdapDnParser<'a> {
    chars: Vec<char>,
    pos: usize,
    _src: &'a str,
}

impl<'a> LdapDnParser<'a> {
    fn new(s: &'a str) -> Self {
        LdapDnParser {
            chars: s.chars().collect(),
            pos: 0,
            _src: s,
        }
    }

    fn err(&self, message: &str) -> DnError {
        DnError {
            offset: self.pos,
            message: message.to_string(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(' ') {
            self.pos += 1;
        }
    }

    fn parse(mut self) -> Result<Dn, DnError> {
        self.skip_spaces();
        if self.peek().is_none() {
            return Ok(Dn::root());
        }
        let mut rdns = Vec::new();
        let mut avas = Vec::new();
        loop {
            avas.push(self.ava()?);
            self.skip_spaces();
            match self.peek() {
                None => {
                    rdns.push(Rdn::new(std::mem::take(&mut avas)));
                    break;
                }
                Some('+') => self.pos += 1,
                Some(',') | Some(';') => {
                    self.pos += 1;
                    rdns.push(Rdn::new(std::mem::take(&mut avas)));
                }
                Some(_) => return Err(self.err("expected ',' or '+' after value")),
            }
            self.skip_spaces();
        }
        Ok(Dn { rdns })
    }

    fn ava(&mut self) -> Result<Ava, DnError> {
        self.skip_spaces();
        let start = self.pos;
        while self.peek().is_some_and(is_attr_char) {
            self.pos += 1;
        }
        let attr: String = self.chars[start..self.pos].iter().collect();
        if attr.is_empty() {
            return Err(self.err("expected an attribute type"));
        }
        check_attr(&attr, start)?;
        self.skip_spaces();
        if self.peek() != Some('=') {
            return Err(self.err("expected '=' after attribute type"));
        }
        self.pos += 1;
        self.skip_spaces();
        match self.peek() {
            Some('#') => Ok(Ava::hex(&attr, &self.hex_value()?)),
            Some('"') => Ok(Ava::new(&attr, &self.quoted_value()?)),
            _ => Ok(Ava::new(&attr, &self.string_value()?)),
        }
    }

    fn hex_value(&mut self) -> Result<String, DnError> {
        self.pos += 1;
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
            self.pos += 1;
        }
        let hex: String = self.chars[start..self.pos].iter().collect();
        if hex.is_empty() || !hex.len().is_multiple_of(2) {
            return Err(self.err("'#' must be followed by an even number of hex digits"));
        }
        // Keep the BER-encoded form as the value: '#' + hex, lowercased by
        // normalization. Decoding would need the attribute's syntax.
        Ok(format!("#{hex}"))
    }

    fn quoted_value(&mut self) -> Result<String, DnError> {
        self.pos += 1;
        let mut bytes = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated quoted value")),
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => self.escape(&mut bytes)?,
                Some(c) => {
                    push_char(&mut bytes, c);
                    self.pos += 1;
                }
            }
        }
        String::from_utf8(bytes).map_err(|_| self.err("escaped bytes are not valid UTF-8"))
    }

    fn string_value(&mut self) -> Result<String, DnError> {
        let mut bytes = Vec::new();
        // Trailing unescaped spaces are insignificant; escaped ones are not.
        let mut significant_len = 0;
        loop {
            match self.peek() {
                None | Some(',') | Some(';') | Some('+') => break,
                Some('\\') => {
                    self.escape(&mut bytes)?;
                    significant_len = bytes.len();
                }
                Some(c @ ('"' | '<' | '>' | '=')) => {
                    if c == '=' {
                        // '=' in a value is tolerated by most servers.
                        push_char(&mut bytes, c);
                        self.pos += 1;
                        significant_len = bytes.len();
                    } else {
                        return Err(self.err("unescaped special character in value"));
                    }
                }
                Some('\0') => return Err(self.err("NUL character in value")),
                Some(c) => {
                    push_char(&mut bytes, c);
                    self.pos += 1;
                    if c != ' ' {
                        significant_len = bytes.len();
                    }
                }
            }
        }
        bytes.truncate(significant_len);
        String::from_utf8(bytes).map_err(|_| self.err("escaped bytes are not valid UTF-8"))
    }

    fn escape(&mut self, bytes: &mut Vec<u8>) -> Result<(), DnError> {
        self.pos += 1;
        match self.peek() {
            Some(c) if c.is_ascii_hexdigit() => {
                let hi = c;
                let lo = self
                    .chars
                    .get(self.pos + 1)
                    .copied()
                    .filter(|c| c.is_ascii_hexdigit())
                    .ok_or_else(|| {
                        self.err("'\\' must be followed by a special character or two hex digits")
                    })?;
                let byte = (hex_digit(hi) << 4) | hex_digit(lo);
                bytes.push(byte);
                self.pos += 2;
                Ok(())
            }
            Some(c @ (' ' | '"' | '#' | '+' | ',' | ';' | '<' | '=' | '>' | '\\')) => {
                push_char(bytes, c);
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.err("'\\' must be followed by a special character or two hex digits")),
        }
    }
}

fn push_char(bytes: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

fn hex_digit(c: char) -> u8 {
    c.to_digit(16).map(|d| d as u8).unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Everything a DN is compared and shown by: each AVA's type and value
    /// as written and normalized, RDN by RDN.
    fn whole(dn: &Dn) -> String {
        format!("{:?}", dn.rdns())
    }

    /// The normalization of earlier versions, kept as the reference for
    /// the fast paths of `normalize_attr_into` and `normalize_value_into`.
    fn reference_norm(attr: &str, value: &str) -> (String, String) {
        let lower = attr.trim().to_ascii_lowercase();
        let lower = match lower.strip_prefix("oid.") {
            Some(rest)
                if !rest.is_empty()
                    && rest
                        .split('.')
                        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
            {
                rest.to_string()
            }
            _ => lower,
        };
        let short = match lower.as_str() {
            "2.5.4.3" | "commonname" => "cn",
            "2.5.4.6" | "countryname" => "c",
            "2.5.4.7" | "localityname" => "l",
            "2.5.4.8" | "stateorprovincename" => "st",
            "2.5.4.9" => "street",
            "2.5.4.10" | "organizationname" => "o",
            "2.5.4.11" | "organizationalunitname" => "ou",
            "0.9.2342.19200300.100.1.1" | "userid" => "uid",
            "0.9.2342.19200300.100.1.25" | "domaincomponent" => "dc",
            other => other,
        };
        let mut v = String::new();
        for word in value.split(' ').filter(|w| !w.is_empty()) {
            if !v.is_empty() {
                v.push(' ');
            }
            for c in word.chars() {
                v.extend(c.to_lowercase());
            }
        }
        (short.to_string(), v)
    }

    #[test]
    fn plain_dns_take_the_fast_path_and_others_the_general_one() {
        for s in [
            "o=DEMOCORP,c=AU",
            " uid = alice , ou=People,o=x ",
            "cn=a+sn=b,o=x",
            "cn=a=b",
            "cn=",
            "",
            "   ",
        ] {
            let fast = parse_plain(s).unwrap_or_else(|| panic!("{s:?} is plain"));
            assert_eq!(whole(&fast), whole(&parse_general(s).unwrap()), "{s:?}");
        }
        for s in [
            "cn=J\\, Smith,o=x",
            "cn=\"q\"",
            "cn=#04",
            "a=b;c=d",
            "cn=é",
            "o=x,",
            ",o=x",
            "1cn=x",
            "cn=x,,o=y",
            "cn x=y",
        ] {
            assert!(parse_plain(s).is_none(), "{s:?} is not plain");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Whatever the fast path takes, it reads as the general parser
        /// does; what it leaves, the general parser decides.
        #[test]
        fn the_fast_path_reads_as_the_general_parser(s in "[a-zA-Z0-9=,+ .;#\"\\\\<>_\\-é\t]{0,24}") {
            if let Some(fast) = parse_plain(&s) {
                let general = parse_general(&s);
                prop_assert!(general.is_ok(), "{:?}: fast {:?}, general {:?}", s, whole(&fast), general);
                prop_assert_eq!(whole(&fast), whole(&general.unwrap()));
            }
        }

        /// Likelier DNs: types, values with spaces, several RDNs.
        #[test]
        fn plain_looking_dns_read_alike(parts in proptest::collection::vec(("[a-zA-Z][a-zA-Z0-9.-]{0,6}|[0-9]{1,2}(\\.[0-9]{1,3}){0,3}|(oid|OID)\\.[0-9.a-z]{1,6}", "[ ]{0,2}", "[a-zA-Z0-9 =-]{0,8}", "[,+]"), 1..5)) {
            let mut s = String::new();
            for (i, (t, sp, v, sep)) in parts.iter().enumerate() {
                if i > 0 { s.push_str(sep); }
                s.push_str(sp);
                s.push_str(t);
                s.push_str(sp);
                s.push('=');
                s.push_str(v);
            }
            let general = parse_general(&s);
            match parse_plain(&s) {
                Some(fast) => {
                    prop_assert!(general.is_ok(), "{:?}", s);
                    prop_assert_eq!(whole(&fast), whole(&general.unwrap()));
                }
                None => prop_assert!(general.is_err() || s.contains('#'), "{:?} is plain but went the general way", s),
            }
        }

        /// The normalizations' fast paths give what the reference gives.
        #[test]
        fn normalization_matches_the_reference(attr in "[ ]?([a-zA-Z]{1,8}|(oid|OID)\\.[0-9.]{0,8}|[0-9.]{1,10}|commonName|UserId|OID\\.2\\.5\\.4\\.3|2\\.5\\.4\\.11|0\\.9\\.2342\\.19200300\\.100\\.1\\.1)[ ]?", value in "[a-zA-Z0-9 éÉ]{0,12}") {
            let a = Ava::new(&attr, &value);
            let (na, nv) = reference_norm(&attr, &value);
            prop_assert_eq!(a.key(), (na.as_str(), nv.as_str()));
        }
    }
}
