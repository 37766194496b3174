//! Process topologies (MPI-4.1 chapter 8): Cartesian, graph and
//! distributed graph communicators, their queries, and `MPI_Dims_create`.
//!
//! A topology is data the C layer keeps beside the communicator
//! ([`crate::state::CommObj::topo`]); the communicator itself is an
//! ordinary one (a split of the old one: processes beyond the topology's
//! size get `MPI_COMM_NULL`). `reorder` is accepted and ignored: every
//! process keeps its rank, which the standard allows. `MPI_Comm_dup` keeps
//! the topology; other constructors do not. The neighbourhood collectives
//! are in [`crate::neighbor`] (over `Topo::neighbourhood`).

use std::ffi::c_int;

use oxmpi::{Error, ErrorClass};

use crate::comm::{register_with, UNDEFINED};
use crate::entry;
use crate::env::put;
use crate::state::{lock, null_arg, state, CommObj, COMM_NULL};

/// `MPI_CART`.
pub const CART: c_int = 211;
/// `MPI_GRAPH`.
pub const GRAPH: c_int = 212;
/// `MPI_DIST_GRAPH`.
pub const DIST_GRAPH: c_int = 213;
/// `MPI_PROC_NULL`.
const PROC_NULL: c_int = -3;
/// `MPI_UNWEIGHTED`.
const UNWEIGHTED: usize = 10;
/// `MPI_WEIGHTS_EMPTY`.
const WEIGHTS_EMPTY: usize = 11;

/// A communicator's process topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topo {
    /// A Cartesian grid (row-major: the last dimension varies fastest).
    Cart {
        /// Extent of each dimension.
        dims: Vec<c_int>,
        /// Whether each dimension wraps around.
        periods: Vec<bool>,
    },
    /// A graph (`MPI_Graph_create`'s `index` and `edges`).
    Graph {
        /// `index[i]`: the number of edges of nodes `0..=i`.
        index: Vec<c_int>,
        /// The neighbours of every node, one node after the other.
        edges: Vec<c_int>,
    },
    /// A distributed graph: this process's own neighbours.
    DistGraph {
        /// Processes with an edge to this one, and the edges' weights.
        sources: Vec<(c_int, c_int)>,
        /// Processes this one has an edge to, and the edges' weights.
        dests: Vec<(c_int, c_int)>,
        /// Whether weights were given.
        weighted: bool,
    },
}

impl Topo {
    /// The Cartesian coordinates of `rank` in `dims`.
    fn coords(dims: &[c_int], rank: c_int) -> Vec<c_int> {
        oxmpi::topology::coordinates(dims, rank)
    }

    /// The rank of Cartesian coordinates `coords` (wrapped in periodic
    /// dimensions), or `MPI_ERR_ARG` outside a non-periodic one.
    fn rank_of(dims: &[c_int], periods: &[bool], coords: &[c_int]) -> Result<c_int, Error> {
        oxmpi::topology::rank_at(dims, periods, coords)
    }

    /// The neighbourhood of process `rank` for the neighbourhood
    /// collectives (MPI-4.1 8.6): the processes its receive blocks come
    /// from and its send blocks go to, in block order. Cartesian: for each
    /// dimension the process one step back, then one step forward, both
    /// ways (`MPI_PROC_NULL` past the edge of a non-periodic dimension);
    /// graph: `MPI_Graph_neighbors`' order, both ways; distributed graph:
    /// the sources, and the destinations.
    pub(crate) fn neighbourhood(&self, rank: c_int) -> Result<(Vec<c_int>, Vec<c_int>), Error> {
        Ok(match self {
            Topo::Cart { dims, periods } => {
                let mut v = Vec::with_capacity(2 * dims.len());
                for d in 0..dims.len() {
                    let (back, fwd) = oxmpi::topology::shift(dims, periods, rank, d, 1)?;
                    v.push(back.unwrap_or(PROC_NULL));
                    v.push(fwd.unwrap_or(PROC_NULL));
                }
                (v.clone(), v)
            }
            Topo::Graph { index, edges } => {
                let v = graph_neighbours(index, edges, rank)?.to_vec();
                (v.clone(), v)
            }
            Topo::DistGraph { sources, dests, .. } => (
                sources.iter().map(|e| e.0).collect(),
                dests.iter().map(|e| e.0).collect(),
            ),
        })
    }
}

/// The topology of `c`, or `MPI_ERR_TOPOLOGY` naming what `what` needs.
fn topo_of<'a>(c: &'a CommObj, what: &str) -> Result<&'a Topo, Error> {
    c.topo.as_ref().ok_or_else(|| {
        Error::new(
            ErrorClass::Topology,
            format!("{what}: the communicator has no process topology"),
        )
    })
}

/// The Cartesian topology of `c`.
fn cart_of<'a>(c: &'a CommObj, what: &str) -> Result<(&'a [c_int], &'a [bool]), Error> {
    match topo_of(c, what)? {
        Topo::Cart { dims, periods } => Ok((dims, periods)),
        _ => Err(Error::new(
            ErrorClass::Topology,
            format!("{what}: the communicator's topology is not Cartesian"),
        )),
    }
}

/// The graph topology of `c`.
fn graph_of<'a>(c: &'a CommObj, what: &str) -> Result<(&'a [c_int], &'a [c_int]), Error> {
    match topo_of(c, what)? {
        Topo::Graph { index, edges } => Ok((index, edges)),
        _ => Err(Error::new(
            ErrorClass::Topology,
            format!("{what}: the communicator's topology is not a graph"),
        )),
    }
}

/// `n` values at `p` (null allowed when `n` is 0).
///
/// # Safety
/// `p` must be valid for `n` reads.
unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> Result<&'a [c_int], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not null; `n` values per the caller.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Writes `v` to `p` (which holds room for `v.len()` values).
///
/// # Safety
/// `p` must be valid for `v.len()` writes.
unsafe fn write_ints(p: *mut c_int, v: &[c_int], what: &str) -> Result<(), Error> {
    if v.is_empty() {
        return Ok(());
    }
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not null; room for `v.len()` per the caller.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
    Ok(())
}

/// `n` as a count, or `what`'s error class.
fn count(n: c_int, what: &str, class: ErrorClass) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| Error::new(class, format!("{what} {n} is negative")))
}

/// Checked Cartesian dimensions and their product.
fn cart_dims(dims: &[c_int]) -> Result<c_int, Error> {
    let mut n: c_int = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d <= 0 {
            return Err(Error::new(
                ErrorClass::Dims,
                format!("dimension {i} has extent {d} (must be positive)"),
            ));
        }
        n = n.checked_mul(d).ok_or_else(|| {
            Error::new(ErrorClass::Dims, "the grid has more than INT_MAX processes")
        })?;
    }
    Ok(n)
}

/// The communicator of the first `n` processes of `old` (in order) with
/// topology `topo`, stored; `MPI_COMM_NULL` for the others. Collective.
fn create(old: &CommObj, n: c_int, topo: Topo) -> Result<usize, Error> {
    let s = state()?;
    if n > old.comm.size() {
        return Err(Error::new(
            ErrorClass::Topology,
            format!(
                "the topology has {n} processes, the communicator only {}",
                old.comm.size()
            ),
        ));
    }
    let r = old.comm.rank();
    let color = (r < n).then_some(0);
    match old.comm.split(color, r)? {
        Some(c) => {
            let h = register_with(s, *lock(&old.errh), Some(topo), c)?;
            crate::bsend::inherit(old, h);
            Ok(h)
        }
        None => Ok(COMM_NULL),
    }
}

/// Checked graph arrays: `nnodes` nodes, `index` non-decreasing, every
/// edge a node.
fn check_graph(index: &[c_int], edges: &[c_int]) -> Result<(), Error> {
    let mut prev = 0;
    for (i, &x) in index.iter().enumerate() {
        if x < prev {
            return Err(Error::new(
                ErrorClass::Arg,
                format!(
                    "index[{i}] = {x} is less than index[{}] = {prev}",
                    i.max(1) - 1
                ),
            ));
        }
        prev = x;
    }
    let n = index.len() as c_int;
    if let Some(e) = edges.iter().find(|&&e| !(0..n).contains(&e)) {
        return Err(Error::new(
            ErrorClass::Arg,
            format!("edge to {e} in a graph of {n} nodes"),
        ));
    }
    Ok(())
}

/// The neighbours of `rank` in a graph.
fn graph_neighbours<'a>(
    index: &[c_int],
    edges: &'a [c_int],
    rank: c_int,
) -> Result<&'a [c_int], Error> {
    let n = index.len() as c_int;
    if !(0..n).contains(&rank) {
        return Err(Error::new(
            ErrorClass::Rank,
            format!("rank {rank} of a graph of {n} nodes"),
        ));
    }
    let lo = if rank == 0 {
        0
    } else {
        index[rank as usize - 1]
    } as usize;
    let hi = index[rank as usize] as usize;
    Ok(&edges[lo..hi])
}

/// Weights at `p` for `n` edges: `None` for `MPI_UNWEIGHTED` (or
/// `MPI_WEIGHTS_EMPTY` with no edges), else the values.
///
/// # Safety
/// `p` must be one of the two constants or valid for `n` reads.
unsafe fn weights<'a>(p: *const c_int, n: usize, what: &str) -> Result<Option<&'a [c_int]>, Error> {
    match p as usize {
        UNWEIGHTED => Ok(None),
        WEIGHTS_EMPTY if n == 0 => Ok(Some(&[])),
        WEIGHTS_EMPTY => Err(Error::new(
            ErrorClass::Arg,
            format!("{what} is MPI_WEIGHTS_EMPTY for {n} edges"),
        )),
        // SAFETY: `n` values per the caller.
        _ => unsafe { ints(p, n, what) }.map(Some),
    }
}

/// Checks that every one of `ranks` is a rank of a communicator of `n`.
fn check_ranks(ranks: &[c_int], n: c_int, what: &str) -> Result<(), Error> {
    match ranks.iter().find(|&&r| !(0..n).contains(&r)) {
        Some(r) => Err(Error::new(
            ErrorClass::Rank,
            format!("{what}: rank {r} of a communicator of {n}"),
        )),
        None => Ok(()),
    }
}

entry! {
    /// `MPI_Cart_create`: a Cartesian grid over the first `prod(dims)`
    /// processes of `comm_old` (ranks kept; `reorder` ignored); the others
    /// get `MPI_COMM_NULL`. Collective.
    fn MPI_Cart_create / PMPI_Cart_create(
        comm_old: usize,
        ndims: c_int,
        dims: *const c_int,
        periods: *const c_int,
        _reorder: c_int,
        comm_cart: *mut usize,
    ) comm = Some(comm_old); {
        let old = state()?.intra_comm(comm_old)?;
        if comm_cart.is_null() {
            return Err(null_arg("comm_cart"));
        }
        let nd = count(ndims, "ndims", ErrorClass::Dims)?;
        // SAFETY: the caller passes `ndims` values in each.
        let (dims, periods) = unsafe { (ints(dims, nd, "dims")?, ints(periods, nd, "periods")?) };
        let n = cart_dims(dims)?;
        let topo = Topo::Cart { dims: dims.to_vec(), periods: periods.iter().map(|&p| p != 0).collect() };
        let h = create(&old, n, topo)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(comm_cart, h, "comm_cart") }
    }

    /// `MPI_Cart_map`: the rank this process would have in such a grid
    /// (its own rank, or `MPI_UNDEFINED` beyond the grid).
    fn MPI_Cart_map / PMPI_Cart_map(
        comm: usize,
        ndims: c_int,
        dims: *const c_int,
        _periods: *const c_int,
        newrank: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.intra_comm(comm)?;
        let nd = count(ndims, "ndims", ErrorClass::Dims)?;
        // SAFETY: the caller passes `ndims` values.
        let n = cart_dims(unsafe { ints(dims, nd, "dims") }?)?;
        if n > c.comm.size() {
            return Err(Error::new(ErrorClass::Topology, format!("the grid has {n} processes, the communicator only {}", c.comm.size())));
        }
        let r = c.comm.rank();
        // SAFETY: the caller's out-parameter.
        unsafe { put(newrank, if r < n { r } else { UNDEFINED }, "newrank") }
    }

    /// `MPI_Cartdim_get`.
    fn MPI_Cartdim_get / PMPI_Cartdim_get(comm: usize, ndims: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (dims, _) = cart_of(&c, "MPI_Cartdim_get")?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(ndims, dims.len() as c_int, "ndims") }
    }

    /// `MPI_Cart_get`: dimensions, periods and this process's coordinates
    /// (the first `maxdims` of each).
    fn MPI_Cart_get / PMPI_Cart_get(
        comm: usize,
        maxdims: c_int,
        dims: *mut c_int,
        periods: *mut c_int,
        coords: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (d, p) = cart_of(&c, "MPI_Cart_get")?;
        let m = count(maxdims, "maxdims", ErrorClass::Arg)?.min(d.len());
        let me = Topo::coords(d, c.comm.rank());
        let p: Vec<c_int> = p.iter().map(|&x| c_int::from(x)).collect();
        // SAFETY: the caller's arrays of `maxdims` values.
        unsafe {
            write_ints(dims, &d[..m], "dims")?;
            write_ints(periods, &p[..m], "periods")?;
            write_ints(coords, &me[..m], "coords")
        }
    }

    /// `MPI_Cart_rank`: the rank at `coords` (wrapped in periodic
    /// dimensions; outside a non-periodic one: `MPI_ERR_ARG`).
    fn MPI_Cart_rank / PMPI_Cart_rank(comm: usize, coords: *const c_int, rank: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (d, p) = cart_of(&c, "MPI_Cart_rank")?;
        // SAFETY: the caller passes one coordinate per dimension.
        let co = unsafe { ints(coords, d.len(), "coords") }?;
        let r = Topo::rank_of(d, p, co)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(rank, r, "rank") }
    }

    /// `MPI_Cart_coords`: the coordinates of `rank` (the first `maxdims`).
    fn MPI_Cart_coords / PMPI_Cart_coords(comm: usize, rank: c_int, maxdims: c_int, coords: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (d, _) = cart_of(&c, "MPI_Cart_coords")?;
        if !(0..c.comm.size()).contains(&rank) {
            return Err(Error::new(ErrorClass::Rank, format!("rank {rank} of a communicator of {}", c.comm.size())));
        }
        let m = count(maxdims, "maxdims", ErrorClass::Arg)?;
        if m < d.len() {
            return Err(Error::new(ErrorClass::Arg, format!("maxdims {maxdims} is less than the {} dimensions", d.len())));
        }
        // SAFETY: the caller's array of `maxdims` values.
        unsafe { write_ints(coords, &Topo::coords(d, rank), "coords") }
    }

    /// `MPI_Cart_shift`: the ranks `disp` steps back and forth along
    /// `direction` (`MPI_PROC_NULL` past the edge of a non-periodic one).
    fn MPI_Cart_shift / PMPI_Cart_shift(
        comm: usize,
        direction: c_int,
        disp: c_int,
        rank_source: *mut c_int,
        rank_dest: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (d, p) = cart_of(&c, "MPI_Cart_shift")?;
        let dir = usize::try_from(direction).ok().filter(|&x| x < d.len()).ok_or_else(|| {
            Error::new(ErrorClass::Arg, format!("direction {direction} of a grid of {} dimensions", d.len()))
        })?;
        let (src, dst) = oxmpi::topology::shift(d, p, c.comm.rank(), dir, disp)?;
        let (src, dst) = (src.unwrap_or(PROC_NULL), dst.unwrap_or(PROC_NULL));
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(rank_source, src, "rank_source")?;
            put(rank_dest, dst, "rank_dest")
        }
    }

    /// `MPI_Cart_sub`: the sub-grids of the dimensions whose `remain_dims`
    /// entry is true (one communicator per value of the others'
    /// coordinates). Collective.
    fn MPI_Cart_sub / PMPI_Cart_sub(comm: usize, remain_dims: *const c_int, newcomm: *mut usize) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        let (d, p) = cart_of(&c, "MPI_Cart_sub")?;
        if newcomm.is_null() {
            return Err(null_arg("newcomm"));
        }
        // SAFETY: the caller passes one flag per dimension.
        let keep = unsafe { ints(remain_dims, d.len(), "remain_dims") }?;
        let me = Topo::coords(d, c.comm.rank());
        // The color: the rank, in the grid of the dropped dimensions, of
        // this process's coordinates there.
        let mut color: u32 = 0;
        let mut nd = Vec::new();
        let mut np = Vec::new();
        for i in 0..d.len() {
            if keep[i] != 0 {
                nd.push(d[i]);
                np.push(p[i]);
            } else {
                color = color * d[i] as u32 + me[i] as u32;
            }
        }
        let sub = c.comm.split(Some(color), c.comm.rank())?.ok_or_else(|| {
            Error::new(ErrorClass::Intern, "a split with a color gave no communicator")
        })?;
        let h = register_with(s, *lock(&c.errh), Some(Topo::Cart { dims: nd, periods: np }), sub)?;
        crate::bsend::inherit(&c, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(newcomm, h, "newcomm") }
    }

    /// `MPI_Dims_create`: fills the zero entries of `dims` with a balanced
    /// factorisation of `nnodes` over them, in non-increasing order.
    fn MPI_Dims_create / PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) comm = None; {
        let nd = count(ndims, "ndims", ErrorClass::Dims)?;
        // SAFETY: the caller's array of `ndims` values.
        let mut out = unsafe { ints(dims, nd, "dims") }?.to_vec();
        oxmpi::topology::dims_create(nnodes, &mut out)?;
        // SAFETY: as above.
        unsafe { write_ints(dims, &out, "dims") }
    }

    /// `MPI_Graph_create`: a graph over the first `nnodes` processes of
    /// `comm_old` (ranks kept); the others get `MPI_COMM_NULL`. Collective.
    fn MPI_Graph_create / PMPI_Graph_create(
        comm_old: usize,
        nnodes: c_int,
        index: *const c_int,
        edges: *const c_int,
        _reorder: c_int,
        comm_graph: *mut usize,
    ) comm = Some(comm_old); {
        let old = state()?.intra_comm(comm_old)?;
        if comm_graph.is_null() {
            return Err(null_arg("comm_graph"));
        }
        let n = count(nnodes, "nnodes", ErrorClass::Arg)?;
        // SAFETY: the caller passes `nnodes` index values.
        let index = unsafe { ints(index, n, "index") }?;
        let ne = count(index.last().copied().unwrap_or(0), "index[nnodes - 1]", ErrorClass::Arg)?;
        // SAFETY: the caller passes `index[nnodes - 1]` edges.
        let edges = unsafe { ints(edges, ne, "edges") }?;
        check_graph(index, edges)?;
        let topo = Topo::Graph { index: index.to_vec(), edges: edges.to_vec() };
        let h = create(&old, nnodes, topo)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(comm_graph, h, "comm_graph") }
    }

    /// `MPI_Graph_map`: this process's own rank, or `MPI_UNDEFINED`
    /// beyond the graph.
    fn MPI_Graph_map / PMPI_Graph_map(
        comm: usize,
        nnodes: c_int,
        index: *const c_int,
        edges: *const c_int,
        newrank: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.intra_comm(comm)?;
        let n = count(nnodes, "nnodes", ErrorClass::Arg)?;
        // SAFETY: the caller passes `nnodes` index values.
        let index = unsafe { ints(index, n, "index") }?;
        let ne = count(index.last().copied().unwrap_or(0), "index[nnodes - 1]", ErrorClass::Arg)?;
        // SAFETY: the caller passes `index[nnodes - 1]` edges.
        check_graph(index, unsafe { ints(edges, ne, "edges") }?)?;
        if nnodes > c.comm.size() {
            return Err(Error::new(ErrorClass::Topology, format!("the graph has {nnodes} nodes, the communicator only {}", c.comm.size())));
        }
        let r = c.comm.rank();
        // SAFETY: the caller's out-parameter.
        unsafe { put(newrank, if r < nnodes { r } else { UNDEFINED }, "newrank") }
    }

    /// `MPI_Graphdims_get`.
    fn MPI_Graphdims_get / PMPI_Graphdims_get(comm: usize, nnodes: *mut c_int, nedges: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (index, edges) = graph_of(&c, "MPI_Graphdims_get")?;
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(nnodes, index.len() as c_int, "nnodes")?;
            put(nedges, edges.len() as c_int, "nedges")
        }
    }

    /// `MPI_Graph_get`: the first `maxindex` index values and `maxedges`
    /// edges.
    fn MPI_Graph_get / PMPI_Graph_get(
        comm: usize,
        maxindex: c_int,
        maxedges: c_int,
        index: *mut c_int,
        edges: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (ix, ed) = graph_of(&c, "MPI_Graph_get")?;
        let mi = count(maxindex, "maxindex", ErrorClass::Arg)?.min(ix.len());
        let me = count(maxedges, "maxedges", ErrorClass::Arg)?.min(ed.len());
        // SAFETY: the caller's arrays.
        unsafe {
            write_ints(index, &ix[..mi], "index")?;
            write_ints(edges, &ed[..me], "edges")
        }
    }

    /// `MPI_Graph_neighbors_count`.
    fn MPI_Graph_neighbors_count / PMPI_Graph_neighbors_count(comm: usize, rank: c_int, nneighbors: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (ix, ed) = graph_of(&c, "MPI_Graph_neighbors_count")?;
        let n = graph_neighbours(ix, ed, rank)?.len();
        // SAFETY: the caller's out-parameter.
        unsafe { put(nneighbors, n as c_int, "nneighbors") }
    }

    /// `MPI_Graph_neighbors`: the first `maxneighbors` neighbours of
    /// `rank`, in the order of `edges`.
    fn MPI_Graph_neighbors / PMPI_Graph_neighbors(
        comm: usize,
        rank: c_int,
        maxneighbors: c_int,
        neighbors: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (ix, ed) = graph_of(&c, "MPI_Graph_neighbors")?;
        let nb = graph_neighbours(ix, ed, rank)?;
        let m = count(maxneighbors, "maxneighbors", ErrorClass::Arg)?.min(nb.len());
        // SAFETY: the caller's array of `maxneighbors` values.
        unsafe { write_ints(neighbors, &nb[..m], "neighbors") }
    }

    /// `MPI_Topo_test`: `MPI_CART`, `MPI_GRAPH`, `MPI_DIST_GRAPH` or
    /// `MPI_UNDEFINED`.
    fn MPI_Topo_test / PMPI_Topo_test(comm: usize, status: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let t = match &c.topo {
            Some(Topo::Cart { .. }) => CART,
            Some(Topo::Graph { .. }) => GRAPH,
            Some(Topo::DistGraph { .. }) => DIST_GRAPH,
            None => UNDEFINED,
        };
        // SAFETY: the caller's out-parameter.
        unsafe { put(status, t, "status") }
    }

    /// `MPI_Dist_graph_create_adjacent`: each process names its own
    /// sources and destinations (and their weights). `info` and `reorder`
    /// are ignored. Collective.
    fn MPI_Dist_graph_create_adjacent / PMPI_Dist_graph_create_adjacent(
        comm_old: usize,
        indegree: c_int,
        sources: *const c_int,
        sourceweights: *const c_int,
        outdegree: c_int,
        destinations: *const c_int,
        destweights: *const c_int,
        _info: usize,
        _reorder: c_int,
        comm_dist_graph: *mut usize,
    ) comm = Some(comm_old); {
        let s = state()?;
        let old = s.intra_comm(comm_old)?;
        if comm_dist_graph.is_null() {
            return Err(null_arg("comm_dist_graph"));
        }
        let ni = count(indegree, "indegree", ErrorClass::Arg)?;
        let no = count(outdegree, "outdegree", ErrorClass::Arg)?;
        // SAFETY: the caller passes `indegree` and `outdegree` values.
        let (src, sw, dst, dw) = unsafe {
            (
                ints(sources, ni, "sources")?,
                weights(sourceweights, ni, "sourceweights")?,
                ints(destinations, no, "destinations")?,
                weights(destweights, no, "destweights")?,
            )
        };
        let n = old.comm.size();
        check_ranks(src, n, "sources")?;
        check_ranks(dst, n, "destinations")?;
        if sw.is_some() != dw.is_some() {
            return Err(Error::new(ErrorClass::Arg, "weights given for one direction only (both or neither may be MPI_UNWEIGHTED)"));
        }
        let weighted = sw.is_some();
        let pair = |r: &[c_int], w: Option<&[c_int]>| -> Vec<(c_int, c_int)> {
            r.iter().enumerate().map(|(i, &x)| (x, w.map_or(1, |w| w[i]))).collect()
        };
        let topo = Topo::DistGraph { sources: pair(src, sw), dests: pair(dst, dw), weighted };
        let d = old.comm.dup()?;
        let h = register_with(s, *lock(&old.errh), Some(topo), d)?;
        crate::bsend::inherit(&old, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(comm_dist_graph, h, "comm_dist_graph") }
    }

    /// `MPI_Dist_graph_create`: each process names some edges (of any
    /// processes); every process learns its own sources and destinations
    /// (edges from each process in the order it gave them, processes in
    /// rank order). `info` and `reorder` are ignored. Collective.
    fn MPI_Dist_graph_create / PMPI_Dist_graph_create(
        comm_old: usize,
        n: c_int,
        sources: *const c_int,
        degrees: *const c_int,
        destinations: *const c_int,
        weights_: *const c_int,
        _info: usize,
        _reorder: c_int,
        comm_dist_graph: *mut usize,
    ) comm = Some(comm_old); {
        let s = state()?;
        let old = s.intra_comm(comm_old)?;
        if comm_dist_graph.is_null() {
            return Err(null_arg("comm_dist_graph"));
        }
        let k = count(n, "n", ErrorClass::Arg)?;
        // SAFETY: the caller passes `n` sources and degrees.
        let (src, deg) = unsafe { (ints(sources, k, "sources")?, ints(degrees, k, "degrees")?) };
        let mut total = 0usize;
        for (i, &d) in deg.iter().enumerate() {
            total += count(d, &format!("degrees[{i}]"), ErrorClass::Arg)?;
        }
        // SAFETY: the caller passes sum(degrees) destinations and weights.
        let (dst, w) = unsafe { (ints(destinations, total, "destinations")?, weights(weights_, total, "weights")?) };
        let size = old.comm.size();
        check_ranks(src, size, "sources")?;
        check_ranks(dst, size, "destinations")?;
        // Every edge goes to both its ends: (from, to, weight) triples,
        // one message per process.
        let mut out: Vec<Vec<c_int>> = vec![Vec::new(); size as usize];
        let mut e = 0;
        for (i, &from) in src.iter().enumerate() {
            for _ in 0..deg[i] {
                let (to, wt) = (dst[e], w.map_or(1, |w| w[e]));
                out[from as usize].extend_from_slice(&[from, to, wt]);
                if to != from {
                    out[to as usize].extend_from_slice(&[from, to, wt]);
                }
                e += 1;
            }
        }
        let d = old.comm.dup()?;
        let got = exchange_edges(&d, out)?;
        // Whether anyone gave weights: all processes must agree on it.
        let mut flags = vec![Vec::new(); size as usize];
        for f in flags.iter_mut() {
            f.push(c_int::from(w.is_some() && total > 0));
        }
        let weighted = exchange_edges(&d, flags)?.iter().any(|v| v.first() == Some(&1));
        let me = d.rank();
        let (mut sources_, mut dests) = (Vec::new(), Vec::new());
        for v in &got {
            for t in v.chunks_exact(3) {
                // An edge to itself is both.
                if t[1] == me {
                    sources_.push((t[0], t[2]));
                }
                if t[0] == me {
                    dests.push((t[1], t[2]));
                }
            }
        }
        let topo = Topo::DistGraph { sources: sources_, dests, weighted };
        let h = register_with(s, *lock(&old.errh), Some(topo), d)?;
        crate::bsend::inherit(&old, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(comm_dist_graph, h, "comm_dist_graph") }
    }

    /// `MPI_Dist_graph_neighbors_count`.
    fn MPI_Dist_graph_neighbors_count / PMPI_Dist_graph_neighbors_count(
        comm: usize,
        indegree: *mut c_int,
        outdegree: *mut c_int,
        weighted: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let Topo::DistGraph { sources, dests, weighted: w } = topo_of(&c, "MPI_Dist_graph_neighbors_count")? else {
            return Err(Error::new(ErrorClass::Topology, "MPI_Dist_graph_neighbors_count: the topology is not a distributed graph"));
        };
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(indegree, sources.len() as c_int, "indegree")?;
            put(outdegree, dests.len() as c_int, "outdegree")?;
            put(weighted, c_int::from(*w), "weighted")
        }
    }

    /// `MPI_Dist_graph_neighbors`: the first `maxindegree` sources and
    /// `maxoutdegree` destinations, with their weights (unless the
    /// arrays are `MPI_UNWEIGHTED`).
    fn MPI_Dist_graph_neighbors / PMPI_Dist_graph_neighbors(
        comm: usize,
        maxindegree: c_int,
        sources: *mut c_int,
        sourceweights: *mut c_int,
        maxoutdegree: c_int,
        destinations: *mut c_int,
        destweights: *mut c_int,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let Topo::DistGraph { sources: sv, dests: dv, .. } = topo_of(&c, "MPI_Dist_graph_neighbors")? else {
            return Err(Error::new(ErrorClass::Topology, "MPI_Dist_graph_neighbors: the topology is not a distributed graph"));
        };
        let mi = count(maxindegree, "maxindegree", ErrorClass::Arg)?.min(sv.len());
        let mo = count(maxoutdegree, "maxoutdegree", ErrorClass::Arg)?.min(dv.len());
        let ranks = |v: &[(c_int, c_int)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
        let wts = |v: &[(c_int, c_int)]| v.iter().map(|p| p.1).collect::<Vec<_>>();
        let real = |p: *mut c_int| !matches!(p as usize, UNWEIGHTED | WEIGHTS_EMPTY) && !p.is_null();
        // SAFETY: the caller's arrays of `maxindegree` / `maxoutdegree`.
        unsafe {
            write_ints(sources, &ranks(&sv[..mi]), "sources")?;
            write_ints(destinations, &ranks(&dv[..mo]), "destinations")?;
            if real(sourceweights) {
                write_ints(sourceweights, &wts(&sv[..mi]), "sourceweights")?;
            }
            if real(destweights) {
                write_ints(destweights, &wts(&dv[..mo]), "destweights")?;
            }
        }
        Ok(())
    }
}

/// Sends `out[r]` to every rank `r` of `c` and returns what each rank sent
/// this one, in rank order (over the communicator's shadow-free point to
/// point: `c` is new, so nothing else travels on it yet).
fn exchange_edges(c: &crate::state::Comm, out: Vec<Vec<c_int>>) -> Result<Vec<Vec<c_int>>, Error> {
    use oxmpi::traits::*;
    const TAG: i32 = 0x7eed;
    let mut sends = Vec::with_capacity(out.len());
    for (r, v) in out.into_iter().enumerate() {
        sends.push(
            c.process_at_rank(r as i32)
                .immediate_send_owned_with_tag(v, TAG)?,
        );
    }
    let mut got = Vec::with_capacity(sends.len());
    for r in 0..c.size() {
        let (v, _) = c.process_at_rank(r).receive_vec_with_tag::<c_int>(TAG)?;
        got.push(v);
    }
    for s in sends {
        s.wait()?;
    }
    Ok(got)
}
