//! A seeded sweep of faults: every protocol between three ranks over the
//! simulated network, with every module wrapped in `hook::Faulty`
//! (back-pressure on any operation, completions held back) and
//! `hook::Traced`, for many seeds. Whatever the faults, every message
//! arrives whole, once, in order, and every request completes without an
//! error. A failing seed replays exactly (the network and the faults are
//! seeded, and the engines' clock is the network's).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use oxmpi_btl::btl::Btl;
use oxmpi_btl::hook::{FaultConfig, FaultCounts, Faulty, TraceCounts, Traced};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_btl::sim::{SimConfig, SimNet};
use oxmpi_match::{Source, Tag};
use oxmpi_pml::clock::Clock;
use oxmpi_pml::{Buffer, Ob1, PeerDesc, PmlConfig, ReqId, SendMode, Status};

const CTX: u16 = 0;

struct SimClock(Arc<AtomicU64>);

impl Clock for SimClock {
    fn now_ns(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

struct World {
    net: SimNet,
    ranks: Vec<Ob1<dyn Btl>>,
    traces: Vec<Arc<TraceCounts>>,
    faults: Vec<Arc<FaultCounts>>,
}

/// `n` ranks, each with `self` and a faulty, traced simulated module.
fn world(n: u32, sim: SimConfig, faults: FaultConfig) -> World {
    let net = SimNet::new(sim);
    let mods: Vec<_> = (0..n).map(|r| net.module(r)).collect();
    let peers: Vec<PeerDesc> = mods
        .iter()
        .map(|m| PeerDesc {
            local: false,
            cards: vec![None, Some(m.business_card())],
        })
        .collect();
    let mut ranks = Vec::new();
    let mut traces = Vec::new();
    let mut injected = Vec::new();
    for (r, m) in mods.into_iter().enumerate() {
        let traced = Traced::new(m);
        traces.push(traced.counts());
        let faulty = Faulty::new(
            traced,
            FaultConfig {
                seed: faults.seed.wrapping_mul(31).wrapping_add(r as u64),
                ..faults
            },
        );
        injected.push(faulty.counts());
        let btls: Vec<Box<dyn Btl>> = vec![
            Box::new(SelfBtl::new(r as u32, DEFAULT_LIMITS)),
            Box::new(faulty),
        ];
        let cfg = PmlConfig {
            rdma_split_balance: true,
            ..PmlConfig::default()
        };
        let mut o = Ob1::new(cfg, r as u32, btls, &peers).unwrap();
        o.set_clock(Arc::new(SimClock(net.time())));
        o.add_comm(CTX, (0..n).collect(), r as u32).unwrap();
        ranks.push(o);
    }
    World {
        net,
        ranks,
        traces,
        faults: injected,
    }
}

impl World {
    /// Progresses every rank and the network until every request of
    /// `ids` (rank, id) completed; their statuses.
    fn wait_all(&mut self, ids: &[(usize, ReqId)]) -> Vec<Status> {
        let mut out: Vec<Option<Status>> = vec![None; ids.len()];
        for _ in 0..4_000_000 {
            for (k, &(r, id)) in ids.iter().enumerate() {
                if out[k].is_none() {
                    out[k] = self.ranks[r].test(id).unwrap();
                }
            }
            if out.iter().all(Option::is_some) {
                return out.into_iter().map(Option::unwrap).collect();
            }
            let mut moved = 0;
            for o in &mut self.ranks {
                moved += o.progress();
            }
            if moved == 0 {
                self.net.advance_to_next();
            }
        }
        panic!("the world is stuck: {out:?}");
    }
}

/// A buffer the engine may use while a request is in flight.
struct Mem(Vec<u8>);

impl Mem {
    fn pattern(len: usize, seed: u8) -> Mem {
        Mem((0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect())
    }
    fn buf(&mut self) -> Buffer {
        // SAFETY: each test keeps the Mem alive and untouched until the
        // requests given this region have completed.
        Buffer::Contig(unsafe { MemRegion::new(self.0.as_mut_ptr(), self.0.len()) })
    }
}

/// Every size class and send mode, each way between every pair of ranks,
/// receives posted before and after their messages, one in four from
/// `MPI_ANY_SOURCE`.
fn scenario(w: &mut World) {
    let sizes = [0usize, 8, 200, 4000, 40_000, 300_000, (1 << 20) + 7];
    let modes = [
        SendMode::Standard,
        SendMode::Synchronous,
        SendMode::Standard,
    ];
    let n = w.ranks.len();
    let mut step = 0u8;
    for &len in &sizes {
        for (mi, &mode) in modes.iter().enumerate() {
            let mut srcs = Vec::new();
            let mut dsts = Vec::new();
            let mut ids = Vec::new();
            for from in 0..n {
                let to = (from + 1 + mi % (n - 1)) % n;
                step = step.wrapping_add(1);
                let any = step % 4 == 0;
                srcs.push(Mem::pattern(len, step));
                dsts.push((Mem(vec![0; len]), to, from, step));
                let tag = i32::from(step);
                let post_first = step % 2 == 0;
                let s = srcs.last_mut().unwrap().buf();
                let d = dsts.last_mut().unwrap().0.buf();
                let src = if any {
                    Source::Any
                } else {
                    Source::Rank(from as u32)
                };
                if post_first {
                    ids.push((to, w.ranks[to].irecv(d, src, Tag::Value(tag), CTX).unwrap()));
                    ids.push((
                        from,
                        w.ranks[from].isend(s, to as u32, tag, CTX, mode).unwrap(),
                    ));
                } else {
                    ids.push((
                        from,
                        w.ranks[from].isend(s, to as u32, tag, CTX, mode).unwrap(),
                    ));
                    ids.push((to, w.ranks[to].irecv(d, src, Tag::Value(tag), CTX).unwrap()));
                }
            }
            let st = w.wait_all(&ids);
            for s in &st {
                assert_eq!(s.error, None, "{len} B {mode:?}: {s:?}");
            }
            for (dst, _to, from, seed) in &dsts {
                let want = Mem::pattern(len, *seed);
                assert!(dst.0 == want.0, "{len} B {mode:?} from {from}: corrupt");
            }
        }
    }
}

#[test]
fn every_protocol_survives_a_seeded_sweep_of_faults() {
    let mut refused = 0;
    let mut held = 0;
    for seed in 1..=16u64 {
        let sim = SimConfig {
            seed,
            jitter_ns: 500,
            no_resource_ppm: 0,
            copy_ns_per_kib: 200,
            ..SimConfig::default()
        };
        let faults = FaultConfig {
            seed,
            no_resource_ppm: 60_000,
            max_hold: 3,
        };
        let mut w = world(3, sim, faults);
        scenario(&mut w);
        let fragments: u64 = w.traces.iter().map(|t| TraceCounts::get(&t.recv)).sum();
        assert!(fragments > 0, "seed {seed}: nothing went through the sim");
        let errors: u64 = w.traces.iter().map(|t| TraceCounts::get(&t.errors)).sum();
        assert_eq!(errors, 0, "seed {seed}: the inner BTL failed an operation");
        for f in &w.faults {
            refused += f.refused.load(std::sync::atomic::Ordering::Relaxed);
            held += f.held.load(std::sync::atomic::Ordering::Relaxed);
        }
    }
    assert!(refused > 100, "the faults hardly fired: {refused} refusals");
    assert!(
        held > 100,
        "the faults hardly fired: {held} held completions"
    );
}
