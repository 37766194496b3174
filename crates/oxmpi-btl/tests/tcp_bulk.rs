//! Bulk transfer between two processes over loopback, every byte checked:
//! the child streams `N` bytes in the largest fragments, each starting with
//! its stream offset and filled with a pattern derived from the offset
//! (so neither side stores the stream). 64 MiB by default; 1 GiB with
//!
//! ```text
//! cargo test -p oxmpi-btl --release --test tcp_bulk
//! ```

mod tcp_common;

use std::time::{Duration, Instant};

use oxmpi_btl::btl::{AmTag, Btl, BtlError, BtlSink, Endpoint, Token};
use tcp_common::*;

const DONE_TAG: u8 = 9;
const DATA_TAG: u8 = 4;

/// Checks the stream as it arrives.
struct Checker {
    next: u64,
    frags: u64,
    bad: Option<String>,
    lost: bool,
}

impl BtlSink for Checker {
    fn on_recv(&mut self, _ep: Endpoint, tag: AmTag, data: &[u8]) {
        if self.bad.is_some() {
            return;
        }
        if tag != AmTag(DATA_TAG) || data.len() < 8 {
            self.bad = Some(format!(
                "unexpected fragment: tag {tag:?}, {} bytes",
                data.len()
            ));
            return;
        }
        let off = u64::from_le_bytes(data[..8].try_into().unwrap());
        if off != self.next {
            self.bad = Some(format!("fragment at offset {off}, expected {}", self.next));
            return;
        }
        if !check(&data[8..], off) {
            self.bad = Some(format!("damaged fragment at offset {off}"));
            return;
        }
        self.next += (data.len() - 8) as u64;
        self.frags += 1;
    }
    fn on_complete(&mut self, _token: Token, result: Result<(), BtlError>) {
        if let Err(e) = result {
            self.bad = Some(format!("completion failed: {e}"));
        }
    }
    fn on_peer_lost(&mut self, _ep: Endpoint, _why: &BtlError) {
        self.lost = true;
    }
}

fn child(total: u64) -> ! {
    let mut m = one_module(&lo_config(1));
    print_card(&m.business_card());
    let parent = unhex(&read_stdin_line("CARD "));
    let ep = add(&mut m, 0, &parent);
    let mut rec = Rec::default();
    let chunk = (m.limits().max_send_size - 8) as u64 / 8 * 8;
    let mut off = 0u64;
    let mut token = 0u64;
    while off < total {
        let n = chunk.min(total - off) as usize;
        let mut d = match m.alloc(ep, 8 + n) {
            Ok(d) => d,
            Err(BtlError::NoResource) => {
                m.progress(&mut rec);
                continue;
            }
            Err(e) => panic!("child alloc: {e}"),
        };
        d.buf[..8].copy_from_slice(&off.to_le_bytes());
        fill(&mut d.buf[8..], off);
        loop {
            match m.send(d, AmTag(DATA_TAG), Token(token)) {
                Ok(_) => break,
                Err((back, BtlError::NoResource)) => {
                    d = back;
                    m.progress(&mut rec);
                    rec.completions.clear();
                }
                Err((_, e)) => panic!("child send: {e}"),
            }
        }
        token += 1;
        off += n as u64;
        rec.completions.clear();
    }
    // Wait for the parent's acknowledgement of the whole stream.
    let start = Instant::now();
    while !rec.recvs.iter().any(|(_, t, _)| *t == AmTag(DONE_TAG)) {
        m.progress(&mut rec);
        rec.completions.clear();
        assert!(rec.lost.is_empty(), "child: parent lost");
        assert!(start.elapsed() < Duration::from_secs(600), "child: no DONE");
    }
    std::process::exit(0);
}

fn bulk(test: &str, total: u64) {
    if let Ok(role) = std::env::var(ROLE_VAR) {
        child(role.parse().expect("size"));
    }
    let mut m = one_module(&lo_config(0));
    let mut p = Proc::reexec(test, &total.to_string());
    let card = unhex(&p.expect("CARD ", Duration::from_secs(20)));
    p.say(&format!("CARD {}", hex(&m.business_card())));
    let ep = add(&mut m, 1, &card);
    let mut c = Checker {
        next: 0,
        frags: 0,
        bad: None,
        lost: false,
    };
    let start = Instant::now();
    while c.next < total {
        m.progress(&mut c);
        if let Some(bad) = &c.bad {
            panic!("{bad}");
        }
        assert!(!c.lost, "child lost after {} bytes", c.next);
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "stuck at {}",
            c.next
        );
    }
    let took = start.elapsed();
    assert_eq!(c.next, total);
    m.sendi(ep, AmTag(DONE_TAG), &[b"done"])
        .expect("sendi DONE");
    while m.has_work() {
        m.progress(&mut c);
    }
    let status = p.wait(Duration::from_secs(30));
    assert!(status.success(), "child: {status}");
    assert!(c.bad.is_none(), "{:?}", c.bad);
    eprintln!(
        "{total} bytes in {} fragments, checked, in {took:?} ({:.2} GB/s)",
        c.frags,
        total as f64 / took.as_secs_f64() / 1e9
    );
}

#[test]
fn tcp_bulk_64mib() {
    bulk("tcp_bulk_64mib", 64 << 20);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "1 GiB: run in release (scripts/test-all.sh does)"
)]
fn tcp_bulk_1gib() {
    bulk("tcp_bulk_1gib", 1 << 30);
}
