/*
 * intercomm.c -- intercommunicators: creation, queries, point-to-point,
 * duplication, merging.
 *
 * Ranks: any number from 1 to 8 (with 1 rank only the error checks run).
 *
 * Checks:
 *  - Intercomm_create from several splits of MPI_COMM_WORLD, as MPICH's
 *    test harness (MTestGetIntercomm) makes them: lower/upper halves
 *    (leaders 0 and size/2), even/odd ranks (leaders 0 and 1), the two
 *    halves with the last rank as the upper group's leader, and the
 *    Intercomm_create of a dup of the local communicator with a dup of
 *    MPI_COMM_WORLD as peer; then Comm_dup and Comm_idup of the first
 *    (also with the lower leader Ssending to the upper one after its idup
 *    while the upper leader receives before its own: an idup that waited
 *    for the other group would hang), and (MPI 4)
 *    Intercomm_create_from_groups.
 *  - For each: Comm_test_inter true, Comm_size/rank are the local group's,
 *    Comm_remote_size, Comm_remote_group (translated to MPI_COMM_WORLD's
 *    group: the expected ranks, in order), Comm_group likewise; then
 *    point-to-point both ways: every rank sends its world rank to every
 *    remote rank (Isend) and receives from every remote rank (Irecv, then
 *    again with MPI_ANY_SOURCE: each remote rank once, MPI_SOURCE a remote
 *    rank); Ssend of 1 MiB between the leaders (rendezvous) checked
 *    byte by byte; Probe and Iprobe report the remote source; Sendrecv
 *    across; MPI_PROC_NULL; Barrier.
 *  - A message on the intercommunicator and one on its dup, same tag,
 *    are each received on their own (in reverse order); Comm_compare of
 *    the dup is MPI_CONGRUENT, of itself MPI_IDENT.
 *  - Comm_split of an intercommunicator by parity (key -rank), checked as
 *    above (MPI_COMM_NULL where the other side has nobody of the color);
 *    Comm_create with each side's leader alone.
 *  - Intercomm_merge with the lower group high = 0: merged rank is the
 *    world rank; with the upper group high = 0: upper group first;
 *    Allreduce on the merged communicator.
 *  - Comm_free of each, handles reset to MPI_COMM_NULL.
 *  - Errors (MPI_ERRORS_RETURN): a send to remote rank remote_size is
 *    MPI_ERR_RANK; strict mode: Intercomm_merge and Comm_remote_group of
 *    an intracommunicator are MPI_ERR_COMM (erroneous calls: MPICH 5
 *    crashes in Intercomm_merge), and Intercomm_create whose remote leader
 *    is in the local group is MPI_ERR_RANK on every member.
 */
#include "check.h"

static int rank, size;
static MPI_Group world_group;

/* The world ranks of `g`, in order. */
static void world_ranks(MPI_Group g, int *out, int n)
{
    int *idx = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++)
        idx[i] = i;
    MPI_CHECK(MPI_Group_translate_ranks(g, n, idx, world_group, out));
    free(idx);
}

/* Checks `ic` against the expected local and remote groups (world ranks). */
static void check_shape(MPI_Comm ic, const int *local, int nl, const int *remote, int nr)
{
    int flag = 0, n = -1, r = -1, rn = -1;
    MPI_CHECK(MPI_Comm_test_inter(ic, &flag));
    CHECK(flag, "Comm_test_inter false on an intercommunicator");
    MPI_CHECK(MPI_Comm_size(ic, &n));
    MPI_CHECK(MPI_Comm_rank(ic, &r));
    MPI_CHECK(MPI_Comm_remote_size(ic, &rn));
    CHECK(n == nl && rn == nr, "sizes %d/%d, expected %d/%d", n, rn, nl, nr);
    CHECK(r >= 0 && r < nl && local[r] == rank, "local rank %d is not world rank %d", r, rank);
    MPI_Group g;
    int got[8];
    MPI_CHECK(MPI_Comm_remote_group(ic, &g));
    world_ranks(g, got, nr);
    for (int i = 0; i < nr; i++)
        CHECK(got[i] == remote[i], "remote rank %d is world %d, expected %d", i, got[i], remote[i]);
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Comm_group(ic, &g));
    world_ranks(g, got, nl);
    for (int i = 0; i < nl; i++)
        CHECK(got[i] == local[i], "local rank %d is world %d, expected %d", i, got[i], local[i]);
    MPI_CHECK(MPI_Group_free(&g));
}

/* Point-to-point both ways over `ic`. */
static void traffic(MPI_Comm ic, const int *local, int nl, const int *remote, int nr)
{
    int r;
    MPI_CHECK(MPI_Comm_rank(ic, &r));
    int *in = malloc(sizeof(int) * (size_t)nr);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)nr);
    /* Every rank to every remote rank, exact sources. */
    for (int i = 0; i < nr; i++) {
        in[i] = -1;
        MPI_CHECK(MPI_Irecv(&in[i], 1, MPI_INT, i, 11, ic, &reqs[i]));
    }
    for (int i = 0; i < nr; i++)
        MPI_CHECK(MPI_Isend(&rank, 1, MPI_INT, i, 11, ic, &reqs[nr + i]));
    MPI_CHECK(MPI_Waitall(2 * nr, reqs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < nr; i++)
        CHECK(in[i] == remote[i], "from remote %d got %d, expected world %d", i, in[i], remote[i]);
    /* Again, received with MPI_ANY_SOURCE. */
    for (int i = 0; i < nr; i++)
        MPI_CHECK(MPI_Isend(&rank, 1, MPI_INT, i, 12, ic, &reqs[i]));
    int seen[8] = {0};
    for (int i = 0; i < nr; i++) {
        int v = -1;
        MPI_Status st;
        MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 12, ic, &st));
        CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < nr, "ANY_SOURCE gave source %d", st.MPI_SOURCE);
        CHECK(v == remote[st.MPI_SOURCE], "ANY_SOURCE: %d from remote %d", v, st.MPI_SOURCE);
        CHECK(!seen[st.MPI_SOURCE]++, "remote %d twice", st.MPI_SOURCE);
    }
    MPI_CHECK(MPI_Waitall(nr, reqs, MPI_STATUSES_IGNORE));
    /* A rendezvous between the leaders, with probes. */
    if (r == 0) {
        const int n = 1 << 18;
        int *big = malloc(sizeof(int) * n), *got = malloc(sizeof(int) * n);
        for (int i = 0; i < n; i++)
            big[i] = i ^ rank;
        int lower = local[0] < remote[0];
        MPI_Status st;
        if (lower) {
            MPI_CHECK(MPI_Ssend(big, n, MPI_INT, 0, 13, ic));
            MPI_CHECK(MPI_Probe(0, 14, ic, &st));
            CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 14, "Probe: source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
            MPI_CHECK(MPI_Recv(got, n, MPI_INT, 0, 14, ic, &st));
        } else {
            int flag = 0;
            while (!flag)
                MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, 13, ic, &flag, &st));
            CHECK(st.MPI_SOURCE == 0, "Iprobe: source %d", st.MPI_SOURCE);
            MPI_CHECK(MPI_Recv(got, n, MPI_INT, 0, 13, ic, &st));
            MPI_CHECK(MPI_Ssend(big, n, MPI_INT, 0, 14, ic));
        }
        for (int i = 0; i < n; i++)
            CHECK(got[i] == (i ^ remote[0]), "1 MiB message: int %d is %d", i, got[i]);
        free(big);
        free(got);
    }
    /* Sendrecv across: local rank r with remote rank r (MPI_PROC_NULL
       where the remote group has no rank r). */
    {
        int to = r, v = -1;
        int from = r < nr ? r : MPI_PROC_NULL;
        MPI_Status st;
        MPI_CHECK(MPI_Sendrecv(&rank, 1, MPI_INT, r < nr ? to : MPI_PROC_NULL, 15, &v, 1, MPI_INT,
                               from, 15, ic, &st));
        if (from != MPI_PROC_NULL)
            CHECK(v == remote[from] && st.MPI_SOURCE == from, "Sendrecv got %d from %d", v, st.MPI_SOURCE);
        else
            CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "PROC_NULL status source %d", st.MPI_SOURCE);
    }
    MPI_CHECK(MPI_Barrier(ic));
    free(in);
    free(reqs);
}

/* Builds the intercommunicator of `color` (0 or 1) groups of WORLD, whose
 * leaders are world ranks lead[0] and lead[1]; fills the expected groups. */
static MPI_Comm make(int (*color_of)(int), int lead0, int lead1, int *local, int *nl, int *remote, int *nr, int via_dups)
{
    int c = color_of(rank);
    *nl = *nr = 0;
    for (int w = 0; w < size; w++) {
        if (color_of(w) == c)
            local[(*nl)++] = w;
        else
            remote[(*nr)++] = w;
    }
    MPI_Comm half, ic, peer = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c, rank, &half));
    int my_lead = c ? lead1 : lead0, their_lead = c ? lead0 : lead1;
    int ll = 0;
    for (int i = 0; i < *nl; i++)
        if (local[i] == my_lead)
            ll = i;
    if (via_dups) {
        MPI_Comm d;
        MPI_CHECK(MPI_Comm_dup(half, &d));
        MPI_CHECK(MPI_Comm_free(&half));
        half = d;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &peer));
    }
    MPI_CHECK(MPI_Intercomm_create(half, ll, peer, their_lead, 77, &ic));
    MPI_CHECK(MPI_Comm_free(&half));
    if (peer != MPI_COMM_WORLD)
        MPI_CHECK(MPI_Comm_free(&peer));
    return ic;
}

static void run(MPI_Comm ic, const int *local, int nl, const int *remote, int nr);

static int halves(int w) { return w >= size / 2; }
static int parity(int w) { return w % 2; }

static void isolation(MPI_Comm ic)
{
    MPI_Comm d;
    int res = -1;
    MPI_CHECK(MPI_Comm_dup(ic, &d));
    MPI_CHECK(MPI_Comm_compare(ic, d, &res));
    CHECK(res == MPI_CONGRUENT, "compare(intercomm, dup) = %d", res);
    MPI_CHECK(MPI_Comm_compare(ic, ic, &res));
    CHECK(res == MPI_IDENT, "compare(intercomm, itself) = %d", res);
    int flag = 0;
    MPI_CHECK(MPI_Comm_test_inter(d, &flag));
    CHECK(flag, "the dup of an intercommunicator is not one");
    int r, a = 1, b = 2, x = 0, y = 0;
    MPI_CHECK(MPI_Comm_rank(ic, &r));
    if (r == 0) {
        MPI_Request q[2];
        MPI_CHECK(MPI_Isend(&a, 1, MPI_INT, 0, 21, ic, &q[0]));
        MPI_CHECK(MPI_Isend(&b, 1, MPI_INT, 0, 21, d, &q[1]));
        MPI_CHECK(MPI_Recv(&y, 1, MPI_INT, 0, 21, d, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, 0, 21, ic, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
        CHECK(x == 1 && y == 2, "dup isolation: %d on the intercomm, %d on its dup", x, y);
    }
    MPI_CHECK(MPI_Comm_free(&d));
    CHECK(d == MPI_COMM_NULL, "Comm_free did not reset the handle");
}

static void merging(MPI_Comm ic, const int *local, int nl, const int *remote, int nr)
{
    int lower = local[0] < remote[0];
    MPI_Comm m;
    int r, n, sum = 0;
    MPI_CHECK(MPI_Intercomm_merge(ic, !lower, &m));
    MPI_CHECK(MPI_Comm_rank(m, &r));
    MPI_CHECK(MPI_Comm_size(m, &n));
    CHECK(n == nl + nr, "merged size %d", n);
    int lr;
    MPI_CHECK(MPI_Comm_rank(ic, &lr));
    CHECK(r == (lower ? lr : nr + lr), "merged rank %d (lower %d, local %d)", r, lower, lr);
    MPI_CHECK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, m));
    CHECK(sum == size * (size - 1) / 2, "Allreduce on the merge: %d", sum);
    MPI_CHECK(MPI_Comm_free(&m));
    /* The other way round: the upper group first. */
    MPI_CHECK(MPI_Intercomm_merge(ic, lower, &m));
    MPI_CHECK(MPI_Comm_rank(m, &r));
    CHECK(r == (lower ? nr + lr : lr), "merged (upper first) rank %d", r);
    MPI_CHECK(MPI_Comm_free(&m));
}

/* Comm_split of an intercommunicator by world rank parity (key -rank:
 * descending world rank on both sides), and Comm_create with each side's
 * leader alone. */
static void splitting(MPI_Comm ic, const int *local, int nl, const int *remote, int nr)
{
    MPI_Comm s;
    MPI_CHECK(MPI_Comm_split(ic, rank % 2, -rank, &s));
    int el[8], er[8], nel = 0, ner = 0;
    for (int i = nl - 1; i >= 0; i--)
        if (local[i] % 2 == rank % 2)
            el[nel++] = local[i];
    for (int i = nr - 1; i >= 0; i--)
        if (remote[i] % 2 == rank % 2)
            er[ner++] = remote[i];
    if (ner == 0) {
        CHECK(s == MPI_COMM_NULL, "split without remote members of my color is not MPI_COMM_NULL");
    } else {
        CHECK(s != MPI_COMM_NULL, "split gave MPI_COMM_NULL");
        run(s, el, nel, er, ner);
        MPI_CHECK(MPI_Comm_free(&s));
    }
    MPI_Group lg, g1;
    int zero = 0, lr;
    MPI_CHECK(MPI_Comm_group(ic, &lg));
    MPI_CHECK(MPI_Group_incl(lg, 1, &zero, &g1));
    MPI_CHECK(MPI_Comm_create(ic, g1, &s));
    MPI_CHECK(MPI_Comm_rank(ic, &lr));
    if (lr == 0) {
        CHECK(s != MPI_COMM_NULL, "Comm_create gave the leader MPI_COMM_NULL");
        run(s, local, 1, remote, 1);
        MPI_CHECK(MPI_Comm_free(&s));
    } else {
        CHECK(s == MPI_COMM_NULL, "Comm_create gave a non-member a communicator");
    }
    MPI_CHECK(MPI_Group_free(&g1));
    MPI_CHECK(MPI_Group_free(&lg));
}

static void run(MPI_Comm ic, const int *local, int nl, const int *remote, int nr)
{
    check_shape(ic, local, nl, remote, nr);
    traffic(ic, local, nl, remote, nr);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_errors_return();
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));

    if (strict_mode() && size >= 2) {
        /* The remote leader is in the local group: every member fails (the
           leader tells the others), none waits for ever. */
        MPI_Comm bad = MPI_COMM_NULL;
        CHECK_CLASS(MPI_Intercomm_create(MPI_COMM_WORLD, 0, MPI_COMM_WORLD, 1, 5, &bad), MPI_ERR_RANK);
    }
    if (strict_mode()) {
        MPI_Group g;
        CHECK_CLASS(MPI_Intercomm_merge(MPI_COMM_WORLD, 0, &(MPI_Comm){MPI_COMM_NULL}), MPI_ERR_COMM);
        CHECK_CLASS(MPI_Comm_remote_group(MPI_COMM_WORLD, &g), MPI_ERR_COMM);
    }

    if (size >= 2) {
        int local[8], remote[8], nl, nr;
        MPI_Comm ic;

        ic = make(halves, 0, size / 2, local, &nl, remote, &nr, 0);
        run(ic, local, nl, remote, nr);
        MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN);
        CHECK_CLASS(MPI_Send(&rank, 1, MPI_INT, nr, 0, ic), MPI_ERR_RANK);
        isolation(ic);
        merging(ic, local, nl, remote, nr);
        splitting(ic, local, nl, remote, nr);
        {
            MPI_Comm d;
            MPI_Request q;
            MPI_CHECK(MPI_Comm_idup(ic, &d, &q));
            MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            run(d, local, nl, remote, nr);
            MPI_CHECK(MPI_Comm_free(&d));
            /* Non-blocking across the groups: the lower leader Ssends to
               the upper one after its idup; the upper leader receives
               before calling it. */
            int v = 3;
            if (rank == size / 2) {
                MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                MPI_CHECK(MPI_Comm_idup(ic, &d, &q));
            } else {
                MPI_CHECK(MPI_Comm_idup(ic, &d, &q));
                if (rank == 0)
                    MPI_CHECK(MPI_Ssend(&v, 1, MPI_INT, size / 2, 2, MPI_COMM_WORLD));
            }
            MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            run(d, local, nl, remote, nr);
            MPI_CHECK(MPI_Comm_free(&d));
        }
        MPI_CHECK(MPI_Comm_free(&ic));
        CHECK(ic == MPI_COMM_NULL, "Comm_free did not reset the handle");

        ic = make(parity, 0, 1, local, &nl, remote, &nr, 0);
        run(ic, local, nl, remote, nr);
        merging(ic, local, nl, remote, nr);
        MPI_CHECK(MPI_Comm_free(&ic));

        ic = make(halves, 0, size - 1, local, &nl, remote, &nr, 1);
        run(ic, local, nl, remote, nr);
        MPI_CHECK(MPI_Comm_free(&ic));

#if MPI_VERSION >= 4
        {
            int c = halves(rank);
            MPI_Group lg, rg;
            int rng_lo[1][3] = {{0, size / 2 - 1, 1}}, rng_hi[1][3] = {{size / 2, size - 1, 1}};
            MPI_CHECK(MPI_Group_range_incl(world_group, 1, c ? rng_hi : rng_lo, &lg));
            MPI_CHECK(MPI_Group_range_incl(world_group, 1, c ? rng_lo : rng_hi, &rg));
            MPI_CHECK(MPI_Intercomm_create_from_groups(lg, 0, rg, 0, "oxmpi.intercomm.test",
                                                       MPI_INFO_NULL, MPI_ERRORS_RETURN, &ic));
            nl = nr = 0;
            for (int w = 0; w < size; w++) {
                if (halves(w) == c)
                    local[nl++] = w;
                else
                    remote[nr++] = w;
            }
            run(ic, local, nl, remote, nr);
            merging(ic, local, nl, remote, nr);
            MPI_CHECK(MPI_Comm_free(&ic));
            MPI_CHECK(MPI_Group_free(&lg));
            MPI_CHECK(MPI_Group_free(&rg));
        }
#endif
    }

    MPI_CHECK(MPI_Group_free(&world_group));
    test_ok("intercomm");
    MPI_Finalize();
    return 0;
}
