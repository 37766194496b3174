//! The receiving side of the message-rate window over a real transport,
//! without any polling in the count: rank 0 sends a window of 64 eager
//! 8-byte messages and waits for an acknowledgement; rank 1, after a short
//! sleep (no MPI call, so the window waits in the transport, not in the
//! unexpected queue), posts 64 `immediate_receive_into` (each finds its
//! message already here), `wait_all`s them and acknowledges. Run it under callgrind with
//! `--toggle-collect='*sm_recv_path*receive_window*'` to count the
//! instructions of one window's receives (divide by 64 per message;
//! `*sm_recv_path*send_window*` counts rank 0's sends the same way):
//!
//! ```text
//! target/release/oxmpirun -n 2 valgrind --tool=callgrind \
//!     --toggle-collect='*sm_recv_path*receive_window*' \
//!     target/release/examples/sm_recv_path
//! ```
//!
//! Prints the nanoseconds per message of the receive windows when run
//! without valgrind.

use oxmpi::traits::*;
use oxmpi::Process;
use oxmpi::Threading::Level;
use std::time::Instant;

const WINDOW: usize = 64;
const WINDOWS: usize = 2000;

#[inline(never)]
fn receive_window<L: Level>(peer: &Process<'_, '_, L>, slots: &mut [[u8; 8]]) {
    oxmpi::request::scope(|s| {
        let reqs: Vec<_> = slots
            .iter_mut()
            .map(|b| {
                peer.immediate_receive_into_with_tag(s, b, 1)
                    .expect("irecv")
            })
            .collect();
        oxmpi::request::wait_all(reqs).expect("wait_all");
    });
}

/// One window of sends (rank 0; `--toggle-collect='*send_window*'`
/// counts it).
#[inline(never)]
fn send_window<L: Level>(peer: &Process<'_, '_, L>, out: &[u8; 8]) {
    oxmpi::request::scope(|s| {
        let sends: Vec<_> = (0..WINDOW)
            .map(|_| peer.immediate_send_with_tag(s, out, 1).expect("isend"))
            .collect();
        oxmpi::request::wait_all(sends).expect("wait_all sends");
    });
}

fn main() {
    let universe = oxmpi::initialize().expect("MPI start-up");
    let world = universe.world();
    assert_eq!(world.size(), 2, "run with 2 ranks");
    let rank = world.rank();
    let peer = world.process_at_rank(1 - rank);
    let out = [7u8; 8];
    let mut slots = vec![[0u8; 8]; WINDOW];
    let mut spent = 0.0;
    let mut ack = 0u8;
    for _ in 0..WINDOWS {
        if rank == 0 {
            send_window(&peer, &out);
            peer.receive_into_with_tag(&mut ack, 2).expect("ack");
        } else {
            // No MPI call meanwhile: the window waits in the ring, not in
            // the unexpected queue.
            std::thread::sleep(std::time::Duration::from_micros(200));
            let t = Instant::now();
            receive_window(&peer, &mut slots);
            spent += t.elapsed().as_nanos() as f64;
            assert!(slots.iter().all(|b| *b == out), "the data arrived");
            slots.iter_mut().for_each(|b| *b = [0; 8]);
            peer.send_with_tag(&ack, 2).expect("ack");
        }
    }
    if rank == 1 {
        println!(
            "ns per message (receives of a window already here): {:.1}",
            spent / (WINDOWS * WINDOW) as f64
        );
    }
}
