//! End-to-end checks of the Rust API beyond plain sends and receives:
//! derived datatypes, persistent requests, sendrecv, request collections,
//! futures and threads. Run by the test suite through `oxmpirun` over
//! `btl=self,sm` and `btl=self,tcp`, with 2 to 8 ranks. Exits non-zero
//! naming the first failed check; prints `api_suite ok` on rank 0 when
//! every rank passed.
//!
//! `oxmpirun -n 4 target/release/examples/api_suite [check...]`

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use oxmpi::traits::*;
use oxmpi::{AnyTag, Communicator, ErrorClass, MutView, Order, UserDatatype, View};

type Comm<'u> = Communicator<'u, oxmpi::Threading::Multiple>;

fn fail(what: String) -> ! {
    eprintln!("api_suite: FAILED: {what}");
    std::process::exit(3)
}

macro_rules! check {
    ($c:expr, $($f:tt)*) => {
        if !$c { fail(format!($($f)*)) }
    };
}

/// 28 bytes of data in 32 bytes of memory: packed by the convertor.
#[derive(oxmpi::Equivalence, Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
struct Particle {
    pos: [f64; 3],
    id: u32,
}

/// No padding: sent in place.
#[derive(oxmpi::Equivalence, Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
struct Pair(u64, i64);

fn neighbours<'c, 'u>(
    w: &'c Comm<'u>,
) -> (
    oxmpi::Process<'c, 'u, oxmpi::Threading::Multiple>,
    oxmpi::Process<'c, 'u, oxmpi::Threading::Multiple>,
) {
    let (r, n) = (w.rank(), w.size());
    (
        w.process_at_rank((r + 1) % n),
        w.process_at_rank((r + n - 1) % n),
    )
}

fn particles(n: usize, seed: i32) -> Vec<Particle> {
    (0..n)
        .map(|i| Particle {
            pos: [i as f64, seed as f64, (i * 7) as f64 + 0.5],
            id: (i as u32) ^ (seed as u32),
        })
        .collect()
}

fn datatypes(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    let prev_rank = (r + n - 1) % n;
    let (next, prev) = neighbours(w);
    check!(
        !Particle::IS_DENSE && Pair::IS_DENSE,
        "density of the derived types"
    );

    // Derived structs across every protocol threshold (sendi, eager,
    // rendezvous/pipeline), typed on both sides.
    for count in [1usize, 100, 3000, 60_000] {
        let out = particles(count, r);
        let mut inb = vec![Particle::default(); count];
        let st = next
            .send_receive_into(&out[..], 1, &prev, &mut inb[..], 1)
            .unwrap();
        check!(
            inb == particles(count, prev_rank),
            "{count} particles from {prev_rank} differ"
        );
        check!(
            st.count::<Particle>() == Some(count) && st.bytes() == count * 28,
            "{count} particles: status {st:?}"
        );
    }
    // Dense derived struct: in place.
    let out: Vec<Pair> = (0..5000).map(|i| Pair(i, -(i as i64) * r as i64)).collect();
    let mut inb = vec![Pair::default(); 5000];
    next.send_receive_into(&out[..], 2, &prev, &mut inb[..], 2)
        .unwrap();
    check!(
        inb.iter()
            .enumerate()
            .all(|(i, p)| *p == Pair(i as u64, -(i as i64) * prev_rank as i64)),
        "dense pairs differ"
    );

    // A column of a 64x64 row-major matrix, sent through a vector view,
    // received contiguous; and the reverse into a column of a matrix
    // whose other elements must stay untouched.
    let dim = 64usize;
    let col_t = UserDatatype::vector(dim, 1, dim as isize, &UserDatatype::of::<f64>()).unwrap();
    let m: Vec<f64> = (0..dim * dim)
        .map(|i| (i as f64) + 1000.0 * r as f64)
        .collect();
    let c = 5usize;
    let view = View::with_count_and_datatype(&m[c..], 1, &col_t).unwrap();
    let mut col = vec![0f64; dim];
    next.send_receive_into(&view, 3, &prev, &mut col[..], 3)
        .unwrap();
    check!(
        col.iter()
            .enumerate()
            .all(|(i, &x)| x == (i * dim + c) as f64 + 1000.0 * prev_rank as f64),
        "column via vector view"
    );
    let mut target = vec![-1f64; dim * dim];
    let sent: Vec<f64> = (0..dim).map(|i| (i + 10_000 * r as usize) as f64).collect();
    {
        let mut tv = MutView::with_count_and_datatype(&mut target[c..], 1, &col_t).unwrap();
        next.send_receive_into(&sent[..], 4, &prev, &mut tv, 4)
            .unwrap();
    }
    for (i, &x) in target.iter().enumerate() {
        let want = if i % dim == c {
            (i / dim + 10_000 * prev_rank as usize) as f64
        } else {
            -1.0
        };
        check!(x == want, "column receive wrote {x} at {i}, want {want}");
    }

    // The interior of a 10x10 array (subarray), as a halo code sends it.
    let full: Vec<i32> = (0..100).map(|i| i + 1000 * r).collect();
    let inner_t = UserDatatype::subarray(
        &[10, 10],
        &[8, 8],
        &[1, 1],
        Order::C,
        &UserDatatype::of::<i32>(),
    )
    .unwrap();
    let mut got = vec![0i32; 64];
    next.send_receive_into(
        &View::with_count_and_datatype(&full[..], 1, &inner_t).unwrap(),
        5,
        &prev,
        &mut got[..],
        5,
    )
    .unwrap();
    let want: Vec<i32> = (1..9)
        .flat_map(|row| (1..9).map(move |col| row * 10 + col + 1000 * prev_rank))
        .collect();
    check!(got == want, "subarray interior");

    // Indexed type on the receive side of a typed message.
    let idx_t = UserDatatype::indexed(&[2, 1], &[4, 0], &UserDatatype::of::<u16>()).unwrap();
    let mut dst = [0u16; 6];
    {
        let mut v = MutView::with_count_and_datatype(&mut dst[..], 1, &idx_t).unwrap();
        next.send_receive_into(&[7u16, 8, 9], 6, &prev, &mut v, 6)
            .unwrap();
    }
    check!(dst == [9, 0, 0, 0, 7, 8], "indexed receive gave {dst:?}");

    // A view that reaches outside its slice is refused.
    let short = [0f64; 10];
    let e = View::with_count_and_datatype(&short[..], 1, &col_t).unwrap_err();
    check!(e.class() == ErrorClass::Buffer, "out-of-bounds view: {e}");

    // Truncation through the convertor: what fits is delivered.
    let out = particles(10, r);
    let mut small = [Particle::default(); 4];
    let e = next
        .send_receive_into(&out[..], 7, &prev, &mut small[..], 7)
        .unwrap_err();
    check!(e.class() == ErrorClass::Truncate, "typed truncation: {e}");
    check!(
        small[..] == particles(10, prev_rank)[..4],
        "typed truncation kept the wrong data"
    );
    w.barrier().unwrap();
}

/// The four non-blocking send modes, receives posted first (so ready mode
/// is legal once the handshake says so).
fn immediate_modes(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    let prev_rank = (r + n - 1) % n;
    let (next, prev) = neighbours(w);
    w.universe().buffer_attach(vec![0u8; 1 << 20]).unwrap();
    for len in [8usize, 70_000] {
        for mode in 0..4u8 {
            let out = vec![mode ^ r as u8; len];
            let mut inb = vec![0u8; len];
            oxmpi::request::scope(|s| {
                let rq = prev
                    .immediate_receive_into_with_tag(s, &mut inb[..], 50)
                    .unwrap();
                // Tell `prev` our receive is posted; wait for `next`'s.
                prev.send_with_tag(&[1u8], 51).unwrap();
                next.receive_into_with_tag(&mut [0u8], 51).unwrap();
                let sq = match mode {
                    0 => next.immediate_send_with_tag(s, &out[..], 50),
                    1 => next.immediate_synchronous_send_with_tag(s, &out[..], 50),
                    2 => next.immediate_buffered_send_with_tag(s, &out[..], 50),
                    _ => next.immediate_ready_send_with_tag(s, &out[..], 50),
                }
                .unwrap();
                sq.wait().unwrap();
                rq.wait().unwrap();
            });
            check!(
                inb.iter().all(|&b| b == mode ^ prev_rank as u8),
                "immediate mode {mode}, {len} bytes"
            );
        }
    }
    w.universe().buffer_detach().unwrap();
    w.barrier().unwrap();
}

fn persistent(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    let prev_rank = (r + n - 1) % n;
    let (next, prev) = neighbours(w);
    for len in [4usize, 100_000] {
        let mut send = next.send_init_owned(vec![0i32; len], 9).unwrap();
        let mut recv = prev.receive_init_owned(vec![0i32; len], 9).unwrap();
        check!(
            send.wait().unwrap().source_rank() < 0,
            "an inactive persistent request gives an empty status"
        );
        for step in 0..20 {
            send.buffer_mut().unwrap().fill(r * 1000 + step);
            oxmpi::request::start_all(&mut [&mut recv, &mut send]).unwrap();
            check!(
                send.buffer_mut::<i32>().is_none(),
                "buffer lent while active"
            );
            let e = send.start().unwrap_err();
            check!(
                e.class() == ErrorClass::Request,
                "start of an active request: {e}"
            );
            send.wait().unwrap();
            let st = recv.wait().unwrap();
            check!(st.source_rank() == prev_rank, "persistent status {st:?}");
            let b = recv.buffer().unwrap();
            check!(
                b.iter().all(|&x| x == prev_rank * 1000 + step),
                "persistent step {step}, len {len}"
            );
        }
        check!(send.into_buffer().len() == len, "buffer given back");
    }
    // Every mode, and PROC_NULL.
    w.universe().buffer_attach(vec![0u8; 1 << 16]).unwrap();
    let modes = [
        oxmpi::SendMode::Standard,
        oxmpi::SendMode::Synchronous,
        oxmpi::SendMode::Buffered,
    ];
    for mode in modes {
        let mut recv = prev.receive_init_owned(vec![0u8; 300], 10).unwrap();
        let mut send = next
            .send_init_owned_mode(vec![r as u8; 300], 10, mode)
            .unwrap();
        for _ in 0..3 {
            oxmpi::request::start_all(&mut [&mut recv, &mut send]).unwrap();
            send.wait().unwrap();
            recv.wait().unwrap();
            check!(
                recv.buffer().unwrap().iter().all(|&b| b == prev_rank as u8),
                "persistent {mode:?}"
            );
        }
    }
    w.universe().buffer_detach().unwrap();
    let null = w.null_process();
    let mut pn = null.send_init_owned(vec![1u8; 8], 0).unwrap();
    pn.start().unwrap();
    check!(
        pn.wait().unwrap().is_proc_null(),
        "persistent send to PROC_NULL"
    );
    // Scoped persistent requests over fixed buffers.
    let out = [r; 8];
    let mut inb = [0i32; 8];
    oxmpi::request::scope(|s| {
        let mut rq = prev.receive_init(s, &mut inb, 11).unwrap();
        let mut sq = next.send_init(s, &out, 11).unwrap();
        for _ in 0..5 {
            oxmpi::request::start_all(&mut [&mut rq, &mut sq]).unwrap();
            sq.wait().unwrap();
            rq.wait().unwrap();
        }
    });
    check!(inb == [prev_rank; 8], "scoped persistent data");
    w.barrier().unwrap();
}

fn sendrecv(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    let prev_rank = (r + n - 1) % n;
    let (next, prev) = neighbours(w);
    for len in [1usize, 1000, 200_000] {
        let mut v: Vec<u32> = (0..len as u32).map(|i| i ^ r as u32).collect();
        let st = next
            .send_receive_replace(&mut v[..], 12, &prev, 12)
            .unwrap();
        check!(st.source_rank() == prev_rank && st.tag() == 12, "{st:?}");
        check!(
            v.iter()
                .enumerate()
                .all(|(i, &x)| x == (i as u32) ^ prev_rank as u32),
            "sendrecv_replace of {len}"
        );
    }
    // Replace through a derived type.
    let mut ps = particles(50, r);
    next.send_receive_replace(&mut ps[..], 13, &prev, AnyTag)
        .unwrap();
    check!(ps == particles(50, prev_rank), "typed sendrecv_replace");
    // With PROC_NULL on both sides: nothing moves, empty status.
    let null = w.null_process();
    let mut x = [5u8; 4];
    let st = null
        .send_receive_into(&[1u8; 4], 0, &null, &mut x[..], 0)
        .unwrap();
    check!(
        st.is_proc_null() && x == [5; 4],
        "sendrecv with PROC_NULL: {st:?}"
    );
    // Bad arguments are errors, not panics.
    let e = w
        .process_at_rank(n)
        .send_receive_into(&[1u8], 0, &prev, &mut x[..], 0)
        .unwrap_err();
    check!(e.class() == ErrorClass::Rank, "sendrecv to a bad rank: {e}");
    let e = next
        .send_receive_into(&[1u8], -4, &prev, &mut x[..], 0)
        .unwrap_err();
    check!(e.class() == ErrorClass::Tag, "sendrecv with a bad tag: {e}");
    w.barrier().unwrap();
}

fn collections(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    // Everyone sends one message to everyone; receives completed with
    // wait_some, sends with test_some / test_any / test_all loops.
    let outs: Vec<[i32; 64]> = (0..n).map(|p| [r * 100 + p; 64]).collect();
    let mut ins: Vec<[i32; 64]> = vec![[0; 64]; n as usize];
    oxmpi::request::scope(|s| {
        let mut recvs = Vec::new();
        for (p, b) in ins.iter_mut().enumerate() {
            recvs.push(
                w.process_at_rank(p as i32)
                    .immediate_receive_into_with_tag(s, b, 20)
                    .unwrap(),
            );
        }
        let mut sends = Vec::new();
        for (p, b) in outs.iter().enumerate() {
            sends.push(
                w.process_at_rank(p as i32)
                    .immediate_send_with_tag(s, b, 20)
                    .unwrap(),
            );
        }
        let mut seen = vec![false; n as usize];
        let mut left: Vec<usize> = (0..n as usize).collect();
        while !recvs.is_empty() {
            let done = oxmpi::request::wait_some(&mut recvs);
            check!(!done.is_empty(), "wait_some returned nothing");
            let mut removed = Vec::new();
            for (i, st) in done {
                let st = st.unwrap();
                let src = st.source_rank() as usize;
                check!(left[i] == src, "wait_some index {i} is rank {src}");
                check!(!seen[src], "rank {src} completed twice");
                seen[src] = true;
                removed.push(i);
            }
            for i in removed.into_iter().rev() {
                left.remove(i);
            }
        }
        check!(seen.iter().all(|&b| b), "every receive completed");
        let mut done = 0;
        while done < n as usize {
            if done % 2 == 0 {
                done += oxmpi::request::test_some(&mut sends).len();
            } else if let Some((_, st)) = oxmpi::request::test_any(&mut sends) {
                st.unwrap();
                done += 1;
            }
            if let Some(all) = oxmpi::request::test_all(&mut sends) {
                done += all.unwrap().len();
            }
        }
        check!(sends.is_empty(), "{} sends left", sends.len());
    });
    for (p, b) in ins.iter().enumerate() {
        check!(b.iter().all(|&x| x == p as i32 * 100 + r), "from {p}");
    }
    // Owned receives completed with wait_all_each, whose callback makes an
    // MPI call of its own (a send back): it runs with the PML free.
    let recvs: Vec<_> = (0..n)
        .map(|p| {
            w.process_at_rank(p)
                .immediate_receive_owned(vec![0i32; 4], 21)
                .unwrap()
        })
        .collect();
    for p in 0..n {
        w.process_at_rank(p)
            .send_with_tag(&[r * 10 + p; 4][..], 21)
            .unwrap();
    }
    oxmpi::request::wait_all_each(recvs, |p, buf, st| {
        check!(st.error().is_none(), "wait_all_each status of {p}");
        check!(buf == [p as i32 * 10 + r; 4], "wait_all_each data from {p}");
        w.process_at_rank(p as i32)
            .send_with_tag(&buf[..1], 22)
            .unwrap();
    });
    for p in 0..n {
        let (back, _) = w
            .process_at_rank(p)
            .receive_vec_with_tag::<i32>(22)
            .unwrap();
        check!(back == [r * 10 + p], "echo from {p}");
    }
    // A sweep's way (`MPI_Waitany` in the C layer): one progress pass,
    // then `completed`, which looks without progressing. A receive from
    // the rank before, whose message is sent after the receive is posted.
    let prev = (r + n - 1) % n;
    let next = (r + 1) % n;
    let req = w
        .process_at_rank(prev)
        .immediate_receive_owned(vec![0i32; 2], 23)
        .unwrap();
    w.universe().progress();
    check!(
        !req.completed(),
        "a receive completed before its message was sent"
    );
    // Nobody sends before everyone has looked.
    w.barrier().unwrap();
    w.process_at_rank(next)
        .send_with_tag(&[r, 23][..], 23)
        .unwrap();
    while !req.completed() {
        w.universe().progress();
    }
    let (buf, st) = req.wait().unwrap();
    check!(st.error().is_none(), "completed receive's status");
    check!(buf == [prev, 23], "completed receive's data from {prev}");
    // An empty collection.
    let mut none: Vec<oxmpi::request::Request> = Vec::new();
    check!(
        oxmpi::request::wait_some(&mut none).is_empty()
            && oxmpi::request::wait_any(&mut none).is_none(),
        "empty collections"
    );
    w.barrier().unwrap();
}

/// A minimal executor: parks the thread until the future's waker runs
/// (any executor works; this one has no dependency).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn futures(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    let prev_rank = (r + n - 1) % n;
    let (next, prev) = neighbours(w);
    for len in [8usize, 1 << 20] {
        let (got, sent) = block_on(async {
            let recv = prev.immediate_receive_owned(vec![0u8; len], 30).unwrap();
            let send = next
                .immediate_send_owned_with_tag(vec![r as u8; len], 30)
                .unwrap();
            // Await the receive first: the peer's send (maybe rendezvous)
            // is driven by its own progress thread meanwhile.
            let (got, st) = recv.await.unwrap();
            check!(st.bytes() == len, "awaited receive of {len}: {st:?}");
            let (sent, _) = send.await.unwrap();
            (got, sent)
        });
        check!(
            got.iter().all(|&b| b == prev_rank as u8) && sent.len() == len,
            "awaited data of {len}"
        );
    }
    // A scoped request is a future too.
    let mut x = [0u64; 16];
    let out = [r as u64; 16];
    oxmpi::request::scope(|s| {
        let rq = prev.immediate_receive_into_with_tag(s, &mut x, 31).unwrap();
        let sq = next.immediate_send_with_tag(s, &out, 31).unwrap();
        block_on(async {
            rq.await.unwrap();
            sq.await.unwrap();
        });
    });
    check!(x == [prev_rank as u64; 16], "awaited scoped receive");
    w.barrier().unwrap();
}

fn threads(w: &Comm) {
    let (r, n) = (w.rank(), w.size());
    // One communicator per thread (created collectively, in order), used
    // concurrently.
    let comms: Vec<Comm> = (0..4).map(|_| w.dup().unwrap()).collect();
    std::thread::scope(|ts| {
        for (t, c) in comms.iter().enumerate() {
            ts.spawn(move || {
                let next = c.process_at_rank((r + 1) % n);
                let prev = c.process_at_rank((r + n - 1) % n);
                for i in 0..200i32 {
                    let out = [r, t as i32, i];
                    let mut inb = [0i32; 3];
                    next.send_receive_into(&out, 0, &prev, &mut inb, 0).unwrap();
                    check!(
                        inb == [(r + n - 1) % n, t as i32, i],
                        "thread {t} step {i}: {inb:?}"
                    );
                }
            });
        }
        // And the world communicator from several threads at once, told
        // apart by tags.
        for t in 0..3 {
            ts.spawn(move || {
                let next = w.process_at_rank((r + 1) % n);
                let prev = w.process_at_rank((r + n - 1) % n);
                for i in 0..100 {
                    let mut v = [0u8; 100];
                    next.send_receive_into(&[t as u8; 100], 40 + t, &prev, &mut v, 40 + t)
                        .unwrap();
                    check!(v == [t as u8; 100], "shared world, thread {t} step {i}");
                }
            });
        }
    });
    w.barrier().unwrap();
}

/// Communicator comparison, groups, communicators from groups, self, and
/// the library-side view of the universe.
fn groups(w: &Comm) {
    use oxmpi::Comparison;
    let (r, n) = (w.rank(), w.size());
    check!(
        oxmpi::is_initialized() && !oxmpi::is_finalized(),
        "initialized flags"
    );
    check!(oxmpi::universe().is_some(), "a library sees the universe");
    check!(w.compare(w) == Comparison::Identical, "compare with itself");
    let d = w.dup().unwrap();
    check!(w.compare(&d) == Comparison::Congruent, "compare with a dup");
    let rev = w.split(Some(0), -r).unwrap().unwrap();
    check!(
        rev.rank() == n - 1 - r && w.compare(&rev) == Comparison::Similar,
        "reversed split: rank {} {:?}",
        rev.rank(),
        w.compare(&rev)
    );
    let g = w.group();
    let evens: Vec<u32> = (0..n as u32).step_by(2).collect();
    let ge = g.include(&evens).unwrap();
    let go = g.exclude(&evens).unwrap();
    check!(
        ge.size() as usize == evens.len() && ge.size() + go.size() == n as u32,
        "incl/excl sizes"
    );
    check!(
        ge.rank() == (r % 2 == 0).then_some(r as u32 / 2),
        "rank in the even group"
    );
    let t = g.translate_ranks(&[0, 1], &ge).unwrap();
    check!(t == vec![Some(0), None], "translate {t:?}");
    check!(
        g.include(&[n as u32]).is_err(),
        "include of a rank out of range"
    );
    let ce = w.create_from_group(&ge).unwrap();
    check!(ce.is_some() == (r % 2 == 0), "create_from_group membership");
    if let Some(ce) = ce {
        // Traffic on the new communicator, ring of the even ranks.
        let m = ce.size();
        let mut got = -1i32;
        ce.process_at_rank((ce.rank() + 1) % m)
            .send_receive_into(
                &ce.rank(),
                0,
                &ce.process_at_rank((ce.rank() + m - 1) % m),
                &mut got,
                0,
            )
            .unwrap();
        check!(
            got == (ce.rank() + m - 1) % m,
            "ring on the even communicator"
        );
    }
    // MPI_Comm_free with operations pending: they complete normally.
    for len in [8usize, 200_000] {
        let d = w.dup().unwrap();
        let rq = d
            .process_at_rank((r + n - 1) % n)
            .immediate_receive_owned(vec![0u8; len], 3)
            .unwrap();
        let sq = d
            .process_at_rank((r + 1) % n)
            .immediate_send_owned_with_tag(vec![r as u8; len], 3)
            .unwrap();
        drop(d);
        let (got, _) = rq.wait().unwrap();
        sq.wait().unwrap();
        check!(
            got.iter().all(|&b| b == ((r + n - 1) % n) as u8),
            "traffic on a freed communicator ({len} bytes)"
        );
    }
    // MPI_COMM_SELF: a message to oneself.
    let me = w.universe().self_();
    let mut x = 0u64;
    me.process_at_rank(0)
        .send_receive_into(&(r as u64 + 5), 1, &me.process_at_rank(0), &mut x, 1)
        .unwrap();
    check!(x == r as u64 + 5 && me.size() == 1, "self communicator");
    w.barrier().unwrap();
}

/// Run only with `mpi_async_progress`: rank 1 posts a receive for a large
/// (rendezvous) message, then sleeps without calling MPI; rank 0's
/// synchronous send must still complete well before rank 1 wakes, because
/// rank 1's progress thread carries the transfer.
fn overlap(w: &Comm) {
    const NAP: std::time::Duration = std::time::Duration::from_millis(600);
    let r = w.rank();
    w.barrier().unwrap();
    if r == 1 {
        let rq = w
            .process_at_rank(0)
            .immediate_receive_owned(vec![0u8; 4 << 20], 60)
            .unwrap();
        std::thread::sleep(NAP);
        let (v, _) = rq.wait().unwrap();
        check!(v.iter().all(|&b| b == 9), "overlapped data");
    } else if r == 0 {
        // Let rank 1 post its receive and fall asleep.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let t0 = std::time::Instant::now();
        w.process_at_rank(1)
            .synchronous_send_with_tag(&vec![9u8; 4 << 20][..], 60)
            .unwrap();
        let took = t0.elapsed();
        check!(
            took < NAP / 2,
            "a 4 MiB synchronous send took {took:?} while the receiver slept: no progress thread"
        );
    }
    w.barrier().unwrap();
}

fn main() {
    let universe = oxmpi::initialize_with_threading(oxmpi::Threading::Multiple)
        .unwrap_or_else(|e| fail(format!("init: {e}")));
    let world = universe.world();
    let only: Vec<String> = std::env::args().skip(1).collect();
    let run = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if world.size() < 2 {
        fail("needs at least 2 ranks".into());
    }
    if run("datatypes") {
        datatypes(&world);
    }
    if run("immediate") {
        immediate_modes(&world);
    }
    if run("persistent") {
        persistent(&world);
    }
    if run("sendrecv") {
        sendrecv(&world);
    }
    if run("collections") {
        collections(&world);
    }
    if run("futures") {
        futures(&world);
    }
    if run("groups") {
        groups(&world);
    }
    if only.iter().any(|o| o == "overlap") {
        overlap(&world);
    }
    if run("threads") {
        threads(&world);
    }
    world.barrier().unwrap();
    if world.rank() == 0 {
        println!("api_suite ok");
    }
}
