/*
 * requests_mixed.c -- the multiple-completion calls over requests of every
 * kind at once, and generalized requests.
 *
 * Ranks: any number from 2 to 8 (minimum 2). Messages go around the ring
 * (send right, receive from left).
 *
 *  - One array holds a null handle, an Irecv, a started persistent receive,
 *    a persistent receive never started (inactive), an Isendrecv, a
 *    generalized request and an Isend. Testsome, then Waitany until it gives
 *    MPI_UNDEFINED, complete every active entry exactly once and never the
 *    null or inactive ones; each status (source, tag) and each buffer is
 *    checked (the Isendrecv's status in strict mode only: MPICH 5.0.2
 *    reports source 0 and tag 0 for it); a completed persistent request
 *    stays in the array, inactive.
 *  - Waitsome and Testany over the same kinds (a second round) agree.
 *  - A generalized request whose cancel function completes it
 *    (MPI_Grequest_complete from inside MPI_Cancel): MPI_Wait then gives
 *    the status its query function sets (cancelled), and the free function
 *    runs once.
 *  - A cancel function that returns MPI_ERR_BUFFER: MPI_Cancel returns it
 *    (strict: Open MPI 5 returns MPI_SUCCESS).
 *  - A query function that returns MPI_ERR_TAG: MPI_Wait returns that class
 *    and leaves MPI_ERROR alone; MPI_Waitall returns MPI_ERR_IN_STATUS
 *    with an error in the request's status (strict: of class MPI_ERR_TAG).
 *  - Strict mode only (OXMPI_STRICT=1): Testsome, Waitsome, Waitany and
 *    Testany with a garbage handle beside a request that has completed give
 *    MPI_ERR_REQUEST and leave that request in place, not lost: MPI_Wait
 *    then completes it with its data. Waitall and Testall with a garbage
 *    handle beside a request not complete yet fail at once with
 *    MPI_ERR_REQUEST (Waitall does not wait) and leave the request in
 *    place. And Testsome with the same completed
 *    request twice in its array (erroneous) reports it once, not an error
 *    that loses it.
 */
#include "check.h"

#define NREQ 7

struct greq_state {
    MPI_Request req; /* the request itself, for the cancel function */
    int queried;
    int freed;
    int cancels;
    int cancel_complete_arg;
    int cancelled;
    int err; /* what query_fn returns */
    int cancel_err; /* what cancel_fn returns (without completing) */
};

static int query_fn(void *extra, MPI_Status *st)
{
    struct greq_state *g = extra;
    g->queried++;
    st->MPI_SOURCE = 5;
    st->MPI_TAG = 55;
    MPI_Status_set_elements(st, MPI_BYTE, 3);
    MPI_Status_set_cancelled(st, g->cancelled);
    return g->err;
}

static int free_fn(void *extra)
{
    ((struct greq_state *)extra)->freed++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    struct greq_state *g = extra;
    g->cancels++;
    g->cancel_complete_arg = complete;
    if (g->cancel_err != MPI_SUCCESS)
        return g->cancel_err;
    if (!complete) {
        g->cancelled = 1;
        /* Completing from inside MPI_Cancel. */
        return MPI_Grequest_complete(g->req);
    }
    return MPI_SUCCESS;
}

/* Checks entry `i`'s completion status and data (see main's layout). */
static void check_entry(int i, const MPI_Status *st, int left, const int *in)
{
    switch (i) {
    case 1:
    case 2:
        CHECK(st->MPI_SOURCE == left && st->MPI_TAG == i, "entry %d: source %d tag %d", i,
              st->MPI_SOURCE, st->MPI_TAG);
        CHECK(in[i] == left * 10 + i, "entry %d: data %d", i, in[i]);
        break;
    case 4:
        /* The receive's status. MPICH 5.0.2 gives source 0 and tag 0 here
         * (an Isendrecv completed by Testsome or Waitany), so the status is
         * checked in strict mode only; the data always. */
        CHECK((st->MPI_SOURCE == left && st->MPI_TAG == 3) || !strict_mode(),
              "Isendrecv: source %d tag %d", st->MPI_SOURCE, st->MPI_TAG);
        CHECK(in[3] == left * 10 + 3, "Isendrecv: data %d", in[3]);
        break;
    case 5:
        CHECK(st->MPI_SOURCE == 5 && st->MPI_TAG == 55, "generalized: source %d tag %d",
              st->MPI_SOURCE, st->MPI_TAG);
        break;
    case 6:
        break; /* a send: nothing to check */
    default:
        CHECK(0, "entry %d (null or inactive) completed", i);
    }
}

/* Posts one round: r[0] null, r[1] Irecv tag 1, r[2] persistent receive
 * tag 2 (started), r[3] persistent receive never started, r[4] Isendrecv
 * tag 3, r[5] generalized request, r[6] Isend tag 1. Then sends tag 2 and
 * completes the generalized request. */
static void post_round(MPI_Request *r, int *in, int *out, int left, int right,
                       struct greq_state *g)
{
    r[0] = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Irecv(&in[1], 1, MPI_INT, left, 1, MPI_COMM_WORLD, &r[1]));
    MPI_CHECK(MPI_Recv_init(&in[2], 1, MPI_INT, left, 2, MPI_COMM_WORLD, &r[2]));
    MPI_CHECK(MPI_Start(&r[2]));
    MPI_CHECK(MPI_Recv_init(&in[4], 1, MPI_INT, left, 9, MPI_COMM_WORLD, &r[3]));
    MPI_CHECK(MPI_Isendrecv(&out[3], 1, MPI_INT, right, 3, &in[3], 1, MPI_INT, left, 3,
                            MPI_COMM_WORLD, &r[4]));
    MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, g, &r[5]));
    g->req = r[5];
    MPI_CHECK(MPI_Isend(&out[1], 1, MPI_INT, right, 1, MPI_COMM_WORLD, &r[6]));
    MPI_CHECK(MPI_Send(&out[2], 1, MPI_INT, right, 2, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Grequest_complete(r[5]));
}

static void free_persistent(MPI_Request *r)
{
    for (int i = 2; i <= 3; i++) {
        CHECK(r[i] != MPI_REQUEST_NULL, "persistent entry %d was freed by a completion", i);
        MPI_CHECK(MPI_Request_free(&r[i]));
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    int in[5], out[4];
    for (int i = 0; i < 4; i++)
        out[i] = rank * 10 + i;
    MPI_Request r[NREQ];
    MPI_Status st, sts[NREQ];
    int idx[NREQ], n, flag;

    /* Round 1: Testsome until something, then Waitany to the end. */
    struct greq_state g1 = {0};
    memset(in, 0, sizeof in);
    post_round(r, in, out, left, right, &g1);
    int seen[NREQ] = {0}, total = 0;
    do {
        MPI_CHECK(MPI_Testsome(NREQ, r, &n, idx, sts));
        CHECK(n != MPI_UNDEFINED, "Testsome: all inactive with requests active");
        for (int k = 0; k < n; k++) {
            CHECK(idx[k] >= 0 && idx[k] < NREQ && !seen[idx[k]], "Testsome index %d", idx[k]);
            seen[idx[k]] = 1;
            check_entry(idx[k], &sts[k], left, in);
        }
        total += n;
    } while (total == 0);
    for (;;) {
        int i;
        MPI_CHECK(MPI_Waitany(NREQ, r, &i, &st));
        if (i == MPI_UNDEFINED)
            break;
        CHECK(i >= 0 && i < NREQ && !seen[i], "Waitany index %d (again?)", i);
        seen[i] = 1;
        check_entry(i, &st, left, in);
        total++;
    }
    CHECK(total == 5, "round 1 completed %d requests, not 5", total);
    CHECK(g1.queried >= 1 && g1.freed == 1 && g1.cancels == 0,
          "generalized: queried %d freed %d cancels %d", g1.queried, g1.freed, g1.cancels);
    free_persistent(r);

    /* Round 2: Waitsome until all done; Testany then reports none active. */
    struct greq_state g2 = {0};
    memset(in, 0, sizeof in);
    post_round(r, in, out, left, right, &g2);
    memset(seen, 0, sizeof seen);
    total = 0;
    for (;;) {
        MPI_CHECK(MPI_Waitsome(NREQ, r, &n, idx, sts));
        if (n == MPI_UNDEFINED)
            break;
        CHECK(n > 0, "Waitsome returned no completion");
        for (int k = 0; k < n; k++) {
            CHECK(idx[k] >= 0 && idx[k] < NREQ && !seen[idx[k]], "Waitsome index %d", idx[k]);
            seen[idx[k]] = 1;
            check_entry(idx[k], &sts[k], left, in);
        }
        total += n;
    }
    CHECK(total == 5, "round 2 completed %d requests, not 5", total);
    int i = 0;
    MPI_CHECK(MPI_Testany(NREQ, r, &i, &flag, &st));
    CHECK(flag && i == MPI_UNDEFINED, "Testany over inactive requests: flag %d index %d", flag, i);
    CHECK(g2.freed == 1, "generalized freed %d times", g2.freed);
    free_persistent(r);

    /* A generalized request completed by its cancel function. */
    struct greq_state g3 = {0};
    MPI_Request g;
    MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g3, &g));
    g3.req = g;
    MPI_CHECK(MPI_Cancel(&g));
    CHECK(g3.cancels == 1 && g3.cancel_complete_arg == 0, "cancel_fn: %d calls, complete %d",
          g3.cancels, g3.cancel_complete_arg);
    MPI_CHECK(MPI_Wait(&g, &st));
    CHECK(g == MPI_REQUEST_NULL, "MPI_Wait left the generalized request");
    MPI_CHECK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag && st.MPI_TAG == 55, "cancelled generalized request: flag %d tag %d", flag,
          st.MPI_TAG);
    CHECK(g3.freed == 1, "generalized freed %d times", g3.freed);

    /* A cancel function's error code is what MPI_Cancel returns (strict:
     * Open MPI 5 returns MPI_SUCCESS). */
    {
        struct greq_state g6 = {0};
        g6.cancel_err = MPI_ERR_BUFFER;
        MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g6, &g));
        int rc = MPI_Cancel(&g);
        CHECK(g6.cancels == 1, "cancel_fn called %d times", g6.cancels);
        if (strict_mode())
            CHECK(rc != MPI_SUCCESS && check_class(rc) == MPI_ERR_BUFFER,
                  "MPI_Cancel returned %d (class %d), not the cancel function's MPI_ERR_BUFFER",
                  rc, check_class(rc));
        MPI_CHECK(MPI_Grequest_complete(g));
        MPI_CHECK(MPI_Wait(&g, MPI_STATUS_IGNORE));
        CHECK(g6.freed == 1, "generalized freed %d times", g6.freed);
    }

    /* A query function's error code is what the completion call returns:
     * MPI_Wait returns it (and leaves MPI_ERROR alone, as every single
     * completion does); MPI_Waitall returns MPI_ERR_IN_STATUS with it in
     * the status. */
    {
        struct greq_state g4 = {0}, g5 = {0};
        MPI_Request q[2];
        MPI_Status s2[2];
        g4.err = g5.err = MPI_ERR_TAG;
        MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g4, &g));
        MPI_CHECK(MPI_Grequest_complete(g));
        st.MPI_ERROR = -5;
        CHECK_CLASS(MPI_Wait(&g, &st), MPI_ERR_TAG);
        CHECK(st.MPI_ERROR == -5, "MPI_Wait set MPI_ERROR to %d", st.MPI_ERROR);
        CHECK(st.MPI_TAG == 55 && g4.queried == 1 && g4.freed == 1,
              "failed generalized request: tag %d, queried %d, freed %d", st.MPI_TAG,
              g4.queried, g4.freed);
        MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g5, &q[0]));
        MPI_CHECK(MPI_Grequest_complete(q[0]));
        MPI_CHECK(MPI_Irecv(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &q[1]));
        s2[0].MPI_ERROR = s2[1].MPI_ERROR = -5;
        CHECK_CLASS(MPI_Waitall(2, q, s2), MPI_ERR_IN_STATUS);
        /* strict: the query's own class (MPICH 5.0.2 wraps it in an
         * MPI_ERR_OTHER code) */
        CHECK(s2[0].MPI_ERROR != MPI_SUCCESS && s2[0].MPI_ERROR != MPI_ERR_PENDING,
              "Waitall: the generalized request's status has error %d", s2[0].MPI_ERROR);
        if (strict_mode())
            CHECK(check_class(s2[0].MPI_ERROR) == MPI_ERR_TAG,
                  "Waitall: the generalized request's status has error class %d",
                  check_class(s2[0].MPI_ERROR));
        /* (MPICH 5.0.2 reports the PROC_NULL receive as MPI_ERR_PENDING) */
        CHECK(s2[1].MPI_ERROR == MPI_SUCCESS || s2[1].MPI_ERROR == MPI_ERR_PENDING,
              "Waitall: the receive's status has error %d", s2[1].MPI_ERROR);
        if (q[1] != MPI_REQUEST_NULL)
            MPI_CHECK(MPI_Wait(&q[1], MPI_STATUS_IGNORE));
        CHECK(g5.freed == 1, "generalized freed %d times", g5.freed);
    }

    if (strict_mode()) {
        /* A garbage handle beside a request that has completed. */
        for (int call = 0; call < 4; call++) {
            int v = -1, got = 0;
            MPI_Request q[2];
            MPI_CHECK(MPI_Irecv(&v, 1, MPI_INT, left, 20 + call, MPI_COMM_WORLD, &q[0]));
            MPI_CHECK(MPI_Send(&out[0], 1, MPI_INT, right, 20 + call, MPI_COMM_WORLD));
            while (!got)
                MPI_CHECK(MPI_Request_get_status(q[0], &got, MPI_STATUS_IGNORE));
            MPI_Request keep = q[0];
            q[1] = (MPI_Request)(intptr_t)0x7ff;
            int rc, j;
            switch (call) {
            case 0: rc = MPI_Testsome(2, q, &n, idx, sts); break;
            case 1: rc = MPI_Waitsome(2, q, &n, idx, sts); break;
            case 2: rc = MPI_Waitany(2, q, &j, &st); break;
            default: rc = MPI_Testany(2, q, &j, &flag, &st); break;
            }
            CHECK_CLASS(rc, MPI_ERR_REQUEST);
            CHECK(q[0] == keep, "call %d: the completed request was taken with the error", call);
            MPI_CHECK(MPI_Wait(&q[0], &st));
            CHECK(v == left * 10 && st.MPI_SOURCE == left && st.MPI_TAG == 20 + call,
                  "call %d: data %d source %d tag %d", call, v, st.MPI_SOURCE, st.MPI_TAG);
        }
        /* Waitall and Testall with a garbage handle beside a request that
         * has not completed (its message is sent only afterwards): they
         * fail at once, before waiting, and leave the request in place. */
        for (int call = 0; call < 2; call++) {
            int v = -1;
            MPI_Request q[2];
            MPI_CHECK(MPI_Irecv(&v, 1, MPI_INT, left, 40 + call, MPI_COMM_WORLD, &q[0]));
            MPI_Request keep = q[0];
            q[1] = (MPI_Request)(intptr_t)0x7ff;
            flag = -1;
            int rc = call == 0 ? MPI_Waitall(2, q, sts) : MPI_Testall(2, q, &flag, sts);
            CHECK_CLASS(rc, MPI_ERR_REQUEST);
            CHECK(q[0] == keep, "%s: the pending request was taken with the error",
                  call == 0 ? "Waitall" : "Testall");
            MPI_CHECK(MPI_Send(&out[0], 1, MPI_INT, right, 40 + call, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Wait(&q[0], &st));
            CHECK(v == left * 10 && st.MPI_TAG == 40 + call, "call %d: data %d tag %d", call, v,
                  st.MPI_TAG);
        }
        /* The same completed request twice in one Testsome array. */
        int v = -1, got = 0;
        MPI_Request q[2];
        MPI_CHECK(MPI_Irecv(&v, 1, MPI_INT, left, 30, MPI_COMM_WORLD, &q[0]));
        MPI_CHECK(MPI_Send(&out[0], 1, MPI_INT, right, 30, MPI_COMM_WORLD));
        while (!got)
            MPI_CHECK(MPI_Request_get_status(q[0], &got, MPI_STATUS_IGNORE));
        q[1] = q[0];
        MPI_CHECK(MPI_Testsome(2, q, &n, idx, sts));
        /* Reported once; or twice where a completed receive's handle is its
         * status (oxmpi, for a receive whose message was there when it was
         * posted): two handles of equal value are then two completions that
         * cannot be told apart, and both are reported. */
        CHECK((n == 1 || (n == 2 && idx[1] == 1)) && idx[0] == 0 && q[0] == MPI_REQUEST_NULL,
              "duplicate handle: outcount %d index %d", n, idx[0]);
        CHECK(v == left * 10 && sts[0].MPI_SOURCE == left && sts[0].MPI_TAG == 30,
              "duplicate handle: data %d source %d tag %d", v, sts[0].MPI_SOURCE, sts[0].MPI_TAG);
    }

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok_rank(rank, "requests_mixed");
    MPI_Finalize();
    return 0;
}
