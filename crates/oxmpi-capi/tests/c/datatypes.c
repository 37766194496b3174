/*
 * datatypes.c -- derived datatypes, their queries, pack/unpack, and
 * communication with non-contiguous layouts.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Checks (local): Type_contiguous, vector, create_hvector, indexed,
 * create_hindexed, create_indexed_block, create_hindexed_block,
 * create_struct, create_subarray (C and Fortran order), create_resized, dup:
 * Type_size, Type_get_extent, Type_get_true_extent against hand-computed
 * values; Type_get_envelope (combiner and counts) and Type_get_contents for
 * a few; Type_get_name of a predefined type ("MPI_INT") and of a new type
 * (empty), Type_set_name/get_name; Get_address/Aint_diff/Aint_add;
 * Pack_size/Pack/Unpack round trips (including a vector and a struct, and
 * MPI_PACKED messages); Type_free sets MPI_DATATYPE_NULL and a freed type
 * stays usable inside a type built from it. Type_get_contents gives a
 * derived argument type back as a handle the program frees: decoding a dup
 * of a dup reaches MPI_INT in two steps, and an argument type the program
 * freed can still be got back (and freed) while a type built from it lives;
 * strict mode: the handle is the argument's own (one more reference, as
 * MPICH does), the same on every call.
 * Checks (communication, around the ring): a matrix column (vector type) is
 * received as contiguous doubles and contiguous doubles are received into a
 * column; two columns sent with a resized column type; a subarray sent and
 * received as a subarray; Get_elements vs Get_count on a struct message
 * (whole: count 2, elements 4; partial: count MPI_UNDEFINED, elements 3).
 */
#include "check.h"

#include <stddef.h>

static int rank, size, right, left;

static void check_type(MPI_Datatype t, int size_, MPI_Aint lb, MPI_Aint extent, MPI_Aint tlb,
                       MPI_Aint textent, const char *what)
{
    int s = -1;
    MPI_Aint l = -1, e = -1;
    MPI_CHECK(MPI_Type_size(t, &s));
    CHECK(s == size_, "%s: size %d, expected %d", what, s, size_);
    MPI_CHECK(MPI_Type_get_extent(t, &l, &e));
    CHECK(l == lb && e == extent, "%s: lb/extent %ld/%ld, expected %ld/%ld", what, (long)l,
          (long)e, (long)lb, (long)extent);
    MPI_CHECK(MPI_Type_get_true_extent(t, &l, &e));
    CHECK(l == tlb && e == textent, "%s: true lb/extent %ld/%ld, expected %ld/%ld", what, (long)l,
          (long)e, (long)tlb, (long)textent);
}

static void check_envelope(MPI_Datatype t, int combiner, int ni, int na, int nd,
                           const char *what)
{
    int i = -1, a = -1, d = -1, c = -1;
    MPI_CHECK(MPI_Type_get_envelope(t, &i, &a, &d, &c));
    CHECK(c == combiner && i == ni && a == na && d == nd,
          "%s: envelope combiner %d ints %d addrs %d types %d, expected %d %d %d %d", what, c, i,
          a, d, combiner, ni, na, nd);
}

static void commit_free_check(MPI_Datatype *t)
{
    MPI_CHECK(MPI_Type_commit(t));
    MPI_CHECK(MPI_Type_free(t));
    CHECK(*t == MPI_DATATYPE_NULL, "Type_free did not set MPI_DATATYPE_NULL");
}

static void constructors(void)
{
    MPI_Datatype t, t2;
    const int isz = (int)sizeof(int);

    /* named */
    check_envelope(MPI_INT, MPI_COMBINER_NAMED, 0, 0, 0, "MPI_INT");
    check_type(MPI_INT, isz, 0, isz, 0, isz, "MPI_INT");
    check_type(MPI_DOUBLE, 8, 0, 8, 0, 8, "MPI_DOUBLE");

    /* contiguous(5, INT) */
    MPI_CHECK(MPI_Type_contiguous(5, MPI_INT, &t));
    check_type(t, 5 * isz, 0, 5 * isz, 0, 5 * isz, "contiguous");
    check_envelope(t, MPI_COMBINER_CONTIGUOUS, 1, 0, 1, "contiguous");
    {
        int ints[1] = {-1};
        MPI_Aint addrs[1];
        MPI_Datatype types[1] = {MPI_DATATYPE_NULL};
        MPI_CHECK(MPI_Type_get_contents(t, 1, 0, 1, ints, addrs, types));
        CHECK(ints[0] == 5 && types[0] == MPI_INT, "contiguous contents %d", ints[0]);
    }
    commit_free_check(&t);

    /* vector(3, 2, 4, INT): blocks at 0, 4, 8 ints */
    MPI_CHECK(MPI_Type_vector(3, 2, 4, MPI_INT, &t));
    check_type(t, 6 * isz, 0, 10 * isz, 0, 10 * isz, "vector");
    check_envelope(t, MPI_COMBINER_VECTOR, 3, 0, 1, "vector");
    {
        int ints[3] = {-1, -1, -1};
        MPI_Aint addrs[1];
        MPI_Datatype types[1] = {MPI_DATATYPE_NULL};
        MPI_CHECK(MPI_Type_get_contents(t, 3, 0, 1, ints, addrs, types));
        CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 4 && types[0] == MPI_INT,
              "vector contents %d %d %d", ints[0], ints[1], ints[2]);
    }
    commit_free_check(&t);

    /* vector with negative stride: blocks at 0, -3 ints */
    MPI_CHECK(MPI_Type_vector(2, 1, -3, MPI_INT, &t));
    check_type(t, 2 * isz, -3 * isz, 4 * isz, -3 * isz, 4 * isz, "negative-stride vector");
    commit_free_check(&t);

    /* hvector(3, 2, 20 bytes, INT) */
    MPI_CHECK(MPI_Type_create_hvector(3, 2, 20, MPI_INT, &t));
    check_type(t, 6 * isz, 0, 40 + 2 * isz, 0, 40 + 2 * isz, "hvector");
    check_envelope(t, MPI_COMBINER_HVECTOR, 2, 1, 1, "hvector");
    {
        int ints[2] = {-1, -1};
        MPI_Aint addrs[1] = {-1};
        MPI_Datatype types[1];
        MPI_CHECK(MPI_Type_get_contents(t, 2, 1, 1, ints, addrs, types));
        CHECK(ints[0] == 3 && ints[1] == 2 && addrs[0] == 20 && types[0] == MPI_INT,
              "hvector contents %d %d %ld", ints[0], ints[1], (long)addrs[0]);
    }
    commit_free_check(&t);

    /* indexed: lens {1,2,3}, displs {0,3,8} ints */
    {
        int lens[3] = {1, 2, 3}, displs[3] = {0, 3, 8};
        MPI_CHECK(MPI_Type_indexed(3, lens, displs, MPI_INT, &t));
        check_type(t, 6 * isz, 0, 11 * isz, 0, 11 * isz, "indexed");
        check_envelope(t, MPI_COMBINER_INDEXED, 7, 0, 1, "indexed");
        commit_free_check(&t);
        /* displacement not starting at 0 */
        displs[0] = 2;
        displs[1] = 5;
        displs[2] = 9;
        MPI_CHECK(MPI_Type_indexed(3, lens, displs, MPI_INT, &t));
        check_type(t, 6 * isz, 2 * isz, 10 * isz, 2 * isz, 10 * isz, "indexed from 2");
        commit_free_check(&t);
    }

    /* hindexed: lens {2,1}, byte displs {4, 24} */
    {
        int lens[2] = {2, 1};
        MPI_Aint displs[2] = {4, 24};
        MPI_CHECK(MPI_Type_create_hindexed(2, lens, displs, MPI_INT, &t));
        check_type(t, 3 * isz, 4, 24 + isz - 4, 4, 24 + isz - 4, "hindexed");
        check_envelope(t, MPI_COMBINER_HINDEXED, 3, 2, 1, "hindexed");
        commit_free_check(&t);
    }

    /* indexed_block(3 blocks of 2, displs {0,4,9}) */
    {
        int displs[3] = {0, 4, 9};
        MPI_CHECK(MPI_Type_create_indexed_block(3, 2, displs, MPI_INT, &t));
        check_type(t, 6 * isz, 0, 11 * isz, 0, 11 * isz, "indexed_block");
        check_envelope(t, MPI_COMBINER_INDEXED_BLOCK, 5, 0, 1, "indexed_block");
        commit_free_check(&t);
    }

    /* hindexed_block(2 blocks of 3, byte displs {0, 32}) */
    {
        MPI_Aint displs[2] = {0, 32};
        MPI_CHECK(MPI_Type_create_hindexed_block(2, 3, displs, MPI_INT, &t));
        check_type(t, 6 * isz, 0, 32 + 3 * isz, 0, 32 + 3 * isz, "hindexed_block");
        check_envelope(t, MPI_COMBINER_HINDEXED_BLOCK, 2, 2, 1, "hindexed_block");
        commit_free_check(&t);
    }

    /* struct { char c; double d; int i[2]; } */
    {
        struct s {
            char c;
            double d;
            int i[2];
        } x;
        int lens[3] = {1, 1, 2};
        MPI_Aint displs[3], base;
        MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
        MPI_CHECK(MPI_Get_address(&x, &base));
        MPI_CHECK(MPI_Get_address(&x.c, &displs[0]));
        MPI_CHECK(MPI_Get_address(&x.d, &displs[1]));
        MPI_CHECK(MPI_Get_address(&x.i[0], &displs[2]));
        displs[0] = MPI_Aint_diff(displs[0], base);
        displs[1] = MPI_Aint_diff(displs[1], base);
        displs[2] = MPI_Aint_diff(displs[2], base);
        CHECK(displs[0] == (MPI_Aint)offsetof(struct s, c) &&
                  displs[1] == (MPI_Aint)offsetof(struct s, d) &&
                  displs[2] == (MPI_Aint)offsetof(struct s, i),
              "Get_address/Aint_diff offsets %ld %ld %ld", (long)displs[0], (long)displs[1],
              (long)displs[2]);
        MPI_CHECK(MPI_Type_create_struct(3, lens, displs, types, &t));
        /* extent padded to the alignment of double: equals sizeof here */
        check_type(t, 1 + 8 + 2 * isz, 0, (MPI_Aint)sizeof(struct s), 0,
                   (MPI_Aint)(offsetof(struct s, i) + 2 * sizeof(int)), "struct");
        check_envelope(t, MPI_COMBINER_STRUCT, 4, 3, 3, "struct");
        {
            int ints[4];
            MPI_Aint addrs[3];
            MPI_Datatype tt[3];
            MPI_CHECK(MPI_Type_get_contents(t, 4, 3, 3, ints, addrs, tt));
            CHECK(ints[0] == 3 && ints[1] == 1 && ints[2] == 1 && ints[3] == 2 &&
                      addrs[1] == displs[1] && tt[0] == MPI_CHAR && tt[1] == MPI_DOUBLE &&
                      tt[2] == MPI_INT,
                  "struct contents");
        }
        commit_free_check(&t);
        CHECK(MPI_Aint_add(base, displs[1]) == (MPI_Aint)(intptr_t)&x.d, "Aint_add");
    }

    /* subarray 4x5 ints, sub 2x3 at (1,1) */
    {
        int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 1};
        MPI_CHECK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t));
        /* first element (1,1) = 6, last (2,3) = 13 */
        check_type(t, 6 * isz, 0, 20 * isz, 6 * isz, 8 * isz, "subarray C");
        check_envelope(t, MPI_COMBINER_SUBARRAY, 8, 0, 1, "subarray");
        commit_free_check(&t);
        /* Fortran order: sizes {4,5} means 4 fastest; first (1,1) = 1 + 4 = 5,
         * last (2,3) = 2 + 12 = 14 */
        MPI_CHECK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &t));
        check_type(t, 6 * isz, 0, 20 * isz, 5 * isz, 10 * isz, "subarray Fortran");
        commit_free_check(&t);
    }

    /* resized(INT, -4, 16) */
    MPI_CHECK(MPI_Type_create_resized(MPI_INT, -4, 16, &t));
    check_type(t, isz, -4, 16, 0, isz, "resized");
    check_envelope(t, MPI_COMBINER_RESIZED, 0, 2, 1, "resized");
    commit_free_check(&t);

    /* dup of a vector */
    MPI_CHECK(MPI_Type_vector(3, 2, 4, MPI_INT, &t));
    MPI_CHECK(MPI_Type_dup(t, &t2));
    check_type(t2, 6 * isz, 0, 10 * isz, 0, 10 * isz, "dup");
    check_envelope(t2, MPI_COMBINER_DUP, 0, 0, 1, "dup");
    /* the original may be freed while the dup lives on */
    MPI_CHECK(MPI_Type_free(&t));
    commit_free_check(&t2);

    /* a freed type stays usable inside a type built from it */
    {
        MPI_Datatype inner, outer;
        int buf[12], out[4], i, pos = 0;
        char packed[64];
        MPI_CHECK(MPI_Type_vector(2, 1, 3, MPI_INT, &inner));
        MPI_CHECK(MPI_Type_contiguous(2, inner, &outer));
        MPI_CHECK(MPI_Type_free(&inner));
        MPI_CHECK(MPI_Type_commit(&outer));
        /* inner extent is 4 ints: elements at 0, 3, 4, 7 */
        for (i = 0; i < 12; i++)
            buf[i] = i * 11;
        MPI_CHECK(MPI_Pack(buf, 1, outer, packed, sizeof packed, &pos, MPI_COMM_WORLD));
        pos = 0;
        MPI_CHECK(MPI_Unpack(packed, sizeof packed, &pos, out, 4, MPI_INT, MPI_COMM_WORLD));
        CHECK(out[0] == 0 && out[1] == 33 && out[2] == 44 && out[3] == 77,
              "type built from a freed type: %d %d %d %d", out[0], out[1], out[2], out[3]);
        MPI_CHECK(MPI_Type_free(&outer));
    }
}

/* The one datatype argument of `t` (a dup, contiguous or vector): a
 * derived one is a handle the caller frees. */
static MPI_Datatype only_argument(MPI_Datatype t)
{
    int ints[3];
    MPI_Aint addrs[1];
    MPI_Datatype arg = MPI_DATATYPE_NULL;
    MPI_CHECK(MPI_Type_get_contents(t, 3, 1, 1, ints, addrs, &arg));
    return arg;
}

static void contents_handles(void)
{
    MPI_Datatype t1, t2, cur, got, again, vec, outer;
    int ni, na, nd, comb, steps = 0, s = -1;

    MPI_CHECK(MPI_Type_dup(MPI_INT, &t1));
    MPI_CHECK(MPI_Type_dup(t1, &t2));
    /* decode t2 down to its named type, freeing each derived step */
    cur = t2;
    for (;;) {
        MPI_Datatype next;
        MPI_CHECK(MPI_Type_get_envelope(cur, &ni, &na, &nd, &comb));
        if (comb == MPI_COMBINER_NAMED)
            break;
        CHECK(comb == MPI_COMBINER_DUP && ni == 0 && na == 0 && nd == 1,
              "step %d: envelope %d/%d/%d combiner %d", steps, ni, na, nd, comb);
        CHECK(++steps <= 2, "decoding a dup of a dup has not reached MPI_INT in 2 steps");
        next = only_argument(cur);
        if (cur != t2)
            MPI_CHECK(MPI_Type_free(&cur));
        cur = next;
    }
    CHECK(cur == MPI_INT && steps == 2, "a dup of a dup decoded to %s after %d steps",
          cur == MPI_INT ? "MPI_INT" : "another named type", steps);
    /* strict: the duplicated type's own handle, the same every time (the
     * standard only says the handles are to be freed; Open MPI 5 gives a
     * new one) */
    got = only_argument(t2);
    again = only_argument(t2);
    if (strict_mode())
        CHECK(got == t1 && again == t1, "Type_get_contents of a dup gave a new handle");
    MPI_CHECK(MPI_Type_free(&got));
    MPI_CHECK(MPI_Type_free(&again));
    MPI_CHECK(MPI_Type_size(t1, &s));
    CHECK(s == (int)sizeof(int), "the dup'ed type after freeing what contents gave: size %d", s);
    MPI_CHECK(MPI_Type_free(&t1));
    /* t1 freed by the program: t2 still gives it back */
    got = only_argument(t2);
    MPI_CHECK(MPI_Type_get_envelope(got, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_DUP && nd == 1, "freed argument of a dup: combiner %d", comb);
    CHECK(only_argument(got) == MPI_INT, "freed argument of a dup: not a dup of MPI_INT");
    MPI_CHECK(MPI_Type_free(&got));
    MPI_CHECK(MPI_Type_free(&t2));

    /* the same for a vector inside a contiguous type */
    MPI_CHECK(MPI_Type_vector(2, 1, 3, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_contiguous(2, vec, &outer));
    MPI_CHECK(MPI_Type_free(&vec));
    got = only_argument(outer);
    MPI_CHECK(MPI_Type_get_envelope(got, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && nd == 1,
          "freed vector inside a contiguous type: envelope %d/%d/%d combiner %d", ni, na, nd,
          comb);
    MPI_CHECK(MPI_Type_size(got, &s));
    CHECK(s == 2 * (int)sizeof(int), "freed vector inside a contiguous type: size %d", s);
    MPI_CHECK(MPI_Type_free(&got));
    MPI_CHECK(MPI_Type_commit(&outer));
    MPI_CHECK(MPI_Type_size(outer, &s));
    CHECK(s == 4 * (int)sizeof(int), "contiguous of a freed vector: size %d", s);
    MPI_CHECK(MPI_Type_free(&outer));
}

static void names(void)
{
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_Datatype t;

    MPI_CHECK(MPI_Type_get_name(MPI_INT, name, &len));
    CHECK(strcmp(name, "MPI_INT") == 0 && len == 7, "MPI_INT name '%s' len %d", name, len);
    MPI_CHECK(MPI_Type_get_name(MPI_DOUBLE, name, &len));
    CHECK(strcmp(name, "MPI_DOUBLE") == 0, "MPI_DOUBLE name '%s'", name);
    if (strict_mode()) {
        len = -1;
        MPI_CHECK(MPI_Type_get_name(MPI_DATATYPE_NULL, name, &len));
        CHECK(strcmp(name, "MPI_DATATYPE_NULL") == 0 && len == 17,
              "MPI_DATATYPE_NULL name '%s' len %d", name, len);
    }
    MPI_CHECK(MPI_Type_contiguous(2, MPI_INT, &t));
    len = -1;
    name[0] = 'x';
    MPI_CHECK(MPI_Type_get_name(t, name, &len));
    CHECK(len == 0 && name[0] == '\0', "new type name '%s' len %d", name, len);
    MPI_CHECK(MPI_Type_set_name(t, "pair of ints"));
    MPI_CHECK(MPI_Type_get_name(t, name, &len));
    CHECK(strcmp(name, "pair of ints") == 0 && len == 12, "set name: '%s' len %d", name, len);
    MPI_CHECK(MPI_Type_set_name(t, "renamed"));
    MPI_CHECK(MPI_Type_get_name(t, name, &len));
    CHECK(strcmp(name, "renamed") == 0 && len == 7, "renamed: '%s' len %d", name, len);
    MPI_CHECK(MPI_Type_free(&t));
}

static void pack_unpack(void)
{
    MPI_Datatype vec;
    int m[4][5], out[4][5], i, j, psize = -1, pos = 0, n = 42, n2 = 0;
    double d[3] = {1.5, -2.25, 1e300}, d2[3];
    char *packed;
    int vsize, isize, dsize;

    for (i = 0; i < 4; i++)
        for (j = 0; j < 5; j++) {
            m[i][j] = i * 10 + j;
            out[i][j] = -1;
        }
    /* column 2 of a 4x5 matrix */
    MPI_CHECK(MPI_Type_vector(4, 1, 5, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    MPI_CHECK(MPI_Pack_size(1, vec, MPI_COMM_WORLD, &vsize));
    MPI_CHECK(MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &isize));
    MPI_CHECK(MPI_Pack_size(3, MPI_DOUBLE, MPI_COMM_WORLD, &dsize));
    CHECK(vsize >= 4 * (int)sizeof(int) && isize >= (int)sizeof(int) && dsize >= 24,
          "Pack_size %d %d %d", vsize, isize, dsize);
    psize = vsize + isize + dsize;
    packed = malloc((size_t)psize);
    MPI_CHECK(MPI_Pack(&n, 1, MPI_INT, packed, psize, &pos, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Pack(&m[0][2], 1, vec, packed, psize, &pos, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Pack(d, 3, MPI_DOUBLE, packed, psize, &pos, MPI_COMM_WORLD));
    CHECK(pos > 0 && pos <= psize, "Pack position %d of %d", pos, psize);

    /* unpack locally, column into a different column */
    {
        int end = pos;
        pos = 0;
        MPI_CHECK(MPI_Unpack(packed, end, &pos, &n2, 1, MPI_INT, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Unpack(packed, end, &pos, &out[0][4], 1, vec, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Unpack(packed, end, &pos, d2, 3, MPI_DOUBLE, MPI_COMM_WORLD));
        CHECK(pos == end, "Unpack consumed %d of %d", pos, end);
        CHECK(n2 == 42, "unpacked int %d", n2);
        for (i = 0; i < 4; i++)
            for (j = 0; j < 5; j++)
                CHECK(out[i][j] == (j == 4 ? i * 10 + 2 : -1), "unpacked column: [%d][%d] = %d", i,
                      j, out[i][j]);
        CHECK(d2[0] == 1.5 && d2[1] == -2.25 && d2[2] == 1e300, "unpacked doubles");

        /* ship it as MPI_PACKED around the ring, unpack as contiguous */
        {
            char *rp = malloc((size_t)psize);
            MPI_Status st;
            int got = -1, col[4];
            MPI_CHECK(MPI_Sendrecv(packed, end, MPI_PACKED, right, 7, rp, psize, MPI_PACKED, left, 7,
                                   MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Get_count(&st, MPI_PACKED, &got));
            CHECK(got == end, "MPI_PACKED count %d, sent %d", got, end);
            pos = 0;
            MPI_CHECK(MPI_Unpack(rp, got, &pos, &n2, 1, MPI_INT, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Unpack(rp, got, &pos, col, 4, MPI_INT, MPI_COMM_WORLD));
            for (i = 0; i < 4; i++)
                CHECK(col[i] == i * 10 + 2, "MPI_PACKED column [%d] = %d", i, col[i]);
            free(rp);
        }
    }
    free(packed);
    MPI_CHECK(MPI_Type_free(&vec));

    /* a message sent with a derived type can be received as MPI_PACKED */
    {
        int sb[6] = {0, 1, 2, 3, 4, 5}, got[3], rpsize;
        char rp[256];
        MPI_Datatype ev;
        MPI_Status st;
        MPI_CHECK(MPI_Type_vector(3, 1, 2, MPI_INT, &ev));
        MPI_CHECK(MPI_Type_commit(&ev));
        MPI_CHECK(MPI_Sendrecv(sb, 1, ev, right, 8, rp, sizeof rp, MPI_PACKED, left, 8,
                               MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_PACKED, &rpsize));
        pos = 0;
        MPI_CHECK(MPI_Unpack(rp, rpsize, &pos, got, 3, MPI_INT, MPI_COMM_WORLD));
        CHECK(got[0] == 0 && got[1] == 2 && got[2] == 4, "vector received as MPI_PACKED: %d %d %d",
              got[0], got[1], got[2]);
        MPI_CHECK(MPI_Type_free(&ev));
    }
}

#define N 8

static double mval(int r, int i, int j)
{
    return r * 1000.0 + i * N + j + 0.5;
}

static void matrix_columns(void)
{
    double a[N][N], b[N][N], col[2 * N];
    MPI_Datatype column, col_resized;
    MPI_Status st;
    int i, j, c = rank % N, lc = left % N, n;

    for (i = 0; i < N; i++)
        for (j = 0; j < N; j++)
            a[i][j] = mval(rank, i, j);
    MPI_CHECK(MPI_Type_vector(N, 1, N, MPI_DOUBLE, &column));
    MPI_CHECK(MPI_Type_commit(&column));

    /* column -> contiguous */
    for (i = 0; i < 2 * N; i++)
        col[i] = -1;
    MPI_CHECK(MPI_Sendrecv(&a[0][c], 1, column, right, 1, col, N, MPI_DOUBLE, left, 1,
                           MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_DOUBLE, &n));
    CHECK(n == N, "column as contiguous: count %d", n);
    for (i = 0; i < N; i++)
        CHECK(col[i] == mval(left, i, lc), "column as contiguous: [%d] = %g", i, col[i]);
    CHECK(col[N] == -1, "column as contiguous: wrote past the end");

    /* contiguous -> column (row c sent contiguously, into column (c+1)%N) */
    for (i = 0; i < N; i++)
        for (j = 0; j < N; j++)
            b[i][j] = -1;
    MPI_CHECK(MPI_Sendrecv(&a[c][0], N, MPI_DOUBLE, right, 2, &b[0][(rank + 1) % N], 1, column,
                           left, 2, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, column, &n));
    CHECK(n == 1, "contiguous into column: Get_count(column) %d", n);
    MPI_CHECK(MPI_Get_elements(&st, column, &n));
    CHECK(n == N, "contiguous into column: Get_elements(column) %d", n);
    for (i = 0; i < N; i++)
        for (j = 0; j < N; j++)
            CHECK(b[i][j] == (j == (rank + 1) % N ? mval(left, lc, i) : -1),
                  "contiguous into column: b[%d][%d] = %g", i, j, b[i][j]);

    /* two adjacent columns with a column type resized to one double */
    MPI_CHECK(MPI_Type_create_resized(column, 0, sizeof(double), &col_resized));
    MPI_CHECK(MPI_Type_commit(&col_resized));
    for (i = 0; i < 2 * N; i++)
        col[i] = -1;
    MPI_CHECK(MPI_Sendrecv(&a[0][0], 2, col_resized, right, 3, col, 2 * N, MPI_DOUBLE, left, 3,
                           MPI_COMM_WORLD, &st));
    for (j = 0; j < 2; j++)
        for (i = 0; i < N; i++)
            CHECK(col[j * N + i] == mval(left, i, j), "resized columns: col %d row %d = %g", j, i,
                  col[j * N + i]);

    MPI_CHECK(MPI_Type_free(&col_resized));
    MPI_CHECK(MPI_Type_free(&column));

    /* subarray to subarray: 3x4 block at (2,1) goes to (4,3) */
    {
        int sizes[2] = {N, N}, subs[2] = {3, 4}, s1[2] = {2, 1}, s2[2] = {4, 3};
        MPI_Datatype from, to;
        MPI_CHECK(MPI_Type_create_subarray(2, sizes, subs, s1, MPI_ORDER_C, MPI_DOUBLE, &from));
        MPI_CHECK(MPI_Type_create_subarray(2, sizes, subs, s2, MPI_ORDER_C, MPI_DOUBLE, &to));
        MPI_CHECK(MPI_Type_commit(&from));
        MPI_CHECK(MPI_Type_commit(&to));
        for (i = 0; i < N; i++)
            for (j = 0; j < N; j++)
                b[i][j] = -1;
        MPI_CHECK(MPI_Sendrecv(a, 1, from, right, 4, b, 1, to, left, 4, MPI_COMM_WORLD, &st));
        for (i = 0; i < N; i++)
            for (j = 0; j < N; j++) {
                int in = i >= 4 && i < 7 && j >= 3 && j < 7;
                CHECK(b[i][j] == (in ? mval(left, i - 2, j - 2) : -1), "subarray: b[%d][%d] = %g",
                      i, j, b[i][j]);
            }
        MPI_CHECK(MPI_Type_free(&from));
        MPI_CHECK(MPI_Type_free(&to));
    }
}

struct pair {
    int i;
    double d;
};

static void elements_vs_count(void)
{
    struct pair pr[2], rcv[2];
    int lens[2] = {1, 1}, lens3[3] = {1, 1, 1}, n;
    MPI_Aint displs[2] = {offsetof(struct pair, i), offsetof(struct pair, d)};
    MPI_Aint displs3[3] = {offsetof(struct pair, i), offsetof(struct pair, d),
                           sizeof(struct pair) + offsetof(struct pair, i)};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, types3[3] = {MPI_INT, MPI_DOUBLE, MPI_INT};
    MPI_Datatype pt, partial;
    MPI_Status st;
#if MPI_VERSION >= 4
    MPI_Count nc;
#endif

    MPI_CHECK(MPI_Type_create_struct(2, lens, displs, types, &pt));
    MPI_CHECK(MPI_Type_commit(&pt));
    /* signature (int, double, int): one and a half pairs */
    MPI_CHECK(MPI_Type_create_struct(3, lens3, displs3, types3, &partial));
    MPI_CHECK(MPI_Type_commit(&partial));
    pr[0].i = rank;
    pr[0].d = rank + 0.25;
    pr[1].i = rank + 100;
    pr[1].d = rank + 100.25;

    /* whole: 2 pairs */
    MPI_CHECK(MPI_Sendrecv(pr, 2, pt, right, 5, rcv, 2, pt, left, 5, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, pt, &n));
    CHECK(n == 2, "whole struct message: Get_count %d", n);
    MPI_CHECK(MPI_Get_elements(&st, pt, &n));
    CHECK(n == 4, "whole struct message: Get_elements %d", n);
#if MPI_VERSION >= 4
    MPI_CHECK(MPI_Get_elements_c(&st, pt, &nc));
    CHECK(nc == 4, "whole struct message: Get_elements_c %lld", (long long)nc);
#endif
    CHECK(rcv[1].i == left + 100 && rcv[1].d == left + 100.25, "whole struct data");

    /* partial: received into 2 pairs */
    rcv[1].i = -1;
    rcv[1].d = -1;
    MPI_CHECK(MPI_Sendrecv(pr, 1, partial, right, 6, rcv, 2, pt, left, 6, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, pt, &n));
    CHECK(n == MPI_UNDEFINED, "partial struct message: Get_count %d, expected MPI_UNDEFINED", n);
    MPI_CHECK(MPI_Get_elements(&st, pt, &n));
    CHECK(n == 3, "partial struct message: Get_elements %d", n);
#if MPI_VERSION >= 4
    MPI_CHECK(MPI_Get_elements_c(&st, pt, &nc));
    CHECK(nc == 3, "partial struct message: Get_elements_c %lld", (long long)nc);
#endif
    CHECK(rcv[0].i == left && rcv[0].d == left + 0.25 && rcv[1].i == left + 100 &&
              rcv[1].d == -1,
          "partial struct data");
    MPI_CHECK(MPI_Type_free(&pt));
    MPI_CHECK(MPI_Type_free(&partial));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    constructors();
    contents_handles();
    names();
    pack_unpack();
    matrix_columns();
    elements_vs_count();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "datatypes");
    return 0;
}
