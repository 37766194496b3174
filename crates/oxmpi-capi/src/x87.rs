//! `long double` arithmetic for the predefined reductions on
//! `MPI_LONG_DOUBLE`, `MPI_C_LONG_DOUBLE_COMPLEX` and
//! `MPI_LONG_DOUBLE_INT`: on x86-64 Linux a C `long double` is the x87
//! 80-bit extended format (64-bit significand) in 16 bytes, which Rust has
//! no type for. Sums and products are computed by the x87 unit itself
//! (`fadd`, `fmul`), rounded as a C program's `long double` arithmetic is
//! (the x87 precision control is extended on Linux), so results are the
//! ones MPICH's C loops give; comparisons are done on the bits.

/// A `long double` as it lies in memory (the last 6 bytes are padding).
pub type LongDouble = [u8; 16];

/// `a + b`.
pub fn add(a: &LongDouble, b: &LongDouble) -> LongDouble {
    let mut out = [0u8; 16];
    // SAFETY: `fld`/`fstp` with a `tbyte` operand read and write 10 bytes
    // at each pointer, which point to 16-byte arrays that live through the
    // block; the two values pushed are popped again (`faddp` pops one,
    // `fstp` the other), so the x87 stack is empty on exit as on entry,
    // and the two registers used are declared clobbered.
    unsafe {
        core::arch::asm!(
            "fld tbyte ptr [{a}]",
            "fld tbyte ptr [{b}]",
            "faddp st(1), st",
            "fstp tbyte ptr [{o}]",
            a = in(reg) a.as_ptr(),
            b = in(reg) b.as_ptr(),
            o = in(reg) out.as_mut_ptr(),
            out("st(0)") _,
            out("st(1)") _,
            options(nostack),
        );
    }
    out
}

/// `a * b`.
pub fn mul(a: &LongDouble, b: &LongDouble) -> LongDouble {
    let mut out = [0u8; 16];
    // SAFETY: as in `add`.
    unsafe {
        core::arch::asm!(
            "fld tbyte ptr [{a}]",
            "fld tbyte ptr [{b}]",
            "fmulp st(1), st",
            "fstp tbyte ptr [{o}]",
            a = in(reg) a.as_ptr(),
            b = in(reg) b.as_ptr(),
            o = in(reg) out.as_mut_ptr(),
            out("st(0)") _,
            out("st(1)") _,
            options(nostack),
        );
    }
    out
}

/// `-a` (the sign bit flipped, as the x87 `fchs` does).
pub fn neg(a: &LongDouble) -> LongDouble {
    let mut out = *a;
    out[9] ^= 0x80;
    out
}

/// `a` as an integer that orders as the value does (both zeros are 0),
/// `None` for a NaN.
fn order_key(a: &LongDouble) -> Option<i128> {
    let mut m = [0u8; 8];
    m.copy_from_slice(&a[..8]);
    let mant = u64::from_le_bytes(m);
    let se = u16::from_le_bytes([a[8], a[9]]);
    let exp = se & 0x7fff;
    if exp == 0x7fff && mant << 1 != 0 {
        return None;
    }
    // A larger exponent is a larger magnitude; within one, the larger
    // significand (its integer bit included) is.
    let mag = (i128::from(exp) << 64) | i128::from(mant);
    Some(if se & 0x8000 != 0 { -mag } else { mag })
}

/// `a < b` (false if either is a NaN), as C's `<` on `long double`.
pub fn lt(a: &LongDouble, b: &LongDouble) -> bool {
    matches!((order_key(a), order_key(b)), (Some(x), Some(y)) if x < y)
}

/// `a == b` (false if either is a NaN; `-0 == +0`), as C's `==`.
pub fn eq(a: &LongDouble, b: &LongDouble) -> bool {
    matches!((order_key(a), order_key(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::{add, eq, lt, mul, neg, LongDouble};

    /// The 80-bit image of an `f64` (exact: the format is wider).
    fn ld(x: f64) -> LongDouble {
        let mut out = [0u8; 16];
        let b = x.to_bits();
        let sign = (b >> 63) as u16;
        let e = ((b >> 52) & 0x7ff) as i32;
        let f = b & ((1 << 52) - 1);
        let (exp, mant): (u16, u64) = match e {
            0 if f == 0 => (0, 0),
            0 => {
                // Subnormal double: normal here.
                let shift = f.leading_zeros() - 11;
                ((1 - 1023 + 16383 - shift as i32) as u16, f << (11 + shift))
            }
            0x7ff => (0x7fff, (1 << 63) | (f << 11)),
            _ => ((e - 1023 + 16383) as u16, (1 << 63) | (f << 11)),
        };
        out[..8].copy_from_slice(&mant.to_le_bytes());
        out[8..10].copy_from_slice(&(exp | sign << 15).to_le_bytes());
        out
    }

    #[test]
    fn arithmetic_and_order_agree_with_f64_where_exact() {
        let xs = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            3.25,
            1e300,
            -2e-310,
            0.1,
            7.0,
            f64::INFINITY,
        ];
        for &a in &xs {
            for &b in &xs {
                // Where the double sum is exact, so is the extended one.
                if (a + b).is_finite() && (a + b) - a == b && (a + b) - b == a {
                    assert_eq!(add(&ld(a), &ld(b)), ld(a + b), "{a} + {b}");
                }
                assert_eq!(lt(&ld(a), &ld(b)), a < b, "{a} < {b}");
                assert_eq!(eq(&ld(a), &ld(b)), a == b, "{a} == {b}");
            }
            assert_eq!(neg(&ld(a)), ld(-a));
        }
        assert_eq!(mul(&ld(1.5), &ld(-3.25)), ld(-4.875));
        assert_eq!(mul(&ld(0.5), &ld(1e300)), ld(5e299));
        let nan = ld(f64::NAN);
        assert!(!lt(&nan, &ld(1.0)) && !lt(&ld(1.0), &nan) && !eq(&nan, &nan));
    }

    /// Extended precision, not double: 1 + 2^-60 is exact in 64 bits of
    /// significand.
    #[test]
    fn sums_keep_the_extended_significand() {
        let tiny = ld(2f64.powi(-60));
        let s = add(&ld(1.0), &tiny);
        assert_ne!(s, ld(1.0));
        assert!(lt(&ld(1.0), &s));
        let back = add(&s, &neg(&ld(1.0)));
        assert_eq!(back, tiny);
    }
}
