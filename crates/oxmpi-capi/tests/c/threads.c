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
 * Then each thread does 100 rounds of non-blocking exchanges with the same
 * neighbours' thread: Irecv of tags 100+t and 200+t, Isend of both, the four
 * requests completed in turn by Waitall, a Waitany loop, a Testsome loop
 * and a Test loop, so the request calls of several threads run at once.
 * Then 200 generalized requests, each freed by the main thread while
 * another thread completes it: the free function runs exactly once each.
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
    /* Non-blocking rounds: the request calls of the threads interleave. */
    for (it = 0; it < NITER / 2; it++) {
        int in[2] = {-1, -1}, out[2], done = 0, idx[4], n, k;
        MPI_Request r[4];
        MPI_Status sts[4];
        out[0] = val(rank, t, it, 1);
        out[1] = val(rank, t, it, 2);
        MPI_CHECK(MPI_Irecv(&in[0], 1, MPI_INT, left, 100 + t, MPI_COMM_WORLD, &r[0]));
        MPI_CHECK(MPI_Irecv(&in[1], 1, MPI_INT, left, 200 + t, MPI_COMM_WORLD, &r[1]));
        MPI_CHECK(MPI_Isend(&out[0], 1, MPI_INT, right, 100 + t, MPI_COMM_WORLD, &r[2]));
        MPI_CHECK(MPI_Isend(&out[1], 1, MPI_INT, right, 200 + t, MPI_COMM_WORLD, &r[3]));
        switch (it % 4) {
        case 0:
            MPI_CHECK(MPI_Waitall(4, r, sts));
            done = 4;
            break;
        case 1:
            while (done < 4) {
                MPI_CHECK(MPI_Waitany(4, r, &k, &st));
                CHECK(k != MPI_UNDEFINED, "thread %d: Waitany found nothing active", t);
                done++;
            }
            break;
        case 2:
            while (done < 4) {
                MPI_CHECK(MPI_Testsome(4, r, &n, idx, sts));
                CHECK(n != MPI_UNDEFINED, "thread %d: Testsome found nothing active", t);
                done += n;
            }
            break;
        default:
            for (k = 0; k < 4; k++) {
                int f = 0;
                while (!f)
                    MPI_CHECK(MPI_Test(&r[k], &f, &st));
                done++;
            }
        }
        CHECK(done == 4, "thread %d round %d: %d completions", t, it, done);
        for (k = 0; k < 4; k++)
            CHECK(r[k] == MPI_REQUEST_NULL, "thread %d round %d: request %d left", t, it, k);
        CHECK(in[0] == val(left, t, it, 1) && in[1] == val(left, t, it, 2),
              "thread %d round %d: got %d %d", t, it, in[0], in[1]);
    }
    free(sb);
    free(rb);
    return NULL;
}

static int greq_query(void *extra, MPI_Status *st)
{
    (void)extra;
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    return MPI_SUCCESS;
}

static int greq_free(void *extra)
{
    __atomic_fetch_add((int *)extra, 1, __ATOMIC_SEQ_CST);
    return MPI_SUCCESS;
}

static int greq_cancel(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

struct greq_race {
    MPI_Request req;
    int go;
};

static void *greq_completer(void *arg)
{
    struct greq_race *x = arg;
    while (!__atomic_load_n(&x->go, __ATOMIC_ACQUIRE)) {
    }
    MPI_CHECK(MPI_Grequest_complete(x->req));
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

    /* MPI_Request_free and MPI_Grequest_complete of one generalized request
     * at once, from two threads: the free function runs exactly once. */
    for (int i = 0; i < 200; i++) {
        int frees = 0;
        struct greq_race x = {MPI_REQUEST_NULL, 0};
        pthread_t c;
        MPI_CHECK(MPI_Grequest_start(greq_query, greq_free, greq_cancel, &frees, &x.req));
        MPI_Request h = x.req;
        CHECK(pthread_create(&c, NULL, greq_completer, &x) == 0, "pthread_create");
        __atomic_store_n(&x.go, 1, __ATOMIC_RELEASE);
        MPI_CHECK(MPI_Request_free(&h));
        CHECK(h == MPI_REQUEST_NULL, "Request_free left the handle");
        CHECK(pthread_join(c, NULL) == 0, "pthread_join");
        CHECK(__atomic_load_n(&frees, __ATOMIC_SEQ_CST) == 1,
              "generalized request %d: free function ran %d times", i, frees);
    }

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "threads");
    return 0;
}
