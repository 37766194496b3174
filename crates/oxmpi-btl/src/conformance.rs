//! The conformance suite every BTL must pass (rustls-style: the same checks
//! run once per transport).
//!
//! A test builds a fresh [`Pair`] per check: two modules that reach each
//! other (or one module that reaches itself, for `self`), driven in one
//! process. The suite checks that advertised capabilities match working
//! operations, sends of every size class with content and tags intact,
//! per-endpoint ordering, back-pressure (`NoResource` then delivery of
//! everything exactly once), one completion per token, RDMA up to 64 MiB,
//! that stale or forged remote keys are errors, and that a peer that goes
//! away (its module dropped) is reported once and refused afterwards.
//!
//! Panics (with a message naming the check and the BTL) on any violation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Doorbell, Endpoint, PeerInfo, SendOutcome,
    SmallMatch, SmallRecv, Token, Wakeup,
};
use crate::mem::MemRegion;

/// One module and its endpoint to the other side.
pub struct Side<B> {
    /// The module.
    pub btl: B,
    /// Its endpoint for the other side.
    pub ep: Endpoint,
}

/// What a check runs on.
pub enum Pair<B> {
    /// One module reaching itself (the `self` BTL).
    Loopback(Side<B>),
    /// Two modules reaching each other.
    Two(Side<B>, Side<B>),
    /// Two modules and a clock, advanced after each round of progress (the
    /// simulated BTL's virtual time).
    Clocked(Side<B>, Side<B>, Box<dyn FnMut()>),
}

/// Records everything a module's progress delivers.
#[derive(Default, Debug)]
pub struct Recorder {
    /// Fragments received, in order.
    pub recvs: Vec<(Endpoint, AmTag, Vec<u8>)>,
    /// Completions per token.
    pub completions: HashMap<Token, Vec<Result<(), BtlError>>>,
    /// Peers reported lost.
    pub lost: Vec<Endpoint>,
    /// Peers whose put was refused here ([`Caps::PUT_ORDERED`]).
    pub refused: Vec<Endpoint>,
}

impl BtlSink for Recorder {
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]) {
        self.recvs.push((ep, tag, data.to_vec()));
    }
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        self.completions.entry(token).or_default().push(result);
    }
    fn on_peer_lost(&mut self, ep: Endpoint, _why: &BtlError) {
        self.lost.push(ep);
    }
    fn on_put_refused(&mut self, ep: Endpoint) {
        self.refused.push(ep);
    }
}

impl<B: Btl> Pair<B> {
    fn sender(&mut self) -> &mut Side<B> {
        match self {
            Pair::Loopback(s) | Pair::Two(s, _) | Pair::Clocked(s, _, _) => s,
        }
    }

    /// Progresses both sides for a few rounds (after NoResource: the
    /// resource may be freed by progress, or the refusal was transient).
    fn pump(&mut self, tx: &mut Recorder, rx: &mut Recorder) {
        let mut rounds = 0;
        self.drive(tx, rx, "pump", |_, _| {
            rounds += 1;
            rounds > 4
        });
    }

    /// Progresses both sides until `done(sender_rec, receiver_rec)` holds,
    /// or panics after `limit` rounds without it.
    fn drive(
        &mut self,
        tx: &mut Recorder,
        rx: &mut Recorder,
        what: &str,
        mut done: impl FnMut(&Recorder, &Recorder) -> bool,
    ) {
        for round in 0..2_000_000u64 {
            if done(tx, rx) {
                return;
            }
            match self {
                Pair::Loopback(s) => {
                    // One module is both ends: its events go to both views.
                    let mut both = Recorder::default();
                    s.btl.progress(&mut both);
                    rx.recvs.extend(both.recvs);
                    rx.refused.extend(both.refused);
                    for (t, r) in both.completions {
                        tx.completions.entry(t).or_default().extend(r);
                    }
                }
                Pair::Two(a, b) => {
                    a.btl.progress(tx);
                    b.btl.progress(rx);
                }
                Pair::Clocked(a, b, tick) => {
                    a.btl.progress(tx);
                    b.btl.progress(rx);
                    tick();
                }
            }
            if round > 1000 {
                std::thread::yield_now();
            }
        }
        panic!("{what}: no progress after 2,000,000 rounds");
    }
}

#[allow(unsafe_code)]
fn region(v: &[u8]) -> MemRegion {
    // SAFETY: every region made here outlives the operations given it: the
    // checks below drive each operation to completion before the vector is
    // dropped or touched again.
    unsafe { MemRegion::from_slice(v) }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sizes(max: usize) -> Vec<usize> {
    let mut s = vec![
        0, 1, 7, 8, 9, 48, 55, 56, 57, 63, 64, 65, 127, 128, 255, 256, 1000, 4095, 4096,
    ];
    let mut x = 8192;
    while x < max {
        s.push(x - 1);
        s.push(x);
        x *= 4;
    }
    s.push(max);
    s.retain(|&v| v <= max);
    s.sort_unstable();
    s.dedup();
    s
}

/// Runs every check, each on a fresh pair from `make`.
pub fn run_all<B: Btl>(mut make: impl FnMut() -> Pair<B>) {
    caps_match_operations(make());
    sendi_every_size(make());
    sendi_hdr_in_order(make());
    recv_small(make());
    send_every_size(make());
    send_packed(make());
    ordering(make());
    progress_from(make());
    back_pressure(make());
    rdma(make());
    forged_and_stale_keys(make());
    put_ordered(make());
    sub_keys(make());
    doorbell_wakes(make());
    peer_gone(make());
}

/// Advertised capabilities match the operations that work.
pub fn caps_match_operations<B: Btl>(mut pair: Pair<B>) {
    let s = pair.sender();
    let name = s.btl.name();
    let caps = s.btl.caps();
    assert!(caps.contains(Caps::SEND), "{name}: every BTL sends");
    let buf = vec![0u8; 8];
    let r = s
        .btl
        .register_mem(region(&buf), Access::REMOTE_READ | Access::REMOTE_WRITE);
    if caps.contains(Caps::PUT) || caps.contains(Caps::GET) {
        let reg = r.unwrap_or_else(|e| panic!("{name}: RDMA caps but register_mem fails: {e}"));
        s.btl.deregister_mem(reg.id);
    }
    let ep = s.ep;
    let mut sendi = s.btl.sendi(ep, AmTag(1), &[b"x"]);
    let (mut tx, mut rx) = (Recorder::default(), Recorder::default());
    for _ in 0..100 {
        if sendi != Err(BtlError::NoResource) {
            break;
        }
        pair.pump(&mut tx, &mut rx);
        let s = pair.sender();
        sendi = s.btl.sendi(ep, AmTag(1), &[b"x"]);
    }
    if caps.contains(Caps::SENDI) {
        assert!(
            sendi.is_ok(),
            "{name}: SENDI advertised but sendi fails: {sendi:?}"
        );
    } else {
        assert!(
            matches!(sendi, Err(BtlError::Unsupported(_))),
            "{name}: sendi without SENDI must be Unsupported, got {sendi:?}"
        );
    }
    let want = usize::from(caps.contains(Caps::SENDI));
    pair.drive(&mut tx, &mut rx, "caps", |_, rx| rx.recvs.len() >= want);
}

/// `sendi` of `parts` to handler `tag`, progressing both sides after each
/// `NoResource` until it is accepted; any other error fails the check.
fn sendi_retrying<B: Btl>(
    pair: &mut Pair<B>,
    tag: AmTag,
    parts: &[&[u8]],
    tx: &mut Recorder,
    rx: &mut Recorder,
) {
    loop {
        let s = pair.sender();
        match s.btl.sendi(s.ep, tag, parts) {
            Ok(()) => return,
            Err(BtlError::NoResource) => pair.pump(tx, rx),
            Err(e) => {
                let len: usize = parts.iter().map(|p| p.len()).sum();
                panic!("{}: sendi of {len} bytes failed: {e}", s.btl.name())
            }
        }
    }
}

/// `sendi` of every size class up to `max_sendi_size`, content and tag intact.
pub fn sendi_every_size<B: Btl>(mut pair: Pair<B>) {
    let s = pair.sender();
    if !s.btl.caps().contains(Caps::SENDI) {
        return;
    }
    let name = s.btl.name();
    let max = s.btl.limits().max_sendi_size;
    let sizes = sizes(max);
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u8);
        // Split in two parts to check gathering.
        let (a, b) = data.split_at(len / 3);
        sendi_retrying(&mut pair, AmTag(i as u8), &[a, b], &mut tx, &mut rx);
    }
    let n = sizes.len();
    pair.drive(&mut tx, &mut rx, "sendi", |_, rx| rx.recvs.len() >= n);
    if !pair.sender().btl.caps().contains(Caps::ORDERED) {
        rx.recvs.sort_by_key(|(_, t, _)| t.0);
    }
    for (i, (&len, (_, tag, data))) in sizes.iter().zip(&rx.recvs).enumerate() {
        assert_eq!(*tag, AmTag(i as u8), "{name}: tag of the {len}-byte sendi");
        assert!(
            *data == pattern(len, i as u8),
            "{name}: content of the {len}-byte sendi"
        );
    }
    let s = pair.sender();
    let too_big = vec![0u8; max + 1];
    assert!(
        matches!(
            s.btl.sendi(s.ep, AmTag(0), &[&too_big]),
            Err(BtlError::TooLarge { .. })
        ),
        "{name}: a sendi over max_sendi_size must be TooLarge"
    );
}

/// `sendi_hdr` of headers of 0 to 20 bytes with data of every size class
/// up to `max_sendi_size`, and enough small ones to go round a ring many
/// times: each arrives once, as the header then the data under its tag,
/// in order on an ordered BTL. Where `sendi_hdr` answers false the check
/// does what its contract asks of a caller, `sendi` of the two parts (which
/// may in turn answer `NoResource`: then it progresses and tries again).
/// Over `max_sendi_size` it must answer false.
pub fn sendi_hdr_in_order<B: Btl>(mut pair: Pair<B>) {
    let s = pair.sender();
    if !s.btl.caps().contains(Caps::SENDI) {
        return;
    }
    let name = s.btl.name();
    let max = s.btl.limits().max_sendi_size;
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut cases = Vec::new();
    for h in [0usize, 4, 8, 12, 16, 20] {
        for d in sizes(max.saturating_sub(h)) {
            cases.push((h, d));
        }
    }
    // Small records, the immediate path's, many laps of any ring.
    cases.extend((0..5000).map(|i| (12, i % 17)));
    let (mut tx, mut rx) = (Recorder::default(), Recorder::default());
    let (mut fast, mut fallback) = (0usize, 0usize);
    for (i, &(h, d)) in cases.iter().enumerate() {
        let msg = pattern(h + d, i as u8);
        let (hdr, data) = msg.split_at(h);
        let tag = AmTag((i % 251) as u8);
        let s = pair.sender();
        if s.btl.sendi_hdr(s.ep, tag, hdr, data) {
            fast += 1;
        } else {
            fallback += 1;
            sendi_retrying(&mut pair, tag, &[hdr, data], &mut tx, &mut rx);
        }
        sent.push(msg);
        // Drain now and then, so that small records find room.
        if i % 64 == 63 {
            pair.pump(&mut tx, &mut rx);
        }
    }
    assert!(
        fast > 0,
        "{name}: sendi_hdr never sent ({fallback} fell back)"
    );
    let n = sent.len();
    pair.drive(&mut tx, &mut rx, "sendi_hdr", |_, rx| rx.recvs.len() >= n);
    assert_eq!(
        rx.recvs.len(),
        n,
        "{name}: sendi_hdr delivered extra fragments"
    );
    let mut got: Vec<(u8, Vec<u8>)> = rx.recvs.iter().map(|(_, t, d)| (t.0, d.clone())).collect();
    let mut want: Vec<(u8, Vec<u8>)> = sent
        .into_iter()
        .enumerate()
        .map(|(i, m)| ((i % 251) as u8, m))
        .collect();
    if !pair.sender().btl.caps().contains(Caps::ORDERED) {
        got.sort();
        want.sort();
    }
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == w,
            "{name}: fragment {k} of sendi_hdr differs (tag {} vs {})",
            g.0,
            w.0
        );
    }
    let s = pair.sender();
    let big = vec![0u8; max + 1];
    assert!(
        !s.btl.sendi_hdr(s.ep, AmTag(0), &big[..8], &big[8..]),
        "{name}: a sendi_hdr over max_sendi_size must answer false"
    );
}

/// [`Btl::recv_small`] never takes what it must not: a fragment whose
/// header, handler or size the match refuses stays, and arrives through
/// progress in order; one it takes is the fragment that was next, intact
/// (header word, data, nothing written past it). Small fragments of 0 to
/// 44 data bytes after a 12-byte header, windows of 8 ending with a
/// fragment for another handler, many laps of any ring. (Over a module
/// with [`Caps::SENDI`] and [`Caps::ORDERED`].)
pub fn recv_small<B: Btl>(pair: Pair<B>) {
    check_recv_small(pair, false);
}

/// [`recv_small`] for a module that overrides [`Btl::recv_small`]: it
/// must take every matching fragment.
pub fn recv_small_takes<B: Btl>(pair: Pair<B>) {
    check_recv_small(pair, true);
}

/// The receiving side of a [`Pair`].
fn receiver<B>(pair: &mut Pair<B>) -> &mut Side<B> {
    match pair {
        Pair::Loopback(s) | Pair::Two(_, s) | Pair::Clocked(_, s, _) => s,
    }
}

/// A wait's way to sleep: arm `bell`, take a last look (the receiver's
/// progress, into `rx`), and sleep only once `prepare` allows it; armed on
/// return.
fn last_look<B: Btl>(pair: &mut Pair<B>, rx: &mut Recorder, bell: &std::sync::Arc<dyn Doorbell>) {
    for _ in 0..1000 {
        bell.arm();
        receiver(pair).btl.progress(rx);
        if bell.prepare() {
            return;
        }
        bell.disarm();
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!(
        "{}: the doorbell's prepare never allowed a sleep",
        receiver(pair).btl.name()
    );
}

/// How long a sleeper on an armed `bell` (timeout 5 s) slept while `send`
/// ran on this thread on the sender, followed by one progress of the
/// sender (a module may queue what it sends until then), and whether it
/// was rung.
fn slept_through<B: Btl>(
    bell: &std::sync::Arc<dyn Doorbell>,
    pair: &mut Pair<B>,
    send: impl FnOnce(&mut Side<B>),
) -> (bool, Duration) {
    let b = std::sync::Arc::clone(bell);
    let sleeper = std::thread::spawn(move || {
        let t0 = Instant::now();
        let rung = b.sleep(Duration::from_secs(5));
        (rung, t0.elapsed())
    });
    // Most of the time the sleeper is asleep by then; when it is not, the
    // send rang already and its sleep returns at once: the same outcome.
    std::thread::sleep(Duration::from_millis(20));
    send(pair.sender());
    settle(pair, &mut Recorder::default());
    let out = sleeper.join().expect("sleeper thread");
    bell.disarm();
    out
}

/// A module whose receiver offers a doorbell ([`Btl::wakeup`]): a thread
/// asleep on it, armed, with a timeout of 5 s, is woken by every send path
/// towards it (`sendi`, `sendi_hdr` twice, `send` of an allocated and of a
/// prepared descriptor, `send_packed`) in well under that, and everything
/// sent arrives. With nothing sent, it sleeps its whole (short) timeout.
/// A path that forgets to ring fails here.
pub fn doorbell_wakes<B: Btl>(mut pair: Pair<B>) {
    let Wakeup::Bell(bell) = receiver(&mut pair).btl.wakeup() else {
        return;
    };
    let name = pair.sender().btl.name();
    let mut rx = Recorder::default();
    last_look(&mut pair, &mut rx, &bell);
    let t0 = Instant::now();
    assert!(
        !bell.sleep(Duration::from_millis(50)),
        "{name}: the doorbell rang with nothing sent"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "{name}: a sleep on the doorbell ended early with nothing sent"
    );
    bell.disarm();
    let caps = pair.sender().btl.caps();
    let mut sent = 0usize;
    let check = |path: &str, (rung, took): (bool, Duration)| {
        assert!(
            rung && took < Duration::from_secs(2),
            "{name}: {path} did not ring the receiver's doorbell (slept {took:?}, rung: {rung})"
        );
    };
    if caps.contains(Caps::SENDI) {
        for path in ["sendi", "sendi_hdr", "sendi_hdr again"] {
            last_look(&mut pair, &mut rx, &bell);
            let r = slept_through(&bell, &mut pair, |s: &mut Side<B>| {
                let ok = if path == "sendi" {
                    s.btl.sendi(s.ep, AmTag(1), &[b"doorbell"]).is_ok()
                } else {
                    s.btl.sendi_hdr(s.ep, AmTag(2), b"12345678", b"bell")
                        || s.btl.sendi(s.ep, AmTag(2), &[b"12345678", b"bell"]).is_ok()
                };
                assert!(ok, "{name}: {path} of a few bytes failed");
            });
            sent += 1;
            check(path, r);
        }
    }
    if caps.contains(Caps::SEND) {
        for prepared in [false, true] {
            let data = pattern(100, 7);
            last_look(&mut pair, &mut rx, &bell);
            let r = slept_through(&bell, &mut pair, |s: &mut Side<B>| {
                let ep = s.ep;
                let desc = if prepared {
                    s.btl.prepare_src(ep, 8, region(&data[8..])).map(|mut d| {
                        d.buf[..8].copy_from_slice(&data[..8]);
                        d
                    })
                } else {
                    s.btl.alloc(ep, data.len()).map(|mut d| {
                        d.buf.copy_from_slice(&data);
                        d
                    })
                };
                let desc = desc.unwrap_or_else(|e| panic!("{name}: descriptor: {e}"));
                if let Err((_, e)) = s.btl.send(desc, AmTag(3), Token(u64::MAX - 1)) {
                    panic!("{name}: send failed: {e}");
                }
            });
            sent += 1;
            check(if prepared { "send (prepared)" } else { "send" }, r);
        }
    }
    last_look(&mut pair, &mut rx, &bell);
    let mut packed = false;
    let r = slept_through(&bell, &mut pair, |s: &mut Side<B>| {
        let mut pack = |out: &mut [u8]| out.fill(9);
        packed = s
            .btl
            .send_packed(s.ep, AmTag(4), b"packed!!", 40, &mut pack)
            .unwrap_or_else(|e| panic!("{name}: send_packed: {e}"));
        if !packed {
            // The module has no such path: wake the sleeper another way.
            let woke = s.btl.sendi(s.ep, AmTag(4), &[b"packed!!"]).is_ok();
            assert!(woke, "{name}: sendi failed");
        }
    });
    sent += 1;
    check("send_packed", r);
    let mut tx = Recorder::default();
    pair.drive(&mut tx, &mut rx, "doorbell", |_, rx| rx.recvs.len() >= sent);
    assert_eq!(
        rx.recvs.len(),
        sent,
        "{name}: fragments after the doorbell checks"
    );
}

/// Lets what the sender sent arrive, without the receiver's progress.
fn settle<B: Btl>(pair: &mut Pair<B>, tx: &mut Recorder) {
    match pair {
        Pair::Loopback(_) => {}
        Pair::Two(a, _) => {
            a.btl.progress(tx);
        }
        Pair::Clocked(a, _, tick) => {
            a.btl.progress(tx);
            tick();
        }
    }
}

fn check_recv_small<B: Btl>(mut pair: Pair<B>, must_take: bool) {
    const HDR: usize = 12;
    const OURS: AmTag = AmTag(0x21);
    const OTHER: AmTag = AmTag(0x22);
    let s = pair.sender();
    let name = s.btl.name();
    // The check follows one order of arrival.
    if !s.btl.caps().contains(Caps::SENDI) || !s.btl.caps().contains(Caps::ORDERED) {
        assert!(
            !must_take,
            "{name}: recv_small_takes without SENDI or ORDERED"
        );
        return;
    }
    let dmax = s.btl.limits().max_sendi_size.saturating_sub(HDR).min(44);
    let (mut tx, mut rx) = (Recorder::default(), Recorder::default());
    let (mut taken, mut through_progress, mut seen) = (0usize, 0usize, 0usize);
    let match_of = |w0: u64, t: u32, any_tag: bool| SmallMatch {
        tag: OURS,
        hdr_len: HDR,
        want: [w0, if any_tag { 0 } else { u64::from(t) }],
        mask: [u64::MAX, if any_tag { 0x8000_0000 } else { 0xffff_ffff }],
    };
    for round in 0..400usize {
        let mut window = Vec::new();
        for k in 0..8usize {
            let i = round * 8 + k;
            // Last: progress, which delivers it, delivers all that follows.
            let tag = if k == 7 { OTHER } else { OURS };
            let w0 = 0xa5a5_0000_0000_0000u64 | i as u64;
            let t = (i as u32).wrapping_mul(7) & 0x7fff_ffff;
            let data = pattern(i % (dmax + 1), i as u8);
            let mut hdr = [0u8; HDR];
            hdr[..8].copy_from_slice(&w0.to_le_bytes());
            hdr[8..].copy_from_slice(&t.to_le_bytes());
            sendi_retrying(&mut pair, tag, &[&hdr, &data], &mut tx, &mut rx);
            window.push((tag, w0, t, hdr, data));
        }
        for (k, (tag, w0, t, hdr, data)) in window.into_iter().enumerate() {
            let d = data.len();
            let mut dst = vec![0xee; d + 5];
            let mut waited = 0;
            loop {
                // Delivered through progress already (after a refusal).
                if seen < rx.recvs.len() {
                    let (_, got_tag, got) = &rx.recvs[seen];
                    assert!(
                        *got_tag == tag && got[..HDR] == hdr && got[HDR..] == data[..],
                        "{name}: fragment {k} of window {round} arrived out of order or changed"
                    );
                    seen += 1;
                    through_progress += 1;
                    break;
                }
                let b = receiver(&mut pair);
                let (btl, ep) = (&mut b.btl, b.ep);
                // What the match must refuse, the fragment staying.
                let mut refuse = vec![
                    (match_of(w0 ^ 1, t, false), d + 5),
                    (match_of(w0 ^ (1 << 40), t, true), d + 5),
                    (match_of(w0, t ^ 1, false), d + 5),
                    (
                        SmallMatch {
                            tag: AmTag(tag.0 ^ 0x40),
                            ..match_of(w0, t, false)
                        },
                        d + 5,
                    ),
                ];
                if d > 0 {
                    refuse.push((match_of(w0, t, false), d - 1));
                }
                for (m, room) in refuse {
                    let r = btl.recv_small(ep, &m, &mut dst[..room]);
                    assert!(
                        !matches!(r, SmallRecv::Taken { .. }),
                        "{name}: recv_small took fragment {k} of window {round} against {m:?} with room {room}"
                    );
                }
                assert!(
                    dst.iter().all(|&b| b == 0xee),
                    "{name}: a refused recv_small wrote the buffer"
                );
                let m = match_of(w0, t, (round + k) % 2 == 0);
                match btl.recv_small(ep, &m, &mut dst) {
                    SmallRecv::Taken { hdr1, len } => {
                        assert!(
                            tag == OURS && hdr1 as u32 == t && len == d,
                            "{name}: recv_small took the wrong fragment at {k} of window {round}"
                        );
                        assert!(
                            dst[..d] == data[..] && dst[d..].iter().all(|&b| b == 0xee),
                            "{name}: recv_small's data for fragment {k} of window {round}"
                        );
                        taken += 1;
                        break;
                    }
                    SmallRecv::Empty if waited < 1000 => {
                        waited += 1;
                        settle(&mut pair, &mut tx);
                    }
                    SmallRecv::Empty => {
                        panic!("{name}: fragment {k} of window {round} never arrived")
                    }
                    SmallRecv::Other => {
                        assert!(
                            !must_take || tag != OURS,
                            "{name}: recv_small did not take matching fragment {k} of window {round}"
                        );
                        let want = seen + 1;
                        pair.drive(&mut tx, &mut rx, "recv_small", |_, rx| {
                            rx.recvs.len() >= want
                        });
                    }
                }
            }
        }
    }
    pair.pump(&mut tx, &mut rx);
    assert_eq!(
        rx.recvs.len(),
        seen,
        "{name}: a fragment recv_small took was delivered again"
    );
    assert!(
        through_progress >= 400,
        "{name}: the other handler's fragments went missing"
    );
    if must_take {
        assert_eq!(taken, 400 * 7, "{name}: recv_small took {taken} of 2800");
    }
}

/// `alloc`+`send` and `prepare_src`+`send` of every size class up to
/// `max_send_size`; every `Pending` send completes exactly once.
pub fn send_every_size<B: Btl>(mut pair: Pair<B>) {
    let name = pair.sender().btl.name();
    let max = pair.sender().btl.limits().max_send_size;
    let sizes = sizes(max);
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    let mut pending = Vec::new();
    let mut expect = Vec::new();
    let mut keep = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        for prepared in [false, true] {
            let seed = (2 * i + usize::from(prepared)) as u8;
            let data = pattern(len, seed);
            let token = Token(expect.len() as u64);
            loop {
                let s = pair.sender();
                let ep = s.ep;
                let desc = if prepared {
                    let hdr = len.min(8);
                    let d = s.btl.prepare_src(ep, hdr, region(&data[hdr..]));
                    d.map(|mut d| {
                        d.buf[..hdr].copy_from_slice(&data[..hdr]);
                        d
                    })
                } else {
                    s.btl.alloc(ep, len).map(|mut d| {
                        d.buf[..len].copy_from_slice(&data);
                        d
                    })
                };
                let desc = match desc {
                    Ok(d) => d,
                    Err(BtlError::NoResource) => {
                        pair.pump(&mut tx, &mut rx);
                        continue;
                    }
                    Err(e) => panic!("{name}: preparing {len} bytes failed: {e}"),
                };
                match pair.sender().btl.send(desc, AmTag(seed), token) {
                    Ok(SendOutcome::Done) => break,
                    Ok(SendOutcome::Pending) => {
                        assert!(
                            !pair.sender().btl.caps().contains(Caps::SEND_DONE),
                            "{name}: a send left pending by a BTL that says SEND_DONE"
                        );
                        pending.push(token);
                        break;
                    }
                    Err((d, BtlError::NoResource)) => {
                        pair.sender().btl.free(d);
                        pair.pump(&mut tx, &mut rx);
                    }
                    Err((_, e)) => panic!("{name}: send of {len} bytes failed: {e}"),
                }
            }
            expect.push((AmTag(seed), data.clone()));
            keep.push(data);
        }
    }
    let n = expect.len();
    pair.drive(&mut tx, &mut rx, "send", |tx, rx| {
        rx.recvs.len() >= n && pending.iter().all(|t| tx.completions.contains_key(t))
    });
    if !pair.sender().btl.caps().contains(Caps::ORDERED) {
        expect.sort_by_key(|(t, _)| t.0);
        rx.recvs.sort_by_key(|(_, t, _)| t.0);
    }
    for ((tag, want), (_, got_tag, got)) in expect.iter().zip(&rx.recvs) {
        assert_eq!(tag, got_tag, "{name}: tag of a {}-byte send", want.len());
        assert!(want == got, "{name}: content of a {}-byte send", want.len());
    }
    for (t, results) in &tx.completions {
        assert_eq!(
            results.len(),
            1,
            "{name}: token {t:?} completed {} times",
            results.len()
        );
        assert!(
            pending.contains(t),
            "{name}: completion for a Done send {t:?}"
        );
    }
    drop(keep);
}

/// [`Btl::send_packed`] of every size class up to `max_send_size` (an
/// 8-byte header, then what the packer writes): sent ones arrive with tag
/// and content intact, in order among themselves where [`Caps::ORDERED`];
/// the packer runs at most once, with exactly the bytes asked for, and not
/// at all when the module answers `Ok(false)` (then nothing arrives); one
/// byte past the limit is refused without sending. `must_send`: the module
/// overrides it and every call must send.
fn check_send_packed<B: Btl>(mut pair: Pair<B>, must_send: bool) {
    let name = pair.sender().btl.name();
    let max = pair.sender().btl.limits().max_send_size;
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    let mut expect = Vec::new();
    for (i, &len) in sizes(max).iter().filter(|&&l| l >= 8).enumerate() {
        let data = pattern(len, i as u8);
        let (hdr, rest) = data.split_at(8);
        let sent = loop {
            let mut calls = 0;
            let mut pack = |out: &mut [u8]| {
                calls += 1;
                assert_eq!(
                    out.len(),
                    rest.len(),
                    "{name}: packer given the wrong length"
                );
                out.copy_from_slice(rest);
            };
            let s = pair.sender();
            let r = s
                .btl
                .send_packed(s.ep, AmTag(i as u8), hdr, rest.len(), &mut pack);
            match r {
                Ok(sent) => {
                    assert_eq!(
                        calls,
                        usize::from(sent),
                        "{name}: packer calls, sent={sent}"
                    );
                    break sent;
                }
                Err(BtlError::NoResource) => {
                    assert_eq!(calls, 0, "{name}: packed, then refused");
                    pair.pump(&mut tx, &mut rx);
                }
                Err(e) => panic!("{name}: send_packed of {len} bytes failed: {e}"),
            }
        };
        assert!(
            sent || !must_send,
            "{name}: send_packed of {len} bytes sent nothing"
        );
        if sent {
            expect.push((AmTag(i as u8), data));
        }
    }
    let s = pair.sender();
    let mut pack = |_: &mut [u8]| panic!("{name}: packed past max_send_size");
    match s
        .btl
        .send_packed(s.ep, AmTag(0), &[0; 8], max - 7, &mut pack)
    {
        Ok(false) | Err(BtlError::TooLarge { .. }) => {}
        other => panic!("{name}: send_packed past max_send_size: {other:?}"),
    }
    let n = expect.len();
    pair.drive(&mut tx, &mut rx, "send_packed", |_, rx| rx.recvs.len() >= n);
    assert_eq!(
        rx.recvs.len(),
        n,
        "{name}: fragments that were not sent arrived"
    );
    if !pair.sender().btl.caps().contains(Caps::ORDERED) {
        expect.sort_by_key(|(t, _)| t.0);
        rx.recvs.sort_by_key(|(_, t, _)| t.0);
    }
    for ((tag, want), (_, got_tag, got)) in expect.iter().zip(&rx.recvs) {
        assert_eq!(
            tag,
            got_tag,
            "{name}: tag of a {}-byte packed send",
            want.len()
        );
        assert!(
            want == got,
            "{name}: content of a {}-byte packed send",
            want.len()
        );
    }
}

/// [`Btl::send_packed`]: what it sends arrives intact; a module may
/// decline (`Ok(false)`, the default), sending nothing.
pub fn send_packed<B: Btl>(pair: Pair<B>) {
    check_send_packed(pair, false);
}

/// [`send_packed`] for a module that overrides [`Btl::send_packed`]:
/// every call must send.
pub fn send_packed_sends<B: Btl>(pair: Pair<B>) {
    check_send_packed(pair, true);
}

/// Fragments on one endpoint arrive in send order (when the module
/// advertises [`Caps::ORDERED`]).
pub fn ordering<B: Btl>(mut pair: Pair<B>) {
    let name = pair.sender().btl.name();
    if !pair.sender().btl.caps().contains(Caps::ORDERED) {
        return;
    }
    let count = 5000u32;
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    let mut i = 0;
    while i < count {
        let s = pair.sender();
        let ep = s.ep;
        let r = match s.btl.alloc(ep, 4) {
            Ok(mut d) => {
                d.buf.copy_from_slice(&i.to_le_bytes());
                s.btl
                    .send(d, AmTag(7), Token(u64::from(i)))
                    .map_err(|(d, e)| {
                        s.btl.free(d);
                        e
                    })
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(_) => i += 1,
            Err(BtlError::NoResource) => {
                pair.pump(&mut tx, &mut rx);
            }
            Err(e) => panic!("{name}: send {i} failed: {e}"),
        }
    }
    pair.drive(&mut tx, &mut rx, "ordering", |_, rx| {
        rx.recvs.len() >= count as usize
    });
    for (k, (_, _, d)) in rx.recvs.iter().enumerate() {
        let got = u32::from_le_bytes(d[..4].try_into().unwrap());
        assert_eq!(got, k as u32, "{name}: fragment {k} arrived out of order");
    }
}

/// `progress_from` hands over fragments of its peer only, in order, none
/// past the one its taker declined more after, and what `progress`
/// delivers afterwards follows them: every fragment exactly once, in
/// sending order. (A module without per-peer order may hand over nothing.)
pub fn progress_from<B: Btl>(pair: Pair<B>) {
    check_progress_from(pair, false);
}

/// [`progress_from`] for a module that keeps arrivals in order per peer:
/// it must deliver what arrived (3, 1 and 5 fragments for sinks that want
/// that many).
pub fn progress_from_delivers<B: Btl>(pair: Pair<B>) {
    check_progress_from(pair, true);
}

fn check_progress_from<B: Btl>(mut pair: Pair<B>, must_deliver: bool) {
    let name = pair.sender().btl.name();
    let ordered = pair.sender().btl.caps().contains(Caps::ORDERED);
    let count = 40u32;
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    let mut i = 0;
    while i < count {
        let s = pair.sender();
        match s.btl.sendi(s.ep, AmTag(9), &[&i.to_le_bytes()]) {
            Ok(()) => i += 1,
            Err(BtlError::NoResource) => pair.pump(&mut tx, &mut rx),
            Err(e) => panic!("{name}: sendi {i} failed: {e}"),
        }
    }
    // Let what was sent arrive, without the receiver's progress.
    for _ in 0..100 {
        settle(&mut pair, &mut tx);
    }
    let s = receiver(&mut pair);
    let (rx_btl, rx_ep) = (&mut s.btl, s.ep);
    for want in [3usize, 1, 5] {
        let before = rx.recvs.len();
        let mut left = want;
        let mut past = false;
        let n = rx_btl.progress_from(rx_ep, &mut |tag, data| {
            past |= left == 0;
            rx.recvs.push((rx_ep, tag, data.to_vec()));
            left = left.saturating_sub(1);
            left > 0
        });
        assert!(
            !past,
            "{name}: progress_from went on after its taker said no more"
        );
        assert!(
            n <= want,
            "{name}: progress_from handed over {n}, {want} wanted"
        );
        assert!(
            !must_deliver || n == want,
            "{name}: progress_from handed over {n} of the {want} arrived fragments wanted"
        );
        assert_eq!(rx.recvs.len(), before + n, "{name}: progress_from's count");
        assert!(
            rx.recvs[before..]
                .iter()
                .all(|(_, tag, _)| *tag == AmTag(9)),
            "{name}: progress_from handed over something that was not from its peer"
        );
    }
    pair.drive(&mut tx, &mut rx, "progress_from", |_, rx| {
        rx.recvs.len() >= count as usize
    });
    assert_eq!(
        rx.recvs.len(),
        count as usize,
        "{name}: a fragment delivered twice"
    );
    let mut got: Vec<u32> = rx
        .recvs
        .iter()
        .map(|(_, _, d)| u32::from_le_bytes(d[..4].try_into().unwrap()))
        .collect();
    if !ordered {
        got.sort_unstable();
    }
    for (k, v) in got.into_iter().enumerate() {
        assert_eq!(
            v, k as u32,
            "{name}: fragment {k} out of order around progress_from"
        );
    }
}

/// Sending without progress ends in `NoResource` (memory does not grow
/// without bound), and after progress everything arrives exactly once.
pub fn back_pressure<B: Btl>(mut pair: Pair<B>) {
    let name = pair.sender().btl.name();
    let len = pair.sender().btl.limits().eager_limit.min(4096);
    let mut sent = 0usize;
    // More than 256 MiB queued without progress is not a bounded queue.
    let limit = (256usize << 20) / len.max(1);
    // A full BTL refuses every time; a transient refusal (injected by the
    // simulator) does not: only a run of refusals counts as full.
    let mut refusals = 0;
    while refusals < 50 {
        let s = pair.sender();
        let ep = s.ep;
        let d = match s.btl.alloc(ep, len) {
            Ok(d) => d,
            Err(BtlError::NoResource) => {
                refusals += 1;
                continue;
            }
            Err(e) => panic!("{name}: alloc failed: {e}"),
        };
        match s.btl.send(d, AmTag(3), Token(sent as u64)) {
            Ok(_) => {
                sent += 1;
                refusals = 0;
            }
            Err((d, BtlError::NoResource)) => {
                s.btl.free(d);
                refusals += 1;
            }
            Err((_, e)) => panic!("{name}: send failed: {e}"),
        }
        assert!(
            sent < limit,
            "{name}: {limit} sends of {len} bytes accepted without progress: unbounded queue"
        );
    }
    assert!(sent > 0, "{name}: not even one send accepted");
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    pair.drive(&mut tx, &mut rx, "back-pressure drain", |_, rx| {
        rx.recvs.len() >= sent
    });
    // Nothing more arrives: no duplicate.
    for _ in 0..100 {
        match &mut pair {
            Pair::Loopback(s) => {
                s.btl.progress(&mut rx);
            }
            Pair::Two(a, b) => {
                a.btl.progress(&mut tx);
                b.btl.progress(&mut rx);
            }
            Pair::Clocked(a, b, tick) => {
                a.btl.progress(&mut tx);
                b.btl.progress(&mut rx);
                tick();
            }
        }
    }
    assert_eq!(
        rx.recvs.len(),
        sent,
        "{name}: fragments lost or duplicated under back-pressure"
    );
}

/// Put and get up to 64 MiB, data checked; each completes exactly once.
pub fn rdma<B: Btl>(mut pair: Pair<B>) {
    let caps = pair.sender().btl.caps();
    if !caps.contains(Caps::PUT) && !caps.contains(Caps::GET) {
        return;
    }
    let name = pair.sender().btl.name();
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    let mut token = 0u64;
    for len in [0usize, 1, 4096, 65536 + 3, 1 << 20, 64 << 20] {
        for op_is_put in [true, false] {
            if (op_is_put && !caps.contains(Caps::PUT)) || (!op_is_put && !caps.contains(Caps::GET))
            {
                continue;
            }
            let local = if op_is_put {
                pattern(len, 11)
            } else {
                vec![0u8; len]
            };
            let remote = if op_is_put {
                vec![0u8; len + 16]
            } else {
                pattern(len + 16, 13)
            };
            // The remote side registers its memory (for a pair, the other module).
            let reg = match &mut pair {
                Pair::Loopback(s) => s
                    .btl
                    .register_mem(region(&remote), Access::REMOTE_WRITE | Access::REMOTE_READ),
                Pair::Two(_, b) | Pair::Clocked(_, b, _) => b
                    .btl
                    .register_mem(region(&remote), Access::REMOTE_WRITE | Access::REMOTE_READ),
            }
            .unwrap_or_else(|e| panic!("{name}: register {len} bytes: {e}"));
            token += 1;
            let t = Token(token);
            loop {
                let s = pair.sender();
                let ep = s.ep;
                let r = if op_is_put {
                    s.btl.put(ep, region(&local), &reg.key, 16, t)
                } else {
                    s.btl.get(ep, region(&local), &reg.key, 16, t)
                };
                match r {
                    Ok(()) => break,
                    Err(BtlError::NoResource) => pair.pump(&mut tx, &mut rx),
                    Err(e) => panic!("{name}: rdma of {len} bytes: {e}"),
                }
            }
            pair.drive(&mut tx, &mut rx, "rdma", |tx, _| {
                tx.completions.contains_key(&t)
            });
            let results = &tx.completions[&t];
            assert_eq!(
                results.len(),
                1,
                "{name}: rdma token completed {} times",
                results.len()
            );
            assert!(
                results[0].is_ok(),
                "{name}: rdma of {len} bytes: {:?}",
                results[0]
            );
            if op_is_put {
                assert!(
                    remote[16..] == local[..],
                    "{name}: put of {len} bytes: data differ"
                );
            } else {
                assert!(
                    local[..] == remote[16..],
                    "{name}: get of {len} bytes: data differ"
                );
            }
            match &mut pair {
                Pair::Loopback(s) => s.btl.deregister_mem(reg.id),
                Pair::Two(_, b) | Pair::Clocked(_, b, _) => b.btl.deregister_mem(reg.id),
            }
        }
    }
}

/// A key for part of a registration ([`Btl::sub_key`]): offsets count from
/// the part's start, an access past the part's end is refused even inside
/// the registration, and a part outside the registration has no key.
pub fn sub_keys<B: Btl>(mut pair: Pair<B>) {
    let caps = pair.sender().btl.caps();
    if !caps.contains(Caps::PUT) {
        return;
    }
    let name = pair.sender().btl.name();
    let remote = pattern(8192, 3);
    let local = pattern(1000, 7);
    let reg_of = |pair: &mut Pair<B>| {
        let b = match pair {
            Pair::Loopback(s) => &mut s.btl,
            Pair::Two(_, b) | Pair::Clocked(_, b, _) => &mut b.btl,
        };
        let reg = b
            .register_mem(region(&remote), Access::REMOTE_WRITE | Access::REMOTE_READ)
            .unwrap();
        let part = b
            .sub_key(&reg, 100, 1000)
            .unwrap_or_else(|e| panic!("{name}: sub_key inside the registration: {e}"));
        assert!(
            b.sub_key(&reg, 8000, 193).is_err(),
            "{name}: sub_key past the registration's end accepted"
        );
        (reg, part)
    };
    let (reg, part) = reg_of(&mut pair);
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    let ep = pair.sender().ep;
    // Issues an operation, retrying while the BTL is out of resources.
    let retry = |pair: &mut Pair<B>,
                 tx: &mut Recorder,
                 rx: &mut Recorder,
                 op: &mut dyn FnMut(&mut B) -> Result<(), BtlError>| loop {
        match op(&mut pair.sender().btl) {
            Err(BtlError::NoResource) => pair.pump(tx, rx),
            r => return r,
        }
    };
    let ok = retry(&mut pair, &mut tx, &mut rx, &mut |b| {
        b.put(ep, region(&local[..500]), &part, 500, Token(1))
    });
    let past = retry(&mut pair, &mut tx, &mut rx, &mut |b| {
        b.put(ep, region(&local[..2]), &part, 999, Token(2))
    });
    // With PUT_ORDERED a put its target refuses completes here, and the
    // target reports the refusal.
    let ordered = pair.sender().btl.caps().contains(Caps::PUT_ORDERED);
    for (t, r, want_ok) in [(Token(1), ok, true), (Token(2), past, false)] {
        match r {
            Ok(()) => {
                pair.drive(&mut tx, &mut rx, "sub-key put", |tx, _| {
                    tx.completions.contains_key(&t)
                });
                let done = tx.completions[&t][0].is_ok();
                if ordered && done && !want_ok {
                    pair.drive(&mut tx, &mut rx, "sub-key put refused", |_, rx| {
                        !rx.refused.is_empty()
                    });
                } else {
                    assert_eq!(
                        done, want_ok,
                        "{name}: sub-key put {t:?}: {:?}",
                        tx.completions[&t][0]
                    );
                }
            }
            Err(e) => assert!(!want_ok, "{name}: sub-key put {t:?} refused: {e}"),
        }
    }
    assert!(
        ordered || rx.refused.is_empty(),
        "{name}: a refusal reported by a BTL without PUT_ORDERED"
    );
    let mut want = pattern(8192, 3);
    want[600..1100].copy_from_slice(&local[..500]);
    assert!(
        remote == want,
        "{name}: a sub-key put landed in the wrong place or past its part"
    );
    if caps.contains(Caps::GET) {
        let mut got = vec![0u8; 300];
        retry(&mut pair, &mut tx, &mut rx, &mut |b| {
            b.get(ep, region(&got), &part, 0, Token(3))
        })
        .unwrap_or_else(|e| panic!("{name}: sub-key get: {e}"));
        pair.drive(&mut tx, &mut rx, "sub-key get", |tx, _| {
            tx.completions.contains_key(&Token(3))
        });
        assert!(
            tx.completions[&Token(3)][0].is_ok(),
            "{name}: sub-key get failed"
        );
        assert_eq!(
            got[..],
            want[100..400],
            "{name}: sub-key get read the wrong bytes"
        );
        got.clear();
    }
    match &mut pair {
        Pair::Loopback(s) => s.btl.deregister_mem(reg.id),
        Pair::Two(_, b) | Pair::Clocked(_, b, _) => b.btl.deregister_mem(reg.id),
    }
}

/// A key for a deregistered region, a forged key and an offset past the end
/// are errors, never memory accesses.
pub fn forged_and_stale_keys<B: Btl>(mut pair: Pair<B>) {
    let caps = pair.sender().btl.caps();
    if !caps.contains(Caps::PUT) {
        return;
    }
    let name = pair.sender().btl.name();
    let remote = vec![0u8; 64];
    let local = pattern(64, 1);
    let reg = match &mut pair {
        Pair::Loopback(s) => s.btl.register_mem(region(&remote), Access::REMOTE_WRITE),
        Pair::Two(_, b) | Pair::Clocked(_, b, _) => {
            b.btl.register_mem(region(&remote), Access::REMOTE_WRITE)
        }
    }
    .unwrap();
    let s = pair.sender();
    let ep = s.ep;
    let past = s.btl.put(ep, region(&local), &reg.key, 1, Token(1));
    let forged = crate::btl::RemoteKey::new(&[0xee; 16]).unwrap();
    let bad = s.btl.put(ep, region(&local), &forged, 0, Token(2));
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    // Errors may be reported synchronously or as a failed completion; with
    // PUT_ORDERED a put the target refuses may complete here, and the
    // target reports the refusal instead.
    let ordered = caps.contains(Caps::PUT_ORDERED);
    let mut refusals = 0;
    for (what, r, t) in [
        ("an offset past the end", past, Token(1)),
        ("a forged key", bad, Token(2)),
    ] {
        if r.is_ok() {
            pair.drive(&mut tx, &mut rx, what, |tx, _| {
                tx.completions.contains_key(&t)
            });
            if ordered && tx.completions[&t][0].is_ok() {
                refusals += 1;
                pair.drive(&mut tx, &mut rx, what, |_, rx| rx.refused.len() >= refusals);
            } else {
                assert!(
                    tx.completions[&t][0].is_err(),
                    "{name}: put with {what} succeeded"
                );
            }
        }
    }
    match &mut pair {
        Pair::Loopback(s) => s.btl.deregister_mem(reg.id),
        Pair::Two(_, b) | Pair::Clocked(_, b, _) => b.btl.deregister_mem(reg.id),
    }
    let s = pair.sender();
    let stale = s.btl.put(ep, region(&local), &reg.key, 0, Token(3));
    if stale.is_ok() {
        pair.drive(&mut tx, &mut rx, "stale key", |tx, _| {
            tx.completions.contains_key(&Token(3))
        });
        if ordered && tx.completions[&Token(3)][0].is_ok() {
            refusals += 1;
            pair.drive(&mut tx, &mut rx, "stale key", |_, rx| {
                rx.refused.len() >= refusals
            });
        } else {
            assert!(
                tx.completions[&Token(3)][0].is_err(),
                "{name}: put to a deregistered key succeeded"
            );
        }
    }
    assert_eq!(rx.refused.len(), refusals, "{name}: refusals reported");
    assert!(
        remote.iter().all(|&b| b == 0),
        "{name}: a rejected put wrote memory"
    );
}

/// [`Caps::PUT_ORDERED`]: a put's data is in place when a fragment sent
/// after it arrives, for puts of every size class, and a put refused at
/// the target is reported there before that fragment.
pub fn put_ordered<B: Btl>(mut pair: Pair<B>) {
    let caps = pair.sender().btl.caps();
    if !caps.contains(Caps::PUT_ORDERED) {
        return;
    }
    let name = pair.sender().btl.name();
    let max = 3 << 20;
    let mut remote = vec![0u8; max];
    let reg = match &mut pair {
        Pair::Loopback(s) => s.btl.register_mem(region(&remote), Access::REMOTE_WRITE),
        Pair::Two(_, b) | Pair::Clocked(_, b, _) => {
            b.btl.register_mem(region(&remote), Access::REMOTE_WRITE)
        }
    }
    .unwrap();
    let mut tx = Recorder::default();
    let mut rx = Recorder::default();
    for (k, len) in [1usize, 100, 4096, 70_000, max].into_iter().enumerate() {
        let data = pattern(len, k as u8 + 3);
        let s = pair.sender();
        let ep = s.ep;
        s.btl
            .put(ep, region(&data), &reg.key, 0, Token(100 + k as u64))
            .unwrap_or_else(|e| panic!("{name}: put of {len} bytes: {e}"));
        // A refused put (a forged key) between the put and the fragment.
        let forged = crate::btl::RemoteKey::new(&[0xee; 16]).unwrap();
        let refused = s
            .btl
            .put(ep, region(&data), &forged, 0, Token(200 + k as u64))
            .is_ok();
        loop {
            match pair
                .sender()
                .btl
                .sendi(ep, AmTag(77), &[&(k as u32).to_le_bytes()])
            {
                Ok(()) => break,
                Err(BtlError::NoResource) => pair.pump(&mut tx, &mut rx),
                Err(e) => panic!("{name}: sendi after a put: {e}"),
            }
        }
        let before = rx.recvs.len();
        let seen = rx.refused.len();
        let mut landed = false;
        let mut refused_first = !refused;
        pair.drive(&mut tx, &mut rx, "put then fragment", |_, rx| {
            if rx.recvs.len() > before {
                // The fragment is here: the put's data must be too, and
                // the refusal reported.
                landed = remote[..len] == data[..];
                refused_first |= rx.refused.len() > seen;
                return true;
            }
            false
        });
        assert!(
            landed,
            "{name}: a {len}-byte put was not in place when the fragment after it arrived"
        );
        assert!(
            refused_first,
            "{name}: a refused put was not reported before the fragment after it"
        );
        pair.drive(&mut tx, &mut rx, "put completions", |tx, _| {
            tx.completions.contains_key(&Token(100 + k as u64))
        });
        assert!(
            tx.completions[&Token(100 + k as u64)][0].is_ok(),
            "{name}: put failed"
        );
        remote[..len].fill(0);
    }
    let _ = &mut remote;
}

/// A peer that goes away (two-module pairs; a loopback pair has no other
/// side): with sends (and, where supported, a get) in flight, side b is
/// dropped. Side a must report the loss through `on_peer_lost` exactly once
/// within 5 seconds of progress, complete every outstanding token exactly
/// once, and refuse later sends to the lost endpoint with `PeerGone`.
pub fn peer_gone<B: Btl>(pair: Pair<B>) {
    let (mut a, b, mut tick) = match pair {
        Pair::Loopback(_) => return,
        Pair::Two(a, b) => (a, b, None),
        Pair::Clocked(a, b, tick) => (a, b, Some(tick)),
    };
    let name = a.btl.name();
    let caps = a.btl.caps();
    let ep = a.ep;
    let mut tx = Recorder::default();
    let mut progress = |a: &mut Side<B>, tx: &mut Recorder| {
        a.btl.progress(tx);
        if let Some(tick) = tick.as_mut() {
            tick();
        }
    };
    let mut pending = Vec::new();
    // Sends in flight: up to 64, or until the first refusal.
    for i in 0..64u64 {
        let Ok(mut d) = a.btl.alloc(ep, 64) else {
            break;
        };
        d.buf.copy_from_slice(&pattern(64, i as u8));
        match a.btl.send(d, AmTag(9), Token(i)) {
            Ok(SendOutcome::Pending) => pending.push(Token(i)),
            Ok(SendOutcome::Done) => {}
            Err((d, _)) => {
                a.btl.free(d);
                break;
            }
        }
    }
    if caps.contains(Caps::SENDI) {
        let _ = a.btl.sendi(ep, AmTag(9), &[b"in flight"]);
    }
    // A get in flight, where supported (the memory stays valid: only the
    // module goes).
    let remote = pattern(4096, 21);
    let local = vec![0u8; 4096];
    let mut b = b;
    if caps.contains(Caps::GET) {
        let reg = b
            .btl
            .register_mem(region(&remote), Access::REMOTE_READ)
            .unwrap_or_else(|e| panic!("{name}: register_mem: {e}"));
        let t = Token(1000);
        for _ in 0..100 {
            match a.btl.get(ep, region(&local), &reg.key, 0, t) {
                Ok(()) => {
                    pending.push(t);
                    break;
                }
                Err(BtlError::NoResource) => progress(&mut a, &mut tx),
                Err(e) => panic!("{name}: get before the loss: {e}"),
            }
        }
    }
    drop(b);
    let start = std::time::Instant::now();
    let limit = std::time::Duration::from_secs(5);
    while tx.lost.is_empty() {
        assert!(
            start.elapsed() < limit,
            "{name}: a dropped peer was not reported lost within {limit:?}"
        );
        progress(&mut a, &mut tx);
    }
    assert_eq!(tx.lost, vec![ep], "{name}: the lost endpoint");
    while !pending.iter().all(|t| tx.completions.contains_key(t)) {
        assert!(
            start.elapsed() < limit,
            "{name}: operations to a lost peer never completed"
        );
        progress(&mut a, &mut tx);
    }
    for _ in 0..100 {
        progress(&mut a, &mut tx);
    }
    assert_eq!(tx.lost, vec![ep], "{name}: a peer loss is reported once");
    for t in &pending {
        assert_eq!(
            tx.completions[t].len(),
            1,
            "{name}: token {t:?} completed {} times",
            tx.completions[t].len()
        );
    }
    for t in tx.completions.keys() {
        assert!(
            pending.contains(t),
            "{name}: completion for {t:?}, never pending"
        );
    }
    if caps.contains(Caps::SENDI) {
        let r = a.btl.sendi(ep, AmTag(1), &[b"after"]);
        assert!(
            matches!(r, Err(BtlError::PeerGone(e, _)) if e == ep),
            "{name}: sendi to a lost peer: {r:?}"
        );
    }
    let r = a
        .btl
        .alloc(ep, 8)
        .and_then(|d| match a.btl.send(d, AmTag(1), Token(5000)) {
            Ok(o) => Ok(o),
            Err((d, e)) => {
                a.btl.free(d);
                Err(e)
            }
        });
    assert!(
        matches!(r, Err(BtlError::PeerGone(e, _)) if e == ep),
        "{name}: send to a lost peer: {r:?}"
    );
    drop(local);
}

/// A pair of one `self` module reaching itself (for the suite's own tests).
pub fn self_pair() -> Pair<crate::self_btl::SelfBtl> {
    let mut btl = crate::self_btl::SelfBtl::new(0, crate::self_btl::DEFAULT_LIMITS);
    let ep = btl
        .add_peer(&PeerInfo {
            rank: 0,
            local: true,
            card: None,
        })
        .unwrap()
        .expect("self reaches itself");
    Pair::Loopback(Side { btl, ep })
}

/// A pair of simulated modules (ranks 0 and 1) on a fresh [`crate::sim::SimNet`],
/// with the clock advancing to the next event after each round.
pub fn sim_pair(cfg: crate::sim::SimConfig) -> Pair<crate::sim::SimBtl> {
    let net = crate::sim::SimNet::new(cfg);
    let mut a = net.module(0);
    let mut b = net.module(1);
    let card_a = a.business_card();
    let card_b = b.business_card();
    let ab = a
        .add_peer(&PeerInfo {
            rank: 1,
            local: false,
            card: Some(&card_b),
        })
        .unwrap()
        .expect("sim reaches every rank");
    let ba = b
        .add_peer(&PeerInfo {
            rank: 0,
            local: false,
            card: Some(&card_a),
        })
        .unwrap()
        .expect("sim reaches every rank");
    let clock = net.clone();
    Pair::Clocked(
        Side { btl: a, ep: ab },
        Side { btl: b, ep: ba },
        Box::new(move || {
            clock.advance_to_next();
        }),
    )
}

/// A pair of sm modules in this process (local ranks 0 and 1 of 2, ranks 0
/// and 1), each given the other's card; single copy enabled on both.
#[cfg(not(loom))]
pub fn sm_pair() -> Pair<crate::sm::SmBtl> {
    sm_pair_with(true, true)
}

/// [`sm_pair`] with single copy set per side. With `(true, false)` side a
/// (the sender of every check) advertises put and get, but its peer does
/// not accept CMA: every put and get goes through the copy-in/copy-out
/// emulation over the rings.
#[cfg(not(loom))]
pub fn sm_pair_with(single_copy_a: bool, single_copy_b: bool) -> Pair<crate::sm::SmBtl> {
    use crate::sm::{SmBtl, SmConfig};
    let make = |index: u32, single_copy: bool| {
        SmBtl::new(SmConfig {
            single_copy,
            ..SmConfig::new(index, 2)
        })
        .expect("sm module")
    };
    let mut a = make(0, single_copy_a);
    let mut b = make(1, single_copy_b);
    let card_a = a.business_card();
    let card_b = b.business_card();
    let ab = a
        .add_peer(&PeerInfo {
            rank: 1,
            local: true,
            card: Some(&card_b),
        })
        .unwrap()
        .expect("sm reaches a local rank");
    let ba = b
        .add_peer(&PeerInfo {
            rank: 0,
            local: true,
            card: Some(&card_a),
        })
        .unwrap()
        .expect("sm reaches a local rank");
    Pair::Two(Side { btl: a, ep: ab }, Side { btl: b, ep: ba })
}
