/*
 * p2p_partitioned.c -- partitioned communication (MPI 4.0), around the
 * ring (send right, receive from left). Minimum ranks: 2.
 *
 *  - Psend_init / Precv_init of 4 partitions of 1000 doubles, 3 rounds with
 *    new data: before the send starts no partition has arrived (Parrived
 *    false); the partitions are marked ready one by one in reverse order,
 *    then (next rounds) with Pready_range and Pready_list; every partition
 *    arrives (Parrived loops), Wait completes both, the data is the round's;
 *    Request_free sets the handles to MPI_REQUEST_NULL.
 *  - A partitioned message does not match an ordinary receive: an Irecv
 *    posted first with the same source, tag and communicator is still
 *    pending after the partitioned receive completed, and takes the
 *    ordinary message sent afterwards.
 *  - Partitioned send and receive to oneself (MPI_COMM_SELF).
 *  - Strict mode (oxmpi): MPI_Pready of a partition out of range or twice
 *    gives MPI_ERR_ARG; MPI_Wait on a started send with partitions not
 *    ready gives MPI_ERR_REQUEST instead of waiting forever; MPI_Parrived
 *    on a send request gives MPI_ERR_REQUEST.
 *
 * Skipped (still "ok:") where MPI_VERSION < 4.
 */
#include "check.h"

#define P 4
#define N 1000
#define TAG 5

static int rank, size;

#if MPI_VERSION >= 4
static double val(int from, int round, int part, int k)
{
    return from * 1e6 + round * 1e4 + part * 1e3 + k;
}

static void ring(void)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double *sb = malloc(sizeof(double) * P * N), *rb = malloc(sizeof(double) * P * N);
    CHECK(sb && rb, "out of memory");
    MPI_Request s, r, plain;
    MPI_CHECK(MPI_Psend_init(sb, P, N, MPI_DOUBLE, right, TAG, MPI_COMM_WORLD, MPI_INFO_NULL, &s));
    MPI_CHECK(MPI_Precv_init(rb, P, N, MPI_DOUBLE, left, TAG, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    /* An ordinary receive that must not take the partitioned messages. */
    int pv = -1;
    MPI_CHECK(MPI_Irecv(&pv, 1, MPI_INT, left, TAG, MPI_COMM_WORLD, &plain));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < P * N; i++) {
            sb[i] = val(rank, round, i / N, i % N);
            rb[i] = -1;
        }
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Start(&r));
        for (int p = 0; p < P; p++) {
            int flag = -1;
            MPI_CHECK(MPI_Parrived(r, p, &flag));
            CHECK(flag == 0, "round %d: partition %d arrived before the send started", round, p);
        }
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Start(&s));
        if (round == 0) {
            for (int p = P - 1; p >= 0; p--)
                MPI_CHECK(MPI_Pready(p, s));
        } else if (round == 1) {
            MPI_CHECK(MPI_Pready_range(0, 1, s));
            MPI_CHECK(MPI_Pready_range(2, P - 1, s));
        } else {
            int list[P];
            for (int p = 0; p < P; p++)
                list[p] = (p * 3) % P;
            MPI_CHECK(MPI_Pready_list(P, list, s));
        }
        double deadline = MPI_Wtime() + 30;
        for (int p = 0; p < P; p++) {
            int flag = 0;
            while (!flag) {
                MPI_CHECK(MPI_Parrived(r, p, &flag));
                CHECK(flag || MPI_Wtime() < deadline, "round %d: partition %d never arrived",
                      round, p);
            }
        }
        MPI_Status st;
        MPI_CHECK(MPI_Wait(&r, &st));
        MPI_CHECK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        CHECK(r != MPI_REQUEST_NULL && s != MPI_REQUEST_NULL, "Wait freed a partitioned request");
        for (int i = 0; i < P * N; i++)
            CHECK(rb[i] == val(left, round, i / N, i % N), "round %d: element %d is %g", round, i,
                  rb[i]);
        int flag = -1;
        MPI_CHECK(MPI_Test(&plain, &flag, MPI_STATUS_IGNORE));
        CHECK(flag == 0, "an ordinary receive took a partitioned message (got %d)", pv);
    }
    MPI_CHECK(MPI_Request_free(&s));
    MPI_CHECK(MPI_Request_free(&r));
    CHECK(s == MPI_REQUEST_NULL && r == MPI_REQUEST_NULL, "Request_free left the handles");
    /* Every rank has checked its ordinary receive before any sends. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int one = 77;
    MPI_CHECK(MPI_Send(&one, 1, MPI_INT, right, TAG, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Wait(&plain, MPI_STATUS_IGNORE));
    CHECK(pv == 77, "the ordinary receive got %d", pv);
    free(sb);
    free(rb);
}

static void to_self(void)
{
    int a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
    MPI_Request s, r;
    MPI_CHECK(MPI_Precv_init(b, 3, 2, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_INFO_NULL, &r));
    MPI_CHECK(MPI_Psend_init(a, 3, 2, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_INFO_NULL, &s));
    MPI_CHECK(MPI_Start(&r));
    MPI_CHECK(MPI_Start(&s));
    MPI_CHECK(MPI_Pready_range(0, 2, s));
    MPI_Request both[2] = {s, r};
    MPI_CHECK(MPI_Waitall(2, both, MPI_STATUSES_IGNORE));
    for (int i = 0; i < 6; i++)
        CHECK(b[i] == i + 1, "to self: element %d is %d", i, b[i]);
    if (strict_mode()) {
        MPI_CHECK(MPI_Start(&s));
        CHECK_CLASS(MPI_Pready(3, s), MPI_ERR_ARG);
        MPI_CHECK(MPI_Pready(1, s));
        CHECK_CLASS(MPI_Pready(1, s), MPI_ERR_ARG);
        CHECK_CLASS(MPI_Wait(&s, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
        int flag;
        CHECK_CLASS(MPI_Parrived(s, 0, &flag), MPI_ERR_REQUEST);
        MPI_CHECK(MPI_Start(&r));
        MPI_CHECK(MPI_Pready_list(2, (int[]){2, 0}, s));
        MPI_CHECK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    MPI_CHECK(MPI_Request_free(&s));
    MPI_CHECK(MPI_Request_free(&r));
}
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs at least 2 ranks");
    test_errors_return();
#if MPI_VERSION >= 4
    ring();
    to_self();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("p2p_partitioned");
#else
    test_ok_rank(rank, "p2p_partitioned (skipped: MPI_VERSION < 4)");
#endif
    MPI_Finalize();
    return 0;
}
