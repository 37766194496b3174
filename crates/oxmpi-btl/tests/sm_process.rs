//! The sm BTL between two real processes: this test binary runs itself as
//! the child (local rank 1 of 2); cards travel through the child's stdin and
//! stdout pipes.
//!
//! * 10,000 messages each way, random sizes 0..=max_send_size (sendi,
//!   alloc+send and prepare_src+send), order and content checked;
//! * a 64 MiB get and a 64 MiB put through CMA while the child does not
//!   progress at all (so they cannot have gone through the rings);
//! * a child killed with SIGKILL mid-stream: the parent sees the loss
//!   (`on_peer_lost`, then `PeerGone`) within 2 s and nothing hangs.
#![cfg(not(loom))]

mod sm_cma_support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use oxmpi_btl::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Endpoint, PeerInfo, RemoteKey, Token,
};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::sm::{SmBtl, SmConfig};
use sm_cma_support::{child_mode, field, from_hex, next_command, say, to_hex, ChildProc};

const MESSAGES: u64 = 10_000;
const RDMA_LEN: usize = 64 << 20;
/// Each test has a parent and a child polling busily: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Random bytes that message contents are cut from (copies and compares
/// stay cheap in a debug build).
fn source() -> Vec<u8> {
    (0..(128 << 10) / 8)
        .flat_map(|i| splitmix(0xabcd + i).to_le_bytes())
        .collect()
}

/// Message `i` from `from`: its length, its tag, its offset in `source()`.
fn message(from: u32, i: u64, max: usize) -> (usize, u8, usize) {
    let r = splitmix(u64::from(from) << 40 | i);
    let len = (r % (max as u64 + 1)) as usize;
    let off = ((r >> 32) % (32 << 10)) as usize;
    (len, (i % 251) as u8, off)
}

fn region(v: &[u8]) -> MemRegion {
    // SAFETY: every region made here outlives the operation given it: each
    // test drives its operations to completion before the vector goes.
    unsafe { MemRegion::from_slice(v) }
}

/// Checks what arrives from the peer, in order.
struct Checker<'a> {
    from: u32,
    max: usize,
    src: &'a [u8],
    next: u64,
    lost: Vec<Endpoint>,
    completions: Vec<(Token, Result<(), BtlError>)>,
}

impl BtlSink for Checker<'_> {
    fn on_recv(&mut self, _ep: Endpoint, tag: AmTag, data: &[u8]) {
        let (len, want_tag, off) = message(self.from, self.next, self.max);
        assert_eq!(tag, AmTag(want_tag), "tag of message {}", self.next);
        assert_eq!(data.len(), len, "length of message {}", self.next);
        assert!(
            data == &self.src[off..off + len],
            "content of message {}",
            self.next
        );
        self.next += 1;
    }
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        self.completions.push((token, result));
    }
    fn on_peer_lost(&mut self, ep: Endpoint, _why: &BtlError) {
        self.lost.push(ep);
    }
}

/// Sends message `i` (the method depends on its size and parity); false when
/// the ring is full.
fn send_message(btl: &mut SmBtl, ep: Endpoint, me: u32, i: u64, src: &[u8]) -> bool {
    let max = btl.limits().max_send_size;
    let (len, tag, off) = message(me, i, max);
    let data = &src[off..off + len];
    let r = if len <= btl.limits().max_sendi_size && i % 3 == 0 {
        let (a, b) = data.split_at(len / 2);
        btl.sendi(ep, AmTag(tag), &[a, b])
    } else {
        let desc = if i % 2 == 0 {
            btl.alloc(ep, len).map(|mut d| {
                d.buf.copy_from_slice(data);
                d
            })
        } else {
            let hdr = len.min(12);
            btl.prepare_src(ep, hdr, region(&data[hdr..])).map(|mut d| {
                d.buf.copy_from_slice(&data[..hdr]);
                d
            })
        };
        desc.and_then(|d| {
            btl.send(d, AmTag(tag), Token(i))
                .map(|_| ())
                .map_err(|(d, e)| {
                    btl.free(d);
                    e
                })
        })
    };
    match r {
        Ok(()) => true,
        Err(BtlError::NoResource) => false,
        Err(e) => panic!("send {i} of {len} bytes: {e}"),
    }
}

/// Creates this side's module and swaps cards with the other side through
/// `swap(our card) -> their card`.
fn setup(index: u32, swap: impl FnOnce(&[u8]) -> Vec<u8>) -> (SmBtl, Endpoint) {
    let mut btl = SmBtl::new(SmConfig::new(index, 2)).unwrap();
    let theirs = swap(&btl.business_card());
    let ep = btl
        .add_peer(&PeerInfo {
            rank: 1 - index,
            local: true,
            card: Some(&theirs),
        })
        .unwrap()
        .expect("sm reaches a local rank");
    (btl, ep)
}

fn child_setup() -> (SmBtl, Endpoint) {
    setup(1, |card| {
        say(&format!("card={}", to_hex(card)));
        let line = next_command().expect("the parent's card");
        from_hex(line.strip_prefix("card=").expect("card=..."))
    })
}

fn parent_setup(mode: &str) -> (SmBtl, Endpoint, ChildProc) {
    let mut child = ChildProc::spawn(mode, &[]);
    let (btl, ep) = setup(0, |card| {
        let theirs = from_hex(&field::<String>(&child.hear(), "card"));
        child.tell(&format!("card={}", to_hex(card)));
        theirs
    });
    (btl, ep, child)
}

/// Sends `MESSAGES` to the peer while checking the `MESSAGES` it sends.
fn exchange(btl: &mut SmBtl, ep: Endpoint, me: u32, src: &[u8]) {
    let max = btl.limits().max_send_size;
    let mut rx = Checker {
        from: 1 - me,
        max,
        src,
        next: 0,
        lost: Vec::new(),
        completions: Vec::new(),
    };
    let mut sent = 0;
    let start = Instant::now();
    while sent < MESSAGES || rx.next < MESSAGES {
        while sent < MESSAGES && send_message(btl, ep, me, sent, src) {
            sent += 1;
        }
        btl.progress(&mut rx);
        assert!(rx.lost.is_empty(), "peer lost during the exchange");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "stuck: sent {sent}, received {}",
            rx.next
        );
    }
    assert!(rx.completions.is_empty(), "sends are Done, never Pending");
}

#[test]
fn child_entry() {
    let Some(mode) = child_mode() else { return };
    let src = source();
    let (mut btl, ep) = child_setup();
    match mode.as_str() {
        "exchange" => {
            exchange(&mut btl, ep, 1, &src);
            say("done");
            // Stay (and keep the segment) until the parent is done too.
            while next_command().is_some() {}
        }
        "rdma" => {
            let mut buf = vec![0u8; RDMA_LEN];
            for (i, c) in buf.chunks_mut(8).enumerate() {
                c.copy_from_slice(&splitmix(i as u64).to_le_bytes());
            }
            let reg = btl
                .register_mem(region(&buf), Access::REMOTE_READ | Access::REMOTE_WRITE)
                .unwrap();
            say(&format!("key={}", to_hex(reg.key.as_bytes())));
            // No progress from here on: only CMA can serve the parent.
            while let Some(cmd) = next_command() {
                if cmd == "check" {
                    let now = std::hint::black_box(&buf[..]);
                    let ok = now
                        .chunks(8)
                        .enumerate()
                        .all(|(i, c)| c == splitmix(!(i as u64)).to_le_bytes());
                    say(if ok { "ok" } else { "bad" });
                }
            }
            btl.deregister_mem(reg.id);
            drop(buf);
        }
        "stream" => {
            // Sends and receives until killed.
            let max = btl.limits().max_send_size;
            let mut rx = Checker {
                from: 0,
                max,
                src: &src,
                next: 0,
                lost: Vec::new(),
                completions: Vec::new(),
            };
            let mut i = 0;
            loop {
                while send_message(&mut btl, ep, 1, i, &src) {
                    i += 1;
                }
                btl.progress(&mut rx);
            }
        }
        other => panic!("unknown mode {other}"),
    }
    drop(btl);
    std::process::exit(0);
}

#[test]
fn ten_thousand_messages_each_way() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let src = source();
    let (mut btl, ep, mut child) = parent_setup("exchange");
    let start = Instant::now();
    exchange(&mut btl, ep, 0, &src);
    assert_eq!(child.hear(), "done");
    eprintln!(
        "{MESSAGES} messages each way (up to {} B) in {:?}",
        btl.limits().max_send_size,
        start.elapsed()
    );
    child.finish();
}

#[test]
fn get_and_put_64_mib_through_cma() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut btl, ep, mut child) = parent_setup("rdma");
    if !btl.caps().contains(Caps::GET) {
        eprintln!("CMA impossible on this node: skipped");
        return;
    }
    let key = RemoteKey::new(&from_hex(&field::<String>(&child.hear(), "key"))).unwrap();
    let mut rx = Checker {
        from: 1,
        max: 0,
        src: &[],
        next: 0,
        lost: Vec::new(),
        completions: Vec::new(),
    };
    let mut local = vec![0u8; RDMA_LEN];
    let mut run = |btl: &mut SmBtl, local: &[u8], put: bool, token: Token| {
        let start = Instant::now();
        if put {
            btl.put(ep, region(local), &key, 0, token).unwrap();
        } else {
            btl.get(ep, region(local), &key, 0, token).unwrap();
        }
        while !rx.completions.iter().any(|(t, _)| *t == token) {
            btl.progress(&mut rx);
            assert!(start.elapsed() < Duration::from_secs(10), "rdma hangs");
        }
        let took = start.elapsed();
        eprintln!(
            "{} of 64 MiB: {took:?} ({:.2} GB/s)",
            if put { "put" } else { "get" },
            RDMA_LEN as f64 / took.as_secs_f64() / 1e9
        );
    };
    run(&mut btl, &local, false, Token(1));
    assert_eq!(btl.single_copy_to(ep), Some(true), "CMA probe failed");
    assert!(
        local
            .chunks(8)
            .enumerate()
            .all(|(i, c)| c == splitmix(i as u64).to_le_bytes()),
        "get: data differ"
    );
    for (i, c) in local.chunks_mut(8).enumerate() {
        c.copy_from_slice(&splitmix(!(i as u64)).to_le_bytes());
    }
    run(&mut btl, &local, true, Token(2));
    assert!(
        rx.completions.iter().all(|(_, r)| r.is_ok()),
        "{:?}",
        rx.completions
    );
    assert_eq!(rx.completions.len(), 2);
    child.tell("check");
    assert_eq!(child.hear(), "ok", "put: the child's bytes differ");
    // Out of range: refused, nothing touched.
    let r = btl.get(ep, region(&local[..16]), &key, RDMA_LEN - 8, Token(3));
    assert!(matches!(r, Err(BtlError::Invalid(_))), "{r:?}");
    child.finish();
}

#[test]
fn sigkilled_peer_is_lost_within_two_seconds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let src = source();
    let (mut btl, ep, mut child) = parent_setup("stream");
    let max = btl.limits().max_send_size;
    let mut rx = Checker {
        from: 1,
        max,
        src: &src,
        next: 0,
        lost: Vec::new(),
        completions: Vec::new(),
    };
    let start = Instant::now();
    let mut sent = 0;
    while rx.next < 2000 {
        while send_message(&mut btl, ep, 0, sent, &src) {
            sent += 1;
        }
        btl.progress(&mut rx);
        assert!(start.elapsed() < Duration::from_secs(20), "stream stuck");
    }
    // SIGKILL, not reaped yet (a zombie): the pidfd still tells.
    child.child.kill().unwrap();
    let killed = Instant::now();
    let gone = loop {
        match btl.sendi(ep, AmTag(1), &[b"are you there"]) {
            Ok(()) | Err(BtlError::NoResource) => {}
            Err(BtlError::PeerGone(e, why)) => {
                assert_eq!(e, ep);
                break why;
            }
            Err(e) => panic!("sendi after the kill: {e}"),
        }
        btl.progress(&mut rx);
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "a SIGKILLed peer not seen gone within 2 s"
        );
    };
    while rx.lost.is_empty() {
        btl.progress(&mut rx);
        assert!(killed.elapsed() < Duration::from_secs(2), "no on_peer_lost");
    }
    eprintln!(
        "peer lost {:?} after SIGKILL ({gone}); {} messages received before",
        killed.elapsed(),
        rx.next
    );
    assert_eq!(rx.lost, vec![ep]);
    for _ in 0..10_000 {
        btl.progress(&mut rx);
    }
    assert_eq!(rx.lost, vec![ep], "reported once");
    let r = btl.alloc(ep, 8);
    assert!(matches!(r, Err(BtlError::PeerGone(..))), "{r:?}");
    drop(btl);
    drop(child);
}
