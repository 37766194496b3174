//! The PML cm over the simulated MTL: MPI semantics (modes, datatypes,
//! wildcards, probes, cancel, truncation, persistent requests, dead peers,
//! the tag layout's limits) checked on endpoints of one process, with the
//! fabric's seeded reordering of pairs.

use std::sync::Arc;

use oxmpi_btl::mem::MemRegion;
use oxmpi_match::{Source, Tag};
use oxmpi_mtl::mtl::Mtl;
use oxmpi_mtl::sim::{SimConfig, SimFabric, SimMtl};
use oxmpi_mtl::tag::TagMode;
use oxmpi_pml::cm::Cm;
use oxmpi_pml::{Buffer, BufferScope, ErrClass, Layout, ReqId, SendMode, Status};

/// A job of cm endpoints over one simulated fabric.
struct World {
    fabric: SimFabric,
    pmls: Vec<Cm<SimMtl>>,
}

const CTX: u16 = 3;

fn world(n: u32, cfg: SimConfig) -> World {
    let fabric = SimFabric::new(cfg);
    let mtls: Vec<SimMtl> = (0..n).map(|r| fabric.open(r).unwrap()).collect();
    let cards: Vec<Vec<u8>> = mtls.iter().map(|m| m.business_card()).collect();
    let mut pmls: Vec<Cm<SimMtl>> = mtls
        .into_iter()
        .enumerate()
        .map(|(r, m)| Cm::new(Box::new(m), r as u32, &cards).unwrap())
        .collect();
    for (r, p) in pmls.iter_mut().enumerate() {
        p.add_comm(CTX, (0..n).collect(), r as u32).unwrap();
    }
    World { fabric, pmls }
}

impl World {
    /// Drives the fabric and every endpoint until `done` holds (bounded).
    fn run_until(&mut self, mut done: impl FnMut(&mut Vec<Cm<SimMtl>>) -> bool) {
        for _ in 0..100_000 {
            if done(&mut self.pmls) {
                return;
            }
            self.fabric.step();
            for p in &mut self.pmls {
                p.progress();
            }
        }
        panic!("the job did not get there");
    }

    fn wait(&mut self, rank: usize, id: ReqId) -> Status {
        let mut out = None;
        self.run_until(|p| {
            out = p[rank].test(id).unwrap();
            out.is_some()
        });
        out.unwrap()
    }

    /// Moves everything that can move.
    fn settle(&mut self) {
        for _ in 0..1000 {
            self.fabric.step();
            for p in &mut self.pmls {
                p.progress();
            }
        }
    }
}

fn contig(v: &mut [u8]) -> Buffer {
    // SAFETY: every test keeps `v` alive and unmoved until the requests
    // given this buffer have completed.
    Buffer::Contig(unsafe { MemRegion::new(v.as_mut_ptr(), v.len()) })
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn messages_of_every_size_arrive_whole() {
    let mut w = world(2, SimConfig::default());
    for (k, len) in [0usize, 1, 8, 4096, 65_537, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let mut src = pattern(len, k as u8);
        let mut dst = vec![0u8; len];
        let s = w.pmls[0]
            .isend(contig(&mut src), 1, k as i32, CTX, SendMode::Standard)
            .unwrap();
        let r = w.pmls[1]
            .irecv(contig(&mut dst), Source::Rank(0), Tag::Value(k as i32), CTX)
            .unwrap();
        let st = w.wait(1, r);
        w.wait(0, s);
        assert_eq!(
            (st.source, st.tag, st.bytes, st.error),
            (0, k as i32, len, None)
        );
        assert_eq!(dst, src, "{len} bytes");
    }
    assert_eq!(w.pmls[0].counters().bytes_sent[1], 1_118_218);
    assert_eq!(w.pmls[1].counters().bytes_received[0], 1_118_218);
}

/// Every other 8-byte block of a 16-byte stride.
#[derive(Debug)]
struct Strided {
    blocks: usize,
}

impl Layout for Strided {
    fn packed_len(&self) -> usize {
        self.blocks * 8
    }
    fn pack(&self, base: &MemRegion, offset: usize, out: &mut [u8]) -> usize {
        let src = base.read();
        let mut n = 0;
        while n < out.len() && offset + n < self.packed_len() {
            let p = offset + n;
            out[n] = src[(p / 8) * 16 + p % 8];
            n += 1;
        }
        n
    }
    fn unpack(&self, base: &MemRegion, offset: usize, data: &[u8]) -> usize {
        let mut n = 0;
        while n < data.len() && offset + n < self.packed_len() {
            let p = offset + n;
            base.write((p / 8) * 16 + p % 8, &data[n..n + 1]);
            n += 1;
        }
        n
    }
}

#[test]
fn derived_datatypes_pack_and_unpack_through_staging() {
    let mut w = world(2, SimConfig::default());
    let blocks = 1000;
    let mut src = pattern(blocks * 16, 7);
    let mut dst = vec![0u8; blocks * 16];
    let typed = |v: &mut [u8]| {
        let Buffer::Contig(r) = contig(v) else {
            unreachable!()
        };
        Buffer::Typed(r, Arc::new(Strided { blocks }))
    };
    let s = w.pmls[0]
        .isend(typed(&mut src), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    let r = w.pmls[1]
        .irecv(typed(&mut dst), Source::Any, Tag::Any, CTX)
        .unwrap();
    assert_eq!(w.wait(1, r).bytes, blocks * 8);
    w.wait(0, s);
    for b in 0..blocks {
        assert_eq!(dst[b * 16..b * 16 + 8], src[b * 16..b * 16 + 8]);
        assert_eq!(dst[b * 16 + 8..b * 16 + 16], [0u8; 8], "gap {b} untouched");
    }
}

#[test]
fn wildcards_take_every_sender_in_each_senders_order() {
    for seed in 1..6 {
        let mut w = world(
            4,
            SimConfig {
                seed,
                ..SimConfig::default()
            },
        );
        let mut bufs: Vec<Vec<u8>> = (0..12).map(|i| vec![i as u8; 4]).collect();
        let mut sends = Vec::new();
        for (i, b) in bufs.iter_mut().enumerate() {
            let from = 1 + i % 3;
            sends.push((
                from,
                w.pmls[from]
                    .isend(contig(b), 0, i as i32, CTX, SendMode::Standard)
                    .unwrap(),
            ));
        }
        let mut last = [-1i32; 4];
        for _ in 0..12 {
            let mut d = [0u8; 4];
            let r = w.pmls[0]
                .irecv(contig(&mut d), Source::Any, Tag::Any, CTX)
                .unwrap();
            let st = w.wait(0, r);
            assert_eq!(d, [st.tag as u8; 4]);
            assert_eq!(st.tag as usize % 3 + 1, st.source as usize);
            assert!(st.tag > last[st.source as usize], "seed {seed}: overtaken");
            last[st.source as usize] = st.tag;
        }
        for (from, s) in sends {
            w.wait(from, s);
        }
    }
}

#[test]
fn a_synchronous_send_waits_for_its_match() {
    let mut w = world(2, SimConfig::default());
    let mut src = pattern(64, 1);
    let s = w.pmls[0]
        .isend(contig(&mut src), 1, 9, CTX, SendMode::Synchronous)
        .unwrap();
    w.settle();
    assert_eq!(
        w.pmls[0].test(s).unwrap(),
        None,
        "completed before the match"
    );
    let mut dst = vec![0u8; 64];
    let r = w.pmls[1]
        .irecv(contig(&mut dst), Source::Rank(0), Tag::Value(9), CTX)
        .unwrap();
    w.wait(1, r);
    w.wait(0, s);
    assert_eq!(dst, src);
    assert_eq!(w.pmls[0].counters().synchronous, 1);
}

#[test]
fn buffered_sends_use_the_attached_buffer_and_fail_without_room() {
    let mut w = world(2, SimConfig::default());
    let mut src = pattern(100, 2);
    let s = w.pmls[0]
        .isend(contig(&mut src), 1, 1, CTX, SendMode::Buffered)
        .unwrap();
    let st = w.pmls[0].test(s).unwrap().unwrap();
    assert_eq!(st.error, Some(ErrClass::Buffer), "no buffer attached");
    let mut space = vec![0u8; 150];
    let Buffer::Contig(region) = contig(&mut space) else {
        unreachable!()
    };
    w.pmls[0]
        .buffer_attach_to(BufferScope::Process, Some(region))
        .unwrap();
    let s = w.pmls[0]
        .isend(contig(&mut src), 1, 1, CTX, SendMode::Buffered)
        .unwrap();
    // Complete at once, and the user's buffer is free to change.
    assert_eq!(w.pmls[0].test(s).unwrap().unwrap().error, None);
    let keep = src.clone();
    src.fill(0);
    let s2 = w.pmls[0]
        .isend(contig(&mut src), 1, 2, CTX, SendMode::Buffered)
        .unwrap();
    assert_eq!(
        w.pmls[0].test(s2).unwrap().unwrap().error,
        Some(ErrClass::Buffer),
        "150 bytes hold one"
    );
    assert!(w.pmls[0].buffer_busy_in(BufferScope::Process));
    let mut dst = vec![0u8; 100];
    let r = w.pmls[1]
        .irecv(contig(&mut dst), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    w.wait(1, r);
    assert_eq!(dst, keep);
    w.run_until(|p| !p[0].buffer_busy_in(BufferScope::Process));
    assert_eq!(w.pmls[0].buffer_detach().unwrap(), region);
}

#[test]
fn persistent_requests_run_again() {
    let mut w = world(2, SimConfig::default());
    let mut src = vec![0u8; 16];
    let mut dst = vec![0u8; 16];
    let s = w.pmls[0]
        .send_init(contig(&mut src), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    let r = w.pmls[1]
        .recv_init(contig(&mut dst), Source::Rank(0), Tag::Value(4), CTX)
        .unwrap();
    assert_eq!(
        w.pmls[1].test(r).unwrap(),
        Some(Status::empty()),
        "inactive"
    );
    for round in 0..3u8 {
        src.fill(round + 1);
        w.pmls[1].start(r).unwrap();
        w.pmls[0].start(s).unwrap();
        w.wait(0, s);
        assert_eq!(w.wait(1, r).bytes, 16);
        assert_eq!(dst, [round + 1; 16]);
    }
    w.pmls[0].request_free(s).unwrap();
    w.pmls[1].request_free(r).unwrap();
    assert!(w.pmls[1].test(r).is_err(), "freed");
}

#[test]
fn cancel_truncate_and_probes() {
    let mut w = world(2, SimConfig::default());
    let mut d = [0u8; 4];
    let r = w.pmls[1]
        .irecv(contig(&mut d), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    w.pmls[1].cancel(r).unwrap();
    assert!(w.wait(1, r).cancelled);

    let mut big = pattern(10, 3);
    let s = w.pmls[0]
        .isend(contig(&mut big), 1, 2, CTX, SendMode::Standard)
        .unwrap();
    w.settle();
    let st = w.pmls[1]
        .iprobe(Source::Any, Tag::Any, CTX)
        .unwrap()
        .unwrap();
    assert_eq!((st.source, st.tag, st.bytes), (0, 2, 10));
    let m = w.pmls[1]
        .improbe(Source::Rank(0), Tag::Value(2), CTX)
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(m.len(), 10);
    assert_eq!(
        w.pmls[1].iprobe(Source::Any, Tag::Any, CTX).unwrap(),
        None,
        "claimed"
    );
    let r = w.pmls[1].imrecv(contig(&mut d), m).unwrap();
    let st = w.wait(1, r);
    assert_eq!(st.error, Some(ErrClass::Truncate));
    assert_eq!(d, big[..4]);
    w.wait(0, s);
    assert_eq!(
        w.pmls[1].improbe(Source::ProcNull, Tag::Any, CTX).unwrap(),
        Some(None)
    );
}

#[test]
fn the_layout_limits_are_errors_at_the_call() {
    let mut w = world(
        2,
        SimConfig {
            mode: TagMode::Tag2,
            ..SimConfig::default()
        },
    );
    let max = w.pmls[0].max_tag();
    assert_eq!(
        max,
        (1 << 19) - 1,
        "ofi_tag_2: 20-bit tags, one for the sign"
    );
    let mut b = [0u8; 1];
    let e = w.pmls[0]
        .isend(contig(&mut b), 1, max + 1, CTX, SendMode::Standard)
        .unwrap_err();
    assert_eq!(e.class, ErrClass::Tag, "{e}");
    assert_eq!(w.pmls[0].active_requests(), 0, "nothing left behind");
    let ok = w.pmls[0]
        .isend(contig(&mut b), 1, max, CTX, SendMode::Standard)
        .unwrap();
    let r = w.pmls[1]
        .irecv(contig(&mut b), Source::Any, Tag::Value(max), CTX)
        .unwrap();
    w.wait(1, r);
    w.wait(0, ok);
    // ofi_tag_1 has 12 bits of communicator id.
    let mut w = world(2, SimConfig::default());
    assert!(w.pmls[0].add_comm(4095, vec![0, 1], 0).is_ok());
    let e = w.pmls[0].add_comm(4096, vec![0, 1], 0).unwrap_err();
    assert_eq!(e.class, ErrClass::Intern);
    assert!(e.msg.contains("4096"), "{e}");
}

#[test]
fn a_dead_peer_fails_the_requests_that_need_it() {
    let mut w = world(3, SimConfig::default());
    let mut d = [0u8; 4];
    let r = w.pmls[0]
        .irecv(contig(&mut d), Source::Rank(2), Tag::Any, CTX)
        .unwrap();
    w.fabric.kill(2);
    w.pmls[0].peer_reported_dead(2);
    let st = w.wait(0, r);
    assert_eq!(st.error, Some(ErrClass::ProcFailed));
    let s = w.pmls[0]
        .isend(contig(&mut d), 2, 0, CTX, SendMode::Standard)
        .unwrap();
    assert_eq!(
        w.pmls[0].test(s).unwrap().unwrap().error,
        Some(ErrClass::ProcFailed)
    );
    // Rank 1 is alive: it still works.
    let s = w.pmls[0]
        .isend(contig(&mut d), 1, 0, CTX, SendMode::Standard)
        .unwrap();
    let mut e = [0u8; 4];
    let r = w.pmls[1]
        .irecv(contig(&mut e), Source::Any, Tag::Any, CTX)
        .unwrap();
    w.wait(1, r);
    w.wait(0, s);
}

#[test]
fn intercommunicators_address_the_remote_group() {
    // Groups {0, 1} and {2, 3}; rank 1 of the local group talks to rank 0
    // of the remote one (world 2), which sees it as remote rank 1.
    let mut w = world(4, SimConfig::default());
    w.pmls[1].add_intercomm(9, vec![2, 3], 1).unwrap();
    w.pmls[2].add_intercomm(9, vec![0, 1], 0).unwrap();
    let mut s = pattern(32, 4);
    let mut d = vec![0u8; 32];
    let sid = w.pmls[1]
        .isend(contig(&mut s), 0, 6, 9, SendMode::Standard)
        .unwrap();
    let rid = w.pmls[2]
        .irecv(contig(&mut d), Source::Rank(1), Tag::Value(6), 9)
        .unwrap();
    let st = w.wait(2, rid);
    w.wait(1, sid);
    assert_eq!((st.source, st.bytes), (1, 32));
    assert_eq!(d, s);
}

#[test]
fn small_sends_the_mtl_takes_whole_complete_at_the_call() {
    // The simulated MTL completes sends of at most 64 bytes inside the
    // call (as `fi_tinject`): no event, so cm must complete them itself.
    let mut w = world(
        2,
        SimConfig {
            inject: Some(64),
            ..SimConfig::default()
        },
    );
    let mut small = pattern(8, 1);
    let s = w.pmls[0]
        .isend(contig(&mut small), 1, 1, CTX, SendMode::Standard)
        .unwrap();
    assert!(s.completed_inline(), "no request kept for an injected send");
    let st = w.pmls[0].test(s).unwrap().unwrap();
    assert_eq!((st.bytes, st.tag, st.error), (8, 1, None));
    assert_eq!(w.pmls[0].active_requests(), 0);
    // A larger one has its event; both arrive in order.
    let mut big = pattern(100, 2);
    let b = w.pmls[0]
        .isend(contig(&mut big), 1, 1, CTX, SendMode::Standard)
        .unwrap();
    assert!(!b.completed_inline());
    let mut d1 = vec![0u8; 100];
    let mut d2 = vec![0u8; 100];
    let r1 = w.pmls[1]
        .irecv(contig(&mut d1), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    let r2 = w.pmls[1]
        .irecv(contig(&mut d2), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    assert_eq!(w.wait(1, r1).bytes, 8);
    assert_eq!(w.wait(1, r2).bytes, 100);
    assert_eq!(w.wait(0, b).bytes, 100);
    assert_eq!((&d1[..8], &d2[..]), (&small[..], &big[..]));
    // A persistent small send completes at each start and runs again.
    let mut src = vec![0u8; 16];
    let mut dst = vec![0u8; 16];
    let ps = w.pmls[0]
        .send_init(contig(&mut src), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    for round in 0..3u8 {
        src.fill(round + 1);
        w.pmls[0].start(ps).unwrap();
        assert_eq!(w.pmls[0].test(ps).unwrap().map(|s| s.bytes), Some(16));
        let r = w.pmls[1]
            .irecv(contig(&mut dst), Source::Rank(0), Tag::Value(4), CTX)
            .unwrap();
        w.wait(1, r);
        assert_eq!(dst, [round + 1; 16]);
    }
    w.pmls[0].request_free(ps).unwrap();
    // A buffered one frees its space in the attached buffer at once.
    let mut space = vec![0u8; 100];
    let Buffer::Contig(region) = contig(&mut space) else {
        unreachable!()
    };
    w.pmls[0]
        .buffer_attach_to(BufferScope::Process, Some(region))
        .unwrap();
    let bs = w.pmls[0]
        .isend(contig(&mut small), 1, 6, CTX, SendMode::Buffered)
        .unwrap();
    assert_eq!(w.pmls[0].test(bs).unwrap().unwrap().error, None);
    assert!(!w.pmls[0].buffer_busy_in(BufferScope::Process));
    // A synchronous one still waits for its match.
    let ss = w.pmls[0]
        .isend(contig(&mut small), 1, 7, CTX, SendMode::Synchronous)
        .unwrap();
    w.settle();
    assert_eq!(w.pmls[0].test(ss).unwrap(), None, "ssend before its match");
    let mut d3 = vec![0u8; 8];
    let r3 = w.pmls[1]
        .irecv(contig(&mut d3), Source::Any, Tag::Any, CTX)
        .unwrap();
    assert_eq!(w.wait(1, r3).tag, 6);
    let r4 = w.pmls[1]
        .irecv(contig(&mut d3), Source::Any, Tag::Any, CTX)
        .unwrap();
    assert_eq!(w.wait(1, r4).tag, 7);
    w.wait(0, ss);
    assert_eq!(w.pmls[0].active_requests(), 0);
    // The request-free path (MPI_Send's small-message path): up to the
    // MTL's limit, and nothing sent for what it refuses.
    assert_eq!(w.pmls[0].sendi_limit(), 64);
    assert!(w.pmls[0].sendi_bytes(&small, 1, 8, CTX));
    assert!(!w.pmls[0].sendi_bytes(&big, 1, 8, CTX), "past the limit");
    assert!(!w.pmls[0].sendi_bytes(&small, 2, 8, CTX), "no rank 2");
    assert!(
        !w.pmls[0].sendi_bytes(&small, 1, 8, CTX + 1),
        "no such context"
    );
    assert!(!w.pmls[0].sendi_bytes(&small, 1, -1, CTX), "a negative tag");
    let r5 = w.pmls[1]
        .irecv(contig(&mut d3), Source::Any, Tag::Any, CTX)
        .unwrap();
    assert_eq!(w.wait(1, r5).tag, 8);
    let r6 = w.pmls[1]
        .irecv(contig(&mut d3), Source::Any, Tag::Any, CTX)
        .unwrap();
    w.settle();
    assert_eq!(w.pmls[1].test(r6).unwrap(), None, "a refused send went");
}
