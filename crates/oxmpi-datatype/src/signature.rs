//! Type signatures: the sequence of primitives of a type map, displacements
//! dropped, kept as compact as the layout (runs, repetitions, sequences).
//!
//! The signature answers `MPI_Get_elements` (how many whole primitives are
//! in the first `n` packed bytes) and says whether a type is made of a
//! single primitive (what predefined reduction operations need).

use std::sync::Arc;

use crate::primitive::Primitive;

/// A node of a type signature.
#[derive(Debug)]
pub(crate) enum Sig {
    /// No primitive.
    Empty,
    /// `count >= 1` primitives of one kind.
    Run { prim: Primitive, count: usize },
    /// `count >= 2` copies of a non-empty inner signature.
    Repeat {
        count: usize,
        inner: Arc<Sig>,
        bytes: usize,
        elems: usize,
    },
    /// Non-empty parts in order, with the byte and element offset of each.
    Seq {
        parts: Box<[Arc<Sig>]>,
        byte_starts: Box<[usize]>,
        elem_starts: Box<[usize]>,
        bytes: usize,
        elems: usize,
    },
}

impl Sig {
    /// Packed bytes.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Sig::Empty => 0,
            Sig::Run { prim, count } => prim.size() * count,
            Sig::Repeat { bytes, .. } | Sig::Seq { bytes, .. } => *bytes,
        }
    }

    /// Number of primitives.
    pub(crate) fn elems(&self) -> usize {
        match self {
            Sig::Empty => 0,
            Sig::Run { count, .. } => *count,
            Sig::Repeat { elems, .. } | Sig::Seq { elems, .. } => *elems,
        }
    }

    /// Whole primitives in the first `bytes` packed bytes, `None` when
    /// `bytes` ends inside a primitive. Requires `bytes <= self.bytes()`.
    pub(crate) fn elements_in(&self, bytes: usize) -> Option<usize> {
        if bytes == 0 {
            return Some(0);
        }
        match self {
            Sig::Empty => Some(0),
            Sig::Run { prim, .. } => (bytes % prim.size() == 0).then(|| bytes / prim.size()),
            Sig::Repeat { inner, .. } => {
                let ib = inner.bytes();
                let k = bytes / ib;
                Some(k * inner.elems() + inner.elements_in(bytes % ib)?)
            }
            Sig::Seq {
                parts,
                byte_starts,
                elem_starts,
                bytes: total,
                elems,
            } => {
                if bytes >= *total {
                    return Some(*elems);
                }
                let i = byte_starts.partition_point(|&s| s <= bytes) - 1;
                Some(elem_starts[i] + parts[i].elements_in(bytes - byte_starts[i])?)
            }
        }
    }

    /// The primitive every element is made of, if there is exactly one kind.
    pub(crate) fn uniform(&self) -> Option<Primitive> {
        match self {
            Sig::Empty => None,
            Sig::Run { prim, .. } => Some(*prim),
            Sig::Repeat { inner, .. } => inner.uniform(),
            Sig::Seq { parts, .. } => {
                let p = parts.first()?.uniform()?;
                parts[1..]
                    .iter()
                    .all(|q| q.uniform() == Some(p))
                    .then_some(p)
            }
        }
    }
}

/// The empty signature.
pub(crate) fn empty() -> Arc<Sig> {
    Arc::new(Sig::Empty)
}

/// One primitive.
pub(crate) fn prim(p: Primitive) -> Arc<Sig> {
    Arc::new(Sig::Run { prim: p, count: 1 })
}

/// `count` copies of `inner`. The caller has checked that the total bytes
/// fit in `usize`.
pub(crate) fn repeat(count: usize, inner: &Arc<Sig>) -> Arc<Sig> {
    if count == 0 || inner.elems() == 0 {
        return empty();
    }
    if count == 1 {
        return inner.clone();
    }
    match &**inner {
        Sig::Run { prim, count: c } => Arc::new(Sig::Run {
            prim: *prim,
            count: c * count,
        }),
        Sig::Repeat {
            count: c, inner, ..
        } => repeat(c * count, inner),
        _ => Arc::new(Sig::Repeat {
            count,
            inner: inner.clone(),
            bytes: inner.bytes() * count,
            elems: inner.elems() * count,
        }),
    }
}

/// The concatenation of `parts`.
pub(crate) fn seq(parts: Vec<Arc<Sig>>) -> Arc<Sig> {
    let mut out: Vec<Arc<Sig>> = Vec::with_capacity(parts.len());
    for p in parts {
        if p.elems() == 0 {
            continue;
        }
        if let (Some(last), Sig::Run { prim, count }) = (out.last_mut(), &*p) {
            if let Sig::Run {
                prim: lp,
                count: lc,
            } = &**last
            {
                if lp == prim {
                    *last = Arc::new(Sig::Run {
                        prim: *prim,
                        count: lc + count,
                    });
                    continue;
                }
            }
        }
        out.push(p);
    }
    match out.len() {
        0 => return empty(),
        1 => return out.pop().expect("one part"),
        _ => {}
    }
    let mut byte_starts = Vec::with_capacity(out.len());
    let mut elem_starts = Vec::with_capacity(out.len());
    let (mut bytes, mut elems) = (0usize, 0usize);
    for p in &out {
        byte_starts.push(bytes);
        elem_starts.push(elems);
        bytes += p.bytes();
        elems += p.elems();
    }
    Arc::new(Sig::Seq {
        parts: out.into_boxed_slice(),
        byte_starts: byte_starts.into_boxed_slice(),
        elem_starts: elem_starts.into_boxed_slice(),
        bytes,
        elems,
    })
}

/// Iterator over a type signature as runs `(primitive, count)`, adjacent
/// runs of the same primitive merged. Returned by
/// [`Datatype::signature`](crate::Datatype::signature).
#[derive(Debug)]
pub struct Signature<'a> {
    stack: Vec<Frame<'a>>,
    pending: Option<(Primitive, usize)>,
    copies: usize,
    root: &'a Sig,
}

#[derive(Debug)]
enum Frame<'a> {
    Repeat { inner: &'a Sig, left: usize },
    Seq { parts: &'a [Arc<Sig>], next: usize },
}

impl<'a> Signature<'a> {
    pub(crate) fn new(root: &'a Sig, copies: usize) -> Self {
        Signature {
            stack: Vec::new(),
            pending: None,
            copies,
            root,
        }
    }

    /// The next raw run, not merged with its neighbours.
    fn next_raw(&mut self) -> Option<(Primitive, usize)> {
        loop {
            let node = match self.stack.last_mut() {
                None => {
                    if self.copies == 0 {
                        return None;
                    }
                    self.copies -= 1;
                    self.root
                }
                Some(Frame::Repeat { inner, left }) => {
                    if *left == 0 {
                        self.stack.pop();
                        continue;
                    }
                    *left -= 1;
                    *inner
                }
                Some(Frame::Seq { parts, next }) => {
                    let Some(p) = parts.get(*next) else {
                        self.stack.pop();
                        continue;
                    };
                    *next += 1;
                    &**p
                }
            };
            match node {
                Sig::Empty => {}
                Sig::Run { prim, count } => return Some((*prim, *count)),
                Sig::Repeat { count, inner, .. } => self.stack.push(Frame::Repeat {
                    inner,
                    left: *count,
                }),
                Sig::Seq { parts, .. } => self.stack.push(Frame::Seq { parts, next: 0 }),
            }
        }
    }
}

impl Iterator for Signature<'_> {
    type Item = (Primitive, usize);

    fn next(&mut self) -> Option<(Primitive, usize)> {
        let mut cur = match self.pending.take() {
            Some(c) => c,
            None => self.next_raw()?,
        };
        while let Some(n) = self.next_raw() {
            if n.0 == cur.0 {
                cur.1 += n.1;
            } else {
                self.pending = Some(n);
                break;
            }
        }
        Some(cur)
    }
}
