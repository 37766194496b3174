//! Tests of the sm BTL that look inside its modules (the conformance suite
//! and `tests/sm_*.rs` test it from outside).

use super::btl::*;
use super::card::SmCard;
use super::regs::{Key, NO_SLOT, SLOT_WORDS};
use super::ring::{self, Inbox, Ring};
use super::segment::DATA_OFFSET;
use crate::btl::{
    Access, AmTag, Btl, BtlError, Caps, Endpoint, PeerInfo, SmallMatch, SmallRecv, Token,
};
use crate::mem::MemRegion;

#[test]
fn card_round_trip_and_malformed_cards() {
    let btl = SmBtl::new(SmConfig::new(1, 3)).unwrap();
    let bytes = btl.business_card();
    assert_eq!(bytes.len(), SM_CARD_LEN);
    let card = SmCard::parse(&bytes).unwrap().unwrap();
    assert_eq!((card.local_index, card.local_count), (1, 3));
    assert_eq!(card.ring_capacity, BIG_RING);
    assert_eq!(card.seg, btl.segment.card());
    // Not an sm card of this version: None.
    assert!(SmCard::parse(b"").unwrap().is_none());
    assert!(SmCard::parse(b"OXSC....").unwrap().is_none());
    let mut v2 = bytes.clone();
    v2[4] = 2;
    assert!(SmCard::parse(&v2).unwrap().is_none());
    // Every truncation and every corrupted reserved/range field: Invalid,
    // never a panic.
    for len in 5..bytes.len() {
        assert!(SmCard::parse(&bytes[..len]).is_err(), "length {len}");
    }
    for (at, val) in [(5, 2u8), (6, 3), (6, 40), (7, 1), (8, 3), (12, 0)] {
        let mut b = bytes.clone();
        b[at] = val;
        if at == 12 {
            b[13] = 0;
            b[14] = 0;
            b[15] = 0;
        }
        assert!(SmCard::parse(&b).is_err(), "byte {at} = {val}");
    }
    let mut b = bytes.clone();
    b[32] ^= 0xff;
    assert!(SmCard::parse(&b).is_err());
}

#[test]
fn add_peer_rules() {
    let mut a = SmBtl::new(SmConfig::new(0, 2)).unwrap();
    let b = SmBtl::new(SmConfig::new(1, 2)).unwrap();
    let card_a = a.business_card();
    let card_b = b.business_card();
    let info = |rank, local, card| PeerInfo { rank, local, card };
    assert_eq!(a.add_peer(&info(1, false, Some(&card_b))).unwrap(), None);
    assert_eq!(a.add_peer(&info(1, true, None)).unwrap(), None);
    assert_eq!(a.add_peer(&info(1, true, Some(&[1, 2, 3]))).unwrap(), None);
    assert_eq!(a.add_peer(&info(0, true, Some(&card_a))).unwrap(), None);
    assert!(a.add_peer(&info(1, true, Some(&card_b[..40]))).is_err());
    let ep = a.add_peer(&info(1, true, Some(&card_b))).unwrap().unwrap();
    assert_eq!(a.add_peer(&info(1, true, Some(&card_b))).unwrap(), Some(ep));
    // Another rank claiming the same local index.
    assert!(a.add_peer(&info(2, true, Some(&card_b))).is_err());
    // Nothing attached yet.
    assert_eq!(a.single_copy_to(ep), None);
    assert!(!a.has_work());
    let c = SmBtl::new(SmConfig::new(1, 3)).unwrap();
    let card_c = c.business_card();
    assert!(a.add_peer(&info(3, true, Some(&card_c))).is_err());
    // Alone on the node: an inbox without rings.
    let mut alone = SmBtl::new(SmConfig::new(0, 1)).unwrap();
    let mut rec = crate::conformance::Recorder::default();
    assert_eq!(alone.progress(&mut rec), 0);
    let card_alone = alone.business_card();
    let me = info(0, true, Some(&card_alone));
    assert_eq!(alone.add_peer(&me).unwrap(), None);
}

#[test]
fn params_register_and_read_back() {
    use oxmpi_runtime::mca::{Registry, Sources};
    let mut reg = Registry::new();
    SmConfig::register_params(&mut reg).unwrap();
    reg.apply(
        &Sources::new()
            .with_env("btl_sm_ring_size", "16K")
            .with_env("btl_sm_single_copy", "0")
            .with_env("btl_sm_eager_limit", "2K")
            .with_env("btl_sm_evict_ahead", "3"),
    )
    .unwrap();
    let cfg = SmConfig::from_registry(&reg, 2, 4).unwrap();
    assert_eq!(cfg.evict_ahead, 3);
    assert_eq!(cfg.ring_capacity, 16 * 1024);
    assert!(!cfg.single_copy);
    assert_eq!(cfg.limits.eager_limit, 2048);
    assert_eq!(cfg.limits.max_send_size, DEFAULT_LIMITS.max_send_size);
    let btl = SmBtl::new(cfg).unwrap();
    assert_eq!(btl.limits().max_send_size, Ring::max_payload(16 * 1024));
    assert!(!btl.caps().contains(Caps::PUT));
    assert!(SmBtl::new(SmConfig {
        ring_capacity: 1000,
        ..SmConfig::new(0, 2)
    })
    .is_err());
    assert!(SmBtl::new(SmConfig::new(2, 2)).is_err());
    assert_eq!(SmConfig::new(0, 2).evict_ahead, DEFAULT_EVICT_AHEAD);
}

#[test]
fn a_negative_evict_ahead_is_refused_by_name() {
    use oxmpi_runtime::mca::{Registry, Sources};
    let mut reg = Registry::new();
    SmConfig::register_params(&mut reg).unwrap();
    reg.apply(&Sources::new().with_env("btl_sm_evict_ahead", "-1"))
        .unwrap();
    let e = SmConfig::from_registry(&reg, 0, 2).unwrap_err().to_string();
    assert!(e.contains("btl_sm_evict_ahead") && e.contains("-1"), "{e}");
}

fn pair(sc_a: bool, sc_b: bool) -> (SmBtl, Endpoint, SmBtl, Endpoint) {
    match crate::conformance::sm_pair_with(sc_a, sc_b) {
        crate::conformance::Pair::Two(a, b) => (a.btl, a.ep, b.btl, b.ep),
        _ => unreachable!(),
    }
}

#[allow(unsafe_code)] // the one promise of the layers above
fn region(v: &[u8]) -> MemRegion {
    // SAFETY: each test keeps its buffers alive until its operations
    // completed.
    unsafe { MemRegion::from_slice(v) }
}

#[test]
fn sm_btl_is_send() {
    fn send<T: Send>() {}
    send::<SmBtl>();
}

/// Two sm modules of one node (local indices 0 and 1) that know each
/// other, with pair boxes allowed or not on each side.
fn boxed_pair(boxes_a: bool, boxes_b: bool) -> (SmBtl, Endpoint, SmBtl, Endpoint) {
    let make = |index: u32, pair_boxes: bool| {
        SmBtl::new(SmConfig {
            pair_boxes,
            ..SmConfig::new(index, 2)
        })
        .unwrap()
    };
    let (mut a, mut b) = (make(0, boxes_a), make(1, boxes_b));
    let (card_a, card_b) = (a.business_card(), b.business_card());
    let info = |rank, card| PeerInfo {
        rank,
        local: true,
        card: Some(card),
    };
    let ab = a.add_peer(&info(1, &card_b)).unwrap().unwrap();
    let ba = b.add_peer(&info(0, &card_a)).unwrap().unwrap();
    (a, ab, b, ba)
}

fn fast_sends(btl: &SmBtl, ep: Endpoint) -> u64 {
    btl.peers[ep.0 as usize]
        .tx
        .as_ref()
        .map_or(0, |tx| tx.fast_sends())
}

/// Sends message `seq` from `from` to `ep`: a 16-byte header (the
/// sequence number, then a marker) and `len` data bytes, through
/// `sendi_hdr` (the fast box when it is empty and the record small).
fn send_seq(from: &mut SmBtl, ep: Endpoint, seq: u64, len: usize) {
    let mut hdr = [0u8; 16];
    hdr[..8].copy_from_slice(&seq.to_le_bytes());
    hdr[8..].copy_from_slice(&0x5eed_u64.to_le_bytes());
    let data: Vec<u8> = (0..len)
        .map(|i| (seq as u8).wrapping_add(i as u8))
        .collect();
    while !from.sendi_hdr(ep, AmTag(7), &hdr, &data) {
        from.progress(&mut crate::conformance::Recorder::default());
    }
}

/// Checks what `rec` got against the sequence numbers from `next` on.
fn check_seqs(rec: &mut crate::conformance::Recorder, next: &mut u64) {
    for (_, tag, d) in rec.recvs.drain(..) {
        assert_eq!(tag, AmTag(7));
        let seq = u64::from_le_bytes(d[..8].try_into().unwrap());
        assert_eq!(seq, *next, "message {next} out of order");
        let want: Vec<u8> = (0..d.len() - 16)
            .map(|i| (seq as u8).wrapping_add(i as u8))
            .collect();
        assert_eq!(&d[16..], &want[..], "message {seq}'s data");
        *next += 1;
    }
}

/// `way` 0: a progress pass, recorded in `rec`; 1: takes in place
/// ([`drain_in_place`] from `ep`); else nothing. Checks what arrived
/// from `next` on.
fn drain_by(
    way: u64,
    btl: &mut SmBtl,
    rec: &mut crate::conformance::Recorder,
    ep: Endpoint,
    next: &mut u64,
) {
    match way {
        0 => {
            btl.progress(rec);
            check_seqs(rec, next);
        }
        1 => drain_in_place(btl, ep, next),
        _ => {}
    }
}

/// Takes in place (`recv_small`) every message from `ep` that is
/// there, checking sequence numbers from `next` on and their data.
fn drain_in_place(btl: &mut SmBtl, ep: Endpoint, next: &mut u64) {
    loop {
        let m = SmallMatch {
            tag: AmTag(7),
            hdr_len: 16,
            want: [*next, 0x5eed],
            mask: [u64::MAX; 2],
        };
        let mut dst = [0u8; 128];
        match btl.recv_small(ep, &m, &mut dst) {
            SmallRecv::Taken { len, .. } => {
                let want: Vec<u8> = (0..len)
                    .map(|i| (*next as u8).wrapping_add(i as u8))
                    .collect();
                assert_eq!(&dst[..len], &want[..], "message {next}'s data");
                *next += 1;
            }
            SmallRecv::Empty => return,
            SmallRecv::Other => panic!("message {next} not next"),
        }
    }
}

#[test]
fn small_messages_through_the_pair_line_keep_their_order_both_ways() {
    for (boxes_a, boxes_b) in [(true, true), (true, false), (false, true), (false, false)] {
        let (mut a, ab, mut b, ba) = boxed_pair(boxes_a, boxes_b);
        let (mut ra, mut rb) = (Default::default(), Default::default());
        let (mut sent_ab, mut sent_ba, mut got_ab, mut got_ba) = (0u64, 0u64, 0u64, 0u64);
        // Ping-pong of 8-byte messages taken in place (the blocking small
        // receive's path): each finds its box empty.
        let take = |btl: &mut SmBtl, ep: Endpoint, seq: u64| {
            let m = SmallMatch {
                tag: AmTag(7),
                hdr_len: 16,
                want: [seq, 0x5eed],
                mask: [u64::MAX; 2],
            };
            let mut dst = [0u8; 8];
            loop {
                match btl.recv_small(ep, &m, &mut dst) {
                    SmallRecv::Taken { len, .. } => {
                        assert_eq!(len, 8);
                        let want: Vec<u8> =
                            (0..8).map(|i| (seq as u8).wrapping_add(i as u8)).collect();
                        assert_eq!(&dst[..], &want[..], "message {seq}");
                        return;
                    }
                    SmallRecv::Empty => {}
                    SmallRecv::Other => panic!("message {seq} refused"),
                }
            }
        };
        for _ in 0..50 {
            send_seq(&mut a, ab, sent_ab, 8);
            take(&mut b, ba, sent_ab);
            (sent_ab, got_ab) = (sent_ab + 1, got_ab + 1);
            send_seq(&mut b, ba, sent_ba, 8);
            take(&mut a, ab, sent_ba);
            (sent_ba, got_ba) = (sent_ba + 1, got_ba + 1);
        }
        // Each side's first send binds the pair (through the ring);
        // every later one finds its box empty.
        let both = boxes_a && boxes_b;
        let want = if both { 49 } else { 0 };
        assert_eq!((fast_sends(&a, ab), fast_sends(&b, ba)), (want, want));
        // The same through progress passes: a record handed over by a
        // progress pass marks its box late, and the answer goes by the
        // ring (the box's line would be back with the other side by
        // then); so after one box record each way, both go by the ring.
        for _ in 0..50 {
            send_seq(&mut a, ab, sent_ab, 8);
            sent_ab += 1;
            while got_ab < sent_ab {
                b.progress(&mut rb);
                check_seqs(&mut rb, &mut got_ab);
            }
            send_seq(&mut b, ba, sent_ba, 8);
            sent_ba += 1;
            while got_ba < sent_ba {
                a.progress(&mut ra);
                check_seqs(&mut ra, &mut got_ba);
            }
        }
        let want = if both { (50, 50) } else { (0, 0) };
        assert_eq!((fast_sends(&a, ab), fast_sends(&b, ba)), want);
        // Bursts both ways of box-sized and larger records, the
        // receivers draining at random points (a fixed generator).
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..400 {
            for _ in 0..=rnd(4) {
                let len = [0, 8, 24, 100][rnd(4) as usize];
                send_seq(&mut a, ab, sent_ab, len);
                sent_ab += 1;
            }
            for _ in 0..=rnd(3) {
                let len = [8, 0, 64][rnd(3) as usize];
                send_seq(&mut b, ba, sent_ba, len);
                sent_ba += 1;
            }
            // Drained by a progress pass (which marks a box it takes
            // from late) or taken in place (which clears the mark).
            drain_by(rnd(4), &mut b, &mut rb, ba, &mut got_ab);
            drain_by(rnd(4), &mut a, &mut ra, ab, &mut got_ba);
        }
        while got_ab < sent_ab || got_ba < sent_ba {
            a.progress(&mut ra);
            b.progress(&mut rb);
            check_seqs(&mut ra, &mut got_ba);
            check_seqs(&mut rb, &mut got_ab);
        }
        let (fa, fb) = (fast_sends(&a, ab), fast_sends(&b, ba));
        if both {
            assert!(fa > 50 && fb > 50, "boxes used in bursts: {fa} {fb}");
        } else {
            assert_eq!((fa, fb), (0, 0), "a box with no reader");
        }
    }
}

#[test]
fn records_before_add_peer_are_kept_in_order() {
    let mut a = SmBtl::new(SmConfig::new(0, 2)).unwrap();
    let mut b = SmBtl::new(SmConfig::new(1, 2)).unwrap();
    let card_a = a.business_card();
    let ep_ba = b
        .add_peer(&PeerInfo {
            rank: 0,
            local: true,
            card: Some(&card_a),
        })
        .unwrap()
        .unwrap();
    for i in 0..5u8 {
        b.sendi(ep_ba, AmTag(i), &[&[i; 3]]).unwrap();
    }
    let mut rec = crate::conformance::Recorder::default();
    a.progress(&mut rec);
    assert!(rec.recvs.is_empty(), "no endpoint yet");
    let card_b = b.business_card();
    let ep_ab = a
        .add_peer(&PeerInfo {
            rank: 1,
            local: true,
            card: Some(&card_b),
        })
        .unwrap()
        .unwrap();
    b.sendi(ep_ba, AmTag(5), &[&[5; 3]]).unwrap();
    a.progress(&mut rec);
    a.progress(&mut rec);
    let got: Vec<_> = rec.recvs.iter().map(|(e, t, d)| (*e, t.0, d[0])).collect();
    let want: Vec<_> = (0..6u8).map(|i| (ep_ab, i, i)).collect();
    assert_eq!(got, want);
}

#[test]
fn del_peer_unmaps_and_a_peer_can_come_back() {
    let (mut a, ep, mut b, ep_b) = pair(true, true);
    a.sendi(ep, AmTag(1), &[b"one"]).unwrap();
    assert!(a.has_work(), "bound");
    a.del_peer(ep);
    assert!(!a.has_work());
    assert!(matches!(
        a.sendi(ep, AmTag(1), &[b"x"]),
        Err(BtlError::Invalid(_))
    ));
    // What the deleted peer sends is dropped.
    b.sendi(ep_b, AmTag(2), &[b"dropped"]).unwrap();
    let mut rec = crate::conformance::Recorder::default();
    a.progress(&mut rec);
    assert!(rec.recvs.is_empty());
    let card_b = b.business_card();
    let again = a
        .add_peer(&PeerInfo {
            rank: 1,
            local: true,
            card: Some(&card_b),
        })
        .unwrap()
        .unwrap();
    assert_eq!(again, ep);
    a.sendi(ep, AmTag(3), &[b"back"]).unwrap();
    b.sendi(ep_b, AmTag(4), &[b"hello again"]).unwrap();
    let mut rb = crate::conformance::Recorder::default();
    b.progress(&mut rb);
    a.progress(&mut rec);
    assert_eq!(rb.recvs.len(), 2, "b got both of a's messages");
    assert_eq!(rec.recvs.len(), 1);
    assert_eq!(rec.recvs[0].2, b"hello again");
}

#[test]
fn registrations_beyond_the_table_use_copy_in_copy_out() {
    let (mut a, ep, mut b, _) = pair(true, true);
    if !a.caps().contains(Caps::GET) {
        return;
    }
    let bufs: Vec<Vec<u8>> = (0..=REGISTRATION_SLOTS)
        .map(|i| vec![i as u8; 100])
        .collect();
    let regs: Vec<_> = bufs
        .iter()
        .map(|v| b.register_mem(region(v), Access::REMOTE_READ).unwrap())
        .collect();
    let last = regs.last().unwrap();
    assert_eq!(Key::decode(last.key.as_bytes()).unwrap().slot, NO_SLOT);
    let local = vec![0u8; 60];
    let (mut ra, mut rb) = (
        crate::conformance::Recorder::default(),
        crate::conformance::Recorder::default(),
    );
    // One through CMA (b does nothing), one through b's progress.
    a.get(ep, region(&local), &regs[7].key, 40, Token(1))
        .unwrap();
    a.progress(&mut ra);
    assert!(ra.completions[&Token(1)][0].is_ok());
    assert!(local.iter().all(|&x| x == 7));
    a.get(ep, region(&local), &last.key, 40, Token(2)).unwrap();
    for _ in 0..10 {
        a.progress(&mut ra);
        b.progress(&mut rb);
    }
    assert!(ra.completions[&Token(2)][0].is_ok());
    assert!(local.iter().all(|&x| x == REGISTRATION_SLOTS as u8));
    // A deregistration frees its slot for the next registration.
    b.deregister_mem(regs[3].id);
    let r = b
        .register_mem(region(&bufs[0]), Access::REMOTE_READ)
        .unwrap();
    assert_eq!(Key::decode(r.key.as_bytes()).unwrap().slot, 3);
}

#[test]
fn peers_with_other_ring_sizes_are_refused_by_both_sides() {
    // One side's rings set smaller (btl_sm_ring_size on one rank only):
    // neither side uses sm for the other, so neither sends into a ring
    // whose owner never reads it.
    let mut a = SmBtl::new(SmConfig::new(0, 2)).unwrap();
    let mut b = SmBtl::new(SmConfig {
        ring_capacity: ring::DEFAULT_CAPACITY,
        ..SmConfig::new(1, 2)
    })
    .unwrap();
    let (card_a, card_b) = (a.business_card(), b.business_card());
    let info = |rank, card| PeerInfo {
        rank,
        local: true,
        card: Some(card),
    };
    assert_eq!(a.add_peer(&info(1, &card_b)).unwrap(), None);
    assert_eq!(b.add_peer(&info(0, &card_a)).unwrap(), None);
    // The same sizes: both take it.
    let mut c = SmBtl::new(SmConfig::new(1, 2)).unwrap();
    let card_c = c.business_card();
    assert!(a.add_peer(&info(1, &card_c)).unwrap().is_some());
    assert!(c.add_peer(&info(0, &card_a)).unwrap().is_some());
}

#[test]
fn default_rings_are_big_on_small_nodes_only() {
    assert_eq!(default_ring_capacity(2), BIG_RING);
    assert_eq!(default_ring_capacity(BIG_RING_RANKS), BIG_RING);
    assert_eq!(
        default_ring_capacity(BIG_RING_RANKS + 1),
        ring::DEFAULT_CAPACITY
    );
    // ARCHITECTURE.md's table: per rank, 256 KiB rings up to 16 ranks.
    let table = REGISTRATION_SLOTS * SLOT_WORDS * 8;
    for (n, total) in [(2u32, 299_776usize), (8, 1_874_176), (16, 3_973_376)] {
        let inbox = Inbox::required_bytes(n as usize - 1, BIG_RING).unwrap();
        assert_eq!(DATA_OFFSET + 128 + inbox + table, total, "{n} ranks");
        assert_eq!(SmBtl::segment_bytes(n, BIG_RING).unwrap(), total);
    }
    // And 32 KiB of data goes eager with them.
    let b = SmBtl::new(SmConfig::new(0, 2)).unwrap();
    assert_eq!(b.limits().eager_limit, DEFAULT_LIMITS.eager_limit);
    assert!(b.limits().eager_limit >= (32 << 10) + 16);
    assert_eq!(b.limits().max_send_size, Ring::max_payload(BIG_RING));
}

#[test]
fn memory_per_rank() {
    let cap = ring::DEFAULT_CAPACITY;
    for (n, inbox) in [(2u32, 66_176usize), (8, 460_928), (64, 4_145_664)] {
        assert_eq!(Inbox::required_bytes(n as usize - 1, cap).unwrap(), inbox);
        let total = SmBtl::segment_bytes(n, cap).unwrap();
        let table = REGISTRATION_SLOTS * SLOT_WORDS * 8;
        assert_eq!(total, DATA_OFFSET + 128 + inbox + table, "{n} ranks");
    }
}

/// Whether a thread asleep on `btl`'s doorbell (armed, timeout 5 s) was
/// rung within 2 s while `act` ran on this thread.
fn rings(btl: &SmBtl, act: impl FnOnce()) -> bool {
    use std::time::{Duration, Instant};
    let crate::btl::Wakeup::Bell(bell) = btl.wakeup() else {
        panic!("sm offers no doorbell");
    };
    bell.arm();
    let b = bell.clone();
    let sleeper = std::thread::spawn(move || {
        let t0 = Instant::now();
        let rung = b.sleep(Duration::from_secs(5));
        rung && t0.elapsed() < Duration::from_secs(2)
    });
    std::thread::sleep(Duration::from_millis(20));
    act();
    let rung = sleeper.join().unwrap();
    bell.disarm();
    rung
}

#[test]
fn a_record_through_the_pair_line_rings_the_doorbell() {
    let (mut a, ab, mut b, ba) = boxed_pair(true, true);
    let take = |btl: &mut SmBtl, ep: Endpoint, next: &mut u64| {
        let want = *next + 1;
        while *next < want {
            drain_in_place(btl, ep, next);
        }
    };
    let (mut got_ab, mut got_ba) = (0u64, 0u64);
    // A round trip binds both ways; from then on small records take the
    // box (see `small_messages_through_the_pair_line_keep_their_order_both_ways`).
    send_seq(&mut a, ab, 0, 8);
    take(&mut b, ba, &mut got_ab);
    send_seq(&mut b, ba, 0, 8);
    take(&mut a, ab, &mut got_ba);
    for seq in 1..4 {
        let before = fast_sends(&a, ab);
        assert!(
            rings(&b, || send_seq(&mut a, ab, seq, 8)),
            "box record {seq}"
        );
        assert_eq!(fast_sends(&a, ab), before + 1, "record {seq} took the box");
        take(&mut b, ba, &mut got_ab);
        // And the lower rank's reverse box the other way.
        let before = fast_sends(&b, ba);
        assert!(
            rings(&a, || send_seq(&mut b, ba, seq, 8)),
            "reverse box record {seq}"
        );
        assert_eq!(fast_sends(&b, ba), before + 1);
        take(&mut a, ab, &mut got_ba);
    }
    // Nothing sent: the sleep lasts its timeout (the check above can fail).
    let crate::btl::Wakeup::Bell(bell) = b.wakeup() else {
        unreachable!()
    };
    bell.arm();
    assert!(!bell.sleep(std::time::Duration::from_millis(30)));
    bell.disarm();
}

#[test]
fn copy_in_copy_out_records_ring_both_doorbells() {
    // b refuses CMA: a's put and get go as CONTROL records through the
    // rings, which b's progress answers with records to a.
    let (mut a, ab, mut b, _ba) = pair(true, false);
    if !a.caps().contains(Caps::PUT) {
        return;
    }
    let (mut ra, mut rb) = (
        crate::conformance::Recorder::default(),
        crate::conformance::Recorder::default(),
    );
    let target = vec![0u8; 3000];
    let reg = b
        .register_mem(region(&target), Access::REMOTE_WRITE | Access::REMOTE_READ)
        .unwrap();
    let src = vec![5u8; 3000];
    assert!(rings(&b, || a
        .put(ab, region(&src), &reg.key, 0, Token(1))
        .unwrap()));
    // b's answer (the data landed) wakes a.
    assert!(rings(&a, || { while b.progress(&mut rb) == 0 {} }));
    while !ra.completions.contains_key(&Token(1)) {
        a.progress(&mut ra);
        b.progress(&mut rb);
    }
    assert!(ra.completions[&Token(1)][0].is_ok());
    assert!(target.iter().all(|&x| x == 5));
    let back = vec![0u8; 3000];
    assert!(rings(&b, || a
        .get(ab, region(&back), &reg.key, 0, Token(2))
        .unwrap()));
    assert!(rings(&a, || { while b.progress(&mut rb) == 0 {} }));
    while !ra.completions.contains_key(&Token(2)) {
        a.progress(&mut ra);
        b.progress(&mut rb);
    }
    assert!(back.iter().all(|&x| x == 5));
}
