//! Several hosts, for real: three network namespaces joined by veth pairs,
//! one process per namespace, `btl_tcp_links = 2`.
//!
//! ```text
//!   ns A (rank 0)                    ns B (rank 1)
//!   x1 10.201.1.1/24  <-- veth -->   y1 10.201.1.2/24
//!   x2 10.201.2.1/24  <-- veth -->   y2 10.201.2.2/24
//!   x3 10.201.3.1/24  <-- veth -->   z1 10.201.3.2/24   ns C (rank 2)
//! ```
//!
//! Each process opens its modules with the default interface policy
//! (every interface that is up, loopback left out), prints its card; the
//! test hands every process all cards; ranks 1 and 2 exchange messages with
//! rank 0, striped round-robin over every module that reaches the peer.
//! Checked: every message arrives exactly once and in order per module;
//! rank 0's modules on x1 and x2 (both links each) carry rank 1's traffic
//! and those on x3 rank 2's. Ranks 1 and 2 are not told about each other:
//! their cards share no subnet, so the pairing would try a routed
//! connection, and nothing routes between B and C.
//!
//! Needs root and `ip` (iproute2); otherwise the test prints why and passes
//! without running. The namespaces are deleted even when the test fails.

mod tcp_common;

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use oxmpi_btl::btl::{AmTag, Btl, BtlError, Endpoint, PeerInfo};
use oxmpi_btl::tcp::{TcpBtl, TcpConfig};
use tcp_common::*;

const TEST: &str = "tcp_netns_three_hosts";

/// A module as a child reports it: interface, link, fragments sent and
/// received, the ranks it received from.
type ModLine = (String, u32, u64, usize, String);
const MSGS: u32 = 600;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The namespaces; deleted on drop (which removes their veths).
struct Netns {
    names: Vec<String>,
}

impl Netns {
    fn create() -> Result<Netns, String> {
        let tag = std::process::id() % 100_000;
        let mut ns = Netns { names: Vec::new() };
        for s in ["a", "b", "c"] {
            let name = format!("oxtcp{tag}{s}");
            ip(&["netns", "add", &name])?;
            ns.names.push(name);
        }
        let (a, b, c) = (&ns.names[0], &ns.names[1], &ns.names[2]);
        let links = [
            ("x1", a, "10.201.1.1/24", "y1", b, "10.201.1.2/24"),
            ("x2", a, "10.201.2.1/24", "y2", b, "10.201.2.2/24"),
            ("x3", a, "10.201.3.1/24", "z1", c, "10.201.3.2/24"),
        ];
        for (l, lns, laddr, r, rns, raddr) in links {
            ip(&[
                "link", "add", l, "netns", lns, "type", "veth", "peer", "name", r, "netns", rns,
            ])?;
            ip(&["-n", lns, "addr", "add", laddr, "dev", l])?;
            ip(&["-n", rns, "addr", "add", raddr, "dev", r])?;
            ip(&["-n", lns, "link", "set", l, "up"])?;
            ip(&["-n", rns, "link", "set", r, "up"])?;
        }
        for n in &ns.names {
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            if let Err(e) = ip(&["netns", "del", n]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

fn msg(seq: u32, from: u32) -> Vec<u8> {
    let mut v = vec![from as u8; 8 + (seq as usize * 131) % 5000];
    v[..4].copy_from_slice(&seq.to_le_bytes());
    v
}

/// One process of the job.
fn child(rank: u32) -> ! {
    let mut cfg = TcpConfig::new(rank, SECRET);
    cfg.links = 2;
    let mut mods = TcpBtl::open_all(&cfg).expect("open tcp");
    print_card(&mods[0].business_card());
    let cards: Vec<Vec<u8>> = read_stdin_line("CARDS ")
        .split_whitespace()
        .map(unhex)
        .collect();
    let peers: Vec<u32> = if rank == 0 { vec![1, 2] } else { vec![0] };
    // For each peer, the (module, endpoint) pairs that reach it.
    let mut routes: HashMap<u32, Vec<(usize, Endpoint)>> = HashMap::new();
    for (i, m) in mods.iter_mut().enumerate() {
        for &r in &peers {
            let info = PeerInfo {
                rank: r,
                local: false,
                card: Some(&cards[r as usize]),
            };
            if let Some(ep) = m.add_peer(&info).expect("add_peer") {
                routes.entry(r).or_default().push((i, ep));
            }
        }
    }
    // Which modules reach which peer follows the pairing: on rank 0, x1 and
    // x2 reach rank 1 and x3 rank 2, per link.
    for (r, route) in &routes {
        for &(i, _) in route {
            println!(
                "ROUTE {} {} -> {r}",
                mods[i].interface().name,
                mods[i].link()
            );
        }
    }
    for r in &peers {
        assert!(routes.contains_key(r), "rank {rank}: rank {r} unreachable");
    }
    let mut recs: Vec<Rec> = mods.iter().map(|_| Rec::default()).collect();
    // Send, striped round-robin over the routes to each peer.
    for &r in &peers {
        let route = &routes[&r];
        for seq in 0..MSGS {
            let (i, ep) = route[seq as usize % route.len()];
            let data = msg(seq, rank);
            loop {
                match mods[i].sendi(ep, AmTag(rank as u8), &[&data]) {
                    Ok(()) => break,
                    Err(BtlError::NoResource) => {
                        for (m, rec) in mods.iter_mut().zip(recs.iter_mut()) {
                            m.progress(rec);
                        }
                    }
                    Err(e) => panic!("rank {rank}: sendi to {r}: {e}"),
                }
            }
        }
    }
    let expected = MSGS as usize * peers.len();
    let start = Instant::now();
    loop {
        for (m, rec) in mods.iter_mut().zip(recs.iter_mut()) {
            m.progress(rec);
            assert!(
                rec.lost.is_empty(),
                "rank {rank}: peer lost: {:?}",
                rec.lost
            );
        }
        let got: usize = recs.iter().map(|r| r.recvs.len()).sum();
        if got >= expected && mods.iter().all(|m| !m.has_work()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "rank {rank}: {got}/{expected}"
        );
    }
    // Every message once, in order per module.
    let mut seen: HashMap<u32, Vec<bool>> = HashMap::new();
    for rec in &recs {
        let mut last: HashMap<u32, u32> = HashMap::new();
        for (_, tag, data) in &rec.recvs {
            let from = u32::from(tag.0);
            let seq = u32::from_le_bytes(data[..4].try_into().unwrap());
            assert_eq!(*data, msg(seq, from), "rank {rank}: damaged message");
            if let Some(&l) = last.get(&from) {
                assert!(seq > l, "rank {rank}: out of order on a module");
            }
            last.insert(from, seq);
            let s = seen
                .entry(from)
                .or_insert_with(|| vec![false; MSGS as usize]);
            assert!(!s[seq as usize], "rank {rank}: duplicate {seq} from {from}");
            s[seq as usize] = true;
        }
    }
    for r in &peers {
        assert!(
            seen[r].iter().all(|&b| b),
            "rank {rank}: messages from {r} missing"
        );
    }
    for (m, rec) in mods.iter().zip(&recs) {
        let from: Vec<u32> = {
            let mut f: Vec<u32> = rec.recvs.iter().map(|(_, t, _)| u32::from(t.0)).collect();
            f.dedup();
            f
        };
        println!(
            "MOD {} {} {} {} {:?}",
            m.interface().name,
            m.link(),
            m.stats().frags_sent,
            rec.recvs.len(),
            from
        );
    }
    println!("DONE");
    read_stdin_line("EXIT");
    std::process::exit(0);
}

#[test]
fn tcp_netns_three_hosts() {
    if let Ok(role) = std::env::var(ROLE_VAR) {
        child(role.parse().expect("rank"));
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("tcp_netns_three_hosts skipped: not running as root");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("tcp_netns_three_hosts skipped: `ip` (iproute2) not found");
        return;
    }
    let net = match Netns::create() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("tcp_netns_three_hosts skipped: cannot create network namespaces: {e}");
            return;
        }
    };
    let mut procs: Vec<Proc> = (0..3)
        .map(|r| Proc::spawn(reexec_command(Some(&net.names[r]), TEST, &r.to_string())))
        .collect();
    let cards: Vec<String> = procs
        .iter_mut()
        .map(|p| p.expect("CARD ", Duration::from_secs(30)))
        .collect();
    let line = format!("CARDS {}", cards.join(" "));
    for p in &mut procs {
        p.say(&line);
    }
    // Per rank: (interface, link, sent, received, from) per module.
    let mut mods: Vec<Vec<ModLine>> = Vec::new();
    for (r, p) in procs.iter_mut().enumerate() {
        let mut v = Vec::new();
        loop {
            let l = p.expect("", Duration::from_secs(90));
            if l.ends_with("DONE") {
                break;
            }
            if let Some(at) = l.find("MOD ") {
                let f: Vec<&str> = l[at + 4..].splitn(5, ' ').collect();
                v.push((
                    f[0].to_owned(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    f[4].to_owned(),
                ));
            }
        }
        eprintln!("rank {r}: {v:?}");
        mods.push(v);
    }
    for p in &mut procs {
        p.say("EXIT");
    }
    for (r, p) in procs.iter_mut().enumerate() {
        let s = p.wait(Duration::from_secs(20));
        assert!(s.success(), "rank {r}: {s}");
    }
    // Rank 0: six modules (3 interfaces x 2 links), each used.
    assert_eq!(mods[0].len(), 6, "rank 0 modules: {:?}", mods[0]);
    for (name, link, sent, recvd, from) in &mods[0] {
        let want = if name == "x3" { "[2]" } else { "[1]" };
        assert!(*recvd > 0 && *sent > 0, "rank 0 {name} link {link} idle");
        assert_eq!(from, want, "rank 0 {name} link {link}");
    }
    assert_eq!(mods[1].len(), 4);
    assert!(
        mods[1].iter().all(|m| m.2 > 0 && m.3 > 0),
        "rank 1: {:?}",
        mods[1]
    );
    assert_eq!(mods[2].len(), 2);
    assert!(
        mods[2].iter().all(|m| m.2 > 0 && m.3 > 0),
        "rank 2: {:?}",
        mods[2]
    );
    drop(net);
}
