/*
 * p2p_persistent.c -- persistent requests.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Around a ring (send right, receive from left), one persistent request per
 * send mode (Send_init, Bsend_init, Ssend_init, Rsend_init, each with its own
 * tag and one small and one rendezvous-sized message) and the matching
 * Recv_init requests, reused for 10 iterations with data that changes every
 * iteration (the buffers are rewritten between iterations, the requests are
 * not recreated):
 *  - receives started with Startall, then a neighbour handshake (so the
 *    Rsend_init's receive is known to be posted), then each send started with
 *    Start; completion alternates between Waitall, a Waitany loop and a
 *    Testall loop; data, source, tag and count checked every iteration.
 *  - after completion the requests are inactive, not MPI_REQUEST_NULL; Wait,
 *    Test and Request_get_status on an inactive persistent request return at
 *    once with an empty status (source MPI_ANY_SOURCE, tag MPI_ANY_TAG,
 *    count 0), and Waitany/Testany over only inactive requests give
 *    MPI_UNDEFINED.
 *  - Request_free of the inactive requests sets them to MPI_REQUEST_NULL.
 *  - A persistent receive with MPI_ANY_SOURCE/MPI_ANY_TAG and a persistent
 *    send to MPI_PROC_NULL complete as expected.
 */
#include "check.h"

#define NITER 10
#define NMODES 4
#define SMALL 7
#define LARGE 40000 /* ints: above the usual eager limits */
#define TAG_BASE 40
#define TAG_HS 90
#define TAG_ANY 91

static int val(int src, int it, int m, int big, int i)
{
    return src * 1000000 + it * 10000 + m * 1000 + big * 500 + i % 499;
}

static void check_inactive_empty(MPI_Request *req, const char *what)
{
    MPI_Status st;
    int flag = 0, n = -1, idx = -7;
    MPI_Request keep = *req;

    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Wait(req, &st));
    CHECK(*req == keep, "%s: Wait on an inactive persistent request changed the handle", what);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "%s: Wait on inactive request: status %d/%d", what, st.MPI_SOURCE, st.MPI_TAG);
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 0, "%s: Wait on inactive request: count %d", what, n);

    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Test(req, &flag, &st));
    CHECK(flag == 1 && *req == keep, "%s: Test on inactive request: flag %d", what, flag);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "%s: Test on inactive request: status %d/%d", what, st.MPI_SOURCE, st.MPI_TAG);

    flag = 0;
    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Request_get_status(*req, &flag, &st));
    CHECK(flag == 1, "%s: Request_get_status on inactive request: flag %d", what, flag);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "%s: Request_get_status on inactive request: status %d/%d", what, st.MPI_SOURCE,
          st.MPI_TAG);

    MPI_CHECK(MPI_Waitany(1, req, &idx, &st));
    CHECK(idx == MPI_UNDEFINED && *req == keep, "%s: Waitany over an inactive request: %d",
          what, idx);
    flag = 0;
    MPI_CHECK(MPI_Testany(1, req, &idx, &flag, &st));
    CHECK(idx == MPI_UNDEFINED && flag == 1, "%s: Testany over an inactive request: %d/%d", what,
          idx, flag);
}

int main(int argc, char **argv)
{
    int rank, size, right, left, it, m, b, i, k;
    int *sbuf[NMODES][2], *rbuf[NMODES][2];
    const int cnt[2] = {SMALL, LARGE};
    MPI_Request sreq[NMODES * 2], rreq[NMODES * 2], all[NMODES * 4];
    MPI_Status st[NMODES * 4];
    int bsize;
    void *bbuf, *addr;
    double deadline;

    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    bsize = 2 * ((SMALL + LARGE) * (int)sizeof(int) + 2 * MPI_BSEND_OVERHEAD) + 64;
    bbuf = malloc((size_t)bsize);
    MPI_CHECK(MPI_Buffer_attach(bbuf, bsize));

    for (m = 0; m < NMODES; m++) {
        for (b = 0; b < 2; b++) {
            int tag = TAG_BASE + m * 2 + b, j = m * 2 + b;
            sbuf[m][b] = malloc((size_t)cnt[b] * sizeof(int));
            rbuf[m][b] = malloc((size_t)cnt[b] * sizeof(int));
            MPI_CHECK(MPI_Recv_init(rbuf[m][b], cnt[b], MPI_INT, left, tag, MPI_COMM_WORLD,
                                    &rreq[j]));
            switch (m) {
            case 0:
                MPI_CHECK(MPI_Send_init(sbuf[m][b], cnt[b], MPI_INT, right, tag, MPI_COMM_WORLD,
                                        &sreq[j]));
                break;
            case 1:
                MPI_CHECK(MPI_Bsend_init(sbuf[m][b], cnt[b], MPI_INT, right, tag, MPI_COMM_WORLD,
                                         &sreq[j]));
                break;
            case 2:
                MPI_CHECK(MPI_Ssend_init(sbuf[m][b], cnt[b], MPI_INT, right, tag, MPI_COMM_WORLD,
                                         &sreq[j]));
                break;
            case 3:
                MPI_CHECK(MPI_Rsend_init(sbuf[m][b], cnt[b], MPI_INT, right, tag, MPI_COMM_WORLD,
                                         &sreq[j]));
                break;
            }
            CHECK(sreq[j] != MPI_REQUEST_NULL && rreq[j] != MPI_REQUEST_NULL,
                  "*_init returned MPI_REQUEST_NULL");
        }
    }

    /* never-started persistent requests are inactive too */
    check_inactive_empty(&rreq[0], "never started Recv_init");
    check_inactive_empty(&sreq[0], "never started Send_init");

    for (it = 0; it < NITER; it++) {
        for (m = 0; m < NMODES; m++)
            for (b = 0; b < 2; b++)
                for (i = 0; i < cnt[b]; i++) {
                    sbuf[m][b][i] = val(rank, it, m, b, i);
                    rbuf[m][b][i] = -1;
                }
        MPI_CHECK(MPI_Startall(NMODES * 2, rreq));
        /* our receives are posted: tell the left neighbour, hear from the right */
        MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_BYTE, left, TAG_HS, NULL, 0, MPI_BYTE, right, TAG_HS,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (k = 0; k < NMODES * 2; k++)
            MPI_CHECK(MPI_Start(&sreq[k]));

        for (k = 0; k < NMODES * 2; k++) {
            all[k] = rreq[k];
            all[NMODES * 2 + k] = sreq[k];
            st[k].MPI_SOURCE = st[k].MPI_TAG = -999;
        }
        switch (it % 3) {
        case 0:
            MPI_CHECK(MPI_Waitall(NMODES * 4, all, st));
            break;
        case 1: {
            int left_to_do = NMODES * 4, idx, seen[NMODES * 4] = {0};
            while (left_to_do) {
                MPI_Status one;
                MPI_CHECK(MPI_Waitany(NMODES * 4, all, &idx, &one));
                CHECK(idx >= 0 && idx < NMODES * 4 && !seen[idx], "Waitany index %d", idx);
                seen[idx] = 1;
                st[idx] = one;
                left_to_do--;
            }
            MPI_CHECK(MPI_Waitany(NMODES * 4, all, &idx, MPI_STATUS_IGNORE));
            CHECK(idx == MPI_UNDEFINED, "Waitany over inactive persistent requests: %d", idx);
            break;
        }
        case 2: {
            int flag = 0;
            deadline = MPI_Wtime() + 30.0;
            while (!flag) {
                MPI_CHECK(MPI_Testall(NMODES * 4, all, &flag, st));
                CHECK(flag || MPI_Wtime() < deadline, "Testall: no completion within 30 s");
            }
            break;
        }
        }
        for (k = 0; k < NMODES * 4; k++)
            CHECK(all[k] != MPI_REQUEST_NULL && all[k] == (k < NMODES * 2 ? rreq[k] : sreq[k - NMODES * 2]),
                  "iteration %d: completion freed or changed persistent request %d", it, k);
        for (m = 0; m < NMODES; m++) {
            for (b = 0; b < 2; b++) {
                int j = m * 2 + b, n = -1;
                CHECK(st[j].MPI_SOURCE == left && st[j].MPI_TAG == TAG_BASE + j,
                      "iteration %d mode %d: status %d/%d", it, m, st[j].MPI_SOURCE,
                      st[j].MPI_TAG);
                MPI_CHECK(MPI_Get_count(&st[j], MPI_INT, &n));
                CHECK(n == cnt[b], "iteration %d mode %d: count %d", it, m, n);
                for (i = 0; i < cnt[b]; i++)
                    CHECK(rbuf[m][b][i] == val(left, it, m, b, i),
                          "iteration %d mode %d size %d: data[%d] = %d, expected %d", it, m,
                          cnt[b], i, rbuf[m][b][i], val(left, it, m, b, i));
            }
        }
    }

    for (k = 0; k < NMODES * 2; k++) {
        check_inactive_empty(&rreq[k], "completed Recv_init");
        check_inactive_empty(&sreq[k], "completed send *_init");
        MPI_CHECK(MPI_Request_free(&rreq[k]));
        MPI_CHECK(MPI_Request_free(&sreq[k]));
        CHECK(rreq[k] == MPI_REQUEST_NULL && sreq[k] == MPI_REQUEST_NULL,
              "Request_free of an inactive persistent request did not null it");
    }

    /* wildcard persistent receive at rank 0, persistent send to PROC_NULL */
    {
        MPI_Request r, pn;
        int v = -1, n;
        MPI_Status s1;
        MPI_CHECK(MPI_Send_init(&v, 1, MPI_INT, MPI_PROC_NULL, 3, MPI_COMM_WORLD, &pn));
        MPI_CHECK(MPI_Start(&pn));
        MPI_CHECK(MPI_Wait(&pn, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Request_free(&pn));
        if (rank == 0) {
            int seen[8] = {0};
            MPI_CHECK(MPI_Recv_init(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                                    &r));
            for (k = 1; k < size; k++) {
                MPI_CHECK(MPI_Start(&r));
                MPI_CHECK(MPI_Wait(&r, &s1));
                CHECK(s1.MPI_SOURCE >= 1 && s1.MPI_SOURCE < size && !seen[s1.MPI_SOURCE] &&
                          s1.MPI_TAG == TAG_ANY + s1.MPI_SOURCE && v == -s1.MPI_SOURCE,
                      "wildcard persistent receive: source %d tag %d data %d", s1.MPI_SOURCE,
                      s1.MPI_TAG, v);
                seen[s1.MPI_SOURCE] = 1;
                MPI_CHECK(MPI_Get_count(&s1, MPI_INT, &n));
                CHECK(n == 1, "wildcard persistent receive: count %d", n);
            }
            MPI_CHECK(MPI_Request_free(&r));
        } else {
            v = -rank;
            MPI_CHECK(MPI_Send(&v, 1, MPI_INT, 0, TAG_ANY + rank, MPI_COMM_WORLD));
        }
    }

    MPI_CHECK(MPI_Buffer_detach(&addr, &bsize));
    free(bbuf);
    for (m = 0; m < NMODES; m++)
        for (b = 0; b < 2; b++) {
            free(sbuf[m][b]);
            free(rbuf[m][b]);
        }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "p2p_persistent");
    return 0;
}
