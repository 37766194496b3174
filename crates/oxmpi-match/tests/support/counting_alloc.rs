//! A global allocator that counts allocations, for the tests that check a
//! path touches no heap once warm (`oxmpi-match` and `oxmpi-pml`
//! `tests/no_alloc.rs`). The only `unsafe` is this forwarding shim.
//!
//! Allocations are counted per thread: a test checks the path its own
//! thread runs, and a thread of the test harness or of the library (the
//! registration cache's memory watcher, for one) allocating meanwhile is
//! no allocation of that path (it made such a test fail, rarely, under
//! load).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Const-initialized and without a destructor: using it never allocates.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // A thread being torn down has no counter left: not counted.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations (and reallocations) so far on the calling thread.
pub fn allocations() -> usize {
    ALLOCS.with(Cell::get)
}
