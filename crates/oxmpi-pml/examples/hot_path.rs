//! The PML's small-message path in one process, without the sm ring's
//! cache-line transfer: eager 8-byte messages over the self BTL, receive
//! posted first (one at a time, and a window of 64), and arrived first.
//! Prints the best per-message time (send and receive together) over 15
//! rounds.
//!
//! `cargo run --release -p oxmpi-pml --example hot_path`

#[path = "../tests/support/self_rank.rs"]
mod self_rank;

use std::time::Instant;

use oxmpi_btl::btl::Btl;
use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, Ob1, ReqId, SendMode};
use self_rank::SelfRank;

const WINDOW: usize = 64;
const ITERS: usize = 200_000;

fn main() {
    // Borrowed, not moved out: the rank keeps the buffers alive.
    let mut rank = SelfRank::new(WINDOW, 1);
    let SelfRank { o, send, slots, .. } = &mut rank;
    let recv = |o: &mut Ob1<dyn Btl>, b: &Buffer| {
        o.irecv(b.clone(), Source::Rank(0), Tag::Value(1), 0)
            .expect("irecv")
    };
    let send_one = |o: &mut Ob1<dyn Btl>| {
        assert!(o
            .isend(send.clone(), 0, 1, 0, SendMode::Standard)
            .expect("isend")
            .completed_inline())
    };
    let done = |o: &mut Ob1<dyn Btl>, id: ReqId| {
        o.test(id).expect("test").expect("complete");
    };
    let mut best = [f64::MAX; 3];
    let mut ids = Vec::with_capacity(WINDOW);
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..ITERS {
            let id = recv(o, &slots[0]);
            send_one(o);
            o.progress();
            done(o, id);
        }
        best[0] = best[0].min(t.elapsed().as_nanos() as f64 / ITERS as f64);
        let t = Instant::now();
        for _ in 0..ITERS / WINDOW {
            ids.clear();
            ids.extend(slots.iter().map(|b| recv(o, b)));
            for _ in 0..WINDOW {
                send_one(o);
            }
            o.progress();
            for &id in &ids {
                done(o, id);
            }
        }
        let n = ITERS / WINDOW * WINDOW;
        best[1] = best[1].min(t.elapsed().as_nanos() as f64 / n as f64);
        let t = Instant::now();
        for _ in 0..ITERS {
            send_one(o);
            o.progress();
            let id = recv(o, &slots[0]);
            done(o, id);
        }
        best[2] = best[2].min(t.elapsed().as_nanos() as f64 / ITERS as f64);
    }
    assert_eq!(rank.last_byte(), 1, "the data arrived");
    println!(
        "ns per message: posted {:.1}, window of {WINDOW} {:.1}, unexpected {:.1}",
        best[0], best[1], best[2]
    );
}
