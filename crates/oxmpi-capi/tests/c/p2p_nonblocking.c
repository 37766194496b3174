/*
 * p2p_nonblocking.c -- nonblocking point-to-point and every completion call.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Checks:
 *  - Isend, Ibsend, Issend and Irsend around a ring into Irecvs (Irsend after
 *    a neighbour handshake that proves the receive is posted), completed with
 *    Waitall; data and statuses checked.
 *  - All-to-all rounds of Irecv/Isend (mixed sizes, an MPI_REQUEST_NULL entry
 *    in every array) completed with Waitany, Waitsome, Testany, Testsome,
 *    Testall, Test and Wait loops: every request is reported exactly once,
 *    with the right source/tag/count, and is set to MPI_REQUEST_NULL.
 *  - MPI_REQUEST_NULL: Wait/Test/Request_get_status give an empty status
 *    (source MPI_ANY_SOURCE, tag MPI_ANY_TAG, count 0, not cancelled; error
 *    MPI_SUCCESS or left untouched -- strict mode: MPI_SUCCESS); Waitany/Testany over only null requests give index
 *    MPI_UNDEFINED (Testany with flag true); Waitsome/Testsome give outcount
 *    MPI_UNDEFINED; Waitall/Testall succeed with empty statuses.
 *  - Single-request completions (Wait, Test, Waitany, Testany, Recv) leave
 *    status.MPI_ERROR untouched (MPI 4.1 sec. 3.2.5).
 *  - Request_free of an active Isend (small and rendezvous-sized): the message
 *    is still delivered.
 *  - Request_get_status: false before the matching send exists, true after,
 *    without freeing the request.
 *  - MPI 4.1 Request_get_status_all/any/some over a null request, two
 *    Irecvs and an inactive persistent receive: nothing complete before the
 *    sends, then the first receive alone (any and some find it, all is
 *    still false), then all (statuses: empty, the two receives, empty),
 *    none of the requests freed; over only inactive entries any gives
 *    flag true and MPI_UNDEFINED, some MPI_UNDEFINED.
 *  - Small Isends to self, which complete inside the call: two at once are
 *    completed one by one; Request_get_status, Cancel, Test and Wait on them
 *    behave as on any completed send (not cancelled, set to
 *    MPI_REQUEST_NULL, MPI_ERROR left alone); both messages arrive in order.
 *  - Irecvs of messages already sent to self (which an implementation may
 *    complete inside the call), at small and huge tags (MPI_TAG_UB): every
 *    completion call (Wait, Test, Waitall, Waitany, Waitsome, Testany,
 *    Testsome, Testall), Request_get_status twice without freeing, Cancel
 *    (not cancelled) and Request_free on them give the right source, tag,
 *    count and data, leave MPI_ERROR alone in single completions, and set
 *    the handles to MPI_REQUEST_NULL; MPI 5: one through
 *    Request_toint/Request_fromint still completes with its status.
 *  - Small Irecvs from MPI_ANY_SOURCE between ranks 2k and 2k+1 (only the
 *    partner sends meanwhile; every fourth also MPI_ANY_TAG): 64 messages of
 *    0 to 12 ints with their own tags (every fifth at or above 2^15 when
 *    MPI_TAG_UB allows), sent in a burst, received in windows of 8 Irecvs completed by
 *    Waitall (statuses: source, tag, count) and one at a time by Wait; an
 *    implementation may complete those whose message is already there
 *    inside the call. Data and the ints past each message are checked.
 *  - Ranks 0 and 1 only: 32 Isends of 10 MB each are all posted before rank
 *    1 posts any receive (rank 1 waits, with a 30 s limit, for a zero-byte
 *    "go" that rank 0 sends after its 32nd Isend: Isend must not block), then
 *    rank 1 receives them with Irecvs, 4 at a time; data spot-checked.
 */
#include "check.h"

#define TAG_RING 10
#define TAG_HS 20
#define TAG_A2A 30
#define TAG_FREE 60
#define TAG_ACK 61
#define TAG_GS 62
#define TAG_GS_GO 63
#define TAG_GSM 64
#define TAG_BIG 300
#define TAG_GO 200

#define RING_N 4000 /* ints */
#define NBIG 32
#define BIG_BYTES (10 * 1000 * 1000)
#define BIG_STRIDE 4096

static int rank, size;

static void check_empty(const MPI_Status *st, int check_error, const char *what)
{
    int n = -1, c = -1;
    CHECK(st->MPI_SOURCE == MPI_ANY_SOURCE, "%s: empty status source %d", what, st->MPI_SOURCE);
    CHECK(st->MPI_TAG == MPI_ANY_TAG, "%s: empty status tag %d", what, st->MPI_TAG);
    /* The standard's empty status has error MPI_SUCCESS, but single-request
     * completions otherwise never write MPI_ERROR: MPICH 4.0 and Open MPI 5
     * leave it untouched here, MPICH 5 sets MPI_SUCCESS. Strict mode wants
     * MPI_SUCCESS. */
    if (check_error && strict_mode())
        CHECK(st->MPI_ERROR == MPI_SUCCESS, "%s: empty status error %d", what, st->MPI_ERROR);
    else if (check_error)
        CHECK(st->MPI_ERROR == MPI_SUCCESS || st->MPI_ERROR == -12345,
              "%s: empty status error %d", what, st->MPI_ERROR);
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &n));
    CHECK(n == 0, "%s: empty status count %d", what, n);
    MPI_CHECK(MPI_Test_cancelled(st, &c));
    CHECK(c == 0, "%s: empty status cancelled", what);
}

static void poison(MPI_Status *st)
{
    st->MPI_SOURCE = -999;
    st->MPI_TAG = -999;
    st->MPI_ERROR = -12345;
}

static int ring_val(int src, int mode, int i)
{
    return src * 1000003 + mode * 10007 + i;
}

static void ring_modes(void)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int *sb[4], *rb[4], m, i;
    MPI_Request req[8];
    MPI_Status st[8];
    int bsize = RING_N * (int)sizeof(int) + MPI_BSEND_OVERHEAD + 64;
    void *bbuf = malloc((size_t)bsize), *addr;

    MPI_CHECK(MPI_Buffer_attach(bbuf, bsize));
    for (m = 0; m < 4; m++) {
        sb[m] = malloc(RING_N * sizeof(int));
        rb[m] = malloc(RING_N * sizeof(int));
        for (i = 0; i < RING_N; i++) {
            sb[m][i] = ring_val(rank, m, i);
            rb[m][i] = -1;
        }
        MPI_CHECK(MPI_Irecv(rb[m], RING_N, MPI_INT, left, TAG_RING + m, MPI_COMM_WORLD, &req[m]));
    }
    /* tell the left neighbour that our receives are posted; hear it from the right */
    MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_BYTE, left, TAG_HS, NULL, 0, MPI_BYTE, right, TAG_HS,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Isend(sb[0], RING_N, MPI_INT, right, TAG_RING + 0, MPI_COMM_WORLD, &req[4]));
    MPI_CHECK(MPI_Ibsend(sb[1], RING_N, MPI_INT, right, TAG_RING + 1, MPI_COMM_WORLD, &req[5]));
    MPI_CHECK(MPI_Issend(sb[2], RING_N, MPI_INT, right, TAG_RING + 2, MPI_COMM_WORLD, &req[6]));
    MPI_CHECK(MPI_Irsend(sb[3], RING_N, MPI_INT, right, TAG_RING + 3, MPI_COMM_WORLD, &req[7]));
    MPI_CHECK(MPI_Waitall(8, req, st));
    for (m = 0; m < 8; m++)
        CHECK(req[m] == MPI_REQUEST_NULL, "Waitall left request %d active", m);
    for (m = 0; m < 4; m++) {
        int n = -1;
        CHECK(st[m].MPI_SOURCE == left && st[m].MPI_TAG == TAG_RING + m,
              "ring mode %d status %d/%d", m, st[m].MPI_SOURCE, st[m].MPI_TAG);
        MPI_CHECK(MPI_Get_count(&st[m], MPI_INT, &n));
        CHECK(n == RING_N, "ring mode %d count %d", m, n);
        for (i = 0; i < RING_N; i++)
            CHECK(rb[m][i] == ring_val(left, m, i), "ring mode %d data[%d] = %d", m, i, rb[m][i]);
        free(sb[m]);
        free(rb[m]);
    }
    MPI_CHECK(MPI_Buffer_detach(&addr, &bsize));
    free(bbuf);
}

/* ---- all-to-all rounds with the different completion calls ---- */

enum { C_WAITANY, C_WAITSOME, C_TESTANY, C_TESTSOME, C_TESTALL, C_TEST, C_WAIT, NCOMPL };
static const char *compl_name[NCOMPL] = {"Waitany", "Waitsome", "Testany", "Testsome",
                                         "Testall", "Test",     "Wait"};

static int a2a_count(int src, int dst, int round)
{
    /* mixed sizes: some rendezvous-sized, some tiny */
    return ((src + dst + round) % 3 == 0) ? 20000 : 1 + (src * 7 + dst * 3 + round) % 50;
}

static int a2a_val(int src, int dst, int round, int i)
{
    return (src * 8 + dst) * 100000 + round * 10000 + (i % 9973);
}

static double deadline;

static void progress_guard(const char *what)
{
    CHECK(MPI_Wtime() < deadline, "%s: no completion within 30 s", what);
}

/* Complete n requests (index 0 is MPI_REQUEST_NULL) with method c; mark
 * done[i] and store statuses. */
static void complete_all(int c, int n, MPI_Request *req, MPI_Status *st, int *done)
{
    int remaining = n - 1, i, idx, flag, outcount;
    int *indices = malloc((size_t)n * sizeof(int));
    MPI_Status *sts = malloc((size_t)n * sizeof(MPI_Status));
    MPI_Status one;

    deadline = MPI_Wtime() + 30.0;
    while (remaining > 0) {
        switch (c) {
        case C_WAITANY:
        case C_TESTANY:
            idx = -7;
            flag = 0;
            poison(&one);
            if (c == C_WAITANY) {
                MPI_CHECK(MPI_Waitany(n, req, &idx, &one));
                flag = 1;
            } else {
                MPI_CHECK(MPI_Testany(n, req, &idx, &flag, &one));
            }
            if (!flag) {
                CHECK(idx == MPI_UNDEFINED, "Testany flag false but index %d", idx);
                progress_guard(compl_name[c]);
                break;
            }
            CHECK(idx >= 1 && idx < n, "%s index %d", compl_name[c], idx);
            CHECK(!done[idx], "%s reported index %d twice", compl_name[c], idx);
            CHECK(req[idx] == MPI_REQUEST_NULL, "%s left request %d active", compl_name[c], idx);
            CHECK(one.MPI_ERROR == -12345, "%s wrote status.MPI_ERROR (%d)", compl_name[c],
                  one.MPI_ERROR);
            done[idx] = 1;
            st[idx] = one;
            remaining--;
            break;
        case C_WAITSOME:
        case C_TESTSOME:
            outcount = -7;
            if (c == C_WAITSOME)
                MPI_CHECK(MPI_Waitsome(n, req, &outcount, indices, sts));
            else
                MPI_CHECK(MPI_Testsome(n, req, &outcount, indices, sts));
            CHECK(outcount != MPI_UNDEFINED, "%s gave MPI_UNDEFINED with %d active",
                  compl_name[c], remaining);
            CHECK(outcount >= (c == C_WAITSOME ? 1 : 0) && outcount <= remaining,
                  "%s outcount %d with %d active", compl_name[c], outcount, remaining);
            if (outcount == 0)
                progress_guard(compl_name[c]);
            for (i = 0; i < outcount; i++) {
                idx = indices[i];
                CHECK(idx >= 1 && idx < n, "%s index %d", compl_name[c], idx);
                CHECK(!done[idx], "%s reported index %d twice", compl_name[c], idx);
                CHECK(req[idx] == MPI_REQUEST_NULL, "%s left request %d active", compl_name[c],
                      idx);
                done[idx] = 1;
                st[idx] = sts[i];
                remaining--;
            }
            break;
        case C_TESTALL:
            flag = 0;
            MPI_CHECK(MPI_Testall(n, req, &flag, sts));
            if (!flag) {
                progress_guard("Testall");
                break;
            }
            for (i = 1; i < n; i++) {
                CHECK(req[i] == MPI_REQUEST_NULL, "Testall left request %d active", i);
                done[i] = 1;
                st[i] = sts[i];
            }
            check_empty(&sts[0], 0, "Testall null entry");
            remaining = 0;
            break;
        case C_TEST:
            for (i = 1; i < n; i++) {
                if (done[i])
                    continue;
                flag = 0;
                poison(&one);
                MPI_CHECK(MPI_Test(&req[i], &flag, &one));
                if (flag) {
                    CHECK(req[i] == MPI_REQUEST_NULL, "Test left request %d active", i);
                    CHECK(one.MPI_ERROR == -12345, "Test wrote status.MPI_ERROR (%d)",
                          one.MPI_ERROR);
                    done[i] = 1;
                    st[i] = one;
                    remaining--;
                }
            }
            if (remaining)
                progress_guard("Test");
            break;
        case C_WAIT:
            for (i = 1; i < n; i++) {
                poison(&one);
                MPI_CHECK(MPI_Wait(&req[i], &one));
                CHECK(req[i] == MPI_REQUEST_NULL, "Wait left request %d active", i);
                CHECK(one.MPI_ERROR == -12345, "Wait wrote status.MPI_ERROR (%d)", one.MPI_ERROR);
                done[i] = 1;
                st[i] = one;
            }
            remaining = 0;
            break;
        }
    }
    free(indices);
    free(sts);
}

static void a2a_round(int round, int crecv, int csend)
{
    int n = size; /* index 0: null request; 1..size-1: peers */
    MPI_Request *rreq = malloc((size_t)n * sizeof *rreq), *sreq = malloc((size_t)n * sizeof *sreq);
    MPI_Status *rst = malloc((size_t)n * sizeof *rst), *sst = malloc((size_t)n * sizeof *sst);
    int *rdone = calloc((size_t)n, sizeof(int)), *sdone = calloc((size_t)n, sizeof(int));
    int **rb = malloc((size_t)n * sizeof(int *)), **sb = malloc((size_t)n * sizeof(int *));
    int k, i;

    rreq[0] = sreq[0] = MPI_REQUEST_NULL;
    for (k = 1; k < n; k++) {
        int peer = (rank + k) % size, cnt = a2a_count(peer, rank, round);
        rb[k] = malloc((size_t)cnt * sizeof(int) + sizeof(int));
        MPI_CHECK(MPI_Irecv(rb[k], cnt + 1, MPI_INT, peer, TAG_A2A + round, MPI_COMM_WORLD,
                            &rreq[k]));
    }
    for (k = 1; k < n; k++) {
        int peer = (rank + size - k) % size, cnt = a2a_count(rank, peer, round);
        sb[k] = malloc((size_t)cnt * sizeof(int));
        for (i = 0; i < cnt; i++)
            sb[k][i] = a2a_val(rank, peer, round, i);
        MPI_CHECK(MPI_Isend(sb[k], cnt, MPI_INT, peer, TAG_A2A + round, MPI_COMM_WORLD,
                            &sreq[k]));
    }
    complete_all(crecv, n, rreq, rst, rdone);
    complete_all(csend, n, sreq, sst, sdone);
    for (k = 1; k < n; k++) {
        int peer = (rank + k) % size, cnt = a2a_count(peer, rank, round), got = -1;
        CHECK(rdone[k] && sdone[k], "round %d: request %d not completed", round, k);
        CHECK(rst[k].MPI_SOURCE == peer && rst[k].MPI_TAG == TAG_A2A + round,
              "%s round %d: status %d/%d, expected %d/%d", compl_name[crecv], round,
              rst[k].MPI_SOURCE, rst[k].MPI_TAG, peer, TAG_A2A + round);
        MPI_CHECK(MPI_Get_count(&rst[k], MPI_INT, &got));
        CHECK(got == cnt, "%s round %d: count %d, expected %d", compl_name[crecv], round, got,
              cnt);
        for (i = 0; i < cnt; i++)
            CHECK(rb[k][i] == a2a_val(peer, rank, round, i), "round %d from %d: data[%d] = %d",
                  round, peer, i, rb[k][i]);
        free(rb[k]);
        free(sb[k]);
    }
    free(rreq);
    free(sreq);
    free(rst);
    free(sst);
    free(rdone);
    free(sdone);
    free(rb);
    free(sb);
}

static void null_requests(void)
{
    MPI_Request r = MPI_REQUEST_NULL, rs[3];
    MPI_Status st, sts[3];
    int flag, idx, outcount, indices[3], i;

    poison(&st);
    MPI_CHECK(MPI_Wait(&r, &st));
    check_empty(&st, 1, "Wait(MPI_REQUEST_NULL)");
    CHECK(r == MPI_REQUEST_NULL, "Wait changed a null request");
    poison(&st);
    flag = 0;
    MPI_CHECK(MPI_Test(&r, &flag, &st));
    CHECK(flag == 1, "Test(MPI_REQUEST_NULL) flag %d", flag);
    check_empty(&st, 1, "Test(MPI_REQUEST_NULL)");
    poison(&st);
    flag = 0;
    MPI_CHECK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st));
    CHECK(flag == 1, "Request_get_status(MPI_REQUEST_NULL) flag %d", flag);
    check_empty(&st, 1, "Request_get_status(MPI_REQUEST_NULL)");

    for (i = 0; i < 3; i++)
        rs[i] = MPI_REQUEST_NULL;
    idx = -7;
    poison(&st);
    MPI_CHECK(MPI_Waitany(3, rs, &idx, &st));
    CHECK(idx == MPI_UNDEFINED, "Waitany over null requests: index %d", idx);
    check_empty(&st, 0, "Waitany over null requests");
    idx = -7;
    flag = 0;
    poison(&st);
    MPI_CHECK(MPI_Testany(3, rs, &idx, &flag, &st));
    CHECK(idx == MPI_UNDEFINED && flag == 1, "Testany over null requests: index %d flag %d", idx,
          flag);
    check_empty(&st, 0, "Testany over null requests");
    idx = -7;
    MPI_CHECK(MPI_Waitany(0, rs, &idx, &st));
    CHECK(idx == MPI_UNDEFINED, "Waitany(count 0): index %d", idx);
    outcount = -7;
    MPI_CHECK(MPI_Waitsome(3, rs, &outcount, indices, sts));
    CHECK(outcount == MPI_UNDEFINED, "Waitsome over null requests: outcount %d", outcount);
    outcount = -7;
    MPI_CHECK(MPI_Testsome(3, rs, &outcount, indices, sts));
    CHECK(outcount == MPI_UNDEFINED, "Testsome over null requests: outcount %d", outcount);
    for (i = 0; i < 3; i++)
        poison(&sts[i]);
    MPI_CHECK(MPI_Waitall(3, rs, sts));
    for (i = 0; i < 3; i++)
        check_empty(&sts[i], 0, "Waitall over null requests");
    flag = 0;
    for (i = 0; i < 3; i++)
        poison(&sts[i]);
    MPI_CHECK(MPI_Testall(3, rs, &flag, sts));
    CHECK(flag == 1, "Testall over null requests: flag %d", flag);
    for (i = 0; i < 3; i++)
        check_empty(&sts[i], 0, "Testall over null requests");
    MPI_CHECK(MPI_Waitall(3, rs, MPI_STATUSES_IGNORE));
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
}

/* Request_free of an active send: rank 0 -> rank 1, small and large */
static void free_active_send(void)
{
    static const int counts[2] = {16, 300000};
    int k, i;
    for (k = 0; k < 2; k++) {
        int cnt = counts[k];
        int *b = malloc((size_t)cnt * sizeof(int));
        if (rank == 0) {
            MPI_Request req;
            for (i = 0; i < cnt; i++)
                b[i] = i * 3 + k;
            MPI_CHECK(MPI_Isend(b, cnt, MPI_INT, 1, TAG_FREE + k * 100, MPI_COMM_WORLD, &req));
            MPI_CHECK(MPI_Request_free(&req));
            CHECK(req == MPI_REQUEST_NULL, "Request_free did not null the request");
            /* the buffer stays untouched until rank 1 confirms */
            MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else if (rank == 1) {
            MPI_Status st;
            st.MPI_ERROR = -12345;
            MPI_CHECK(MPI_Recv(b, cnt, MPI_INT, 0, TAG_FREE + k * 100, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_ERROR == -12345, "Recv wrote status.MPI_ERROR (%d)", st.MPI_ERROR);
            for (i = 0; i < cnt; i++)
                CHECK(b[i] == i * 3 + k, "freed send data[%d] = %d", i, b[i]);
            MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD));
        }
        free(b);
    }
}

/* Request_get_status on a pending then completed receive (ranks 0/1) */
static void get_status(void)
{
    int v = -1, flag = -1;
    MPI_Status st;
    if (rank == 1) {
        MPI_Request req;
        MPI_CHECK(MPI_Irecv(&v, 1, MPI_INT, 0, TAG_GS, MPI_COMM_WORLD, &req));
        poison(&st);
        MPI_CHECK(MPI_Request_get_status(req, &flag, &st));
        CHECK(flag == 0, "Request_get_status true before the send was posted");
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_GS_GO, MPI_COMM_WORLD));
        deadline = MPI_Wtime() + 30.0;
        do {
            poison(&st);
            MPI_CHECK(MPI_Request_get_status(req, &flag, &st));
            if (!flag)
                progress_guard("Request_get_status");
        } while (!flag);
        CHECK(req != MPI_REQUEST_NULL, "Request_get_status freed the request");
        CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == TAG_GS, "Request_get_status status %d/%d",
              st.MPI_SOURCE, st.MPI_TAG);
        CHECK(st.MPI_ERROR == -12345, "Request_get_status wrote status.MPI_ERROR");
        CHECK(v == 4242, "Request_get_status: data %d", v);
        /* still completable, and a second query still says complete */
        MPI_CHECK(MPI_Request_get_status(req, &flag, MPI_STATUS_IGNORE));
        CHECK(flag == 1, "second Request_get_status false");
        poison(&st);
        MPI_CHECK(MPI_Wait(&req, &st));
        CHECK(req == MPI_REQUEST_NULL && st.MPI_SOURCE == 0 && st.MPI_TAG == TAG_GS,
              "Wait after Request_get_status: status %d/%d", st.MPI_SOURCE, st.MPI_TAG);
    } else if (rank == 0) {
        v = 4242;
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_GS_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(&v, 1, MPI_INT, 1, TAG_GS, MPI_COMM_WORLD));
    }
}

/* MPI 4.1 Request_get_status_all/any/some (ranks 0/1) */
static void get_status_multi(void)
{
#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    int v[2] = {-1, -1}, flag = -1, idx = -1, out = -1, ind[4];
    MPI_Status st, sts[4];
    if (rank == 1) {
        MPI_Request r[4];
        int dummy;
        r[0] = MPI_REQUEST_NULL;
        MPI_CHECK(MPI_Irecv(&v[0], 1, MPI_INT, 0, TAG_GSM, MPI_COMM_WORLD, &r[1]));
        MPI_CHECK(MPI_Irecv(&v[1], 1, MPI_INT, 0, TAG_GSM + 1, MPI_COMM_WORLD, &r[2]));
        MPI_CHECK(MPI_Recv_init(&dummy, 1, MPI_INT, 0, TAG_GSM + 2, MPI_COMM_WORLD, &r[3]));
        MPI_CHECK(MPI_Request_get_status_all(4, r, &flag, MPI_STATUSES_IGNORE));
        CHECK(flag == 0, "get_status_all true before any send");
        MPI_CHECK(MPI_Request_get_status_any(4, r, &idx, &flag, &st));
        CHECK(flag == 0 && idx == MPI_UNDEFINED, "get_status_any before any send: %d %d", flag, idx);
        MPI_CHECK(MPI_Request_get_status_some(4, r, &out, ind, sts));
        CHECK(out == 0, "get_status_some before any send: %d", out);
        /* The first message. */
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_GS_GO, MPI_COMM_WORLD));
        deadline = MPI_Wtime() + 30.0;
        do {
            MPI_CHECK(MPI_Request_get_status_any(4, r, &idx, &flag, &st));
            if (!flag)
                progress_guard("Request_get_status_any");
        } while (!flag);
        CHECK(idx == 1 && st.MPI_SOURCE == 0 && st.MPI_TAG == TAG_GSM && v[0] == 11,
              "get_status_any: index %d source %d tag %d data %d", idx, st.MPI_SOURCE,
              st.MPI_TAG, v[0]);
        CHECK(r[1] != MPI_REQUEST_NULL, "get_status_any freed the request");
        MPI_CHECK(MPI_Request_get_status_some(4, r, &out, ind, sts));
        CHECK(out == 1 && ind[0] == 1 && sts[0].MPI_TAG == TAG_GSM,
              "get_status_some after one send: %d [%d]", out, ind[0]);
        MPI_CHECK(MPI_Request_get_status_all(4, r, &flag, sts));
        CHECK(flag == 0, "get_status_all true with a receive pending");
        /* The second. */
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_GS_GO, MPI_COMM_WORLD));
        deadline = MPI_Wtime() + 30.0;
        do {
            MPI_CHECK(MPI_Request_get_status_all(4, r, &flag, sts));
            if (!flag)
                progress_guard("Request_get_status_all");
        } while (!flag);
        check_empty(&sts[0], 0, "get_status_all: the null request");
        check_empty(&sts[3], 0, "get_status_all: the inactive request");
        CHECK(sts[1].MPI_TAG == TAG_GSM && sts[2].MPI_TAG == TAG_GSM + 1 && v[1] == 22,
              "get_status_all: tags %d %d data %d", sts[1].MPI_TAG, sts[2].MPI_TAG, v[1]);
        CHECK(r[1] != MPI_REQUEST_NULL && r[2] != MPI_REQUEST_NULL,
              "get_status_all freed requests");
        MPI_CHECK(MPI_Waitall(4, r, sts));
        CHECK(sts[1].MPI_TAG == TAG_GSM && sts[2].MPI_TAG == TAG_GSM + 1,
              "Waitall after get_status_all");
        /* Only inactive entries now. */
        MPI_CHECK(MPI_Request_get_status_any(4, r, &idx, &flag, &st));
        CHECK(flag == 1 && idx == MPI_UNDEFINED, "get_status_any, nothing active: %d %d", flag,
              idx);
        MPI_CHECK(MPI_Request_get_status_some(4, r, &out, ind, sts));
        CHECK(out == MPI_UNDEFINED, "get_status_some, nothing active: %d", out);
        MPI_CHECK(MPI_Request_free(&r[3]));
    } else if (rank == 0) {
        int a = 11, b = 22;
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_GS_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(&a, 1, MPI_INT, 1, TAG_GSM, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_GS_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(&b, 1, MPI_INT, 1, TAG_GSM + 1, MPI_COMM_WORLD));
    }
    (void)v;
    (void)flag;
    (void)idx;
    (void)out;
    (void)ind;
    (void)st;
    (void)sts;
#endif
}

static unsigned char big_val(size_t pos)
{
    return (unsigned char)(pos * 2654435761u >> 13);
}

/* 32 outstanding 10 MB Isends, all posted before any receive */
static void many_big(void)
{
    int k, i;
    if (rank == 0) {
        size_t total = BIG_BYTES + (size_t)NBIG * BIG_STRIDE, p;
        unsigned char *b = malloc(total);
        MPI_Request req[NBIG];
        CHECK(b != NULL, "malloc %zu", total);
        for (p = 0; p < total; p++)
            b[p] = big_val(p);
        for (k = 0; k < NBIG; k++)
            MPI_CHECK(MPI_Isend(b + (size_t)k * BIG_STRIDE, BIG_BYTES, MPI_BYTE, 1, TAG_BIG + k,
                                MPI_COMM_WORLD, &req[k]));
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 1, TAG_GO, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Waitall(NBIG, req, MPI_STATUSES_IGNORE));
        free(b);
    } else if (rank == 1) {
        enum { BATCH = 4 };
        unsigned char *rb[BATCH];
        MPI_Request req[BATCH], go;
        MPI_Status st[BATCH];
        int flag = 0;
        MPI_CHECK(MPI_Irecv(NULL, 0, MPI_BYTE, 0, TAG_GO, MPI_COMM_WORLD, &go));
        deadline = MPI_Wtime() + 30.0;
        while (!flag) {
            MPI_CHECK(MPI_Test(&go, &flag, MPI_STATUS_IGNORE));
            CHECK(flag || MPI_Wtime() < deadline,
                  "no \"go\" from rank 0 within 30 s: MPI_Isend blocked?");
        }
        for (i = 0; i < BATCH; i++) {
            rb[i] = malloc(BIG_BYTES);
            CHECK(rb[i] != NULL, "malloc");
        }
        for (k = 0; k < NBIG; k += BATCH) {
            for (i = 0; i < BATCH; i++) {
                memset(rb[i], 0, 64);
                MPI_CHECK(MPI_Irecv(rb[i], BIG_BYTES, MPI_BYTE, 0, TAG_BIG + k + i,
                                    MPI_COMM_WORLD, &req[i]));
            }
            MPI_CHECK(MPI_Waitall(BATCH, req, st));
            for (i = 0; i < BATCH; i++) {
                size_t base = (size_t)(k + i) * BIG_STRIDE, p;
                int n = -1;
                MPI_CHECK(MPI_Get_count(&st[i], MPI_BYTE, &n));
                CHECK(n == BIG_BYTES && st[i].MPI_TAG == TAG_BIG + k + i,
                      "big message %d: count %d tag %d", k + i, n, st[i].MPI_TAG);
                for (p = 0; p < BIG_BYTES; p += 4099)
                    CHECK(rb[i][p] == big_val(base + p), "big message %d byte %zu", k + i, p);
                CHECK(rb[i][BIG_BYTES - 1] == big_val(base + BIG_BYTES - 1),
                      "big message %d last byte", k + i);
            }
        }
        for (i = 0; i < BATCH; i++)
            free(rb[i]);
    }
}

#define TAG_SMALL 70

static void small_sends_to_self(void)
{
    int a = 11, b = 22, got[2] = {0, 0}, flag = 0, cancelled = 1, k;
    MPI_Request r[2];
    MPI_Status st;
    MPI_CHECK(MPI_Isend(&a, 1, MPI_INT, rank, TAG_SMALL, MPI_COMM_WORLD, &r[0]));
    MPI_CHECK(MPI_Isend(&b, 1, MPI_INT, rank, TAG_SMALL, MPI_COMM_WORLD, &r[1]));
    for (k = 0; k < 2; k++)
        CHECK(r[k] != MPI_REQUEST_NULL, "small Isend %d gave MPI_REQUEST_NULL", k);
    /* Peek at the first without consuming it, cancel it (too late: a no-op). */
    while (!flag) {
        MPI_CHECK(MPI_Request_get_status(r[0], &flag, &st));
        progress_guard("Request_get_status of a small Isend");
    }
    CHECK(r[0] != MPI_REQUEST_NULL, "Request_get_status consumed the request");
    MPI_CHECK(MPI_Cancel(&r[0]));
    poison(&st);
    MPI_CHECK(MPI_Wait(&r[0], &st));
    CHECK(r[0] == MPI_REQUEST_NULL, "Wait left the small Isend active");
    CHECK(st.MPI_ERROR == -12345, "Wait wrote status.MPI_ERROR (%d)", st.MPI_ERROR);
    MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
    CHECK(!cancelled, "a small Isend reported cancelled");
    flag = 0;
    while (!flag) {
        MPI_CHECK(MPI_Test(&r[1], &flag, &st));
        progress_guard("Test of a small Isend");
    }
    CHECK(r[1] == MPI_REQUEST_NULL, "Test left the small Isend active");
    for (k = 0; k < 2; k++)
        MPI_CHECK(MPI_Recv(&got[k], 1, MPI_INT, rank, TAG_SMALL, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got[0] == 11 && got[1] == 22, "small Isends to self gave %d %d", got[0], got[1]);
}

#define NARR 9

/* Sends NARR ints (value 1000 * base + k, k = 0..NARR-1) to self with tag
 * tags[k], then posts an Irecv for each: the messages are already here. */
static void arrived_round(int base, const int *tags, int *got, MPI_Request *r)
{
    int k, v[NARR];
    for (k = 0; k < NARR; k++) {
        v[k] = 1000 * base + k;
        got[k] = -1;
        MPI_CHECK(MPI_Send(&v[k], 1, MPI_INT, rank, tags[k], MPI_COMM_WORLD));
    }
    for (k = 0; k < NARR; k++) {
        MPI_CHECK(MPI_Irecv(&got[k], 1, MPI_INT, rank, tags[k], MPI_COMM_WORLD, &r[k]));
        CHECK(r[k] != MPI_REQUEST_NULL, "Irecv %d gave MPI_REQUEST_NULL", k);
    }
}

static void check_arrived(const MPI_Status *st, int tag, int count, const char *what)
{
    int n = -1, c = 1;
    CHECK(st->MPI_SOURCE == rank, "%s: source %d", what, st->MPI_SOURCE);
    CHECK(st->MPI_TAG == tag, "%s: tag %d, want %d", what, st->MPI_TAG, tag);
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &n));
    CHECK(n == count, "%s: count %d", what, n);
    MPI_CHECK(MPI_Test_cancelled(st, &c));
    CHECK(!c, "%s: cancelled", what);
}

/* The `outc` receives a Waitsome or Testsome reported: each new and as
 * sent; marks them seen and returns how many. */
static int check_some(int outc, const int *ind, const MPI_Status *sts, const int *tags,
                      int *seen, const char *what)
{
    for (int k = 0; k < outc; k++) {
        CHECK(!seen[ind[k]], "%s reported %d twice", what, ind[k]);
        check_arrived(&sts[k], tags[ind[k]], 1, what);
        seen[ind[k]] = 1;
    }
    return outc > 0 ? outc : 0;
}

static void received_already(void)
{
    int tub = 0, flag = 0, k, idx = -1, outc = 0, ind[NARR], base, got[NARR];
    int *ub = NULL;
    MPI_Request r[NARR];
    MPI_Status st, sts[NARR];
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    CHECK(flag && ub != NULL, "MPI_TAG_UB is set");
    tub = *ub;
    int tags[NARR] = {80, 81, tub, 82, tub - 1, 83, 84, 85, 86};
    /* Wait, Test, Request_get_status (twice), Cancel, Request_free. */
    for (base = 0; base < 2; base++) {
        arrived_round(base, tags, got, r);
        poison(&st);
        MPI_CHECK(MPI_Wait(&r[0], &st));
        CHECK(r[0] == MPI_REQUEST_NULL, "Wait left the receive active");
        CHECK(st.MPI_ERROR == -12345, "Wait wrote status.MPI_ERROR");
        check_arrived(&st, tags[0], 1, "Wait");
        flag = 0;
        while (!flag) {
            MPI_CHECK(MPI_Test(&r[1], &flag, &st));
            progress_guard("Test of a received Irecv");
        }
        CHECK(r[1] == MPI_REQUEST_NULL, "Test left the receive active");
        check_arrived(&st, tags[1], 1, "Test");
        for (k = 0; k < 2; k++) {
            flag = 0;
            while (!flag) {
                MPI_CHECK(MPI_Request_get_status(r[2], &flag, &st));
                progress_guard("Request_get_status of a received Irecv");
            }
            CHECK(r[2] != MPI_REQUEST_NULL, "Request_get_status freed the request");
            check_arrived(&st, tags[2], 1, "Request_get_status");
        }
        MPI_CHECK(MPI_Cancel(&r[2]));
        MPI_CHECK(MPI_Wait(&r[2], &st));
        check_arrived(&st, tags[2], 1, "Wait after Cancel");
        MPI_CHECK(MPI_Request_free(&r[3]));
        CHECK(r[3] == MPI_REQUEST_NULL, "Request_free left the handle");
        /* The rest together. */
        if (base == 0) {
            MPI_CHECK(MPI_Waitall(NARR - 4, &r[4], &sts[4]));
            for (k = 4; k < NARR; k++) {
                CHECK(r[k] == MPI_REQUEST_NULL, "Waitall left request %d", k);
                check_arrived(&sts[k], tags[k], 1, "Waitall");
            }
        } else {
            flag = 0;
            while (!flag) {
                MPI_CHECK(MPI_Testall(NARR - 4, &r[4], &flag, &sts[4]));
                progress_guard("Testall of received Irecvs");
            }
            for (k = 4; k < NARR; k++)
                check_arrived(&sts[k], tags[k], 1, "Testall");
        }
        for (k = 0; k < NARR; k++)
            CHECK(got[k] == 1000 * base + k, "received %d, want %d", got[k], 1000 * base + k);
    }
#if MPI_VERSION >= 5
    /* Through an int and back (MPI 5 handle conversions): still the receive. */
    {
        int v = 4242, got1 = 0;
        MPI_Request q, q2;
        MPI_CHECK(MPI_Send(&v, 1, MPI_INT, rank, 90, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Irecv(&got1, 1, MPI_INT, rank, 90, MPI_COMM_WORLD, &q));
        q2 = MPI_Request_fromint(MPI_Request_toint(q));
        CHECK(q2 != MPI_REQUEST_NULL, "toint/fromint of a receive gave MPI_REQUEST_NULL");
        MPI_CHECK(MPI_Wait(&q2, &st));
        check_arrived(&st, 90, 1, "Wait after toint/fromint");
        CHECK(got1 == 4242, "received %d through toint/fromint", got1);
    }
#endif
    /* Waitany, Testany, Waitsome, Testsome: each once, with the right entry. */
    arrived_round(2, tags, got, r);
    {
        int left = NARR, seen[NARR] = {0}, turn = 0;
        while (left > 0) {
            switch (turn++ % 4) {
            case 0:
                MPI_CHECK(MPI_Waitany(NARR, r, &idx, &st));
                CHECK(idx >= 0 && idx < NARR && !seen[idx], "Waitany index %d", idx);
                check_arrived(&st, tags[idx], 1, "Waitany");
                seen[idx] = 1;
                left--;
                break;
            case 1:
                MPI_CHECK(MPI_Testany(NARR, r, &idx, &flag, &st));
                if (flag) {
                    CHECK(idx >= 0 && idx < NARR && !seen[idx], "Testany index %d", idx);
                    check_arrived(&st, tags[idx], 1, "Testany");
                    seen[idx] = 1;
                    left--;
                }
                break;
            case 2:
                MPI_CHECK(MPI_Waitsome(NARR, r, &outc, ind, sts));
                left -= check_some(outc, ind, sts, tags, seen, "Waitsome");
                break;
            default:
                MPI_CHECK(MPI_Testsome(NARR, r, &outc, ind, sts));
                left -= check_some(outc, ind, sts, tags, seen, "Testsome");
                break;
            }
        }
        for (k = 0; k < NARR; k++) {
            CHECK(r[k] == MPI_REQUEST_NULL, "request %d still active", k);
            CHECK(got[k] == 2000 + k, "received %d, want %d", got[k], 2000 + k);
        }
    }
}

#define TAG_AS 80
#define AS_N 64
/* Message k's tag: every fifth one at or above 2^15 where MPI_TAG_UB
 * allows (the standard only promises 32767). */
static int as_tag(int k, int big)
{
    return TAG_AS + k + (big && k % 5 == 0 ? 40000 : 0);
}

/* Small Irecvs from MPI_ANY_SOURCE (every fourth with MPI_ANY_TAG): rank
 * 2k+1 sends AS_N messages in a burst, rank 2k receives them in windows of
 * 8 (Waitall), then one at a time (Wait). */
static void small_irecvs_any_source(void)
{
    int peer = rank ^ 1, k, j, w, big, flag = 0, *ub = NULL;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    big = flag && *ub >= TAG_AS + AS_N + 40000;
    if (peer >= size)
        return;
    if (rank & 1) {
        int msg[12];
        for (k = 0; k < AS_N; k++) {
            for (j = 0; j < 12; j++)
                msg[j] = k * 100 + j;
            MPI_CHECK(MPI_Send(msg, k % 13, MPI_INT, peer, as_tag(k, big), MPI_COMM_WORLD));
        }
        return;
    }
    for (w = 0; w < AS_N; w += 8) {
        int got[8][14];
        MPI_Request r[8];
        MPI_Status st[8];
        int n = w < AS_N / 2 ? 8 : 1, base;
        for (base = w; base < w + 8; base += n) {
            for (k = base; k < base + n; k++) {
                for (j = 0; j < 14; j++)
                    got[k - w][j] = -1;
                MPI_CHECK(MPI_Irecv(got[k - w], 13, MPI_INT, MPI_ANY_SOURCE,
                                    k % 4 == 3 ? MPI_ANY_TAG : as_tag(k, big), MPI_COMM_WORLD,
                                    &r[k - w]));
            }
            if (n == 1)
                MPI_CHECK(MPI_Wait(&r[base - w], &st[base - w]));
            else
                MPI_CHECK(MPI_Waitall(8, r, st));
        }
        for (k = w; k < w + 8; k++) {
            int c = -1, len = k % 13;
            MPI_CHECK(MPI_Get_count(&st[k - w], MPI_INT, &c));
            CHECK(st[k - w].MPI_SOURCE == peer && st[k - w].MPI_TAG == as_tag(k, big) && c == len,
                  "any-source Irecv %d: source %d tag %d count %d", k, st[k - w].MPI_SOURCE,
                  st[k - w].MPI_TAG, c);
            CHECK(r[k - w] == MPI_REQUEST_NULL, "any-source Irecv %d left active", k);
            for (j = 0; j < len; j++)
                CHECK(got[k - w][j] == k * 100 + j, "any-source Irecv %d: int %d is %d", k, j,
                      got[k - w][j]);
            for (j = len; j < 14; j++)
                CHECK(got[k - w][j] == -1, "any-source Irecv %d: int %d past the message written",
                      k, j);
        }
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);

    null_requests();
    ring_modes();
    a2a_round(0, C_WAITANY, C_WAITSOME);
    a2a_round(1, C_WAITSOME, C_TESTANY);
    a2a_round(2, C_TESTANY, C_TESTSOME);
    a2a_round(3, C_TESTSOME, C_TESTALL);
    a2a_round(4, C_TESTALL, C_TEST);
    a2a_round(5, C_TEST, C_WAIT);
    a2a_round(6, C_WAIT, C_WAITANY);
    free_active_send();
    small_sends_to_self();
    received_already();
    get_status();
    get_status_multi();
    small_irecvs_any_source();
    many_big();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "p2p_nonblocking");
    return 0;
}
