/*
 * datatypes_ext.c -- the rest of the datatype chapter (min ranks: 2).
 *
 * - Pair types against the C structs they stand for: MPI_Type_size is the
 *   data (value + int), the extent is sizeof the struct (MPI_LONG_DOUBLE_INT:
 *   size 20, extent 32), true extent, Get_elements 2 per pair; an array of
 *   struct { long double; int } sent with MPI_LONG_DOUBLE_INT arrives whole.
 * - Alignment of long double and complex members in MPI_Type_create_struct
 *   (extent = sizeof the C struct); a complex is one basic element.
 * - Type_get_envelope / Type_get_contents exact (every argument) for every
 *   combiner: contiguous, vector of vectors (two levels), hvector, indexed,
 *   hindexed, indexed_block, hindexed_block, struct, subarray, darray,
 *   resized, dup, f90 types, and the _c forms (Type_get_envelope_c /
 *   Type_get_contents_c of vector_c, darray_c, resized_c).
 * - MPI_Type_create_darray: for every rank of several grids (block, cyclic,
 *   cyclic(k), none; C and Fortran order; 1 to 3 dimensions), the packed
 *   elements are exactly the ones the rank owns, in storage order, every
 *   element owned by exactly one rank; lb 0 and extent prod(gsizes).
 * - MPI_Type_create_f90_integer/real/complex: sizes, the same handle for the
 *   same arguments, COMBINER_F90_* with p and r; MPI_Type_match_size;
 *   MPI_Type_get_value_index.
 * - MPI_Pack_external / MPI_Unpack_external / MPI_Pack_external_size
 *   ("external32"): exact big-endian byte images (int, short, long as 4
 *   bytes, double, float complex, long double as IEEE quad), a round trip of
 *   a derived type with positions advancing, sizes.
 * - MPI_Get_elements / Get_count on partial receives of types with complex,
 *   long double and pair members.
 *
 * Strict mode (oxmpi-specific, see README.md): Type_free of an f90 type,
 * Match_size of an unsupported size, a darray dimension not distributed
 * over a grid dimension other than 1, a long outside 32 bits, an unknown
 * datarep and a too small external32 buffer give their error classes;
 * long double's external32 image is IEEE quadruple precision.
 */
#include "check.h"

#include <complex.h>
#include <stddef.h>

static int rank, size;

static void check_sizes(MPI_Datatype t, MPI_Count size_, MPI_Aint lb, MPI_Aint extent,
                        MPI_Aint tlb, MPI_Aint textent, const char *what)
{
    int s;
    MPI_Aint l, e, tl, te;
    MPI_CHECK(MPI_Type_size(t, &s));
    MPI_CHECK(MPI_Type_get_extent(t, &l, &e));
    MPI_CHECK(MPI_Type_get_true_extent(t, &tl, &te));
    CHECK(s == size_ && l == lb && e == extent && tl == tlb && te == textent,
          "%s: size %d lb %ld extent %ld true %ld/%ld, expected %lld %ld %ld %ld/%ld", what, s,
          (long)l, (long)e, (long)tl, (long)te, (long long)size_, (long)lb, (long)extent,
          (long)tlb, (long)textent);
}

/* ------------------------------------------------------------------ */
/* Pair types and C struct layouts.                                    */

struct ldi { long double v; int i; };
struct di { double v; int i; };
struct li { long v; int i; };
struct si { short v; int i; };
struct fi { float v; int i; };

static void pairs(void)
{
    check_sizes(MPI_LONG_DOUBLE_INT, sizeof(long double) + sizeof(int), 0, sizeof(struct ldi), 0,
                offsetof(struct ldi, i) + sizeof(int), "MPI_LONG_DOUBLE_INT");
    check_sizes(MPI_DOUBLE_INT, sizeof(double) + sizeof(int), 0, sizeof(struct di), 0,
                offsetof(struct di, i) + sizeof(int), "MPI_DOUBLE_INT");
    check_sizes(MPI_LONG_INT, sizeof(long) + sizeof(int), 0, sizeof(struct li), 0,
                offsetof(struct li, i) + sizeof(int), "MPI_LONG_INT");
    check_sizes(MPI_SHORT_INT, sizeof(short) + sizeof(int), 0, sizeof(struct si), 0,
                offsetof(struct si, i) + sizeof(int), "MPI_SHORT_INT");
    check_sizes(MPI_FLOAT_INT, 8, 0, sizeof(struct fi), 0, 8, "MPI_FLOAT_INT");
    check_sizes(MPI_2INT, 8, 0, 8, 0, 8, "MPI_2INT");
    check_sizes(MPI_LONG_DOUBLE, sizeof(long double), 0, sizeof(long double), 0,
                sizeof(long double), "MPI_LONG_DOUBLE");
    check_sizes(MPI_C_DOUBLE_COMPLEX, 16, 0, 16, 0, 16, "MPI_C_DOUBLE_COMPLEX");

    /* An array of struct { long double; int } between ranks 0 and 1: the
     * stride is the struct's, the padding is not sent. */
    enum { N = 5 };
    struct ldi a[N];
    MPI_Status st;
    int n;
    if (rank == 0) {
        for (int k = 0; k < N; k++) {
            memset(&a[k], 0xA5, sizeof a[k]);
            a[k].v = (long double)k / 3.0L + 1e-30L * k;
            a[k].i = 100 + k;
        }
        MPI_CHECK(MPI_Send(a, N, MPI_LONG_DOUBLE_INT, 1, 7, MPI_COMM_WORLD));
    } else if (rank == 1) {
        memset(a, 0, sizeof a);
        MPI_CHECK(MPI_Recv(a, N, MPI_LONG_DOUBLE_INT, 0, 7, MPI_COMM_WORLD, &st));
        for (int k = 0; k < N; k++) {
            long double want = (long double)k / 3.0L + 1e-30L * k;
            CHECK(a[k].v == want && a[k].i == 100 + k, "LONG_DOUBLE_INT element %d: %Lg %d", k,
                  a[k].v, a[k].i);
        }
        MPI_CHECK(MPI_Get_count(&st, MPI_LONG_DOUBLE_INT, &n));
        CHECK(n == N, "LONG_DOUBLE_INT Get_count %d", n);
        /* Strict: Open MPI 5 counts a pair as one element. */
        MPI_CHECK(MPI_Get_elements(&st, MPI_LONG_DOUBLE_INT, &n));
        CHECK(n == 2 * N || !strict_mode(), "LONG_DOUBLE_INT Get_elements %d (two per pair)", n);
    }
}

/* Struct members aligned as C aligns them. */
struct cld { char c; long double v; char d; };
struct cz { char c; double _Complex z; char d; };

static void struct_alignment(void)
{
    int bl[3] = {1, 1, 1};
    MPI_Aint d1[3] = {offsetof(struct cld, c), offsetof(struct cld, v), offsetof(struct cld, d)};
    MPI_Datatype ty1[3] = {MPI_CHAR, MPI_LONG_DOUBLE, MPI_CHAR};
    MPI_Datatype t;
    MPI_CHECK(MPI_Type_create_struct(3, bl, d1, ty1, &t));
    check_sizes(t, 2 + sizeof(long double), 0, sizeof(struct cld), 0,
                offsetof(struct cld, d) + 1, "struct {char; long double; char}");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_Aint d2[3] = {offsetof(struct cz, c), offsetof(struct cz, z), offsetof(struct cz, d)};
    MPI_Datatype ty2[3] = {MPI_CHAR, MPI_C_DOUBLE_COMPLEX, MPI_CHAR};
    MPI_CHECK(MPI_Type_create_struct(3, bl, d2, ty2, &t));
    check_sizes(t, 18, 0, sizeof(struct cz), 0, offsetof(struct cz, d) + 1,
                "struct {char; double complex; char}");
    MPI_CHECK(MPI_Type_commit(&t));

    /* Three of them: 9 basic elements (the complex counts once). */
    struct cz v[3];
    MPI_Status st;
    int n;
    if (rank == 0) {
        for (int k = 0; k < 3; k++) {
            v[k].c = (char)k;
            v[k].z = k + 2.0 * I;
            v[k].d = (char)(10 + k);
        }
        MPI_CHECK(MPI_Send(v, 3, t, 1, 8, MPI_COMM_WORLD));
    } else if (rank == 1) {
        memset(v, 0, sizeof v);
        MPI_CHECK(MPI_Recv(v, 3, t, 0, 8, MPI_COMM_WORLD, &st));
        for (int k = 0; k < 3; k++)
            CHECK(v[k].c == k && creal(v[k].z) == k && cimag(v[k].z) == 2.0 && v[k].d == 10 + k,
                  "struct with complex, element %d", k);
        MPI_CHECK(MPI_Get_elements(&st, t, &n));
        CHECK(n == 9, "struct with complex: Get_elements %d, expected 9", n);
    }
    MPI_CHECK(MPI_Type_free(&t));
}

/* ------------------------------------------------------------------ */
/* Exact envelopes and contents.                                        */

#define MAXC 64
struct contents {
    int ni, na, nd, comb;
    int ints[MAXC];
    MPI_Aint addrs[MAXC];
    MPI_Datatype types[MAXC];
};

/* Envelope and contents of t; derived argument types are freed. */
static struct contents get_contents(MPI_Datatype t, const char *what)
{
    struct contents c;
    memset(&c, 0, sizeof c);
    MPI_CHECK(MPI_Type_get_envelope(t, &c.ni, &c.na, &c.nd, &c.comb));
    CHECK(c.ni <= MAXC && c.na <= MAXC && c.nd <= MAXC, "%s: envelope too large", what);
    if (c.comb != MPI_COMBINER_NAMED)
        MPI_CHECK(MPI_Type_get_contents(t, c.ni, c.na, c.nd, c.ints, c.addrs, c.types));
    return c;
}

static void free_args(struct contents *c)
{
    for (int k = 0; k < c->nd; k++) {
        int ni, na, nd, comb;
        MPI_CHECK(MPI_Type_get_envelope(c->types[k], &ni, &na, &nd, &comb));
        if (comb != MPI_COMBINER_NAMED && comb != MPI_COMBINER_F90_INTEGER &&
            comb != MPI_COMBINER_F90_REAL && comb != MPI_COMBINER_F90_COMPLEX)
            MPI_CHECK(MPI_Type_free(&c->types[k]));
    }
}

static void expect(const struct contents *c, int comb, int ni, const int *ints, int na,
                   const MPI_Aint *addrs, int nd, const MPI_Datatype *types, const char *what)
{
    CHECK(c->comb == comb && c->ni == ni && c->na == na && c->nd == nd,
          "%s: combiner %d ni %d na %d nd %d, expected %d %d %d %d", what, c->comb, c->ni, c->na,
          c->nd, comb, ni, na, nd);
    for (int k = 0; k < ni; k++)
        CHECK(c->ints[k] == ints[k], "%s: integer %d is %d, expected %d", what, k, c->ints[k],
              ints[k]);
    for (int k = 0; k < na; k++)
        CHECK(c->addrs[k] == addrs[k], "%s: address %d is %ld, expected %ld", what, k,
              (long)c->addrs[k], (long)addrs[k]);
    /* A derived argument comes back as its own handle (strict: Open MPI 5
     * gives a new handle of the same type, whose combiner is compared). */
    for (int k = 0; k < nd; k++) {
        int i0, a0, d0, want, got;
        MPI_CHECK(MPI_Type_get_envelope(types[k], &i0, &a0, &d0, &want));
        MPI_CHECK(MPI_Type_get_envelope(c->types[k], &i0, &a0, &d0, &got));
        if (want == MPI_COMBINER_NAMED || strict_mode())
            CHECK(c->types[k] == types[k], "%s: datatype %d differs", what, k);
        else
            CHECK(got == want, "%s: datatype %d has combiner %d, expected %d", what, k, got, want);
    }
}

static void contents_exact(void)
{
    MPI_Datatype inner, outer, t;

    /* A vector of vectors decodes level by level. */
    MPI_CHECK(MPI_Type_vector(3, 2, 5, MPI_DOUBLE, &inner));
    MPI_CHECK(MPI_Type_vector(4, 1, 7, inner, &outer));
    struct contents c = get_contents(outer, "outer vector");
    expect(&c, MPI_COMBINER_VECTOR, 3, (int[]){4, 1, 7}, 0, NULL, 1, (MPI_Datatype[]){inner},
           "outer vector");
    struct contents c2 = get_contents(c.types[0], "inner vector");
    expect(&c2, MPI_COMBINER_VECTOR, 3, (int[]){3, 2, 5}, 0, NULL, 1,
           (MPI_Datatype[]){MPI_DOUBLE}, "inner vector");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&outer));
    /* After the outer type is gone, the inner one still decodes. */
    c2 = get_contents(inner, "inner vector, alone");
    expect(&c2, MPI_COMBINER_VECTOR, 3, (int[]){3, 2, 5}, 0, NULL, 1,
           (MPI_Datatype[]){MPI_DOUBLE}, "inner vector, alone");

    MPI_CHECK(MPI_Type_contiguous(6, inner, &t));
    c = get_contents(t, "contiguous");
    expect(&c, MPI_COMBINER_CONTIGUOUS, 1, (int[]){6}, 0, NULL, 1, (MPI_Datatype[]){inner},
           "contiguous");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_hvector(2, 3, -40, MPI_INT, &t));
    c = get_contents(t, "hvector");
    expect(&c, MPI_COMBINER_HVECTOR, 2, (int[]){2, 3}, 1, (MPI_Aint[]){-40}, 1,
           (MPI_Datatype[]){MPI_INT}, "hvector");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_indexed(3, (int[]){1, 0, 2}, (int[]){4, 9, -2}, MPI_SHORT, &t));
    c = get_contents(t, "indexed");
    expect(&c, MPI_COMBINER_INDEXED, 7, (int[]){3, 1, 0, 2, 4, 9, -2}, 0, NULL, 1,
           (MPI_Datatype[]){MPI_SHORT}, "indexed");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_hindexed(2, (int[]){2, 1}, (MPI_Aint[]){16, -8}, inner, &t));
    c = get_contents(t, "hindexed");
    expect(&c, MPI_COMBINER_HINDEXED, 3, (int[]){2, 2, 1}, 2, (MPI_Aint[]){16, -8}, 1,
           (MPI_Datatype[]){inner}, "hindexed");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_indexed_block(3, 2, (int[]){0, 5, 11}, MPI_FLOAT, &t));
    c = get_contents(t, "indexed_block");
    expect(&c, MPI_COMBINER_INDEXED_BLOCK, 5, (int[]){3, 2, 0, 5, 11}, 0, NULL, 1,
           (MPI_Datatype[]){MPI_FLOAT}, "indexed_block");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_hindexed_block(2, 4, (MPI_Aint[]){0, 100}, MPI_CHAR, &t));
    c = get_contents(t, "hindexed_block");
    expect(&c, MPI_COMBINER_HINDEXED_BLOCK, 2, (int[]){2, 4}, 2, (MPI_Aint[]){0, 100}, 1,
           (MPI_Datatype[]){MPI_CHAR}, "hindexed_block");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_struct(3, (int[]){1, 2, 3}, (MPI_Aint[]){0, 16, 48},
                                     (MPI_Datatype[]){MPI_LONG_DOUBLE, inner, MPI_LONG_DOUBLE_INT},
                                     &t));
    c = get_contents(t, "struct");
    expect(&c, MPI_COMBINER_STRUCT, 4, (int[]){3, 1, 2, 3}, 3, (MPI_Aint[]){0, 16, 48}, 3,
           (MPI_Datatype[]){MPI_LONG_DOUBLE, inner, MPI_LONG_DOUBLE_INT}, "struct");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_subarray(2, (int[]){5, 6}, (int[]){2, 3}, (int[]){1, 2},
                                       MPI_ORDER_FORTRAN, MPI_INT, &t));
    c = get_contents(t, "subarray");
    expect(&c, MPI_COMBINER_SUBARRAY, 8, (int[]){2, 5, 6, 2, 3, 1, 2, MPI_ORDER_FORTRAN}, 0,
           NULL, 1, (MPI_Datatype[]){MPI_INT}, "subarray");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_darray(6, 4, 2, (int[]){10, 9},
                                     (int[]){MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
                                     (int[]){MPI_DISTRIBUTE_DFLT_DARG, 2}, (int[]){3, 2},
                                     MPI_ORDER_C, inner, &t));
    c = get_contents(t, "darray");
    expect(&c, MPI_COMBINER_DARRAY, 12,
           (int[]){6, 4, 2, 10, 9, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC,
                   MPI_DISTRIBUTE_DFLT_DARG, 2, 3, 2, MPI_ORDER_C},
           0, NULL, 1, (MPI_Datatype[]){inner}, "darray");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_resized(inner, -8, 200, &t));
    c = get_contents(t, "resized");
    expect(&c, MPI_COMBINER_RESIZED, 0, NULL, 2, (MPI_Aint[]){-8, 200}, 1,
           (MPI_Datatype[]){inner}, "resized");
    free_args(&c);
    MPI_Datatype d;
    MPI_CHECK(MPI_Type_dup(t, &d));
    c = get_contents(d, "dup");
    expect(&c, MPI_COMBINER_DUP, 0, NULL, 0, NULL, 1, (MPI_Datatype[]){t}, "dup");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&d));
    MPI_CHECK(MPI_Type_free(&t));

#if MPI_VERSION >= 4
    /* Large-count constructors: the counts come back as MPI_Count. */
    MPI_Count nc, ni_c, na_c, nd_c;
    int comb;
    MPI_Count lc[8];
    int ints[16];
    MPI_Aint addrs[4];
    MPI_Datatype types[4];
    MPI_CHECK(MPI_Type_vector_c(5, 3, (MPI_Count)1 << 33, MPI_BYTE, &t));
    MPI_CHECK(MPI_Type_get_envelope_c(t, &ni_c, &na_c, &nc, &nd_c, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni_c == 0 && na_c == 0 && nc == 3 && nd_c == 1,
          "vector_c envelope %d %lld %lld %lld %lld", comb, (long long)ni_c, (long long)na_c,
          (long long)nc, (long long)nd_c);
    MPI_CHECK(MPI_Type_get_contents_c(t, 0, 0, 3, 1, ints, addrs, lc, types));
    CHECK(lc[0] == 5 && lc[1] == 3 && lc[2] == (MPI_Count)1 << 33 && types[0] == MPI_BYTE,
          "vector_c contents %lld %lld %lld", (long long)lc[0], (long long)lc[1],
          (long long)lc[2]);
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_darray_c(2, 1, 1, (MPI_Count[]){7}, (int[]){MPI_DISTRIBUTE_CYCLIC},
                                       (int[]){3}, (int[]){2}, MPI_ORDER_C, MPI_INT, &t));
    MPI_CHECK(MPI_Type_get_envelope_c(t, &ni_c, &na_c, &nc, &nd_c, &comb));
    CHECK(comb == MPI_COMBINER_DARRAY && ni_c == 7 && na_c == 0 && nc == 1 && nd_c == 1,
          "darray_c envelope %d %lld %lld %lld %lld", comb, (long long)ni_c, (long long)na_c,
          (long long)nc, (long long)nd_c);
    MPI_CHECK(MPI_Type_get_contents_c(t, 7, 0, 1, 1, ints, addrs, lc, types));
    const int want_ints[7] = {2, 1, 1, MPI_DISTRIBUTE_CYCLIC, 3, 2, MPI_ORDER_C};
    for (int k = 0; k < 7; k++)
        CHECK(ints[k] == want_ints[k], "darray_c integer %d is %d", k, ints[k]);
    CHECK(lc[0] == 7 && types[0] == MPI_INT, "darray_c sizes %lld", (long long)lc[0]);
    check_sizes(t, 3 * sizeof(int), 0, 7 * sizeof(int), 3 * sizeof(int), 3 * sizeof(int),
                "darray_c of 7 ints, cyclic(3) over 2, rank 1");
    MPI_CHECK(MPI_Type_free(&t));

    MPI_CHECK(MPI_Type_create_resized_c(MPI_INT, -4, 12, &t));
    MPI_CHECK(MPI_Type_get_envelope_c(t, &ni_c, &na_c, &nc, &nd_c, &comb));
    CHECK(comb == MPI_COMBINER_RESIZED && ni_c == 0 && na_c == 0 && nc == 2 && nd_c == 1,
          "resized_c envelope");
    MPI_CHECK(MPI_Type_get_contents_c(t, 0, 0, 2, 1, ints, addrs, lc, types));
    CHECK(lc[0] == -4 && lc[1] == 12 && types[0] == MPI_INT, "resized_c contents");
    MPI_CHECK(MPI_Type_free(&t));

    /* A type of the ordinary constructors through the _c queries. */
    MPI_CHECK(MPI_Type_get_envelope_c(inner, &ni_c, &na_c, &nc, &nd_c, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni_c == 3 && na_c == 0 && nc == 0 && nd_c == 1,
          "vector through get_envelope_c");
#endif
    MPI_CHECK(MPI_Type_free(&inner));
}

/* ------------------------------------------------------------------ */
/* Distributed arrays against a direct computation of ownership.        */

/* Process coordinate owning global index g of a dimension. */
static int owner(int g, int gsize, int dist, int darg, int psize)
{
    if (dist == MPI_DISTRIBUTE_NONE)
        return 0;
    if (dist == MPI_DISTRIBUTE_BLOCK) {
        int b = darg == MPI_DISTRIBUTE_DFLT_DARG ? (gsize + psize - 1) / psize : darg;
        return g / b;
    }
    int b = darg == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg;
    return (g / b) % psize;
}

static void check_darray(int nd, const int *gs, const int *di, const int *da, const int *ps,
                         int order, const char *what)
{
    int np = 1, total = 1;
    for (int k = 0; k < nd; k++) {
        np *= ps[k];
        total *= gs[k];
    }
    int *global = malloc(sizeof(int) * total);
    int *seen = calloc(total, sizeof(int));
    int *packed = malloc(sizeof(int) * total);
    CHECK(global && seen && packed, "out of memory");
    for (int k = 0; k < total; k++)
        global[k] = k;
    for (int r = 0; r < np; r++) {
        MPI_Datatype t;
        MPI_CHECK(MPI_Type_create_darray(np, r, nd, gs, di, da, ps, order, MPI_INT, &t));
        MPI_CHECK(MPI_Type_commit(&t));
        MPI_Aint lb, ext;
        MPI_CHECK(MPI_Type_get_extent(t, &lb, &ext));
        CHECK(lb == 0 && ext == (MPI_Aint)sizeof(int) * total, "%s rank %d: lb %ld extent %ld",
              what, r, (long)lb, (long)ext);
        /* Coordinates of r, row-major. */
        int coords[3], rest = r, procs = np;
        for (int k = 0; k < nd; k++) {
            procs /= ps[k];
            coords[k] = rest / procs;
            rest %= procs;
        }
        /* Expected: the owned elements in storage order. */
        int want = 0;
        int *expected = malloc(sizeof(int) * total);
        CHECK(expected != NULL, "out of memory");
        for (int lin = 0; lin < total; lin++) {
            int idx[3], rem = lin;
            if (order == MPI_ORDER_C) {
                for (int k = nd - 1; k >= 0; k--) {
                    idx[k] = rem % gs[k];
                    rem /= gs[k];
                }
            } else {
                for (int k = 0; k < nd; k++) {
                    idx[k] = rem % gs[k];
                    rem /= gs[k];
                }
            }
            int mine = 1;
            for (int k = 0; k < nd; k++)
                if (owner(idx[k], gs[k], di[k], da[k], ps[k]) != coords[k])
                    mine = 0;
            if (mine)
                expected[want++] = lin;
        }
        int sz;
        MPI_CHECK(MPI_Type_size(t, &sz));
        CHECK(sz == want * (int)sizeof(int), "%s rank %d: size %d, expected %d elements", what, r,
              sz, want);
        int pos = 0;
        MPI_CHECK(MPI_Pack(global, 1, t, packed, sizeof(int) * total, &pos, MPI_COMM_SELF));
        CHECK(pos == sz, "%s rank %d: packed %d bytes", what, r, pos);
        for (int k = 0; k < want; k++) {
            CHECK(packed[k] == expected[k], "%s rank %d: element %d is %d, expected %d", what, r,
                  k, packed[k], expected[k]);
            seen[packed[k]]++;
        }
        free(expected);
        MPI_CHECK(MPI_Type_free(&t));
    }
    for (int k = 0; k < total; k++)
        CHECK(seen[k] == 1, "%s: element %d owned %d times", what, k, seen[k]);
    free(global);
    free(seen);
    free(packed);
}

static void darrays(void)
{
    const int B = MPI_DISTRIBUTE_BLOCK, C = MPI_DISTRIBUTE_CYCLIC, N = MPI_DISTRIBUTE_NONE,
              D = MPI_DISTRIBUTE_DFLT_DARG;
    for (int o = 0; o < 2; o++) {
        int order = o ? MPI_ORDER_FORTRAN : MPI_ORDER_C;
        check_darray(1, (int[]){10}, (int[]){B}, (int[]){D}, (int[]){3}, order, "1-D block");
        check_darray(1, (int[]){10}, (int[]){B}, (int[]){4}, (int[]){3}, order, "1-D block(4)");
        check_darray(1, (int[]){10}, (int[]){C}, (int[]){D}, (int[]){4}, order, "1-D cyclic");
        check_darray(1, (int[]){11}, (int[]){C}, (int[]){3}, (int[]){2}, order, "1-D cyclic(3)");
        check_darray(1, (int[]){2}, (int[]){B}, (int[]){D}, (int[]){4}, order,
                     "1-D block with idle ranks");
        check_darray(2, (int[]){7, 9}, (int[]){B, C}, (int[]){D, 2}, (int[]){2, 3}, order,
                     "2-D block x cyclic(2)");
        check_darray(2, (int[]){6, 5}, (int[]){C, N}, (int[]){D, D}, (int[]){4, 1}, order,
                     "2-D cyclic x none");
        check_darray(3, (int[]){4, 5, 6}, (int[]){C, B, C}, (int[]){2, D, D}, (int[]){2, 2, 3},
                     order, "3-D cyclic(2) x block x cyclic");
    }
    /* Errors: a block too small to cover the dimension; (strict) a
     * dimension not distributed over a grid dimension of 2. */
    MPI_Datatype t;
    CHECK_CLASS(MPI_Type_create_darray(2, 0, 1, (int[]){10}, (int[]){B}, (int[]){4}, (int[]){2},
                                       MPI_ORDER_C, MPI_INT, &t),
                MPI_ERR_ARG);
    if (strict_mode())
        CHECK_CLASS(MPI_Type_create_darray(2, 0, 1, (int[]){10}, (int[]){N}, (int[]){D},
                                           (int[]){2}, MPI_ORDER_C, MPI_INT, &t),
                    MPI_ERR_ARG);
}

/* ------------------------------------------------------------------ */
/* f90 types, match_size, value_index.                                  */

static void f90_types(void)
{
    MPI_Datatype a, b;
    int s, ni, na, nd, comb, ints[2];
    MPI_Aint addrs[1];
    MPI_Datatype types[1];

    MPI_CHECK(MPI_Type_create_f90_integer(9, &a));
    MPI_CHECK(MPI_Type_create_f90_integer(9, &b));
    CHECK(a == b, "f90_integer(9) twice: two handles");
    MPI_CHECK(MPI_Type_size(a, &s));
    CHECK(s == 4, "f90_integer(9) size %d", s);
    MPI_CHECK(MPI_Type_get_envelope(a, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_F90_INTEGER && ni == 1 && na == 0 && nd == 0,
          "f90_integer envelope %d %d %d %d", comb, ni, na, nd);
    MPI_CHECK(MPI_Type_get_contents(a, 1, 0, 0, ints, addrs, types));
    CHECK(ints[0] == 9, "f90_integer contents r %d", ints[0]);
    MPI_CHECK(MPI_Type_create_f90_integer(2, &a));
    MPI_CHECK(MPI_Type_size(a, &s));
    CHECK(s == 1, "f90_integer(2) size %d", s);
    MPI_CHECK(MPI_Type_create_f90_integer(18, &a));
    MPI_CHECK(MPI_Type_size(a, &s));
    CHECK(s == 8, "f90_integer(18) size %d", s);

    MPI_CHECK(MPI_Type_create_f90_real(6, 30, &a));
    MPI_CHECK(MPI_Type_size(a, &s));
    CHECK(s == 4, "f90_real(6, 30) size %d", s);
    MPI_CHECK(MPI_Type_get_envelope(a, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_F90_REAL && ni == 2 && na == 0 && nd == 0, "f90_real envelope");
    MPI_CHECK(MPI_Type_get_contents(a, 2, 0, 0, ints, addrs, types));
    CHECK(ints[0] == 6 && ints[1] == 30, "f90_real contents %d %d", ints[0], ints[1]);
    MPI_CHECK(MPI_Type_create_f90_real(15, 300, &a));
    MPI_CHECK(MPI_Type_size(a, &s));
    CHECK(s == 8, "f90_real(15, 300) size %d", s);
    MPI_CHECK(MPI_Type_create_f90_real(MPI_UNDEFINED, 300, &b));
    MPI_CHECK(MPI_Type_size(b, &s));
    CHECK(s == 8, "f90_real(undefined, 300) size %d", s);
    MPI_CHECK(MPI_Type_create_f90_complex(15, 300, &a));
    MPI_CHECK(MPI_Type_size(a, &s));
    CHECK(s == 16, "f90_complex(15, 300) size %d", s);
    MPI_CHECK(MPI_Type_get_envelope(a, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_F90_COMPLEX && ni == 2, "f90_complex envelope");

    /* Usable in communication at once (predefined: committed). */
    if (rank < 2) {
        double out[2] = {1.5, -2.25}, in[2] = {0, 0};
        MPI_CHECK(MPI_Sendrecv(out, 1, a, 1 - rank, 9, in, 1, a, 1 - rank, 9, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        CHECK(in[0] == 1.5 && in[1] == -2.25, "f90 complex sent: %g %g", in[0], in[1]);
    }
    /* A derived type of one decodes to it, which must not be freed. */
    MPI_CHECK(MPI_Type_contiguous(3, a, &b));
    struct contents c = get_contents(b, "contiguous of an f90 type");
    expect(&c, MPI_COMBINER_CONTIGUOUS, 1, (int[]){3}, 0, NULL, 1, (MPI_Datatype[]){a},
           "contiguous of an f90 type");
    free_args(&c);
    MPI_CHECK(MPI_Type_free(&b));

    if (strict_mode()) {
        MPI_Datatype f = a;
        CHECK_CLASS(MPI_Type_free(&f), MPI_ERR_TYPE);
        CHECK_CLASS(MPI_Type_create_f90_integer(100, &b), MPI_ERR_ARG);
        CHECK_CLASS(MPI_Type_create_f90_real(40, 30, &b), MPI_ERR_ARG);
    }

    /* Type_match_size: the type of that class and size. */
    const int classes[3] = {MPI_TYPECLASS_INTEGER, MPI_TYPECLASS_REAL, MPI_TYPECLASS_COMPLEX};
    const int sizes[3][3] = {{1, 4, 8}, {4, 8, 8}, {8, 16, 16}};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++) {
            MPI_CHECK(MPI_Type_match_size(classes[k], sizes[k][j], &a));
            MPI_CHECK(MPI_Type_size(a, &s));
            CHECK(s == sizes[k][j], "match_size class %d size %d gave size %d", classes[k],
                  sizes[k][j], s);
        }
    if (strict_mode())
        CHECK_CLASS(MPI_Type_match_size(MPI_TYPECLASS_REAL, 3, &a), MPI_ERR_ARG);

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    MPI_CHECK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &a));
    CHECK(a == MPI_DOUBLE_INT, "value_index(double, int) is not MPI_DOUBLE_INT");
    MPI_CHECK(MPI_Type_get_value_index(MPI_LONG_DOUBLE, MPI_INT, &a));
    CHECK(a == MPI_LONG_DOUBLE_INT, "value_index(long double, int)");
    MPI_CHECK(MPI_Type_get_value_index(MPI_SHORT, MPI_INT, &a));
    CHECK(a == MPI_SHORT_INT, "value_index(short, int)");
    MPI_CHECK(MPI_Type_get_value_index(MPI_INT, MPI_FLOAT, &a));
    CHECK(a == MPI_DATATYPE_NULL, "value_index(int, float) is not MPI_DATATYPE_NULL");
    CHECK_CLASS(MPI_Type_get_value_index(MPI_DATATYPE_NULL, MPI_INT, &a), MPI_ERR_TYPE);
#endif
}

/* ------------------------------------------------------------------ */
/* external32.                                                          */

static void check_bytes(const unsigned char *got, const unsigned char *want, int n,
                        const char *what)
{
    for (int k = 0; k < n; k++)
        CHECK(got[k] == want[k], "%s: byte %d is %02x, expected %02x", what, k, got[k], want[k]);
}

static void external32(void)
{
    unsigned char buf[256];
    MPI_Aint pos = 0, sz;

    /* int, short, long (4 bytes in external32), double, float complex. */
    int iv[2] = {1, -2};
    short sv = 0x1234;
    long lv[2] = {-3, 0x01020304};
    double dv = 1.0;
    float _Complex zv = 1.0f + 2.0f * I;
    MPI_CHECK(MPI_Pack_external("external32", iv, 2, MPI_INT, buf, sizeof buf, &pos));
    MPI_CHECK(MPI_Pack_external("external32", &sv, 1, MPI_SHORT, buf, sizeof buf, &pos));
    MPI_CHECK(MPI_Pack_external("external32", lv, 2, MPI_LONG, buf, sizeof buf, &pos));
    MPI_CHECK(MPI_Pack_external("external32", &dv, 1, MPI_DOUBLE, buf, sizeof buf, &pos));
    MPI_CHECK(MPI_Pack_external("external32", &zv, 1, MPI_C_FLOAT_COMPLEX, buf, sizeof buf, &pos));
    const unsigned char want[] = {
        0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xfe,             /* int 1, -2 */
        0x12, 0x34,                                                 /* short */
        0xff, 0xff, 0xff, 0xfd, 0x01, 0x02, 0x03, 0x04,             /* long -3, 0x01020304 */
        0x3f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* double 1.0 */
        0x3f, 0x80, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,             /* float complex 1+2i */
    };
    CHECK(pos == (MPI_Aint)sizeof want, "external32 image of %ld bytes, expected %zu", (long)pos,
          sizeof want);
    check_bytes(buf, want, sizeof want, "external32 image");

    /* And back. */
    int iv2[2];
    short sv2;
    long lv2[2];
    double dv2;
    float _Complex zv2;
    pos = 0;
    MPI_CHECK(MPI_Unpack_external("external32", buf, sizeof want, &pos, iv2, 2, MPI_INT));
    MPI_CHECK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &sv2, 1, MPI_SHORT));
    MPI_CHECK(MPI_Unpack_external("external32", buf, sizeof want, &pos, lv2, 2, MPI_LONG));
    MPI_CHECK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &dv2, 1, MPI_DOUBLE));
    MPI_CHECK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &zv2, 1,
                                  MPI_C_FLOAT_COMPLEX));
    CHECK(iv2[0] == 1 && iv2[1] == -2 && sv2 == 0x1234 && lv2[0] == -3 && lv2[1] == 0x01020304 &&
              dv2 == 1.0 && zv2 == zv && pos == (MPI_Aint)sizeof want,
          "external32 round trip of basic types");

    /* An upper bound by the standard (Open MPI 5 says 24); exact here. */
    MPI_CHECK(MPI_Pack_external_size("external32", 3, MPI_LONG, &sz));
    CHECK(sz == 12 || (sz > 12 && !strict_mode()), "Pack_external_size of 3 longs %ld",
          (long)sz);
    if (strict_mode()) {
        /* 2 x (16 + 4); MPICH 5 says 4. */
        MPI_CHECK(MPI_Pack_external_size("external32", 2, MPI_LONG_DOUBLE_INT, &sz));
        CHECK(sz == 40, "Pack_external_size of 2 LONG_DOUBLE_INT %ld", (long)sz);
    }

    /* long double as IEEE quadruple precision (the standard's external32). */
    if (strict_mode()) {
        long double x[2] = {1.0L, -0.375L};
        const unsigned char wq[32] = {0x3f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                      0xbf, 0xfd, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        pos = 0;
        MPI_CHECK(MPI_Pack_external("external32", x, 2, MPI_LONG_DOUBLE, buf, sizeof buf, &pos));
        CHECK(pos == 32, "external32 long double: %ld bytes", (long)pos);
        check_bytes(buf, wq, 32, "external32 long double");
        long double y[2] = {0, 0};
        pos = 0;
        MPI_CHECK(MPI_Unpack_external("external32", buf, 32, &pos, y, 2, MPI_LONG_DOUBLE));
        CHECK(y[0] == 1.0L && y[1] == -0.375L, "external32 long double back: %Lg %Lg", y[0],
              y[1]);
    }

    if (strict_mode()) {
        long big = 1L << 40;
        pos = 0;
        CHECK_CLASS(MPI_Pack_external("external32", &big, 1, MPI_LONG, buf, sizeof buf, &pos),
                    MPI_ERR_CONVERSION);
        pos = 0;
        CHECK_CLASS(MPI_Pack_external("native", iv, 1, MPI_INT, buf, sizeof buf, &pos),
                    MPI_ERR_UNSUPPORTED_DATAREP);
        pos = 0;
        CHECK_CLASS(MPI_Pack_external("external32", iv, 2, MPI_INT, buf, 7, &pos),
                    MPI_ERR_TRUNCATE);
    }

    /* A vector of ints with gaps, big-endian, and back. */
    int vi[6] = {1, 2, 3, 4, 5, 6}, vo[6] = {0, 0, 0, 0, 0, 0};
    MPI_Datatype vv;
    MPI_CHECK(MPI_Type_vector(3, 1, 2, MPI_INT, &vv));
    MPI_CHECK(MPI_Type_commit(&vv));
    pos = 0;
    MPI_CHECK(MPI_Pack_external("external32", vi, 1, vv, buf, sizeof buf, &pos));
    CHECK(pos == 12, "external32 vector of 3 ints: %ld bytes", (long)pos);
    check_bytes(buf, (const unsigned char[]){0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 5}, 12,
                "external32 vector of ints");
    pos = 0;
    MPI_CHECK(MPI_Unpack_external("external32", buf, 12, &pos, vo, 1, vv));
    CHECK(vo[0] == 1 && vo[1] == 0 && vo[2] == 3 && vo[3] == 0 && vo[4] == 5 && pos == 12,
          "external32 vector of ints back");
    MPI_CHECK(MPI_Type_free(&vv));

    /* (Strict: MPICH 5.0.2 dies of SIGILL in MPI_Pack_external and
     * MPI_Pack_external_size of this type.) A derived type round trip: a
     * vector of struct { double; int; short } with gaps, packed twice at
     * advancing positions. */
    if (!strict_mode())
        return;
    struct rec { double d; int i; short s; } r[6], r2[6];
    MPI_Datatype st, vec;
    MPI_CHECK(MPI_Type_create_struct(3, (int[]){1, 1, 1},
                                     (MPI_Aint[]){offsetof(struct rec, d), offsetof(struct rec, i),
                                                  offsetof(struct rec, s)},
                                     (MPI_Datatype[]){MPI_DOUBLE, MPI_INT, MPI_SHORT}, &st));
    MPI_CHECK(MPI_Type_vector(3, 1, 2, st, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    MPI_CHECK(MPI_Pack_external_size("external32", 1, vec, &sz));
    CHECK(sz == 3 * 14, "Pack_external_size of the vector %ld", (long)sz);
    for (int k = 0; k < 6; k++) {
        r[k].d = k * 0.5;
        r[k].i = -k;
        r[k].s = (short)(k * 7);
    }
    pos = 0;
    MPI_CHECK(MPI_Pack_external("external32", r, 1, vec, buf, sizeof buf, &pos));
    MPI_CHECK(MPI_Pack_external("external32", &r[1], 1, vec, buf, sizeof buf, &pos));
    CHECK(pos == 2 * sz, "two packs advance to %ld", (long)pos);
    /* The second element's int (-2) is big-endian at 14 + 8. */
    check_bytes(buf + 22, (const unsigned char[]){0xff, 0xff, 0xff, 0xfe}, 4, "struct int");
    memset(r2, 0, sizeof r2);
    MPI_Aint in = 0;
    MPI_CHECK(MPI_Unpack_external("external32", buf, pos, &in, r2, 1, vec));
    for (int k = 0; k < 6; k += 2)
        CHECK(r2[k].d == k * 0.5 && r2[k].i == -k && r2[k].s == k * 7 && r2[k + 1].i == 0,
              "external32 vector of structs, element %d", k);
    MPI_CHECK(MPI_Type_free(&vec));
    MPI_CHECK(MPI_Type_free(&st));
}

/* ------------------------------------------------------------------ */
/* Get_elements on partial receives.                                    */

static void partial_elements(void)
{
    /* Receive type: { double complex z[2]; long double l[2]; int i }.
     * Sent: the first 2, then the first 3 basic elements of that signature. */
    struct big { double _Complex z[2]; long double l[2]; int i; } b;
    MPI_Datatype t;
    MPI_CHECK(MPI_Type_create_struct(3, (int[]){2, 2, 1},
                                     (MPI_Aint[]){offsetof(struct big, z), offsetof(struct big, l),
                                                  offsetof(struct big, i)},
                                     (MPI_Datatype[]){MPI_C_DOUBLE_COMPLEX, MPI_LONG_DOUBLE,
                                                      MPI_INT},
                                     &t));
    MPI_CHECK(MPI_Type_commit(&t));
    if (rank == 0) {
        double _Complex z[2] = {1 + 1 * I, 2 + 2 * I};
        struct { double _Complex z[2]; long double l; } p = {{3, 4}, 5.0L};
        MPI_Datatype pt;
        MPI_CHECK(MPI_Type_create_struct(2, (int[]){2, 1},
                                         (MPI_Aint[]){0, offsetof(struct big, l)},
                                         (MPI_Datatype[]){MPI_C_DOUBLE_COMPLEX, MPI_LONG_DOUBLE},
                                         &pt));
        MPI_CHECK(MPI_Type_commit(&pt));
        MPI_CHECK(MPI_Send(z, 2, MPI_C_DOUBLE_COMPLEX, 1, 11, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(&p, 1, pt, 1, 12, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Type_free(&pt));
        /* 3 pairs of MPI_LONG_DOUBLE_INT received as 4. */
        struct ldi v[3] = {{1.0L, 1}, {2.0L, 2}, {3.0L, 3}};
        MPI_CHECK(MPI_Send(v, 3, MPI_LONG_DOUBLE_INT, 1, 13, MPI_COMM_WORLD));
    } else if (rank == 1) {
        MPI_Status st;
        int n;
        MPI_Count nc;
        MPI_CHECK(MPI_Recv(&b, 1, t, 0, 11, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_elements(&st, t, &n));
        CHECK(n == 2, "2 complex of a {2 complex, 2 long double, int}: Get_elements %d", n);
        MPI_CHECK(MPI_Get_count(&st, t, &n));
        CHECK(n == MPI_UNDEFINED, "partial: Get_count %d", n);
        MPI_CHECK(MPI_Recv(&b, 1, t, 0, 12, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_elements(&st, t, &n));
        CHECK(n == 3, "2 complex and a long double: Get_elements %d", n);
        CHECK(creal(b.z[1]) == 4 && b.l[0] == 5.0L, "partial struct data");
#if MPI_VERSION >= 4
        MPI_CHECK(MPI_Get_elements_c(&st, t, &nc));
        CHECK(nc == 3, "Get_elements_c %lld", (long long)nc);
#endif
        struct ldi v[4];
        MPI_CHECK(MPI_Recv(v, 4, MPI_LONG_DOUBLE_INT, 0, 13, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_LONG_DOUBLE_INT, &n));
        CHECK(n == 3, "3 of 4 LONG_DOUBLE_INT: Get_count %d", n);
        MPI_CHECK(MPI_Get_elements(&st, MPI_LONG_DOUBLE_INT, &n));
        CHECK(n == 6 || !strict_mode(), "3 of 4 LONG_DOUBLE_INT: Get_elements %d", n);
        CHECK(v[2].v == 3.0L && v[2].i == 3, "LONG_DOUBLE_INT data");
        (void)nc;
    }
    MPI_CHECK(MPI_Type_free(&t));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs at least 2 ranks");
    test_errors_return();

    pairs();
    struct_alignment();
    contents_exact();
    darrays();
    f90_types();
    external32();
    partial_elements();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("datatypes_ext");
    MPI_Finalize();
    return 0;
}
