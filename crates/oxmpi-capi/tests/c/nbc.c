/*
 * nbc.c -- non-blocking collectives: every one of MPI-4.1 on an
 * intracommunicator (Ibarrier ... Iexscan), each against a serial
 * reference (the checks are in coll_modes.h, shared with coll_v.c and
 * coll_persistent.c), then:
 *  - several outstanding on one communicator (Ibcast, Iallreduce of a
 *    non-commutative op, Ialltoall, Iscan, Igather, Ibarrier) overlapping
 *    with a ring of Isend/Irecv on the same communicator, the collectives
 *    completed by one Waitall of their requests in reverse order;
 *  - the same started in opposite orders on two communicators (a dup), even
 *    ranks completing one communicator's first and odd ranks the other's;
 *  - Test loops (with Request_get_status) and Waitany/Testsome over
 *    collective requests; an Ibarrier tested 100 times, incomplete, by
 *    every rank before rank 0 enters it;
 *  - the progress rule: rank 0 blocked in MPI_Recv (or testing an Irecv,
 *    or probing, in a loop) for messages the others send after their Iallreduce
 *    completed, its own Iallreduce outstanding;
 *  - argument errors: MPI_ERR_ROOT, MPI_ERR_COMM (strict: MPI_ERR_COUNT,
 *    MPI_ERR_TYPE, MPI_ERR_OP), and communication afterwards;
 *  - an Iallreduce with a user operation on a derived type, both freed by
 *    rank 0 before any other rank has started its Iallreduce.
 *
 * Ranks: any number from 1 to 8 (minimum 1).
 */
#include "coll_modes.h"

static void t_outstanding(void)
{
    for (int it = 0; it < 3; it++) {
        int a[8], s[N], sc, sr, g[64], sa[64], ra[64];
        unsigned ms[4], mr[4], want[4];
        int tok = me * 7 + it, got = -1;
        MPI_Request q[6], p2p[2];
        for (int i = 0; i < 8; i++)
            a[i] = me == 0 ? val(0, i, it) : 0;
        for (int i = 0; i < N; i++)
            s[i] = val(me, i, it);
        mat_of(ms, me, 0, it);
        for (int i = 0; i < np; i++)
            sa[i] = a2a(me, i, 0, it);
        sc = me + 1;
        MPI_CHECK(MPI_Ibcast(a, 8, MPI_INT, 0, MPI_COMM_WORLD, &q[0]));
        MPI_CHECK(MPI_Iallreduce(ms, mr, 1, mat_t, matop, MPI_COMM_WORLD, &q[1]));
        MPI_CHECK(MPI_Irecv(&got, 1, MPI_INT, (me - 1 + np) % np, 3, MPI_COMM_WORLD, &p2p[0]));
        MPI_CHECK(MPI_Ialltoall(sa, 1, MPI_INT, ra, 1, MPI_INT, MPI_COMM_WORLD, &q[2]));
        MPI_CHECK(MPI_Iscan(&sc, &sr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[3]));
        MPI_CHECK(MPI_Isend(&tok, 1, MPI_INT, (me + 1) % np, 3, MPI_COMM_WORLD, &p2p[1]));
        MPI_CHECK(MPI_Igather(s, N, MPI_INT, g, N, MPI_INT, np - 1, MPI_COMM_WORLD, &q[4]));
        MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &q[5]));
        MPI_CHECK(MPI_Waitall(2, p2p, MPI_STATUSES_IGNORE));
        CHECK(got == ((me - 1 + np) % np) * 7 + it, "ring token %d", got);
        MPI_Request rev[6];
        for (int i = 0; i < 6; i++)
            rev[i] = q[5 - i];
        MPI_CHECK(MPI_Waitall(6, rev, MPI_STATUSES_IGNORE));
        for (int i = 0; i < 6; i++)
            CHECK(rev[i] == MPI_REQUEST_NULL, "Waitall left request %d", i);
        for (int i = 0; i < 8; i++)
            CHECK(a[i] == val(0, i, it), "outstanding bcast [%d]", i);
        mat_prod(want, 0, np, 0, it);
        CHECK(memcmp(want, mr, sizeof want) == 0, "outstanding non-commutative allreduce");
        for (int i = 0; i < np; i++)
            CHECK(ra[i] == a2a(i, me, 0, it), "outstanding alltoall from %d", i);
        CHECK(sr == (me + 1) * (me + 2) / 2, "outstanding scan %d", sr);
        if (me == np - 1)
            for (int q2 = 0; q2 < np; q2++)
                for (int i = 0; i < N; i++)
                    CHECK(g[q2 * N + i] == val(q2, i, it), "outstanding gather %d [%d]", q2, i);
    }
}

static void t_two_comms(void)
{
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int x = me + 1, y = me * 2, sx = 0, sy = 0;
    MPI_Request q[2];
    MPI_CHECK(MPI_Iallreduce(&x, &sx, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[0]));
    MPI_CHECK(MPI_Iallreduce(&y, &sy, 1, MPI_INT, MPI_SUM, dup, &q[1]));
    int first = me % 2;
    MPI_CHECK(MPI_Wait(&q[first], MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Wait(&q[1 - first], MPI_STATUS_IGNORE));
    CHECK(sx == np * (np + 1) / 2 && sy == np * (np - 1), "two communicators: %d %d", sx, sy);
    MPI_CHECK(MPI_Comm_free(&dup));
}

static void t_test_loops(void)
{
    int x = me, s = -1, flag = 0, spins = 0;
    MPI_Request q;
    MPI_Status st;
    MPI_CHECK(MPI_Iallreduce(&x, &s, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q));
    do {
        MPI_CHECK(MPI_Request_get_status(q, &flag, &st));
        spins++;
    } while (!flag);
    CHECK(q != MPI_REQUEST_NULL, "Request_get_status freed the request");
    MPI_CHECK(MPI_Test(&q, &flag, &st));
    CHECK(flag && q == MPI_REQUEST_NULL, "Test after get_status");
    CHECK(s == np - 1, "allreduce max %d", s);

    /* Ibarrier: rank 0 enters only after every other rank has entered and
     * tested it 100 times, each time incomplete */
    if (me == 0) {
        for (int q2 = 1; q2 < np; q2++)
            MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &q));
        MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    } else {
        MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &q));
        for (int i = 0; i < 100; i++) {
            MPI_CHECK(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag, "Ibarrier completed before rank 0 entered it");
        }
        MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 9, MPI_COMM_WORLD));
        flag = 0;
        while (!flag)
            MPI_CHECK(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
    }

    /* Waitany and Testsome over collective requests */
    int v[3] = {me, me + 1, me + 2}, w[3];
    MPI_Request qs[3];
    for (int i = 0; i < 3; i++)
        MPI_CHECK(MPI_Iallreduce(&v[i], &w[i], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &qs[i]));
    int idx, done = 0, outc, inds[3];
    MPI_CHECK(MPI_Waitany(3, qs, &idx, MPI_STATUS_IGNORE));
    CHECK(idx >= 0 && idx < 3 && qs[idx] == MPI_REQUEST_NULL, "Waitany index %d", idx);
    done = 1;
    while (done < 3) {
        MPI_CHECK(MPI_Testsome(3, qs, &outc, inds, MPI_STATUSES_IGNORE));
        CHECK(outc != MPI_UNDEFINED, "Testsome: all inactive too early");
        done += outc;
    }
    for (int i = 0; i < 3; i++)
        CHECK(w[i] == np * (np - 1) / 2 + i * np, "Waitany/Testsome allreduce %d: %d", i, w[i]);
}

static void t_errors(void)
{
    MPI_Request q = MPI_REQUEST_NULL;
    int x = 0, y = 0;
    CHECK_CLASS(MPI_Ibcast(&x, 1, MPI_INT, np, MPI_COMM_WORLD, &q), MPI_ERR_ROOT);
    /* MPICH 5 crashes on these (and its class for the negative count is
     * MPI_ERR_OTHER): strict mode only */
    if (strict_mode()) {
        CHECK_CLASS(MPI_Iallreduce(&x, &y, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q), MPI_ERR_COUNT);
        CHECK_CLASS(MPI_Iallreduce(&x, &y, 1, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD, &q), MPI_ERR_TYPE);
        CHECK_CLASS(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD, &q), MPI_ERR_OP);
        CHECK_CLASS(MPI_Reduce_scatter_block(&x, &y, -2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    }
    CHECK_CLASS(MPI_Ibarrier(MPI_COMM_NULL, &q), MPI_ERR_COMM);
    CHECK_CLASS(MPI_Bcast_init(&x, 1, MPI_INT, -1, MPI_COMM_WORLD, MPI_INFO_NULL, &q), MPI_ERR_ROOT);
    /* still works */
    x = me;
    MPI_CHECK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
    MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(y == np * (np - 1) / 2, "allreduce after errors %d", y);
}

/* MPI's progress rule: rank 0 starts an Iallreduce and then blocks in
 * MPI_Recv (or tests an Irecv in a loop) for messages that the others send
 * only once their Iallreduce completed, which needs rank 0's part of it to
 * move on while it is blocked: the library must progress outstanding
 * collectives inside point-to-point calls. */
static void t_progress_rule(void)
{
    for (int mode = 0; mode < 3; mode++) {
        long x = me + 1, sum = -1, want = (long)np * (np + 1) / 2;
        MPI_Request q;
        MPI_CHECK(MPI_Iallreduce(&x, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &q));
        if (me == 0) {
            for (int r = 1; r < np; r++) {
                long got = -1;
                if (mode == 0) {
                    MPI_CHECK(MPI_Recv(&got, 1, MPI_LONG, r, 11, MPI_COMM_WORLD,
                                       MPI_STATUS_IGNORE));
                } else if (mode == 2) {
                    int flag = 0;
                    while (!flag)
                        MPI_CHECK(MPI_Iprobe(r, 11, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
                    MPI_CHECK(MPI_Recv(&got, 1, MPI_LONG, r, 11, MPI_COMM_WORLD,
                                       MPI_STATUS_IGNORE));
                } else {
                    MPI_Request rq;
                    int flag = 0;
                    MPI_CHECK(MPI_Irecv(&got, 1, MPI_LONG, r, 11, MPI_COMM_WORLD, &rq));
                    while (!flag)
                        MPI_CHECK(MPI_Test(&rq, &flag, MPI_STATUS_IGNORE));
                }
                CHECK(got == want, "rank %d's allreduce gave %ld, want %ld", r, got, want);
            }
            MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        } else {
            MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Send(&sum, 1, MPI_LONG, 0, 11, MPI_COMM_WORLD));
        }
        CHECK(sum == want, "allreduce gave %ld, want %ld", sum, want);
    }
}

/* A user operation whose datatype the program frees right after starting
 * the Iallreduce (MPI allows it): rank 0 frees it, then lets the others
 * start theirs, so its reduction runs after the free. */
static void pairsum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    int *a = in, *b = inout;
    for (int i = 0; i < 2 * *len; i++)
        b[i] += a[i];
}

static void t_freed_type(void)
{
    MPI_Datatype pair;
    MPI_Op op;
    MPI_Request r;
    int in[6], out[6], go = 1;
    MPI_CHECK(MPI_Type_contiguous(2, MPI_INT, &pair));
    MPI_CHECK(MPI_Type_commit(&pair));
    MPI_CHECK(MPI_Op_create(pairsum, 1, &op));
    for (int i = 0; i < 6; i++) {
        in[i] = me * 10 + i;
        out[i] = -1;
    }
    if (me != 0)
        MPI_CHECK(MPI_Recv(&go, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Iallreduce(in, out, 3, pair, op, MPI_COMM_WORLD, &r));
    MPI_CHECK(MPI_Type_free(&pair));
    MPI_CHECK(MPI_Op_free(&op));
    if (me == 0)
        for (int p = 1; p < np; p++)
            MPI_CHECK(MPI_Send(&go, 1, MPI_INT, p, 77, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    for (int i = 0; i < 6; i++)
        CHECK(out[i] == 10 * np * (np - 1) / 2 + np * i,
              "Iallreduce with a freed type and op [%d] = %d", i, out[i]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    coll_setup(1);
    coll_all();
    t_outstanding();
    t_two_comms();
    t_test_loops();
    t_progress_rule();
    t_errors();
    t_freed_type();
    coll_teardown();
    test_ok("nbc");
    MPI_Finalize();
    return 0;
}
