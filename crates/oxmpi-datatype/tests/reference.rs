//! Differential proptest: random nested datatypes against a naive reference
//! that enumerates every copy of every primitive (its byte offset), with no
//! closed-form bounds and no flattening.
//!
//! Checked: sizes and bounds; `is_contiguous`; whole packs; packs of random
//! fragments in random order; `unpack(pack(x))` restores exactly the covered
//! bytes and leaves gaps alone; unpack of a random stream equals the
//! reference's writes in packed order; buffer bounds checks; runs of a
//! range; `MPI_Get_elements` and the type signature.

use oxmpi_datatype::{Convertor, Datatype, DatatypeError, Order, Pair, Primitive};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Spec {
    Prim(Primitive),
    Pair(Pair),
    Contig(usize, Box<Spec>),
    Vector(usize, usize, isize, Box<Spec>),
    Hvector(usize, usize, isize, Box<Spec>),
    Indexed(Vec<(usize, isize)>, Box<Spec>),
    Hindexed(Vec<(usize, isize)>, Box<Spec>),
    IndexedBlock(usize, Vec<isize>, Box<Spec>),
    HindexedBlock(usize, Vec<isize>, Box<Spec>),
    Struct(Vec<(usize, isize, Spec)>),
    Resized(isize, isize, Box<Spec>),
    /// (size, subsize, start) per dimension.
    Subarray(Vec<(usize, usize, usize)>, Order, Box<Spec>),
    Dup(Box<Spec>),
}

fn build(s: &Spec) -> Datatype {
    let i = |v: usize| v as isize;
    match s {
        Spec::Prim(p) => Datatype::predefined(*p),
        Spec::Pair(p) => Datatype::pair(*p),
        Spec::Contig(n, t) => Datatype::contiguous(i(*n), &build(t)).unwrap(),
        Spec::Vector(c, b, st, t) => Datatype::vector(i(*c), i(*b), *st, &build(t)).unwrap(),
        Spec::Hvector(c, b, st, t) => Datatype::hvector(i(*c), i(*b), *st, &build(t)).unwrap(),
        Spec::Indexed(bd, t) => {
            let (b, d): (Vec<isize>, Vec<isize>) = bd.iter().map(|&(b, d)| (i(b), d)).unzip();
            Datatype::indexed(&b, &d, &build(t)).unwrap()
        }
        Spec::Hindexed(bd, t) => {
            let (b, d): (Vec<isize>, Vec<isize>) = bd.iter().map(|&(b, d)| (i(b), d)).unzip();
            Datatype::hindexed(&b, &d, &build(t)).unwrap()
        }
        Spec::IndexedBlock(b, d, t) => Datatype::indexed_block(i(*b), d, &build(t)).unwrap(),
        Spec::HindexedBlock(b, d, t) => Datatype::hindexed_block(i(*b), d, &build(t)).unwrap(),
        Spec::Struct(parts) => {
            let b: Vec<isize> = parts.iter().map(|p| i(p.0)).collect();
            let d: Vec<isize> = parts.iter().map(|p| p.1).collect();
            let t: Vec<Datatype> = parts.iter().map(|p| build(&p.2)).collect();
            Datatype::structured(&b, &d, &t).unwrap()
        }
        Spec::Resized(lb, ext, t) => Datatype::resized(&build(t), *lb, *ext).unwrap(),
        Spec::Subarray(dims, order, t) => {
            let sizes: Vec<isize> = dims.iter().map(|d| i(d.0)).collect();
            let subs: Vec<isize> = dims.iter().map(|d| i(d.1)).collect();
            let starts: Vec<isize> = dims.iter().map(|d| i(d.2)).collect();
            Datatype::subarray(&sizes, &subs, &starts, *order, &build(t)).unwrap()
        }
        Spec::Dup(t) => build(t).dup(),
    }
}

/// A type map, enumerated.
#[derive(Clone, Debug)]
struct Ref {
    entries: Vec<(Primitive, i128)>,
    /// Markers (lb, ub) if any.
    marks: Option<(i128, i128)>,
    lb: i128,
    ub: i128,
}

impl Ref {
    fn size(&self) -> usize {
        self.entries.iter().map(|e| e.0.size()).sum()
    }
    fn true_bounds(&self) -> (i128, i128) {
        if self.entries.is_empty() {
            return (0, 0);
        }
        let lo = self.entries.iter().map(|e| e.1).min().unwrap();
        let hi = self
            .entries
            .iter()
            .map(|e| e.1 + e.0.size() as i128)
            .max()
            .unwrap();
        (lo, hi)
    }
    fn extent(&self) -> i128 {
        self.ub - self.lb
    }
    /// Byte offsets of the packed stream of one element.
    fn bytes(&self) -> Vec<i128> {
        self.entries
            .iter()
            .flat_map(|&(p, o)| (0..p.size() as i128).map(move |b| o + b))
            .collect()
    }
}

/// The rule of the crate docs: each copy of a child at `d` contributes its
/// markers, or (if it has data and no markers) its `[lb, ub)`; `pad` rounds
/// the extent up to the largest primitive alignment when there are no
/// markers.
fn combine(copies: &[(&Ref, i128)], pad: bool) -> Ref {
    let mut entries = Vec::new();
    let mut marks: Option<(i128, i128)> = None;
    let mut plain: Option<(i128, i128)> = None;
    let widen = |s: &mut Option<(i128, i128)>, lo: i128, hi: i128| {
        *s = Some(match *s {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        })
    };
    for &(c, d) in copies {
        entries.extend(c.entries.iter().map(|&(p, o)| (p, o + d)));
        if let Some((lo, hi)) = c.marks {
            widen(&mut marks, lo + d, hi + d);
        } else if !c.entries.is_empty() {
            widen(&mut plain, c.lb + d, c.ub + d);
        }
    }
    let (lb, ub) = match (marks, plain) {
        (Some(m), _) => m,
        (None, Some((lb, ub))) if pad => {
            let a = entries
                .iter()
                .map(|e| e.0.align() as i128)
                .max()
                .unwrap_or(1);
            let mut ub = ub;
            while (ub - lb) % a != 0 {
                ub += 1;
            }
            (lb, ub)
        }
        (None, Some(p)) => p,
        (None, None) => (0, 0),
    };
    Ref {
        entries,
        marks,
        lb,
        ub,
    }
}

fn prim_ref(p: Primitive) -> Ref {
    Ref {
        entries: vec![(p, 0)],
        marks: None,
        lb: 0,
        ub: p.size() as i128,
    }
}

fn reference(s: &Spec) -> Ref {
    match s {
        Spec::Prim(p) => prim_ref(*p),
        Spec::Pair(p) => {
            let (a, b) = p.members();
            let (ra, rb) = (prim_ref(a), prim_ref(b));
            let mut second = a.size() as i128;
            while second % b.align() as i128 != 0 {
                second += 1;
            }
            combine(&[(&ra, 0), (&rb, second)], true)
        }
        Spec::Contig(n, t) => {
            let r = reference(t);
            let e = r.extent();
            let copies: Vec<_> = (0..*n as i128).map(|k| (&r, k * e)).collect();
            combine(&copies, false)
        }
        Spec::Vector(c, b, st, t) => {
            let r = reference(t);
            let e = r.extent();
            let mut copies = Vec::new();
            for i in 0..*c as i128 {
                for j in 0..*b as i128 {
                    copies.push((&r, i * *st as i128 * e + j * e));
                }
            }
            combine(&copies, false)
        }
        Spec::Hvector(c, b, st, t) => {
            let r = reference(t);
            let e = r.extent();
            let mut copies = Vec::new();
            for i in 0..*c as i128 {
                for j in 0..*b as i128 {
                    copies.push((&r, i * *st as i128 + j * e));
                }
            }
            combine(&copies, false)
        }
        Spec::Indexed(bd, t) | Spec::Hindexed(bd, t) => {
            let r = reference(t);
            let e = r.extent();
            let unit = if matches!(s, Spec::Indexed(..)) { e } else { 1 };
            let mut copies = Vec::new();
            for &(b, d) in bd {
                for j in 0..b as i128 {
                    copies.push((&r, d as i128 * unit + j * e));
                }
            }
            combine(&copies, false)
        }
        Spec::IndexedBlock(b, ds, t) | Spec::HindexedBlock(b, ds, t) => {
            let r = reference(t);
            let e = r.extent();
            let unit = if matches!(s, Spec::IndexedBlock(..)) {
                e
            } else {
                1
            };
            let mut copies = Vec::new();
            for &d in ds {
                for j in 0..*b as i128 {
                    copies.push((&r, d as i128 * unit + j * e));
                }
            }
            combine(&copies, false)
        }
        Spec::Struct(parts) => {
            let refs: Vec<Ref> = parts.iter().map(|p| reference(&p.2)).collect();
            let mut copies = Vec::new();
            for (p, r) in parts.iter().zip(&refs) {
                for j in 0..p.0 as i128 {
                    copies.push((r, p.1 as i128 + j * r.extent()));
                }
            }
            combine(&copies, true)
        }
        Spec::Resized(lb, ext, t) => {
            let mut r = reference(t);
            r.lb = *lb as i128;
            r.ub = (*lb + *ext) as i128;
            r.marks = Some((r.lb, r.ub));
            r
        }
        Spec::Subarray(dims, order, t) => {
            let r = reference(t);
            let e = r.extent();
            let n = dims.len();
            let total: usize = dims.iter().map(|d| d.0).product();
            let mut copies = Vec::new();
            for lin in 0..total {
                // Decode the multi-index of storage position `lin`.
                let mut rest = lin;
                let mut inside = true;
                let fastest_first: Vec<usize> = match order {
                    Order::C => (0..n).rev().collect(),
                    Order::Fortran => (0..n).collect(),
                };
                for &k in &fastest_first {
                    let x = rest % dims[k].0;
                    rest /= dims[k].0;
                    inside &= x >= dims[k].2 && x < dims[k].2 + dims[k].1;
                }
                if inside {
                    copies.push((&r, lin as i128 * e));
                }
            }
            let mut out = combine(&copies, false);
            out.lb = 0;
            out.ub = total as i128 * e;
            out.marks = Some((out.lb, out.ub));
            out
        }
        Spec::Dup(t) => reference(t),
    }
}

fn leaf() -> impl Strategy<Value = Spec> {
    prop_oneof![
        6 => prop::sample::select(Primitive::ALL.to_vec()).prop_map(Spec::Prim),
        1 => prop::sample::select(Pair::ALL.to_vec()).prop_map(Spec::Pair),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    leaf().prop_recursive(5, 64, 4, |inner| {
        let b = || inner.clone().prop_map(Box::new);
        prop_oneof![
            (0..5usize, b()).prop_map(|(n, t)| Spec::Contig(n, t)),
            (0..6usize, 0..4usize, -4..5isize, b())
                .prop_map(|(c, bl, s, t)| Spec::Vector(c, bl, s, t)),
            (0..30usize, 1..3usize, -4..5isize, b())
                .prop_map(|(c, bl, s, t)| Spec::Vector(c, bl, s, t)),
            (0..6usize, 0..4usize, -40..41isize, b())
                .prop_map(|(c, bl, s, t)| Spec::Hvector(c, bl, s, t)),
            (prop::collection::vec((0..4usize, -6..7isize), 0..5), b())
                .prop_map(|(bd, t)| Spec::Indexed(bd, t)),
            (prop::collection::vec((0..4usize, -40..41isize), 0..5), b())
                .prop_map(|(bd, t)| Spec::Hindexed(bd, t)),
            (0..3usize, prop::collection::vec(-6..7isize, 0..5), b())
                .prop_map(|(bl, d, t)| Spec::IndexedBlock(bl, d, t)),
            (0..3usize, prop::collection::vec(-40..41isize, 0..5), b())
                .prop_map(|(bl, d, t)| Spec::HindexedBlock(bl, d, t)),
            // Evenly spaced hindexed_block: the layout becomes a repeat.
            (1..3usize, -24..25isize, 2..40usize, b()).prop_map(|(bl, step, n, t)| {
                Spec::HindexedBlock(bl, (0..n as isize).map(|k| k * step).collect(), t)
            }),
            prop::collection::vec((0..3usize, -40..41isize, inner.clone()), 1..4)
                .prop_map(Spec::Struct),
            (-16..17isize, -8..33isize, b()).prop_map(|(lb, e, t)| Spec::Resized(lb, e, t)),
            (
                prop::collection::vec(
                    (1..4usize)
                        .prop_flat_map(|sz| (Just(sz), 1..=sz))
                        .prop_flat_map(|(sz, sub)| (Just(sz), Just(sub), 0..=sz - sub)),
                    1..4
                ),
                prop_oneof![Just(Order::C), Just(Order::Fortran)],
                b()
            )
                .prop_map(|(d, o, t)| Spec::Subarray(d, o, t)),
            b().prop_map(Spec::Dup),
        ]
    })
}

/// Byte addresses (relative to the origin) of the packed stream of `count`
/// elements, in packed order.
fn stream(r: &Ref, count: usize) -> Vec<i128> {
    let one = r.bytes();
    let e = r.extent();
    (0..count as i128)
        .flat_map(|k| one.iter().map(move |&o| o + k * e))
        .collect()
}

fn is_consecutive(addrs: &[i128]) -> bool {
    addrs.windows(2).all(|w| w[1] == w[0] + 1)
}

/// Cut `0..total` at the given fractions into fragments.
fn fragments(total: usize, cuts: &[u16]) -> Vec<(usize, usize)> {
    let mut pts: Vec<usize> = cuts
        .iter()
        .map(|&c| c as usize * total / u16::MAX as usize)
        .collect();
    pts.push(0);
    pts.push(total);
    pts.sort_unstable();
    pts.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
}

fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const MAX_BYTES: usize = 20_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn matches_reference(
        s in spec(),
        count in 0..4usize,
        margins in (0..3usize, 0..3usize),
        cuts in prop::collection::vec(any::<u16>(), 0..6),
        seed in any::<u64>(),
    ) {
        let r = reference(&s);
        prop_assume!(r.size() * count.max(1) <= MAX_BYTES);
        let t = build(&s);

        // Sizes and bounds.
        let (tlb, tub) = r.true_bounds();
        prop_assert_eq!(t.size(), r.size());
        prop_assert_eq!((t.lb() as i128, t.ub() as i128), (r.lb, r.ub));
        prop_assert_eq!(t.extent() as i128, r.extent());
        prop_assert_eq!((t.true_lb() as i128, t.true_ub() as i128), (tlb, tub));
        prop_assert_eq!(t.true_extent() as i128, tub - tlb);
        prop_assert_eq!(t.has_explicit_bounds(), r.marks.is_some());
        prop_assert_eq!(t.element_count(), r.entries.len());

        // Contiguity.
        let one = r.bytes();
        prop_assert_eq!(t.is_contiguous(), is_consecutive(&one), "{:?}", t);
        let addrs = stream(&r, count);
        prop_assert_eq!(t.is_contiguous_for(count), is_consecutive(&addrs));

        // Signature and MPI_Get_elements.
        let mut sig: Vec<(Primitive, usize)> = Vec::new();
        for &(p, _) in &r.entries {
            match sig.last_mut() {
                Some(last) if last.0 == p => last.1 += 1,
                _ => sig.push((p, 1)),
            }
        }
        prop_assert_eq!(t.signature().collect::<Vec<_>>(), sig);
        let total = addrs.len();
        let c = Convertor::new(&t, count).unwrap();
        prop_assert_eq!(c.packed_size(), total);
        for n in [0, total / 3, total / 2, total.saturating_sub(1), total] {
            // Reference: whole primitives in the first n bytes, None if n cuts one.
            let mut at = 0usize;
            let mut elems = Some(0usize);
            for (k, &(p, _)) in r.entries.iter().cycle().take(r.entries.len() * count).enumerate() {
                if at >= n {
                    break;
                }
                at += p.size();
                elems = if at <= n { Some(k + 1) } else { None };
            }
            prop_assert_eq!(t.get_elements(n), elems, "n = {}", n);
        }

        // The buffer: the data span plus margins, filled with noise.
        let (lo, hi) = match (addrs.iter().min(), addrs.iter().max()) {
            (Some(&lo), Some(&hi)) => (lo, hi + 1),
            _ => (0, 0),
        };
        prop_assert_eq!(c.span().map(|s| (s.start as i128, s.end as i128)),
            (total > 0).then_some((lo, hi)));
        let len = (hi - lo) as usize + margins.0 + margins.1;
        let origin = margins.0 as i128 - lo;
        let src = fill(len, seed);
        let at = |a: i128| (origin + a) as usize;
        let expect: Vec<u8> = addrs.iter().map(|&a| src[at(a)]).collect();

        // Whole pack.
        let mut out = vec![0u8; total];
        prop_assert_eq!(c.pack(&src, origin as isize, 0, &mut out).unwrap(), total);
        prop_assert_eq!(&out, &expect);

        // Fragments in random order.
        let mut frags = fragments(total, &cuts);
        shuffle(&mut frags, seed);
        let mut out2 = vec![0u8; total];
        for &(off, n) in &frags {
            let got = c.pack(&src, origin as isize, off, &mut out2[off..off + n]).unwrap();
            prop_assert_eq!(got, n);
        }
        prop_assert_eq!(&out2, &expect);

        // unpack(pack(x)) in random fragment order: covered bytes restored,
        // the rest untouched.
        let mut dst = fill(len, !seed);
        let before = dst.clone();
        for &(off, n) in &frags {
            let got = c.unpack(&mut dst, origin as isize, off, &expect[off..off + n]).unwrap();
            prop_assert_eq!(got, n);
        }
        let mut covered = vec![false; len];
        for &a in &addrs {
            covered[at(a)] = true;
        }
        for i in 0..len {
            prop_assert_eq!(dst[i], if covered[i] { src[i] } else { before[i] }, "byte {}", i);
        }

        // Unpack of an arbitrary stream, fragments in order: the reference
        // writes in packed order (last write wins where elements overlap).
        let input = fill(total, seed ^ 0x55);
        let mut dst = before.clone();
        let mut ref_dst = before.clone();
        for (k, &a) in addrs.iter().enumerate() {
            ref_dst[at(a)] = input[k];
        }
        let mut in_order = fragments(total, &cuts);
        in_order.sort_unstable();
        for &(off, n) in &in_order {
            c.unpack(&mut dst, origin as isize, off, &input[off..off + n]).unwrap();
        }
        prop_assert_eq!(&dst, &ref_dst);

        // Runs of a range map exactly the range's bytes.
        if let Some(&(off, n)) = frags.first() {
            let mut got = Vec::new();
            c.for_each_run(off, n, |a, l| got.extend((0..l as i128).map(|b| a as i128 + b))).unwrap();
            prop_assert_eq!(&got[..], &addrs[off..off + n]);
            // Blocks (strided runs as one call) map the same bytes.
            let mut got = Vec::new();
            c.for_each_block(off, n, |a, stride, l, count| {
                for k in 0..count as i128 {
                    let at = a as i128 + k * stride as i128;
                    got.extend((0..l as i128).map(|b| at + b));
                }
            })
            .unwrap();
            prop_assert_eq!(&got[..], &addrs[off..off + n]);
        }

        // Bounds: a buffer one byte short at either end is refused.
        if total > 0 {
            let exact = &src[margins.0..margins.0 + (hi - lo) as usize];
            let o = -lo as isize;
            prop_assert!(c.pack(exact, o, 0, &mut out).is_ok());
            let short_end = &exact[..exact.len() - 1];
            let short_start = &exact[1..];
            let is_oob = |e: DatatypeError| matches!(e, DatatypeError::OutOfBounds { .. });
            prop_assert!(is_oob(c.pack(short_end, o, 0, &mut out).unwrap_err()));
            prop_assert!(is_oob(c.pack(short_start, o, total - 1, &mut out).unwrap_err()));
            prop_assert!(is_oob(c.pack(exact, o + 1, 0, &mut out).unwrap_err()));
            let mut d = short_end.to_vec();
            prop_assert!(is_oob(c.unpack(&mut d, o, 0, &expect).unwrap_err()));
        }
    }
}
