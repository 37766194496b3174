//! A tiny, fast, non-cryptographic hasher for the (source, tag) bucket maps.
//!
//! Contract: keys are engine-internal `u64`/`u32` values chosen by the PML's
//! own traffic, so hash-flooding resistance is not needed; speed is. This is
//! the FxHash multiply-rotate mix (as used in rustc).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style hasher state.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(buf));
        }
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
}

/// A `HashMap` using [`FxHasher`].
pub(crate) type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Packs an exact (source, tag) pair into one bucket key.
#[inline]
pub(crate) fn bucket_key(source: u32, tag: i32) -> u64 {
    (u64::from(source) << 32) | u64::from(tag as u32)
}

/// The source of a [`bucket_key`].
#[inline]
pub(crate) fn bucket_source(key: u64) -> u32 {
    (key >> 32) as u32
}
