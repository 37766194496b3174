//! Connections bound late: nothing is connected before the first send,
//! fragments queued while connecting arrive in order, and two modules that
//! connect to each other at the same time end with one connection and
//! every fragment delivered exactly once, in order.

mod tcp_common;

use std::time::Duration;

use oxmpi_btl::btl::{AmTag, Btl, BtlError, SendOutcome, Token};
use tcp_common::*;

fn msg(seq: u32, from: u8) -> Vec<u8> {
    let len = (seq as usize * 37) % 3000;
    let mut v = vec![from; 4 + len];
    v[..4].copy_from_slice(&seq.to_le_bytes());
    v
}

fn check_stream(rec: &Rec, n: u32, from: u8, who: &str) {
    assert_eq!(rec.recvs.len(), n as usize, "{who}: fragment count");
    for (i, (_, tag, data)) in rec.recvs.iter().enumerate() {
        assert_eq!(
            *data,
            msg(i as u32, from),
            "{who}: fragment {i} out of order or damaged"
        );
        assert_eq!(*tag, AmTag(from), "{who}: tag of fragment {i}");
    }
}

/// Queues `n` fragments without progress (sendi for even, send for odd
/// sequence numbers); returns the Pending tokens.
fn queue_all(
    m: &mut oxmpi_btl::tcp::TcpBtl,
    ep: oxmpi_btl::btl::Endpoint,
    n: u32,
    from: u8,
) -> Vec<Token> {
    let mut pending = Vec::new();
    for i in 0..n {
        let data = msg(i, from);
        if i % 2 == 0 {
            m.sendi(ep, AmTag(from), &[&data[..4], &data[4..]])
                .expect("sendi while connecting");
        } else {
            let mut d = m.alloc(ep, data.len()).unwrap();
            d.buf.copy_from_slice(&data);
            match m.send(d, AmTag(from), Token(u64::from(i))) {
                Ok(SendOutcome::Pending) => pending.push(Token(u64::from(i))),
                Ok(SendOutcome::Done) => {}
                Err((_, e)) => panic!("send while connecting: {e}"),
            }
        }
    }
    pending
}

#[test]
fn tcp_lazy_connection_in_order() {
    let (mut a, ab, mut b, ba) = lo_pair();
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    // Progress alone connects nothing.
    for _ in 0..200 {
        a.progress(&mut ra);
        b.progress(&mut rb);
    }
    assert_eq!(a.open_connections(), 0, "a connected before any send");
    assert_eq!(b.open_connections(), 0, "b connected before any send");
    assert_eq!(a.stats().connects + b.stats().connects, 0);

    // The first send opens the connection; fragments queue meanwhile.
    let n = 300;
    let pending = queue_all(&mut a, ab, n, 1);
    assert_eq!(a.open_connections(), 1, "the first send connects");
    assert_eq!(a.established_connections(), 0, "not yet authenticated");
    assert!(!pending.is_empty());
    drive2(
        &mut a,
        &mut ra,
        &mut b,
        &mut rb,
        Duration::from_secs(10),
        "lazy",
        |ra, rb| rb.recvs.len() >= n as usize && ra.completions.len() >= pending.len(),
    );
    check_stream(&rb, n, 1, "b");
    for (t, r) in &ra.completions {
        assert!(pending.contains(t) && r.is_ok(), "completion {t:?}: {r:?}");
    }
    assert_eq!(ra.completions.len(), pending.len(), "each token once");

    // The answer uses the same connection: b connects nothing.
    queue_all(&mut b, ba, n, 2);
    drive2(
        &mut a,
        &mut ra,
        &mut b,
        &mut rb,
        Duration::from_secs(10),
        "reply",
        |ra, _| ra.recvs.len() >= n as usize,
    );
    check_stream(&ra, n, 2, "a");
    assert_eq!(b.stats().connects, 0, "b reused a's connection");
    assert_eq!((a.open_connections(), b.open_connections()), (1, 1));
    assert_eq!(b.stats().accepted, 1);

    // A sendi of many parts (copied, then queued) on an idle connection
    // goes out without waiting for a socket event.
    let parts: Vec<[u8; 3]> = (0..20u8).map(|i| [i; 3]).collect();
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    a.sendi(ab, AmTag(5), &refs).unwrap();
    drive2(
        &mut a,
        &mut ra,
        &mut b,
        &mut rb,
        Duration::from_secs(5),
        "gather",
        |_, rb| rb.recvs.len() > n as usize,
    );
    assert_eq!(rb.recvs.last().unwrap().2, parts.concat());
}

/// Both sides send before either progresses: both connect, one connection
/// survives (the lower rank's), nothing is lost or duplicated.
#[test]
fn tcp_simultaneous_connect() {
    let mut declined = 0;
    for round in 0..24u32 {
        let (mut a, ab, mut b, ba) = lo_pair();
        let (mut ra, mut rb) = (Rec::default(), Rec::default());
        let n = 200;
        let pa = queue_all(&mut a, ab, n, 1);
        let pb = queue_all(&mut b, ba, n, 2);
        assert_eq!((a.open_connections(), b.open_connections()), (1, 1));
        // Vary who progresses first and how long, to hit every order of
        // HELLO, ACCEPT and DECLINE.
        let head = (round / 3) * 3;
        for _ in 0..head {
            match round % 3 {
                0 => {
                    a.progress(&mut ra);
                }
                1 => {
                    b.progress(&mut rb);
                }
                _ => {
                    a.progress(&mut ra);
                    std::thread::sleep(Duration::from_micros(200));
                    b.progress(&mut rb);
                }
            }
        }
        drive2(
            &mut a,
            &mut ra,
            &mut b,
            &mut rb,
            Duration::from_secs(20),
            "simultaneous",
            |ra, rb| {
                ra.recvs.len() >= n as usize
                    && rb.recvs.len() >= n as usize
                    && ra.completions.len() >= pa.len()
                    && rb.completions.len() >= pb.len()
            },
        );
        // Let stray events settle, then check nothing more arrives.
        for _ in 0..200 {
            a.progress(&mut ra);
            b.progress(&mut rb);
        }
        check_stream(&rb, n, 1, &format!("round {round}: b"));
        check_stream(&ra, n, 2, &format!("round {round}: a"));
        assert!(ra.completions.iter().all(|(_, r)| r.is_ok()));
        assert!(rb.completions.iter().all(|(_, r)| r.is_ok()));
        assert_eq!(ra.completions.len(), pa.len(), "round {round}: a tokens");
        assert_eq!(rb.completions.len(), pb.len(), "round {round}: b tokens");
        assert!(
            ra.lost.is_empty() && rb.lost.is_empty(),
            "round {round}: a peer lost"
        );
        assert_eq!(
            (a.open_connections(), b.open_connections()),
            (1, 1),
            "round {round}: one connection each"
        );
        // The lower rank's connection won.
        assert_eq!(
            b.stats().accepted,
            1,
            "round {round}: b accepted a's connection"
        );
        assert!(
            !a.has_work() && !b.has_work(),
            "round {round}: idle at the end"
        );
        declined += a.stats().declined;
    }
    assert!(declined > 0, "no round had both connections meet");
}

#[test]
fn tcp_limits_keys_and_unsupported_get() {
    let (mut a, ab, _b, _ba) = lo_pair();
    let big = vec![0u8; a.limits().max_sendi_size + 1];
    assert!(matches!(
        a.sendi(ab, AmTag(0), &[&big]),
        Err(BtlError::TooLarge { .. })
    ));
    assert!(matches!(
        a.alloc(ab, 1 << 30),
        Err(BtlError::TooLarge { .. })
    ));
    let buf = [0u8; 8];
    // SAFETY: the buffer outlives the (refused) calls.
    let r = unsafe { oxmpi_btl::mem::MemRegion::from_slice(&buf) };
    // PUT is emulated (registrations work); GET is not offered.
    let reg = a
        .register_mem(r, oxmpi_btl::btl::Access::REMOTE_WRITE)
        .unwrap();
    let key = oxmpi_btl::btl::RemoteKey::new(&[1; 8]).unwrap();
    assert!(matches!(
        a.put(ab, r, &key, 0, Token(1)),
        Err(BtlError::Invalid(_))
    ));
    // A put that would leave the registration is refused before sending.
    assert!(matches!(
        a.put(ab, r, &reg.key, 1, Token(1)),
        Err(BtlError::Invalid(_))
    ));
    a.deregister_mem(reg.id);
    assert!(matches!(
        a.get(ab, r, &key, 0, Token(2)),
        Err(BtlError::Unsupported(_))
    ));
    assert!(matches!(
        a.alloc(oxmpi_btl::btl::Endpoint(99), 1),
        Err(BtlError::Invalid(_))
    ));
}

/// `del_peer` completes queued sends with errors and closes the connection.
#[test]
fn tcp_del_peer_fails_queued_sends() {
    let (mut a, ab, mut b, _ba) = lo_pair();
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    let pending = queue_all(&mut a, ab, 50, 1);
    assert!(!pending.is_empty());
    a.del_peer(ab);
    assert_eq!(a.open_connections(), 0);
    for _ in 0..100 {
        a.progress(&mut ra);
        b.progress(&mut rb);
    }
    assert_eq!(ra.completions.len(), pending.len());
    assert!(ra
        .completions
        .iter()
        .all(|(_, r)| matches!(r, Err(BtlError::PeerGone(..)))));
    assert!(ra.lost.is_empty(), "a deleted peer is not reported lost");
    assert!(matches!(a.alloc(ab, 1), Err(BtlError::Invalid(_))));
    assert!(!a.has_work());
}

/// With two links each process has two modules, and a put sent from one
/// module arrives on the peer's paired module, not necessarily the one
/// that registered the memory: registrations are shared by a process's
/// modules, so the data lands anyway.
#[test]
fn tcp_put_lands_on_any_module_of_the_target() {
    let mut ca = lo_config(0);
    ca.links = 2;
    let mut cb = lo_config(1);
    cb.links = 2;
    let mut a = oxmpi_btl::tcp::TcpBtl::open_all(&ca).expect("open a");
    let mut b = oxmpi_btl::tcp::TcpBtl::open_all(&cb).expect("open b");
    assert_eq!((a.len(), b.len()), (2, 2));
    let (card_a, card_b) = (a[0].business_card(), b[0].business_card());
    let eps_a: Vec<_> = a.iter_mut().map(|m| add(m, 1, &card_b)).collect();
    let _eps_b: Vec<_> = b.iter_mut().map(|m| add(m, 0, &card_a)).collect();
    let len = 3 << 20;
    let target = vec![0u8; len + 8];
    let src: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    // SAFETY: both buffers outlive every operation below; target is only
    // written by the BTL while registered, and read after the acknowledgements.
    let (tr, sr) = unsafe {
        (
            oxmpi_btl::mem::MemRegion::from_slice(&target),
            oxmpi_btl::mem::MemRegion::from_slice(&src),
        )
    };
    // Rank 1 registers on its first module; rank 0 puts half through each
    // of its modules.
    let reg = b[0]
        .register_mem(tr, oxmpi_btl::btl::Access::REMOTE_WRITE)
        .unwrap();
    let half = len / 2;
    let parts = [(0usize, half), (half, len - half)];
    let mut recs: Vec<Rec> = (0..4).map(|_| Rec::default()).collect();
    for (k, &(off, n)) in parts.iter().enumerate() {
        let part = sr.slice(off, n).unwrap();
        loop {
            match a[k].put(eps_a[k], part, &reg.key, 8 + off, Token(k as u64)) {
                Ok(()) => break,
                Err(BtlError::NoResource) => {
                    a[k].progress(&mut recs[k]);
                }
                Err(e) => panic!("put through module {k}: {e}"),
            }
        }
    }
    let start = std::time::Instant::now();
    while recs[0].completions.is_empty() || recs[1].completions.is_empty() {
        for (k, m) in a.iter_mut().enumerate() {
            m.progress(&mut recs[k]);
        }
        for (k, m) in b.iter_mut().enumerate() {
            m.progress(&mut recs[2 + k]);
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "puts not acknowledged"
        );
    }
    for rec in &recs[..2] {
        assert_eq!(rec.completions.len(), 1);
        assert!(rec.completions[0].1.is_ok(), "{:?}", rec.completions);
    }
    assert_eq!(&target[8..], &src[..]);
    assert!(target[..8].iter().all(|&x| x == 0));
    b[0].deregister_mem(reg.id);
}
