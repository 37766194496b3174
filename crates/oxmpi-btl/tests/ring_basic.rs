//! The shared-memory rings and inbox in one process: every record length,
//! the one-slot fast path, wrap-around, back-pressure, the lazy head,
//! stale-payload safety, the inbox's active list and fairness, a model-based
//! proptest and a two-thread stress run.
#![cfg(not(loom))]

use oxmpi_btl::btl::{AmTag, SmallMatch, SmallRecv};
use oxmpi_btl::sm::ring::{
    record_bytes, FastArm, FastRx, FastTx, Inbox, InboxReceiver, PollError, Ring, RingConsumer,
    RingError, RingProducer, SendError, DEFAULT_CAPACITY, INLINE_PAYLOAD, SLOT_PAYLOAD,
};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::ptr::NonNull;

fn pattern(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq.wrapping_mul(31) as usize + i * 7) as u8)
        .collect()
}

fn recv(c: &mut RingConsumer) -> Option<(u8, Vec<u8>)> {
    c.poll(|tag, p| (tag, p.to_vec())).expect("ring corrupt")
}

#[test]
fn every_length_round_trips_in_order() {
    let (mut p, mut c) = Ring::new_heap(DEFAULT_CAPACITY).unwrap();
    let max = p.max_payload();
    assert_eq!(max, DEFAULT_CAPACITY / 4 + 56);
    let mut next_recv = 0usize;
    let mut len = 0usize;
    while len <= max {
        match p.try_send(len as u8, &[&pattern(len as u64, len)]) {
            Ok(()) => len += 1,
            Err(SendError::Full) => {
                // Drain everything that is there, checking order and content.
                while let Some((tag, payload)) = recv(&mut c) {
                    assert_eq!(tag, next_recv as u8);
                    assert_eq!(payload, pattern(next_recv as u64, next_recv));
                    next_recv += 1;
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    while let Some((tag, payload)) = recv(&mut c) {
        assert_eq!(tag, next_recv as u8);
        assert_eq!(payload, pattern(next_recv as u64, next_recv));
        next_recv += 1;
    }
    assert_eq!(next_recv, max + 1);
    assert_eq!(
        p.try_reserve(max + 1).err(),
        Some(SendError::TooLarge { len: max + 1, max })
    );
}

#[test]
fn small_records_take_one_slot_and_two_take_one_line() {
    let (mut p, mut c) = Ring::new_heap(4096).unwrap();
    for len in 0..=INLINE_PAYLOAD + 1 {
        let before = p.position();
        p.try_send(1, &[&vec![0xab; len]]).unwrap();
        let used = p.position() - before;
        let want = match len {
            0..=SLOT_PAYLOAD => 32,
            _ if len <= INLINE_PAYLOAD => 64,
            _ => 96,
        };
        assert_eq!(used, want, "len {len}");
        assert_eq!(used as usize, record_bytes(len));
        assert_eq!(recv(&mut c).unwrap().1.len(), len);
    }
}

#[test]
fn gather_send_and_in_place_reservation() {
    let (mut p, mut c) = Ring::new_heap(1024).unwrap();
    p.try_send(7, &[b"hdr:", b"", b"user data"]).unwrap();
    let mut r = p.try_reserve(100).unwrap();
    r.payload_mut()[..5].copy_from_slice(b"hello");
    r.truncate(5);
    r.commit(9);
    // A dropped reservation sends nothing.
    {
        let _unsent = p.try_reserve(10).unwrap();
    }
    assert_eq!(recv(&mut c), Some((7, b"hdr:user data".to_vec())));
    assert_eq!(recv(&mut c), Some((9, b"hello".to_vec())));
    assert_eq!(recv(&mut c), None);
}

#[test]
fn keep_leaves_the_record() {
    let (mut p, mut c) = Ring::new_heap(1024).unwrap();
    p.try_send(3, &[b"x"]).unwrap();
    c.peek().unwrap().unwrap().keep();
    let r = c.peek().unwrap().unwrap();
    assert_eq!((r.tag(), r.payload()), (3, &b"x"[..]));
    drop(r);
    assert!(c.peek().unwrap().is_none());
}

#[test]
fn wrap_around_uses_skip_markers() {
    let cap = 1024;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    // 15 one-line records put the tail at offset 960; a five-slot record no
    // longer fits before the end: a SKIP covers 960..1024.
    for i in 0..15u8 {
        p.try_send(i, &[&[i; INLINE_PAYLOAD]]).unwrap();
        assert_eq!(recv(&mut c), Some((i, vec![i; INLINE_PAYLOAD])));
    }
    assert_eq!(p.position(), 960);
    p.try_send(99, &[&pattern(99, 150)]).unwrap();
    assert_eq!(
        p.position(),
        1024 + 160,
        "skip of 64 then a 160-byte record at offset 0"
    );
    assert_eq!(recv(&mut c), Some((99, pattern(99, 150))));
    assert_eq!(c.position(), 1024 + 160);
    // Many laps of mixed sizes.
    let mut seq = 0u64;
    for round in 0..2000u64 {
        let len = ((round * 37) % (Ring::max_payload(cap) as u64 + 1)) as usize;
        p.try_send(round as u8, &[&pattern(round, len)]).unwrap();
        if round % 2 == 1 {
            while let Some((tag, payload)) = recv(&mut c) {
                let l = ((seq * 37) % (Ring::max_payload(cap) as u64 + 1)) as usize;
                assert_eq!((tag, payload), (seq as u8, pattern(seq, l)));
                seq += 1;
            }
        }
    }
    assert!(p.position() > 100 * cap as u64);
}

#[test]
fn full_ring_is_back_pressure_and_draining_frees_it() {
    let cap = 1024;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    let mut sent = 0;
    // One-line records, so that four of them are a quarter of the ring.
    let rec = [1; INLINE_PAYLOAD];
    while p.try_send(0, &[&rec]).is_ok() {
        sent += 1;
    }
    assert_eq!(sent, cap / 64, "the whole data area is usable");
    assert_eq!(p.try_send(0, &[&rec]), Err(SendError::Full));
    // One record consumed: below a quarter, the head is not published yet.
    assert!(recv(&mut c).is_some());
    assert_eq!(c.published_position(), 0);
    assert_eq!(p.try_send(0, &[&rec]), Err(SendError::Full));
    // Three more: a quarter of the capacity, published.
    for _ in 0..3 {
        assert!(recv(&mut c).is_some());
    }
    assert_eq!(c.published_position(), cap as u64 / 4);
    for _ in 0..4 {
        p.try_send(0, &[&rec]).unwrap();
    }
    assert_eq!(p.try_send(0, &[&rec]), Err(SendError::Full));
}

#[test]
fn lazy_head_never_deadlocks_a_blocked_producer() {
    let cap = 4096;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    // Fill with records whose total is not a multiple of the publish step.
    while p.try_send(0, &[&[0; 100]]).is_ok() {}
    // Consume everything but observe emptiness: that publishes.
    let mut n = 0;
    while recv(&mut c).is_some() {
        n += 1;
    }
    assert!(n > 0);
    assert_eq!(c.published_position(), c.position());
    p.try_send(0, &[&[0; 100]]).unwrap();

    // The same across threads: the producer spins on Full, the consumer
    // consumes one record at a time and sometimes finds the ring empty.
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    let total = 20_000u64;
    let t = std::thread::spawn(move || {
        for i in 0..total {
            while p.try_send(i as u8, &[&i.to_le_bytes(), &[0; 300]]).is_err() {
                std::hint::spin_loop();
            }
        }
    });
    let mut got = 0u64;
    while got < total {
        if let Some((_, payload)) = recv(&mut c) {
            assert_eq!(payload[..8], got.to_le_bytes());
            got += 1;
        }
    }
    t.join().unwrap();
}

/// Payloads made of words that look like valid headers of coming laps must
/// never be taken for records when their lines later become header slots.
#[test]
fn stale_payload_never_passes_for_a_header() {
    let cap = 1024usize;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    let max = Ring::max_payload(cap);
    let mut seq = 0u64;
    for i in 0..5000u64 {
        // Alternate big (forged) and small records so that boundaries move.
        let len = if i % 2 == 0 {
            max - (i as usize % 4) * 64
        } else {
            (i as usize * 13) % 120
        };
        // Headers stamped for this lap and the next two, valid in every
        // other respect.
        let lap = p.position() / cap as u64;
        let forged: Vec<u8> = (0..len.div_ceil(8) as u64)
            .flat_map(|k| ((lap + 1 + k % 3) | 0x42 << 32 | 1 << 40 | 8 << 44).to_le_bytes())
            .take(len)
            .collect();
        p.try_send(1, &[&forged])
            .unwrap_or_else(|e| panic!("{e} at {i}"));
        let (tag, payload) = recv(&mut c).expect("record");
        assert_eq!(tag, 1);
        assert_eq!(payload.len(), len);
        assert_eq!(recv(&mut c), None, "phantom record after {i}");
        seq += 1;
    }
    assert_eq!(seq, 5000);
}

#[test]
fn attach_errors() {
    assert_eq!(
        Ring::new_heap(1000).err(),
        Some(RingError::BadCapacity(1000))
    );
    assert_eq!(Ring::new_heap(128).err(), Some(RingError::BadCapacity(128)));
    let mut buf = vec![0u64; Ring::required_bytes(1024) / 8 + 16];
    let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
    let base = {
        let a = base.as_ptr() as usize;
        // SAFETY: rounding up to 64 stays within the 128 spare bytes.
        unsafe { NonNull::new_unchecked(base.as_ptr().add(a.next_multiple_of(64) - a)) }
    };
    let len = Ring::required_bytes(1024);
    // SAFETY: the buffer outlives every handle below and is used only
    // through the ring API.
    unsafe {
        assert_eq!(
            RingConsumer::attach(base, len).err(),
            Some(RingError::NotInitialized)
        );
        assert_eq!(
            Ring::init(base, len - 64, 1024),
            Err(RingError::TooSmall {
                need: len,
                have: len - 64
            })
        );
        assert_eq!(
            Ring::init(NonNull::new_unchecked(base.as_ptr().add(8)), len, 1024),
            Err(RingError::Misaligned)
        );
        Ring::init(base, len, 1024).unwrap();
        let mut p = RingProducer::attach(base, len).unwrap();
        assert_eq!(
            RingProducer::attach(base, len).err(),
            Some(RingError::AlreadyAttached("producer"))
        );
        let mut c = RingConsumer::attach(base, len).unwrap();
        assert_eq!(
            RingConsumer::attach(base, len).err(),
            Some(RingError::AlreadyAttached("consumer"))
        );
        p.try_send(5, &[b"abc"]).unwrap();
        // Re-attaching either side continues where it left off.
        drop(p);
        let mut p = RingProducer::attach(base, len).unwrap();
        p.try_send(6, &[b"def"]).unwrap();
        assert_eq!(recv(&mut c), Some((5, b"abc".to_vec())));
        drop(c);
        let mut c = RingConsumer::attach(base, len).unwrap();
        assert_eq!(recv(&mut c), Some((6, b"def".to_vec())));
        // A header the consumer cannot accept is an error, not a panic:
        // this lap's stamp with a length beyond the maximum.
        // (Two one-slot records were read: the next header is at 64.)
        let at = base.as_ptr().add(256 + 64).cast::<u64>();
        at.write_volatile(1 | 1 << 40 | 1000 << 44);
        assert!(matches!(
            c.peek(),
            Err(RingError::Corrupt { offset: 64, .. })
        ));
        // A stamp that is neither this lap's nor the last one's.
        at.write_volatile(7 | 1 << 40);
        assert!(matches!(c.peek(), Err(RingError::Corrupt { .. })));
    }
    drop(buf);
}

#[test]
fn memory_per_rank_figures_in_the_module_doc() {
    assert_eq!(Inbox::required_bytes(1, DEFAULT_CAPACITY).unwrap(), 66_176);
    assert_eq!(Inbox::required_bytes(7, DEFAULT_CAPACITY).unwrap(), 460_928);
    assert_eq!(
        Inbox::required_bytes(63, DEFAULT_CAPACITY).unwrap(),
        4_145_664
    );
    assert_eq!(Inbox::required_bytes(63, 16 * 1024).unwrap(), 1_049_088);
    assert_eq!(
        Ring::required_bytes(DEFAULT_CAPACITY),
        DEFAULT_CAPACITY + 256
    );
}

#[test]
fn inbox_polls_only_senders_that_attached() {
    let inbox = Inbox::new_heap(8, 1024).unwrap();
    let mut rx = inbox.receiver().unwrap();
    assert_eq!(rx.poll_all(|_, _, _| unreachable!()).unwrap(), 0);
    let mut s5 = inbox.attach_sender(5).unwrap();
    let mut s2 = inbox.attach_sender(2).unwrap();
    assert_eq!(
        inbox.attach_sender(8).err(),
        Some(RingError::NoSuchSender {
            sender: 8,
            n_senders: 8
        })
    );
    assert_eq!(
        inbox.attach_sender(5).err(),
        Some(RingError::AlreadyAttached("producer"))
    );
    s5.try_send(50, &[b"five"]).unwrap();
    s2.try_send(20, &[b"two"]).unwrap();
    let mut got = Vec::new();
    assert_eq!(
        rx.poll_all(|s, t, p| got.push((s, t, p.to_vec()))).unwrap(),
        2
    );
    assert_eq!(rx.active_senders().collect::<Vec<_>>(), vec![5, 2]);
    got.sort();
    assert_eq!(
        got,
        vec![(2, 20, b"two".to_vec()), (5, 50, b"five".to_vec())]
    );
    // Detaching and re-attaching does not register twice.
    drop(s5);
    let _s5 = inbox.attach_sender(5).unwrap();
    rx.poll_all(|_, _, _| ()).unwrap();
    assert_eq!(rx.active_senders().collect::<Vec<_>>(), vec![5, 2]);
}

#[test]
fn inbox_senders_registering_concurrently() {
    let n = 6;
    let per = 5_000u64;
    let inbox = std::sync::Arc::new(Inbox::new_heap(n, 4096).unwrap());
    let mut rx = inbox.receiver().unwrap();
    let threads: Vec<_> = (0..n)
        .map(|s| {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                let mut p = inbox.attach_sender(s).unwrap();
                for i in 0..per {
                    while p.try_send(s as u8, &[&i.to_le_bytes()]).is_err() {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let mut next = vec![0u64; n];
    let mut total = 0;
    while total < n as u64 * per {
        total += rx
            .poll_all(|s, t, p| {
                assert_eq!(t as usize, s);
                assert_eq!(p, next[s].to_le_bytes());
                next[s] += 1;
            })
            .unwrap() as u64;
    }
    for t in threads {
        t.join().unwrap();
    }
    let mut active: Vec<_> = rx.active_senders().collect();
    active.sort();
    assert_eq!(active, (0..n).collect::<Vec<_>>());
}

#[test]
fn inbox_is_fair_to_a_quiet_sender() {
    let inbox = Inbox::new_heap(3, 4096).unwrap();
    let mut rx = inbox.receiver().unwrap();
    rx.set_budget(4);
    let mut busy = inbox.attach_sender(0).unwrap();
    let mut quiet = inbox.attach_sender(2).unwrap();
    while busy.try_send(0, &[b"busy"]).is_ok() {}
    quiet.try_send(2, &[b"quiet"]).unwrap();
    let mut seen = Vec::new();
    let n = rx.poll_all(|s, _, _| seen.push(s)).unwrap();
    assert_eq!(n, 5, "at most 4 from the busy ring, then the quiet one");
    assert_eq!(seen.iter().filter(|&&s| s == 0).count(), 4);
    assert!(seen.contains(&2));
    // The next call starts at the other ring.
    quiet.try_send(2, &[b"again"]).unwrap();
    seen.clear();
    rx.poll_all(|s, _, _| seen.push(s)).unwrap();
    assert_eq!(seen[0], 2);
}

#[test]
fn control_records_are_told_apart() {
    let inbox = Inbox::new_heap(2, 1024).unwrap();
    let mut rx = inbox.receiver().unwrap();
    let mut p = inbox.attach_sender(1).unwrap();
    p.try_send(7, &[b"user"]).unwrap();
    p.try_send_control(7, &[b"ctl", b"!"]).unwrap();
    let mut r = p.try_reserve(100).unwrap();
    r.payload_mut().fill(9);
    r.commit_control(200);
    p.try_send(255, &[]).unwrap();
    let mut got = Vec::new();
    rx.poll_all_flagged(|s, t, c, d| got.push((s, t, c, d.to_vec())))
        .unwrap();
    assert_eq!(
        got,
        vec![
            (1, 7, false, b"user".to_vec()),
            (1, 7, true, b"ctl!".to_vec()),
            (1, 200, true, vec![9; 100]),
            (1, 255, false, vec![]),
        ]
    );
}

#[test]
fn a_corrupt_ring_is_reported_and_no_longer_polled() {
    let n = 2;
    let cap = 1024;
    let len = Inbox::required_bytes(n, cap).unwrap();
    let mut buf = vec![0u64; len / 8 + 16];
    let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
    let base = {
        let a = base.as_ptr() as usize;
        // SAFETY: rounding up to 128 stays within the 128 spare bytes.
        unsafe { NonNull::new_unchecked(base.as_ptr().add(a.next_multiple_of(128) - a)) }
    };
    // SAFETY: the buffer outlives every handle below and is used only
    // through the inbox API, except the one header word forged below.
    unsafe {
        Inbox::init(base, len, n, cap).unwrap();
        let mut p0 = Inbox::attach_sender(base, len, 0).unwrap();
        let mut p1 = Inbox::attach_sender(base, len, 1).unwrap();
        let mut rx = InboxReceiver::attach(base, len).unwrap();
        p0.try_send(1, &[b"zero"]).unwrap();
        p1.try_send(2, &[b"one"]).unwrap();
        assert_eq!(rx.poll_all_flagged(|_, _, _, _| ()).unwrap(), 2);
        // Sender 1's next header: this lap's stamp, flags 4 alone (CONTROL
        // without RECORD) is not a header.
        // Rings start past the header, count and doorbell lines (256) and
        // the active slots (128 for two senders).
        let ring1 = 384 + Ring::required_bytes(cap);
        let at = base.as_ptr().add(ring1 + 256 + 32).cast::<u64>();
        at.write_volatile(1 | 4 << 40);
        p0.try_send(3, &[b"still here"]).unwrap();
        let mut seen = Vec::new();
        let mut errors = Vec::new();
        for _ in 0..3 {
            match rx.poll_all_flagged(|s, _, _, d| seen.push((s, d.to_vec()))) {
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        assert!(matches!(
            errors.as_slice(),
            [PollError {
                sender: Some(1),
                error: RingError::Corrupt { .. }
            }]
        ));
        assert_eq!(seen, vec![(0, b"still here".to_vec())]);
        assert_eq!(rx.active_senders().collect::<Vec<_>>(), vec![0]);
        drop((p0, p1, rx));
    }
    drop(buf);
}

#[test]
fn small_records_go_the_small_way() {
    let (mut p, mut c) = Ring::new_heap(1024).unwrap();
    // Room for all, no wrap: each goes through `try_send_small` itself.
    let mut sent = Vec::new();
    for (i, (h, d)) in [(8usize, 0usize), (12, 8), (16, 16), (12, 1), (8, 16)]
        .into_iter()
        .enumerate()
    {
        let payload = pattern(i as u64, h + d);
        assert!(
            p.try_send_small(i as u8, &payload[..h], &payload[h..]),
            "{h}+{d} bytes"
        );
        sent.push((i as u8, payload));
    }
    // Not its sizes: false, nothing written.
    assert!(!p.try_send_small(9, &[0; 4], &[0; 4]));
    assert!(!p.try_send_small(9, &[0; 20], &[0; 4]));
    assert!(!p.try_send_small(9, &[0; 8], &[0; 17]));
    for want in sent {
        assert_eq!(recv(&mut c), Some(want));
    }
    assert_eq!(recv(&mut c), None);
}

/// Wires the ring's forward fast box on both sides, as the sm BTL does.
fn wire_box(p: &mut RingProducer, c: &mut RingConsumer) {
    let line = c.pair_line();
    let armed = FastArm::new();
    c.set_fast(Some(FastRx::new(line.forward(), Some(armed.clone()))));
    line.set_forward_ready();
    p.set_fast(Some(FastTx::forward(&p.pair_line(), armed)));
}

#[derive(Debug, Clone)]
enum Op {
    Send(usize, u8),
    /// `try_send_small` of a header and data (falling back to `try_send`
    /// where it answers false, as its callers do).
    Small(usize, usize, u8),
    Recv,
    /// `take_small` with a 12-byte header match built from the record
    /// expected next (its first word flipped when the bool is set, so that
    /// it must refuse), and this much room.
    Take(usize, bool),
    /// `try_reserve` of this many payload bytes, dropped uncommitted (a
    /// SKIP it wrote at the lap's end stays).
    Abandon(usize),
    /// `peek`, then `keep`: the same record must come next again.
    Keep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0usize..=248, any::<u8>()).prop_map(|(l, t)| Op::Send(l, t)),
        1 => (0usize..=56, any::<u8>()).prop_map(|(l, t)| Op::Send(l, t)),
        3 => (0usize..=20, 0usize..=20, any::<u8>()).prop_map(|(h, d, t)| Op::Small(h, d, t)),
        3 => Just(Op::Recv),
        3 => (0usize..=260, proptest::bool::weighted(0.2)).prop_map(|(r, f)| Op::Take(r, f)),
        1 => (0usize..=248).prop_map(Op::Abandon),
        1 => Just(Op::Keep),
    ];
    proptest::collection::vec(op, 1..400)
}

proptest! {
    #[test]
    fn ring_matches_a_fifo_model(
        ops in ops(),
        cap_log in 10u32..=12,
        boxed in any::<bool>(),
        evict in 0usize..=3,
    ) {
        let cap = 1usize << cap_log;
        let (mut p, mut c) = Ring::new_heap(cap).unwrap();
        if boxed {
            // The forward fast box wired on both sides, as the sm BTL does.
            wire_box(&mut p, &mut c);
        }
        // Evicting lines ahead is a cache hint: nothing the model sees
        // changes (at most an eighth of the ring: 2 to 8 lines here).
        let got = c.set_evict_ahead(evict);
        prop_assert!(got <= evict && got <= cap / 64 / 8);
        let mut model = VecDeque::new();
        let mut seq = 0u64;
        let mut found_empty_since_last_recv = true;
        for op in ops {
            match op {
                Op::Send(len, tag) => {
                    let len = len.min(Ring::max_payload(cap));
                    let payload = pattern(seq, len);
                    match p.try_send(tag, &[&payload]) {
                        Ok(()) => { model.push_back((tag, payload)); seq += 1; }
                        Err(SendError::Full) => {
                            // Full is only legitimate while something is
                            // unconsumed or not yet published by an empty poll.
                            prop_assert!(!model.is_empty() || !found_empty_since_last_recv);
                        }
                        Err(e) => prop_assert!(false, "{}", e),
                    }
                }
                Op::Small(h, d, tag) => {
                    let payload = pattern(seq, h + d);
                    let (hdr, data) = payload.split_at(h);
                    let small = p.try_send_small(tag, hdr, data);
                    // Only its sizes go the small way.
                    prop_assert!(!small || ((8..=16).contains(&h) && d <= 16));
                    let sent = small || match p.try_send(tag, &[hdr, data]) {
                        Ok(()) => true,
                        Err(SendError::Full) => {
                            prop_assert!(!model.is_empty() || !found_empty_since_last_recv);
                            false
                        }
                        Err(e) => { prop_assert!(false, "{}", e); false }
                    };
                    if sent {
                        model.push_back((tag, payload.clone()));
                        seq += 1;
                    }
                }
                Op::Abandon(len) => {
                    let len = len.min(Ring::max_payload(cap));
                    if let Ok(mut r) = p.try_reserve(len) {
                        r.truncate(0);
                    }
                }
                Op::Keep => {
                    let got = c.peek().unwrap().map(|r| {
                        let v = (r.tag(), r.payload().to_vec());
                        r.keep();
                        v
                    });
                    prop_assert_eq!(got.as_ref(), model.front());
                    if got.is_none() {
                        found_empty_since_last_recv = true;
                    }
                }
                Op::Recv => {
                    let got = recv(&mut c);
                    found_empty_since_last_recv = got.is_none();
                    prop_assert_eq!(got, model.pop_front());
                }
                Op::Take(room, flip) => {
                    let mut m = SmallMatch { tag: AmTag(0), hdr_len: 12, want: [0; 2], mask: [u64::MAX, 0xffff_ffff] };
                    let mut eligible = false;
                    if let Some((tag, payload)) = model.front() {
                        let mut h = [0u8; 16];
                        let n = payload.len().min(12);
                        h[..n].copy_from_slice(&payload[..n]);
                        m.tag = AmTag(*tag);
                        m.want = [
                            u64::from_le_bytes(h[..8].try_into().unwrap()) ^ u64::from(flip),
                            u64::from_le_bytes(h[8..].try_into().unwrap()),
                        ];
                        eligible = !flip && payload.len() >= 12 && payload.len() - 12 <= room;
                    }
                    let mut dst = vec![0xeeu8; room];
                    match c.take_small(&m, &mut dst) {
                        SmallRecv::Empty => {
                            prop_assert!(model.is_empty());
                            found_empty_since_last_recv = true;
                        }
                        SmallRecv::Other => prop_assert!(!model.is_empty() && !eligible),
                        SmallRecv::Taken { hdr1, len } => {
                            prop_assert!(eligible);
                            let (_, payload) = model.pop_front().unwrap();
                            prop_assert_eq!(hdr1 as u32, u32::from_le_bytes(payload[8..12].try_into().unwrap()));
                            prop_assert_eq!(&dst[..len], &payload[12..]);
                            prop_assert!(dst[len..].iter().all(|&b| b == 0xee));
                            found_empty_since_last_recv = false;
                        }
                    }
                }
            }
        }
        while let Some(expected) = model.pop_front() {
            prop_assert_eq!(recv(&mut c), Some(expected));
        }
        prop_assert_eq!(recv(&mut c), None);
    }
}

#[test]
fn two_thread_stress_million_records() {
    let n = 1_000_000u64;
    let (mut p, mut c) = Ring::new_heap(DEFAULT_CAPACITY).unwrap();
    let producer = std::thread::spawn(move || {
        let mut sum = 0u64;
        let mut buf = [0u8; 200];
        for i in 0..n {
            let len = 8 + (i.wrapping_mul(2654435761) % 190) as usize;
            for (k, b) in buf[8..len].iter_mut().enumerate() {
                *b = (i as usize + k) as u8;
            }
            buf[..8].copy_from_slice(&i.to_le_bytes());
            loop {
                match p.try_reserve(len) {
                    Ok(mut r) => {
                        r.payload_mut().copy_from_slice(&buf[..len]);
                        r.commit(i as u8);
                        break;
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
            sum = sum.wrapping_add(buf[..len].iter().map(|&b| b as u64).sum::<u64>());
        }
        sum
    });
    let mut sum = 0u64;
    let mut i = 0u64;
    while i < n {
        let got = c
            .poll(|tag, payload| {
                assert_eq!(tag, i as u8);
                assert_eq!(payload[..8], i.to_le_bytes());
                assert_eq!(
                    payload.len(),
                    8 + (i.wrapping_mul(2654435761) % 190) as usize
                );
                payload.iter().map(|&b| b as u64).sum::<u64>()
            })
            .unwrap();
        if let Some(s) = got {
            sum = sum.wrapping_add(s);
            i += 1;
        } else {
            std::hint::spin_loop();
        }
    }
    assert_eq!(producer.join().unwrap(), sum);
    assert_eq!(recv(&mut c), None);
}

#[test]
fn stale_payload_in_a_continuation_slot_never_passes_for_a_header() {
    let cap = 1024;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    // Lap 1: two-slot records whose second slot starts with what would be
    // a valid lap-2 header (stamp 2, RECORD, tag 77, no payload).
    let forged: u64 = 2 | 77 << 32 | 1 << 40;
    let mut rec = [0u8; INLINE_PAYLOAD];
    rec[SLOT_PAYLOAD..SLOT_PAYLOAD + 8].copy_from_slice(&forged.to_le_bytes());
    for _ in 0..cap / 64 {
        p.try_send(1, &[&rec]).unwrap();
        assert_eq!(recv(&mut c), Some((1, rec.to_vec())));
    }
    // Lap 2: one one-slot record at offset 0; the consumer then polls
    // offset 32, where lap 1 left payload.
    p.try_send(2, &[b"x"]).unwrap();
    assert_eq!(recv(&mut c), Some((2, b"x".to_vec())));
    assert_eq!(recv(&mut c), None);
    p.try_send(3, &[b"y"]).unwrap();
    assert_eq!(recv(&mut c), Some((3, b"y".to_vec())));
}

#[test]
fn a_truncated_record_leaves_no_payload_that_passes_for_a_header() {
    let cap = 1024;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    // A four-slot reservation filled with what would be this lap's header
    // at every slot start, then truncated to one slot.
    let forged: u64 = 1 | 77 << 32 | 1 << 40;
    let mut r = p.try_reserve(120).unwrap();
    for chunk in r.payload_mut().chunks_mut(8) {
        chunk.copy_from_slice(&forged.to_le_bytes()[..chunk.len()]);
    }
    r.truncate(4);
    r.commit(5);
    assert_eq!(recv(&mut c), Some((5, forged.to_le_bytes()[..4].to_vec())));
    // The consumer now polls the second slot, which held payload.
    assert_eq!(recv(&mut c), None);
    p.try_send(6, &[b"next"]).unwrap();
    assert_eq!(recv(&mut c), Some((6, b"next".to_vec())));
}

/// Two threads through a 1 KiB ring (a wrap every few dozen records) with
/// the forward fast box wired: small records go through the box whenever
/// the producer finds it empty, the others through the ring, and the
/// consumer sees every record once, in order.
#[test]
fn two_thread_stress_with_the_fast_box() {
    two_thread_stress(1024, 0);
}

/// As above, the reader evicting lines ahead of its head (a 4 KiB ring:
/// up to 8 lines ahead) while the writer fills them.
#[test]
fn two_thread_stress_evicting_ahead() {
    two_thread_stress(4096, 8);
}

fn two_thread_stress(cap: usize, evict: usize) {
    let n = 300_000u64;
    let (mut p, mut c) = Ring::new_heap(cap).unwrap();
    wire_box(&mut p, &mut c);
    c.set_evict_ahead(evict);
    let producer = std::thread::spawn(move || {
        let mut buf = [0u8; 120];
        for i in 0..n {
            let len = match i.wrapping_mul(2654435761) % 7 {
                0 => 120,
                1 => 40,
                k => 8 + 2 * k as usize,
            };
            buf[..8].copy_from_slice(&i.to_le_bytes());
            for (k, b) in buf[8..len].iter_mut().enumerate() {
                *b = (i as usize + k) as u8;
            }
            let (hdr, data) = buf[..len].split_at(8);
            while !p.try_send_small(i as u8, hdr, data) {
                match p.try_send(i as u8, &[hdr, data]) {
                    Ok(()) => break,
                    Err(_) => std::hint::spin_loop(),
                }
            }
        }
        p.fast_sends()
    });
    let mut i = 0u64;
    while i < n {
        let got = c
            .poll(|tag, payload| {
                assert_eq!(tag, i as u8);
                assert_eq!(payload[..8], i.to_le_bytes(), "record {i} out of order");
                for (k, &b) in payload[8..].iter().enumerate() {
                    assert_eq!(b, (i as usize + k) as u8);
                }
            })
            .unwrap();
        if got.is_some() {
            i += 1;
        } else {
            std::hint::spin_loop();
        }
    }
    let boxed = producer.join().unwrap();
    assert!(boxed > 0, "the box was never used");
    assert_eq!(recv(&mut c), None);
}

/// A box record stamped at the position where the producer then writes a
/// SKIP (the next record does not fit before the lap's end) comes before
/// the record after the SKIP: the consumer looks at the box before passing
/// a SKIP. (Before, the record after the SKIP came first and the box was
/// then reported corrupt.)
#[test]
fn a_box_record_stamped_at_a_skip_comes_before_it() {
    let (mut p, mut c) = Ring::new_heap(256).unwrap();
    wire_box(&mut p, &mut c);
    for seq in 0..3 {
        p.try_send(1, &[&pattern(seq, 40)]).unwrap();
        assert_eq!(recv(&mut c), Some((1, pattern(seq, 40))));
    }
    p.try_send(2, &[&pattern(3, 16)]).unwrap(); // ring, 192..224
    let small = pattern(4, 16);
    assert!(p.try_send_small(3, &small[..8], &small[8..]));
    assert_eq!(p.fast_sends(), 1, "the box, stamped 224");
    p.try_send(4, &[&pattern(5, 56)]).unwrap(); // SKIP at 224, then 256..320
    assert_eq!(recv(&mut c), Some((2, pattern(3, 16))));
    assert_eq!(recv(&mut c), Some((3, small)));
    assert_eq!(recv(&mut c), Some((4, pattern(5, 56))));
    assert_eq!(recv(&mut c), None);
}

/// A box record kept after `peek` (held out of the box) stays the next
/// record when the box is wired again, and is not lost.
#[test]
fn a_kept_box_record_survives_rewiring() {
    let (mut p, mut c) = Ring::new_heap(256).unwrap();
    wire_box(&mut p, &mut c);
    let line = c.pair_line();
    let small = pattern(1, 16);
    assert!(p.try_send_small(5, &small[..8], &small[8..]));
    assert_eq!(p.fast_sends(), 1);
    c.peek().unwrap().expect("the box record").keep();
    c.set_fast(Some(FastRx::new(line.forward(), Some(FastArm::new()))));
    c.set_fast(None);
    p.try_send(6, &[&pattern(2, 40)]).unwrap();
    assert_eq!(recv(&mut c), Some((5, small)));
    assert_eq!(recv(&mut c), Some((6, pattern(2, 40))));
    assert_eq!(recv(&mut c), None);
}
