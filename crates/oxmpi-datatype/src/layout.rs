//! The flattened layout of one element of a datatype: which bytes, relative
//! to the datatype origin, make up its packed stream, in packed order.
//!
//! A layout is a small tree built once, when the datatype is constructed:
//!
//! * [`Node::Block`]: one run of `len` bytes at byte offset `off`;
//! * [`Node::List`]: runs in packed order, adjacent runs merged (a run that
//!   starts where the previous one ends is one run), with their packed start
//!   offsets for a binary-search seek;
//! * [`Node::Repeat`]: `count` copies of an inner layout, copy `k` displaced by
//!   `disp + k * stride` bytes (vectors, contiguous of non-contiguous types,
//!   regular indexed types): O(1) memory whatever the count, O(1) seek by
//!   division;
//! * [`Node::Seq`]: a sequence of displaced sub-layouts (struct and indexed
//!   types whose parts are themselves large), with packed start offsets.
//!
//! Normal form, kept by the smart constructors [`repeat`] and [`seq`]:
//! empty layouts are [`Node::Empty`]; small repetitions and sequences are
//! expanded into lists so that runs adjacent in memory and in packed order
//! are merged; a list of equal-length runs at a constant stride becomes a
//! `Repeat` of a `Block`. As a consequence a layout whose packed stream maps
//! to consecutive increasing addresses is always a single `Block`, so
//! contiguity is a pattern match.
//!
//! Walking ([`walk`]) visits the runs of any packed byte range
//! `[off, off + len)`: it seeks by division in `Repeat` and by binary search
//! in `List`/`Seq`, so a seek costs O(depth * log(parts)), independent of
//! the offset, and the walk allocates nothing.
//!
//! Address arithmetic in the walk wraps: the convertor checks beforehand
//! that every data byte of the element range lies in the user buffer, and a
//! wrapped intermediate still yields the exact final address (arithmetic
//! modulo 2^64); each run is bounds-checked again when it is copied.

use std::sync::Arc;

use crate::error::Result;

/// Up to this many runs, repetitions and sequences are expanded into a
/// [`Node::List`] (merging adjacent runs).
const FLATTEN_LIMIT: usize = 64;

/// One run of bytes of the flattened layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// Byte offset from the datatype origin.
    pub off: isize,
    /// Length in bytes (never 0).
    pub len: usize,
}

/// A node of the flattened layout (see the module docs).
#[derive(Debug)]
pub(crate) enum Node {
    /// No data.
    Empty,
    /// One run.
    Block { off: isize, len: usize },
    /// Runs in packed order; `starts[i]` is the packed offset of `runs[i]`.
    List {
        runs: Box<[Run]>,
        starts: Box<[usize]>,
        size: usize,
    },
    /// `count >= 2` copies of `inner` (non-empty), copy `k` at
    /// `disp + k * stride`.
    Repeat {
        count: usize,
        disp: isize,
        stride: isize,
        inner: Arc<Node>,
        inner_size: usize,
    },
    /// Displaced non-empty parts in packed order; `starts[i]` is the packed
    /// offset of part `i`.
    Seq {
        parts: Box<[(isize, Arc<Node>)]>,
        starts: Box<[usize]>,
        size: usize,
    },
}

impl Node {
    /// Packed size in bytes.
    pub(crate) fn size(&self) -> usize {
        match self {
            Node::Empty => 0,
            Node::Block { len, .. } => *len,
            Node::List { size, .. } | Node::Seq { size, .. } => *size,
            Node::Repeat {
                count, inner_size, ..
            } => count * inner_size,
        }
    }

    /// Number of runs the layout would have fully expanded, before merging
    /// (saturating).
    pub(crate) fn run_count(&self) -> usize {
        match self {
            Node::Empty => 0,
            Node::Block { .. } => 1,
            Node::List { runs, .. } => runs.len(),
            Node::Repeat { count, inner, .. } => count.saturating_mul(inner.run_count()),
            Node::Seq { parts, .. } => parts
                .iter()
                .fold(0usize, |a, (_, p)| a.saturating_add(p.run_count())),
        }
    }

    /// Number of tree nodes plus stored runs: the memory the layout uses, in
    /// units.
    pub(crate) fn footprint_units(&self) -> usize {
        match self {
            Node::Empty | Node::Block { .. } => 1,
            Node::List { runs, .. } => 1 + runs.len(),
            Node::Repeat { inner, .. } => 1 + inner.footprint_units(),
            Node::Seq { parts, .. } => {
                1 + parts
                    .iter()
                    .map(|(_, p)| p.footprint_units())
                    .sum::<usize>()
            }
        }
    }

    /// Appends the runs of this layout displaced by `disp`, merging with the
    /// last run of `out` when adjacent.
    fn expand_into(&self, disp: isize, out: &mut Vec<Run>) {
        match self {
            Node::Empty => {}
            Node::Block { off, len } => push_merge(out, disp.wrapping_add(*off), *len),
            Node::List { runs, .. } => {
                for r in runs.iter() {
                    push_merge(out, disp.wrapping_add(r.off), r.len);
                }
            }
            Node::Repeat {
                count,
                disp: d0,
                stride,
                inner,
                ..
            } => {
                for k in 0..*count {
                    inner.expand_into(
                        disp.wrapping_add(*d0)
                            .wrapping_add((k as isize).wrapping_mul(*stride)),
                        out,
                    );
                }
            }
            Node::Seq { parts, .. } => {
                for (d, p) in parts.iter() {
                    p.expand_into(disp.wrapping_add(*d), out);
                }
            }
        }
    }
}

fn push_merge(out: &mut Vec<Run>, off: isize, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = out.last_mut() {
        if last.off.wrapping_add(last.len as isize) == off {
            last.len += len;
            return;
        }
    }
    out.push(Run { off, len });
}

/// The empty layout.
pub(crate) fn empty() -> Arc<Node> {
    Arc::new(Node::Empty)
}

/// One run of `len` bytes at `off`.
pub(crate) fn block(off: isize, len: usize) -> Arc<Node> {
    if len == 0 {
        empty()
    } else {
        Arc::new(Node::Block { off, len })
    }
}

/// Layout from merged runs: empty, one block, a strided repeat of a block
/// when the runs are equal and evenly spaced, a list otherwise.
fn from_runs(runs: Vec<Run>) -> Arc<Node> {
    match runs.len() {
        0 => return empty(),
        1 => return block(runs[0].off, runs[0].len),
        _ => {}
    }
    let first = runs[0];
    let stride = runs[1].off.wrapping_sub(first.off);
    let regular = runs
        .windows(2)
        .all(|w| w[1].len == first.len && w[1].off.wrapping_sub(w[0].off) == stride);
    if regular {
        return Arc::new(Node::Repeat {
            count: runs.len(),
            disp: first.off,
            stride,
            inner: block(0, first.len),
            inner_size: first.len,
        });
    }
    let mut starts = Vec::with_capacity(runs.len());
    let mut size = 0usize;
    for r in &runs {
        starts.push(size);
        size += r.len;
    }
    Arc::new(Node::List {
        runs: runs.into_boxed_slice(),
        starts: starts.into_boxed_slice(),
        size,
    })
}

/// `node` displaced by `d` bytes. Cheap for every kind but a list or
/// sequence, which is copied when small and wrapped otherwise.
pub(crate) fn shift(node: &Arc<Node>, d: isize) -> Arc<Node> {
    if d == 0 {
        return node.clone();
    }
    match &**node {
        Node::Empty => node.clone(),
        Node::Block { off, len } => block(off.wrapping_add(d), *len),
        Node::Repeat {
            count,
            disp,
            stride,
            inner,
            inner_size,
        } => Arc::new(Node::Repeat {
            count: *count,
            disp: disp.wrapping_add(d),
            stride: *stride,
            inner: inner.clone(),
            inner_size: *inner_size,
        }),
        Node::List { .. } | Node::Seq { .. } => {
            if node.run_count() <= FLATTEN_LIMIT {
                let mut runs = Vec::new();
                node.expand_into(d, &mut runs);
                from_runs(runs)
            } else {
                Arc::new(Node::Seq {
                    parts: vec![(d, node.clone())].into_boxed_slice(),
                    starts: vec![0].into_boxed_slice(),
                    size: node.size(),
                })
            }
        }
    }
}

/// `count` copies of `inner`, copy `k` at byte displacement `k * stride`.
///
/// The caller has checked that `count * inner.size()` and every displacement
/// fit in `isize`.
pub(crate) fn repeat(count: usize, stride: isize, inner: &Arc<Node>) -> Arc<Node> {
    if count == 0 || inner.size() == 0 {
        return empty();
    }
    if count == 1 {
        return inner.clone();
    }
    match &**inner {
        Node::Block { off, len } => {
            if stride == *len as isize {
                return block(*off, len * count);
            }
            return Arc::new(Node::Repeat {
                count,
                disp: *off,
                stride,
                inner: block(0, *len),
                inner_size: *len,
            });
        }
        // Copies of a strided pattern that continue its stride.
        Node::Repeat {
            count: c2,
            disp,
            stride: s2,
            inner: in2,
            ..
        } if isize::try_from(*c2).ok().and_then(|c| c.checked_mul(*s2)) == Some(stride) => {
            let merged = repeat(c2 * count, *s2, in2);
            return shift(&merged, *disp);
        }
        _ => {}
    }
    let inner_size = inner.size();
    if count.saturating_mul(inner.run_count()) <= FLATTEN_LIMIT {
        let mut runs = Vec::new();
        for k in 0..count {
            inner.expand_into((k as isize).wrapping_mul(stride), &mut runs);
        }
        return from_runs(runs);
    }
    Arc::new(Node::Repeat {
        count,
        disp: 0,
        stride,
        inner: inner.clone(),
        inner_size,
    })
}

/// The concatenation, in packed order, of `parts` (each displaced by its
/// byte displacement).
pub(crate) fn seq(parts: Vec<(isize, Arc<Node>)>) -> Arc<Node> {
    let mut parts: Vec<(isize, Arc<Node>)> =
        parts.into_iter().filter(|(_, p)| p.size() > 0).collect();
    match parts.len() {
        0 => return empty(),
        1 => {
            let (d, p) = parts.pop().expect("one part");
            return shift(&p, d);
        }
        _ => {}
    }
    let total = parts
        .iter()
        .fold(0usize, |a, (_, p)| a.saturating_add(p.run_count()));
    if total <= FLATTEN_LIMIT || parts.iter().all(|(_, p)| p.run_count() <= 1) {
        let mut runs = Vec::with_capacity(total.min(parts.len() * 4));
        for (d, p) in &parts {
            p.expand_into(*d, &mut runs);
        }
        return from_runs(runs);
    }
    // The same sub-layout at evenly spaced displacements: a repeat.
    let (d0, p0) = (parts[0].0, parts[0].1.clone());
    let step = parts[1].0.wrapping_sub(d0);
    if parts
        .windows(2)
        .all(|w| Arc::ptr_eq(&w[1].1, &p0) && w[1].0.wrapping_sub(w[0].0) == step)
    {
        let r = repeat(parts.len(), step, &p0);
        return shift(&r, d0);
    }
    let mut starts = Vec::with_capacity(parts.len());
    let mut size = 0usize;
    for (_, p) in &parts {
        starts.push(size);
        size += p.size();
    }
    Arc::new(Node::Seq {
        parts: parts.into_boxed_slice(),
        starts: starts.into_boxed_slice(),
        size,
    })
}

/// Receiver of the runs of a walk, in packed order. Addresses are buffer
/// positions (datatype origin already added), possibly out of range.
pub(crate) trait Sink {
    /// `len` bytes at `addr`.
    fn run(&mut self, addr: isize, len: usize) -> Result<()>;
    /// `count` runs of `len` bytes, the `k`-th at `addr + k * stride`.
    fn strided(&mut self, addr: isize, stride: isize, len: usize, count: usize) -> Result<()>;
}

/// Visits the runs of packed bytes `[off, off + len)` of `node`, displaced
/// by `disp`. Requires `off + len <= node.size()`.
pub(crate) fn walk<S: Sink>(
    node: &Node,
    disp: isize,
    off: usize,
    len: usize,
    s: &mut S,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    match node {
        Node::Empty => Ok(()),
        Node::Block { off: o, len: _ } => {
            s.run(disp.wrapping_add(*o).wrapping_add(off as isize), len)
        }
        Node::List { runs, starts, .. } => {
            let mut i = starts.partition_point(|&st| st <= off) - 1;
            let mut r = off - starts[i];
            let mut left = len;
            while left > 0 {
                let Some(run) = runs.get(i) else { break };
                let take = (run.len - r).min(left);
                s.run(disp.wrapping_add(run.off).wrapping_add(r as isize), take)?;
                left -= take;
                r = 0;
                i += 1;
            }
            Ok(())
        }
        Node::Repeat {
            disp: d0,
            stride,
            inner,
            inner_size,
            ..
        } => walk_repeat(
            disp.wrapping_add(*d0),
            *stride,
            inner,
            *inner_size,
            off,
            len,
            s,
        ),
        Node::Seq { parts, starts, .. } => {
            let mut i = starts.partition_point(|&st| st <= off) - 1;
            let mut r = off - starts[i];
            let mut left = len;
            while left > 0 {
                let Some((d, p)) = parts.get(i) else { break };
                let take = (p.size() - r).min(left);
                walk(p, disp.wrapping_add(*d), r, take, s)?;
                left -= take;
                r = 0;
                i += 1;
            }
            Ok(())
        }
    }
}

/// Visits packed bytes `[off, off + len)` of copies of `inner` (packed size
/// `inner_size > 0`), copy `k` at `disp + k * stride`. Seeks by division.
pub(crate) fn walk_repeat<S: Sink>(
    disp: isize,
    stride: isize,
    inner: &Node,
    inner_size: usize,
    off: usize,
    len: usize,
    s: &mut S,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let mut k = off / inner_size;
    let mut r = off % inner_size;
    let mut left = len;
    if let Node::Block { off: bo, len: bl } = *inner {
        let mut addr = disp
            .wrapping_add((k as isize).wrapping_mul(stride))
            .wrapping_add(bo);
        if r != 0 {
            let take = (bl - r).min(left);
            s.run(addr.wrapping_add(r as isize), take)?;
            left -= take;
            addr = addr.wrapping_add(stride);
        }
        let full = left / bl;
        if full > 0 {
            s.strided(addr, stride, bl, full)?;
            addr = addr.wrapping_add((full as isize).wrapping_mul(stride));
            left -= full * bl;
        }
        if left > 0 {
            s.run(addr, left)?;
        }
        return Ok(());
    }
    loop {
        let take = (inner_size - r).min(left);
        let d = disp.wrapping_add((k as isize).wrapping_mul(stride));
        walk(inner, d, r, take, s)?;
        left -= take;
        if left == 0 {
            return Ok(());
        }
        r = 0;
        k += 1;
    }
}
