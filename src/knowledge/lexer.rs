//! Tokens of the DXserver knowledge syntax, each with its line and column.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    /// A bare word: a keyword, name, number, flag or unquoted value.
    Word(String),
    /// A double-quoted string, escapes (`\\`, `\"`) decoded.
    Str(String),
    /// One `<...>` RDN of a knowledge DN, brackets included, as written.
    Angle(String),
    Eq,
    Semi,
    Comma,
    LBrace,
    RBrace,
}

impl Tok {
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Str(s) => format!("\"{s}\""),
            Tok::Angle(a) => a.clone(),
            Tok::Eq => "'='".into(),
            Tok::Semi => "';'".into(),
            Tok::Comma => "','".into(),
            Tok::LBrace => "'{'".into(),
            Tok::RBrace => "'}'".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub tok: Tok,
    pub line: usize,
    pub column: usize,
}

/// A lexing failure at (line, column).
#[derive(Debug)]
pub(super) struct LexError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

fn is_word_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '=' | ';' | ',' | '{' | '}' | '"' | '<' | '>')
}

pub(super) fn lex(text: &str) -> Result<Vec<Token>, LexError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let mut at_line_start = true;
    macro_rules! advance {
        () => {{
            if chars[i] == '\n' {
                line += 1;
                col = 1;
                at_line_start = true;
            } else {
                col += 1;
            }
            i += 1;
        }};
    }
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            advance!();
            continue;
        }
        // A comment: '#' first on its line, or after whitespace.
        if c == '#' && (at_line_start || i == 0 || chars[i - 1].is_whitespace()) {
            while i < chars.len() && chars[i] != '\n' {
                advance!();
            }
            continue;
        }
        at_line_start = false;
        let (tline, tcol) = (line, col);
        let tok = match c {
            '=' => {
                advance!();
                Tok::Eq
            }
            ';' => {
                advance!();
                Tok::Semi
            }
            ',' => {
                advance!();
                Tok::Comma
            }
            '{' => {
                advance!();
                Tok::LBrace
            }
            '}' => {
                advance!();
                Tok::RBrace
            }
            '"' => {
                advance!();
                let mut s = String::new();
                loop {
                    if i >= chars.len() {
                        return Err(LexError {
                            line: tline,
                            column: tcol,
                            message: "unterminated string".into(),
                        });
                    }
                    match chars[i] {
                        '"' => {
                            advance!();
                            break;
                        }
                        '\\' if i + 1 < chars.len() && matches!(chars[i + 1], '\\' | '"') => {
                            advance!();
                            s.push(chars[i]);
                            advance!();
                        }
                        '\n' => {
                            return Err(LexError {
                                line: tline,
                                column: tcol,
                                message: "unterminated string (strings end on the line they start)"
                                    .into(),
                            })
                        }
                        ch => {
                            s.push(ch);
                            advance!();
                        }
                    }
                }
                Tok::Str(s)
            }
            '<' => {
                let mut s = String::new();
                let mut quoted = false;
                loop {
                    if i >= chars.len() || (chars[i] == '\n' && !quoted) {
                        return Err(LexError {
                            line: tline,
                            column: tcol,
                            message: "unterminated '<' in DN".into(),
                        });
                    }
                    let ch = chars[i];
                    s.push(ch);
                    advance!();
                    if ch == '"' {
                        quoted = !quoted;
                    } else if ch == '>' && !quoted {
                        break;
                    }
                }
                Tok::Angle(s)
            }
            '>' => {
                return Err(LexError {
                    line,
                    column: col,
                    message: "unexpected '>'".into(),
                })
            }
            _ => {
                let mut w = String::new();
                while i < chars.len() && is_word_char(chars[i]) {
                    w.push(chars[i]);
                    advance!();
                }
                Tok::Word(w)
            }
        };
        out.push(Token {
            tok,
            line: tline,
            column: tcol,
        });
    }
    Ok(out)
}
