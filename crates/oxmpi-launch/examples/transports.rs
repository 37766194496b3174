//! Which transport carried the traffic to each peer, for launcher tests:
//! every rank exchanges a small and a 64 KiB message (eager and
//! rendezvous) with every other rank, checks them, adds up the ranks it
//! heard from, and prints
//!
//! ```text
//! rank R of N: sum S
//! rank R peer P: via BTL sent B received B
//! ```
//!
//! (one peer line per other rank; `S` is the sum of all ranks, so N
//! singletons print `rank 0 of 1: sum 0` each). `BTL` is the send list of
//! the PML's BML for that peer joined with `+` (so `sm`, or `tcp`, means
//! that transport alone carried every byte to that peer), `B` the bytes the
//! PML counters say went to and came from that peer. Exits 1 with a message
//! on any failure, MPI initialisation included.
//!
//! `srun --mpi=pmi2 -n 4 target/debug/examples/transports`

use oxmpi::traits::*;

fn die(what: impl std::fmt::Display) -> ! {
    eprintln!("transports: {what}");
    std::process::exit(1)
}

/// The bytes rank `from` sends rank `to` in the large message.
fn block(from: i32, to: i32) -> Vec<u8> {
    (0..64 * 1024)
        .map(|i: i32| (i.wrapping_mul(7) ^ (from << 4) ^ to) as u8)
        .collect()
}

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| die(e));
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let mut sum = i64::from(me);
    // Pairwise in rank order: the lower rank sends first, so no two ranks
    // both wait to receive.
    for peer in (0..n).filter(|&p| p != me) {
        let p = world.process_at_rank(peer);
        let send = || {
            p.send_with_tag(&[i64::from(me)][..], 1)
                .unwrap_or_else(|e| die(e));
            p.send_with_tag(&block(me, peer)[..], 2)
                .unwrap_or_else(|e| die(e));
        };
        let recv = || -> i64 {
            let (v, _) = p.receive_vec_with_tag::<i64>(1).unwrap_or_else(|e| die(e));
            let (b, _) = p.receive_vec_with_tag::<u8>(2).unwrap_or_else(|e| die(e));
            if b != block(peer, me) {
                die(format!("rank {me}: the 64 KiB block from {peer} differs"));
            }
            v[0]
        };
        let got = if me < peer {
            send();
            recv()
        } else {
            let v = recv();
            send();
            v
        };
        if got != i64::from(peer) {
            die(format!("rank {me}: rank {peer} sent {got}"));
        }
        sum += got;
    }
    world.barrier().unwrap_or_else(|e| die(e));
    let c = universe.counters();
    let mut out = format!("rank {me} of {n}: sum {sum}\n");
    for peer in (0..n).filter(|&p| p != me) {
        let via = universe
            .peer_btls(peer as u32)
            .map(|(send, _)| send.join("+"))
            .unwrap_or_default();
        let i = peer as usize;
        out.push_str(&format!(
            "rank {me} peer {peer}: via {via} sent {} received {}\n",
            c.bytes_sent.get(i).copied().unwrap_or(0),
            c.bytes_received.get(i).copied().unwrap_or(0)
        ));
    }
    // One write: lines of different ranks do not interleave.
    print!("{out}");
}
