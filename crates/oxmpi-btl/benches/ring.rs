//! Ring latency and throughput between two threads pinned to CPUs 0 and 1.
//!
//! * `pingpong_8B`: one-way latency = half the round trip of an 8-byte
//!   record over two rings (criterion reports the round trip per iteration;
//!   the half is printed too).
//! * `stream_8B` / `stream_4KiB`: records per second and bytes per second,
//!   producer and consumer on different CPUs, the consumer copying each
//!   payload out.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use oxmpi_btl::sm::ring::{Ring, RingConsumer, RingProducer, DEFAULT_CAPACITY};
use rustix::thread::{sched_setaffinity, CpuSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    set.set(cpu);
    let _ = sched_setaffinity(None, &set);
}

fn recv_spin(c: &mut RingConsumer) -> u64 {
    loop {
        if let Some(v) = c
            .poll(|_, p| u64::from_le_bytes(p[..8].try_into().unwrap()))
            .unwrap()
        {
            return v;
        }
        std::hint::spin_loop();
    }
}

fn send_spin(p: &mut RingProducer, tag: u8, bytes: &[u8]) {
    while p.try_send(tag, &[bytes]).is_err() {
        std::hint::spin_loop();
    }
}

fn pingpong(c: &mut Criterion) {
    let (mut to_peer, mut from_me) = Ring::new_heap(DEFAULT_CAPACITY).unwrap();
    let (mut to_me, mut from_peer) = Ring::new_heap(DEFAULT_CAPACITY).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let echo = std::thread::spawn(move || {
        pin(1);
        while !stop2.load(Ordering::Relaxed) {
            if let Some(v) = from_me
                .poll(|_, p| u64::from_le_bytes(p[..8].try_into().unwrap()))
                .unwrap()
            {
                send_spin(&mut to_me, 1, &v.to_le_bytes());
            }
        }
    });
    pin(0);
    let mut g = c.benchmark_group("ring");
    let mut i = 0u64;
    g.bench_function("pingpong_8B_round_trip", |b| {
        b.iter(|| {
            send_spin(&mut to_peer, 1, &i.to_le_bytes());
            assert_eq!(recv_spin(&mut from_peer), i);
            i += 1;
        })
    });
    g.finish();
    // A direct measurement too, for the one-way figure.
    let n = 1_000_000u64;
    let t = Instant::now();
    for k in 0..n {
        send_spin(&mut to_peer, 1, &k.to_le_bytes());
        recv_spin(&mut from_peer);
    }
    let rtt = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "ring/pingpong_8B: round trip {:.3} us, one-way {:.3} us",
        rtt * 1e6,
        rtt * 0.5e6
    );
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
}

fn stream(c: &mut Criterion, name: &str, size: usize, batch: u64) {
    let (mut p, mut cons) = Ring::new_heap(DEFAULT_CAPACITY).unwrap();
    let (req_tx, req_rx) = std::sync::mpsc::channel::<u64>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let consumer = std::thread::spawn(move || {
        pin(1);
        let mut dst = vec![0u8; size];
        while let Ok(n) = req_rx.recv() {
            let mut got = 0;
            while got < n {
                // Copy out, as a receive into a user buffer would.
                if cons
                    .poll(|_, pl| dst[..pl.len()].copy_from_slice(pl))
                    .unwrap()
                    .is_some()
                {
                    got += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
            done_tx.send(()).unwrap();
        }
    });
    pin(0);
    let data = vec![7u8; size];
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Bytes(size as u64 * batch));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                req_tx.send(batch).unwrap();
                for _ in 0..batch {
                    send_spin(&mut p, 2, &data);
                }
                done_rx.recv().unwrap();
            }
            t.elapsed()
        })
    });
    g.finish();
    // Direct figure.
    let n = batch * 20;
    let t = Instant::now();
    req_tx.send(n).unwrap();
    for _ in 0..n {
        send_spin(&mut p, 2, &data);
    }
    done_rx.recv().unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "ring/{name}: {:.1} M records/s, {:.2} GB/s",
        n as f64 / s / 1e6,
        (n as usize * size) as f64 / s / 1e9
    );
    drop(req_tx);
    consumer.join().unwrap();
}

fn streams(c: &mut Criterion) {
    stream(c, "stream_8B", 8, 100_000);
    stream(c, "stream_4KiB", 4096, 20_000);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
    targets = pingpong, streams
}
criterion_main!(benches);
