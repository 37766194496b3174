//! Starved of file descriptors on purpose: after `MPI_Init` and a barrier,
//! each rank opens `/dev/null` until its descriptor limit is reached (at
//! most 4096 times), then exchanges 1 MiB with every other rank and checks
//! it. A transport that needs a descriptor it cannot have (a shared
//! segment to map, a TCP connection to open or accept) must end the job
//! with an error that names the limit, not hang; one that needs none
//! completes. Run it under a low limit:
//!
//! `oxmpirun -n 8 sh -c 'ulimit -n 32 && exec target/release/examples/starve'`

use oxmpi::traits::*;

/// Words per block (1 MiB).
const WORDS: usize = 131_072;

fn block(from: i32, to: i32) -> Vec<u64> {
    (0..WORDS as u64)
        .map(|i| i ^ ((from as u64) << 40) ^ ((to as u64) << 48))
        .collect()
}

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| {
        eprintln!("starve: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    world.barrier().unwrap();

    let mut held = Vec::new();
    while held.len() < 4096 {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(_) => break,
        }
    }

    let peers: Vec<i32> = (0..size).filter(|&p| p != rank).collect();
    let out: Vec<Vec<u64>> = peers.iter().map(|&p| block(rank, p)).collect();
    let mut inb = vec![0u64; WORDS * peers.len()];
    oxmpi::request::scope(|s| {
        let mut reqs = Vec::new();
        for (&p, buf) in peers.iter().zip(inb.chunks_mut(WORDS)) {
            reqs.push(
                world
                    .process_at_rank(p)
                    .immediate_receive_into_with_tag(s, buf, 3)
                    .unwrap(),
            );
        }
        for (&p, data) in peers.iter().zip(&out) {
            reqs.push(
                world
                    .process_at_rank(p)
                    .immediate_send_with_tag(s, &data[..], 3)
                    .unwrap(),
            );
        }
        oxmpi::request::wait_all(reqs).unwrap();
    });
    let ok = peers
        .iter()
        .zip(inb.chunks(WORDS))
        .all(|(&p, got)| got == &block(p, rank)[..]);
    drop(held);
    world.barrier().unwrap();
    println!(
        "rank {rank} of {size}: all-pairs 1 MiB {}",
        if ok { "ok" } else { "CORRUPT" }
    );
    if !ok {
        std::process::exit(1);
    }
}
