/* Communicators and groups through the C ABI: dup (its own matching
 * space), split and split_type, create and create_group, compare, free,
 * names, groups (incl/excl/range_incl/translate/compare/free,
 * MPI_GROUP_EMPTY), the handle conversions, the ABI queries,
 * Alloc_mem/Free_mem, and argument errors under MPI_ERRORS_RETURN.
 * At least 2 ranks. Prints "comms ok" on rank 0. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The error class of a return code (errors return codes, not classes). */
static int cls(int code) {
    int c = -1;
    MPI_Error_class(code, &c);
    return c;
}

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "comms FAILED (rank %d, line %d): ", rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank, size;

/* The rank, in a communicator of the ranks of rank's parity ordered by
 * descending world rank, of world rank r. */
static int rev_rank(int r) {
    int n = 0;
    for (int q = r + 2; q < size; q += 2) n++;
    return n;
}

int main(int argc, char **argv) {
    int rc, flag, n, res, len;
    char name[MPI_MAX_OBJECT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int nevens = (size + 1) / 2, nodds = size / 2;

    /* ---- dup: same group, its own matching space, inherited handler. */
    MPI_Comm dup;
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(rc == MPI_SUCCESS && dup != MPI_COMM_NULL && dup != MPI_COMM_WORLD, "dup rc %d", rc);
    MPI_Comm_size(dup, &n);
    MPI_Comm_rank(dup, &res);
    CHECK(n == size && res == rank, "dup size %d rank %d", n, res);
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(dup, &eh);
    CHECK(eh == MPI_ERRORS_RETURN, "dup did not inherit the error handler");
    {
        /* Same tag, same peers: WORLD's message first, the dup's second;
         * the dup's receive, posted first, must take the dup's. */
        int a = rank, b = rank + 1000, ra = -1, rb = -1;
        MPI_Request rq[2];
        MPI_Isend(&a, 1, MPI_INT, next, 7, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(&b, 1, MPI_INT, next, 7, dup, &rq[1]);
        MPI_Recv(&rb, 1, MPI_INT, prev, 7, dup, MPI_STATUS_IGNORE);
        MPI_Recv(&ra, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        CHECK(rb == prev + 1000 && ra == prev, "dup traffic crossed: dup got %d, world got %d", rb, ra);
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &flag, MPI_STATUS_IGNORE);
        CHECK(!flag, "a stray message on the dup");
    }
    MPI_Comm dup2;
    MPI_Comm_dup(dup, &dup2);
    MPI_Comm_compare(dup, dup2, &res);
    CHECK(res == MPI_CONGRUENT, "dup of dup: %d", res);

    /* ---- compare. */
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &res);
    CHECK(res == MPI_IDENT, "world vs world: %d", res);
    MPI_Comm_compare(dup, dup, &res);
    CHECK(res == MPI_IDENT, "dup vs dup: %d", res);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &res);
    CHECK(res == MPI_CONGRUENT, "world vs dup: %d", res);
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_SELF, &res);
    CHECK(res == MPI_UNEQUAL, "world vs self: %d", res);

    /* ---- split: even/odd with reversed keys. */
    MPI_Comm half;
    rc = MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    CHECK(rc == MPI_SUCCESS && half != MPI_COMM_NULL, "split rc %d", rc);
    MPI_Comm_size(half, &n);
    MPI_Comm_rank(half, &res);
    CHECK(n == (rank % 2 ? nodds : nevens), "split size %d", n);
    CHECK(res == rev_rank(rank), "split rank %d, expected %d", res, rev_rank(rank));
    {
        /* Ring in the half: the neighbour below in half order is the next
         * higher world rank of the same parity (wrapping to the lowest). */
        int hr = res, hn = n, got = -1;
        MPI_Sendrecv(&rank, 1, MPI_INT, (hr + 1) % hn, 3, &got, 1, MPI_INT, (hr + hn - 1) % hn, 3, half, MPI_STATUS_IGNORE);
        int want = rank + 2 < size ? rank + 2 : rank % 2;
        CHECK(got == want, "split ring got %d, expected %d", got, want);
        int sum = 0, want_sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half);
        for (int q = rank % 2; q < size; q += 2) want_sum += q;
        CHECK(sum == want_sum, "allreduce on the split: %d, expected %d", sum, want_sum);
    }
    MPI_Comm_compare(MPI_COMM_WORLD, half, &res);
    CHECK(res == MPI_UNEQUAL, "world vs half: %d", res);
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    MPI_Comm_rank(rev, &res);
    CHECK(res == size - 1 - rank, "reversed rank %d", res);
    MPI_Comm_compare(MPI_COMM_WORLD, rev, &res);
    CHECK(res == MPI_SIMILAR, "world vs reversed: %d", res);
    /* Colour MPI_UNDEFINED on rank 0 only. */
    MPI_Comm some;
    rc = MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 4, 0, &some);
    CHECK(rc == MPI_SUCCESS, "split with undefined rc %d", rc);
    if (rank == 0) {
        CHECK(some == MPI_COMM_NULL, "undefined colour gave a communicator");
    } else {
        MPI_Comm_size(some, &n);
        MPI_Comm_rank(some, &res);
        CHECK(n == size - 1 && res == rank - 1, "split without rank 0: size %d rank %d", n, res);
        MPI_Comm_free(&some);
    }
    rc = MPI_Comm_split(MPI_COMM_WORLD, -5, 0, &some);
    CHECK(cls(rc) == MPI_ERR_ARG, "negative colour: %d", rc);

    /* ---- split_type. */
    MPI_Comm node;
    rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    CHECK(rc == MPI_SUCCESS && node != MPI_COMM_NULL, "split_type rc %d", rc);
    MPI_Comm_size(node, &n);
    MPI_Comm_rank(node, &res);
    CHECK(n >= 1 && n <= size && res >= 0 && res < n, "node size %d rank %d", n, res);
    MPI_Barrier(node);
    MPI_Comm_free(&node);
    rc = MPI_Comm_split_type(MPI_COMM_WORLD, rank == 1 ? MPI_UNDEFINED : MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    CHECK(rc == MPI_SUCCESS, "split_type with undefined rc %d", rc);
    if (rank == 1) CHECK(node == MPI_COMM_NULL, "undefined split_type gave a communicator");
    else MPI_Comm_free(&node);
    /* no resource named (no info key): MPI_COMM_NULL */
    node = MPI_COMM_WORLD;
    rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, MPI_INFO_NULL, &node);
    CHECK(rc == MPI_SUCCESS && node == MPI_COMM_NULL, "HW_GUIDED split_type: %d", rc);
    rc = MPI_Comm_split_type(MPI_COMM_WORLD, 12345, 0, MPI_INFO_NULL, &node);
    CHECK(cls(rc) == MPI_ERR_ARG, "unknown split_type: %d", rc);

    /* ---- groups. */
    MPI_Group wg, evens, odds, g;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_size(wg, &n);
    MPI_Group_rank(wg, &res);
    CHECK(n == size && res == rank, "world group size %d rank %d", n, res);
    int *ev = malloc(sizeof(int) * nevens);
    for (int i = 0; i < nevens; i++) ev[i] = 2 * i;
    rc = MPI_Group_incl(wg, nevens, ev, &evens);
    CHECK(rc == MPI_SUCCESS, "incl rc %d", rc);
    MPI_Group_size(evens, &n);
    MPI_Group_rank(evens, &res);
    CHECK(n == nevens && res == (rank % 2 ? MPI_UNDEFINED : rank / 2), "evens size %d rank %d", n, res);
    rc = MPI_Group_excl(wg, nevens, ev, &odds);
    CHECK(rc == MPI_SUCCESS, "excl rc %d", rc);
    MPI_Group_size(odds, &n);
    MPI_Group_rank(odds, &res);
    CHECK(n == nodds && res == (rank % 2 ? rank / 2 : MPI_UNDEFINED), "odds size %d rank %d", n, res);
    /* range_incl: {0, size-1, 2} is the evens; {size-1, 0, -1} reverses. */
    int r1[1][3] = {{0, size - 1, 2}};
    MPI_Group_range_incl(wg, 1, r1, &g);
    MPI_Group_compare(g, evens, &res);
    CHECK(res == MPI_IDENT, "range of evens vs evens: %d", res);
    MPI_Group_free(&g);
    CHECK(g == MPI_GROUP_NULL, "group_free did not reset the handle");
    int r2[1][3] = {{size - 1, 0, -1}};
    MPI_Group_range_incl(wg, 1, r2, &g);
    MPI_Group_rank(g, &res);
    CHECK(res == size - 1 - rank, "reversed range rank %d", res);
    MPI_Group_compare(g, wg, &res);
    CHECK(res == MPI_SIMILAR, "reversed vs world group: %d", res);
    MPI_Group_free(&g);
    /* Two ranges: the odds, then rank 0. */
    int r3[2][3] = {{1, size - 1, 2}, {0, 0, 1}};
    MPI_Group_range_incl(wg, 2, r3, &g);
    MPI_Group_size(g, &n);
    CHECK(n == nodds + 1, "two ranges: size %d", n);
    {
        int q = 0, t = -1;
        MPI_Group_translate_ranks(wg, 1, &q, g, &t);
        CHECK(t == nodds, "rank 0 after the odds: %d", t);
    }
    MPI_Group_free(&g);
    int r4[1][3] = {{0, size - 1, 0}};
    rc = MPI_Group_range_incl(wg, 1, r4, &g);
    CHECK(cls(rc) == MPI_ERR_ARG, "stride 0: %d", rc);
    int r5[1][3] = {{0, size, 1}};
    rc = MPI_Group_range_incl(wg, 1, r5, &g);
    CHECK(cls(rc) == MPI_ERR_RANK, "range past the group: %d", rc);
    int r6[2][3] = {{0, size - 1, 1}, {0, 0, 1}};
    rc = MPI_Group_range_incl(wg, 2, r6, &g);
    CHECK(cls(rc) == MPI_ERR_RANK, "overlapping ranges: %d", rc);
    /* translate_ranks: world -> evens, with MPI_PROC_NULL. */
    {
        int *in = malloc(sizeof(int) * (size + 1)), *out = malloc(sizeof(int) * (size + 1));
        for (int i = 0; i < size; i++) in[i] = i;
        in[size] = MPI_PROC_NULL;
        rc = MPI_Group_translate_ranks(wg, size + 1, in, evens, out);
        CHECK(rc == MPI_SUCCESS, "translate rc %d", rc);
        for (int i = 0; i < size; i++)
            CHECK(out[i] == (i % 2 ? MPI_UNDEFINED : i / 2), "translate %d -> %d", i, out[i]);
        CHECK(out[size] == MPI_PROC_NULL, "PROC_NULL -> %d", out[size]);
        in[0] = size;
        rc = MPI_Group_translate_ranks(wg, 1, in, evens, out);
        CHECK(cls(rc) == MPI_ERR_RANK, "translate of a rank past the group: %d", rc);
        in[0] = -1;
        rc = MPI_Group_translate_ranks(wg, 1, in, evens, out);
        CHECK(cls(rc) == MPI_ERR_RANK, "translate of a negative rank: %d", rc);
        free(in); free(out);
    }
    MPI_Group_compare(wg, evens, &res);
    CHECK(res == MPI_UNEQUAL, "world vs evens: %d", res);
    MPI_Group_compare(evens, odds, &res);
    CHECK(res == MPI_UNEQUAL, "evens vs odds: %d", res);
    {
        MPI_Group wg2;
        MPI_Comm_group(dup, &wg2);
        MPI_Group_compare(wg, wg2, &res);
        CHECK(res == MPI_IDENT, "world group vs dup group: %d", res);
        MPI_Group_free(&wg2);
    }
    /* Rank errors. */
    {
        int bad[2] = {0, size};
        rc = MPI_Group_incl(wg, 2, bad, &g);
        CHECK(cls(rc) == MPI_ERR_RANK, "incl past the group: %d", rc);
        bad[1] = -1;
        rc = MPI_Group_incl(wg, 2, bad, &g);
        CHECK(cls(rc) == MPI_ERR_RANK, "incl of a negative rank: %d", rc);
        bad[1] = 0;
        rc = MPI_Group_incl(wg, 2, bad, &g);
        CHECK(cls(rc) == MPI_ERR_RANK, "incl of a rank twice: %d", rc);
        rc = MPI_Group_excl(wg, 2, bad, &g);
        CHECK(cls(rc) == MPI_ERR_RANK, "excl of a rank twice: %d", rc);
        bad[1] = size + 3;
        rc = MPI_Group_excl(wg, 2, bad, &g);
        CHECK(cls(rc) == MPI_ERR_RANK, "excl past the group: %d", rc);
        rc = MPI_Group_incl(wg, -1, bad, &g);
        CHECK(cls(rc) == MPI_ERR_ARG, "negative n: %d", rc);
    }
    /* MPI_GROUP_EMPTY. */
    MPI_Group_size(MPI_GROUP_EMPTY, &n);
    MPI_Group_rank(MPI_GROUP_EMPTY, &res);
    CHECK(n == 0 && res == MPI_UNDEFINED, "empty group: size %d rank %d", n, res);
    MPI_Group_incl(wg, 0, NULL, &g);
    MPI_Group_size(g, &n);
    MPI_Group_compare(g, MPI_GROUP_EMPTY, &res);
    CHECK(n == 0 && res == MPI_IDENT, "incl of nothing: size %d compare %d", n, res);
    MPI_Group_free(&g);
    CHECK(g == MPI_GROUP_NULL, "freeing the empty group did not reset the handle");
    MPI_Group_excl(wg, 0, NULL, &g);
    MPI_Group_compare(g, wg, &res);
    CHECK(res == MPI_IDENT, "excl of nothing: %d", res);
    MPI_Group_free(&g);
    /* Bad group handles. */
    rc = MPI_Group_size(MPI_GROUP_NULL, &n);
    CHECK(cls(rc) == MPI_ERR_GROUP, "size of GROUP_NULL: %d", rc);
    rc = MPI_Group_rank((MPI_Group)(intptr_t)0x7777, &n);
    CHECK(cls(rc) == MPI_ERR_GROUP, "rank of a garbage group: %d", rc);
    g = (MPI_Group)(intptr_t)0x12340;
    rc = MPI_Group_free(&g);
    CHECK(cls(rc) == MPI_ERR_GROUP, "free of a garbage group: %d", rc);
    g = MPI_GROUP_NULL;
    rc = MPI_Group_free(&g);
    CHECK(cls(rc) == MPI_ERR_GROUP, "free of GROUP_NULL: %d", rc);
    rc = MPI_Group_compare(wg, MPI_GROUP_NULL, &res);
    CHECK(cls(rc) == MPI_ERR_GROUP, "compare with GROUP_NULL: %d", rc);

    /* ---- Comm_create of the evens (collective over WORLD). */
    MPI_Comm ce;
    rc = MPI_Comm_create(MPI_COMM_WORLD, evens, &ce);
    CHECK(rc == MPI_SUCCESS, "create rc %d", rc);
    if (rank % 2) {
        CHECK(ce == MPI_COMM_NULL, "an odd rank got the evens' communicator");
    } else {
        MPI_Comm_size(ce, &n);
        MPI_Comm_rank(ce, &res);
        CHECK(n == nevens && res == rank / 2, "create: size %d rank %d", n, res);
        int sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, ce);
        CHECK(sum == nevens * (nevens - 1), "allreduce on created: %d", sum);
    }
    MPI_Comm cn;
    rc = MPI_Comm_create(MPI_COMM_WORLD, MPI_GROUP_EMPTY, &cn);
    CHECK(rc == MPI_SUCCESS && cn == MPI_COMM_NULL, "create of the empty group: rc %d", rc);
    /* A group that is not a subset of the communicator. */
    if (rank % 2 == 0) {
        rc = MPI_Comm_create_group(half, odds, 0, &cn);
        CHECK(cls(rc) == MPI_ERR_GROUP, "create_group of a foreign group: %d", rc);
        rc = MPI_Comm_create(half, wg, &cn);
        CHECK(cls(rc) == MPI_ERR_GROUP, "create of a foreign group: %d", rc);
    }

    /* ---- Comm_create_group: the evens and the odds at once, each among
     * themselves only, same tag. */
    MPI_Comm cg;
    if (rank % 2 == 0) rc = MPI_Comm_create_group(MPI_COMM_WORLD, evens, 5, &cg);
    else rc = MPI_Comm_create_group(MPI_COMM_WORLD, odds, 5, &cg);
    CHECK(rc == MPI_SUCCESS && cg != MPI_COMM_NULL, "create_group rc %d", rc);
    MPI_Comm_size(cg, &n);
    MPI_Comm_rank(cg, &res);
    CHECK(n == (rank % 2 ? nodds : nevens) && res == rank / 2, "create_group: size %d rank %d", n, res);
    {
        int sum = 0, want_sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, cg);
        for (int q = rank % 2; q < size; q += 2) want_sum += q;
        CHECK(sum == want_sum, "allreduce on create_group: %d, expected %d", sum, want_sum);
    }
    if (rank % 2 == 0) {
        MPI_Comm_compare(ce, cg, &res);
        CHECK(res == MPI_CONGRUENT, "create vs create_group: %d", res);
        MPI_Comm_free(&ce);
    }
    MPI_Comm_compare(half, cg, &res);
    CHECK(res == (n > 1 ? MPI_SIMILAR : MPI_CONGRUENT), "half vs create_group: %d", res);
    /* Only rank 0 and the last rank create a communicator; the others go
     * straight on. */
    if (rank == 0 || rank == size - 1) {
        int two[2] = {0, size - 1};
        MPI_Group gt;
        MPI_Group_incl(wg, 2, two, &gt);
        MPI_Comm ct;
        rc = MPI_Comm_create_group(dup, gt, 11, &ct);
        CHECK(rc == MPI_SUCCESS, "create_group of the ends: %d", rc);
        int got = -1, peer = rank == 0 ? 1 : 0;
        MPI_Sendrecv(&rank, 1, MPI_INT, peer, 0, &got, 1, MPI_INT, peer, 0, ct, MPI_STATUS_IGNORE);
        CHECK(got == (rank == 0 ? size - 1 : 0), "ends exchanged %d", got);
        MPI_Comm_free(&ct);
        MPI_Group_free(&gt);
    }
    /* A process outside the group gets MPI_COMM_NULL at once. */
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, rank % 2 ? evens : odds, 5, &cn);
    CHECK(rc == MPI_SUCCESS && cn == MPI_COMM_NULL, "create_group by a non-member: rc %d", rc);
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, evens, -1, &cn);
    CHECK(cls(rc) == MPI_ERR_TAG, "create_group with a negative tag: %d", rc);
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, MPI_GROUP_NULL, 0, &cn);
    CHECK(cls(rc) == MPI_ERR_GROUP, "create_group of GROUP_NULL: %d", rc);
    MPI_Comm_free(&cg);

    /* ---- inter queries. */
    flag = 1;
    MPI_Comm_test_inter(dup, &flag);
    CHECK(flag == 0, "test_inter");
    rc = MPI_Comm_remote_size(MPI_COMM_WORLD, &n);
    CHECK(cls(rc) == MPI_ERR_COMM, "remote_size: %d", rc);

    /* ---- names. */
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "world's name '%s' (%d)", name, len);
    MPI_Comm_get_name(MPI_COMM_SELF, name, &len);
    CHECK(strcmp(name, "MPI_COMM_SELF") == 0, "self's name '%s'", name);
    len = 99;
    MPI_Comm_get_name(dup, name, &len);
    CHECK(len == 0 && name[0] == 0, "a new communicator has a name: '%s' (%d)", name, len);
    MPI_Comm_set_name(dup, "my duplicate");
    MPI_Comm_get_name(dup, name, &len);
    CHECK(strcmp(name, "my duplicate") == 0 && len == 12, "dup's name '%s' (%d)", name, len);
    {
        char longname[300];
        memset(longname, 'x', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        MPI_Comm_set_name(half, longname);
        MPI_Comm_get_name(half, name, &len);
        CHECK(len == MPI_MAX_OBJECT_NAME - 1 && (int)strlen(name) == len, "long name cut to %d", len);
    }

    /* ---- handle conversions. */
    CHECK(MPI_Comm_toint(MPI_COMM_WORLD) == 0x101 && MPI_Comm_fromint(0x101) == MPI_COMM_WORLD, "comm world");
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(dup)) == dup, "comm dup round trip");
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_NULL)) == MPI_COMM_NULL, "comm null");
    CHECK(MPI_Group_fromint(MPI_Group_toint(evens)) == evens, "group round trip");
    CHECK(MPI_Group_toint(MPI_GROUP_EMPTY) == 0x109, "group empty");
    {
        MPI_Request rq;
        int x = 0;
        MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &rq);
        MPI_Request rq2 = MPI_Request_fromint(MPI_Request_toint(rq));
        CHECK(rq2 == rq, "request round trip");
        MPI_Wait(&rq2, MPI_STATUS_IGNORE);
        CHECK(MPI_Request_toint(MPI_REQUEST_NULL) == 0x180, "request null");
    }
    CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_INT)) == MPI_INT && MPI_Type_toint(MPI_DATATYPE_NULL) == 0x200, "type");
    CHECK(MPI_Op_fromint(MPI_Op_toint(MPI_SUM)) == MPI_SUM && MPI_Op_toint(MPI_OP_NULL) == 0x20, "op");
    CHECK(MPI_Errhandler_fromint(MPI_Errhandler_toint(MPI_ERRORS_RETURN)) == MPI_ERRORS_RETURN, "errhandler");
    CHECK(MPI_Message_fromint(MPI_Message_toint(MPI_MESSAGE_NO_PROC)) == MPI_MESSAGE_NO_PROC, "message");
    CHECK(MPI_Info_fromint(MPI_Info_toint(MPI_INFO_NULL)) == MPI_INFO_NULL, "info");
    CHECK(MPI_Win_fromint(MPI_Win_toint(MPI_WIN_NULL)) == MPI_WIN_NULL, "win");
    CHECK(MPI_File_fromint(MPI_File_toint(MPI_FILE_NULL)) == MPI_FILE_NULL, "file");
    CHECK(MPI_Session_fromint(MPI_Session_toint(MPI_SESSION_NULL)) == MPI_SESSION_NULL, "session");
    CHECK(PMPI_Comm_toint(MPI_COMM_SELF) == 0x102, "PMPI_Comm_toint");
    CHECK(MPI_Comm_fromint(-5) == MPI_COMM_NULL, "negative int -> null");

    /* ---- ABI queries. */
    {
        int major = -1, minor = -1;
        MPI_Abi_get_version(&major, &minor);
        CHECK(major == MPI_ABI_VERSION && minor == MPI_ABI_SUBVERSION, "abi version %d.%d", major, minor);
        MPI_Info info = MPI_INFO_ENV;
        rc = MPI_Abi_get_info(&info);
        CHECK(rc == MPI_SUCCESS && info != MPI_INFO_NULL, "abi info");
        {
            char v[16];
            int vlen = (int)sizeof v, flag = 0;
            MPI_Info_get_string(info, "mpi_aint_size", &vlen, v, &flag);
            CHECK(flag && atoi(v) == (int)sizeof(MPI_Aint), "abi info: mpi_aint_size");
            MPI_Info_free(&info);
        }
    }

    /* ---- Alloc_mem / Free_mem. */
    {
        char *p = NULL;
        rc = MPI_Alloc_mem(1 << 20, MPI_INFO_NULL, &p);
        CHECK(rc == MPI_SUCCESS && p != NULL, "alloc_mem rc %d", rc);
        CHECK(((uintptr_t)p % 16) == 0, "alloc_mem alignment");
        memset(p, 0x5a, 1 << 20);
        /* Use it as a message buffer. */
        MPI_Sendrecv(p, 1000, MPI_CHAR, next, 4, p + 4096, 1000, MPI_CHAR, prev, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(p[4096] == 0x5a && p[4096 + 999] == 0x5a, "alloc_mem buffer");
        rc = MPI_Free_mem(p);
        CHECK(rc == MPI_SUCCESS, "free_mem rc %d", rc);
        void *z = NULL;
        rc = MPI_Alloc_mem(0, MPI_INFO_NULL, &z);
        CHECK(rc == MPI_SUCCESS, "alloc_mem(0) rc %d", rc);
        MPI_Free_mem(z);
        rc = MPI_Alloc_mem((MPI_Aint)1 << 62, MPI_INFO_NULL, &z);
        CHECK(cls(rc) == MPI_ERR_NO_MEM, "huge alloc_mem: %d", rc);
        rc = MPI_Alloc_mem(-1, MPI_INFO_NULL, &z);
        CHECK(cls(rc) == MPI_ERR_ARG, "negative alloc_mem: %d", rc);
        int local;
        rc = MPI_Free_mem(&local);
        CHECK(cls(rc) == MPI_ERR_ARG, "free_mem of a stack address: %d", rc);
    }

    /* ---- bad communicators and free. */
    MPI_Comm c;
    rc = MPI_Comm_dup(MPI_COMM_NULL, &c);
    CHECK(cls(rc) == MPI_ERR_COMM, "dup of COMM_NULL: %d", rc);
    rc = MPI_Comm_dup((MPI_Comm)(intptr_t)0x54321, &c);
    CHECK(cls(rc) == MPI_ERR_COMM, "dup of a garbage handle: %d", rc);
    rc = MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_NULL, &res);
    CHECK(cls(rc) == MPI_ERR_COMM, "compare with COMM_NULL: %d", rc);
    rc = MPI_Comm_group((MPI_Comm)(intptr_t)0x10004, &g);
    CHECK(cls(rc) == MPI_ERR_COMM, "group of a garbage handle: %d", rc);
    rc = MPI_Comm_set_name(MPI_COMM_NULL, "x");
    CHECK(cls(rc) == MPI_ERR_COMM, "set_name of COMM_NULL: %d", rc);
    c = MPI_COMM_WORLD;
    rc = MPI_Comm_free(&c);
    CHECK(cls(rc) == MPI_ERR_COMM && c == MPI_COMM_WORLD, "free of WORLD: %d", rc);
    c = MPI_COMM_SELF;
    rc = MPI_Comm_free(&c);
    CHECK(cls(rc) == MPI_ERR_COMM, "free of SELF: %d", rc);
    c = MPI_COMM_NULL;
    rc = MPI_Comm_free(&c);
    CHECK(cls(rc) == MPI_ERR_COMM, "free of COMM_NULL: %d", rc);
    c = (MPI_Comm)(intptr_t)0x99999;
    rc = MPI_Comm_free(&c);
    CHECK(cls(rc) == MPI_ERR_COMM, "free of a garbage handle: %d", rc);
    c = dup;
    rc = MPI_Comm_free(&dup);
    CHECK(rc == MPI_SUCCESS && dup == MPI_COMM_NULL, "free of the dup: %d", rc);
    rc = MPI_Comm_free(&c);
    CHECK(cls(rc) == MPI_ERR_COMM, "double free: %d", rc);
    rc = MPI_Comm_rank(c, &res);
    CHECK(cls(rc) == MPI_ERR_COMM, "rank of a freed communicator: %d", rc);
    MPI_Comm_free(&dup2);
    MPI_Comm_free(&half);
    MPI_Comm_free(&rev);
    MPI_Group_free(&evens);
    MPI_Group_free(&odds);
    MPI_Group_free(&wg);
    free(ev);

    /* Many dup/free cycles stay usable. */
    for (int i = 0; i < 50; i++) {
        MPI_Comm d;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        int v = i, got = -1;
        MPI_Sendrecv(&v, 1, MPI_INT, next, 0, &got, 1, MPI_INT, prev, 0, d, MPI_STATUS_IGNORE);
        CHECK(got == i, "dup cycle %d", i);
        MPI_Comm_free(&d);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("comms ok\n");
    MPI_Finalize();
    return 0;
}
