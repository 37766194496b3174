//! Memory that a transfer reads or writes after the call that named it
//! returned: the one place where the borrow checker cannot follow a buffer.
//!
//! A [`MemRegion`] is an address and a length. Creating one is `unsafe`:
//! the creator promises the memory stays valid (and, for a destination,
//! unaliased) until every operation given the region has completed. Every
//! other use is safe and goes through [`MemRegion::read`] /
//! [`MemRegion::write`], so the unsafety of the whole BTL layer reduces to
//! that one promise, made once per request by the layer that owns the
//! user's buffer.
#![allow(unsafe_code)]

use std::fmt;

/// A contiguous range of this process's memory (see the module doc).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MemRegion {
    addr: usize,
    len: usize,
}

/// Copies of at least this many bytes are checked for a short distance
/// (below it glibc's `memcpy` uses vector loops, which do not mind).
const SHORT_DISTANCE_MIN: usize = 2048;
/// Pieces a short-distance copy is cut into: each below glibc's `rep movsb`
/// threshold on this machine (between 2 and 4 KiB).
const SHORT_DISTANCE_PIECE: usize = 2048;

/// Whether a copy of `len` bytes from `src` to `dst` (addresses) is one
/// that `rep movsb` runs at a fraction of its speed: the destination a few
/// bytes past the source modulo 4 KiB (on this project's machine, AMD EPYC
/// Zen 4 with glibc 2.36, a small fraction of the copy's usual speed, while
/// the same copy cut into 2 KiB pieces runs at nearly full speed at every
/// distance: `docs/performance.md`, "Tuning parameters and switch points").
/// Such distances are common: a `Vec` of 128 KiB or more starts 16 bytes
/// into its page, and a message's data follows its headers.
#[inline]
fn short_distance(dst: usize, src: usize, len: usize) -> bool {
    len >= SHORT_DISTANCE_MIN
        && matches!(dst.wrapping_sub(src) % 4096, 1..=39)
        && (dst >= src.wrapping_add(len) || src >= dst.wrapping_add(len))
}

/// `dst.copy_from_slice(src)` for the few bytes of a small message: up to
/// 16 bytes with two (possibly overlapping) loads and stores, no call into
/// `memcpy` (whose call and size dispatch cost more than the copy); longer
/// ones as `copy_from_slice`.
///
/// # Panics
/// When the lengths differ, as `copy_from_slice` does.
#[inline(always)]
pub fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_small: lengths differ");
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            let (a, b) = (word::<4>(src, 0), word::<4>(src, n - 4));
            dst[..4].copy_from_slice(&a);
            dst[n - 4..].copy_from_slice(&b);
        }
        8..=16 => {
            let (a, b) = (word::<8>(src, 0), word::<8>(src, n - 8));
            dst[..8].copy_from_slice(&a);
            dst[n - 8..].copy_from_slice(&b);
        }
        _ => dst.copy_from_slice(src),
    }
}

/// The `N` bytes of `s` at `at` (in bounds: the callers' ranges).
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    let mut w = [0; N];
    w.copy_from_slice(&s[at..at + N]);
    w
}

/// `dst.copy_from_slice(src)`, cut into 2 KiB pieces when the distance
/// between the two would make one `rep movsb` slow: a copy of 2 KiB or
/// more whose destination lies 1 to 39 bytes past its source modulo 4 KiB
/// (the pieces are copied with vector loops, fast at every distance).
///
/// # Panics
/// When the lengths differ, as `copy_from_slice` does.
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    if short_distance(dst.as_ptr() as usize, src.as_ptr() as usize, src.len()) {
        assert_eq!(dst.len(), src.len(), "copy_bytes: lengths differ");
        for (d, s) in dst
            .chunks_mut(SHORT_DISTANCE_PIECE)
            .zip(src.chunks(SHORT_DISTANCE_PIECE))
        {
            d.copy_from_slice(s);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

impl fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemRegion({:#x}+{})", self.addr, self.len)
    }
}

impl MemRegion {
    /// The empty region.
    pub const EMPTY: MemRegion = MemRegion { addr: 0, len: 0 };

    /// A region of `len` bytes at `addr`.
    ///
    /// # Safety
    /// Until every BTL operation given this region (or a sub-region of it)
    /// has completed: the bytes must stay allocated and readable; if any
    /// operation writes them (a receive buffer, the local side of a get, the
    /// target of a put), nothing else may read or write them meanwhile, and
    /// if operations only read them, nothing may write them meanwhile.
    pub unsafe fn new(addr: *const u8, len: usize) -> MemRegion {
        MemRegion {
            addr: addr as usize,
            len,
        }
    }

    /// A region over a slice.
    ///
    /// # Safety
    /// As for [`MemRegion::new`]: the slice's memory must outlive (and, for
    /// a destination, not be touched during) every operation given the region.
    pub unsafe fn from_slice(s: &[u8]) -> MemRegion {
        MemRegion {
            addr: s.as_ptr() as usize,
            len: s.len(),
        }
    }

    /// The start address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-region `[offset, offset + len)`, or `None` when it does not
    /// fit inside this one.
    pub fn slice(&self, offset: usize, len: usize) -> Option<MemRegion> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| MemRegion {
            addr: self.addr + offset,
            len,
        })
    }

    /// Reads the region's bytes.
    pub fn read(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the creator of this region promised (see `new`) that the
        // bytes are allocated, readable and not written by anyone else while
        // operations given the region are in flight, which is when BTLs call
        // this.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// The byte range covered by `count` blocks of `len` bytes, the `k`-th
    /// at `at + k * stride`, when all lie inside the region.
    fn blocks_fit(&self, at: isize, stride: isize, len: usize, count: usize) -> bool {
        if count == 0 || len == 0 {
            return true;
        }
        let last = (count as i128 - 1) * stride as i128 + at as i128;
        let (lo, hi) = (last.min(at as i128), last.max(at as i128) + len as i128);
        lo >= 0 && hi <= self.len as i128
    }

    /// Copies `count` blocks of `len` bytes, the `k`-th at
    /// `at + k * stride` in the region, one after another into `out`
    /// (`out.len() == len * count`); false (and nothing copied) when a
    /// block is outside the region or `out` has the wrong length.
    pub fn gather(
        &self,
        at: isize,
        stride: isize,
        len: usize,
        count: usize,
        out: &mut [u8],
    ) -> bool {
        if len.checked_mul(count) != Some(out.len()) || !self.blocks_fit(at, stride, len, count) {
            return false;
        }
        if out.is_empty() {
            return true;
        }
        let base = self.addr as isize + at;
        #[inline(always)]
        fn blocks<const N: usize>(base: isize, stride: isize, count: usize, out: &mut [u8]) {
            for (k, d) in out.chunks_exact_mut(N).take(count).enumerate() {
                let src = (base + k as isize * stride) as *const u8;
                // SAFETY: block k lies inside the region (blocks_fit), which
                // its creator promised is readable and not written while in
                // flight; `d` is a distinct N-byte slice of `out`.
                unsafe { std::ptr::copy_nonoverlapping(src, d.as_mut_ptr(), N) }
            }
        }
        match len {
            4 => blocks::<4>(base, stride, count, out),
            8 => blocks::<8>(base, stride, count, out),
            16 => blocks::<16>(base, stride, count, out),
            _ => {
                for (k, d) in out.chunks_exact_mut(len).enumerate() {
                    let src = (base + k as isize * stride) as *const u8;
                    // SAFETY: as above, for `len`-byte blocks.
                    unsafe { std::ptr::copy_nonoverlapping(src, d.as_mut_ptr(), len) }
                }
            }
        }
        true
    }

    /// The reverse of [`gather`](Self::gather): `src` (`len * count`
    /// bytes) into the blocks; false (and nothing written) when a block is
    /// outside the region or `src` has the wrong length.
    pub fn scatter(&self, at: isize, stride: isize, len: usize, count: usize, src: &[u8]) -> bool {
        if len.checked_mul(count) != Some(src.len()) || !self.blocks_fit(at, stride, len, count) {
            return false;
        }
        if src.is_empty() {
            return true;
        }
        let base = self.addr as isize + at;
        #[inline(always)]
        fn blocks<const N: usize>(base: isize, stride: isize, src: &[u8]) {
            for (k, s) in src.chunks_exact(N).enumerate() {
                let dst = (base + k as isize * stride) as *mut u8;
                // SAFETY: block k lies inside the region (blocks_fit), which
                // its creator promised is writable and not accessed by anyone
                // else while in flight; `copy` tolerates overlap with `src`.
                unsafe { std::ptr::copy(s.as_ptr(), dst, N) }
            }
        }
        match len {
            4 => blocks::<4>(base, stride, src),
            8 => blocks::<8>(base, stride, src),
            16 => blocks::<16>(base, stride, src),
            _ => {
                for (k, s) in src.chunks_exact(len).enumerate() {
                    let dst = (base + k as isize * stride) as *mut u8;
                    // SAFETY: as above, for `len`-byte blocks.
                    unsafe { std::ptr::copy(s.as_ptr(), dst, len) }
                }
            }
        }
        true
    }

    /// Runs `f` on the region's bytes, writable: for a transport that
    /// receives straight into registered memory.
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        if self.len == 0 {
            return f(&mut []);
        }
        // SAFETY: the creator of this region promised (see `new`) that the
        // bytes are allocated, writable and not accessed by anyone else while
        // an operation given the region is in flight, which is when
        // transports call this; the slice does not outlive `f`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) };
        f(bytes)
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Panics
    /// When `offset + src.len()` exceeds the region (a BTL bug: callers
    /// bound-check peers' offsets first with [`MemRegion::slice`]).
    pub fn write(&self, offset: usize, src: &[u8]) {
        let end = offset.checked_add(src.len()).expect("offset overflow");
        assert!(end <= self.len, "write past the end of {self:?}");
        // One comparison on the small-message path for both the empty and
        // the long copy (0 wraps to the largest length).
        if src.len().wrapping_sub(1) >= SHORT_DISTANCE_MIN - 1 {
            if src.is_empty() {
                return;
            }
            return self.write_long(offset, src);
        }
        let dst = (self.addr + offset) as *mut u8;
        let n = src.len();
        if n <= 16 {
            // The few bytes of a small message, with no call into
            // `memmove`: both (possibly overlapping) words are read before
            // either is written, so an overlapping source is copied right.
            // SAFETY (each block): `dst..dst + n` is in bounds (checked
            // above) and the creator promised the memory is allocated,
            // writable and not accessed by anyone else while a writing
            // operation is in flight; the stores are unaligned ones.
            match n {
                1..=3 => {
                    let (a, b, c) = (src[0], src[n / 2], src[n - 1]);
                    // SAFETY: see above (offsets 0, n / 2, n - 1 < n).
                    unsafe {
                        dst.write(a);
                        dst.add(n / 2).write(b);
                        dst.add(n - 1).write(c);
                    }
                }
                4..=7 => {
                    let (a, b) = (word::<4>(src, 0), word::<4>(src, n - 4));
                    // SAFETY: see above (4 bytes at 0 and at n - 4).
                    unsafe {
                        dst.cast::<[u8; 4]>().write_unaligned(a);
                        dst.add(n - 4).cast::<[u8; 4]>().write_unaligned(b);
                    }
                }
                _ => {
                    let (a, b) = (word::<8>(src, 0), word::<8>(src, n - 8));
                    // SAFETY: see above (8 bytes at 0 and at n - 8, n >= 8).
                    unsafe {
                        dst.cast::<[u8; 8]>().write_unaligned(a);
                        dst.add(n - 8).cast::<[u8; 8]>().write_unaligned(b);
                    }
                }
            }
            return;
        }
        // SAFETY: in bounds (checked above); the creator promised the memory
        // is allocated, writable and not accessed by anyone else while a
        // writing operation is in flight. `copy` tolerates overlap with
        // `src` (a process sending to itself from and into one buffer).
        unsafe {
            std::ptr::copy(src.as_ptr(), dst, src.len());
        }
    }

    /// [`write`](Self::write) of at least `SHORT_DISTANCE_MIN` bytes, in
    /// bounds (checked by the caller): in pieces when the distance is short.
    #[inline(never)]
    fn write_long(&self, offset: usize, src: &[u8]) {
        let dst = self.addr + offset;
        if short_distance(dst, src.as_ptr() as usize, src.len()) {
            // SAFETY: `dst..dst + src.len()` is in bounds (checked by
            // `write`); the creator promised the memory is allocated,
            // writable and not accessed by anyone else while a writing
            // operation is in flight; it is disjoint from `src`
            // (`short_distance` checked it), so the two slices do not alias.
            let d = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, src.len()) };
            copy_bytes(d, src);
        } else {
            // SAFETY: as in `write`; `copy` tolerates overlap.
            unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, copy_small, short_distance, MemRegion};

    fn region(v: &mut [u8]) -> MemRegion {
        // SAFETY: each test keeps `v` alive and untouched while it uses the
        // region.
        unsafe { MemRegion::new(v.as_mut_ptr(), v.len()) }
    }

    #[test]
    fn gather_and_scatter_strided_blocks_of_any_size() {
        for len in [1usize, 3, 4, 8, 16, 24] {
            let mut v: Vec<u8> = (0..=255).cycle().take(64 * len).collect();
            let r = region(&mut v);
            let mut out = vec![0u8; 10 * len];
            // Every other block, forwards.
            assert!(r.gather(len as isize, 2 * len as isize, len, 10, &mut out));
            for k in 0..10 {
                let at = len + 2 * k * len;
                assert_eq!(&out[k * len..(k + 1) * len], &v[at..at + len]);
            }
            // Backwards (negative stride).
            let last = 30 * len as isize;
            assert!(r.gather(last, -3 * len as isize, len, 10, &mut out));
            for k in 0..10 {
                let at = (last - 3 * (k * len) as isize) as usize;
                assert_eq!(&out[k * len..(k + 1) * len], &v[at..at + len]);
            }
            let mut w = vec![0u8; 64 * len];
            let rw = region(&mut w);
            assert!(rw.scatter(0, 3 * len as isize, len, 10, &out));
            for k in 0..10 {
                let at = 3 * k * len;
                assert_eq!(&w[at..at + len], &out[k * len..(k + 1) * len]);
                // The gaps stay untouched.
                assert!(w[at + len..at + 3 * len].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn blocks_outside_the_region_copy_nothing() {
        let mut v = vec![7u8; 100];
        let r = region(&mut v);
        let mut out = vec![0u8; 40];
        // The fifth block would end at 4 * 24 + 8 = 104 > 100.
        assert!(!r.gather(0, 24, 8, 5, &mut out));
        // Before the start.
        assert!(!r.gather(-1, 8, 8, 5, &mut out));
        assert!(!r.gather(32, -16, 8, 5, &mut out));
        // Wrong output length.
        assert!(!r.gather(0, 8, 8, 4, &mut out));
        assert!(out.iter().all(|&b| b == 0));
        assert!(!r.scatter(0, 24, 8, 5, &[1u8; 40]));
        assert!(v.iter().all(|&b| b == 7));
        // Empty is fine.
        assert!(r.gather(0, 8, 8, 0, &mut []));
    }

    #[test]
    fn copies_at_every_distance_are_exact() {
        let len = 5000;
        let src: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut pieces = 0;
        for t in 0..64usize {
            // A destination `t` bytes past the source modulo 4 KiB.
            let mut dst = vec![0u8; len + 8192];
            let at = (src.as_ptr() as usize + t).wrapping_sub(dst.as_ptr() as usize) % 4096;
            assert_eq!(
                (dst[at..].as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % 4096,
                t
            );
            pieces += usize::from(short_distance(
                dst[at..].as_ptr() as usize,
                src.as_ptr() as usize,
                len,
            ));
            copy_bytes(&mut dst[at..at + len], &src);
            assert_eq!(&dst[at..at + len], &src[..], "copy_bytes at distance {t}");
            assert!(dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0));
            dst.fill(0);
            region(&mut dst).write(at, &src);
            assert_eq!(&dst[at..at + len], &src[..], "write at distance {t}");
            assert!(dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0));
        }
        assert_eq!(pieces, 39, "distances 1 to 39 are cut into pieces");
    }

    #[test]
    fn small_copies_of_every_length_are_exact() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=40 {
            for at in 0..4 {
                let mut dst = vec![0u8; 48];
                copy_small(&mut dst[at..at + n], &src[..n]);
                assert_eq!(&dst[at..at + n], &src[..n], "copy_small of {n} at {at}");
                assert!(dst[..at].iter().chain(&dst[at + n..]).all(|&b| b == 0));
                dst.fill(0);
                region(&mut dst).write(at, &src[..n]);
                assert_eq!(&dst[at..at + n], &src[..n], "write of {n} at {at}");
                assert!(dst[..at].iter().chain(&dst[at + n..]).all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn overlapping_ranges_are_never_cut() {
        // A rank sending to itself from and into one buffer: overlapping
        // ranges stay with memmove, whatever their distance.
        let src = 0x10_0000usize;
        for d in [1usize, 8, 12, 39] {
            assert!(!short_distance(src + d, src, 5000), "overlap at {d}");
            assert!(
                short_distance(src + 4096 * 2 + d, src, 5000),
                "disjoint at {d}"
            );
        }
        // Short copies and other distances are left whole.
        assert!(!short_distance(src + 4096 * 2 + 8, src, 2047));
        assert!(!short_distance(src + 4096 * 2 + 40, src, 5000));
        assert!(!short_distance(src + 4096 * 2, src, 5000));
    }
}
