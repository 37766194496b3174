//! A peer process killed (SIGKILL) in the middle of a transfer: the
//! survivor gets `on_peer_lost` once, every pending token completes with
//! `PeerGone`, later operations return `PeerGone`, within 2 s.
//!
//! The peer is this test binary re-executed with a role (see tcp_common).
//! It streams to us, and on our "STALL" line stops reading (and
//! progressing) so that our sends to it stay pending when it dies.

mod tcp_common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use oxmpi_btl::btl::{AmTag, Btl, BtlError, SendOutcome, Token};
use tcp_common::*;

const TEST: &str = "tcp_peer_killed_mid_transfer";

fn child() -> ! {
    let mut m = one_module(&lo_config(1));
    print_card(&m.business_card());
    let parent = unhex(&read_stdin_line("CARD "));
    let ep = add(&mut m, 0, &parent);
    let mut rec = Rec::default();
    // Stream to the parent until it says STALL (read by a thread).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        read_stdin_line("STALL");
        let _ = tx.send(());
    });
    let chunk = vec![7u8; 60_000];
    let mut i = 0u64;
    loop {
        if rx.try_recv().is_ok() {
            break;
        }
        if let Ok(mut d) = m.alloc(ep, chunk.len()) {
            d.buf.copy_from_slice(&chunk);
            if let Err((d, _)) = m.send(d, AmTag(1), Token(i)) {
                m.free(d);
            }
            i += 1;
        }
        m.progress(&mut rec);
        rec.recvs.clear();
        rec.completions.clear();
    }
    println!("STALLED");
    // Neither read nor write any more: wait to be killed.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn tcp_peer_killed_mid_transfer() {
    if std::env::var(ROLE_VAR).is_ok() {
        child();
    }
    let mut m = one_module(&lo_config(0));
    let mut p = Proc::reexec(TEST, "child");
    let card = unhex(&p.expect("CARD ", Duration::from_secs(20)));
    p.say(&format!("CARD {}", hex(&m.business_card())));
    let ep = add(&mut m, 1, &card);
    let mut rec = Rec::default();

    // The child streams to us: take some of it.
    let start = Instant::now();
    while rec.recvs.len() < 200 {
        m.progress(&mut rec);
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no stream from the child"
        );
    }
    // The child stops reading; we send until our queue is full, so tokens
    // are pending when it dies.
    p.say("STALL");
    p.expect("STALLED", Duration::from_secs(10));
    let mut pending = HashSet::new();
    // A put first (its target is stalled): it waits for an
    // acknowledgement that never comes. The key has the tcp form (magic,
    // id, nonce, base, length); the target would refuse its nonce, but never
    // reads it.
    let put_src = vec![5u8; 1 << 20];
    let mut key = b"OXTK".to_vec();
    key.extend_from_slice(&0u32.to_le_bytes());
    key.extend_from_slice(&42u64.to_le_bytes());
    key.extend_from_slice(&0u64.to_le_bytes());
    key.extend_from_slice(&(put_src.len() as u64).to_le_bytes());
    let key = oxmpi_btl::btl::RemoteKey::new(&key).unwrap();
    // SAFETY: put_src lives to the end of the test and is not written.
    let src = unsafe { oxmpi_btl::mem::MemRegion::from_slice(&put_src) };
    let put_token = Token(u64::MAX);
    loop {
        match m.put(ep, src, &key, 0, put_token) {
            Ok(()) => break,
            Err(BtlError::NoResource) => {
                m.progress(&mut rec);
            }
            Err(e) => panic!("put before the kill: {e}"),
        }
    }
    pending.insert(put_token);
    let mut t = 0u64;
    let mut refused = 0;
    while refused < 20 {
        let mut d = m.alloc(ep, 65536).expect("alloc");
        d.buf.fill(3);
        match m.send(d, AmTag(2), Token(t)) {
            Ok(SendOutcome::Pending) => {
                pending.insert(Token(t));
                refused = 0;
            }
            Ok(SendOutcome::Done) => refused = 0,
            Err((d, BtlError::NoResource)) => {
                m.free(d);
                refused += 1;
                m.progress(&mut rec);
            }
            Err((_, e)) => panic!("send before the kill: {e}"),
        }
        t += 1;
    }
    assert!(!pending.is_empty(), "no send pending at the kill");
    // Some completed already (written to the socket); the rest are pending.
    for (tok, r) in rec.completions.drain(..) {
        assert!(r.is_ok());
        assert!(pending.remove(&tok), "unknown or repeated token {tok:?}");
    }
    assert!(!pending.is_empty(), "no send pending at the kill");

    p.child.kill().expect("SIGKILL the child");
    let killed = Instant::now();
    while rec.lost.is_empty() {
        m.progress(&mut rec);
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "peer loss not seen within 2 s"
        );
    }
    // Everything completes in the same progress call as the loss report.
    let took = killed.elapsed();
    for _ in 0..100 {
        m.progress(&mut rec);
    }
    assert_eq!(rec.lost.len(), 1, "on_peer_lost exactly once");
    assert_eq!(rec.lost[0].0, ep);
    assert!(matches!(rec.lost[0].1, BtlError::PeerGone(..)));
    for (tok, r) in rec.completions.drain(..) {
        assert!(pending.remove(&tok), "unknown or repeated token {tok:?}");
        assert!(
            matches!(r, Ok(()) | Err(BtlError::PeerGone(..))),
            "token {tok:?}: {r:?}"
        );
    }
    assert!(
        pending.is_empty(),
        "{} tokens never completed",
        pending.len()
    );
    // Later operations fail at once.
    assert!(matches!(
        m.sendi(ep, AmTag(0), &[b"x"]),
        Err(BtlError::PeerGone(..))
    ));
    assert!(matches!(m.alloc(ep, 8), Err(BtlError::PeerGone(..))));
    assert!(!m.has_work(), "nothing left to drive");
    assert_eq!(m.open_connections(), 0);
    eprintln!("peer loss seen {took:?} after SIGKILL");
    let _ = p.wait(Duration::from_secs(5));
}
