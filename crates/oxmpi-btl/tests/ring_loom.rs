//! Model checking of the ring protocol with loom:
//! `RUSTFLAGS="--cfg loom" cargo test -p oxmpi-btl --test ring_loom --release`
//! (`scripts/test-all.sh` runs it, in `target/loom`).
//!
//! The ring code under loom is the code that runs: only the region's memory
//! type (`sm/ring/mem.rs`) and the atomics differ. Payload bytes travel in
//! `Relaxed` word stores, so a header published without `Release` (or read
//! without `Acquire`) shows up as a stale payload and fails the content
//! checks below.
#![cfg(loom)]

use loom::thread;
use oxmpi_btl::btl::{AmTag, SmallMatch, SmallRecv};
use oxmpi_btl::sm::ring::{Inbox, Ring, RingConsumer, RingProducer, SendError};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn payload(seq: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seq.wrapping_mul(17).wrapping_add(i as u8))
        .collect()
}

/// Receives `n` records (spinning with yields), checking order and content.
fn receive(c: &mut RingConsumer, lens: &[usize]) {
    let mut seq = 0;
    while seq < lens.len() {
        let got = c.poll(|tag, p| (tag, p.to_vec())).expect("corrupt");
        match got {
            Some((tag, p)) => {
                assert_eq!(tag, seq as u8);
                assert_eq!(p, payload(seq as u8, lens[seq]), "record {seq}");
                seq += 1;
            }
            None => thread::yield_now(),
        }
    }
}

/// As [`receive`], through `take_small` (the small-message receive's
/// path) with a match on each record's first 12 bytes.
fn receive_small(c: &mut RingConsumer, lens: &[usize]) {
    for (seq, &len) in lens.iter().enumerate() {
        receive_small_one(c, seq, &payload(seq as u8, len));
    }
}

fn send_all(p: &mut oxmpi_btl::sm::ring::RingProducer, lens: &[usize]) {
    for (seq, &len) in lens.iter().enumerate() {
        loop {
            match p.try_send(seq as u8, &[&payload(seq as u8, len)]) {
                Ok(()) => break,
                Err(SendError::Full) => thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// As [`send_all`], each record as a 8-byte header and the rest through
/// `try_send_small` (the immediate send's path), `try_send` where it
/// answers false.
fn send_all_small(p: &mut oxmpi_btl::sm::ring::RingProducer, lens: &[usize]) {
    for (seq, &len) in lens.iter().enumerate() {
        let msg = payload(seq as u8, len);
        let (hdr, data) = msg.split_at(8);
        loop {
            if p.try_send_small(seq as u8, hdr, data) {
                break;
            }
            match p.try_send(seq as u8, &[hdr, data]) {
                Ok(()) => break,
                Err(SendError::Full) => thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// Sends `lens`' records with `send` from one thread while `recv` takes
/// them on another, through a ring of `cap` bytes.
fn hand_off(
    cap: usize,
    lens: &'static [usize],
    send: fn(&mut RingProducer, &[usize]),
    recv: fn(&mut RingConsumer, &[usize]),
) {
    model(move || {
        let (mut p, mut c) = Ring::new_heap(cap).unwrap();
        let t = thread::spawn(move || send(&mut p, lens));
        recv(&mut c, lens);
        t.join().unwrap();
    });
}

#[test]
fn small_records_hand_off_intact() {
    // Ten one-slot records through an eight-slot ring: it fills (the
    // cached head goes stale), wraps and reuses space the consumer freed.
    hand_off(
        256,
        &[20usize, 8, 24, 12, 16, 24, 8, 20, 12, 24],
        send_all_small,
        receive,
    );
}

#[test]
fn small_records_taken_in_place_intact() {
    // One- and two-slot records through an eight-slot ring: it fills,
    // a two-slot record at the lap's end is a SKIP, and space is reused.
    hand_off(
        256,
        &[20usize, 12, 24, 40, 16, 24, 56, 20, 12, 24],
        send_all_small,
        receive_small,
    );
}

#[test]
fn large_records_taken_in_place_wrap_with_skip() {
    // As `wrap_around_with_skip`, through `take_small`: records of four
    // slots taken in place (their continuation slots cleared), a SKIP at
    // the lap's end passed.
    hand_off(512, &[100usize, 100, 100, 12, 100], send_all, receive_small);
}

#[test]
fn evicting_ahead_changes_nothing() {
    // One-slot records through a 1024-byte ring whose consumer evicts two
    // lines ahead as each line of two records is released: the eviction's
    // look at a line the producer may be writing changes no record.
    model(|| {
        let (mut p, mut c) = Ring::new_heap(1024).unwrap();
        assert_eq!(c.set_evict_ahead(2), 2);
        let lens: &'static [usize] = &[20, 8, 24, 12, 16, 24];
        let t = thread::spawn(move || send_all_small(&mut p, lens));
        receive(&mut c, lens);
        t.join().unwrap();
    });
}

#[test]
fn hand_off_keeps_payloads_intact() {
    hand_off(1024, &[5usize, 60, 16], send_all, receive);
}

#[test]
fn wrap_around_with_skip() {
    // 512 bytes = 16 slots, records of 4 slots and 1: the last one (4 slots
    // at offset 416) does not fit before the end: a SKIP marker.
    hand_off(512, &[100usize, 100, 100, 8, 100], send_all, receive);
}

#[test]
fn full_ring_then_drain_then_proceed() {
    // 256 bytes = 4 one-line (two-slot) records fill it; the fifth must
    // wait for the consumer to drain and publish its head (lazy
    // publication).
    model(|| {
        let (mut p, mut c) = Ring::new_heap(256).unwrap();
        let lens = [56usize; 6];
        for (seq, &len) in lens.iter().enumerate().take(4) {
            p.try_send(seq as u8, &[&payload(seq as u8, len)]).unwrap();
        }
        assert_eq!(p.try_send(4, &[b"x"]), Err(SendError::Full));
        let t = thread::spawn(move || send_all_from(&mut p, &lens, 4));
        receive(&mut c, &lens);
        t.join().unwrap();
    });
}

fn send_all_from(p: &mut oxmpi_btl::sm::ring::RingProducer, lens: &[usize], from: usize) {
    for (seq, &len) in lens.iter().enumerate().skip(from) {
        while p.try_send(seq as u8, &[&payload(seq as u8, len)]).is_err() {
            thread::yield_now();
        }
    }
}

#[test]
fn lazy_head_publication_reaches_a_blocked_producer() {
    // 512-byte ring, 4-slot records: the consumer publishes after a quarter
    // (128 B) or when it finds the ring empty; the producer must never stay
    // blocked while the consumer waits.
    model(|| {
        let (mut p, mut c) = Ring::new_heap(512).unwrap();
        let lens = [120usize, 120, 120, 120];
        let t = thread::spawn(move || send_all(&mut p, &lens));
        receive(&mut c, &lens);
        t.join().unwrap();
        assert_eq!(c.published_position(), c.position());
    });
}

#[test]
fn inbox_registration_races_with_polling() {
    model(|| {
        let inbox = std::sync::Arc::new(Inbox::new_heap(2, 256).unwrap());
        let mut rx = inbox.receiver().unwrap();
        let ts: Vec<_> = (0..2)
            .map(|s| {
                let inbox = inbox.clone();
                thread::spawn(move || {
                    let mut p = inbox.attach_sender(s).unwrap();
                    p.try_send(s as u8, &[&[s as u8; 3]]).unwrap();
                })
            })
            .collect();
        let mut seen = [false; 2];
        while !(seen[0] && seen[1]) {
            let n = rx
                .poll_all(|s, t, p| {
                    assert_eq!(t as usize, s);
                    assert_eq!(p, [s as u8; 3]);
                    assert!(!seen[s]);
                    seen[s] = true;
                })
                .unwrap();
            if n == 0 {
                thread::yield_now();
            }
        }
        for t in ts {
            t.join().unwrap();
        }
    });
}

/// As [`hand_off`], with the ring's forward fast box wired on both sides
/// (as the sm BTL wires a pair line): small records go through the box
/// when it is empty, the others through the ring, and the consumer must
/// deliver them in the order sent.
fn hand_off_boxed(cap: usize, lens: &'static [usize], recv: fn(&mut RingConsumer, &[usize])) {
    use oxmpi_btl::sm::ring::{FastArm, FastRx, FastTx};
    model(move || {
        let (mut p, mut c) = Ring::new_heap(cap).unwrap();
        let line = c.pair_line();
        let armed = FastArm::new();
        c.set_fast(Some(FastRx::new(line.forward(), Some(armed.clone()))));
        line.set_forward_ready();
        p.set_fast(Some(FastTx::forward(&p.pair_line(), armed)));
        let t = thread::spawn(move || {
            send_all_small(&mut p, lens);
            p.fast_sends()
        });
        recv(&mut c, lens);
        assert!(t.join().unwrap() >= 1, "the box was never used");
    });
}

#[test]
fn box_and_ring_records_keep_their_order() {
    // The first record goes through the empty box; the next ones find it
    // full (the ring) or emptied (the box again, stamped with a later
    // position), a 40-byte one always goes through the ring.
    hand_off_boxed(256, &[16usize, 16, 40, 16, 12], receive);
}

#[test]
fn box_and_ring_records_taken_in_place_keep_their_order() {
    hand_off_boxed(256, &[16usize, 16, 40, 16, 12], receive_small);
}

#[test]
fn box_records_around_a_wrap_keep_their_order() {
    // A two-slot record at the end of an eight-slot lap is a SKIP and a
    // record at the next lap's start; box records before and after it.
    hand_off_boxed(256, &[40usize, 40, 40, 16, 56, 16, 16, 40], receive);
}

/// Receives `lens`' records alternately through `poll` (a progress pass:
/// a box record taken so marks the box late) and `take_small` (in place:
/// clears the mark, so the producer uses the box again).
fn receive_alternating(c: &mut RingConsumer, lens: &[usize]) {
    for (seq, &len) in lens.iter().enumerate() {
        let want = payload(seq as u8, len);
        if seq % 2 == 0 {
            loop {
                match c.poll(|tag, p| (tag, p.to_vec())).expect("corrupt") {
                    Some((tag, p)) => {
                        assert_eq!((tag, p), (seq as u8, want), "record {seq}");
                        break;
                    }
                    None => thread::yield_now(),
                }
            }
        } else {
            receive_small_one(c, seq, &want);
        }
    }
}

/// Takes record `seq` (payload `want`) through `take_small`.
fn receive_small_one(c: &mut RingConsumer, seq: usize, want: &[u8]) {
    let mut h = [0u8; 16];
    h[..12].copy_from_slice(&want[..12]);
    let m = SmallMatch {
        tag: AmTag(seq as u8),
        hdr_len: 12,
        want: [
            u64::from_le_bytes(h[..8].try_into().unwrap()),
            u64::from_le_bytes(h[8..].try_into().unwrap()),
        ],
        mask: [u64::MAX, 0xffff_ffff],
    };
    let mut dst = [0u8; 128];
    loop {
        match c.take_small(&m, &mut dst) {
            SmallRecv::Taken { len: n, .. } => {
                assert_eq!(&dst[..n], &want[12..], "record {seq}");
                return;
            }
            SmallRecv::Empty => thread::yield_now(),
            SmallRecv::Other => panic!("record {seq} refused"),
        }
    }
}

#[test]
fn box_records_marked_late_and_cleared_keep_their_order() {
    hand_off_boxed(256, &[16usize, 16, 16, 40, 16, 16], receive_alternating);
}

/// The doorbell (`sm/ring/bell.rs`): a receiver arms its inbox's bell and
/// then polls; a sender attaches and publishes one record (through the
/// ring, or through the pair line's box when `boxed`) and looks at the
/// bell. Whatever the interleaving, the receiver sees the record or the
/// sender took the bell (so it would have woken a sleeper): never neither,
/// which would be a lost wake-up (Dekker's store-then-load race, closed by
/// the fences of both sides).
fn bell_never_missed(boxed: bool) {
    model(move || {
        let inbox = std::sync::Arc::new(Inbox::new_heap(1, 256).unwrap());
        let mut rx = inbox.receiver().unwrap();
        if boxed {
            rx.set_own_boxes_from(0);
        }
        let armed = rx.armed(0).unwrap();
        let bell = rx.bell();
        let sender = {
            let inbox = inbox.clone();
            thread::spawn(move || {
                let mut p = inbox.attach_sender(0).unwrap();
                if boxed {
                    use oxmpi_btl::sm::ring::FastTx;
                    p.set_fast(Some(FastTx::forward(&p.pair_line(), armed)));
                    assert!(p.try_send_small(1, b"12345678", b"bell"));
                    assert_eq!(p.fast_sends(), 1);
                } else {
                    p.try_send(1, &[b"12345678", b"bell"]).unwrap();
                }
            })
        };
        bell.arm();
        let found = rx.poll_all(|_, _, _| ()).unwrap();
        sender.join().unwrap();
        assert!(
            found == 1 || !bell.is_armed(),
            "the receiver found nothing and the sender missed its bell"
        );
    });
}

#[test]
fn an_armed_bell_is_never_missed_by_a_ring_record() {
    bell_never_missed(false);
}

#[test]
fn an_armed_bell_is_never_missed_by_a_box_record() {
    bell_never_missed(true);
}
