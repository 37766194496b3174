//! Padded frames: in-place data and puts from buffers at every offset
//! modulo 64 (the sender pads them to their own alignment, see the `wire`
//! module doc) arrive whole, in order and in place, interleaved with
//! unpadded fragments, whether the receiver takes them in one read or in
//! many.

mod tcp_common;

use std::time::{Duration, Instant};

use oxmpi_btl::btl::{Access, AmTag, Btl, BtlError, Endpoint, RemoteKey, SendOutcome, Token};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::tcp::TcpBtl;
use tcp_common::*;

/// The bytes of fragment `i`: its number, then a pattern.
fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((k * 7 + i * 13) % 251) as u8).collect()
}

/// Sender and receiver, progressed together while the sender waits for
/// room.
struct Ends {
    a: TcpBtl,
    ra: Rec,
    ab: Endpoint,
    b: TcpBtl,
    rb: Rec,
}

impl Ends {
    fn pump(&mut self, what: &str, start: Instant) {
        self.a.progress(&mut self.ra);
        self.b.progress(&mut self.rb);
        assert!(start.elapsed() < Duration::from_secs(30), "{what}: no room");
    }

    /// Sends a 12-byte header (`n` repeated) and `region` in place.
    fn send_inplace(&mut self, region: MemRegion, n: usize) {
        let start = Instant::now();
        loop {
            let mut d = match self.a.prepare_src(self.ab, 12, region) {
                Ok(d) => d,
                Err(BtlError::NoResource) => {
                    self.pump("prepare_src", start);
                    continue;
                }
                Err(e) => panic!("prepare_src: {e}"),
            };
            d.buf.copy_from_slice(&[n as u8; 12]);
            match self.a.send(d, AmTag(7), Token(n as u64)) {
                Ok(SendOutcome::Done | SendOutcome::Pending) => return,
                Err((d, BtlError::NoResource)) => {
                    self.a.free(d);
                    self.pump("send", start);
                }
                Err((_, e)) => panic!("send {n}: {e}"),
            }
        }
    }

    /// Sends `data` with `sendi`.
    fn sendi(&mut self, data: &[u8]) {
        let start = Instant::now();
        loop {
            match self.a.sendi(self.ab, AmTag(7), &[data]) {
                Ok(()) => return,
                Err(BtlError::NoResource) => self.pump("sendi", start),
                Err(e) => panic!("sendi: {e}"),
            }
        }
    }

    /// Puts `region` at `at` of `key`.
    fn put(&mut self, region: MemRegion, key: &RemoteKey, at: usize, token: u64) {
        let start = Instant::now();
        loop {
            match self.a.put(self.ab, region, key, at, Token(token)) {
                Ok(()) => return,
                Err(BtlError::NoResource) => self.pump("put", start),
                Err(e) => panic!("put: {e}"),
            }
        }
    }
}

#[test]
fn tcp_padded_frames_arrive_whole_and_in_order() {
    let (a, ab, b, _ba) = lo_pair();
    let mut e = Ends {
        a,
        ra: Rec::default(),
        ab,
        b,
        rb: Rec::default(),
    };
    // Sources at every offset modulo 64 of a 64-byte aligned base.
    // The largest is received straight into its target (past the
    // receive buffer) when put.
    let lens = [4096usize, 5000, 70_001, 3 << 20];
    let max = *lens.iter().max().unwrap();
    let src_all = vec![0u8; max + 256];
    let base = (64 - src_all.as_ptr() as usize % 64) % 64;
    let target = vec![0u8; 4 * (max + 64) + 12 * (70_001 + 64)];
    // SAFETY: `target` outlives every put below and is read only after
    // their acknowledgements; it is registered while written.
    let tr = unsafe { MemRegion::from_slice(&target) };
    let reg = e.b.register_mem(tr, Access::REMOTE_WRITE).unwrap();
    let mut sources = Vec::new();
    let mut expect = Vec::new();
    let mut puts = Vec::new();
    let mut next_at = 0;
    for (n, off) in (0..64).step_by(4).enumerate() {
        let len = lens[n % lens.len()];
        let mut src = src_all.clone();
        src[base + off..base + off + len].copy_from_slice(&pattern(n, len));
        sources.push(src);
        let src = sources.last().unwrap();
        // SAFETY: `sources` keeps every buffer alive and unchanged (its
        // elements are never moved: the vector's own buffer may move, each
        // element's heap block does not) until the end of the test.
        let region = unsafe { MemRegion::from_slice(&src[base + off..base + off + len]) };
        // A data frame: a 12-byte header of ours, then the data in place
        // (not the largest: it is past the fragment limit).
        if len <= 70_001 {
            e.send_inplace(region, n);
            let mut whole = vec![n as u8; 12];
            whole.extend_from_slice(&pattern(n, len));
            expect.push(whole);
        }
        // An unpadded fragment right after it.
        let small = [n as u8; 5];
        e.sendi(&small);
        expect.push(small.to_vec());
        // A put of the same data, at a target offset of its own (every
        // offset modulo 64 too).
        let at = next_at;
        next_at += len + 13;
        e.put(region, &reg.key, at, 10_000 + n as u64);
        puts.push((at, n, len));
        // Let the receiver read now and then, so frames arrive in pieces
        // of every kind.
        if n % 3 == 0 {
            e.b.progress(&mut e.rb);
        }
    }
    let want = expect.len();
    let put_done = |ra: &Rec| ra.completions.iter().filter(|(t, _)| t.0 >= 10_000).count();
    let Ends {
        mut a,
        mut ra,
        mut b,
        mut rb,
        ..
    } = e;
    drive2(
        &mut a,
        &mut ra,
        &mut b,
        &mut rb,
        Duration::from_secs(30),
        "padded frames and put completions",
        |ra, rb| rb.recvs.len() >= want && put_done(ra) == puts.len(),
    );
    assert_eq!(rb.recvs.len(), want, "fragment count");
    for (i, ((_, tag, got), want)) in rb.recvs.iter().zip(&expect).enumerate() {
        assert_eq!(*tag, AmTag(7));
        assert!(got == want, "fragment {i} damaged or out of order");
    }
    for (t, r) in &ra.completions {
        assert!(r.is_ok(), "token {t:?}: {r:?}");
    }
    for &(at, n, len) in &puts {
        assert!(
            target[at..at + len] == pattern(n, len)[..],
            "put {n} ({len} bytes at {at}) damaged"
        );
    }

    // A padded put with a forged nonce: the target reads its data and drops
    // it (past the receive buffer, then the padding), the put fails, and
    // the fragment after it arrives whole.
    let mut forged = reg.key.as_bytes().to_vec();
    forged[8] ^= 0x5a;
    let forged = RemoteKey::new(&forged).unwrap();
    let src = &sources[3];
    let len = lens[3];
    // SAFETY: `sources` is alive and unchanged until the end of the test.
    let region = unsafe { MemRegion::from_slice(&src[base + 12..base + 12 + len]) };
    let before = target.clone();
    let mut e = Ends { a, ra, ab, b, rb };
    e.put(region, &forged, 0, 20_000);
    e.sendi(&[9; 5]);
    let Ends {
        mut a,
        mut ra,
        mut b,
        mut rb,
        ..
    } = e;
    drive2(
        &mut a,
        &mut ra,
        &mut b,
        &mut rb,
        Duration::from_secs(30),
        "forged put refused",
        |ra, rb| rb.recvs.len() > want && ra.completions.iter().any(|(t, _)| t.0 == 20_000),
    );
    // Done here (written); refused at the target, reported there before the
    // fragment after it.
    let (_, r) = ra.completions.iter().find(|(t, _)| t.0 == 20_000).unwrap();
    assert!(r.is_ok(), "a put is done once written: {r:?}");
    assert_eq!(rb.refused.len(), 1, "the target reports the refused put");
    assert_eq!(
        rb.refused[0].1, want,
        "reported before the fragment after it"
    );
    assert_eq!(rb.recvs.len(), want + 1);
    assert_eq!(
        rb.recvs[want].2, [9; 5],
        "the fragment after the refused put"
    );
    assert!(target == before, "a refused put wrote nothing");
    b.deregister_mem(reg.id);
}
