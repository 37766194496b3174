/*
 * errors.c -- error classes returned under MPI_ERRORS_RETURN.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * With MPI_ERRORS_RETURN on MPI_COMM_WORLD and MPI_COMM_SELF:
 *   Send/Recv to/from rank == size          -> MPI_ERR_RANK
 *   Send with count -1                      -> MPI_ERR_COUNT
 *   Send with tag TAG_UB + 1 (when TAG_UB < INT_MAX) and with a negative tag,
 *   Recv with tag TAG_UB + 1                -> MPI_ERR_TAG
 *   Send with MPI_DATATYPE_NULL, count 1    -> MPI_ERR_TYPE
 *   Send on MPI_COMM_NULL                   -> MPI_ERR_COMM
 *   Send/Recv of a null buffer, count 2     -> MPI_ERR_BUFFER
 *   Isend with each of the errors above     -> the same class (it takes a path
 *     of its own for small messages), with a null request -> MPI_ERR_ARG;
 *     none of them sends anything or sets the request
 *   Bcast with root == size                 -> MPI_ERR_ROOT
 *   Allreduce with MPI_OP_NULL              -> MPI_ERR_OP
 *   Recv of 4 ints matching a message of 8  -> MPI_ERR_TRUNCATE returned by
 *     MPI_Recv (status source/tag still describe the message) and by MPI_Wait;
 *     MPI_Waitall returns MPI_ERR_IN_STATUS with MPI_ERR_TRUNCATE in the
 *     truncated request's status.MPI_ERROR and MPI_SUCCESS (or MPI_ERR_PENDING,
 *     then the request is still active) in the other's.
 *   Sendrecv whose receive half has count -1, source == size, a negative
 *     tag or a null buffer -> MPI_ERR_COUNT, _RANK, _TAG, _BUFFER, and its
 *     send half sends nothing
 *   Error_string works on every returned code.
 *   After all of that, ordinary communication still works.
 *
 * Strict mode only (OXMPI_STRICT=1, see README.md): a garbage communicator
 * handle (MPI_Comm)0x7ff in MPI_Send gives MPI_ERR_COMM and MPI_Wait on a
 * garbage request handle (MPI_Request)0x7ff gives MPI_ERR_REQUEST, without
 * crashing. The standard makes using an invalid handle erroneous, so real
 * implementations may crash instead; oxmpi's ABI layer promises to detect it.
 */
#include "check.h"

#include <limits.h>

#define TAG_TRUNC 11
#define TAG_TRUNC2 12
#define TAG_GOOD 13
#define TAG_FINAL 14
#define TAG_SR 15
#define TAG_SR_FENCE 16

static void check_code_string(int code)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = -1;
    MPI_CHECK(MPI_Error_string(code, s, &len));
    CHECK(len > 0 && len < MPI_MAX_ERROR_STRING && (int)strlen(s) == len,
          "Error_string(%d): len %d", code, len);
}

int main(int argc, char **argv)
{
    int rank, size, right, left, flag, tag_ub, rc;
    int ibuf[8], obuf[8], i;
    void *attr;
    MPI_Status st;

    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    for (i = 0; i < 8; i++)
        obuf[i] = rank * 100 + i;

    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag));
    CHECK(flag, "TAG_UB not set");
    tag_ub = *(int *)attr;

    /* invalid arguments: all detected locally, nothing is sent */
    rc = MPI_Send(obuf, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_RANK);
    check_code_string(rc);
    CHECK_CLASS(MPI_Send(obuf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    CHECK_CLASS(MPI_Recv(ibuf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    rc = MPI_Send(obuf, -1, MPI_INT, right, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT);
    check_code_string(rc);
    if (tag_ub < INT_MAX) {
        CHECK_CLASS(MPI_Send(obuf, 1, MPI_INT, right, tag_ub + 1, MPI_COMM_WORLD), MPI_ERR_TAG);
        CHECK_CLASS(MPI_Recv(ibuf, 1, MPI_INT, left, tag_ub + 1, MPI_COMM_WORLD, &st),
                    MPI_ERR_TAG);
    }
    rc = MPI_Send(obuf, 1, MPI_INT, right, -5, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_TAG);
    check_code_string(rc);
    rc = MPI_Send(obuf, 1, MPI_DATATYPE_NULL, right, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_TYPE);
    check_code_string(rc);
    CHECK_CLASS(MPI_Send(NULL, 2, MPI_INT, right, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    CHECK_CLASS(MPI_Recv(NULL, 2, MPI_INT, left, 0, MPI_COMM_WORLD, &st), MPI_ERR_BUFFER);
    rc = MPI_Send(obuf, 1, MPI_INT, right, 0, MPI_COMM_NULL);
    CHECK_CLASS(rc, MPI_ERR_COMM);
    check_code_string(rc);

    /* the same through MPI_Isend, whose small messages take a path of their
     * own: each error reported, nothing sent, the request left alone */
    {
        MPI_Request r = MPI_REQUEST_NULL;
        CHECK_CLASS(MPI_Isend(obuf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &r), MPI_ERR_RANK);
        CHECK_CLASS(MPI_Isend(obuf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD, &r), MPI_ERR_RANK);
        CHECK_CLASS(MPI_Isend(obuf, -1, MPI_INT, right, 0, MPI_COMM_WORLD, &r), MPI_ERR_COUNT);
        CHECK_CLASS(MPI_Isend(obuf, 1, MPI_INT, right, -5, MPI_COMM_WORLD, &r), MPI_ERR_TAG);
        CHECK_CLASS(MPI_Isend(obuf, 1, MPI_DATATYPE_NULL, right, 0, MPI_COMM_WORLD, &r),
                    MPI_ERR_TYPE);
        CHECK_CLASS(MPI_Isend(obuf, 1, MPI_INT, right, 0, MPI_COMM_NULL, &r), MPI_ERR_COMM);
        /* Open MPI 5.0 says MPI_ERR_REQUEST. */
        if (!lenient_mpi())
            CHECK_CLASS(MPI_Isend(obuf, 1, MPI_INT, right, 77, MPI_COMM_WORLD, NULL),
                        MPI_ERR_ARG);
        CHECK_CLASS(MPI_Isend(NULL, 2, MPI_INT, right, 0, MPI_COMM_WORLD, &r), MPI_ERR_BUFFER);
        CHECK(r == MPI_REQUEST_NULL, "a failed MPI_Isend set the request");
        /* the failed calls sent nothing: after everyone made them, no
         * message is waiting here (tag 77 went with the null request) */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        CHECK(!flag, "a failed MPI_Isend sent a message (tag %d)", st.MPI_TAG);
    }

    /* collective argument errors: every rank makes the same bad call */
    CHECK_CLASS(MPI_Bcast(ibuf, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    CHECK_CLASS(MPI_Allreduce(obuf, ibuf, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP);

    if (strict_mode()) {
        MPI_Request bad = (MPI_Request)(intptr_t)0x7ff;
        rc = MPI_Send(obuf, 1, MPI_INT, right, 0, (MPI_Comm)(intptr_t)0x7ff);
        CHECK_CLASS(rc, MPI_ERR_COMM);
        check_code_string(rc);
        rc = MPI_Wait(&bad, &st);
        CHECK_CLASS(rc, MPI_ERR_REQUEST);
        check_code_string(rc);
    }

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* truncation: rank 0 sends 8 ints to rank 1 three times */
    if (rank == 0) {
        MPI_CHECK(MPI_Send(obuf, 8, MPI_INT, 1, TAG_TRUNC, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(obuf, 8, MPI_INT, 1, TAG_TRUNC2, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(obuf, 8, MPI_INT, 1, TAG_TRUNC, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(obuf, 2, MPI_INT, 1, TAG_GOOD, MPI_COMM_WORLD));
    } else if (rank == 1) {
        MPI_Request reqs[2];
        MPI_Status sts[2];
        /* blocking receive */
        st.MPI_SOURCE = st.MPI_TAG = -999;
        rc = MPI_Recv(ibuf, 4, MPI_INT, 0, TAG_TRUNC, MPI_COMM_WORLD, &st);
        CHECK_CLASS(rc, MPI_ERR_TRUNCATE);
        check_code_string(rc);
        CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == TAG_TRUNC,
              "truncated Recv status source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
        /* nonblocking receive + Wait */
        MPI_CHECK(MPI_Irecv(ibuf, 4, MPI_INT, 0, TAG_TRUNC2, MPI_COMM_WORLD, &reqs[0]));
        rc = MPI_Wait(&reqs[0], &st);
        CHECK_CLASS(rc, MPI_ERR_TRUNCATE);
        CHECK(reqs[0] == MPI_REQUEST_NULL, "request not freed after a failed Wait");
        /* Waitall: one truncated, one fine */
        MPI_CHECK(MPI_Irecv(ibuf, 4, MPI_INT, 0, TAG_TRUNC, MPI_COMM_WORLD, &reqs[0]));
        MPI_CHECK(MPI_Irecv(ibuf + 4, 4, MPI_INT, 0, TAG_GOOD, MPI_COMM_WORLD, &reqs[1]));
        sts[0].MPI_ERROR = sts[1].MPI_ERROR = -12345;
        rc = MPI_Waitall(2, reqs, sts);
        CHECK_CLASS(rc, MPI_ERR_IN_STATUS);
        CHECK(check_class(sts[0].MPI_ERROR) == MPI_ERR_TRUNCATE,
              "Waitall truncated status MPI_ERROR = %d", sts[0].MPI_ERROR);
        /* the standard allows MPI_ERR_PENDING for a request that had neither
         * failed nor completed when Waitall returned (MPICH does this); such a
         * request stays active */
        CHECK(sts[1].MPI_ERROR == MPI_SUCCESS || sts[1].MPI_ERROR == MPI_ERR_PENDING,
              "Waitall good status MPI_ERROR = %d", sts[1].MPI_ERROR);
        if (sts[1].MPI_ERROR == MPI_ERR_PENDING) {
            CHECK(reqs[1] != MPI_REQUEST_NULL, "MPI_ERR_PENDING request was freed");
            MPI_CHECK(MPI_Wait(&reqs[1], &sts[1]));
        }
        CHECK(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
              "Waitall left completed requests active");
        CHECK(sts[1].MPI_SOURCE == 0 && sts[1].MPI_TAG == TAG_GOOD, "good status %d/%d",
              sts[1].MPI_SOURCE, sts[1].MPI_TAG);
        CHECK(ibuf[4] == 0 && ibuf[5] == 1, "good message data %d %d", ibuf[4], ibuf[5]);
        {
            int n = -1;
            MPI_CHECK(MPI_Get_count(&sts[1], MPI_INT, &n));
            CHECK(n == 2, "good message count %d", n);
        }
    }

    /* MPI_Sendrecv whose receive half is bad (count -1, source == size,
     * negative tag, null buffer): the error class, and nothing sent (the
     * right neighbour finds no message of that tag once a later message
     * from us, on the same ordered channel, has arrived) */
    {
        int k, got = 1, bad_count[4] = {-1, 1, 1, 2}, bad_src[4] = {left, size, left, left};
        int bad_tag[4] = {TAG_SR, TAG_SR, -5, TAG_SR}, want[4] = {MPI_ERR_COUNT, MPI_ERR_RANK,
                                                                    MPI_ERR_TAG, MPI_ERR_BUFFER};
        for (k = 0; k < 4; k++) {
            rc = MPI_Sendrecv(obuf, 2, MPI_INT, right, TAG_SR, k == 3 ? NULL : ibuf, bad_count[k],
                              MPI_INT, bad_src[k], bad_tag[k], MPI_COMM_WORLD, &st);
            CHECK_CLASS(rc, want[k]);
        }
        MPI_CHECK(MPI_Send(obuf, 1, MPI_INT, right, TAG_SR_FENCE, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(ibuf, 1, MPI_INT, left, TAG_SR_FENCE, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Iprobe(left, TAG_SR, MPI_COMM_WORLD, &got, &st));
        CHECK(!got, "a Sendrecv with a bad receive sent its message");
    }

    /* communication still works afterwards */
    MPI_CHECK(MPI_Sendrecv(obuf, 8, MPI_INT, right, TAG_FINAL, ibuf, 8, MPI_INT, left, TAG_FINAL,
                           MPI_COMM_WORLD, &st));
    for (i = 0; i < 8; i++)
        CHECK(ibuf[i] == left * 100 + i, "ring data [%d] = %d", i, ibuf[i]);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "errors");
    return 0;
}
