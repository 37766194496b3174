//! End-to-end checks of point-to-point semantics, run by the test suite
//! through `oxmpirun` over each transport (`--mca btl self,sm` or
//! `self,tcp`) with 2 to 8 ranks. Exits non-zero naming the first failed
//! check; prints `p2p_suite ok` on rank 0 when every rank passed.
//!
//! `oxmpirun -n 4 target/release/examples/p2p_suite [check...]`

use oxmpi::traits::*;
use oxmpi::{AnyTag, Communicator, ErrorClass};

type Comm<'u> = Communicator<'u>;

fn fail(what: String) -> ! {
    eprintln!("p2p_suite: FAILED: {what}");
    std::process::exit(3)
}

macro_rules! check {
    ($c:expr, $($f:tt)*) => {
        if !$c { fail(format!($($f)*)) }
    };
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) ^ seed.wrapping_mul(7)) as u8)
        .collect()
}

/// Sizes crossing every threshold: sendi (256), one cache line (44 data
/// bytes), eager (sm: 32820 data bytes behind the MATCH header with the
/// 256 KiB rings of up to 16 local ranks, one ring record of 16364 with 64
/// KiB rings / tcp 64 KiB), rendezvous first fragment, pipeline fragments,
/// RDMA.
const SIZES: [usize; 18] = [
    0,
    1,
    44,
    45,
    244,
    257,
    4000,
    4097,
    16364,
    16365,
    16384,
    65535,
    65537,
    32820,
    32821,
    300_000,
    1 << 20,
    (4 << 20) + 3,
];

/// Every rank sends every size to every other rank (standard mode), data
/// checked, in an order that cannot deadlock (non-blocking receives first).
fn all_pairs(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    for &size in &SIZES {
        let outs: Vec<Vec<u8>> = (0..n)
            .map(|p| pattern(size, (me * 31 + p) as usize))
            .collect();
        let mut ins: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; size]).collect();
        oxmpi::request::scope(|s| {
            let mut reqs = Vec::new();
            for (p, buf) in ins.iter_mut().enumerate() {
                if p as i32 != me {
                    reqs.push(
                        w.process_at_rank(p as i32)
                            .immediate_receive_into_with_tag(s, &mut buf[..], 7)
                            .unwrap(),
                    );
                }
            }
            for (p, out) in outs.iter().enumerate() {
                if p as i32 != me {
                    w.process_at_rank(p as i32)
                        .send_with_tag(&out[..], 7)
                        .unwrap();
                }
            }
            for st in oxmpi::request::wait_all(reqs).unwrap() {
                check!(
                    st.bytes() == size,
                    "size {size}: status says {} bytes",
                    st.bytes()
                );
            }
        });
        for p in 0..n {
            if p != me {
                check!(
                    ins[p as usize] == pattern(size, (p * 31 + me) as usize),
                    "size {size} from {p}: data differs"
                );
            }
        }
    }
}

/// Each send mode, blocking, between neighbours in a ring (even ranks send
/// first so blocking synchronous sends cannot deadlock).
fn modes(u: &oxmpi::Universe, w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let next = w.process_at_rank((me + 1) % n);
    let prev = w.process_at_rank((me + n - 1) % n);
    u.buffer_attach(vec![0u8; 8 << 20]).unwrap();
    for &size in &[0usize, 8, 300, 5000, 70_000, 1 << 20] {
        for mode in 0..4 {
            let out = pattern(size, mode * 1000 + me as usize);
            let mut inb = vec![0u8; size];
            let send = |buf: &[u8]| match mode {
                0 => next.send_with_tag(buf, 3),
                1 => next.synchronous_send_with_tag(buf, 3),
                2 => next.buffered_send_with_tag(buf, 3),
                _ => next.send_with_tag(buf, 3),
            };
            if mode == 3 {
                // Ready mode: the receive is posted before the sender is
                // told to go.
                oxmpi::request::scope(|s| {
                    let r = prev
                        .immediate_receive_into_with_tag(s, &mut inb[..], 4)
                        .unwrap();
                    prev.send_with_tag(&[1u8][..], 5).unwrap();
                    let mut go = [0u8];
                    next.receive_into_with_tag(&mut go[..], 5).unwrap();
                    next.ready_send_with_tag(&out[..], 4).unwrap();
                    r.wait().unwrap();
                });
            } else if me % 2 == 0 {
                send(&out).unwrap();
                prev.receive_into_with_tag(&mut inb[..], 3).unwrap();
            } else {
                prev.receive_into_with_tag(&mut inb[..], 3).unwrap();
                send(&out).unwrap();
            }
            let from = ((me + n - 1) % n) as usize;
            check!(
                inb == pattern(size, mode * 1000 + from),
                "mode {mode} size {size}: data differs"
            );
        }
    }
    let b = u.buffer_detach().unwrap();
    check!(b.len() == 8 << 20, "detach returned {} bytes", b.len());
    w.barrier().unwrap();
}

/// Rank 0 receives from ANY_SOURCE with ANY_TAG; per-sender order holds.
fn any_source(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    const PER: i32 = 50;
    if me == 0 {
        let mut next_seq = vec![0i32; n as usize];
        for _ in 0..(n - 1) * PER {
            let mut v = [0i32; 2];
            let st = w.any_process().receive_into(&mut v[..]).unwrap();
            let src = st.source_rank();
            check!(v[0] == src, "message claims {} but came from {src}", v[0]);
            check!(
                v[1] == next_seq[src as usize],
                "from {src}: got {} expected {}",
                v[1],
                next_seq[src as usize]
            );
            check!(st.tag() == v[1] % 5, "tag {} for seq {}", st.tag(), v[1]);
            next_seq[src as usize] += 1;
        }
    } else {
        for i in 0..PER {
            w.process_at_rank(0)
                .send_with_tag(&[me, i][..], i % 5)
                .unwrap();
        }
    }
    w.barrier().unwrap();
}

/// Many unexpected messages: rank 1 sends 10,000 before rank 0 posts a
/// receive; all arrive, in order.
fn unexpected(w: &Comm) {
    const N: u32 = 10_000;
    let me = w.rank();
    if me == 1 {
        for i in 0..N {
            w.process_at_rank(0).send_with_tag(&i, 9).unwrap();
        }
        w.process_at_rank(0).send_with_tag(&0u8, 10).unwrap();
    } else if me == 0 {
        // Wait until the last one is there, so the others are unexpected.
        w.process_at_rank(1).probe_with_tag(10).unwrap();
        for i in 0..N {
            let (v, _) = w.process_at_rank(1).receive::<u32>().unwrap();
            check!(v == i, "unexpected #{i}: got {v}");
        }
        let (_, st) = w.process_at_rank(1).receive::<u8>().unwrap();
        check!(st.tag() == 10, "final tag {}", st.tag());
    }
    w.barrier().unwrap();
}

/// Probe, matched probe, receive_vec, truncation, cancel, PROC_NULL, bad
/// arguments.
fn misc(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let next = w.process_at_rank((me + 1) % n);
    let prev = w.process_at_rank((me + n - 1) % n);
    // Matched probe and receive_vec.
    next.send_with_tag(&pattern(1234, me as usize)[..], 11)
        .unwrap();
    let (msg, st) = prev.matched_probe_with_tag(11).unwrap();
    check!(st.bytes() == 1234, "mprobe size {}", st.bytes());
    let (v, _) = msg.matched_receive_vec::<u8>().unwrap();
    check!(
        v == pattern(1234, ((me + n - 1) % n) as usize),
        "mrecv data"
    );
    // Truncation: the data that fits is delivered.
    next.send_with_tag(&pattern(100, 5)[..], 12).unwrap();
    let mut small = [0u8; 10];
    let e = prev.receive_into_with_tag(&mut small[..], 12).unwrap_err();
    check!(e.class() == ErrorClass::Truncate, "truncate gave {e}");
    check!(small[..] == pattern(100, 5)[..10], "truncated data");
    // Cancel of a posted receive.
    let mut b = [0u8; 4];
    oxmpi::request::scope(|s| {
        let r = prev
            .immediate_receive_into_with_tag(s, &mut b[..], 99)
            .unwrap();
        r.cancel().unwrap();
        let st = r.wait().unwrap();
        check!(st.cancelled(), "receive not cancelled");
    });
    // PROC_NULL.
    w.null_process().send(&[1u8, 2][..]).unwrap();
    let st = w.null_process().receive_into(&mut [0u8; 2][..]).unwrap();
    check!(
        st.is_proc_null() && st.bytes() == 0,
        "PROC_NULL status {st:?}"
    );
    // Bad arguments are errors, not crashes.
    let e = w.process_at_rank(n).send(&1u8).unwrap_err();
    check!(e.class() == ErrorClass::Rank, "bad rank gave {e}");
    let e = next.send_with_tag(&1u8, -5).unwrap_err();
    check!(e.class() == ErrorClass::Tag, "bad tag gave {e}");
    let e = w.process_at_rank(-7).receive::<u8>().unwrap_err();
    check!(e.class() == ErrorClass::Rank, "bad source gave {e}");
    // iprobe sees nothing pending.
    check!(
        w.any_process()
            .immediate_probe_with_tag(AnyTag)
            .unwrap()
            .is_none(),
        "stray message"
    );
    w.barrier().unwrap();
}

/// `Process::try_send_inline`: a small message goes inside the call,
/// counted as an immediate send, and arrives like any other; what it
/// refuses (a bad rank or tag, a message above the immediate limit, to
/// `PROC_NULL`) sends nothing and counts nothing.
fn send_inline(u: &oxmpi::Universe, w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let next = w.process_at_rank((me + 1) % n);
    let prev = w.process_at_rank((me + n - 1) % n);
    let before = u.counters().eager_sendi;
    let big = pattern(4096, 3);
    check!(
        !next.try_send_inline(&big, 21),
        "4 KiB went as an immediate send"
    );
    check!(!next.try_send_inline(b"x", -3), "a negative tag was sent");
    check!(
        !w.process_at_rank(n).try_send_inline(b"x", 21),
        "rank {n} was sent to"
    );
    check!(
        !w.null_process().try_send_inline(b"x", 21),
        "PROC_NULL was sent to"
    );
    check!(
        u.counters().eager_sendi == before,
        "a refused send was counted"
    );
    let mut sent = 0;
    for len in [0usize, 1, 8, 16, 17, 200] {
        let data = pattern(len, me as usize + len);
        if next.try_send_inline(&data, 21) {
            sent += 1;
        } else {
            // Out of room now: the ordinary send, as the contract says.
            next.send_with_tag(&data[..], 21).unwrap();
        }
    }
    check!(sent > 0, "no immediate send went");
    check!(
        u.counters().eager_sendi >= before + sent,
        "immediate sends not counted"
    );
    let from = (me + n - 1) % n;
    for len in [0usize, 1, 8, 16, 17, 200] {
        let (v, st) = prev.receive_vec_with_tag::<u8>(21).unwrap();
        check!(
            v == pattern(len, from as usize + len) && st.source_rank() == from,
            "immediate send of {len} bytes from {from}: got {} bytes",
            v.len()
        );
    }
    w.barrier().unwrap();
}

/// dup and split give separate matching contexts.
fn comms(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let d = w.dup().unwrap();
    check!(d.size() == n && d.rank() == me, "dup shape");
    // The same tag on both communicators: each receive gets its own.
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    w.process_at_rank(next).send_with_tag(&1u32, 0).unwrap();
    d.process_at_rank(next).send_with_tag(&2u32, 0).unwrap();
    let (a, _) = d.process_at_rank(prev).receive::<u32>().unwrap();
    let (b, _) = w.process_at_rank(prev).receive::<u32>().unwrap();
    check!(
        a == 2 && b == 1,
        "contexts mixed: dup got {a}, world got {b}"
    );
    let half = w.split(Some((me % 2) as u32), -me).unwrap().unwrap();
    let expect = (n + 1 - me % 2) / 2;
    check!(
        half.size() == expect,
        "split size {} expected {expect}",
        half.size()
    );
    // Reverse key order: the highest world rank is rank 0.
    let members: Vec<i32> = (0..n).filter(|r| r % 2 == me % 2).rev().collect();
    check!(members[half.rank() as usize] == me, "split order");
    let sum = {
        let mut total = 0i32;
        for r in 0..half.size() {
            if r == half.rank() {
                for p in 0..half.size() {
                    if p != r {
                        half.process_at_rank(p).send(&me).unwrap();
                    }
                }
            } else {
                let (v, _) = half.process_at_rank(r).receive::<i32>().unwrap();
                total += v;
            }
        }
        total + me
    };
    let want: i32 = members.iter().sum();
    check!(sum == want, "split traffic sum {sum} want {want}");
    let none = w.split(None, 0).unwrap();
    check!(none.is_none(), "MPI_UNDEFINED color gave a communicator");
    let shared = w.split_shared(0).unwrap();
    check!(
        shared.size() == n,
        "all ranks share this node: {}",
        shared.size()
    );
    w.barrier().unwrap();
}

/// Protocol counters show which protocol carried each size over this
/// transport.
fn protocols(u: &oxmpi::Universe, w: &Comm) {
    let c = u.counters();
    let sm = u
        .peer_btls(((w.rank() + 1) % w.size()) as u32)
        .unwrap()
        .0
        .contains(&"sm");
    check!(c.eager_sendi > 0, "no immediate sends: {c:?}");
    if sm {
        check!(
            c.rget + c.rdma_put + c.rdma_pipeline > 0 || c.send_pipeline > 0,
            "no rendezvous over sm: {c:?}"
        );
    } else if std::env::var("OXMPI_MCA_btl_tcp_rdma_pipeline_send_length")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|tail| tail > 0)
    {
        // A send/receive tail asked for (the tcp default has none).
        check!(
            c.send_pipeline > 0 && c.frags > 0,
            "no send/receive pipeline over tcp: {c:?}"
        );
    } else {
        // The tcp default: the bulk of a rendezvous by (emulated) put.
        check!(
            c.rdma_pipeline > 0 && c.puts > 0,
            "no rendezvous by put over tcp: {c:?}"
        );
    }
    // Several RDMA BTLs to a peer (tcp with btl_tcp_links > 1): large
    // transfers were striped over them, and every one of them carried bytes.
    let rdma = u.peer_btls(((w.rank() + 1) % w.size()) as u32).unwrap().1;
    if rdma.len() > 1 {
        check!(c.rdma_striped > 0, "no striped RDMA over {rdma:?}: {c:?}");
        let used = c.rdma_bytes_by_btl.iter().filter(|&&b| b > 0).count();
        check!(used >= 2, "RDMA bytes on {used} BTL(s) only: {c:?}");
    }
}

/// `mpi_leave_pinned` (on by default): rank 0 sends one large buffer to
/// rank 1 three times, so whichever side registers memory reuses its
/// registration; a buffer freed and replaced is registered afresh.
fn rcache(u: &oxmpi::Universe, w: &Comm) {
    const BIG: usize = 64 << 20; // its own mapping: unmapped on drop
    const LEN: usize = 1 << 20;
    let me = w.rank();
    let before = u.rcache_stats();
    let round = |seed: usize, buf: &mut Vec<u8>| {
        if me == 0 {
            buf[..LEN].copy_from_slice(&pattern(LEN, seed));
            w.process_at_rank(1).send_with_tag(&buf[..LEN], 9).unwrap();
        } else if me == 1 {
            buf[..LEN].fill(0);
            w.process_at_rank(0)
                .receive_into_with_tag(&mut buf[..LEN], 9)
                .unwrap();
            check!(
                buf[..LEN] == pattern(LEN, seed)[..],
                "rcache round {seed}: data differs"
            );
        }
    };
    let mut buf = vec![0u8; BIG];
    for seed in 0..3 {
        round(seed, &mut buf);
    }
    let mid = u.rcache_stats();
    drop(buf);
    let mut buf = vec![0u8; BIG];
    round(3, &mut buf);
    let after = u.rcache_stats();
    if me < 2 {
        let (got, all) = (
            (mid.hits - before.hits, mid.misses - before.misses),
            (
                after.invalidated - mid.invalidated,
                after.misses - mid.misses,
            ),
        );
        // Over sm the sender registers (RGET, split with the receiver's
        // put); over tcp the receiver does (PUT). Either way the side that
        // registered hit its cache, and the freed buffer was dropped.
        // One registration per RDMA BTL the transfer stripes over (k):
        // k misses, then 2k hits; after the free, k invalidated, k misses.
        let k = got.1;
        if k > 0 {
            check!(
                got.0 == 2 * k,
                "rcache: (hits, misses) over 3 rounds = {got:?}: {mid:?}"
            );
            check!(
                all == (k, k),
                "rcache: (invalidated, misses) after free = {all:?}: {after:?}"
            );
        }
    }
    // Someone must have registered (or the test checked nothing).
    let mine = after.misses - before.misses;
    if me == 0 {
        w.process_at_rank(1).send_with_tag(&mine, 10).unwrap();
    } else if me == 1 {
        let mut theirs = 0u64;
        w.process_at_rank(0)
            .receive_into_with_tag(&mut theirs, 10)
            .unwrap();
        check!(
            mine + theirs >= 2,
            "rcache: no rank registered anything ({after:?})"
        );
    }
    w.barrier().unwrap();
}

/// Calls `take` (a receive inside the call) until it takes a message: for
/// up to 10 s when it `must` (the message is on its way and nothing else
/// could claim it), else once. `None`: it took nothing.
fn take_within(
    must: bool,
    mut take: impl FnMut() -> Option<oxmpi::Status>,
) -> Option<oxmpi::Status> {
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = take() {
            return Some(st);
        }
        if !must || start.elapsed() > std::time::Duration::from_secs(10) {
            return None;
        }
    }
}

/// Checks a message received into `buf` (filled with 0xee before): the
/// bytes `want`, nothing written past them, and its status `(source, tag)`
/// and byte count.
/// One message `want` of `tag` from `peer` through a small receive
/// (`inline(buffer, tag selector, spinning)`): first refused into a buffer
/// one byte short and for tag `tag + other` (nothing taken), then taken
/// with selector `sel` in the spinning form or not (within 10 s where
/// `must`, the messages being over sm), else received by `receive`; data,
/// guard bytes and status checked. Whether it was taken in place.
#[allow(clippy::too_many_arguments)]
fn take_one(
    buf: &mut [u8],
    want: &[u8],
    (peer, tag, other): (i32, i32, i32),
    (sel, spin, must): (Option<i32>, bool, bool),
    what: &str,
    inline: impl Fn(&mut [u8], Option<i32>, bool) -> Option<oxmpi::Status>,
    receive: impl FnOnce(&mut [u8]) -> oxmpi::Status,
) -> bool {
    let len = want.len();
    // Too short a buffer, another tag: refused, nothing taken.
    if len > 0 {
        check!(
            inline(&mut buf[..len - 1], Some(tag), false).is_none(),
            "took {len} bytes into {}",
            len - 1
        );
    }
    check!(
        inline(buf, Some(tag + other), false).is_none(),
        "took tag {tag} for tag {}",
        tag + other
    );
    buf.fill(0xee);
    let got = take_within(must, || inline(buf, sel, spin));
    let st = match got {
        Some(st) => st,
        None => receive(buf),
    };
    check_taken(buf, want, &st, (peer, tag), what);
    got.is_some()
}

fn check_taken(buf: &[u8], want: &[u8], st: &oxmpi::Status, (source, tag): (i32, i32), what: &str) {
    let len = want.len();
    check!(
        buf[..len] == want[..]
            && buf[len..].iter().all(|&b| b == 0xee)
            && (st.source_rank(), st.tag(), st.bytes()) == (source, tag, len),
        "{what} ({len} bytes): status {} {} {}",
        st.source_rank(),
        st.tag(),
        st.bytes()
    );
}

/// `Process::try_receive_inline` (and its spinning form): an eager message
/// already here is taken inside the call (over shared memory: every one, up
/// to 4000 bytes here, counted as an arrival), intact, with its status;
/// what it refuses (a bad rank or tag, `PROC_NULL`, a message longer than
/// the buffer, nothing there) receives nothing, and the ordinary receive
/// then gets the message. In pairs: rank 2k+1 sends to rank 2k once told
/// to, and rank 2k makes no other call meanwhile (any progress could read
/// the messages into the unexpected queue, where the small receive must
/// leave them).
fn receive_inline(u: &oxmpi::Universe, w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let peer = me ^ 1;
    if peer >= n {
        w.barrier().unwrap();
        return;
    }
    let other = w.process_at_rank(peer);
    let lens = [0usize, 1, 8, 12, 13, 44, 45, 60, 300, 4000];
    if me % 2 == 1 {
        other.receive_vec_with_tag::<u8>(30).unwrap();
        for (i, &len) in lens.iter().enumerate() {
            other
                .send_with_tag(&pattern(len, me as usize + len)[..], 22 + (i % 2) as i32)
                .unwrap();
        }
        w.barrier().unwrap();
        return;
    }
    let mut buf = vec![0u8; 4096];
    check!(
        other.try_receive_inline(&mut buf, Some(-3)).is_none()
            && w.process_at_rank(w.size())
                .try_receive_inline(&mut buf, None)
                .is_none()
            && w.null_process()
                .try_receive_inline(&mut buf, None)
                .is_none(),
        "a refused receive took something"
    );
    check!(
        other.try_receive_inline_spinning(&mut buf, None).is_none(),
        "took a message nobody sent"
    );
    let sm = u
        .peer_btls(peer as u32)
        .is_some_and(|(send, _)| send.first() == Some(&"sm"));
    let before = u.counters().recv_arrived;
    other.send_with_tag(&[][..] as &[u8], 30).unwrap();
    let mut taken = 0;
    for (i, &len) in lens.iter().enumerate() {
        let tag = 22 + (i % 2) as i32;
        let want = pattern(len, peer as usize + len);
        let sel = if i % 3 == 0 { None } else { Some(tag) };
        // Over sm a message is taken in place once it is there: only the
        // partner's messages could stop it (something of it unexpected),
        // and it sends nothing else.
        taken += u64::from(take_one(
            &mut buf,
            &want,
            (peer, tag, 7),
            (sel, i % 2 == 1, sm),
            &format!("message {i} from {peer}"),
            |b, t, spin| {
                if spin {
                    other.try_receive_inline_spinning(b, t)
                } else {
                    other.try_receive_inline(b, t)
                }
            },
            |b| other.receive_into_with_tag(b, tag).unwrap(),
        ));
    }
    check!(
        u.counters().recv_arrived >= before + taken,
        "small receives not counted"
    );
    // Other ranks' messages gone unexpected meanwhile (a barrier's) do not
    // turn the small receive off for the partner's.
    check!(
        !sm || taken == lens.len() as u64,
        "over sm {taken} of {} eager messages were taken in place",
        lens.len()
    );
    w.barrier().unwrap();
}

/// `Process::try_send_eager`: messages above the immediate-send limit that
/// fit the eager limit go out complete inside the call over shared memory
/// (prepared in place, counted as such) and arrive intact; over TCP, whose
/// send is not done on return, it sends nothing and the ordinary send
/// delivers. A negative tag or a rank outside the communicator sends
/// nothing. In pairs: rank 2k+1 sends, rank 2k receives.
fn send_eager(u: &oxmpi::Universe, w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let peer = me ^ 1;
    if peer >= n {
        w.barrier().unwrap();
        return;
    }
    let other = w.process_at_rank(peer);
    let lens = [257usize, 1024, 2048, 9000];
    if me % 2 == 0 {
        for (i, &len) in lens.iter().enumerate() {
            let (v, st) = other.receive_vec_with_tag::<u8>(60 + i as i32).unwrap();
            check!(
                v == pattern(len, peer as usize + len) && st.source_rank() == peer,
                "eager message {i} ({len} bytes) from {peer} changed"
            );
        }
        w.barrier().unwrap();
        return;
    }
    let sm = u
        .peer_btls(peer as u32)
        .is_some_and(|(send, _)| send.first() == Some(&"sm"));
    check!(
        !other.try_send_eager(&[1, 2, 3], -1)
            && !w.process_at_rank(n).try_send_eager(&[1, 2, 3], 1),
        "a refused eager send went"
    );
    let before = u.counters().eager_prepared;
    let mut went = 0;
    for (i, &len) in lens.iter().enumerate() {
        let data = pattern(len, me as usize + len);
        let tag = 60 + i as i32;
        if other.try_send_eager(&data, tag) {
            went += 1;
        } else {
            other.send_with_tag(&data[..], tag).unwrap();
        }
    }
    check!(
        !sm || (went == lens.len() && u.counters().eager_prepared == before + went as u64),
        "over sm {went} of {} eager messages went inside the call ({} counted prepared)",
        lens.len(),
        u.counters().eager_prepared - before
    );
    w.barrier().unwrap();
}

/// `AnyProcess::try_receive_inline` (and its spinning form): from any
/// source, a small message already here is taken inside the call (over
/// shared memory: every one), intact, with a status naming its sender; a
/// buffer too short or another tag takes nothing. In pairs as
/// [`receive_inline`]: only the partner sends to rank 2k meanwhile.
fn receive_inline_any(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let peer = me ^ 1;
    if peer >= n {
        w.barrier().unwrap();
        return;
    }
    let other = w.process_at_rank(peer);
    let lens = [0usize, 8, 24, 44];
    if me % 2 == 1 {
        other.receive_vec_with_tag::<u8>(31).unwrap();
        for &len in &lens {
            other
                .send_with_tag(&pattern(len, me as usize + len)[..], 40 + len as i32)
                .unwrap();
        }
        w.barrier().unwrap();
        return;
    }
    let any = w.any_process();
    let mut buf = [0u8; 64];
    check!(
        any.try_receive_inline(&mut buf, Some(-3)).is_none()
            && any.try_receive_inline_spinning(&mut buf, None).is_none(),
        "took a message nobody sent"
    );
    let sm = w
        .universe()
        .peer_btls(peer as u32)
        .is_some_and(|(send, _)| send.first() == Some(&"sm"));
    other.send_with_tag(&[][..] as &[u8], 31).unwrap();
    let mut taken = 0;
    for (i, &len) in lens.iter().enumerate() {
        let tag = 40 + len as i32;
        let want = pattern(len, peer as usize + len);
        let sel = if i % 2 == 0 { None } else { Some(tag) };
        taken += usize::from(take_one(
            &mut buf,
            &want,
            (peer, tag, 1),
            (sel, i >= 2, sm),
            &format!("message {i} from any source"),
            |b, t, spin| {
                if spin {
                    any.try_receive_inline_spinning(b, t)
                } else {
                    any.try_receive_inline(b, t)
                }
            },
            |b| any.receive_into_with_tag(b, tag).unwrap(),
        ));
    }
    check!(
        !sm || taken == lens.len(),
        "over sm {taken} of {} small messages from any source were taken in place",
        lens.len()
    );
    w.barrier().unwrap();
}

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| fail(format!("init: {e}")));
    let world = universe.world();
    let only: Vec<String> = std::env::args().skip(1).collect();
    let run = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if world.size() < 2 {
        fail("needs at least 2 ranks".into());
    }
    if run("pairs") {
        all_pairs(&world);
    }
    if run("modes") {
        modes(&universe, &world);
    }
    if run("any") {
        any_source(&world);
    }
    if run("unexpected") {
        unexpected(&world);
    }
    if run("misc") {
        misc(&world);
    }
    if run("inline") {
        send_inline(&universe, &world);
        receive_inline(&universe, &world);
        receive_inline_any(&world);
        send_eager(&universe, &world);
    }
    if run("comms") {
        comms(&world);
    }
    if run("rcache") {
        rcache(&universe, &world);
    }
    if run("protocols") && only.is_empty() {
        protocols(&universe, &world);
    }
    world.barrier().unwrap();
    let rank = world.rank();
    drop(world);
    drop(universe);
    // Finalized: the memory watcher's thread and descriptor are gone.
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|c| c.trim().to_string())
                .collect()
        })
        .unwrap_or_default();
    check!(
        !threads.iter().any(|t| t == "oxmpi-memwatch"),
        "the memory watcher outlived finalize: {threads:?}"
    );
    let uffd = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|f| std::fs::read_link(f.path()).ok())
                .filter(|l| l.to_string_lossy().contains("userfaultfd"))
                .count()
        })
        .unwrap_or(0);
    check!(
        uffd == 0,
        "{uffd} userfaultfd descriptor(s) outlived finalize"
    );
    if rank == 0 {
        println!("p2p_suite ok");
    }
}
