//! CMA against a real child process: reads and writes of many sizes (up to
//! 64 MiB, data checked), vectored transfers over more than IOV_MAX entries,
//! probing (success and every failure path), and a peer that is gone.

mod sm_cma_support;

use std::io::{IoSlice, IoSliceMut};

use oxmpi_btl::cma::{self, CmaError, CmaPeer, ProbeWord, RemoteSlice, Unavailable, IOV_MAX};
use sm_cma_support::{child_mode, field, next_command, pattern, say, ChildProc};

const BUF: usize = (64 << 20) + 8192;
const SEED: u64 = 1;

/// Child: a buffer filled with `pattern(SEED)` and a probe word; answers
/// `check <off> <len> <seed>` with `ok` or `bad`.
#[test]
fn child_entry() {
    let Some(mode) = child_mode() else { return };
    assert_eq!(mode, "serve");
    let mut buf = pattern(SEED, 0, BUF);
    let probe = ProbeWord::new();
    say(&format!(
        "buf={} len={} probe={} value={}",
        buf.as_mut_ptr() as usize,
        buf.len(),
        probe.addr(),
        probe.value()
    ));
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["check", off, len, seed] => {
                let (off, len, seed): (usize, usize, u64) = (
                    off.parse().unwrap(),
                    len.parse().unwrap(),
                    seed.parse().unwrap(),
                );
                // The parent wrote through CMA: read what is in memory now.
                let now = std::hint::black_box(&buf[off..off + len]);
                say(if now == pattern(seed, off, len).as_slice() {
                    "ok"
                } else {
                    "bad"
                });
            }
            ["exit"] => break,
            other => panic!("unknown command {other:?}"),
        }
    }
    drop(probe);
    std::process::exit(0);
}

struct Peer {
    proc: ChildProc,
    pid: u32,
    buf: usize,
    probe: usize,
    value: u64,
}

fn serve() -> Peer {
    let mut proc = ChildProc::spawn("serve", &[]);
    let line = proc.hear();
    assert_eq!(field::<usize>(&line, "len"), BUF);
    Peer {
        pid: proc.pid(),
        buf: field(&line, "buf"),
        probe: field(&line, "probe"),
        value: field(&line, "value"),
        proc,
    }
}

impl Peer {
    fn check(&mut self, off: usize, len: usize, seed: u64) {
        self.proc.tell(&format!("check {off} {len} {seed}"));
        assert_eq!(
            self.proc.hear(),
            "ok",
            "child's bytes [{off}, +{len}) after a write"
        );
    }
}

const SIZES: [usize; 6] = [0, 1, 4095, 4096, 1 << 20, 64 << 20];

#[test]
fn prepare_never_fails() {
    let support = cma::prepare();
    // This machine has no Yama or scope <= 1.
    if !std::path::Path::new("/proc/sys/kernel/yama/ptrace_scope").exists() {
        assert_eq!(
            support,
            cma::CmaSupport::Possible {
                yama_scope: None,
                ptracer_any: false
            }
        );
    }
}

#[test]
fn read_sizes() {
    let peer = serve();
    assert!(CmaPeer::probe(peer.pid, peer.probe, peer.value).is_available());
    for len in SIZES {
        for off in [0, 1, 4093, 8192] {
            let mut local = vec![0u8; len];
            cma::read(peer.pid, &mut local, peer.buf + off).unwrap();
            assert!(
                local == pattern(SEED, off, len),
                "read {len} bytes at {off}"
            );
        }
    }
    peer.proc.finish();
}

#[test]
fn write_sizes() {
    let mut peer = serve();
    for (i, len) in SIZES.into_iter().enumerate() {
        let seed = 100 + i as u64;
        let off = [0, 3, 4096, 1][i % 4];
        let data = pattern(seed, off, len);
        cma::write(peer.pid, &data, peer.buf + off).unwrap();
        peer.check(off, len, seed);
        let mut back = vec![0u8; len];
        cma::read(peer.pid, &mut back, peer.buf + off).unwrap();
        assert!(back == data);
    }
    peer.proc.finish();
}

/// Splits `total` bytes into pieces of 1..=max bytes (deterministic).
fn pieces(total: usize, max: usize, salt: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = total;
    let mut i = salt;
    while left > 0 {
        let n = (i * 7919 % max + 1).min(left);
        out.push(n);
        left -= n;
        i += 1;
    }
    out
}

#[test]
fn vectored_over_iov_max() {
    let mut peer = serve();
    let total = 200_000;
    let base = 12_345;
    let local_lens = pieces(total, 97, 1);
    let remote_lens = pieces(total, 131, 5);
    assert!(local_lens.len() > 2 * IOV_MAX && remote_lens.len() > IOV_MAX);

    // Remote ranges with 1-byte holes between them, so order matters.
    let mut remote = Vec::new();
    let mut addr = peer.buf + base;
    let mut expect = Vec::new();
    for &len in &remote_lens {
        remote.push(RemoteSlice { addr, len });
        expect.extend_from_slice(&pattern(SEED, addr - peer.buf, len));
        addr += len + 1;
    }
    // Zero-length entries on both sides are skipped.
    remote.insert(7, RemoteSlice { addr: 0, len: 0 });

    let mut flat = vec![0u8; total];
    {
        let mut rest = flat.as_mut_slice();
        let mut local = Vec::new();
        for &len in &local_lens {
            let (head, tail) = rest.split_at_mut(len);
            local.push(IoSliceMut::new(head));
            rest = tail;
        }
        local.insert(3, IoSliceMut::new(&mut []));
        cma::readv(peer.pid, &mut local, &remote).unwrap();
    }
    assert!(flat == expect, "readv");

    // Write a new pattern the same way, then check each remote range.
    let data = pattern(77, 0, total);
    let mut local = Vec::new();
    let mut at = 0;
    for &len in &local_lens {
        local.push(IoSlice::new(&data[at..at + len]));
        at += len;
    }
    cma::writev(peer.pid, &local, &remote).unwrap();
    let mut at = 0;
    let mut back = vec![0u8; total];
    let mut got = 0;
    for r in remote.iter().filter(|r| r.len > 0) {
        cma::read(peer.pid, &mut back[got..got + r.len], r.addr).unwrap();
        got += r.len;
        at += r.len;
    }
    assert_eq!(at, total);
    assert!(back == data, "writev");
    // A hole was not written.
    let hole = remote[0].addr + remote[0].len;
    let mut byte = [0u8];
    cma::read(peer.pid, &mut byte, hole).unwrap();
    assert_eq!(byte.to_vec(), pattern(SEED, hole - peer.buf, 1));
    peer.check(hole - peer.buf, 1, SEED);
    peer.proc.finish();
}

#[test]
fn length_mismatch() {
    let peer = serve();
    let mut a = [0u8; 10];
    let err = cma::readv(
        peer.pid,
        &mut [IoSliceMut::new(&mut a)],
        &[RemoteSlice {
            addr: peer.buf,
            len: 11,
        }],
    );
    assert_eq!(
        err,
        Err(CmaError::LengthMismatch {
            local: 10,
            remote: 11
        })
    );
    peer.proc.finish();
}

#[test]
fn bad_remote_address() {
    let peer = serve();
    let mut a = [0u8; 64];
    assert!(matches!(
        cma::read(peer.pid, &mut a, 8),
        Err(CmaError::BadAddress { .. })
    ));
    assert!(matches!(
        cma::write(peer.pid, &a, 8),
        Err(CmaError::BadAddress { .. })
    ));
    // Past the end of the mapping: a partial transfer then EFAULT.
    let mut big = vec![0u8; 256 << 20];
    assert!(matches!(
        cma::read(peer.pid, &mut big, peer.buf),
        Err(CmaError::BadAddress { .. })
    ));
    peer.proc.finish();
}

#[test]
fn probe_paths() {
    let peer = serve();
    assert_eq!(
        CmaPeer::probe(peer.pid, peer.probe, peer.value),
        CmaPeer::Available { pid: peer.pid }
    );
    match CmaPeer::probe(peer.pid, peer.probe, peer.value ^ 1) {
        CmaPeer::Unavailable(Unavailable::ProbeMismatch { .. }) => {}
        other => panic!("{other:?}"),
    }
    match CmaPeer::probe(peer.pid, 16, peer.value) {
        CmaPeer::Unavailable(Unavailable::ProbeFailed(errno)) => {
            assert_eq!(errno, rustix::io::Errno::FAULT)
        }
        other => panic!("{other:?}"),
    }
    // Ourselves works too.
    let word = ProbeWord::new();
    assert!(CmaPeer::probe(std::process::id(), word.addr(), word.value()).is_available());
    // A pid that does not exist.
    assert!(!CmaPeer::probe((1 << 22) + 17, peer.probe, peer.value).is_available());
    assert!(!CmaPeer::probe(u32::MAX, peer.probe, peer.value).is_available());
    peer.proc.finish();
}

#[test]
fn peer_gone() {
    let mut peer = serve();
    let mut a = [0u8; 8];
    cma::read(peer.pid, &mut a, peer.buf).unwrap();
    peer.proc.tell("exit");
    let pid = peer.pid;
    peer.proc.finish();
    assert_eq!(
        cma::read(pid, &mut a, peer.buf),
        Err(CmaError::PeerGone { pid })
    );
    assert_eq!(
        cma::write(pid, &a, peer.buf),
        Err(CmaError::PeerGone { pid })
    );
    assert!(!CmaPeer::probe(pid, peer.probe, peer.value).is_available());
}
