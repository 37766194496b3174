/*
 * collectives.c -- blocking collectives and reduction operations.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Every result is compared with a value computed locally from the known
 * contributions of all ranks.
 *  - Barrier: nobody leaves before the last rank arrives (rank 0 arrives
 *    150 ms late; the others must wait at least 75 ms; up to 3 attempts).
 *  - Bcast from different roots: 1 int, 1000 doubles, 100000 bytes.
 *  - Reduce and Allreduce for MPI_INT, MPI_DOUBLE, MPI_LONG_LONG and
 *    MPI_UNSIGNED_CHAR with every applicable predefined op: SUM, PROD, MIN,
 *    MAX (all four), LAND, LOR, LXOR, BAND, BOR, BXOR (the integer types).
 *    The root of Reduce moves from op to op; ops alternate between a
 *    separate send buffer and MPI_IN_PLACE (Allreduce on all ranks, Reduce at
 *    the root), so each variant is covered for every type. Non-roots pass
 *    recvbuf NULL to Reduce. One larger (16411-int) SUM Allreduce.
 *  - MINLOC / MAXLOC with MPI_2INT and MPI_DOUBLE_INT (ties resolved to the
 *    lowest index), Allreduce and Reduce.
 *  - MPI_LONG_DOUBLE with values apart by less than a double resolves:
 *    SUM, PROD, MIN, MAX, and MAXLOC / MINLOC on MPI_LONG_DOUBLE_INT; PROD
 *    of Gaussian integers as MPI_C_LONG_DOUBLE_COMPLEX, MPI_C_DOUBLE_COMPLEX
 *    and MPI_C_FLOAT_COMPLEX, SUM as MPI_DOUBLE_COMPLEX, MPI_COMPLEX and
 *    MPI_C_LONG_DOUBLE_COMPLEX (exact values); LAND on MPI_LONG_DOUBLE and
 *    MAX on a complex type are MPI_ERR_OP. Op_commutative accepts
 *    MPI_REPLACE and MPI_NO_OP (strict: both not commutative).
 *  - Gather, Scatter, Allgather, Alltoall, each plain and with MPI_IN_PLACE
 *    (at the root for Gather/Scatter).
 *  - Op_create: a non-commutative user op (2x2 matrix product mod 65521 on a
 *    contiguous type of 4 ints) must be applied in rank order by Reduce and
 *    Allreduce; a commutative user op (max of absolute values);
 *    Op_commutative for user and predefined ops; Op_free gives MPI_OP_NULL.
 */
#include "check.h"

#define COUNT 17

static int rank, size;

enum { K_ARITH, K_LOGICAL, K_BITWISE };
static struct {
    MPI_Op op;
    const char *name;
    int kind;
} ops[10];

static void init_ops(void)
{
    int i = 0;
#define OP(o, k)          \
    ops[i].op = o;        \
    ops[i].name = #o;     \
    ops[i].kind = k;      \
    i++
    OP(MPI_SUM, K_ARITH);
    OP(MPI_PROD, K_ARITH);
    OP(MPI_MIN, K_ARITH);
    OP(MPI_MAX, K_ARITH);
    OP(MPI_LAND, K_LOGICAL);
    OP(MPI_LOR, K_LOGICAL);
    OP(MPI_LXOR, K_LOGICAL);
    OP(MPI_BAND, K_BITWISE);
    OP(MPI_BOR, K_BITWISE);
    OP(MPI_BXOR, K_BITWISE);
#undef OP
}

/* Contribution of rank r to element i for op index o, as unsigned 64-bit
 * bits (for the bitwise ops) or a small integer. */
static long long contrib(int r, int i, int o, int is_ll, int is_signed)
{
    long long base = ((r * 7 + i * 3 + o) % 5) + 1; /* 1..5 */
    switch (ops[o].kind) {
    case K_ARITH:
        if (ops[o].op == MPI_SUM && is_ll)
            return base + (1LL << 40) * (r + 1);
        if ((ops[o].op == MPI_MIN || ops[o].op == MPI_MAX) && is_signed)
            return base - 3;
        return base;
    case K_LOGICAL:
        return ((r + i) % 3 == 0 || i % 4 == 0) ? 1 + (r % 2) : 0;
    default: {
        unsigned long long x = (unsigned long long)(r + 1) * 0x9E3779B97F4A7C15ull ^
                               (unsigned long long)(i + 1) * 0xC2B2AE3D27D4EB4Full;
        return (long long)(x >> 1);
    }
    }
}

/* One function per C type: fill, fold over ranks, run the collectives. */
#define DEFINE_REDUCE_TEST(NAME, CT, MPIT, IS_INT, IS_LL, IS_SIGNED, FMT, CAST)                  \
    static CT value_##NAME(int r, int i, int o)                                                \
    {                                                                                          \
        return (CT)contrib(r, i, o, IS_LL, IS_SIGNED);                                         \
    }                                                                                          \
    static CT fold_##NAME(MPI_Op op, CT a, CT b)                                               \
    {                                                                                          \
        if (op == MPI_SUM)                                                                     \
            return (CT)(a + b);                                                                \
        if (op == MPI_PROD)                                                                    \
            return (CT)(a * b);                                                                \
        if (op == MPI_MIN)                                                                     \
            return a < b ? a : b;                                                              \
        if (op == MPI_MAX)                                                                     \
            return a > b ? a : b;                                                              \
        return fold_int_##NAME(op, a, b);                                                      \
    }                                                                                          \
    static void reduce_test_##NAME(void)                                                       \
    {                                                                                          \
        CT sb[COUNT], rb[COUNT], expect[COUNT];                                                \
        int o, i, r, nops = IS_INT ? 10 : 4;                                                   \
        for (o = 0; o < nops; o++) {                                                           \
            MPI_Op op = ops[o].op;                                                             \
            int root = o % size, inplace = (o + (IS_LL)) % 2;                                  \
            for (i = 0; i < COUNT; i++) {                                                      \
                expect[i] = value_##NAME(0, i, o);                                             \
                for (r = 1; r < size; r++)                                                     \
                    expect[i] = fold_##NAME(op, expect[i], value_##NAME(r, i, o));             \
                sb[i] = value_##NAME(rank, i, o);                                              \
                rb[i] = (CT)99;                                                                \
            }                                                                                  \
            /* Allreduce */                                                                    \
            if (inplace) {                                                                     \
                memcpy(rb, sb, sizeof sb);                                                     \
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, rb, COUNT, MPIT, op, MPI_COMM_WORLD));   \
            } else {                                                                           \
                MPI_CHECK(MPI_Allreduce(sb, rb, COUNT, MPIT, op, MPI_COMM_WORLD));             \
            }                                                                                  \
            for (i = 0; i < COUNT; i++)                                                        \
                CHECK(rb[i] == expect[i], "Allreduce%s %s %s [%d] = " FMT ", expected " FMT,   \
                      inplace ? " (in place)" : "", #MPIT, ops[o].name, i, CAST rb[i],         \
                      CAST expect[i]);                                                         \
            for (i = 0; i < COUNT; i++)                                                        \
                CHECK(sb[i] == value_##NAME(rank, i, o), "Allreduce changed its send buffer"); \
            /* Reduce to root */                                                               \
            for (i = 0; i < COUNT; i++)                                                        \
                rb[i] = (CT)99;                                                                \
            if (rank == root && inplace) {                                                     \
                memcpy(rb, sb, sizeof sb);                                                     \
                MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, rb, COUNT, MPIT, op, root, MPI_COMM_WORLD)); \
            } else {                                                                           \
                MPI_CHECK(MPI_Reduce(sb, rank == root ? (void *)rb : NULL, COUNT, MPIT, op,    \
                                     root, MPI_COMM_WORLD));                                   \
            }                                                                                  \
            if (rank == root)                                                                  \
                for (i = 0; i < COUNT; i++)                                                    \
                    CHECK(rb[i] == expect[i], "Reduce%s %s %s root %d [%d] = " FMT             \
                          ", expected " FMT, inplace ? " (in place)" : "", #MPIT,              \
                          ops[o].name, root, i, CAST rb[i], CAST expect[i]);                   \
            else                                                                               \
                for (i = 0; i < COUNT; i++)                                                    \
                    CHECK(rb[i] == (CT)99, "Reduce wrote a non-root's buffer");                \
        }                                                                                      \
    }

#define DEFINE_FOLD_INT(NAME, CT)                                                              \
    static CT fold_int_##NAME(MPI_Op op, CT a, CT b)                                           \
    {                                                                                          \
        if (op == MPI_LAND)                                                                    \
            return (CT)(a && b);                                                               \
        if (op == MPI_LOR)                                                                     \
            return (CT)(a || b);                                                               \
        if (op == MPI_LXOR)                                                                    \
            return (CT)(!a != !b);                                                             \
        if (op == MPI_BAND)                                                                    \
            return (CT)(a & b);                                                                \
        if (op == MPI_BOR)                                                                     \
            return (CT)(a | b);                                                                \
        if (op == MPI_BXOR)                                                                    \
            return (CT)(a ^ b);                                                                \
        CHECK(0, "unknown op");                                                                \
        return 0;                                                                              \
    }

DEFINE_FOLD_INT(int, int)
DEFINE_FOLD_INT(ll, long long)
DEFINE_FOLD_INT(uc, unsigned char)
static double fold_int_dbl(MPI_Op op, double a, double b)
{
    (void)op;
    (void)a;
    (void)b;
    CHECK(0, "logical/bitwise op on double");
    return 0;
}

DEFINE_REDUCE_TEST(int, int, MPI_INT, 1, 0, 1, "%d", (int))
DEFINE_REDUCE_TEST(ll, long long, MPI_LONG_LONG, 1, 1, 1, "%lld", (long long))
DEFINE_REDUCE_TEST(uc, unsigned char, MPI_UNSIGNED_CHAR, 1, 0, 0, "%u", (unsigned))
DEFINE_REDUCE_TEST(dbl, double, MPI_DOUBLE, 0, 0, 1, "%g", (double))

static void big_allreduce(void)
{
    enum { N = 16411 }; /* 64 KiB: past the short-message algorithms */
    int *sb = malloc(N * sizeof(int)), *rb = malloc(N * sizeof(int)), i;
    long long base = (long long)size * (size - 1) / 2;
    for (i = 0; i < N; i++)
        sb[i] = rank + (i % 1000);
    MPI_CHECK(MPI_Allreduce(sb, rb, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (i = 0; i < N; i++)
        CHECK(rb[i] == base + (long long)size * (i % 1000), "large Allreduce [%d] = %d", i, rb[i]);
    free(sb);
    free(rb);
}

static void loc_ops(void)
{
    struct {
        int v, i;
    } a[COUNT], ra[COUNT];
    struct {
        double v;
        int i;
    } d[COUNT], rd[COUNT];
    int k, r, pass;

    for (pass = 0; pass < 2; pass++) {
        MPI_Op op = pass ? MPI_MAXLOC : MPI_MINLOC;
        int root = (pass + 1) % size;
        for (k = 0; k < COUNT; k++) {
            a[k].v = (rank * 5 + k * 3) % 4; /* many ties */
            a[k].i = rank;
            d[k].v = ((rank * 3 + k) % 4) * 0.5 - 1.0;
            d[k].i = rank;
        }
        MPI_CHECK(MPI_Allreduce(a, ra, COUNT, MPI_2INT, op, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Reduce(d, rd, COUNT, MPI_DOUBLE_INT, op, root, MPI_COMM_WORLD));
        for (k = 0; k < COUNT; k++) {
            int bv = (0 * 5 + k * 3) % 4, bi = 0;
            double dv = ((0 * 3 + k) % 4) * 0.5 - 1.0;
            int di = 0;
            for (r = 1; r < size; r++) {
                int v = (r * 5 + k * 3) % 4;
                double w = ((r * 3 + k) % 4) * 0.5 - 1.0;
                if (pass ? v > bv : v < bv) {
                    bv = v;
                    bi = r;
                }
                if (pass ? w > dv : w < dv) {
                    dv = w;
                    di = r;
                }
            }
            CHECK(ra[k].v == bv && ra[k].i == bi, "%s MPI_2INT [%d] = (%d,%d), expected (%d,%d)",
                  pass ? "MAXLOC" : "MINLOC", k, ra[k].v, ra[k].i, bv, bi);
            if (rank == root)
                CHECK(rd[k].v == dv && rd[k].i == di,
                      "%s MPI_DOUBLE_INT [%d] = (%g,%d), expected (%g,%d)",
                      pass ? "MAXLOC" : "MINLOC", k, rd[k].v, rd[k].i, dv, di);
        }
    }
}

static void bcasts(void)
{
    int one = rank == 0 ? 12345 : -1, i;
    double *dv = malloc(1000 * sizeof(double));
    unsigned char *bv = malloc(100000);
    int r1 = size - 1, r2 = 1 % size;

    MPI_CHECK(MPI_Bcast(&one, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(one == 12345, "Bcast int from 0: %d", one);
    for (i = 0; i < 1000; i++)
        dv[i] = rank == r1 ? i * 0.25 : -1;
    MPI_CHECK(MPI_Bcast(dv, 1000, MPI_DOUBLE, r1, MPI_COMM_WORLD));
    for (i = 0; i < 1000; i++)
        CHECK(dv[i] == i * 0.25, "Bcast doubles from %d: [%d] = %g", r1, i, dv[i]);
    for (i = 0; i < 100000; i++)
        bv[i] = rank == r2 ? (unsigned char)(i * 7 + 3) : 0;
    MPI_CHECK(MPI_Bcast(bv, 100000, MPI_BYTE, r2, MPI_COMM_WORLD));
    for (i = 0; i < 100000; i++)
        CHECK(bv[i] == (unsigned char)(i * 7 + 3), "Bcast bytes from %d: [%d] = %u", r2, i, bv[i]);
    free(dv);
    free(bv);
}

static int gval(int r, int j)
{
    return r * 100 + j;
}

static void gathers(void)
{
    int *all = malloc((size_t)size * 3 * sizeof(int)), mine[3], i, j, root;
    int *a2a_s = malloc((size_t)size * 2 * sizeof(int)), *a2a_r = malloc((size_t)size * 2 * sizeof(int));

    for (j = 0; j < 3; j++)
        mine[j] = gval(rank, j);

    /* Gather to the last rank */
    root = size - 1;
    for (i = 0; i < size * 3; i++)
        all[i] = -1;
    MPI_CHECK(MPI_Gather(mine, 3, MPI_INT, all, 3, MPI_INT, root, MPI_COMM_WORLD));
    if (rank == root)
        for (i = 0; i < size; i++)
            for (j = 0; j < 3; j++)
                CHECK(all[i * 3 + j] == gval(i, j), "Gather [%d][%d] = %d", i, j, all[i * 3 + j]);
    /* Gather in place at rank 0 */
    root = 0;
    for (i = 0; i < size * 3; i++)
        all[i] = i < 3 ? gval(0, i) : -1;
    if (rank == root)
        MPI_CHECK(MPI_Gather(MPI_IN_PLACE, 3, MPI_INT, all, 3, MPI_INT, root, MPI_COMM_WORLD));
    else
        MPI_CHECK(MPI_Gather(mine, 3, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD));
    if (rank == root)
        for (i = 0; i < size; i++)
            for (j = 0; j < 3; j++)
                CHECK(all[i * 3 + j] == gval(i, j), "Gather in place [%d][%d] = %d", i, j,
                      all[i * 3 + j]);

    /* Scatter from rank 1 */
    root = 1;
    for (i = 0; i < size; i++)
        for (j = 0; j < 3; j++)
            all[i * 3 + j] = rank == root ? gval(i, j) + 7 : -1;
    mine[0] = mine[1] = mine[2] = -1;
    MPI_CHECK(MPI_Scatter(all, 3, MPI_INT, mine, 3, MPI_INT, root, MPI_COMM_WORLD));
    for (j = 0; j < 3; j++)
        CHECK(mine[j] == gval(rank, j) + 7, "Scatter [%d] = %d", j, mine[j]);
    /* Scatter in place at rank 0: its own block stays in the send buffer */
    root = 0;
    for (i = 0; i < size; i++)
        for (j = 0; j < 3; j++)
            all[i * 3 + j] = rank == root ? gval(i, j) + 9 : -1;
    mine[0] = mine[1] = mine[2] = -1;
    if (rank == root) {
        MPI_CHECK(MPI_Scatter(all, 3, MPI_INT, MPI_IN_PLACE, 3, MPI_INT, root, MPI_COMM_WORLD));
        for (j = 0; j < 3; j++)
            CHECK(all[j] == gval(0, j) + 9, "Scatter in place changed the root's block");
    } else {
        MPI_CHECK(MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, mine, 3, MPI_INT, root, MPI_COMM_WORLD));
        for (j = 0; j < 3; j++)
            CHECK(mine[j] == gval(rank, j) + 9, "Scatter (in-place root) [%d] = %d", j, mine[j]);
    }

    /* Allgather, plain and in place */
    for (j = 0; j < 3; j++)
        mine[j] = gval(rank, j);
    for (i = 0; i < size * 3; i++)
        all[i] = -1;
    MPI_CHECK(MPI_Allgather(mine, 3, MPI_INT, all, 3, MPI_INT, MPI_COMM_WORLD));
    for (i = 0; i < size; i++)
        for (j = 0; j < 3; j++)
            CHECK(all[i * 3 + j] == gval(i, j), "Allgather [%d][%d] = %d", i, j, all[i * 3 + j]);
    for (i = 0; i < size * 3; i++)
        all[i] = (i / 3 == rank) ? gval(rank, i % 3) + 1 : -1;
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 3, MPI_INT, MPI_COMM_WORLD));
    for (i = 0; i < size; i++)
        for (j = 0; j < 3; j++)
            CHECK(all[i * 3 + j] == gval(i, j) + 1, "Allgather in place [%d][%d] = %d", i, j,
                  all[i * 3 + j]);

    /* Alltoall: block for rank p from rank r holds r*1000 + p*10 + j */
    for (i = 0; i < size; i++)
        for (j = 0; j < 2; j++) {
            a2a_s[i * 2 + j] = rank * 1000 + i * 10 + j;
            a2a_r[i * 2 + j] = -1;
        }
    MPI_CHECK(MPI_Alltoall(a2a_s, 2, MPI_INT, a2a_r, 2, MPI_INT, MPI_COMM_WORLD));
    for (i = 0; i < size; i++)
        for (j = 0; j < 2; j++)
            CHECK(a2a_r[i * 2 + j] == i * 1000 + rank * 10 + j, "Alltoall from %d [%d] = %d", i, j,
                  a2a_r[i * 2 + j]);
    MPI_CHECK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a2a_s, 2, MPI_INT, MPI_COMM_WORLD));
    for (i = 0; i < size; i++)
        for (j = 0; j < 2; j++)
            CHECK(a2a_s[i * 2 + j] == i * 1000 + rank * 10 + j,
                  "Alltoall in place from %d [%d] = %d", i, j, a2a_s[i * 2 + j]);
    free(all);
    free(a2a_s);
    free(a2a_r);
}

/* ---- user-defined ops ---- */

#define MODP 65521
static MPI_Datatype mat_type;

static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout, k;
    CHECK(*dt == mat_type, "user op called with a different datatype");
    for (k = 0; k < *len; k++, a += 4, b += 4) {
        /* b = a x b (a comes from the lower ranks) */
        long long c0 = ((long long)a[0] * b[0] + (long long)a[1] * b[2]) % MODP;
        long long c1 = ((long long)a[0] * b[1] + (long long)a[1] * b[3]) % MODP;
        long long c2 = ((long long)a[2] * b[0] + (long long)a[3] * b[2]) % MODP;
        long long c3 = ((long long)a[2] * b[1] + (long long)a[3] * b[3]) % MODP;
        b[0] = (int)c0;
        b[1] = (int)c1;
        b[2] = (int)c2;
        b[3] = (int)c3;
    }
}

static void absmax(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout, k;
    CHECK(*dt == MPI_INT, "absmax called with a datatype other than MPI_INT");
    for (k = 0; k < *len; k++) {
        int x = a[k] < 0 ? -a[k] : a[k], y = b[k] < 0 ? -b[k] : b[k];
        b[k] = x > y ? x : y;
    }
}

static void mat_of(int r, int k, int *m)
{
    m[0] = r + 1 + k;
    m[1] = 1;
    m[2] = 1;
    m[3] = k;
}

static void user_ops(void)
{
    MPI_Op op, op2;
    int commute = -1, mats[3][4], res[3][4], expect[3][4], k, r, tmp[4], one = 1;
    int v[COUNT], out[COUNT], i;

    MPI_CHECK(MPI_Type_contiguous(4, MPI_INT, &mat_type));
    MPI_CHECK(MPI_Type_commit(&mat_type));
    MPI_CHECK(MPI_Op_create(matmul, 0, &op));
    MPI_CHECK(MPI_Op_commutative(op, &commute));
    CHECK(commute == 0, "Op_commutative of a non-commutative op = %d", commute);
    MPI_CHECK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute == 1, "Op_commutative(MPI_SUM) = %d", commute);

    for (k = 0; k < 3; k++) {
        mat_of(rank, k, mats[k]);
        mat_of(0, k, expect[k]);
        for (r = 1; r < size; r++) {
            mat_of(r, k, tmp);
            matmul(expect[k], tmp, &one, &mat_type);
            memcpy(expect[k], tmp, sizeof tmp);
        }
    }
    memset(res, 0, sizeof res);
    MPI_CHECK(MPI_Allreduce(mats, res, 3, mat_type, op, MPI_COMM_WORLD));
    for (k = 0; k < 3; k++)
        for (i = 0; i < 4; i++)
            CHECK(res[k][i] == expect[k][i],
                  "non-commutative Allreduce: matrix %d [%d] = %d, expected %d", k, i, res[k][i],
                  expect[k][i]);
    memset(res, 0, sizeof res);
    MPI_CHECK(MPI_Reduce(mats, res, 3, mat_type, op, size - 1, MPI_COMM_WORLD));
    if (rank == size - 1)
        for (k = 0; k < 3; k++)
            for (i = 0; i < 4; i++)
                CHECK(res[k][i] == expect[k][i],
                      "non-commutative Reduce: matrix %d [%d] = %d, expected %d", k, i,
                      res[k][i], expect[k][i]);
    MPI_CHECK(MPI_Op_free(&op));
    CHECK(op == MPI_OP_NULL, "Op_free did not set MPI_OP_NULL");

    MPI_CHECK(MPI_Op_create(absmax, 1, &op2));
    MPI_CHECK(MPI_Op_commutative(op2, &commute));
    CHECK(commute == 1, "Op_commutative of a commutative op = %d", commute);
    for (i = 0; i < COUNT; i++)
        v[i] = (rank % 2 ? -1 : 1) * (rank * 3 + i);
    MPI_CHECK(MPI_Allreduce(v, out, COUNT, MPI_INT, op2, MPI_COMM_WORLD));
    for (i = 0; i < COUNT; i++)
        CHECK(out[i] == (size - 1) * 3 + i, "absmax [%d] = %d", i, out[i]);
    MPI_CHECK(MPI_Op_free(&op2));
    MPI_CHECK(MPI_Type_free(&mat_type));
}

/* Rank 0 enters the barrier 150 ms late; everybody else must wait at least
 * 75 ms in it. A rank that is descheduled for a long time between two
 * barriers can make this look wrong on a loaded machine, so a failure is
 * retried twice before it counts. */
static void barrier_waits(void)
{
    int attempt, ok = 0, all_ok = 0;
    double waited = 0;
    for (attempt = 0; attempt < 3 && !all_ok; attempt++) {
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 0) {
            sleep_ms(150);
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            ok = 1;
        } else {
            double t0 = MPI_Wtime();
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            waited = MPI_Wtime() - t0;
            ok = waited >= 0.075;
        }
        MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    }
    CHECK(ok, "left the barrier after %.3f s, before rank 0 arrived (3 attempts)", waited);
    CHECK(all_ok, "another rank left the barrier before rank 0 arrived (3 attempts)");
}

/* long double beyond double's precision, and the complex types: every
 * value below is exact in its type, so any order of the reduction gives
 * the same bits */
struct lcx {
    long double re, im;
};
struct dcx {
    double re, im;
};
struct fcx {
    float re, im;
};

static long double lval(int r) /* 1 + r 2^-62: all 1 as doubles */
{
    return 1.0L + (long double)r * 0x1p-62L;
}

static void wide_and_complex(void)
{
    long double ld[3], rl[3], ex[3];
    struct {
        long double v;
        int i;
    } li, rli;
    struct lcx lc, rlc, elc;
    struct dcx dc[2], rdc[2], edc;
    struct fcx fc[2], rfc[2], efc;
    int r, rc, cls, commute = -1;

    /* SUM of 1 + r 2^-62, PROD of (1 + 2^-60) 2^(size-1), and of r + 1 */
    ld[0] = lval(rank);
    ld[1] = rank ? 2.0L : 1.0L + 0x1p-60L;
    ld[2] = rank + 1;
    MPI_CHECK(MPI_Allreduce(ld, rl, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    for (ex[0] = 0, r = 0; r < size; r++)
        ex[0] += lval(r);
    CHECK(rl[0] == ex[0] && rl[0] != (long double)(double)rl[0],
          "SUM MPI_LONG_DOUBLE = %.21Lg, expected %.21Lg", rl[0], ex[0]);
    MPI_CHECK(MPI_Allreduce(ld + 1, rl + 1, 2, MPI_LONG_DOUBLE, MPI_PROD, MPI_COMM_WORLD));
    ex[1] = 1.0L + 0x1p-60L;
    for (ex[2] = 1, r = 1; r < size; r++) {
        ex[1] *= 2;
        ex[2] *= r + 1;
    }
    CHECK(rl[1] == ex[1] && rl[2] == ex[2], "PROD MPI_LONG_DOUBLE = %.21Lg %.21Lg, expected %.21Lg %.21Lg",
          rl[1], rl[2], ex[1], ex[2]);
    MPI_CHECK(MPI_Allreduce(ld, rl, 1, MPI_LONG_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK(rl[0] == lval(size - 1), "MAX MPI_LONG_DOUBLE = %.21Lg", rl[0]);
    MPI_CHECK(MPI_Reduce(ld, rl, 1, MPI_LONG_DOUBLE, MPI_MIN, size - 1, MPI_COMM_WORLD));
    if (rank == size - 1)
        CHECK(rl[0] == lval(0), "MIN MPI_LONG_DOUBLE = %.21Lg", rl[0]);
    /* MAXLOC: values tie in pairs of ranks; the lowest index wins */
    li.v = lval(rank / 2);
    li.i = rank;
    MPI_CHECK(MPI_Allreduce(&li, &rli, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(rli.v == lval((size - 1) / 2) && rli.i == (size - 1) / 2 * 2,
          "MAXLOC MPI_LONG_DOUBLE_INT = (%.21Lg, %d)", rli.v, rli.i);
    MPI_CHECK(MPI_Allreduce(&li, &rli, 1, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(rli.v == lval(0) && rli.i == 0, "MINLOC MPI_LONG_DOUBLE_INT = (%.21Lg, %d)", rli.v,
          rli.i);

    /* complex: (1 + r % 2) + (r % 3 - 1) i, products of Gaussian integers */
    lc.re = 1 + rank % 2;
    lc.im = rank % 3 - 1;
    elc.re = 1;
    elc.im = 0;
    for (r = 0; r < size; r++) {
        long double re = 1 + r % 2, im = r % 3 - 1, t = elc.re * re - elc.im * im;
        elc.im = elc.re * im + elc.im * re;
        elc.re = t;
    }
    MPI_CHECK(MPI_Allreduce(&lc, &rlc, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    CHECK(rlc.re == elc.re && rlc.im == elc.im, "PROD MPI_C_LONG_DOUBLE_COMPLEX = %Lg%+Lgi, expected %Lg%+Lgi",
          rlc.re, rlc.im, elc.re, elc.im);
    for (r = 0; r < 2; r++) {
        dc[r].re = 1 + rank % 2;
        dc[r].im = rank % 3 - 1;
        fc[r].re = 1 + rank % 2;
        fc[r].im = rank % 3 - 1;
    }
    MPI_CHECK(MPI_Allreduce(dc, rdc, 2, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(fc, rfc, 2, MPI_C_FLOAT_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    for (r = 0; r < 2; r++)
        CHECK(rdc[r].re == (double)elc.re && rdc[r].im == (double)elc.im &&
                  rfc[r].re == (float)elc.re && rfc[r].im == (float)elc.im,
              "PROD MPI_C_DOUBLE_COMPLEX / MPI_C_FLOAT_COMPLEX [%d] = %g%+gi / %g%+gi", r,
              rdc[r].re, rdc[r].im, (double)rfc[r].re, (double)rfc[r].im);
    edc.re = edc.im = 0;
    for (r = 0; r < size; r++) {
        edc.re += 1 + r % 2;
        edc.im += r % 3 - 1;
    }
    efc.re = (float)edc.re;
    efc.im = (float)edc.im;
    MPI_CHECK(MPI_Allreduce(dc, rdc, 1, MPI_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Reduce(fc, rfc, 1, MPI_COMPLEX, MPI_SUM, 0, MPI_COMM_WORLD));
    CHECK(rdc[0].re == edc.re && rdc[0].im == edc.im, "SUM MPI_DOUBLE_COMPLEX = %g%+gi",
          rdc[0].re, rdc[0].im);
    if (rank == 0)
        CHECK(rfc[0].re == efc.re && rfc[0].im == efc.im, "SUM MPI_COMPLEX = %g%+gi",
              (double)rfc[0].re, (double)rfc[0].im);
    MPI_CHECK(MPI_Allreduce(&lc, &rlc, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    CHECK(rlc.re == edc.re && rlc.im == edc.im, "SUM MPI_C_LONG_DOUBLE_COMPLEX = %Lg%+Lgi",
          rlc.re, rlc.im);

    /* operations that do not apply to them */
    rc = MPI_Allreduce(ld, rl, 1, MPI_LONG_DOUBLE, MPI_LAND, MPI_COMM_WORLD);
    cls = check_class(rc);
    CHECK(cls == MPI_ERR_OP, "LAND on MPI_LONG_DOUBLE: class %d", cls);
    rc = MPI_Allreduce(dc, rdc, 1, MPI_C_DOUBLE_COMPLEX, MPI_MAX, MPI_COMM_WORLD);
    cls = check_class(rc);
    CHECK(cls == MPI_ERR_OP, "MAX on MPI_C_DOUBLE_COMPLEX: class %d", cls);

    /* MPI_REPLACE and MPI_NO_OP are operations (strict: not commutative,
     * as in MPICH; Open MPI says they are) */
    MPI_CHECK(MPI_Op_commutative(MPI_REPLACE, &commute));
    if (strict_mode())
        CHECK(commute == 0, "Op_commutative(MPI_REPLACE) = %d", commute);
    MPI_CHECK(MPI_Op_commutative(MPI_NO_OP, &commute));
    if (strict_mode())
        CHECK(commute == 0, "Op_commutative(MPI_NO_OP) = %d", commute);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    init_ops();

    barrier_waits();
    bcasts();
    reduce_test_int();
    reduce_test_ll();
    reduce_test_uc();
    reduce_test_dbl();
    big_allreduce();
    loc_ops();
    wide_and_complex();
    gathers();
    user_ops();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "collectives");
    return 0;
}
