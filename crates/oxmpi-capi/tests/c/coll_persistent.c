/*
 * coll_persistent.c -- MPI-4 persistent collectives: every `_init` form
 * (Barrier_init ... Exscan_init) made once per call site and root, started
 * and waited for in three iterations with changing data, the request
 * inactive and reusable after each completion, freed by Request_free at
 * the end (the checks are in coll_modes.h). Also: Startall of three
 * persistent collectives at once completed by Waitall, Test on an inactive
 * persistent collective (flag true at once), a persistent collective and a
 * persistent point-to-point request in one Startall; Request_get_status
 * of a completed persistent collective leaves it active (strict: Start
 * before its Wait is MPI_ERR_REQUEST).
 *
 * Ranks: any number from 1 to 8 (minimum 1).
 */
#include "coll_modes.h"

static void t_startall(void)
{
    int a[4], b[4], c = 0, d = 0, sb = 0, rb = -1;
    MPI_Request r[5];
    MPI_CHECK(MPI_Bcast_init(a, 4, MPI_INT, np - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]));
    MPI_CHECK(MPI_Allreduce_init(b, b + 2, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]));
    MPI_CHECK(MPI_Scan_init(&c, &d, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r[2]));
    MPI_CHECK(MPI_Send_init(&sb, 1, MPI_INT, (me + 1) % np, 5, MPI_COMM_WORLD, &r[3]));
    MPI_CHECK(MPI_Recv_init(&rb, 1, MPI_INT, (me - 1 + np) % np, 5, MPI_COMM_WORLD, &r[4]));
    int flag = 0;
    MPI_Status st;
    MPI_CHECK(MPI_Test(&r[1], &flag, &st));
    CHECK(flag, "Test of an inactive persistent collective: flag false");
    for (int it = 0; it < 4; it++) {
        for (int i = 0; i < 4; i++)
            a[i] = me == np - 1 ? it * 10 + i : -1;
        b[0] = me + it;
        b[1] = -me;
        c = me + it;
        sb = me * 3 + it;
        MPI_CHECK(MPI_Startall(5, r));
        MPI_CHECK(MPI_Waitall(5, r, MPI_STATUSES_IGNORE));
        for (int i = 0; i < 5; i++)
            CHECK(r[i] != MPI_REQUEST_NULL, "Waitall freed persistent request %d", i);
        for (int i = 0; i < 4; i++)
            CHECK(a[i] == it * 10 + i, "Startall bcast [%d]", i);
        CHECK(b[2] == np - 1 + it && b[3] == 0, "Startall allreduce %d %d", b[2], b[3]);
        CHECK(d == me * (me + 1) / 2 + (me + 1) * it, "Startall scan %d", d);
        CHECK(rb == ((me - 1 + np) % np) * 3 + it, "persistent recv %d", rb);
    }
    for (int i = 0; i < 5; i++)
        MPI_CHECK(MPI_Request_free(&r[i]));
}

/* MPI_Request_get_status on a completed persistent collective leaves it
 * active: asked twice, complete both times; (strict) MPI_Start of it
 * before the MPI_Wait is MPI_ERR_REQUEST; the Wait then deactivates it. */
static void t_get_status(void)
{
    int b[2], flag = 0;
    MPI_Request r;
    MPI_CHECK(MPI_Allreduce_init(&me, b, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    for (int it = 0; it < 2; it++) {
        b[0] = -1;
        MPI_CHECK(MPI_Start(&r));
        for (flag = 0; !flag;)
            MPI_CHECK(MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE));
        CHECK(flag, "a completed persistent collective incomplete at its second get_status");
        if (strict_mode())
            CHECK_CLASS(MPI_Start(&r), MPI_ERR_REQUEST);
        MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(r != MPI_REQUEST_NULL, "Wait freed a persistent collective");
        CHECK(b[0] == np * (np - 1) / 2, "Allreduce_init after get_status: %d", b[0]);
    }
    MPI_CHECK(MPI_Request_free(&r));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    coll_setup(2);
    coll_all();
    /* a second round on the same requests: still reusable */
    coll_all();
    t_startall();
    t_get_status();
    coll_teardown();
    test_ok("coll_persistent");
    MPI_Finalize();
    return 0;
}
