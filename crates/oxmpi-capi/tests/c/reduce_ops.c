/*
 * reduce_ops.c -- every predefined operation on every type of its group,
 * MPI_Reduce_local, derived datatypes of one basic type, and MPI_ERR_OP.
 *
 * Ranks: any number (1 too).
 *
 * Each result is compared with a serial reference computed from the known
 * contributions of every rank (small values: no overflow, exact floating
 * point results).
 *  - MPI-4.1 section 6.9.2's groups: C integers (MPI_CHAR too, as MPICH
 *    takes it; the fixed-size types; MPI_AINT, MPI_OFFSET, MPI_COUNT)
 *    with SUM, PROD, MIN, MAX, LAND, LOR, LXOR, BAND, BOR, BXOR; Fortran
 *    MPI_INTEGER with all but the logical ones; floating point (float,
 *    double, long double, MPI_REAL, MPI_DOUBLE_PRECISION, MPI_REAL4/8)
 *    with SUM, PROD, MIN, MAX; logical (MPI_C_BOOL, MPI_CXX_BOOL,
 *    MPI_LOGICAL) with LAND, LOR, LXOR; complex (C and Fortran) with SUM
 *    and PROD; MPI_BYTE with BAND, BOR, BXOR -- each through
 *    MPI_Allreduce, MPI_Reduce (root moving) and MPI_Reduce_local.
 *  - MINLOC and MAXLOC on every pair type (ties to the lowest index).
 *  - Derived types whose basic elements are one predefined type:
 *    Type_dup of MPI_LONG, contiguous of MPI_INT, a vector of MPI_DOUBLE
 *    with gaps (the gaps untouched), an indexed type of MPI_2INT
 *    (MINLOC), a resized MPI_UNSIGNED_SHORT; Reduce_local on them too.
 *  - Under MPI_ERRORS_RETURN: MPI_ERR_OP for BAND on MPI_DOUBLE, MAXLOC
 *    on MPI_INT, SUM on MPI_BYTE, LAND on MPI_INTEGER, SUM on MPI_C_BOOL,
 *    MAX on a complex type, SUM on MPI_WCHAR, MPI_REPLACE and MPI_NO_OP in
 *    MPI_Allreduce, SUM on a struct of an int and a double; the
 *    communicator still works afterwards.
 *  - MPI_Op_create: a non-commutative op (2x2 matrix product mod 65521)
 *    applied in rank order by Allreduce, Reduce and Reduce_local; it is
 *    given the count and the datatype handle of the call (a contiguous
 *    type of 4 ints).
 */
#include "check.h"

#include <complex.h>
#include <stdbool.h>
#include <wchar.h>

#define N 7

static int rank, size;

enum {
    O_SUM, O_PROD, O_MIN, O_MAX, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, NOPS
};
static const char *op_names[NOPS] = {"SUM", "PROD", "MIN", "MAX", "LAND",
                                     "LOR", "LXOR", "BAND", "BOR", "BXOR"};

static MPI_Op op_handle(int o)
{
    switch (o) {
    case O_SUM: return MPI_SUM;
    case O_PROD: return MPI_PROD;
    case O_MIN: return MPI_MIN;
    case O_MAX: return MPI_MAX;
    case O_LAND: return MPI_LAND;
    case O_LOR: return MPI_LOR;
    case O_LXOR: return MPI_LXOR;
    case O_BAND: return MPI_BAND;
    case O_BOR: return MPI_BOR;
    default: return MPI_BXOR;
    }
}

/* A rank's contribution for operation o at element i: small values (PROD:
 * 1 or 2, at most 3 twos over 8 ranks; logical: 0 or 1; bitwise: 7 bits). */
static long long value(int o, int r, int i)
{
    switch (o) {
    case O_PROD: return (r + i) % 3 == 0 ? 2 : 1;
    case O_LAND: case O_LOR: case O_LXOR: return (r * 5 + i) % 3 == 0 ? 0 : 1;
    case O_BAND: case O_BOR: case O_BXOR: return (r * 37 + i * 11 + 5) & 0x7f;
    case O_MIN: case O_MAX: return (r * 7 + i * 3) % 11;
    default: return r + i + 1;
    }
}

static long long combine(int o, long long a, long long b)
{
    switch (o) {
    case O_SUM: return a + b;
    case O_PROD: return a * b;
    case O_MIN: return a < b ? a : b;
    case O_MAX: return a > b ? a : b;
    case O_LAND: return (a && b);
    case O_LOR: return (a || b);
    case O_LXOR: return (!a != !b);
    case O_BAND: return a & b;
    case O_BOR: return a | b;
    default: return a ^ b;
    }
}

/* The reduction over ranks 0..n-1 of element i. */
static long long reference(int o, int n, int i)
{
    long long acc = value(o, 0, i);
    for (int r = 1; r < n; r++)
        acc = combine(o, acc, value(o, r, i));
    return acc;
}

/* Allreduce, Reduce (root o % size) and Reduce_local of N elements of one
 * type for every op in `ops` (a bit mask over the enum). Values are stored
 * and compared through long long / double. */
#define TEST_TYPE(CT, DT, OPS, LOGICAL)                                                     \
    do {                                                                                    \
        for (int o = 0; o < NOPS; o++) {                                                    \
            if (!((OPS) & (1 << o)))                                                        \
                continue;                                                                   \
            CT in[N], out[N], loc[N];                                                       \
            for (int i = 0; i < N; i++) {                                                   \
                in[i] = (CT)value(o, rank, i);                                              \
                out[i] = (CT)99;                                                            \
            }                                                                               \
            MPI_CHECK(MPI_Allreduce(in, out, N, DT, op_handle(o), MPI_COMM_WORLD));         \
            for (int i = 0; i < N; i++) {                                                   \
                long long want = reference(o, size, i);                                     \
                long long got = (long long)out[i];                                          \
                if (LOGICAL)                                                                \
                    got = got != 0, want = want != 0;                                       \
                CHECK(got == want, "Allreduce %s %s [%d]: %lld, want %lld", #DT,            \
                      op_names[o], i, got, want);                                           \
            }                                                                               \
            int root = o % size;                                                            \
            for (int i = 0; i < N; i++)                                                     \
                out[i] = (CT)99;                                                            \
            MPI_CHECK(MPI_Reduce(in, rank == root ? out : NULL, N, DT, op_handle(o), root,  \
                                 MPI_COMM_WORLD));                                          \
            if (rank == root)                                                               \
                for (int i = 0; i < N; i++) {                                               \
                    long long want = reference(o, size, i), got = (long long)out[i];        \
                    if (LOGICAL)                                                            \
                        got = got != 0, want = want != 0;                                   \
                    CHECK(got == want, "Reduce %s %s [%d]: %lld, want %lld", #DT,           \
                          op_names[o], i, got, want);                                       \
                }                                                                           \
            /* Reduce_local: loc = in(rank 1) op loc(rank 0). */                            \
            for (int i = 0; i < N; i++) {                                                   \
                in[i] = (CT)value(o, 1, i);                                                 \
                loc[i] = (CT)value(o, 0, i);                                                \
            }                                                                               \
            MPI_CHECK(MPI_Reduce_local(in, loc, N, DT, op_handle(o)));                      \
            for (int i = 0; i < N; i++) {                                                   \
                long long want = reference(o, 2, i), got = (long long)loc[i];               \
                if (LOGICAL)                                                                \
                    got = got != 0, want = want != 0;                                       \
                CHECK(got == want, "Reduce_local %s %s [%d]: %lld, want %lld", #DT,         \
                      op_names[o], i, got, want);                                           \
            }                                                                               \
        }                                                                                   \
    } while (0)

#define ARITH ((1 << O_SUM) | (1 << O_PROD) | (1 << O_MIN) | (1 << O_MAX))
#define LOGIC ((1 << O_LAND) | (1 << O_LOR) | (1 << O_LXOR))
#define BITS ((1 << O_BAND) | (1 << O_BOR) | (1 << O_BXOR))

static void test_groups(void)
{
    /* C integers. */
    TEST_TYPE(char, MPI_CHAR, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(signed char, MPI_SIGNED_CHAR, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(unsigned char, MPI_UNSIGNED_CHAR, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(short, MPI_SHORT, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(unsigned short, MPI_UNSIGNED_SHORT, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(int, MPI_INT, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(unsigned, MPI_UNSIGNED, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(long, MPI_LONG, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(unsigned long, MPI_UNSIGNED_LONG, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(long long, MPI_LONG_LONG, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(unsigned long long, MPI_UNSIGNED_LONG_LONG, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(int8_t, MPI_INT8_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(uint8_t, MPI_UINT8_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(int16_t, MPI_INT16_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(uint16_t, MPI_UINT16_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(int32_t, MPI_INT32_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(uint32_t, MPI_UINT32_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(int64_t, MPI_INT64_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(uint64_t, MPI_UINT64_T, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(MPI_Aint, MPI_AINT, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(MPI_Offset, MPI_OFFSET, ARITH | LOGIC | BITS, 0);
    TEST_TYPE(MPI_Count, MPI_COUNT, ARITH | LOGIC | BITS, 0);
    /* Fortran integer (an int here): no logical operations. */
    TEST_TYPE(int, MPI_INTEGER, ARITH | BITS, 0);
    /* Floating point. */
    TEST_TYPE(float, MPI_FLOAT, ARITH, 0);
    TEST_TYPE(double, MPI_DOUBLE, ARITH, 0);
    TEST_TYPE(long double, MPI_LONG_DOUBLE, ARITH, 0);
    TEST_TYPE(float, MPI_REAL, ARITH, 0);
    TEST_TYPE(double, MPI_DOUBLE_PRECISION, ARITH, 0);
    TEST_TYPE(float, MPI_REAL4, ARITH, 0);
    TEST_TYPE(double, MPI_REAL8, ARITH, 0);
    /* Logical. */
    TEST_TYPE(bool, MPI_C_BOOL, LOGIC, 1);
    TEST_TYPE(bool, MPI_CXX_BOOL, LOGIC, 1);
    TEST_TYPE(int, MPI_LOGICAL, LOGIC, 1);
    /* Byte. */
    TEST_TYPE(unsigned char, MPI_BYTE, BITS, 0);
}

/* Complex SUM and PROD: rank r contributes (1 + r%2) + (r%3 == 1) i. */
#define TEST_COMPLEX(CT, DT)                                                              \
    do {                                                                                  \
        for (int o = O_SUM; o <= O_PROD; o++) {                                           \
            CT in[N], out[N], want = o == O_SUM ? 0 : 1;                                  \
            for (int r = 0; r < size; r++) {                                              \
                CT v = (CT)((1 + r % 2) + (r % 3 == 1) * I);                              \
                want = o == O_SUM ? want + v : want * v;                                  \
            }                                                                             \
            for (int i = 0; i < N; i++)                                                   \
                in[i] = (CT)((1 + rank % 2) + (rank % 3 == 1) * I);                       \
            MPI_CHECK(MPI_Allreduce(in, out, N, DT, op_handle(o), MPI_COMM_WORLD));       \
            for (int i = 0; i < N; i++)                                                   \
                CHECK(out[i] == want, "%s %s [%d]: %g%+gi, want %g%+gi", #DT,             \
                      op_names[o], i, (double)creall(out[i]), (double)cimagl(out[i]),    \
                      (double)creall(want), (double)cimagl(want));                        \
            CT a[1] = {(CT)(2 + 1 * I)}, b[1] = {(CT)(3 - 2 * I)};                        \
            MPI_CHECK(MPI_Reduce_local(a, b, 1, DT, op_handle(o)));                       \
            CT w = o == O_SUM ? (CT)(5 - 1 * I) : (CT)(8 - 1 * I);                        \
            CHECK(b[0] == w, "Reduce_local %s %s", #DT, op_names[o]);                     \
        }                                                                                 \
    } while (0)

static void test_complex(void)
{
    TEST_COMPLEX(float _Complex, MPI_C_FLOAT_COMPLEX);
    TEST_COMPLEX(double _Complex, MPI_C_DOUBLE_COMPLEX);
    TEST_COMPLEX(long double _Complex, MPI_C_LONG_DOUBLE_COMPLEX);
    TEST_COMPLEX(float _Complex, MPI_COMPLEX);
    TEST_COMPLEX(double _Complex, MPI_DOUBLE_COMPLEX);
    TEST_COMPLEX(float _Complex, MPI_CXX_FLOAT_COMPLEX);
    TEST_COMPLEX(double _Complex, MPI_CXX_DOUBLE_COMPLEX);
}

/* MINLOC/MAXLOC: rank r's value at element i is (r * 3 + i) % 4 (ties),
 * its index r; the result is the extreme value with the lowest index. */
#define TEST_PAIR(VT, IT, DT)                                                             \
    do {                                                                                  \
        struct { VT v; IT k; } in[N], out[N];                                             \
        for (int m = 0; m < 2; m++) {                                                     \
            MPI_Op op = m ? MPI_MAXLOC : MPI_MINLOC;                                      \
            for (int i = 0; i < N; i++) {                                                 \
                in[i].v = (VT)((rank * 3 + i) % 4);                                       \
                in[i].k = (IT)rank;                                                       \
            }                                                                             \
            MPI_CHECK(MPI_Allreduce(in, out, N, DT, op, MPI_COMM_WORLD));                 \
            for (int i = 0; i < N; i++) {                                                 \
                int best = 0;                                                             \
                for (int r = 1; r < size; r++) {                                          \
                    int v = (r * 3 + i) % 4, b = (best * 3 + i) % 4;                      \
                    if (m ? v > b : v < b)                                                \
                        best = r;                                                         \
                }                                                                         \
                CHECK(out[i].v == (VT)((best * 3 + i) % 4) && out[i].k == (IT)best,       \
                      "%s %s [%d]: (%g, %g), want rank %d", #DT, m ? "MAXLOC" : "MINLOC", \
                      i, (double)out[i].v, (double)out[i].k, best);                       \
            }                                                                             \
            /* Reduce_local: equal values keep the lower index. */                        \
            in[0].v = (VT)5, in[0].k = (IT)3, out[0].v = (VT)5, out[0].k = (IT)4;         \
            in[1].v = (VT)1, in[1].k = (IT)9, out[1].v = (VT)2, out[1].k = (IT)0;         \
            MPI_CHECK(MPI_Reduce_local(in, out, 2, DT, op));                              \
            CHECK(out[0].k == (IT)3, "Reduce_local %s tie", #DT);                         \
            CHECK(out[1].k == (IT)(m ? 0 : 9), "Reduce_local %s", #DT);                   \
        }                                                                                 \
    } while (0)

static void test_pairs(void)
{
    TEST_PAIR(float, int, MPI_FLOAT_INT);
    TEST_PAIR(double, int, MPI_DOUBLE_INT);
    TEST_PAIR(long, int, MPI_LONG_INT);
    TEST_PAIR(int, int, MPI_2INT);
    TEST_PAIR(short, int, MPI_SHORT_INT);
    TEST_PAIR(long double, int, MPI_LONG_DOUBLE_INT);
    TEST_PAIR(float, float, MPI_2REAL);
    TEST_PAIR(double, double, MPI_2DOUBLE_PRECISION);
    TEST_PAIR(int, int, MPI_2INTEGER);
}

/* Predefined operations on derived types are an extension of the standard
 * (section 6.9.1 lists only the basic types): Open MPI and oxmpi take them,
 * MPICH 5 says MPI_ERR_OP. Whether `rc` is a result to check; an
 * MPI_ERR_OP is accepted outside strict mode. */
static int derived_ok(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return 1;
    int cls;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP && !strict_mode(), "%s: error class %d", what, cls);
    return 0;
}

static void test_derived(void)
{
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* A dup of MPI_LONG: SUM. */
    MPI_Datatype dup;
    MPI_CHECK(MPI_Type_dup(MPI_LONG, &dup));
    MPI_CHECK(MPI_Type_commit(&dup));
    long l[N], lo[N];
    for (int i = 0; i < N; i++)
        l[i] = rank + i;
    if (derived_ok(MPI_Allreduce(l, lo, N, dup, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce"))
        for (int i = 0; i < N; i++)
            CHECK(lo[i] == (long)size * (size - 1) / 2 + (long)size * i, "dup(LONG) SUM [%d]", i);
    MPI_CHECK(MPI_Type_free(&dup));

    /* Contiguous of 3 MPI_INT, a dup of it: MAX and BXOR, 2 elements. */
    MPI_Datatype c3, c3d;
    MPI_CHECK(MPI_Type_contiguous(3, MPI_INT, &c3));
    MPI_CHECK(MPI_Type_dup(c3, &c3d));
    MPI_CHECK(MPI_Type_commit(&c3d));
    int ci[6], co[6];
    for (int i = 0; i < 6; i++)
        ci[i] = (int)value(O_MAX, rank, i);
    if (derived_ok(MPI_Allreduce(ci, co, 2, c3d, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce"))
    for (int i = 0; i < 6; i++)
        CHECK(co[i] == reference(O_MAX, size, i), "contiguous(INT) MAX [%d]", i);
    for (int i = 0; i < 6; i++)
        ci[i] = (int)value(O_BXOR, rank, i);
    if (derived_ok(MPI_Reduce(ci, co, 2, c3d, MPI_BXOR, size - 1, MPI_COMM_WORLD), "MPI_Reduce"))
        if (rank == size - 1)
            for (int i = 0; i < 6; i++)
                CHECK(co[i] == reference(O_BXOR, size, i), "contiguous(INT) BXOR [%d]", i);
    MPI_CHECK(MPI_Type_free(&c3d));
    MPI_CHECK(MPI_Type_free(&c3));

    /* A vector of MPI_DOUBLE: 3 blocks of 2 with a gap of 1; 2 of them.
     * The gaps of the result keep their values. */
    MPI_Datatype vec;
    MPI_CHECK(MPI_Type_vector(3, 2, 3, MPI_DOUBLE, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    MPI_Aint lb, ext;
    MPI_CHECK(MPI_Type_get_extent(vec, &lb, &ext));
    int per = (int)(ext / sizeof(double)); /* 8 doubles */
    double dv[16], dr[16];
    for (int i = 0; i < 2 * per; i++) {
        dv[i] = rank + i * 0.5;
        dr[i] = -1.0;
    }
    if (derived_ok(MPI_Allreduce(dv, dr, 2, vec, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce"))
        for (int e = 0; e < 2; e++)
            for (int i = 0; i < per; i++) {
                int at = e * per + i;
                int data = i < 8 && i % 3 != 2;
                double want = data ? size * (size - 1) / 2.0 + size * at * 0.5 : -1.0;
                CHECK(dr[at] == want, "vector(DOUBLE) SUM [%d]: %g, want %g", at, dr[at], want);
            }
    for (int i = 0; i < 2 * per; i++) {
        dv[i] = 2.0 + i;
        dr[i] = 1.0 + 3 * i;
    }
    if (derived_ok(MPI_Reduce_local(dv, dr, 2, vec, MPI_PROD), "MPI_Reduce_local"))
        for (int e = 0; e < 2; e++)
            for (int i = 0; i < per; i++) {
                int at = e * per + i;
                int data = i < 8 && i % 3 != 2;
                double want = data ? (2.0 + at) * (1.0 + 3 * at) : 1.0 + 3 * at;
                CHECK(dr[at] == want, "Reduce_local vector(DOUBLE) PROD [%d]", at);
            }
    MPI_CHECK(MPI_Type_free(&vec));

    /* An indexed type of MPI_2INT (pairs 0 and 2 of 3): MINLOC. */
    MPI_Datatype idx;
    int bl[2] = {1, 1}, dp[2] = {0, 2};
    MPI_CHECK(MPI_Type_indexed(2, bl, dp, MPI_2INT, &idx));
    MPI_CHECK(MPI_Type_commit(&idx));
    int pin[6], pout[6];
    for (int p = 0; p < 3; p++) {
        pin[2 * p] = (rank * 3 + p) % 4;
        pin[2 * p + 1] = rank;
        pout[2 * p] = pout[2 * p + 1] = -7;
    }
    if (derived_ok(MPI_Allreduce(pin, pout, 1, idx, MPI_MINLOC, MPI_COMM_WORLD), "MPI_Allreduce"))
        for (int p = 0; p < 3; p += 2) {
            int best = 0;
            for (int r = 1; r < size; r++)
                if ((r * 3 + p) % 4 < (best * 3 + p) % 4)
                    best = r;
            CHECK(pout[2 * p] == (best * 3 + p) % 4 && pout[2 * p + 1] == best,
                  "indexed(2INT) MINLOC pair %d: (%d, %d), want rank %d", p, pout[2 * p],
                  pout[2 * p + 1], best);
        }
    CHECK(pout[2] == -7 && pout[3] == -7, "indexed(2INT): the gap was written");
    MPI_CHECK(MPI_Type_free(&idx));

    /* MPI_UNSIGNED_SHORT resized to 4 bytes: SUM over the shorts only. */
    MPI_Datatype rs;
    MPI_CHECK(MPI_Type_create_resized(MPI_UNSIGNED_SHORT, 0, 4, &rs));
    MPI_CHECK(MPI_Type_commit(&rs));
    unsigned short us[2 * N], uo[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        us[i] = (unsigned short)(rank + i);
        uo[i] = 777;
    }
    if (derived_ok(MPI_Allreduce(us, uo, N, rs, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce"))
        for (int i = 0; i < 2 * N; i++) {
            unsigned want = i % 2 ? 777u : (unsigned)(size * (size - 1) / 2 + size * i);
            CHECK(uo[i] == want, "resized(UNSIGNED_SHORT) SUM [%d]: %u, want %u", i, uo[i], want);
        }
    MPI_CHECK(MPI_Type_free(&rs));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

static void expect_op_error(const void *in, void *out, int n, MPI_Datatype dt, MPI_Op op,
                            const char *what)
{
    int err = MPI_Allreduce(in, out, n, dt, op, MPI_COMM_WORLD);
    int cls = MPI_SUCCESS;
    if (err != MPI_SUCCESS)
        MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_OP, "Allreduce %s: class %d, want MPI_ERR_OP", what, cls);
    err = MPI_Reduce_local(in, out, n, dt, op);
    cls = MPI_SUCCESS;
    if (err != MPI_SUCCESS)
        MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_OP, "Reduce_local %s: class %d, want MPI_ERR_OP", what, cls);
}

static void test_errors(void)
{
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    char in[64] = {0}, out[64];
    expect_op_error(in, out, 2, MPI_DOUBLE, MPI_BAND, "BAND on DOUBLE");
    expect_op_error(in, out, 2, MPI_INT, MPI_MAXLOC, "MAXLOC on INT");
    expect_op_error(in, out, 2, MPI_BYTE, MPI_SUM, "SUM on BYTE");
    expect_op_error(in, out, 2, MPI_INTEGER, MPI_LAND, "LAND on INTEGER");
    expect_op_error(in, out, 2, MPI_C_BOOL, MPI_SUM, "SUM on C_BOOL");
    expect_op_error(in, out, 2, MPI_C_DOUBLE_COMPLEX, MPI_MAX, "MAX on C_DOUBLE_COMPLEX");
    expect_op_error(in, out, 2, MPI_WCHAR, MPI_SUM, "SUM on WCHAR");
    expect_op_error(in, out, 2, MPI_INT, MPI_REPLACE, "REPLACE");
    expect_op_error(in, out, 2, MPI_INT, MPI_NO_OP, "NO_OP");
    MPI_Datatype st;
    int bl[2] = {1, 1};
    MPI_Aint dp[2] = {0, 8};
    MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
    MPI_CHECK(MPI_Type_create_struct(2, bl, dp, ts, &st));
    MPI_CHECK(MPI_Type_commit(&st));
    expect_op_error(in, out, 2, st, MPI_SUM, "SUM on struct{int, double}");
    MPI_CHECK(MPI_Type_free(&st));
    /* Still works. */
    int x = 1, y = 0;
    MPI_CHECK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(y == size, "Allreduce after the errors: %d", y);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* 2x2 matrices mod 65521 as 4 ints: inout = in * inout. */
static MPI_Datatype mat_type;
static int mat_calls_bad;

static void matmul(void *invec, void *inoutvec, int *len, MPI_Datatype *dt)
{
    if (*dt != mat_type)
        mat_calls_bad = 1;
    const int *a = invec;
    int *b = inoutvec;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long long c[4];
        c[0] = ((long long)a[0] * b[0] + (long long)a[1] * b[2]) % 65521;
        c[1] = ((long long)a[0] * b[1] + (long long)a[1] * b[3]) % 65521;
        c[2] = ((long long)a[2] * b[0] + (long long)a[3] * b[2]) % 65521;
        c[3] = ((long long)a[2] * b[1] + (long long)a[3] * b[3]) % 65521;
        for (int j = 0; j < 4; j++)
            b[j] = (int)c[j];
    }
}

static void mat_of(int r, int k, int m[4])
{
    m[0] = r + 1;
    m[1] = k + 2;
    m[2] = r * k % 3;
    m[3] = 1 + (r + k) % 2;
}

static void test_user_op(void)
{
    MPI_Op op;
    MPI_CHECK(MPI_Type_contiguous(4, MPI_INT, &mat_type));
    MPI_CHECK(MPI_Type_commit(&mat_type));
    MPI_CHECK(MPI_Op_create(matmul, 0, &op));
    int commute = 1;
    MPI_CHECK(MPI_Op_commutative(op, &commute));
    CHECK(commute == 0, "Op_commutative of a non-commutative op");
    enum { K = 3 };
    int in[4 * K], out[4 * K], want[4 * K];
    for (int k = 0; k < K; k++) {
        mat_of(rank, k, in + 4 * k);
        mat_of(0, k, want + 4 * k);
        for (int r = 1; r < size; r++) {
            int m[4], tmp[4];
            mat_of(r, k, m);
            memcpy(tmp, want + 4 * k, sizeof tmp);
            /* want = want * m: the user function computes inout = in * inout. */
            int one = 1;
            memcpy(want + 4 * k, m, sizeof m);
            matmul(tmp, want + 4 * k, &one, &mat_type);
        }
    }
    MPI_CHECK(MPI_Allreduce(in, out, K, mat_type, op, MPI_COMM_WORLD));
    CHECK(memcmp(out, want, sizeof want) == 0, "non-commutative Allreduce out of rank order");
    memset(out, 0, sizeof out);
    MPI_CHECK(MPI_Reduce(in, out, K, mat_type, op, size - 1, MPI_COMM_WORLD));
    if (rank == size - 1)
        CHECK(memcmp(out, want, sizeof want) == 0, "non-commutative Reduce out of rank order");
    /* Reduce_local: inout = in * inout, once. */
    int a[4] = {1, 2, 3, 4}, b[4] = {0, 1, 1, 0};
    MPI_CHECK(MPI_Reduce_local(a, b, 1, mat_type, op));
    CHECK(b[0] == 2 && b[1] == 1 && b[2] == 4 && b[3] == 3, "Reduce_local user op");
#if MPI_VERSION >= 4
    int c[4] = {0, 1, 1, 0};
    MPI_CHECK(MPI_Reduce_local_c(a, c, 1, mat_type, op));
    CHECK(memcmp(b, c, sizeof c) == 0, "Reduce_local_c user op");
    long long s1[3] = {1, 2, 3}, s2[3] = {10, 20, 30};
    MPI_CHECK(MPI_Reduce_local_c(s1, s2, (MPI_Count)3, MPI_LONG_LONG, MPI_SUM));
    CHECK(s2[0] == 11 && s2[2] == 33, "Reduce_local_c SUM");
#endif
    CHECK(!mat_calls_bad, "the user function was given another datatype");
    MPI_CHECK(MPI_Op_free(&op));
    CHECK(op == MPI_OP_NULL, "Op_free");
    MPI_CHECK(MPI_Type_free(&mat_type));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_groups();
    test_complex();
    test_pairs();
    test_derived();
    /* Open MPI 5.0 accepts SUM on MPI_BYTE, which the standard does not
     * define. */
    if (!lenient_mpi())
        test_errors();
    test_user_op();
    MPI_Barrier(MPI_COMM_WORLD);
    test_ok("reduce_ops");
    MPI_Finalize();
    return 0;
}
