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
    let mut c = Cursor {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
        at_line_start: true,
    };
    let mut out = Vec::new();
    while let Some(ch) = c.peek() {
        if ch.is_whitespace() {
            c.advance();
            continue;
        }
        if ch == '#' && c.comment_starts() {
            c.skip_line();
            continue;
        }
        c.at_line_start = false;
        let (line, column) = (c.line, c.col);
        let tok = c.token(ch)?;
        out.push(Token { tok, line, column });
    }
    Ok(out)
}

/// The lexer's place in the text.
struct Cursor {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
    at_line_start: bool,
}

impl Cursor {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    /// Past the current character, counting lines and columns.
    fn advance(&mut self) {
        if self.chars[self.i] == '\n' {
            self.line += 1;
            self.col = 1;
            self.at_line_start = true;
        } else {
            self.col += 1;
        }
        self.i += 1;
    }

    /// A comment: '#' first on its line, or after whitespace.
    fn comment_starts(&self) -> bool {
        self.at_line_start || self.i == 0 || self.chars[self.i - 1].is_whitespace()
    }

    /// To the end of the line (the newline left for the caller).
    fn skip_line(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.advance();
        }
    }

    /// The token that starts with `ch`, the current character.
    fn token(&mut self, ch: char) -> Result<Tok, LexError> {
        let punct = match ch {
            '=' => Some(Tok::Eq),
            ';' => Some(Tok::Semi),
            ',' => Some(Tok::Comma),
            '{' => Some(Tok::LBrace),
            '}' => Some(Tok::RBrace),
            _ => None,
        };
        if let Some(t) = punct {
            self.advance();
            return Ok(t);
        }
        match ch {
            '"' => self.string(),
            '<' => self.angle(),
            '>' => Err(self.error(self.line, self.col, "unexpected '>'")),
            _ => Ok(self.word()),
        }
    }

    fn error(&self, line: usize, column: usize, message: &str) -> LexError {
        LexError {
            line,
            column,
            message: message.into(),
        }
    }

    /// A double-quoted string, on one line; `\\` and `\"` decoded.
    fn string(&mut self) -> Result<Tok, LexError> {
        let (line, col) = (self.line, self.col);
        self.advance();
        let mut s = String::new();
        loop {
            let Some(ch) = self.peek() else {
                return Err(self.error(line, col, "unterminated string"));
            };
            match ch {
                '"' => {
                    self.advance();
                    return Ok(Tok::Str(s));
                }
                '\\' if matches!(self.chars.get(self.i + 1), Some('\\' | '"')) => {
                    self.advance();
                    s.push(self.chars[self.i]);
                    self.advance();
                }
                '\n' => {
                    return Err(self.error(
                        line,
                        col,
                        "unterminated string (strings end on the line they start)",
                    ))
                }
                ch => {
                    s.push(ch);
                    self.advance();
                }
            }
        }
    }

    /// One `<...>` RDN, brackets included; a `>` inside double quotes does
    /// not end it, and only a quoted part may span lines.
    fn angle(&mut self) -> Result<Tok, LexError> {
        let (line, col) = (self.line, self.col);
        let mut s = String::new();
        let mut quoted = false;
        loop {
            let ch = match self.peek() {
                Some(ch) if ch != '\n' || quoted => ch,
                _ => return Err(self.error(line, col, "unterminated '<' in DN")),
            };
            s.push(ch);
            self.advance();
            if ch == '"' {
                quoted = !quoted;
            } else if ch == '>' && !quoted {
                return Ok(Tok::Angle(s));
            }
        }
    }

    /// A bare word: every character up to whitespace or punctuation.
    fn word(&mut self) -> Tok {
        let mut w = String::new();
        while let Some(ch) = self.peek().filter(|&c| is_word_char(c)) {
            w.push(ch);
            self.advance();
        }
        Tok::Word(w)
    }
}
