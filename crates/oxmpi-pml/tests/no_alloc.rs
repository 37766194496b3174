//! The PML's small-message path must not touch the heap once warm: a
//! counting global allocator checks that eager receives posted first (one at
//! a time and a window of 64), eager messages that arrive first and
//! `isend`s that complete inline (the path of a small blocking send too)
//! allocate nothing, over the self BTL.
//!
//! This test binary is its own crate (the library denies `unsafe` outside
//! its engine cell). The `unsafe` here is in the shared support: the
//! allocator shim and the rank's buffers.

#[path = "../../oxmpi-match/tests/support/counting_alloc.rs"]
mod counting_alloc;
mod support;

use counting_alloc::allocations;
use oxmpi_btl::btl::Btl;
use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, Ob1, ReqId, SendMode};
use support::self_rank::SelfRank;

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
    // Posted first, one at a time.
    let id = recv(o, &slots[0], 1);
    let s = o.isend(send.clone(), 0, 1, 0, SendMode::Standard).unwrap();
    assert!(s.completed_inline(), "an eager send goes inline");
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
    let s = o.isend(send.clone(), 0, 3, 0, SendMode::Ready).unwrap();
    assert!(s.completed_inline(), "an eager send goes inline");
    o.progress();
    let id = recv(o, &slots[1], 3);
    done(o, id, 8);
}

#[test]
fn the_small_message_path_allocates_nothing_once_warm() {
    let mut r = SelfRank::new(WINDOW, 7);
    let mut ids = Vec::with_capacity(WINDOW);
    for _ in 0..50 {
        round(&mut r.o, &r.send, &r.slots, &mut ids);
    }
    let before = allocations();
    for _ in 0..200 {
        round(&mut r.o, &r.send, &r.slots, &mut ids);
    }
    let n = allocations() - before;
    assert_eq!(n, 0, "{n} allocations in 200 warm rounds");
    assert_eq!(r.last_byte(), 7, "the data arrived");
}
