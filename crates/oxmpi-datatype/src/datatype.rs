//! [`Datatype`]: predefined and derived MPI datatypes, their bounds and
//! their flattened layout.
//!
//! # The rules (MPI 4.1, §5.1)
//!
//! A datatype is a *type map* `{(type_0, disp_0), ..., (type_{n-1},
//! disp_{n-1})}` of primitives at byte displacements, plus optional lower- and
//! upper-bound *markers* (since MPI-3 only [`Datatype::resized`] creates
//! them; it sets both). With `size(t)` the sum of the primitive sizes:
//!
//! * without markers, `lb = min_j disp_j` and
//!   `ub = max_j (disp_j + size(type_j)) + ε`, where `ε` is the padding that
//!   rounds `ub - lb` up to a multiple of the largest primitive alignment;
//! * with markers, `lb` is the smallest lower-bound marker and `ub` the
//!   largest upper-bound marker; data entries do not count. Markers are
//!   *sticky*: a constructor that includes a marked type keeps its markers;
//! * `extent = ub - lb`; `true_lb = min_j disp_j` and
//!   `true_ub = max_j (disp_j + size(type_j))` ignore markers and padding;
//!   `true_extent = true_ub - true_lb`.
//!
//! Derived constructors concatenate *copies* of old types, copy by copy, in
//! the order the arguments list them (this order is the packed order). This
//! implementation treats each copy of an old type `t` at displacement `d` as
//! contributing `[d + lb(t), d + ub(t))` to the new bounds (or its markers
//! `d + lb(t)`, `d + ub(t)` if `t` is marked), and `[d + true_lb(t),
//! d + true_ub(t))` to the true bounds; a copy of a type without data and
//! without markers contributes nothing. The padding `ε` is applied by
//! [`Datatype::structured`] only (as MPICH does): the other constructors
//! repeat an old type at multiples of its already padded extent. A type
//! without data and without markers has `lb = ub = true_lb = true_ub = 0`;
//! a type without data has `true_lb = true_ub = 0`.
//!
//! Counts, block lengths and dimensions are `isize` (like `MPI_Count`) so
//! that negative values are reported as [`DatatypeError::NegativeCount`];
//! displacements and strides may be negative. Every size, bound and
//! displacement must fit in `isize` bytes ([`DatatypeError::Overflow`]).
//! Types without data (count 0, block length 0, or built from such types)
//! are legal MPI types: they have size 0, pack to nothing and count zero
//! elements.
//!
//! The flattened layout is built once, by the constructor; there is no
//! separate commit step (`MPI_Type_commit` is a no-op on these types).

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::convertor::Convertor;
use crate::error::{DatatypeError, Result};
use crate::layout::{self, Node};
use crate::primitive::{Combiner, Distribution, Order, Pair, Primitive};
use crate::signature::{self, Sig, Signature};

/// An MPI datatype, predefined or derived. Immutable; cloning is an `Arc`
/// increment. `Send + Sync`.
#[derive(Clone)]
pub struct Datatype(Arc<Inner>);

#[derive(Clone)]
struct Inner {
    combiner: Combiner,
    size: usize,
    lb: isize,
    ub: isize,
    true_lb: isize,
    true_ub: isize,
    /// Bounds come from markers (a resized type inside).
    sticky: bool,
    /// Largest primitive alignment (1 without data).
    align: usize,
    layout: Arc<Node>,
    sig: Arc<Sig>,
}

fn overflow(what: &'static str) -> DatatypeError {
    DatatypeError::Overflow { what }
}

fn nonneg(value: isize, what: &'static str) -> Result<usize> {
    usize::try_from(value).map_err(|_| DatatypeError::NegativeCount { what, value })
}

fn to_isize(v: i128, what: &'static str) -> Result<isize> {
    isize::try_from(v).map_err(|_| overflow(what))
}

/// `(min, max)` of `{k * step : 0 <= k < n}` for `n >= 1`. Each is below
/// 2^126 in magnitude.
fn span(n: usize, step: isize) -> (i128, i128) {
    let last = (n as i128 - 1) * step as i128;
    (last.min(0), last.max(0))
}

fn widen(slot: &mut Option<(i128, i128)>, lo: i128, hi: i128) {
    *slot = Some(match *slot {
        None => (lo, hi),
        Some((a, b)) => (a.min(lo), b.max(hi)),
    });
}

/// Accumulates the size and bounds of a new type, copy group by copy group.
#[derive(Default)]
struct Acc {
    size: i128,
    data: Option<(i128, i128)>,
    plain: Option<(i128, i128)>,
    marks: Option<(i128, i128)>,
    align: usize,
}

impl Acc {
    /// `n >= 1` copies of `t` whose displacements range over `[dmin, dmax]`.
    fn copies(&mut self, t: &Datatype, n: u128, dmin: i128, dmax: i128) -> Result<()> {
        let t = &*t.0;
        let add = i128::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(t.size as i128))
            .ok_or(overflow("size"))?;
        self.size = self.size.checked_add(add).ok_or(overflow("size"))?;
        let (lo, hi) = (dmin, dmax);
        let at = |d: i128, x: isize| d.checked_add(x as i128).ok_or(overflow("bounds"));
        if t.size > 0 {
            widen(&mut self.data, at(lo, t.true_lb)?, at(hi, t.true_ub)?);
            self.align = self.align.max(t.align);
            if !t.sticky {
                widen(&mut self.plain, at(lo, t.lb)?, at(hi, t.ub)?);
            }
        }
        if t.sticky {
            widen(&mut self.marks, at(lo, t.lb)?, at(hi, t.ub)?);
        }
        Ok(())
    }

    /// Final bounds; `pad` applies the struct alignment padding `ε`.
    fn finish(
        self,
        combiner: Combiner,
        pad: bool,
        layout: impl FnOnce() -> Result<Arc<Node>>,
        sig: impl FnOnce() -> Arc<Sig>,
    ) -> Result<Datatype> {
        if self.size > isize::MAX as i128 {
            return Err(overflow("size"));
        }
        let align = self.align.max(1);
        let (lb, ub, sticky) = if let Some((lb, ub)) = self.marks {
            (lb, ub, true)
        } else if let Some((lb, ub)) = self.plain {
            let ub = if pad {
                let a = align as i128;
                let ext = ub - lb;
                lb + (ext + a - 1).div_euclid(a) * a
            } else {
                ub
            };
            (lb, ub, false)
        } else {
            (0, 0, false)
        };
        let (true_lb, true_ub) = self.data.unwrap_or((0, 0));
        to_isize(ub - lb, "extent")?;
        to_isize(true_ub - true_lb, "true extent")?;
        let inner = Inner {
            combiner,
            size: self.size as usize,
            lb: to_isize(lb, "lower bound")?,
            ub: to_isize(ub, "upper bound")?,
            true_lb: to_isize(true_lb, "true lower bound")?,
            true_ub: to_isize(true_ub, "true upper bound")?,
            sticky,
            align,
            layout: layout()?,
            sig: sig(),
        };
        Ok(Datatype(Arc::new(inner)))
    }
}

fn predefined_table() -> &'static (Vec<Datatype>, Vec<Datatype>) {
    static TABLE: OnceLock<(Vec<Datatype>, Vec<Datatype>)> = OnceLock::new();
    TABLE.get_or_init(|| {
        let prims: Vec<Datatype> = Primitive::ALL
            .iter()
            .map(|&p| {
                Datatype(Arc::new(Inner {
                    combiner: Combiner::Primitive(p),
                    size: p.size(),
                    lb: 0,
                    ub: p.size() as isize,
                    true_lb: 0,
                    true_ub: p.size() as isize,
                    sticky: false,
                    align: p.align(),
                    layout: layout::block(0, p.size()),
                    sig: signature::prim(p),
                }))
            })
            .collect();
        let pairs = Pair::ALL
            .iter()
            .map(|&pair| {
                let (a, b) = pair.members();
                let second = a.size().next_multiple_of(b.align()) as isize;
                let t = Datatype::structured(
                    &[1, 1],
                    &[0, second],
                    &[prims[a.index()].clone(), prims[b.index()].clone()],
                )
                .expect("pair types are valid");
                let mut inner = (*t.0).clone();
                inner.combiner = Combiner::Pair(pair);
                Datatype(Arc::new(inner))
            })
            .collect();
        (prims, pairs)
    })
}

/// Shared checks and bookkeeping of the (h)indexed family: blocks of
/// `blocklens[i]` copies of `old` at byte displacements `displs[i]`.
fn indexed_bytes(
    combiner: Combiner,
    blocklens: &[usize],
    displs: &[i128],
    old: &Datatype,
) -> Result<Datatype> {
    let e = old.extent();
    let mut acc = Acc::default();
    let mut total: u128 = 0;
    let mut byte_displs = Vec::with_capacity(displs.len());
    for (&b, &d) in blocklens.iter().zip(displs) {
        if b == 0 {
            byte_displs.push(0);
            continue;
        }
        let d = to_isize(d, "displacement")?;
        byte_displs.push(d);
        let (lo, hi) = span(b, e);
        acc.copies(old, b as u128, d as i128 + lo, d as i128 + hi)?;
        total += b as u128;
    }
    acc.finish(
        combiner,
        false,
        || {
            let parts = blocklens
                .iter()
                .zip(&byte_displs)
                .filter(|(&b, _)| b > 0)
                .map(|(&b, &d)| (d, layout::repeat(b, e, &old.0.layout)))
                .collect();
            Ok(layout::seq(parts))
        },
        || signature::repeat(usize::try_from(total).unwrap_or(usize::MAX), &old.0.sig),
    )
}

fn check_len(what: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(DatatypeError::LengthMismatch {
            what,
            expected,
            found,
        })
    }
}

fn nonneg_all(values: &[isize], what: &'static str) -> Result<Vec<usize>> {
    values.iter().map(|&v| nonneg(v, what)).collect()
}

impl Datatype {
    // ----------------------------------------------------------------------
    // Predefined types.

    /// The predefined datatype of a primitive: size = extent = alignment =
    /// the primitive's size, `lb = true_lb = 0`, contiguous. Cached: every
    /// call returns a clone of the same type.
    pub fn predefined(p: Primitive) -> Datatype {
        predefined_table().0[p.index()].clone()
    }

    /// A predefined pair type (`MPI_2INT`, `MPI_DOUBLE_INT`, ...), laid out
    /// like the C struct `{value; int index}`: see [`Pair`].
    pub fn pair(p: Pair) -> Datatype {
        predefined_table().1[p.index()].clone()
    }

    /// `MPI_INT8_T`.
    pub fn i8() -> Datatype {
        Self::predefined(Primitive::I8)
    }
    /// `MPI_INT16_T`.
    pub fn i16() -> Datatype {
        Self::predefined(Primitive::I16)
    }
    /// `MPI_INT32_T` (`MPI_INT`).
    pub fn i32() -> Datatype {
        Self::predefined(Primitive::I32)
    }
    /// `MPI_INT64_T`.
    pub fn i64() -> Datatype {
        Self::predefined(Primitive::I64)
    }
    /// `MPI_UINT8_T`.
    pub fn u8() -> Datatype {
        Self::predefined(Primitive::U8)
    }
    /// `MPI_UINT16_T`.
    pub fn u16() -> Datatype {
        Self::predefined(Primitive::U16)
    }
    /// `MPI_UINT32_T`.
    pub fn u32() -> Datatype {
        Self::predefined(Primitive::U32)
    }
    /// `MPI_UINT64_T`.
    pub fn u64() -> Datatype {
        Self::predefined(Primitive::U64)
    }
    /// `MPI_FLOAT`.
    pub fn f32() -> Datatype {
        Self::predefined(Primitive::F32)
    }
    /// `MPI_DOUBLE`.
    pub fn f64() -> Datatype {
        Self::predefined(Primitive::F64)
    }
    /// `MPI_C_BOOL` as one byte.
    pub fn bool() -> Datatype {
        Self::predefined(Primitive::Bool)
    }
    /// A Rust `char` as a 4-byte `u32`.
    pub fn char() -> Datatype {
        Self::predefined(Primitive::Char)
    }
    /// `MPI_BYTE`.
    pub fn byte() -> Datatype {
        Self::predefined(Primitive::Byte)
    }
    /// `MPI_PACKED`.
    pub fn packed() -> Datatype {
        Self::predefined(Primitive::Packed)
    }

    // ----------------------------------------------------------------------
    // Derived constructors.

    /// `MPI_Type_contiguous`: `count` copies of `old`, copy `i` at
    /// `i * extent(old)`.
    ///
    /// `size = count * size(old)`; for `count >= 1` and `old` without markers,
    /// `lb = lb(old) + min(0, (count-1) * extent(old))`,
    /// `ub = ub(old) + max(0, (count-1) * extent(old))`; `count = 0` gives
    /// an empty type.
    pub fn contiguous(count: isize, old: &Datatype) -> Result<Datatype> {
        let n = nonneg(count, "count")?;
        let e = old.extent();
        let mut acc = Acc::default();
        if n > 0 {
            let (lo, hi) = span(n, e);
            acc.copies(old, n as u128, lo, hi)?;
        }
        acc.finish(
            Combiner::Contiguous,
            false,
            || Ok(layout::repeat(n, e, &old.0.layout)),
            || signature::repeat(n, &old.0.sig),
        )
    }

    /// `MPI_Type_vector`: `count` blocks of `blocklen` copies of `old`;
    /// block `i` starts at `i * stride * extent(old)`, copy `j` of a block at
    /// `j * extent(old)` from the block start. Equal to
    /// [`hvector`](Self::hvector) with a byte stride of
    /// `stride * extent(old)`; `stride` may be negative or zero.
    ///
    /// `size = count * blocklen * size(old)`; for `old` without markers and
    /// `count, blocklen >= 1`, with `S` the byte stride and `E = extent(old)`:
    /// `lb = lb(old) + min(0, (count-1) S) + min(0, (blocklen-1) E)` and
    /// `ub = ub(old) + max(0, (count-1) S) + max(0, (blocklen-1) E)`.
    pub fn vector(
        count: isize,
        blocklen: isize,
        stride: isize,
        old: &Datatype,
    ) -> Result<Datatype> {
        let bytes = stride as i128 * old.extent() as i128;
        Self::hvector_impl(Combiner::Vector, count, blocklen, bytes, old)
    }

    /// `MPI_Type_create_hvector`: like [`vector`](Self::vector) with the
    /// stride between block starts given in bytes.
    pub fn hvector(
        count: isize,
        blocklen: isize,
        stride_bytes: isize,
        old: &Datatype,
    ) -> Result<Datatype> {
        Self::hvector_impl(
            Combiner::Hvector,
            count,
            blocklen,
            stride_bytes as i128,
            old,
        )
    }

    fn hvector_impl(
        combiner: Combiner,
        count: isize,
        blocklen: isize,
        stride: i128,
        old: &Datatype,
    ) -> Result<Datatype> {
        let c = nonneg(count, "count")?;
        let b = nonneg(blocklen, "blocklen")?;
        let e = old.extent();
        let mut acc = Acc::default();
        let mut s = 0isize;
        if c > 0 && b > 0 {
            // With one block the stride never enters the type map.
            s = if c > 1 {
                to_isize(stride, "stride")?
            } else {
                0
            };
            let (slo, shi) = span(c, s);
            let (elo, ehi) = span(b, e);
            acc.copies(old, c as u128 * b as u128, slo + elo, shi + ehi)?;
        }
        acc.finish(
            combiner,
            false,
            || {
                let block = layout::repeat(b, e, &old.0.layout);
                Ok(layout::repeat(c, s, &block))
            },
            || signature::repeat(c.saturating_mul(b), &old.0.sig),
        )
    }

    /// `MPI_Type_indexed`: block `i` is `blocklens[i]` copies of `old`
    /// starting at `displs[i] * extent(old)`; blocks are packed in argument
    /// order (displacements need not be sorted and may be negative).
    ///
    /// `size = sum(blocklens) * size(old)`; bounds are the min/max over the
    /// non-empty blocks of `[d_i + lb(old) + min(0, (b_i-1) E),
    /// d_i + ub(old) + max(0, (b_i-1) E)]` (`d_i` in bytes).
    pub fn indexed(blocklens: &[isize], displs: &[isize], old: &Datatype) -> Result<Datatype> {
        check_len("displs", blocklens.len(), displs.len())?;
        let b = nonneg_all(blocklens, "blocklen")?;
        let e = old.extent() as i128;
        let d: Vec<i128> = displs.iter().map(|&d| d as i128 * e).collect();
        indexed_bytes(Combiner::Indexed, &b, &d, old)
    }

    /// `MPI_Type_create_hindexed`: like [`indexed`](Self::indexed) with
    /// displacements in bytes.
    pub fn hindexed(
        blocklens: &[isize],
        displs_bytes: &[isize],
        old: &Datatype,
    ) -> Result<Datatype> {
        check_len("displs", blocklens.len(), displs_bytes.len())?;
        let b = nonneg_all(blocklens, "blocklen")?;
        let d: Vec<i128> = displs_bytes.iter().map(|&d| d as i128).collect();
        indexed_bytes(Combiner::Hindexed, &b, &d, old)
    }

    /// `MPI_Type_create_indexed_block`: [`indexed`](Self::indexed) with the
    /// same block length for every block.
    pub fn indexed_block(blocklen: isize, displs: &[isize], old: &Datatype) -> Result<Datatype> {
        let b = nonneg(blocklen, "blocklen")?;
        let e = old.extent() as i128;
        let d: Vec<i128> = displs.iter().map(|&d| d as i128 * e).collect();
        indexed_bytes(Combiner::IndexedBlock, &vec![b; d.len()], &d, old)
    }

    /// `MPI_Type_create_hindexed_block`: [`hindexed`](Self::hindexed) with
    /// the same block length for every block.
    pub fn hindexed_block(
        blocklen: isize,
        displs_bytes: &[isize],
        old: &Datatype,
    ) -> Result<Datatype> {
        let b = nonneg(blocklen, "blocklen")?;
        let d: Vec<i128> = displs_bytes.iter().map(|&d| d as i128).collect();
        indexed_bytes(Combiner::HindexedBlock, &vec![b; d.len()], &d, old)
    }

    /// `MPI_Type_create_struct`: block `i` is `blocklens[i]` copies of
    /// `types[i]` starting at byte displacement `displs[i]`, blocks packed in
    /// argument order.
    ///
    /// Bounds as for [`hindexed`](Self::hindexed) with a per-block type,
    /// then, when no block carries markers, `ub` is padded so that the
    /// extent is a multiple of the largest primitive alignment (the `ε` of
    /// the standard): `struct {f64; i32}` has size 12 and extent 16, like
    /// the C struct.
    pub fn structured(
        blocklens: &[isize],
        displs: &[isize],
        types: &[Datatype],
    ) -> Result<Datatype> {
        check_len("displs", blocklens.len(), displs.len())?;
        check_len("types", blocklens.len(), types.len())?;
        let b = nonneg_all(blocklens, "blocklen")?;
        let mut acc = Acc::default();
        for ((&b, &d), t) in b.iter().zip(displs).zip(types) {
            if b > 0 {
                let (lo, hi) = span(b, t.extent());
                acc.copies(t, b as u128, d as i128 + lo, d as i128 + hi)?;
            }
        }
        acc.finish(
            Combiner::Struct,
            true,
            || {
                let parts = b
                    .iter()
                    .zip(displs)
                    .zip(types)
                    .filter(|((&b, _), _)| b > 0)
                    .map(|((&b, &d), t)| (d, layout::repeat(b, t.extent(), &t.0.layout)))
                    .collect();
                Ok(layout::seq(parts))
            },
            || {
                signature::seq(
                    b.iter()
                        .zip(types)
                        .map(|(&b, t)| signature::repeat(b, &t.0.sig))
                        .collect(),
                )
            },
        )
    }

    /// `MPI_Type_create_resized`: the type map of `old` with markers set to
    /// `lb` and `ub = lb + extent`. Size, true bounds and layout are those of
    /// `old`; the markers are sticky (see the module rules). `extent` may be
    /// zero or negative.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Result<Datatype> {
        let ub = lb.checked_add(extent).ok_or(overflow("upper bound"))?;
        let mut inner = (*old.0).clone();
        inner.combiner = Combiner::Resized;
        inner.lb = lb;
        inner.ub = ub;
        inner.sticky = true;
        Ok(Datatype(Arc::new(inner)))
    }

    /// `MPI_Type_create_subarray`: the `subsizes` block starting at
    /// `starts` of an array of `sizes` elements of `old` stored in `order`.
    ///
    /// Requires `ndims >= 1`, `sizes[i] >= 1`, `1 <= subsizes[i] <= sizes[i]`,
    /// `0 <= starts[i] <= sizes[i] - subsizes[i]`. The type map lists the
    /// selected elements in storage order (element at multi-index `x` at
    /// byte `extent(old) * linear(x)`); the result is resized to `lb = 0`,
    /// `extent = prod(sizes) * extent(old)`, so consecutive subarray types
    /// tile consecutive full arrays.
    pub fn subarray(
        sizes: &[isize],
        subsizes: &[isize],
        starts: &[isize],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype> {
        let n = sizes.len();
        if n == 0 {
            return Err(DatatypeError::InvalidArgument(
                "subarray needs at least one dimension".into(),
            ));
        }
        check_len("subsizes", n, subsizes.len())?;
        check_len("starts", n, starts.len())?;
        for i in 0..n {
            let (sz, sub, st) = (
                nonneg(sizes[i], "size")?,
                nonneg(subsizes[i], "subsize")?,
                nonneg(starts[i], "start")?,
            );
            if sz == 0 || sub == 0 || sub > sz || st > sz - sub {
                return Err(DatatypeError::InvalidArgument(format!(
                    "subarray dimension {i}: size {sz}, subsize {sub}, start {st} \
                     (need size >= 1, 1 <= subsize <= size, start <= size - subsize)"
                )));
            }
        }
        // Dimensions from fastest- to slowest-varying.
        let dims: Vec<usize> = match order {
            Order::C => (0..n).rev().collect(),
            Order::Fortran => (0..n).collect(),
        };
        let mut stride = old.extent() as i128;
        let mut disp: i128 = 0;
        let mut t = old.clone();
        for &d in &dims {
            let s = to_isize(stride, "subarray stride")?;
            t = Self::hvector(subsizes[d], 1, s, &t)?;
            disp += starts[d] as i128 * stride;
            stride = stride
                .checked_mul(sizes[d] as i128)
                .ok_or(overflow("subarray extent"))?;
        }
        let disp = to_isize(disp, "subarray displacement")?;
        let placed = Self::hindexed_block(1, &[disp], &t)?;
        let mut r = Self::resized(&placed, 0, to_isize(stride, "subarray extent")?)?;
        if let Some(inner) = Arc::get_mut(&mut r.0) {
            inner.combiner = Combiner::Subarray;
        }
        Ok(r)
    }

    /// `MPI_Type_create_darray`: the part that process `rank` of `size`
    /// owns of an array of `gsizes` elements of `old` stored in `order`,
    /// distributed over a process grid of `psizes` (the process's grid
    /// coordinates are those of `rank` in row-major order, whatever
    /// `order`).
    ///
    /// As the standard defines it (MPI 4.1 §5.1.4): dimension by dimension
    /// from the fastest-varying, the type so far is replaced by
    /// `cyclic(darg, gsize, r, psize)` of it: the process's blocks of
    /// `darg` elements (the last one possibly shorter), at element
    /// `r * darg + k * psize * darg`, resized to `lb = 0` and `extent =
    /// gsize * extent`. A block distribution is one cyclic round with
    /// `darg = ceil(gsize / psize)` by default; `None` is a block
    /// distribution over one process. The result has `lb = 0` and `extent =
    /// prod(gsizes) * extent(old)`.
    ///
    /// Errors (`InvalidArgument`): no dimension, `size < 1`, `rank` outside
    /// `0..size`, a non-positive global or grid size, a grid whose product
    /// is not `size`, a non-positive block size, a block distribution whose
    /// blocks do not cover the dimension, `Distribution::None` over a grid
    /// dimension other than 1.
    pub fn darray(
        size: isize,
        rank: isize,
        gsizes: &[isize],
        distribs: &[Distribution],
        psizes: &[isize],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype> {
        let n = gsizes.len();
        let bad = |m: String| Err(DatatypeError::InvalidArgument(m));
        if n == 0 {
            return bad("darray needs at least one dimension".into());
        }
        check_len("distribs", n, distribs.len())?;
        check_len("psizes", n, psizes.len())?;
        if size < 1 || rank < 0 || rank >= size {
            return bad(format!(
                "darray rank {rank} of size {size} (need size >= 1, 0 <= rank < size)"
            ));
        }
        let mut grid: i128 = 1;
        for i in 0..n {
            if gsizes[i] < 1 || psizes[i] < 1 {
                return bad(format!(
                    "darray dimension {i}: global size {}, grid size {} (both must be positive)",
                    gsizes[i], psizes[i]
                ));
            }
            grid = grid.saturating_mul(psizes[i] as i128);
        }
        if grid != size as i128 {
            return bad(format!(
                "darray process grid {psizes:?} has {grid} processes, not {size}"
            ));
        }
        // Grid coordinates of `rank`, row-major.
        let mut coords = vec![0isize; n];
        let (mut rest, mut procs) = (rank, size);
        for i in 0..n {
            procs /= psizes[i];
            coords[i] = rest / procs;
            rest %= procs;
        }
        let dims: Vec<usize> = match order {
            Order::C => (0..n).rev().collect(),
            Order::Fortran => (0..n).collect(),
        };
        let mut t = old.clone();
        for d in dims {
            let (g, p) = (gsizes[d], psizes[d]);
            let (darg, psize, r) = match distribs[d] {
                Distribution::None => {
                    if p != 1 {
                        return bad(format!(
                            "darray dimension {d} is not distributed but its grid size is {p}, not 1"
                        ));
                    }
                    (g, 1, 0)
                }
                Distribution::Block(darg) => {
                    let b = match darg {
                        None => (g + p - 1) / p,
                        Some(b) if b >= 1 && (b as i128) * (p as i128) >= g as i128 => b,
                        Some(b) => {
                            return bad(format!(
                                "darray dimension {d}: block size {b} over {p} processes \
                                 does not cover {g} elements"
                            ))
                        }
                    };
                    (b, p, coords[d])
                }
                Distribution::Cyclic(darg) => match darg {
                    None => (1, p, coords[d]),
                    Some(b) if b >= 1 => (b, p, coords[d]),
                    Some(b) => {
                        return bad(format!(
                            "darray dimension {d}: cyclic block size {b} is not positive"
                        ))
                    }
                },
            };
            t = Self::cyclic(darg, g, r, psize, &t)?;
        }
        if let Some(inner) = Arc::get_mut(&mut t.0) {
            inner.combiner = Combiner::Darray;
        } else {
            let mut inner = (*t.0).clone();
            inner.combiner = Combiner::Darray;
            t = Datatype(Arc::new(inner));
        }
        Ok(t)
    }

    /// The standard's `cyclic(darg, gsize, r, psize, old)` of
    /// [`darray`](Self::darray): process `r`'s blocks of `darg` copies of
    /// `old` (the last one cut at `gsize`), resized to `[0, gsize *
    /// extent(old))`.
    fn cyclic(
        darg: isize,
        gsize: isize,
        r: isize,
        psize: isize,
        old: &Datatype,
    ) -> Result<Datatype> {
        let ex = old.extent() as i128;
        let (darg_, gsize_, r_, psize_) = (darg as i128, gsize as i128, r as i128, psize as i128);
        let round = psize_ * darg_;
        let first = r_ * darg_;
        let extent = to_isize(gsize_ * ex, "darray extent")?;
        let placed = if first >= gsize_ {
            Self::contiguous(0, old)?
        } else {
            // Blocks starting below gsize; the last may be short.
            let nblocks = (gsize_ - first + round - 1) / round;
            let last_len = darg_.min(gsize_ - (first + (nblocks - 1) * round));
            let (full, tail) = if last_len == darg_ {
                (nblocks, 0)
            } else {
                (nblocks - 1, last_len)
            };
            let stride = to_isize(round * ex, "darray stride")?;
            let at = to_isize(first * ex, "darray displacement")?;
            let blocks = Self::hvector(to_isize(full, "darray blocks")?, darg, stride, old)?;
            if tail == 0 {
                Self::hindexed_block(1, &[at], &blocks)?
            } else {
                let tail_at = to_isize((first + full * round) * ex, "darray displacement")?;
                Self::structured(
                    &[1, to_isize(tail, "darray block")?],
                    &[at, tail_at],
                    &[blocks, old.clone()],
                )?
            }
        };
        Self::resized(&placed, 0, extent)
    }

    /// `MPI_Type_dup`: a new handle with the same type map (and markers).
    pub fn dup(&self) -> Datatype {
        let mut inner = (*self.0).clone();
        inner.combiner = Combiner::Dup;
        Datatype(Arc::new(inner))
    }

    // ----------------------------------------------------------------------
    // Queries.

    /// How the type was made.
    pub fn combiner(&self) -> Combiner {
        self.0.combiner
    }

    /// The primitive, if this is a predefined primitive type.
    pub fn as_primitive(&self) -> Option<Primitive> {
        match self.0.combiner {
            Combiner::Primitive(p) => Some(p),
            _ => None,
        }
    }

    /// The pair kind, if this is a predefined pair type.
    pub fn as_pair(&self) -> Option<Pair> {
        match self.0.combiner {
            Combiner::Pair(p) => Some(p),
            _ => None,
        }
    }

    /// Whether `self` and `other` are the same handle (not merely equal type
    /// maps).
    pub fn same_handle(&self, other: &Datatype) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// `MPI_Type_size`: bytes of data in one element (its packed size).
    pub fn size(&self) -> usize {
        self.0.size
    }

    /// `MPI_Type_get_extent` lower bound.
    pub fn lb(&self) -> isize {
        self.0.lb
    }

    /// Upper bound: `lb + extent`.
    pub fn ub(&self) -> isize {
        self.0.ub
    }

    /// `extent = ub - lb`: the stride between consecutive elements of a
    /// `count`.
    pub fn extent(&self) -> isize {
        self.0.ub - self.0.lb
    }

    /// `MPI_Type_get_true_extent` lower bound: the lowest data byte (0
    /// without data).
    pub fn true_lb(&self) -> isize {
        self.0.true_lb
    }

    /// One past the highest data byte (0 without data).
    pub fn true_ub(&self) -> isize {
        self.0.true_ub
    }

    /// `true_ub - true_lb`: the span of the data bytes.
    pub fn true_extent(&self) -> isize {
        self.0.true_ub - self.0.true_lb
    }

    /// Whether the bounds come from markers (a resized type inside).
    pub fn has_explicit_bounds(&self) -> bool {
        self.0.sticky
    }

    /// The largest alignment of the primitives (1 without data).
    pub fn alignment(&self) -> usize {
        self.0.align
    }

    /// Whether one element's data occupies `[true_lb, true_lb + size)` with
    /// no gap and in packed order (true for a type without data). `count`
    /// elements are contiguous iff additionally `extent == size` (see
    /// [`is_contiguous_for`](Self::is_contiguous_for)).
    pub fn is_contiguous(&self) -> bool {
        matches!(*self.0.layout, Node::Empty | Node::Block { .. })
    }

    /// Whether `count` elements, element `i` at `i * extent`, form one
    /// contiguous run in packed order (true for `count == 0`).
    pub fn is_contiguous_for(&self, count: usize) -> bool {
        count == 0
            || self.is_contiguous()
                && (count == 1 || self.size() == 0 || self.extent() == self.size() as isize)
    }

    /// Number of primitives (basic elements) in one element.
    pub fn element_count(&self) -> usize {
        self.0.sig.elems()
    }

    /// The type signature of one element: its primitives in packed order, as
    /// `(primitive, run length)` with adjacent runs of the same primitive
    /// merged.
    pub fn signature(&self) -> Signature<'_> {
        Signature::new(&self.0.sig, 1)
    }

    /// The single primitive this type is made of, if there is exactly one
    /// kind (what predefined reduction operations require).
    pub fn uniform_primitive(&self) -> Option<Primitive> {
        self.0.sig.uniform()
    }

    /// `MPI_Get_count`: whole elements in `bytes` packed bytes, `None`
    /// (`MPI_UNDEFINED`) if `bytes` is not a multiple of the size. A type of
    /// size 0 gives `Some(0)`.
    pub fn get_count(&self, bytes: usize) -> Option<usize> {
        let s = self.size();
        if s == 0 {
            return Some(0);
        }
        (bytes % s == 0).then(|| bytes / s)
    }

    /// `MPI_Get_elements`: whole primitives in the first `bytes` bytes of a
    /// packed stream of elements of this type, `None` (`MPI_UNDEFINED`) if
    /// `bytes` ends inside a primitive. A type of size 0 gives `Some(0)`.
    pub fn get_elements(&self, bytes: usize) -> Option<usize> {
        let s = self.size();
        if s == 0 {
            return Some(0);
        }
        let full = (bytes / s).checked_mul(self.element_count())?;
        full.checked_add(self.0.sig.elements_in(bytes % s)?)
    }

    /// `MPI_Pack_size`: bytes of the packed stream of `count` elements.
    pub fn pack_size(&self, count: usize) -> Result<usize> {
        count
            .checked_mul(self.size())
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or(overflow("packed size"))
    }

    /// Runs of the flattened layout of one element if fully expanded
    /// (adjacent runs merged where the layout merged them), saturating.
    pub fn run_count(&self) -> usize {
        self.0.layout.run_count()
    }

    /// Size of the stored flattened layout in units (one per tree node or
    /// stored run): stays small for repetitive types whatever their count.
    pub fn layout_units(&self) -> usize {
        self.0.layout.footprint_units()
    }

    /// A convertor for `count` elements of this type.
    pub fn convertor(&self, count: usize) -> Result<Convertor> {
        Convertor::new(self, count)
    }

    /// Packs bytes `[packed_offset, packed_offset + out.len())` of the packed
    /// stream of `count` elements whose origin is at position `origin` of
    /// `base`; see [`Convertor::pack`].
    pub fn pack(
        &self,
        base: &[u8],
        origin: isize,
        count: usize,
        packed_offset: usize,
        out: &mut [u8],
    ) -> Result<usize> {
        Convertor::new(self, count)?.pack(base, origin, packed_offset, out)
    }

    /// Unpacks `input` as bytes `[packed_offset, ..)` of the packed stream of
    /// `count` elements; see [`Convertor::unpack`].
    pub fn unpack(
        &self,
        base: &mut [u8],
        origin: isize,
        count: usize,
        packed_offset: usize,
        input: &[u8],
    ) -> Result<usize> {
        Convertor::new(self, count)?.unpack(base, origin, packed_offset, input)
    }

    pub(crate) fn layout(&self) -> &Node {
        &self.0.layout
    }

    pub(crate) fn sig(&self) -> &Sig {
        &self.0.sig
    }
}

impl From<Primitive> for Datatype {
    fn from(p: Primitive) -> Datatype {
        Datatype::predefined(p)
    }
}

impl From<Pair> for Datatype {
    fn from(p: Pair) -> Datatype {
        Datatype::pair(p)
    }
}

impl fmt::Debug for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &*self.0;
        f.debug_struct("Datatype")
            .field("combiner", &i.combiner)
            .field("size", &i.size)
            .field("lb", &i.lb)
            .field("ub", &i.ub)
            .field("true_lb", &i.true_lb)
            .field("true_ub", &i.true_ub)
            .field("explicit_bounds", &i.sticky)
            .field("contiguous", &self.is_contiguous())
            .finish()
    }
}
