//! Horizontal partitions (CA Directory's `[hash1(N)=S]` prefix part): one
//! flat namespace spread over DSAs by a hash of each entry's RDN value at
//! the partitioned level.
//!
//! How a value is placed, exactly (`docs/knowledge.md` has the vectors):
//! 1. The value is the RDN's value for the named attribute (for `*`, the
//!    RDN's value; in a multi-valued RDN, that of the type that sorts
//!    first), with RFC 4514 escapes decoded.
//! 2. Normalised: leading and trailing spaces removed, inner runs of spaces
//!    kept, upper-cased (Unicode upper case).
//! 3. `hash1`: the SHA-1 digest of its UTF-8 bytes; the first four bytes
//!    as a big-endian unsigned 32-bit number. `hash2`: the sum of its
//!    characters' code points.
//! 4. The slot is that number modulo the set's total.

use crate::proto::dn::Rdn;

/// The hash of a horizontal partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    Hash1,
    Hash2,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Hash1 => "hash1",
            Algo::Hash2 => "hash2",
        }
    }
}

/// Why a knowledge RDN of the `[hashN(T)=S]` form is not a horizontal
/// partition's part (the text inside the brackets as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashError {
    /// Neither `hash1` nor `hash2`.
    UnknownHash(String),
    /// Not `hashN(TOTAL)=SLOT`.
    Malformed { inner: String, algo: Algo },
    /// The slot is not below the total.
    Slot { slot: u32, total: u32 },
}

impl std::fmt::Display for HashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HashError::UnknownHash(inner) => write!(
                f,
                "unknown horizontal-partition hash in [{inner}]: use hash1 or hash2"
            ),
            HashError::Malformed { inner, algo } => write!(
                f,
                "malformed horizontal-partition part [{inner}]: expected [{}(TOTAL)=SLOT]",
                algo.name()
            ),
            HashError::Slot { slot, total } => {
                write!(f, "horizontal-partition slot {slot} is not in 0..{total}")
            }
        }
    }
}

impl std::error::Error for HashError {}

/// One DSA's part of a horizontal partition: `<uid "[hash1(3)=0]">`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HashPart {
    /// The naming attribute hashed (lower case); `None` for `*` (whatever
    /// the RDN's first attribute is).
    pub attr: Option<String>,
    pub algo: Algo,
    pub total: u32,
    pub slot: u32,
}

impl HashPart {
    /// Parse the contents of a knowledge RDN `<ATTR "[hashN(T)=S]">`
    /// (without the angle brackets); `None` when it is not one.
    pub fn parse(rdn: &str) -> Option<Result<HashPart, HashError>> {
        let t = rdn.trim();
        let (attr, rest) = t.split_once(|c: char| c.is_whitespace())?;
        let v = rest.trim().trim_matches('"').trim();
        let inner = v.strip_prefix('[')?.strip_suffix(']')?;
        let (algo, rest) = if let Some(r) = inner.strip_prefix("hash1") {
            (Algo::Hash1, r)
        } else if let Some(r) = inner.strip_prefix("hash2") {
            (Algo::Hash2, r)
        } else {
            return Some(Err(HashError::UnknownHash(inner.to_string())));
        };
        let parsed = (|| {
            let rest = rest.trim().strip_prefix('(')?;
            let (total, rest) = rest.split_once(')')?;
            let slot = rest.trim().strip_prefix('=')?;
            Some((
                total.trim().parse::<u32>().ok()?,
                slot.trim().parse::<u32>().ok()?,
            ))
        })();
        let Some((total, slot)) = parsed else {
            return Some(Err(HashError::Malformed {
                inner: inner.to_string(),
                algo,
            }));
        };
        if total == 0 || slot >= total {
            return Some(Err(HashError::Slot { slot, total }));
        }
        let attr = (attr != "*").then(|| attr.to_ascii_lowercase());
        Some(Ok(HashPart {
            attr,
            algo,
            total,
            slot,
        }))
    }

    /// The slot of an entry whose RDN at the partitioned level is `rdn`;
    /// `None` when that RDN has no value of the hashed attribute.
    pub fn slot_of(&self, rdn: &Rdn) -> Option<u32> {
        let ava = match &self.attr {
            Some(a) => rdn
                .avas()
                .iter()
                .find(|v| v.attr().eq_ignore_ascii_case(a))?,
            None => rdn.avas().first()?,
        };
        Some(slot(self.algo, ava.value(), self.total))
    }

    /// `<uid "[hash1(3)=0]">`, as written in knowledge.
    pub fn describe(&self) -> String {
        format!(
            "<{} \"[{}({})={}]\">",
            self.attr.as_deref().unwrap_or("*"),
            self.algo.name(),
            self.total,
            self.slot
        )
    }
}

/// The normalised value hashed.
pub fn normalise(value: &str) -> String {
    value.trim_matches(' ').to_uppercase()
}

/// The number a value hashes to, before the modulo.
pub fn hash(algo: Algo, value: &str) -> u64 {
    let v = normalise(value);
    match algo {
        Algo::Hash1 => {
            let d = aws_lc_rs::digest::digest(
                &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
                v.as_bytes(),
            );
            let b = d.as_ref();
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64
        }
        Algo::Hash2 => v.chars().map(|c| c as u64).sum(),
    }
}

/// The slot of `value` in a set of `total`.
pub fn slot(algo: Algo, value: &str, total: u32) -> u32 {
    (hash(algo, value) % total.max(1) as u64) as u32
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The vectors `docs/knowledge.md` publishes.
    #[test]
    fn published_vectors() {
        for (algo, value, h, total, s) in [
            (Algo::Hash2, "user0042", 517, 3, 1),
            (Algo::Hash2, "USER0042", 517, 3, 1),
            (Algo::Hash2, " user0042 ", 517, 3, 1),
            (Algo::Hash2, "alice", 350, 3, 2),
            (Algo::Hash1, "user0042", 0x7374_d9ac, 3, 2),
            (Algo::Hash1, "alice", 0xd007_fb1f, 3, 2),
            (Algo::Hash1, "user0042", 1_937_037_740, 2, 0),
            (Algo::Hash1, "alice", 3_490_183_967, 2, 1),
            (Algo::Hash2, "user0042", 517, 2, 1),
            (Algo::Hash2, "alice", 350, 2, 0),
        ] {
            assert_eq!(
                hash(algo, value),
                h,
                "{algo:?} {value}: {:#x}",
                hash(algo, value)
            );
            assert_eq!(slot(algo, value, total), s, "{algo:?} {value}");
        }
    }

    #[test]
    fn parts_parse_and_bad_ones_say_why() {
        assert_eq!(
            HashPart::parse("uid \"[hash1(3)=0]\""),
            Some(Ok(HashPart {
                attr: Some("uid".into()),
                algo: Algo::Hash1,
                total: 3,
                slot: 0
            }))
        );
        assert_eq!(
            HashPart::parse("* \"[hash2(4)=3]\"").unwrap().unwrap().attr,
            None
        );
        assert_eq!(HashPart::parse("ou People"), None);
        assert!(HashPart::parse("uid \"[hash3(3)=0]\"").unwrap().is_err());
        assert!(HashPart::parse("uid \"[hash1(3)=3]\"").unwrap().is_err());
        assert!(HashPart::parse("uid \"[hash1(x)=0]\"").unwrap().is_err());
    }
}
