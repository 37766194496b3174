//! The region the rings live in, seen as 64-bit words addressed by byte
//! offset (never by pointer, so the same bytes work at any mapping address).
//!
//! Outside loom a [`Mem`] is a base pointer and a length: shared memory
//! mapped by the caller, or a heap block it keeps alive. Under loom it is a
//! vector of loom atomics, and payload bytes are carried by `Relaxed` word
//! stores and loads, so a missing `Release`/`Acquire` on a record header
//! shows up in the model as a torn or stale payload.

use super::sync::AtomicU64;
#[cfg(not(loom))]
use super::RingError;
use std::sync::Arc;

#[cfg(not(loom))]
use std::{alloc::Layout, ptr::NonNull};

/// Alignment required of a region's base and used for heap regions (two
/// cache lines: adjacent-line prefetch never couples two control blocks).
#[cfg(not(loom))]
pub(crate) const REGION_ALIGN: usize = 128;

/// A heap block owned by the handles that view it.
#[cfg(not(loom))]
struct HeapBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

#[cfg(not(loom))]
impl Drop for HeapBlock {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed once,
        // when the last `Mem` viewing it goes.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the block is plain memory; every access to it goes through the
// ring protocol (atomics, or bytes owned by one side at a time).
#[cfg(not(loom))]
unsafe impl Send for HeapBlock {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Sync for HeapBlock {}

/// A view of `len` bytes of a region.
#[cfg(not(loom))]
pub(crate) struct Mem {
    base: NonNull<u8>,
    len: usize,
    _keep: Option<Arc<dyn Send + Sync>>,
}

// SAFETY: a `Mem` is an address range; the handles that own one access the
// bytes only as the ring protocol allows (atomic words, or payload bytes
// that exactly one side owns at a time), from whichever thread holds them.
#[cfg(not(loom))]
unsafe impl Send for Mem {}

#[cfg(not(loom))]
impl Mem {
    /// A view of caller-provided memory.
    ///
    /// # Safety
    /// `base..base+len` must be valid for reads and writes for as long as any
    /// view derived from this one lives, and be accessed by other parties
    /// only through the ring and inbox protocols.
    pub(crate) unsafe fn from_raw(base: NonNull<u8>, len: usize) -> Result<Mem, RingError> {
        if base.as_ptr() as usize % super::LINE != 0 {
            return Err(RingError::Misaligned);
        }
        Ok(Mem {
            base,
            len,
            _keep: None,
        })
    }

    /// A zeroed heap region of `len` bytes (`len` a multiple of 8).
    pub(crate) fn new_heap(len: usize) -> Mem {
        let layout = Layout::from_size_align(len.max(REGION_ALIGN), REGION_ALIGN)
            .expect("ring region size overflows");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout)
        };
        let block: Arc<dyn Send + Sync> = Arc::new(HeapBlock { ptr, layout });
        Mem {
            base: ptr,
            len,
            _keep: Some(block),
        }
    }

    /// The sub-view `off..off+len` (bounds asserted: a bad offset is a bug
    /// in this module, never peer input).
    pub(crate) fn sub(&self, off: usize, len: usize) -> Mem {
        assert!(off % 8 == 0 && off.checked_add(len).is_some_and(|end| end <= self.len));
        Mem {
            // SAFETY: `off <= self.len`, so the result stays in (or one past)
            // the region and is non-null.
            base: unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off)) },
            len,
            _keep: self._keep.clone(),
        }
    }

    /// The same view, also keeping `owner` (e.g. the mapping the view
    /// lies in) alive as long as it or any sub-view lives.
    pub(crate) fn keeping(mut self, owner: Arc<dyn Send + Sync>) -> Mem {
        self._keep = Some(match self._keep.take() {
            Some(old) => Arc::new((old, owner)),
            None => owner,
        });
        self
    }

    /// Bytes in the view.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The 8-byte word at `off`.
    #[inline(always)]
    pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds (callers compute offsets from validated
        // capacities), 8-aligned (base is 64-aligned, `off` a multiple of 8),
        // valid for the view's lifetime (constructor contract); AtomicU64 has
        // the size and alignment of u64 and is the only way words that may be
        // accessed concurrently are touched.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// Hints the CPU to fetch the cache line at `off` (no effect on
    /// memory; an address past the view is never formed).
    #[inline(always)]
    pub(crate) fn prefetch(&self, off: usize) {
        if off < self.len {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch never faults nor changes memory; `off` is
            // inside the view.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    self.base.as_ptr().add(off).cast::<i8>(),
                );
            }
        }
    }

    /// Evicts the cache line holding `off` from every cache (`CLFLUSHOPT`);
    /// nothing past the view. Memory is unchanged: a hint about where the
    /// line should be when it is next written.
    ///
    /// # Safety
    /// The processor has the instruction: [`can_evict`] returned true.
    #[inline(always)]
    pub(crate) unsafe fn evict(&self, off: usize) {
        if off < self.len {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: CLFLUSHOPT exists on this processor (the caller's
            // contract); it changes no memory and does not fault on an
            // address inside the view, which is mapped.
            unsafe {
                std::arch::asm!(
                    "clflushopt [{0}]",
                    in(reg) self.base.as_ptr().add(off),
                    options(nostack, preserves_flags)
                );
            }
        }
    }

    /// The bytes `off..off+len`, to read.
    ///
    /// # Safety
    /// In bounds, and no other party writes them while the slice lives (the
    /// ring protocol gives them to the caller).
    #[inline(always)]
    pub(crate) unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) }
    }

    /// The bytes `off..off+len`, to write.
    ///
    /// # Safety
    /// In bounds, and nobody else reads or writes them while the slice lives
    /// (the ring protocol gives them to the caller alone).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) }
    }
}

/// Under loom: a vector of loom atomics, one per 8-byte word.
#[cfg(loom)]
pub(crate) struct Mem {
    words: Arc<[AtomicU64]>,
    start: usize,
    len: usize,
}

#[cfg(loom)]
impl Mem {
    pub(crate) fn new_heap(len: usize) -> Mem {
        let words: Vec<AtomicU64> = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        Mem {
            words: words.into(),
            start: 0,
            len,
        }
    }

    pub(crate) fn sub(&self, off: usize, len: usize) -> Mem {
        assert!(off % 8 == 0 && off + len <= self.len);
        Mem {
            words: self.words.clone(),
            start: self.start + off,
            len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len);
        &self.words[(self.start + off) / 8]
    }

    /// Payload bytes out, word by word (`Relaxed`: only the header's
    /// Acquire/Release may make them visible).
    pub(crate) fn load_bytes(&self, off: usize, dst: &mut [u8]) {
        use super::sync::Ordering::Relaxed;
        for (i, chunk) in dst.chunks_mut(8).enumerate() {
            let w = self.word(off + 8 * i).load(Relaxed).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }

    /// Payload bytes in, word by word, the tail of the last word zeroed (it
    /// belongs to the same record).
    pub(crate) fn store_bytes(&self, off: usize, src: &[u8]) {
        use super::sync::Ordering::Relaxed;
        for (i, chunk) in src.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(off + 8 * i).store(u64::from_le_bytes(w), Relaxed);
        }
    }
}

/// Whether [`Mem::evict`] may be called: an x86-64 processor with
/// `CLFLUSHOPT` (CPUID leaf 7, EBX bit 23), looked up once.
#[cfg(not(loom))]
pub(crate) fn can_evict() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(has_clflushopt)
}

#[cfg(all(not(loom), target_arch = "x86_64"))]
fn has_clflushopt() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Safe functions since Rust 1.9x; `unsafe fn`s at the declared
    // rust-version (1.80).
    #[allow(unused_unsafe)]
    // SAFETY: every x86-64 processor has CPUID; leaf 7 is read only when
    // leaf 0 says it exists.
    unsafe {
        __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 23) != 0
    }
}

#[cfg(all(not(loom), not(target_arch = "x86_64")))]
fn has_clflushopt() -> bool {
    false
}
