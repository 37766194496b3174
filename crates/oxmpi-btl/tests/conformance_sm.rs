//! The BTL conformance suite against the sm BTL: two modules in this
//! process (each attaches the other's memfd through /proc/self/fd, and CMA
//! reads and writes this very process).
#![cfg(not(loom))]

use oxmpi_btl::btl::{AmTag, Btl, Caps};
use oxmpi_btl::conformance::{self, sm_pair, sm_pair_with, Pair};

/// Whether side a of a fresh pair uses CMA towards b once bound.
fn a_uses_cma(single_copy_a: bool, single_copy_b: bool) -> Option<bool> {
    let Pair::Two(mut a, _b) = sm_pair_with(single_copy_a, single_copy_b) else {
        unreachable!()
    };
    assert_eq!(a.btl.single_copy_to(a.ep), None, "bound before first use");
    a.btl.sendi(a.ep, AmTag(0), &[b"bind"]).unwrap();
    a.btl.single_copy_to(a.ep)
}

#[test]
fn sm_conforms_with_single_copy() {
    let Pair::Two(a, _) = sm_pair() else {
        unreachable!()
    };
    if a.btl.caps().contains(Caps::GET) {
        assert_eq!(a_uses_cma(true, true), Some(true));
    }
    drop(a);
    conformance::run_all(sm_pair);
}

/// Side a advertises put/get, side b refuses CMA: every put and get of the
/// suite goes through the copy-in/copy-out emulation over the rings.
#[test]
fn sm_conforms_with_copy_in_copy_out_rdma() {
    if let Pair::Two(a, _) = sm_pair_with(true, false) {
        if !a.btl.caps().contains(Caps::GET) {
            eprintln!("CMA impossible on this node: put/get not advertised");
        }
    }
    assert_eq!(a_uses_cma(true, false), Some(false));
    conformance::run_all(|| sm_pair_with(true, false));
}

/// Single copy disabled on both sides: no put/get advertised, sends only.
#[test]
fn sm_conforms_without_single_copy() {
    if let Pair::Two(a, _) = sm_pair_with(false, false) {
        let caps = a.btl.caps();
        assert!(!caps.contains(Caps::PUT) && !caps.contains(Caps::GET));
        assert!(caps.contains(Caps::SEND | Caps::SENDI | Caps::ORDERED));
    }
    conformance::run_all(|| sm_pair_with(false, false));
}

/// The memfd name of a module's segment, from its card (the segment card
/// starts at byte 32; its cookie at byte 32 of that).
fn segment_name(card: &[u8]) -> String {
    let pid = u32::from_le_bytes(card[40..44].try_into().unwrap());
    let cookie = u64::from_le_bytes(card[64..72].try_into().unwrap());
    format!("oxmpi-seg-{pid}-{cookie:016x}")
}

/// Descriptors and mappings of this process that name `what`.
fn references(what: &str) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let fds = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.to_string_lossy().contains(what))
        .count();
    maps.lines().filter(|l| l.contains(what)).count() + fds
}

#[test]
fn dropped_modules_leave_no_descriptor_or_mapping() {
    let Pair::Two(mut a, mut b) = sm_pair() else {
        unreachable!()
    };
    // Bind both ways (each maps the other's segment).
    a.btl.sendi(a.ep, AmTag(0), &[b"x"]).unwrap();
    b.btl.sendi(b.ep, AmTag(0), &[b"y"]).unwrap();
    let (na, nb) = (
        segment_name(&a.btl.business_card()),
        segment_name(&b.btl.business_card()),
    );
    assert_eq!(references(&na), 3, "a's fd, a's mapping, b's mapping of a");
    assert_eq!(references(&nb), 3);
    drop(a);
    assert_eq!(references(&na), 1, "only b's mapping of a is left");
    drop(b);
    assert_eq!(references(&na), 0);
    assert_eq!(references(&nb), 0);
}

#[test]
fn sm_delivers_from_one_peer_alone() {
    conformance::progress_from_delivers(sm_pair());
}

#[test]
fn sm_takes_small_records_in_place() {
    conformance::recv_small_takes(sm_pair());
}

#[test]
fn sm_packs_into_its_ring() {
    conformance::send_packed_sends(sm_pair());
}
