//! A `Multiple` universe confined to one thread
//! (`Universe::confine_to_this_thread`, what the C layer does for
//! `MPI_THREAD_SINGLE` and `FUNNELED`): its handles may cross threads, so
//! the engine checks: a call from another thread fails (a panic, never a
//! data race), `oxmpi::universe()` answers `None` there, and the owning
//! thread goes on working. A singleton: no launcher needed.
//!
//! One test only: MPI is initialized once per process.

use oxmpi::traits::*;

#[test]
fn a_confined_universe_refuses_other_threads() {
    let universe = oxmpi::initialize_with_threading(oxmpi::Threading::Multiple).expect("MPI");
    let world = universe.world();
    let me = world.process_at_rank(world.rank());
    me.send_with_tag(&[1u8; 8][..], 1).expect("send");
    universe.confine_to_this_thread();
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            assert!(
                oxmpi::universe().is_none(),
                "confined elsewhere: no universe"
            );
            // A handle that crossed threads: the engine refuses it.
            me.send_with_tag(&[2u8; 8][..], 2)
        });
        assert!(
            other.join().is_err(),
            "a call from another thread must fail"
        );
    });
    // The owner goes on: the message sent before, then new traffic.
    let (v, st) = world
        .process_at_rank(world.rank())
        .receive_vec_with_tag::<u8>(1)
        .expect("receive");
    assert_eq!((v, st.tag()), (vec![1u8; 8], 1));
    me.send_with_tag(&[3u8; 8][..], 3).expect("send");
    let (v, _) = me.receive_vec_with_tag::<u8>(3).expect("receive");
    assert_eq!(v, vec![3u8; 8]);
    assert!(oxmpi::universe().is_some());
}
