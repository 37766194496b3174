/*
 * ctxids.c -- communicator context ids are recycled and never run out while
 * few communicators are alive.
 *
 * Ranks: any number from 1 to 8.
 *
 * Checks:
 *  - Comm_dup/Comm_free cycles of MPI_COMM_WORLD (20000 with 1 or 2 ranks:
 *    more than a 16-bit id space holds if ids were never reused; 2000
 *    beyond, where every cycle costs more), each dup used for one message
 *    around a ring every 64
 *    cycles; then Comm_split (two colors) / free, Comm_create_group / free,
 *    Comm_idup / Wait / free, and dup of a dup (chains of 8) / free in
 *    reverse order.
 *  - ALIVE (400) duplicates alive at once: all distinct (a message tagged
 *    with the same tag on every one of them is received on its own
 *    communicator only, in reverse order of sending), freed in an
 *    interleaved order (odd ones first), then ALIVE more created into the
 *    freed slots, which again are all distinct.
 *  - Split of a split of a split (nested halves) down to size 1, then freed.
 *  - After all of it, MPI_COMM_WORLD still carries traffic and
 *    Allreduce works on a fresh dup.
 */
#include "check.h"

#define ALIVE 400

static int rank, size;

/* One message around the ring of `c` (rank r sends r + salt to r + 1). */
static void ring(MPI_Comm c, int salt)
{
    int r, n, got = -1;
    MPI_CHECK(MPI_Comm_rank(c, &r));
    MPI_CHECK(MPI_Comm_size(c, &n));
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    int v = r + salt;
    MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, next, 5, &got, 1, MPI_INT, prev, 5, c,
                           MPI_STATUS_IGNORE));
    CHECK(got == prev + salt, "ring got %d, expected %d", got, prev + salt);
}

static void cycles(void)
{
    int n = size <= 2 ? 20000 : 2000;
    for (int i = 0; i < n; i++) {
        MPI_Comm d;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
        if (i % 64 == 0)
            ring(d, i);
        MPI_CHECK(MPI_Comm_free(&d));
        CHECK(d == MPI_COMM_NULL, "Comm_free did not reset the handle");
    }
    for (int i = 0; i < n / 10; i++) {
        MPI_Comm s;
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &s));
        if (i % 64 == 0)
            ring(s, i);
        MPI_CHECK(MPI_Comm_free(&s));
    }
    MPI_Group wg;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    for (int i = 0; i < n / 10; i++) {
        MPI_Comm g;
        MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, wg, i % 3, &g));
        if (i % 64 == 0)
            ring(g, i);
        MPI_CHECK(MPI_Comm_free(&g));
    }
    MPI_CHECK(MPI_Group_free(&wg));
    for (int i = 0; i < n / 10; i++) {
        MPI_Comm d;
        MPI_Request req;
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &d, &req));
        MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (i % 64 == 0)
            ring(d, i);
        MPI_CHECK(MPI_Comm_free(&d));
    }
    for (int i = 0; i < n / 80; i++) {
        MPI_Comm chain[8];
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &chain[0]));
        for (int k = 1; k < 8; k++)
            MPI_CHECK(MPI_Comm_dup(chain[k - 1], &chain[k]));
        ring(chain[7], i);
        for (int k = 7; k >= 0; k--)
            MPI_CHECK(MPI_Comm_free(&chain[k]));
    }
}

/* Each of `cs` is its own communicator: the same tag on all of them, sent
 * in order, received in reverse order, each value on its own. */
static void distinct(MPI_Comm *cs, int n, int salt)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int *vals = malloc(sizeof(int) * (size_t)n);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)n);
    CHECK(vals && reqs, "malloc");
    for (int i = 0; i < n; i++) {
        vals[i] = i * 7 + salt;
        MPI_CHECK(MPI_Isend(&vals[i], 1, MPI_INT, next, 3, cs[i], &reqs[i]));
    }
    for (int i = n - 1; i >= 0; i--) {
        int got = -1;
        MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, prev, 3, cs[i], MPI_STATUS_IGNORE));
        CHECK(got == i * 7 + salt, "communicator %d received %d, expected %d", i, got,
              i * 7 + salt);
    }
    MPI_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
    free(vals);
    free(reqs);
}

static void alive(void)
{
    static MPI_Comm cs[ALIVE];
    for (int i = 0; i < ALIVE; i++)
        MPI_CHECK(MPI_Comm_dup(i % 2 ? cs[i - 1] : MPI_COMM_WORLD, &cs[i]));
    distinct(cs, ALIVE, 1);
    for (int i = 1; i < ALIVE; i += 2)
        MPI_CHECK(MPI_Comm_free(&cs[i]));
    for (int i = 0; i < ALIVE; i += 2)
        MPI_CHECK(MPI_Comm_free(&cs[i]));
    for (int i = 0; i < ALIVE; i++)
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &cs[i]));
    distinct(cs, ALIVE, 2);
    for (int i = 0; i < ALIVE; i++)
        MPI_CHECK(MPI_Comm_free(&cs[i]));
}

static void nested(void)
{
    MPI_Comm cs[16];
    int depth = 0;
    MPI_Comm cur = MPI_COMM_WORLD;
    for (;;) {
        int r, n;
        MPI_CHECK(MPI_Comm_rank(cur, &r));
        MPI_CHECK(MPI_Comm_size(cur, &n));
        if (n == 1)
            break;
        CHECK(depth < 16, "too deep");
        MPI_CHECK(MPI_Comm_split(cur, r < n / 2, r, &cs[depth]));
        cur = cs[depth++];
        ring(cur, depth);
    }
    while (depth > 0)
        MPI_CHECK(MPI_Comm_free(&cs[--depth]));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_errors_return();

    cycles();
    alive();
    nested();

    MPI_Comm d;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    int one = 1, sum = 0;
    MPI_CHECK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, d));
    CHECK(sum == size, "Allreduce on a fresh dup gave %d", sum);
    MPI_CHECK(MPI_Comm_free(&d));
    ring(MPI_COMM_WORLD, 99);

    test_ok("ctxids");
    MPI_Finalize();
    return 0;
}
