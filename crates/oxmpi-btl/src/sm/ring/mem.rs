//! The region the rings live in, seen as 64-bit words addressed by byte
//! offset (never by pointer, so the same bytes work at any mapping address).
//!
//! This is the ring's one seam with loom (the tokio/crossbeam shim habit):
//! the ring and inbox code is the same in both builds, and only [`Mem`]
//! (with the atomics of `sync`) differs.
//!
//! * Outside loom a [`Mem`] is a base pointer and a length: shared memory
//!   mapped by the caller ([`Mem::from_raw`]), or a heap block it keeps
//!   alive. Words are atomics in that memory and payload bytes are that
//!   memory.
//! * Under loom (`--cfg loom`) a [`Mem`] is a vector of loom atomics, one per
//!   8-byte word, shared by every view of a region, plus bytes private to
//!   the handle that holds the view. Payload bytes travel between the two
//!   with `Relaxed` word stores and loads, so a record header published
//!   without `Release` (or read without `Acquire`) shows up in the model as
//!   a torn or stale payload.
//!
//! Payload bytes change hands at two points, which the ring code names:
//! [`Mem::commit_bytes`] after a writer filled bytes from
//! [`Mem::bytes_mut`] and before the `Release` store that publishes them,
//! and [`Mem::fetch_bytes`] after the `Acquire` load that gave a reader
//! bytes and before it reads them with [`Mem::bytes`]. Outside loom both do
//! nothing (the bytes are the memory, and the calls compile to nothing);
//! under loom they move the bytes between the handle and the shared words.
//! Both take `&mut self`, so no slice of the range is alive meanwhile.

#[cfg(all(test, not(loom)))]
pub(crate) use imp::REGION_ALIGN;
pub(crate) use imp::{can_evict, Mem};

#[cfg(not(loom))]
mod imp {
    use super::super::sync::AtomicU64;
    use super::super::RingError;
    use std::sync::Arc;
    use std::{alloc::Layout, ptr::NonNull};

    /// Alignment required of a region's base and used for heap regions
    /// (two cache lines: adjacent-line prefetch never couples two control
    /// blocks).
    pub(crate) const REGION_ALIGN: usize = 128;

    /// A heap block owned by the handles that view it.
    struct HeapBlock {
        ptr: NonNull<u8>,
        layout: Layout,
    }

    impl Drop for HeapBlock {
        fn drop(&mut self) {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed
            // once, when the last `Mem` viewing it goes.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }

    // SAFETY: the block is plain memory; every access to it goes through the
    // ring protocol (atomics, or bytes owned by one side at a time).
    unsafe impl Send for HeapBlock {}
    // SAFETY: as above.
    unsafe impl Sync for HeapBlock {}

    /// A view of `len` bytes of a region.
    pub(crate) struct Mem {
        base: NonNull<u8>,
        len: usize,
        _keep: Option<Arc<dyn Send + Sync>>,
    }

    // SAFETY: a `Mem` is an address range; the handles that own one access
    // the bytes only as the ring protocol allows (atomic words, or payload
    // bytes that exactly one side owns at a time), from whichever thread
    // holds them.
    unsafe impl Send for Mem {}

    impl Mem {
        /// A view of caller-provided memory.
        ///
        /// # Safety
        /// `base..base+len` must be valid for reads and writes for as long
        /// as any view derived from this one lives, and be accessed by other
        /// parties only through the ring and inbox protocols.
        pub(crate) unsafe fn from_raw(base: NonNull<u8>, len: usize) -> Result<Mem, RingError> {
            if base.as_ptr() as usize % super::super::LINE != 0 {
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

        /// The sub-view `off..off+len` (bounds asserted: a bad offset is a
        /// bug in this module, never peer input).
        pub(crate) fn sub(&self, off: usize, len: usize) -> Mem {
            assert!(off % 8 == 0 && off.checked_add(len).is_some_and(|end| end <= self.len));
            Mem {
                // SAFETY: `off <= self.len`, so the result stays in (or one
                // past) the region and is non-null.
                base: unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off)) },
                len,
                _keep: self._keep.clone(),
            }
        }

        /// Also keeps `owner` (e.g. the mapping the view lies in) alive as
        /// long as this view or any sub-view made from now on lives.
        pub(crate) fn keep(&mut self, owner: Arc<dyn Send + Sync>) {
            self._keep = Some(match self._keep.take() {
                Some(old) => Arc::new((old, owner)),
                None => owner,
            });
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
            // capacities), 8-aligned (base is 64-aligned, `off` a multiple
            // of 8), valid for the view's lifetime (constructor contract);
            // AtomicU64 has the size and alignment of u64 and is the only
            // way words that may be accessed concurrently are touched.
            unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
        }

        /// The 4-byte word at `off` (a futex word: the doorbell's), never
        /// accessed as part of an 8-byte word.
        #[inline(always)]
        pub(crate) fn word32(&self, off: usize) -> &std::sync::atomic::AtomicU32 {
            debug_assert!(off % 4 == 0 && off + 4 <= self.len);
            // SAFETY: as for `word`, with 4-byte size and alignment; the
            // callers access the word at `off` only through this method.
            unsafe {
                &*self
                    .base
                    .as_ptr()
                    .add(off)
                    .cast::<std::sync::atomic::AtomicU32>()
            }
        }

        /// Hints the CPU to fetch the cache line at `off` (no effect on
        /// memory; an address past the view is never formed).
        #[inline(always)]
        pub(crate) fn prefetch(&self, off: usize) {
            if off < self.len {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: a prefetch never faults nor changes memory; `off`
                // is inside the view.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        self.base.as_ptr().add(off).cast::<i8>(),
                    );
                }
            }
        }

        /// Evicts the cache line holding `off` from every cache
        /// (`CLFLUSHOPT`); nothing past the view. Memory is unchanged: a
        /// hint about where the line should be when it is next written.
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

        /// The bytes `off..off+len`, to read (after [`Mem::fetch_bytes`]).
        ///
        /// # Safety
        /// In bounds, and no other party writes them while the slice lives
        /// (the ring protocol gives them to the caller).
        #[inline(always)]
        pub(crate) unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
            debug_assert!(off + len <= self.len);
            // SAFETY: per this function's contract.
            unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) }
        }

        /// The bytes `off..off+len`, to write (then [`Mem::commit_bytes`]).
        ///
        /// # Safety
        /// In bounds, and nobody else reads or writes them while the slice
        /// lives (the ring protocol gives them to the caller alone).
        #[inline(always)]
        #[allow(clippy::mut_from_ref)]
        pub(crate) unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
            debug_assert!(off + len <= self.len);
            // SAFETY: per this function's contract.
            unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) }
        }

        /// Bytes `off..off+len` written through [`Mem::bytes_mut`] are
        /// complete, and a `Release` store follows to publish them. Nothing
        /// to do here: they are the memory.
        #[inline(always)]
        pub(crate) fn commit_bytes(&mut self, _off: usize, _len: usize) {}

        /// Bytes `off..off+len` were published to this side (an `Acquire`
        /// load saw them) and [`Mem::bytes`] reads them next. Nothing to do
        /// here: they are the memory.
        #[inline(always)]
        pub(crate) fn fetch_bytes(&mut self, _off: usize, _len: usize) {}
    }

    /// Whether [`Mem::evict`] may be called: an x86-64 processor with
    /// `CLFLUSHOPT` (CPUID leaf 7, EBX bit 23), looked up once.
    pub(crate) fn can_evict() -> bool {
        static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *CAN.get_or_init(has_clflushopt)
    }

    #[cfg(target_arch = "x86_64")]
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

    #[cfg(not(target_arch = "x86_64"))]
    fn has_clflushopt() -> bool {
        false
    }
}

#[cfg(loom)]
mod imp {
    use super::super::sync::{AtomicU64, Ordering::Relaxed};
    use std::cell::UnsafeCell;
    use std::sync::Arc;

    /// A view of `len` bytes of a region: the region's shared words (loom
    /// atomics), and this handle's own copy of the view's bytes, which
    /// [`Mem::bytes`] and [`Mem::bytes_mut`] hand out.
    pub(crate) struct Mem {
        words: Arc<[AtomicU64]>,
        start: usize,
        len: usize,
        local: Box<[UnsafeCell<u8>]>,
        _keep: Option<Arc<dyn Send + Sync>>,
    }

    // SAFETY: the local bytes belong to this view alone and move with it;
    // the words are loom atomics.
    unsafe impl Send for Mem {}

    impl Mem {
        /// A zeroed region of `len` bytes.
        pub(crate) fn new_heap(len: usize) -> Mem {
            let words: Vec<AtomicU64> = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
            Mem::view(words.into(), 0, len, None)
        }

        fn view(
            words: Arc<[AtomicU64]>,
            start: usize,
            len: usize,
            keep: Option<Arc<dyn Send + Sync>>,
        ) -> Mem {
            Mem {
                words,
                start,
                len,
                local: (0..len.next_multiple_of(8))
                    .map(|_| UnsafeCell::new(0))
                    .collect(),
                _keep: keep,
            }
        }

        /// The sub-view `off..off+len`, with bytes of its own.
        pub(crate) fn sub(&self, off: usize, len: usize) -> Mem {
            assert!(off % 8 == 0 && off.checked_add(len).is_some_and(|end| end <= self.len));
            Mem::view(
                self.words.clone(),
                self.start + off,
                len,
                self._keep.clone(),
            )
        }

        /// Also keeps `owner` alive.
        pub(crate) fn keep(&mut self, owner: Arc<dyn Send + Sync>) {
            self._keep = Some(match self._keep.take() {
                Some(old) => Arc::new((old, owner)),
                None => owner,
            });
        }

        /// Bytes in the view.
        pub(crate) fn len(&self) -> usize {
            self.len
        }

        /// The 8-byte word at `off`.
        pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
            assert!(off % 8 == 0 && off + 8 <= self.len);
            &self.words[(self.start + off) / 8]
        }

        /// No memory effect, nothing to model.
        pub(crate) fn prefetch(&self, off: usize) {
            let _ = off;
        }

        /// No memory effect, nothing to model.
        ///
        /// # Safety
        /// None under loom (the native contract: [`can_evict`] was true).
        pub(crate) unsafe fn evict(&self, off: usize) {
            let _ = off;
        }

        /// This handle's copy of bytes `off..off+len`.
        ///
        /// # Safety
        /// In bounds.
        pub(crate) unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
            assert!(off + len <= self.local.len());
            // SAFETY: in bounds; `UnsafeCell<u8>` has the layout of `u8`;
            // the copy is written only by `fetch_bytes` (`&mut self`: no
            // slice lives then) and through `bytes_mut`, whose contract
            // excludes a reader of the same bytes.
            unsafe {
                std::slice::from_raw_parts(UnsafeCell::raw_get(self.local.as_ptr().add(off)), len)
            }
        }

        /// This handle's copy of bytes `off..off+len`, to write.
        ///
        /// # Safety
        /// In bounds, and no other slice of the same bytes lives meanwhile.
        #[allow(clippy::mut_from_ref)]
        pub(crate) unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
            assert!(off + len <= self.local.len());
            // SAFETY: as `bytes`, and the caller holds no other slice of
            // these bytes.
            unsafe {
                std::slice::from_raw_parts_mut(
                    UnsafeCell::raw_get(self.local.as_ptr().add(off)),
                    len,
                )
            }
        }

        /// Stores the words holding this handle's bytes `off..off+len` into
        /// the region (`Relaxed`: only the `Release` store that follows may
        /// make them visible).
        pub(crate) fn commit_bytes(&mut self, off: usize, len: usize) {
            for at in (off..off + len).step_by(8) {
                let w = u64::from_le_bytes(self.local_word(at));
                self.word(at).store(w, Relaxed);
            }
        }

        /// Loads the words holding bytes `off..off+len` from the region
        /// into this handle's copy (`Relaxed`: only the `Acquire` load
        /// before may have made them visible).
        pub(crate) fn fetch_bytes(&mut self, off: usize, len: usize) {
            for at in (off..off + len).step_by(8) {
                let w = self.word(at).load(Relaxed).to_le_bytes();
                for (i, b) in w.into_iter().enumerate() {
                    *self.local[at + i].get_mut() = b;
                }
            }
        }

        fn local_word(&mut self, at: usize) -> [u8; 8] {
            std::array::from_fn(|i| *self.local[at + i].get_mut())
        }
    }

    /// Under loom eviction is a no-op that may always run (its only memory
    /// access, the look at the line's first word, is modelled).
    pub(crate) fn can_evict() -> bool {
        true
    }
}
