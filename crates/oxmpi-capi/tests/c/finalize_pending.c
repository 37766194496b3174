/*
 * finalize_pending.c -- MPI_Finalize with operations still pending that can
 * never complete, and with operations that must still complete although
 * their sender is already in MPI_Finalize.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Each rank leaves behind, around the ring:
 *  - an Irecv from the left nobody sends to, still active (the program
 *    never completes it), and another one freed with Request_free;
 *  - an Issend of 4 ints and one of 1 MiB to the right that nobody
 *    receives, still active, and a standard Isend of 1 MiB nobody receives,
 *    freed.
 * None of them can ever complete: MPI_Finalize must return all the same
 * (MPICH abandons them; `make check` runs under a time limit). Leaving
 * active requests at MPI_Finalize is erroneous (freed ones are not); it is
 * what a failed test run leaves behind (mpi4py's util_pkl5 hung at exit).
 *
 * Must still complete: a freed standard Isend of 4 ints and one of 1 MiB
 * to the right, received there with blocking Recvs just before the
 * receiver's MPI_Finalize; odd ranks receive only 200 ms later, when an
 * even sender that got its own messages at once is already in
 * MPI_Finalize. The data must be right.
 */
#include "check.h"

#define SMALL 4
#define LARGE (256 * 1024) /* ints: 1 MiB */
#define TAG_NOSEND 70
#define TAG_NORECV 71
#define TAG_LATE 72

static int rank, size, right, left;

/* kept alive until exit: operations on them may be pending at finalize */
static int late_small[SMALL], nobody_small[SMALL], recv_active[SMALL], recv_freed[SMALL];
static int *late_large, *nobody_large, *nobody_freed;

static int val(int src, int k, int i)
{
    return src * 1000000 + k * 100000 + i % 99991;
}

static int *filled(int n, int k)
{
    int i, *p = malloc((size_t)n * sizeof(int));
    CHECK(p != NULL, "out of memory");
    for (i = 0; i < n; i++)
        p[i] = val(rank, k, i);
    return p;
}

int main(int argc, char **argv)
{
    MPI_Request active[3], req;
    int i, k;

    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    /* never complete */
    MPI_CHECK(MPI_Irecv(recv_active, SMALL, MPI_INT, left, TAG_NOSEND, MPI_COMM_WORLD,
                        &active[0]));
    MPI_CHECK(MPI_Irecv(recv_freed, SMALL, MPI_INT, left, TAG_NOSEND, MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Request_free(&req));
    for (i = 0; i < SMALL; i++)
        nobody_small[i] = val(rank, 1, i);
    nobody_large = filled(LARGE, 2);
    nobody_freed = filled(LARGE, 3);
    MPI_CHECK(MPI_Issend(nobody_small, SMALL, MPI_INT, right, TAG_NORECV, MPI_COMM_WORLD,
                         &active[1]));
    MPI_CHECK(MPI_Issend(nobody_large, LARGE, MPI_INT, right, TAG_NORECV, MPI_COMM_WORLD,
                         &active[2]));
    MPI_CHECK(MPI_Isend(nobody_freed, LARGE, MPI_INT, right, TAG_NORECV, MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Request_free(&req));

    /* must complete: received by the right neighbour after this rank is in
     * MPI_Finalize */
    for (i = 0; i < SMALL; i++)
        late_small[i] = val(rank, 4, i);
    late_large = filled(LARGE, 5);
    MPI_CHECK(MPI_Isend(late_small, SMALL, MPI_INT, right, TAG_LATE, MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Request_free(&req));
    MPI_CHECK(MPI_Isend(late_large, LARGE, MPI_INT, right, TAG_LATE, MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Request_free(&req));

    /* odd ranks receive late: an even left neighbour that gets its own
     * messages at once is in MPI_Finalize by then */
    {
        int *rb = malloc(LARGE * sizeof(int)), got = -1;
        MPI_Status st;
        CHECK(rb != NULL, "out of memory");
        if (rank % 2 == 1)
            sleep_ms(200);
        for (k = 0; k < 2; k++) {
            int n = k ? LARGE : SMALL;
            MPI_CHECK(MPI_Recv(rb, LARGE, MPI_INT, left, TAG_LATE, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &got));
            CHECK(got == n, "late message %d: count %d, expected %d", k, got, n);
            for (i = 0; i < n; i++)
                CHECK(rb[i] == val(left, 4 + k, i), "late message %d: data[%d] = %d", k, i,
                      rb[i]);
        }
        free(rb);
    }

    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "finalize_pending");
    return 0;
}
