//! The RFC 4514 string notation, leaf first: `cn=J\, Smith,o=DEMOCORP,c=AU`.
//! Legacy RFC 2253/1779 forms are accepted where unambiguous.

use super::{check_attr, is_attr_char, Ava, Dn, DnError, Rdn};

/// Parse an LDAP DN string.
pub(super) fn parse(s: &str) -> Result<Dn, DnError> {
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
        let value = self.value()?;
        Ok(Ava::new(&attr, &value))
    }

    fn value(&mut self) -> Result<String, DnError> {
        match self.peek() {
            Some('#') => self.hex_value(),
            Some('"') => self.quoted_value(),
            _ => self.string_value(),
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
