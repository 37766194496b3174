//! At `MPI_THREAD_SINGLE` the PML takes no lock: one thread alone may reach
//! it. Another thread gets no universe from `oxmpi::universe()`, and a
//! request polled as a future still completes when the progress thread (a
//! second thread in the PML, which turns the lock back on first) drives it.
//! A singleton: no launcher needed.
//!
//! One test only: MPI is initialized once per process.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use oxmpi::traits::*;

/// Wakes a parked thread, and remembers it did.
struct Unpark(std::thread::Thread, AtomicBool);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.store(true, Ordering::Release);
        self.0.unpark();
    }
}

#[test]
fn a_single_threaded_universe_stays_on_its_thread() {
    let universe = oxmpi::initialize().expect("MPI start-up");
    assert!(
        oxmpi::universe().is_some(),
        "the initializing thread sees it"
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(
                oxmpi::universe().is_none(),
                "no other thread may call MPI at MPI_THREAD_SINGLE"
            );
        });
    });
    let world = universe.world();
    let me = world.process_at_rank(world.rank());
    // Eager traffic on the unlocked path, then a receive completed by the
    // progress thread while this one is parked.
    let mut got = [0u32; 4];
    for round in 0..100u32 {
        oxmpi::request::scope(|s| {
            let r = me
                .immediate_receive_into_with_tag(s, &mut got[..], 3)
                .expect("irecv");
            me.send_with_tag(&[round; 4][..], 3).expect("send");
            r.wait().expect("wait");
        });
        assert_eq!(got, [round; 4]);
    }
    let mut late = [0u8; 16];
    oxmpi::request::scope(|s| {
        let r = me
            .immediate_receive_into_with_tag(s, &mut late[..], 4)
            .expect("irecv");
        let unpark = Arc::new(Unpark(std::thread::current(), AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&unpark));
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(r);
        // Nothing sent yet: pending, which starts the progress thread.
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        // Now two threads are in the PML: this send and the progress
        // thread, which alone delivers the message (this thread does not
        // poll until woken) and wakes this one.
        me.send_with_tag(&[9u8; 16][..], 4).expect("send");
        let t0 = std::time::Instant::now();
        while !unpark.1.load(Ordering::Acquire) {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the progress thread never completed the receive"
            );
            std::thread::park_timeout(std::time::Duration::from_millis(10));
        }
        let Poll::Ready(st) = fut.as_mut().poll(&mut cx) else {
            panic!("woken before the receive completed");
        };
        let st = st.expect("the receive completes");
        assert_eq!(st.count::<u8>(), Some(16));
    });
    assert_eq!(late, [9u8; 16]);
    // Locked since the progress thread started: still correct.
    for round in 0..100u32 {
        me.send_with_tag(&[round; 4][..], 5).expect("send");
        let (v, _) = me_receive(&world, 5);
        assert_eq!(v, vec![round; 4]);
    }
}

fn me_receive(w: &oxmpi::Communicator<'_>, tag: i32) -> (Vec<u32>, oxmpi::Status) {
    w.process_at_rank(w.rank())
        .receive_vec_with_tag::<u32>(tag)
        .expect("receive")
}
