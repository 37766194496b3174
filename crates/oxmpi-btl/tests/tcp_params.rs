//! Parameters of the TCP BTL: interface lists (names and CIDR), their
//! selection policy, include+exclude as an error, the registry round trip,
//! and several links per interface pairing up across two processes.

mod tcp_common;

use std::net::Ipv4Addr;
use std::time::Duration;

use oxmpi_btl::btl::{AmTag, Btl, BtlError, PeerInfo};
use oxmpi_btl::tcp::{IfFilter, IfSpec, Interface, TcpBtl, TcpConfig, DEFAULT_LIMITS};
use oxmpi_runtime::mca::{Registry, Sources};
use tcp_common::*;

fn iface(name: &str, a: [u8; 4], p: u8) -> Interface {
    Interface {
        name: name.into(),
        addr: Ipv4Addr::from(a),
        prefix_len: p,
        loopback: a[0] == 127,
    }
}

fn names(v: &[Interface]) -> Vec<&str> {
    v.iter().map(|i| i.name.as_str()).collect()
}

#[test]
fn tcp_if_spec_parsing() {
    assert_eq!(IfSpec::parse("eth0"), Ok(IfSpec::Name("eth0".into())));
    assert_eq!(IfSpec::parse(" ib0 "), Ok(IfSpec::Name("ib0".into())));
    assert_eq!(
        IfSpec::parse("10.1.0.0/16"),
        Ok(IfSpec::Cidr(Ipv4Addr::new(10, 1, 0, 0), 16))
    );
    assert_eq!(
        IfSpec::parse("192.168.3.4"),
        Ok(IfSpec::Cidr(Ipv4Addr::new(192, 168, 3, 4), 32))
    );
    assert_eq!(
        IfSpec::parse("0.0.0.0/0"),
        Ok(IfSpec::Cidr(Ipv4Addr::UNSPECIFIED, 0))
    );
    for bad in [
        "",
        "10.0.0.0/33",
        "10.0.0/8",
        "10.0.0.0/x",
        "300.1.1.1",
        "eth 0",
        "a/b",
    ] {
        assert!(IfSpec::parse(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn tcp_if_selection_policy() {
    let all = [
        iface("lo", [127, 0, 0, 1], 8),
        iface("eth0", [10, 1, 2, 3], 16),
        iface("eth1", [192, 168, 7, 1], 24),
        iface("eth1", [192, 168, 8, 1], 24), // a second address
    ];
    let sel = |inc: &[&str], exc: &[&str]| IfFilter::new(inc, exc).unwrap().select(&all);
    // Default: every real interface, once; no loopback.
    assert_eq!(names(&sel(&[], &[])), ["eth0", "eth1"]);
    assert_eq!(sel(&[], &[])[1].addr, Ipv4Addr::new(192, 168, 7, 1));
    // Include by name, by CIDR (which picks the address), loopback included.
    assert_eq!(names(&sel(&["eth1"], &[])), ["eth1"]);
    let by_net = sel(&["192.168.8.0/24"], &[]);
    assert_eq!(names(&by_net), ["eth1"]);
    assert_eq!(by_net[0].addr, Ipv4Addr::new(192, 168, 8, 1));
    assert_eq!(names(&sel(&["lo"], &[])), ["lo"]);
    assert_eq!(
        names(&sel(&["127.0.0.0/8", "10.0.0.0/8"], &[])),
        ["lo", "eth0"]
    );
    assert!(sel(&["eth9"], &[]).is_empty());
    // Exclude by name or CIDR.
    assert_eq!(names(&sel(&[], &["eth0"])), ["eth1"]);
    assert_eq!(names(&sel(&[], &["192.168.0.0/16"])), ["eth0"]);
    // Excluding every real interface leaves loopback.
    assert_eq!(names(&sel(&[], &["eth0", "eth1"])), ["lo"]);
    assert!(sel(&[], &["eth0", "eth1", "lo"]).is_empty());
    // A node with loopback only uses it.
    assert_eq!(names(&IfFilter::default().select(&all[..1])), ["lo"]);
}

#[test]
fn tcp_include_and_exclude_is_an_error() {
    let e = IfFilter::new(&["eth0"], &["eth1"]).unwrap_err().to_string();
    assert!(
        e.contains("btl_tcp_if_include") && e.contains("btl_tcp_if_exclude"),
        "{e}"
    );
    let e = IfFilter::new(&["10.0.0.0/40"], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("btl_tcp_if_include"), "{e}");
    let mut cfg = TcpConfig::new(0, SECRET);
    cfg.if_include = vec!["lo".into()];
    cfg.if_exclude = vec!["eth0".into()];
    assert!(matches!(TcpBtl::open_all(&cfg), Err(BtlError::Invalid(_))));
}

fn registry(env: &[(&str, &str)]) -> Registry {
    let mut reg = Registry::new();
    TcpConfig::register_params(&mut reg).unwrap();
    let mut src = Sources::new();
    for (k, v) in env {
        src = src.with_env(*k, *v);
    }
    reg.apply(&src).unwrap();
    reg
}

#[test]
fn tcp_registry_round_trip() {
    let cfg = TcpConfig::from_registry(&registry(&[]), 3, SECRET).unwrap();
    assert_eq!(cfg, TcpConfig::new(3, SECRET));
    assert_eq!(cfg.limits, DEFAULT_LIMITS);
    assert_eq!(
        (
            DEFAULT_LIMITS.eager_limit,
            DEFAULT_LIMITS.max_send_size,
            DEFAULT_LIMITS.exclusivity,
            DEFAULT_LIMITS.latency,
            DEFAULT_LIMITS.bandwidth
        ),
        ((256 << 10) + 64, 128 << 10, 100, 100, 100)
    );
    let reg = registry(&[
        ("btl_tcp_if_include", "lo,10.0.0.0/8"),
        ("btl_tcp_links", "3"),
        ("btl_tcp_port_min", "40000"),
        ("btl_tcp_sndbuf", "1m"),
        ("btl_tcp_rcvbuf", "2m"),
        ("btl_tcp_bandwidth", "250"),
    ]);
    let cfg = TcpConfig::from_registry(&reg, 1, SECRET).unwrap();
    assert_eq!(cfg.if_include, ["lo", "10.0.0.0/8"]);
    assert_eq!(
        (
            cfg.links,
            cfg.port_min,
            cfg.sndbuf,
            cfg.rcvbuf,
            cfg.limits.bandwidth
        ),
        (3, 40000, 1 << 20, 2 << 20, 250)
    );
    let both = registry(&[("btl_tcp_if_include", "lo"), ("btl_tcp_if_exclude", "eth0")]);
    let e = TcpConfig::from_registry(&both, 0, SECRET)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("btl_tcp_if_include") && e.contains("btl_tcp_if_exclude"),
        "{e}"
    );
    let zero = registry(&[("btl_tcp_links", "0")]);
    let e = TcpConfig::from_registry(&zero, 0, SECRET)
        .unwrap_err()
        .to_string();
    assert!(e.contains("btl_tcp_links"), "{e}");
}

#[test]
fn tcp_include_matching_nothing_is_an_error() {
    let mut cfg = TcpConfig::new(0, SECRET);
    cfg.if_include = vec!["no-such-if0".into()];
    let e = TcpBtl::open_all(&cfg).unwrap_err().to_string();
    assert!(e.contains("no-such-if0"), "{e}");
}

/// Two links on loopback: module i of rank 0 pairs with module i of rank 1
/// and traffic on each goes through its own connection.
#[test]
fn tcp_two_links_pair_up() {
    let mut c0 = lo_config(0);
    let mut c1 = lo_config(1);
    c0.links = 2;
    c1.links = 2;
    let mut a = TcpBtl::open_all(&c0).unwrap();
    let mut b = TcpBtl::open_all(&c1).unwrap();
    assert_eq!((a.len(), b.len()), (2, 2));
    assert_ne!(a[0].listen_addr(), a[1].listen_addr());
    assert_eq!(
        a[0].business_card(),
        a[1].business_card(),
        "one card per process"
    );
    assert_eq!(a[1].link(), 1);
    let (card_a, card_b) = (a[0].business_card(), b[0].business_card());
    let info = |rank, card| PeerInfo {
        rank,
        local: true,
        card: Some(card),
    };
    let ea: Vec<_> = a
        .iter_mut()
        .map(|m| m.add_peer(&info(1, &card_b)).unwrap().unwrap())
        .collect();
    let _eb: Vec<_> = b
        .iter_mut()
        .map(|m| m.add_peer(&info(0, &card_a)).unwrap().unwrap())
        .collect();
    // A module of loopback does not reach a remote rank over loopback.
    let remote = PeerInfo {
        rank: 2,
        local: false,
        card: Some(&card_b[..]),
    };
    let mut fake = card_b.clone();
    fake[8] = 2; // the card's rank field
    let remote = PeerInfo {
        card: Some(&fake),
        ..remote
    };
    assert_eq!(a[0].add_peer(&remote).unwrap(), None);

    for (i, m) in a.iter_mut().enumerate() {
        for k in 0..10u8 {
            m.sendi(ea[i], AmTag(i as u8), &[&[k; 32]]).unwrap();
        }
    }
    let mut recs: Vec<Rec> = (0..4).map(|_| Rec::default()).collect();
    let start = std::time::Instant::now();
    while recs[2].recvs.len() + recs[3].recvs.len() < 20 {
        for (m, r) in a.iter_mut().chain(b.iter_mut()).zip(recs.iter_mut()) {
            m.progress(r);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "links stuck");
    }
    for (i, m) in b.iter().enumerate() {
        assert_eq!(recs[2 + i].recvs.len(), 10, "link {i}");
        assert!(recs[2 + i]
            .recvs
            .iter()
            .all(|(_, t, _)| *t == AmTag(i as u8)));
        assert_eq!(m.stats().accepted, 1, "link {i}: one connection");
    }
}
