//! `external32` images and distributed arrays, checked against values
//! worked out by hand and against direct computations.

use oxmpi_datatype::{Datatype, DatatypeError, Distribution, Order, Pair, Primitive};
use proptest::prelude::*;

fn prim(p: Primitive) -> Datatype {
    Datatype::predefined(p)
}

/// The external32 image of `count` elements of `t` in `buf` (origin 0).
fn ext(t: &Datatype, buf: &[u8], count: usize) -> Vec<u8> {
    let mut out = vec![0u8; t.external32_size(count).unwrap()];
    assert_eq!(
        t.pack_external32(buf, 0, count, &mut out).unwrap(),
        out.len()
    );
    out
}

#[test]
fn external32_images_of_basic_types() {
    let ints: Vec<u8> = [1i32, -2].iter().flat_map(|v| v.to_ne_bytes()).collect();
    assert_eq!(
        ext(&prim(Primitive::I32), &ints, 2),
        [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe]
    );
    let d = 1.0f64.to_ne_bytes();
    assert_eq!(
        ext(&prim(Primitive::F64), &d, 1),
        [0x3f, 0xf0, 0, 0, 0, 0, 0, 0]
    );
    // C long: 4 bytes in external32, sign kept.
    let l: Vec<u8> = [-3i64, 0x0102_0304]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let t = prim(Primitive::Long);
    assert_eq!(t.external32_size(2).unwrap(), 8);
    let img = ext(&t, &l, 2);
    assert_eq!(img, [0xff, 0xff, 0xff, 0xfd, 1, 2, 3, 4]);
    let mut back = vec![0u8; 16];
    assert_eq!(t.unpack_external32(&mut back, 0, 2, &img).unwrap(), 8);
    assert_eq!(back, l);
    // Outside 32 bits: an error, not a cut value.
    let big = (1i64 << 40).to_ne_bytes();
    let mut out = [0u8; 4];
    assert!(matches!(
        t.pack_external32(&big, 0, 1, &mut out),
        Err(DatatypeError::Conversion(_))
    ));
    let ubig = (u64::from(u32::MAX) + 1).to_ne_bytes();
    assert!(matches!(
        prim(Primitive::ULong).pack_external32(&ubig, 0, 1, &mut out),
        Err(DatatypeError::Conversion(_))
    ));
    // float complex: each part big-endian.
    let z: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
    assert_eq!(
        ext(&prim(Primitive::ComplexF32), &z, 1),
        [0x3f, 0x80, 0, 0, 0x40, 0, 0, 0]
    );
    // long double (x87, 16 bytes in memory): IEEE quadruple precision.
    let mut ld = [0u8; 16];
    ld[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
    ld[8..10].copy_from_slice(&0xbffdu16.to_le_bytes()); // -0.25
    let mut q = [0u8; 16];
    q[0] = 0xbf;
    q[1] = 0xfd;
    assert_eq!(ext(&prim(Primitive::LongDouble), &ld, 1), q);
    // Bytes as they are.
    assert_eq!(ext(&Datatype::byte(), &[9, 8, 7], 3), [9, 8, 7]);
}

#[test]
fn external32_of_a_derived_type_skips_gaps_and_padding() {
    // struct { short s; long l; double d } (offsets 0, 8, 16; extent 24)
    // in a vector of 2 with stride 2 (extent 3 structs): external32 2 + 4
    // + 8 bytes each; 3 vectors take structs 0, 2, 3, 5, 6, 8.
    let st = Datatype::structured(
        &[1, 1, 1],
        &[0, 8, 16],
        &[prim(Primitive::I16), prim(Primitive::Long), Datatype::f64()],
    )
    .unwrap();
    let v = Datatype::vector(2, 1, 2, &st).unwrap();
    assert_eq!(v.external32_size(3).unwrap(), 3 * 2 * 14);
    let mut buf = vec![0u8; 24 * 4 * 3];
    for e in 0..12 {
        let at = e * 24;
        buf[at..at + 2].copy_from_slice(&(e as i16 * 3).to_ne_bytes());
        buf[at + 8..at + 16].copy_from_slice(&(-(e as i64)).to_ne_bytes());
        buf[at + 16..at + 24].copy_from_slice(&(e as f64 / 4.0).to_ne_bytes());
    }
    let img = ext(&v, &buf, 3);
    // Element 1 of the packed stream is struct 2 (every other one).
    assert_eq!(&img[14..16], &6i16.to_be_bytes());
    assert_eq!(&img[16..20], &(-2i32).to_be_bytes());
    assert_eq!(&img[20..28], &0.5f64.to_be_bytes());
    let mut back = vec![0xeeu8; buf.len()];
    assert_eq!(
        v.unpack_external32(&mut back, 0, 3, &img).unwrap(),
        img.len()
    );
    for e in 0..12 {
        let at = e * 24;
        if e < 9 && e % 3 != 1 {
            assert_eq!(&back[at..at + 2], &buf[at..at + 2]);
            assert_eq!(&back[at + 8..at + 24], &buf[at + 8..at + 24]);
            assert_eq!(&back[at + 2..at + 8], &[0xee; 6], "padding untouched");
        } else {
            assert_eq!(&back[at..at + 24], &[0xee; 24], "gap untouched");
        }
    }
    // Too small an output, an input too short: errors.
    let mut small = vec![0u8; img.len() - 1];
    assert!(v.pack_external32(&buf, 0, 3, &mut small).is_err());
    assert!(v.unpack_external32(&mut back, 0, 3, &img[1..]).is_err());
    // A buffer that does not hold the elements: an error.
    assert!(matches!(
        v.pack_external32(&buf[..100], 0, 3, &mut vec![0u8; img.len()]),
        Err(DatatypeError::OutOfBounds { .. })
    ));
}

#[test]
fn external32_sizes_of_pairs() {
    assert_eq!(
        Datatype::pair(Pair::LongDoubleInt)
            .external32_size(2)
            .unwrap(),
        40
    );
    assert_eq!(Datatype::pair(Pair::LongInt).external32_size(1).unwrap(), 8);
    assert_eq!(
        Datatype::pair(Pair::ShortInt).external32_size(1).unwrap(),
        6
    );
}

/// Every primitive but `long` and `unsigned long` round-trips whatever its
/// bytes (long double's padding aside), through chunks larger than the
/// converter's.
#[test]
fn external32_round_trips_long_streams() {
    for p in Primitive::ALL {
        let t = prim(p);
        let n = 70_000 / p.size() + 3;
        let mut buf: Vec<u8> = (0..n * p.size())
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1])
            .collect();
        match p {
            Primitive::Long | Primitive::ULong => {
                for (k, c) in buf.chunks_exact_mut(8).enumerate() {
                    c.copy_from_slice(&(k as i64 - 5).to_ne_bytes());
                    if p == Primitive::ULong {
                        c.copy_from_slice(&(k as u64).to_ne_bytes());
                    }
                }
            }
            Primitive::LongDouble | Primitive::ComplexLongDouble => {
                // Normal x87 values (integer bit set), padding zero.
                for c in buf.chunks_exact_mut(16) {
                    c[7] |= 0x80;
                    c[9] = (c[9] & 0x80) | 0x3f;
                    c[10..].fill(0);
                }
            }
            _ => {}
        }
        let img = ext(&t, &buf, n);
        let mut back = vec![0u8; buf.len()];
        t.unpack_external32(&mut back, 0, n, &img).unwrap();
        assert_eq!(back, buf, "{p}");
    }
}

/// Process `r`'s elements of a 1-D distribution, by the standard's
/// definition.
fn owned(g: isize, dist: Distribution, p: isize, r: isize) -> Vec<isize> {
    (0..g)
        .filter(|&i| match dist {
            Distribution::None => true,
            Distribution::Block(b) => i / b.unwrap_or((g + p - 1) / p) == r,
            Distribution::Cyclic(b) => (i / b.unwrap_or(1)) % p == r,
        })
        .collect()
}

/// The elements (as linear indices into the global array) a darray type
/// selects, in packed order.
fn selected(t: &Datatype, total: usize) -> Vec<isize> {
    let buf: Vec<u8> = (0..total as u32).flat_map(|i| i.to_ne_bytes()).collect();
    let mut out = vec![0u8; t.size()];
    t.pack(&buf, 0, 1, 0, &mut out).unwrap();
    out.chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()) as isize)
        .collect()
}

#[test]
fn darray_of_two_dimensions_matches_ownership() {
    let (g, p) = ([7isize, 9], [2isize, 3]);
    let dists = [Distribution::Block(None), Distribution::Cyclic(Some(2))];
    for order in [Order::C, Order::Fortran] {
        let mut seen = [0u8; 63];
        for r in 0..6 {
            let t = Datatype::darray(6, r, &g, &dists, &p, order, &Datatype::i32()).unwrap();
            assert_eq!((t.lb(), t.extent()), (0, 63 * 4));
            let (rx, ry) = (r / 3, r % 3);
            let (a, b) = (owned(7, dists[0], 2, rx), owned(9, dists[1], 3, ry));
            let mut want = Vec::new();
            match order {
                Order::C => {
                    for &x in &a {
                        for &y in &b {
                            want.push(x * 9 + y);
                        }
                    }
                }
                Order::Fortran => {
                    for &y in &b {
                        for &x in &a {
                            want.push(x + y * 7);
                        }
                    }
                }
            }
            let got = selected(&t, 63);
            assert_eq!(got, want, "{order:?} rank {r}");
            for i in got {
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{order:?}: {seen:?}");
    }
}

#[test]
fn darray_errors() {
    let i = Datatype::i32();
    let bad = |r: Result<Datatype, DatatypeError>| {
        assert!(matches!(r, Err(DatatypeError::InvalidArgument(_))), "{r:?}")
    };
    let blk = [Distribution::Block(None)];
    bad(Datatype::darray(2, 2, &[4], &blk, &[2], Order::C, &i)); // rank
    bad(Datatype::darray(2, 0, &[4], &blk, &[3], Order::C, &i)); // grid
    bad(Datatype::darray(2, 0, &[0], &blk, &[2], Order::C, &i)); // gsize
    bad(Datatype::darray(
        2,
        0,
        &[9],
        &[Distribution::Block(Some(4))],
        &[2],
        Order::C,
        &i,
    ));
    bad(Datatype::darray(
        2,
        0,
        &[9],
        &[Distribution::Cyclic(Some(0))],
        &[2],
        Order::C,
        &i,
    ));
    bad(Datatype::darray(
        2,
        0,
        &[9],
        &[Distribution::None],
        &[2],
        Order::C,
        &i,
    ));
    bad(Datatype::darray(1, 0, &[], &[], &[], Order::C, &i));
}

proptest! {
    /// 1-D distributions of any kind: each rank gets exactly its elements,
    /// in order, and the extent is the whole array.
    #[test]
    fn darray_one_dimension(g in 1isize..40, p in 1isize..6, kind in 0u8..4, b in 1isize..6) {
        let dist = match kind {
            0 => Distribution::Block(None),
            1 => Distribution::Block(Some(b.max((g + p - 1) / p))),
            2 => Distribution::Cyclic(None),
            _ => Distribution::Cyclic(Some(b)),
        };
        for r in 0..p {
            let t = Datatype::darray(p, r, &[g], &[dist], &[p], Order::C, &Datatype::i32()).unwrap();
            prop_assert_eq!(t.extent(), g * 4);
            prop_assert_eq!(selected(&t, g as usize), owned(g, dist, p, r));
        }
    }
}
