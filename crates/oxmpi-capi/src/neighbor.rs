//! Neighbourhood collectives (MPI-4.1 8.6): `MPI_Neighbor_allgather`,
//! `_allgatherv`, `_alltoall`, `_alltoallv` and `_alltoallw` on a
//! communicator with a process topology, each blocking, non-blocking
//! (`MPI_Ineighbor_*`) and persistent (`MPI_Neighbor_*_init`), with its
//! `_c` form: one schedule ([`crate::sched`]) of a single round, every
//! receive from the sources and every send to the destinations
//! (`Topo::neighbourhood`) over the collective shadow with
//! the collective's own tag, so nothing matches point-to-point traffic or
//! another collective. Block `i` of the receive buffer comes from source
//! `i`, block `i` of the send buffer (all of it for allgather) goes to
//! destination `i`; an `MPI_PROC_NULL` neighbour (the edge of a
//! non-periodic Cartesian dimension) moves nothing and keeps its block.
//!
//! One process can be a neighbour several times (a graph listing it twice,
//! a process of its own graph, a periodic Cartesian dimension of extent 1
//! or 2). The messages between two processes then pair up by the
//! non-overtaking order: sends go out in block order, and receives are
//! posted in block order on graphs (the k-th edge to a process meets the
//! k-th edge from it), and on Cartesian grids with the two blocks of each
//! dimension swapped (MPI-4.1 Example 8.10, MPI-4.0 errata B.1.1: what a
//! process sends one step back is what its neighbour receives from one step
//! forward), as MPICH does.

use std::ffi::{c_int, c_void};

use oxmpi::{Error, ErrorClass};

use crate::comm::PROC_NULL;
use crate::entry;
use crate::nbc::{
    arr, blocks, coll_entries, counts, init, nb, side, vblocks, wblks, Blk, Cnt, IN_PLACE,
};
use crate::sched::{self, Sched};
use crate::state::state;
use crate::topo::Topo;

/// A neighbourhood collective's schedule, empty, and its neighbours.
struct Hood {
    s: Sched,
    /// Where each receive block comes from (`MPI_PROC_NULL`: nowhere).
    srcs: Vec<c_int>,
    /// Where each send block goes.
    dsts: Vec<c_int>,
    /// Whether the receives of each pair of blocks are posted swapped (a
    /// Cartesian grid).
    swap: bool,
}

/// The neighbourhood of communicator `comm` (`MPI_ERR_TOPOLOGY` without a
/// topology), with a new schedule on it; `sbuf` and `rbuf` must not be
/// `MPI_IN_PLACE`.
fn hood(comm: usize, sbuf: *const c_void, rbuf: *const c_void) -> Result<Hood, Error> {
    let c = state()?.comm(comm)?;
    let Some(topo) = c.topo.as_ref() else {
        return Err(Error::new(
            ErrorClass::Topology,
            "a neighbourhood collective on a communicator without a process topology",
        ));
    };
    let (srcs, dsts) = topo.neighbourhood(c.comm.rank())?;
    let swap = matches!(topo, Topo::Cart { .. });
    if sbuf == IN_PLACE || rbuf == IN_PLACE {
        return Err(Error::new(
            ErrorClass::Buffer,
            "MPI_IN_PLACE is not allowed in a neighbourhood collective",
        ));
    }
    Ok(Hood {
        s: Sched::new(c),
        srcs,
        dsts,
        swap,
    })
}

impl Hood {
    /// The schedule receiving `rblks` (one per source) and sending `sblks`
    /// (one per destination).
    fn exchange(mut self, sblks: &[Blk], rblks: &[Blk]) -> Sched {
        let n = self.srcs.len();
        debug_assert!(!self.swap || n % 2 == 0);
        for k in 0..n {
            let i = if self.swap { k ^ 1 } else { k };
            let (from, b) = (self.srcs[i], &rblks[i]);
            if from != PROC_NULL {
                self.s.recv(from, b.at, b.n, &b.dt);
            }
        }
        for (&to, b) in self.dsts.iter().zip(sblks) {
            if to != PROC_NULL {
                self.s.send(to, b.at, b.n, &b.dt);
            }
        }
        self.s
    }
}

fn b_allgather(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    let h = hood(comm, sbuf, rbuf)?;
    let sblks = vec![side(sbuf, sn, sdt)?; h.dsts.len()];
    let rblks = blocks(rbuf, rn, rdt, h.srcs.len())?;
    Ok(h.exchange(&sblks, &rblks))
}

/// # Safety
/// The arrays valid for the number of sources.
#[allow(clippy::too_many_arguments)] // MPI_Neighbor_allgatherv's
unsafe fn b_allgatherv<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    displs: *const D,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    let h = hood(comm, sbuf, rbuf)?;
    let sblks = vec![side(sbuf, sn, sdt)?; h.dsts.len()];
    let names = ("recvcounts", "displs");
    // SAFETY: per the caller.
    let rblks = unsafe { vblocks(rbuf, rcounts, displs, rdt, h.srcs.len(), names) }?;
    Ok(h.exchange(&sblks, &rblks))
}

fn b_alltoall(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    let h = hood(comm, sbuf, rbuf)?;
    let sblks = blocks(sbuf, sn, sdt, h.dsts.len())?;
    let rblks = blocks(rbuf, rn, rdt, h.srcs.len())?;
    Ok(h.exchange(&sblks, &rblks))
}

/// # Safety
/// The send arrays valid for the number of destinations, the receive
/// arrays for the number of sources.
#[allow(clippy::too_many_arguments)] // MPI_Neighbor_alltoallv's
unsafe fn b_alltoallv<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    scounts: *const T,
    sdispls: *const D,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    rdispls: *const D,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    let h = hood(comm, sbuf, rbuf)?;
    let (no, ni) = (h.dsts.len(), h.srcs.len());
    // SAFETY: per the caller.
    let (sblks, rblks) = unsafe {
        (
            vblocks(sbuf, scounts, sdispls, sdt, no, ("sendcounts", "sdispls"))?,
            vblocks(rbuf, rcounts, rdispls, rdt, ni, ("recvcounts", "rdispls"))?,
        )
    };
    Ok(h.exchange(&sblks, &rblks))
}

/// # Safety
/// The send arrays valid for the number of destinations, the receive
/// arrays for the number of sources.
#[allow(clippy::too_many_arguments)] // MPI_Neighbor_alltoallw's
unsafe fn b_alltoallw<T: Cnt>(
    sbuf: *const c_void,
    scounts: *const T,
    sdispls: *const isize,
    stypes: *const usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    rdispls: *const isize,
    rtypes: *const usize,
    comm: usize,
) -> Result<Sched, Error> {
    let h = hood(comm, sbuf, rbuf)?;
    let (no, ni) = (h.dsts.len(), h.srcs.len());
    // SAFETY: per the caller.
    let (sblks, rblks) = unsafe {
        let sc = counts(&arr(scounts, no, "sendcounts")?)?;
        let sd = arr(sdispls, no, "sdispls")?;
        let rc = counts(&arr(rcounts, ni, "recvcounts")?)?;
        let rd = arr(rdispls, ni, "rdispls")?;
        (
            wblks(sbuf, &sc, &sd, stypes, "sendtypes")?,
            wblks(rbuf, &rc, &rd, rtypes, "recvtypes")?,
        )
    };
    Ok(h.exchange(&sblks, &rblks))
}

type P = *const c_void;
type M = *mut c_void;
type I = c_int;
type C = i64;
type Pi = *const c_int;
type Pc = *const i64;
type Pa = *const isize;
type Pt = *const usize;

coll_entries! {
    [MPI_Neighbor_allgather / PMPI_Neighbor_allgather] MPI_Ineighbor_allgather / PMPI_Ineighbor_allgather, MPI_Neighbor_allgather_init / PMPI_Neighbor_allgather_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rn: I, rdt: usize, comm: usize) comm
        => b_allgather(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, comm);
    [MPI_Neighbor_allgather_c / PMPI_Neighbor_allgather_c] MPI_Ineighbor_allgather_c / PMPI_Ineighbor_allgather_c, MPI_Neighbor_allgather_init_c / PMPI_Neighbor_allgather_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rn: C, rdt: usize, comm: usize) comm
        => b_allgather(sbuf, sn, sdt, rbuf, rn, rdt, comm);
    [MPI_Neighbor_allgatherv / PMPI_Neighbor_allgatherv] MPI_Ineighbor_allgatherv / PMPI_Ineighbor_allgatherv, MPI_Neighbor_allgatherv_init / PMPI_Neighbor_allgatherv_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rc: Pi, displs: Pi, rdt: usize, comm: usize) comm
        => b_allgatherv(sbuf, sn.into(), sdt, rbuf, rc, displs, rdt, comm);
    [MPI_Neighbor_allgatherv_c / PMPI_Neighbor_allgatherv_c] MPI_Ineighbor_allgatherv_c / PMPI_Ineighbor_allgatherv_c, MPI_Neighbor_allgatherv_init_c / PMPI_Neighbor_allgatherv_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rc: Pc, displs: Pa, rdt: usize, comm: usize) comm
        => b_allgatherv(sbuf, sn, sdt, rbuf, rc, displs, rdt, comm);
    [MPI_Neighbor_alltoall / PMPI_Neighbor_alltoall] MPI_Ineighbor_alltoall / PMPI_Ineighbor_alltoall, MPI_Neighbor_alltoall_init / PMPI_Neighbor_alltoall_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rn: I, rdt: usize, comm: usize) comm
        => b_alltoall(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, comm);
    [MPI_Neighbor_alltoall_c / PMPI_Neighbor_alltoall_c] MPI_Ineighbor_alltoall_c / PMPI_Ineighbor_alltoall_c, MPI_Neighbor_alltoall_init_c / PMPI_Neighbor_alltoall_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rn: C, rdt: usize, comm: usize) comm
        => b_alltoall(sbuf, sn, sdt, rbuf, rn, rdt, comm);
    [MPI_Neighbor_alltoallv / PMPI_Neighbor_alltoallv] MPI_Ineighbor_alltoallv / PMPI_Ineighbor_alltoallv, MPI_Neighbor_alltoallv_init / PMPI_Neighbor_alltoallv_init
        (sbuf: P, sc: Pi, sd: Pi, sdt: usize, rbuf: M, rc: Pi, rd: Pi, rdt: usize, comm: usize) comm
        => b_alltoallv(sbuf, sc, sd, sdt, rbuf, rc, rd, rdt, comm);
    [MPI_Neighbor_alltoallv_c / PMPI_Neighbor_alltoallv_c] MPI_Ineighbor_alltoallv_c / PMPI_Ineighbor_alltoallv_c, MPI_Neighbor_alltoallv_init_c / PMPI_Neighbor_alltoallv_init_c
        (sbuf: P, sc: Pc, sd: Pa, sdt: usize, rbuf: M, rc: Pc, rd: Pa, rdt: usize, comm: usize) comm
        => b_alltoallv(sbuf, sc, sd, sdt, rbuf, rc, rd, rdt, comm);
    [MPI_Neighbor_alltoallw / PMPI_Neighbor_alltoallw] MPI_Ineighbor_alltoallw / PMPI_Ineighbor_alltoallw, MPI_Neighbor_alltoallw_init / PMPI_Neighbor_alltoallw_init
        (sbuf: P, sc: Pi, sd: Pa, st: Pt, rbuf: M, rc: Pi, rd: Pa, rt: Pt, comm: usize) comm
        => b_alltoallw(sbuf, sc, sd, st, rbuf, rc, rd, rt, comm);
    [MPI_Neighbor_alltoallw_c / PMPI_Neighbor_alltoallw_c] MPI_Ineighbor_alltoallw_c / PMPI_Ineighbor_alltoallw_c, MPI_Neighbor_alltoallw_init_c / PMPI_Neighbor_alltoallw_init_c
        (sbuf: P, sc: Pc, sd: Pa, st: Pt, rbuf: M, rc: Pc, rd: Pa, rt: Pt, comm: usize) comm
        => b_alltoallw(sbuf, sc, sd, st, rbuf, rc, rd, rt, comm);
}
