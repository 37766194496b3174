//! TCP BTL over loopback between two processes (this binary re-executed as
//! the child), pinned to CPUs 0 and 1, both busy-polling `progress`:
//!
//! * ping-pong of 8 bytes with `sendi`: half round trip in µs (median of
//!   7 samples of 20,000 round trips);
//! * streaming of 1 MiB and 4 MiB messages cut into `max_send_size`
//!   fragments (`prepare_src`, a copy, as the PML's pipeline does), the
//!   receiver acknowledging each message: GB/s (10^9 bytes per second,
//!   median of 5 samples of 512 MiB).
//!
//! A plain timed `main` (harness = false). Run with
//! `cargo bench -p oxmpi-btl --bench tcp_pingpong`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use oxmpi_btl::btl::{AmTag, Btl, BtlError, BtlSink, Endpoint, PeerInfo, Token};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::tcp::{TcpBtl, TcpConfig};

const CHILD_VAR: &str = "OXMPI_BENCH_TCP_CHILD";
const SECRET: [u8; 16] = *b"bench-tcp-secret";
const PING: AmTag = AmTag(1);
const DATA: AmTag = AmTag(2);
const END: AmTag = AmTag(3);
const QUIT: AmTag = AmTag(9);
const ROUND_TRIPS: usize = 20_000;
const SAMPLE_BYTES: usize = 512 << 20;

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("cannot pin to CPU {cpu}: {e}; running unpinned");
    }
}

fn module(rank: u32) -> TcpBtl {
    let mut cfg = TcpConfig::new(rank, SECRET);
    cfg.if_include = vec!["lo".into()];
    TcpBtl::open_all(&cfg).expect("open tcp").remove(0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn add(m: &mut TcpBtl, rank: u32, card: &[u8]) -> Endpoint {
    m.add_peer(&PeerInfo {
        rank,
        local: true,
        card: Some(card),
    })
    .unwrap()
    .expect("reachable")
}

/// Counts what arrives.
#[derive(Default)]
struct Counter {
    pings: usize,
    ends: usize,
    quit: bool,
    bytes: usize,
}

impl BtlSink for Counter {
    fn on_recv(&mut self, _ep: Endpoint, tag: AmTag, data: &[u8]) {
        match tag {
            PING => self.pings += 1,
            END => self.ends += 1,
            QUIT => self.quit = true,
            _ => {}
        }
        self.bytes += data.len();
    }
    fn on_complete(&mut self, _token: Token, result: Result<(), BtlError>) {
        result.expect("send failed");
    }
    fn on_peer_lost(&mut self, _ep: Endpoint, why: &BtlError) {
        panic!("peer lost: {why}");
    }
}

fn sendi(m: &mut TcpBtl, c: &mut Counter, ep: Endpoint, tag: AmTag, data: &[u8]) {
    loop {
        match m.sendi(ep, tag, &[data]) {
            Ok(()) => return,
            Err(BtlError::NoResource) => {
                m.progress(c);
            }
            Err(e) => panic!("sendi: {e}"),
        }
    }
}

/// Sends one message as pipeline fragments.
fn send_message(m: &mut TcpBtl, c: &mut Counter, ep: Endpoint, msg: &[u8]) {
    let frag = m.limits().max_send_size - 64;
    let mut off = 0;
    while off < msg.len() {
        let n = frag.min(msg.len() - off);
        // SAFETY: `msg` outlives this call and prepare_src copies it.
        let region = unsafe { MemRegion::from_slice(&msg[off..off + n]) };
        let last = off + n == msg.len();
        let d = match m.prepare_src(ep, 64, region) {
            Ok(d) => d,
            Err(BtlError::NoResource) => {
                m.progress(c);
                continue;
            }
            Err(e) => panic!("prepare_src: {e}"),
        };
        match m.send(d, if last { END } else { DATA }, Token(0)) {
            Ok(_) => off += n,
            Err((d, BtlError::NoResource)) => {
                m.free(d);
                m.progress(c);
            }
            Err((_, e)) => panic!("send: {e}"),
        }
    }
}

fn child() {
    pin(1);
    let mut m = module(1);
    println!("CARD {}", hex(&m.business_card()));
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let parent = unhex(line.trim().strip_prefix("CARD ").expect("CARD line"));
    let ep = add(&mut m, 0, &parent);
    let mut c = Counter::default();
    let (mut pings, mut ends) = (0, 0);
    while !c.quit {
        m.progress(&mut c);
        while pings < c.pings {
            pings += 1;
            sendi(&mut m, &mut c, ep, PING, &[0u8; 8]);
        }
        while ends < c.ends {
            ends += 1;
            sendi(&mut m, &mut c, ep, END, &[0u8; 8]);
        }
    }
    while m.has_work() {
        m.progress(&mut c);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if std::env::var(CHILD_VAR).is_ok() {
        child();
        return;
    }
    pin(0);
    let mut m = module(0);
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_VAR, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut out = BufReader::new(proc.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let card = unhex(line.trim().strip_prefix("CARD ").expect("CARD line"));
    let mut stdin = proc.stdin.take().unwrap();
    writeln!(stdin, "CARD {}", hex(&m.business_card())).unwrap();
    stdin.flush().unwrap();
    let ep = add(&mut m, 1, &card);
    let mut c = Counter::default();

    // Ping-pong.
    let mut halves = Vec::new();
    for sample in 0..8 {
        let start = Instant::now();
        for _ in 0..ROUND_TRIPS {
            let want = c.pings + 1;
            sendi(&mut m, &mut c, ep, PING, &[0u8; 8]);
            while c.pings < want {
                m.progress(&mut c);
            }
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / ROUND_TRIPS as f64 / 2.0;
        if sample > 0 {
            halves.push(us); // the first sample warms up
        }
    }
    println!(
        "tcp loopback ping-pong 8 B (sendi): half round trip {:.2} us (median of 7 x {ROUND_TRIPS}; min {:.2})",
        median(halves.clone()),
        halves.iter().cloned().fold(f64::MAX, f64::min)
    );

    // Streaming.
    for size in [1usize << 20, 4 << 20] {
        let msg: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let reps = SAMPLE_BYTES / size;
        let mut rates = Vec::new();
        for sample in 0..6 {
            let ends0 = c.ends;
            let start = Instant::now();
            for _ in 0..reps {
                send_message(&mut m, &mut c, ep, &msg);
            }
            while c.ends < ends0 + reps {
                m.progress(&mut c);
            }
            let gbs = (reps * size) as f64 / start.elapsed().as_secs_f64() / 1e9;
            if sample > 0 {
                rates.push(gbs);
            }
        }
        println!(
            "tcp loopback streaming {} MiB messages: {:.2} GB/s (median of 5 x {} MiB; max {:.2})",
            size >> 20,
            median(rates.clone()),
            SAMPLE_BYTES >> 20,
            rates.iter().cloned().fold(0.0, f64::max)
        );
    }

    sendi(&mut m, &mut c, ep, QUIT, b"q");
    while m.has_work() {
        m.progress(&mut c);
    }
    let status = proc.wait().unwrap();
    assert!(status.success(), "child: {status}");
}
