//! The simulated BTL: the conformance suite under several fault settings,
//! peer loss, reordering, and replay from a seed.

use oxmpi_btl::btl::{AmTag, Btl, BtlError, BtlSink, Caps, Endpoint, PeerInfo, Token};
use oxmpi_btl::conformance::{self, sim_pair, Recorder};
use oxmpi_btl::sim::{SimConfig, SimNet};

#[test]
fn conforms_with_defaults() {
    conformance::run_all(|| sim_pair(SimConfig::default()));
}

#[test]
fn conforms_with_jitter_and_injected_no_resource() {
    for seed in 1..=3 {
        let cfg = SimConfig {
            seed,
            jitter_ns: 5000,
            no_resource_ppm: 200_000,
            ..SimConfig::default()
        };
        conformance::run_all(|| sim_pair(cfg));
    }
}

#[test]
fn conforms_unordered() {
    let cfg = SimConfig {
        ordered: false,
        jitter_ns: 10_000,
        ..SimConfig::default()
    };
    let pair = sim_pair(cfg);
    if let conformance::Pair::Clocked(a, _, _) = &pair {
        assert!(!a.btl.caps().contains(Caps::ORDERED));
    }
    conformance::run_all(|| sim_pair(cfg));
}

fn world(cfg: SimConfig, n: u32) -> (SimNet, Vec<oxmpi_btl::sim::SimBtl>) {
    let net = SimNet::new(cfg);
    let mut mods: Vec<_> = (0..n).map(|r| net.module(r)).collect();
    let cards: Vec<_> = mods.iter().map(|m| m.business_card()).collect();
    for m in &mut mods {
        for (r, c) in cards.iter().enumerate() {
            m.add_peer(&PeerInfo {
                rank: r as u32,
                local: false,
                card: Some(c),
            })
            .unwrap();
        }
    }
    (net, mods)
}

/// Delivery order of 200 fragments from 3 senders with jitter and reordering.
fn trace(seed: u64) -> Vec<(u32, u32)> {
    let cfg = SimConfig {
        seed,
        ordered: false,
        jitter_ns: 20_000,
        ..SimConfig::default()
    };
    let (net, mut mods) = world(cfg, 4);
    for i in 0..200u32 {
        let from = (i % 3) as usize;
        mods[from]
            .sendi(Endpoint(3), AmTag(1), &[&i.to_le_bytes()])
            .unwrap();
    }
    let mut rec = Recorder::default();
    while net.advance_to_next() {
        mods[3].progress(&mut rec);
    }
    mods[3].progress(&mut rec);
    rec.recvs
        .iter()
        .map(|(ep, _, d)| (ep.0, u32::from_le_bytes(d[..4].try_into().unwrap())))
        .collect()
}

#[test]
fn a_seed_replays_exactly_and_unordered_mode_reorders() {
    let a = trace(42);
    assert_eq!(a.len(), 200);
    assert_eq!(a, trace(42), "same seed, same run");
    assert_ne!(a, trace(43), "another seed, another interleaving");
    // Fragments of one endpoint overtake each other somewhere.
    let from0: Vec<u32> = a
        .iter()
        .filter(|(ep, _)| *ep == 0)
        .map(|(_, v)| *v)
        .collect();
    assert!(
        from0.windows(2).any(|w| w[0] > w[1]),
        "unordered mode never reordered"
    );
}

struct Lost(Vec<Endpoint>, Vec<(Token, Result<(), BtlError>)>);
impl BtlSink for Lost {
    fn on_recv(&mut self, _: Endpoint, _: AmTag, _: &[u8]) {}
    fn on_complete(&mut self, t: Token, r: Result<(), BtlError>) {
        self.1.push((t, r));
    }
    fn on_peer_lost(&mut self, ep: Endpoint, _: &BtlError) {
        self.0.push(ep);
    }
}

#[test]
fn a_lost_peer_is_reported_and_refuses_operations() {
    let (net, mut mods) = world(SimConfig::default(), 3);
    mods[0].sendi(Endpoint(2), AmTag(1), &[b"before"]).unwrap();
    net.kill(2);
    let mut sink = Lost(Vec::new(), Vec::new());
    mods[0].progress(&mut sink);
    assert_eq!(sink.0, vec![Endpoint(2)], "peer loss reported once");
    mods[0].progress(&mut sink);
    assert_eq!(sink.0.len(), 1, "and only once");
    let e = mods[0]
        .sendi(Endpoint(2), AmTag(1), &[b"after"])
        .unwrap_err();
    assert!(matches!(e, BtlError::PeerGone(Endpoint(2), _)), "{e:?}");
    // The others still talk.
    mods[0].sendi(Endpoint(1), AmTag(1), &[b"hi"]).unwrap();
    let mut rec = Recorder::default();
    while net.advance_to_next() {}
    mods[1].progress(&mut rec);
    assert_eq!(rec.recvs.len(), 1);
}

#[test]
fn delivers_from_one_peer_alone() {
    conformance::progress_from_delivers(sim_pair(SimConfig::default()));
}

#[test]
fn conforms_with_ordered_puts() {
    let cfg = SimConfig {
        put_ordered: true,
        ..SimConfig::default()
    };
    let pair = sim_pair(cfg);
    if let conformance::Pair::Clocked(a, _, _) = &pair {
        assert!(a.btl.caps().contains(Caps::PUT_ORDERED));
    }
    conformance::run_all(|| sim_pair(cfg));
}

#[test]
fn takes_small_fragments_in_place() {
    conformance::recv_small_takes(sim_pair(SimConfig::default()));
}
