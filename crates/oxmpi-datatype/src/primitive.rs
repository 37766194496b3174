//! Predefined (named) datatypes: the primitives every type map is made of,
//! and the pair types of `MPI_MINLOC` / `MPI_MAXLOC`.

use std::fmt;

/// A basic element: the unit of a type map, of a type signature and of
/// `MPI_Get_elements`. Every primitive is naturally aligned (alignment =
/// size), which is what the struct padding rule uses.
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
}

impl Primitive {
    /// Every primitive, in declaration order.
    pub const ALL: [Primitive; 14] = [
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
    ];

    /// Size in bytes.
    pub const fn size(self) -> usize {
        match self {
            Primitive::I8
            | Primitive::U8
            | Primitive::Bool
            | Primitive::Byte
            | Primitive::Packed => 1,
            Primitive::I16 | Primitive::U16 => 2,
            Primitive::I32 | Primitive::U32 | Primitive::F32 | Primitive::Char => 4,
            Primitive::I64 | Primitive::U64 | Primitive::F64 => 8,
        }
    }

    /// Alignment in bytes (equal to the size for every primitive).
    pub const fn align(self) -> usize {
        self.size()
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pair {
    /// `MPI_2INT`: `{i32, i32}`, size 8, extent 8.
    TwoInt,
    /// `MPI_SHORT_INT`: `{i16, i32}` (second at 4), size 6, extent 8.
    ShortInt,
    /// `MPI_FLOAT_INT`: `{f32, i32}`, size 8, extent 8.
    FloatInt,
    /// `MPI_LONG_INT`: `{i64, i32}`, size 12, extent 16.
    LongInt,
    /// `MPI_DOUBLE_INT`: `{f64, i32}`, size 12, extent 16.
    DoubleInt,
    /// `MPI_2REAL`: `{f32, f32}`, size 8, extent 8.
    TwoFloat,
    /// `MPI_2DOUBLE_PRECISION`: `{f64, f64}`, size 16, extent 16.
    TwoDouble,
}

impl Pair {
    /// Every pair type.
    pub const ALL: [Pair; 7] = [
        Pair::TwoInt,
        Pair::ShortInt,
        Pair::FloatInt,
        Pair::LongInt,
        Pair::DoubleInt,
        Pair::TwoFloat,
        Pair::TwoDouble,
    ];

    /// The (value, index) members.
    pub const fn members(self) -> (Primitive, Primitive) {
        match self {
            Pair::TwoInt => (Primitive::I32, Primitive::I32),
            Pair::ShortInt => (Primitive::I16, Primitive::I32),
            Pair::FloatInt => (Primitive::F32, Primitive::I32),
            Pair::LongInt => (Primitive::I64, Primitive::I32),
            Pair::DoubleInt => (Primitive::F64, Primitive::I32),
            Pair::TwoFloat => (Primitive::F32, Primitive::F32),
            Pair::TwoDouble => (Primitive::F64, Primitive::F64),
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
}

/// Storage order of a subarray's full array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// `MPI_ORDER_C`: row-major, the last dimension varies fastest.
    C,
    /// `MPI_ORDER_FORTRAN`: column-major, the first dimension varies fastest.
    Fortran,
}
