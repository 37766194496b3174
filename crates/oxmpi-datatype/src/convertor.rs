//! [`Convertor`]: packs and unpacks any byte range of the packed stream of
//! `count` elements of a datatype.
//!
//! The user buffer is a byte slice plus `origin`, the position in that slice
//! of the datatype origin (displacement 0 of element 0): element `i`'s
//! primitive at displacement `d` occupies slice positions
//! `origin + i * extent + d ..`. `origin` is an `isize` because a type's data
//! may lie below its origin (negative displacements or lower bound) or far
//! above it. Before touching any byte, every operation checks that the data
//! of all `count` elements lies inside the slice
//! ([`DatatypeError::OutOfBounds`] otherwise), and every copy is checked
//! again, so a bad type or origin is an error, never a panic.
//!
//! The packed stream is the concatenation of the elements' primitives in
//! type-map order (`count * size` bytes). Any `[packed_offset,
//! packed_offset + n)` range can be packed or unpacked independently and in
//! any order (fragments of a pipelined message): the seek to
//! `packed_offset` divides by the element size and then by block sizes, so
//! it does not depend on the offset, and nothing is allocated.

use std::ops::Range;

use crate::datatype::Datatype;
use crate::error::{DatatypeError, Result};
use crate::layout::{self, Sink};

/// Packs and unpacks `count` elements of a datatype, by byte ranges of the
/// packed stream. Cheap to clone (holds a [`Datatype`] clone); holds no
/// buffer, so one convertor serves any number of fragments, in any order,
/// from any thread.
#[derive(Clone, Debug)]
pub struct Convertor {
    datatype: Datatype,
    count: usize,
    packed: usize,
    /// Data bytes of all elements relative to the origin, `None` without
    /// data.
    span: Option<(isize, isize)>,
}

/// Result of [`Convertor::unpack_truncating`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unpacked {
    /// Bytes of the input unpacked into the buffer.
    pub consumed: usize,
    /// Bytes of the input beyond the end of the receive's packed stream,
    /// dropped.
    pub discarded: usize,
}

impl Unpacked {
    /// Whether input was dropped (`MPI_ERR_TRUNCATE`).
    pub fn truncated(&self) -> bool {
        self.discarded > 0
    }
}

/// Status of a receive of `count` elements that was sent `incoming` packed
/// bytes: see [`Convertor::receive_status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveStatus {
    /// Bytes delivered into the buffer: `min(incoming, packed_size)`.
    pub delivered: usize,
    /// The message was longer than the receive (`MPI_ERR_TRUNCATE`); the
    /// bytes that fit are delivered.
    pub truncated: bool,
    /// `MPI_Get_count` of the delivered bytes (`None` = `MPI_UNDEFINED`).
    pub count: Option<usize>,
    /// `MPI_Get_elements` of the delivered bytes (`None` = `MPI_UNDEFINED`).
    pub elements: Option<usize>,
}

impl Convertor {
    /// A convertor for `count` elements of `datatype`. Fails with
    /// [`DatatypeError::Overflow`] if the packed size or the span of the data
    /// does not fit in `isize`.
    pub fn new(datatype: &Datatype, count: usize) -> Result<Convertor> {
        let packed = datatype.pack_size(count)?;
        let span = if packed == 0 {
            None
        } else {
            let last = (count as i128 - 1) * datatype.extent() as i128;
            let lo = last.min(0) + datatype.true_lb() as i128;
            let hi = last.max(0) + datatype.true_ub() as i128;
            let fit = |v: i128| {
                isize::try_from(v).map_err(|_| DatatypeError::Overflow {
                    what: "buffer span",
                })
            };
            Some((fit(lo)?, fit(hi)?))
        };
        Ok(Convertor {
            datatype: datatype.clone(),
            count,
            packed,
            span,
        })
    }

    /// The datatype.
    pub fn datatype(&self) -> &Datatype {
        &self.datatype
    }

    /// The number of elements.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes of the packed stream: `count * size`.
    pub fn packed_size(&self) -> usize {
        self.packed
    }

    /// The bytes the data of the `count` elements may touch, relative to the
    /// origin (`None` without data). A buffer must cover
    /// `origin + span.start .. origin + span.end`.
    pub fn span(&self) -> Option<Range<isize>> {
        self.span.map(|(lo, hi)| lo..hi)
    }

    /// If the whole packed stream is one run of the user buffer, that run
    /// relative to the origin (zero-copy candidates).
    pub fn contiguous_range(&self) -> Option<Range<isize>> {
        let (lo, hi) = self.span?;
        (self.datatype.is_contiguous_for(self.count)
            && hi as i128 - lo as i128 == self.packed as i128)
            .then_some(lo..hi)
    }

    /// Checks that a buffer of `len` bytes with the origin at `origin` holds
    /// the data of all the elements.
    pub fn check_buffer(&self, len: usize, origin: isize) -> Result<()> {
        if let Some((lo, hi)) = self.span {
            let start = origin as i128 + lo as i128;
            let end = origin as i128 + hi as i128;
            if start < 0 || end > len as i128 {
                return Err(DatatypeError::OutOfBounds { start, end, len });
            }
        }
        Ok(())
    }

    /// Bytes available from `packed_offset`, or an error past the end.
    fn remaining(&self, packed_offset: usize) -> Result<usize> {
        self.packed
            .checked_sub(packed_offset)
            .ok_or(DatatypeError::PackedOffset {
                offset: packed_offset,
                total: self.packed,
            })
    }

    fn walk<S: Sink>(&self, origin: isize, off: usize, len: usize, s: &mut S) -> Result<()> {
        let root = self.datatype.layout();
        if self.count == 1 {
            layout::walk(root, origin, off, len, s)
        } else {
            layout::walk_repeat(
                origin,
                self.datatype.extent(),
                root,
                self.datatype.size(),
                off,
                len,
                s,
            )
        }
    }

    /// Packs bytes `[packed_offset, packed_offset + n)` of the packed stream
    /// into `out[..n]`, `n = min(out.len(), packed_size - packed_offset)`,
    /// reading the elements from `base` with the origin at position
    /// `origin`. Returns `n`.
    ///
    /// Errors: [`DatatypeError::PackedOffset`] if `packed_offset >
    /// packed_size`; [`DatatypeError::OutOfBounds`] if the data of the
    /// elements is not inside `base` (checked for the whole message, even
    /// when this range would fit).
    pub fn pack(
        &self,
        base: &[u8],
        origin: isize,
        packed_offset: usize,
        out: &mut [u8],
    ) -> Result<usize> {
        let n = self.remaining(packed_offset)?.min(out.len());
        self.check_buffer(base.len(), origin)?;
        if n == 0 {
            return Ok(0);
        }
        let mut sink = PackSink {
            base,
            out: &mut out[..n],
            pos: 0,
        };
        self.walk(origin, packed_offset, n, &mut sink)?;
        if sink.pos != n {
            return Err(internal());
        }
        Ok(n)
    }

    /// Unpacks `input[..n]` as bytes `[packed_offset, packed_offset + n)` of
    /// the packed stream into `base` (origin at position `origin`),
    /// `n = min(input.len(), packed_size - packed_offset)`. Returns `n`;
    /// `n < input.len()` means the input runs past the end of the stream
    /// (see [`unpack_truncating`](Self::unpack_truncating)). Bytes of `base`
    /// outside the type's data are never written. For types whose elements
    /// overlap, the last write in packed order wins within one call.
    ///
    /// Errors as for [`pack`](Self::pack).
    pub fn unpack(
        &self,
        base: &mut [u8],
        origin: isize,
        packed_offset: usize,
        input: &[u8],
    ) -> Result<usize> {
        let n = self.remaining(packed_offset)?.min(input.len());
        self.check_buffer(base.len(), origin)?;
        if n == 0 {
            return Ok(0);
        }
        let mut sink = UnpackSink {
            base,
            input: &input[..n],
            pos: 0,
        };
        self.walk(origin, packed_offset, n, &mut sink)?;
        if sink.pos != n {
            return Err(internal());
        }
        Ok(n)
    }

    /// [`unpack`](Self::unpack) for a fragment of an incoming message that
    /// may be longer than this receive (`MPI_ERR_TRUNCATE`): the part of
    /// `input` that falls inside the packed stream is unpacked, the rest is
    /// reported as discarded; a fragment starting at or past the end is
    /// discarded whole instead of being an error.
    pub fn unpack_truncating(
        &self,
        base: &mut [u8],
        origin: isize,
        packed_offset: usize,
        input: &[u8],
    ) -> Result<Unpacked> {
        if packed_offset >= self.packed {
            self.check_buffer(base.len(), origin)?;
            return Ok(Unpacked {
                consumed: 0,
                discarded: input.len(),
            });
        }
        let consumed = self.unpack(base, origin, packed_offset, input)?;
        Ok(Unpacked {
            consumed,
            discarded: input.len() - consumed,
        })
    }

    /// The status of this receive when the matched message carries
    /// `incoming` packed bytes: what is delivered, whether it is truncated,
    /// and the `MPI_Get_count` / `MPI_Get_elements` of what was delivered.
    pub fn receive_status(&self, incoming: usize) -> ReceiveStatus {
        let delivered = incoming.min(self.packed);
        ReceiveStatus {
            delivered,
            truncated: incoming > self.packed,
            count: self.datatype.get_count(delivered),
            elements: self.datatype.get_elements(delivered),
        }
    }

    /// Calls `f(offset, len)` for each run of the user buffer that packed
    /// bytes `[packed_offset, packed_offset + len)` map to, in packed order,
    /// with `offset` relative to the origin (an iovec of the range, e.g. for
    /// single-copy transfers). `len` is clipped to the end of the stream.
    pub fn for_each_run(
        &self,
        packed_offset: usize,
        len: usize,
        f: impl FnMut(isize, usize),
    ) -> Result<()> {
        let n = self.remaining(packed_offset)?.min(len);
        let mut sink = RunSink(f);
        self.walk(0, packed_offset, n, &mut sink)
    }
}

impl Convertor {
    /// Like [`for_each_run`](Self::for_each_run), but a strided run of
    /// equal blocks comes as one call: `f(offset, stride, len, count)` is
    /// `count` blocks of `len` bytes, the `k`-th at `offset + k * stride`
    /// (`count == 1` for a lone run). Lets a caller copy a vector-like
    /// layout with one tight loop instead of a call per block.
    pub fn for_each_block(
        &self,
        packed_offset: usize,
        len: usize,
        f: impl FnMut(isize, isize, usize, usize),
    ) -> Result<()> {
        let n = self.remaining(packed_offset)?.min(len);
        let mut sink = BlockSink(f);
        self.walk(0, packed_offset, n, &mut sink)
    }
}

struct BlockSink<F>(F);

impl<F: FnMut(isize, isize, usize, usize)> Sink for BlockSink<F> {
    fn run(&mut self, addr: isize, len: usize) -> Result<()> {
        (self.0)(addr, len as isize, len, 1);
        Ok(())
    }

    fn strided(&mut self, addr: isize, stride: isize, len: usize, count: usize) -> Result<()> {
        if stride == len as isize {
            (self.0)(addr, (len * count) as isize, len * count, 1);
        } else {
            (self.0)(addr, stride, len, count);
        }
        Ok(())
    }
}

fn oob(addr: isize, len: usize, buf: usize) -> DatatypeError {
    DatatypeError::OutOfBounds {
        start: addr as i128,
        end: addr as i128 + len as i128,
        len: buf,
    }
}

/// Internal consistency failure (the walk produced more or fewer bytes than
/// asked); reported, never panicked on.
fn internal() -> DatatypeError {
    DatatypeError::Internal("walk and packed range disagree")
}

fn user_range(addr: isize, len: usize, buf: usize) -> Result<Range<usize>> {
    let a = usize::try_from(addr).map_err(|_| oob(addr, len, buf))?;
    match a.checked_add(len) {
        Some(end) if end <= buf => Ok(a..end),
        _ => Err(oob(addr, len, buf)),
    }
}

struct PackSink<'a> {
    base: &'a [u8],
    out: &'a mut [u8],
    pos: usize,
}

/// The buffer region covering `n >= 1` runs of `len` bytes, the `k`-th at
/// `addr + k * stride`, when the stride is forward (`stride >= len`).
fn forward_region(
    addr: isize,
    stride: isize,
    len: usize,
    n: usize,
    buf: usize,
) -> Option<Result<Range<usize>>> {
    let step = usize::try_from(stride).ok().filter(|&s| s >= len)?;
    let span = (n - 1).checked_mul(step).and_then(|x| x.checked_add(len));
    Some(match span {
        Some(span) => user_range(addr, span, buf),
        None => Err(oob(addr, len, buf)),
    })
}

fn gather<const N: usize>(base: &[u8], addr: isize, stride: isize, dst: &mut [u8]) -> Result<()> {
    gather_dyn(base, addr, stride, N, dst)
}

#[inline(always)]
fn gather_dyn(
    base: &[u8],
    mut addr: isize,
    stride: isize,
    len: usize,
    dst: &mut [u8],
) -> Result<()> {
    let n = dst.len() / len;
    if n == 0 {
        return Ok(());
    }
    if let Some(region) = forward_region(addr, stride, len, n, base.len()) {
        // One bounds check for the whole strided region.
        let region = &base[region?];
        for (d, s) in dst
            .chunks_exact_mut(len)
            .zip(region.chunks(stride as usize))
        {
            d.copy_from_slice(&s[..len]);
        }
        return Ok(());
    }
    for chunk in dst.chunks_exact_mut(len) {
        let r = user_range(addr, len, base.len())?;
        chunk.copy_from_slice(&base[r]);
        addr = addr.wrapping_add(stride);
    }
    Ok(())
}

fn scatter<const N: usize>(base: &mut [u8], addr: isize, stride: isize, src: &[u8]) -> Result<()> {
    scatter_dyn(base, addr, stride, N, src)
}

#[inline(always)]
fn scatter_dyn(
    base: &mut [u8],
    mut addr: isize,
    stride: isize,
    len: usize,
    src: &[u8],
) -> Result<()> {
    let n = src.len() / len;
    if n == 0 {
        return Ok(());
    }
    let blen = base.len();
    if let Some(region) = forward_region(addr, stride, len, n, blen) {
        // One bounds check for the whole strided region.
        let region = &mut base[region?];
        for (s, d) in src
            .chunks_exact(len)
            .zip(region.chunks_mut(stride as usize))
        {
            d[..len].copy_from_slice(s);
        }
        return Ok(());
    }
    for chunk in src.chunks_exact(len) {
        let r = user_range(addr, len, blen)?;
        base[r].copy_from_slice(chunk);
        addr = addr.wrapping_add(stride);
    }
    Ok(())
}

impl Sink for PackSink<'_> {
    fn run(&mut self, addr: isize, len: usize) -> Result<()> {
        let r = user_range(addr, len, self.base.len())?;
        let dst = self
            .out
            .get_mut(self.pos..self.pos + len)
            .ok_or_else(internal)?;
        dst.copy_from_slice(&self.base[r]);
        self.pos += len;
        Ok(())
    }

    fn strided(&mut self, addr: isize, stride: isize, len: usize, count: usize) -> Result<()> {
        let bytes = len * count;
        if stride == len as isize {
            return self.run(addr, bytes);
        }
        let dst = self
            .out
            .get_mut(self.pos..self.pos + bytes)
            .ok_or_else(internal)?;
        match len {
            1 => gather::<1>(self.base, addr, stride, dst)?,
            2 => gather::<2>(self.base, addr, stride, dst)?,
            4 => gather::<4>(self.base, addr, stride, dst)?,
            8 => gather::<8>(self.base, addr, stride, dst)?,
            16 => gather::<16>(self.base, addr, stride, dst)?,
            _ => gather_dyn(self.base, addr, stride, len, dst)?,
        }
        self.pos += bytes;
        Ok(())
    }
}

struct UnpackSink<'a> {
    base: &'a mut [u8],
    input: &'a [u8],
    pos: usize,
}

impl Sink for UnpackSink<'_> {
    fn run(&mut self, addr: isize, len: usize) -> Result<()> {
        let r = user_range(addr, len, self.base.len())?;
        let src = self
            .input
            .get(self.pos..self.pos + len)
            .ok_or_else(internal)?;
        self.base[r].copy_from_slice(src);
        self.pos += len;
        Ok(())
    }

    fn strided(&mut self, addr: isize, stride: isize, len: usize, count: usize) -> Result<()> {
        let bytes = len * count;
        if stride == len as isize {
            return self.run(addr, bytes);
        }
        let src = self
            .input
            .get(self.pos..self.pos + bytes)
            .ok_or_else(internal)?;
        match len {
            1 => scatter::<1>(self.base, addr, stride, src)?,
            2 => scatter::<2>(self.base, addr, stride, src)?,
            4 => scatter::<4>(self.base, addr, stride, src)?,
            8 => scatter::<8>(self.base, addr, stride, src)?,
            16 => scatter::<16>(self.base, addr, stride, src)?,
            _ => scatter_dyn(self.base, addr, stride, len, src)?,
        }
        self.pos += bytes;
        Ok(())
    }
}

struct RunSink<F>(F);

impl<F: FnMut(isize, usize)> Sink for RunSink<F> {
    fn run(&mut self, addr: isize, len: usize) -> Result<()> {
        (self.0)(addr, len);
        Ok(())
    }

    fn strided(&mut self, addr: isize, stride: isize, len: usize, count: usize) -> Result<()> {
        if stride == len as isize {
            (self.0)(addr, len * count);
            return Ok(());
        }
        let mut a = addr;
        for _ in 0..count {
            (self.0)(a, len);
            a = a.wrapping_add(stride);
        }
        Ok(())
    }
}
