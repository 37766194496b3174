//! The Rust API's small-message path must not touch the heap once warm: a
//! counting global allocator checks that windows of non-blocking receives in
//! a scope per window, eager sends to the process itself and waits allocate
//! nothing (a singleton: no launcher needed). A scope reuses the entries of
//! the thread's last scope, so opening one per window costs no allocation.
//!
//! One test only: MPI is initialized once per process.

#[path = "../../oxmpi-match/tests/support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations;
use oxmpi::traits::*;

/// Receives in flight at once in a window.
const WINDOW: usize = 8;

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
}
