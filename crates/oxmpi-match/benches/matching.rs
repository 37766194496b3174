//! Cost of one match, engine vs naive model.
//!
//! "One match" = post a receive then deliver the arrival that matches it,
//! with N other, non-matching receives (distinct (source, tag)) posted; and
//! the post side against 10,000 unexpected messages.
// criterion_group!/criterion_main! generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use oxmpi_match::{Engine, MatchEvent, PostOutcome, Source, Tag};

#[path = "../tests/model/mod.rs"]
mod model;

use model::{Model, ModelPost};

const CTX: u32 = 1;
const PEERS: u32 = 128;
const TAG: i32 = 7;

/// (source, tag) of the i-th non-matching background receive/message.
fn other(i: usize) -> (u32, i32) {
    (
        1 + (i as u32 % (PEERS - 1)),
        1000 + (i / (PEERS as usize - 1)) as i32,
    )
}

/// Selector of the i-th background receive: exact, or `ANY_SOURCE` with a
/// non-matching tag when `wild` is set.
fn background(i: usize, wild: bool) -> (Source, Tag) {
    let (s, t) = other(i);
    if wild {
        (Source::Any, Tag::Value(t))
    } else {
        (Source::Rank(s), Tag::Value(t))
    }
}

fn engine_with_posted(n: usize, wild: bool) -> Engine<u64, u64> {
    let mut e = Engine::with_capacity(n + 16, 16);
    e.add_context(CTX, PEERS).unwrap();
    for i in 0..n {
        let (s, t) = background(i, wild);
        assert!(matches!(
            e.post_recv(CTX, s, t, 0).unwrap(),
            PostOutcome::Posted(_)
        ));
    }
    e
}

fn model_with_posted(n: usize, wild: bool) -> Model {
    let mut m = Model::default();
    m.add_context(CTX, PEERS, 0);
    for i in 0..n {
        let (s, t) = background(i, wild);
        m.post(CTX, s, t, 0);
    }
    m
}

fn bench_posted(c: &mut Criterion) {
    let cases = [
        ("specific_recv", Source::Rank(0), false),
        ("wildcard_recv", Source::Any, false),
        ("wildcard_recv_among_wildcards", Source::Any, true),
    ];
    for (name, src, wild) in cases {
        let mut g = c.benchmark_group(format!("match_{name}"));
        for n in [1usize, 100, 10_000] {
            let mut e = engine_with_posted(n, wild);
            let mut seq = 0u16;
            g.bench_function(BenchmarkId::new("engine", n), |b| {
                b.iter(|| {
                    let o = e.post_recv(CTX, src, Tag::Value(TAG), 1).unwrap();
                    black_box(&o);
                    e.handle_arrival(CTX, 0, TAG, seq, 64, 2).unwrap();
                    seq = seq.wrapping_add(1);
                    let ev = e.poll_matched();
                    debug_assert!(matches!(ev, Some(MatchEvent::Matched(_))));
                    black_box(ev)
                })
            });
            let mut m = model_with_posted(n, wild);
            let mut seq = 0u16;
            g.bench_function(BenchmarkId::new("naive", n), |b| {
                b.iter(|| {
                    black_box(m.post(CTX, src, Tag::Value(TAG), 1));
                    let r = m.arrival(CTX, 0, TAG, seq, 64, 2);
                    seq = seq.wrapping_add(1);
                    black_box(r)
                })
            });
        }
        g.finish();
    }
}

fn bench_unexpected(c: &mut Criterion) {
    const N: usize = 10_000;
    let mut g = c.benchmark_group("unexpected_10k");
    let selectors = [
        ("specific", Source::Rank(0), Tag::Value(TAG)),
        ("rank_any_tag", Source::Rank(0), Tag::Any),
        ("any_source", Source::Any, Tag::Value(TAG)),
    ];
    for (name, src, tag) in selectors {
        // 10,000 unexpected messages from other peers, then per iteration:
        // an arrival from peer 0 (queued behind them) and a post taking it.
        let mut e: Engine<u64, u64> = Engine::with_capacity(16, N + 16);
        e.add_context(CTX, PEERS).unwrap();
        let mut m = Model::default();
        m.add_context(CTX, PEERS, 0);
        let mut seqs = vec![0u16; PEERS as usize];
        for i in 0..N {
            let (s, t) = other(i);
            let q = seqs[s as usize];
            seqs[s as usize] += 1;
            e.handle_arrival(CTX, s, t, q, 64, i as u64).unwrap();
            m.arrival(CTX, s, t, q, 64, i as u64);
        }
        while e.poll_matched().is_some() {}
        let mut seq = 0u16;
        g.bench_function(BenchmarkId::new(format!("engine_{name}"), N), |b| {
            b.iter(|| {
                e.handle_arrival(CTX, 0, TAG, seq, 64, 1).unwrap();
                seq = seq.wrapping_add(1);
                black_box(e.poll_matched());
                let o = e.post_recv(CTX, src, tag, 1).unwrap();
                debug_assert!(matches!(o, PostOutcome::Matched(_)));
                black_box(o)
            })
        });
        let mut seq = 0u16;
        g.bench_function(BenchmarkId::new(format!("naive_{name}"), N), |b| {
            b.iter(|| {
                black_box(m.arrival(CTX, 0, TAG, seq, 64, 1));
                seq = seq.wrapping_add(1);
                let o = m.post(CTX, src, tag, 1);
                debug_assert!(matches!(o, ModelPost::Matched(_)));
                black_box(o)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_posted, bench_unexpected);
criterion_main!(benches);
