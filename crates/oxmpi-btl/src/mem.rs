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

    /// Copies `src` into the region at `offset`.
    ///
    /// # Panics
    /// When `offset + src.len()` exceeds the region (a BTL bug: callers
    /// bound-check peers' offsets first with [`MemRegion::slice`]).
    pub fn write(&self, offset: usize, src: &[u8]) {
        let end = offset.checked_add(src.len()).expect("offset overflow");
        assert!(end <= self.len, "write past the end of {self:?}");
        if src.is_empty() {
            return;
        }
        // SAFETY: in bounds (checked above); the creator promised the memory
        // is allocated, writable and not accessed by anyone else while a
        // writing operation is in flight. `copy` tolerates overlap with
        // `src` (a process sending to itself from and into one buffer).
        unsafe {
            std::ptr::copy(src.as_ptr(), (self.addr + offset) as *mut u8, src.len());
        }
    }
}
