//! The BML (seed 001's BTL Management Layer): for each peer, the BTL
//! endpoints that reach it, as eager, send and RDMA lists.
//!
//! Built once, from every BTL's `add_peer` answer: the eager endpoint and
//! the send list are the reaching BTLs of highest exclusivity (sorted by
//! latency), the RDMA list those of them with PUT or GET (by bandwidth).
//! Modules no peer uses are closed. Invariant: every `(btl, endpoint)` in a
//! peer's lists indexes `btls` and leads to that peer only
//! ([`endpoint_owners`] inverts the lists).

use super::*;

/// Each peer's endpoints, asking every BTL in `btls` about every peer of
/// `peers` (index = world rank).
pub(super) fn build<B: ?Sized + Btl>(btls: &mut [Box<B>], peers: &[PeerDesc]) -> Vec<PeerEps> {
    let limits: Vec<Limits> = btls.iter().map(|b| *b.limits()).collect();
    let caps: Vec<Caps> = btls.iter().map(|b| b.caps()).collect();
    let mut bml = Vec::with_capacity(peers.len());
    for (rank, p) in peers.iter().enumerate() {
        let mut reach = Vec::new();
        for (i, b) in btls.iter_mut().enumerate() {
            let info = PeerInfo {
                rank: rank as u32,
                local: p.local,
                card: p.cards.get(i).and_then(|c| c.as_deref()),
            };
            match b.add_peer(&info) {
                Ok(Some(ep)) => reach.push((i, ep)),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(btl = b.name(), rank, "add_peer: {e}");
                }
            }
        }
        bml.push(lists(&reach, &limits, &caps));
    }
    bml
}

/// One peer's lists from the endpoints that reach it (`(btl, endpoint)`).
fn lists(reach: &[(usize, Endpoint)], limits: &[Limits], caps: &[Caps]) -> PeerEps {
    let mut eps = PeerEps::default();
    let Some(best) = reach.iter().map(|&(i, _)| limits[i].exclusivity).max() else {
        return eps;
    };
    let mut top: Vec<(usize, Endpoint)> = reach
        .iter()
        .copied()
        .filter(|&(i, _)| limits[i].exclusivity == best)
        .collect();
    top.sort_by_key(|&(i, _)| limits[i].latency);
    eps.eager = top.first().copied();
    eps.send = top.clone();
    eps.rdma = top
        .iter()
        .copied()
        .filter(|&(i, _)| caps[i].contains(Caps::PUT) || caps[i].contains(Caps::GET))
        .collect();
    eps.rdma
        .sort_by_key(|&(i, _)| std::cmp::Reverse(limits[i].bandwidth));
    eps
}

/// Closes the modules no peer uses, as Open MPI unloads them (an idle
/// module would still be polled: for TCP, a system call), and renumbers
/// the BTL indices in `bml`. The BTLs kept, in their order.
pub(super) fn close_unused<B: ?Sized + Btl>(btls: Vec<Box<B>>, bml: &mut [PeerEps]) -> Vec<Box<B>> {
    let used: Vec<bool> = (0..btls.len())
        .map(|i| {
            bml.iter().any(|e: &PeerEps| {
                e.eager.is_some_and(|(b, _)| b == i)
                    || e.send.iter().chain(&e.rdma).any(|&(b, _)| b == i)
            })
        })
        .collect();
    if used.iter().all(|&u| u) {
        return btls;
    }
    let mut remap = vec![usize::MAX; btls.len()];
    let mut kept = Vec::with_capacity(btls.len());
    for (i, b) in btls.into_iter().enumerate() {
        if used[i] {
            remap[i] = kept.len();
            kept.push(b);
        } else {
            tracing::debug!(btl = b.name(), "closed: no peer uses it");
        }
    }
    let fix = |l: &mut Vec<(usize, Endpoint)>| {
        for (b, _) in l.iter_mut() {
            *b = remap[*b];
        }
    };
    for e in bml.iter_mut() {
        if let Some((b, _)) = &mut e.eager {
            *b = remap[*b];
        }
        fix(&mut e.send);
        fix(&mut e.rdma);
    }
    kept
}

/// Which world rank each BTL's endpoint leads to: `[btl][endpoint]`,
/// `u32::MAX` for none (who sent a fragment, in O(1)).
pub(super) fn endpoint_owners(bml: &[PeerEps], nbtls: usize) -> Vec<Vec<u32>> {
    let mut ep_peer = vec![Vec::new(); nbtls];
    for (peer, e) in bml.iter().enumerate() {
        for &(b, ep) in e.eager.iter().chain(&e.send).chain(&e.rdma) {
            let owners: &mut Vec<u32> = &mut ep_peer[b];
            let i = ep.0 as usize;
            if owners.len() <= i {
                owners.resize(i + 1, u32::MAX);
            }
            owners[i] = peer as u32;
        }
    }
    ep_peer
}
