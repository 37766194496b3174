/* Derived datatypes through the C ABI: every constructor (and its large-count
 * variant), sizes, extents and true extents, envelopes, names, committing and
 * freeing, matrix columns sent as vectors and received contiguous (and back),
 * subarrays, structs laid out with MPI_Get_address (and from MPI_BOTTOM),
 * pack/unpack, MPI_Get_elements against MPI_Get_count on a partially
 * received struct message, MPI_Status_set_elements, and argument errors
 * under MPI_ERRORS_RETURN. At least 2 ranks. Prints "datatypes ok" on
 * rank 0. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The error class of a return code (errors return codes, not classes). */
static int cls(int code) {
    int c = -1;
    MPI_Error_class(code, &c);
    return c;
}

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "datatypes FAILED (rank %d, line %d): ", rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank, size;

#define N 5

static double val(int r, int i, int j) { return r * 1000.0 + i * 10.0 + j; }

/* Checks size, lb, extent, true lb and true extent through every variant. */
static void shape(MPI_Datatype t, long sz, long lb, long ext, long tlb, long text, int line) {
    int s;
    MPI_Count sx, sc, lx, ex, tlx, tex;
    MPI_Aint l, e, tl, te;
    MPI_Type_size(t, &s);
    MPI_Type_size_x(t, &sx);
    MPI_Type_size_c(t, &sc);
    CHECK(s == sz && sx == sz && sc == sz, "line %d: size %d/%lld/%lld, want %ld", line, s, (long long)sx, (long long)sc, sz);
    MPI_Type_get_extent(t, &l, &e);
    CHECK(l == lb && e == ext, "line %d: lb %ld extent %ld, want %ld %ld", line, (long)l, (long)e, lb, ext);
    MPI_Type_get_extent_x(t, &lx, &ex);
    CHECK(lx == lb && ex == ext, "line %d: extent_x", line);
    MPI_Type_get_extent_c(t, &lx, &ex);
    CHECK(lx == lb && ex == ext, "line %d: extent_c", line);
    MPI_Type_get_true_extent(t, &tl, &te);
    CHECK(tl == tlb && te == text, "line %d: true lb %ld true extent %ld, want %ld %ld", line, (long)tl, (long)te, tlb, text);
    MPI_Type_get_true_extent_x(t, &tlx, &tex);
    CHECK(tlx == tlb && tex == text, "line %d: true_extent_x", line);
    MPI_Type_get_true_extent_c(t, &tlx, &tex);
    CHECK(tlx == tlb && tex == text, "line %d: true_extent_c", line);
}
#define SHAPE(t, sz, lb, ext, tlb, text) shape(t, sz, lb, ext, tlb, text, __LINE__)

static void envelope(MPI_Datatype t, int ni, int na, int nd, int comb, int line) {
    int i = -1, a = -1, d = -1, c = -1;
    MPI_Type_get_envelope(t, &i, &a, &d, &c);
    CHECK(i == ni && a == na && d == nd && c == comb, "line %d: envelope (%d, %d, %d, %d), want (%d, %d, %d, %d)",
          line, i, a, d, c, ni, na, nd, comb);
}
#define ENV(t, ni, na, nd, comb) envelope(t, ni, na, nd, comb, __LINE__)

static void envelope_c(MPI_Datatype t, int ni, int na, int nc, int nd, int comb, int line) {
    MPI_Count i = -1, a = -1, c = -1, d = -1;
    int k = -1;
    MPI_Type_get_envelope_c(t, &i, &a, &c, &d, &k);
    CHECK(i == ni && a == na && c == nc && d == nd && k == comb,
          "line %d: envelope_c (%lld, %lld, %lld, %lld, %d), want (%d, %d, %d, %d, %d)", line,
          (long long)i, (long long)a, (long long)c, (long long)d, k, ni, na, nc, nd, comb);
}
#define ENVC(t, ni, na, nc, nd, comb) envelope_c(t, ni, na, nc, nd, comb, __LINE__)

struct P { int id; double x[2]; char tag; };
struct Q { int a; double b; double c; };

int main(int argc, char **argv) {
    int provided, n, e;
    MPI_Status st;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* Predefined types. */
    SHAPE(MPI_INT, 4, 0, 4, 0, 4);
    SHAPE(MPI_DOUBLE, 8, 0, 8, 0, 8);
    SHAPE(MPI_CHAR, 1, 0, 1, 0, 1);
    ENV(MPI_INT, 0, 0, 0, MPI_COMBINER_NAMED);
    ENV(MPI_2INT, 0, 0, 0, MPI_COMBINER_NAMED);
    ENVC(MPI_DOUBLE, 0, 0, 0, 0, MPI_COMBINER_NAMED);
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_Type_get_name(MPI_INT, name, &len);
    CHECK(strcmp(name, "MPI_INT") == 0 && len == 7, "name of MPI_INT: '%s' (%d)", name, len);
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0, "name of MPI_DOUBLE: '%s'", name);
    MPI_Type_get_name(MPI_2INT, name, &len);
    CHECK(strcmp(name, "MPI_2INT") == 0, "name of MPI_2INT: '%s'", name);
    MPI_Type_get_name(MPI_UNSIGNED_LONG_LONG, name, &len);
    CHECK(strcmp(name, "MPI_UNSIGNED_LONG_LONG") == 0, "name of MPI_UNSIGNED_LONG_LONG: '%s'", name);
    MPI_Type_commit(&(MPI_Datatype){MPI_INT}); /* committing a predefined type is a no-op */

    /* Every constructor: shape and envelope. */
    MPI_Datatype t;
    MPI_Type_contiguous(3, MPI_INT, &t);
    SHAPE(t, 12, 0, 12, 0, 12);
    ENV(t, 1, 0, 1, MPI_COMBINER_CONTIGUOUS);
    MPI_Type_get_name(t, name, &len);
    CHECK(len == 0 && name[0] == 0, "a new type has an empty name, got '%s'", name);
    MPI_Type_set_name(t, "three ints");
    MPI_Type_get_name(t, name, &len);
    CHECK(strcmp(name, "three ints") == 0 && len == 10, "set_name: '%s' (%d)", name, len);
    MPI_Type_free(&t);
    CHECK(t == MPI_DATATYPE_NULL, "free sets MPI_DATATYPE_NULL");

    MPI_Type_vector(3, 2, 4, MPI_INT, &t);
    SHAPE(t, 24, 0, 40, 0, 40);
    ENV(t, 3, 0, 1, MPI_COMBINER_VECTOR);
    MPI_Type_free(&t);
    MPI_Type_create_hvector(2, 1, 12, MPI_INT, &t);
    SHAPE(t, 8, 0, 16, 0, 16);
    ENV(t, 2, 1, 1, MPI_COMBINER_HVECTOR);
    MPI_Type_free(&t);
    {
        int bl[2] = {2, 1}, dp[2] = {0, 3};
        MPI_Type_indexed(2, bl, dp, MPI_INT, &t);
        SHAPE(t, 12, 0, 16, 0, 16);
        ENV(t, 5, 0, 1, MPI_COMBINER_INDEXED);
        MPI_Type_free(&t);
        int hbl[2] = {1, 1};
        MPI_Aint hdp[2] = {0, 12};
        MPI_Type_create_hindexed(2, hbl, hdp, MPI_INT, &t);
        SHAPE(t, 8, 0, 16, 0, 16);
        ENV(t, 3, 2, 1, MPI_COMBINER_HINDEXED);
        MPI_Type_free(&t);
        int ibd[2] = {0, 4};
        MPI_Type_create_indexed_block(2, 2, ibd, MPI_INT, &t);
        SHAPE(t, 16, 0, 24, 0, 24);
        ENV(t, 4, 0, 1, MPI_COMBINER_INDEXED_BLOCK);
        MPI_Type_free(&t);
        MPI_Aint hbd[2] = {0, 8};
        MPI_Type_create_hindexed_block(2, 1, hbd, MPI_INT, &t);
        SHAPE(t, 8, 0, 12, 0, 12);
        ENV(t, 2, 2, 1, MPI_COMBINER_HINDEXED_BLOCK);
        MPI_Type_free(&t);
    }
    {
        int sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
        MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t);
        SHAPE(t, 24, 0, 96, 32, 36);
        ENV(t, 8, 0, 1, MPI_COMBINER_SUBARRAY);
        MPI_Type_free(&t);
        MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &t);
        SHAPE(t, 24, 0, 96, 36, 40);
        MPI_Type_free(&t);
    }
    MPI_Type_create_resized(MPI_INT, -4, 12, &t);
    SHAPE(t, 4, -4, 12, 0, 4);
    ENV(t, 0, 2, 1, MPI_COMBINER_RESIZED);
    MPI_Type_free(&t);
    MPI_Type_dup(MPI_DOUBLE, &t);
    SHAPE(t, 8, 0, 8, 0, 8);
    ENV(t, 0, 0, 1, MPI_COMBINER_DUP);
    MPI_Type_free(&t);

    /* Large-count constructors. */
    MPI_Type_contiguous_c(3, MPI_INT, &t);
    SHAPE(t, 12, 0, 12, 0, 12);
    ENVC(t, 0, 0, 1, 1, MPI_COMBINER_CONTIGUOUS);
    MPI_Type_free(&t);
    MPI_Type_vector_c(3, 1, 2, MPI_INT, &t);
    SHAPE(t, 12, 0, 20, 0, 20);
    ENVC(t, 0, 0, 3, 1, MPI_COMBINER_VECTOR);
    MPI_Type_free(&t);
    MPI_Type_create_hvector_c(2, 1, 12, MPI_INT, &t);
    SHAPE(t, 8, 0, 16, 0, 16);
    ENVC(t, 0, 0, 3, 1, MPI_COMBINER_HVECTOR);
    MPI_Type_free(&t);
    {
        MPI_Count bl[2] = {2, 1}, dp[2] = {0, 3}, hdp[2] = {0, 12}, one[2] = {1, 1};
        MPI_Type_indexed_c(2, bl, dp, MPI_INT, &t);
        SHAPE(t, 12, 0, 16, 0, 16);
        ENVC(t, 0, 0, 5, 1, MPI_COMBINER_INDEXED);
        MPI_Type_free(&t);
        MPI_Type_create_hindexed_c(2, one, hdp, MPI_INT, &t);
        SHAPE(t, 8, 0, 16, 0, 16);
        ENVC(t, 0, 0, 5, 1, MPI_COMBINER_HINDEXED);
        MPI_Type_free(&t);
        MPI_Count sbl[2] = {1, 1}, sdp[2] = {0, 8};
        MPI_Datatype sty[2] = {MPI_INT, MPI_DOUBLE};
        MPI_Type_create_struct_c(2, sbl, sdp, sty, &t);
        SHAPE(t, 12, 0, 16, 0, 16);
        ENVC(t, 0, 0, 5, 2, MPI_COMBINER_STRUCT);
        MPI_Type_free(&t);
        MPI_Count sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
        MPI_Type_create_subarray_c(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t);
        SHAPE(t, 24, 0, 96, 32, 36);
        ENVC(t, 2, 0, 6, 1, MPI_COMBINER_SUBARRAY);
        MPI_Type_free(&t);
        MPI_Type_create_resized_c(MPI_INT, -4, 12, &t);
        SHAPE(t, 4, -4, 12, 0, 4);
        ENVC(t, 0, 0, 2, 1, MPI_COMBINER_RESIZED);
        MPI_Type_free(&t);
    }

    /* A matrix column as a vector, received contiguous, and back. */
    double a[N][N], b[N][N], v[2 * N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) { a[i][j] = val(rank, i, j); b[i][j] = -1; }
    MPI_Datatype col, col2, colr;
    MPI_Type_vector(N, 1, N, MPI_DOUBLE, &col);
    SHAPE(col, N * 8, 0, ((N - 1) * N + 1) * 8, 0, ((N - 1) * N + 1) * 8);
    MPI_Type_set_name(col, "column");
    MPI_Type_commit(&col);
    MPI_Sendrecv(&a[0][2], 1, col, next, 1, v, N, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, &st);
    for (int i = 0; i < N; i++) CHECK(v[i] == val(prev, i, 2), "column element %d: %g", i, v[i]);
    MPI_Get_count(&st, MPI_DOUBLE, &n);
    CHECK(n == N, "count of the column as doubles: %d", n);
    MPI_Get_count(&st, col, &n);
    CHECK(n == 1, "count of the column as columns: %d", n);
    MPI_Get_elements(&st, col, &n);
    CHECK(n == N, "elements of the column: %d", n);
    for (int i = 0; i < N; i++) v[i] = val(rank, i, 100);
    MPI_Sendrecv(v, N, MPI_DOUBLE, next, 2, &b[0][3], 1, col, prev, 2, MPI_COMM_WORLD, &st);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            CHECK(b[i][j] == (j == 3 ? val(prev, i, 100) : -1), "b[%d][%d] = %g", i, j, b[i][j]);
    /* Two adjacent columns: the vector resized to one double's extent. */
    MPI_Type_create_resized(col, 0, sizeof(double), &colr);
    SHAPE(colr, N * 8, 0, 8, 0, ((N - 1) * N + 1) * 8);
    MPI_Type_commit(&colr);
    MPI_Sendrecv(&a[0][1], 2, colr, next, 3, v, 2 * N, MPI_DOUBLE, prev, 3, MPI_COMM_WORLD, &st);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) CHECK(v[k * N + i] == val(prev, i, 1 + k), "resized columns %d %d", k, i);
    /* A dup of a committed type is committed; the name is not copied. */
    MPI_Type_dup(col, &col2);
    MPI_Type_get_name(col2, name, &len);
    CHECK(len == 0, "a dup has no name, got '%s'", name);
    MPI_Type_get_name(col, name, &len);
    CHECK(strcmp(name, "column") == 0, "name of col: '%s'", name);
    MPI_Sendrecv(&a[0][4], 1, col2, next, 4, v, N, MPI_DOUBLE, prev, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < N; i++) CHECK(v[i] == val(prev, i, 4), "dup column element %d", i);
    MPI_Type_free(&col2);

    /* A subarray sent, received contiguous. */
    {
        int arr[4][6], out[6];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++) arr[i][j] = rank * 100 + i * 10 + j;
        int sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
        MPI_Datatype sub;
        MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub);
        MPI_Type_commit(&sub);
        MPI_Sendrecv(arr, 1, sub, next, 5, out, 6, MPI_INT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int k = 0; k < 6; k++) {
            int i = 1 + k / 3, j = 2 + k % 3;
            CHECK(out[k] == prev * 100 + i * 10 + j, "subarray element %d: %d", k, out[k]);
        }
        MPI_Type_free(&sub);
    }

    /* A struct laid out with MPI_Get_address. */
    struct P ps[3], pr[3];
    memset(ps, 0, sizeof ps);
    memset(pr, 0, sizeof pr);
    for (int k = 0; k < 3; k++) {
        ps[k].id = rank * 10 + k;
        ps[k].x[0] = rank + k * 0.5;
        ps[k].x[1] = -rank - k;
        ps[k].tag = (char)('a' + rank + k);
    }
    MPI_Datatype pty, ptyr;
    {
        MPI_Aint base, addr[3], next_addr;
        MPI_Get_address(&ps[0], &base);
        MPI_Get_address(&ps[0].id, &addr[0]);
        MPI_Get_address(&ps[0].x, &addr[1]);
        MPI_Get_address(&ps[0].tag, &addr[2]);
        MPI_Get_address(&ps[1], &next_addr);
        CHECK(next_addr - base == (MPI_Aint)sizeof(struct P), "addresses of consecutive structs");
        MPI_Aint disp[3] = {addr[0] - base, addr[1] - base, addr[2] - base};
        int bl[3] = {1, 2, 1};
        MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
        MPI_Type_create_struct(3, bl, disp, types, &pty);
    }
    SHAPE(pty, 21, 0, (long)sizeof(struct P), 0, 25);
    ENV(pty, 4, 3, 3, MPI_COMBINER_STRUCT);
    MPI_Type_create_resized(pty, 0, sizeof(struct P), &ptyr);
    MPI_Type_commit(&ptyr);
    MPI_Type_commit(&pty);
    MPI_Sendrecv(ps, 3, pty, next, 6, pr, 3, ptyr, prev, 6, MPI_COMM_WORLD, &st);
    for (int k = 0; k < 3; k++)
        CHECK(pr[k].id == prev * 10 + k && pr[k].x[0] == prev + k * 0.5 && pr[k].x[1] == -prev - k &&
              pr[k].tag == (char)('a' + prev + k), "struct %d: %d %g %g %c", k, pr[k].id, pr[k].x[0], pr[k].x[1], pr[k].tag);
    MPI_Get_count(&st, pty, &n);
    CHECK(n == 3, "struct count %d", n);
    MPI_Get_elements(&st, pty, &n);
    CHECK(n == 12, "struct elements %d", n);

    /* Absolute addresses from MPI_BOTTOM. */
    {
        int si = rank + 7, ri = -1;
        double sd = rank * 2.5, rd = -1;
        MPI_Aint as[2], ar[2];
        MPI_Get_address(&si, &as[0]);
        MPI_Get_address(&sd, &as[1]);
        MPI_Get_address(&ri, &ar[0]);
        MPI_Get_address(&rd, &ar[1]);
        int bl[2] = {1, 1};
        MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, bs, br;
        MPI_Type_create_struct(2, bl, as, types, &bs);
        MPI_Type_create_struct(2, bl, ar, types, &br);
        MPI_Type_commit(&bs);
        MPI_Type_commit(&br);
        MPI_Sendrecv(MPI_BOTTOM, 1, bs, next, 7, MPI_BOTTOM, 1, br, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(ri == prev + 7 && rd == prev * 2.5, "MPI_BOTTOM struct: %d %g", ri, rd);
        MPI_Type_free(&bs);
        MPI_Type_free(&br);
    }

    /* Get_elements vs Get_count on a partially received struct message:
     * one and a half struct Q are sent, three are posted. */
    {
        struct Q qs[2], qr[3];
        MPI_Datatype qty, half;
        MPI_Aint base, ad[5];
        qs[0].a = rank; qs[0].b = rank + 0.25; qs[0].c = rank + 0.5;
        qs[1].a = rank + 1; qs[1].b = rank + 1.25; qs[1].c = rank + 1.5;
        for (int k = 0; k < 3; k++) { qr[k].a = -1; qr[k].b = -1; qr[k].c = -1; }
        MPI_Get_address(&qs[0], &base);
        MPI_Get_address(&qs[0].a, &ad[0]);
        MPI_Get_address(&qs[0].b, &ad[1]);
        MPI_Get_address(&qs[0].c, &ad[2]);
        MPI_Get_address(&qs[1].a, &ad[3]);
        MPI_Get_address(&qs[1].b, &ad[4]);
        for (int k = 0; k < 5; k++) ad[k] -= base;
        int bl[5] = {1, 1, 1, 1, 1};
        MPI_Datatype types[5] = {MPI_INT, MPI_DOUBLE, MPI_DOUBLE, MPI_INT, MPI_DOUBLE};
        MPI_Type_create_struct(3, bl, ad, types, &qty);
        MPI_Type_create_struct(5, bl, ad, types, &half);
        SHAPE(qty, 20, 0, (long)sizeof(struct Q), 0, 24);
        MPI_Type_commit(&qty);
        MPI_Type_commit(&half);
        MPI_Sendrecv(qs, 1, half, next, 8, qr, 3, qty, prev, 8, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, qty, &n);
        CHECK(n == MPI_UNDEFINED, "count of 1.5 structs: %d", n);
        MPI_Count nc;
        MPI_Get_count_c(&st, qty, &nc);
        CHECK(nc == MPI_UNDEFINED, "count_c of 1.5 structs: %lld", (long long)nc);
        MPI_Get_count_c(&st, MPI_BYTE, &nc);
        CHECK(nc == 32, "bytes of 1.5 structs: %lld", (long long)nc);
        MPI_Get_elements(&st, qty, &n);
        CHECK(n == 5, "elements of 1.5 structs: %d", n);
        MPI_Get_elements_x(&st, qty, &nc);
        CHECK(nc == 5, "elements_x of 1.5 structs: %lld", (long long)nc);
        MPI_Get_elements_c(&st, qty, &nc);
        CHECK(nc == 5, "elements_c of 1.5 structs: %lld", (long long)nc);
        CHECK(qr[0].a == prev && qr[0].b == prev + 0.25 && qr[0].c == prev + 0.5 && qr[1].a == prev + 1 &&
              qr[1].b == prev + 1.25 && qr[1].c == -1 && qr[2].a == -1, "partial struct data");
        /* Status_set_elements on a struct type: 4 elements = 1 struct + 1 int. */
        MPI_Status s2;
        MPI_Status_set_elements(&s2, qty, 4);
        MPI_Get_elements(&s2, qty, &n);
        CHECK(n == 4, "set_elements(4) gave %d elements", n);
        MPI_Get_count(&s2, qty, &n);
        CHECK(n == MPI_UNDEFINED, "set_elements(4) gave count %d", n);
        MPI_Get_count(&s2, MPI_BYTE, &n);
        CHECK(n == 24, "set_elements(4) gave %d bytes", n);
        MPI_Status_set_elements_x(&s2, qty, 6);
        MPI_Get_count(&s2, qty, &n);
        CHECK(n == 2, "set_elements_x(6) gave count %d", n);
        MPI_Type_free(&qty);
        MPI_Type_free(&half);
    }
    {
        MPI_Status s3;
        MPI_Count nc;
        MPI_Status_set_elements(&s3, MPI_INT, 3);
        MPI_Get_count(&s3, MPI_INT, &n);
        CHECK(n == 3, "set_elements INT: count %d", n);
        MPI_Get_elements(&s3, MPI_INT, &n);
        CHECK(n == 3, "set_elements INT: elements %d", n);
        MPI_Status_set_elements_x(&s3, MPI_DOUBLE, 5);
        MPI_Get_elements_x(&s3, MPI_DOUBLE, &nc);
        CHECK(nc == 5, "set_elements_x DOUBLE: %lld", (long long)nc);
        MPI_Get_count(&s3, MPI_DOUBLE, &n);
        CHECK(n == 5, "set_elements_x DOUBLE: count %d", n);
        /* A basic predefined type counts whole, even a complex one. */
        MPI_Status_set_elements(&s3, MPI_C_DOUBLE_COMPLEX, 2);
        MPI_Get_elements(&s3, MPI_C_DOUBLE_COMPLEX, &n);
        CHECK(n == 2, "complex elements %d", n);
    }

    /* Pack / unpack round trip: an int, a column, two structs. */
    {
        int ps1, ps2, ps3, total, pos = 0, hdr = rank + 42;
        MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &ps1);
        MPI_Pack_size(1, col, MPI_COMM_WORLD, &ps2);
        MPI_Pack_size(2, pty, MPI_COMM_WORLD, &ps3);
        CHECK(ps1 >= 4 && ps2 >= N * 8 && ps3 >= 42, "pack sizes %d %d %d", ps1, ps2, ps3);
        total = ps1 + ps2 + ps3;
        char *buf = malloc(total), *rbuf = malloc(total);
        MPI_Pack(&hdr, 1, MPI_INT, buf, total, &pos, MPI_COMM_WORLD);
        CHECK(pos == 4, "position after an int: %d", pos);
        MPI_Pack(&a[0][1], 1, col, buf, total, &pos, MPI_COMM_WORLD);
        CHECK(pos == 4 + N * 8, "position after a column: %d", pos);
        MPI_Pack(ps, 2, pty, buf, total, &pos, MPI_COMM_WORLD);
        int used = pos;
        CHECK(used == 4 + N * 8 + 42, "position after two structs: %d", used);
        MPI_Sendrecv(buf, used, MPI_PACKED, next, 9, rbuf, total, MPI_PACKED, prev, 9, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_PACKED, &n);
        CHECK(n == used, "packed bytes received: %d", n);
        int rh = -1;
        pos = 0;
        MPI_Unpack(rbuf, n, &pos, &rh, 1, MPI_INT, MPI_COMM_WORLD);
        CHECK(rh == prev + 42, "unpacked header %d", rh);
        /* The column unpacks into contiguous doubles (same signature). */
        MPI_Unpack(rbuf, n, &pos, v, N, MPI_DOUBLE, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) CHECK(v[i] == val(prev, i, 1), "unpacked column %d", i);
        memset(pr, 0, sizeof pr);
        MPI_Unpack(rbuf, n, &pos, pr, 2, ptyr, MPI_COMM_WORLD);
        CHECK(pos == used, "position after unpacking everything: %d", pos);
        for (int k = 0; k < 2; k++)
            CHECK(pr[k].id == prev * 10 + k && pr[k].x[1] == -prev - k && pr[k].tag == (char)('a' + prev + k),
                  "unpacked struct %d", k);
        CHECK(pr[2].id == 0, "third struct untouched");

        /* Large-count variants, locally: a column into a packed buffer and
         * back into column 0 of b. */
        MPI_Count csz, cpos = 0;
        MPI_Pack_size_c(1, col, MPI_COMM_WORLD, &csz);
        CHECK(csz == N * 8, "pack_size_c %lld", (long long)csz);
        MPI_Pack_c(&a[0][0], 1, col, buf, total, &cpos, MPI_COMM_WORLD);
        CHECK(cpos == N * 8, "pack_c position %lld", (long long)cpos);
        cpos = 0;
        MPI_Unpack_c(buf, csz, &cpos, &b[0][0], 1, col, MPI_COMM_WORLD);
        CHECK(cpos == N * 8, "unpack_c position %lld", (long long)cpos);
        for (int i = 0; i < N; i++) CHECK(b[i][0] == val(rank, i, 0) && b[i][1] == -1, "unpack_c row %d", i);
        free(buf);
        free(rbuf);
    }

    /* Types built from uncommitted and freed types; a large-count type in
     * communication. */
    {
        MPI_Datatype c3, vv, vc;
        int src[12], dst[6];
        for (int k = 0; k < 12; k++) src[k] = rank * 100 + k;
        MPI_Type_contiguous(3, MPI_INT, &c3);
        MPI_Type_vector(2, 1, 2, c3, &vv); /* ints 0-2 and 6-8 */
        MPI_Type_free(&c3);
        MPI_Type_commit(&vv);
        MPI_Sendrecv(src, 1, vv, next, 10, dst, 6, MPI_INT, prev, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int k = 0; k < 6; k++) CHECK(dst[k] == prev * 100 + (k < 3 ? k : k + 3), "vector of contiguous %d: %d", k, dst[k]);
        MPI_Type_free(&vv);
        MPI_Type_vector_c(4, 1, 3, MPI_INT, &vc); /* ints 0, 3, 6, 9 */
        MPI_Type_commit(&vc);
        MPI_Sendrecv(src, 1, vc, next, 11, dst, 4, MPI_INT, prev, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int k = 0; k < 4; k++) CHECK(dst[k] == prev * 100 + 3 * k, "vector_c %d: %d", k, dst[k]);
        MPI_Type_free(&vc);
    }

    /* Errors are returned, with their classes. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    {
        int x = 0, bl[2] = {1, 1};
        MPI_Datatype p = MPI_INT, garbage = (MPI_Datatype)(intptr_t)0x7ff, nt = MPI_DATATYPE_NULL, u;
        e = MPI_Type_free(&p);
        CHECK(cls(e) == MPI_ERR_TYPE && p == MPI_INT, "freeing MPI_INT gave %d", e);
        /* A freed handle (checked before any new type may reuse it). */
        MPI_Datatype saved;
        MPI_Type_contiguous(2, MPI_INT, &u);
        saved = u;
        MPI_Type_free(&u);
        e = MPI_Type_size(saved, &n);
        CHECK(cls(e) == MPI_ERR_TYPE, "size of a freed type gave %d", e);
        e = MPI_Type_free(&saved);
        CHECK(cls(e) == MPI_ERR_TYPE, "double free gave %d", e);
        e = MPI_Type_size(garbage, &n);
        CHECK(cls(e) == MPI_ERR_TYPE, "size of a garbage handle gave %d", e);
        e = MPI_Type_contiguous(2, garbage, &nt);
        CHECK(cls(e) == MPI_ERR_TYPE, "contiguous of a garbage handle gave %d", e);
        e = MPI_Type_contiguous(2, MPI_DATATYPE_NULL, &nt);
        CHECK(cls(e) == MPI_ERR_TYPE, "contiguous of MPI_DATATYPE_NULL gave %d", e);
        e = MPI_Type_commit(&nt);
        CHECK(cls(e) == MPI_ERR_TYPE, "committing MPI_DATATYPE_NULL gave %d", e);
        e = MPI_Type_get_envelope(garbage, &n, &n, &n, &n);
        CHECK(cls(e) == MPI_ERR_TYPE, "envelope of a garbage handle gave %d", e);
        e = MPI_Type_get_name(garbage, name, &len);
        CHECK(cls(e) == MPI_ERR_TYPE, "name of a garbage handle gave %d", e);
        e = MPI_Type_contiguous(-1, MPI_INT, &nt);
        CHECK(cls(e) == MPI_ERR_COUNT, "negative count gave %d", e);
        e = MPI_Type_vector(-2, 1, 1, MPI_INT, &nt);
        CHECK(cls(e) == MPI_ERR_COUNT, "negative vector count gave %d", e);
        e = MPI_Type_contiguous_c(-1, MPI_INT, &nt);
        CHECK(cls(e) == MPI_ERR_COUNT, "negative large count gave %d", e);
        e = MPI_Type_indexed(2, NULL, NULL, MPI_INT, &nt);
        CHECK(cls(e) == MPI_ERR_ARG, "null arrays gave %d", e);
        int sz[1] = {4}, sb[1] = {2}, s0[1] = {0};
        e = MPI_Type_create_subarray(1, sz, sb, s0, 99, MPI_INT, &nt);
        CHECK(cls(e) == MPI_ERR_ARG, "bad order gave %d", e);
        s0[0] = 3;
        e = MPI_Type_create_subarray(1, sz, sb, s0, MPI_ORDER_C, MPI_INT, &nt);
        CHECK(cls(e) == MPI_ERR_ARG, "subarray out of range gave %d", e);
        MPI_Aint dp[2] = {0, 8};
        MPI_Datatype tys[2] = {MPI_INT, MPI_DATATYPE_NULL};
        e = MPI_Type_create_struct(2, bl, dp, tys, &nt);
        CHECK(cls(e) == MPI_ERR_TYPE, "struct of MPI_DATATYPE_NULL gave %d", e);
        CHECK(nt == MPI_DATATYPE_NULL, "failed constructors leave newtype alone");
        /* Uncommitted types: fine in queries, not in communication. */
        MPI_Type_contiguous(2, MPI_INT, &u);
        MPI_Type_size(u, &n);
        CHECK(n == 8, "size of an uncommitted type %d", n);
        e = MPI_Send(&x, 1, u, next, 12, MPI_COMM_WORLD);
        CHECK(cls(e) == MPI_ERR_TYPE, "sending an uncommitted type gave %d", e);
        MPI_Type_free(&u);
        /* A large-count type's envelope needs MPI_Type_get_envelope_c. */
        MPI_Type_contiguous_c(2, MPI_INT, &u);
        e = MPI_Type_get_envelope(u, &n, &n, &n, &n);
        CHECK(cls(e) == MPI_ERR_TYPE, "envelope of a large-count type gave %d", e);
        MPI_Type_free(&u);
        /* Pack and unpack bounds. */
        char small[8];
        int pos = 0, ints[4] = {1, 2, 3, 4};
        e = MPI_Pack(ints, 4, MPI_INT, small, sizeof small, &pos, MPI_COMM_WORLD);
        CHECK(cls(e) == MPI_ERR_TRUNCATE && pos == 0, "packing past the end gave %d", e);
        e = MPI_Pack(ints, -1, MPI_INT, small, sizeof small, &pos, MPI_COMM_WORLD);
        CHECK(cls(e) == MPI_ERR_COUNT, "negative pack count gave %d", e);
        MPI_Pack(ints, 2, MPI_INT, small, sizeof small, &pos, MPI_COMM_WORLD);
        pos = 4;
        e = MPI_Unpack(small, sizeof small, &pos, ints, 2, MPI_INT, MPI_COMM_WORLD);
        CHECK(cls(e) == MPI_ERR_TRUNCATE && pos == 4, "unpacking past the end gave %d", e);
        e = MPI_Pack(ints, 1, MPI_INT, small, sizeof small, &pos, (MPI_Comm)(intptr_t)0x7ff);
        CHECK(cls(e) == MPI_ERR_COMM, "pack on a garbage communicator gave %d", e);
        e = MPI_Type_free(NULL);
        CHECK(cls(e) == MPI_ERR_ARG, "free(NULL) gave %d", e);
    }

    MPI_Type_free(&col);
    MPI_Type_free(&colr);
    MPI_Type_free(&pty);
    MPI_Type_free(&ptyr);
    CHECK(col == MPI_DATATYPE_NULL && pty == MPI_DATATYPE_NULL, "handles reset");

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("datatypes ok\n");
    MPI_Finalize();
    return 0;
}
