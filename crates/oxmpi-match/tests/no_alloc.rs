//! Steady-state matching must not touch the heap: a counting global
//! allocator checks that, once warm, posts, arrivals (matched, unexpected,
//! parked and drained), probes, matched probes and cancels allocate nothing.
//!
//! This test binary is its own crate; the library itself stays
//! `#![forbid(unsafe_code)]`. The only `unsafe` is the allocator shim
//! (`support/counting_alloc.rs`).

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations;
use oxmpi_match::{Engine, PostOutcome, ProbeOutcome, Source, Tag};

/// One round of mixed traffic on context 1 with 4 peers; `seq` is the next
/// sequence number per peer.
fn round(e: &mut Engine<u32, u32>, seq: &mut [u16; 4]) {
    let mut next = |p: usize| {
        let s = seq[p];
        seq[p] = s.wrapping_add(1);
        s
    };
    // Expected case: specific receive posted, then matching arrival.
    let PostOutcome::Posted(_) = e.post_recv(1, Source::Rank(0), Tag::Value(5), 1).unwrap() else {
        panic!()
    };
    e.handle_arrival(1, 0, 5, next(0), 64, 10).unwrap();
    assert!(e.poll_matched().is_some());
    // Wildcard receive then arrival.
    let PostOutcome::Posted(_) = e.post_recv(1, Source::Any, Tag::Any, 2).unwrap() else {
        panic!()
    };
    e.handle_arrival(1, 1, 7, next(1), 64, 11).unwrap();
    assert!(e.poll_matched().is_some());
    // Unexpected, probed, then received by a specific post.
    e.handle_arrival(1, 2, 9, next(2), 64, 12).unwrap();
    e.poll_matched();
    assert!(e.iprobe(1, Source::Any, Tag::Value(9)).unwrap().is_some());
    let PostOutcome::Matched(_) = e.post_recv(1, Source::Rank(2), Tag::Value(9), 3).unwrap() else {
        panic!()
    };
    // Out of order: park two, then release them with the missing one.
    let (a, b, c) = (next(3), next(3), next(3));
    e.handle_arrival(1, 3, 1, c, 8, 13).unwrap();
    e.handle_arrival(1, 3, 1, b, 8, 14).unwrap();
    e.handle_arrival(1, 3, 1, a, 8, 15).unwrap();
    while e.poll_matched().is_some() {}
    let Some(ProbeOutcome::Found(_)) = e.improbe(1, Source::Rank(3), Tag::Any).unwrap() else {
        panic!()
    };
    let PostOutcome::Matched(_) = e.post_recv(1, Source::Any, Tag::Value(1), 4).unwrap() else {
        panic!()
    };
    let PostOutcome::Matched(_) = e.post_recv(1, Source::Rank(3), Tag::Value(1), 4).unwrap() else {
        panic!()
    };
    // Post and cancel.
    let PostOutcome::Posted(h) = e.post_recv(1, Source::Rank(1), Tag::Value(3), 5).unwrap() else {
        panic!()
    };
    assert_eq!(e.cancel(h), Some(5));
}

#[test]
fn steady_state_does_not_allocate() {
    let mut e: Engine<u32, u32> = Engine::with_capacity(64, 64);
    e.add_context(1, 4).unwrap();
    // Background load so the hash maps and lists are non-trivial.
    for t in 100..200 {
        let PostOutcome::Posted(_) = e.post_recv(1, Source::Rank(1), Tag::Value(t), 0).unwrap()
        else {
            panic!()
        };
    }
    let mut seq = [0u16; 4];
    for _ in 0..100 {
        round(&mut e, &mut seq);
    }
    let before = allocations();
    for _ in 0..70_000 {
        // Crosses the u16 wrap for every peer.
        round(&mut e, &mut seq);
    }
    let after = allocations();
    assert_eq!(after - before, 0, "steady-state path allocated");
}
