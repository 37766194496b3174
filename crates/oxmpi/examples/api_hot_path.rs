//! The Rust API's small-message path in one process, as the message-rate
//! benchmark's receiver drives it: a window of 64 `immediate_receive_into`
//! in a scope, 64 eager 8-byte `immediate_send`s to itself (over the self
//! BTL, so each matches its posted receive at once), then `wait_all` on
//! each window. No polling loop, so
//! the instruction count per message is the same from run to run: run it
//! under `valgrind --tool=callgrind` to compare builds. Prints the best time
//! per message over 15 rounds.
//!
//! With `arrived`, each window sends first and receives after, so every
//! receive finds its message already here and completes inside the call
//! (the receiver of a message-rate window whose sender is ahead).
//!
//! `cargo run --release -p oxmpi --example api_hot_path [arrived]` (a
//! singleton: no launcher needed).

use oxmpi::traits::*;
use std::time::Instant;

const WINDOW: usize = 64;
const ITERS: usize = 100_000;

fn main() {
    let universe = oxmpi::initialize().expect("MPI start-up");
    let world = universe.world();
    let me = world.process_at_rank(world.rank());
    let out = [7u8; 8];
    let mut slots = vec![[0u8; 8]; WINDOW];
    let arrived = std::env::args().nth(1).as_deref() == Some("arrived");
    let mut best = f64::MAX;
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..ITERS / WINDOW {
            oxmpi::request::scope(|s| {
                let send_all = || {
                    let sends: Vec<_> = (0..WINDOW)
                        .map(|_| me.immediate_send_with_tag(s, &out, 1).expect("isend"))
                        .collect();
                    oxmpi::request::wait_all(sends).expect("wait_all sends");
                };
                if arrived {
                    send_all();
                }
                let reqs: Vec<_> = slots
                    .iter_mut()
                    .map(|b| me.immediate_receive_into_with_tag(s, b, 1).expect("irecv"))
                    .collect();
                if !arrived {
                    send_all();
                }
                oxmpi::request::wait_all(reqs).expect("wait_all");
            });
        }
        best = best.min(t.elapsed().as_nanos() as f64 / (ITERS / WINDOW * WINDOW) as f64);
    }
    assert!(slots.iter().all(|b| *b == out), "the data arrived");
    println!("ns per message (receive window and send together): {best:.1}");
}
