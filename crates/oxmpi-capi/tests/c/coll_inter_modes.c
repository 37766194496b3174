/*
 * coll_inter_modes.c -- every collective defined on intercommunicators in
 * its blocking, non-blocking and persistent forms, v and w forms included.
 *
 * Ranks: 2 to 9.
 *
 * Intercommunicators of groups of different sizes (MPI_Comm_split of
 * MPI_COMM_WORLD, then MPI_Intercomm_create): the halves, rank 0 against
 * the rest, the last rank against the rest. On each, in each mode (0:
 * MPI_Bcast ..., 1: MPI_Ibcast ... + MPI_Wait, 2: MPI_Bcast_init ... made
 * once per call site and root, then MPI_Start + MPI_Wait in each of three
 * iterations with changing data, MPI_Request_free after them), every
 * element of every result compared with a value computed from the known
 * contributions, and the buffers the call must not write checked
 * untouched:
 *  - Barrier;
 *  - Bcast, Reduce (MPI_SUM on ints, a non-commutative user op in the
 *    remote group's rank order), Gather, Gatherv, Scatter, Scatterv with
 *    the root at the first and at the last rank of either group (MPI_ROOT
 *    at the root, MPI_PROC_NULL in the rest of its group, the root's rank
 *    in the other group); at MPI_PROC_NULL also with null buffers, a zero
 *    count and MPI_BYTE with MPI_SUM, which the call must not look at;
 *  - Allreduce (SUM, the non-commutative op): each group gets the
 *    reduction of the other group's data;
 *  - Allgather, Allgatherv (remote rank r gives r+1 elements, displacements
 *    in reverse rank order with gaps);
 *  - Alltoall, Alltoallv (counts depending on both ends, reversed
 *    displacements with gaps), Alltoallw (MPI_INT and MPI_DOUBLE blocks by
 *    byte displacement);
 *  - Reduce_scatter_block, Reduce_scatter (irregular counts): each group
 *    gets the other group's reduction, scattered by its own counts;
 *  - Scan and Exscan (all three forms) fail with MPI_ERR_COMM;
 *  - strict mode only (MPICH 5.0.2 fails them): the non-blocking and
 *    persistent Bcast from a root other than local rank 0, Scan_init and
 *    Exscan_init on an intercommunicator;
 *  - non-blocking only: an Ibcast, an Iallreduce, an Ibarrier and an
 *    Iallgather outstanding together, completed by one Waitall.
 */
#include "check.h"

static int wrank, wsize;
static int mode; /* 0 blocking, 1 non-blocking, 2 persistent */
static MPI_Request preq = MPI_REQUEST_NULL;
#define ITERS 3

/* One call of collective B / I / P in this mode, iteration `it`: the
 * persistent request is made at iteration 0 (the buffers stay the same
 * through the iterations) and freed by DONE() after the last. */
#define COLL(it, B, I, P, ...)                                                    \
    do {                                                                          \
        if (mode == 0) {                                                          \
            MPI_CHECK(B(__VA_ARGS__));                                            \
        } else if (mode == 1) {                                                   \
            MPI_Request r_ = MPI_REQUEST_NULL;                                    \
            MPI_CHECK(I(__VA_ARGS__, &r_));                                       \
            MPI_CHECK(MPI_Wait(&r_, MPI_STATUS_IGNORE));                          \
            CHECK(r_ == MPI_REQUEST_NULL, "%s: request not freed by Wait", #I);   \
        } else {                                                                  \
            if ((it) == 0)                                                        \
                MPI_CHECK(P(__VA_ARGS__, MPI_INFO_NULL, &preq));                  \
            MPI_CHECK(MPI_Start(&preq));                                          \
            MPI_CHECK(MPI_Wait(&preq, MPI_STATUS_IGNORE));                        \
            CHECK(preq != MPI_REQUEST_NULL, "%s: persistent request freed", #P);  \
        }                                                                         \
    } while (0)
#define DONE()                                                                    \
    do {                                                                          \
        if (mode == 2)                                                            \
            MPI_CHECK(MPI_Request_free(&preq));                                   \
    } while (0)

static const char *what;
static int color, rc, lrank, lsize, rsize;
static MPI_Comm inter;

/* The contribution of rank r of group g, element i, iteration it. */
static int val(int g, int r, int i, int it) { return g * 100000 + r * 1000 + i * 7 + it * 13 + 1; }

/* inout = in "followed by" inout, as decimal digits. */
static void concat(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    long long *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        long long p = 1;
        while (p <= b[i])
            p *= 10;
        b[i] = a[i] * p + b[i];
    }
}
/* The concatenation of (r + 1 + it) for r in 0..n-1, in rank order. */
static long long concat_of(int n, int it)
{
    long long v = 0;
    for (int r = 0; r < n; r++) {
        long long x = r + 1 + it, p = 1;
        while (p <= x)
            p *= 10;
        v = v * p + x;
    }
    return v;
}

/* The root argument of this process for a root at local rank `at` of
 * group `g`. */
static int root_of(int g, int at)
{
    if (g == color)
        return lrank == at ? MPI_ROOT : MPI_PROC_NULL;
    return at;
}

static void barrier(void)
{
    for (int it = 0; it < ITERS; it++)
        COLL(it, MPI_Barrier, MPI_Ibarrier, MPI_Barrier_init, inter);
    DONE();
}

static void bcast(int g, int at)
{
    int root = root_of(g, at);
    int buf[5];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 5; i++)
            buf[i] = root == MPI_ROOT ? val(g, at, i, it) : -1;
        COLL(it, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, buf, 5, MPI_INT, root, inter);
        for (int i = 0; i < 5; i++) {
            int want = root == MPI_PROC_NULL ? -1 : val(g, at, i, it);
            CHECK(buf[i] == want, "%s mode %d: Bcast from %d:%d [%d] = %d, want %d", what, mode,
                  g, at, i, buf[i], want);
        }
    }
    DONE();
    if (root == MPI_PROC_NULL) /* nothing of the rest is looked at */
        for (int it = 0; it < ITERS; it++)
            COLL(it, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, NULL, 0, MPI_BYTE, root, inter);
    else
        for (int it = 0; it < ITERS; it++)
            COLL(it, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, buf, 0, MPI_INT, root, inter);
    DONE();
}

static void reduce(int g, int at, MPI_Op cat)
{
    int root = root_of(g, at);
    int in[4], out[4];
    long long cin, cout;
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 4; i++) {
            in[i] = val(color, lrank, i, it);
            out[i] = -1;
        }
        COLL(it, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, in, out, 4, MPI_INT, MPI_SUM, root,
             inter);
        for (int i = 0; i < 4; i++) {
            int want = -1;
            if (root == MPI_ROOT)
                for (int r = (want = 0); r < rsize; r++)
                    want += val(rc, r, i, it);
            CHECK(out[i] == want, "%s mode %d: Reduce SUM to %d:%d [%d] = %d, want %d", what,
                  mode, g, at, i, out[i], want);
        }
    }
    DONE();
    for (int it = 0; it < ITERS; it++) {
        cin = lrank + 1 + it;
        cout = -1;
        COLL(it, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, &cin, &cout, 1, MPI_LONG_LONG, cat,
             root, inter);
        long long want = root == MPI_ROOT ? concat_of(rsize, it) : -1;
        CHECK(cout == want, "%s mode %d: Reduce non-commutative to %d:%d = %lld, want %lld", what,
              mode, g, at, cout, want);
    }
    DONE();
    /* MPI_PROC_NULL: buffers, count, datatype and op are not looked at. */
    if (root == MPI_PROC_NULL) {
        for (int it = 0; it < ITERS; it++)
            COLL(it, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, NULL, NULL, 0, MPI_BYTE, MPI_SUM,
                 root, inter);
        DONE();
    } else {
        for (int it = 0; it < ITERS; it++)
            COLL(it, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, in, out, 0, MPI_INT, MPI_SUM, root,
                 inter);
        DONE();
    }
}

static void allreduce(MPI_Op cat)
{
    int in[6], out[6];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 6; i++) {
            in[i] = val(color, lrank, i, it);
            out[i] = -1;
        }
        COLL(it, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, in, out, 6, MPI_INT, MPI_SUM,
             inter);
        for (int i = 0; i < 6; i++) {
            int want = 0;
            for (int r = 0; r < rsize; r++)
                want += val(rc, r, i, it);
            CHECK(out[i] == want, "%s mode %d: Allreduce [%d] = %d, want %d", what, mode, i,
                  out[i], want);
        }
    }
    DONE();
    long long cin, cout;
    for (int it = 0; it < ITERS; it++) {
        cin = lrank + 1 + it;
        cout = -1;
        COLL(it, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, &cin, &cout, 1, MPI_LONG_LONG,
             cat, inter);
        CHECK(cout == concat_of(rsize, it), "%s mode %d: Allreduce non-commutative %lld, want %lld",
              what, mode, cout, concat_of(rsize, it));
    }
    DONE();
}

/* Gather: each process sends 2 ints; Gatherv: remote rank r sends r+1
 * ints, placed at displacement rdispl(r) (reverse rank order, gaps). */
static int vdispl(int r, int n) { return (n - 1 - r) * (n + 2); }

static void gather(int g, int at)
{
    int root = root_of(g, at);
    int send[8], recv[80];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 8; i++)
            send[i] = val(color, lrank, i, it);
        for (int i = 0; i < 80; i++)
            recv[i] = -1;
        COLL(it, MPI_Gather, MPI_Igather, MPI_Gather_init, send, 2, MPI_INT, recv, 2, MPI_INT,
             root, inter);
        for (int i = 0; i < 80; i++) {
            int want = -1;
            if (root == MPI_ROOT && i < 2 * rsize)
                want = val(rc, i / 2, i % 2, it);
            CHECK(recv[i] == want, "%s mode %d: Gather to %d:%d [%d] = %d, want %d", what, mode,
                  g, at, i, recv[i], want);
        }
    }
    DONE();
    int counts[8], displs[8];
    for (int r = 0; r < rsize; r++) {
        counts[r] = r + 1;
        displs[r] = vdispl(r, rsize);
    }
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 8; i++)
            send[i] = val(color, lrank, i, it);
        for (int i = 0; i < 80; i++)
            recv[i] = -1;
        COLL(it, MPI_Gatherv, MPI_Igatherv, MPI_Gatherv_init, send, lrank + 1, MPI_INT, recv,
             counts, displs, MPI_INT, root, inter);
        for (int i = 0; i < 80; i++) {
            int want = -1;
            if (root == MPI_ROOT)
                for (int r = 0; r < rsize; r++)
                    if (i >= displs[r] && i < displs[r] + counts[r])
                        want = val(rc, r, i - displs[r], it);
            CHECK(recv[i] == want, "%s mode %d: Gatherv to %d:%d [%d] = %d, want %d", what, mode,
                  g, at, i, recv[i], want);
        }
    }
    DONE();
}

static void scatter(int g, int at)
{
    int root = root_of(g, at);
    int send[80], recv[10];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 80; i++)
            send[i] = root == MPI_ROOT ? val(color, i / 3, i % 3, it) : -2;
        for (int i = 0; i < 10; i++)
            recv[i] = -1;
        COLL(it, MPI_Scatter, MPI_Iscatter, MPI_Scatter_init, send, 3, MPI_INT, recv, 3, MPI_INT,
             root, inter);
        for (int i = 0; i < 10; i++) {
            int want = root >= 0 && i < 3 ? val(rc, lrank, i, it) : -1;
            CHECK(recv[i] == want, "%s mode %d: Scatter from %d:%d [%d] = %d, want %d", what,
                  mode, g, at, i, recv[i], want);
        }
    }
    DONE();
    int counts[8], displs[8];
    for (int r = 0; r < rsize; r++) {
        counts[r] = r + 1;
        displs[r] = vdispl(r, rsize);
    }
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 80; i++)
            send[i] = -2;
        if (root == MPI_ROOT)
            for (int r = 0; r < rsize; r++)
                for (int i = 0; i < counts[r]; i++)
                    send[displs[r] + i] = val(color, r, i, it);
        for (int i = 0; i < 10; i++)
            recv[i] = -1;
        COLL(it, MPI_Scatterv, MPI_Iscatterv, MPI_Scatterv_init, send, counts, displs, MPI_INT,
             recv, lrank + 1, MPI_INT, root, inter);
        for (int i = 0; i < 10; i++) {
            int want = root >= 0 && i <= lrank ? val(rc, lrank, i, it) : -1;
            CHECK(recv[i] == want, "%s mode %d: Scatterv from %d:%d [%d] = %d, want %d", what,
                  mode, g, at, i, recv[i], want);
        }
    }
    DONE();
}

static void allgather(void)
{
    int send[8], recv[80];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 8; i++)
            send[i] = val(color, lrank, i, it);
        for (int i = 0; i < 80; i++)
            recv[i] = -1;
        COLL(it, MPI_Allgather, MPI_Iallgather, MPI_Allgather_init, send, 2, MPI_INT, recv, 2,
             MPI_INT, inter);
        for (int i = 0; i < 80; i++) {
            int want = i < 2 * rsize ? val(rc, i / 2, i % 2, it) : -1;
            CHECK(recv[i] == want, "%s mode %d: Allgather [%d] = %d, want %d", what, mode, i,
                  recv[i], want);
        }
    }
    DONE();
    int counts[8], displs[8];
    for (int r = 0; r < rsize; r++) {
        counts[r] = r + 1;
        displs[r] = vdispl(r, rsize);
    }
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 8; i++)
            send[i] = val(color, lrank, i, it);
        for (int i = 0; i < 80; i++)
            recv[i] = -1;
        COLL(it, MPI_Allgatherv, MPI_Iallgatherv, MPI_Allgatherv_init, send, lrank + 1, MPI_INT,
             recv, counts, displs, MPI_INT, inter);
        for (int i = 0; i < 80; i++) {
            int want = -1;
            for (int r = 0; r < rsize; r++)
                if (i >= displs[r] && i < displs[r] + counts[r])
                    want = val(rc, r, i - displs[r], it);
            CHECK(recv[i] == want, "%s mode %d: Allgatherv [%d] = %d, want %d", what, mode, i,
                  recv[i], want);
        }
    }
    DONE();
}

/* Alltoallv: local rank l of one group and local rank r of the other
 * trade (l + r) % 3 + 1 elements both ways. */
static int a2acount(int l, int r) { return (l + r) % 3 + 1; }

static void alltoall(void)
{
    int send[80], recv[80];
    for (int it = 0; it < ITERS; it++) {
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < 2; i++)
                send[2 * r + i] = val(color, lrank, 10 * r + i, it);
        for (int i = 0; i < 80; i++)
            recv[i] = -1;
        COLL(it, MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init, send, 2, MPI_INT, recv, 2,
             MPI_INT, inter);
        for (int i = 0; i < 80; i++) {
            int want = i < 2 * rsize ? val(rc, i / 2, 10 * lrank + i % 2, it) : -1;
            CHECK(recv[i] == want, "%s mode %d: Alltoall [%d] = %d, want %d", what, mode, i,
                  recv[i], want);
        }
    }
    DONE();
    int sc[8], sd[8], rcn[8], rd[8];
    for (int r = 0; r < rsize; r++) {
        sc[r] = rcn[r] = a2acount(lrank, r);
        sd[r] = rd[r] = (rsize - 1 - r) * 5;
    }
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < 80; i++)
            send[i] = recv[i] = -1;
        for (int r = 0; r < rsize; r++)
            for (int i = 0; i < sc[r]; i++)
                send[sd[r] + i] = val(color, lrank, 10 * r + i, it);
        COLL(it, MPI_Alltoallv, MPI_Ialltoallv, MPI_Alltoallv_init, send, sc, sd, MPI_INT, recv,
             rcn, rd, MPI_INT, inter);
        for (int i = 0; i < 80; i++) {
            int want = -1;
            for (int r = 0; r < rsize; r++)
                if (i >= rd[r] && i < rd[r] + rcn[r])
                    want = val(rc, r, 10 * lrank + i - rd[r], it);
            CHECK(recv[i] == want, "%s mode %d: Alltoallv [%d] = %d, want %d", what, mode, i,
                  recv[i], want);
        }
    }
    DONE();
    /* Alltoallw: between local rank l of one group and local rank r of
     * the other, 2 ints ((l + r) even) or 1 double ((l + r) odd) both ways,
     * at byte displacement 16 * (rsize - 1 - r) (reversed, with gaps). */
    char sw[8 * 16], rw[8 * 16];
    int xc[8], wd[8];
    MPI_Datatype xt[8];
    for (int r = 0; r < rsize; r++) {
        xc[r] = (lrank + r) % 2 ? 1 : 2;
        xt[r] = (lrank + r) % 2 ? MPI_DOUBLE : MPI_INT;
        wd[r] = 16 * (rsize - 1 - r);
    }
    for (int it = 0; it < ITERS; it++) {
        memset(sw, 0, sizeof sw);
        memset(rw, 0xff, sizeof rw);
        for (int r = 0; r < rsize; r++) {
            if (xt[r] == MPI_INT) {
                int v[2] = {val(color, lrank, 10 * r, it), val(color, lrank, 10 * r + 1, it)};
                memcpy(sw + wd[r], v, sizeof v);
            } else {
                double d = val(color, lrank, 10 * r, it) + 0.5;
                memcpy(sw + wd[r], &d, sizeof d);
            }
        }
        COLL(it, MPI_Alltoallw, MPI_Ialltoallw, MPI_Alltoallw_init, sw, xc, wd, xt, rw, xc, wd,
             xt, inter);
        for (int r = 0; r < rsize; r++) {
            if (xt[r] == MPI_INT) {
                int v[2];
                memcpy(v, rw + wd[r], sizeof v);
                for (int i = 0; i < 2; i++)
                    CHECK(v[i] == val(rc, r, 10 * lrank + i, it),
                          "%s mode %d: Alltoallw int from %d [%d] = %d", what, mode, r, i, v[i]);
                for (int i = 8; i < 16; i++)
                    CHECK((unsigned char)rw[wd[r] + i] == 0xff,
                          "%s mode %d: Alltoallw wrote a gap", what, mode);
            } else {
                double d;
                memcpy(&d, rw + wd[r], sizeof d);
                CHECK(d == val(rc, r, 10 * lrank, it) + 0.5,
                      "%s mode %d: Alltoallw double from %d = %g", what, mode, r, d);
                for (int i = 8; i < 16; i++)
                    CHECK((unsigned char)rw[wd[r] + i] == 0xff,
                          "%s mode %d: Alltoallw wrote a gap", what, mode);
            }
        }
    }
    DONE();
}

static void reduce_scatter(void)
{
    /* Both groups reduce lsize * rsize * 2 elements. */
    int total = lsize * rsize * 2;
    int *in = malloc(sizeof(int) * total), out[40];
    int block = 2 * rsize;
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < total; i++)
            in[i] = val(color, lrank, i, it);
        for (int i = 0; i < 40; i++)
            out[i] = -1;
        COLL(it, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
             MPI_Reduce_scatter_block_init, in, out, block, MPI_INT, MPI_SUM, inter);
        for (int i = 0; i < 40; i++) {
            int want = -1;
            if (i < block)
                for (int r = (want = 0); r < rsize; r++)
                    want += val(rc, r, lrank * block + i, it);
            CHECK(out[i] == want, "%s mode %d: Reduce_scatter_block [%d] = %d, want %d", what,
                  mode, i, out[i], want);
        }
    }
    DONE();
    int counts[8], off = 0, mine = 0;
    for (int l = 0; l < lsize; l++)
        counts[l] = block;
    if (lsize > 1) {
        counts[0] += rsize;
        counts[lsize - 1] -= rsize;
    }
    for (int l = 0; l < lrank; l++)
        off += counts[l];
    mine = counts[lrank];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < total; i++)
            in[i] = val(color, lrank, i, it);
        for (int i = 0; i < 40; i++)
            out[i] = -1;
        COLL(it, MPI_Reduce_scatter, MPI_Ireduce_scatter, MPI_Reduce_scatter_init, in, out, counts,
             MPI_INT, MPI_SUM, inter);
        for (int i = 0; i < 40; i++) {
            int want = -1;
            if (i < mine)
                for (int r = (want = 0); r < rsize; r++)
                    want += val(rc, r, off + i, it);
            CHECK(out[i] == want, "%s mode %d: Reduce_scatter [%d] = %d, want %d", what, mode, i,
                  out[i], want);
        }
    }
    DONE();
    free(in);
}

/* Scan and Exscan are not defined on intercommunicators. */
static void scans(void)
{
    int in = 1, out = 0;
    MPI_Request r = MPI_REQUEST_NULL;
    CHECK_CLASS(MPI_Scan(&in, &out, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM);
    CHECK_CLASS(MPI_Exscan(&in, &out, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM);
    CHECK_CLASS(MPI_Iscan(&in, &out, 1, MPI_INT, MPI_SUM, inter, &r), MPI_ERR_COMM);
    CHECK_CLASS(MPI_Iexscan(&in, &out, 1, MPI_INT, MPI_SUM, inter, &r), MPI_ERR_COMM);
    /* MPICH 5.0.2 fails an assertion there: strict mode only. */
    if (strict_mode()) {
        CHECK_CLASS(MPI_Scan_init(&in, &out, 1, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &r),
                    MPI_ERR_COMM);
        CHECK_CLASS(MPI_Exscan_init(&in, &out, 1, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &r),
                    MPI_ERR_COMM);
    }
}

/* Four non-blocking collectives outstanding at once. */
static void outstanding(void)
{
    MPI_Request rq[4];
    int b[3], in[3], out[3], ag[16];
    int g = 0, root = root_of(g, 0);
    for (int i = 0; i < 3; i++) {
        b[i] = root == MPI_ROOT ? val(g, 0, i, 9) : -1;
        in[i] = val(color, lrank, i, 9);
        out[i] = -1;
    }
    for (int i = 0; i < 16; i++)
        ag[i] = -1;
    MPI_CHECK(MPI_Ibcast(b, 3, MPI_INT, root, inter, &rq[0]));
    MPI_CHECK(MPI_Iallreduce(in, out, 3, MPI_INT, MPI_SUM, inter, &rq[1]));
    MPI_CHECK(MPI_Ibarrier(inter, &rq[2]));
    MPI_CHECK(MPI_Iallgather(&in[0], 1, MPI_INT, ag, 1, MPI_INT, inter, &rq[3]));
    MPI_CHECK(MPI_Waitall(4, rq, MPI_STATUSES_IGNORE));
    for (int i = 0; i < 3; i++) {
        int want = root == MPI_PROC_NULL ? -1 : val(g, 0, i, 9);
        CHECK(b[i] == want, "%s: outstanding Ibcast [%d] = %d, want %d", what, i, b[i], want);
        want = 0;
        for (int r = 0; r < rsize; r++)
            want += val(rc, r, i, 9);
        CHECK(out[i] == want, "%s: outstanding Iallreduce [%d] = %d, want %d", what, i, out[i],
              want);
    }
    for (int r = 0; r < rsize; r++)
        CHECK(ag[r] == val(rc, r, 0, 9), "%s: outstanding Iallgather [%d] = %d", what, r, ag[r]);
}

static void test_inter(int c, const char *name)
{
    MPI_Comm local;
    color = c;
    rc = !c;
    what = name;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &local));
    int remote_leader = -1;
    int *colors = malloc(sizeof(int) * wsize);
    MPI_CHECK(MPI_Allgather(&color, 1, MPI_INT, colors, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < wsize; r++)
        if (colors[r] != color) {
            remote_leader = r;
            break;
        }
    free(colors);
    CHECK(remote_leader >= 0, "%s: one group only", what);
    MPI_CHECK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, remote_leader, 18, &inter));
    MPI_CHECK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(inter, &lrank));
    MPI_CHECK(MPI_Comm_size(inter, &lsize));
    MPI_CHECK(MPI_Comm_remote_size(inter, &rsize));
    CHECK(lsize <= 8 && rsize <= 8, "groups of at most 8");

    MPI_Op cat;
    MPI_CHECK(MPI_Op_create(concat, 0, &cat));
    for (mode = 0; mode < 3; mode++) {
        barrier();
        for (int g = 0; g < 2; g++) {
            int gsize = g == color ? lsize : rsize;
            for (int which = 0; which < 2; which++) {
                int at = which ? gsize - 1 : 0;
                if (which && at == 0)
                    continue;
                /* MPICH 5.0.2's MPI_Ibcast and MPI_Bcast_init on an
                 * intercommunicator deliver nothing from a root other
                 * than local rank 0: strict mode only. */
                if (mode == 0 || at == 0 || strict_mode())
                    bcast(g, at);
                reduce(g, at, cat);
                gather(g, at);
                scatter(g, at);
            }
        }
        allreduce(cat);
        allgather();
        alltoall();
        reduce_scatter();
    }
    outstanding();
    /* Open MPI 5.0 crashes in MPI_Exscan on an intercommunicator (it calls
     * a null function pointer). */
    if (!lenient_mpi())
        scans();
    MPI_CHECK(MPI_Op_free(&cat));
    MPI_CHECK(MPI_Barrier(inter));
    MPI_CHECK(MPI_Comm_free(&inter));
    MPI_CHECK(MPI_Comm_free(&local));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    CHECK(wsize >= 2 && wsize <= 9, "needs 2 to 9 ranks");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    test_inter(wrank >= wsize / 2, "halves");
    test_inter(wrank != 0, "rank 0 against the rest");
    test_inter(wrank == wsize - 1, "the last rank against the rest");
    MPI_Barrier(MPI_COMM_WORLD);
    test_ok("coll_inter_modes");
    MPI_Finalize();
    return 0;
}
