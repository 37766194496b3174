//! Strangers on the listening port: no secret, a wrong secret, garbage, a
//! HELLO for another rank. Each is closed (after the handshake timeout when
//! it says nothing) and the module keeps serving its real peer.

mod tcp_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use oxmpi_btl::btl::{AmTag, Btl};
use oxmpi_btl::tcp::wire::{Handshake, HsKind, HS_LEN};
use oxmpi_btl::tcp::TcpBtl;
use tcp_common::*;

fn hello(secret: [u8; 16], from: u32, to: u32) -> [u8; HS_LEN] {
    Handshake {
        kind: HsKind::Hello,
        secret,
        from_rank: from,
        to_rank: to,
        from_entry: 0,
        to_entry: 0,
    }
    .encode()
}

/// Progresses both modules until the stranger's socket is closed by the
/// module (EOF or reset); returns how long it took.
fn until_closed(
    s: &mut TcpStream,
    a: &mut TcpBtl,
    ra: &mut Rec,
    b: &mut TcpBtl,
    rb: &mut Rec,
    what: &str,
) -> Duration {
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        a.progress(ra);
        b.progress(rb);
        match s.read(&mut buf) {
            Ok(0) => return start.elapsed(),
            Ok(n) => panic!("{what}: the module answered a stranger with {n} bytes"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return start.elapsed(), // reset: closed too
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: still open"
        );
    }
}

fn exchange(
    a: &mut TcpBtl,
    ab: oxmpi_btl::btl::Endpoint,
    ra: &mut Rec,
    b: &mut TcpBtl,
    rb: &mut Rec,
    k: u8,
) {
    let before = rb.recvs.len();
    a.sendi(ab, AmTag(k), &[&[k; 100]]).expect("sendi");
    drive2(
        a,
        ra,
        b,
        rb,
        Duration::from_secs(5),
        "real peer",
        |_, rb| rb.recvs.len() > before,
    );
    assert_eq!(rb.recvs.last().unwrap().2, vec![k; 100]);
}

#[test]
fn tcp_strangers_are_closed() {
    let mut ca = lo_config(0);
    let mut cb = lo_config(1);
    ca.handshake_timeout = Duration::from_millis(1500);
    cb.handshake_timeout = Duration::from_millis(1500);
    let mut a = one_module(&ca);
    let mut b = one_module(&cb);
    let (card_a, card_b) = (a.business_card(), b.business_card());
    let ab = add(&mut a, 1, &card_b);
    let _ba = add(&mut b, 0, &card_a);
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    let port = b.listen_addr();

    // A stranger that says nothing, connected before the real peer.
    let mut silent = TcpStream::connect(port).unwrap();
    exchange(&mut a, ab, &mut ra, &mut b, &mut rb, 1);

    let mut wrong = TcpStream::connect(port).unwrap();
    wrong.write_all(&hello(*b"not-the-secret!!", 0, 1)).unwrap();
    let t = until_closed(&mut wrong, &mut a, &mut ra, &mut b, &mut rb, "wrong secret");
    // Closed for the secret, not by the handshake timeout.
    assert!(
        t < Duration::from_millis(1000),
        "wrong secret closed only after {t:?}"
    );
    exchange(&mut a, ab, &mut ra, &mut b, &mut rb, 2);

    let mut garbage = TcpStream::connect(port).unwrap();
    garbage.write_all(&[0xA5; HS_LEN]).unwrap();
    until_closed(&mut garbage, &mut a, &mut ra, &mut b, &mut rb, "garbage");

    let mut other_rank = TcpStream::connect(port).unwrap();
    other_rank.write_all(&hello(SECRET, 0, 7)).unwrap();
    until_closed(
        &mut other_rank,
        &mut a,
        &mut ra,
        &mut b,
        &mut rb,
        "HELLO for rank 7",
    );

    // A half greeting, then silence: closed by the timeout.
    let mut half = TcpStream::connect(port).unwrap();
    half.write_all(&hello(SECRET, 0, 1)[..10]).unwrap();
    let t = until_closed(&mut half, &mut a, &mut ra, &mut b, &mut rb, "half HELLO");
    assert!(
        t >= Duration::from_millis(1400),
        "half HELLO closed after only {t:?}"
    );

    let t = until_closed(&mut silent, &mut a, &mut ra, &mut b, &mut rb, "silent");
    assert!(t < Duration::from_secs(2));

    exchange(&mut a, ab, &mut ra, &mut b, &mut rb, 3);
    assert_eq!(b.stats().rejected, 5, "{:?}", b.stats());
    assert_eq!(b.stats().accepted, 1);
    assert_eq!(b.open_connections(), 1, "only the real peer remains");
    assert!(ra.lost.is_empty() && rb.lost.is_empty());
    // Nothing a stranger sent was delivered.
    assert_eq!(rb.recvs.len(), 3);
}

/// Hundreds of idle strangers hold connections to a module's port while
/// its real peers connect (each peer connects on first use): the peers
/// still get in, at once, both ways, and the strangers are closed as newer
/// connections need their places.
#[test]
fn idle_strangers_do_not_keep_real_peers_out() {
    let ca = lo_config(0);
    let cb = lo_config(1);
    let mut a = one_module(&ca);
    let mut b = one_module(&cb);
    let (card_a, card_b) = (a.business_card(), b.business_card());
    let ab = add(&mut a, 1, &card_b);
    let ba = add(&mut b, 0, &card_a);
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    let mut strangers: Vec<TcpStream> = Vec::new();
    for _ in 0..150 {
        strangers.push(TcpStream::connect(b.listen_addr()).unwrap());
        strangers.push(TcpStream::connect(a.listen_addr()).unwrap());
    }
    // Both modules see the strangers before the peers' connections.
    for _ in 0..20 {
        a.progress(&mut ra);
        b.progress(&mut rb);
    }
    let t0 = std::time::Instant::now();
    exchange(&mut a, ab, &mut ra, &mut b, &mut rb, 1);
    exchange(&mut b, ba, &mut rb, &mut a, &mut ra, 2);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "the peers got in after {:?}",
        t0.elapsed()
    );
    // More strangers after the peers connected change nothing.
    for _ in 0..100 {
        strangers.push(TcpStream::connect(b.listen_addr()).unwrap());
    }
    exchange(&mut a, ab, &mut ra, &mut b, &mut rb, 3);
    assert!(ra.lost.is_empty() && rb.lost.is_empty());
    assert!(
        b.open_connections() <= 65 + 1,
        "strangers held {} connections",
        b.open_connections()
    );
    assert!(b.stats().rejected >= 150, "{:?}", b.stats());
}
