//! The Rust API's small-message path must not touch the heap once warm: a
//! counting global allocator checks that windows of non-blocking receives in
//! a scope per window, eager sends to the process itself and waits allocate
//! nothing (a singleton: no launcher needed). A scope reuses the entries of
//! the thread's last scope, so opening one per window costs no allocation.
//! Neither do owned sends completed together by `wait_all_drain` with the
//! request vector reused, or by `wait_all_slots` from slots on the stack.
//!
//! One test only: MPI is initialized once per process.

#[path = "../../oxmpi-match/tests/support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations;
use oxmpi::traits::*;

/// Receives in flight at once in a window.
const WINDOW: usize = 8;

/// Runs `round` 50 times to warm up, then 200 times: the allocations the
/// 200 made.
fn warm_then_count(mut round: impl FnMut()) -> usize {
    for _ in 0..50 {
        round();
    }
    let before = allocations();
    for _ in 0..200 {
        round();
    }
    allocations() - before
}

#[test]
fn a_scope_per_window_allocates_nothing_once_warm() {
    let universe = oxmpi::initialize().expect("MPI start-up");
    let world = universe.world();
    let me = world.process_at_rank(world.rank());
    let out = [5u8; 8];
    let mut slots = [[0u8; 8]; WINDOW];
    let round = |slots: &mut [[u8; 8]; WINDOW]| {
        oxmpi::request::scope(|s| {
            let mut it = slots.iter_mut();
            let reqs: [_; WINDOW] = std::array::from_fn(|_| {
                let b = it.next().expect("a slot per receive");
                me.immediate_receive_into_with_tag(s, b, 1).expect("irecv")
            });
            for _ in 0..WINDOW {
                me.send_with_tag(&out, 1).expect("send");
            }
            for r in reqs {
                assert_eq!(r.wait().expect("wait").count::<u8>(), Some(8));
            }
        });
    };
    for _ in 0..50 {
        round(&mut slots);
    }
    slots = [[0u8; 8]; WINDOW];
    let before = allocations();
    for _ in 0..200 {
        round(&mut slots);
    }
    let n = allocations() - before;
    assert_eq!(n, 0, "{n} allocations in 200 warm windows");
    assert!(slots.iter().all(|b| *b == out), "the data arrived");

    // Owned sends completed together by `wait_all_drain` (what the C
    // `MPI_Waitall` uses), their buffers and the request vector reused.
    let mut pool: Vec<Vec<u8>> = (0..WINDOW).map(|i| vec![i as u8; 8]).collect();
    let mut reqs = Vec::with_capacity(WINDOW);
    let mut got = [0u8; 8];
    let mut owned_round = |pool: &mut Vec<Vec<u8>>, got: &mut [u8; 8]| {
        for b in pool.drain(..) {
            reqs.push(me.immediate_send_owned_with_tag(b, 2).expect("isend"));
        }
        for _ in 0..WINDOW {
            me.receive_into_with_tag(&mut got[..], 2).expect("recv");
        }
        oxmpi::request::wait_all_drain(&mut reqs, |i, b, st| {
            assert!(st.error().is_none());
            assert_eq!(b, [i as u8; 8]);
            pool.push(b);
        });
        assert!(reqs.is_empty());
    };
    let n = warm_then_count(|| owned_round(&mut pool, &mut got));
    assert_eq!(n, 0, "{n} allocations in 200 warm wait_all_drain windows");
    assert_eq!(got, [WINDOW as u8 - 1; 8], "the last message arrived last");

    // The same through `wait_all_slots` (what the C `MPI_Waitall` uses for
    // up to `WAIT_FEW` requests): slots on the stack, nothing allocated
    // but the data themselves, outcomes in slot order.
    const { assert!(WINDOW <= oxmpi::request::WAIT_FEW) };
    let slots_round = |pool: &mut Vec<Vec<u8>>, got: &mut [u8; 8]| {
        let mut slots: [Option<_>; WINDOW] = Default::default();
        for (s, b) in slots.iter_mut().zip(pool.drain(..)) {
            *s = Some(me.immediate_send_owned_with_tag(b, 3).expect("isend"));
        }
        for _ in 0..WINDOW {
            me.receive_into_with_tag(&mut got[..], 3).expect("recv");
        }
        let mut next = 0;
        oxmpi::request::wait_all_slots(&mut slots, |i, b, st| {
            assert_eq!(i, next, "outcomes in slot order");
            next += 1;
            assert!(st.error().is_none());
            assert_eq!(b, [i as u8; 8]);
            pool.push(b);
        });
        assert_eq!(next, WINDOW);
        assert!(slots.iter().all(Option::is_none), "every slot emptied");
    };
    let n = warm_then_count(|| slots_round(&mut pool, &mut got));
    assert_eq!(n, 0, "{n} allocations in 200 warm wait_all_slots windows");

    // More slots than `WAIT_FEW`: the same outcomes, through the vectors.
    let many = oxmpi::request::WAIT_FEW + 3;
    let mut slots: Vec<Option<_>> = (0..many)
        .map(|i| {
            Some(
                me.immediate_send_owned_with_tag(vec![i as u8; 8], 4)
                    .expect("isend"),
            )
        })
        .collect();
    for i in 0..many {
        me.receive_into_with_tag(&mut got[..], 4).expect("recv");
        assert_eq!(got, [i as u8; 8]);
    }
    let mut seen = Vec::new();
    oxmpi::request::wait_all_slots(&mut slots, |i, b, st| {
        assert!(st.error().is_none());
        assert_eq!(b, [i as u8; 8]);
        seen.push(i);
    });
    assert_eq!(seen, (0..many).collect::<Vec<_>>());
    assert!(slots.iter().all(Option::is_none));
}
