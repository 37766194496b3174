/*
 * threads.c -- MPI_THREAD_MULTIPLE with concurrent point-to-point.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Init_thread asks for MPI_THREAD_MULTIPLE. If `provided` is lower, rank 0
 * prints "ok: threads (skipped: provided=<level>)" and the program exits 0.
 * Otherwise each rank runs 4 pthreads; thread t does 200 Sendrecv exchanges
 * around the ring (send to the right neighbour's thread t, receive from the
 * left neighbour's thread t) using tag t on MPI_COMM_WORLD, so the threads'
 * messages can only be told apart by tag. Every 50th exchange is 64 KiB
 * (rendezvous-sized), the others 16 ints; data and status are checked.
 * Also: Query_thread == provided, Is_thread_main true on the main thread and
 * false on the others, and a Barrier from the main thread after the joins.
 */
#include "check.h"

#include <pthread.h>

#define NTHREADS 4
#define NITER 200
#define SMALL 16
#define LARGE (16 * 1024) /* ints */

static int rank, size, right, left;

static int val(int src, int t, int it, int i)
{
    return ((src * NTHREADS + t) * 1000 + it) * 1000 + (i % 997);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg, it, i, flag = -1;
    int *sb = malloc(LARGE * sizeof(int)), *rb = malloc(LARGE * sizeof(int));
    MPI_Status st;

    MPI_CHECK(MPI_Is_thread_main(&flag));
    CHECK(flag == 0, "Is_thread_main true in thread %d", t);
    for (it = 0; it < NITER; it++) {
        int n = (it % 50 == 49) ? LARGE : SMALL, got = -1;
        for (i = 0; i < n; i++) {
            sb[i] = val(rank, t, it, i);
            rb[i] = -1;
        }
        MPI_CHECK(MPI_Sendrecv(sb, n, MPI_INT, right, t, rb, LARGE, MPI_INT, left, t,
                               MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == t, "thread %d iteration %d: status %d/%d", t,
              it, st.MPI_SOURCE, st.MPI_TAG);
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == n, "thread %d iteration %d: count %d, expected %d", t, it, got, n);
        for (i = 0; i < n; i++)
            CHECK(rb[i] == val(left, t, it, i), "thread %d iteration %d: data[%d] = %d, expected %d",
                  t, it, i, rb[i], val(left, t, it, i));
    }
    free(sb);
    free(rb);
    return NULL;
}

static const char *level_name(int p)
{
    if (p == MPI_THREAD_SINGLE)
        return "MPI_THREAD_SINGLE";
    if (p == MPI_THREAD_FUNNELED)
        return "MPI_THREAD_FUNNELED";
    if (p == MPI_THREAD_SERIALIZED)
        return "MPI_THREAD_SERIALIZED";
    if (p == MPI_THREAD_MULTIPLE)
        return "MPI_THREAD_MULTIPLE";
    return "unknown";
}

int main(int argc, char **argv)
{
    int provided = -1, q = -1, flag = -1, t;
    pthread_t th[NTHREADS];

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    MPI_CHECK(MPI_Query_thread(&q));
    CHECK(q == provided, "Query_thread %d != provided %d", q, provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        char line[128];
        MPI_CHECK(MPI_Finalize());
        snprintf(line, sizeof line, "threads (skipped: provided=%s)", level_name(provided));
        test_ok_rank(rank, line);
        return 0;
    }
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    MPI_CHECK(MPI_Is_thread_main(&flag));
    CHECK(flag == 1, "Is_thread_main false on the main thread");

    for (t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0, "pthread_create");
    for (t = 0; t < NTHREADS; t++)
        CHECK(pthread_join(th[t], NULL) == 0, "pthread_join");

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "threads");
    return 0;
}
