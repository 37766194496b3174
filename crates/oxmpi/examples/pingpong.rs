//! Ping-pong between ranks 0 and 1 (the others wait at the barrier):
//! checks every byte and prints the half round-trip latency per size.
//!
//! `oxmpirun -n 2 target/release/examples/pingpong [iterations]`

use oxmpi::traits::*;

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| {
        eprintln!("pingpong: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let rank = world.rank();
    if world.size() < 2 {
        eprintln!("pingpong needs 2 ranks");
        std::process::exit(1);
    }
    for size in [0usize, 8, 1024, 65536, 1 << 20] {
        let out: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        let mut inb = vec![0u8; size];
        let t0 = std::time::Instant::now();
        let n = if size >= 65536 { iters / 10 + 1 } else { iters };
        if rank < 2 {
            let peer = world.process_at_rank(1 - rank);
            for _ in 0..n {
                if rank == 0 {
                    peer.send_with_tag(&out[..], 1).unwrap();
                    peer.receive_into_with_tag(&mut inb[..], 1).unwrap();
                } else {
                    peer.receive_into_with_tag(&mut inb[..], 1).unwrap();
                    peer.send_with_tag(&inb[..], 1).unwrap();
                }
            }
            assert_eq!(inb, out, "data differs at size {size}");
            if rank == 0 {
                let us = t0.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64;
                println!("{size:>8} B  {us:>9.3} us");
            }
        }
        world.barrier().unwrap();
    }
}
