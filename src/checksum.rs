//! The 64-bit FNV-1a hash, written once: the fp16 `.bin` files, the caches' own checksums, graph
//! shards and IVF index files all hash their bytes with it. Pure arithmetic; it touches nothing
//! else in the crate.

/// The FNV-1a 64 state before any byte.
pub(crate) const FNV64_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The FNV-1a 64 prime.
pub(crate) const FNV64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits, continued from `h` over `bytes` (start from [`FNV64_START`]).
pub(crate) fn fnv1a64(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(FNV64_PRIME);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(FNV64_START, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(FNV64_START, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            fnv1a64(fnv1a64(FNV64_START, b"foo"), b"bar"),
            fnv1a64(FNV64_START, b"foobar")
        );
    }
}
