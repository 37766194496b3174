//! sm BTL ping-pong between two processes, each pinned to its own core
//! (0 and 1): the bench binary runs itself again as the echoing child.
//!
//! * `sendi` of 8 bytes and `prepare_src`+`send` of 4 KiB, busy polling of
//!   `progress` on both sides, each receiver copying the message out (as a
//!   PML would into the user's buffer); reported as half the round trip, the
//!   median of several runs after a warm-up.
//! * a 4 MiB `get` through CMA (key check, `process_vm_readv`, completion
//!   through `progress`), beside a raw `process_vm_readv` of the same buffer
//!   in the same run.
//!
//! Targets: 8 B <= 0.20 us, 4 KiB <= 1.0 us, the get at the raw rate.
//! Run: `cargo bench -p oxmpi-btl --bench sm_pingpong` (`SM_BENCH_ITERS`
//! overrides the iterations per run).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use oxmpi_btl::btl::{Access, AmTag, Btl, BtlError, BtlSink, Endpoint, PeerInfo, RemoteKey, Token};
use oxmpi_btl::cma;
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::sm::{SmBtl, SmConfig};

const CHILD_VAR: &str = "OXMPI_SM_BENCH_CHILD";
const T_SMALL: u8 = 1;
const T_LARGE: u8 = 2;
const T_STOP: u8 = 3;
const SMALL: usize = 8;
const LARGE: usize = 4096;
const GET_LEN: usize = 4 << 20;
const RUNS: usize = 7;

/// Copies each message out and remembers its tag.
struct Sink {
    got: Option<u8>,
    buf: Vec<u8>,
    done: Option<Token>,
}

impl BtlSink for Sink {
    #[inline]
    fn on_recv(&mut self, _ep: Endpoint, tag: AmTag, data: &[u8]) {
        self.buf[..data.len()].copy_from_slice(data);
        self.got = Some(tag.0);
    }
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        result.expect("operation failed");
        self.done = Some(token);
    }
    fn on_peer_lost(&mut self, _ep: Endpoint, why: &BtlError) {
        panic!("peer lost: {why}");
    }
}

fn region(v: &[u8]) -> MemRegion {
    // SAFETY: every buffer given to the BTL here lives until the end of the
    // process, and each operation completes before its buffer is reused.
    unsafe { MemRegion::from_slice(v) }
}

fn pin(core: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(core);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("cannot pin to core {core}: {e}");
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn module(index: u32, theirs: impl FnOnce(&[u8]) -> Vec<u8>) -> (SmBtl, Endpoint) {
    let mut btl = SmBtl::new(SmConfig::new(index, 2)).expect("sm module");
    let card = theirs(&btl.business_card());
    let ep = btl
        .add_peer(&PeerInfo {
            rank: 1 - index,
            local: true,
            card: Some(&card),
        })
        .unwrap()
        .expect("sm reaches the other process");
    (btl, ep)
}

fn child() {
    pin(1);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let (mut btl, ep) = module(1, |card| {
        println!("card={}", hex(card));
        std::io::stdout().flush().unwrap();
        unhex(
            lines
                .next()
                .unwrap()
                .unwrap()
                .trim()
                .strip_prefix("card=")
                .unwrap(),
        )
    });
    // The source of the parent's gets, its pages touched.
    let remote = vec![0x5au8; GET_LEN];
    let reg = btl
        .register_mem(region(&remote), Access::REMOTE_READ)
        .unwrap();
    println!(
        "key={} addr={}",
        hex(reg.key.as_bytes()),
        remote.as_ptr() as usize
    );
    std::io::stdout().flush().unwrap();
    let mut sink = Sink {
        got: None,
        buf: vec![0; LARGE],
        done: None,
    };
    let reply = vec![0u8; LARGE];
    loop {
        btl.progress(&mut sink);
        match sink.got.take() {
            None => {}
            Some(T_SMALL) => {
                while btl
                    .sendi(ep, AmTag(T_SMALL), &[&sink.buf[..SMALL]])
                    .is_err()
                {
                    btl.progress(&mut sink);
                }
            }
            Some(T_LARGE) => loop {
                let d = btl.prepare_src(ep, 0, region(&reply)).unwrap();
                match btl.send(d, AmTag(T_LARGE), Token(0)) {
                    Ok(_) => break,
                    Err((d, _)) => {
                        btl.free(d);
                        btl.progress(&mut sink);
                    }
                }
            },
            Some(_) => break,
        }
    }
    btl.deregister_mem(reg.id);
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Half round trips in microseconds of `iters` ping-pongs, per run.
fn pingpong(
    btl: &mut SmBtl,
    ep: Endpoint,
    sink: &mut Sink,
    tag: u8,
    iters: usize,
    runs: usize,
) -> Vec<f64> {
    let msg = vec![7u8; LARGE];
    let mut out = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        for _ in 0..iters {
            if tag == T_SMALL {
                while btl.sendi(ep, AmTag(T_SMALL), &[&msg[..SMALL]]).is_err() {
                    btl.progress(sink);
                }
            } else {
                loop {
                    let d = btl.prepare_src(ep, 0, region(&msg)).unwrap();
                    match btl.send(d, AmTag(T_LARGE), Token(0)) {
                        Ok(_) => break,
                        Err((d, _)) => {
                            btl.free(d);
                            btl.progress(sink);
                        }
                    }
                }
            }
            while sink.got.take().is_none() {
                btl.progress(sink);
            }
        }
        out.push(start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64);
    }
    out
}

fn parent() {
    let iters: usize = std::env::var("SM_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let exe = std::env::current_exe().unwrap();
    let mut proc = Command::new(exe)
        .env(CHILD_VAR, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let pid = proc.id();
    let mut to_child = proc.stdin.take().unwrap();
    let mut from_child = BufReader::new(proc.stdout.take().unwrap());
    let mut line = String::new();
    pin(0);
    let (mut btl, ep) = module(0, |card| {
        from_child.read_line(&mut line).unwrap();
        let theirs = unhex(line.trim().strip_prefix("card=").unwrap());
        writeln!(to_child, "card={}", hex(card)).unwrap();
        to_child.flush().unwrap();
        theirs
    });
    line.clear();
    from_child.read_line(&mut line).unwrap();
    let mut words = line.split_whitespace();
    let key = RemoteKey::new(&unhex(words.next().unwrap().strip_prefix("key=").unwrap())).unwrap();
    let remote_addr: usize = words
        .next()
        .unwrap()
        .strip_prefix("addr=")
        .unwrap()
        .parse()
        .unwrap();
    let mut sink = Sink {
        got: None,
        buf: vec![0; LARGE],
        done: None,
    };

    println!(
        "sm ping-pong, processes pinned to cores 0 and 1, median of {RUNS} runs x {iters} iterations"
    );
    pingpong(&mut btl, ep, &mut sink, T_SMALL, iters / 5, 1);
    let small = pingpong(&mut btl, ep, &mut sink, T_SMALL, iters, RUNS);
    let s = median(small.clone());
    println!(
        "  sendi {SMALL:>5} B : {s:.3} us half round trip, best run {:.3} (target <= 0.20: {}) runs {:.3?}",
        best(&small),
        if s <= 0.20 { "met" } else { "MISSED" },
        small
    );
    pingpong(&mut btl, ep, &mut sink, T_LARGE, iters / 5, 1);
    let large = pingpong(&mut btl, ep, &mut sink, T_LARGE, iters, RUNS);
    let l = median(large.clone());
    println!(
        "  send  {LARGE:>5} B : {l:.3} us half round trip, best run {:.3} (target <= 1.0: {}) runs {:.3?}",
        best(&large),
        if l <= 1.0 { "met" } else { "MISSED" },
        large
    );

    // 4 MiB get through the BTL, and raw process_vm_readv, alternating.
    let local = vec![1u8; GET_LEN];
    let reps = 20;
    let (mut via_btl, mut raw) = (Vec::new(), Vec::new());
    let mut scratch = vec![2u8; GET_LEN];
    for round in 0..=RUNS {
        let start = Instant::now();
        for k in 0..reps {
            let t = Token(k as u64);
            btl.get(ep, region(&local), &key, 0, t).unwrap();
            while sink.done.take() != Some(t) {
                btl.progress(&mut sink);
            }
        }
        let b = (reps * GET_LEN) as f64 / start.elapsed().as_secs_f64() / 1e9;
        let start = Instant::now();
        for _ in 0..reps {
            cma::read(pid, &mut scratch, remote_addr).unwrap();
        }
        let r = (reps * GET_LEN) as f64 / start.elapsed().as_secs_f64() / 1e9;
        if round > 0 {
            via_btl.push(b);
            raw.push(r);
        }
    }
    assert!(local.iter().all(|&b| b == 0x5a) && scratch.iter().all(|&b| b == 0x5a));
    let (b, r) = (median(via_btl.clone()), median(raw.clone()));
    println!(
        "  get   4 MiB   : {b:.2} GB/s through the BTL, raw process_vm_readv {r:.2} GB/s ({:.0}%) btl {:.2?} raw {:.2?}",
        100.0 * b / r,
        via_btl,
        raw
    );

    while btl.sendi(ep, AmTag(T_STOP), &[b"stop"]).is_err() {
        btl.progress(&mut sink);
    }
    drop(to_child);
    let status = proc.wait().unwrap();
    assert!(status.success(), "child: {status}");
}

fn main() {
    if std::env::var_os(CHILD_VAR).is_some() {
        child();
    } else {
        parent();
    }
}
