//! The benchmark suite over the oxmpi Rust API: the tests of `SUITE.md`,
//! with the same method as the C suite (`c/oxbench.c`), run as
//! `oxmpirun -n 2 oxmpi-bench rank TEST [-s SIZES] [-q] [-t THREADS]`.
//!
//! Rank 0 prints `test,size,value,unit` per size.

use std::io::Write;
use std::time::Instant;

use oxmpi::traits::*;
use oxmpi::Threading::{self, Level};
use oxmpi::{Communicator, MutView, UserDatatype, View};

/// Messages per bandwidth window.
pub const WINDOW: usize = 64;
const TAG_DATA: i32 = 1;
const TAG_ACK: i32 = 2;
const TAG_ITERS: i32 = 9;
const TAG_THREAD: i32 = 100;

/// The tests of the suite, in report order.
pub const TESTS: [&str; 8] = [
    "latency",
    "latency_anysrc",
    "bw",
    "bibw",
    "msgrate",
    "mt_latency",
    "vec_latency",
    "vec_bw",
];

/// Default sizes of a test (`SUITE.md`).
pub fn default_sizes(test: &str) -> Vec<usize> {
    // Powers of 4 and 8 B (the size the usual small-message figures quote).
    let mut v = vec![0usize, 1];
    let mut s = 4;
    while s <= 16 << 20 {
        v.push(s);
        if s == 4 {
            v.push(8);
        }
        s *= 4;
    }
    match test {
        "msgrate" => vec![8],
        "latency" | "latency_anysrc" | "mt_latency" => v,
        "vec_latency" | "vec_bw" => v.into_iter().filter(|&s| s >= 16 && s % 8 == 0).collect(),
        _ => v.into_iter().filter(|&s| s > 0).collect(),
    }
}

/// What one run of the suite measures.
#[derive(Clone, Debug)]
pub struct Options {
    /// The test's name (one of [`TESTS`]).
    pub test: String,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Shorter timed loops.
    pub quick: bool,
    /// Threads per rank (`mt_latency`).
    pub threads: usize,
}

impl Options {
    fn target(&self) -> f64 {
        if self.quick {
            0.12
        } else {
            0.3
        }
    }
    fn warm(&self, n: usize) -> usize {
        if self.quick {
            (n / 4).max(1)
        } else {
            n
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("oxmpi-bench: {msg}");
    std::process::exit(1)
}

fn emit(test: &str, size: usize, value: f64, unit: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{test},{size},{value:.4},{unit}");
    let _ = out.flush();
}

fn check<T>(r: oxmpi::Result<T>) -> T {
    r.unwrap_or_else(|e| fail(&format!("MPI call failed: {e}")))
}

fn data_fail(rank: i32, test: &str, size: usize) -> ! {
    eprintln!("rank {rank}: data check failed in {test} at size {size}");
    std::process::exit(3)
}

fn lat_iters(size: usize) -> (usize, usize) {
    match size {
        0..=8192 => (20000, 2000),
        8193..=65536 => (5000, 500),
        65537..=1_048_576 => (1000, 100),
        _ => (200, 20),
    }
}

fn bw_iters(size: usize, quick: bool) -> (usize, usize) {
    let n = ((1u64 << 30) as f64 / (size.max(1) * WINDOW) as f64).clamp(4.0, 1000.0) as usize;
    (n, n / if quick { 40 } else { 10 } + 1)
}

/// Rank 0 turns the warm-up's time per iteration into a count whose timed
/// loop takes about `target` seconds (within `[min, dflt]`) and sends it
/// to every rank.
fn agree<L: Level>(
    w: &Communicator<'_, L>,
    dflt: usize,
    min: usize,
    warm_s: f64,
    warm_n: usize,
    target: f64,
) -> usize {
    let mut n = dflt as u64;
    if w.rank() == 0 {
        if warm_n > 0 && warm_s > 0.0 {
            let want = target / (warm_s / warm_n as f64);
            if want < n as f64 {
                n = (want as u64).max(min as u64);
            }
        }
        for r in 1..w.size() {
            check(w.process_at_rank(r).send_with_tag(&n, TAG_ITERS));
        }
    } else {
        check(
            w.process_at_rank(0)
                .receive_into_with_tag(&mut n, TAG_ITERS),
        );
    }
    n as usize
}

/// `WINDOW` disjoint slots of `slot` elements at the start of `buf`
/// (empty slots for empty messages).
fn slots_of<T>(buf: &mut [T], slot: usize) -> Vec<&mut [T]> {
    let mut rest = buf;
    let mut v = Vec::with_capacity(WINDOW);
    for _ in 0..WINDOW {
        let (a, b) = rest.split_at_mut(slot);
        v.push(a);
        rest = b;
    }
    v
}

/// A receive buffer, written once so that its pages are mapped before
/// timing (a zero fill would come from calloc, untouched).
/// Page size the byte buffers are aligned to (SUITE.md: page-aligned, as
/// the C suite's `posix_memalign`).
const PAGE: usize = 4096;

/// A page-aligned byte buffer, filled (so touched) when made. Without the
/// alignment, a large `Vec` starts 16 bytes into its page (malloc's chunk
/// header) and every single-copy transfer spans one page more than the C
/// suite's: the two suites would not measure the same thing.
struct PageBuf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl PageBuf {
    fn new(len: usize, fill: u8) -> PageBuf {
        let len = len.max(1);
        let raw = vec![fill; len + PAGE];
        let off = raw.as_ptr().align_offset(PAGE).min(PAGE);
        PageBuf { raw, off, len }
    }

    fn empty() -> PageBuf {
        PageBuf {
            raw: Vec::new(),
            off: 0,
            len: 0,
        }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

fn touched(len: usize) -> PageBuf {
    PageBuf::new(len, b'-')
}

fn filled(len: usize, rank: i32) -> PageBuf {
    PageBuf::new(len, b'a'.wrapping_add(rank as u8))
}

/// Runs one test; rank 0 prints its lines.
pub fn run(opts: &Options) {
    if !TESTS.contains(&opts.test.as_str()) {
        fail(&format!(
            "unknown test {:?} (one of {})",
            opts.test,
            TESTS.join(" ")
        ));
    }
    if opts.test.starts_with("vec_") {
        if let Some(s) = opts.sizes.iter().find(|&&s| s % 8 != 0 || s == 0) {
            fail(&format!(
                "{}: size {s} is not a positive multiple of 8",
                opts.test
            ));
        }
    }
    if opts.test == "mt_latency" {
        let universe = check(oxmpi::initialize_with_threading(Threading::Multiple));
        let w = universe.world();
        need_pair(&w, opts);
        mt_latency(&w, opts);
        return;
    }
    let universe = check(oxmpi::initialize());
    let w = universe.world();
    if opts.test == "msgrate" {
        if w.size() % 2 != 0 {
            fail("msgrate needs an even number of ranks");
        }
    } else {
        need_pair(&w, opts);
    }
    match opts.test.as_str() {
        "latency" => latency(&w, opts, false),
        "latency_anysrc" => latency(&w, opts, true),
        "bw" => bw(&w, opts),
        "bibw" => bibw(&w, opts),
        "msgrate" => msgrate(&w, opts),
        "vec_latency" => vec_latency(&w, opts),
        "vec_bw" => vec_bw(&w, opts),
        _ => unreachable!("checked above"),
    }
}

fn need_pair<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    if w.size() != 2 {
        fail(&format!(
            "{} needs exactly 2 ranks, not {}",
            opts.test,
            w.size()
        ));
    }
}

/// Ping-pong `n` times; `recv` receives one message.
fn pingpong<L: Level, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    w: &Communicator<'_, L>,
    any: bool,
    sbuf: &S,
    rbuf: &mut R,
    n: usize,
) {
    let rank = w.rank();
    let peer = w.process_at_rank(1 - rank);
    let anyp = w.any_process();
    let recv = |b: &mut R| {
        if any {
            check(anyp.receive_into_with_tag(b, TAG_DATA));
        } else {
            check(peer.receive_into_with_tag(b, TAG_DATA));
        }
    };
    for _ in 0..n {
        if rank == 0 {
            check(peer.send_with_tag(sbuf, TAG_DATA));
            recv(rbuf);
        } else {
            recv(rbuf);
            check(peer.send_with_tag(sbuf, TAG_DATA));
        }
    }
}

fn global_warmup<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    let s = [b'w'; 8];
    let mut r = [0u8; 8];
    check(w.barrier());
    let t = Instant::now();
    pingpong(w, false, &s[..], &mut r[..], 1000);
    let n = agree(
        w,
        300_000,
        1000,
        t.elapsed().as_secs_f64(),
        1000,
        opts.target(),
    );
    pingpong(w, false, &s[..], &mut r[..], n);
}

fn latency<L: Level>(w: &Communicator<'_, L>, opts: &Options, any: bool) {
    let rank = w.rank();
    let max = opts.sizes.iter().copied().max().unwrap_or(0);
    let sbuf = filled(max, rank);
    let mut rbuf = touched(max);
    global_warmup(w, opts);
    for &size in &opts.sizes {
        let (dflt, warm) = lat_iters(size);
        let warm = opts.warm(warm);
        check(w.barrier());
        let t = Instant::now();
        pingpong(w, any, &sbuf[..size], &mut rbuf[..size], warm);
        let n = agree(w, dflt, 50, t.elapsed().as_secs_f64(), warm, opts.target());
        // Only the timed loop may make the check pass.
        if size > 0 {
            rbuf[size - 1] = 0;
        }
        check(w.barrier());
        let t = Instant::now();
        pingpong(w, any, &sbuf[..size], &mut rbuf[..size], n);
        let el = t.elapsed().as_secs_f64();
        if size > 0 && rbuf[size - 1] != b'a' + (1 - rank) as u8 {
            data_fail(rank, &opts.test, size);
        }
        if rank == 0 {
            emit(&opts.test, size, el * 1e6 / (2.0 * n as f64), "us");
        }
    }
}

/// One window from `from` to `to` (ranks of `w`): 64 sends of `sbuf` and
/// an ack back, or 64 receives into the slots of `rbuf`.
fn window<L: Level, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    w: &Communicator<'_, L>,
    peer_rank: i32,
    sending: bool,
    sbuf: &S,
    slots: &mut [&mut R],
) {
    let peer = w.process_at_rank(peer_rank);
    let mut ack = 0i32;
    if sending {
        oxmpi::request::scope(|s| {
            let reqs: Vec<_> = (0..WINDOW)
                .map(|_| check(peer.immediate_send_with_tag(s, sbuf, TAG_DATA)))
                .collect();
            check(oxmpi::request::wait_all(reqs));
        });
        check(peer.receive_into_with_tag(&mut ack, TAG_ACK));
    } else {
        oxmpi::request::scope(|s| {
            let reqs: Vec<_> = slots
                .iter_mut()
                .map(|b| check(peer.immediate_receive_into_with_tag(s, &mut **b, TAG_DATA)))
                .collect();
            check(oxmpi::request::wait_all(reqs));
        });
        check(peer.send_with_tag(&ack, TAG_ACK));
    }
}

fn bw<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    let rank = w.rank();
    let max = opts.sizes.iter().copied().max().unwrap_or(1).max(1);
    let sbuf = filled(max, rank);
    let mut rbuf = if rank == 1 {
        touched(max * WINDOW)
    } else {
        PageBuf::empty()
    };
    for &size in &opts.sizes {
        let (dflt, warm) = bw_iters(size, opts.quick);
        let mut slots: Vec<&mut [u8]> = if rank == 1 {
            slots_of(&mut rbuf[..], size)
        } else {
            Vec::new()
        };
        let run = |slots: &mut [&mut [u8]], n: usize| {
            for _ in 0..n {
                window(w, 1 - rank, rank == 0, &sbuf[..size], slots);
            }
        };
        check(w.barrier());
        let t = Instant::now();
        run(&mut slots, warm);
        let n = agree(w, dflt, 4, t.elapsed().as_secs_f64(), warm, opts.target());
        if rank == 1 && size > 0 {
            slots[WINDOW - 1][size - 1] = 0;
        }
        check(w.barrier());
        let t = Instant::now();
        run(&mut slots, n);
        let el = t.elapsed().as_secs_f64();
        if rank == 1 && size > 0 && slots[WINDOW - 1][size - 1] != b'a' {
            data_fail(rank, &opts.test, size);
        }
        if rank == 0 {
            emit("bw", size, (size * WINDOW * n) as f64 / el / 1e6, "MB/s");
        }
    }
}

fn bibw<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    let rank = w.rank();
    let max = opts.sizes.iter().copied().max().unwrap_or(1).max(1);
    let sbuf = filled(max, rank);
    let mut rbuf = touched(max * WINDOW);
    let peer = w.process_at_rank(1 - rank);
    for &size in &opts.sizes {
        let (dflt, warm) = bw_iters(size, opts.quick);
        let run = |rbuf: &mut [u8], n: usize| {
            for _ in 0..n {
                oxmpi::request::scope(|s| {
                    let mut reqs: Vec<_> = slots_of(rbuf, size)
                        .into_iter()
                        .map(|b| check(peer.immediate_receive_into_with_tag(s, b, TAG_DATA)))
                        .collect();
                    for _ in 0..WINDOW {
                        reqs.push(check(peer.immediate_send_with_tag(
                            s,
                            &sbuf[..size],
                            TAG_DATA,
                        )));
                    }
                    check(oxmpi::request::wait_all(reqs));
                });
            }
        };
        check(w.barrier());
        let t = Instant::now();
        run(&mut rbuf, warm);
        let n = agree(w, dflt, 4, t.elapsed().as_secs_f64(), warm, opts.target());
        if size > 0 {
            rbuf[WINDOW * size - 1] = 0;
        }
        check(w.barrier());
        let t = Instant::now();
        run(&mut rbuf, n);
        let el = t.elapsed().as_secs_f64();
        if size > 0 && rbuf[WINDOW * size - 1] != b'a' + (1 - rank) as u8 {
            data_fail(rank, &opts.test, size);
        }
        if rank == 0 {
            emit(
                "bibw",
                size,
                2.0 * (size * WINDOW * n) as f64 / el / 1e6,
                "MB/s",
            );
        }
    }
}

fn msgrate<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    let rank = w.rank();
    let pairs = w.size() / 2;
    let sending = rank < pairs;
    let peer = if sending { rank + pairs } else { rank - pairs };
    let max = opts.sizes.iter().copied().max().unwrap_or(8).max(1);
    let sbuf = filled(max, rank);
    let mut rbuf = touched(max * WINDOW);
    for &size in &opts.sizes {
        let mut slots = slots_of(&mut rbuf[..], size);
        let run = |slots: &mut [&mut [u8]], n: usize| {
            for _ in 0..n {
                window(w, peer, sending, &sbuf[..size], slots);
            }
        };
        let warm = opts.warm(300);
        check(w.barrier());
        let t = Instant::now();
        run(&mut slots, warm);
        let target = if opts.quick { 0.3 } else { 1.0 };
        let n = agree(w, 20000, 100, t.elapsed().as_secs_f64(), warm, target);
        if !sending && size > 0 {
            slots[WINDOW - 1][size - 1] = 0;
        }
        check(w.barrier());
        let t = Instant::now();
        run(&mut slots, n);
        check(w.barrier());
        let el = t.elapsed().as_secs_f64();
        if !sending && size > 0 && slots[WINDOW - 1][size - 1] != b'a' + peer as u8 {
            data_fail(rank, &opts.test, size);
        }
        if rank == 0 {
            emit(
                "msgrate",
                size,
                (pairs as usize * WINDOW * n) as f64 / el,
                "msg/s",
            );
        }
    }
}

fn mt_latency(w: &Communicator<'_, Threading::Multiple>, opts: &Options) {
    let rank = w.rank();
    let threads = opts.threads.max(1);
    let max = opts.sizes.iter().copied().max().unwrap_or(0);
    global_warmup(w, opts);
    for &size in &opts.sizes {
        let iters = match (size <= 8192, opts.quick) {
            (true, false) => 5000,
            (true, true) => 1000,
            (false, false) => 500,
            (false, true) => 100,
        };
        let warm = iters / 10;
        let gate = std::sync::Barrier::new(threads);
        check(w.barrier());
        let lat: Vec<f64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let gate = &gate;
                    s.spawn(move || {
                        let tag = TAG_THREAD + t as i32;
                        let peer = w.process_at_rank(1 - rank);
                        let sbuf = filled(max, rank);
                        let mut rbuf = touched(max);
                        let round = |rbuf: &mut [u8], n: usize| {
                            for _ in 0..n {
                                if rank == 0 {
                                    check(peer.send_with_tag(&sbuf[..size], tag));
                                    check(peer.receive_into_with_tag(&mut rbuf[..size], tag));
                                } else {
                                    check(peer.receive_into_with_tag(&mut rbuf[..size], tag));
                                    check(peer.send_with_tag(&sbuf[..size], tag));
                                }
                            }
                        };
                        round(&mut rbuf, warm);
                        gate.wait();
                        let t0 = Instant::now();
                        round(&mut rbuf, iters);
                        let el = t0.elapsed().as_secs_f64();
                        if size > 0 && rbuf[size - 1] != b'a' + (1 - rank) as u8 {
                            data_fail(rank, "mt_latency", size);
                        }
                        el * 1e6 / (2.0 * iters as f64)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| fail("thread panicked")))
                .collect()
        });
        if rank == 0 {
            emit(
                "mt_latency",
                size,
                lat.iter().sum::<f64>() / lat.len() as f64,
                "us",
            );
        }
    }
}

/// `MPI_Type_vector(size/8, 1, 2, MPI_DOUBLE)`: `size` payload bytes
/// spread over `2 * size`.
fn vector_type(size: usize) -> UserDatatype {
    check(UserDatatype::vector(
        size / 8,
        1,
        2,
        &UserDatatype::of::<f64>(),
    ))
}

fn filled_f64(len_bytes: usize, rank: i32) -> Vec<f64> {
    let v = f64::from_ne_bytes([b'a'.wrapping_add(rank as u8); 8]);
    vec![v; (len_bytes / 8).max(1)]
}

fn is_fill(x: f64, rank: i32) -> bool {
    x.to_ne_bytes() == [b'a'.wrapping_add(rank as u8); 8]
}

fn vec_latency<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    let rank = w.rank();
    let max = opts.sizes.iter().copied().max().unwrap_or(8);
    let sbuf = filled_f64(2 * max, rank);
    let mut rbuf = filled_f64(2 * max, i32::from(b'-') - i32::from(b'a'));
    global_warmup(w, opts);
    for &size in &opts.sizes {
        let dt = vector_type(size);
        let (dflt, warm) = lat_iters(size);
        let warm = opts.warm(warm);
        let sv = check(View::with_count_and_datatype(&sbuf[..size / 4 - 1], 1, &dt));
        let run = |rbuf: &mut [f64], n: usize| {
            let mut rv = check(MutView::with_count_and_datatype(
                &mut rbuf[..size / 4 - 1],
                1,
                &dt,
            ));
            pingpong(w, false, &sv, &mut rv, n);
        };
        check(w.barrier());
        let t = Instant::now();
        run(&mut rbuf, warm);
        let n = agree(w, dflt, 50, t.elapsed().as_secs_f64(), warm, opts.target());
        rbuf[size / 4 - 2] = 0.0;
        check(w.barrier());
        let t = Instant::now();
        run(&mut rbuf, n);
        let el = t.elapsed().as_secs_f64();
        if !is_fill(rbuf[size / 4 - 2], 1 - rank) {
            data_fail(rank, &opts.test, size);
        }
        if rank == 0 {
            emit(&opts.test, size, el * 1e6 / (2.0 * n as f64), "us");
        }
    }
}

fn vec_bw<L: Level>(w: &Communicator<'_, L>, opts: &Options) {
    let rank = w.rank();
    let max = opts.sizes.iter().copied().max().unwrap_or(8);
    let sbuf = filled_f64(2 * max, rank);
    let mut rbuf = if rank == 1 {
        filled_f64(2 * max * WINDOW, i32::from(b'-') - i32::from(b'a'))
    } else {
        Vec::new()
    };
    for &size in &opts.sizes {
        let dt = vector_type(size);
        let elems = size / 4; // one slot: 2 * size bytes
        let (dflt, warm) = bw_iters(size, opts.quick);
        let sv = check(View::with_count_and_datatype(&sbuf[..elems - 1], 1, &dt));
        let run = |rbuf: &mut [f64], n: usize| {
            let mut views: Vec<MutView<'_, f64>> = if rank == 1 {
                slots_of(rbuf, elems)
                    .into_iter()
                    .map(|c| {
                        check(MutView::with_count_and_datatype(
                            &mut c[..elems - 1],
                            1,
                            &dt,
                        ))
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let mut slots: Vec<&mut MutView<'_, f64>> = views.iter_mut().collect();
            for _ in 0..n {
                window(w, 1 - rank, rank == 0, &sv, &mut slots);
            }
        };
        check(w.barrier());
        let t = Instant::now();
        run(&mut rbuf, warm);
        let n = agree(w, dflt, 4, t.elapsed().as_secs_f64(), warm, opts.target());
        if rank == 1 {
            rbuf[elems * WINDOW - 2] = 0.0;
        }
        check(w.barrier());
        let t = Instant::now();
        run(&mut rbuf, n);
        let el = t.elapsed().as_secs_f64();
        if rank == 1 && !is_fill(rbuf[elems * WINDOW - 2], 0) {
            data_fail(rank, &opts.test, size);
        }
        if rank == 0 {
            emit(
                "vec_bw",
                size,
                (size * WINDOW * n) as f64 / el / 1e6,
                "MB/s",
            );
        }
    }
}
