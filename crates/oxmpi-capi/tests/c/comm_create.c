/*
 * comm_create.c -- communicator constructors of MPI-4.1 chapter 7 beyond
 * dup/split (see comms.c), and the group set operations.
 *
 * Ranks: any number from 1 to 8.
 *
 * Checks:
 *  - Comm_dup_with_info(MPI_INFO_NULL): same size and rank, CONGRUENT.
 *  - Comm_idup, non-blocking as the standard requires:
 *    rank 0 calls it and then Ssends to rank 1, which receives first and
 *    only then calls it; two idups of two different communicators started
 *    in opposite orders on even and odd ranks, completed by one Waitall;
 *    an idup and a blocking Comm_dup of another communicator called in
 *    opposite orders on even and odd ranks; 16 idups of one communicator
 *    outstanding at once, completed by a Testall loop; an idup completed
 *    by a Test loop. Every new communicator is a working copy (size,
 *    rank, CONGRUENT) and distinct from the others (a message with the
 *    same tag on each is received on its own, in reverse order).
 *  - Comm_idup_with_info.
 *  - Comm_create_group by two disjoint groups at once (lower and upper
 *    half, same tag), Comm_create with a reversed group (ranks reversed).
 *  - Group_union, Group_intersection, Group_difference (sizes, order,
 *    translate_ranks against WORLD's group), Group_range_excl (every
 *    other rank), Group_rank MPI_UNDEFINED outside a group, empty results
 *    of size 0.
 *  - MPI 4: Comm_create_from_group of MPI_COMM_WORLD's group ("all"), and
 *    of the even and odd ranks at once (different string tags): ranks in
 *    group order, traffic, Allreduce.
 *  - Comm_set_name / Comm_get_name on an idup'd communicator; a dup of a
 *    named communicator starts without its name.
 */
#include "check.h"

static int rank, size;

static void same_as_world(MPI_Comm c)
{
    int r, n, res;
    MPI_CHECK(MPI_Comm_rank(c, &r));
    MPI_CHECK(MPI_Comm_size(c, &n));
    CHECK(r == rank && n == size, "copy has rank %d of %d", r, n);
    MPI_CHECK(MPI_Comm_compare(c, MPI_COMM_WORLD, &res));
    CHECK(res == MPI_CONGRUENT, "compare(copy, WORLD) = %d", res);
}

/* A message with the same tag on each of `cs` (to the next rank),
 * received in reverse order: each on its own communicator. */
static void distinct(MPI_Comm *cs, int n)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int vals[32], got;
    MPI_Request reqs[32];
    for (int i = 0; i < n; i++) {
        vals[i] = 1000 * i + rank;
        MPI_CHECK(MPI_Isend(&vals[i], 1, MPI_INT, next, 9, cs[i], &reqs[i]));
    }
    for (int i = n - 1; i >= 0; i--) {
        MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, prev, 9, cs[i], MPI_STATUS_IGNORE));
        CHECK(got == 1000 * i + prev, "communicator %d got %d", i, got);
    }
    MPI_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
}

static void idups(void)
{
    /* Rank 0 calls it and then a synchronous send, which completes only
       once rank 1 receives; rank 1 receives first and calls it after: an
       idup that waited for the others would hang. */
    MPI_Comm x;
    MPI_Request q;
    int v = 7;
    if (size > 1 && rank == 1) {
        MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &x, &q));
    } else {
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &x, &q));
        if (size > 1 && rank == 0)
            MPI_CHECK(MPI_Ssend(&v, 1, MPI_INT, 1, 1, MPI_COMM_WORLD));
    }
    MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(q == MPI_REQUEST_NULL, "Wait did not reset the request");
    same_as_world(x);
    MPI_CHECK(MPI_Comm_free(&x));
}

static void idup_orders(void)
{
    MPI_Comm a, b, c, x, y, z;
    MPI_Request q[2];
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &b));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));

    /* Two idups of different communicators in opposite orders. */
    if (rank % 2 == 0) {
        MPI_CHECK(MPI_Comm_idup(a, &x, &q[0]));
        MPI_CHECK(MPI_Comm_idup(b, &y, &q[1]));
    } else {
        MPI_CHECK(MPI_Comm_idup(b, &y, &q[1]));
        MPI_CHECK(MPI_Comm_idup(a, &x, &q[0]));
    }
    MPI_CHECK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    same_as_world(x);
    same_as_world(y);
    MPI_Comm three[3] = {x, y, a};
    distinct(three, 3);
    MPI_CHECK(MPI_Comm_free(&x));
    MPI_CHECK(MPI_Comm_free(&y));

    /* An idup and a blocking dup of another communicator, in opposite
       orders. */
    if (rank % 2 == 0) {
        MPI_CHECK(MPI_Comm_dup(c, &z));
        MPI_CHECK(MPI_Comm_idup(a, &x, &q[0]));
    } else {
        MPI_CHECK(MPI_Comm_idup(a, &x, &q[0]));
        MPI_CHECK(MPI_Comm_dup(c, &z));
    }
    MPI_CHECK(MPI_Wait(&q[0], MPI_STATUS_IGNORE));
    same_as_world(x);
    same_as_world(z);
    MPI_Comm two[2] = {x, z};
    distinct(two, 2);
    MPI_CHECK(MPI_Comm_free(&x));
    MPI_CHECK(MPI_Comm_free(&z));

    /* 16 outstanding, completed by a Testall loop. */
    MPI_Comm many[16];
    MPI_Request mq[16];
    for (int i = 0; i < 16; i++)
        MPI_CHECK(MPI_Comm_idup(i % 2 ? a : b, &many[i], &mq[i]));
    int flag = 0;
    while (!flag)
        MPI_CHECK(MPI_Testall(16, mq, &flag, MPI_STATUSES_IGNORE));
    for (int i = 0; i < 16; i++) {
        same_as_world(many[i]);
        CHECK(mq[i] == MPI_REQUEST_NULL, "completed request %d not reset", i);
    }
    distinct(many, 16);
    for (int i = 0; i < 16; i++)
        MPI_CHECK(MPI_Comm_free(&many[i]));

    /* A Test loop, and idup_with_info; names. */
    MPI_CHECK(MPI_Comm_idup_with_info(c, MPI_INFO_NULL, &x, &q[0]));
    flag = 0;
    while (!flag)
        MPI_CHECK(MPI_Test(&q[0], &flag, MPI_STATUS_IGNORE));
    same_as_world(x);
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_CHECK(MPI_Comm_set_name(x, "idup'd"));
    MPI_CHECK(MPI_Comm_get_name(x, name, &len));
    CHECK(strcmp(name, "idup'd") == 0 && len == 6, "name \"%s\" (%d)", name, len);
    MPI_CHECK(MPI_Comm_dup(x, &y));
    MPI_CHECK(MPI_Comm_get_name(y, name, &len));
    CHECK(len == 0 && name[0] == '\0', "a dup inherited the name \"%s\"", name);
    MPI_CHECK(MPI_Comm_free(&y));
    MPI_CHECK(MPI_Comm_free(&x));

    MPI_CHECK(MPI_Comm_free(&a));
    MPI_CHECK(MPI_Comm_free(&b));
    MPI_CHECK(MPI_Comm_free(&c));
}

static void groups(void)
{
    MPI_Group w, lo, hi, evens, u, in, d, e;
    int n, r, res;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    int half = size / 2;
    int rlo[1][3] = {{0, half > 0 ? half - 1 : 0, 1}}, rhi[1][3] = {{half, size - 1, 1}};
    if (half > 0)
        MPI_CHECK(MPI_Group_range_incl(w, 1, rlo, &lo));
    else
        lo = MPI_GROUP_EMPTY;
    MPI_CHECK(MPI_Group_range_incl(w, 1, rhi, &hi));
    /* hi then lo: union keeps the first group's order, then the rest. */
    MPI_CHECK(MPI_Group_union(hi, lo, &u));
    MPI_CHECK(MPI_Group_size(u, &n));
    CHECK(n == size, "union size %d", n);
    int idx[8], tr[8];
    for (int i = 0; i < size; i++)
        idx[i] = i;
    MPI_CHECK(MPI_Group_translate_ranks(u, size, idx, w, tr));
    for (int i = 0; i < size; i++)
        CHECK(tr[i] == (i < size - half ? half + i : i - (size - half)), "union[%d] = world %d", i, tr[i]);
    MPI_CHECK(MPI_Group_intersection(w, hi, &in));
    MPI_CHECK(MPI_Group_compare(in, hi, &res));
    CHECK(res == MPI_IDENT, "intersection(world, hi) vs hi: %d", res);
    MPI_CHECK(MPI_Group_difference(w, hi, &d));
    MPI_CHECK(MPI_Group_size(d, &n));
    CHECK(n == half, "difference size %d", n);
    MPI_CHECK(MPI_Group_rank(d, &r));
    CHECK(r == (rank < half ? rank : MPI_UNDEFINED), "rank in difference %d", r);
    MPI_CHECK(MPI_Group_free(&d));
    MPI_CHECK(MPI_Group_difference(hi, w, &d));
    MPI_CHECK(MPI_Group_size(d, &n));
    CHECK(n == 0, "hi minus world has %d members", n);
    MPI_CHECK(MPI_Group_free(&d));
    MPI_CHECK(MPI_Group_intersection(lo, hi, &e));
    MPI_CHECK(MPI_Group_size(e, &n));
    CHECK(n == 0, "lo and hi intersect in %d", n);
    MPI_CHECK(MPI_Group_free(&e));
    /* Every other rank excluded: the evens remain... of the odd ranks. */
    int ex[1][3] = {{0, size - 1, 2}};
    MPI_CHECK(MPI_Group_range_excl(w, 1, ex, &evens));
    MPI_CHECK(MPI_Group_size(evens, &n));
    CHECK(n == size / 2, "range_excl size %d", n);
    MPI_CHECK(MPI_Group_translate_ranks(evens, n, idx, w, tr));
    for (int i = 0; i < n; i++)
        CHECK(tr[i] == 2 * i + 1, "range_excl[%d] = world %d", i, tr[i]);

    /* Comm_create_group by both halves at once. */
    MPI_Comm hc;
    MPI_Group mine = rank < half ? lo : hi;
    MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, mine, 5, &hc));
    MPI_CHECK(MPI_Comm_size(hc, &n));
    MPI_CHECK(MPI_Comm_rank(hc, &r));
    CHECK(n == (rank < half ? half : size - half) && r == (rank < half ? rank : rank - half),
          "create_group: rank %d of %d", r, n);
    int sum = 0;
    MPI_CHECK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, hc));
    MPI_CHECK(MPI_Comm_free(&hc));

    /* Comm_create with WORLD reversed. */
    int rev[8];
    for (int i = 0; i < size; i++)
        rev[i] = size - 1 - i;
    MPI_Group rg;
    MPI_CHECK(MPI_Group_incl(w, size, rev, &rg));
    MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, rg, &hc));
    MPI_CHECK(MPI_Comm_rank(hc, &r));
    CHECK(r == size - 1 - rank, "reversed rank %d", r);
    MPI_CHECK(MPI_Comm_free(&hc));
    MPI_CHECK(MPI_Group_free(&rg));

#if MPI_VERSION >= 4
    {
        MPI_Comm all, part;
        MPI_CHECK(MPI_Comm_create_from_group(w, "oxmpi.test.all", MPI_INFO_NULL, MPI_ERRORS_RETURN, &all));
        same_as_world(all);
        MPI_Comm one[1] = {all};
        distinct(one, 1);
        MPI_Group odds;
        int oex[1][3] = {{1, size > 1 ? size - 1 : 0, 2}};
        if (size > 1)
            MPI_CHECK(MPI_Group_range_excl(w, 1, oex, &odds)); /* the even ranks */
        else
            MPI_CHECK(MPI_Group_incl(w, 1, idx, &odds));
        MPI_Group my = rank % 2 ? evens : odds; /* `evens` holds the odd ranks */
        MPI_CHECK(MPI_Comm_create_from_group(my, rank % 2 ? "oxmpi.test.odd" : "oxmpi.test.even",
                                             MPI_INFO_NULL, MPI_ERRORS_RETURN, &part));
        MPI_CHECK(MPI_Comm_rank(part, &r));
        MPI_CHECK(MPI_Comm_size(part, &n));
        CHECK(r == rank / 2 && n == (rank % 2 ? size / 2 : (size + 1) / 2),
              "create_from_group: rank %d of %d", r, n);
        sum = 0;
        MPI_CHECK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, part));
        int want = 0;
        for (int i = rank % 2; i < size; i += 2)
            want += i;
        CHECK(sum == want, "Allreduce over create_from_group: %d, expected %d", sum, want);
        MPI_CHECK(MPI_Comm_free(&part));
        MPI_CHECK(MPI_Comm_free(&all));
        MPI_CHECK(MPI_Group_free(&odds));
    }
#endif

    MPI_CHECK(MPI_Group_free(&evens));
    MPI_CHECK(MPI_Group_free(&in));
    MPI_CHECK(MPI_Group_free(&u));
    if (lo != MPI_GROUP_EMPTY)
        MPI_CHECK(MPI_Group_free(&lo));
    MPI_CHECK(MPI_Group_free(&hi));
    MPI_CHECK(MPI_Group_free(&w));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_errors_return();

    MPI_Comm d;
    MPI_CHECK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &d));
    same_as_world(d);
    MPI_CHECK(MPI_Comm_free(&d));

    idups();
    idup_orders();
    groups();

    test_ok("comm_create");
    MPI_Finalize();
    return 0;
}
