//! CMA bandwidth: `process_vm_readv` from a child process pinned to CPU 1
//! into this process pinned to CPU 0, next to a local memcpy of the same
//! size, in GB/s (10^9 bytes per second); and a split copy where this
//! process reads the first half while the child writes the second half into
//! us at the same time (two copiers for one message).
//!
//! Split copy, two ways: "free" lets both copiers run a whole sample
//! without meeting (aggregate bandwidth of two copiers); "barrier" meets once
//! per message through flags in a shared segment (what a split transfer of
//! one message costs, rendezvous included). Both spin, so they are only
//! meaningful on an otherwise idle machine with two free CPUs.
//!
//! A plain timed `main` (harness = false): each figure is the median of 7
//! samples (0.5 GB each, 128 MiB for the split). Run with `cargo bench -p oxmpi-btl --bench cma`.
#![allow(unsafe_code)]

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use oxmpi_btl::cma;
use oxmpi_btl::sm::segment::{Segment, SegmentCard, SegmentKind};

const CHILD_VAR: &str = "OXMPI_BENCH_CMA_CHILD";
const MAX: usize = 16 << 20;
const SIZES: [usize; 4] = [64 << 10, 1 << 20, 4 << 20, 16 << 20];
const SAMPLES: usize = 7;
const SAMPLE_BYTES: usize = 512 << 20;
const SPLIT_BYTES: usize = 128 << 20;

/// The two flags of the split copy, in a shared segment, a cache line apart.
struct Flags {
    go: &'static AtomicU64,
    done: &'static AtomicU64,
}

impl Flags {
    fn new(base: std::ptr::NonNull<u8>) -> Flags {
        // SAFETY: the segment is at least 4096 bytes, page aligned, zeroed,
        // lives until the process exits (leaked below), and both processes
        // only access these two words atomically.
        unsafe {
            Flags {
                go: &*base.as_ptr().cast::<AtomicU64>(),
                done: &*base.as_ptr().add(64).cast::<AtomicU64>(),
            }
        }
    }
}

/// Pins this process to `cpu`. Not modulo the CPUs we may run on: a child
/// inherits its parent's single-CPU affinity.
fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("cannot pin to CPU {cpu}: {e}; running unpinned");
    }
}

fn child() {
    pin(1);
    cma::prepare();
    let card = std::env::var(CHILD_VAR).unwrap();
    let bytes: Vec<u8> = (0..card.len() / 2)
        .map(|i| u8::from_str_radix(&card[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let map = Segment::attach(&SegmentCard::from_bytes(&bytes).unwrap()).unwrap();
    let flags = Flags::new(map.as_ptr());
    std::mem::forget(map);
    let src: Vec<u8> = (0..MAX).map(|i| (i * 31 % 251) as u8).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "src={}", src.as_ptr() as usize).unwrap();
    out.flush().unwrap();
    let parent = std::os::unix::process::parent_id();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<usize> = line
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        let [barrier, dst, len, first, iters] = words[..] else {
            break;
        };
        let half = len / 2;
        if barrier == 1 {
            // One rendezvous per message, like a real split transfer.
            for i in first..first + iters {
                wait_for(flags.go, i);
                cma::write(parent, &src[half..len], dst + half).unwrap();
                flags.done.store(i as u64, Ordering::Release);
            }
        } else {
            // Free-running: one rendezvous per sample.
            wait_for(flags.go, first);
            for _ in 0..iters {
                cma::write(parent, &src[half..len], dst + half).unwrap();
            }
            flags.done.store(first as u64, Ordering::Release);
        }
    }
}

fn wait_for(flag: &AtomicU64, value: usize) {
    while flag.load(Ordering::Acquire) < value as u64 {
        std::hint::spin_loop();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// GB/s of `f` moving `len` bytes per call, median over samples.
fn rate(len: usize, mut f: impl FnMut(usize)) -> f64 {
    let iters = (SAMPLE_BYTES / len).max(8);
    f(0);
    let samples = (0..SAMPLES)
        .map(|s| {
            let start = Instant::now();
            for i in 0..iters {
                f(s * iters + i);
            }
            (iters * len) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    median(samples)
}

fn raw_readv(pid: i32, dst: &mut [u8], src: usize) {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` describes a live `&mut` buffer; the kernel checks the
    // remote range against the child's address space.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    assert_eq!(n, dst.len() as isize);
}

fn main() {
    if std::env::var_os(CHILD_VAR).is_some() {
        child();
        return;
    }
    pin(0);
    cma::prepare();
    let control = Segment::create(4096, SegmentKind::Memfd).unwrap();
    let card: String = control
        .card()
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let flags = Flags::new(control.as_ptr());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_VAR, card)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let src: usize = line.trim().strip_prefix("src=").unwrap().parse().unwrap();
    let pid = child.id();

    let local_src: Vec<u8> = (0..MAX).map(|i| (i * 17 % 253) as u8).collect();
    let mut dst = vec![1u8; MAX];
    let mut round = 1usize;

    println!(
        "CMA bandwidth, GB/s (10^9 B/s), parent on CPU 0, child on CPU 1, median of {SAMPLES}"
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    println!(
        "{:>9} {:>8} {:>12} {:>10} {:>13} {:>13} {:>7}",
        "size", "memcpy", "vm_readv raw", "cma::read", "split free", "split barrier", "best/1"
    );
    for len in SIZES {
        let memcpy = rate(len, |_| {
            dst[..len].copy_from_slice(black_box(&local_src[..len]));
            black_box(&mut dst);
        });
        let raw = rate(len, |_| raw_readv(pid as i32, &mut dst[..len], src));
        let read = rate(len, |_| cma::read(pid, &mut dst[..len], src).unwrap());
        // Split: we read the first half while the child writes the second
        // half into us. The child runs `iters` messages per sample.
        let iters = (SPLIT_BYTES / len).max(8);
        let dst_addr = dst.as_mut_ptr() as usize;
        let half = len / 2;
        let mut split = [0.0; 2];
        for (barrier, result) in split.iter_mut().enumerate() {
            let mut samples = Vec::new();
            for _ in 0..SAMPLES + 1 {
                writeln!(to_child, "{barrier} {dst_addr} {len} {round} {iters}").unwrap();
                to_child.flush().unwrap();
                let start = Instant::now();
                if barrier == 1 {
                    for i in round..round + iters {
                        flags.go.store(i as u64, Ordering::Release);
                        cma::read(pid, &mut dst[..half], src).unwrap();
                        wait_for(flags.done, i);
                    }
                } else {
                    flags.go.store(round as u64, Ordering::Release);
                    for _ in 0..iters {
                        cma::read(pid, &mut dst[..half], src).unwrap();
                    }
                    wait_for(flags.done, round);
                }
                samples.push((iters * len) as f64 / start.elapsed().as_secs_f64() / 1e9);
                round += iters;
            }
            samples.remove(0);
            *result = median(samples);
        }
        // The child wrote the second half: check the last message's data.
        assert!(dst[half..len]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((half + i) * 31 % 251) as u8));
        println!(
            "{:>5} KiB {memcpy:>8.2} {raw:>12.2} {read:>10.2} {:>13.2} {:>13.2} {:>6.2}x",
            len >> 10,
            split[0],
            split[1],
            split[0].max(split[1]) / read
        );
    }
    drop(to_child);
    child.wait().unwrap();
}
