//! String preparation of attribute values (RFC 4518, for the
//! case-ignoring matching rules naming attributes use): the form in which
//! the router compares and keys every value of a DN, so that two
//! spellings a DSA takes for one entry are one DN to the router too
//! (routing, the failed-bind defence, rates, policy identities, group
//! members).
//!
//! The steps, in RFC 4518's order (section 2):
//! * map: soft hyphens, the combining grapheme joiner, variation
//!   selectors, the object replacement character, zero width space and
//!   every other control or format character to nothing; TAB, LF, VT, FF,
//!   CR, NEL and every other space or separator (NBSP, U+3000, ...) to
//!   SPACE; full Unicode case folding (RFC 3454 table B.2);
//! * normalize: NFKC (fullwidth and compatibility forms, `ſ`, ligatures);
//!   case folding and NFKC are applied again until the value no longer
//!   changes (table B.2 is case folding closed under NFKC: `ℌ` is `h`);
//! * insignificant spaces: none at either end, one between words.
//!
//! Prohibited characters (unassigned code points, private use) are kept:
//! a DN is never refused for them here, the DSA judges the value.
//!
//! This is at least as coarse as what DSAs do: slapd folds case per
//! character and applies NFKC (its `uid=user１997`, `uid=uſer1997`,
//! `uid=ｕser1997` and `uid=user1997` with a trailing NBSP, U+3000 or TAB
//! are one entry); RFC 4518's mappings to nothing and to SPACE make a few
//! values equal here that slapd keeps apart (`us\u{ad}er`, a soft hyphen,
//! is `user`). So the router never takes two spellings of one entry for
//! two identities; it may take two entries that differ only by such
//! characters for one (counted and matched together).
//!
//! The common case, printable ASCII, is only ASCII case folding and space
//! trimming: [`prepare_into`] checks for it first and never reaches the
//! Unicode tables.

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;

/// Appends `value` prepared (RFC 4518: mapped, case folded, NFKC, without
/// insignificant spaces) to `out`.
pub fn prepare_into(value: &str, out: &mut String) {
    let b = value.as_bytes();
    // Printable ASCII with single inner spaces: only case to fold.
    if plain(b) {
        let start = out.len();
        out.push_str(value);
        out[start..].make_ascii_lowercase();
        return;
    }
    if !beyond_ascii(value) {
        push_words(value, out);
        return;
    }
    let mut cur = unicode_pass(value);
    // Each pass folds case and normalizes what the last produced; a
    // value changes at most twice in practice (a fold whose NFKC has
    // capitals, as `ℌ`), the bound keeps it finite whatever the tables.
    for _ in 0..4 {
        let next = unicode_pass(&cur);
        if next == cur {
            break;
        }
        cur = next;
    }
    out.push_str(&cur);
}

/// Whether `b` is printable ASCII without a space at either end or two
/// in a row (not empty): one pass without a branch per byte.
fn plain(b: &[u8]) -> bool {
    let (mut ok, mut space) = (true, true);
    for &c in b {
        // 0x20..=0x7e: c + 1 in 0x21..=0x7f, positive as i8 and above 0x20.
        ok &= (c.wrapping_add(1) as i8) > 0x20;
        let s = c == b' ';
        ok &= !(s & space);
        space = s;
    }
    ok & !space
}

/// One pass of mapping, case folding and NFKC, spaces made insignificant.
fn unicode_pass(value: &str) -> String {
    let mapped = value.chars().filter_map(map_char);
    let folded: String = mapped
        .default_case_fold()
        .nfkc()
        .default_case_fold()
        .nfkc()
        .collect();
    let mut out = String::with_capacity(folded.len());
    push_words(&folded, &mut out);
    out
}

/// Append the words of `s` (split at SPACE) joined by one space, ASCII
/// case folded (`s` is printable ASCII, or already folded).
fn push_words(s: &str, out: &mut String) {
    let mut first = true;
    for word in s.split(' ').filter(|w| !w.is_empty()) {
        if !first {
            out.push(' ');
        }
        first = false;
        let start = out.len();
        out.push_str(word);
        out[start..].make_ascii_lowercase();
    }
}

/// RFC 4518 2.2's mapping of one character: `None` for the characters
/// mapped to nothing, SPACE for those mapped to SPACE.
fn map_char(c: char) -> Option<char> {
    match c {
        '\u{09}'..='\u{0d}' | '\u{85}' => Some(' '),
        // Every other space and separator (Zs, Zl, Zp).
        '\u{a0}'
        | '\u{1680}'
        | '\u{2000}'..='\u{200a}'
        | '\u{2028}'
        | '\u{2029}'
        | '\u{202f}'
        | '\u{205f}'
        | '\u{3000}' => Some(' '),
        // Soft hyphens, combining grapheme joiner, variation selectors,
        // object replacement character, zero width space.
        '\u{ad}'
        | '\u{1806}'
        | '\u{34f}'
        | '\u{180b}'..='\u{180d}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{fffc}'
        | '\u{200b}' => None,
        // Other control and format characters (the list RFC 4518 gives).
        '\u{00}'..='\u{08}'
        | '\u{0e}'..='\u{1f}'
        | '\u{7f}'..='\u{84}'
        | '\u{86}'..='\u{9f}'
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{180e}'
        | '\u{200c}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2063}'
        | '\u{206a}'..='\u{206f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0001}'
        | '\u{e0020}'..='\u{e007f}' => None,
        c => Some(c),
    }
}

/// `value` prepared ([`prepare_into`]).
pub fn prepare(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    prepare_into(value, &mut out);
    out
}

/// Whether preparing `value` does more than fold ASCII case and drop
/// spaces: the value holds a character outside printable ASCII. A bind
/// DN with such a value is one a DSA may store in another spelling.
pub fn beyond_ascii(value: &str) -> bool {
    !value.bytes().all(|c| (c.wrapping_add(1) as i8) > 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_alikes_prepare_as_the_plain_value() {
        for v in [
            "user1997",
            "USER1997",
            "user\u{ff11}997",
            "u\u{17f}er1997",
            "\u{ff55}ser1997",
            "\u{ff35}SER1997",
            "user1997\u{a0}",
            "user1997\u{3000}",
            "user1997\t",
            "\tuser1997",
            "\u{a0}user1997\r\n",
            "u\u{17f}er\u{ff11}997\u{3000}\t",
            "us\u{ad}er1997",
            "user\u{200b}1997",
            "user1997\u{feff}",
            "user1997\u{200d}",
            "user1997\u{85}",
            "\u{ff35}\u{ff33}\u{ff25}\u{ff32}\u{ff11}\u{ff19}\u{ff19}\u{ff17}",
        ] {
            assert_eq!(prepare(v), "user1997", "{v:?}");
        }
        for (v, want) in [
            ("Human   Resources ", "human resources"),
            ("a\u{3000}\u{3000}b", "a b"),
            ("a\tb", "a b"),
            ("Stra\u{df}e", "strasse"),
            ("\u{210c}ello", "hello"),
            ("e\u{301}mile", "\u{e9}mile"),
            ("\u{c9}MILE", "\u{e9}mile"),
            ("\u{3a3}\u{3c2}", "\u{3c3}\u{3c3}"),
            ("\u{fb01}le", "file"),
            ("", ""),
            ("   ", ""),
            ("\u{ad}", ""),
        ] {
            assert_eq!(prepare(v), want, "{v:?}");
        }
        // Different values stay different.
        for (a, b) in [
            ("user1997", "user1998"),
            ("user 1997", "user1997"),
            ("a", "\u{e0}"),
        ] {
            assert_ne!(prepare(a), prepare(b), "{a:?} {b:?}");
        }
    }

    /// The value normalization before RFC 4518 preparation (ASCII case and
    /// spaces only), the baseline of [`cost_of_the_ascii_fast_path`].
    fn before(value: &str, out: &mut String) {
        let b = value.as_bytes();
        if b.is_ascii()
            && b.first() != Some(&b' ')
            && b.last() != Some(&b' ')
            && !b.windows(2).any(|w| w == b"  ")
        {
            let start = out.len();
            out.push_str(value);
            out[start..].make_ascii_lowercase();
            return;
        }
        let mut first = true;
        for word in value.split(' ').filter(|w| !w.is_empty()) {
            if !first {
                out.push(' ');
            }
            first = false;
            for c in word.chars() {
                out.extend(c.to_lowercase());
            }
        }
    }

    /// `cargo test --profile ci --lib cost_of_the_ascii_fast_path --
    /// --ignored --nocapture`: ns per value, before and now, for the
    /// values of a typical bind DN, and for a look-alike.
    #[test]
    #[ignore]
    fn cost_of_the_ascii_fast_path() {
        let values = ["user1997", "people", "DEMOCORP", "AU", "Human Resources"];
        let n = 2_000_000;
        let time = |f: &dyn Fn(&str, &mut String)| {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let mut out = String::with_capacity(64);
                let t = std::time::Instant::now();
                for _ in 0..n {
                    for v in values {
                        out.clear();
                        f(std::hint::black_box(v), &mut out);
                    }
                    std::hint::black_box(&out);
                }
                let ns = t.elapsed().as_nanos() as f64 / (n * values.len()) as f64;
                best = best.min(ns);
            }
            best
        };
        let old = time(&before);
        let new = time(&prepare_into);
        let mut out = String::new();
        let t = std::time::Instant::now();
        for _ in 0..200_000 {
            out.clear();
            prepare_into(
                std::hint::black_box("\u{ff55}\u{17f}er\u{ff11}997\u{3000}"),
                &mut out,
            );
        }
        let look = t.elapsed().as_nanos() as f64 / 200_000.0;
        println!("ASCII value: before {old:.1} ns, now {new:.1} ns; a look-alike: {look:.0} ns");
    }

    #[test]
    fn the_fast_path_takes_plain_printable_ascii_only() {
        for (v, want) in [
            ("user1997", true),
            ("Human Resources", true),
            ("~!", true),
            ("", false),
            (" a", false),
            ("a ", false),
            ("a  b", false),
            ("a\tb", false),
            ("a\u{7f}", false),
            ("\u{e9}", false),
            ("\u{1f}", false),
        ] {
            assert_eq!(plain(v.as_bytes()), want, "{v:?}");
        }
    }

    #[test]
    fn preparing_is_idempotent() {
        for v in [
            "\u{a8}x",
            "a \u{308}",
            "\u{345}\u{3b1}",
            "\u{1fc3}",
            "\u{390}\u{130}",
            "x\u{a0}\u{a8}",
            "\u{13a0}\u{ab70}",
        ] {
            let once = prepare(v);
            assert_eq!(prepare(&once), once, "{v:?}");
        }
    }
}
