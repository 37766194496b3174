/*
 * p2p_probe_cancel.c -- probes, matched probes, cancel, and the combined
 * send-receive calls.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Checks:
 *  - Probe and Iprobe (specific and wildcard source/tag) report the source,
 *    tag and Get_count of a message from the left neighbour without
 *    receiving it; Iprobe of a tag nobody sends gives flag false.
 *  - Mprobe + Mrecv and Improbe + Imrecv: the matched message is removed
 *    from the queue (a following Iprobe does not see it, the next message
 *    with the same envelope is received by a later receive), the message
 *    handle becomes MPI_MESSAGE_NULL, statuses and data are right.
 *  - MPI_PROC_NULL: Probe/Iprobe give source MPI_PROC_NULL, tag MPI_ANY_TAG,
 *    count 0; Mprobe/Improbe give MPI_MESSAGE_NO_PROC, and Mrecv/Imrecv on
 *    it complete at once with that status and set the handle to
 *    MPI_MESSAGE_NULL.
 *  - Cancel of an Irecv nobody sends to: Wait succeeds, Test_cancelled true.
 *  - Cancel of an Isend whose tag no receive names: Test_cancelled may be
 *    true or false. The receiver then receives from the sender with
 *    MPI_ANY_TAG: by non-overtaking it gets the cancel-candidate message
 *    first if and only if the cancel failed, and the sender's report (sent
 *    afterwards) must agree.
 *  - Issend to oneself (0 bytes, and 256 KiB), seen by Probe, then Cancel
 *    and one Request_get_status (mpi4py's testProbeCancel): either it is
 *    complete and cancelled, and then no probe finds the message any more,
 *    or it is not, and then the message is still there to be received, after
 *    which the send completes not cancelled. (The message must never vanish
 *    while the request shows neither outcome.)
 *  - Sendrecv, Sendrecv_replace, Isendrecv and Isendrecv_replace around the
 *    ring (data and status), and a non-periodic shift with MPI_PROC_NULL at
 *    the ends. The status of a completed Isendrecv/Isendrecv_replace request
 *    is checked in strict mode only: MPICH 4.0.2 and 5.0.2 leave it unset.
 */
#include "check.h"

#define TAG_PROBE 10
#define TAG_NOBODY 11
#define TAG_M 12
#define TAG_IM 13
#define TAG_CANCEL_RECV 14
#define TAG_CANCEL_SEND 15
#define TAG_REPORT 16
#define TAG_CANCEL_SELF 17
#define SELF_BIG (64 * 1024) /* ints */
#define TAG_SR 20
#define TAG_SRR 21
#define TAG_ISR 22
#define TAG_ISRR 23
#define TAG_SHIFT 24

static int rank, size, right, left;

static void check_proc_null(const MPI_Status *st, const char *what)
{
    int n = -1;
    CHECK(st->MPI_SOURCE == MPI_PROC_NULL && st->MPI_TAG == MPI_ANY_TAG,
          "%s: status %d/%d, expected MPI_PROC_NULL/MPI_ANY_TAG", what, st->MPI_SOURCE,
          st->MPI_TAG);
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &n));
    CHECK(n == 0, "%s: count %d", what, n);
}

static void wait_flag(int *flag, const char *what, double deadline)
{
    CHECK(*flag || MPI_Wtime() < deadline, "%s: nothing within 30 s", what);
}

static void probes(void)
{
    int cnt = (left % 5) + 3, mycnt = (rank % 5) + 3, n, i, flag;
    int sb[8], rb[8];
    MPI_Status st;
    MPI_Request sreq;
    double deadline;

    for (i = 0; i < 8; i++)
        sb[i] = rank * 10 + i;
    MPI_CHECK(MPI_Isend(sb, mycnt, MPI_INT, right, TAG_PROBE, MPI_COMM_WORLD, &sreq));

    flag = -1;
    MPI_CHECK(MPI_Iprobe(left, TAG_NOBODY, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag == 0, "Iprobe of a tag nobody sends gave flag %d", flag);

    MPI_CHECK(MPI_Probe(left, TAG_PROBE, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_PROBE, "Probe status %d/%d", st.MPI_SOURCE,
          st.MPI_TAG);
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == cnt, "Probe count %d, expected %d", n, cnt);
    /* probing again sees the same message */
    flag = 0;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag && st.MPI_SOURCE == left && st.MPI_TAG == TAG_PROBE,
          "wildcard Iprobe after Probe: flag %d status %d/%d", flag, st.MPI_SOURCE, st.MPI_TAG);
    MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, TAG_PROBE, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == left && n == cnt, "wildcard Probe %d/%d", st.MPI_SOURCE, n);
    MPI_CHECK(MPI_Recv(rb, 8, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
    for (i = 0; i < cnt; i++)
        CHECK(rb[i] == left * 10 + i, "probed message data[%d] = %d", i, rb[i]);
    MPI_CHECK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));

    /* Iprobe loop until a message shows up */
    MPI_CHECK(MPI_Isend(sb, mycnt, MPI_INT, right, TAG_PROBE, MPI_COMM_WORLD, &sreq));
    flag = 0;
    deadline = MPI_Wtime() + 30.0;
    while (!flag) {
        MPI_CHECK(MPI_Iprobe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        wait_flag(&flag, "Iprobe loop", deadline);
    }
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_PROBE && n == cnt, "Iprobe %d/%d/%d",
          st.MPI_SOURCE, st.MPI_TAG, n);
    MPI_CHECK(MPI_Recv(rb, 8, MPI_INT, left, TAG_PROBE, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));

    /* PROC_NULL */
    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Probe(MPI_PROC_NULL, 3, MPI_COMM_WORLD, &st));
    check_proc_null(&st, "Probe(MPI_PROC_NULL)");
    flag = 0;
    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Iprobe(MPI_PROC_NULL, 3, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag == 1, "Iprobe(MPI_PROC_NULL) flag %d", flag);
    check_proc_null(&st, "Iprobe(MPI_PROC_NULL)");
}

static void matched_probes(void)
{
    int sb[2][4], rb[4], i, n, flag;
    MPI_Request sreq[2], rreq;
    MPI_Message msg;
    MPI_Status st;
    double deadline;

    /* two messages with the same envelope: Mprobe takes the first */
    for (i = 0; i < 4; i++) {
        sb[0][i] = rank * 100 + i;
        sb[1][i] = rank * 100 + 50 + i;
    }
    MPI_CHECK(MPI_Isend(sb[0], 4, MPI_INT, right, TAG_M, MPI_COMM_WORLD, &sreq[0]));
    MPI_CHECK(MPI_Isend(sb[1], 3, MPI_INT, right, TAG_M, MPI_COMM_WORLD, &sreq[1]));

    msg = MPI_MESSAGE_NULL;
    MPI_CHECK(MPI_Mprobe(left, TAG_M, MPI_COMM_WORLD, &msg, &st));
    CHECK(msg != MPI_MESSAGE_NULL && msg != MPI_MESSAGE_NO_PROC, "Mprobe gave a null message");
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_M && n == 4, "Mprobe status %d/%d/%d",
          st.MPI_SOURCE, st.MPI_TAG, n);
    /* the matched message is gone from the queue: a probe now sees the second one */
    MPI_CHECK(MPI_Probe(left, TAG_M, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 3, "Probe after Mprobe saw the matched message again (count %d)", n);
    /* an ordinary receive gets the second message, Mrecv the first */
    MPI_CHECK(MPI_Recv(rb, 4, MPI_INT, left, TAG_M, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 3 && rb[0] == left * 100 + 50, "Recv after Mprobe: count %d data %d", n, rb[0]);
    for (i = 0; i < 4; i++)
        rb[i] = -1;
    MPI_CHECK(MPI_Mrecv(rb, 4, MPI_INT, &msg, &st));
    CHECK(msg == MPI_MESSAGE_NULL, "Mrecv did not set the message to MPI_MESSAGE_NULL");
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_M && n == 4, "Mrecv status %d/%d/%d",
          st.MPI_SOURCE, st.MPI_TAG, n);
    for (i = 0; i < 4; i++)
        CHECK(rb[i] == left * 100 + i, "Mrecv data[%d] = %d", i, rb[i]);
    MPI_CHECK(MPI_Waitall(2, sreq, MPI_STATUSES_IGNORE));

    /* Improbe loop + Imrecv, wildcard source */
    MPI_CHECK(MPI_Isend(sb[1], 2, MPI_INT, right, TAG_IM, MPI_COMM_WORLD, &sreq[0]));
    flag = 0;
    deadline = MPI_Wtime() + 30.0;
    while (!flag) {
        MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, TAG_IM, MPI_COMM_WORLD, &flag, &msg, &st));
        wait_flag(&flag, "Improbe loop", deadline);
    }
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_IM, "Improbe status %d/%d", st.MPI_SOURCE,
          st.MPI_TAG);
    flag = -1;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_IM, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    CHECK(flag == 0, "Iprobe still sees a message matched by Improbe");
    MPI_CHECK(MPI_Imrecv(rb, 4, MPI_INT, &msg, &rreq));
    CHECK(msg == MPI_MESSAGE_NULL, "Imrecv did not set the message to MPI_MESSAGE_NULL");
    MPI_CHECK(MPI_Wait(&rreq, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_IM && n == 2 && rb[0] == left * 100 + 50 &&
              rb[1] == left * 100 + 51,
          "Imrecv status %d/%d count %d data %d %d", st.MPI_SOURCE, st.MPI_TAG, n, rb[0], rb[1]);
    MPI_CHECK(MPI_Wait(&sreq[0], MPI_STATUS_IGNORE));

    /* MPI_MESSAGE_NO_PROC */
    msg = MPI_MESSAGE_NULL;
    MPI_CHECK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
    CHECK(msg == MPI_MESSAGE_NO_PROC, "Mprobe(MPI_PROC_NULL) did not give MPI_MESSAGE_NO_PROC");
    check_proc_null(&st, "Mprobe(MPI_PROC_NULL)");
    rb[0] = 77;
    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Mrecv(rb, 4, MPI_INT, &msg, &st));
    CHECK(msg == MPI_MESSAGE_NULL, "Mrecv(MPI_MESSAGE_NO_PROC) left message %s",
          msg == MPI_MESSAGE_NO_PROC ? "MPI_MESSAGE_NO_PROC" : "non-null");
    check_proc_null(&st, "Mrecv(MPI_MESSAGE_NO_PROC)");
    CHECK(rb[0] == 77, "Mrecv(MPI_MESSAGE_NO_PROC) wrote the buffer");
    flag = 0;
    msg = MPI_MESSAGE_NULL;
    MPI_CHECK(MPI_Improbe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &flag, &msg, &st));
    CHECK(flag == 1 && msg == MPI_MESSAGE_NO_PROC, "Improbe(MPI_PROC_NULL): flag %d", flag);
    check_proc_null(&st, "Improbe(MPI_PROC_NULL)");
    MPI_CHECK(MPI_Imrecv(rb, 4, MPI_INT, &msg, &rreq));
    CHECK(msg == MPI_MESSAGE_NULL, "Imrecv(MPI_MESSAGE_NO_PROC) did not null the message");
    st.MPI_SOURCE = st.MPI_TAG = -999;
    MPI_CHECK(MPI_Wait(&rreq, &st));
    check_proc_null(&st, "Imrecv(MPI_MESSAGE_NO_PROC)");
}

/* A synchronous send to oneself that the program saw with Probe and then
 * cancels; one Request_get_status decides what the program does next, as
 * mpi4py's testProbeCancel does. */
static void cancel_to_self(MPI_Comm comm)
{
    int k, i, flag, cancelled, found;
    int *sb = malloc(SELF_BIG * sizeof(int)), *rb = malloc(SELF_BIG * sizeof(int));
    MPI_Request req;
    MPI_Status st;
    double deadline;

    CHECK(sb && rb, "out of memory");
    for (i = 0; i < SELF_BIG; i++)
        sb[i] = rank * 7 + i;
    for (k = 0; k < 2; k++) {
        int n = k ? SELF_BIG : 0;
        MPI_CHECK(MPI_Issend(sb, n, MPI_INT, rank, TAG_CANCEL_SELF, comm, &req));
        MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
        CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == TAG_CANCEL_SELF,
              "Probe of the send to oneself: source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
        MPI_CHECK(MPI_Cancel(&req));
        CHECK(req != MPI_REQUEST_NULL, "Cancel freed the request");
        flag = 0;
        cancelled = 0;
        MPI_CHECK(MPI_Request_get_status(req, &flag, &st));
        if (flag)
            MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
        if (cancelled) {
            MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &found, MPI_STATUS_IGNORE));
            CHECK(!found, "%d ints to oneself: cancelled, yet a probe still finds the message",
                  n);
            MPI_CHECK(MPI_Request_free(&req));
            continue;
        }
        /* not cancelled (or not decided): the message must still be here */
        deadline = MPI_Wtime() + 10;
        do {
            MPI_CHECK(MPI_Iprobe(rank, TAG_CANCEL_SELF, comm, &found, MPI_STATUS_IGNORE));
        } while (!found && MPI_Wtime() < deadline);
        CHECK(found,
              "%d ints to oneself: Cancel took the message away, but the request is %s "
              "and not cancelled",
              n, flag ? "complete" : "still pending");
        MPI_CHECK(MPI_Recv(rb, n, MPI_INT, rank, TAG_CANCEL_SELF, comm, &st));
        for (i = 0; i < n; i++)
            CHECK(rb[i] == sb[i], "%d ints to oneself: data[%d] = %d", n, i, rb[i]);
        MPI_CHECK(MPI_Wait(&req, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
        CHECK(!cancelled, "%d ints to oneself: received, and cancelled too", n);
    }
    free(sb);
    free(rb);
}

static void cancels(void)
{
    MPI_Comm comm;
    MPI_Request req;
    MPI_Status st;
    int flag, v = 5, report, rb = -1, sb;

    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));

    /* unmatched receive: cancel must succeed */
    MPI_CHECK(MPI_Irecv(&rb, 1, MPI_INT, left, TAG_CANCEL_RECV, comm, &req));
    MPI_CHECK(MPI_Cancel(&req));
    CHECK(req != MPI_REQUEST_NULL, "Cancel freed the request");
    MPI_CHECK(MPI_Wait(&req, &st));
    CHECK(req == MPI_REQUEST_NULL, "Wait on a cancelled request did not free it");
    flag = 0;
    MPI_CHECK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 1, "Test_cancelled false for a cancelled unmatched Irecv");
    CHECK(rb == -1, "cancelled Irecv wrote its buffer");

    /* send nobody receives by tag: cancel may or may not succeed */
    sb = 1000 + rank;
    MPI_CHECK(MPI_Isend(&sb, 1, MPI_INT, right, TAG_CANCEL_SEND, comm, &req));
    MPI_CHECK(MPI_Cancel(&req));
    MPI_CHECK(MPI_Wait(&req, &st));
    flag = -1;
    MPI_CHECK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 0 || flag == 1, "Test_cancelled gave %d", flag);
    report = flag;
    MPI_CHECK(MPI_Send(&report, 1, MPI_INT, right, TAG_REPORT, comm));

    /* receiver: first message from the left, any tag */
    MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, left, MPI_ANY_TAG, comm, &st));
    if (st.MPI_TAG == TAG_CANCEL_SEND) {
        /* the cancel failed, so the report must say so */
        CHECK(v == 1000 + left, "not-cancelled message data %d", v);
        MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, left, TAG_REPORT, comm, &st));
        CHECK(v == 0, "got the message although the sender's Test_cancelled said cancelled");
    } else {
        CHECK(st.MPI_TAG == TAG_REPORT, "unexpected tag %d", st.MPI_TAG);
        CHECK(v == 1, "sender says not cancelled but its message did not arrive first");
    }
    MPI_CHECK(MPI_Barrier(comm));
    flag = -1;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE));
    CHECK(flag == 0, "a message is left over on the cancel communicator");
    cancel_to_self(comm);
    MPI_CHECK(MPI_Barrier(comm));
    MPI_CHECK(MPI_Comm_free(&comm));
}

static void sendrecvs(void)
{
    enum { N = 1000 };
    int *sb = malloc(N * sizeof(int)), *rb = malloc(N * sizeof(int)), i, n;
    MPI_Status st;
    MPI_Request req;

    for (i = 0; i < N; i++) {
        sb[i] = rank * N + i;
        rb[i] = -1;
    }
    MPI_CHECK(MPI_Sendrecv(sb, N, MPI_INT, right, TAG_SR, rb, N, MPI_INT, left, TAG_SR,
                           MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_SR && n == N, "Sendrecv status %d/%d/%d",
          st.MPI_SOURCE, st.MPI_TAG, n);
    for (i = 0; i < N; i++)
        CHECK(rb[i] == left * N + i, "Sendrecv data[%d] = %d", i, rb[i]);

    for (i = 0; i < N; i++)
        rb[i] = rank * N + i + 7;
    MPI_CHECK(MPI_Sendrecv_replace(rb, N, MPI_INT, right, TAG_SRR, left, TAG_SRR, MPI_COMM_WORLD,
                                   &st));
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_SRR, "Sendrecv_replace status %d/%d",
          st.MPI_SOURCE, st.MPI_TAG);
    for (i = 0; i < N; i++)
        CHECK(rb[i] == left * N + i + 7, "Sendrecv_replace data[%d] = %d", i, rb[i]);

    for (i = 0; i < N; i++)
        rb[i] = -1;
    MPI_CHECK(MPI_Isendrecv(sb, N, MPI_INT, left, TAG_ISR, rb, N, MPI_INT, right, TAG_ISR,
                            MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Wait(&req, &st));
    /* MPICH 4.0.2 and 5.0.2 do not fill in the status of a completed
     * Isendrecv/Isendrecv_replace request; Open MPI 5 does */
    if (strict_mode()) {
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
        CHECK(st.MPI_SOURCE == right && st.MPI_TAG == TAG_ISR && n == N,
              "Isendrecv status %d/%d/%d", st.MPI_SOURCE, st.MPI_TAG, n);
    }
    for (i = 0; i < N; i++)
        CHECK(rb[i] == right * N + i, "Isendrecv data[%d] = %d", i, rb[i]);

    for (i = 0; i < N; i++)
        rb[i] = rank * N - i;
    MPI_CHECK(MPI_Isendrecv_replace(rb, N, MPI_INT, right, TAG_ISRR, left, TAG_ISRR,
                                    MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Wait(&req, &st));
    if (strict_mode())
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == TAG_ISRR, "Isendrecv_replace status %d/%d",
              st.MPI_SOURCE, st.MPI_TAG);
    for (i = 0; i < N; i++)
        CHECK(rb[i] == left * N - i, "Isendrecv_replace data[%d] = %d", i, rb[i]);

    /* non-periodic shift: rank 0 receives from MPI_PROC_NULL, the last rank
     * sends to it */
    {
        int dst = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
        int src = rank > 0 ? rank - 1 : MPI_PROC_NULL;
        for (i = 0; i < N; i++)
            rb[i] = -5;
        MPI_CHECK(MPI_Sendrecv(sb, N, MPI_INT, dst, TAG_SHIFT, rb, N, MPI_INT, src, TAG_SHIFT,
                               MPI_COMM_WORLD, &st));
        if (src == MPI_PROC_NULL) {
            check_proc_null(&st, "Sendrecv from MPI_PROC_NULL");
            CHECK(rb[0] == -5 && rb[N - 1] == -5, "receive from MPI_PROC_NULL wrote the buffer");
        } else {
            CHECK(st.MPI_SOURCE == src && rb[N - 1] == src * N + N - 1, "shift %d/%d",
                  st.MPI_SOURCE, rb[N - 1]);
        }
        for (i = 0; i < N; i++)
            rb[i] = rank;
        MPI_CHECK(MPI_Isendrecv_replace(rb, N, MPI_INT, dst, TAG_SHIFT, src, TAG_SHIFT,
                                        MPI_COMM_WORLD, &req));
        MPI_CHECK(MPI_Wait(&req, &st));
        if (src == MPI_PROC_NULL) {
            if (strict_mode())
                check_proc_null(&st, "Isendrecv_replace from MPI_PROC_NULL");
            CHECK(rb[0] == rank, "replace from MPI_PROC_NULL changed the buffer");
        } else {
            CHECK(rb[0] == src, "replace shift data %d", rb[0]);
            if (strict_mode())
                CHECK(st.MPI_SOURCE == src, "replace shift status source %d", st.MPI_SOURCE);
        }
    }
    free(sb);
    free(rb);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    probes();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    matched_probes();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    cancels();
    sendrecvs();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "p2p_probe_cancel");
    return 0;
}
