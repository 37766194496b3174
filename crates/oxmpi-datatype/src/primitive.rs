//! Predefined (named) datatypes: the primitives every type map is made of,
//! and the pair types of `MPI_MINLOC` / `MPI_MAXLOC`.

use std::fmt;

/// A basic element: the unit of a type map, of a type signature and of
/// `MPI_Get_elements`. Its alignment (what the struct padding rule uses) is
/// its size, but for the complex types (the alignment of one part). Each
/// primitive also has its `external32` representation
/// ([`external32_size`](Primitive::external32_size)): big-endian, with the
/// sizes of the standard's table (MPI 4.1 §14.5.2), so that C `long` is
/// told apart from `long long` here although both are 8 bytes in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Primitive {
    /// `MPI_INT8_T` / `MPI_SIGNED_CHAR`.
    I8,
    /// `MPI_INT16_T` / `MPI_SHORT`.
    I16,
    /// `MPI_INT32_T` / `MPI_INT`.
    I32,
    /// `MPI_INT64_T` / `MPI_LONG` (LP64) / `MPI_LONG_LONG`.
    I64,
    /// `MPI_UINT8_T` / `MPI_UNSIGNED_CHAR`.
    U8,
    /// `MPI_UINT16_T` / `MPI_UNSIGNED_SHORT`.
    U16,
    /// `MPI_UINT32_T` / `MPI_UNSIGNED`.
    U32,
    /// `MPI_UINT64_T` / `MPI_UNSIGNED_LONG` (LP64).
    U64,
    /// `MPI_FLOAT`.
    F32,
    /// `MPI_DOUBLE`.
    F64,
    /// `MPI_C_BOOL`, stored as one byte (Rust `bool`).
    Bool,
    /// A Rust `char`, stored as a 4-byte Unicode scalar value (`u32`).
    Char,
    /// `MPI_BYTE`: uninterpreted bytes.
    Byte,
    /// `MPI_PACKED`: bytes of a packed buffer.
    Packed,
    /// `MPI_LONG`: a C `long` (8 bytes on LP64; 4 in `external32`).
    Long,
    /// `MPI_UNSIGNED_LONG` (8 bytes on LP64; 4 in `external32`).
    ULong,
    /// A 16-byte integer (`MPI_INTEGER16`, `MPI_LOGICAL16`).
    I128,
    /// IEEE half precision (`MPI_REAL2`).
    F16,
    /// IEEE quadruple precision (`MPI_REAL16`, Fortran `real(16)`).
    F128,
    /// C `long double` on x86-64: the x87 80-bit extended format in 16
    /// bytes (6 of padding), aligned to 16. In `external32`: IEEE
    /// quadruple precision.
    LongDouble,
    /// A complex of two half-precision parts (`MPI_COMPLEX4`).
    ComplexF16,
    /// `float _Complex` (`MPI_C_FLOAT_COMPLEX`, `MPI_COMPLEX`).
    ComplexF32,
    /// `double _Complex` (`MPI_C_DOUBLE_COMPLEX`, `MPI_DOUBLE_COMPLEX`).
    ComplexF64,
    /// `long double _Complex` (`MPI_C_LONG_DOUBLE_COMPLEX`): two
    /// [`LongDouble`](Primitive::LongDouble)s.
    ComplexLongDouble,
    /// A complex of two quadruple-precision parts (`MPI_COMPLEX32`).
    ComplexF128,
}

impl Primitive {
    /// Every primitive, in declaration order.
    pub const ALL: [Primitive; 25] = [
        Primitive::I8,
        Primitive::I16,
        Primitive::I32,
        Primitive::I64,
        Primitive::U8,
        Primitive::U16,
        Primitive::U32,
        Primitive::U64,
        Primitive::F32,
        Primitive::F64,
        Primitive::Bool,
        Primitive::Char,
        Primitive::Byte,
        Primitive::Packed,
        Primitive::Long,
        Primitive::ULong,
        Primitive::I128,
        Primitive::F16,
        Primitive::F128,
        Primitive::LongDouble,
        Primitive::ComplexF16,
        Primitive::ComplexF32,
        Primitive::ComplexF64,
        Primitive::ComplexLongDouble,
        Primitive::ComplexF128,
    ];

    /// Size in bytes.
    pub const fn size(self) -> usize {
        match self {
            Primitive::I8
            | Primitive::U8
            | Primitive::Bool
            | Primitive::Byte
            | Primitive::Packed => 1,
            Primitive::I16 | Primitive::U16 | Primitive::F16 => 2,
            Primitive::I32
            | Primitive::U32
            | Primitive::F32
            | Primitive::Char
            | Primitive::ComplexF16 => 4,
            Primitive::I64
            | Primitive::U64
            | Primitive::F64
            | Primitive::Long
            | Primitive::ULong
            | Primitive::ComplexF32 => 8,
            Primitive::I128 | Primitive::F128 | Primitive::LongDouble | Primitive::ComplexF64 => 16,
            Primitive::ComplexLongDouble | Primitive::ComplexF128 => 32,
        }
    }

    /// Alignment in bytes: the size, but for a complex type, whose
    /// alignment is that of one part.
    pub const fn align(self) -> usize {
        match self {
            Primitive::ComplexF16
            | Primitive::ComplexF32
            | Primitive::ComplexF64
            | Primitive::ComplexLongDouble
            | Primitive::ComplexF128 => self.size() / 2,
            _ => self.size(),
        }
    }

    /// Size in the `external32` representation (MPI 4.1 §14.5.2): the
    /// memory size but for `long` and `unsigned long` (4 bytes).
    pub const fn external32_size(self) -> usize {
        match self {
            Primitive::Long | Primitive::ULong => 4,
            _ => self.size(),
        }
    }

    /// The MPI name of the primitive.
    pub const fn mpi_name(self) -> &'static str {
        match self {
            Primitive::I8 => "MPI_INT8_T",
            Primitive::I16 => "MPI_INT16_T",
            Primitive::I32 => "MPI_INT32_T",
            Primitive::I64 => "MPI_INT64_T",
            Primitive::U8 => "MPI_UINT8_T",
            Primitive::U16 => "MPI_UINT16_T",
            Primitive::U32 => "MPI_UINT32_T",
            Primitive::U64 => "MPI_UINT64_T",
            Primitive::F32 => "MPI_FLOAT",
            Primitive::F64 => "MPI_DOUBLE",
            Primitive::Bool => "MPI_C_BOOL",
            Primitive::Char => "MPI_UINT32_T(char)",
            Primitive::Byte => "MPI_BYTE",
            Primitive::Packed => "MPI_PACKED",
            Primitive::Long => "MPI_LONG",
            Primitive::ULong => "MPI_UNSIGNED_LONG",
            Primitive::I128 => "MPI_INTEGER16",
            Primitive::F16 => "MPI_REAL2",
            Primitive::F128 => "MPI_REAL16",
            Primitive::LongDouble => "MPI_LONG_DOUBLE",
            Primitive::ComplexF16 => "MPI_COMPLEX4",
            Primitive::ComplexF32 => "MPI_C_FLOAT_COMPLEX",
            Primitive::ComplexF64 => "MPI_C_DOUBLE_COMPLEX",
            Primitive::ComplexLongDouble => "MPI_C_LONG_DOUBLE_COMPLEX",
            Primitive::ComplexF128 => "MPI_COMPLEX32",
        }
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mpi_name())
    }
}

/// The predefined pair types (value, index) of `MPI_MINLOC` / `MPI_MAXLOC`.
/// Each is laid out like the matching C struct: the second member at the
/// next offset aligned for it, the extent padded to the struct alignment.
/// The size is that of the data only (as in MPICH and the standard's type
/// map): `MPI_LONG_DOUBLE_INT`, the C struct `{long double; int}` of 32
/// bytes, has size 20 and extent 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pair {
    /// `MPI_2INT`: `{i32, i32}`, size 8, extent 8.
    TwoInt,
    /// `MPI_SHORT_INT`: `{i16, i32}` (second at 4), size 6, extent 8.
    ShortInt,
    /// `MPI_FLOAT_INT`: `{f32, i32}`, size 8, extent 8.
    FloatInt,
    /// `MPI_LONG_INT`: `{long, i32}`, size 12, extent 16.
    LongInt,
    /// `MPI_DOUBLE_INT`: `{f64, i32}`, size 12, extent 16.
    DoubleInt,
    /// `MPI_2REAL`: `{f32, f32}`, size 8, extent 8.
    TwoFloat,
    /// `MPI_2DOUBLE_PRECISION`: `{f64, f64}`, size 16, extent 16.
    TwoDouble,
    /// `MPI_LONG_DOUBLE_INT`: `{long double, i32}` (second at 16), size
    /// 20, extent 32.
    LongDoubleInt,
}

impl Pair {
    /// Every pair type.
    pub const ALL: [Pair; 8] = [
        Pair::TwoInt,
        Pair::ShortInt,
        Pair::FloatInt,
        Pair::LongInt,
        Pair::DoubleInt,
        Pair::TwoFloat,
        Pair::TwoDouble,
        Pair::LongDoubleInt,
    ];

    /// The (value, index) members.
    pub const fn members(self) -> (Primitive, Primitive) {
        match self {
            Pair::TwoInt => (Primitive::I32, Primitive::I32),
            Pair::ShortInt => (Primitive::I16, Primitive::I32),
            Pair::FloatInt => (Primitive::F32, Primitive::I32),
            Pair::LongInt => (Primitive::Long, Primitive::I32),
            Pair::DoubleInt => (Primitive::F64, Primitive::I32),
            Pair::TwoFloat => (Primitive::F32, Primitive::F32),
            Pair::TwoDouble => (Primitive::F64, Primitive::F64),
            Pair::LongDoubleInt => (Primitive::LongDouble, Primitive::I32),
        }
    }

    /// The MPI name of the pair type.
    pub const fn mpi_name(self) -> &'static str {
        match self {
            Pair::TwoInt => "MPI_2INT",
            Pair::ShortInt => "MPI_SHORT_INT",
            Pair::FloatInt => "MPI_FLOAT_INT",
            Pair::LongInt => "MPI_LONG_INT",
            Pair::DoubleInt => "MPI_DOUBLE_INT",
            Pair::TwoFloat => "MPI_2REAL",
            Pair::TwoDouble => "MPI_2DOUBLE_PRECISION",
            Pair::LongDoubleInt => "MPI_LONG_DOUBLE_INT",
        }
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mpi_name())
    }
}

/// How a datatype was made: the combiner of `MPI_Type_get_envelope`, without
/// the arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    /// A predefined primitive.
    Primitive(Primitive),
    /// A predefined pair type.
    Pair(Pair),
    /// `MPI_Type_contiguous`.
    Contiguous,
    /// `MPI_Type_vector`.
    Vector,
    /// `MPI_Type_create_hvector`.
    Hvector,
    /// `MPI_Type_indexed`.
    Indexed,
    /// `MPI_Type_create_hindexed`.
    Hindexed,
    /// `MPI_Type_create_indexed_block`.
    IndexedBlock,
    /// `MPI_Type_create_hindexed_block`.
    HindexedBlock,
    /// `MPI_Type_create_struct`.
    Struct,
    /// `MPI_Type_create_resized`.
    Resized,
    /// `MPI_Type_create_subarray`.
    Subarray,
    /// `MPI_Type_dup`.
    Dup,
    /// `MPI_Type_create_darray`.
    Darray,
}

/// Storage order of a subarray's full array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// `MPI_ORDER_C`: row-major, the last dimension varies fastest.
    C,
    /// `MPI_ORDER_FORTRAN`: column-major, the first dimension varies fastest.
    Fortran,
}

/// How one dimension of a distributed array is divided among the processes
/// of its process-grid dimension (`MPI_Type_create_darray`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// `MPI_DISTRIBUTE_BLOCK`: one block per process, of the given size
    /// (`None`, `MPI_DISTRIBUTE_DFLT_DARG`: `ceil(gsize / psize)`); block
    /// size times processes must cover the dimension.
    Block(Option<isize>),
    /// `MPI_DISTRIBUTE_CYCLIC`: blocks of the given size (`None`: 1) dealt
    /// out to the processes in turn.
    Cyclic(Option<isize>),
    /// `MPI_DISTRIBUTE_NONE`: not distributed (the process-grid dimension
    /// must be 1).
    None,
}
