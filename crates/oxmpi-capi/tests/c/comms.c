/*
 * comms.c -- communicators and groups.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Checks:
 *  - Comm_dup: same size/rank, Comm_compare CONGRUENT (IDENT with itself),
 *    not an intercommunicator, empty name (names are not copied), and
 *    isolation: a message sent on the dup and then one on WORLD with the same
 *    source and tag are each received only on their own communicator (also
 *    with MPI_ANY_SOURCE/MPI_ANY_TAG).
 *  - Comm_split even/odd with key = -rank (reversed order): sizes, ranks,
 *    compare UNEQUAL; split with one color and key = -rank: SIMILAR; with key
 *    0: CONGRUENT; color MPI_UNDEFINED gives MPI_COMM_NULL; collective
 *    traffic (Allreduce) on the new communicators.
 *  - Comm_split_type(MPI_COMM_TYPE_SHARED): a valid communicator whose
 *    members are in WORLD order; MPI_UNDEFINED gives MPI_COMM_NULL, and so
 *    do MPI_COMM_TYPE_HW_GUIDED and (MPI 4.1) MPI_COMM_TYPE_RESOURCE_GUIDED
 *    with MPI_INFO_NULL (no resource named).
 *  - Groups: Comm_group, Group_size/rank, incl (reordered), excl,
 *    range_incl (strided), translate_ranks (including MPI_PROC_NULL and
 *    ranks absent from the target group), Group_compare IDENT / SIMILAR /
 *    UNEQUAL, MPI_GROUP_EMPTY, Group_free sets MPI_GROUP_NULL.
 *  - Comm_create (even ranks; odd ranks get MPI_COMM_NULL) and
 *    Comm_create_group (called by odd ranks only); their groups translate
 *    back to the expected WORLD ranks.
 *  - Comm_test_inter false. Strict mode only (OXMPI_STRICT=1): Comm_remote_size
 *    on an intracommunicator returns MPI_ERR_COMM under MPI_ERRORS_RETURN
 *    (the call is erroneous; MPICH and Open MPI return MPI_SUCCESS).
 *  - Comm_get_name: "MPI_COMM_WORLD", "MPI_COMM_SELF"; Comm_set_name/get_name.
 *  - Comm_free sets MPI_COMM_NULL; 32 dup/free cycles (context ids recycled).
 */
#include "check.h"

static int rank, size;

static int allreduce_sum(MPI_Comm c, int v)
{
    int out = 0;
    MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_SUM, c));
    return out;
}

static void dup_and_isolation(void)
{
    MPI_Comm d;
    int r = -1, s = -1, res = -1, flag = -1, len = -1;
    char name[MPI_MAX_OBJECT_NAME];

    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    MPI_CHECK(MPI_Comm_rank(d, &r));
    MPI_CHECK(MPI_Comm_size(d, &s));
    CHECK(r == rank && s == size, "dup rank/size %d/%d", r, s);
    MPI_CHECK(MPI_Comm_compare(MPI_COMM_WORLD, d, &res));
    CHECK(res == MPI_CONGRUENT, "compare(WORLD, dup) = %d, expected MPI_CONGRUENT", res);
    MPI_CHECK(MPI_Comm_compare(d, d, &res));
    CHECK(res == MPI_IDENT, "compare(dup, dup) = %d, expected MPI_IDENT", res);
    MPI_CHECK(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &res));
    CHECK(res == MPI_IDENT, "compare(WORLD, WORLD) = %d", res);
    MPI_CHECK(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_SELF, &res));
    CHECK(res == MPI_UNEQUAL, "compare(WORLD, SELF) = %d", res);
    MPI_CHECK(MPI_Comm_test_inter(d, &flag));
    CHECK(flag == 0, "dup is an intercommunicator");
    name[0] = 'x';
    MPI_CHECK(MPI_Comm_get_name(d, name, &len));
    CHECK(len == 0 && name[0] == '\0', "dup name '%s' (len %d): names are not copied", name, len);
    MPI_CHECK(MPI_Comm_set_name(d, "oxmpi dup"));
    MPI_CHECK(MPI_Comm_get_name(d, name, &len));
    CHECK(strcmp(name, "oxmpi dup") == 0 && len == 9, "dup set name '%s' len %d", name, len);
    {
        char wname[MPI_MAX_OBJECT_NAME];
        MPI_CHECK(MPI_Comm_get_name(MPI_COMM_WORLD, wname, &len));
        CHECK(strcmp(wname, "MPI_COMM_WORLD") == 0, "naming the dup renamed WORLD: '%s'", wname);
    }

    /* isolation: rank 0 sends "dup" on d then "world" on WORLD, same tag */
    {
        int a = 111, b = 222;
        MPI_Request req[4];
        if (rank == 0) {
            MPI_CHECK(MPI_Isend(&a, 1, MPI_INT, 1, 5, d, &req[0]));
            MPI_CHECK(MPI_Isend(&b, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &req[1]));
            MPI_CHECK(MPI_Isend(&a, 1, MPI_INT, 1, 6, d, &req[2]));
            MPI_CHECK(MPI_Isend(&b, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, &req[3]));
        }
        /* give the messages time to arrive before rank 1 receives */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 1) {
            int v = -1;
            MPI_Status st;
            /* WORLD must see only its own messages */
            MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &st));
            CHECK(v == 222, "WORLD receive matched the message sent on the dup (%d)", v);
            MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            CHECK(v == 222 && st.MPI_TAG == 6, "WORLD wildcard receive got %d tag %d", v,
                  st.MPI_TAG);
            MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, d, &st));
            CHECK(v == 111 && st.MPI_TAG == 5 && st.MPI_SOURCE == 0, "dup receive got %d tag %d",
                  v, st.MPI_TAG);
            MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 6, d, &st));
            CHECK(v == 111, "dup receive got %d", v);
        }
        if (rank == 0)
            MPI_CHECK(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
    }
    CHECK(allreduce_sum(d, rank) == size * (size - 1) / 2, "Allreduce on the dup");
    MPI_CHECK(MPI_Comm_free(&d));
    CHECK(d == MPI_COMM_NULL, "Comm_free did not set MPI_COMM_NULL");
}

static void splits(void)
{
    MPI_Comm c;
    int r, s, res, i, expect_size = 0, expect_rank = 0;

    /* even/odd, reversed order */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &c));
    CHECK(c != MPI_COMM_NULL, "split gave MPI_COMM_NULL");
    for (i = 0; i < size; i++)
        if (i % 2 == rank % 2) {
            expect_size++;
            if (i > rank)
                expect_rank++;
        }
    MPI_CHECK(MPI_Comm_size(c, &s));
    MPI_CHECK(MPI_Comm_rank(c, &r));
    CHECK(s == expect_size && r == expect_rank, "split even/odd: size %d rank %d, expected %d %d",
          s, r, expect_size, expect_rank);
    MPI_CHECK(MPI_Comm_compare(MPI_COMM_WORLD, c, &res));
    CHECK(res == MPI_UNEQUAL, "compare(WORLD, even/odd split) = %d", res);
    {
        /* members in reversed WORLD order */
        int *ranks = malloc((size_t)s * sizeof(int));
        MPI_CHECK(MPI_Allgather(&rank, 1, MPI_INT, ranks, 1, MPI_INT, c));
        for (i = 1; i < s; i++)
            CHECK(ranks[i] == ranks[i - 1] - 2, "split order: %d after %d", ranks[i], ranks[i - 1]);
        free(ranks);
    }
    MPI_CHECK(MPI_Comm_free(&c));

    /* one color, reversed keys: same group, different order */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 7, -rank, &c));
    MPI_CHECK(MPI_Comm_rank(c, &r));
    CHECK(r == size - 1 - rank, "reversed split rank %d", r);
    MPI_CHECK(MPI_Comm_compare(MPI_COMM_WORLD, c, &res));
    CHECK(res == MPI_SIMILAR, "compare(WORLD, reversed split) = %d, expected MPI_SIMILAR", res);
    MPI_CHECK(MPI_Comm_free(&c));

    /* one color, equal keys: ties keep WORLD order */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &c));
    MPI_CHECK(MPI_Comm_rank(c, &r));
    CHECK(r == rank, "split with equal keys: rank %d", r);
    MPI_CHECK(MPI_Comm_compare(MPI_COMM_WORLD, c, &res));
    CHECK(res == MPI_CONGRUENT, "compare(WORLD, same split) = %d, expected MPI_CONGRUENT", res);
    MPI_CHECK(MPI_Comm_free(&c));

    /* MPI_UNDEFINED for rank 0 */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, rank, &c));
    if (rank == 0) {
        CHECK(c == MPI_COMM_NULL, "split with MPI_UNDEFINED did not give MPI_COMM_NULL");
    } else {
        MPI_CHECK(MPI_Comm_size(c, &s));
        MPI_CHECK(MPI_Comm_rank(c, &r));
        CHECK(s == size - 1 && r == rank - 1, "split without rank 0: size %d rank %d", s, r);
        CHECK(allreduce_sum(c, 1) == size - 1, "Allreduce without rank 0");
        MPI_CHECK(MPI_Comm_free(&c));
    }

    /* shared-memory split */
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &c));
    CHECK(c != MPI_COMM_NULL, "split_type(SHARED) gave MPI_COMM_NULL");
    MPI_CHECK(MPI_Comm_size(c, &s));
    MPI_CHECK(MPI_Comm_rank(c, &r));
    CHECK(s >= 1 && s <= size && r >= 0 && r < s, "split_type(SHARED) size %d rank %d", s, r);
    CHECK(allreduce_sum(c, 1) == s, "Allreduce on the shared communicator");
    {
        int *ranks = malloc((size_t)s * sizeof(int));
        MPI_CHECK(MPI_Allgather(&rank, 1, MPI_INT, ranks, 1, MPI_INT, c));
        CHECK(ranks[r] == rank, "shared communicator: my slot holds %d", ranks[r]);
        for (i = 1; i < s; i++)
            CHECK(ranks[i] > ranks[i - 1], "shared communicator not in WORLD order");
        free(ranks);
    }
    MPI_CHECK(MPI_Comm_free(&c));
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, rank, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL, "split_type(MPI_UNDEFINED) did not give MPI_COMM_NULL");
#if MPI_VERSION >= 4
    /* guided splits without their info key (mpi_hw_resource_type,
     * mpi_pset_name): MPI_COMM_NULL */
    c = MPI_COMM_WORLD;
    MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL, "split_type(HW_GUIDED) without a key did not give MPI_COMM_NULL");
#if MPI_VERSION >= 5 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    c = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, rank,
                                  MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL,
          "split_type(RESOURCE_GUIDED) without a key did not give MPI_COMM_NULL");
    {
        /* mpi_hw_resource_type = mpi_shared_memory: the shared-memory
         * split, and the info argument left as it was */
        MPI_Info info;
        MPI_Comm shared;
        char val[64];
        int flag, s2;
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                                      &shared));
        MPI_CHECK(MPI_Comm_size(shared, &s));
        MPI_CHECK(MPI_Info_create(&info));
        MPI_CHECK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
        MPI_CHECK(
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, rank, info, &c));
        CHECK(c != MPI_COMM_NULL, "split_type(RESOURCE_GUIDED, mpi_shared_memory) gave NULL");
        MPI_CHECK(MPI_Comm_size(c, &s2));
        CHECK(s2 == s, "RESOURCE_GUIDED shared-memory split of %d, SHARED gives %d", s2, s);
        MPI_CHECK(MPI_Comm_free(&c));
        MPI_CHECK(MPI_Info_get_string(info, "mpi_hw_resource_type", &(int){64}, val, &flag));
        CHECK(flag && strcmp(val, "mpi_shared_memory") == 0, "the info's key became '%s'", val);
        MPI_CHECK(MPI_Info_free(&info));
        /* unguided: a strictly smaller communicator naming its resource in
         * the info, or MPI_COMM_NULL */
        MPI_CHECK(MPI_Info_create(&info));
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, rank, info, &c));
        if (c != MPI_COMM_NULL) {
            MPI_CHECK(MPI_Comm_size(c, &s2));
            CHECK(s2 < size, "HW_UNGUIDED split of %d from %d ranks", s2, size);
            MPI_CHECK(MPI_Info_get_string(info, "mpi_hw_resource_type", &(int){64}, val, &flag));
            CHECK(flag, "HW_UNGUIDED did not name its resource type");
            MPI_CHECK(MPI_Comm_free(&c));
        }
        MPI_CHECK(MPI_Info_free(&info));
        MPI_CHECK(MPI_Comm_free(&shared));
    }
#endif
#endif
}

static void groups(void)
{
    MPI_Group w, g, evens, odds;
    int s, r, res, i, n;
    int ranks[8], out[8];

    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    MPI_CHECK(MPI_Group_size(w, &s));
    MPI_CHECK(MPI_Group_rank(w, &r));
    CHECK(s == size && r == rank, "WORLD group size %d rank %d", s, r);
    MPI_CHECK(MPI_Group_compare(w, w, &res));
    CHECK(res == MPI_IDENT, "group compare with itself %d", res);

    MPI_CHECK(MPI_Group_size(MPI_GROUP_EMPTY, &s));
    MPI_CHECK(MPI_Group_rank(MPI_GROUP_EMPTY, &r));
    CHECK(s == 0 && r == MPI_UNDEFINED, "GROUP_EMPTY size %d rank %d", s, r);

    /* incl {last, 0} */
    ranks[0] = size - 1;
    ranks[1] = 0;
    MPI_CHECK(MPI_Group_incl(w, 2, ranks, &g));
    MPI_CHECK(MPI_Group_size(g, &s));
    MPI_CHECK(MPI_Group_rank(g, &r));
    CHECK(s == 2, "incl size %d", s);
    CHECK(r == (rank == size - 1 ? 0 : rank == 0 ? 1 : MPI_UNDEFINED), "incl rank %d", r);
    MPI_CHECK(MPI_Group_compare(w, g, &res));
    CHECK(res == (size == 2 ? MPI_SIMILAR : MPI_UNEQUAL), "compare(world, incl) = %d", res);
    MPI_CHECK(MPI_Group_free(&g));
    CHECK(g == MPI_GROUP_NULL, "Group_free did not set MPI_GROUP_NULL");

    /* incl of everyone in order: IDENT; reversed: SIMILAR */
    for (i = 0; i < size; i++)
        ranks[i] = i;
    MPI_CHECK(MPI_Group_incl(w, size, ranks, &g));
    MPI_CHECK(MPI_Group_compare(w, g, &res));
    CHECK(res == MPI_IDENT, "compare(world, incl all) = %d", res);
    MPI_CHECK(MPI_Group_free(&g));
    for (i = 0; i < size; i++)
        ranks[i] = size - 1 - i;
    MPI_CHECK(MPI_Group_incl(w, size, ranks, &g));
    MPI_CHECK(MPI_Group_compare(w, g, &res));
    CHECK(res == MPI_SIMILAR, "compare(world, reversed) = %d", res);
    MPI_CHECK(MPI_Group_rank(g, &r));
    CHECK(r == size - 1 - rank, "reversed group rank %d", r);
    MPI_CHECK(MPI_Group_free(&g));

    /* excl {0} */
    ranks[0] = 0;
    MPI_CHECK(MPI_Group_excl(w, 1, ranks, &g));
    MPI_CHECK(MPI_Group_size(g, &s));
    MPI_CHECK(MPI_Group_rank(g, &r));
    CHECK(s == size - 1 && r == (rank == 0 ? MPI_UNDEFINED : rank - 1), "excl size %d rank %d", s,
          r);
    MPI_CHECK(MPI_Group_compare(w, g, &res));
    CHECK(res == MPI_UNEQUAL, "compare(world, excl) = %d", res);

    /* translate from the excl group to WORLD and back */
    for (i = 0; i < size - 1; i++)
        ranks[i] = i;
    MPI_CHECK(MPI_Group_translate_ranks(g, size - 1, ranks, w, out));
    for (i = 0; i < size - 1; i++)
        CHECK(out[i] == i + 1, "translate excl->world [%d] = %d", i, out[i]);
    ranks[0] = 0;
    ranks[1] = MPI_PROC_NULL;
    ranks[2] = size - 1;
    MPI_CHECK(MPI_Group_translate_ranks(w, 3, ranks, g, out));
    CHECK(out[0] == MPI_UNDEFINED && out[1] == MPI_PROC_NULL && out[2] == size - 2,
          "translate world->excl: %d %d %d", out[0], out[1], out[2]);
    MPI_CHECK(MPI_Group_free(&g));

    /* range_incl: evens {0, size-1, 2} and odds {1, size-1, 2} */
    {
        int range[1][3];
        range[0][0] = 0;
        range[0][1] = size - 1;
        range[0][2] = 2;
        MPI_CHECK(MPI_Group_range_incl(w, 1, range, &evens));
        range[0][0] = 1;
        MPI_CHECK(MPI_Group_range_incl(w, 1, range, &odds));
    }
    MPI_CHECK(MPI_Group_size(evens, &s));
    CHECK(s == (size + 1) / 2, "range_incl evens size %d", s);
    MPI_CHECK(MPI_Group_size(odds, &s));
    CHECK(s == size / 2, "range_incl odds size %d", s);
    n = (size + 1) / 2;
    for (i = 0; i < n; i++)
        ranks[i] = i;
    MPI_CHECK(MPI_Group_translate_ranks(evens, n, ranks, w, out));
    for (i = 0; i < n; i++)
        CHECK(out[i] == 2 * i, "translate evens->world [%d] = %d", i, out[i]);
    MPI_CHECK(MPI_Group_compare(evens, odds, &res));
    CHECK(res == MPI_UNEQUAL, "compare(evens, odds) = %d", res);

    /* Comm_create with the evens group: odd ranks get COMM_NULL */
    {
        MPI_Comm c;
        MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, evens, &c));
        if (rank % 2) {
            CHECK(c == MPI_COMM_NULL, "Comm_create gave a communicator to a non-member");
        } else {
            CHECK(c != MPI_COMM_NULL, "Comm_create gave MPI_COMM_NULL to a member");
            MPI_CHECK(MPI_Comm_rank(c, &r));
            MPI_CHECK(MPI_Comm_size(c, &s));
            CHECK(r == rank / 2 && s == (size + 1) / 2, "Comm_create rank %d size %d", r, s);
            CHECK(allreduce_sum(c, rank) == (s - 1) * s, "Allreduce on the created communicator");
            MPI_CHECK(MPI_Comm_group(c, &g));
            MPI_CHECK(MPI_Group_compare(g, evens, &res));
            CHECK(res == MPI_IDENT, "created communicator's group vs evens: %d", res);
            MPI_CHECK(MPI_Group_free(&g));
            MPI_CHECK(MPI_Comm_free(&c));
        }
    }

    /* Comm_create_group: only the odd ranks call it */
    if (rank % 2) {
        MPI_Comm c;
        MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, odds, 99, &c));
        CHECK(c != MPI_COMM_NULL, "Comm_create_group gave MPI_COMM_NULL to a member");
        MPI_CHECK(MPI_Comm_rank(c, &r));
        MPI_CHECK(MPI_Comm_size(c, &s));
        CHECK(r == rank / 2 && s == size / 2, "Comm_create_group rank %d size %d", r, s);
        CHECK(allreduce_sum(c, 1) == s, "Allreduce on the Comm_create_group communicator");
        MPI_CHECK(MPI_Comm_group(c, &g));
        for (i = 0; i < s; i++)
            ranks[i] = i;
        MPI_CHECK(MPI_Group_translate_ranks(g, s, ranks, w, out));
        for (i = 0; i < s; i++)
            CHECK(out[i] == 2 * i + 1, "create_group translate [%d] = %d", i, out[i]);
        MPI_CHECK(MPI_Group_free(&g));
        MPI_CHECK(MPI_Comm_free(&c));
    }

    MPI_CHECK(MPI_Group_free(&evens));
    MPI_CHECK(MPI_Group_free(&odds));
    MPI_CHECK(MPI_Group_free(&w));
}

static void misc(void)
{
    int flag = -1, s = -1, i;
    char name[MPI_MAX_OBJECT_NAME];
    int len;

    MPI_CHECK(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
    CHECK(flag == 0, "WORLD is an intercommunicator");
    /* erroneous on an intracommunicator: MPICH 4/5 and Open MPI 5 return
     * MPI_SUCCESS, oxmpi promises MPI_ERR_COMM (strict mode only) */
    if (strict_mode())
        CHECK_CLASS(MPI_Comm_remote_size(MPI_COMM_WORLD, &s), MPI_ERR_COMM);

    MPI_CHECK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "WORLD name '%s'", name);
    MPI_CHECK(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
    CHECK(strcmp(name, "MPI_COMM_SELF") == 0 && len == 13, "SELF name '%s'", name);

    /* context ids are recycled */
    for (i = 0; i < 32; i++) {
        MPI_Comm d;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
        MPI_CHECK(MPI_Comm_free(&d));
    }
    {
        MPI_Comm d;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &d));
        MPI_CHECK(MPI_Comm_size(d, &s));
        CHECK(s == 1, "dup of SELF size %d", s);
        MPI_CHECK(MPI_Comm_free(&d));
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);

    dup_and_isolation();
    splits();
    groups();
    misc();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "comms");
    return 0;
}
