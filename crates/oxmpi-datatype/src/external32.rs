//! The `external32` data representation (MPI 4.1 §14.5.2): what
//! `MPI_Pack_external` writes and `MPI_Unpack_external` reads.
//!
//! Every primitive is stored big-endian, with the sizes of the standard's
//! table: the memory size, but 4 bytes for C `long` and `unsigned long`
//! (a value outside 32 bits is a [`DatatypeError::Conversion`], not
//! silently cut), and IEEE quadruple precision for `long double` (the x87
//! 80-bit format converts exactly into it; back, the 112-bit fraction is
//! rounded to 63 bits, to nearest, ties to even). A complex is two parts,
//! each converted on its own. Bytes, characters, booleans and `MPI_PACKED`
//! are copied.
//!
//! The stream is converted in chunks: the native packed bytes of a run of
//! whole primitives (at most [`CHUNK`] bytes, or one primitive) are packed
//! by the [`Convertor`](crate::Convertor) and then converted, so memory
//! stays bounded whatever the count, and a type of many short runs still
//! packs with one convertor call per chunk.

use crate::datatype::Datatype;
use crate::error::{DatatypeError, Result};
use crate::primitive::Primitive;
use crate::signature::{Sig, Signature};

/// Native bytes converted per convertor call.
const CHUNK: usize = 64 * 1024;

/// Bytes of the `external32` image of `sig`.
pub(crate) fn sig_bytes(sig: &Sig) -> Option<usize> {
    match sig {
        Sig::Empty => Some(0),
        Sig::Run { prim, count } => prim.external32_size().checked_mul(*count),
        Sig::Repeat { count, inner, .. } => sig_bytes(inner)?.checked_mul(*count),
        Sig::Seq { parts, .. } => parts
            .iter()
            .try_fold(0usize, |acc, p| acc.checked_add(sig_bytes(p)?)),
    }
}

/// The runs of one chunk: `(primitive, count)` pieces of whole primitives,
/// taken from the signature of `count` elements in order.
struct Chunks<'a> {
    sig: Signature<'a>,
    pending: Option<(Primitive, usize)>,
    runs: Vec<(Primitive, usize)>,
}

impl<'a> Chunks<'a> {
    fn new(sig: Signature<'a>) -> Self {
        Chunks {
            sig,
            pending: None,
            runs: Vec::new(),
        }
    }

    /// The next chunk's runs and native bytes (`None` at the end).
    fn next(&mut self) -> Option<(&[(Primitive, usize)], usize)> {
        self.runs.clear();
        let mut bytes = 0usize;
        while let Some((p, n)) = self.pending.take().or_else(|| self.sig.next()) {
            let room = CHUNK.saturating_sub(bytes) / p.size();
            if room == 0 && !self.runs.is_empty() {
                self.pending = Some((p, n));
                break;
            }
            let k = n.min(room.max(1));
            self.runs.push((p, k));
            bytes += k * p.size();
            if k < n {
                self.pending = Some((p, n - k));
                break;
            }
        }
        (!self.runs.is_empty()).then_some((&self.runs[..], bytes))
    }
}

impl Datatype {
    /// `MPI_Pack_external_size` for `"external32"`: bytes of the
    /// `external32` image of `count` elements.
    pub fn external32_size(&self, count: usize) -> Result<usize> {
        sig_bytes(self.sig())
            .and_then(|b| b.checked_mul(count))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or(DatatypeError::Overflow {
                what: "external32 size",
            })
    }

    /// `MPI_Pack_external`: writes the `external32` image of `count`
    /// elements whose origin is at position `origin` of `base` to the start
    /// of `out` (which must hold [`external32_size`](Self::external32_size)
    /// bytes); returns the bytes written. On an error the contents of `out`
    /// are unspecified.
    pub fn pack_external32(
        &self,
        base: &[u8],
        origin: isize,
        count: usize,
        out: &mut [u8],
    ) -> Result<usize> {
        let total = self.external32_size(count)?;
        if out.len() < total {
            return Err(DatatypeError::InvalidArgument(format!(
                "the external32 image needs {total} bytes, the output has {}",
                out.len()
            )));
        }
        let conv = self.convertor(count)?;
        conv.check_buffer(base.len(), origin)?;
        let mut native = vec![0u8; conv.packed_size().min(CHUNK)];
        let (mut at, mut put) = (0usize, 0usize);
        let mut chunks = Chunks::new(Signature::new(self.sig(), count));
        while let Some((runs, bytes)) = chunks.next() {
            if native.len() < bytes {
                native.resize(bytes, 0);
            }
            let done = conv.pack(base, origin, at, &mut native[..bytes])?;
            if done != bytes {
                return Err(DatatypeError::Internal("short pack for external32"));
            }
            let mut from = 0;
            for &(p, k) in runs {
                let (n, e) = (k * p.size(), k * p.external32_size());
                to_external(p, &native[from..from + n], &mut out[put..put + e])?;
                from += n;
                put += e;
            }
            at += bytes;
        }
        Ok(put)
    }

    /// `MPI_Unpack_external`: reads the `external32` image of `count`
    /// elements from the start of `input` (which must hold
    /// [`external32_size`](Self::external32_size) bytes) into the elements
    /// whose origin is at position `origin` of `base`; returns the bytes
    /// read.
    pub fn unpack_external32(
        &self,
        base: &mut [u8],
        origin: isize,
        count: usize,
        input: &[u8],
    ) -> Result<usize> {
        let total = self.external32_size(count)?;
        if input.len() < total {
            return Err(DatatypeError::InvalidArgument(format!(
                "the external32 image needs {total} bytes, the input has {}",
                input.len()
            )));
        }
        let conv = self.convertor(count)?;
        conv.check_buffer(base.len(), origin)?;
        let mut native = vec![0u8; conv.packed_size().min(CHUNK)];
        let (mut at, mut got) = (0usize, 0usize);
        let mut chunks = Chunks::new(Signature::new(self.sig(), count));
        while let Some((runs, bytes)) = chunks.next() {
            if native.len() < bytes {
                native.resize(bytes, 0);
            }
            let mut to = 0;
            for &(p, k) in runs {
                let (n, e) = (k * p.size(), k * p.external32_size());
                from_external(p, &input[got..got + e], &mut native[to..to + n]);
                to += n;
                got += e;
            }
            let done = conv.unpack(base, origin, at, &native[..bytes])?;
            if done != bytes {
                return Err(DatatypeError::Internal("short unpack for external32"));
            }
            at += bytes;
        }
        Ok(got)
    }
}

/// Each `unit`-byte piece of `src`, big-endian, into `dst`.
fn to_big_endian(src: &[u8], dst: &mut [u8], unit: usize) {
    for (s, d) in src.chunks_exact(unit).zip(dst.chunks_exact_mut(unit)) {
        d.copy_from_slice(s);
        if cfg!(target_endian = "little") {
            d.reverse();
        }
    }
}

/// Native `src` of primitive `p` into its `external32` image `dst`.
fn to_external(p: Primitive, src: &[u8], dst: &mut [u8]) -> Result<()> {
    use Primitive as P;
    match p {
        P::I8 | P::U8 | P::Bool | P::Byte | P::Packed => dst.copy_from_slice(src),
        P::I16 | P::U16 | P::F16 => to_big_endian(src, dst, 2),
        P::I32 | P::U32 | P::F32 | P::Char => to_big_endian(src, dst, 4),
        P::I64 | P::U64 | P::F64 => to_big_endian(src, dst, 8),
        P::I128 | P::F128 => to_big_endian(src, dst, 16),
        P::ComplexF16 => to_big_endian(src, dst, 2),
        P::ComplexF32 => to_big_endian(src, dst, 4),
        P::ComplexF64 => to_big_endian(src, dst, 8),
        P::ComplexF128 => to_big_endian(src, dst, 16),
        P::Long => {
            for (s, d) in src.chunks_exact(8).zip(dst.chunks_exact_mut(4)) {
                let v = i64::from_ne_bytes(s.try_into().expect("8 bytes"));
                let w = i32::try_from(v).map_err(|_| {
                    DatatypeError::Conversion(format!(
                        "the long {v} does not fit in the 4 bytes external32 gives MPI_LONG"
                    ))
                })?;
                d.copy_from_slice(&w.to_be_bytes());
            }
        }
        P::ULong => {
            for (s, d) in src.chunks_exact(8).zip(dst.chunks_exact_mut(4)) {
                let v = u64::from_ne_bytes(s.try_into().expect("8 bytes"));
                let w = u32::try_from(v).map_err(|_| {
                    DatatypeError::Conversion(format!(
                        "the unsigned long {v} does not fit in the 4 bytes external32 gives \
                         MPI_UNSIGNED_LONG"
                    ))
                })?;
                d.copy_from_slice(&w.to_be_bytes());
            }
        }
        P::LongDouble | P::ComplexLongDouble => {
            for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
                let q = x87_to_binary128(s.try_into().expect("16 bytes"));
                d.copy_from_slice(&q.to_be_bytes());
            }
        }
    }
    Ok(())
}

/// The `external32` image `src` of primitive `p` into native `dst`.
fn from_external(p: Primitive, src: &[u8], dst: &mut [u8]) {
    use Primitive as P;
    match p {
        P::Long => {
            for (s, d) in src.chunks_exact(4).zip(dst.chunks_exact_mut(8)) {
                let v = i32::from_be_bytes(s.try_into().expect("4 bytes"));
                d.copy_from_slice(&i64::from(v).to_ne_bytes());
            }
        }
        P::ULong => {
            for (s, d) in src.chunks_exact(4).zip(dst.chunks_exact_mut(8)) {
                let v = u32::from_be_bytes(s.try_into().expect("4 bytes"));
                d.copy_from_slice(&u64::from(v).to_ne_bytes());
            }
        }
        P::LongDouble | P::ComplexLongDouble => {
            for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
                let q = u128::from_be_bytes(s.try_into().expect("16 bytes"));
                d.copy_from_slice(&binary128_to_x87(q));
            }
        }
        // Byte swaps are their own inverse.
        _ => {
            // Cannot fail: only `long` and `unsigned long` can.
            let _ = to_external(p, src, dst);
        }
    }
}

const MANT63: u64 = (1 << 63) - 1;
const FRAC112: u128 = (1 << 112) - 1;

/// An x87 80-bit extended value (16 bytes of memory, little-endian: 64-bit
/// significand with its explicit integer bit, then sign and 15-bit
/// exponent, then padding) as IEEE binary128 bits. Exact: both formats
/// have the same exponent range and bias, and 63 fraction bits fit in 112.
/// Encodings the x87 unit rejects (unnormals, pseudo-infinities and
/// pseudo-NaNs) become a quiet NaN, as the x87 unit reads them.
pub(crate) fn x87_to_binary128(b: [u8; 16]) -> u128 {
    let m = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let se = u16::from_le_bytes([b[8], b[9]]);
    let sign = u128::from(se >> 15) << 127;
    let exp = u128::from(se & 0x7fff);
    let int_bit = m >> 63 == 1;
    let frac = u128::from(m & MANT63) << 49;
    let quiet_nan = sign | (0x7fff << 112) | (1 << 111);
    match exp {
        0 if int_bit => sign | (1 << 112) | frac, // pseudo-denormal: 2^-16382 * 1.f
        0 => sign | frac,                         // zero or denormal
        0x7fff if !int_bit => quiet_nan,
        0x7fff => sign | (0x7fff << 112) | frac, // infinity (frac 0) or NaN
        _ if !int_bit => quiet_nan,              // unnormal
        _ => sign | (exp << 112) | frac,
    }
}

/// IEEE binary128 bits as an x87 80-bit extended value in 16 bytes (the 6
/// bytes of padding zero): the fraction rounded to 63 bits, to nearest,
/// ties to even (a carry out of the significand raises the exponent, up to
/// infinity); NaNs stay NaNs (quiet, with the payload's high bits).
pub(crate) fn binary128_to_x87(q: u128) -> [u8; 16] {
    let sign = ((q >> 127) as u16) << 15;
    let exp = ((q >> 112) & 0x7fff) as u16;
    let frac = q & FRAC112;
    let (m, e) = if exp == 0x7fff {
        if frac == 0 {
            (1u64 << 63, 0x7fff)
        } else {
            ((1 << 63) | (1 << 62) | (frac >> 49) as u64, 0x7fff)
        }
    } else {
        // The significand with its integer bit (none for a subnormal),
        // rounded from 113 to 64 bits.
        let sig = if exp == 0 { frac } else { frac | (1 << 112) };
        let keep = sig >> 49;
        let dropped = sig & ((1 << 49) - 1);
        let half = 1u128 << 48;
        let up = dropped > half || (dropped == half && keep & 1 == 1);
        let r = keep + u128::from(up);
        if exp == 0 {
            // A subnormal; rounding up into bit 63 makes the smallest normal.
            if r >> 63 == 1 {
                (r as u64, 1)
            } else {
                (r as u64, 0)
            }
        } else if r >> 64 == 1 {
            // Carry out: 10.000... = 1.000... x 2.
            if exp + 1 == 0x7fff {
                (1 << 63, 0x7fff)
            } else {
                (1 << 63, exp + 1)
            }
        } else {
            (r as u64, exp)
        }
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&m.to_le_bytes());
    out[8..10].copy_from_slice(&(sign | e).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x87(m: u64, se: u16) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&m.to_le_bytes());
        b[8..10].copy_from_slice(&se.to_le_bytes());
        b
    }

    #[test]
    fn long_double_known_values() {
        // 1.0, -2.0, 0.5, +0, -0, inf, smallest x87 denormal, largest finite.
        let cases: [(u64, u16, u128); 8] = [
            (1 << 63, 0x3fff, 0x3fff << 112),
            (1 << 63, 0xc000, (1 << 127) | (0x4000 << 112)),
            (1 << 63, 0x3ffe, 0x3ffe << 112),
            (0, 0, 0),
            (0, 0x8000, 1 << 127),
            (1 << 63, 0x7fff, 0x7fff << 112),
            (1, 0, 1 << 49),
            (
                u64::MAX,
                0x7ffe,
                (0x7ffe << 112) | (u128::from(MANT63) << 49),
            ),
        ];
        for (m, se, q) in cases {
            assert_eq!(x87_to_binary128(x87(m, se)), q, "{m:#x} {se:#x}");
            assert_eq!(binary128_to_x87(q), x87(m, se), "{q:#x}");
        }
        // 1/3 in x87: 0xaaaa...ab x 2^-2 (the fraction 0x2aaa...ab).
        let third = x87(0xaaaa_aaaa_aaaa_aaab, 0x3ffd);
        assert_eq!(
            x87_to_binary128(third),
            (0x3ffd << 112) | (0x2aaa_aaaa_aaaa_aaabu128 << 49)
        );
    }

    #[test]
    fn binary128_rounds_to_nearest_even() {
        let one = 0x3fffu128 << 112;
        let ulp = 1u128 << 49; // one x87 ulp at 1.0, in binary128 fraction bits
                               // Just below half an ulp: down; just above: up; exactly half: even.
        assert_eq!(
            binary128_to_x87(one | ((ulp >> 1) - 1)),
            x87(1 << 63, 0x3fff)
        );
        assert_eq!(
            binary128_to_x87(one | ((ulp >> 1) + 1)),
            x87((1 << 63) | 1, 0x3fff)
        );
        assert_eq!(binary128_to_x87(one | (ulp >> 1)), x87(1 << 63, 0x3fff));
        assert_eq!(
            binary128_to_x87(one | ulp | (ulp >> 1)),
            x87((1 << 63) | 2, 0x3fff)
        );
        // All ones rounds up into the next binade; at the top, to infinity.
        assert_eq!(binary128_to_x87(one | FRAC112), x87(1 << 63, 0x4000));
        assert_eq!(
            binary128_to_x87((0x7ffe << 112) | FRAC112),
            x87(1 << 63, 0x7fff)
        );
        // The largest subnormal rounds up to the smallest normal.
        assert_eq!(binary128_to_x87(FRAC112), x87(1 << 63, 1));
        // A quiet NaN stays a NaN.
        let nan = binary128_to_x87((0x7fff << 112) | (1 << 111));
        assert_eq!(u16::from_le_bytes([nan[8], nan[9]]), 0x7fff);
        assert_ne!(u64::from_le_bytes(nan[..8].try_into().unwrap()) & MANT63, 0);
    }

    #[test]
    fn invalid_x87_encodings_read_as_nan() {
        for (m, se) in [(0u64, 0x3fffu16), (5, 0x7fff), (0, 0x7fff)] {
            let q = x87_to_binary128(x87(m, se));
            assert_eq!((q >> 112) & 0x7fff, 0x7fff);
            assert_ne!(q & FRAC112, 0, "{m:#x} {se:#x}");
        }
    }
}
