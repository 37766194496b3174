//! What the survivors of a failed rank see, run under
//! `oxmpirun --enable-recovery` (or Hydra's `-disable-auto-cleanup`): the
//! last rank kills itself with SIGKILL (or, given the argument `exit`, exits
//! with status 3) once every rank has a communicator it shares with it
//! alone; then each survivor checks that
//!
//! 1. an `MPI_ANY_SOURCE` receive on its pair communicator (the dead rank
//!    is the only other member) fails with `MPI_ERR_PROC_FAILED`;
//! 2. a barrier over the world fails with `MPI_ERR_PROC_FAILED` (on every
//!    survivor, not only the dead rank's neighbours);
//! 3. duplicating the world fails the same way;
//! 4. a ring among the survivors still works;
//!
//! and finalizes. Each survivor prints `rank R: recovery ok`.
//!
//! `oxmpirun --enable-recovery -n 4 target/debug/examples/recovery`

use oxmpi::traits::*;
use oxmpi::ErrorClass;

fn expect_failed<T>(what: &str, rank: i32, r: oxmpi::Result<T>) {
    match r {
        Err(e) if e.class() == ErrorClass::ProcFailed => {}
        Err(e) => fail(rank, &format!("{what}: {e} (expected MPI_ERR_PROC_FAILED)")),
        Ok(_) => fail(rank, &format!("{what} succeeded with a dead member")),
    }
}

fn fail(rank: i32, msg: &str) -> ! {
    eprintln!("recovery: rank {rank}: {msg}");
    std::process::exit(1)
}

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| {
        eprintln!("recovery: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        fail(rank, "needs at least 2 ranks");
    }
    let victim = size - 1;
    // One communicator per survivor, shared with the victim alone.
    let mut mine = None;
    for r in 0..victim {
        let color = (rank == r || rank == victim).then_some(0);
        let c = world.split(color, 0).unwrap();
        if rank == r {
            mine = c;
        }
    }
    world.barrier().unwrap();
    // The victim dies only once every survivor is past the barrier (the
    // barrier's return at the victim says nothing of the others).
    if rank == victim {
        for _ in 0..victim {
            world.any_process().receive::<u8>().unwrap();
        }
    } else {
        world.process_at_rank(victim).send(&0u8).unwrap();
    }
    if rank == victim {
        // `exit`: a plain non-zero exit without finalize (Hydra 4.0 kills
        // every rank when one is killed by a signal, whatever its options).
        if std::env::args().nth(1).as_deref() == Some("exit") {
            std::process::exit(3);
        }
        let _ = std::process::Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let pair = mine.expect("a pair communicator");
    expect_failed(
        "ANY_SOURCE receive with every sender dead",
        rank,
        pair.any_process().receive_vec::<u8>(),
    );
    expect_failed("barrier", rank, world.barrier());
    expect_failed("dup", rank, world.dup());
    // The survivors still talk.
    let n = victim;
    if n > 1 {
        let next = world.process_at_rank((rank + 1) % n);
        let prev = world.process_at_rank((rank + n - 1) % n);
        let token = if rank == 0 {
            next.send(&1u64).unwrap();
            prev.receive::<u64>().unwrap().0
        } else {
            let t = prev.receive::<u64>().unwrap().0;
            next.send(&(t + 1)).unwrap();
            t + 1
        };
        if rank == 0 && token != n as u64 {
            fail(rank, &format!("ring token {token}, expected {n}"));
        }
    }
    println!("rank {rank}: recovery ok");
}
