//! A token travels around the ring of ranks `laps` times, each rank adding
//! one; then every rank exchanges a 1 MiB block with both neighbours and
//! checks it. Each rank prints one line saying which transport carried its
//! traffic.
//!
//! `oxmpirun -n 8 target/release/examples/ring [laps]`

use oxmpi::traits::*;

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| {
        eprintln!("ring: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let laps: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);

    let t0 = std::time::Instant::now();
    let mut token = 0u64;
    for _ in 0..laps {
        if rank == 0 {
            next.send(&(token + 1)).unwrap();
            token = prev.receive::<u64>().unwrap().0;
        } else {
            token = prev.receive::<u64>().unwrap().0;
            next.send(&(token + 1)).unwrap();
        }
    }
    let hop_us = t0.elapsed().as_secs_f64() * 1e6 / (laps * size as u64) as f64;
    if rank == 0 && token != laps * size as u64 {
        eprintln!("ring: token is {token}, expected {}", laps * size as u64);
        std::process::exit(1);
    }

    // Halo-style exchange of 1 MiB with both neighbours.
    let block = |r: i32| -> Vec<u64> { (0..131_072u64).map(|i| i ^ (r as u64) << 40).collect() };
    let mine = block(rank);
    let mut from_prev = vec![0u64; mine.len()];
    let mut from_next = vec![0u64; mine.len()];
    oxmpi::request::scope(|s| {
        let a = prev
            .immediate_receive_into_with_tag(s, &mut from_prev[..], 1)
            .unwrap();
        let b = next
            .immediate_receive_into_with_tag(s, &mut from_next[..], 2)
            .unwrap();
        let c = next.immediate_send_with_tag(s, &mine[..], 1).unwrap();
        let d = prev.immediate_send_with_tag(s, &mine[..], 2).unwrap();
        oxmpi::request::wait_all(vec![a, b, c, d]).unwrap();
    });
    let ok = from_prev == block((rank + size - 1) % size) && from_next == block((rank + 1) % size);
    let via = universe
        .peer_btls(((rank + 1) % size) as u32)
        .map(|(send, _)| send.join("+"))
        .unwrap_or_default();
    world.barrier().unwrap();
    println!(
        "rank {rank} of {size}: ring of {laps} laps {} ({hop_us:.2} us per hop), 1 MiB halo {} (via {via})",
        if rank == 0 { "ok" } else { "passed" },
        if ok { "ok" } else { "CORRUPT" },
    );
    if !ok {
        std::process::exit(1);
    }
}
