/*
 * coll_inter.c -- the blocking collectives on intercommunicators.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Intercommunicators of groups of different sizes (MPI_Comm_split of
 * MPI_COMM_WORLD, then MPI_Intercomm_create with WORLD as the peer): the
 * halves, rank 0 against the rest, and the last rank against the rest.
 * On each, with the root in either group (MPI_ROOT at the root,
 * MPI_PROC_NULL in the rest of its group, the root's rank in the other
 * group), every result compared with values computed from the known
 * contributions:
 *  - Barrier;
 *  - Bcast from the last and from the first rank of a group;
 *  - Reduce (MPI_SUM on ints, MPI_MAX on doubles): the root gets the
 *    reduction of the other group's data; a non-commutative user op
 *    (string-like concatenation of digits) in the other group's rank order;
 *  - Allreduce: each group gets the reduction of the other group's data;
 *  - Gather, Scatter: one block per remote rank, in remote rank order;
 *  - Allgather: every process gets the other group's blocks;
 *  - Alltoall: block r to and from remote rank r;
 *  - the root's group's receive and send buffers are untouched where the
 *    call does not write them.
 */
#include "check.h"

static int wrank, wsize;

/* inout = in "followed by" inout, as decimal digits: base-10 concatenation
 * of the contributions in rank order. */
static void concat(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    long long *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        long long p = 1;
        while (p <= b[i])
            p *= 10;
        b[i] = a[i] * p + b[i];
    }
}

static void test_inter(int color, const char *what)
{
    MPI_Comm local, inter;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &local));
    /* The other group's leader: its lowest world rank. */
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
    MPI_CHECK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, remote_leader, 17, &inter));
    int lrank, lsize, rsize, flag;
    MPI_CHECK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag, "%s: not an intercommunicator", what);
    MPI_CHECK(MPI_Comm_rank(inter, &lrank));
    MPI_CHECK(MPI_Comm_size(inter, &lsize));
    MPI_CHECK(MPI_Comm_remote_size(inter, &rsize));
    int rc = !color; /* the remote group's color */

    MPI_CHECK(MPI_Barrier(inter));

    /* Bcast: the root is local rank `at` of group `g`. */
    for (int g = 0; g < 2; g++)
        for (int which = 0; which < 2; which++) {
            int gsize = g == color ? lsize : rsize;
            int at = which ? gsize - 1 : 0;
            int buf[5];
            for (int i = 0; i < 5; i++)
                buf[i] = -1;
            int root;
            if (g == color) {
                root = lrank == at ? MPI_ROOT : MPI_PROC_NULL;
                if (lrank == at)
                    for (int i = 0; i < 5; i++)
                        buf[i] = 1000 * g + 10 * at + i;
            } else
                root = at;
            MPI_CHECK(MPI_Bcast(buf, 5, MPI_INT, root, inter));
            for (int i = 0; i < 5; i++) {
                int want = root == MPI_PROC_NULL ? -1 : 1000 * g + 10 * at + i;
                CHECK(buf[i] == want, "%s: Bcast from %d:%d [%d] = %d, want %d", what, g, at, i,
                      buf[i], want);
            }
        }

    /* Reduce: SUM of ints, MAX of doubles, a non-commutative op. */
    MPI_Op cat;
    MPI_CHECK(MPI_Op_create(concat, 0, &cat));
    for (int g = 0; g < 2; g++) {
        int gsize = g == color ? lsize : rsize;
        int at = gsize / 2;
        int root = g == color ? (lrank == at ? MPI_ROOT : MPI_PROC_NULL) : at;
        int in[4], out[4];
        double din[3], dout[3];
        long long cin = lrank + 1, cout = -1;
        for (int i = 0; i < 4; i++) {
            in[i] = 100 * color + lrank + i;
            out[i] = -1;
        }
        for (int i = 0; i < 3; i++) {
            din[i] = (lrank * 7 + i) % 5 + 0.5 * color;
            dout[i] = -1;
        }
        MPI_CHECK(MPI_Reduce(in, out, 4, MPI_INT, MPI_SUM, root, inter));
        MPI_CHECK(MPI_Reduce(din, dout, 3, MPI_DOUBLE, MPI_MAX, root, inter));
        MPI_CHECK(MPI_Reduce(&cin, &cout, 1, MPI_LONG_LONG, cat, root, inter));
        if (root == MPI_ROOT) {
            for (int i = 0; i < 4; i++) {
                int want = 0;
                for (int r = 0; r < rsize; r++)
                    want += 100 * rc + r + i;
                CHECK(out[i] == want, "%s: Reduce SUM [%d] = %d, want %d", what, i, out[i], want);
            }
            for (int i = 0; i < 3; i++) {
                double want = -1;
                for (int r = 0; r < rsize; r++) {
                    double v = (r * 7 + i) % 5 + 0.5 * rc;
                    if (v > want)
                        want = v;
                }
                CHECK(dout[i] == want, "%s: Reduce MAX [%d] = %g, want %g", what, i, dout[i], want);
            }
            long long want = 0;
            for (int r = 0; r < rsize; r++) {
                long long p = 1;
                while (p <= r + 1)
                    p *= 10;
                want = want * p + (r + 1);
            }
            CHECK(cout == want, "%s: Reduce non-commutative %lld, want %lld", what, cout, want);
        } else {
            for (int i = 0; i < 4; i++)
                CHECK(out[i] == -1, "%s: Reduce wrote a non-root's buffer", what);
        }
    }
    MPI_CHECK(MPI_Op_free(&cat));

    /* Allreduce: the other group's sum. */
    {
        int in[6], out[6];
        for (int i = 0; i < 6; i++)
            in[i] = 100 * color + lrank + i;
        MPI_CHECK(MPI_Allreduce(in, out, 6, MPI_INT, MPI_SUM, inter));
        for (int i = 0; i < 6; i++) {
            int want = 0;
            for (int r = 0; r < rsize; r++)
                want += 100 * rc + r + i;
            CHECK(out[i] == want, "%s: Allreduce [%d] = %d, want %d", what, i, out[i], want);
        }
    }

    /* Gather and Scatter, the root in either group. */
    for (int g = 0; g < 2; g++) {
        int gsize = g == color ? lsize : rsize;
        int at = gsize - 1;
        int root = g == color ? (lrank == at ? MPI_ROOT : MPI_PROC_NULL) : at;
        int send[2] = {100 * color + lrank, 7}, *recv = malloc(sizeof(int) * 2 * 8);
        for (int i = 0; i < 16; i++)
            recv[i] = -1;
        MPI_CHECK(MPI_Gather(send, 2, MPI_INT, recv, 2, MPI_INT, root, inter));
        if (root == MPI_ROOT)
            for (int r = 0; r < rsize; r++)
                CHECK(recv[2 * r] == 100 * rc + r && recv[2 * r + 1] == 7,
                      "%s: Gather block %d = %d", what, r, recv[2 * r]);
        else if (root == MPI_PROC_NULL)
            CHECK(recv[0] == -1, "%s: Gather wrote at a non-root", what);
        /* Scatter: block r of the root's buffer to remote rank r. */
        int blocks[16], got[2] = {-1, -1};
        for (int r = 0; r < 8; r++) {
            blocks[2 * r] = 1000 * color + r;
            blocks[2 * r + 1] = 3;
        }
        MPI_CHECK(MPI_Scatter(blocks, 2, MPI_INT, got, 2, MPI_INT, root, inter));
        if (root >= 0)
            CHECK(got[0] == 1000 * rc + lrank && got[1] == 3, "%s: Scatter got %d", what, got[0]);
        else
            CHECK(got[0] == -1, "%s: Scatter wrote in the root's group", what);
        free(recv);
    }

    /* Allgather and Alltoall. */
    {
        int send[2] = {100 * color + lrank, 5}, recv[16];
        MPI_CHECK(MPI_Allgather(send, 2, MPI_INT, recv, 2, MPI_INT, inter));
        for (int r = 0; r < rsize; r++)
            CHECK(recv[2 * r] == 100 * rc + r && recv[2 * r + 1] == 5,
                  "%s: Allgather block %d = %d", what, r, recv[2 * r]);
        int a2a[8], back[8];
        for (int r = 0; r < rsize; r++)
            a2a[r] = 1000 * color + 10 * lrank + r;
        MPI_CHECK(MPI_Alltoall(a2a, 1, MPI_INT, back, 1, MPI_INT, inter));
        for (int r = 0; r < rsize; r++)
            CHECK(back[r] == 1000 * rc + 10 * r + lrank, "%s: Alltoall from %d = %d", what, r,
                  back[r]);
    }

    MPI_CHECK(MPI_Barrier(inter));
    MPI_CHECK(MPI_Comm_free(&inter));
    MPI_CHECK(MPI_Comm_free(&local));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    CHECK(wsize >= 2, "needs at least 2 ranks");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    test_inter(wrank >= wsize / 2, "halves");
    test_inter(wrank != 0, "rank 0 against the rest");
    test_inter(wrank == wsize - 1, "the last rank against the rest");
    MPI_Barrier(MPI_COMM_WORLD);
    test_ok("coll_inter");
    MPI_Finalize();
    return 0;
}
