/*
 * coll_modes.h -- the collective checks shared by coll_v.c (blocking),
 * nbc.c (non-blocking) and coll_persistent.c (persistent): every
 * collective of MPI-4.1 on an intracommunicator, run in the program's
 * mode, three iterations with changing data, each result compared with a
 * serial reference computed from the known contributions of every rank.
 *
 * Mode 0 calls the blocking form (MPI_Bcast ...), mode 1 the non-blocking
 * one (MPI_Ibcast ..., then MPI_Wait), mode 2 the persistent one
 * (MPI_Bcast_init ... once per call site and root, then MPI_Start and
 * MPI_Wait in each iteration; the buffers and count arrays stay the same,
 * their contents change; freed at the end with MPI_Request_free).
 *
 * Covered: Barrier; Bcast (MPI_INT from every root, a strided vector type
 * whose gaps must stay untouched, zero count); Reduce (SUM on MPI_INT and
 * MAX on MPI_DOUBLE from every root, MPI_IN_PLACE at the root);
 * Allreduce (SUM, MPI_IN_PLACE, zero count, a non-commutative user op: 2x2
 * matrix product on a contiguous type of 4 unsigned ints, which must
 * combine in rank order); Gather, Gatherv (counts r+1, displacements in
 * reverse rank order with gaps, MPI_IN_PLACE at the root), Scatter,
 * Scatterv (likewise); Allgather, Allgatherv (also MPI_IN_PLACE);
 * Alltoall (also MPI_IN_PLACE), Alltoallv, Alltoallw (MPI_INT and
 * MPI_DOUBLE blocks by byte displacement); Reduce_scatter_block,
 * Reduce_scatter (counts r+1, also MPI_IN_PLACE); Scan and Exscan (SUM,
 * MPI_IN_PLACE, the non-commutative op).
 */
#ifndef COLL_MODES_H
#define COLL_MODES_H

#include "check.h"

static int mode; /* 0 blocking, 1 non-blocking, 2 persistent */
#define NKEYS 1024
static MPI_Request preq[NKEYS];

#define COLL(key, B, I, P, ...)                                                   \
    do {                                                                          \
        if (mode == 0) {                                                          \
            MPI_CHECK(B(__VA_ARGS__));                                            \
        } else if (mode == 1) {                                                   \
            MPI_Request r_ = MPI_REQUEST_NULL;                                    \
            MPI_CHECK(I(__VA_ARGS__, &r_));                                       \
            MPI_CHECK(MPI_Wait(&r_, MPI_STATUS_IGNORE));                          \
            CHECK(r_ == MPI_REQUEST_NULL, "%s: request not freed by Wait", #I);   \
        } else {                                                                  \
            int k_ = (key);                                                       \
            CHECK(k_ >= 0 && k_ < NKEYS, "key %d", k_);                           \
            if (preq[k_] == MPI_REQUEST_NULL)                                     \
                MPI_CHECK(P(__VA_ARGS__, MPI_INFO_NULL, &preq[k_]));              \
            MPI_CHECK(MPI_Start(&preq[k_]));                                      \
            MPI_CHECK(MPI_Wait(&preq[k_], MPI_STATUS_IGNORE));                    \
            CHECK(preq[k_] != MPI_REQUEST_NULL, "%s: persistent request freed", #P); \
        }                                                                         \
    } while (0)

static int me, np;
#define ITERS 3
#define N 6

static int val(int r, int i, int it) { return r * 1000 + i * 7 + it * 13 + 1; }

/* The non-commutative operation: 2x2 matrices of unsigned, inout = in * inout. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    unsigned *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        unsigned c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                         a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}
static void mat_of(unsigned *m, int r, int i, int it)
{
    m[0] = (unsigned)(r + i + it + 2);
    m[1] = 1;
    m[2] = (unsigned)(r + 1);
    m[3] = 0;
}
/* The product of the matrices of ranks lo..hi-1 (element i). */
static void mat_prod(unsigned *out, int lo, int hi, int i, int it)
{
    unsigned acc[4] = {1, 0, 0, 1}, m[4];
    for (int r = lo; r < hi; r++) {
        int one = 1;
        mat_of(m, r, i, it);
        /* acc = acc * m: matmul computes inout = in * inout. */
        matmul(acc, m, &one, NULL);
        memcpy(acc, m, sizeof acc);
    }
    memcpy(out, acc, sizeof acc);
}

static MPI_Datatype mat_t, vec_t;
static MPI_Op matop;

static void t_barrier(void)
{
    for (int it = 0; it < ITERS; it++)
        COLL(0, MPI_Barrier, MPI_Ibarrier, MPI_Barrier_init, MPI_COMM_WORLD);
}

static void t_bcast(void)
{
    int buf[N], vb[3 * 2 * 2];
    for (int it = 0; it < ITERS; it++) {
        for (int root = 0; root < np; root++) {
            for (int i = 0; i < N; i++)
                buf[i] = me == root ? val(root, i, it) : -1;
            COLL(10 + root, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, buf, N, MPI_INT, root, MPI_COMM_WORLD);
            for (int i = 0; i < N; i++)
                CHECK(buf[i] == val(root, i, it), "bcast root %d [%d] = %d", root, i, buf[i]);
            /* 3 vectors of 2 ints at stride 2 (extent 4 ints): even slots, gaps untouched */
            for (int i = 0; i < 12; i++)
                vb[i] = me == root ? val(root, i, it) : -5;
            COLL(20 + root, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, vb, 3, vec_t, root, MPI_COMM_WORLD);
            for (int i = 0; i < 12; i++) {
                int want = (i % 2 == 0 || me == root) ? val(root, i, it) : -5;
                CHECK(vb[i] == want, "vector bcast root %d [%d] = %d want %d", root, i, vb[i], want);
            }
        }
        COLL(30, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, NULL, 0, MPI_INT, 0, MPI_COMM_WORLD);
    }
}

static void t_reduce(void)
{
    int s[N], r[N];
    double ds[N], dr[N];
    for (int it = 0; it < ITERS; it++) {
        for (int root = 0; root < np; root++) {
            for (int i = 0; i < N; i++) {
                s[i] = val(me, i, it);
                r[i] = -1;
                ds[i] = val(me, i, it) * (i % 2 ? 1.0 : -1.0);
            }
            COLL(40 + root, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, s, r, N, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
            COLL(50 + root, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, ds, dr, N, MPI_DOUBLE, MPI_MAX, root, MPI_COMM_WORLD);
            if (me == root)
                for (int i = 0; i < N; i++) {
                    int want = 0;
                    double dmax = -1e300;
                    for (int q = 0; q < np; q++) {
                        double d = val(q, i, it) * (i % 2 ? 1.0 : -1.0);
                        want += val(q, i, it);
                        dmax = d > dmax ? d : dmax;
                    }
                    CHECK(r[i] == want, "reduce root %d [%d] = %d want %d", root, i, r[i], want);
                    CHECK(dr[i] == dmax, "reduce max root %d [%d]", root, i);
                }
            /* in place at the root */
            for (int i = 0; i < N; i++)
                r[i] = s[i] = val(me, i, it) * 2;
            COLL(60 + root, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, me == root ? MPI_IN_PLACE : s, r, N, MPI_INT,
                 MPI_SUM, root, MPI_COMM_WORLD);
            if (me == root)
                for (int i = 0; i < N; i++) {
                    int want = 0;
                    for (int q = 0; q < np; q++)
                        want += val(q, i, it) * 2;
                    CHECK(r[i] == want, "in-place reduce root %d [%d] = %d want %d", root, i, r[i], want);
                }
        }
    }
}

static void t_allreduce(void)
{
    int s[N], r[N];
    unsigned ms[N * 4], mr[N * 4], want[4];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N; i++) {
            s[i] = val(me, i, it);
            r[i] = -1;
        }
        COLL(70, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, s, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) {
            int w = 0;
            for (int q = 0; q < np; q++)
                w += val(q, i, it);
            CHECK(r[i] == w, "allreduce [%d] = %d want %d", i, r[i], w);
            r[i] = val(me, i, it) + 1;
        }
        COLL(71, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, MPI_IN_PLACE, r, N, MPI_INT, MPI_SUM,
             MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) {
            int w = 0;
            for (int q = 0; q < np; q++)
                w += val(q, i, it) + 1;
            CHECK(r[i] == w, "in-place allreduce [%d] = %d want %d", i, r[i], w);
        }
        COLL(72, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, s, r, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            mat_of(ms + 4 * i, me, i, it);
        COLL(73, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, ms, mr, N, mat_t, matop, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) {
            mat_prod(want, 0, np, i, it);
            CHECK(memcmp(want, mr + 4 * i, sizeof want) == 0, "non-commutative allreduce [%d]", i);
        }
    }
}

/* gatherv/scatterv layout: rank r's block of r+1 ints at displacement
 * disp[r], the blocks in reverse rank order with a gap of one. */
static int vcount[64], vdisp[64], vtotal;
static void vlayout(void)
{
    int at = 0;
    for (int r = np - 1; r >= 0; r--) {
        vcount[r] = r + 1;
        vdisp[r] = at;
        at += r + 2;
    }
    vtotal = at;
}

static void t_gather_scatter(void)
{
    int s[N + 8], big[64 * N + 64 * 10], r[N + 8];
    for (int it = 0; it < ITERS; it++) {
        for (int root = 0; root < np; root++) {
            for (int i = 0; i < N + 8; i++)
                s[i] = val(me, i, it);
            for (int i = 0; i < np * N; i++)
                big[i] = -1;
            COLL(80 + root, MPI_Gather, MPI_Igather, MPI_Gather_init, s, N, MPI_INT, big, N, MPI_INT, root,
                 MPI_COMM_WORLD);
            if (me == root)
                for (int q = 0; q < np; q++)
                    for (int i = 0; i < N; i++)
                        CHECK(big[q * N + i] == val(q, i, it), "gather root %d from %d [%d]", root, q, i);
            /* in place at the root */
            for (int i = 0; i < np * N; i++)
                big[i] = me == root && i / N == root ? val(root, i % N, it) : -1;
            COLL(90 + root, MPI_Gather, MPI_Igather, MPI_Gather_init, me == root ? MPI_IN_PLACE : s, N, MPI_INT, big,
                 N, MPI_INT, root, MPI_COMM_WORLD);
            if (me == root)
                for (int q = 0; q < np; q++)
                    for (int i = 0; i < N; i++)
                        CHECK(big[q * N + i] == val(q, i, it), "in-place gather root %d from %d [%d]", root, q, i);
            /* gatherv */
            for (int i = 0; i < vtotal; i++)
                big[i] = -7;
            COLL(100 + root, MPI_Gatherv, MPI_Igatherv, MPI_Gatherv_init, s, me + 1, MPI_INT, big, vcount, vdisp,
                 MPI_INT, root, MPI_COMM_WORLD);
            if (me == root)
                for (int q = 0; q < np; q++) {
                    for (int i = 0; i < q + 1; i++)
                        CHECK(big[vdisp[q] + i] == val(q, i, it), "gatherv root %d from %d [%d]", root, q, i);
                    CHECK(big[vdisp[q] + q + 1] == -7, "gatherv gap after %d", q);
                }
            /* scatter */
            if (me == root)
                for (int q = 0; q < np; q++)
                    for (int i = 0; i < N; i++)
                        big[q * N + i] = val(q, i, it) + root;
            for (int i = 0; i < N; i++)
                r[i] = -1;
            COLL(110 + root, MPI_Scatter, MPI_Iscatter, MPI_Scatter_init, big, N, MPI_INT, r, N, MPI_INT, root,
                 MPI_COMM_WORLD);
            for (int i = 0; i < N; i++)
                CHECK(r[i] == val(me, i, it) + root, "scatter root %d [%d] = %d", root, i, r[i]);
            COLL(120 + root, MPI_Scatter, MPI_Iscatter, MPI_Scatter_init, big, N, MPI_INT,
                 me == root ? MPI_IN_PLACE : (void *)r, N, MPI_INT, root, MPI_COMM_WORLD);
            for (int i = 0; i < N && me != root; i++)
                CHECK(r[i] == val(me, i, it) + root, "in-place scatter root %d [%d]", root, i);
            /* scatterv */
            if (me == root)
                for (int q = 0; q < np; q++)
                    for (int i = 0; i < q + 1; i++)
                        big[vdisp[q] + i] = val(q, i, it) - root;
            for (int i = 0; i < N + 8; i++)
                r[i] = -3;
            COLL(130 + root, MPI_Scatterv, MPI_Iscatterv, MPI_Scatterv_init, big, vcount, vdisp, MPI_INT, r, me + 1,
                 MPI_INT, root, MPI_COMM_WORLD);
            for (int i = 0; i < me + 1; i++)
                CHECK(r[i] == val(me, i, it) - root, "scatterv root %d [%d] = %d", root, i, r[i]);
            CHECK(r[me + 1] == -3, "scatterv wrote past its block");
        }
    }
}

static void t_allgather(void)
{
    int s[N + 8], big[64 * N + 64 * 10];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N + 8; i++)
            s[i] = val(me, i, it);
        for (int i = 0; i < np * N; i++)
            big[i] = -1;
        COLL(140, MPI_Allgather, MPI_Iallgather, MPI_Allgather_init, s, N, MPI_INT, big, N, MPI_INT, MPI_COMM_WORLD);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < N; i++)
                CHECK(big[q * N + i] == val(q, i, it), "allgather from %d [%d]", q, i);
        for (int i = 0; i < np * N; i++)
            big[i] = i / N == me ? val(me, i % N, it) + 5 : -1;
        COLL(141, MPI_Allgather, MPI_Iallgather, MPI_Allgather_init, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big, N,
             MPI_INT, MPI_COMM_WORLD);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < N; i++)
                CHECK(big[q * N + i] == val(q, i, it) + 5, "in-place allgather from %d [%d]", q, i);
        for (int i = 0; i < vtotal; i++)
            big[i] = -7;
        COLL(142, MPI_Allgatherv, MPI_Iallgatherv, MPI_Allgatherv_init, s, me + 1, MPI_INT, big, vcount, vdisp,
             MPI_INT, MPI_COMM_WORLD);
        for (int q = 0; q < np; q++) {
            for (int i = 0; i < q + 1; i++)
                CHECK(big[vdisp[q] + i] == val(q, i, it), "allgatherv from %d [%d]", q, i);
            CHECK(big[vdisp[q] + q + 1] == -7, "allgatherv gap after %d", q);
        }
        for (int i = 0; i < vtotal; i++)
            big[i] = -7;
        for (int i = 0; i < me + 1; i++)
            big[vdisp[me] + i] = val(me, i, it) * 3;
        COLL(143, MPI_Allgatherv, MPI_Iallgatherv, MPI_Allgatherv_init, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big,
             vcount, vdisp, MPI_INT, MPI_COMM_WORLD);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < q + 1; i++)
                CHECK(big[vdisp[q] + i] == val(q, i, it) * 3, "in-place allgatherv from %d [%d]", q, i);
    }
}

/* what rank `from` sends rank `to` (element i) */
static int a2a(int from, int to, int i, int it) { return from * 100 + to * 10 + i + it * 1000; }

static void t_alltoall(void)
{
    static int s[64 * 64], r[64 * 64];
    static int scnt[64], sdsp[64], rcnt[64], rdsp[64], sbyte[64], rbyte[64];
    static MPI_Datatype st[64], rt[64];
    static double ds[64 * 64], dr[64 * 64];
    for (int it = 0; it < ITERS; it++) {
        for (int q = 0; q < np; q++)
            for (int i = 0; i < 2; i++) {
                s[q * 2 + i] = a2a(me, q, i, it);
                r[q * 2 + i] = -1;
            }
        COLL(150, MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init, s, 2, MPI_INT, r, 2, MPI_INT, MPI_COMM_WORLD);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < 2; i++)
                CHECK(r[q * 2 + i] == a2a(q, me, i, it), "alltoall from %d [%d]", q, i);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < 2; i++)
                r[q * 2 + i] = a2a(me, q, i, it) + 1;
        COLL(151, MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, 2, MPI_INT,
             MPI_COMM_WORLD);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < 2; i++)
                CHECK(r[q * 2 + i] == a2a(q, me, i, it) + 1, "in-place alltoall from %d [%d]", q, i);
        /* alltoallv: to rank q, (me + q) % 3 ints; blocks reversed */
        int at = 0, rat = 0;
        for (int q = np - 1; q >= 0; q--) {
            scnt[q] = (me + q) % 3;
            sdsp[q] = at;
            at += scnt[q] + 1;
            rcnt[q] = (q + me) % 3;
            rdsp[q] = rat;
            rat += rcnt[q] + 1;
        }
        for (int q = 0; q < np; q++)
            for (int i = 0; i < scnt[q]; i++)
                s[sdsp[q] + i] = a2a(me, q, i, it);
        for (int i = 0; i < rat; i++)
            r[i] = -9;
        COLL(152, MPI_Alltoallv, MPI_Ialltoallv, MPI_Alltoallv_init, s, scnt, sdsp, MPI_INT, r, rcnt, rdsp, MPI_INT,
             MPI_COMM_WORLD);
        for (int q = 0; q < np; q++) {
            for (int i = 0; i < rcnt[q]; i++)
                CHECK(r[rdsp[q] + i] == a2a(q, me, i, it), "alltoallv from %d [%d]", q, i);
            CHECK(r[rdsp[q] + rcnt[q]] == -9, "alltoallv gap after %d", q);
        }
        /* alltoallw: ints to even ranks, doubles to odd ranks, 2 each */
        for (int q = 0; q < np; q++) {
            st[q] = rt[q] = (q + me) % 2 ? MPI_DOUBLE : MPI_INT;
            scnt[q] = rcnt[q] = 2;
            sbyte[q] = rbyte[q] = q * 2 * (int)sizeof(double);
            for (int i = 0; i < 2; i++) {
                if (st[q] == MPI_INT)
                    ((int *)((char *)ds + sbyte[q]))[i] = a2a(me, q, i, it);
                else
                    ((double *)((char *)ds + sbyte[q]))[i] = a2a(me, q, i, it) + 0.5;
            }
        }
        for (int i = 0; i < 2 * np; i++)
            dr[i] = -1;
        COLL(153, MPI_Alltoallw, MPI_Ialltoallw, MPI_Alltoallw_init, ds, scnt, sbyte, st, dr, rcnt, rbyte, rt,
             MPI_COMM_WORLD);
        for (int q = 0; q < np; q++)
            for (int i = 0; i < 2; i++) {
                if (rt[q] == MPI_INT)
                    CHECK(((int *)((char *)dr + rbyte[q]))[i] == a2a(q, me, i, it), "alltoallw int from %d", q);
                else
                    CHECK(((double *)((char *)dr + rbyte[q]))[i] == a2a(q, me, i, it) + 0.5,
                          "alltoallw double from %d", q);
            }
    }
}

static void t_reduce_scatter(void)
{
    static int s[64 * 64], r[64 * 64], rc[64];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < np * 2; i++)
            s[i] = val(me, i, it);
        COLL(160, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, MPI_Reduce_scatter_block_init, s, r, 2,
             MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < 2; i++) {
            int w = 0;
            for (int q = 0; q < np; q++)
                w += val(q, me * 2 + i, it);
            CHECK(r[i] == w, "reduce_scatter_block [%d] = %d want %d", i, r[i], w);
        }
        for (int i = 0; i < np * 2; i++)
            r[i] = val(me, i, it) * 2;
        COLL(161, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, MPI_Reduce_scatter_block_init, MPI_IN_PLACE,
             r, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < 2; i++) {
            int w = 0;
            for (int q = 0; q < np; q++)
                w += val(q, me * 2 + i, it) * 2;
            CHECK(r[i] == w, "in-place reduce_scatter_block [%d]", i);
        }
        int total = 0, off = 0;
        for (int q = 0; q < np; q++) {
            rc[q] = q + 1;
            total += q + 1;
        }
        for (int q = 0; q < me; q++)
            off += rc[q];
        for (int i = 0; i < total; i++)
            s[i] = val(me, i, it);
        COLL(162, MPI_Reduce_scatter, MPI_Ireduce_scatter, MPI_Reduce_scatter_init, s, r, rc, MPI_INT, MPI_SUM,
             MPI_COMM_WORLD);
        for (int i = 0; i < rc[me]; i++) {
            int w = 0;
            for (int q = 0; q < np; q++)
                w += val(q, off + i, it);
            CHECK(r[i] == w, "reduce_scatter [%d] = %d want %d", i, r[i], w);
        }
        for (int i = 0; i < total; i++)
            r[i] = val(me, i, it) + 4;
        COLL(163, MPI_Reduce_scatter, MPI_Ireduce_scatter, MPI_Reduce_scatter_init, MPI_IN_PLACE, r, rc, MPI_INT,
             MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < rc[me]; i++) {
            int w = 0;
            for (int q = 0; q < np; q++)
                w += val(q, off + i, it) + 4;
            CHECK(r[i] == w, "in-place reduce_scatter [%d]", i);
        }
    }
}

static void t_scan(void)
{
    int s[N], r[N];
    unsigned ms[N * 4], mr[N * 4], want[4];
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N; i++)
            s[i] = val(me, i, it);
        COLL(170, MPI_Scan, MPI_Iscan, MPI_Scan_init, s, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) {
            int w = 0;
            for (int q = 0; q <= me; q++)
                w += val(q, i, it);
            CHECK(r[i] == w, "scan [%d] = %d want %d", i, r[i], w);
        }
        for (int i = 0; i < N; i++)
            r[i] = -1;
        COLL(171, MPI_Exscan, MPI_Iexscan, MPI_Exscan_init, s, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N && me > 0; i++) {
            int w = 0;
            for (int q = 0; q < me; q++)
                w += val(q, i, it);
            CHECK(r[i] == w, "exscan [%d] = %d want %d", i, r[i], w);
        }
        for (int i = 0; i < N; i++)
            r[i] = val(me, i, it) + 2;
        COLL(172, MPI_Scan, MPI_Iscan, MPI_Scan_init, MPI_IN_PLACE, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) {
            int w = 0;
            for (int q = 0; q <= me; q++)
                w += val(q, i, it) + 2;
            CHECK(r[i] == w, "in-place scan [%d]", i);
        }
        for (int i = 0; i < N; i++)
            r[i] = val(me, i, it) + 3;
        COLL(173, MPI_Exscan, MPI_Iexscan, MPI_Exscan_init, MPI_IN_PLACE, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N && me > 0; i++) {
            int w = 0;
            for (int q = 0; q < me; q++)
                w += val(q, i, it) + 3;
            CHECK(r[i] == w, "in-place exscan [%d]", i);
        }
        for (int i = 0; i < N; i++)
            mat_of(ms + 4 * i, me, i, it);
        COLL(174, MPI_Scan, MPI_Iscan, MPI_Scan_init, ms, mr, N, mat_t, matop, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++) {
            mat_prod(want, 0, me + 1, i, it);
            CHECK(memcmp(want, mr + 4 * i, sizeof want) == 0, "non-commutative scan [%d]", i);
        }
        COLL(175, MPI_Exscan, MPI_Iexscan, MPI_Exscan_init, ms, mr, N, mat_t, matop, MPI_COMM_WORLD);
        for (int i = 0; i < N && me > 0; i++) {
            mat_prod(want, 0, me, i, it);
            CHECK(memcmp(want, mr + 4 * i, sizeof want) == 0, "non-commutative exscan [%d]", i);
        }
    }
}

static void coll_setup(int m)
{
    mode = m;
    for (int i = 0; i < NKEYS; i++)
        preq[i] = MPI_REQUEST_NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    CHECK(np <= 64, "at most 64 ranks");
    MPI_Type_contiguous(4, MPI_UNSIGNED, &mat_t);
    MPI_Type_commit(&mat_t);
    MPI_Datatype v;
    MPI_Type_vector(2, 1, 2, MPI_INT, &v);
    MPI_Type_create_resized(v, 0, 4 * (MPI_Aint)sizeof(int), &vec_t);
    MPI_Type_free(&v);
    MPI_Type_commit(&vec_t);
    MPI_Op_create(matmul, 0, &matop);
    vlayout();
}

static void coll_all(void)
{
    t_barrier();
    t_bcast();
    t_reduce();
    t_allreduce();
    t_gather_scatter();
    t_allgather();
    t_alltoall();
    t_reduce_scatter();
    t_scan();
}

static void coll_teardown(void)
{
    for (int i = 0; i < NKEYS; i++)
        if (preq[i] != MPI_REQUEST_NULL) {
            MPI_CHECK(MPI_Request_free(&preq[i]));
            CHECK(preq[i] == MPI_REQUEST_NULL, "Request_free did not reset the handle");
        }
    MPI_Op_free(&matop);
    MPI_Type_free(&mat_t);
    MPI_Type_free(&vec_t);
}

#endif
