//! OSU-style point-to-point benchmarks over the oxmpi Rust API, with the
//! method of the anchor programs (`../shared/anchors/bench`): same sizes,
//! iteration counts, warm-up, window of 64, 4-byte acks, and the same CSV
//! line per size (`impl,transport,test,size,value,unit`) on rank 0.
//!
//! `oxmpirun -n 2 target/release/examples/osu latency|latency_anysrc|bw|msgrate [sizes...]`
//!
//! One difference: the bandwidth receiver gives each of the 64 receives of
//! a window its own buffer (Rust's borrows forbid 64 receives into one), so
//! its working set is larger than the C program's.

use std::time::Instant;

use oxmpi::traits::*;
use oxmpi::{Communicator, Process};

const LAT_SIZES: [usize; 11] = [
    0, 1, 8, 64, 512, 4096, 16384, 65536, 262_144, 1_048_576, 4_194_304,
];
const BW_SIZES: [usize; 10] = [
    1, 8, 64, 512, 4096, 16384, 65536, 262_144, 1_048_576, 4_194_304,
];
const WINDOW: usize = 64;
const TAG_DATA: i32 = 1;
const TAG_ACK: i32 = 2;

fn emit(test: &str, size: usize, value: f64, unit: &str) {
    let imp = std::env::var("BENCH_IMPL").unwrap_or_else(|_| "oxmpi".into());
    let tr = std::env::var("BENCH_TRANSPORT").unwrap_or_else(|_| "default".into());
    println!("{imp},{tr},{test},{size},{value:.4},{unit}");
}

fn lat_iters(size: usize) -> (usize, usize) {
    match size {
        0..=8192 => (20000, 2000),
        8193..=65536 => (5000, 500),
        65537..=1_048_576 => (1000, 100),
        _ => (200, 20),
    }
}

fn bw_iters(size: usize) -> (usize, usize) {
    let n = (1024.0 * 1024.0 * 1024.0 / (size as f64 * WINDOW as f64)).clamp(4.0, 1000.0) as usize;
    (n, n / 10 + 1)
}

/// Rank 0 shrinks the count so the timed loop takes about `target_s`.
fn agree_iters(
    w: &Communicator,
    dflt: usize,
    min: usize,
    warm_s: f64,
    warm_n: usize,
    target_s: f64,
) -> usize {
    let mut n = dflt as u64;
    if w.rank() == 0 {
        if warm_n > 0 && warm_s > 0.0 {
            let want = target_s / (warm_s / warm_n as f64);
            if want < n as f64 {
                n = if want < min as f64 {
                    min as u64
                } else {
                    want as u64
                };
            }
        }
        w.process_at_rank(1).send_with_tag(&n, 9).unwrap();
    } else {
        n = w
            .process_at_rank(0)
            .receive_into_with_tag(&mut n, 9)
            .map(|_| n)
            .unwrap();
    }
    n as usize
}

fn pingpong(
    rank: i32,
    peer: &Process,
    from: &dyn Fn(&mut [u8]),
    sbuf: &[u8],
    rbuf: &mut [u8],
    n: usize,
) {
    for _ in 0..n {
        if rank == 0 {
            peer.send_with_tag(sbuf, TAG_DATA).unwrap();
            from(rbuf);
        } else {
            from(rbuf);
            peer.send_with_tag(sbuf, TAG_DATA).unwrap();
        }
    }
}

fn latency(w: &Communicator, any: bool, sizes: &[usize]) {
    let rank = w.rank();
    let peer = w.process_at_rank(1 - rank);
    let anyp = w.any_process();
    let recv = |b: &mut [u8]| {
        if any {
            anyp.receive_into_with_tag(b, TAG_DATA).unwrap();
        } else {
            peer.receive_into_with_tag(b, TAG_DATA).unwrap();
        }
    };
    let max = *sizes.iter().max().unwrap_or(&0);
    let sbuf = vec![b'a' + rank as u8; max.max(1)];
    let mut rbuf = vec![0u8; max.max(1)];
    let name = if any { "latency_anysrc" } else { "latency" };
    w.barrier().unwrap();
    let t = Instant::now();
    pingpong(rank, &peer, &recv, &sbuf[..8], &mut rbuf[..8], 1000);
    let n = agree_iters(w, 300_000, 1000, t.elapsed().as_secs_f64(), 1000, 0.3);
    pingpong(rank, &peer, &recv, &sbuf[..8], &mut rbuf[..8], n);
    for &size in sizes {
        let (iters, warm) = lat_iters(size);
        w.barrier().unwrap();
        let t = Instant::now();
        pingpong(rank, &peer, &recv, &sbuf[..size], &mut rbuf[..size], warm);
        let iters = agree_iters(w, iters, 50, t.elapsed().as_secs_f64(), warm, 0.5);
        w.barrier().unwrap();
        let t = Instant::now();
        pingpong(rank, &peer, &recv, &sbuf[..size], &mut rbuf[..size], iters);
        let el = t.elapsed().as_secs_f64();
        if size > 0 && rbuf[size - 1] != b'a' + (1 - rank) as u8 {
            eprintln!("rank {rank}: data check failed at size {size}");
            std::process::exit(3);
        }
        if rank == 0 {
            emit(name, size, el * 1e6 / (2.0 * iters as f64), "us");
        }
    }
}

fn windows(w: &Communicator, sbuf: &[u8], rbufs: &mut [Vec<u8>], size: usize, n: usize) {
    let peer = w.process_at_rank(1 - w.rank());
    let mut ack = 0i32;
    for _ in 0..n {
        if w.rank() == 0 {
            oxmpi::request::scope(|s| {
                let reqs: Vec<_> = (0..WINDOW)
                    .map(|_| {
                        peer.immediate_send_with_tag(s, &sbuf[..size], TAG_DATA)
                            .unwrap()
                    })
                    .collect();
                oxmpi::request::wait_all(reqs).unwrap();
            });
            peer.receive_into_with_tag(&mut ack, TAG_ACK).unwrap();
        } else {
            oxmpi::request::scope(|s| {
                let reqs: Vec<_> = rbufs
                    .iter_mut()
                    .map(|b| {
                        peer.immediate_receive_into_with_tag(s, &mut b[..size], TAG_DATA)
                            .unwrap()
                    })
                    .collect();
                oxmpi::request::wait_all(reqs).unwrap();
            });
            peer.send_with_tag(&ack, TAG_ACK).unwrap();
        }
    }
}

fn bw(w: &Communicator, sizes: &[usize], msgrate: bool) {
    let rank = w.rank();
    let max = *sizes.iter().max().unwrap_or(&1);
    let sbuf = vec![b'a' + rank as u8; max.max(1)];
    let mut rbufs: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; max.max(1)]).collect();
    for &size in sizes {
        let (iters, warm) = if msgrate {
            (20000, 300)
        } else {
            bw_iters(size)
        };
        w.barrier().unwrap();
        let t = Instant::now();
        windows(w, &sbuf, &mut rbufs, size, warm);
        let iters = if msgrate {
            agree_iters(w, iters, 100, t.elapsed().as_secs_f64(), warm, 1.0)
        } else {
            agree_iters(w, iters, 4, t.elapsed().as_secs_f64(), warm, 0.5)
        };
        w.barrier().unwrap();
        let t = Instant::now();
        windows(w, &sbuf, &mut rbufs, size, iters);
        let el = t.elapsed().as_secs_f64();
        if rank == 1 && rbufs[WINDOW - 1][size - 1] != b'a' {
            eprintln!("rank 1: data check failed at size {size}");
            std::process::exit(3);
        }
        if rank == 0 {
            if msgrate {
                emit("msgrate", size, (WINDOW * iters) as f64 / el, "msg/s");
            } else {
                emit(
                    "bw",
                    size,
                    (size * WINDOW * iters) as f64 / el / 1e6,
                    "MB/s",
                );
            }
        }
    }
}

fn main() {
    let universe = oxmpi::initialize().unwrap();
    let w = universe.world();
    let mut args = std::env::args().skip(1);
    let test = args.next().unwrap_or_else(|| "latency".into());
    let sizes: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
    if w.size() != 2 {
        eprintln!("osu: needs exactly 2 ranks");
        std::process::exit(1);
    }
    match test.as_str() {
        "latency" => latency(
            &w,
            false,
            if sizes.is_empty() { &LAT_SIZES } else { &sizes },
        ),
        "latency_anysrc" => latency(&w, true, if sizes.is_empty() { &LAT_SIZES } else { &sizes }),
        "bw" => bw(&w, if sizes.is_empty() { &BW_SIZES } else { &sizes }, false),
        "msgrate" => bw(&w, if sizes.is_empty() { &[8] } else { &sizes }, true),
        t => {
            eprintln!("osu: unknown test {t}");
            std::process::exit(1);
        }
    }
}
