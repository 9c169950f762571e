//! A fast, unkeyed hasher for the maps on every operation's path: message
//! IDs (the client's outstanding operations, a DSA connection's pending
//! ones) and DN keys (the partition index). The standard library's SipHash
//! resists collision flooding with a random key, at some 100 instructions
//! per small key; none of these maps needs that: message-ID maps are
//! bounded per connection (`--max-outstanding`, the IDs a connection
//! assigns itself), and the partition index is built from the knowledge,
//! not from what clients send, so a crafted DN costs at most a compare per
//! level it asks about.
//!
//! Integers are mixed with the splitmix64 finalizer (every input bit
//! reaches every output bit, so IDs that differ in their high bits only do
//! not share buckets); byte strings are folded a word at a time and mixed
//! the same way at the end.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher (see the module docs).
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

/// A `HashMap` with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

const K: u64 = 0x9e37_79b9_7f4a_7c15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length keeps "a" and "a\0" apart.
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_i32(&mut self, i: i32) {
        self.add(u64::from(i as u32));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn h<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(t)
    }

    #[test]
    fn equal_keys_hash_alike_and_near_ones_apart() {
        assert_eq!(h(&"o=democorp"), h(&"o=democorp"));
        assert_ne!(h(&"a"), h(&"a\0"));
        assert_ne!(h(&("ab", "c")), h(&("a", "bc")));
        // Message IDs that differ only in high bits spread over the low
        // bits a table indexes by.
        let low: std::collections::HashSet<u64> =
            (0..256).map(|i: i32| h(&(i << 20)) & 0xff).collect();
        assert!(low.len() > 128, "{} distinct low bytes", low.len());
        let mut m: FastMap<i32, i32> = FastMap::default();
        for i in 0..1000 {
            m.insert(i * 4096, i);
        }
        assert!((0..1000).all(|i| m.get(&(i * 4096)) == Some(&i)));
    }
}
