//! Per-constructor checks of MPI's size / bound / extent rules, with values
//! worked out by hand (several are the examples of MPI 4.1 §5.1), and of the
//! convertor's error and truncation behaviour.

use oxmpi_datatype::{
    Combiner, Convertor, Datatype, DatatypeError, Order, Pair, Primitive, ReceiveStatus, Unpacked,
};

/// (size, lb, ub, true_lb, true_ub)
fn bounds(t: &Datatype) -> (usize, isize, isize, isize, isize) {
    (t.size(), t.lb(), t.ub(), t.true_lb(), t.true_ub())
}

/// Packs one element (buffer 0..len with the origin at `origin`).
fn pack_all(t: &Datatype, count: usize, len: usize, origin: isize) -> Vec<u8> {
    let buf: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let c = Convertor::new(t, count).unwrap();
    let mut out = vec![0u8; c.packed_size()];
    assert_eq!(c.pack(&buf, origin, 0, &mut out).unwrap(), out.len());
    out
}

fn seq(r: std::ops::Range<u8>) -> Vec<u8> {
    r.collect()
}

/// `{(double, 0), (char, 8)}`: the standard's running example, extent 16.
fn dc() -> Datatype {
    Datatype::structured(&[1, 1], &[0, 8], &[Datatype::f64(), Datatype::i8()]).unwrap()
}

#[test]
fn predefined_primitives() {
    for p in Primitive::ALL {
        let t = Datatype::predefined(p);
        let s = p.size();
        assert_eq!(bounds(&t), (s, 0, s as isize, 0, s as isize), "{p}");
        assert_eq!(t.extent(), s as isize);
        assert!(t.is_contiguous() && t.is_contiguous_for(10));
        assert_eq!(t.as_primitive(), Some(p));
        assert_eq!(t.element_count(), 1);
        assert_eq!(t.uniform_primitive(), Some(p));
        assert!(
            t.same_handle(&Datatype::from(p)),
            "predefined types are cached"
        );
    }
    assert_eq!(Datatype::bool().size(), 1);
    assert_eq!(Datatype::char().size(), 4);
    assert_eq!(Datatype::byte().size(), 1);
    assert_eq!(Datatype::packed().size(), 1);
}

#[test]
fn predefined_pairs_have_c_struct_layout() {
    let expect = [
        (Pair::TwoInt, 8, 8, Some(Primitive::I32)),
        (Pair::ShortInt, 6, 8, None),
        (Pair::FloatInt, 8, 8, None),
        (Pair::LongInt, 12, 16, None),
        (Pair::DoubleInt, 12, 16, None),
        (Pair::TwoFloat, 8, 8, Some(Primitive::F32)),
        (Pair::TwoDouble, 16, 16, Some(Primitive::F64)),
        // struct { long double; int }: 32 bytes in C, 20 of data.
        (Pair::LongDoubleInt, 20, 32, None),
    ];
    for (p, size, extent, uniform) in expect {
        let t = Datatype::pair(p);
        assert_eq!((t.size(), t.extent(), t.lb()), (size, extent, 0), "{p}");
        assert_eq!(t.element_count(), 2);
        assert_eq!(t.as_pair(), Some(p));
        assert_eq!(t.uniform_primitive(), uniform, "{p}");
        assert_eq!(t.combiner(), Combiner::Pair(p));
    }
    // SHORT_INT: the i32 sits at offset 4, after two bytes of padding.
    assert_eq!(
        pack_all(&Datatype::pair(Pair::ShortInt), 1, 8, 0),
        vec![0, 1, 4, 5, 6, 7]
    );
    assert!(!Datatype::pair(Pair::ShortInt).is_contiguous());
    assert!(Datatype::pair(Pair::DoubleInt).is_contiguous());
    assert!(!Datatype::pair(Pair::DoubleInt).is_contiguous_for(2));
}

/// The primitives that are not their own alignment, and the C layouts they
/// give structs: `{char; long double; char}` is 48 bytes, `{char; double
/// complex; char}` 32.
#[test]
fn long_double_and_complex_align_as_in_c() {
    assert_eq!(Primitive::LongDouble.align(), 16);
    assert_eq!(Primitive::ComplexF32.align(), 4);
    assert_eq!(Primitive::ComplexF64.align(), 8);
    assert_eq!(Primitive::ComplexLongDouble.align(), 16);
    let c = Datatype::i8();
    let t = Datatype::structured(
        &[1, 1, 1],
        &[0, 16, 32],
        &[
            c.clone(),
            Datatype::predefined(Primitive::LongDouble),
            c.clone(),
        ],
    )
    .unwrap();
    assert_eq!(bounds(&t), (18, 0, 48, 0, 33));
    let t = Datatype::structured(
        &[1, 1, 1],
        &[0, 8, 24],
        &[c.clone(), Datatype::predefined(Primitive::ComplexF64), c],
    )
    .unwrap();
    assert_eq!(bounds(&t), (18, 0, 32, 0, 25));
    // A complex is one basic element.
    assert_eq!(t.element_count(), 3);
    assert_eq!(t.get_elements(17), Some(2));
    assert_eq!(t.get_elements(19), Some(4));
    assert_eq!(t.get_elements(9), None, "inside the complex");
}

#[test]
fn contiguous_rules() {
    let t = Datatype::contiguous(3, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (12, 0, 12, 0, 12));
    assert!(t.is_contiguous_for(7));
    assert_eq!(t.layout_units(), 1);
    // MPI 4.1 example: contiguous(3, {(double,0),(char,8)}) has extent 48.
    let t = Datatype::contiguous(3, &dc()).unwrap();
    assert_eq!(bounds(&t), (27, 0, 48, 0, 41));
    assert!(!t.is_contiguous());
    let empty = Datatype::contiguous(0, &Datatype::f64()).unwrap();
    assert_eq!(bounds(&empty), (0, 0, 0, 0, 0));
    assert!(empty.is_contiguous());
    assert_eq!(
        Datatype::contiguous(-1, &Datatype::i32()).unwrap_err(),
        DatatypeError::NegativeCount {
            what: "count",
            value: -1
        }
    );
}

#[test]
fn vector_rules() {
    // 3 blocks of 2 ints, stride 4 ints: extent ((3-1)*4 + 2) * 4.
    let t = Datatype::vector(3, 2, 4, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (24, 0, 40, 0, 40));
    assert!(!t.is_contiguous());
    assert_eq!(t.combiner(), Combiner::Vector);
    // Negative stride: blocks at 0, -16, -32.
    let t = Datatype::vector(3, 2, -4, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (24, -32, 8, -32, 8));
    assert_eq!(
        pack_all(&t, 1, 40, 32),
        [seq(32..40), seq(16..24), seq(0..8)].concat()
    );
    // MPI 4.1 example: vector(2, 3, 4, {(double,0),(char,8)}) has extent 112.
    let t = Datatype::vector(2, 3, 4, &dc()).unwrap();
    assert_eq!(bounds(&t), (54, 0, 112, 0, 105));
    // stride == blocklen: contiguous; count 1: stride irrelevant.
    assert!(Datatype::vector(5, 2, 2, &Datatype::f32())
        .unwrap()
        .is_contiguous());
    let one = Datatype::vector(1, 3, isize::MAX, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&one), (12, 0, 12, 0, 12));
    // Stride 0: overlapping blocks.
    let t = Datatype::vector(3, 1, 0, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (12, 0, 4, 0, 4));
    assert_eq!(
        pack_all(&t, 1, 4, 0),
        [seq(0..4), seq(0..4), seq(0..4)].concat()
    );
    assert!(matches!(
        Datatype::vector(2, -1, 1, &Datatype::i32()),
        Err(DatatypeError::NegativeCount {
            what: "blocklen",
            ..
        })
    ));
    // Empty vectors.
    assert_eq!(
        Datatype::vector(0, 5, 3, &Datatype::i32()).unwrap().size(),
        0
    );
    assert_eq!(Datatype::vector(5, 0, 3, &Datatype::i32()).unwrap().ub(), 0);
}

#[test]
fn hvector_rules() {
    let t = Datatype::hvector(2, 1, 6, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (8, 0, 10, 0, 10));
    assert_eq!(pack_all(&t, 1, 10, 0), [seq(0..4), seq(6..10)].concat());
    let t = Datatype::hvector(3, 2, -20, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (24, -40, 8, -40, 8));
    assert_eq!(t.combiner(), Combiner::Hvector);
}

#[test]
fn indexed_rules() {
    // Blocks: 2 ints at element 3 (bytes 12..20), 1 int at element 0.
    let t = Datatype::indexed(&[2, 1], &[3, 0], &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (12, 0, 20, 0, 20));
    assert_eq!(pack_all(&t, 1, 20, 0), [seq(12..20), seq(0..4)].concat());
    // Zero-length blocks do not count for the bounds.
    let t = Datatype::indexed(&[0, 2], &[100, 1], &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (8, 4, 12, 4, 12));
    // MPI 4.1 example: indexed([3,1], [4,0], {(double,0),(char,8)}).
    let t = Datatype::indexed(&[3, 1], &[4, 0], &dc()).unwrap();
    assert_eq!(bounds(&t), (36, 0, 112, 0, 105));
    // Adjacent blocks in order merge into one run.
    let t = Datatype::indexed(&[1, 2, 1], &[0, 1, 3], &Datatype::i32()).unwrap();
    assert!(t.is_contiguous());
    assert_eq!(
        Datatype::indexed(&[1], &[0, 1], &Datatype::i32()).unwrap_err(),
        DatatypeError::LengthMismatch {
            what: "displs",
            expected: 1,
            found: 2
        }
    );
    assert!(matches!(
        Datatype::indexed(&[1, -2], &[0, 1], &Datatype::i32()),
        Err(DatatypeError::NegativeCount { .. })
    ));
}

#[test]
fn hindexed_rules() {
    let t = Datatype::hindexed(&[1, 1], &[8, -4], &Datatype::f32()).unwrap();
    assert_eq!(bounds(&t), (8, -4, 12, -4, 12));
    assert_eq!(pack_all(&t, 1, 16, 4), [seq(12..16), seq(0..4)].concat());
    assert_eq!(t.combiner(), Combiner::Hindexed);
}

#[test]
fn indexed_block_rules() {
    let t = Datatype::indexed_block(2, &[0, 2, 4], &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (24, 0, 24, 0, 24));
    assert!(t.is_contiguous());
    // Regular displacements are stored as one strided repeat.
    let displs: Vec<isize> = (0..10_000).map(|i| i * 16).collect();
    let t = Datatype::hindexed_block(1, &displs, &Datatype::f64()).unwrap();
    assert_eq!(bounds(&t), (80_000, 0, 160_000 - 8, 0, 160_000 - 8));
    assert!(t.layout_units() <= 2, "{}", t.layout_units());
    let t = Datatype::hindexed_block(2, &[-8, 8], &Datatype::i32()).unwrap();
    assert_eq!(bounds(&t), (16, -8, 16, -8, 16));
    assert_eq!(t.combiner(), Combiner::HindexedBlock);
}

#[test]
fn struct_rules() {
    let t = dc();
    assert_eq!(bounds(&t), (9, 0, 16, 0, 9));
    assert_eq!(t.alignment(), 8);
    let t = Datatype::structured(&[1, 1], &[0, 4], &[Datatype::i8(), Datatype::i32()]).unwrap();
    assert_eq!(bounds(&t), (5, 0, 8, 0, 8));
    // MPI 4.1 example: B = {2,1,3}, D = {0,16,26}, T = {float, type1, char}:
    // {(float,0),(float,4),(double,16),(char,24),(char,26),(char,27),(char,28)},
    // raw ub 29 padded to the double alignment: 32.
    let t = Datatype::structured(
        &[2, 1, 3],
        &[0, 16, 26],
        &[Datatype::f32(), dc(), Datatype::i8()],
    )
    .unwrap();
    assert_eq!(bounds(&t), (20, 0, 32, 0, 29));
    let sig: Vec<_> = t.signature().collect();
    assert_eq!(
        sig,
        vec![(Primitive::F32, 2), (Primitive::F64, 1), (Primitive::I8, 4)]
    );
    // Padding applies to the extent, from the lower bound.
    let t = Datatype::structured(&[1, 1], &[-3, 1], &[Datatype::i8(), Datatype::i32()]).unwrap();
    assert_eq!(bounds(&t), (5, -3, 5, -3, 5));
    // A marked (resized) member makes its markers the bounds.
    let r = Datatype::resized(&Datatype::i32(), 0, 2).unwrap();
    let t = Datatype::structured(&[1, 1], &[0, 8], &[r, Datatype::i32()]).unwrap();
    assert_eq!(bounds(&t), (8, 0, 2, 0, 12));
    assert!(t.has_explicit_bounds());
    // Zero-length blocks and types without data are skipped.
    let t = Datatype::structured(
        &[0, 1, 3],
        &[-100, 4, 100],
        &[
            Datatype::f64(),
            Datatype::i16(),
            Datatype::contiguous(0, &Datatype::i32()).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(bounds(&t), (2, 4, 6, 4, 6));
    assert!(matches!(
        Datatype::structured(&[1], &[0], &[]),
        Err(DatatypeError::LengthMismatch { what: "types", .. })
    ));
}

#[test]
fn resized_rules() {
    let r = Datatype::resized(&Datatype::i32(), -4, 16).unwrap();
    assert_eq!(bounds(&r), (4, -4, 12, 0, 4));
    assert_eq!(r.extent(), 16);
    assert!(r.is_contiguous() && !r.is_contiguous_for(2));
    let t = Datatype::contiguous(2, &r).unwrap();
    assert_eq!(bounds(&t), (8, -4, 28, 0, 20));
    assert_eq!(pack_all(&t, 1, 20, 0), [seq(0..4), seq(16..20)].concat());
    // Markers are sticky through further constructors.
    let v = Datatype::vector(2, 1, 3, &r).unwrap();
    assert_eq!(bounds(&v), (8, -4, 60, 0, 52));
    // Zero and negative extents are allowed.
    let z = Datatype::resized(&Datatype::i32(), 0, 0).unwrap();
    assert_eq!(Datatype::contiguous(3, &z).unwrap().extent(), 0);
    let n = Datatype::resized(&Datatype::i32(), 0, -4).unwrap();
    let t = Datatype::contiguous(3, &n).unwrap();
    assert_eq!((t.lb(), t.ub(), t.true_lb(), t.true_ub()), (-8, -4, -8, 4));
    assert_eq!(
        pack_all(&t, 1, 12, 8),
        [seq(8..12), seq(4..8), seq(0..4)].concat()
    );
    assert!(matches!(
        Datatype::resized(&Datatype::i32(), isize::MAX, 1),
        Err(DatatypeError::Overflow { .. })
    ));
}

#[test]
fn subarray_rules() {
    let c = Datatype::subarray(&[4, 5], &[2, 3], &[1, 1], Order::C, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&c), (24, 0, 80, 24, 56));
    assert_eq!(c.combiner(), Combiner::Subarray);
    assert_eq!(pack_all(&c, 1, 80, 0), [seq(24..36), seq(44..56)].concat());
    let f =
        Datatype::subarray(&[4, 5], &[2, 3], &[1, 1], Order::Fortran, &Datatype::i32()).unwrap();
    assert_eq!(bounds(&f), (24, 0, 80, 20, 60));
    assert_eq!(
        pack_all(&f, 1, 80, 0),
        [seq(20..28), seq(36..44), seq(52..60)].concat()
    );
    // Two consecutive subarrays tile two consecutive arrays.
    let two = pack_all(&c, 2, 160, 0);
    assert_eq!(&two[24..], &[seq(104..116), seq(124..136)].concat()[..]);
    // Whole array: contiguous.
    let w = Datatype::subarray(
        &[3, 3, 3],
        &[3, 3, 3],
        &[0, 0, 0],
        Order::C,
        &Datatype::u8(),
    )
    .unwrap();
    assert!(w.is_contiguous_for(4));
    for (sizes, subs, starts) in [
        (vec![4], vec![5], vec![0]),
        (vec![4], vec![0], vec![0]),
        (vec![4], vec![2], vec![3]),
        (vec![], vec![], vec![]),
    ] {
        assert!(
            matches!(
                Datatype::subarray(&sizes, &subs, &starts, Order::C, &Datatype::i32()),
                Err(DatatypeError::InvalidArgument(_))
            ),
            "{sizes:?} {subs:?} {starts:?}"
        );
    }
    assert!(matches!(
        Datatype::subarray(&[4], &[2], &[-1], Order::C, &Datatype::i32()),
        Err(DatatypeError::NegativeCount { what: "start", .. })
    ));
}

#[test]
fn dup_keeps_the_type_map() {
    let t = Datatype::vector(3, 1, 2, &dc()).unwrap();
    let d = t.dup();
    assert_eq!(bounds(&d), bounds(&t));
    assert_eq!(d.extent(), t.extent());
    assert_eq!(d.combiner(), Combiner::Dup);
    assert!(!d.same_handle(&t) && t.clone().same_handle(&t));
    assert_eq!(pack_all(&d, 2, 200, 0), pack_all(&t, 2, 200, 0));
}

#[test]
fn overflow_is_an_error() {
    assert!(matches!(
        Datatype::contiguous(isize::MAX, &Datatype::i64()),
        Err(DatatypeError::Overflow { .. })
    ));
    assert!(matches!(
        Datatype::vector(2, 1, isize::MAX, &Datatype::f64()),
        Err(DatatypeError::Overflow { .. })
    ));
    assert!(matches!(
        Datatype::hvector(isize::MAX, isize::MAX, isize::MAX, &Datatype::u8()),
        Err(DatatypeError::Overflow { .. })
    ));
    let big = Datatype::contiguous(isize::MAX / 2, &Datatype::u8()).unwrap();
    assert!(matches!(
        Datatype::contiguous(3, &big),
        Err(DatatypeError::Overflow { .. })
    ));
    assert!(matches!(
        Convertor::new(&big, 3),
        Err(DatatypeError::Overflow { .. })
    ));
    // Empty type with huge extent via markers: the bounds overflow.
    let e = Datatype::resized(
        &Datatype::contiguous(0, &Datatype::u8()).unwrap(),
        0,
        isize::MAX / 2,
    )
    .unwrap();
    assert_eq!(e.size(), 0);
    assert!(matches!(
        Datatype::contiguous(4, &e),
        Err(DatatypeError::Overflow { .. })
    ));
}

#[test]
fn zero_size_types_pack_nothing() {
    let z = Datatype::vector(3, 0, 2, &Datatype::i32()).unwrap();
    assert_eq!((z.size(), z.extent(), z.element_count()), (0, 0, 0));
    let c = Convertor::new(&z, 1000).unwrap();
    assert_eq!(c.packed_size(), 0);
    assert_eq!(c.span(), None);
    assert_eq!(c.pack(&[], 0, 0, &mut [0u8; 8]).unwrap(), 0);
    assert_eq!(c.unpack(&mut [], 5, 0, &[1, 2, 3]).unwrap(), 0);
    assert_eq!(z.get_count(0), Some(0));
    assert_eq!(z.get_elements(0), Some(0));
    assert!(matches!(
        c.pack(&[], 0, 1, &mut [0u8; 8]),
        Err(DatatypeError::PackedOffset {
            offset: 1,
            total: 0
        })
    ));
    let s = c.receive_status(12);
    assert_eq!(
        s,
        ReceiveStatus {
            delivered: 0,
            truncated: true,
            count: Some(0),
            elements: Some(0)
        }
    );
}

#[test]
fn get_count_and_elements() {
    let t = dc(); // size 9: f64 then i8
    assert_eq!(t.get_count(18), Some(2));
    assert_eq!(t.get_count(17), None);
    assert_eq!(t.get_elements(8), Some(1));
    assert_eq!(t.get_elements(9), Some(2));
    assert_eq!(t.get_elements(17), Some(3));
    assert_eq!(t.get_elements(18), Some(4));
    assert_eq!(t.get_elements(4), None);
    assert_eq!(t.get_elements(13), None);
    let v = Datatype::vector(1000, 3, 7, &Datatype::i16()).unwrap();
    assert_eq!(v.element_count(), 3000);
    assert_eq!(v.get_elements(6000 * 3 + 10), Some(9005));
    assert_eq!(v.get_elements(11), None);
    assert_eq!(v.uniform_primitive(), Some(Primitive::I16));
    assert_eq!(
        v.signature().collect::<Vec<_>>(),
        vec![(Primitive::I16, 3000)]
    );
}

#[test]
fn buffer_bounds_are_checked() {
    // Data at bytes -8..16 relative to the origin.
    let t = Datatype::hindexed(&[2, 1], &[8, -8], &Datatype::i32()).unwrap();
    let c = Convertor::new(&t, 1).unwrap();
    assert_eq!(c.span(), Some(-8..16));
    let buf = vec![7u8; 24];
    let mut out = vec![0u8; 12];
    assert_eq!(c.pack(&buf, 8, 0, &mut out).unwrap(), 12);
    for (len, origin) in [(24, 7), (24, 9), (23, 8), (0, 0)] {
        let err = c.pack(&buf[..len], origin, 4, &mut out).unwrap_err();
        assert!(matches!(err, DatatypeError::OutOfBounds { .. }), "{err}");
        let mut b = buf[..len].to_vec();
        assert!(matches!(
            c.unpack(&mut b, origin, 0, &out),
            Err(DatatypeError::OutOfBounds { .. })
        ));
    }
    assert_eq!(
        c.pack(&buf, 8, 13, &mut out).unwrap_err(),
        DatatypeError::PackedOffset {
            offset: 13,
            total: 12
        }
    );
    assert_eq!(c.pack(&buf, 8, 12, &mut out).unwrap(), 0);
    // Extreme origins do not overflow.
    assert!(c.pack(&buf, isize::MAX, 0, &mut out).is_err());
    assert!(c.pack(&buf, isize::MIN, 0, &mut out).is_err());
}

#[test]
fn truncation_delivers_what_fits() {
    let t = Datatype::vector(2, 1, 2, &Datatype::i32()).unwrap(); // size 8, extent 12
    let c = Convertor::new(&t, 2).unwrap(); // 16 packed bytes, span 0..24
    let incoming: Vec<u8> = (100..124).collect(); // a 24-byte message
    let mut buf = vec![0u8; 28];
    // Fragments of 10 bytes, last one first.
    let mut got = Vec::new();
    for off in [20usize, 10, 0] {
        let end = (off + 10).min(incoming.len());
        got.push(
            c.unpack_truncating(&mut buf, 0, off, &incoming[off..end])
                .unwrap(),
        );
    }
    assert_eq!(
        got,
        vec![
            Unpacked {
                consumed: 0,
                discarded: 4
            },
            Unpacked {
                consumed: 6,
                discarded: 4
            },
            Unpacked {
                consumed: 10,
                discarded: 0
            }
        ]
    );
    assert!(got[0].truncated() && !got[2].truncated());
    let mut expect = vec![0u8; 28];
    for (k, addr) in [0usize, 8, 12, 20].into_iter().enumerate() {
        expect[addr..addr + 4].copy_from_slice(&incoming[4 * k..4 * k + 4]);
    }
    assert_eq!(buf, expect);
    assert_eq!(
        c.receive_status(24),
        ReceiveStatus {
            delivered: 16,
            truncated: true,
            count: Some(2),
            elements: Some(4)
        }
    );
    assert_eq!(
        c.receive_status(12),
        ReceiveStatus {
            delivered: 12,
            truncated: false,
            count: None,
            elements: Some(3)
        }
    );
}

#[test]
fn runs_and_contiguous_ranges() {
    let t = Datatype::vector(3, 2, 4, &Datatype::u8()).unwrap(); // runs at 0, 4, 8
    let c = Convertor::new(&t, 2).unwrap(); // extent 10: second element at 10
    let mut runs = Vec::new();
    c.for_each_run(1, 9, |o, l| runs.push((o, l))).unwrap();
    assert_eq!(runs, vec![(1, 1), (4, 2), (8, 2), (10, 2), (14, 2)]);
    assert_eq!(c.contiguous_range(), None);
    let r = Datatype::resized(&Datatype::contiguous(4, &Datatype::i32()).unwrap(), -4, 20).unwrap();
    assert_eq!(Convertor::new(&r, 3).unwrap().contiguous_range(), None);
    assert_eq!(
        Convertor::new(&r, 1).unwrap().contiguous_range(),
        Some(0..16)
    );
    let r = Datatype::resized(&Datatype::contiguous(4, &Datatype::i32()).unwrap(), -4, 16).unwrap();
    assert_eq!(
        Convertor::new(&r, 3).unwrap().contiguous_range(),
        Some(0..48)
    );
}

#[test]
fn types_and_convertors_are_send_and_sync() {
    fn check<T: Send + Sync + Clone>() {}
    check::<Datatype>();
    check::<Convertor>();
    check::<DatatypeError>();
}

#[test]
fn data_far_from_the_origin() {
    // Data 2^62 bytes below the origin; the buffer holds only the data.
    let far = -(1isize << 62);
    let t = Datatype::hindexed(&[1, 1], &[far + 8, far], &Datatype::f64()).unwrap();
    let t = Datatype::resized(&t, far, 16).unwrap();
    let c = Convertor::new(&t, 3).unwrap();
    assert_eq!(c.span(), Some(far..far + 48));
    let buf: Vec<u8> = (0..48).collect();
    let mut out = vec![0u8; 48];
    assert_eq!(c.pack(&buf, -far, 4, &mut out[4..]).unwrap(), 44);
    assert_eq!(c.pack(&buf, -far, 0, &mut out[..4]).unwrap(), 4);
    let expect: Vec<u8> = [8..16, 0..8, 24..32, 16..24, 40..48, 32..40]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(out, expect);
    let mut back = vec![0u8; 48];
    assert_eq!(c.unpack(&mut back, -far, 0, &out).unwrap(), 48);
    assert_eq!(back, buf);
    assert!(matches!(
        c.pack(&buf, 0, 0, &mut out),
        Err(DatatypeError::OutOfBounds { .. })
    ));
}
