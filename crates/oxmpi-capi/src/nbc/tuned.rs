//! The algorithms chosen by message size and rank count (as Open MPI's
//! `coll_tuned` and MPICH's collectives choose), as schedules, so that the
//! blocking, non-blocking and persistent forms share them. Which one runs
//! is [`large`]'s answer from the `coll_tuned_*` parameters
//! ([`oxmpi::CollTuned`]).
//!
//! - Allreduce: recursive doubling (any rank count: the ranks above the
//!   largest power of two first fold into their neighbours; combining
//!   lower-rank data on the left keeps the rank order, so non-commutative
//!   operations use it at every size), or for large vectors and
//!   commutative operations a ring reduce-scatter + ring allgather.
//! - Bcast: binomial tree, or for large ones a binomial scatter of `p`
//!   blocks + ring allgather (van de Geijn).
//! - Reduce: binomial tree (commutative: rooted at the root; otherwise to
//!   rank 0 in rank order, then to the root), or for large vectors and
//!   commutative operations a ring reduce-scatter + gather to the root.
//! - Allgather: Bruck's (`ceil(log2 p)` rounds, then a local rotation), or
//!   the ring.
//! - Alltoall: every block at once, or the pairwise exchange.
//! - Reduce-scatter: recursive doubling of the whole vector then this
//!   rank's block (order-preserving), or for large vectors and commutative
//!   operations the ring reduce-scatter.
//!
//! Blocks of a vector split among the ranks are element-aligned (the first
//! `n % p` blocks have one element more), so derived datatypes split as
//! they are.

use oxmpi::{CollChoice, Error, UserDatatype};

use super::{same, Blk};
use crate::sched::{Loc, Sched};
use crate::state::state;

/// The selection parameters.
pub(super) fn tuned() -> Result<&'static oxmpi::CollTuned, Error> {
    Ok(state()?.universe.coll_tuned())
}

/// Whether collective `c` takes its large-message algorithm (named
/// `big`) for `bytes`: the one forced, or by the switch point.
pub(super) fn large(c: &CollChoice, bytes: usize, big: &str) -> bool {
    match c.algorithm.as_str() {
        "auto" => bytes >= c.small_msg,
        a => a == big,
    }
}

/// `n` elements in `p` blocks: counts and offsets (in elements).
pub(super) fn split(n: usize, p: usize) -> (Vec<usize>, Vec<usize>) {
    let (q, r) = (n / p, n % p);
    let counts: Vec<usize> = (0..p).map(|i| q + usize::from(i < r)).collect();
    let mut offs = Vec::with_capacity(p);
    let mut o = 0;
    for c in &counts {
        offs.push(o);
        o += c;
    }
    (counts, offs)
}

/// `at` moved `i` elements of `dt` on.
fn el(at: Loc, i: usize, dt: &UserDatatype) -> Loc {
    at.at(i as isize * dt.extent())
}

/// Recursive-doubling allreduce of `n` elements of `dt` from `src` into
/// `dst` (the same location in place), in rank order.
pub(super) fn allreduce_rd(
    s: &mut Sched,
    src: Loc,
    dst: Loc,
    n: usize,
    dt: &UserDatatype,
    commutative: bool,
) -> Result<(), Error> {
    let (me, p) = s.rank_size();
    if !same(src, dst) {
        // In the first round, beside the first send (from `src`).
        s.copy(src, n, dt, dst, n, dt);
    }
    if p == 1 {
        return Ok(());
    }
    let mut other = s.tmp(dt, n)?;
    let mut acc = dst;
    let mut from = src;
    let pof2 = 1 << (31 - (p as u32).leading_zeros());
    let rem = p - pof2;
    // The first 2 * rem ranks fold pairwise: the odd one goes on.
    let newrank = if me < 2 * rem {
        if me % 2 == 0 {
            s.send(me + 1, from, n, dt);
            s.next();
            -1
        } else {
            s.recv(me - 1, other, n, dt);
            s.reduce(other, acc, n, dt)?;
            s.next();
            from = acc;
            me / 2
        }
    } else {
        me - rem
    };
    if newrank >= 0 {
        let mut mask = 1;
        while mask < pof2 {
            let nd = newrank ^ mask;
            let peer = if nd < rem { nd * 2 + 1 } else { nd + rem };
            s.send(peer, from, n, dt);
            s.recv(peer, other, n, dt);
            if peer < me || commutative {
                // acc = (lower ranks) op acc.
                s.reduce(other, acc, n, dt)?;
            } else {
                // other = acc op (higher ranks): the result moves there.
                s.reduce(acc, other, n, dt)?;
                std::mem::swap(&mut acc, &mut other);
            }
            s.next();
            from = acc;
            mask <<= 1;
        }
    }
    if me < 2 * rem {
        if me % 2 == 1 {
            s.send(me - 1, acc, n, dt);
        } else {
            s.recv(me + 1, dst, n, dt);
            acc = dst;
        }
        s.next();
    }
    if !same(acc, dst) {
        s.copy(acc, n, dt, dst, n, dt);
    }
    Ok(())
}

/// Ring reduce-scatter over `work`, which holds this rank's whole vector in
/// blocks `counts`/`offs`: afterwards its block `me` holds the reduction of
/// every rank's block `me`. Commutative operations only.
fn ring_rs(
    s: &mut Sched,
    work: Loc,
    counts: &[usize],
    offs: &[usize],
    dt: &UserDatatype,
) -> Result<(), Error> {
    let (me, p) = s.rank_size();
    let pu = p as usize;
    if pu == 1 {
        return Ok(());
    }
    let most = counts.iter().copied().max().unwrap_or(0);
    let tmp = s.tmp(dt, most)?;
    let (right, left) = ((me + 1) % p, (me - 1 + p) % p);
    let m = me as usize;
    for k in 0..pu - 1 {
        let sb = (m + 2 * pu - k - 1) % pu;
        let rb = (m + 2 * pu - k - 2) % pu;
        s.send(right, el(work, offs[sb], dt), counts[sb], dt);
        s.recv(left, tmp, counts[rb], dt);
        s.reduce(tmp, el(work, offs[rb], dt), counts[rb], dt)?;
        s.next();
    }
    Ok(())
}

/// Ring allgather over `work` in blocks `counts`/`offs`, this rank's
/// block being block `me` of ranks in the order `rank(0..p)`.
fn ring_ag(
    s: &mut Sched,
    work: Loc,
    counts: &[usize],
    offs: &[usize],
    dt: &UserDatatype,
    rel: i32,
    rank: impl Fn(i32) -> i32,
) {
    let p = counts.len() as i32;
    let (right, left) = (rank((rel + 1) % p), rank((rel - 1 + p) % p));
    for k in 0..p - 1 {
        let sb = ((rel - k + p) % p) as usize;
        let rb = ((rel - k - 1 + p) % p) as usize;
        s.send(right, el(work, offs[sb], dt), counts[sb], dt);
        s.recv(left, el(work, offs[rb], dt), counts[rb], dt);
        s.next();
    }
}

/// Ring allreduce (reduce-scatter + allgather) of `n` elements from `src`
/// into `dst`. Commutative operations only.
pub(super) fn allreduce_ring(
    s: &mut Sched,
    src: Loc,
    dst: Loc,
    n: usize,
    dt: &UserDatatype,
) -> Result<(), Error> {
    let (me, p) = s.rank_size();
    if !same(src, dst) {
        s.copy(src, n, dt, dst, n, dt);
        s.next();
    }
    let (counts, offs) = split(n, p as usize);
    ring_rs(s, dst, &counts, &offs, dt)?;
    ring_ag(s, dst, &counts, &offs, dt, me, |r| r);
    Ok(())
}

/// Broadcast of `b` from `root`: a binomial scatter of `p` blocks, then a
/// ring allgather.
pub(super) fn bcast_scatter_allgather(s: &mut Sched, b: &Blk, root: i32) {
    let (me, p) = s.rank_size();
    let (counts, offs) = split(b.n, p as usize);
    let rel = (me - root + p) % p;
    let real = |r: i32| (r + root) % p;
    let range = |lo: i32, hi: i32| {
        let (lo, hi) = (lo as usize, hi.min(p) as usize);
        let n: usize = counts[lo..hi].iter().sum();
        (el(b.at, offs[lo], &b.dt), n)
    };
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            let (at, n) = range(rel, rel + mask);
            s.recv(real(rel - mask), at, n, &b.dt);
            s.next();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < p {
            let (at, n) = range(rel + mask, rel + 2 * mask);
            s.send(real(rel + mask), at, n, &b.dt);
        }
        mask >>= 1;
    }
    s.next();
    ring_ag(s, b.at, &counts, &offs, &b.dt, rel, real);
}

/// Binomial reduction of `n` elements of `dt` at `src` to `root` (ranks
/// relative to it: commutative operations only, unless `root` is 0, where
/// lower ranks combine on the left); where the result is on the root.
pub(super) fn reduce_tree(
    s: &mut Sched,
    src: Loc,
    n: usize,
    dt: &UserDatatype,
    root: i32,
) -> Result<Loc, Error> {
    let (me, p) = s.rank_size();
    let rel = (me - root + p) % p;
    let real = |r: i32| (r + root) % p;
    let mut acc = src;
    let mut bufs: Vec<Loc> = Vec::new();
    let mut cur: Option<usize> = None;
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            s.send(real(rel - mask), acc, n, dt);
            s.next();
            break;
        }
        if rel + mask < p {
            let next = match cur {
                Some(i) => 1 - i,
                None => 0,
            };
            if bufs.len() <= next {
                let t = s.tmp(dt, n)?;
                bufs.push(t);
            }
            let t = bufs[next];
            s.recv(real(rel + mask), t, n, dt);
            // t = acc (ranks below) op t (ranks above).
            s.reduce(acc, t, n, dt)?;
            s.next();
            acc = t;
            cur = Some(next);
        }
        mask <<= 1;
    }
    Ok(acc)
}

/// Reduce of `n` elements from `src` to `dst` on `root` as a ring
/// reduce-scatter and a gather of the blocks. Commutative operations only.
pub(super) fn reduce_rs_gather(
    s: &mut Sched,
    src: Loc,
    dst: Loc,
    n: usize,
    dt: &UserDatatype,
    root: i32,
) -> Result<(), Error> {
    let (me, p) = s.rank_size();
    let work = if me == root { dst } else { s.tmp(dt, n)? };
    if !same(src, work) {
        s.copy(src, n, dt, work, n, dt);
        s.next();
    }
    let (counts, offs) = split(n, p as usize);
    ring_rs(s, work, &counts, &offs, dt)?;
    if me == root {
        for r in (0..p).filter(|&r| r != me) {
            let i = r as usize;
            s.recv(r, el(dst, offs[i], dt), counts[i], dt);
        }
    } else {
        let i = me as usize;
        s.send(root, el(work, offs[i], dt), counts[i], dt);
    }
    Ok(())
}

/// Bruck's allgather of `rn` elements of `rt` per rank into `rbuf` (block
/// `r` from rank `r`); this rank's block from `sblk` (or in place).
pub(super) fn allgather_bruck(
    s: &mut Sched,
    sblk: Option<Blk>,
    rbuf: Loc,
    rn: usize,
    rt: &UserDatatype,
) -> Result<(), Error> {
    let (me, p) = s.rank_size();
    let pu = p as usize;
    let m = me as usize;
    let tmp = s.tmp(rt, pu * rn)?;
    let mine = el(rbuf, m * rn, rt);
    match sblk {
        Some(b) => s.copy(b.at, b.n, &b.dt, tmp, rn, rt),
        None => s.copy(mine, rn, rt, tmp, rn, rt),
    }
    s.next();
    let mut dist = 1;
    while dist < pu {
        let cnt = dist.min(pu - dist);
        let d = dist as i32;
        s.send((me - d + p) % p, tmp, cnt * rn, rt);
        s.recv((me + d) % p, el(tmp, dist * rn, rt), cnt * rn, rt);
        s.next();
        dist <<= 1;
    }
    // tmp block i is rank (me + i) % p's.
    s.copy(tmp, (pu - m) * rn, rt, mine, (pu - m) * rn, rt);
    if m > 0 {
        let from = el(tmp, (pu - m) * rn, rt);
        s.copy(from, m * rn, rt, rbuf, m * rn, rt);
    }
    Ok(())
}

/// Reduce-scatter of the vector at `src` (blocks `rc`) into `dst`: this
/// rank's block of the reduction. `ring` (commutative operations only):
/// the ring; otherwise recursive doubling of the whole vector.
#[allow(clippy::too_many_arguments)] // the collective's arguments
pub(super) fn reduce_scatter(
    s: &mut Sched,
    src: Loc,
    dst: Loc,
    rc: &[usize],
    dt: &UserDatatype,
    commutative: bool,
    ring: bool,
) -> Result<(), Error> {
    let me = s.rank_size().0 as usize;
    let total: usize = rc.iter().sum();
    let mut offs = Vec::with_capacity(rc.len());
    let mut o = 0;
    for c in rc {
        offs.push(o);
        o += c;
    }
    let work = s.tmp(dt, total)?;
    if ring && commutative {
        s.copy(src, total, dt, work, total, dt);
        s.next();
        ring_rs(s, work, rc, &offs, dt)?;
    } else {
        allreduce_rd(s, src, work, total, dt, commutative)?;
        s.next();
    }
    s.copy(el(work, offs[me], dt), rc[me], dt, dst, rc[me], dt);
    Ok(())
}
