//! Threads with one communicator each (`MPI_THREAD_MULTIPLE`): every rank
//! runs `T` threads; thread `t` of each rank talks only to thread `t` of
//! the neighbouring ranks, on its own duplicate of the world communicator,
//! so the threads' messages can never match each other's.
//!
//! `oxmpirun -n 4 target/release/examples/threads`

use oxmpi::Threading;

const T: usize = 4;
const STEPS: u64 = 500;

fn main() {
    let universe = oxmpi::initialize_with_threading(Threading::Multiple).expect("MPI init");
    let world = universe.world();
    let (r, n) = (world.rank(), world.size());
    // Communicator creation is collective: done in order on the main
    // thread, then each communicator moves to its thread.
    let comms: Vec<_> = (0..T).map(|_| world.dup().expect("dup")).collect();
    let sums: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(t, comm)| {
                s.spawn(move || {
                    let next = comm.process_at_rank((r + 1) % n);
                    let prev = comm.process_at_rank((r + n - 1) % n);
                    let mut sum = 0u64;
                    for i in 0..STEPS {
                        let mut got = 0u64;
                        next.send_receive_into(&(i * T as u64 + t as u64), 0, &prev, &mut got, 0)
                            .expect("exchange");
                        assert_eq!(
                            got,
                            i * T as u64 + t as u64,
                            "thread {t} got another thread's message"
                        );
                        sum += got;
                    }
                    sum
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for (t, s) in sums.iter().enumerate() {
        let want: u64 = (0..STEPS).map(|i| i * T as u64 + t as u64).sum();
        assert_eq!(*s, want);
    }
    world.barrier().expect("barrier");
    if r == 0 {
        println!("threads: {n} ranks x {T} threads, {STEPS} exchanges each, on {T} communicators");
    }
}
