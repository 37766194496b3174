//! Predefined datatype handles of the standard ABI, and the datatype
//! calls.

use std::ffi::c_int;

use oxmpi::{ErrorClass, UserDatatype};
use oxmpi_datatype::{Datatype, Pair, Primitive};

use crate::state::{lock, state, Table, TypeObj};

fn prim(p: Primitive) -> UserDatatype {
    UserDatatype::from_raw(Datatype::predefined(p))
}

fn pair(p: Pair) -> UserDatatype {
    UserDatatype::from_raw(Datatype::pair(p))
}

/// The datatype of predefined handle `h` (x86-64 Linux: `long` is 64-bit,
/// `char` is signed, `wchar_t` is 32-bit, `long double` is the x87 80-bit
/// format in 16 bytes, aligned to 16). Every basic type is one element of
/// its own kind (a complex number too: `MPI_Get_elements` counts it once),
/// so that struct padding, element counts and `external32` are those of
/// the C and Fortran types.
pub fn predefined(h: usize) -> Option<UserDatatype> {
    use Primitive::*;
    Some(match h {
        0x201..=0x203 => prim(I64), // MPI_AINT, MPI_COUNT, MPI_OFFSET
        0x207 => prim(Packed),
        0x208 => prim(I16),
        0x209 => prim(I32),
        0x20a => prim(Long),
        0x20b => prim(I64),
        0x20c => prim(U16),
        0x20d => prim(U32),
        0x20e => prim(ULong),
        0x20f => prim(U64),
        0x210 => prim(F32),
        0x212 | 0x213 => prim(ComplexF32),
        0x214 => prim(F64),
        0x216 | 0x217 => prim(ComplexF64),
        0x218 | 0x219 => prim(I32), // MPI_LOGICAL, MPI_INTEGER
        0x21a => prim(F32),
        0x21b => prim(ComplexF32),
        0x21c => prim(F64),
        0x21d => prim(ComplexF64),
        0x21e => prim(I8), // MPI_CHARACTER
        0x220 => prim(LongDouble),
        0x224 | 0x225 => prim(ComplexLongDouble),
        0x228 => pair(Pair::FloatInt),
        0x229 => pair(Pair::DoubleInt),
        0x22a => pair(Pair::LongInt),
        0x22b => pair(Pair::TwoInt),
        0x22c => pair(Pair::ShortInt),
        0x22d => pair(Pair::LongDoubleInt),
        0x230 => pair(Pair::TwoFloat),
        0x231 => pair(Pair::TwoDouble),
        0x232 => pair(Pair::TwoInt),
        0x238 | 0x239 => prim(Bool),
        0x23c => prim(I32),
        0x240 => prim(I8),
        0x241 => prim(U8),
        0x243 | 0x244 => prim(I8),
        0x245 => prim(U8),
        0x247 => prim(Byte),
        0x248 => prim(I16),
        0x249 => prim(U16),
        0x250 => prim(I32),
        0x251 => prim(U32),
        0x258 => prim(I64),
        0x259 => prim(U64),
        0x2c0 | 0x2c1 => prim(I8),
        0x2c8 | 0x2c9 => prim(I16),
        0x2ca => prim(F16),
        0x2d0 | 0x2d1 => prim(I32),
        0x2d2 => prim(F32),
        0x2d3 => prim(ComplexF16),
        0x2d8 | 0x2d9 => prim(I64),
        0x2da => prim(F64),
        0x2db => prim(ComplexF32),
        0x2e0 | 0x2e1 => prim(I128),
        0x2e2 => prim(F128),
        0x2e3 => prim(ComplexF64),
        0x2eb => prim(ComplexF128),
        _ => return None,
    })
}

/// What a reduction sees of an element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Num {
    /// Signed integer of this many bytes.
    I(usize),
    /// Unsigned integer of this many bytes.
    U(usize),
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// A (value, index) pair for MINLOC/MAXLOC: value kind, index kind
    /// (`int`, or for `MPI_2REAL` and `MPI_2DOUBLE_PRECISION` the value's),
    /// offset of the index, extent.
    Pair(&'static Num, &'static Num, usize, usize),
    /// IEEE binary16 (`MPI_REAL2`).
    F16,
    /// `long double`: the x87 80-bit format in 16 bytes (x86-64 only).
    F80,
    /// A complex number: the real part, then the imaginary part, each of
    /// this kind (`F32`, `F64` or `F80`).
    Complex(&'static Num),
}

impl Num {
    /// Bytes of one element (for a pair: its extent).
    pub const fn size(self) -> usize {
        match self {
            Num::I(n) | Num::U(n) => n,
            Num::F32 => 4,
            Num::F64 => 8,
            Num::Pair(_, _, _, ext) => ext,
            Num::F16 => 2,
            Num::F80 => 16,
            Num::Complex(part) => 2 * part.size(),
        }
    }
}

/// The element size of predefined handle `h` when its elements are plain
/// contiguous bytes (every numeric, character and byte type; not the
/// padded pair types, nor `long double` and the complex types, which take
/// the general path as they always did).
#[inline]
pub fn contiguous_size(h: usize) -> Option<usize> {
    // A table over the predefined datatype handles (every call with a
    // buffer asks: a lookup, not the match of `num_kind`).
    const FIRST: usize = 0x200;
    const SIZES: [u8; 0x100] = {
        let mut t = [0u8; 0x100];
        let mut i = 0;
        while i < t.len() {
            t[i] = match num_kind(FIRST + i) {
                Some(Num::Pair(..) | Num::F80 | Num::Complex(_)) | None => 0,
                Some(k) => k.size() as u8,
            };
            i += 1;
        }
        t
    };
    match SIZES.get(h.wrapping_sub(FIRST)) {
        Some(&n) if n > 0 => Some(usize::from(n)),
        _ => None,
    }
}

/// The reduction kind of predefined handle `h`.
pub const fn num_kind(h: usize) -> Option<Num> {
    static I4: Num = Num::I(4);
    static I2: Num = Num::I(2);
    static I8: Num = Num::I(8);
    static F4: Num = Num::F32;
    static F8: Num = Num::F64;
    static F2: Num = Num::F16;
    #[cfg(target_arch = "x86_64")]
    static F10: Num = Num::F80;
    Some(match h {
        0x201..=0x203 | 0x20a | 0x20b | 0x258 | 0x2d8 | 0x2d9 => Num::I(8),
        0x208 | 0x248 | 0x2c8 | 0x2c9 => Num::I(2),
        0x209 | 0x218 | 0x219 | 0x23c | 0x250 | 0x2d0 | 0x2d1 => Num::I(4),
        0x20c | 0x249 => Num::U(2),
        0x20d | 0x251 => Num::U(4),
        0x20e | 0x20f | 0x259 => Num::U(8),
        0x210 | 0x21a | 0x2d2 => Num::F32,
        0x214 | 0x21c | 0x2da => Num::F64,
        0x21e | 0x240 | 0x243 | 0x244 | 0x2c0 | 0x2c1 => Num::I(1),
        0x238 | 0x239 => Num::U(1),
        0x241 | 0x245 | 0x247 => Num::U(1),
        0x228 => Num::Pair(&F4, &I4, 4, 8),
        0x229 => Num::Pair(&F8, &I4, 8, 16),
        0x22a => Num::Pair(&I8, &I4, 8, 16),
        0x22b | 0x232 => Num::Pair(&I4, &I4, 4, 8),
        0x22c => Num::Pair(&I2, &I4, 4, 8),
        // MPI_2REAL, MPI_2DOUBLE_PRECISION: the index is of the value's type.
        0x230 => Num::Pair(&F4, &F4, 4, 8),
        0x231 => Num::Pair(&F8, &F8, 8, 16),
        // MPI_LOGICAL16, MPI_INTEGER16.
        0x2e0 | 0x2e1 => Num::I(16),
        // MPI_REAL2, MPI_COMPLEX4.
        0x2ca => Num::F16,
        0x2d3 => Num::Complex(&F2),
        // MPI_C_FLOAT_COMPLEX, MPI_CXX_FLOAT_COMPLEX, MPI_COMPLEX,
        // MPI_COMPLEX8; the double ones; the long double ones.
        0x212 | 0x213 | 0x21b | 0x2db => Num::Complex(&F4),
        0x216 | 0x217 | 0x21d | 0x2e3 => Num::Complex(&F8),
        #[cfg(target_arch = "x86_64")]
        0x220 => Num::F80,
        #[cfg(target_arch = "x86_64")]
        0x224 | 0x225 => Num::Complex(&F10),
        #[cfg(target_arch = "x86_64")]
        0x22d => Num::Pair(&F10, &I4, 16, 32),
        _ => return None,
    })
}

/// Stores a new (uncommitted) user datatype; returns its handle. Its
/// envelope reports the combiner of `dt` without arguments: constructors
/// use [`new_type_with`].
pub fn new_type(dt: UserDatatype) -> Result<usize, oxmpi::Error> {
    let contents = crate::dtype::Contents::of(&dt);
    new_type_with(dt, contents)
}

/// Stores a new (uncommitted, unnamed) user datatype built by the
/// constructor `contents` describes; returns its handle. The new type
/// holds a reference to each derived type among the constructor's
/// arguments (see [`TypeObj`]).
pub fn new_type_with(
    dt: UserDatatype,
    contents: crate::dtype::Contents,
) -> Result<usize, oxmpi::Error> {
    let s = state()?;
    insert_type(&mut lock(&s.types), dt, contents)
}

/// [`new_type_with`] on the table itself: fails with `MPI_ERR_TYPE`, and
/// stores nothing, if a derived argument type is not in the table.
fn insert_type(
    g: &mut Table<TypeObj>,
    dt: UserDatatype,
    contents: crate::dtype::Contents,
) -> Result<usize, oxmpi::Error> {
    let derived = || contents.types.iter().filter(|&&h| predefined(h).is_none());
    if let Some(&h) = derived().find(|&&h| g.get(h).is_none()) {
        return Err(oxmpi::Error::new(
            ErrorClass::Type,
            format!("invalid datatype handle {h:#x}"),
        ));
    }
    for &h in derived() {
        g.get_mut(h).expect("checked above").refs += 1;
    }
    Ok(g.insert(TypeObj {
        dt,
        refs: 1,
        committed: false,
        contents,
        name: String::new(),
    }))
}

/// Takes one more reference to each derived type among `hs` (which must
/// all be in the table: held by a type that holds them).
pub fn retain_types(g: &mut Table<TypeObj>, hs: &[usize]) {
    for &h in hs {
        if let Some(t) = g.get_mut(h) {
            t.refs += 1;
        }
    }
}

/// Drops one reference to user datatype `h` (`MPI_Type_free`); the last
/// one removes it from the table and drops its own references to the
/// types its constructor took, and so on down (a loop, not a recursion: a
/// chain of a million dups is freed in constant stack). `None` if `h` is
/// not in the table.
pub fn release_type(g: &mut Table<TypeObj>, h: usize) -> Option<()> {
    release_type_collect(g, h, &mut Vec::new())
}

/// [`release_type`], adding each handle it removed from the table to
/// `removed` (their attributes go too: `crate::attr`).
pub fn release_type_collect(
    g: &mut Table<TypeObj>,
    h: usize,
    removed: &mut Vec<usize>,
) -> Option<()> {
    g.get(h)?;
    let mut todo = vec![h];
    while let Some(h) = todo.pop() {
        let Some(t) = g.get_mut(h) else {
            continue;
        };
        t.refs -= 1;
        if t.refs == 0 {
            let t = g.remove(h).expect("present");
            removed.push(h);
            todo.extend(
                t.contents
                    .types
                    .iter()
                    .copied()
                    .filter(|&a| predefined(a).is_none()),
            );
        }
    }
    Some(())
}

/// A datatype argument for a constructor (committed or not).
pub fn arg_type(h: usize) -> Result<UserDatatype, oxmpi::Error> {
    if let Some(t) = predefined(h) {
        return Ok(t);
    }
    let s = state()?;
    lock(&s.types).get(h).map(|t| t.dt.clone()).ok_or_else(|| {
        oxmpi::Error::new(ErrorClass::Type, format!("invalid datatype handle {h:#x}"))
    })
}

/// A C count, checked non-negative.
pub fn count(n: c_int) -> Result<usize, oxmpi::Error> {
    usize::try_from(n)
        .map_err(|_| oxmpi::Error::new(ErrorClass::Count, format!("count {n} is negative")))
}

#[cfg(test)]
mod tests {
    use super::{contiguous_size, insert_type, num_kind, release_type, retain_types, Num};
    use crate::dtype::{Contents, COMBINER_DUP, COMBINER_STRUCT};
    use crate::state::{Table, TypeObj};
    use oxmpi::UserDatatype;
    use oxmpi_datatype::Datatype;

    const INT: usize = 0x209;

    fn byte() -> UserDatatype {
        UserDatatype::from_raw(Datatype::byte())
    }

    fn made_of(combiner: std::ffi::c_int, types: &[usize]) -> Contents {
        let mut c = Contents::new(combiner);
        c.types.extend_from_slice(types);
        c
    }

    fn refs(g: &Table<TypeObj>, h: usize) -> Option<usize> {
        g.get(h).map(|t| t.refs)
    }

    /// A type holds its derived arguments: freeing them first only drops
    /// the program's reference; the last reference frees the whole chain.
    #[test]
    fn types_are_reference_counted() {
        let mut g = Table::new();
        let a = insert_type(&mut g, byte(), made_of(COMBINER_DUP, &[INT])).unwrap();
        let b = insert_type(&mut g, byte(), made_of(COMBINER_DUP, &[a])).unwrap();
        // A struct naming `a` twice and `b` once.
        let s = insert_type(&mut g, byte(), made_of(COMBINER_STRUCT, &[a, INT, b, a])).unwrap();
        assert_eq!(
            (refs(&g, a), refs(&g, b), refs(&g, s)),
            (Some(4), Some(2), Some(1))
        );
        // Contents given out twice, freed once by the program.
        retain_types(&mut g, &[b]);
        retain_types(&mut g, &[b]);
        release_type(&mut g, b).unwrap();
        assert_eq!(refs(&g, b), Some(3));
        // The program frees its own handles: the struct keeps them alive.
        release_type(&mut g, a).unwrap();
        release_type(&mut g, b).unwrap();
        assert_eq!((refs(&g, a), refs(&g, b)), (Some(3), Some(2)));
        release_type(&mut g, s).unwrap();
        assert_eq!(
            (refs(&g, s), refs(&g, a), refs(&g, b)),
            (None, Some(1), Some(1))
        );
        // The last reference to `b` takes `a` with it.
        release_type(&mut g, b).unwrap();
        assert_eq!((refs(&g, a), refs(&g, b)), (None, None));
        assert!(release_type(&mut g, a).is_none(), "gone");
        // A handle not in the table is refused, and nothing is stored.
        assert!(insert_type(&mut g, byte(), made_of(COMBINER_DUP, &[a])).is_err());
        assert!(g.get(crate::state::USER_BASE).is_none());
    }

    /// A long chain of dups is freed without recursion.
    #[test]
    fn a_long_chain_is_freed_in_a_loop() {
        let mut g = Table::new();
        let first = insert_type(&mut g, byte(), made_of(COMBINER_DUP, &[INT])).unwrap();
        let mut last = first;
        for _ in 0..200_000 {
            let next = insert_type(&mut g, byte(), made_of(COMBINER_DUP, &[last])).unwrap();
            release_type(&mut g, last).unwrap();
            last = next;
        }
        assert_eq!(refs(&g, first), Some(1));
        release_type(&mut g, last).unwrap();
        assert!(g.get(first).is_none());
    }

    #[test]
    fn the_size_table_agrees_with_the_kinds() {
        for h in 0..0x1000usize {
            let want = match num_kind(h) {
                Some(Num::Pair(..) | Num::F80 | Num::Complex(_)) | None => None,
                Some(k) => Some(k.size()),
            };
            assert_eq!(contiguous_size(h), want, "handle {h:#x}");
        }
        assert_eq!(contiguous_size(usize::MAX), None);
    }
}
