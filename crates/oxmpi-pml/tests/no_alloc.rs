//! The PML's small-message path must not touch the heap once warm: a
//! counting global allocator checks that eager receives posted first (one at
//! a time and a window of 64), eager messages that arrive first, blocking-
//! style inline sends and `isend`s that complete inline allocate nothing,
//! over the self BTL.
//!
//! This test binary is its own crate; the library stays
//! `#![forbid(unsafe_code)]`. The `unsafe` here is the allocator shim and
//! the test's own buffers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, Ob1, PeerDesc, PmlConfig, ReqId, SendMode};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WINDOW: usize = 64;

/// One round of every small-message pattern; `ids` is reused.
fn round(o: &mut Ob1<dyn Btl>, send: &Buffer, slots: &[Buffer], ids: &mut Vec<ReqId>) {
    let recv = |o: &mut Ob1<dyn Btl>, b: &Buffer, tag: i32| {
        o.irecv(b.clone(), Source::Rank(0), Tag::Value(tag), 0)
            .expect("irecv")
    };
    let done = |o: &mut Ob1<dyn Btl>, id: ReqId, len: usize| {
        let st = o.test(id).expect("test").expect("complete");
        assert_eq!(st.bytes, len);
    };
    // Posted first, one at a time, sent the blocking way.
    let id = recv(o, &slots[0], 1);
    o.send_inline(send, 0, 1, 0, SendMode::Standard)
        .expect("an eager send goes inline");
    o.progress();
    done(o, id, 8);
    // A window of 64 posted receives, then 64 isends that complete inline.
    ids.clear();
    for b in slots {
        ids.push(recv(o, b, 2));
    }
    for _ in 0..WINDOW {
        let s = o.isend(send.clone(), 0, 2, 0, SendMode::Standard).unwrap();
        assert!(o.is_complete(s).unwrap(), "completed inside isend");
        done(o, s, 8);
    }
    o.progress();
    for &id in ids.iter() {
        done(o, id, 8);
    }
    // Arrived first (unexpected), then received.
    o.send_inline(send, 0, 3, 0, SendMode::Ready)
        .expect("an eager send goes inline");
    o.progress();
    let id = recv(o, &slots[1], 3);
    done(o, id, 8);
}

#[test]
fn the_small_message_path_allocates_nothing_once_warm() {
    let peers = vec![PeerDesc {
        local: true,
        cards: vec![None],
    }];
    let btls: Vec<Box<dyn Btl>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
    let mut o = Ob1::new(PmlConfig::default(), 0, btls, &peers).expect("engine");
    o.add_comm(0, vec![0], 0).expect("communicator");
    let mut sbuf = vec![7u8; 8];
    let mut rbuf = vec![0u8; 8 * WINDOW];
    // SAFETY: `sbuf` outlives every send and is not touched meanwhile.
    let send = Buffer::Contig(unsafe { MemRegion::new(sbuf.as_mut_ptr(), 8) });
    let slots: Vec<Buffer> = rbuf
        .chunks_mut(8)
        // SAFETY: `rbuf` outlives every receive; each receive completes
        // before its slot is given to another.
        .map(|c| Buffer::Contig(unsafe { MemRegion::new(c.as_mut_ptr(), c.len()) }))
        .collect();
    let mut ids = Vec::with_capacity(WINDOW);
    for _ in 0..50 {
        round(&mut o, &send, &slots, &mut ids);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..200 {
        round(&mut o, &send, &slots, &mut ids);
    }
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(n, 0, "{n} allocations in 200 warm rounds");
    assert_eq!(rbuf[8 * WINDOW - 1], 7, "the data arrived");
    drop(o);
}
