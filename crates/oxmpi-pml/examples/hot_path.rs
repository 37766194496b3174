//! The PML's small-message path in one process, without the sm ring's
//! cache-line transfer: eager 8-byte messages over the self BTL, receive
//! posted first (one at a time, and a window of 64), and arrived first.
//! Prints the best per-message time (send and receive together) over 15
//! rounds.
//!
//! `cargo run --release -p oxmpi-pml --example hot_path`

use std::time::Instant;

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, Ob1, PeerDesc, PmlConfig, ReqId, SendMode};

const WINDOW: usize = 64;
const ITERS: usize = 200_000;

fn main() {
    let peers = vec![PeerDesc {
        local: true,
        cards: vec![None],
    }];
    let btls: Vec<Box<dyn Btl>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
    let mut o = Ob1::new(PmlConfig::default(), 0, btls, &peers).expect("engine");
    o.add_comm(0, vec![0], 0).expect("communicator");
    let mut sbuf = vec![1u8; 8];
    let mut rbuf = vec![0u8; 8 * WINDOW];
    // SAFETY: `sbuf` outlives every send and is not touched meanwhile.
    let send = Buffer::Contig(unsafe { MemRegion::new(sbuf.as_mut_ptr(), 8) });
    let slots: Vec<Buffer> = rbuf
        .chunks_mut(8)
        // SAFETY: `rbuf` outlives every receive; each receive completes
        // before its slot is given to another.
        .map(|c| Buffer::Contig(unsafe { MemRegion::new(c.as_mut_ptr(), c.len()) }))
        .collect();
    let recv = |o: &mut Ob1<dyn Btl>, b: &Buffer| {
        o.irecv(b.clone(), Source::Rank(0), Tag::Value(1), 0)
            .expect("irecv")
    };
    let send_one = |o: &mut Ob1<dyn Btl>| {
        o.send_inline(&send, 0, 1, 0, SendMode::Standard)
            .expect("an eager send goes inline")
    };
    let done = |o: &mut Ob1<dyn Btl>, id: ReqId| {
        o.test(id).expect("test").expect("complete");
    };
    let mut best = [f64::MAX; 3];
    let mut ids = Vec::with_capacity(WINDOW);
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..ITERS {
            let id = recv(&mut o, &slots[0]);
            send_one(&mut o);
            o.progress();
            done(&mut o, id);
        }
        best[0] = best[0].min(t.elapsed().as_nanos() as f64 / ITERS as f64);
        let t = Instant::now();
        for _ in 0..ITERS / WINDOW {
            ids.clear();
            ids.extend(slots.iter().map(|b| recv(&mut o, b)));
            for _ in 0..WINDOW {
                send_one(&mut o);
            }
            o.progress();
            for &id in &ids {
                done(&mut o, id);
            }
        }
        let n = ITERS / WINDOW * WINDOW;
        best[1] = best[1].min(t.elapsed().as_nanos() as f64 / n as f64);
        let t = Instant::now();
        for _ in 0..ITERS {
            send_one(&mut o);
            o.progress();
            let id = recv(&mut o, &slots[0]);
            done(&mut o, id);
        }
        best[2] = best[2].min(t.elapsed().as_nanos() as f64 / ITERS as f64);
    }
    println!(
        "ns per message: posted {:.1}, window of {WINDOW} {:.1}, unexpected {:.1}",
        best[0], best[1], best[2]
    );
}
