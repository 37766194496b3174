/*
 * sessions.c -- the Sessions Model beside the World Model. Any number of
 * ranks from 1. Needs MPI 4 (or Open MPI 5, which has sessions but reports
 * MPI 3.1); otherwise prints "ok: sessions (skipped: no sessions)".
 *
 *  - MPI_Session_init before MPI_Init: MPI_Initialized stays false.
 *  - The process sets: at least mpi://WORLD and mpi://SELF;
 *    Session_get_nth_pset with pset_len 0 gives the length, then the name;
 *    Session_get_pset_info gives mpi_size (the world's size for
 *    mpi://WORLD, 1 for mpi://SELF).
 *  - MPI_Group_from_session_pset: the groups of mpi://WORLD and mpi://SELF
 *    compare MPI_IDENT with MPI_Comm_group of MPI_COMM_WORLD and
 *    MPI_COMM_SELF (after MPI_Init).
 *  - Session_get_info gives an info object.
 *  - Session_create_errhandler / set / get / call_errhandler: the handler
 *    is called with the session and the code.
 *  - strict: an out-of-range pset number is MPI_ERR_ARG under the session's
 *    MPI_ERRORS_RETURN; Session_get_info has mpi_thread_support_level.
 *  - A second session opened after MPI_Init outlives MPI_Finalize: it is
 *    still usable after it and finalized last.
 */
#include "check.h"

#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define HAVE_SESSIONS 1
#endif

#ifdef HAVE_SESSIONS
static int calls;
static MPI_Session seen_session;
static int seen_code;

static void record(MPI_Session *s, int *code, ...)
{
    calls++;
    seen_session = *s;
    seen_code = *code;
}

/* The size a process set's info gives. */
static int pset_size(MPI_Session s, const char *name)
{
    MPI_Info info;
    char v[64];
    int flag = 0;
    MPI_CHECK(MPI_Session_get_pset_info(s, name, &info));
    MPI_CHECK(MPI_Info_get(info, "mpi_size", (int)sizeof v - 1, v, &flag));
    CHECK(flag, "no mpi_size in the info of %s", name);
    MPI_CHECK(MPI_Info_free(&info));
    return atoi(v);
}

static int same_text(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char x = *a, y = *b;
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (char)(y - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return *a == *b;
}
#endif

int main(int argc, char **argv)
{
#ifdef HAVE_SESSIONS
    MPI_Session s1, s2;
    int n, flag, rank, size, cmp;
    MPI_CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s1));
    MPI_CHECK(MPI_Initialized(&flag));
    CHECK(!flag, "MPI_Initialized is true with only a session");

    MPI_CHECK(MPI_Session_get_num_psets(s1, MPI_INFO_NULL, &n));
    CHECK(n >= 2, "%d process sets", n);
    int have_world = 0, have_self = 0;
    for (int i = 0; i < n; i++) {
        char name[MPI_MAX_PSET_NAME_LEN];
        int len = 0;
        MPI_CHECK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, NULL));
        CHECK(len > 1 && len <= MPI_MAX_PSET_NAME_LEN, "length of pset %d: %d", i, len);
        int room = len;
        MPI_CHECK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &room, name));
        CHECK((int)strlen(name) == len - 1, "pset %d: '%s' of length %d", i, name, len);
        have_world |= same_text(name, "mpi://WORLD");
        have_self |= same_text(name, "mpi://SELF");
    }
    CHECK(have_world && have_self, "mpi://WORLD %d, mpi://SELF %d", have_world, have_self);
    CHECK(pset_size(s1, "mpi://SELF") == 1, "mpi://SELF has size %d", pset_size(s1, "mpi://SELF"));

    MPI_Group gw, gs;
    MPI_CHECK(MPI_Group_from_session_pset(s1, "mpi://WORLD", &gw));
    MPI_CHECK(MPI_Group_from_session_pset(s1, "mpi://SELF", &gs));
    MPI_CHECK(MPI_Group_size(gw, &size));
    CHECK(size == pset_size(s1, "mpi://WORLD"), "group of %d, mpi_size %d", size,
          pset_size(s1, "mpi://WORLD"));
    MPI_CHECK(MPI_Group_size(gs, &n));
    MPI_CHECK(MPI_Group_rank(gs, &rank));
    CHECK(n == 1 && rank == 0, "self group: size %d rank %d", n, rank);

    {
        MPI_Info info;
        MPI_CHECK(MPI_Session_get_info(s1, &info));
        CHECK(info != MPI_INFO_NULL, "Session_get_info gave MPI_INFO_NULL");
        if (strict_mode()) {
            char v[64];
            MPI_CHECK(MPI_Info_get(info, "mpi_thread_support_level", (int)sizeof v - 1, v, &flag));
            CHECK(flag, "no mpi_thread_support_level");
        }
        MPI_CHECK(MPI_Info_free(&info));
    }

    /* The session's error handlers. */
    {
        MPI_Errhandler eh, got;
        MPI_CHECK(MPI_Session_create_errhandler(record, &eh));
        MPI_CHECK(MPI_Session_set_errhandler(s1, eh));
        MPI_CHECK(MPI_Session_get_errhandler(s1, &got));
        CHECK(got == eh, "Session_get_errhandler gave another handler");
        MPI_CHECK(MPI_Errhandler_free(&got));
        MPI_CHECK(MPI_Errhandler_free(&eh));
        MPI_CHECK(MPI_Session_call_errhandler(s1, MPI_ERR_OTHER));
        CHECK(calls == 1 && seen_session == s1 && seen_code == MPI_ERR_OTHER,
              "session handler: %d calls, code %d", calls, seen_code);
        MPI_CHECK(MPI_Session_set_errhandler(s1, MPI_ERRORS_RETURN));
        if (strict_mode()) {
            int len = 0;
            CHECK_CLASS(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, 1000, &len, NULL), MPI_ERR_ARG);
        }
    }

    /* The World Model beside it. */
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    {
        MPI_Group g;
        MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &g));
        MPI_CHECK(MPI_Group_compare(g, gw, &cmp));
        CHECK(cmp == MPI_IDENT, "mpi://WORLD's group against MPI_COMM_WORLD's: %d", cmp);
        MPI_CHECK(MPI_Group_rank(gw, &n));
        CHECK(n == rank, "rank %d in mpi://WORLD's group, %d in MPI_COMM_WORLD", n, rank);
        MPI_CHECK(MPI_Group_free(&g));
        MPI_CHECK(MPI_Comm_group(MPI_COMM_SELF, &g));
        MPI_CHECK(MPI_Group_compare(g, gs, &cmp));
        CHECK(cmp == MPI_IDENT, "mpi://SELF's group against MPI_COMM_SELF's: %d", cmp);
        MPI_CHECK(MPI_Group_free(&g));
    }
    MPI_CHECK(MPI_Group_free(&gw));
    MPI_CHECK(MPI_Group_free(&gs));
    MPI_CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s2));
    CHECK(s2 != s1, "two sessions share a handle");
    MPI_CHECK(MPI_Session_finalize(&s1));
    CHECK(s1 == MPI_SESSION_NULL, "Session_finalize did not null the handle");
    /* The World Model is still there. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("sessions");
    MPI_Finalize();
    MPI_Finalized(&flag);
    CHECK(flag, "MPI_Finalized false after MPI_Finalize");
    /* The second session outlives MPI_Finalize. */
    MPI_CHECK(MPI_Session_get_num_psets(s2, MPI_INFO_NULL, &n));
    CHECK(n >= 2, "%d process sets after MPI_Finalize", n);
    MPI_CHECK(MPI_Session_finalize(&s2));
#else
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("ok: sessions (skipped: no sessions)\n");
    MPI_Finalize();
#endif
    return 0;
}
