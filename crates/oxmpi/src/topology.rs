//! Cartesian process topologies (MPI-4.1 chapter 8): `MPI_Dims_create`,
//! and [`CartesianCommunicator`] (`MPI_Cart_create` and its queries).
//!
//! A Cartesian communicator is an ordinary communicator (the first
//! `prod(dims)` processes of its parent, ranks kept: `reorder` may keep
//! the order, and does here) with its grid beside it. Ranks are laid out
//! row-major: the last dimension varies fastest.

use crate::comm::Communicator;
use crate::error::{Error, ErrorClass, Result};
use crate::universe::Threading::Level;

/// The balanced factorisation of `nnodes` into `k` factors, in
/// non-increasing order (`MPI_Dims_create`'s "as close to each other as
/// possible"), chosen as MPICH chooses: the least difference between the
/// largest and the smallest factor, then the largest smallest factor, then
/// the lexicographically least (the same result as MPICH 5 for every
/// `nnodes` up to 1000 over 1 to 6 dimensions).
fn balanced(nnodes: i32, k: usize) -> Option<Vec<i32>> {
    type Key = (i64, i64, Vec<i32>);
    /// The largest `x` with `x^k <= n`.
    fn root(n: i64, k: usize) -> i64 {
        let mut x = (n as f64).powf(1.0 / k as f64).round() as i64;
        while x > 1 && x.checked_pow(k as u32).map_or(true, |p| p > n) {
            x -= 1;
        }
        while (x + 1).checked_pow(k as u32).is_some_and(|p| p <= n) {
            x += 1;
        }
        x.max(1)
    }
    /// Branch and bound. `divs`: every divisor of the original `nnodes`,
    /// smallest first (those of `n` are among them); `max`: the factor
    /// chosen last (the rest are at most that).
    fn go(divs: &[i64], n: i64, k: usize, max: i64, cur: &mut Vec<i32>, best: &mut Option<Key>) {
        if k == 0 {
            if n == 1 {
                let (hi, lo) = (i64::from(cur[0]), i64::from(cur[cur.len() - 1]));
                let key = (hi - lo, -lo, cur.clone());
                if best.as_ref().map_or(true, |b| key < *b) {
                    *best = Some(key);
                }
            }
            return;
        }
        // The smallest factor left is at most the k-th root of n: no
        // better spread than the largest factor minus that.
        let lo_max = root(n, k).min(max);
        if let (Some(b), Some(&hi)) = (best.as_ref(), cur.first()) {
            if i64::from(hi) - lo_max > b.0 {
                return;
            }
        }
        if k == 1 {
            if n <= max {
                cur.push(n as i32);
                go(divs, 1, 0, n, cur, best);
                cur.pop();
            }
            return;
        }
        // The next factor is at least the k-th root of n (the rest are not
        // larger), most balanced first.
        let from = divs.partition_point(|&d| d.checked_pow(k as u32).is_some_and(|p| p < n));
        for &f in &divs[from..] {
            if f > max.min(n) {
                break;
            }
            if n % f != 0 {
                continue;
            }
            if let (Some(b), None) = (best.as_ref(), cur.first()) {
                // As the largest factor: its spread is at least f minus
                // the k-th root of what is left below it.
                if f - root(n / f, k - 1).min(f) > b.0 {
                    break;
                }
            }
            cur.push(f as i32);
            go(divs, n / f, k - 1, f, cur, best);
            cur.pop();
        }
    }
    if k == 0 {
        return (nnodes == 1).then(Vec::new);
    }
    let n = i64::from(nnodes);
    let mut divs: Vec<i64> = Vec::new();
    let mut d = 1i64;
    while d * d <= n {
        if n % d == 0 {
            divs.push(d);
            divs.push(n / d);
        }
        d += 1;
    }
    divs.sort_unstable();
    divs.dedup();
    let mut best = None;
    go(&divs, n, k, n, &mut Vec::with_capacity(k), &mut best);
    best.map(|b| b.2)
}

/// `MPI_Dims_create`: fills the zero entries of `dims` with a balanced
/// factorisation of `nnodes` (divided by the product of the non-zero
/// entries, which stay), in non-increasing order. `MPI_ERR_DIMS` for a
/// negative entry or an `nnodes` the fixed entries do not divide.
///
/// ```
/// let mut dims = [0, 0, 0];
/// oxmpi::topology::dims_create(24, &mut dims).unwrap();
/// assert_eq!(dims, [4, 3, 2]);
/// let mut fixed = [0, 3];
/// oxmpi::topology::dims_create(12, &mut fixed).unwrap();
/// assert_eq!(fixed, [4, 3]);
/// assert!(oxmpi::topology::dims_create(7, &mut [0, 2]).is_err());
/// ```
pub fn dims_create(nnodes: i32, dims: &mut [i32]) -> Result<()> {
    if nnodes <= 0 {
        return Err(Error::new(
            ErrorClass::Dims,
            format!("nnodes {nnodes} is not positive"),
        ));
    }
    let mut fixed: i32 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d < 0 {
            return Err(Error::new(
                ErrorClass::Dims,
                format!("dims[{i}] = {d} is negative"),
            ));
        }
        if d > 0 {
            fixed = fixed.saturating_mul(d);
        }
    }
    if nnodes % fixed != 0 {
        return Err(Error::new(
            ErrorClass::Dims,
            format!("nnodes {nnodes} is not a multiple of the fixed dimensions' product {fixed}"),
        ));
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    let rest = nnodes / fixed;
    if free == 0 {
        if rest != 1 {
            return Err(Error::new(
                ErrorClass::Dims,
                format!("the fixed dimensions' product {fixed} is not nnodes {nnodes}"),
            ));
        }
        return Ok(());
    }
    let f = balanced(rest, free)
        .ok_or_else(|| Error::new(ErrorClass::Intern, format!("no factorisation of {rest}")))?;
    let mut it = f.into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = it.next().unwrap_or(1);
    }
    Ok(())
}

/// The Cartesian coordinates of `rank` in a grid of `dims` (row-major).
///
/// ```
/// assert_eq!(oxmpi::topology::coordinates(&[2, 3], 4), [1, 1]);
/// ```
pub fn coordinates(dims: &[i32], rank: i32) -> Vec<i32> {
    let mut c = vec![0; dims.len()];
    let mut r = rank;
    for i in (0..dims.len()).rev() {
        c[i] = r % dims[i];
        r /= dims[i];
    }
    c
}

/// The rank at `coords` in a grid of `dims`: wrapped in the dimensions
/// that are `periods`, `MPI_ERR_ARG` outside the others.
///
/// ```
/// use oxmpi::topology::rank_at;
/// assert_eq!(rank_at(&[2, 3], &[true, false], &[1, 1]).unwrap(), 4);
/// assert_eq!(rank_at(&[2, 3], &[true, false], &[3, 1]).unwrap(), 4);
/// assert!(rank_at(&[2, 3], &[true, false], &[1, 3]).is_err());
/// ```
pub fn rank_at(dims: &[i32], periods: &[bool], coords: &[i32]) -> Result<i32> {
    if coords.len() != dims.len() || periods.len() != dims.len() {
        return Err(Error::new(
            ErrorClass::Arg,
            format!(
                "{} coordinates for a grid of {} dimensions",
                coords.len(),
                dims.len()
            ),
        ));
    }
    let mut r: i32 = 0;
    for (i, (&d, &c)) in dims.iter().zip(coords).enumerate() {
        let c = if periods[i] {
            c.rem_euclid(d)
        } else if (0..d).contains(&c) {
            c
        } else {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("coordinate {c} of dimension {i} is outside 0..{d} (not periodic)"),
            ));
        };
        r = r * d + c;
    }
    Ok(r)
}

/// The ranks `disp` steps back and forth along dimension `dim` from
/// `rank` (`MPI_Cart_shift`): `(source, destination)`, `None` past the
/// edge of a non-periodic dimension (`MPI_PROC_NULL`).
///
/// ```
/// use oxmpi::topology::shift;
/// // A 2 x 3 grid, periodic in its first dimension only; rank 4 is (1, 1).
/// assert_eq!(shift(&[2, 3], &[true, false], 4, 0, 1).unwrap(), (Some(1), Some(1)));
/// assert_eq!(shift(&[2, 3], &[true, false], 4, 1, 1).unwrap(), (Some(3), Some(5)));
/// assert_eq!(shift(&[2, 3], &[true, false], 5, 1, 1).unwrap(), (Some(4), None));
/// ```
pub fn shift(
    dims: &[i32],
    periods: &[bool],
    rank: i32,
    dim: usize,
    disp: i32,
) -> Result<(Option<i32>, Option<i32>)> {
    if dim >= dims.len() {
        return Err(Error::new(
            ErrorClass::Arg,
            format!("direction {dim} of a grid of {} dimensions", dims.len()),
        ));
    }
    let me = coordinates(dims, rank);
    let at = |delta: i64| -> Option<i32> {
        let mut co = me.clone();
        let x = i64::from(co[dim]) + delta;
        let n = i64::from(dims[dim]);
        if periods[dim] {
            co[dim] = x.rem_euclid(n) as i32;
        } else if (0..n).contains(&x) {
            co[dim] = x as i32;
        } else {
            return None;
        }
        rank_at(dims, periods, &co).ok()
    };
    Ok((at(-i64::from(disp)), at(i64::from(disp))))
}

/// A grid's extents, periodicity, and this process's place in it
/// (`MPI_Cart_get`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CartesianLayout {
    /// Extent of each dimension.
    pub dims: Vec<i32>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
    /// This process's coordinates.
    pub coords: Vec<i32>,
}

/// A communicator with a Cartesian grid (`MPI_Cart_create`). It is a
/// [`Communicator`] (through `Deref`) for everything else.
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut dims = [0, 0];
/// oxmpi::topology::dims_create(world.size(), &mut dims).unwrap();
/// let grid = world
///     .create_cartesian_communicator(&dims, &[true, false], false)
///     .unwrap()
///     .expect("every process is in the grid");
/// let (left, right) = grid.shift(1, 1).unwrap();
/// println!("{:?}: left {left:?}, right {right:?}", grid.get_layout().coords);
/// ```
pub struct CartesianCommunicator<'u, L: Level> {
    comm: Communicator<'u, L>,
    dims: Vec<i32>,
    periods: Vec<bool>,
}

impl<L: Level> std::fmt::Debug for CartesianCommunicator<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CartesianCommunicator")
            .field("comm", &self.comm)
            .field("dims", &self.dims)
            .field("periods", &self.periods)
            .finish()
    }
}

impl<'u, L: Level> std::ops::Deref for CartesianCommunicator<'u, L> {
    type Target = Communicator<'u, L>;
    fn deref(&self) -> &Communicator<'u, L> {
        &self.comm
    }
}

impl<'u, L: Level> Communicator<'u, L> {
    /// `MPI_Cart_create`: a grid of `dims` (periodic where `periods` says)
    /// over the first `prod(dims)` processes of this communicator, ranks
    /// kept (`reorder` is allowed to keep them); `None` for the processes
    /// beyond the grid. `MPI_ERR_DIMS` for a non-positive extent,
    /// `MPI_ERR_TOPOLOGY` for a grid larger than the communicator.
    /// Collective.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// // A line of all processes but the last one.
    /// let n = world.size() - 1;
    /// let line = world.create_cartesian_communicator(&[n], &[false], true).unwrap();
    /// assert_eq!(line.is_some(), world.rank() < n);
    /// ```
    pub fn create_cartesian_communicator(
        &self,
        dims: &[i32],
        periods: &[bool],
        _reorder: bool,
    ) -> Result<Option<CartesianCommunicator<'u, L>>> {
        if periods.len() != dims.len() {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("{} periods for {} dimensions", periods.len(), dims.len()),
            ));
        }
        let mut n: i32 = 1;
        for (i, &d) in dims.iter().enumerate() {
            if d <= 0 {
                return Err(Error::new(
                    ErrorClass::Dims,
                    format!("dimension {i} has extent {d} (must be positive)"),
                ));
            }
            n = n.checked_mul(d).ok_or_else(|| {
                Error::new(
                    ErrorClass::Dims,
                    "the grid has more than i32::MAX processes",
                )
            })?;
        }
        if n > self.size() {
            return Err(Error::new(
                ErrorClass::Topology,
                format!(
                    "the grid has {n} processes, the communicator only {}",
                    self.size()
                ),
            ));
        }
        let color = (self.rank() < n).then_some(0);
        Ok(self
            .split(color, self.rank())?
            .map(|comm| CartesianCommunicator {
                comm,
                dims: dims.to_vec(),
                periods: periods.to_vec(),
            }))
    }
}

impl<'u, L: Level> CartesianCommunicator<'u, L> {
    /// The number of dimensions (`MPI_Cartdim_get`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let g = world.create_cartesian_communicator(&[world.size()], &[true], false).unwrap().unwrap();
    /// assert_eq!(g.num_dimensions(), 1);
    /// ```
    pub fn num_dimensions(&self) -> usize {
        self.dims.len()
    }

    /// Extents, periods and this process's coordinates (`MPI_Cart_get`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let g = world.create_cartesian_communicator(&[world.size()], &[true], false).unwrap().unwrap();
    /// assert_eq!(g.get_layout().coords, [world.rank()]);
    /// ```
    pub fn get_layout(&self) -> CartesianLayout {
        CartesianLayout {
            dims: self.dims.clone(),
            periods: self.periods.clone(),
            coords: coordinates(&self.dims, self.comm.rank()),
        }
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`); `MPI_ERR_RANK`
    /// outside the grid.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let g = world.create_cartesian_communicator(&[world.size()], &[true], false).unwrap().unwrap();
    /// assert_eq!(g.rank_to_coordinates(0).unwrap(), [0]);
    /// ```
    pub fn rank_to_coordinates(&self, rank: i32) -> Result<Vec<i32>> {
        if !(0..self.comm.size()).contains(&rank) {
            return Err(Error::new(
                ErrorClass::Rank,
                format!("rank {rank} of a grid of {}", self.comm.size()),
            ));
        }
        Ok(coordinates(&self.dims, rank))
    }

    /// The rank at `coords` (`MPI_Cart_rank`; wrapped in periodic
    /// dimensions, `MPI_ERR_ARG` outside the others).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let n = world.size();
    /// let g = world.create_cartesian_communicator(&[n], &[true], false).unwrap().unwrap();
    /// assert_eq!(g.coordinates_to_rank(&[n + 1]).unwrap(), 1 % n);
    /// ```
    pub fn coordinates_to_rank(&self, coords: &[i32]) -> Result<i32> {
        rank_at(&self.dims, &self.periods, coords)
    }

    /// `MPI_Cart_shift`: the ranks `displacement` steps back and forth
    /// along `dimension`, `(source, destination)`; `None` past the edge of
    /// a non-periodic dimension.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let g = world.create_cartesian_communicator(&[world.size()], &[false], false).unwrap().unwrap();
    /// let (from, to) = g.shift(0, 1).unwrap();
    /// let dst = to.map_or(g.null_process(), |r| g.process_at_rank(r));
    /// let src = from.map_or(g.null_process(), |r| g.process_at_rank(r));
    /// let mut got = -1;
    /// dst.send_receive_into(&g.rank(), 0, &src, &mut got, 0).unwrap();
    /// assert_eq!(got, from.unwrap_or(-1));
    /// ```
    pub fn shift(&self, dimension: usize, displacement: i32) -> Result<(Option<i32>, Option<i32>)> {
        shift(
            &self.dims,
            &self.periods,
            self.comm.rank(),
            dimension,
            displacement,
        )
    }

    /// `MPI_Cart_sub`: the sub-grid of the dimensions `retain` keeps that
    /// holds this process (one per value of the other dimensions'
    /// coordinates). Collective.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut dims = [0, 0];
    /// oxmpi::topology::dims_create(world.size(), &mut dims).unwrap();
    /// let g = world.create_cartesian_communicator(&dims, &[false, false], false).unwrap().unwrap();
    /// let row = g.subgroup(&[false, true]).unwrap();
    /// assert_eq!(row.size(), dims[1]);
    /// ```
    pub fn subgroup(&self, retain: &[bool]) -> Result<CartesianCommunicator<'u, L>> {
        if retain.len() != self.dims.len() {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("{} flags for {} dimensions", retain.len(), self.dims.len()),
            ));
        }
        let me = coordinates(&self.dims, self.comm.rank());
        let mut color: u32 = 0;
        let (mut dims, mut periods) = (Vec::new(), Vec::new());
        for i in 0..self.dims.len() {
            if retain[i] {
                dims.push(self.dims[i]);
                periods.push(self.periods[i]);
            } else {
                color = color * self.dims[i] as u32 + me[i] as u32;
            }
        }
        let comm = self
            .comm
            .split(Some(color), self.comm.rank())?
            .ok_or_else(|| Error::new(ErrorClass::Intern, "a split with a color gave nothing"))?;
        Ok(CartesianCommunicator {
            comm,
            dims,
            periods,
        })
    }

    /// The communicator without its grid.
    pub fn into_communicator(self) -> Communicator<'u, L> {
        self.comm
    }
}

#[cfg(test)]
mod tests {
    use super::dims_create;

    #[test]
    fn dims_are_balanced_as_mpich_makes_them() {
        let cases: &[(i32, &[i32], &[i32])] = &[
            (6, &[0, 0], &[3, 2]),
            (7, &[0, 0], &[7, 1]),
            (12, &[0, 0], &[4, 3]),
            (16, &[0, 0, 0], &[4, 2, 2]),
            (24, &[0, 0, 0], &[4, 3, 2]),
            (36, &[0, 0, 0], &[4, 3, 3]),
            (360, &[0, 0, 0], &[10, 6, 6]),
            (20, &[0, 0, 0, 0], &[5, 2, 2, 1]),
            (64, &[0, 0, 0], &[4, 4, 4]),
            (1, &[0, 0], &[1, 1]),
            (6, &[0, 3, 0], &[2, 3, 1]),
        ];
        for &(n, dims, want) in cases {
            let mut d = dims.to_vec();
            dims_create(n, &mut d).unwrap();
            assert_eq!(d, want, "{n} {dims:?}");
        }
        assert!(dims_create(8, &mut []).is_err());
        assert!(dims_create(7, &mut [0, 2]).is_err());
        assert!(dims_create(6, &mut [-1, 0]).is_err());
        assert!(dims_create(0, &mut [0]).is_err());
    }

    #[test]
    fn a_large_dims_create_is_quick() {
        let t = std::time::Instant::now();
        let mut d = [0; 8];
        dims_create(1 << 30, &mut d).unwrap();
        assert_eq!(d.iter().product::<i32>(), 1 << 30);
        let mut d = [0; 6];
        dims_create(720_720, &mut d).unwrap();
        assert_eq!(d.iter().product::<i32>(), 720_720);
        // 1344 divisors.
        let mut d = [0; 8];
        dims_create(735_134_400, &mut d).unwrap();
        assert_eq!(d.iter().product::<i32>(), 735_134_400);
        let mut d = [0; 10];
        dims_create(i32::MAX, &mut d).unwrap();
        assert_eq!(d[0], i32::MAX);
        assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
    }
}
