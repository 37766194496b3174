/*
 * large_count.c -- the MPI 4.0 large-count ("_c") variants.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Needs MPI >= 4.0 (MPI_VERSION >= 4); with an older mpi.h (Open MPI 5.0
 * reports 3.1 and has no _c functions) it prints
 * "ok: large_count (skipped: MPI_VERSION < 4)".
 *
 * Checks:
 *  - Send_c/Recv_c and Isend_c/Irecv_c around the ring with MPI_Count
 *    counts; Get_count_c and Get_elements_c on the statuses; data checked.
 *  - Status_set_elements_c (_x before MPI 4.1) with 3 * 2^31 bytes: Get_count_c and
 *    Get_elements_c report it, the int Get_count/Get_elements report
 *    MPI_UNDEFINED (the count does not fit).
 *  - Type_size_c, Type_get_extent_c, Type_get_true_extent_c of types larger
 *    than INT_MAX bytes (built with Type_contiguous_c and Type_vector_c, no
 *    memory behind them); the int Type_size reports MPI_UNDEFINED.
 *  - Bcast_c and Allreduce_c with MPI_Count counts; Pack_size_c/Pack_c/
 *    Unpack_c round trip.
 *  - Only with OXMPI_LARGE=1 in the environment (needs about 4.5 GB and a
 *    few seconds): ranks 0 and 1 exchange one message of 2^31 + 8 bytes with
 *    Send_c/Recv_c and check Get_count_c and spot-checked data.
 */
#include "check.h"

#include <limits.h>

#if MPI_VERSION >= 4

/* MPI_Status_set_elements_c is MPI 4.1; MPI 4.0 (MPICH 4.0) has only _x */
#if MPI_VERSION > 4 || MPI_SUBVERSION >= 1
#define STATUS_SET_ELEMENTS_C MPI_Status_set_elements_c
#else
#define STATUS_SET_ELEMENTS_C MPI_Status_set_elements_x
#endif

static int rank, size, right, left;

static void ring(void)
{
    MPI_Count n = 3001, got = -1;
    int *sb = malloc((size_t)n * sizeof(int)), *rb = malloc((size_t)n * sizeof(int));
    MPI_Status st;
    MPI_Request req[2];
    MPI_Count i;

    for (i = 0; i < n; i++) {
        sb[i] = (int)(rank * 100000 + i);
        rb[i] = -1;
    }
    if (rank % 2 == 0) {
        MPI_CHECK(MPI_Send_c(sb, n, MPI_INT, right, 1, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv_c(rb, n + 5, MPI_INT, left, 1, MPI_COMM_WORLD, &st));
    } else {
        MPI_CHECK(MPI_Recv_c(rb, n + 5, MPI_INT, left, 1, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Send_c(sb, n, MPI_INT, right, 1, MPI_COMM_WORLD));
    }
    /* (with an odd size the last rank and rank 0 both send first; still no
     * deadlock even for synchronous sends: rank 0 -> 1 completes first) */
    MPI_CHECK(MPI_Get_count_c(&st, MPI_INT, &got));
    CHECK(got == n && st.MPI_SOURCE == left, "Recv_c: count %lld source %d", (long long)got,
          st.MPI_SOURCE);
    MPI_CHECK(MPI_Get_elements_c(&st, MPI_INT, &got));
    CHECK(got == n, "Recv_c: Get_elements_c %lld", (long long)got);
    for (i = 0; i < n; i++)
        CHECK(rb[i] == (int)(left * 100000 + i), "Recv_c data[%lld] = %d", (long long)i, rb[i]);

    for (i = 0; i < n; i++)
        rb[i] = -1;
    MPI_CHECK(MPI_Irecv_c(rb, n, MPI_INT, left, 2, MPI_COMM_WORLD, &req[0]));
    MPI_CHECK(MPI_Isend_c(sb, n - 1, MPI_INT, right, 2, MPI_COMM_WORLD, &req[1]));
    MPI_CHECK(MPI_Wait(&req[0], &st));
    MPI_CHECK(MPI_Wait(&req[1], MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Get_count_c(&st, MPI_INT, &got));
    CHECK(got == n - 1, "Irecv_c: count %lld", (long long)got);
    for (i = 0; i < n - 1; i++)
        CHECK(rb[i] == (int)(left * 100000 + i), "Irecv_c data[%lld] = %d", (long long)i, rb[i]);
    CHECK(rb[n - 1] == -1, "Irecv_c wrote past the message");
    free(sb);
    free(rb);
}

static void status_counts(void)
{
    MPI_Status st;
    MPI_Count big = 3LL << 31, got = -1;
    int n = 0;

    MPI_CHECK(STATUS_SET_ELEMENTS_C(&st, MPI_BYTE, big));
    MPI_CHECK(MPI_Get_count_c(&st, MPI_BYTE, &got));
    CHECK(got == big, "Get_count_c after Status_set_elements_c: %lld", (long long)got);
    MPI_CHECK(MPI_Get_elements_c(&st, MPI_BYTE, &got));
    CHECK(got == big, "Get_elements_c: %lld", (long long)got);
    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
    CHECK(n == MPI_UNDEFINED, "int Get_count of %lld bytes = %d, expected MPI_UNDEFINED",
          (long long)big, n);
    MPI_CHECK(MPI_Get_elements(&st, MPI_BYTE, &n));
    CHECK(n == MPI_UNDEFINED, "int Get_elements of %lld bytes = %d", (long long)big, n);

    /* in ints: 3 * 2^31 bytes = 3 * 2^29 ints (fits in int) */
    MPI_CHECK(STATUS_SET_ELEMENTS_C(&st, MPI_INT, 3LL << 29));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 3 << 29, "Get_count of 3 * 2^29 ints = %d", n);
    MPI_CHECK(MPI_Get_count_c(&st, MPI_INT, &got));
    CHECK(got == 3LL << 29, "Get_count_c of 3 * 2^29 ints = %lld", (long long)got);
}

static void big_types(void)
{
    MPI_Datatype gig, huge, vec;
    MPI_Count sz = -1, lb = -1, ext = -1;
    int isz = 0;

    /* 2^30 ints = 4 GiB, times 3 */
    MPI_CHECK(MPI_Type_contiguous_c((MPI_Count)1 << 30, MPI_INT, &gig));
    MPI_CHECK(MPI_Type_contiguous_c(3, gig, &huge));
    MPI_CHECK(MPI_Type_size_c(huge, &sz));
    CHECK(sz == 12LL << 30, "Type_size_c of 12 GiB type = %lld", (long long)sz);
    MPI_CHECK(MPI_Type_size(huge, &isz));
    CHECK(isz == MPI_UNDEFINED, "int Type_size of 12 GiB type = %d", isz);
    MPI_CHECK(MPI_Type_get_extent_c(huge, &lb, &ext));
    CHECK(lb == 0 && ext == 12LL << 30, "Type_get_extent_c %lld/%lld", (long long)lb,
          (long long)ext);
    MPI_CHECK(MPI_Type_get_true_extent_c(huge, &lb, &ext));
    CHECK(lb == 0 && ext == 12LL << 30, "Type_get_true_extent_c %lld/%lld", (long long)lb,
          (long long)ext);
    MPI_CHECK(MPI_Type_free(&huge));
    MPI_CHECK(MPI_Type_free(&gig));

    /* two bytes 2^32 apart */
    MPI_CHECK(MPI_Type_vector_c(2, 1, (MPI_Count)1 << 32, MPI_BYTE, &vec));
    MPI_CHECK(MPI_Type_size_c(vec, &sz));
    CHECK(sz == 2, "Type_size_c of the sparse vector = %lld", (long long)sz);
    MPI_CHECK(MPI_Type_get_extent_c(vec, &lb, &ext));
    CHECK(lb == 0 && ext == ((MPI_Count)1 << 32) + 1, "sparse vector extent %lld/%lld",
          (long long)lb, (long long)ext);
    MPI_CHECK(MPI_Type_free(&vec));

    MPI_CHECK(MPI_Type_size_c(MPI_DOUBLE, &sz));
    CHECK(sz == 8, "Type_size_c(MPI_DOUBLE) = %lld", (long long)sz);
}

static void collectives_c(void)
{
    MPI_Count n = 1500, i, psize = -1, pos = 0;
    long long *v = malloc((size_t)n * sizeof(long long)), *r = malloc((size_t)n * sizeof(long long));
    char *packed;

    for (i = 0; i < n; i++)
        v[i] = rank == size - 1 ? i * 3 : -1;
    MPI_CHECK(MPI_Bcast_c(v, n, MPI_LONG_LONG, size - 1, MPI_COMM_WORLD));
    for (i = 0; i < n; i++)
        CHECK(v[i] == i * 3, "Bcast_c [%lld] = %lld", (long long)i, v[i]);
    for (i = 0; i < n; i++)
        v[i] = rank + i;
    MPI_CHECK(MPI_Allreduce_c(v, r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    for (i = 0; i < n; i++)
        CHECK(r[i] == (long long)size * (size - 1) / 2 + (long long)size * i,
              "Allreduce_c [%lld] = %lld", (long long)i, r[i]);

    MPI_CHECK(MPI_Pack_size_c(n, MPI_LONG_LONG, MPI_COMM_WORLD, &psize));
    CHECK(psize >= n * 8, "Pack_size_c %lld", (long long)psize);
    packed = malloc((size_t)psize);
    MPI_CHECK(MPI_Pack_c(v, n, MPI_LONG_LONG, packed, psize, &pos, MPI_COMM_WORLD));
    CHECK(pos > 0 && pos <= psize, "Pack_c position %lld", (long long)pos);
    {
        MPI_Count end = pos;
        pos = 0;
        memset(r, 0, (size_t)n * sizeof(long long));
        MPI_CHECK(MPI_Unpack_c(packed, end, &pos, r, n, MPI_LONG_LONG, MPI_COMM_WORLD));
        CHECK(pos == end, "Unpack_c consumed %lld of %lld", (long long)pos, (long long)end);
        for (i = 0; i < n; i++)
            CHECK(r[i] == rank + i, "Unpack_c [%lld] = %lld", (long long)i, r[i]);
    }
    free(packed);
    free(v);
    free(r);
}

static void really_large(void)
{
    const MPI_Count n = ((MPI_Count)1 << 31) + 8;
    unsigned char *b;
    MPI_Count i, got = -1;
    MPI_Status st;

    if (rank > 1)
        return;
    b = malloc((size_t)n);
    CHECK(b != NULL, "malloc of %lld bytes", (long long)n);
    if (rank == 0) {
        for (i = 0; i < n; i += 4096)
            b[i] = (unsigned char)(i >> 12);
        b[n - 1] = 0x5a;
        MPI_CHECK(MPI_Send_c(b, n, MPI_BYTE, 1, 9, MPI_COMM_WORLD));
    } else {
        memset(b, 0, (size_t)n);
        MPI_CHECK(MPI_Recv_c(b, n, MPI_BYTE, 0, 9, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count_c(&st, MPI_BYTE, &got));
        CHECK(got == n, "2 GiB message: Get_count_c %lld", (long long)got);
        for (i = 0; i < n; i += 4096)
            CHECK(b[i] == (unsigned char)(i >> 12), "2 GiB message byte %lld", (long long)i);
        CHECK(b[n - 1] == 0x5a, "2 GiB message last byte");
    }
    free(b);
}

int main(int argc, char **argv)
{
    const char *large;
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    ring();
    status_counts();
    big_types();
    collectives_c();
    large = getenv("OXMPI_LARGE");
    if (large && large[0] && strcmp(large, "0") != 0)
        really_large();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "large_count");
    return 0;
}

#else /* MPI_VERSION < 4 */

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Finalize();
    test_ok_rank(rank, "large_count (skipped: MPI_VERSION < 4)");
    return 0;
}

#endif
